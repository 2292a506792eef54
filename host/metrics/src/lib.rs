//! svc-metrics: every series svc exports, in one place.
//!
//! - Owns each metric's name (OpenTelemetry semantic-convention names, as Prometheus writes
//!   them: `http.server.request.duration` is `http_server_request_duration_seconds`), its
//!   labels, and the one function that records it. Labels take `&'static str` or a value
//!   from a closed set, so no caller can put a raw path, a user id or an SQL text in a label:
//!   the series count stays bounded by the code, not by traffic.
//! - Owns the Prometheus recorder ([`Exporter`]). Until [`Exporter::install`] runs, or when
//!   metrics are off, every record function is a call into the `metrics` facade's no-op
//!   recorder (or, for the per-request series, a flag check). The series every request
//!   records are kept per thread (`shards`: written by one thread each, summed when
//!   rendered); per-query series keep their handles per thread ([`with_handle`]), so recording
//!   costs the series' own update, not a registry lookup with freshly built labels. Install
//!   the recorder before the first request, or those handles stay no-ops.
//! - Must never import another svc crate, HTTP or the store: every layer of the host records
//!   through it, so it sits below all of them.

mod shards;

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

use metrics::{counter, gauge, histogram, Counter, Histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Bucket bounds for durations, in seconds: a cached read (sub-millisecond) to a long scan.
const SECONDS_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0, 120.0,
];

/// Bucket bounds for byte sizes: 1 KiB to 1 TiB in powers of 16.
const BYTES_BUCKETS: &[f64] = &[
    1024.0,
    16384.0,
    262144.0,
    4194304.0,
    67108864.0,
    1073741824.0,
    17179869184.0,
    274877906944.0,
    1099511627776.0,
];

/// The process's Prometheus recorder: installed once, rendered by `GET /metrics`.
#[derive(Clone)]
pub struct Exporter {
    handle: PrometheusHandle,
}

impl std::fmt::Debug for Exporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Exporter")
    }
}

impl Exporter {
    /// Installs the recorder for the whole process. Fails if a recorder is already installed
    /// (a second server in one process): the caller serves without metrics then.
    pub fn install() -> Result<Self, String> {
        let handle = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS_BUCKETS)
            .and_then(|b| b.set_buckets_for_metric(Matcher::Suffix("_bytes".into()), BYTES_BUCKETS))
            .map_err(|e| e.to_string())?
            .install_recorder()
            .map_err(|e| e.to_string())?;
        describe();
        shards::ON.store(true, std::sync::atomic::Ordering::Relaxed);
        Ok(Self { handle })
    }

    /// The Prometheus text exposition of every series.
    pub fn render(&self) -> String {
        let mut text = self.handle.render();
        shards::render(&mut text);
        text
    }

    /// Folds pending histogram samples into their buckets. Rendering does this too; call it
    /// periodically so a server nobody scrapes does not hold every sample in memory.
    pub fn upkeep(&self) {
        self.handle.run_upkeep();
    }
}

/// HELP text and units for every series, so `promtool check metrics` finds nothing to say.
fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_histogram!(
        QUERY_DURATION,
        Unit::Seconds,
        "Duration of queries and scans from start to the last row read, by route kind"
    );
    describe_counter!(
        QUERY_ROWS,
        "Rows returned by queries and scans, by route kind"
    );
    describe_counter!(
        QUERY_BYTES,
        Unit::Bytes,
        "Bytes read by queries and scans where the source reports them, by route kind"
    );
    describe_histogram!(
        REMOTE_ESTIMATED,
        Unit::Bytes,
        "Estimated bytes a remote read would scan, checked against its guard"
    );
    describe_counter!(
        REMOTE_REFUSED,
        "Remote reads refused because their estimate exceeded the guard"
    );
    describe_gauge!(AUDIT_QUEUE, "Audit rows queued and not yet stored");
    describe_histogram!(
        AUDIT_FLUSH,
        Unit::Seconds,
        "Time to store one batch of audit rows"
    );
    describe_counter!(
        AUDIT_ROWS,
        "Audit rows stored (result=stored) or lost to a store failure (result=failed)"
    );
    describe_counter!(
        DRIVER_ERRORS,
        "Errors returned by source drivers, by error kind"
    );
    describe_counter!(
        JOB_RUNS,
        "Scheduler job runs, by job and outcome (success or failure)"
    );
    describe_histogram!(
        JOB_DURATION,
        Unit::Seconds,
        "Duration of scheduler job runs, by job"
    );
    describe_counter!(
        TELEMETRY_BYTES,
        Unit::Bytes,
        "Session transcript bytes read by the telemetry pipeline"
    );
    describe_counter!(
        TELEMETRY_EVENTS,
        "Tool-usage events the telemetry pipeline extracted"
    );
    describe_counter!(
        TELEMETRY_MALFORMED,
        "Transcript lines the telemetry pipeline could not parse"
    );
    describe_counter!(MCP_CALLS, "MCP tool calls, by tool");
    describe_counter!(MCP_ERRORS, "MCP tool calls answered with isError, by tool");
}

