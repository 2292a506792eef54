//! svc-trace: the spans of svc's traces, cheap enough to make on every request.
//!
//! - Owns trace and span ids, the span that is current on a thread (set while a future
//!   wrapped by [`Instrument`] is polled, or while an [`Entered`] guard lives), and where
//!   finished spans go: the one [`Sink`] the host's exporter installs when tracing is on;
//!   and, the same way, the request a log line is written for ([`LogTag`]).
//! - Why not `tracing` spans: those run through the subscriber's registry and every layer's
//!   filter on creation, on each enter and exit of every poll, on each record and on close.
//!   Four of them cost a cached sample 21 k instructions on the request path (callgrind, about
//!   a tenth of the whole request). A span here costs an id, two counter reads and a push.
//! - Why spans read a counter ([`Ticks`]), not the wall clock: `SystemTime::now` and its
//!   conversion to nanoseconds cost 140 instructions a read (callgrind), eight reads a traced
//!   request; the CPU's time-stamp counter (through `quanta`, which falls back to the
//!   monotonic clock where the counter is not invariant) costs a few. Ticks become Unix time
//!   against an [`Anchor`] read a few seconds before at most, so the wall clock's steps and
//!   slews reach spans' times within seconds, and a span's duration never jumps with them.
//!   `tracing` keeps what it does well: log lines. The request they name is a [`LogTag`],
//!   current the same way a span is ([`log_tag`]).
//! - With no sink installed (tracing off), or in an unsampled trace, a span is empty: making
//!   one is a load and a branch, and nothing is recorded.
//! - Must never import another svc crate: the host, its services and the drivers all make
//!   spans through it, so it sits below all of them. Principal type: [`Span`].

use std::borrow::Cow;
use std::cell::Cell;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::Poll;
use std::time::{SystemTime, UNIX_EPOCH};

use quanta::Clock;

pub mod log_tag;
pub use log_tag::{LogTag, Tagged};

/// A trace's id: 16 bytes, never all zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceId(pub [u8; 16]);

/// A span's id: 8 bytes, never all zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SpanId(pub [u8; 8]);

thread_local! {
    /// This thread's id generator: wyrand, seeded from the operating system's entropy on
    /// first use. Ids need to be unique and unpredictable enough to sample on, not secret,
    /// and the `rand` thread generator (ChaCha) cost a few hundred instructions a request.
    static IDS: Cell<u64> = const { Cell::new(0) };
}

fn next_u64() -> u64 {
    IDS.with(|state| {
        let mut s = state.get();
        if s == 0 {
            s = rand::random::<u64>() | 1;
        }
        s = s.wrapping_add(0xa076_1d64_78bd_642f);
        state.set(s);
        let t = u128::from(s) * u128::from(s ^ 0xe703_7ed1_a0b4_28db);
        ((t >> 64) as u64) ^ (t as u64)
    })
}

impl TraceId {
    /// A fresh random id.
    pub fn random() -> Self {
        loop {
            let id = (u128::from(next_u64()) << 64) | u128::from(next_u64());
            if id != 0 {
                return Self(id.to_be_bytes());
            }
        }
    }

    /// The id as 32 lower-case hex digits (a request's correlation id).
    pub fn hex(&self) -> String {
        hex(&self.0)
    }
}

impl SpanId {
    /// A fresh random id.
    pub fn random() -> Self {
        loop {
            let id = next_u64();
            if id != 0 {
                return Self(id.to_be_bytes());
            }
        }
    }
}

/// Lower-case hex, built in place: a trace id is every request's correlation id, and going
/// through `fmt` (or the `hex` crate, a char at a time) cost several times the digits.
fn hex<const N: usize>(bytes: &[u8; N]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    // Ids are at most 16 bytes; the digits go into a fixed buffer, then one allocation.
    const { assert!(N <= 16) };
    let mut out = [0u8; 32];
    for (i, b) in bytes.iter().enumerate() {
        out[2 * i] = DIGITS[usize::from(b >> 4)];
        out[2 * i + 1] = DIGITS[usize::from(b & 0xf)];
    }
    String::from(std::str::from_utf8(&out[..2 * N]).expect("hex digits are ASCII"))
}

impl fmt::Display for TraceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex(&self.0))
    }
}

impl fmt::Display for SpanId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex(&self.0))
    }
}

/// What a span records about its work (OTLP's `SpanKind`, by its numbers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Work inside svc.
    Internal = 1,
    /// svc answering a request.
    Server = 2,
    /// svc calling another service (the warehouse).
    Client = 3,
}

/// An attribute's value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// Text (borrowed when it is a constant: a method, a route template).
    Str(Cow<'static, str>),
    /// A whole number.
    Int(i64),
    /// A flag.
    Bool(bool),
    /// A real number.
    Float(f64),
}

