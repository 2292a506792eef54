//! The exporter: a thread of its own that batches finished spans and posts them over OTLP
//! (http/protobuf), configured by the standard `OTEL_*` variables.
//!
//! It runs outside the async runtime, so a slow collector delays only this thread. Spans
//! wait in a bounded queue that the exporter empties every schedule delay, or sooner when a
//! batch is full or a flush is asked: a finished span is encoded on its own thread into that
//! thread's shard of the queue, never a wake-up of another thread (a channel woke the
//! exporter for each span — a futex call and a context switch per span, most of what a
//! traced request cost). The runtime's workers stage their spans and hand them to their
//! shards a run at a time, each time they go idle ([`Queue::hand_over_staged`]). A span
//! that finds its shard full is dropped and counted (reported with the next export).

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
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

/// Finished spans waiting for the exporter, encoded, in one shard per thread that ends
/// spans; and what wakes the exporter and answers flushes.
///
/// A shard per thread, not one queue: with one queue, the runtime's workers took turns on its
/// lock and its buffer for every span (two locks a span, four spans a cached sample), and the
/// cache lines those live on crossed between the cores each time — contention callgrind,
/// running one thread at a time, cannot count. A shard's lock is taken by its own thread and,
/// once a round, by the exporter, so it stays in its thread's cache.
#[derive(Debug)]
pub(super) struct Queue {
    /// This queue among others in one process (tests start several): a thread's shard
    /// belongs to one queue.
    id: u64,
    /// Every thread's shard, drained by the exporter each round.
    shards: Mutex<Vec<Arc<Shard>>>,
    /// How many shards there are: each holds at most `max_queue` over this, so all together
    /// hold at most `max_queue`. Read on every span, written when a thread first ends one.
    shard_count: AtomicUsize,
    control: Mutex<Control>,
    /// The exporter waits on this: a full batch or a flush asked.
    wake: Condvar,
    /// Flushers wait on this: a flush done.
    flushed: Condvar,
    max_queue: usize,
    max_batch: usize,
    origin: Origin,
}

/// One thread's waiting spans.
#[derive(Debug)]
struct Shard(Mutex<ShardState>);

#[derive(Debug)]
struct ShardState {
    spans: otlp::Encoded,
    /// Spans dropped on a full shard since the last export.
    dropped: u64,
    /// Whether this shard has woken the exporter for a full batch since its last drain.
    /// One wake-up a batch: the exporter drains every shard when it runs, and until it gets
    /// a core, which on a busy machine takes milliseconds, each further span would take the
    /// control lock and make a futex call for nothing.
    woke: bool,
}

impl Shard {
    fn lock(&self) -> MutexGuard<'_, ShardState> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What a thread keeps for a queue it pushes to.
struct Local {
    /// The queue's id.
    queue: u64,
    /// This thread's shard of it.
    shard: Arc<Shard>,
    /// Spans finished on this thread, not yet in the shard.
    staged: otlp::Encoded,
    /// What times this thread's spans as they are encoded, read afresh once it is
    /// [`ANCHOR_MAX_AGE_NS`] old.
    anchor: Anchor,
}

impl Drop for Local {
    /// A thread that ends hands over what it staged: its shard is drained once more after.
    /// Past the shard's room too (at most [`MAX_STAGED`] spans over it, once): the thread
    /// holds no queue to count a drop against, and these are its last spans.
    fn drop(&mut self) {
        if self.staged.len() > 0 {
            let mut state = self.shard.lock();
            state.spans.append(&mut self.staged, usize::MAX);
        }
    }
}

thread_local! {
    /// This thread's shard and staged spans for each queue it has pushed to (one, outside
    /// tests).
    static LOCALS: RefCell<Vec<Local>> = const { RefCell::new(Vec::new()) };
    /// Whether this thread stages its spans ([`Queue::hand_over_staged`]).
    static STAGING: Cell<bool> = const { Cell::new(false) };
}

/// The most spans a thread stages before handing them over: a few requests' worth, so the
/// queue's bound still holds within a few dozen spans a thread.
const MAX_STAGED: usize = 32;

/// How old a thread's anchor may be: the wall clock's steps and slews reach spans' times
/// within a second.
const ANCHOR_MAX_AGE_NS: u64 = 1_000_000_000;

/// The exporter's wake-up and flush bookkeeping.
#[derive(Debug, Default)]
struct Control {
    /// A shard has a full batch waiting.
    full: bool,
    /// Flushes asked, and the last one the exporter has done (tickets).
    flush_asked: u64,
    flush_done: u64,
}

impl Queue {
    pub fn new(max_queue: usize, max_batch: usize, origin: &Origin) -> Self {
        static IDS: AtomicU64 = AtomicU64::new(0);
        Self {
            id: IDS.fetch_add(1, Ordering::Relaxed),
            shards: Mutex::default(),
            shard_count: AtomicUsize::new(0),
            control: Mutex::default(),
            wake: Condvar::new(),
            flushed: Condvar::new(),
            max_queue,
            max_batch,
            origin: origin.clone(),
        }
    }

