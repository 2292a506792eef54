//! The ticketing connections' own work: each one's received events are folded into its
//! tables every `compact_interval_ms` (the rewritten tables' caches flushed), and, when
//! `backfill_every_minutes` is set, its history is fetched from the tracker on that schedule.

use std::sync::Arc;
use std::time::Instant;

use svc_core::Error;
use svc_driver_ticketing::{Backfilled, Compacted};
use svc_store::audit::{Actor, Event};

use crate::state::AppState;

/// Starts one loop per configured ticketing connection.
pub fn start(state: Arc<AppState>) {
    let ticketing = state.drivers.ticketing().clone();
    for name in ticketing.connections() {
        let Ok(tracker) = ticketing.tracker(name) else {
            continue; // Logged when it failed to open; its deliveries get 503.
        };
        let every = tracker.config.compact_interval();
        let backfill_every = tracker.config.backfill_every();
        let (state, ticketing, name) = (state.clone(), ticketing.clone(), name.to_owned());
        tokio::spawn(async move {
            // The last failure, logged once until it changes or clears.
            let mut failing: Option<String> = None;
            let mut next_backfill = backfill_every.map(|b| Instant::now() + b);
            loop {
                if next_backfill.is_some_and(|at| Instant::now() >= at) {
                    next_backfill = backfill_every.map(|b| Instant::now() + b);
                    // Audited; a failure is in the audit row and the status.
                    let _ = backfill(&state, &name, &Actor::scheduler()).await;
                }
                match ticketing.compact(&name).await {
                    Ok((_, ids)) => {
                        for id in &ids {
                            state.data_changed(id);
                        }
                        if failing.take().is_some() {
                            tracing::info!(connection = %name, "ticketing compaction recovered");
                        }
                    }
                    Err(e) => {
                        if failing.as_deref() != Some(e.message.as_str()) {
                            tracing::warn!(connection = %name, "ticketing compaction failed: {}", e.message);
                            failing = Some(e.message);
                        }
                    }
                }
                tokio::time::sleep(every).await;
            }
        });
    }
}

/// Backfills connection `name` for `actor` (an admin, or the schedule); see [`run`].
pub async fn backfill(
    state: &AppState,
    name: &str,
    actor: &Actor,
) -> Result<(Backfilled, Vec<String>), Error> {
    let work = state.drivers.ticketing().backfill(name);
    run(state, name, actor, "ticketing.backfill", work, |e, done| {
        e.param("issues", done.issues)
            .param("new", done.new)
            .param("pages", done.pages)
    })
    .await
}

/// Compacts connection `name` now at `actor`'s request (the periodic compactions are not
/// audited); see [`run`].
pub async fn compact(
    state: &AppState,
    name: &str,
    actor: &Actor,
) -> Result<(Compacted, Vec<String>), Error> {
    let work = state.drivers.ticketing().compact(name);
    run(state, name, actor, "ticketing.compact", work, |e, done| {
        e.param("events", done.events)
    })
    .await
}

/// Runs `work` (which returns the ids of the tables it rewrote), flushes those tables'
/// caches, and audits it as `action` with what `params` adds on success.
async fn run<T>(
    state: &AppState,
    name: &str,
    actor: &Actor,
    action: &str,
    work: impl std::future::Future<Output = svc_plugin_api::Result<(T, Vec<String>)>>,
    params: impl FnOnce(Event, &T) -> Event,
) -> Result<(T, Vec<String>), Error> {
    let started = Instant::now();
    let result = work.await.map_err(Error::from);
    if let Ok((_, ids)) = &result {
        for id in ids {
            state.data_changed(id);
        }
    }
    state
        .audit
        .write_outcome(
            actor,
            Event::new(action).resource(format!("ticketing:{name}")),
            started,
            &result,
            |e, (done, _)| params(e, done),
        )
        .await;
    result
}
