//! Sync passes: bring every due materialized table's local copy up to date.
//!
//! One pass runs at a time per server (a second trigger is refused, not queued). A pass walks
//! the `materialized` rows: a targeted pass syncs the named tables (by id or name) whatever
//! their schedule; an untargeted one (the scheduler's) syncs those whose `sync_schedule`
//! (default [`DEFAULT_SCHEDULE`]) is due since their last attempt, so a failing table retries
//! on its own cadence, not on every tick. Each table's outcome is stored (the last good copy's
//! figures survive a failure), audited, and flushes that table's caches.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use chrono::Utc;
use serde::Serialize;
use svc_catalog::schedule::{parse_ts, Schedule, DEFAULT_SCHEDULE};
use svc_plugin_api::{SyncMode, SyncProgress};
use svc_store::audit::{Actor, Event};
use svc_store::registry::RegistryRow;

use crate::state::AppState;

/// Which tables a pass covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Targets {
    /// Every materialized table whose schedule is due.
    Due,
    /// These ids or names, due or not.
    Named(Vec<String>),
}

/// Why a table was left out of a pass.
#[derive(Debug, Clone, Serialize)]
pub struct Skipped {
    /// Registry id.
    pub table: String,
    /// `not_in_target` or `not_due`.
    pub reason: &'static str,
}

/// A table whose sync failed.
#[derive(Debug, Clone, Serialize)]
pub struct Failed {
    /// Registry id.
    pub table: String,
    /// The error kind.
    pub error: String,
    /// What it said.
    pub message: String,
}

/// What one pass did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PassSummary {
    /// When it started and ended.
    pub started_at: String,
    /// Set when it is over.
    pub finished_at: Option<String>,
    /// Tables synced.
    pub materialized: Vec<String>,
    /// Tables left out, with the reason.
    pub skipped: Vec<Skipped>,
    /// Tables that failed.
    pub errors: Vec<Failed>,
    /// Named targets that match no materialized table.
    pub unknown: Vec<String>,
    /// What a table's sync had to adapt and the admin should know, by table id.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub notes: BTreeMap<String, Vec<String>>,
}

/// The table a pass is syncing now, and how far it has got.
#[derive(Debug, Clone, Serialize)]
pub struct Current {
    /// The table.
    pub table_id: String,
    /// Rows read from the source so far.
    pub rows: u64,
    /// Bytes of the new copy written so far.
    pub bytes: u64,
    /// Since the table's sync started.
    pub elapsed_ms: u64,
}

/// Runs sync passes, one at a time.
#[derive(Debug, Clone, Default)]
pub struct SyncRunner {
    running: Arc<AtomicBool>,
    last: Arc<Mutex<Option<PassSummary>>>,
    current: Arc<Mutex<Option<(String, Instant, SyncProgress)>>>,
}

impl SyncRunner {
    /// Whether a pass is running now.
    pub fn running(&self) -> bool {
        self.running.load(Ordering::Acquire)
    }

    /// The current or last pass.
    pub fn last(&self) -> Option<PassSummary> {
        self.last.lock().expect("sync lock").clone()
    }

    /// The table being synced now, if any, with its progress.
    pub fn current(&self) -> Option<Current> {
        let current = self.current.lock().expect("sync lock");
        current
            .as_ref()
            .map(|(table_id, started, progress)| Current {
                table_id: table_id.clone(),
                rows: progress.rows(),
                bytes: progress.bytes(),
                elapsed_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            })
    }

    /// Starts a pass in the background; false when one is already running.
    pub fn trigger(
        &self,
        state: Arc<AppState>,
        targets: Targets,
        mode: SyncMode,
        actor: Actor,
    ) -> bool {
        if self.running.swap(true, Ordering::AcqRel) {
            return false;
        }
        let me = self.clone();
        tokio::spawn(async move {
            // Reset the flag even if the pass panics, so one bad table cannot wedge syncing.
            let guard = ResetOnDrop(me.running.clone());
            me.pass(&state, &targets, mode, &actor).await;
            drop(guard);
        });
        true
    }

