//! One connection at run time: receiving deliveries (verify, read, deduplicate, log), the
//! compaction lock, and its counters.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};
use svc_plugin_api::{DriverError, ErrorKind, Result};
use tokio::sync::Mutex as AsyncMutex;

use crate::compact::{Checkpoint, Compacted, Compactor, Paths, Totals};
use crate::config::Connection;
use crate::log::{self, EventLog, Origin, Record};
use crate::payload::{self, Kind};
use crate::signature::{self, Refusal};
use crate::tables::{self, TableKind};

/// Longest delivery identifier kept as sent; a longer one is replaced by the body's hash.
const MAX_DELIVERY_ID: usize = 200;

/// A delivery as the receiver got it.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// The raw body.
    pub body: Vec<u8>,
    /// `X-Hub-Signature`.
    pub signature: Option<String>,
    /// `X-Atlassian-Webhook-Identifier`.
    pub delivery_id: Option<String>,
}

/// How a delivery was taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Receipt {
    /// New: durable in the log, in the tables after the next compaction.
    Accepted {
        /// The identifier it is deduplicated by.
        delivery_id: String,
        /// `webhookEvent`.
        event: String,
    },
    /// Seen before: acknowledged, nothing changed.
    Duplicate {
        /// The identifier it is deduplicated by.
        delivery_id: String,
    },
    /// Of a project the connection does not keep: acknowledged and dropped.
    Filtered {
        /// The project it named, if any.
        project: Option<String>,
    },
}

/// Why a delivery was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// No connection of that name.
    UnknownConnection,
    /// Larger than the connection accepts.
    TooLarge {
        /// The limit in bytes.
        limit: u64,
    },
    /// Its signature.
    Signature(Refusal),
    /// Its body (the message says what is wrong).
    BadPayload(String),
    /// The log cannot be written (the sender should retry later).
    Unavailable(String),
}

/// In-process counters since the last compaction's checkpoint took them.
#[derive(Debug, Default)]
struct Counters {
    received: AtomicU64,
    duplicates: AtomicU64,
    rejected_signatures: AtomicU64,
    bad_payloads: AtomicU64,
    filtered: AtomicU64,
    unknown_events: AtomicU64,
}

impl Counters {
    fn snapshot(&self) -> Totals {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Totals {
            received: get(&self.received),
            duplicates: get(&self.duplicates),
            rejected_signatures: get(&self.rejected_signatures),
            bad_payloads: get(&self.bad_payloads),
            filtered: get(&self.filtered),
            unknown_events: get(&self.unknown_events),
            future_timestamps: 0,
        }
    }
}

/// A connection's counters and backlog, for `svc admin ticketing status`.
#[derive(Debug, Clone, Default)]
pub struct Status {
    /// Totals since the connection was first used.
    pub totals: Totals,
    /// Deliveries durable in the log and not yet in the tables.
    pub pending: u64,
    /// Age of the oldest of them, ms.
    pub lag_ms: Option<i64>,
    /// Rows per table, as of the last compaction.
    pub rows: Vec<(TableKind, u64)>,
    /// The checkpoint (last compaction, backfill mark).
    pub checkpoint: Checkpoint,
    /// The log could not be written; deliveries are refused until a restart.
    pub log_failed: bool,
}

/// One connection; see the module docs.
pub struct Tracker {
    /// The connection's name.
    pub name: String,
    /// Its settings.
    pub config: Connection,
    secret: Vec<u8>,
    log: EventLog,
    /// Delivery ids seen (a 16-byte digest each) and the log sequence that holds them (0:
    /// already in the tables), so a replay racing its original waits for it to be durable.
    seen: Mutex<HashMap<[u8; 16], u64>>,
    counters: Counters,
    /// Deliveries made durable since start (including those found in the log at start).
    appended: AtomicU64,
    /// Deliveries compacted since start.
    compacted: AtomicU64,
    /// When the oldest pending delivery arrived.
    oldest_pending_ms: Mutex<Option<i64>>,
    compactor: Arc<AsyncMutex<Compactor>>,
    /// The checkpoint and row counts as of the last compaction, for status reads that must
    /// not wait for a compaction in progress.
    published: Mutex<(Checkpoint, Vec<(TableKind, u64)>)>,
}

impl std::fmt::Debug for Tracker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracker")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

fn digest(id: &str) -> [u8; 16] {
    let full = Sha256::digest(id.as_bytes());
    let mut out = [0u8; 16];
    out.copy_from_slice(&full[..16]);
    out
}

/// Now, ms since the epoch.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

