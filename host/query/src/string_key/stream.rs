//! The stream of one partition of a [`super::StringKeyAggregateExec`].

use std::collections::VecDeque;
use std::sync::Arc;

use futures::StreamExt;
use svc_plugin_api::arrow::array::{ArrayRef, AsArray};
use svc_plugin_api::arrow::compute::cast;
use svc_plugin_api::arrow::datatypes::SchemaRef;
use svc_plugin_api::datafusion::error::{DataFusionError, Result};
use svc_plugin_api::datafusion::execution::memory_pool::{MemoryConsumer, MemoryReservation};
use svc_plugin_api::datafusion::execution::TaskContext;
use svc_plugin_api::datafusion::logical_expr::{EmitTo, GroupsAccumulator};
use svc_plugin_api::datafusion::physical_expr::PhysicalExpr;
use svc_plugin_api::datafusion::physical_plan::aggregates::AggregateExec;
use svc_plugin_api::datafusion::physical_plan::metrics::{
    BaselineMetrics, ExecutionPlanMetricsSet,
};
use svc_plugin_api::datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use svc_plugin_api::datafusion::physical_plan::{ExecutionPlan, SendableRecordBatchStream};
use svc_plugin_api::RecordBatch;

use super::integer_avg;
use super::keys::KeyGroups;

/// Aggregates `input` by the string column `key` with `agg`'s accumulators, yielding `agg`'s
/// partial output: the keys, then each accumulator's state columns.
pub(super) fn aggregate(
    agg: &AggregateExec,
    key: usize,
    input: SendableRecordBatchStream,
    context: &Arc<TaskContext>,
    metrics: &ExecutionPlanMetricsSet,
    partition: usize,
) -> Result<SendableRecordBatchStream> {
    let options = &context.session_config().options().execution;
    let probe = (options.skip_partial_aggregation_probe_ratio_threshold < 1.0).then_some(Probe {
        rows: 0,
        min_rows: options.skip_partial_aggregation_probe_rows_threshold,
        ratio: options.skip_partial_aggregation_probe_ratio_threshold,
    });
    let schema = agg.schema();
    let input_schema = agg.input_schema();
    let (arguments, accumulators) = agg
        .aggr_expr()
        .iter()
        .map(|a| match integer_avg::fuse(a, &input_schema) {
            Some((argument, accumulator)) => Ok((vec![argument], accumulator)),
            None => Ok((a.expressions(), a.create_groups_accumulator()?)),
        })
        .collect::<Result<(Vec<_>, Vec<_>)>>()?;
    let state = Partition {
        input,
        key,
        arguments,
        accumulators,
        groups: KeyGroups::new(),
        indices: Vec::new(),
        schema: Arc::clone(&schema),
        batch_size: context.session_config().batch_size().max(1),
        reservation: MemoryConsumer::new(format!("StringKeyAggregateExec[{partition}]"))
            .with_can_spill(true)
            .register(context.memory_pool()),
        probe,
        passing_through: false,
        ready: VecDeque::new(),
        finished: false,
        metrics: BaselineMetrics::new(metrics, partition),
    };
    let batches = futures::stream::unfold(state, |mut state| async move {
        let next = state.next().await;
        next.map(|batch| (batch, state))
    });
    Ok(Box::pin(RecordBatchStreamAdapter::new(schema, batches)))
}

/// When to stop aggregating: after `min_rows` input rows, if the groups number at least
/// `ratio` of them, aggregating saves the final stage almost nothing (DataFusion's rule and
/// settings for its own partial aggregates).
struct Probe {
    rows: usize,
    min_rows: usize,
    ratio: f64,
}

struct Partition {
    input: SendableRecordBatchStream,
    key: usize,
    arguments: Vec<Vec<Arc<dyn PhysicalExpr>>>,
    accumulators: Vec<Box<dyn GroupsAccumulator>>,
    groups: KeyGroups,
    indices: Vec<usize>,
    schema: SchemaRef,
    batch_size: usize,
    reservation: MemoryReservation,
    probe: Option<Probe>,
    passing_through: bool,
    ready: VecDeque<RecordBatch>,
    finished: bool,
    metrics: BaselineMetrics,
}

