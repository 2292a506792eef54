//! Issue-tracker data (`source_type = "ticketing"`): webhooks received durably and exactly
//! once, folded into parquet tables users query like any other.
//!
//! Each connection (`[data_source.ticketing.<name>]`, see [`config`]) keeps four tables,
//! registered automatically as `local` tables: `<name>_issues` (current state),
//! `<name>_issue_changelog` (one row per changed field), `<name>_comments` (current state)
//! and `<name>_events` (every delivery, raw). A delivery is verified
//! ([`signature`]), read ([`payload`]), deduplicated by its delivery id and appended to the
//! connection's log ([`log`]), which is fsynced before the sender is acknowledged. The
//! compactor ([`compact`]) folds the log into the tables ([`fold`]: the same state whatever
//! the arrival order) every few seconds — the host's job calls [`TicketingDriver::compact`]
//! — and `sync` runs it on demand. [`backfill`] loads history over the tracker's REST search
//! through the same log.
//!
//! Owns: the connections' settings, their logs, checkpoints and tables. Must never import
//! the host (it knows no HTTP: the host's receiver hands it a [`Delivery`]). Principal type:
//! [`TicketingDriver`].

pub mod backfill;
pub mod compact;
pub mod config;
mod fold;
pub mod log;
mod payload;
mod rawjson;
pub mod signature;
pub mod tables;
mod tracker;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use svc_driver_parquet::{ParquetDriver, ParquetFiles};
use svc_plugin_api::{
    Caller, DriverError, ErrorKind, RecordBatch, Result, ScanEstimate, ScanSpec, SeedMode,
    SeededTable, SourceDriver, SyncMode, SyncProgress, SyncReport, TableProvider, TableRef,
    TableSchema,
};

pub use backfill::Backfilled;
pub use compact::Compacted;
pub use config::TicketingConfig;
pub use tables::TableKind;
pub use tracker::{Delivery, Receipt, Refused, Status, Tracker};

/// The source type this driver serves.
pub const SOURCE_TYPE: &str = "ticketing";

/// The `ticketing` source driver.
#[derive(Debug, Clone)]
pub struct TicketingDriver {
    reader: ParquetDriver,
    /// Connections by name: open, or why they could not be opened.
    trackers: Arc<BTreeMap<String, std::result::Result<Arc<Tracker>, String>>>,
}

/// A table's id: `<connection>_<kind>`.
pub fn table_id(connection: &str, kind: TableKind) -> String {
    format!("{connection}_{}", kind.suffix())
}

impl TicketingDriver {
    /// The driver over a data directory; each connection's files are opened now, and a
    /// connection that cannot be opened is logged and refuses its deliveries with the reason.
    pub fn new(data_dir: impl Into<PathBuf>, config: TicketingConfig) -> Self {
        let data_dir = data_dir.into();
        let files = ParquetFiles::new(&data_dir);
        let trackers = config
            .connections
            .into_iter()
            .map(|(name, connection)| {
                let opened = open(&data_dir, &files, &name, connection).map_err(|e| {
                    tracing::error!(connection = %name, "ticketing connection unavailable: {}", e.message);
                    e.message
                });
                (name, opened.map(Arc::new))
            })
            .collect();
        Self {
            reader: ParquetDriver::for_source(SOURCE_TYPE, data_dir),
            trackers: Arc::new(trackers),
        }
    }

    /// The configured connections' names.
    pub fn connections(&self) -> Vec<&str> {
        self.trackers.keys().map(String::as_str).collect()
    }

    /// An open connection.
    pub fn tracker(&self, name: &str) -> Result<&Arc<Tracker>> {
        match self.trackers.get(name) {
            Some(Ok(t)) => Ok(t),
            Some(Err(reason)) => Err(DriverError::new(
                ErrorKind::NotConfigured,
                format!("ticketing connection '{name}' is unavailable: {reason}"),
            )),
            None => Err(DriverError::not_found(format!(
                "no ticketing connection '{name}'"
            ))),
        }
    }

    /// Receives one webhook delivery for connection `name`.
    pub async fn receive(
        &self,
        name: &str,
        delivery: Delivery,
    ) -> std::result::Result<Receipt, Refused> {
        match self.trackers.get(name) {
            Some(Ok(t)) => t.receive(delivery).await,
            Some(Err(reason)) => Err(Refused::Unavailable(reason.clone())),
            None => {
                // The same work as a wrong signature, so timing does not tell names apart.
                let _ = signature::verify(b"no such connection", &delivery.body, None);
                Err(Refused::UnknownConnection)
            }
        }
    }

