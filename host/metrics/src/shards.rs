//! The series every request records — request durations, requests in flight, cache lookups —
//! kept per thread and summed when `/metrics` is rendered.
//!
//! Through the `metrics` facade each record was a read-modify-write on atomics that every
//! worker thread writes (the value, and the exporter's generation counter beside it), and a
//! histogram sample went through an epoch-managed buffer: cache lines bouncing between cores
//! on every request, which cost more than the rest of the instrumentation together. Here a
//! thread owns its cells: it is their only writer, so a record is a plain load and store,
//! and a reader summing them sees each cell's latest value. A request in flight may finish on
//! another thread than it started on: its gauge goes +1 on one shard and −1 on the other, and
//! the sum is still right. A thread that ends folds its cells into the retired totals.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};

use crate::{Cache, SECONDS_BUCKETS};

/// Whether the recorder is installed; nothing is recorded before (or without) it.
pub(crate) static ON: AtomicBool = AtomicBool::new(false);

/// A request duration series' labels: method, route template (None: nothing matched) and
/// status. All are from closed sets, so they are `'static` (route templates are interned).
pub(crate) type HttpLabels = (&'static str, Option<&'static str>, &'static str);

/// The method labels: the standard methods, then `_OTHER` for any other.
pub const METHODS: [&str; 8] = [
    "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "_OTHER",
];
const CACHES: usize = Cache::ALL.len();
const BUCKETS: usize = SECONDS_BUCKETS.len() + 1;

/// One thread's cells of one duration histogram: a count per bucket (the last is above every
/// bound) and the sum of the samples.
#[derive(Default)]
struct Cells {
    buckets: [AtomicU64; BUCKETS],
    sum_bits: AtomicU64,
}

/// One thread's cells.
#[derive(Default)]
struct Shard {
    /// [cache][miss, hit]
    cache: [[AtomicU64; 2]; CACHES],
    active: [AtomicI64; METHODS.len()],
    /// What the render reads of the thread's histograms (written when a series first appears).
    http: Mutex<Vec<(HttpLabels, Arc<Cells>)>>,
}

/// Adds `by` to a cell only this thread writes.
fn bump(cell: &AtomicU64, by: u64) {
    cell.store(cell.load(Relaxed).wrapping_add(by), Relaxed);
}

fn bump_signed(cell: &AtomicI64, by: i64) {
    cell.store(cell.load(Relaxed).wrapping_add(by), Relaxed);
}

/// The thread's shard and its index of histograms by labels.
struct Local {
    shard: Arc<Shard>,
    /// Looked up on every request: foldhash, not the standard library's SipHash, which cost
    /// a cached sample about 400 instructions here, half of what metrics cost it (callgrind);
    /// the labels are the router's own, never a caller's text, so SipHash's guard against
    /// planned collisions buys nothing.
    http: RefCell<HashMap<HttpLabels, Arc<Cells>, foldhash::fast::RandomState>>,
}

impl Local {
    fn new() -> Self {
        let shard = Arc::<Shard>::default();
        lock(&SHARDS).push(shard.clone());
        Self {
            shard,
            http: RefCell::default(),
        }
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        // Both locks, in render's order, so a render sees the cells once: live or retired.
        let mut shards = lock(&SHARDS);
        lock(&RETIRED).add(&self.shard);
        shards.retain(|s| !Arc::ptr_eq(s, &self.shard));
    }
}

thread_local! {
    static LOCAL: Local = Local::new();
}

static SHARDS: Mutex<Vec<Arc<Shard>>> = Mutex::new(Vec::new());
static RETIRED: LazyLock<Mutex<Totals>> = LazyLock::new(Mutex::default);

/// A poisoned lock only means a thread panicked mid-update of plain counters: keep going.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Sums of every shard.
#[derive(Default, Clone)]
struct Totals {
    cache: [[u64; 2]; CACHES],
    active: [i64; METHODS.len()],
    http: HashMap<HttpLabels, ([u64; BUCKETS], f64)>,
}

impl Totals {
    fn add(&mut self, shard: &Shard) {
        for (total, cells) in self.cache.iter_mut().zip(&shard.cache) {
            total[0] += cells[0].load(Relaxed);
            total[1] += cells[1].load(Relaxed);
        }
        for (total, cell) in self.active.iter_mut().zip(&shard.active) {
            *total += cell.load(Relaxed);
        }
        for (labels, cells) in lock(&shard.http).iter() {
            let (buckets, sum) = self.http.entry(*labels).or_default();
            for (total, cell) in buckets.iter_mut().zip(&cells.buckets) {
                *total += cell.load(Relaxed);
            }
            *sum += f64::from_bits(cells.sum_bits.load(Relaxed));
        }
    }

    fn record_http(&mut self, labels: HttpLabels, seconds: f64) {
        let (buckets, sum) = self.http.entry(labels).or_default();
        buckets[bucket(seconds)] += 1;
        *sum += seconds;
    }
}

fn bucket(seconds: f64) -> usize {
    SECONDS_BUCKETS.partition_point(|bound| *bound < seconds)
}

fn on() -> bool {
    ON.load(Relaxed)
}

/// One request's duration.
pub(crate) fn record_http(labels: HttpLabels, seconds: f64) {
    if !on() {
        return;
    }
    let recorded = LOCAL.try_with(|local| {
        let mut http = local.http.borrow_mut();
        let cells = http.entry(labels).or_insert_with(|| {
            let cells = Arc::<Cells>::default();
            lock(&local.shard.http).push((labels, cells.clone()));
            cells
        });
        bump(&cells.buckets[bucket(seconds)], 1);
        let sum = f64::from_bits(cells.sum_bits.load(Relaxed)) + seconds;
        cells.sum_bits.store(sum.to_bits(), Relaxed);
    });
    // Only while the thread is ending: straight into the retired totals.
    if recorded.is_err() {
        lock(&RETIRED).record_http(labels, seconds);
    }
}

/// A request in flight starts (`+1`) or ends (`-1`).
pub(crate) fn add_active(method: usize, by: i64) {
    if !on() {
        return;
    }
    if LOCAL
        .try_with(|local| bump_signed(&local.shard.active[method], by))
        .is_err()
    {
        lock(&RETIRED).active[method] += by;
    }
}

/// One cache lookup.
pub(crate) fn add_lookup(cache: usize, hit: bool) {
    if !on() {
        return;
    }
    let result = usize::from(hit);
    if LOCAL
        .try_with(|local| bump(&local.shard.cache[cache][result], 1))
        .is_err()
    {
        lock(&RETIRED).cache[cache][result] += 1;
    }
}

/// A metric family's `# HELP` and `# TYPE` lines.
fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// Appends the three families in the Prometheus text format.
pub(crate) fn render(out: &mut String) {
    let totals = {
        let shards = lock(&SHARDS);
        let mut totals = lock(&RETIRED).clone();
        for shard in shards.iter() {
            totals.add(shard);
        }
        totals
    };

    let name = super::HTTP_DURATION;
    family(
        out,
        name,
        "histogram",
        "Duration of HTTP server requests, by method, route template and status",
    );
    let mut series: Vec<_> = totals.http.iter().collect();
    series.sort_by(|a, b| a.0.cmp(b.0));
    for ((method, route, status), (buckets, sum)) in series {
        let labels = format!(
            "http_request_method=\"{method}\",http_route=\"{}\",http_response_status_code=\"{status}\"",
            escape(route.unwrap_or("unmatched"))
        );
        let mut count = 0;
        for (i, n) in buckets.iter().enumerate() {
            count += n;
            match SECONDS_BUCKETS.get(i) {
                Some(bound) => {
                    let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{bound}\"}} {count}");
                }
                None => {
                    let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {count}");
                }
            }
        }
        let _ = writeln!(out, "{name}_sum{{{labels}}} {sum}");
        let _ = writeln!(out, "{name}_count{{{labels}}} {count}");
    }

    let name = super::HTTP_ACTIVE;
    family(
        out,
        name,
        "gauge",
        "Number of HTTP server requests in flight, by method",
    );
    for (method, n) in METHODS.iter().zip(totals.active) {
        let _ = writeln!(out, "{name}{{http_request_method=\"{method}\"}} {n}");
    }

    let name = super::CACHE;
    family(
        out,
        name,
        "counter",
        "Cache lookups, by cache and result (hit or miss)",
    );
    for (cache, [miss, hit]) in Cache::ALL.iter().zip(totals.cache) {
        let cache = cache.label();
        let _ = writeln!(out, "{name}{{cache=\"{cache}\",result=\"miss\"}} {miss}");
        let _ = writeln!(out, "{name}{{cache=\"{cache}\",result=\"hit\"}} {hit}");
    }
}

