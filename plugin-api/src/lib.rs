//! The contract between the svc host and the drivers that read each kind of source.
//!
//! The host dispatches every data request on a table's `source_type` to exactly one
//! [`SourceDriver`]. Drivers never reach into the host, and the host never special-cases a
//! source kind outside its driver (ARCHITECTURE §3). Rows cross the boundary as Arrow
//! [`RecordBatch`]es; the query path reads through DataFusion [`TableProvider`]s.
//!
//! Access control (grants) stays in the host. A driver only sees the [`Caller`] so that it
//! can apply row filters of its own (the internal tables do).
//!
//! DataFusion and Arrow are re-exported so that drivers build against the same versions as
//! the host.

mod error;
pub mod ffi;
mod types;

use std::path::PathBuf;
use std::sync::Arc;

pub use datafusion;
pub use datafusion::arrow;
pub use datafusion::arrow::record_batch::RecordBatch;
pub use datafusion::catalog::TableProvider;
use datafusion::optimizer::OptimizerRule;
pub use error::{DriverError, ErrorKind, Result};
pub use types::{
    type_name, Caller, ColumnInfo, ScanEstimate, ScanSpec, SeedMode, SeededTable, SourceTableInfo,
    SyncMode, SyncProgress, SyncReport, TableMetadata, TableRef, TableSchema, DESCRIPTION_KEY,
};

/// A driver's own settings: its `[data_source.<source_type>]` table of the instance config
/// file, then an environment override `SVC_<SOURCE_TYPE>_<KEY>` for every key in
/// [`KEYS`](Self::KEYS), which wins, then [`check`](Self::check). The host applies this one
/// path to every driver that has settings; a mistake stops the start and names the key.
pub trait DriverSettings: serde::de::DeserializeOwned + Default {
    /// The keys, as written in the file (and, upper-cased, after `SVC_<SOURCE_TYPE>_`).
    const KEYS: &'static [&'static str];

    /// Sets one key from text (an environment override); the error names the key.
    fn set(&mut self, key: &str, value: &str) -> std::result::Result<(), String>;

    /// Sets one override whose key is not fixed — a driver with named sub-tables
    /// (`[data_source.integration.<name>]`) — from `SVC_<SOURCE_TYPE>_<REST>`, for every such
    /// variable whose `REST` is none of [`KEYS`](Self::KEYS). Returns whether it was one of
    /// this driver's; the default knows none.
    fn set_named(&mut self, _rest: &str, _value: &str) -> std::result::Result<bool, String> {
        Ok(false)
    }

    /// Refuses settings that cannot work (an unreadable key file), so the start fails rather
    /// than every later call.
    fn check(&self) -> std::result::Result<(), String> {
        Ok(())
    }
}

/// Splits the `<NAME>_<KEY>` of an override for a named sub-table (what follows
/// `SVC_<SOURCE_TYPE>_` in the variable, for `[data_source.<source_type>.<name>]`) into the
/// lower-cased name and the one of `keys` it ends with; None when it ends with none of them.
pub fn split_named_key<'k>(rest: &str, keys: &[&'k str]) -> Option<(String, &'k str)> {
    let rest = rest.to_ascii_lowercase();
    keys.iter().find_map(|key| {
        let name = rest.strip_suffix(key)?.strip_suffix('_')?;
        (!name.is_empty()).then(|| (name.to_owned(), *key))
    })
}

/// A secret named in a driver's settings by a variable (`<what>_env`) or a file
/// (`<what>_file`, its first line), read when it is used so it is never kept in the settings;
/// None when neither is set. Errors name the key, never the secret.
pub fn read_secret(
    what: &str,
    env: Option<&str>,
    file: Option<&std::path::Path>,
) -> std::result::Result<Option<String>, String> {
    if let Some(var) = env {
        return std::env::var(var)
            .map(Some)
            .map_err(|_| format!("{what}_env names {var}, which is not set"));
    }
    if let Some(path) = file {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("{what}_file {}: {e}", path.display()))?;
        return Ok(Some(text.lines().next().unwrap_or("").to_owned()));
    }
    Ok(None)
}

/// Version of this contract. Dynamically loaded drivers state the version they were built
/// against; the host refuses a library whose version differs.
pub const PLUGIN_API_VERSION: u32 = 1;

/// One source kind (`local`, `warehouse`, `internal`, …): the one contract between the host
/// and a kind of source.
///
/// # What an implementor provides
///
/// Four methods are required:
/// - [`source_type`](Self::source_type): the registry's `source_type` this driver serves;
/// - [`schema`](Self::schema): columns and partitioning hints;
/// - [`sample`](Self::sample): the first rows;
/// - [`table_provider`](Self::table_provider): a DataFusion provider, the one way queries and
///   scans read data (projection, filter and limit push-down are the driver's business).
///
/// # When to override the others
///
/// - [`refresh_metadata`](Self::refresh_metadata) and [`estimate`](Self::estimate): a remote
///   source that can tell sizes and row counts without reading (the remote size guard and
///   the persistent metadata cache use them).
/// - [`push_down`](Self::push_down): a source that can run a whole query itself.
/// - [`sync`](Self::sync): a source copied onto this server (materialized or extracted).
/// - [`local_file`](Self::local_file) and [`size_on_disk`](Self::size_on_disk): a source whose
///   data lives in a file on this server.
/// - [`seeded_tables`](Self::seeded_tables) and [`registrable`](Self::registrable): a driver
///   whose tables the host registers itself at start (and admins may not register).
/// - [`sql_flavor`](Self::sql_flavor): a source whose users write its own SQL dialect.
///
/// `examples/csv-driver` is a complete out-of-tree driver (four required methods, loaded at
/// run time through [`ffi`]).
///
/// # Errors and the status a client sees
///
/// Return a [`DriverError`]; the host maps its [`ErrorKind`] to the HTTP status once:
///
/// | kind | status |
/// | --- | --- |
/// | `NotFound` | 404 |
/// | `UnsafeIdentifier`, `UnsafeIdentity`, `BadRequest`, `RemoteScanTooLarge`, `ResponseTooLarge` | 400 |
/// | `CrossProjectForbidden` | 403 |
/// | `Upstream`, `AuthFailed`, `SourceForbidden` | 502 |
/// | `Timeout` | 504 |
/// | `Unsupported` | 501 |
/// | `NotConfigured`, `Corrupt`, `Internal` | 500 (also logged) |
///
/// The envelope's `error` is [`DriverError::code`] when set, else the kind's name; its
/// `details` are the error's details.
#[async_trait::async_trait]
pub trait SourceDriver: Send + Sync {
    /// The `source_type` value of registry rows this driver serves.
    fn source_type(&self) -> &'static str;