impl Tracker {
    /// Opens a connection's files under `dir` (`ticketing/<name>`): the checkpoint and tables
    /// are read, segments already applied removed, and the rest left for the first compaction.
    pub fn open(name: &str, config: Connection, dir: &Path, paths: Paths) -> Result<Self> {
        let secret = config
            .secret()
            .map_err(|e| {
                DriverError::new(
                    ErrorKind::NotConfigured,
                    format!("connection '{name}': {e}"),
                )
            })?
            .into_bytes();
        let compactor = Compactor::open(paths.clone(), config.raw_retention_days)?;
        let mut seen = HashMap::new();
        tables::load_delivery_ids(
            paths.table(TableKind::Events),
            compactor.checkpoint.events_rows,
            |id| {
                seen.insert(digest(id), 0);
            },
        )?;
        let io = |e: std::io::Error| DriverError::internal(format!("{}: {e}", dir.display()));
        let mut leftover = 0u64;
        let mut oldest = None;
        for (n, path) in log::segments(&paths.log).map_err(io)? {
            if n <= compactor.checkpoint.applied_through {
                std::fs::remove_file(&path).map_err(io)?;
                continue;
            }
            for r in log::read_segment(&path).map_err(io)?.records {
                if seen.insert(digest(&r.delivery_id), 0).is_none() {
                    leftover += 1;
                    oldest = oldest.or(Some(r.received_at_ms));
                }
            }
        }
        let log = EventLog::open(&paths.log).map_err(io)?;
        let published = Mutex::new((compactor.checkpoint.clone(), compactor.rows()));
        Ok(Self {
            name: name.to_owned(),
            config,
            secret,
            log,
            seen: Mutex::new(seen),
            // Deliveries acknowledged before a crash are in the log; replays and refusals
            // counted since the last checkpoint are not, and are lost with the process.
            counters: Counters {
                received: AtomicU64::new(leftover),
                ..Counters::default()
            },
            appended: AtomicU64::new(leftover),
            compacted: AtomicU64::new(0),
            oldest_pending_ms: Mutex::new(oldest),
            compactor: Arc::new(AsyncMutex::new(compactor)),
            published,
        })
    }

    /// Verifies, reads, deduplicates and logs one webhook delivery; returns once it is
    /// durable (or known to be a replay of one that is).
    pub async fn receive(&self, delivery: Delivery) -> std::result::Result<Receipt, Refused> {
        let limit = self.config.max_body_bytes;
        if delivery.body.len() as u64 > limit {
            self.counters.bad_payloads.fetch_add(1, Ordering::Relaxed);
            return Err(Refused::TooLarge { limit });
        }
        if let Err(r) =
            signature::verify(&self.secret, &delivery.body, delivery.signature.as_deref())
        {
            self.counters
                .rejected_signatures
                .fetch_add(1, Ordering::Relaxed);
            return Err(Refused::Signature(r));
        }
        let parsed = payload::parse(&delivery.body, Origin::Webhook).map_err(|e| {
            self.counters.bad_payloads.fetch_add(1, Ordering::Relaxed);
            Refused::BadPayload(e)
        })?;
        if !self.config.keeps_project(parsed.project()) {
            self.counters.filtered.fetch_add(1, Ordering::Relaxed);
            return Ok(Receipt::Filtered {
                project: parsed.project().map(str::to_owned),
            });
        }
        let delivery_id = delivery
            .delivery_id
            .map(|id| id.trim().to_owned())
            .filter(|id| {
                !id.is_empty()
                    && id.len() <= MAX_DELIVERY_ID
                    && id.bytes().all(|b| b.is_ascii_graphic())
            })
            .unwrap_or_else(|| format!("sha256:{}", hex::encode(Sha256::digest(&delivery.body))));
        let record = Record {
            delivery_id: delivery_id.clone(),
            received_at_ms: now_ms(),
            origin: Origin::Webhook,
            body: delivery.body,
        };
        let fresh = self.log_once(record).await?;
        if !fresh {
            return Ok(Receipt::Duplicate { delivery_id });
        }
        if parsed.kind == Kind::Unknown {
            self.counters.unknown_events.fetch_add(1, Ordering::Relaxed);
        }
        Ok(Receipt::Accepted {
            delivery_id,
            event: parsed.event,
        })
    }