    fn control(&self) -> MutexGuard<'_, Control> {
        self.control.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn shards(&self) -> MutexGuard<'_, Vec<Arc<Shard>>> {
        self.shards.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues a finished span: encoded on this thread, then handed to this thread's shard at
    /// once, or, on a thread that stages ([`Queue::hand_over_staged`]), with the others it
    /// has staged. Wakes the exporter only when the shard holds a full batch.
    pub fn push(&self, span: &Finished) {
        // A span ended by a thread-local's destructor, after this thread's staging is gone,
        // is lost: the thread is ending and has nowhere left to queue it.
        let full = LOCALS.try_with(|locals| {
            let mut locals = locals.borrow_mut();
            let local = match locals.iter().position(|l| l.queue == self.id) {
                Some(i) => &mut locals[i],
                None => {
                    locals.push(Local {
                        queue: self.id,
                        shard: self.register(),
                        staged: otlp::Encoded::staging(),
                        anchor: Anchor::now(),
                    });
                    locals.last_mut().expect("just pushed")
                }
            };
            if local.anchor.age_ns(span.end) > ANCHOR_MAX_AGE_NS {
                local.anchor = Anchor::now();
            }
            local.staged.push(span, &local.anchor);
            if STAGING.get() && local.staged.len() < MAX_STAGED {
                return false;
            }
            self.hand_over(local)
        });
        if matches!(full, Ok(true)) {
            self.wake_for_batch();
        }
    }

    /// Hands over the spans this thread has staged, and stages the spans it finishes from
    /// now on: for a thread that calls this whenever it goes idle (the runtime's workers, on
    /// parking), so no span waits on it longer than its next idle moment.
    ///
    /// Why stage: a span handed over alone took the shard's lock for it, and four fifths of
    /// the push's samples fell on the lock's two atomic instructions (perf), most likely
    /// waiting for the span's bytes, in lines the exporter had last read, to be this core's. Staged, a
    /// span is written where this thread wrote the last one, and the lock is taken once for
    /// a run of them: the push and hand-over fell from 1.3 % of a traced server's samples to
    /// 0.5 % (perf, cached samples under wrk).
    pub fn hand_over_staged(&self) {
        STAGING.set(true);
        let full = LOCALS.try_with(|locals| {
            let mut locals = locals.borrow_mut();
            locals
                .iter_mut()
                .find(|l| l.queue == self.id && l.staged.len() > 0)
                .is_some_and(|local| self.hand_over(local))
        });
        if matches!(full, Ok(true)) {
            self.wake_for_batch();
        }
    }

