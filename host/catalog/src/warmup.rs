//! Re-warming the persistent metadata cache of remote tables.
//!
//! The catalog never calls a remote source; it reads what this module stored. A registry
//! change flushes a table and schedules a re-warm of that one row here, off the request path.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use futures::StreamExt;
use svc_plugin_api::ErrorKind;
use svc_store::Store;

use crate::caches::CacheHooks;
use crate::drivers::Drivers;

/// What a re-warm did, for logs and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rewarm {
    /// Fresh metadata was stored.
    Refreshed,
    /// Nothing to do: gone, not remote, or its driver keeps no remote metadata.
    Skipped,
    /// The source failed; the error was recorded on the row and earlier metadata kept.
    Failed(String),
}

/// Tables refreshed at once by a full refresh.
pub const DEFAULT_REFRESH_CONCURRENCY: usize = 4;

/// Where one row of a full refresh (the cache warmup) stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RowState {
    /// Not started.
    Pending,
    /// Being refreshed.
    Warming,
    /// Refreshed.
    Fresh,
    /// Nothing to refresh (no remote metadata for its source).
    Skipped,
    /// The source failed; earlier metadata kept.
    Error,
}

/// One row of a full refresh.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RowProgress {
    /// Registry id.
    pub table_id: String,
    /// Where it stands.
    pub state: RowState,
    /// The failure, for `error`.
    pub error: Option<String>,
}

/// The last (or current) full refresh.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct WarmupSnapshot {
    /// Whether one runs now.
    pub running: bool,
    /// When it started.
    pub started_at: Option<String>,
    /// When it finished.
    pub finished_at: Option<String>,
    /// Every row, in registry order.
    pub rows: Vec<RowProgress>,
}

/// What a full refresh reports as it goes (the warmup stream's events).
#[derive(Debug, Clone)]
pub enum WarmupEvent {
    /// It started over this many rows.
    Start(usize),
    /// A row changed state.
    Row(RowProgress),
    /// It finished.
    Complete {
        /// Rows refreshed.
        fresh: usize,
        /// Rows that failed.
        failed: usize,
    },
}

/// One numbered line of the warmup log. Ids only grow (across runs too), so a client that
/// reconnects with the last id it saw gets exactly the lines after it.
#[derive(Debug, Clone)]
pub struct LogLine {
    /// Its number.
    pub id: u64,
    /// When it was written (RFC 3339, microseconds).
    pub at: String,
    /// What happened.
    pub event: WarmupEvent,
}

/// Lines kept for replay: a run of 1,000 tables writes about 2,000.
const LOG_LINES: usize = 20_000;

#[derive(Debug, Default)]
struct Log {
    last_id: u64,
    /// The current (or last) run's lines, oldest first.
    lines: std::collections::VecDeque<LogLine>,
}

#[derive(Debug)]
struct Progress {
    snapshot: std::sync::Mutex<WarmupSnapshot>,
    log: std::sync::Mutex<Log>,
    events: tokio::sync::broadcast::Sender<LogLine>,
}

impl Progress {
    /// Numbers an event, keeps it for replay and sends it. Sent under the log's lock, so a
    /// subscriber (which also takes it) sees every id once and in order.
    fn emit(&self, event: WarmupEvent) {
        let mut log = self.log.lock().expect("warmup log lock");
        if matches!(event, WarmupEvent::Start(_)) {
            log.lines.clear();
        }
        log.last_id += 1;
        let line = LogLine {
            id: log.last_id,
            at: svc_core::clock::now(),
            event,
        };
        if log.lines.len() == LOG_LINES {
            log.lines.pop_front();
        }
        log.lines.push_back(line.clone());
        let _ = self.events.send(line);
    }

    fn set(&self, table_id: &str, state: RowState, error: Option<String>) {
        let row = RowProgress {
            table_id: table_id.to_owned(),
            state,
            error,
        };
        if let Some(r) = self
            .snapshot
            .lock()
            .expect("warmup lock")
            .rows
            .iter_mut()
            .find(|r| r.table_id == table_id)
        {
            *r = row.clone();
        }
        self.emit(WarmupEvent::Row(row));
    }
}

/// A reader of the warmup log (see [`MetadataWarmer::subscribe`]).
#[derive(Debug)]
pub struct Subscription {
    /// Where every row stands now.
    pub snapshot: WarmupSnapshot,
    /// Kept lines the reader has not seen.
    pub backlog: Vec<LogLine>,
    /// Lines from now on.
    pub live: tokio::sync::broadcast::Receiver<LogLine>,
}

/// Refreshes remote tables' metadata into the store.
#[derive(Debug, Clone)]
pub struct MetadataWarmer {
    store: Store,
    drivers: Drivers,
    /// Flushed for a table whose metadata changed (the catalog shows it).
    caches: Arc<CacheHooks>,
    concurrency: usize,
    running: Arc<AtomicBool>,
    progress: Arc<Progress>,
}

impl MetadataWarmer {
    /// A warmer over the store, drivers and cache hooks the server uses.
    pub fn new(
        store: Store,
        drivers: Drivers,
        caches: Arc<CacheHooks>,
        concurrency: usize,
    ) -> Self {
        Self {
            store,
            drivers,
            caches,
            concurrency: concurrency.max(1),
            running: Arc::new(AtomicBool::new(false)),
            progress: Arc::new(Progress {
                snapshot: std::sync::Mutex::new(WarmupSnapshot::default()),
                log: std::sync::Mutex::new(Log::default()),
                events: tokio::sync::broadcast::channel(4096).0,
            }),
        }
    }