impl Partition {
    async fn next(&mut self) -> Option<Result<RecordBatch>> {
        loop {
            if let Some(batch) = self.ready.pop_front() {
                self.metrics.record_output(batch.num_rows());
                return Some(Ok(batch));
            }
            if self.finished {
                self.metrics.done();
                return None;
            }
            let step = match self.input.next().await {
                Some(Ok(batch)) => {
                    let elapsed = self.metrics.elapsed_compute().clone();
                    let _timer = elapsed.timer();
                    self.consume(&batch)
                }
                Some(Err(e)) => Err(e),
                None => {
                    self.finished = true;
                    self.emit()
                }
            };
            if let Err(e) = step {
                // Nothing after an error: the consumer gets it once and the stream ends.
                self.finished = true;
                self.ready.clear();
                return Some(Err(e));
            }
        }
    }

    fn consume(&mut self, batch: &RecordBatch) -> Result<()> {
        let values = self.evaluate(batch)?;
        if self.passing_through {
            let mut columns = vec![Arc::clone(batch.column(self.key))];
            for (acc, values) in self.accumulators.iter().zip(&values) {
                columns.extend(acc.convert_to_state(values, None)?);
            }
            self.ready
                .push_back(RecordBatch::try_new(Arc::clone(&self.schema), columns)?);
            return Ok(());
        }
        let keys = batch.column(self.key);
        match keys.as_any_dictionary_opt() {
            Some(dictionary) => self
                .groups
                .intern_dictionary(dictionary, &mut self.indices)?,
            None => self.groups.intern(keys.as_string_view(), &mut self.indices),
        }
        let groups = self.groups.len();
        for (acc, values) in self.accumulators.iter_mut().zip(&values) {
            acc.update_batch(values, &self.indices, None, groups)?;
        }
        self.reserve()?;
        if let Some(probe) = &mut self.probe {
            probe.rows += batch.num_rows();
            if probe.rows >= probe.min_rows {
                let skip = groups as f64 >= probe.ratio * probe.rows as f64;
                self.probe = None;
                if skip {
                    self.passing_through = true;
                    self.emit()?;
                }
            }
        }
        Ok(())
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<Vec<Vec<ArrayRef>>> {
        self.arguments
            .iter()
            .map(|exprs| {
                exprs
                    .iter()
                    .map(|e| e.evaluate(batch)?.into_array(batch.num_rows()))
                    .collect()
            })
            .collect()
    }

    /// Grows the reservation to what the groups hold; when the pool refuses, hands the
    /// groups so far downstream (a partial aggregate may emit at any time, the final stage
    /// merges) and starts again empty.
    fn reserve(&mut self) -> Result<()> {
        match self.reservation.try_resize(self.held()) {
            Err(DataFusionError::ResourcesExhausted(_)) if self.groups.len() > 0 => {
                self.emit()?;
                self.reservation.try_resize(self.held())
            }
            other => other,
        }
    }

    fn held(&self) -> usize {
        self.groups.size() + self.accumulators.iter().map(|a| a.size()).sum::<usize>()
    }

    /// Queues every group's key and state, in batches of at most `batch_size` rows.
    fn emit(&mut self) -> Result<()> {
        if self.groups.len() == 0 {
            return Ok(());
        }
        // Dictionary keys leave as the dictionary type the final stage expects.
        let keys = cast(&self.groups.take(), self.schema.field(0).data_type())?;
        let mut columns = vec![keys];
        for acc in &mut self.accumulators {
            columns.extend(acc.state(EmitTo::All)?);
        }
        let all = RecordBatch::try_new(Arc::clone(&self.schema), columns)?;
        let mut offset = 0;
        while offset < all.num_rows() {
            let len = self.batch_size.min(all.num_rows() - offset);
            self.ready.push_back(all.slice(offset, len));
            offset += len;
        }
        // Emitting only ever shrinks what the groups hold.
        self.reservation.resize(self.held());
        Ok(())
    }
}
