//! Partial aggregation keyed on one string column: the shape of most analysts' group-bys
//! (`GROUP BY category`, `GROUP BY status`).
//!
//! DataFusion's partial aggregate hashes every key's bytes into a general byte-string table;
//! on a 10M-row `GROUP BY category` that table was over a third of the query's time. This
//! physical optimizer rule swaps such a partial `AggregateExec` for [`StringKeyAggregateExec`],
//! which finds groups through [`keys::KeyGroups`] and otherwise does exactly what the
//! original did: the same accumulators (DataFusion's own, created from the same aggregate
//! expressions, except that `avg` of an integer skips its cast: [`integer_avg`]), the same
//! output schema of key plus accumulator state for the unchanged final stage, early emission
//! under memory pressure and pass-through when nearly every row is its own group.

mod integer_avg;
mod keys;
mod stream;

use std::fmt;
use std::sync::Arc;

use svc_plugin_api::arrow::datatypes::DataType;
use svc_plugin_api::datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use svc_plugin_api::datafusion::config::ConfigOptions;
use svc_plugin_api::datafusion::error::Result;
use svc_plugin_api::datafusion::execution::TaskContext;
use svc_plugin_api::datafusion::physical_expr::expressions::Column;
use svc_plugin_api::datafusion::physical_expr::PhysicalExpr;
use svc_plugin_api::datafusion::physical_optimizer::PhysicalOptimizerRule;
use svc_plugin_api::datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use svc_plugin_api::datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricsSet};
use svc_plugin_api::datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, InputOrderMode, PlanProperties,
    SendableRecordBatchStream,
};

/// Replaces each eligible partial aggregate with a [`StringKeyAggregateExec`].
#[derive(Debug, Default)]
pub struct StringKeyAggregation;

impl PhysicalOptimizerRule for StringKeyAggregation {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            Ok(match StringKeyAggregateExec::try_wrap(&node) {
                Some(exec) => Transformed::yes(Arc::new(exec) as Arc<dyn ExecutionPlan>),
                None => Transformed::no(node),
            })
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "string_key_aggregation"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// A partial aggregate grouping by one string column, in place of the `AggregateExec` it
/// was built from (which it keeps, for its expressions, schema and properties).
#[derive(Debug)]
pub struct StringKeyAggregateExec {
    original: Arc<dyn ExecutionPlan>,
    key: usize,
    key_name: String,
    metrics: ExecutionPlanMetricsSet,
}

impl StringKeyAggregateExec {
    /// The replacement for `plan`, when it is a partial aggregate this operator reproduces
    /// exactly: one plain group column of string view or dictionary-of-strings type, input in
    /// no useful order, no grouping sets, no group limit, and aggregates that are not
    /// DISTINCT, not ordered and not filtered, each with a groups accumulator.
    fn try_wrap(plan: &Arc<dyn ExecutionPlan>) -> Option<Self> {
        let agg = plan.downcast_ref::<AggregateExec>()?;
        let group_by = agg.group_expr();
        let eligible = *agg.mode() == AggregateMode::Partial
            && *agg.input_order_mode() == InputOrderMode::Linear
            && agg.limit_options().is_none()
            && group_by.is_single()
            && !group_by.has_grouping_set()
            && group_by.expr().len() == 1
            && agg.filter_expr().iter().all(Option::is_none)
            && agg.aggr_expr().iter().all(|a| {
                !a.is_distinct() && a.order_bys().is_empty() && a.groups_accumulator_supported()
            });
        if !eligible {
            return None;
        }
        let (expr, name) = &group_by.expr()[0];
        let column = expr.downcast_ref::<Column>()?;
        let input_schema = agg.input_schema();
        if !is_string_key(input_schema.fields().get(column.index())?.data_type()) {
            return None;
        }
        Some(Self {
            original: Arc::clone(plan),
            key: column.index(),
            key_name: name.clone(),
            metrics: ExecutionPlanMetricsSet::new(),
        })
    }

    fn aggregate(&self) -> &AggregateExec {
        self.original
            .downcast_ref::<AggregateExec>()
            .expect("built from an AggregateExec")
    }
}

/// String views, or strings under a dictionary (what parquet's dictionary pages read as when
/// the file asks for them). The groups leave as the key's type, so a dictionary's keys must
/// be wide enough for every group: narrow ones stay with DataFusion.
fn is_string_key(key: &DataType) -> bool {
    match key {
        DataType::Utf8View => true,
        DataType::Dictionary(index, values) => {
            matches!(
                index.as_ref(),
                DataType::Int32 | DataType::Int64 | DataType::UInt32 | DataType::UInt64
            ) && matches!(
                values.as_ref(),
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
            )
        }
        _ => false,
    }
}

impl DisplayAs for StringKeyAggregateExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let aggregates: Vec<&str> = self
            .aggregate()
            .aggr_expr()
            .iter()
            .map(|a| a.name())
            .collect();
        write!(
            f,
            "StringKeyAggregateExec: mode=Partial, gby=[{}], aggr=[{}]",
            self.key_name,
            aggregates.join(", ")
        )
    }
}

impl ExecutionPlan for StringKeyAggregateExec {
    fn name(&self) -> &'static str {
        "StringKeyAggregateExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.original.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![self.aggregate().input()]
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        self.original.apply_expressions(f)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        #[expect(
            deprecated,
            reason = "the trait's required constructor in DataFusion 55"
        )]
        let original = Arc::clone(&self.original).with_new_children(children)?;
        // New children can change the input's order, and with it eligibility.
        Ok(match Self::try_wrap(&original) {
            Some(exec) => Arc::new(exec),
            None => original,
        })
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let agg = self.aggregate();
        let input = agg.input().execute(partition, Arc::clone(&context))?;
        stream::aggregate(agg, self.key, input, &context, &self.metrics, partition)
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}

#[cfg(test)]
mod tests;
