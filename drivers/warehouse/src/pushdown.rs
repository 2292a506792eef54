//! Whole-query push-down: a query that reads only remote warehouse tables runs on the
//! warehouse as one statement, so joins, aggregates, sorts and limits happen there and only
//! the result travels.
//!
//! The host's logical plan is unparsed to GoogleSQL (DataFusion's BigQuery dialect); each
//! table reference, written as its registry id, becomes the validated
//! `` `project`.`dataset`.`table` `` path aliased back to the id, so qualified columns keep
//! working. Anything that does not unparse, or names a table this module was not given,
//! is not pushed: the host then runs the plan itself through the table providers.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::Arc;

use async_trait::async_trait;
use svc_plugin_api::arrow::datatypes::SchemaRef;
use svc_plugin_api::datafusion::catalog::Session;
use svc_plugin_api::datafusion::datasource::TableType;
use svc_plugin_api::datafusion::error::Result;
use svc_plugin_api::datafusion::logical_expr::{Expr, LogicalPlan};
use svc_plugin_api::datafusion::physical_plan::ExecutionPlan;
use svc_plugin_api::datafusion::sql::sqlparser::ast::{
    Ident, ObjectName, ObjectNamePart, TableAlias, TableFactor, VisitMut, VisitorMut,
};
use svc_plugin_api::datafusion::sql::unparser::dialect::BigQueryDialect;
use svc_plugin_api::datafusion::sql::unparser::Unparser;
use svc_plugin_api::TableProvider;

use crate::client::Client;
use crate::provider::{project, RemotePartition};

/// A table's registry id and its validated warehouse address.
pub(crate) struct Address {
    pub project: String,
    pub dataset: String,
    pub table: String,
}

/// The plan as one GoogleSQL statement, or None when it cannot be pushed.
pub(crate) fn warehouse_sql(
    plan: &LogicalPlan,
    tables: &HashMap<String, Address>,
) -> Option<String> {
    let mut statement = Unparser::new(&BigQueryDialect {}).plan_to_sql(plan).ok()?;
    let mut rename = Rename {
        tables,
        unknown: false,
    };
    let _ = statement.visit(&mut rename);
    (!rename.unknown).then(|| statement.to_string())
}

struct Rename<'a> {
    tables: &'a HashMap<String, Address>,
    unknown: bool,
}

impl VisitorMut for Rename<'_> {
    type Break = ();

    fn pre_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
        let TableFactor::Table { name, alias, .. } = factor else {
            return ControlFlow::Continue(());
        };
        let id = match name.0.as_slice() {
            [ObjectNamePart::Identifier(ident)] => ident.value.clone(),
            _ => String::new(),
        };
        let Some(address) = self.tables.get(&id) else {
            self.unknown = true;
            return ControlFlow::Break(());
        };
        *name = ObjectName::from(vec![
            Ident::with_quote('`', &address.project),
            Ident::with_quote('`', &address.dataset),
            Ident::with_quote('`', &address.table),
        ]);
        if alias.is_none() {
            *alias = Some(TableAlias {
                explicit: true,
                name: Ident::with_quote('`', id),
                columns: vec![],
                at: None,
            });
        }
        ControlFlow::Continue(())
    }
}

/// The result of a pushed-down query, as a table DataFusion reads (the host wraps its own
/// row limit around it, which reaches the warehouse as `LIMIT`).
#[derive(Debug)]
pub(crate) struct RemoteQuery {
    pub client: Client,
    pub sql: String,
    /// The plan's output schema: result columns are cast to it by position.
    pub schema: SchemaRef,
}

#[async_trait]
impl TableProvider for RemoteQuery {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let (indices, projected) = project(&self.schema, projection)?;
        let sql = match limit {
            Some(n) => format!("SELECT * FROM ({}) LIMIT {n}", self.sql),
            None => self.sql.clone(),
        };
        RemotePartition::new(self.client.clone(), sql, limit, projected)
            .with_columns(indices)
            .into_plan(limit)
    }
}
