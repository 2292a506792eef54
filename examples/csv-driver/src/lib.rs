//! An example out-of-tree driver: tables backed by CSV files, every column read as text.
//!
//! A table's data is `<data-dir>/extracts/csv/data/<table_id>.csv` with a header line. The
//! parsing is deliberately minimal (no quoting) — the point is the shape of a third-party
//! driver against the plugin-api contract. Loading it at run time from a shared library is
//! the dynamic-driver work still to come; today it is used as a library.

use std::path::PathBuf;
use std::sync::Arc;

use svc_plugin_api::arrow::array::{ArrayRef, StringArray};
use svc_plugin_api::arrow::datatypes::{DataType, Field, Schema};
use svc_plugin_api::datafusion::datasource::MemTable;
use svc_plugin_api::{
    Caller, DriverError, RecordBatch, Result, SourceDriver, TableProvider, TableRef, TableSchema,
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

    fn read(&self, table: &TableRef, limit: Option<usize>) -> Result<RecordBatch> {
        if table.id.contains(['/', '\\', '\0']) || table.id.starts_with('.') {
            return Err(DriverError::not_found(format!(
                "Table '{}' has no CSV file",
                table.id
            )));
        }
        let path = self
            .data_dir
            .join("extracts/csv/data")
            .join(format!("{}.csv", table.id));
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
}
