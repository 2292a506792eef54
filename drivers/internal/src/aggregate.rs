//! Aggregates over the store-backed internal tables, answered by the store.
//!
//! Without this, `SELECT count(*) FROM svc_audit` streams every audit row out of the store
//! into DataFusion only to count them (seconds over millions of rows). [`AggregatePushdown`]
//! is a logical optimizer rule that finds an `Aggregate` directly over a scan of an
//! [`InternalProvider`] — after DataFusion has pushed the query's filters into that scan — and
//! replaces both with a scan of the store's own `SELECT <groups>, <aggregates> … GROUP BY`.
//!
//! The statement is built by the same [`ScanSql::select`] as every other read, so the
//! caller's row filter is its first condition and the pushed predicates are the ones the
//! provider already accepted as exact. Only shapes the store computes exactly as DataFusion
//! does are rewritten: `count(*)`, `count(col)`, `min`/`max` of integers and text (text in
//! byte order), `sum` of integers, grouped by plain columns. Anything else (DISTINCT,
//! FILTER, ORDER BY inside the aggregate, expressions, floats, a LIMIT under the aggregate,
//! a filter the store could not take) leaves the plan as it was.

use std::sync::Arc;

use svc_plugin_api::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use svc_plugin_api::datafusion::catalog::Session;
use svc_plugin_api::datafusion::common::tree_node::Transformed;
use svc_plugin_api::datafusion::common::{Column, Result as DfResult};
use svc_plugin_api::datafusion::datasource::{provider_as_source, source_as_provider, TableType};
use svc_plugin_api::datafusion::functions_aggregate::count::Count;
use svc_plugin_api::datafusion::functions_aggregate::min_max::{Max, Min};
use svc_plugin_api::datafusion::functions_aggregate::sum::Sum;
use svc_plugin_api::datafusion::logical_expr::expr::AggregateFunction;
use svc_plugin_api::datafusion::logical_expr::{
    Aggregate, Expr, LogicalPlan, Projection, TableProviderFilterPushDown, TableScan,
    TableScanBuilder,
};
use svc_plugin_api::datafusion::optimizer::optimizer::ApplyOrder;
use svc_plugin_api::datafusion::optimizer::{OptimizerConfig, OptimizerRule};
use svc_plugin_api::datafusion::physical_plan::ExecutionPlan;
use svc_plugin_api::TableProvider;

use crate::provider::{InternalProvider, ScanSql, StoreScan};
use crate::rows::StoreColumn;

/// The optimizer rule; see the module doc.
#[derive(Debug, Default)]
pub struct AggregatePushdown;

/// Qualifier of the replacement scan; only the projection right above it refers to it.
const AGGREGATE_TABLE: &str = "store_aggregate";

impl OptimizerRule for AggregatePushdown {
    fn name(&self) -> &str {
        "svc_internal_aggregate_pushdown"
    }

    fn apply_order(&self) -> Option<ApplyOrder> {
        Some(ApplyOrder::BottomUp)
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        _config: &dyn OptimizerConfig,
    ) -> DfResult<Transformed<LogicalPlan>> {
        let LogicalPlan::Aggregate(aggregate) = &plan else {
            return Ok(Transformed::no(plan));
        };
        match pushed(aggregate)? {
            Some(replacement) => Ok(Transformed::yes(replacement)),
            None => Ok(Transformed::no(plan)),
        }
    }
}

/// The store-side replacement for `aggregate`, when its whole shape can be pushed.
fn pushed(aggregate: &Aggregate) -> DfResult<Option<LogicalPlan>> {
    let LogicalPlan::TableScan(scan) = aggregate.input.as_ref() else {
        return Ok(None);
    };
    if scan.fetch.is_some() {
        return Ok(None);
    }
    let Ok(provider) = source_as_provider(&scan.source) else {
        return Ok(None);
    };
    let Some(internal) = provider.downcast_ref::<InternalProvider>() else {
        return Ok(None);
    };
    let Some(sql) = statement(aggregate, scan, internal) else {
        return Ok(None);
    };

    // Output columns c0, c1, … typed (and nullable) exactly as the aggregate's.
    let out = aggregate.schema.as_ref();
    let fields: Vec<Field> = out
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| Field::new(format!("c{i}"), f.data_type().clone(), f.is_nullable()))
        .collect();
    let source = Arc::new(StoreAggregate {
        provider: internal.clone(),
        schema: Arc::new(Schema::new(fields)),
        sql,
    });
    let replacement = LogicalPlan::TableScan(
        TableScanBuilder::new(AGGREGATE_TABLE, provider_as_source(source)).build()?,
    );
    // Renamed back to the aggregate's own qualified names, so nothing above notices.
    let renamed = (0..out.fields().len())
        .map(|i| {
            let (qualifier, field) = out.qualified_field(i);
            Expr::Column(Column::new(Some(AGGREGATE_TABLE), format!("c{i}")))
                .alias_qualified(qualifier.cloned(), field.name())
        })
        .collect();
    Ok(Some(LogicalPlan::Projection(Projection::try_new(
        renamed,
        Arc::new(replacement),
    )?)))
}

