//! The `TableProvider` of a remote warehouse table: the projection and the row limit go into
//! the generated SQL; filters are applied by DataFusion after the rows arrive.
//!
//! Rows are fetched page by page when the plan is built and served from memory. Filter and
//! whole-query push-down, and streaming from the Storage Read API, are the next steps.

use std::sync::Arc;

use async_trait::async_trait;
use svc_plugin_api::arrow::array::RecordBatchOptions;
use svc_plugin_api::arrow::datatypes::{Schema, SchemaRef};
use svc_plugin_api::datafusion::catalog::Session;
use svc_plugin_api::datafusion::datasource::{MemTable, TableType};
use svc_plugin_api::datafusion::error::{DataFusionError, Result};
use svc_plugin_api::datafusion::logical_expr::Expr;
use svc_plugin_api::datafusion::physical_plan::ExecutionPlan;
use svc_plugin_api::{RecordBatch, TableProvider};

use crate::client::{Client, SqlOrigin};

/// One remote table, as DataFusion sees it.
#[derive(Debug)]
pub struct RemoteTable {
    client: Client,
    /// `` `project.dataset.table` ``, validated.
    path: String,
    schema: SchemaRef,
}

impl RemoteTable {
    /// A provider over a validated table path with its Arrow schema.
    pub fn new(client: Client, path: String, schema: SchemaRef) -> Self {
        Self {
            client,
            path,
            schema,
        }
    }
}

#[async_trait]
impl TableProvider for RemoteTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let indices: Vec<usize> = match projection {
            Some(p) => p.clone(),
            None => (0..self.schema.fields().len()).collect(),
        };
        let projected = Arc::new(self.schema.project(&indices)?);
        // Counting rows needs no column, but SQL needs one to select.
        let fetched: Vec<usize> = if indices.is_empty() {
            vec![0]
        } else {
            indices.clone()
        };
        let columns: Vec<String> = fetched
            .iter()
            .map(|&i| format!("`{}`", self.schema.field(i).name().replace('`', "")))
            .collect();
        let mut sql = format!("SELECT {} FROM {}", columns.join(", "), self.path);
        if let Some(n) = limit {
            sql.push_str(&format!(" LIMIT {n}"));
        }
        let result = self
            .client
            .query(&sql, limit.map_or(u64::MAX, |n| n as u64), SqlOrigin::User)
            .await
            .map_err(|e| DataFusionError::External(Box::new(e)))?;
        let rows = result.batch.num_rows();
        let batch = if indices.is_empty() {
            RecordBatch::try_new_with_options(
                Arc::new(Schema::empty()),
                vec![],
                &RecordBatchOptions::new().with_row_count(Some(rows)),
            )?
        } else {
            // Same columns, with the table's declared nullability.
            RecordBatch::try_new_with_options(
                projected.clone(),
                result.batch.columns().to_vec(),
                &RecordBatchOptions::new().with_row_count(Some(rows)),
            )?
        };
        let table = MemTable::try_new(projected, vec![vec![batch]])?;
        table.scan(state, None, &[], limit).await
    }
}
