//! The exporter: a thread of its own that batches finished spans and posts them over OTLP
//! (http/protobuf), configured by the standard `OTEL_*` variables.
//!
//! It runs outside the async runtime, so a slow collector delays only this thread. Spans
//! wait in a bounded queue that the exporter empties every schedule delay, or sooner when a
//! batch is full or a flush is asked: a finished span is encoded on its own thread and
//! appended under a lock nobody holds for long, never a wake-up of another thread (a channel
//! woke the exporter for each span — a futex call and a context switch per span, most of what
//! a traced request cost). A span that finds the queue full is dropped and counted (reported
//! with the next export).

use std::cell::RefCell;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use svc_trace::{Anchor, Finished};

use super::otlp::{self, Origin};
use super::post::Poster;

/// Where and how spans are exported.
#[derive(Debug, Clone)]
pub(super) struct Settings {
    pub endpoint: String,
    pub headers: HeaderMap,
    pub timeout: Duration,
    /// `OTEL_BSP_SCHEDULE_DELAY`: the longest a span waits for its batch.
    pub delay: Duration,
    pub max_queue: usize,
    pub max_batch: usize,
    pub origin: Origin,
}

impl Settings {
    /// The settings the variables give (`var` reads one), or None when no endpoint is set.
    /// A value that cannot be used is an error naming its variable.
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Result<Option<Self>, String> {
        let var = |k: &str| {
            var(k)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        // The signal-specific endpoint is used as given; the general one is a base URL.
        let endpoint = match (
            var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
            var("OTEL_EXPORTER_OTLP_ENDPOINT"),
        ) {
            (Some(traces), _) => traces,
            (None, Some(base)) => format!("{}/v1/traces", base.trim_end_matches('/')),
            (None, None) => return Ok(None),
        };
        let parsed = reqwest::Url::parse(&endpoint)
            .map_err(|e| format!("the OTLP endpoint '{endpoint}' is not a URL: {e}"))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(format!(
                "the OTLP endpoint '{endpoint}' must be http:// or https://"
            ));
        }
        for key in [
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ] {
            if let Some(protocol) = var(key) {
                if protocol != "http/protobuf" {
                    return Err(format!(
                        "{key} is '{protocol}'; svc exports traces over http/protobuf only"
                    ));
                }
                break;
            }
        }
        let headers = match var("OTEL_EXPORTER_OTLP_TRACES_HEADERS")
            .map(|h| ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", h))
            .or_else(|| {
                var("OTEL_EXPORTER_OTLP_HEADERS").map(|h| ("OTEL_EXPORTER_OTLP_HEADERS", h))
            }) {
            Some((key, list)) => parse_headers(&list).map_err(|e| format!("{key}: {e}"))?,
            None => HeaderMap::new(),
        };
        let number = |key: &str, default: u64| -> Result<u64, String> {
            match var(key) {
                None => Ok(default),
                Some(v) => v
                    .parse::<u64>()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| format!("{key} is '{v}'; it must be a positive integer")),
            }
        };
        let timeout = match var("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT") {
            Some(_) => number("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", 10_000)?,
            None => number("OTEL_EXPORTER_OTLP_TIMEOUT", 10_000)?,
        };
        let max_queue = number("OTEL_BSP_MAX_QUEUE_SIZE", 2048)? as usize;
        let max_batch = (number("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512)? as usize).min(max_queue);
        Ok(Some(Self {
            endpoint,
            headers,
            timeout: Duration::from_millis(timeout),
            delay: Duration::from_millis(number("OTEL_BSP_SCHEDULE_DELAY", 5_000)?),
            max_queue,
            max_batch,
            origin: Origin {
                service_name: var("OTEL_SERVICE_NAME").unwrap_or_else(|| "svc".into()),
                service_version: crate::api::VERSION,
            },
        }))
    }
}

/// `key=value` pairs separated by commas, values percent-encoded (the W3C baggage form the
/// standard variables use).
fn parse_headers(list: &str) -> Result<HeaderMap, String> {
    let mut map = HeaderMap::new();
    for pair in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| format!("'{}' is not key=value", redact(pair)))?;
        let name = HeaderName::try_from(key.trim())
            .map_err(|_| format!("'{}' is not a header name", key.trim()))?;
        let value = percent_decode(value.trim());
        let value = HeaderValue::try_from(value)
            .map_err(|_| format!("the value of '{name}' is not a header value"))?;
        map.append(name, value);
    }
    Ok(map)
}

