//! The internal tables as a DataFusion `TableProvider`: projection, simple predicates and
//! limits are pushed into the store's SQL, and the caller's row filter is always part of it.
//!
//! The provider is built per caller, so the row filter is fixed at construction: nothing in
//! a query can reach a row the filter excludes, because those rows never leave the store.
//! Pushed predicates bind their literals as parameters; a predicate the store might evaluate
//! differently from DataFusion is not pushed and DataFusion applies it instead.

use std::sync::Arc;

use futures::StreamExt as _;
use sqlx::any::AnyArguments;
use sqlx::query::Query;
use sqlx::{Any, AnyPool};
use svc_plugin_api::arrow::datatypes::{DataType, SchemaRef};
use svc_plugin_api::datafusion::catalog::Session;
use svc_plugin_api::datafusion::common::{DataFusionError, ScalarValue};
use svc_plugin_api::datafusion::datasource::TableType;
use svc_plugin_api::datafusion::execution::{SendableRecordBatchStream, TaskContext};
use svc_plugin_api::datafusion::logical_expr::{
    Between, BinaryExpr, Expr, Operator, TableProviderFilterPushDown,
};
use svc_plugin_api::datafusion::physical_plan::stream::RecordBatchReceiverStreamBuilder;
use svc_plugin_api::datafusion::physical_plan::streaming::{PartitionStream, StreamingTableExec};
use svc_plugin_api::datafusion::physical_plan::ExecutionPlan;
use svc_plugin_api::TableProvider;

use crate::rows::{self, StoreColumn};
use crate::InternalTable;

/// Rows per batch streamed out of the store.
const BATCH_ROWS: usize = 8192;

/// A value bound to a placeholder.
#[derive(Debug, Clone, PartialEq)]
pub enum Param {
    /// Text.
    Text(String),
    /// Integer.
    Int(i64),
    /// Boolean.
    Bool(bool),
}

/// A SELECT over a backing table with its bound parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct ScanSql {
    /// The statement, with `$n` placeholders.
    pub sql: String,
    /// Values for the placeholders, in order.
    pub params: Vec<Param>,
}

