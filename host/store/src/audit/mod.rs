//! The one audit writer.
//!
//! Handlers describe what happened as an [`Event`]; [`AuditWriter::write`] stamps it with the
//! caller's context, applies the truncation rules, and queues it. A background task stores
//! queued rows in batches (group commit: what queued in the [`GATHER`] after the first row),
//! so a request never waits on an audit insert. A failed insert is retried for about eight
//! seconds (the queue waits meanwhile); a batch that still fails is stored row by row, a
//! row the store still refuses is logged in full, and none of it changes a response.
//! [`AuditWriter::flush`] waits until everything queued so far is stored, cutting a gather
//! short rather than waiting it out: shutdown calls it,
//! and so does every read of the audit log through the internal driver, so a caller reading
//! `svc_audit` sees its own earlier actions (read-your-writes).
//!
//! Observability reads (an admin paging the activity log, re-opening a transcript) would
//! otherwise audit themselves on every refresh; [`AuditWriter::write_read`] is the one
//! suppression mechanism: the same actor, action, resource and filter within
//! [`READ_SUPPRESSION`] writes one row. The memory of recent reads is bounded and per
//! process, so behind several replicas each may write one row per window (a spam guard, not
//! a security control).

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};
use svc_core::clock::{new_id, now};
use svc_trace::Instrument as _;
use tokio::sync::{mpsc, oneshot, Notify};

use crate::Store;

mod actions;
mod retention;
mod rollup;
mod rows;
mod stats;
mod timeline;
mod timings;
pub use actions::{ActionInfo, ACTIONS};
pub use retention::PRUNE_BATCH;
pub use rollup::{RollupRun, GRACE as ROLLUP_GRACE};
pub use rows::AuditRecord;
pub use stats::{AuditFacets, AuditKpis, FacetCount, UserCount, FACET_LIMIT};
pub use timeline::{AuditCursor, AuditFilter, AuditPage, AuditRow, ResultFilter, SYSTEM_SOURCE};
pub use timings::ActionTiming;

/// The store table audit rows are written to.
pub const TABLE: &str = "audit_log";
/// Longest `resource` kept (spec "Limits").
pub const MAX_RESOURCE_CHARS: usize = 256;
/// Longest error message kept in `params.error`.
pub const MAX_ERROR_CHARS: usize = 200;
/// Rows queued before writers wait for room.
const QUEUE_CAPACITY: usize = 100_000;
/// Most rows stored in one transaction.
const MAX_BATCH: usize = 5_000;
/// How long the writer sleeps after the first row of a batch arrives, before it takes
/// everything queued. Each commit writes every page the batch touched (the table's and its
/// indices') to the WAL, and each statement is a round trip to the driver's thread: without
/// a wait a busy server committed a few rows at a time, and the audit insert was about a
/// third of a cached sample's CPU. The writer sleeps the window out instead of receiving
/// during it: woken for every row that arrived, it measured slower than no wait at all.
/// Sleeping it out measured faster than no wait (cached sample, two alternating runs: c=8
/// 33.0 k and 30.7 k against 30.4 k and 26.3 k req/s; c=64 40.0 k and 40.5 k against 39.0 k
/// and 33.8 k).
const GATHER: Duration = Duration::from_millis(10);
/// Waits before each retry of a batch the store refused; after the last, its rows are logged.
const RETRY_DELAYS: [Duration; 4] = [
    Duration::from_millis(100),
    Duration::from_millis(500),
    Duration::from_secs(2),
    Duration::from_secs(5),
];
/// How long a repeated observability read writes no new row (reference §2.4).
pub const READ_SUPPRESSION: Duration = Duration::from_secs(60);
/// Recent reads remembered; past this, expired ones are dropped, then the oldest.
const MAX_REMEMBERED_READS: usize = 10_000;

/// What kind of client caused an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientKind {
    /// Authenticated with a personal access token.
    Cli,
    /// A browser session (cookie).
    Web,
    /// A bearer session token.
    Api,
    /// The in-process scheduler's identity.
    Scheduler,
    /// `svc-server` administration commands run in a shell on the server.
    Console,
    /// An agent's Model Context Protocol call (`/mcp`, or `svc mcp` forwarding to it).
    Mcp,
}

