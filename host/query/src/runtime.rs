//! The query runtime: DataFusion's work runs on threads of its own.
//!
//! DataFusion's operators are CPU-bound between their awaits. On the HTTP runtime a heavy
//! query would occupy every worker, and with them the timers that enforce its own deadline,
//! the health check and every other caller's requests. Plans therefore execute on a separate
//! multi-threaded runtime and hand their batches to the request through a small channel; the
//! operating system shares the cores between the two, so the server keeps answering while a
//! query runs.
//!
//! Parsing and planning run here too, on threads with a large stack: a statement's syntax
//! tree, its plan and their drops recurse as deep as the statement nests, and a hostile
//! statement nests as deep as the size limit lets it. The depth limits of
//! [`super::statement`] and this stack are tested together.

use std::sync::{Arc, OnceLock};

use futures::{FutureExt, StreamExt};
use svc_plugin_api::datafusion::common::tree_node::{Transformed, TreeNode};
use svc_plugin_api::datafusion::error::DataFusionError;
use svc_plugin_api::datafusion::execution::TaskContext;
use svc_plugin_api::datafusion::physical_plan::coop::CooperativeExec;
use svc_plugin_api::datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use svc_plugin_api::datafusion::physical_plan::{
    execute_stream, ChildrenPropertiesMode, ExecutionPlan, ReplaceChildrenOptions,
    SendableRecordBatchStream,
};
use svc_trace::Instrument as _;
use tokio::runtime::{Builder, Handle, Runtime};

/// Batches computed ahead of the request's reading: enough to overlap encoding and sending
/// with the next batch's work, few enough that a slow client holds little memory.
const AHEAD: usize = 2;

/// Stack of each query thread. Only the pages a deep statement touches are ever committed,
/// so the size costs address space, not memory.
pub const STACK_BYTES: usize = 256 << 20;

/// The process's query runtime, started on first use; it lives as long as the process.
fn handle() -> &'static Handle {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            Builder::new_multi_thread()
                .thread_name("svc-query")
                .thread_stack_size(STACK_BYTES)
                .enable_all()
                .build()
                .expect("the query runtime starts")
        })
        .handle()
}

