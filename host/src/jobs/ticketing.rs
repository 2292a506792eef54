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

/// Backfills connection `name` for `actor`: the rewritten tables' caches are flushed and the
/// run audited (`ticketing.backfill`), whoever asked (an admin, or the schedule).
pub async fn backfill(
    state: &AppState,
    name: &str,
    actor: &Actor,
) -> Result<(Backfilled, Vec<String>), Error> {
    let started = Instant::now();
    let result = state
        .drivers
        .ticketing()
        .backfill(name)
        .await
        .map_err(Error::from);
    if let Ok((_, ids)) = &result {
        for id in ids {
            state.data_changed(id);
        }
    }
    state
        .audit
        .write_outcome(
            actor,
            Event::new("ticketing.backfill").resource(format!("ticketing:{name}")),
            started,
            &result,
            |e, (done, _)| {
                e.param("issues", done.issues)
                    .param("new", done.new)
                    .param("pages", done.pages)
            },
        )
        .await;
    result
}

/// Compacts connection `name` now at `actor`'s request, flushing and auditing like
/// [`backfill`] (`ticketing.compact`; the periodic compactions are not audited).
pub async fn compact(
    state: &AppState,
    name: &str,
    actor: &Actor,
) -> Result<(Compacted, Vec<String>), Error> {
    let started = Instant::now();
    let result = state
        .drivers
        .ticketing()
        .compact(name)
        .await
        .map_err(Error::from);
    if let Ok((_, ids)) = &result {
        for id in ids {
            state.data_changed(id);
        }
    }
    state
        .audit
        .write_outcome(
            actor,
            Event::new("ticketing.compact").resource(format!("ticketing:{name}")),
            started,
            &result,
            |e, (done, _)| e.param("events", done.events),
        )
        .await;
    result
}