impl ClientKind {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cli => "cli",
            Self::Web => "web",
            Self::Api => "api",
            Self::Scheduler => "scheduler",
            Self::Console => "console",
            Self::Mcp => "mcp",
        }
    }
}

/// Who did something, and through which request.
#[derive(Debug, Clone)]
pub struct Actor {
    /// The acting user, when known.
    pub user_id: Option<String>,
    /// How they reached us.
    pub client_kind: ClientKind,
    /// Their address.
    pub client_ip: Option<String>,
    /// The request id, reused as the correlation id.
    pub correlation_id: Option<String>,
    /// When the request was authenticated: a row written without its own timing records
    /// the time since then as `duration_ms`, so every request's row has one.
    pub started: Option<Instant>,
}

impl Actor {
    /// An anonymous caller (for example a failed login) identified only by its request.
    pub fn anonymous(client_ip: Option<String>, correlation_id: Option<String>) -> Self {
        Self {
            user_id: None,
            client_kind: ClientKind::Api,
            client_ip,
            correlation_id,
            started: Some(Instant::now()),
        }
    }

    /// The in-process scheduler.
    pub fn scheduler() -> Self {
        Self {
            user_id: None,
            client_kind: ClientKind::Scheduler,
            client_ip: None,
            correlation_id: None,
            started: None,
        }
    }

    /// A shell command on the server, with a fresh correlation id: every audit row one
    /// invocation writes shares it, as the rows of one HTTP request share its request id.
    pub fn console() -> Self {
        Self {
            user_id: None,
            client_kind: ClientKind::Console,
            client_ip: None,
            correlation_id: Some(format!("console-{}", new_id())),
            started: None,
        }
    }
}

/// Something worth an audit row.
#[derive(Debug, Clone)]
pub struct Event {
    action: String,
    resource: Option<String>,
    params: Map<String, Value>,
    params_before: Option<Value>,
    status: Option<u16>,
    duration_ms: Option<i64>,
}

impl Event {
    /// A successful event with this action name.
    pub fn new(action: impl Into<String>) -> Self {
        Self {
            action: action.into(),
            resource: None,
            params: Map::new(),
            params_before: None,
            status: None,
            duration_ms: None,
        }
    }

    /// The target, e.g. `table:orders`.
    pub fn resource(mut self, resource: impl Into<String>) -> Self {
        self.resource = Some(resource.into());
        self
    }

    /// Adds one parameter.
    pub fn param(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.params.insert(key.to_string(), value.into());
        self
    }

    /// The state before a change.
    pub fn before(mut self, before: Value) -> Self {
        self.params_before = Some(before);
        self
    }

    /// Marks the event failed with an HTTP status; the message lands in `params.error`.
    pub fn failed(mut self, status: u16, message: &str) -> Self {
        self.status = Some(status);
        self.params.insert(
            "error".into(),
            Value::String(message.chars().take(MAX_ERROR_CHARS).collect()),
        );
        self
    }

    /// Marks the event with how an operation ended: on success `on_ok` adds what it learned
    /// (counts, ids); on failure the error's status and text ([`Event::failed`]).
    pub fn outcome<T, E: AuditedError>(
        self,
        result: &Result<T, E>,
        on_ok: impl FnOnce(Self, &T) -> Self,
    ) -> Self {
        match result {
            Ok(v) => on_ok(self, v),
            Err(e) => self.failed(e.status(), &e.to_string()),
        }
    }

    /// Records the time taken since `started`.
    pub fn timed(mut self, started: Instant) -> Self {
        let ms = i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX);
        self.duration_ms = Some(ms);
        self.params.insert("duration_ms".into(), ms.into());
        self
    }

    /// What makes two reads "the same": actor, action, resource and parameters (in key
    /// order, whatever order they were added in).
    fn read_key(&self, actor: &Actor) -> u64 {
        let params: BTreeMap<&String, String> = self
            .params
            .iter()
            .filter(|(k, _)| k.as_str() != "duration_ms")
            .map(|(k, v)| (k, v.to_string()))
            .collect();
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (&actor.user_id, &self.action, &self.resource, params).hash(&mut h);
        h.finish()
    }

    fn into_record(self, actor: &Actor) -> AuditRecord {
        AuditRecord {
            id: new_id(),
            timestamp: now(),
            user_id: actor.user_id.clone(),
            action: self.action,
            resource: self.resource.map(truncate_resource),
            params: (!self.params.is_empty()).then_some(Value::Object(self.params)),
            params_before: self.params_before,
            client_ip: actor.client_ip.clone(),
            client_kind: Some(actor.client_kind.as_str().to_string()),
            correlation_id: actor.correlation_id.clone(),
            result: match self.status {
                None => "success".to_string(),
                Some(s) => format!("error.{s}"),
            },
            duration_ms: self.duration_ms.or_else(|| {
                actor
                    .started
                    .map(|t| i64::try_from(t.elapsed().as_millis()).unwrap_or(i64::MAX))
            }),
        }
    }
}