    /// Folds connection `name`'s received events into its tables now; returns the ids of
    /// the tables rewritten.
    pub async fn compact(&self, name: &str) -> Result<(Compacted, Vec<String>)> {
        let done = self.tracker(name)?.compact().await?;
        let ids = done.tables.iter().map(|k| table_id(name, *k)).collect();
        Ok((done, ids))
    }

    /// Loads or repairs history over the tracker's REST search, then folds it in.
    pub async fn backfill(&self, name: &str) -> Result<(Backfilled, Vec<String>)> {
        let tracker = self.tracker(name)?;
        let done = backfill::run(tracker).await?;
        let (_, ids) = self.compact(name).await?;
        Ok((done, ids))
    }
}

fn open(
    data_dir: &Path,
    files: &ParquetFiles,
    name: &str,
    c: config::Connection,
) -> Result<Tracker> {
    let dir = data_dir.join("ticketing").join(name);
    let table = |kind: TableKind| -> Result<(TableKind, PathBuf)> {
        let t = TableRef {
            id: table_id(name, kind),
            source_type: SOURCE_TYPE.into(),
            ..TableRef::default()
        };
        Ok((kind, files.path(&t)?))
    };
    let [a, b, c2, d] = TableKind::ALL;
    let paths = compact::Paths {
        log: dir.join("log"),
        checkpoint: dir.join("checkpoint.json"),
        tables: [table(a)?, table(b)?, table(c2)?, table(d)?],
    };
    Tracker::open(name, c, &dir, paths)
}

#[async_trait::async_trait]
impl SourceDriver for TicketingDriver {
    fn source_type(&self) -> &'static str {
        SOURCE_TYPE
    }

    fn seeded_tables(&self) -> Vec<SeededTable> {
        self.trackers
            .keys()
            .flat_map(|name| {
                TableKind::ALL.into_iter().map(move |kind| SeededTable {
                    id: table_id(name, kind),
                    name: table_id(name, kind),
                    bucket: name.clone(),
                    source_table: kind.suffix().to_owned(),
                    mode: SeedMode::Local,
                    description: Some(kind.description().to_owned()),
                })
            })
            .collect()
    }

    async fn schema(&self, table: &TableRef, caller: &Caller) -> Result<TableSchema> {
        self.reader.schema(table, caller).await
    }

    async fn sample(
        &self,
        table: &TableRef,
        n: usize,
        caller: &Caller,
    ) -> Result<Vec<RecordBatch>> {
        self.reader.sample(table, n, caller).await
    }

    async fn table_provider(
        &self,
        table: &TableRef,
        caller: &Caller,
    ) -> Result<Arc<dyn TableProvider>> {
        self.reader.table_provider(table, caller).await
    }

    async fn estimate(&self, table: &TableRef, scan: &ScanSpec) -> Result<ScanEstimate> {
        self.reader.estimate(table, scan).await
    }

    /// Compacts the table's connection (its bucket) now.
    async fn sync(
        &self,
        table: &TableRef,
        _mode: SyncMode,
        _progress: &SyncProgress,
    ) -> Result<SyncReport> {
        let name = table.bucket.as_deref().unwrap_or("");
        let (done, _) = self.compact(name).await?;
        let kind = TableKind::ALL
            .into_iter()
            .find(|k| table.id == table_id(name, *k));
        let rows = kind
            .and_then(|k| done.rows.iter().find(|(r, _)| *r == k))
            .map(|(_, n)| *n);
        let path = self.reader.local_file(table);
        let bytes = path
            .as_ref()
            .and_then(|p| std::fs::metadata(p).ok())
            .map_or(0, |m| m.len());
        Ok(SyncReport {
            rows: rows.unwrap_or(0),
            bytes,
            hash: String::new(),
            notes: vec![format!("{} events folded in", done.events)],
        })
    }

    fn local_file(&self, table: &TableRef) -> Option<PathBuf> {
        self.reader.local_file(table)
    }
}

/// A directory removed when dropped, for unit tests.
#[cfg(test)]
pub(crate) struct TestDir(pub PathBuf);

#[cfg(test)]
impl TestDir {
    pub(crate) fn new() -> Self {
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "svc-ticketing-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

#[cfg(test)]
impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests;
