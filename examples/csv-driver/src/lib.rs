//! An example out-of-tree driver: tables backed by CSV files, every column read as text.
//!
//! A table's data is `<data-dir>/extracts/csv/data/<table_id>.csv` with a header line. The
//! parsing is deliberately minimal (no quoting) — the point is the shape of a third-party
//! driver against the plugin-api contract.
//!
//! Built as a `cdylib`, the library is a dynamic driver: put `libsvc_example_csv_driver.so`
//! in the directory named by `svc-server serve --driver-dir` and register tables with
//! `source_type = "csv"`. The last line of this file is all it takes to export it.

use std::path::PathBuf;
use std::sync::Arc;

use svc_plugin_api::arrow::array::{ArrayRef, StringArray};
use svc_plugin_api::arrow::datatypes::{DataType, Field, Schema};
use svc_plugin_api::datafusion::datasource::MemTable;
use svc_plugin_api::ffi::DriverConfig;
use svc_plugin_api::{
    Caller, DriverError, RecordBatch, Result, SourceDriver, TableMetadata, TableProvider, TableRef,
    TableSchema,
};

/// Serves `source_type = "csv"` tables from CSV files.
#[derive(Debug, Clone)]
pub struct CsvDriver {
    data_dir: PathBuf,
}

impl CsvDriver {
    /// The driver over a data directory.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        Self {
            data_dir: data_dir.into(),
        }
    }

    /// The driver for a server's configuration; creates its data directory, and fails when
    /// that is impossible (so a misconfigured server refuses the driver at start).
    pub fn open(config: &DriverConfig) -> Result<Self> {
        let dir = config.data_dir.join("extracts/csv/data");
        std::fs::create_dir_all(&dir)
            .map_err(|e| DriverError::internal(format!("cannot create {}: {e}", dir.display())))?;
        Ok(Self::new(&config.data_dir))
    }

    /// The table's file; ids with path characters never reach the filesystem.
    fn path(&self, table: &TableRef) -> Result<PathBuf> {
        if table.id.contains(['/', '\\', '\0']) || table.id.starts_with('.') {
            return Err(DriverError::not_found(format!(
                "Table '{}' has no CSV file",
                table.id
            )));
        }
        Ok(self
            .data_dir
            .join("extracts/csv/data")
            .join(format!("{}.csv", table.id)))
    }

    fn read(&self, table: &TableRef, limit: Option<usize>) -> Result<RecordBatch> {
        let path = self.path(table)?;
        let text = std::fs::read_to_string(&path).map_err(|e| {
            DriverError::not_found(format!(
                "Table '{}': cannot read {}: {e}",
                table.id,
                path.display()
            ))
        })?;
        let mut lines = text.lines();
        let header: Vec<&str> = lines
            .next()
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .collect();
        let rows: Vec<Vec<&str>> = lines
            .filter(|l| !l.is_empty())
            .take(limit.unwrap_or(usize::MAX))
            .map(|l| l.split(',').collect())
            .collect();
        let schema = Arc::new(Schema::new(
            header
                .iter()
                .map(|h| Field::new(*h, DataType::Utf8, true))
                .collect::<Vec<_>>(),
        ));
        let columns: Vec<ArrayRef> = (0..header.len())
            .map(|i| {
                Arc::new(StringArray::from_iter(
                    rows.iter().map(|r| r.get(i).map(|v| v.trim())),
                )) as ArrayRef
            })
            .collect();
        RecordBatch::try_new(schema, columns).map_err(|e| DriverError::internal(e.to_string()))
    }
}

#[async_trait::async_trait]
impl SourceDriver for CsvDriver {
    fn source_type(&self) -> &'static str {
        "csv"
    }

    async fn schema(&self, table: &TableRef, _caller: &Caller) -> Result<TableSchema> {
        let batch = self.read(table, Some(0))?;
        Ok(TableSchema::from_arrow(&batch.schema()))
    }

    async fn sample(
        &self,
        table: &TableRef,
        n: usize,
        _caller: &Caller,
    ) -> Result<Vec<RecordBatch>> {
        Ok(vec![self.read(table, Some(n))?])
    }

    async fn table_provider(
        &self,
        table: &TableRef,
        _caller: &Caller,
    ) -> Result<Arc<dyn TableProvider>> {
        let batch = self.read(table, None)?;
        let provider = MemTable::try_new(batch.schema(), vec![vec![batch]])
            .map_err(|e| DriverError::internal(e.to_string()))?;
        Ok(Arc::new(provider))
    }

    /// Row count, size and columns, for the catalog of tables registered as `remote`.
    async fn refresh_metadata(&self, table: &TableRef) -> Result<TableMetadata> {
        let batch = self.read(table, None)?;
        let size = std::fs::metadata(self.path(table)?).map(|m| m.len()).ok();
        Ok(TableMetadata {
            entity_type: Some("BASE TABLE".into()),
            rows: i64::try_from(batch.num_rows()).ok(),
            size_bytes: size.and_then(|s| i64::try_from(s).ok()),
            partition_by: None,
            clustered_by: Vec::new(),
            known_columns: batch
                .schema()
                .fields()
                .iter()
                .map(|f| f.name().clone())
                .collect(),
            column_types: batch
                .schema()
                .fields()
                .iter()
                .map(|f| f.data_type().to_string())
                .collect(),
        })
    }
}

svc_plugin_api::export_driver!(CsvDriver::open);