/// Handles by label values, one map per thread: registered on a thread's first use, then
/// used in place. A map shared by the worker threads cost, per record, a lock's and a handle
/// clone's atomic updates on cache lines every core writes — several times the update itself.
type Handles<K, H> = std::thread::LocalKey<RefCell<HashMap<K, H>>>;

/// Runs `record` on this thread's handle for `key`, registered with `make` the first time.
fn with_handle<K: Hash + Eq, H>(
    handles: &'static Handles<K, H>,
    key: K,
    make: impl FnOnce(&K) -> H,
    record: impl FnOnce(&H),
) {
    handles.with(|map| {
        let mut map = map.borrow_mut();
        let handle = map.entry(key).or_insert_with_key(make);
        record(handle);
    });
}

const HTTP_DURATION: &str = "http_server_request_duration_seconds";
const HTTP_ACTIVE: &str = "http_server_active_requests";
const QUERY_DURATION: &str = "svc_query_duration_seconds";
const QUERY_ROWS: &str = "svc_query_rows_total";
const QUERY_BYTES: &str = "svc_query_read_bytes_total";
const REMOTE_ESTIMATED: &str = "svc_remote_read_estimated_bytes";
const REMOTE_REFUSED: &str = "svc_remote_read_refused_total";
const AUDIT_QUEUE: &str = "svc_audit_queue_depth";
const AUDIT_FLUSH: &str = "svc_audit_flush_duration_seconds";
const AUDIT_ROWS: &str = "svc_audit_rows_total";
const CACHE: &str = "svc_cache_requests_total";
const DRIVER_ERRORS: &str = "svc_driver_errors_total";
const JOB_RUNS: &str = "svc_scheduler_job_runs_total";
const JOB_DURATION: &str = "svc_scheduler_job_duration_seconds";
const TELEMETRY_BYTES: &str = "svc_telemetry_read_bytes_total";
const TELEMETRY_EVENTS: &str = "svc_telemetry_events_total";
const TELEMETRY_MALFORMED: &str = "svc_telemetry_malformed_lines_total";
const MCP_CALLS: &str = "svc_mcp_tool_calls_total";
const MCP_ERRORS: &str = "svc_mcp_tool_errors_total";

/// HTTP server series.
pub mod http {
    use super::*;

    /// One answered request (timed to its response head). `route` is the template the router
    /// matched (never the raw path; None when nothing matched); `status` the status sent.
    pub fn request(method: &'static str, route: Option<&'static str>, status: u16, took: Duration) {
        shards::record_http((method, route, status_label(status)), took.as_secs_f64());
    }

    /// Counts a request in flight until the guard is dropped.
    pub fn active(method: &'static str) -> ActiveRequest {
        let method = METHODS
            .iter()
            .position(|m| *m == method)
            .unwrap_or(METHODS.len() - 1);
        shards::add_active(method, 1);
        ActiveRequest { method }
    }

    /// See [`active`].
    #[derive(Debug)]
    pub struct ActiveRequest {
        method: usize,
    }

    impl Drop for ActiveRequest {
        fn drop(&mut self) {
            shards::add_active(self.method, -1);
        }
    }

    /// The label of a status code, without allocating: the codes svc sends by name, any
    /// other by its class (the exact arms come first, so the ranges only catch the rest).
    #[allow(clippy::match_overlapping_arm)]
    fn status_label(status: u16) -> &'static str {
        match status {
            200 => "200",
            201 => "201",
            204 => "204",
            206 => "206",
            301 => "301",
            302 => "302",
            303 => "303",
            304 => "304",
            307 => "307",
            308 => "308",
            400 => "400",
            401 => "401",
            403 => "403",
            404 => "404",
            405 => "405",
            409 => "409",
            413 => "413",
            415 => "415",
            422 => "422",
            429 => "429",
            499 => "499",
            500 => "500",
            501 => "501",
            502 => "502",
            503 => "503",
            504 => "504",
            100..=199 => "1xx",
            200..=299 => "2xx",
            300..=399 => "3xx",
            400..=499 => "4xx",
            _ => "5xx",
        }
    }

    pub use super::shards::METHODS;

    /// The method's label: the standard methods, or `_OTHER` as the conventions say.
    pub fn method_label(method: &str) -> &'static str {
        METHODS
            .iter()
            .find(|m| **m == method)
            .copied()
            .unwrap_or("_OTHER")
    }
}

/// Query and scan series.
pub mod query {
    use super::*;