    /// Moves `local`'s staged spans into its shard, as many as the shard has room for (the
    /// rest are dropped and counted); whether the shard now holds a batch the exporter has
    /// not been woken for.
    fn hand_over(&self, local: &mut Local) -> bool {
        let staged = local.staged.len();
        let mut state = local.shard.lock();
        let room = (self.max_queue / self.shard_count.load(Ordering::Relaxed).max(1)).max(1);
        let free = room.saturating_sub(state.spans.len());
        let moved = state.spans.append(&mut local.staged, free);
        state.dropped += (staged - moved) as u64;
        let wake = !state.woke && state.spans.len() >= self.max_batch.min(room);
        state.woke |= wake;
        wake
    }

    /// Tells the exporter a shard holds a full batch.
    fn wake_for_batch(&self) {
        self.control().full = true;
        self.wake.notify_one();
    }

    /// A shard for the calling thread, drained from now on.
    fn register(&self) -> Arc<Shard> {
        let shard = Arc::new(Shard(Mutex::new(ShardState {
            spans: otlp::Encoded::new(&self.origin),
            dropped: 0,
            woke: false,
        })));
        let mut shards = self.shards();
        shards.push(shard.clone());
        self.shard_count.store(shards.len(), Ordering::Relaxed);
        shard
    }

    /// Hands each shard's waiting spans to `send` as requests of at most a batch each (with
    /// how many spans each holds); how many spans were dropped on full shards since the
    /// last drain. A shard whose thread has ended goes once it is empty.
    ///
    /// A shard's requests are made where its spans lie: the first is posted from the buffer
    /// its spans were encoded into, and the shard keeps a buffer of the room it grew to.
    /// Gathering the shards' spans into one buffer first, or passing buffers from shard to
    /// shard (so a busy thread's grew again from a quiet one's), cost a traced request more
    /// instructions in copies than the extra posts of partial batches.
    fn drain(&self, mut send: impl FnMut(Bytes, usize)) -> u64 {
        let mut dropped = 0;
        // The list is not held while posting: a thread's first span would wait on it.
        let shards = self.shards().clone();
        for shard in &shards {
            let requests = {
                let mut state = shard.lock();
                dropped += std::mem::take(&mut state.dropped);
                state.woke = false;
                state.spans.take_requests(&self.origin, self.max_batch)
            };
            for (request, count) in requests {
                send(request, count);
            }
        }
        drop(shards);
        let mut shards = self.shards();
        // Only the list holds the shard of a thread that has ended; it goes once empty (its
        // thread may have pushed after the drain above, before it ended).
        shards.retain(|shard| Arc::strong_count(shard) > 1 || shard.lock().spans.len() > 0);
        self.shard_count.store(shards.len(), Ordering::Relaxed);
        dropped
    }