    /// Whether admins may register tables of this kind through the API.
    ///
    /// `internal` rows are seeded by the host and never registered by hand.
    fn registrable(&self) -> bool {
        true
    }

    /// The tables the host registers for this driver at every start ([`SeedMode`]): the
    /// internal driver's `svc_*` tables, the ticketing driver's per-connection tables. Most
    /// drivers declare none.
    fn seeded_tables(&self) -> Vec<SeededTable> {
        Vec::new()
    }

    /// The SQL dialect users write for this table (`datafusion` unless the source pushes
    /// whole queries down in its own dialect).
    fn sql_flavor(&self, _table: &TableRef) -> &'static str {
        "datafusion"
    }

    /// Columns and partitioning hints.
    async fn schema(&self, table: &TableRef, caller: &Caller) -> Result<TableSchema>;

    /// The first `n` rows (the host clamps `n` to 1..=100).
    async fn sample(&self, table: &TableRef, n: usize, caller: &Caller)
        -> Result<Vec<RecordBatch>>;

    /// The one way the query and scan paths read data; projection, filter and limit
    /// push-down are the driver's business.
    async fn table_provider(
        &self,
        table: &TableRef,
        caller: &Caller,
    ) -> Result<Arc<dyn TableProvider>>;

    /// Logical optimizer rules the host adds (after DataFusion's own) when a query reads this
    /// driver's tables: how a driver answers more of a plan than one scan, e.g. an aggregate
    /// its store computes. A rule must leave plans over other providers untouched.
    fn optimizer_rules(&self) -> Vec<Arc<dyn OptimizerRule + Send + Sync>> {
        Vec::new()
    }

    /// Metadata for the persistent metadata cache (remote sources).
    async fn refresh_metadata(&self, table: &TableRef) -> Result<TableMetadata> {
        Err(DriverError::unsupported(format!(
            "source type '{}' keeps no remote metadata for '{}'",
            self.source_type(),
            table.id
        )))
    }

    /// What `scan` would read, without reading it (parquet statistics, a warehouse dry
    /// run). The host enforces `guard_bytes` and the user quotas on this estimate.
    async fn estimate(&self, table: &TableRef, _scan: &ScanSpec) -> Result<ScanEstimate> {
        Err(DriverError::unsupported(format!(
            "source type '{}' cannot estimate scans of '{}'",
            self.source_type(),
            table.id
        )))
    }

    /// Runs a whole query at the source. `plan` reads only `tables`, all of this driver, each
    /// registered under its id. Answer a provider whose rows are the query's result, or
    /// `None` when this query cannot be pushed (the host then runs the plan itself over the
    /// tables' providers). Only in-process drivers are asked: a plan does not cross FFI.
    async fn push_down(
        &self,
        _plan: &datafusion::logical_expr::LogicalPlan,
        _tables: &[TableRef],
    ) -> Result<Option<Arc<dyn TableProvider>>> {
        Ok(None)
    }

    /// The tables a source offers under one bucket (a connection of the integration
    /// source), for the admin's discovery view.
    async fn source_tables(&self, bucket: &str) -> Result<Vec<SourceTableInfo>> {
        Err(DriverError::unsupported(format!(
            "source type '{}' cannot list the tables of '{bucket}'",
            self.source_type()
        )))
    }

    /// Checks what a registration names at the source (that its table, query and columns
    /// exist and fit), before the row is stored. A source that cannot be reached is not a
    /// reason to refuse: its table reports the error when it syncs.
    async fn check_registration(&self, _table: &TableRef) -> Result<()> {
        Ok(())
    }

    /// Brings the table's copy on this server up to date (materialized warehouse tables,
    /// extracted sources). The new data replaces the old atomically: a failed or interrupted
    /// sync leaves the last good copy in place. Count rows into `progress` as they arrive.
    async fn sync(
        &self,
        table: &TableRef,
        _mode: SyncMode,
        _progress: &SyncProgress,
    ) -> Result<SyncReport> {
        Err(DriverError::unsupported(format!(
            "source type '{}' has nothing to sync for '{}' (query_mode {})",
            self.source_type(),
            table.id,
            table.query_mode
        )))
    }

    /// The file holding the table's data on this server, when it lives on disk (parquet
    /// downloads and `rough_size_hint` use it).
    fn local_file(&self, _table: &TableRef) -> Option<PathBuf> {
        None
    }

    /// Bytes the table occupies on this server's disk, when it lives on disk.
    fn size_on_disk(&self, table: &TableRef) -> Option<u64> {
        self.local_file(table)
            .and_then(|p| std::fs::metadata(p).ok())
            .map(|m| m.len())
    }
}