/// Runs `work` (parsing, planning) on the query runtime and waits for it.
///
/// Dropping the returned future (a deadline, a client that went away) aborts the work at its
/// next await; a panic in it is an internal error.
pub async fn run<T: Send + 'static>(
    work: impl std::future::Future<Output = T> + Send + 'static,
) -> Result<T, DataFusionError> {
    struct AbortOnDrop(tokio::task::AbortHandle);
    impl Drop for AbortOnDrop {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
    let task = handle().spawn(svc_trace::Tagged::current(work.in_current()));
    let _abort = AbortOnDrop(task.abort_handle());
    task.await.map_err(|e| {
        DataFusionError::Internal(if e.is_panic() {
            "the query's planning panicked".to_owned()
        } else {
            "the query's planning was cancelled".to_owned()
        })
    })
}

/// Executes `plan` on the query runtime; the returned stream yields its batches.
///
/// Dropping the stream (a finished response, a deadline, a client that went away) drops the
/// plan's own stream at its next yield, which cancels the tasks DataFusion spawned for it;
/// [`cooperative`] makes sure that yield comes. A panic in the plan ends the stream with an
/// internal error rather than a silently short result.
pub fn execute(
    plan: Arc<dyn ExecutionPlan>,
    context: Arc<TaskContext>,
) -> SendableRecordBatchStream {
    let plan = cooperative(plan);
    let schema = plan.schema();
    let (tx, mut rx) = tokio::sync::mpsc::channel(AHEAD);
    let panic_tx = tx.clone();
    let watch = super::watchdog::watch_query(context.memory_pool().clone());
    let work = async move {
        let mut stream = match execute_stream(plan, context) {
            Ok(stream) => stream,
            Err(e) => {
                let _ = tx.send(Err(e)).await;
                return;
            }
        };
        loop {
            let next = tokio::select! {
                () = tx.closed() => return,
                () = watch.stop.notified() => {
                    drop(stream);
                    let _ = tx
                        .send(Err(DataFusionError::ResourcesExhausted(super::watchdog::message())))
                        .await;
                    return;
                }
                next = stream.next() => next,
            };
            let Some(item) = next else { return };
            let failed = item.is_err();
            if tx.send(item).await.is_err() || failed {
                return;
            }
        }
    };
    // The span lasts as long as the plan runs: in a trace, the execution's own time. The
    // task also carries the caller's log tag, so a line logged on the query runtime names
    // its request.
    let tag = svc_trace::LogTag::current();
    let execute = svc_trace::Span::child("engine.execute");
    let task = async move {
        if let Err(payload) = std::panic::AssertUnwindSafe(work).catch_unwind().await {
            let _ = panic_tx.send(Err(panic_error(payload.as_ref()))).await;
        }
    };
    handle().spawn(svc_trace::Tagged::new(task.in_span(execute), tag));
    let batches = futures::stream::poll_fn(move |cx| rx.poll_recv(cx));
    Box::pin(RecordBatchStreamAdapter::new(schema, batches))
}

/// `plan` with every operator's input passed through a [`CooperativeExec`], so each batch
/// handed from one operator to the next spends a unit of tokio's task budget.
///
/// DataFusion only makes leaves and exchanges cooperative. That is not enough to cancel a
/// query: an operator that loops over its input until it has rows to return (a filter that
/// rejects everything above a cross join computed from batches already in memory) never
/// polls a leaf again and never returns `Pending`, so its task neither sees the deadline's
/// drop nor can be aborted — it burned a core for hours after the 504. With a budget on
/// every edge, such a loop returns `Pending` within 128 batches. What stays out of reach is
/// an operator's loop over data it already holds (a nested-loop join matching one probe
/// batch against its whole build side): that runs to the end of the batch, and the memory
/// pool bounds how large such a build side can grow.
pub fn cooperative(plan: Arc<dyn ExecutionPlan>) -> Arc<dyn ExecutionPlan> {
    let wrapped = plan.clone().transform_up(|node| {
        let children = node.children();
        if children.is_empty() || node.is::<CooperativeExec>() {
            return Ok(Transformed::no(node));
        }
        let inputs = children
            .into_iter()
            .map(|child| {
                if child.is::<CooperativeExec>() {
                    child.clone()
                } else {
                    Arc::new(CooperativeExec::new(child.clone())) as Arc<dyn ExecutionPlan>
                }
            })
            .collect();
        // The wrappers keep their inputs' properties, so the node's need no recomputing.
        node.replace_children(
            inputs,
            ReplaceChildrenOptions::new(ChildrenPropertiesMode::Keep),
        )
        .map(Transformed::yes)
    });
    // An operator that refuses new children keeps its plain inputs: slower to cancel, same result.
    wrapped.map(|t| t.data).unwrap_or(plan)
}

/// What a panic in a plan becomes. Arrow panics when an array would outgrow its offsets
/// (`offset overflow`, `capacity overflow`): a value the query blew up, which is the
/// query's size, not a bug; anything else is internal.
fn panic_error(payload: &(dyn std::any::Any + Send)) -> DataFusionError {
    let text = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    if text.contains("overflow") {
        DataFusionError::ResourcesExhausted(format!(
            "a result grew past what one column of one batch can hold ({text})"
        ))
    } else {
        DataFusionError::Internal("the query's execution panicked".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use futures::StreamExt;
    use svc_plugin_api::arrow::datatypes::DataType;
    use svc_plugin_api::datafusion::error::DataFusionError;
    use svc_plugin_api::datafusion::logical_expr::{create_udf, ColumnarValue, Volatility};
    use svc_plugin_api::datafusion::prelude::SessionContext;

    /// The plan of `sql` in a context with a `boom(x)` function that panics.
    async fn plan(sql: &str) -> (SessionContext, Arc<dyn super::ExecutionPlan>) {
        let ctx = SessionContext::new();
        ctx.register_udf(create_udf(
            "boom",
            vec![DataType::Int64],
            DataType::Int64,
            Volatility::Volatile,
            Arc::new(|_: &[ColumnarValue]| panic!("boom")),
        ));
        ctx.register_udf(create_udf(
            "overflow",
            vec![DataType::Int64],
            DataType::Int64,
            Volatility::Volatile,
            Arc::new(|_: &[ColumnarValue]| panic!("offset overflow")),
        ));
        let plan = ctx
            .sql(sql)
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        (ctx, plan)
    }

    #[tokio::test]
    async fn batches_arrive_in_full_and_a_panic_is_an_error_not_a_short_result() {
        let (ctx, ok) = plan("SELECT * FROM generate_series(1, 100000) AS t(x)").await;
        let mut stream = super::execute(ok, ctx.task_ctx());
        let mut rows = 0;
        while let Some(batch) = stream.next().await {
            rows += batch.unwrap().num_rows();
        }
        assert_eq!(rows, 100_000);

        let (ctx, panics) = plan("SELECT boom(x) FROM generate_series(1, 10) AS t(x)").await;
        let mut stream = super::execute(panics, ctx.task_ctx());
        match stream.next().await {
            Some(Err(DataFusionError::Internal(msg))) => assert!(msg.contains("panicked"), "{msg}"),
            other => panic!("expected an internal error, got {other:?}"),
        }
        assert!(stream.next().await.is_none());

        // An array outgrowing its offsets is the query's size, not a bug.
        let (ctx, overflows) = plan("SELECT overflow(x) FROM generate_series(1, 10) AS t(x)").await;
        let mut stream = super::execute(overflows, ctx.task_ctx());
        match stream.next().await {
            Some(Err(DataFusionError::ResourcesExhausted(msg))) => {
                assert!(msg.contains("offset overflow"), "{msg}")
            }
            other => panic!("expected resources exhausted, got {other:?}"),
        }
    }

    /// A cross join filtered by a condition nothing meets, dropped after a moment, stops
    /// computing: `tick` counts the rows the filter still evaluates. Without
    /// [`super::cooperative`] it ran on (about 3 · 10^11 rows).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dropped_stream_stops_an_operator_that_loops_over_its_input() {
        use std::sync::atomic::{AtomicU64, Ordering};
        use svc_plugin_api::arrow::array::{Array, Int64Array};

        static TICKS: AtomicU64 = AtomicU64::new(0);
        let ctx = SessionContext::new();
        ctx.register_udf(create_udf(
            "tick",
            vec![DataType::Int64],
            DataType::Int64,
            Volatility::Volatile,
            Arc::new(|args: &[ColumnarValue]| {
                let ColumnarValue::Array(a) = &args[0] else {
                    unreachable!("tick is called on columns")
                };
                TICKS.fetch_add(a.len() as u64, Ordering::Relaxed);
                Ok(ColumnarValue::Array(Arc::new(Int64Array::from(vec![
                    0;
                    a.len(
                    )
                ]))))
            }),
        ));
        let x = Int64Array::from_iter_values(0..200);
        let batch = svc_plugin_api::RecordBatch::try_from_iter([("x", Arc::new(x) as _)]).unwrap();
        ctx.register_batch("t", batch).unwrap();
        // The shape of a runaway query: a small build side, and a probe side that is a cross
        // join computed from memory, whose every row the filter rejects.
        let plan = ctx
            .sql(
                "SELECT count(*) FROM t a, t b, t c, t d, t e \
                 WHERE tick(a.x + b.x + c.x + d.x + e.x) = -1",
            )
            .await
            .unwrap()
            .create_physical_plan()
            .await
            .unwrap();
        // The plan runs on the query runtime whether or not the stream is polled.
        let stream = super::execute(plan, ctx.task_ctx());
        let started = std::time::Instant::now();
        while TICKS.load(Ordering::Relaxed) == 0 {
            assert!(started.elapsed().as_secs() < 60, "the filter never ran");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        drop(stream);
        let mut last = TICKS.load(Ordering::Relaxed);
        // Settled: no rows evaluated over a whole interval, within a few seconds.
        for _ in 0..50 {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            let now = TICKS.load(Ordering::Relaxed);
            if now == last {
                return;
            }
            last = now;
        }
        panic!("the query kept computing 10 s after its stream was dropped");
    }
}