    /// Exports every span queued so far, waiting at most `timeout`; whether it was done.
    fn flush(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut control = self.control();
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

    /// A thread going idle (a runtime worker parking) hands over what it staged, and stages
    /// from then on.
    fn idle(&self) {
        self.hand_over_staged();
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
    loop {
        let ticket = {
            let mut control = queue.control();
            if !control.full && control.flush_done >= control.flush_asked {
                control = queue
                    .wake
                    .wait_timeout(control, settings.delay)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
            control.full = false;
            control.flush_asked
        };
        let dropped = queue.drain(|request, count| sender.send(request, count));
        if dropped > 0 {
            tracing::warn!(
                dropped,
                "trace spans dropped: the exporter's queue was full (OTEL_BSP_MAX_QUEUE_SIZE)"
            );
        }
        let mut control = queue.control();
        if control.flush_done < ticket {
            control.flush_done = ticket;
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

    fn span() -> Finished {
        let trace_id = svc_trace::TraceId::random();
        Finished {
            trace_id,
            span_id: svc_trace::SpanId::random(),
            parent: None,
            name: "GET /api/v2/sample/{table_id}".into(),
            kind: svc_trace::Kind::Server,
            start: svc_trace::Ticks::now(),
            end: svc_trace::Ticks::now(),
            shared: None,
            attributes: vec![("http.response.status_code", svc_trace::Value::Int(200))],
            failed: false,
        }
    }

    fn origin() -> Origin {
        Origin {
            service_name: "svc-test".into(),
            service_version: "0.0.0",
        }
    }

    /// Drains `queue`: the spans of each request posted, and the spans dropped.
    fn drain(queue: &Queue) -> (Vec<usize>, u64) {
        let mut posted = Vec::new();
        let dropped = queue.drain(|_, count| posted.push(count));
        (posted, dropped)
    }

    #[test]
    fn spans_from_threads_that_have_ended_are_drained_once_then_their_shards_go() {
        let queue = Arc::new(Queue::new(2048, 512, &origin()));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let queue = queue.clone();
                std::thread::spawn(move || (0..25).for_each(|_| queue.push(&span())))
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(queue.shard_count.load(Ordering::Relaxed), 4);
        assert_eq!(drain(&queue), (vec![25; 4], 0));
        assert_eq!(
            queue.shard_count.load(Ordering::Relaxed),
            0,
            "their threads ended"
        );
        assert_eq!(drain(&queue), (vec![], 0), "drained once");
        queue.push(&span());
        assert_eq!(drain(&queue), (vec![1], 0));
        assert_eq!(
            queue.shard_count.load(Ordering::Relaxed),
            1,
            "this thread's stays"
        );
    }

    #[test]
    fn a_full_shard_drops_and_counts_and_each_full_batch_wakes_the_exporter_once() {
        let queue = Queue::new(30, 10, &origin());
        for _ in 0..9 {
            queue.push(&span());
        }
        assert!(!queue.control().full, "not a batch yet");
        queue.push(&span());
        assert!(queue.control().full, "a batch of 10");
        // The exporter takes the wake-up; it has not drained yet.
        queue.control().full = false;
        queue.push(&span());
        assert!(!queue.control().full, "one wake-up a batch, not one a span");
        for _ in 0..30 {
            queue.push(&span());
        }
        assert_eq!(drain(&queue), (vec![10, 10, 10], 11), "past the queue's 30");
        for _ in 0..10 {
            queue.push(&span());
        }
        assert!(
            queue.control().full,
            "a drained shard wakes for its next batch"
        );
    }

    #[test]
    fn a_staging_thread_hands_its_spans_over_when_idle_when_many_and_when_it_ends() {
        let queue = Arc::new(Queue::new(30, 10, &origin()));
        let staging = queue.clone();
        let (step, steps) = std::sync::mpsc::channel::<()>();
        let (done, dones) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            staging.hand_over_staged();
            (0..5).for_each(|_| staging.push(&span()));
            done.send(()).unwrap();
            steps.recv().unwrap();
            // Idle: what was staged goes to the shard.
            staging.hand_over_staged();
            done.send(()).unwrap();
            steps.recv().unwrap();
            // More than a run: handed over without waiting to go idle, past the shard's room
            // dropped and counted.
            (0..MAX_STAGED).for_each(|_| staging.push(&span()));
            done.send(()).unwrap();
            steps.recv().unwrap();
            (0..3).for_each(|_| staging.push(&span()));
        });
        dones.recv().unwrap();
        assert_eq!(drain(&queue), (vec![], 0), "staged, not yet handed over");
        step.send(()).unwrap();
        dones.recv().unwrap();
        assert_eq!(drain(&queue), (vec![5], 0));
        step.send(()).unwrap();
        dones.recv().unwrap();
        assert_eq!(
            drain(&queue),
            (vec![10, 10, 10], (MAX_STAGED - 30) as u64),
            "the shard holds 30"
        );
        step.send(()).unwrap();
        thread.join().unwrap();
        assert_eq!(
            drain(&queue),
            (vec![3], 0),
            "handed over as the thread ended"
        );
    }

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