/// A header pair as an error may show it: the name only (values are often credentials).
fn redact(pair: &str) -> String {
    let name = pair.split(['=', ':']).next().unwrap_or_default();
    format!("{name}…")
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Finished spans waiting for the exporter, encoded, and its flush bookkeeping.
#[derive(Debug)]
pub(super) struct Queue {
    state: Mutex<State>,
    /// The exporter waits on this: a full batch or a flush asked.
    wake: Condvar,
    /// Flushers wait on this: a flush done.
    flushed: Condvar,
    max_queue: usize,
    max_batch: usize,
}

#[derive(Debug)]
struct State {
    spans: otlp::Encoded,
    /// What times the spans as they are queued: read afresh each time the exporter takes
    /// them, so it is a schedule delay old at most.
    anchor: Anchor,
    /// Spans dropped on a full queue since the last export.
    dropped: u64,
    /// Flushes asked, and the last one the exporter has done (tickets).
    flush_asked: u64,
    flush_done: u64,
}

impl Queue {
    pub fn new(max_queue: usize, max_batch: usize, origin: &Origin) -> Self {
        Self {
            state: Mutex::new(State {
                spans: otlp::Encoded::new(origin),
                anchor: Anchor::now(),
                dropped: 0,
                flush_asked: 0,
                flush_done: 0,
            }),
            wake: Condvar::new(),
            flushed: Condvar::new(),
            max_queue,
            max_batch,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues a finished span, encoded; wakes the exporter only when a batch is full.
    ///
    /// The span is encoded on this thread between two short holds of the lock (one to read
    /// the anchor, one to append the bytes): encoding under the lock made the runtime's
    /// workers, which end spans at the same time, wait on each other in the kernel.
    pub fn push(&self, span: &Finished) {
        thread_local! {
            /// This thread's constant attributes and the buffer a span is encoded into.
            static LOCAL: RefCell<(otlp::Constants, Vec<u8>)> = RefCell::default();
        }
        let anchor = {
            let mut state = self.lock();
            // A full queue drops the span before the work of encoding it.
            if state.spans.len() >= self.max_queue {
                state.dropped += 1;
                return;
            }
            state.anchor
        };
        LOCAL.with(|local| {
            let (constants, field) = &mut *local.borrow_mut();
            field.clear();
            otlp::encode_span(span, &anchor, constants, field);
            let mut state = self.lock();
            if state.spans.len() >= self.max_queue {
                state.dropped += 1;
                return;
            }
            state.spans.append(field);
            if state.spans.len() == self.max_batch {
                self.wake.notify_one();
            }
        });
    }

    /// Exports every span queued so far, waiting at most `timeout`; whether it was done.
    fn flush(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut state = self.lock();
        state.flush_asked += 1;
        let ticket = state.flush_asked;
        self.wake.notify_one();
        while state.flush_done < ticket {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            state = self
                .flushed
                .wait_timeout(state, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        true
    }
}

/// Every span svc finishes is pushed here.
impl svc_trace::Sink for Queue {
    fn push(&self, span: &Finished) {
        Queue::push(self, span);
    }
}

/// The running exporter.
#[derive(Debug)]
pub(super) struct Exporter {
    queue: Arc<Queue>,
    thread: Option<JoinHandle<()>>,
}

impl Exporter {
    /// Starts the exporter's thread.
    pub fn start(settings: Settings) -> std::io::Result<Self> {
        let queue = Arc::new(Queue::new(
            settings.max_queue,
            settings.max_batch,
            &settings.origin,
        ));
        let exporting = queue.clone();
        let thread = std::thread::Builder::new()
            .name("svc-otlp".into())
            .spawn(move || run(&settings, &exporting))?;
        Ok(Self {
            queue,
            thread: Some(thread),
        })
    }

    /// Where finished spans go.
    pub fn queue(&self) -> Arc<Queue> {
        self.queue.clone()
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        if !self.queue.flush(Duration::from_secs(5)) {
            eprintln!("svc-server: traces not flushed at exit");
        }
        // The layer keeps the queue for the life of the process, so the thread is left to
        // end with it rather than joined.
        drop(self.thread.take());
    }
}

/// The exporter's loop: every schedule delay, or sooner when woken, it takes what is queued
/// and posts it in batches.
fn run(settings: &Settings, queue: &Queue) {
    let mut sender = Sender {
        settings,
        poster: Poster::new(&settings.endpoint, &settings.headers, settings.timeout),
        failing: false,
    };
    // Swapped with the queue's spans each round, so both keep the room they grew to.
    let mut spans = otlp::Encoded::new(&settings.origin);
    loop {
        let (dropped, ticket) = {
            let mut state = queue.lock();
            if state.spans.len() < settings.max_batch && state.flush_done >= state.flush_asked {
                state = queue
                    .wake
                    .wait_timeout(state, settings.delay)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
            let dropped = std::mem::take(&mut state.dropped);
            std::mem::swap(&mut state.spans, &mut spans);
            state.anchor = Anchor::now();
            (dropped, state.flush_asked)
        };
        if dropped > 0 {
            tracing::warn!(
                dropped,
                "trace spans dropped: the exporter's queue was full (OTEL_BSP_MAX_QUEUE_SIZE)"
            );
        }
        for (request, count) in spans.take_requests(&settings.origin, settings.max_batch) {
            sender.send(request, count);
        }
        let mut state = queue.lock();
        if state.flush_done < ticket {
            state.flush_done = ticket;
            queue.flushed.notify_all();
        }
    }
}

/// Posts batches; says when exports start failing and when they recover, not per batch.
struct Sender<'a> {
    settings: &'a Settings,
    poster: Poster,
    failing: bool,
}

impl Sender<'_> {
    /// Posts one request holding `spans` spans.
    fn send(&mut self, body: Bytes, spans: usize) {
        match self.poster.post(body) {
            Err(error) if !self.failing => {
                self.failing = true;
                tracing::warn!(
                    endpoint = %self.settings.endpoint,
                    spans,
                    %error,
                    "trace export failed; spans are dropped until the collector answers"
                );
            }
            Ok(()) if self.failing => {
                self.failing = false;
                tracing::info!(endpoint = %self.settings.endpoint, "trace export recovered");
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(vars: &[(&str, &str)]) -> Result<Option<Settings>, String> {
        Settings::from_env(|k| {
            vars.iter()
                .find(|(name, _)| *name == k)
                .map(|(_, v)| (*v).to_owned())
        })
    }

    #[test]
    fn the_endpoint_comes_from_the_standard_variables() {
        assert!(settings(&[]).unwrap().is_none());
        assert!(settings(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")])
            .unwrap()
            .is_none());
        let s = settings(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/")])
            .unwrap()
            .unwrap();
        assert_eq!(s.endpoint, "http://collector:4318/v1/traces");
        assert_eq!(s.delay, Duration::from_secs(5));
        assert_eq!((s.max_queue, s.max_batch), (2048, 512));
        let s = settings(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://t.example/in"),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "authorization=Bearer%20abc, x-team=data",
            ),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
            ("OTEL_SERVICE_NAME", "svc-eu"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(s.endpoint, "https://t.example/in");
        assert_eq!(s.headers["authorization"], "Bearer abc");
        assert_eq!(s.headers["x-team"], "data");
        assert_eq!(s.delay, Duration::from_millis(100));
        assert_eq!(s.origin.service_name, "svc-eu");
    }

    #[test]
    fn unusable_values_are_refused_by_name_without_echoing_header_values() {
        for (vars, names) in [
            (
                vec![("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318")],
                "must be http",
            ),
            (
                vec![
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
                    ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
                ],
                "OTEL_EXPORTER_OTLP_PROTOCOL",
            ),
            (
                vec![
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
                    ("OTEL_BSP_SCHEDULE_DELAY", "soon"),
                ],
                "OTEL_BSP_SCHEDULE_DELAY",
            ),
            (
                vec![
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
                    ("OTEL_EXPORTER_OTLP_HEADERS", "authorization:secret-token"),
                ],
                "OTEL_EXPORTER_OTLP_HEADERS",
            ),
        ] {
            let err = settings(&vars).unwrap_err();
            assert!(err.contains(names), "{err}");
            assert!(!err.contains("secret-token"), "{err}");
        }
    }
}