/// `resource` cut to [`MAX_RESOURCE_CHARS`] characters; kept as it is when its length in
/// bytes, which a character count never exceeds, is within the limit (every request's row).
fn truncate_resource(resource: String) -> String {
    if resource.len() <= MAX_RESOURCE_CHARS {
        return resource;
    }
    resource.chars().take(MAX_RESOURCE_CHARS).collect()
}

/// A failure as an audit row records it: the status the client saw and the text.
pub trait AuditedError: std::fmt::Display {
    /// The HTTP status the failure was (or would be) answered with.
    fn status(&self) -> u16;
}

impl AuditedError for svc_core::Error {
    fn status(&self) -> u16 {
        svc_core::Error::status(self)
    }
}

/// The record [`AuditWriter::write`] would queue; lets the benchmark's naive path store
/// exactly the same rows.
#[doc(hidden)]
pub fn record_for_bench(actor: &Actor, event: Event) -> AuditRecord {
    event.into_record(actor)
}

enum Msg {
    Record(Box<AuditRecord>),
    Flush(oneshot::Sender<()>),
}

/// Queues audit rows and stores them in batches off the request path.
#[derive(Debug, Clone)]
pub struct AuditWriter {
    tx: mpsc::Sender<Msg>,
    /// Ends the writer's [`GATHER`] sleep: a flush's caller is waiting.
    flushing: Arc<Notify>,
    reads: Arc<Mutex<HashMap<u64, Instant>>>,
}

impl std::fmt::Debug for Msg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Msg")
    }
}

impl AuditWriter {
    /// Starts the background writer on the current Tokio runtime.
    pub fn start(store: Store) -> Arc<Self> {
        let (tx, rx) = mpsc::channel(QUEUE_CAPACITY);
        let flushing = Arc::new(Notify::new());
        tokio::spawn(run(store, rx, flushing.clone()));
        Arc::new(Self {
            tx,
            flushing,
            reads: Arc::default(),
        })
    }

    /// Audits an observability read unless the same actor made the same read (action,
    /// resource and parameters; leave paging out of the parameters) within
    /// [`READ_SUPPRESSION`]. Returns whether a row was queued. The read is remembered
    /// before the row is queued, so a failed insert is not retried by the next refresh.
    pub async fn write_read(&self, actor: &Actor, event: Event) -> bool {
        let key = event.read_key(actor);
        let now = Instant::now();
        {
            let mut reads = self.reads.lock().expect("audit read memory");
            if reads
                .get(&key)
                .is_some_and(|at| now.duration_since(*at) < READ_SUPPRESSION)
            {
                return false;
            }
            if reads.len() >= MAX_REMEMBERED_READS {
                reads.retain(|_, at| now.duration_since(*at) < READ_SUPPRESSION);
                if reads.len() >= MAX_REMEMBERED_READS {
                    if let Some(oldest) = reads.iter().min_by_key(|(_, at)| **at).map(|(k, _)| *k) {
                        reads.remove(&oldest);
                    }
                }
            }
            reads.insert(key, now);
        }
        self.write(actor, event).await;
        true
    }

    /// Queues an event. Returns at once unless the queue is full, in which case it waits for
    /// room (backpressure) rather than drop the row.
    pub async fn write(&self, actor: &Actor, event: Event) {
        self.enqueue(event.into_record(actor)).await;
    }