impl ScanSql {
    /// `SELECT <select> FROM <backing> WHERE <row filter> AND <predicates> LIMIT <n>`.
    ///
    /// `table_columns` are all the backing table's columns (predicates may name columns that
    /// are not selected); every predicate must be one [`can_push`] accepted, because the
    /// store's answer is final for it.
    pub fn build(
        table: &InternalTable,
        table_columns: &[StoreColumn],
        select: &[StoreColumn],
        row_filter: Option<&(&'static str, String)>,
        predicates: &[Expr],
        limit: Option<usize>,
        postgres: bool,
    ) -> Result<Self, String> {
        let select = if select.is_empty() {
            // Only the row count is needed (e.g. count(*)).
            "1 AS one".to_owned()
        } else {
            select
                .iter()
                .map(|c| format!("\"{}\"", c.name))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut scan = Self::select(
            table,
            table_columns,
            &select,
            row_filter,
            predicates,
            postgres,
        )?;
        if let Some(n) = limit {
            scan.sql.push_str(&format!(" LIMIT {n}"));
        }
        Ok(scan)
    }

    /// `SELECT <select> FROM <backing> WHERE <row filter> AND <predicates>`: the one place the
    /// row filter is written, always as the first condition, so every statement built for a
    /// caller (scans, samples, pushed aggregates) carries it.
    pub(crate) fn select(
        table: &InternalTable,
        table_columns: &[StoreColumn],
        select: &str,
        row_filter: Option<&(&'static str, String)>,
        predicates: &[Expr],
        postgres: bool,
    ) -> Result<Self, String> {
        let mut params = Vec::new();
        let mut conditions = Vec::new();
        if let Some((column, value)) = row_filter {
            params.push(Param::Text(value.clone()));
            conditions.push(format!("\"{column}\" = $1"));
        }
        for p in predicates {
            let sql = translate(p, table_columns, postgres, &mut params)
                .ok_or_else(|| format!("predicate {p} cannot run in the store"))?;
            conditions.push(sql);
        }
        let mut sql = format!("SELECT {select} FROM {}", table.backing_table);
        if !conditions.is_empty() {
            sql.push_str(" WHERE ");
            sql.push_str(&conditions.join(" AND "));
        }
        Ok(Self { sql, params })
    }

    fn query(&self) -> Query<'_, Any, AnyArguments<'_>> {
        self.params
            .iter()
            .fold(sqlx::query(&self.sql), |q, p| match p {
                Param::Text(v) => q.bind(v.clone()),
                Param::Int(v) => q.bind(*v),
                Param::Bool(v) => q.bind(*v),
            })
    }

    /// Runs the statement and returns every row as one batch (for small reads: samples).
    pub async fn fetch_batch(
        &self,
        pool: &AnyPool,
        columns: &[StoreColumn],
    ) -> svc_plugin_api::Result<svc_plugin_api::RecordBatch> {
        let rows = self
            .query()
            .fetch_all(pool)
            .await
            .map_err(crate::store_error)?;
        rows::to_batch(columns, &rows)
    }
}

/// Whether the store evaluates `expr` exactly as DataFusion would.
pub fn can_push(expr: &Expr, columns: &[StoreColumn], postgres: bool) -> bool {
    translate(expr, columns, postgres, &mut Vec::new()).is_some()
}

/// Store SQL for a predicate, binding its literals into `params`; None when it is not one
/// the store evaluates exactly as DataFusion does.
fn translate(
    expr: &Expr,
    columns: &[StoreColumn],
    postgres: bool,
    params: &mut Vec<Param>,
) -> Option<String> {
    match expr {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => match op {
            Operator::And | Operator::Or => {
                let l = translate(left, columns, postgres, params)?;
                let r = translate(right, columns, postgres, params)?;
                Some(format!("({l} {op} {r})"))
            }
            Operator::Eq
            | Operator::NotEq
            | Operator::Lt
            | Operator::LtEq
            | Operator::Gt
            | Operator::GtEq => {
                let (column, literal, op) = match (left.as_ref(), right.as_ref()) {
                    (Expr::Column(c), Expr::Literal(v, _)) => (c, v, *op),
                    (Expr::Literal(v, _), Expr::Column(c)) => (c, v, op.swap()?),
                    _ => return None,
                };
                let column = columns.iter().find(|c| c.name == column.name)?;
                let placeholder = bind(literal, column, params)?;
                // Text order must be byte order, as in DataFusion, not the database locale's.
                let collate = if postgres
                    && column.data_type() == DataType::Utf8
                    && !matches!(op, Operator::Eq | Operator::NotEq)
                {
                    " COLLATE \"C\""
                } else {
                    ""
                };
                Some(format!("\"{}\"{collate} {op} {placeholder}", column.name))
            }
            _ => None,
        },
        Expr::Not(inner) => Some(format!(
            "NOT ({})",
            translate(inner, columns, postgres, params)?
        )),
        Expr::IsNull(inner) | Expr::IsNotNull(inner) => {
            let Expr::Column(c) = inner.as_ref() else {
                return None;
            };
            let column = columns.iter().find(|col| col.name == c.name)?;
            let test = if matches!(expr, Expr::IsNull(_)) {
                "IS NULL"
            } else {
                "IS NOT NULL"
            };
            Some(format!("\"{}\" {test}", column.name))
        }
        Expr::InList(list) => {
            let Expr::Column(c) = list.expr.as_ref() else {
                return None;
            };
            let column = columns.iter().find(|col| col.name == c.name)?;
            let placeholders = list
                .list
                .iter()
                .map(|item| match item {
                    Expr::Literal(v, _) => bind(v, column, params),
                    _ => None,
                })
                .collect::<Option<Vec<_>>>()?;
            if placeholders.is_empty() {
                return None;
            }
            let not = if list.negated { "NOT " } else { "" };
            Some(format!(
                "\"{}\" {not}IN ({})",
                column.name,
                placeholders.join(", ")
            ))
        }
        Expr::Between(Between {
            expr,
            negated,
            low,
            high,
        }) => {
            let Expr::Column(c) = expr.as_ref() else {
                return None;
            };
            // Strings compare by locale in PostgreSQL; only integers are pushed here.
            let column = columns.iter().find(|col| col.name == c.name)?;
            if column.data_type() != DataType::Int64 {
                return None;
            }
            let (Expr::Literal(lo, _), Expr::Literal(hi, _)) = (low.as_ref(), high.as_ref()) else {
                return None;
            };
            let lo = bind(lo, column, params)?;
            let hi = bind(hi, column, params)?;
            let not = if *negated { "NOT " } else { "" };
            Some(format!("\"{}\" {not}BETWEEN {lo} AND {hi}", column.name))
        }
        _ => None,
    }
}

/// Binds a literal compatible with the column's type; returns its placeholder.
fn bind(value: &ScalarValue, column: &StoreColumn, params: &mut Vec<Param>) -> Option<String> {
    let param = match (column.data_type(), value) {
        (
            DataType::Utf8,
            ScalarValue::Utf8(Some(v))
            | ScalarValue::LargeUtf8(Some(v))
            | ScalarValue::Utf8View(Some(v)),
        ) => Param::Text(v.clone()),
        (DataType::Int64, ScalarValue::Int64(Some(v))) => Param::Int(*v),
        (DataType::Int64, ScalarValue::Int32(Some(v))) => Param::Int(i64::from(*v)),
        (DataType::Boolean, ScalarValue::Boolean(Some(v))) => Param::Bool(*v),
        _ => return None,
    };
    params.push(param);
    Some(format!("${}", params.len()))
}

/// An internal table as seen by one caller.
#[derive(Debug, Clone)]
pub struct InternalProvider {
    pool: AnyPool,
    postgres: bool,
    table: &'static InternalTable,
    columns: Vec<StoreColumn>,
    schema: SchemaRef,
    row_filter: Option<(&'static str, String)>,
}

impl InternalProvider {
    /// The provider for `table` with the caller's row filter (None for administrators).
    pub fn new(
        pool: AnyPool,
        postgres: bool,
        table: &'static InternalTable,
        columns: Vec<StoreColumn>,
        row_filter: Option<(&'static str, String)>,
    ) -> Self {
        let schema = rows::schema(&columns);
        Self {
            pool,
            postgres,
            table,
            columns,
            schema,
            row_filter,
        }
    }

    /// The backing table's columns.
    pub(crate) fn columns(&self) -> &[StoreColumn] {
        &self.columns
    }

    /// Whether the store is PostgreSQL (else SQLite).
    pub(crate) fn postgres(&self) -> bool {
        self.postgres
    }

    /// The store's pool.
    pub(crate) fn pool(&self) -> AnyPool {
        self.pool.clone()
    }

    /// How the store takes `filter`: exactly, or not at all.
    pub(crate) fn pushdown(&self, filter: &Expr) -> TableProviderFilterPushDown {
        if can_push(filter, &self.columns, self.postgres) {
            TableProviderFilterPushDown::Exact
        } else {
            TableProviderFilterPushDown::Unsupported
        }
    }

    /// `SELECT <select>` over this caller's rows matching `filters` (see [`ScanSql::select`]).
    pub(crate) fn select(&self, select: &str, filters: &[Expr]) -> Result<ScanSql, String> {
        ScanSql::select(
            self.table,
            &self.columns,
            select,
            self.row_filter.as_ref(),
            filters,
            self.postgres,
        )
    }
}

#[async_trait::async_trait]
impl TableProvider for InternalProvider {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> svc_plugin_api::datafusion::common::Result<Vec<TableProviderFilterPushDown>> {
        Ok(filters.iter().map(|f| self.pushdown(f)).collect())
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> svc_plugin_api::datafusion::common::Result<Arc<dyn ExecutionPlan>> {
        let columns: Vec<StoreColumn> = match projection {
            Some(p) => p.iter().map(|&i| self.columns[i].clone()).collect(),
            None => self.columns.clone(),
        };
        let scan = ScanSql::build(
            self.table,
            &self.columns,
            &columns,
            self.row_filter.as_ref(),
            filters,
            limit,
            self.postgres,
        )
        .map_err(DataFusionError::Internal)?;
        StoreScan::plan(
            self.pool.clone(),
            rows::schema(&columns),
            columns,
            scan,
            None,
        )
    }
}

/// One streamed SELECT.
#[derive(Debug)]
pub(crate) struct StoreScan {
    pool: AnyPool,
    /// The batches' schema: the columns' own, or one that types them more narrowly (a
    /// count is never null).
    schema: SchemaRef,
    columns: Vec<StoreColumn>,
    scan: ScanSql,
}

impl StoreScan {
    /// The plan streaming `scan`'s rows, read as `columns` into batches of `schema`, keeping
    /// the `projection` of them.
    pub(crate) fn plan(
        pool: AnyPool,
        schema: SchemaRef,
        columns: Vec<StoreColumn>,
        scan: ScanSql,
        projection: Option<&Vec<usize>>,
    ) -> svc_plugin_api::datafusion::common::Result<Arc<dyn ExecutionPlan>> {
        let partition = Arc::new(Self {
            pool,
            schema: schema.clone(),
            columns,
            scan,
        });
        Ok(Arc::new(StreamingTableExec::try_new(
            schema,
            vec![partition],
            projection,
            Vec::new(),
            false,
            None,
        )?))
    }
}

impl PartitionStream for StoreScan {
    fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    fn execute(&self, _ctx: Arc<TaskContext>) -> SendableRecordBatchStream {
        // Dropping the stream (a cancelled query) aborts the task and its store cursor.
        let mut builder = RecordBatchReceiverStreamBuilder::new(self.schema.clone(), 2);
        let tx = builder.tx();
        let (pool, columns, scan) = (self.pool.clone(), self.columns.clone(), self.scan.clone());
        let schema = self.schema.clone();
        builder.spawn(async move {
            let mut stream = scan.query().fetch(&pool);
            let mut chunk = Vec::with_capacity(BATCH_ROWS);
            loop {
                let next = stream.next().await;
                let done = next.is_none();
                if let Some(row) = next {
                    chunk.push(row.map_err(|e| DataFusionError::External(Box::new(e)))?);
                }
                if (done && !chunk.is_empty()) || chunk.len() == BATCH_ROWS {
                    let batch = rows::to_batch(&columns, &chunk)
                        .and_then(|b| rows::retype(b, &schema))
                        .map_err(|e| DataFusionError::External(Box::new(e)))?;
                    chunk.clear();
                    if tx.send(Ok(batch)).await.is_err() {
                        return Ok(());
                    }
                }
                if done {
                    return Ok(());
                }
            }
        });
        builder.build()
    }
}
