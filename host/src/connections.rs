//! Connection-level limits: how many sockets may be open at once, how long one may sit idle,
//! and how long a request may take to arrive.
//!
//! Without them a client could hold a socket forever by sending nothing, or a byte at a
//! time, and enough such sockets exhaust the process's descriptors. The socket wrapper
//! ([`LimitedIo`]) enforces the idle and request-read deadlines at the byte level; it learns
//! from the request pipeline ([`Connections::begin`]) when a request is being handled, since
//! a query may legitimately keep a connection silent for as long as its own deadline.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use poem::listener::Acceptor;
use poem::web::{LocalAddr, RemoteAddr};
use poem::Addr;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};

/// The limits, from `SVC_MAX_CONNECTIONS`, `SVC_IDLE_TIMEOUT_SECONDS` and
/// `SVC_REQUEST_READ_TIMEOUT_SECONDS`.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// Open connections at most; one more is answered 503 and closed.
    pub max_connections: usize,
    /// A connection with no request in flight and no bytes either way for this long is closed.
    pub idle: Duration,
    /// A request's head and body must arrive within this long of its first byte.
    pub request_read: Duration,
}

/// Open connections, by peer address, so the request pipeline can mark them busy.
#[derive(Debug)]
pub struct Connections {
    limits: ConnectionLimits,
    by_peer: Mutex<HashMap<SocketAddr, Arc<ConnState>, svc_core::hash::CacheHasher>>,
}

#[derive(Debug, Default)]
struct ConnState {
    /// Requests being handled (their response not yet returned by the endpoint).
    busy: AtomicUsize,
    /// When the last byte was read or written ([`now_ms`]).
    last_activity: AtomicU64,
    /// When the first byte of a request not yet handed to the pipeline arrived (0: none).
    read_started: AtomicU64,
}

/// A request being handled; dropping it marks the connection idle again.
#[derive(Debug)]
pub struct Busy(Option<Arc<ConnState>>);

