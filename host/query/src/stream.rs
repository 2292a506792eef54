//! A running query's rows, as the response body pulls them.
//!
//! The plan already stops one row past the caller's limit; this stream hands out at most
//! `limit` rows, learns from that one extra row whether the result was cut, enforces the
//! query's deadline on every pull, and reads the bytes the scans touched once the plan is
//! done. Dropping it (a client that went away) drops the DataFusion stream, which cancels
//! the query.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use serde_json::json;
use svc_core::{Error, ErrorKind, Result};
use svc_plugin_api::arrow::datatypes::SchemaRef;
use svc_plugin_api::datafusion::physical_plan::{ExecutionPlan, SendableRecordBatchStream};
use svc_plugin_api::RecordBatch;
use tokio::time::Instant;

use super::engine::{engine_error, Route};

/// The rows of one query, at most `limit` of them.
pub struct RowStream {
    schema: SchemaRef,
    plan: Arc<dyn ExecutionPlan>,
    inner: Option<SendableRecordBatchStream>,
    ready: VecDeque<RecordBatch>,
    ready_bytes: usize,
    limit: usize,
    accepted: usize,
    truncated: Option<bool>,
    bytes_scanned: Option<u64>,
    deadline: Instant,
    timeout: Duration,
    route: Route,
    started: std::time::Instant,
}

impl std::fmt::Debug for RowStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RowStream")
            .field("limit", &self.limit)
            .field("accepted", &self.accepted)
            .field("truncated", &self.truncated)
            .finish()
    }
}

// A query's metrics are recorded once, when its stream goes: read to the end, stopped by an
// error, or dropped by a client that left. All three are a query that ended.
impl Drop for RowStream {
    fn drop(&mut self) {
        svc_metrics::query::finished(
            self.route.label(),
            self.started.elapsed(),
            self.accepted,
            self.bytes_scanned,
        );
    }
}

impl RowStream {
    pub(super) fn new(
        plan: Arc<dyn ExecutionPlan>,
        inner: SendableRecordBatchStream,
        limit: usize,
        deadline: Instant,
        timeout: Duration,
        route: Route,
        started: std::time::Instant,
    ) -> Self {
        Self {
            schema: inner.schema(),
            plan,
            inner: Some(inner),
            ready: VecDeque::new(),
            ready_bytes: 0,
            limit,
            accepted: 0,
            truncated: None,
            bytes_scanned: None,
            deadline,
            timeout,
            route,
            started,
        }
    }

    /// The result's columns.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// The result's column names, in order.
    pub fn column_names(&self) -> Vec<String> {
        self.schema
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect()
    }

    /// Every batch left, for a result its limit keeps small enough to hold at once.
    pub async fn collect(&mut self) -> Result<Vec<RecordBatch>> {
        let mut batches = Vec::new();
        while let Some(batch) = self.next().await? {
            batches.push(batch);
        }
        Ok(batches)
    }

    /// Reads ahead until it is known whether the result was cut, or until `max_bytes` of
    /// rows are held. Always reads at least once, so an error in the first batch is still
    /// an error response rather than a broken body.
    pub async fn look_ahead(&mut self, max_bytes: usize) -> Result<()> {
        loop {
            self.pull().await?;
            if self.truncated.is_some() || self.ready_bytes >= max_bytes {
                return Ok(());
            }
        }
    }

    /// Whether rows past the limit existed; None until the stream has seen its end or its
    /// limit.
    pub fn truncated(&self) -> Option<bool> {
        self.truncated
    }

    /// Rows handed out or held so far.
    pub fn rows(&self) -> usize {
        self.accepted
    }

    /// Bytes the plan's scans read, once the plan is done, when its sources report it.
    pub fn bytes_scanned(&self) -> Option<u64> {
        self.bytes_scanned
    }

    /// The next batch; None at the end.
    pub async fn next(&mut self) -> Result<Option<RecordBatch>> {
        loop {
            if let Some(batch) = self.ready.pop_front() {
                self.ready_bytes -= batch.get_array_memory_size();
                return Ok(Some(batch));
            }
            if self.truncated.is_some() {
                return Ok(None);
            }
            self.pull().await?;
        }
    }

    async fn pull(&mut self) -> Result<()> {
        let Some(inner) = self.inner.as_mut() else {
            return Ok(());
        };
        let next = tokio::time::timeout_at(self.deadline, inner.next())
            .await
            .map_err(|_| timeout_error(self.timeout))?;
        match next {
            None => self.done(false),
            Some(Err(e)) => {
                self.inner = None;
                return Err(engine_error(e));
            }
            Some(Ok(batch)) => {
                let room = self.limit - self.accepted;
                if batch.num_rows() > room {
                    self.hold(batch.slice(0, room));
                    self.done(true);
                } else {
                    self.hold(batch);
                }
            }
        }
        Ok(())
    }

    fn hold(&mut self, batch: RecordBatch) {
        if batch.num_rows() == 0 {
            return;
        }
        self.accepted += batch.num_rows();
        self.ready_bytes += batch.get_array_memory_size();
        self.ready.push_back(batch);
    }

    /// Stops the plan (on a cut, the rest is never computed) and reads its scan metrics.
    fn done(&mut self, truncated: bool) {
        self.truncated = Some(truncated);
        self.inner = None;
        self.bytes_scanned = bytes_scanned(self.plan.as_ref());
    }
}

/// The `bytes_scanned` metric summed over the plan; None when no node reports it.
fn bytes_scanned(plan: &dyn ExecutionPlan) -> Option<u64> {
    let own = plan
        .metrics()
        .and_then(|m| m.sum_by_name("bytes_scanned"))
        .map(|v| v.as_usize() as u64);
    plan.children()
        .into_iter()
        .filter_map(|c| bytes_scanned(c.as_ref()))
        .chain(own)
        .reduce(|a, b| a + b)
}

/// The 504 a query past its deadline gets.
pub(super) fn timeout_error(timeout: Duration) -> Error {
    Error::coded(
        ErrorKind::Timeout,
        "query_timeout",
        format!(
            "The query ran longer than {} s and was stopped; narrow it with WHERE or LIMIT",
            timeout.as_secs()
        ),
        json!({ "timeout_seconds": timeout.as_secs() }),
    )
}
