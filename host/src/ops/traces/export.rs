//! The exporter: a thread of its own that batches finished spans and posts them over OTLP
//! (http/protobuf), configured by the standard `OTEL_*` variables.
//!
//! It runs outside the async runtime, so a slow collector delays only this thread. Spans
//! wait in bounded per-thread shards ([`Queue`]) that the exporter empties every schedule
//! delay, or sooner when a batch is full or a flush is asked: a finished span is encoded
//! into its own thread's shard, never handed to another thread (a channel woke the exporter
//! for each span — a futex call and a context switch per span, most of what a traced request
//! cost). A span that finds its shard full is dropped and counted (reported with the next
//! export).

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};

use svc_trace::{Anchor, Finished};

use super::otlp::{self, Origin};

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

/// Finished spans waiting for the exporter, encoded, in a shard per thread that ends spans,
/// and the exporter's flush bookkeeping.
///
/// A span is encoded into its own thread's shard under that shard's lock, which only the
/// exporter also takes, once a batch: the lock and the bytes stay in that core's cache. One
/// queue shared by the runtime's workers made every span move its lock and its bytes between
/// cores, and (while spans were encoded under it) made the workers wait on each other in
/// the kernel.
#[derive(Debug)]
pub(super) struct Queue {
    /// Tells this queue's shards from another's in a thread's slot.
    id: u64,
    control: Mutex<Control>,
    /// The exporter waits on this: a full batch or a flush asked.
    wake: Condvar,
    /// Flushers wait on this: a flush done.
    flushed: Condvar,
    /// The most spans one thread's shard holds; past it, that thread's spans are dropped.
    max_queue: usize,
    max_batch: usize,
    origin: Origin,
}

#[derive(Debug)]
struct Control {
    shards: Vec<Arc<Mutex<Shard>>>,
    /// A shard filled a batch since the exporter last took the spans.
    full: bool,
    /// The anchor a new shard starts with.
    anchor: Anchor,
    /// Flushes asked, and the last one the exporter has done (tickets).
    flush_asked: u64,
    flush_done: u64,
}

/// One thread's spans.
#[derive(Debug)]
struct Shard {
    spans: otlp::Encoded,
    /// What times the spans as they are queued: renewed each time the exporter takes them,
    /// so it is a schedule delay old at most.
    anchor: Anchor,
    /// Constant attributes, encoded once per thread.
    constants: otlp::Constants,
    /// Spans dropped on a full shard since the last export.
    dropped: u64,
}

/// A thread's shard, and which queue it belongs to (a process has one queue, but tests may
/// make more).
type Local = Option<(u64, Arc<Mutex<Shard>>)>;

thread_local! {
    static SHARD: RefCell<Local> = const { RefCell::new(None) };
}