impl From<&'static str> for Value {
    fn from(v: &'static str) -> Self {
        Self::Str(Cow::Borrowed(v))
    }
}

impl From<String> for Value {
    fn from(v: String) -> Self {
        Self::Str(Cow::Owned(v))
    }
}

impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Self::Int(v)
    }
}

impl From<u64> for Value {
    fn from(v: u64) -> Self {
        Self::Int(i64::try_from(v).unwrap_or(i64::MAX))
    }
}

impl From<u16> for Value {
    fn from(v: u16) -> Self {
        Self::Int(i64::from(v))
    }
}

impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Self::Bool(v)
    }
}

impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Self::Float(v)
    }
}

/// A span's record: what it did and when. Complete once the span has ended and its `end` is
/// set, when the sink is handed it.
#[derive(Debug, Clone)]
pub struct Finished {
    /// The trace it belongs to.
    pub trace_id: TraceId,
    /// Its own id.
    pub span_id: SpanId,
    /// The span it ran under (a caller's span, for a root continuing a trace).
    pub parent: Option<SpanId>,
    /// What it did: `auth.resolve`, `GET /api/v2/sample/{table_id}`.
    pub name: Cow<'static, str>,
    /// Its kind.
    pub kind: Kind,
    /// When it started.
    pub start: Ticks,
    /// When it ended.
    pub end: Ticks,
    /// Attributes it shares with other spans, made once (see [`Shared`]); sent before its
    /// own.
    pub shared: Option<&'static Shared>,
    /// Its own attributes, in the order first set.
    pub attributes: Vec<(&'static str, Value)>,
    /// Whether its work failed ([`Span::fail`]): exported as the status `ERROR`.
    pub failed: bool,
}

impl Finished {
    /// Every attribute: the shared ones, then its own.
    pub fn all_attributes(&self) -> impl Iterator<Item = &(&'static str, Value)> {
        let shared = self.shared.map_or(&[][..], |s| &s.attributes[..]);
        shared.iter().chain(&self.attributes)
    }
}

/// Attributes that come as a set and repeat as a whole on many spans (a request's method,
/// route and status), made once and kept for the life of the process: a span holds the set
/// by reference, so setting them is a pointer, not a list grown an attribute at a time.
/// The sink keeps its encoding of the set here, made on first use, so encoding them is a
/// copy (callgrind: setting, looking up and encoding a server span's three attributes one
/// at a time cost a traced request about 500 instructions).
#[derive(Debug)]
pub struct Shared {
    attributes: Box<[(&'static str, Value)]>,
    encoded: OnceLock<Box<[u8]>>,
}

impl Shared {
    /// A set made once and kept: callers keep their sets in a table bounded by what they
    /// key them on, since each one lives as long as the process.
    pub fn leak(attributes: Vec<(&'static str, Value)>) -> &'static Self {
        Box::leak(Box::new(Self {
            attributes: attributes.into_boxed_slice(),
            encoded: OnceLock::new(),
        }))
    }

    /// The attributes, in the order given.
    pub fn attributes(&self) -> &[(&'static str, Value)] {
        &self.attributes
    }

    /// The set as the sink encodes it, made by `encode` on first use. There is one sink in
    /// a process, so one encoding.
    pub fn encoded(&self, encode: impl FnOnce(&[(&'static str, Value)]) -> Box<[u8]>) -> &[u8] {
        self.encoded.get_or_init(|| encode(&self.attributes))
    }
}

/// Where finished spans go: the host's exporter queue.
pub trait Sink: Send + Sync + 'static {
    /// Takes a finished span. Called on the thread that ended it, so it must not block.
    fn push(&self, span: &Finished);

    /// The calling thread is going idle: whatever the sink holds for it should move on now
    /// ([`idle`]). Nothing by default.
    fn idle(&self) {}
}

static SINK: OnceLock<Arc<dyn Sink>> = OnceLock::new();

/// Sends every span finished from now on to `sink`. The first sink installed in a process
/// stays (tests start several servers in one); whether this one was installed.
pub fn install(sink: Arc<dyn Sink>) -> bool {
    // The counter is calibrated here, at start-up, not on a request's first span.
    clock();
    SINK.set(sink).is_ok()
}

/// The counter spans read, calibrated against the monotonic clock on first use.
fn clock() -> &'static Clock {
    static CLOCK: OnceLock<Clock> = OnceLock::new();
    CLOCK.get_or_init(Clock::new)
}

/// A moment as the CPU's counter read it: comparable within a process, made Unix time by an
/// [`Anchor`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Ticks(u64);

impl Ticks {
    /// Now.
    #[inline]
    pub fn now() -> Self {
        Self(clock().raw())
    }
}

/// A moment read on both the counter and the wall clock, to turn nearby [`Ticks`] into Unix
/// time. Read afresh every few seconds: the counter and the wall clock drift apart over
/// hours, and the wall clock may be stepped.
#[derive(Debug, Clone, Copy)]
pub struct Anchor {
    clock: &'static Clock,
    ticks: u64,
    unix_ns: u64,
}

impl Anchor {
    /// Now, on both clocks.
    pub fn now() -> Self {
        let clock = clock();
        let ticks = clock.raw();
        let unix_ns = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| {
            d.as_secs() * 1_000_000_000 + u64::from(d.subsec_nanos())
        });
        Self {
            clock,
            ticks,
            unix_ns,
        }
    }

    /// How long after this anchor was read `at` was, in nanoseconds (0 for earlier).
    pub fn age_ns(&self, at: Ticks) -> u64 {
        if at.0 <= self.ticks {
            0
        } else {
            self.clock.delta_as_nanos(self.ticks, at.0)
        }
    }

    /// `at` as Unix time in nanoseconds.
    pub fn unix_ns(&self, at: Ticks) -> u64 {
        if at.0 <= self.ticks {
            self.unix_ns
                .saturating_sub(self.clock.delta_as_nanos(at.0, self.ticks))
        } else {
            self.unix_ns + self.clock.delta_as_nanos(self.ticks, at.0)
        }
    }
}

/// Tells the sink this thread is going idle (for a runtime's park hook), so spans it holds
/// for the thread do not wait on the thread's next span. With no sink, one load.
pub fn idle() {
    if let Some(sink) = SINK.get() {
        sink.idle();
    }
}

/// Whether spans are recorded at all (a sink is installed).
#[inline]
pub fn is_on() -> bool {
    SINK.get().is_some()
}

/// Where a span sits: its trace and its own id. A child made while it is current hangs
/// under it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Context {
    /// The trace.
    pub trace_id: TraceId,
    /// The span.
    pub span_id: SpanId,
}

thread_local! {
    static CURRENT: Cell<Option<Context>> = const { Cell::new(None) };
}

/// The span current on this thread, if any.
#[inline]
pub fn current() -> Option<Context> {
    CURRENT.with(Cell::get)
}

/// Makes `context` current until dropped, then puts back what was current before (also
/// when a poll panics).
struct Restore(Option<Context>);

impl Restore {
    #[inline]
    fn set(context: Option<Context>) -> Self {
        Self(CURRENT.with(|c| c.replace(context)))
    }
}

impl Drop for Restore {
    #[inline]
    fn drop(&mut self) {
        CURRENT.with(|c| c.set(self.0));
    }
}

/// One unit of work in a trace, finished (timed and sent to the sink) when dropped. Empty
/// when tracing is off or the trace is not sampled: then every method does nothing.
///
/// Held inline, not boxed: an allocation and its free cost a traced request more than
/// moving the hundred bytes with the futures that carry it. It holds its own record, which
/// the sink borrows when it ends: building a record from the span's parts moved them twice.
#[derive(Debug, Default)]
pub struct Span(Option<Finished>);

impl Span {
    /// A span that records nothing.
    pub const fn none() -> Self {
        Self(None)
    }

    /// A trace's first span in this process; `parent` is the caller's span when the trace
    /// continues one. The caller has decided the trace is sampled. Empty when tracing is off.
    pub fn root(trace_id: TraceId, parent: Option<SpanId>, name: &'static str, kind: Kind) -> Self {
        if !is_on() {
            return Self::none();
        }
        Self::open(trace_id, parent, name, kind)
    }

    /// A span under the current one; empty when nothing is current (tracing off, an
    /// unsampled trace, or work outside any request).
    ///
    /// Left out of line on purpose: marked `#[inline]`, the instrumented futures built
    /// around it were moved rather than built in place (callgrind: 930 more instructions of
    /// `memcpy` a cached sample).
    pub fn child(name: &'static str) -> Self {
        Self::child_of_kind(name, Kind::Internal)
    }

    /// [`Span::child`] of another kind (a call out is [`Kind::Client`]).
    pub fn child_of_kind(name: &'static str, kind: Kind) -> Self {
        match current() {
            Some(parent) if is_on() => {
                Self::open(parent.trace_id, Some(parent.span_id), name, kind)
            }
            _ => Self::none(),
        }
    }

    fn open(trace_id: TraceId, parent: Option<SpanId>, name: &'static str, kind: Kind) -> Self {
        let start = Ticks::now();
        Self(Some(Finished {
            trace_id,
            span_id: SpanId::random(),
            parent,
            name: Cow::Borrowed(name),
            kind,
            start,
            // Until it ends.
            end: start,
            shared: None,
            attributes: Vec::new(),
            failed: false,
        }))
    }

    /// Whether this span records (worth building an attribute's value for).
    #[inline]
    pub fn is_recording(&self) -> bool {
        self.0.is_some()
    }

    /// Where this span sits, when it records.
    #[inline]
    pub fn context(&self) -> Option<Context> {
        self.0.as_ref().map(|span| Context {
            trace_id: span.trace_id,
            span_id: span.span_id,
        })
    }

    /// Sets an attribute (a second value for a key replaces the first). A key that is also
    /// in the span's [`Shared`] set is sent twice: callers keep the two apart.
    pub fn set(&mut self, key: &'static str, value: impl Into<Value>) {
        let Some(span) = &mut self.0 else { return };
        let value = value.into();
        match span.attributes.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = value,
            None => span.attributes.push((key, value)),
        }
    }

    /// Gives the span a [`Shared`] set of attributes, in place of the one it had.
    pub fn share(&mut self, shared: &'static Shared) {
        if let Some(span) = &mut self.0 {
            span.shared = Some(shared);
        }
    }

    /// Marks the span's work as failed. A status of its own, not an attribute the exporter
    /// looks for: whoever ends the span knows whether it failed (a server span answered
    /// 5xx), and a search of the attributes cost every traced request for the rare one.
    pub fn fail(&mut self) {
        if let Some(span) = &mut self.0 {
            span.failed = true;
        }
    }

    /// Renames the span (a server span takes its route once it is known). A name made
    /// once and kept (`&'static str`) costs nothing per span.
    pub fn rename(&mut self, name: impl Into<Cow<'static, str>>) {
        if let Some(span) = &mut self.0 {
            span.name = name.into();
        }
    }

    /// Makes this span current on this thread until the guard is dropped (for work that
    /// does not await).
    pub fn enter(&self) -> Entered<'_> {
        Entered {
            _restore: is_on().then(|| Restore::set(self.context())),
            _span: PhantomData,
        }
    }
}

impl Span {
    /// Times the span and hands it to the sink, in place; it records nothing after.
    ///
    /// Inlined up to the check, out of line past it: every request drops empty spans (all
    /// of them with tracing off), and through another crate an empty one cost a call.
    #[inline]
    fn end(&mut self) {
        if self.0.is_some() {
            self.finish();
        }
    }

    /// Records a span that has something to record.
    #[inline(never)]
    fn finish(&mut self) {
        if let (Some(span), Some(sink)) = (&mut self.0, SINK.get()) {
            span.end = Ticks::now();
            sink.push(span);
        }
        self.0 = None;
    }
}

impl Drop for Span {
    #[inline]
    fn drop(&mut self) {
        self.end();
    }
}

/// A span made current by [`Span::enter`]; what was current before comes back on drop.
/// Not `Send`: it restores this thread's current span.
pub struct Entered<'a> {
    _restore: Option<Restore>,
    _span: PhantomData<(&'a Span, *const ())>,
}

pin_project_lite::pin_project! {
    /// A future polled in a span's context; the span (if it owns one) ends when the future
    /// completes or is dropped.
    pub struct InSpan<F> {
        #[pin]
        inner: F,
        context: Option<Context>,
        span: Span,
    }
}

impl<F: Future> Future for InSpan<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        if !is_on() {
            return this.inner.poll(cx);
        }
        let _restore = Restore::set(*this.context);
        let poll = this.inner.poll(cx);
        if poll.is_ready() {
            this.span.end();
        }
        poll
    }
}

/// Runs futures in spans: the span is current on whichever thread polls them.
pub trait Instrument: Future + Sized {
    /// Polls this future in `span`, which ends when the future does.
    fn in_span(self, span: Span) -> InSpan<Self> {
        InSpan {
            context: span.context(),
            inner: self,
            span,
        }
    }

    /// Polls this future in a new span under the current one.
    fn in_child(self, name: &'static str) -> InSpan<Self> {
        self.in_span(Span::child(name))
    }

    /// Polls this future as if `context` were current (work handed to another task or
    /// runtime, or sent after its request's handler returned).
    fn in_context(self, context: Option<Context>) -> InSpan<Self> {
        InSpan {
            inner: self,
            context,
            span: Span::none(),
        }
    }

    /// Polls this future in the span current now, wherever it is polled later.
    fn in_current(self) -> InSpan<Self> {
        self.in_context(current())
    }
}

impl<F: Future> Instrument for F {}

#[cfg(test)]
mod tests;