    /// The one audit wrap for an operation that has ended: `event` with its outcome
    /// ([`Event::outcome`]) and the time since `started`, queued like [`AuditWriter::write`].
    pub async fn write_outcome<T, E: AuditedError>(
        &self,
        actor: &Actor,
        event: Event,
        started: Instant,
        result: &Result<T, E>,
        on_ok: impl FnOnce(Event, &T) -> Event,
    ) {
        self.write(actor, event.outcome(result, on_ok).timed(started))
            .await;
    }

    /// [`AuditWriter::write_read`] for a read that has ended: `event` with its outcome (no
    /// extra parameters on success) and the time since `started`.
    pub async fn write_read_outcome<T, E: AuditedError>(
        &self,
        actor: &Actor,
        event: Event,
        started: Instant,
        result: &Result<T, E>,
    ) -> bool {
        self.write_read(actor, event.outcome(result, |e, _| e).timed(started))
            .await
    }

    /// Queues a ready-made record: at once while the queue has room, else after waiting
    /// for room (backpressure) rather than drop the row.
    pub async fn enqueue(&self, record: AuditRecord) {
        let span = svc_trace::Span::child("audit.write");
        // Every audited request comes through here: the common case does not await, and
        // the wait for room is boxed, so no send future is held (and copied) inline by the
        // futures of every request above this one.
        let msg = match self.tx.try_send(Msg::Record(Box::new(record))) {
            Ok(()) => return,
            Err(mpsc::error::TrySendError::Full(msg)) => msg,
            Err(mpsc::error::TrySendError::Closed(msg)) => return lost(msg),
        };
        if let Err(mpsc::error::SendError(msg)) = Box::pin(self.tx.send(msg).in_span(span)).await {
            lost(msg);
        }
    }

    /// Waits until every event queued before this call is stored (or logged as lost).
    pub async fn flush(&self) {
        let (done, wait) = oneshot::channel();
        if self.tx.send(Msg::Flush(done)).await.is_ok() {
            self.flushing.notify_one();
            let _ = wait.await;
        }
    }
}

/// A message the writer task will never take (it is gone: the runtime is shutting down).
/// A record is kept in the log.
fn lost(msg: Msg) {
    if let Msg::Record(record) = msg {
        let record = serde_json::to_string(&record).unwrap_or_default();
        tracing::error!(%record, "audit writer stopped; record not stored");
    }
}

async fn run(store: Store, mut rx: mpsc::Receiver<Msg>, flushing: Arc<Notify>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    let mut waiters = Vec::new();
    while let Some(first) = rx.recv().await {
        if matches!(first, Msg::Record(_)) {
            // A permit left by a flush already taken ends one later sleep early: harmless.
            tokio::select! {
                () = tokio::time::sleep(GATHER) => {}
                () = flushing.notified() => {}
            }
        }
        let mut next = Some(first);
        while let Some(msg) = next.take() {
            match msg {
                Msg::Record(r) => batch.push(*r),
                Msg::Flush(w) => waiters.push(w),
            }
            if batch.len() < MAX_BATCH {
                next = rx.try_recv().ok();
            }
        }
        if !batch.is_empty() {
            svc_metrics::audit::queue_depth(rx.len() + batch.len());
            let began = Instant::now();
            let mut stored = store.insert_audit_batch(&batch).await;
            // A store that is briefly unavailable (a lock held past the busy timeout, a
            // failover) must not cost audit rows: retry, holding the queue meanwhile.
            for delay in RETRY_DELAYS {
                let Err(err) = &stored else { break };
                tracing::warn!(error = %err, rows = batch.len(), retry_in = ?delay, "audit write failed; retrying");
                tokio::time::sleep(delay).await;
                stored = store.insert_audit_batch(&batch).await;
            }
            let stored = match stored {
                Ok(()) => batch.len(),
                Err(_) => store_one_by_one(&store, &batch).await,
            };
            svc_metrics::audit::batch(stored, batch.len() - stored, began.elapsed());
            batch.clear();
            svc_metrics::audit::queue_depth(rx.len());
        }
        for w in waiters.drain(..) {
            let _ = w.send(());
        }
    }
}

