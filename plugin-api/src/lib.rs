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
pub use error::{DriverError, ErrorKind, Result};
pub use types::{
    type_name, Caller, ColumnInfo, ScanEstimate, ScanSpec, SyncReport, TableMetadata, TableRef,
    TableSchema,
};

/// Version of this contract. Dynamically loaded drivers state the version they were built
/// against; the host refuses a library whose version differs.
pub const PLUGIN_API_VERSION: u32 = 1;

/// One source kind (`local`, `warehouse`, `internal`, …).
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

    /// Brings the table's copy on this server up to date (materialized warehouse tables,
    /// extracted sources). The new data replaces the old atomically: a failed or interrupted
    /// sync leaves the last good copy in place.
    async fn sync(&self, table: &TableRef) -> Result<SyncReport> {
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
