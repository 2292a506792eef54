//! Tables that live in a BigQuery-compatible REST warehouse (`source_type = "warehouse"`).
//!
//! Materialized tables are read from their local parquet copy. Remote reads need the
//! warehouse client (configuration, REST calls, push-down), which arrives with the warehouse
//! issue; until a project is configured every remote read answers `not_configured`, which is
//! also what a configured instance answers when its configuration is missing.

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::json;
use svc_driver_parquet::ParquetFiles;
use svc_plugin_api::{
    Caller, DriverError, ErrorKind, RecordBatch, Result, ScanEstimate, ScanSpec, SourceDriver,
    TableProvider, TableRef, TableSchema,
};

/// The `warehouse` source driver.
#[derive(Debug, Clone)]
pub struct WarehouseDriver {
    materialized: ParquetFiles,
}

impl WarehouseDriver {
    /// The driver over a data directory (for materialized copies).
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        Self {
            materialized: ParquetFiles::new(data_dir),
        }
    }

    fn not_configured() -> DriverError {
        DriverError::new(ErrorKind::NotConfigured, "The warehouse is not configured on this instance").with_details(
            json!({ "hint": "set `project` under [data_source.warehouse] in svc.toml, or SVC_WAREHOUSE_PROJECT" }),
        )
    }
}

fn is_materialized(table: &TableRef) -> bool {
    table.query_mode == "materialized"
}

#[async_trait::async_trait]
impl SourceDriver for WarehouseDriver {
    fn source_type(&self) -> &'static str {
        "warehouse"
    }

    async fn schema(&self, table: &TableRef, _caller: &Caller) -> Result<TableSchema> {
        if is_materialized(table) {
            return self.materialized.schema(table).await;
        }
        Err(Self::not_configured())
    }

    async fn sample(
        &self,
        table: &TableRef,
        n: usize,
        _caller: &Caller,
    ) -> Result<Vec<RecordBatch>> {
        if is_materialized(table) {
            return self.materialized.sample(table, n).await;
        }
        Err(Self::not_configured())
    }

    async fn table_provider(
        &self,
        table: &TableRef,
        _caller: &Caller,
    ) -> Result<Arc<dyn TableProvider>> {
        if is_materialized(table) {
            return self.materialized.table_provider(table).await;
        }
        Err(Self::not_configured())
    }

    async fn estimate(&self, table: &TableRef, scan: &ScanSpec) -> Result<ScanEstimate> {
        if is_materialized(table) {
            return self.materialized.estimate(table, scan).await;
        }
        Err(Self::not_configured())
    }

    fn local_file(&self, table: &TableRef) -> Option<PathBuf> {
        is_materialized(table)
            .then(|| self.materialized.path(table).ok())
            .flatten()
    }
}
