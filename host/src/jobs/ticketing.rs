//! The ticketing compactor: each connection's received events are folded into its tables
//! every `compact_interval_ms`, and the rewritten tables' caches flushed.

use std::sync::Arc;

use crate::state::AppState;

/// Starts one compaction loop per configured ticketing connection.
pub fn start(state: Arc<AppState>) {
    let ticketing = state.drivers.ticketing().clone();
    for name in ticketing.connections() {
        let Ok(tracker) = ticketing.tracker(name) else {
            continue; // Logged when it failed to open; its deliveries get 503.
        };
        let every = tracker.config.compact_interval();
        let (state, ticketing, name) = (state.clone(), ticketing.clone(), name.to_owned());
        tokio::spawn(async move {
            // The last failure, logged once until it changes or clears.
            let mut failing: Option<String> = None;
            loop {
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