    /// One query or scan that has ended (read to the end, stopped, or dropped by its client).
    /// `route` is the route kind (`local`, `remote`, `hybrid`, `internal`).
    pub fn finished(route: &'static str, took: Duration, rows: usize, bytes_read: Option<u64>) {
        thread_local! {
            static SERIES: RefCell<HashMap<&'static str, (Histogram, Counter, Counter)>> =
                RefCell::default();
        }
        with_handle(
            &SERIES,
            route,
            |route| {
                (
                    histogram!(QUERY_DURATION, "route" => *route),
                    counter!(QUERY_ROWS, "route" => *route),
                    counter!(QUERY_BYTES, "route" => *route),
                )
            },
            |(duration, rows_total, bytes_total)| {
                duration.record(took.as_secs_f64());
                rows_total.increment(rows as u64);
                if let Some(bytes) = bytes_read {
                    bytes_total.increment(bytes);
                }
            },
        );
    }

    /// A remote read's estimate, checked against its guard; `refused` when it was over.
    pub fn remote_estimate(estimated_bytes: u64, refused: bool) {
        histogram!(REMOTE_ESTIMATED).record(estimated_bytes as f64);
        if refused {
            counter!(REMOTE_REFUSED).increment(1);
        }
    }
}

/// Audit writer series.
pub mod audit {
    use super::*;

    /// Rows queued and not yet stored.
    pub fn queue_depth(rows: usize) {
        gauge!(AUDIT_QUEUE).set(rows as f64);
    }

    /// One batch written: `stored` of its rows stored and `failed` lost (logged), in `took`.
    pub fn batch(stored: usize, failed: usize, took: Duration) {
        histogram!(AUDIT_FLUSH).record(took.as_secs_f64());
        counter!(AUDIT_ROWS, "result" => "stored").increment(stored as u64);
        if failed > 0 {
            counter!(AUDIT_ROWS, "result" => "failed").increment(failed as u64);
        }
    }
}

/// The caches whose hit rate an operator tunes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cache {
    /// Schema responses.
    Schema,
    /// Sample responses.
    Sample,
    /// Resolved bearer tokens.
    Identity,
    /// The registry snapshot the access check reads.
    Registry,
    /// Each user's granted tables.
    Grants,
    /// Each user's groups (`/api/me`).
    Groups,
    /// Catalog bodies per caller view.
    Catalog,
}

impl Cache {
    /// Every cache, in the order of [`Cache::index`].
    const ALL: [Self; 7] = [
        Self::Schema,
        Self::Sample,
        Self::Identity,
        Self::Registry,
        Self::Grants,
        Self::Groups,
        Self::Catalog,
    ];

    /// Its place in [`Cache::ALL`]: the declaration order.
    fn index(self) -> usize {
        self as usize
    }

    fn label(self) -> &'static str {
        match self {
            Self::Schema => "schema",
            Self::Sample => "sample",
            Self::Identity => "identity",
            Self::Registry => "registry",
            Self::Grants => "grants",
            Self::Groups => "groups",
            Self::Catalog => "catalog",
        }
    }

    /// One lookup.
    pub fn lookup(self, hit: bool) {
        shards::add_lookup(self.index(), hit);
    }
}

/// Source driver series.
pub mod driver {
    use super::*;

    /// An error a driver returned, by the driver's error kind (`upstream`, `timeout`, …).
    pub fn error(kind: &'static str) {
        counter!(DRIVER_ERRORS, "kind" => kind).increment(1);
    }
}

/// Scheduler series.
pub mod jobs {
    use super::*;

    /// One job run that has ended.
    pub fn run(job: &'static str, ok: bool, took: Duration) {
        let outcome = if ok { "success" } else { "failure" };
        counter!(JOB_RUNS, "job" => job, "outcome" => outcome).increment(1);
        histogram!(JOB_DURATION, "job" => job).record(took.as_secs_f64());
    }
}

/// Telemetry pipeline series.
pub mod telemetry {
    use super::*;

    /// One transcript read: its bytes, the events extracted and the lines that did not parse.
    pub fn transcript(bytes: u64, events: usize, malformed_lines: u64) {
        counter!(TELEMETRY_BYTES).increment(bytes);
        counter!(TELEMETRY_EVENTS).increment(events as u64);
        counter!(TELEMETRY_MALFORMED).increment(malformed_lines);
    }
}

/// MCP series.
pub mod mcp {
    use super::*;

    /// One tool call; `is_error` when it was answered with `isError: true`.
    pub fn tool_call(tool: &'static str, is_error: bool) {
        counter!(MCP_CALLS, "tool" => tool).increment(1);
        if is_error {
            counter!(MCP_ERRORS, "tool" => tool).increment(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cache counters are found by declaration order: `ALL` must list it.
    #[test]
    fn every_cache_sits_at_its_index() {
        for (i, c) in Cache::ALL.iter().enumerate() {
            assert_eq!(c.index(), i, "{c:?}");
        }
    }

    /// Every method svc labels has its gauge, and anything else is `_OTHER`.
    #[test]
    fn method_labels_are_the_closed_set() {
        assert_eq!(http::method_label("GET"), "GET");
        assert_eq!(http::method_label("PROPFIND"), "_OTHER");
        drop(http::active("DELETE"));
        drop(http::active("_OTHER"));
    }
}