/// Stores a batch the store refused as a whole row by row, so that one row it cannot take
/// does not cost the others theirs; what still fails is logged, the row with it. After
/// [`GIVE_UP_AFTER`] failures in a row the store is taken to be refusing everything, and the
/// rest is logged without more attempts (each could wait out a busy timeout). Returns how
/// many rows it stored.
async fn store_one_by_one(store: &Store, batch: &[AuditRecord]) -> usize {
    let (mut stored, mut failed_in_a_row) = (0, 0);
    for r in batch {
        let err = if failed_in_a_row < GIVE_UP_AFTER {
            match store.insert_audit_batch(std::slice::from_ref(r)).await {
                Ok(()) => {
                    stored += 1;
                    failed_in_a_row = 0;
                    continue;
                }
                Err(err) => err.to_string(),
            }
        } else {
            "not tried: the store refused the rows before it".to_string()
        };
        failed_in_a_row += 1;
        let record = serde_json::to_string(r).unwrap_or_default();
        tracing::error!(error = %err, %record, "audit write failed");
    }
    stored
}

/// Failed single-row inserts in a row after which [`store_one_by_one`] stops trying.
const GIVE_UP_AFTER: usize = 3;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing;
    use serde_json::json;

    #[test]
    fn resources_are_cut_at_a_character_count_not_a_byte_count() {
        let fits = "é".repeat(MAX_RESOURCE_CHARS);
        assert_eq!(truncate_resource(fits.clone()), fits);
        let long = format!("{fits}é");
        assert_eq!(truncate_resource(long), fits);
        let ascii = "x".repeat(MAX_RESOURCE_CHARS + 1);
        assert_eq!(truncate_resource(ascii).len(), MAX_RESOURCE_CHARS);
        assert_eq!(truncate_resource("table:t".into()), "table:t");
    }

    /// Makes the store refuse audit inserts (and take them again): the table goes away.
    async fn rename_table(store: &Store, from: &str, to: &str) {
        sqlx::query(&format!("ALTER TABLE {from} RENAME TO {to}"))
            .execute(store.pool())
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn a_batch_the_store_refuses_for_a_moment_is_retried_not_lost() {
        let (store, _dir) = testing::sqlite().await;
        let writer = AuditWriter::start(store.clone());
        rename_table(&store, "audit_log", "audit_log_away").await;
        writer
            .write(&Actor::console(), Event::new("test.retried"))
            .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        rename_table(&store, "audit_log_away", "audit_log").await;
        writer.flush().await;
        let rows = store.audit_by_action("test.retried", 10).await.unwrap();
        assert_eq!(
            rows.len(),
            1,
            "the row arrives once the store takes it again"
        );
    }

    /// A NUL in a caller's name (a request for `a%00.jsonl`) is stored as a visible
    /// symbol: PostgreSQL refused the row, and with it every row batched beside it.
    #[tokio::test]
    async fn a_nul_from_a_caller_is_stored_as_a_symbol_and_costs_no_row() {
        for (store, _dir) in testing::all_backends().await {
            let writer = AuditWriter::start(store.clone());
            let actor = Actor::console();
            writer
                .write(
                    &actor,
                    Event::new("test.nul")
                        .resource("a\0.jsonl")
                        .param("file", "x\0y")
                        .param("k\0", json!(["\0"]))
                        .before(json!({"name": "b\0"})),
                )
                .await;
            writer.write(&actor, Event::new("test.beside")).await;
            writer.flush().await;
            let nul = store.audit_by_action("test.nul", 10).await.unwrap();
            assert_eq!(nul.len(), 1, "{:?}", store.backend());
            assert_eq!(nul[0].resource.as_deref(), Some("a\u{2400}.jsonl"));
            let params = nul[0].params.as_ref().unwrap();
            assert_eq!(params["file"], "x\u{2400}y");
            assert_eq!(params["k\u{2400}"], json!(["\u{2400}"]));
            assert_eq!(nul[0].params_before, Some(json!({"name": "b\u{2400}"})));
            let beside = store.audit_by_action("test.beside", 10).await.unwrap();
            assert_eq!(beside.len(), 1);
        }
    }

    /// A row the store refuses whatever the retries costs only itself: the batch it came
    /// in is stored row by row.
    #[tokio::test]
    async fn one_row_the_store_refuses_costs_only_that_row() {
        let (store, _dir) = testing::sqlite().await;
        sqlx::query(
            "CREATE TRIGGER refuse_one BEFORE INSERT ON audit_log \
             WHEN NEW.action = 'test.refused' BEGIN SELECT RAISE(ABORT, 'refused'); END",
        )
        .execute(store.pool())
        .await
        .unwrap();
        let writer = AuditWriter::start(store.clone());
        let actor = Actor::console();
        writer.write(&actor, Event::new("test.before")).await;
        writer.write(&actor, Event::new("test.refused")).await;
        writer.write(&actor, Event::new("test.after")).await;
        writer.flush().await;
        for (action, want) in [("test.before", 1), ("test.refused", 0), ("test.after", 1)] {
            let rows = store.audit_by_action(action, 10).await.unwrap();
            assert_eq!(rows.len(), want, "{action}");
        }
    }

    #[tokio::test]
    async fn batches_are_stored_with_truncation_and_context() {
        let (store, _dir) = testing::sqlite().await;
        let writer = AuditWriter::start(store.clone());
        let actor = Actor {
            user_id: Some("u1".into()),
            client_kind: ClientKind::Cli,
            client_ip: Some("127.0.0.1".into()),
            correlation_id: Some("req-1".into()),
            started: None,
        };
        for i in 0..250 {
            writer
                .write(
                    &actor,
                    Event::new("test.event")
                        .resource("x".repeat(300))
                        .param("i", i),
                )
                .await;
        }
        writer
            .write(
                &actor,
                Event::new("test.failed").failed(404, &"e".repeat(500)),
            )
            .await;
        writer.flush().await;
        let rows = store.audit_by_action("test.event", 1000).await.unwrap();
        assert_eq!(rows.len(), 250);
        assert!(rows
            .iter()
            .all(|r| r.resource.as_ref().unwrap().chars().count() == MAX_RESOURCE_CHARS));
        assert!(rows
            .iter()
            .all(|r| r.client_kind.as_deref() == Some("cli") && r.result == "success"));
        let failed = &store.audit_by_action("test.failed", 10).await.unwrap()[0];
        assert_eq!(failed.result, "error.404");
        assert_eq!(failed.correlation_id.as_deref(), Some("req-1"));
        let msg = failed.params.as_ref().unwrap()["error"].as_str().unwrap();
        assert_eq!(msg.chars().count(), MAX_ERROR_CHARS);
    }

    #[tokio::test]
    async fn a_repeated_read_is_audited_once_per_window_and_a_different_one_again() {
        let (store, _dir) = testing::sqlite().await;
        let writer = AuditWriter::start(store.clone());
        let (alice, bob) = (
            Actor::anonymous(None, None),
            Actor {
                user_id: Some("bob".into()),
                ..Actor::anonymous(None, None)
            },
        );
        let read = |window: &str| {
            Event::new("usage.summary")
                .resource("telemetry")
                .param("window", window)
                .param("a", 1)
        };
        assert!(writer.write_read(&alice, read("7d")).await);
        assert!(!writer.write_read(&alice, read("7d")).await);
        // The same parameters added in another order are the same read.
        let reordered = Event::new("usage.summary")
            .resource("telemetry")
            .param("a", 1)
            .param("window", "7d");
        assert!(!writer.write_read(&alice, reordered).await);
        assert!(writer.write_read(&alice, read("30d")).await);
        assert!(writer.write_read(&bob, read("7d")).await);
        writer.flush().await;
        let n: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM audit_log WHERE action = 'usage.summary'")
                .fetch_one(store.pool())
                .await
                .unwrap();
        assert_eq!(n, 3);
    }

    #[tokio::test]
    async fn a_batch_refused_past_every_retry_is_lost_alone_and_the_writer_keeps_going() {
        let (store, _dir) = testing::sqlite().await;
        let writer = AuditWriter::start(store.clone());
        rename_table(&store, "audit_log", "audit_log_away").await;
        writer
            .write(&Actor::console(), Event::new("lost.event"))
            .await;
        writer.flush().await;
        rename_table(&store, "audit_log_away", "audit_log").await;
        writer
            .write(&Actor::console(), Event::new("kept.event"))
            .await;
        writer.flush().await;
        assert!(store
            .audit_by_action("lost.event", 10)
            .await
            .unwrap()
            .is_empty());
        assert_eq!(
            store.audit_by_action("kept.event", 10).await.unwrap().len(),
            1
        );
    }
}
