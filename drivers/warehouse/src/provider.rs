//! The `TableProvider` of a remote warehouse table: the projection, the filters it can
//! translate and the row limit go into the generated SQL; rows stream in page by page as the
//! plan pulls them, so memory does not follow the result size.
//!
//! A filter is pushed only when [`sql::filter`] renders it exactly; anything else (casts,
//! functions, LIKE, …) is left to DataFusion after the rows arrive. Both the push-down
//! answer and the SQL come from the same function, so a filter can never be claimed and
//! then dropped.

use std::sync::Arc;

use async_trait::async_trait;
use futures::{StreamExt, TryStreamExt};
use svc_plugin_api::arrow::array::RecordBatchOptions;
use svc_plugin_api::arrow::compute::cast;
use svc_plugin_api::arrow::datatypes::{Schema, SchemaRef};
use svc_plugin_api::datafusion::catalog::Session;
use svc_plugin_api::datafusion::datasource::TableType;
use svc_plugin_api::datafusion::error::{DataFusionError, Result};
use svc_plugin_api::datafusion::execution::{SendableRecordBatchStream, TaskContext};
use svc_plugin_api::datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use svc_plugin_api::datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use svc_plugin_api::datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
use svc_plugin_api::datafusion::physical_plan::ExecutionPlan;
use svc_plugin_api::{DriverError, RecordBatch, TableProvider};

use crate::client::{Client, Pages, SqlOrigin};
use crate::sql;

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

    /// The `SELECT` a scan sends: projected columns, pushed filters, limit.
    fn select(&self, indices: &[usize], filters: &[Expr], limit: Option<usize>) -> Result<String> {
        // Counting rows needs no column, but SQL needs one to select.
        let fetched: Vec<usize> = if indices.is_empty() {
            vec![0]
        } else {
            indices.to_vec()
        };
        let columns = fetched
            .iter()
            .map(|&i| sql::column(self.schema.field(i).name()))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| {
                DataFusionError::Plan(format!(
                    "{}: a column name cannot be quoted safely",
                    self.path
                ))
            })?;
        let mut text = format!("SELECT {} FROM {}", columns.join(", "), self.path);
        let conditions = filters
            .iter()
            .map(|f| {
                sql::filter(f, &self.schema).ok_or_else(|| {
                    // supports_filters_pushdown said Exact only for what renders.
                    DataFusionError::Internal(format!("filter {f} was pushed but does not render"))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        if !conditions.is_empty() {
            text.push_str(" WHERE ");
            text.push_str(&conditions.join(" AND "));
        }
        if let Some(n) = limit {
            text.push_str(&format!(" LIMIT {n}"));
        }
        Ok(text)
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

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        Ok(filters
            .iter()
            .map(|f| match sql::filter(f, &self.schema) {
                Some(_) => TableProviderFilterPushDown::Exact,
                None => TableProviderFilterPushDown::Unsupported,
            })
            .collect())
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let (indices, projected) = project(&self.schema, projection)?;
        let sql = self.select(&indices, filters, limit)?;
        RemotePartition::new(self.client.clone(), sql, limit, projected).into_plan(limit)
    }
}

/// The projection's column indices (all when None) and the projected schema.
pub(crate) fn project(
    schema: &SchemaRef,
    projection: Option<&Vec<usize>>,
) -> Result<(Vec<usize>, SchemaRef)> {
    let indices: Vec<usize> = match projection {
        Some(p) => p.clone(),
        None => (0..schema.fields().len()).collect(),
    };
    let projected = Arc::new(schema.project(&indices)?);
    Ok((indices, projected))
}

/// One query's pages as a DataFusion stream; the query starts when the plan first pulls.
#[derive(Debug)]
pub(crate) struct RemotePartition {
    client: Client,
    sql: String,
    max_rows: u64,
    /// The projected schema (empty when only rows are counted).
    schema: SchemaRef,
    /// Which result columns feed `schema`, by position (all, in order, when None).
    columns: Option<Vec<usize>>,
}

impl RemotePartition {
    /// Rows of `sql`, at most `limit`, delivered as `schema`.
    pub(crate) fn new(
        client: Client,
        sql: String,
        limit: Option<usize>,
        schema: SchemaRef,
    ) -> Self {
        Self {
            client,
            sql,
            max_rows: limit.map_or(u64::MAX, |n| n as u64),
            schema,
            columns: None,
        }
    }

    /// The plan that streams this partition.
    pub(crate) fn into_plan(self, limit: Option<usize>) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(StreamingTableExec::try_new(
            self.schema.clone(),
            vec![Arc::new(self)],
            None,
            [],
            false,
            limit,
        )?))
    }

    /// Takes only these result columns, by position.
    pub(crate) fn with_columns(mut self, columns: Vec<usize>) -> Self {
        self.columns = Some(columns);
        self
    }
}

impl PartitionStream for RemotePartition {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        let (client, sql, max_rows, schema, columns) = (
            self.client.clone(),
            self.sql.clone(),
            self.max_rows,
            self.schema.clone(),
            self.columns.clone(),
        );
        let batches = futures::stream::try_unfold(None::<Pages>, move |pages| {
            let (client, sql, schema, columns) =
                (client.clone(), sql.clone(), schema.clone(), columns.clone());
            async move {
                let mut pages = match pages {
                    Some(p) => p,
                    None => client.pages(&sql, max_rows, SqlOrigin::User).await?,
                };
                match pages.next_batch().await? {
                    None => Ok(None),
                    Some(batch) => Ok(Some((
                        conform(batch, &schema, columns.as_deref())?,
                        Some(pages),
                    ))),
                }
            }
        })
        .map_err(|e: DriverError| DataFusionError::External(Box::new(e)))
        .boxed();
        Box::pin(RecordBatchStreamAdapter::new(self.schema.clone(), batches))
    }
}

/// The fetched columns (those at `columns`, or all) under the declared schema, cast where the
/// warehouse's type differs (a pushed-down query's result is typed by the warehouse); bare
/// row counts when no column was asked for.
fn conform(
    batch: RecordBatch,
    schema: &SchemaRef,
    columns: Option<&[usize]>,
) -> std::result::Result<RecordBatch, DriverError> {
    let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    if schema.fields().is_empty() {
        return RecordBatch::try_new_with_options(Arc::new(Schema::empty()), vec![], &options)
            .map_err(|e| DriverError::internal(format!("counting warehouse rows: {e}")));
    }
    let picked: Vec<usize> = match columns {
        Some(c) => c.to_vec(),
        None => (0..batch.num_columns()).collect(),
    };
    let arrays = picked
        .iter()
        .zip(schema.fields())
        .map(|(&i, field)| {
            let column = batch.columns().get(i).ok_or_else(|| {
                DriverError::internal(format!("the warehouse returned no column {i}"))
            })?;
            if column.data_type() == field.data_type() {
                return Ok(column.clone());
            }
            cast(column, field.data_type()).map_err(|e| {
                DriverError::internal(format!(
                    "warehouse column '{}' does not read as {}: {e}",
                    field.name(),
                    field.data_type()
                ))
            })
        })
        .collect::<std::result::Result<Vec<_>, DriverError>>()?;
    RecordBatch::try_new_with_options(schema.clone(), arrays, &options)
        .map_err(|e| DriverError::internal(format!("warehouse rows do not fit the schema: {e}")))
}
