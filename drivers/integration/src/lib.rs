//! Tables extracted from operational SQL databases into parquet (`source_type = "integration"`).
//!
//! A table names its connection (`bucket`, one of `[data_source.integration.<name>]`, see
//! [`config`]) and its source (`source_table` as `schema.table`, or one SELECT as
//! `source_query`), optionally a `primary_key` and a `cursor_column` for incremental syncs.
//! `sync` streams the source's rows into Arrow batches and writes them through the shared
//! atomic parquet writer, so the previous copy stays readable until the new one is complete
//! ([`extract`]). Reads (schema, sample, queries, scans) go through the shared parquet
//! reader (`extracts/integration/data/<table_id>.parquet`), like `local` tables.
//!
//! Owns: the connections' settings, the source dialects ([`postgres`], [`mysql`], [`sqlite`])
//! behind one [`session::Session`], the Arrow form of source types ([`columns`]). Must never
//! import the host: it is a driver behind [`SourceDriver`]. Principal type:
//! [`IntegrationDriver`].
//!
//! Sources: PostgreSQL over binary `COPY`, MySQL and MariaDB over the text protocol, SQLite
//! database files.

mod columns;
pub mod config;
mod extract;
mod merge;
mod mysql;
mod postgres;
mod session;
mod source;
mod sqlite;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use svc_driver_parquet::{ParquetDriver, ParquetFiles};
use svc_plugin_api::{
    Caller, DriverError, ErrorKind, RecordBatch, Result, ScanEstimate, ScanSpec, SourceDriver,
    SourceTableInfo, SyncMode, SyncProgress, SyncReport, TableProvider, TableRef, TableSchema,
};
use tokio::sync::Semaphore;

use config::Connection;
use session::Session;

/// Rows per Arrow batch handed from the source reader to the writer.
const BATCH_ROWS: usize = 65_536;

pub use config::IntegrationConfig;

/// The `integration` source driver.
#[derive(Debug, Clone)]
pub struct IntegrationDriver {
    reader: ParquetDriver,
    files: ParquetFiles,
    config: Arc<IntegrationConfig>,
    /// Per connection: the syncs it may run at once (`max_connections`).
    slots: Arc<BTreeMap<String, Arc<Semaphore>>>,
    /// Hashes of the copies already read or written, for syncs that change nothing.
    hashes: Arc<extract::KnownHashes>,
}

impl IntegrationDriver {
    /// The driver over a data directory and its connections.
    pub fn new(data_dir: impl Into<PathBuf>, config: IntegrationConfig) -> Self {
        let data_dir = data_dir.into();
        let slots = config
            .connections
            .iter()
            .map(|(name, c)| {
                (
                    name.clone(),
                    Arc::new(Semaphore::new(c.max_connections as usize)),
                )
            })
            .collect();
        Self {
            reader: ParquetDriver::for_source("integration", data_dir.clone()),
            files: ParquetFiles::new(data_dir),
            config: Arc::new(config),
            slots: Arc::new(slots),
            hashes: Arc::default(),
        }
    }
}

impl IntegrationDriver {
    /// The named connection, or an error naming the configured ones.
    fn connection(&self, name: &str, table: Option<&str>) -> Result<&Connection> {
        self.config.connections.get(name).ok_or_else(|| {
            let known: Vec<&str> = self.config.connections.keys().map(String::as_str).collect();
            let who = match table {
                Some(id) => format!("Table '{id}' names connection '{name}' (its bucket), which"),
                None => format!("Connection '{name}'"),
            };
            DriverError::new(
                ErrorKind::NotConfigured,
                format!(
                    "{who} is not configured; configured: {}. Add [data_source.integration.{name}] \
                     with a url.",
                    if known.is_empty() { "none".to_owned() } else { known.join(", ") }
                ),
            )
        })
    }
}

#[async_trait::async_trait]
impl SourceDriver for IntegrationDriver {
    fn source_type(&self) -> &'static str {
        "integration"
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

    async fn source_tables(&self, bucket: &str) -> Result<Vec<SourceTableInfo>> {
        let connection = self.connection(bucket, None)?;
        let mut conn = Session::open(bucket, connection).await?;
        let tables = conn.discover(bucket).await;
        conn.close().await;
        tables
    }

    async fn check_registration(&self, table: &TableRef) -> Result<()> {
        let source = source::Source::parse(table)?;
        let keys = extract::Keys::parse(table)?;
        let name = table.bucket.as_deref().unwrap_or("");
        let connection = self.connection(name, Some(&table.id))?;
        // Unreachable or refusing: the table is registered and reports it when it syncs.
        let mut conn = match Session::open(name, connection).await {
            Ok(conn) => conn,
            Err(_) => return Ok(()),
        };
        let checked = match conn.columns(name, &source).await {
            Ok(columns) => keys.check(table, &columns, conn.dialect()),
            Err(e) if matches!(e.kind, ErrorKind::NotFound | ErrorKind::BadRequest) => Err(e),
            Err(_) => Ok(()),
        };
        conn.close().await;
        checked
    }

    async fn sync(
        &self,
        table: &TableRef,
        mode: SyncMode,
        progress: &SyncProgress,
    ) -> Result<SyncReport> {
        let name = table.bucket.as_deref().unwrap_or("");
        let connection = self.connection(name, Some(&table.id))?;
        let _slot = self.slots[name]
            .acquire()
            .await
            .map_err(|_| DriverError::internal("the connection's sync slots are closed"))?;
        let target = extract::Target {
            path: self.files.path(table)?,
            row_group_rows: usize::try_from(connection.row_group_rows).unwrap_or(usize::MAX),
            batch_rows: BATCH_ROWS,
            hashes: self.hashes.clone(),
        };
        extract::sync(name, connection, table, &target, mode, progress).await
    }

    fn local_file(&self, table: &TableRef) -> Option<PathBuf> {
        self.reader.local_file(table)
    }
}