    /// Runs a pass now (the caller holds the running flag).
    async fn pass(&self, state: &AppState, targets: &Targets, mode: SyncMode, actor: &Actor) {
        let mut summary = PassSummary {
            started_at: svc_core::clock::now(),
            ..PassSummary::default()
        };
        *self.last.lock().expect("sync lock") = Some(summary.clone());
        let (rows, states) = match (
            state.store.list_tables().await,
            state.store.sync_states().await,
        ) {
            (Ok(rows), Ok(states)) => (rows, states),
            (Err(e), _) | (_, Err(e)) => {
                tracing::warn!(error = %e, "sync pass could not read the registry");
                summary.errors.push(Failed {
                    table: String::new(),
                    error: "store_error".into(),
                    message: e.to_string(),
                });
                summary.finished_at = Some(svc_core::clock::now());
                *self.last.lock().expect("sync lock") = Some(summary);
                return;
            }
        };
        let materialized: Vec<&RegistryRow> = rows
            .iter()
            .filter(|r| r.query_mode.is_materialized())
            .collect();
        if let Targets::Named(names) = targets {
            summary.unknown = names
                .iter()
                .filter(|n| !materialized.iter().any(|r| matches(r, n)))
                .cloned()
                .collect();
        }
        let now = Utc::now();
        for row in materialized {
            let due = match targets {
                Targets::Named(names) => names
                    .iter()
                    .any(|n| matches(row, n))
                    .then_some(())
                    .ok_or("not_in_target"),
                Targets::Due => {
                    let schedule = row
                        .sync_schedule
                        .as_deref()
                        .and_then(|s| s.parse::<Schedule>().ok())
                        .unwrap_or(DEFAULT_SCHEDULE);
                    let last = states
                        .get(&row.id)
                        .and_then(|s| s.last_attempt_at.as_deref())
                        .and_then(parse_ts);
                    schedule.is_due(last, now).then_some(()).ok_or("not_due")
                }
            };
            if let Err(reason) = due {
                summary.skipped.push(Skipped {
                    table: row.id.clone(),
                    reason,
                });
                continue;
            }
            let progress = SyncProgress::default();
            *self.current.lock().expect("sync lock") =
                Some((row.id.clone(), Instant::now(), progress.clone()));
            let outcome = sync_table(state, row, mode, &progress, actor).await;
            *self.current.lock().expect("sync lock") = None;
            match outcome {
                Ok(notes) => {
                    if !notes.is_empty() {
                        summary.notes.insert(row.id.clone(), notes);
                    }
                    summary.materialized.push(row.id.clone());
                }
                Err(failed) => summary.errors.push(failed),
            }
            *self.last.lock().expect("sync lock") = Some(summary.clone());
        }
        summary.finished_at = Some(svc_core::clock::now());
        tracing::info!(
            synced = summary.materialized.len(),
            failed = summary.errors.len(),
            skipped = summary.skipped.len(),
            "sync pass finished"
        );
        *self.last.lock().expect("sync lock") = Some(summary);
    }
}

struct ResetOnDrop(Arc<AtomicBool>);

impl Drop for ResetOnDrop {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

fn matches(row: &RegistryRow, name: &str) -> bool {
    row.id == name || row.name == name
}

/// Syncs one table through its driver, records and audits the outcome, flushes its caches.
/// Answers the sync's notes.
async fn sync_table(
    state: &AppState,
    row: &RegistryRow,
    mode: SyncMode,
    progress: &SyncProgress,
    actor: &Actor,
) -> Result<Vec<String>, Failed> {
    let started = Instant::now();
    let outcome = match state.drivers.get(&row.source_type) {
        Some(driver) => driver.sync(&row.table_ref(), mode, progress).await,
        None => Err(svc_plugin_api::DriverError::unsupported(format!(
            "no driver for source type '{}'",
            row.source_type
        ))),
    };
    let ms = i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX);
    let event = Event::new("sync.table").resource(&row.id);
    match &outcome {
        Ok(report) => {
            if let Err(e) = state.store.record_sync_success(&row.id, report, ms).await {
                tracing::warn!(table = %row.id, error = %e, "could not record the sync");
            }
            // The file changed under every cached sample and schema of this table.
            state.data_changed(&row.id);
        }
        Err(e) => {
            tracing::warn!(table = %row.id, error = %e, "sync failed");
            if let Err(se) = state.store.record_sync_error(&row.id, &e.message, ms).await {
                tracing::warn!(table = %row.id, error = %se, "could not record the sync failure");
            }
        }
    }
    let event = match &outcome {
        Err(e) => event.param("kind", e.name()),
        Ok(_) => event,
    };
    let audited = outcome
        .as_ref()
        .map_err(|e| svc_core::Error::from(e.clone()));
    state
        .audit
        .write_outcome(actor, event, started, &audited, |event, report| {
            event
                .param("rows", report.rows)
                .param("bytes", report.bytes)
                .param("hash", report.hash.clone())
                .param("notes", report.notes.clone())
        })
        .await;
    outcome.map(|r| r.notes).map_err(|e| Failed {
        table: row.id.clone(),
        error: e.name().to_owned(),
        message: e.message,
    })
}