impl Drop for Busy {
    fn drop(&mut self) {
        if let Some(state) = &self.0 {
            state.last_activity.store(now_ms(), Ordering::Relaxed);
            state.busy.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl Connections {
    /// No connections yet, under `limits`.
    pub fn new(limits: ConnectionLimits) -> Arc<Self> {
        Arc::new(Self {
            limits,
            by_peer: Mutex::default(),
        })
    }

    /// The limits.
    pub fn limits(&self) -> ConnectionLimits {
        self.limits
    }

    /// Marks the connection from `peer` busy while a request is handled: its head has fully
    /// arrived, and a silent connection is now the endpoint's business (queries have their
    /// own deadline).
    pub fn begin(&self, peer: &Addr) -> Busy {
        let Addr::SocketAddr(addr) = peer else {
            return Busy(None);
        };
        let state = self
            .by_peer
            .lock()
            .expect("connections lock")
            .get(addr)
            .cloned();
        if let Some(s) = &state {
            s.busy.fetch_add(1, Ordering::AcqRel);
            s.read_started.store(0, Ordering::Relaxed);
        }
        Busy(state)
    }
}

/// Wraps an acceptor with the limits of its [`Connections`].
pub struct LimitedAcceptor<A> {
    inner: A,
    limits: ConnectionLimits,
    connections: Arc<Connections>,
}

impl<A> LimitedAcceptor<A> {
    /// `inner`, registering its connections in `connections`.
    pub fn new(inner: A, connections: Arc<Connections>) -> Self {
        Self {
            inner,
            limits: connections.limits,
            connections,
        }
    }
}

/// The answer to a connection over the cap, written before it is closed.
const REFUSAL: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
connection: close\r\nretry-after: 1\r\ncontent-length: 68\r\n\r\n\
{\"detail\":\"Too many open connections to this server; retry shortly\"}";

impl<A: Acceptor> Acceptor for LimitedAcceptor<A>
where
    A::Io: 'static,
{
    type Io = LimitedIo<A::Io>;

    fn local_addr(&self) -> Vec<LocalAddr> {
        self.inner.local_addr()
    }

    async fn accept(
        &mut self,
    ) -> io::Result<(Self::Io, LocalAddr, RemoteAddr, poem::http::uri::Scheme)> {
        loop {
            let (mut io, local, remote, scheme) = self.inner.accept().await?;
            let Addr::SocketAddr(peer) = remote.0 else {
                return Err(io::Error::other("only TCP peers are served"));
            };
            let state = {
                let mut open = self.connections.by_peer.lock().expect("connections lock");
                if open.len() >= self.limits.max_connections {
                    None
                } else {
                    let state = Arc::new(ConnState::default());
                    state.last_activity.store(now_ms(), Ordering::Relaxed);
                    open.insert(peer, state.clone());
                    Some(state)
                }
            };
            let Some(state) = state else {
                tracing::warn!(
                    max = self.limits.max_connections,
                    "connection refused: too many open connections (SVC_MAX_CONNECTIONS)"
                );
                tokio::spawn(async move {
                    let _ =
                        tokio::time::timeout(Duration::from_secs(2), io.write_all(REFUSAL)).await;
                    let _ = tokio::time::timeout(Duration::from_secs(1), io.shutdown()).await;
                });
                continue;
            };
            let io = LimitedIo {
                inner: io,
                state,
                peer,
                limits: self.limits,
                connections: self.connections.clone(),
                timer: None,
            };
            return Ok((io, local, remote, scheme));
        }
    }
}

/// A socket under the idle and request-read deadlines.
pub struct LimitedIo<T> {
    inner: T,
    state: Arc<ConnState>,
    peer: SocketAddr,
    limits: ConnectionLimits,
    connections: Arc<Connections>,
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<T> Drop for LimitedIo<T> {
    fn drop(&mut self) {
        let mut open = self.connections.by_peer.lock().expect("connections lock");
        // The same peer address may already belong to a newer connection.
        if open
            .get(&self.peer)
            .is_some_and(|s| Arc::ptr_eq(s, &self.state))
        {
            open.remove(&self.peer);
        }
    }
}

impl<T> LimitedIo<T> {
    /// While nothing moves: an error once a deadline has passed, else a timer that wakes the
    /// task at the next deadline.
    fn check_deadlines(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        let now = now_ms();
        let mut next = self.limits.idle.as_millis() as u64;
        if self.state.busy.load(Ordering::Acquire) == 0 {
            let idle = now.saturating_sub(self.state.last_activity.load(Ordering::Relaxed));
            if idle >= self.limits.idle.as_millis() as u64 {
                return Poll::Ready(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "idle connection closed",
                ));
            }
            next = next.min(self.limits.idle.as_millis() as u64 - idle);
            let started = self.state.read_started.load(Ordering::Relaxed);
            if started != 0 {
                let reading = now.saturating_sub(started);
                let limit = self.limits.request_read.as_millis() as u64;
                if reading >= limit {
                    return Poll::Ready(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "request not received in time",
                    ));
                }
                next = next.min(limit - reading);
            }
        }
        // Activity only moves deadlines later, so a timer already armed can stay: it may
        // wake the task early, and the check above then arms it again. Resetting it on every
        // pending read would cost a timer-wheel update per request.
        let at = tokio::time::Instant::now() + Duration::from_millis(next.max(10));
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
        if timer.is_elapsed() {
            timer.as_mut().reset(at);
        }
        // Registers the waker with the timer.
        let _ = timer.as_mut().poll(cx);
        Poll::Pending
    }

    fn touch(&self) {
        self.state.last_activity.store(now_ms(), Ordering::Relaxed);
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for LimitedIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    self.touch();
                    if self.state.busy.load(Ordering::Acquire) == 0 {
                        let _ = self.state.read_started.compare_exchange(
                            0,
                            now_ms(),
                            Ordering::Relaxed,
                            Ordering::Relaxed,
                        );
                    }
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => self.check_deadlines(cx).map(Err),
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for LimitedIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.inner).poll_write(cx, data) {
            Poll::Ready(r) => {
                self.touch();
                Poll::Ready(r)
            }
            Poll::Pending => self.check_deadlines(cx).map(Err),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Milliseconds since the first call (never 0, which means "unset" above).
fn now_ms() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_millis() as u64 + 1
}

/// The process's soft limit on open files (Linux: `/proc/self/limits`), if known.
pub fn open_files_limit() -> Option<usize> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}
