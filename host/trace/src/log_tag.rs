//! The request a log line is written for: its method and correlation id, current on a
//! thread while the request's futures are polled ([`Tagged`]), read by the log formatter.
//!
//! Why not a `tracing` span, as before: a request's span went through the subscriber's
//! registry and every layer on creation, on the enter and exit of every poll, and on close —
//! about 2,500 instructions a cached sample (callgrind), nearly all of them for log lines
//! that were never written. A tag costs one allocation a request and two thread-local
//! swaps a poll; the formatter looks it up only when it writes a line.
//!
//! A tag follows its request where the work goes: onto the query runtime and into a result
//! body sent after the handler returned ([`Tagged`] around that work, made from
//! [`LogTag::current`]), like the span it replaces. Work spawned without one has none.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;

/// A request as its log lines name it. Cheap to clone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogTag(Arc<Request>);

#[derive(Debug, PartialEq, Eq)]
struct Request {
    method: &'static str,
    id: Box<str>,
}

thread_local! {
    /// The tag of the request whose future this thread is polling. It is moved here out of
    /// the [`Tagged`] future for the poll and moved back after, so it costs no reference
    /// counting.
    static CURRENT: Cell<Option<LogTag>> = const { Cell::new(None) };
}

impl LogTag {
    /// The tag of a request with this method and correlation id.
    pub fn new(method: &'static str, id: &str) -> Self {
        Self(Arc::new(Request {
            method,
            id: id.into(),
        }))
    }

    /// The request's method (`GET`, ...).
    pub fn method(&self) -> &'static str {
        self.0.method
    }

    /// The request's correlation id.
    pub fn id(&self) -> &str {
        &self.0.id
    }

    /// Runs `f` (work that does not await) with this tag current; for a line logged about
    /// the request outside its futures.
    pub fn in_scope<R>(self, f: impl FnOnce() -> R) -> R {
        let mut slot = Some(self);
        let _swap = Swap::new(&mut slot);
        f()
    }

    /// The tag current on this thread, if any (to carry into work handed elsewhere).
    pub fn current() -> Option<Self> {
        Self::with_current(|tag| tag.cloned())
    }

    /// Calls `f` with the tag current on this thread (the log formatter's read; no clone).
    pub fn with_current<R>(f: impl FnOnce(Option<&LogTag>) -> R) -> R {
        CURRENT.with(|current| {
            let tag = current.take();
            let answer = f(tag.as_ref());
            current.set(tag);
            answer
        })
    }
}

pin_project_lite::pin_project! {
    /// A future polled with a tag current (see the module doc).
    pub struct Tagged<F> {
        #[pin]
        inner: F,
        tag: Option<LogTag>,
    }
}

impl<F> Tagged<F> {
    /// `inner`, polled with `tag` current (none: with no tag current, whatever the
    /// polling thread had).
    pub fn new(inner: F, tag: Option<LogTag>) -> Self {
        Self { inner, tag }
    }

    /// `inner`, polled with the tag current now, wherever it is polled later.
    pub fn current(inner: F) -> Self {
        Self::new(inner, LogTag::current())
    }
}

impl<F: Future> Future for Tagged<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let _swap = Swap::new(this.tag);
        this.inner.poll(cx)
    }
}

/// Lends a future's tag to the thread for one poll; takes it back on drop (a panicking
/// poll included), putting back what the thread had before.
struct Swap<'a> {
    slot: &'a mut Option<LogTag>,
    before: Option<LogTag>,
}

impl<'a> Swap<'a> {
    fn new(slot: &'a mut Option<LogTag>) -> Self {
        let before = CURRENT.with(|current| current.replace(slot.take()));
        Self { slot, before }
    }
}

impl Drop for Swap<'_> {
    fn drop(&mut self) {
        *self.slot = CURRENT.with(|current| current.replace(self.before.take()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn current_id() -> Option<String> {
        LogTag::with_current(|tag| tag.map(|t| t.id().to_owned()))
    }

    #[tokio::test]
    async fn a_tag_is_current_only_while_its_future_is_polled_and_stays_with_it() {
        assert_eq!(current_id(), None);
        let outer = LogTag::new("GET", "outer");
        let seen = Tagged::new(
            async {
                let before = current_id();
                // A future tagged with another request, polled inside this one.
                let inner =
                    Tagged::new(async { current_id() }, Some(LogTag::new("POST", "inner"))).await;
                tokio::task::yield_now().await;
                // Carried to another task, as the query runtime carries it.
                let carried = tokio::spawn(Tagged::current(async { current_id() }))
                    .await
                    .unwrap();
                (before, inner, current_id(), carried)
            },
            Some(outer.clone()),
        )
        .await;
        assert_eq!(
            seen,
            (
                Some("outer".into()),
                Some("inner".into()),
                Some("outer".into()),
                Some("outer".into()),
            )
        );
        assert_eq!(current_id(), None, "nothing left behind after the poll");
        assert_eq!(outer.method(), "GET");
    }

    #[test]
    fn a_poll_that_panics_leaves_the_thread_as_it_found_it() {
        let mut future = Box::pin(Tagged::new(
            async { panic!("in the poll") },
            Some(LogTag::new("GET", "x")),
        ));
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = future.as_mut().poll(&mut cx);
        }));
        assert!(panicked.is_err());
        assert_eq!(current_id(), None);
    }
}