    /// The last (or current) full refresh.
    pub fn snapshot(&self) -> WarmupSnapshot {
        self.progress.snapshot.lock().expect("warmup lock").clone()
    }

    /// The snapshot now, the kept log lines after `after` (every line of the current run
    /// when None), and the lines still to come. Taken under the log's lock: no line is in
    /// both the backlog and the receiver, and none falls between them.
    pub fn subscribe(&self, after: Option<u64>) -> Subscription {
        let log = self.progress.log.lock().expect("warmup log lock");
        let live = self.progress.events.subscribe();
        let backlog = log
            .lines
            .iter()
            .filter(|l| after.is_none_or(|a| l.id > a))
            .cloned()
            .collect();
        Subscription {
            snapshot: self.snapshot(),
            backlog,
            live,
        }
    }

    /// Starts refreshing every remote table in the background, a few at a time; returns how
    /// many, or None while a full refresh is already running.
    pub async fn refresh_all(&self) -> Result<Option<usize>, svc_store::StoreError> {
        if self.running.swap(true, Ordering::AcqRel) {
            return Ok(None);
        }
        let ids: Vec<String> = match self.store.list_tables().await {
            Ok(rows) => rows
                .into_iter()
                .filter(|r| r.query_mode.is_remote())
                .map(|r| r.id)
                .collect(),
            Err(e) => {
                self.running.store(false, Ordering::Release);
                return Err(e);
            }
        };
        let count = ids.len();
        *self.progress.snapshot.lock().expect("warmup lock") = WarmupSnapshot {
            running: true,
            started_at: Some(svc_core::clock::now()),
            finished_at: None,
            rows: ids
                .iter()
                .map(|id| RowProgress {
                    table_id: id.clone(),
                    state: RowState::Pending,
                    error: None,
                })
                .collect(),
        };
        self.progress.emit(WarmupEvent::Start(count));
        let me = self.clone();
        tokio::spawn(async move {
            let outcomes: Vec<Rewarm> = futures::stream::iter(ids)
                .map(|id| {
                    let me = me.clone();
                    async move {
                        me.progress.set(&id, RowState::Warming, None);
                        let outcome = me.rewarm(&id).await;
                        let (state, error) = match &outcome {
                            Rewarm::Refreshed => (RowState::Fresh, None),
                            Rewarm::Skipped => (RowState::Skipped, None),
                            Rewarm::Failed(e) => (RowState::Error, Some(e.clone())),
                        };
                        me.progress.set(&id, state, error);
                        outcome
                    }
                })
                .buffer_unordered(me.concurrency)
                .collect()
                .await;
            let count = |want: fn(&Rewarm) -> bool| outcomes.iter().filter(|o| want(o)).count();
            let fresh = count(|o| *o == Rewarm::Refreshed);
            let failed = count(|o| matches!(o, Rewarm::Failed(_)));
            tracing::info!(
                tables = outcomes.len(),
                fresh,
                failed,
                "metadata refresh finished"
            );
            {
                let mut snapshot = me.progress.snapshot.lock().expect("warmup lock");
                snapshot.running = false;
                snapshot.finished_at = Some(svc_core::clock::now());
            }
            me.running.store(false, Ordering::Release);
            me.progress.emit(WarmupEvent::Complete { fresh, failed });
        });
        Ok(Some(count))
    }

    /// Re-warms one table in the background.
    pub fn schedule(&self, table_id: &str) {
        let (me, id) = (self.clone(), table_id.to_owned());
        tokio::spawn(async move {
            let outcome = me.rewarm(&id).await;
            tracing::debug!(table = %id, ?outcome, "metadata re-warm");
        });
    }

    /// Re-warms one table now.
    pub async fn rewarm(&self, table_id: &str) -> Rewarm {
        let row = match self.store.table_by_id(table_id).await {
            Ok(Some(row)) if row.query_mode.is_remote() => row,
            Ok(_) => return Rewarm::Skipped,
            Err(e) => return Rewarm::Failed(format!("state store: {e}")),
        };
        let Some(driver) = self.drivers.get(&row.source_type) else {
            return Rewarm::Skipped;
        };
        let outcome = match driver.refresh_metadata(&row.table_ref()).await {
            Ok(metadata) => match self.store.save_metadata(table_id, &metadata).await {
                Ok(()) => Rewarm::Refreshed,
                Err(e) => Rewarm::Failed(format!("state store: {e}")),
            },
            Err(e) if matches!(e.kind, ErrorKind::Unsupported | ErrorKind::NotConfigured) => {
                Rewarm::Skipped
            }
            Err(e) => {
                tracing::warn!(table = %table_id, error = %e, "metadata refresh failed");
                if let Err(se) = self.store.record_metadata_error(table_id, &e.message).await {
                    tracing::warn!(table = %table_id, error = %se, "could not record the refresh failure");
                }
                Rewarm::Failed(e.message)
            }
        };
        if !matches!(outcome, Rewarm::Skipped) {
            self.caches.forget_table(table_id);
        }
        outcome
    }
}