/// A label value as the text format quotes it.
fn escape(value: &str) -> std::borrow::Cow<'_, str> {
    if value.contains(['\\', '"', '\n']) {
        value
            .replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n")
            .into()
    } else {
        value.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_land_in_the_first_bucket_whose_bound_holds_them() {
        assert_eq!(bucket(0.0), 0);
        assert_eq!(bucket(0.0005), 0, "a bound holds its own value (le)");
        assert_eq!(bucket(0.0006), 1);
        assert_eq!(bucket(120.0), SECONDS_BUCKETS.len() - 1);
        assert_eq!(
            bucket(121.0),
            SECONDS_BUCKETS.len(),
            "above every bound: +Inf"
        );
    }

    /// Records from several threads, some of which end before the render, all count; a
    /// request that starts on one thread and ends on another leaves its gauge at zero.
    #[test]
    fn every_threads_records_are_summed_including_ended_threads() {
        ON.store(true, Relaxed);
        let labels = ("GET", Some("/test/shards/{id}"), "200");
        let threads: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        record_http(labels, 0.002);
                        add_lookup(Cache::Catalog as usize, true);
                    }
                    add_active(6, 1);
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        add_active(6, -4);
        let mut text = String::new();
        render(&mut text);
        let line = |prefix: &str| {
            text.lines()
                .find(|l| l.starts_with(prefix))
                .unwrap_or_else(|| panic!("{prefix} in {text}"))
                .rsplit(' ')
                .next()
                .unwrap()
                .to_owned()
        };
        let series = "http_request_method=\"GET\",http_route=\"/test/shards/{id}\",http_response_status_code=\"200\"";
        assert_eq!(
            line(&format!(
                "http_server_request_duration_seconds_count{{{series}}}"
            )),
            "4000"
        );
        assert_eq!(
            line(&format!(
                "http_server_request_duration_seconds_bucket{{{series},le=\"0.001\"}}"
            )),
            "0"
        );
        assert_eq!(
            line(&format!(
                "http_server_request_duration_seconds_bucket{{{series},le=\"0.0025\"}}"
            )),
            "4000"
        );
        let sum: f64 = line(&format!(
            "http_server_request_duration_seconds_sum{{{series}}}"
        ))
        .parse()
        .unwrap();
        assert!((sum - 8.0).abs() < 1e-9, "{sum}");
        assert_eq!(
            line("svc_cache_requests_total{cache=\"catalog\",result=\"hit\"}"),
            "4000"
        );
        assert_eq!(
            line("http_server_active_requests{http_request_method=\"OPTIONS\"}"),
            "0"
        );
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("/a\"b\\c\n"), "/a\\\"b\\\\c\\n");
        assert_eq!(escape("/plain/{id}"), "/plain/{id}");
    }
}