    /// Appends `record` unless its delivery id was seen; true when it was new. Either way
    /// returns only once the record (or its original) is durable.
    pub async fn log_once(&self, record: Record) -> std::result::Result<bool, Refused> {
        let key = digest(&record.delivery_id);
        let received_at = record.received_at_ms;
        // Queued under the lock, so a replay racing its original finds it; waited outside.
        let queued = {
            let mut seen = self.seen.lock().expect("seen lock");
            match seen.get(&key) {
                Some(&original) => Err(original),
                None => {
                    let (seq, wait) = self.log.enqueue(record);
                    seen.insert(key, seq);
                    Ok((seq, wait))
                }
            }
        };
        let (seq, wait) = match queued {
            Ok(queued) => queued,
            Err(original) => {
                self.counters.duplicates.fetch_add(1, Ordering::Relaxed);
                self.log
                    .wait_durable(original)
                    .await
                    .map_err(|e| Refused::Unavailable(e.to_string()))?;
                return Ok(false);
            }
        };
        let durable = match wait.await {
            Ok(r) => r,
            Err(_) => Err(std::io::Error::other("the event log's writer stopped")),
        };
        if let Err(e) = durable {
            let mut seen = self.seen.lock().expect("seen lock");
            if seen.get(&key) == Some(&seq) {
                seen.remove(&key);
            }
            return Err(Refused::Unavailable(e.to_string()));
        }
        self.counters.received.fetch_add(1, Ordering::Relaxed);
        self.appended.fetch_add(1, Ordering::Relaxed);
        self.oldest_pending_ms
            .lock()
            .expect("pending lock")
            .get_or_insert(received_at);
        Ok(true)
    }

    /// Folds everything logged so far into the tables.
    pub async fn compact(&self) -> Result<Compacted> {
        let mut compactor = self.compactor.clone().lock_owned().await;
        let appended_before = self.appended.load(Ordering::Relaxed);
        let sealed = self
            .log
            .rotate()
            .await
            .map_err(|e| DriverError::internal(format!("sealing the event log: {e}")))?;
        let base = compactor.checkpoint.totals;
        let since = self.counters.snapshot();
        let (done, checkpoint, rows) = tokio::task::spawn_blocking(move || {
            let done = compactor.run(sealed, base.plus(since), now_ms());
            (done, compactor.checkpoint.clone(), compactor.rows())
        })
        .await
        .map_err(|e| DriverError::internal(format!("compaction stopped: {e}")))?;
        *self.published.lock().expect("published lock") = (checkpoint, rows);
        let done = done?;
        self.take_counted(since);
        self.compacted.fetch_add(done.events, Ordering::Relaxed);
        let mut oldest = self.oldest_pending_ms.lock().expect("pending lock");
        *oldest = if self.appended.load(Ordering::Relaxed) > appended_before {
            Some(now_ms())
        } else {
            None
        };
        Ok(done)
    }

    /// Subtracts counts a checkpoint has taken into its totals.
    fn take_counted(&self, taken: Totals) {
        let sub = |c: &AtomicU64, n: u64| c.fetch_sub(n, Ordering::Relaxed);
        sub(&self.counters.received, taken.received);
        sub(&self.counters.duplicates, taken.duplicates);
        sub(
            &self.counters.rejected_signatures,
            taken.rejected_signatures,
        );
        sub(&self.counters.bad_payloads, taken.bad_payloads);
        sub(&self.counters.filtered, taken.filtered);
        sub(&self.counters.unknown_events, taken.unknown_events);
    }

    /// Counters and backlog (as of the last compaction; never waits for one in progress).
    pub fn status(&self) -> Status {
        let (checkpoint, rows) = self.published.lock().expect("published lock").clone();
        let pending = self
            .appended
            .load(Ordering::Relaxed)
            .saturating_sub(self.compacted.load(Ordering::Relaxed));
        let oldest = *self.oldest_pending_ms.lock().expect("pending lock");
        Status {
            totals: checkpoint.totals.plus(self.counters.snapshot()),
            pending,
            lag_ms: (pending > 0)
                .then_some(oldest)
                .flatten()
                .map(|t| (now_ms() - t).max(0)),
            rows,
            checkpoint,
            log_failed: self.log.durable().failed,
        }
    }

    /// The backfill mark: issues updated since then are fetched next time.
    pub async fn backfill_since(&self) -> Option<i64> {
        self.compactor.lock().await.checkpoint.backfill_since_ms
    }

    /// Moves the backfill mark (kept by the next compaction's checkpoint).
    pub async fn set_backfill_since(&self, ms: i64) {
        let mut c = self.compactor.lock().await;
        let mark = &mut c.checkpoint.backfill_since_ms;
        *mark = Some(mark.map_or(ms, |m| m.max(ms)));
    }
}
