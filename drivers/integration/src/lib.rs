//! Tables extracted from operational SQL databases into parquet (`source_type = "integration"`).
//!
//! A table names its connection (`bucket`, one of `[data_source.integration.<name>]`, see
//! [`config`]) and its source (`source_table`, `schema.table`). `sync` streams the source's
//! rows into Arrow batches and writes them through the shared atomic parquet writer, so the
//! previous copy stays readable until the new one is complete ([`postgres`]). Reads (schema,
//! sample, queries, scans) go through the shared parquet reader
//! (`extracts/integration/data/<table_id>.parquet`), like `local` tables.
//!
//! Built: PostgreSQL sources, full refresh, exact types for the common kinds (others as text).
//! Not yet built: MySQL/MariaDB and SQLite sources, `source_query`, incremental sync by a
//! cursor column, the source discovery endpoint, binary `COPY` for speed.

pub mod config;
mod postgres;
mod source;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use svc_driver_parquet::{ParquetDriver, ParquetFiles};
use svc_plugin_api::{
    Caller, DriverError, ErrorKind, RecordBatch, Result, ScanEstimate, ScanSpec, SourceDriver,
    SyncReport, TableProvider, TableRef, TableSchema,
};
use tokio::sync::Semaphore;

pub use config::IntegrationConfig;

/// The `integration` source driver.
#[derive(Debug, Clone)]
pub struct IntegrationDriver {
    reader: ParquetDriver,
    files: ParquetFiles,
    config: Arc<IntegrationConfig>,
    /// Per connection: the syncs it may run at once (`max_connections`).
    slots: Arc<BTreeMap<String, Arc<Semaphore>>>,
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
        }
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

    async fn sync(&self, table: &TableRef) -> Result<SyncReport> {
        let source = source::SourceTable::parse(table)?;
        let name = table.bucket.as_deref().unwrap_or("");
        let connection =
            self.config.connections.get(name).ok_or_else(|| {
                let known: Vec<&str> = self.config.connections.keys().map(String::as_str).collect();
                DriverError::new(
                    ErrorKind::NotConfigured,
                    format!(
                    "Table '{}' names connection '{name}' (its bucket), which is not configured; \
                     configured: {}. Add [data_source.integration.{name}] with a url.",
                    table.id,
                    if known.is_empty() { "none".to_owned() } else { known.join(", ") }
                ),
                )
            })?;
        let _slot = self.slots[name]
            .acquire()
            .await
            .map_err(|_| DriverError::internal("the connection's sync slots are closed"))?;
        let target = self.files.path(table)?;
        postgres::extract(name, connection, &source, &target).await
    }

    fn local_file(&self, table: &TableRef) -> Option<PathBuf> {
        self.reader.local_file(table)
    }
}