/// The next queue's id.
static QUEUES: AtomicU64 = AtomicU64::new(0);

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl Queue {
    pub fn new(max_queue: usize, max_batch: usize, origin: &Origin) -> Self {
        Self {
            id: QUEUES.fetch_add(1, Ordering::Relaxed),
            control: Mutex::new(Control {
                shards: Vec::new(),
                full: false,
                anchor: Anchor::now(),
                flush_asked: 0,
                flush_done: 0,
            }),
            wake: Condvar::new(),
            flushed: Condvar::new(),
            max_queue,
            max_batch,
            origin: origin.clone(),
        }
    }

    /// Queues a finished span, encoded into this thread's shard; wakes the exporter only when
    /// the shard holds a full batch.
    pub fn push(&self, span: &Finished) {
        // A span ended while the thread's slots are being torn down is let go.
        let _ = SHARD.try_with(|local| {
            let mut local = local.borrow_mut();
            if !matches!(&*local, Some((queue, _)) if *queue == self.id) {
                *local = Some((self.id, self.register()));
            }
            let Some((_, shard)) = &*local else {
                unreachable!("registered above")
            };
            let mut shard = lock(shard);
            if shard.spans.len() >= self.max_queue {
                shard.dropped += 1;
                return;
            }
            let Shard {
                spans,
                anchor,
                constants,
                ..
            } = &mut *shard;
            spans.push(span, anchor, constants);
            if spans.len() == self.max_batch {
                drop(shard);
                lock(&self.control).full = true;
                self.wake.notify_one();
            }
        });
    }

    /// A new shard for the calling thread.
    fn register(&self) -> Arc<Mutex<Shard>> {
        let mut control = lock(&self.control);
        let shard = Arc::new(Mutex::new(Shard {
            spans: otlp::Encoded::new(&self.origin),
            anchor: control.anchor,
            constants: otlp::Constants::default(),
            dropped: 0,
        }));
        control.shards.push(shard.clone());
        shard
    }

    /// Waits until a shard holds a full batch, a flush is asked or `delay` has passed; the
    /// last flush asked, which the spans taken next fulfil.
    fn wait(&self, delay: Duration) -> u64 {
        let mut control = lock(&self.control);
        if !control.full && control.flush_done >= control.flush_asked {
            control = self
                .wake
                .wait_timeout(control, delay)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        control.full = false;
        control.flush_asked
    }

    /// Takes every shard's spans as requests of at most a batch each, handed to `send` with
    /// how many spans each holds, and renews the shards' anchor; how many spans were dropped
    /// since the last time. The shards' spans are gathered into `batch` first, so threads
    /// share requests: a request per shard cost a post per thread each schedule delay.
    fn take(&self, batch: &mut otlp::Encoded, mut send: impl FnMut(Bytes, usize)) -> u64 {
        let (shards, anchor) = {
            let mut control = lock(&self.control);
            // Shards of threads that have ended, once emptied, are let go.
            control
                .shards
                .retain(|shard| Arc::strong_count(shard) > 1 || lock(shard).spans.len() > 0);
            control.anchor = Anchor::now();
            (control.shards.clone(), control.anchor)
        };
        let mut dropped = 0;
        for shard in &shards {
            let mut shard = lock(shard);
            dropped += std::mem::take(&mut shard.dropped);
            batch.take_from(&mut shard.spans);
            shard.anchor = anchor;
        }
        for (request, count) in batch.take_requests(&self.origin, self.max_batch) {
            send(request, count);
        }
        dropped
    }

    /// Says the flush `ticket` (and every one before it) is done.
    fn done(&self, ticket: u64) {
        let mut control = lock(&self.control);
        if control.flush_done < ticket {
            control.flush_done = ticket;
            self.flushed.notify_all();
        }
    }

    /// Exports every span queued so far, waiting at most `timeout`; whether it was done.
    fn flush(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut control = lock(&self.control);
        control.flush_asked += 1;
        let ticket = control.flush_asked;
        self.wake.notify_one();
        while control.flush_done < ticket {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            control = self
                .flushed
                .wait_timeout(control, left)
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
    let client = reqwest::blocking::Client::builder()
        .timeout(settings.timeout)
        .build()
        .unwrap_or_default();
    let mut sender = Sender {
        settings,
        client,
        failing: false,
    };
    // Where the shards' spans are gathered each round.
    let mut batch = otlp::Encoded::new(&settings.origin);
    loop {
        let ticket = queue.wait(settings.delay);
        let dropped = queue.take(&mut batch, |request, count| sender.send(request, count));
        if dropped > 0 {
            tracing::warn!(
                dropped,
                "trace spans dropped: a thread's queue was full (OTEL_BSP_MAX_QUEUE_SIZE)"
            );
        }
        queue.done(ticket);
    }
}

/// Posts batches; says when exports start failing and when they recover, not per batch.
struct Sender<'a> {
    settings: &'a Settings,
    client: reqwest::blocking::Client,
    failing: bool,
}

impl Sender<'_> {
    /// Posts one request holding `spans` spans.
    fn send(&mut self, body: Bytes, spans: usize) {
        let answer = self
            .client
            .post(&self.settings.endpoint)
            .headers(self.settings.headers.clone())
            .header(CONTENT_TYPE, "application/x-protobuf")
            .body(body)
            .send();
        let failure = match answer {
            Ok(r) if r.status().is_success() => None,
            Ok(r) => Some(format!("the collector answered {}", r.status())),
            Err(e) => Some(e.without_url().to_string()),
        };
        match failure {
            Some(error) if !self.failing => {
                self.failing = true;
                tracing::warn!(
                    endpoint = %self.settings.endpoint,
                    spans,
                    %error,
                    "trace export failed; spans are dropped until the collector answers"
                );
            }
            None if self.failing => {
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

    fn span() -> Finished {
        Finished {
            trace_id: svc_trace::TraceId::random(),
            span_id: svc_trace::SpanId::random(),
            parent: None,
            name: "auth.resolve".into(),
            kind: svc_trace::Kind::Internal,
            start: svc_trace::Ticks::now(),
            end: svc_trace::Ticks::now(),
            attributes: vec![("http.route", svc_trace::Value::from("/api/v2/sample"))],
        }
    }

    fn origin() -> Origin {
        Origin {
            service_name: "svc-test".into(),
            service_version: "1.2.3",
        }
    }

    /// How many times each id's bytes occur in the requests.
    fn occurrences(requests: &[Bytes], id: &[u8; 8]) -> usize {
        requests
            .iter()
            .map(|r| r.windows(8).filter(|w| w == id).count())
            .sum()
    }

    #[test]
    fn spans_from_every_thread_are_taken_once_in_batches_and_ended_threads_let_go() {
        let origin = origin();
        let queue = Arc::new(Queue::new(1_000, 4, &origin));
        let threads: Vec<_> = (0..3)
            .map(|t| {
                let queue = queue.clone();
                std::thread::spawn(move || {
                    (0..10 + t)
                        .map(|_| {
                            let span = span();
                            queue.push(&span);
                            span.span_id.0
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let ids: Vec<[u8; 8]> = threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect();
        assert_eq!(ids.len(), 33);
        // A thread filled a batch, so the exporter is not left to sleep out its delay.
        assert_eq!(queue.wait(Duration::from_secs(60)), 0);
        let mut batch = otlp::Encoded::new(&origin);
        let mut requests = Vec::new();
        let dropped = queue.take(&mut batch, |request, count| {
            assert!((1..=4).contains(&count), "{count} spans in a batch of 4");
            requests.push(request);
        });
        assert_eq!(dropped, 0);
        // The threads' spans share requests: 33 spans make 8 full batches and one of 1.
        assert_eq!(requests.len(), 9);
        for id in &ids {
            assert_eq!(occurrences(&requests, id), 1);
        }
        // Every thread has ended and its shard is empty: the next take lets them go.
        assert_eq!(lock(&queue.control).shards.len(), 3);
        let mut again = 0;
        queue.take(&mut batch, |_, _| again += 1);
        assert_eq!(again, 0, "every span was taken once");
        assert!(lock(&queue.control).shards.is_empty());
    }

    #[test]
    fn a_full_shard_drops_and_counts_and_a_flush_is_answered() {
        let origin = origin();
        let queue = Queue::new(5, 512, &origin);
        let ids: Vec<[u8; 8]> = (0..8)
            .map(|_| {
                let span = span();
                queue.push(&span);
                span.span_id.0
            })
            .collect();
        let mut batch = otlp::Encoded::new(&origin);
        let mut requests = Vec::new();
        assert_eq!(queue.take(&mut batch, |r, _| requests.push(r)), 3);
        let kept: Vec<usize> = ids.iter().map(|id| occurrences(&requests, id)).collect();
        assert_eq!(kept, [1, 1, 1, 1, 1, 0, 0, 0], "the first five are kept");
        // After a take the shard has room again, and a flush asked is seen by the exporter.
        queue.push(&span());
        std::thread::scope(|scope| {
            let flushing = scope.spawn(|| queue.flush(Duration::from_secs(30)));
            let ticket = loop {
                let ticket = queue.wait(Duration::from_millis(10));
                if ticket > 0 {
                    break ticket;
                }
            };
            let mut taken = 0;
            queue.take(&mut batch, |_, n| taken += n);
            assert_eq!(taken, 1);
            queue.done(ticket);
            assert!(flushing.join().unwrap(), "the flush was answered");
        });
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
