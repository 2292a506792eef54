//! The memory ceiling: a last line behind the per-query pools and the function checks.
//!
//! DataFusion's pools see the buffers of sorts, joins and aggregates; [`super::bounded`]
//! refuses function calls that would build too much at once. Anything else that grows (a
//! buffer no pool tracks, many medium-sized values) is caught here: a thread samples the
//! process's resident memory, and above the ceiling it stops the running query that holds
//! the most pooled memory (all of them when none holds any, since untracked memory cannot
//! be attributed). A stopped query ends with `resources_exhausted`; the process lives on.
//! Stopping takes effect when the query's stream is next polled, so one batch's worth of
//! growth can still pass the ceiling: the documented margin covers it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use svc_plugin_api::datafusion::execution::memory_pool::MemoryPool;
use tokio::sync::Notify;

/// How often resident memory is sampled.
const EVERY: Duration = Duration::from_millis(25);
/// After stopping a query, how long to let its memory go before looking again.
const SETTLE: Duration = Duration::from_millis(250);

/// Bytes of resident memory above which queries are stopped; 0: no ceiling.
static CEILING: AtomicUsize = AtomicUsize::new(0);
/// Queries stopped by the ceiling since start.
static STOPPED: AtomicU64 = AtomicU64::new(0);
static NEXT_ID: AtomicU64 = AtomicU64::new(1);
static RUNNING: LazyLock<Mutex<HashMap<u64, Watched>>> = LazyLock::new(Default::default);

struct Watched {
    pool: Arc<dyn MemoryPool>,
    stop: Arc<Notify>,
}

/// Sets the ceiling (bytes of resident memory) and starts the watching thread once.
pub fn set_ceiling(bytes: usize) {
    CEILING.store(bytes, Ordering::Relaxed);
    static STARTED: std::sync::Once = std::sync::Once::new();
    STARTED.call_once(|| {
        let spawned = std::thread::Builder::new()
            .name("svc-memory-watch".into())
            .spawn(watch);
        if let Err(e) = spawned {
            tracing::error!(error = %e, "cannot start the memory watchdog; the ceiling is not enforced");
        }
    });
}

/// Queries stopped by the ceiling since start.
pub fn stopped() -> u64 {
    STOPPED.load(Ordering::Relaxed)
}

/// A running query under watch; dropping it ends the watch.
pub struct Watch {
    id: u64,
    /// Notified when the query must stop.
    pub stop: Arc<Notify>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        RUNNING.lock().expect("watchdog lock").remove(&self.id);
    }
}

/// Puts a query whose operators reserve from `pool` under watch.
pub fn watch_query(pool: Arc<dyn MemoryPool>) -> Watch {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let stop = Arc::new(Notify::new());
    RUNNING.lock().expect("watchdog lock").insert(
        id,
        Watched {
            pool,
            stop: stop.clone(),
        },
    );
    Watch { id, stop }
}

/// The message a stopped query ends with.
pub fn message() -> String {
    format!(
        "the server's memory ceiling ({} MiB, SVC_MEMORY_CEILING_MB) was reached while this query ran",
        CEILING.load(Ordering::Relaxed) >> 20
    )
}

fn watch() {
    loop {
        std::thread::sleep(EVERY);
        let ceiling = CEILING.load(Ordering::Relaxed);
        if ceiling == 0 {
            continue;
        }
        let Some(resident) = resident_bytes() else {
            continue;
        };
        if resident <= ceiling {
            continue;
        }
        let targets = largest();
        if !targets.is_empty() {
            let stopped = targets.len() as u64;
            STOPPED.fetch_add(stopped, Ordering::Relaxed);
            // Said before the queries are told, so the line is in the log by the time the
            // stopped query's caller hears why.
            tracing::warn!(
                resident_mib = resident >> 20,
                ceiling_mib = ceiling >> 20,
                stopped,
                "memory ceiling reached: stopped the largest running query"
            );
            for stop in targets {
                stop.notify_one();
            }
            std::thread::sleep(SETTLE);
        }
    }
}

/// The stop signals of the query holding the most pooled memory, or of every query when none
/// holds any.
fn largest() -> Vec<Arc<Notify>> {
    let running = RUNNING.lock().expect("watchdog lock");
    let largest = running
        .values()
        .map(|w| (w.pool.reserved(), w))
        .filter(|(reserved, _)| *reserved > 0)
        .max_by_key(|(reserved, _)| *reserved);
    match largest {
        Some((_, w)) => vec![w.stop.clone()],
        None => running.values().map(|w| w.stop.clone()).collect(),
    }
}

/// Resident memory of this process (Linux: `VmRSS` in `/proc/self/status`).
pub fn resident_bytes() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib << 10)
}