/// The store statement for `aggregate` over `scan`, or None when some part of it would not be
/// computed exactly as DataFusion computes it.
fn statement(
    aggregate: &Aggregate,
    scan: &TableScan,
    provider: &InternalProvider,
) -> Option<(ScanSql, Vec<StoreColumn>)> {
    let columns = provider.columns();
    let column = |e: &Expr| match e {
        Expr::Column(c) => columns.iter().find(|s| s.name == c.name),
        _ => None,
    };
    let quoted = |c: &StoreColumn| format!("\"{}\"", c.name);

    let mut select = Vec::new();
    let mut decode = Vec::new();
    let mut group_by = Vec::new();
    for g in &aggregate.group_expr {
        // DataFusion names the key of a rewritten `count(DISTINCT x)` with an alias.
        let c = column(unalias(g))?;
        select.push(quoted(c));
        group_by.push(quoted(c));
        decode.push(c.clone());
    }
    for a in &aggregate.aggr_expr {
        let Expr::AggregateFunction(AggregateFunction { func, params }) = unalias(a) else {
            return None;
        };
        if params.distinct
            || params.filter.is_some()
            || !params.order_by.is_empty()
            || params.null_treatment.is_some()
            || params.args.len() != 1
        {
            return None;
        }
        let arg = &params.args[0];
        let f = func.inner();
        let (sql, decoded_as) = if f.is::<Count>() {
            let sql = match arg {
                Expr::Literal(v, _) if !v.is_null() => "COUNT(*)".to_owned(),
                e => format!("COUNT({})", quoted(column(e)?)),
            };
            (sql, "BIGINT".to_owned())
        } else if f.is::<Min>() || f.is::<Max>() {
            let c = column(arg)?;
            let name = if f.is::<Min>() { "MIN" } else { "MAX" };
            let sql = match c.data_type() {
                DataType::Int64 => format!("{name}({})", quoted(c)),
                // Text in byte order, as DataFusion compares it, not the database locale's.
                DataType::Utf8 if provider.postgres() => {
                    format!("{name}({} COLLATE \"C\")", quoted(c))
                }
                DataType::Utf8 => format!("{name}({})", quoted(c)),
                _ => return None,
            };
            (sql, c.store_type.clone())
        } else if f.is::<Sum>() {
            let c = column(arg)?;
            if c.data_type() != DataType::Int64 {
                return None;
            }
            // PostgreSQL sums bigints as numeric; an overflow errors rather than wraps.
            let sql = if provider.postgres() {
                format!("CAST(SUM({}) AS BIGINT)", quoted(c))
            } else {
                format!("SUM({})", quoted(c))
            };
            (sql, c.store_type.clone())
        } else {
            return None;
        };
        select.push(sql);
        decode.push(StoreColumn {
            name: format!("c{}", decode.len()),
            store_type: decoded_as,
            nullable: true,
        });
    }
    // Every filter left on the scan was accepted as exact: the store's answer is final.
    if scan
        .filters
        .iter()
        .any(|f| !matches!(provider.pushdown(f), TableProviderFilterPushDown::Exact))
    {
        return None;
    }
    let mut sql = provider.select(&select.join(", "), &scan.filters).ok()?;
    if !group_by.is_empty() {
        sql.sql.push_str(" GROUP BY ");
        sql.sql.push_str(&group_by.join(", "));
    }
    Some((sql, decode))
}

fn unalias(e: &Expr) -> &Expr {
    match e {
        Expr::Alias(a) => unalias(&a.expr),
        e => e,
    }
}

/// One grouped aggregate, computed by the store when scanned.
#[derive(Debug)]
struct StoreAggregate {
    provider: InternalProvider,
    schema: SchemaRef,
    sql: (ScanSql, Vec<StoreColumn>),
}

#[async_trait::async_trait]
impl TableProvider for StoreAggregate {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Temporary
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DfResult<Vec<TableProviderFilterPushDown>> {
        // A HAVING stays above, in DataFusion.
        Ok(vec![
            TableProviderFilterPushDown::Unsupported;
            filters.len()
        ])
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let (sql, decode) = &self.sql;
        StoreScan::plan(
            self.provider.pool(),
            self.schema.clone(),
            decode.clone(),
            sql.clone(),
            projection,
        )
    }
}
