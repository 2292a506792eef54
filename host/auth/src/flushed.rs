//! A cache of views read from the store that a flush empties for good.
//!
//! A plain cache has a hole: a read that started before a change (and so saw the old
//! rows) can insert its answer after the change's flush, and that stale answer would then
//! be served until it expires — a revoked grant or token honoured for seconds. Emptying the
//! cache cannot close it, whatever the order: a read that began before the flush can insert
//! after it.
//!
//! So every answer carries the flush generation that was current before its store read
//! began (a [`Ticket`]), and a lookup serves it only while the generation is unchanged.
//! A flush runs after its change is committed, so an answer served under the current
//! generation was read after every change whose flush has returned.

use std::future::Future;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use svc_core::cache::Cache;

/// The flush generation current before a store read began; an answer inserted with it is
/// served only while no flush has come since.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ticket(u64);

/// A cache lookup: the answer kept (and the ticket it was read under), or the ticket to
/// insert a fresh read's answer with.
pub(crate) enum Lookup<V> {
    /// Kept, and read after the last flush.
    Hit(V, Ticket),
    /// Nothing current is kept: read the store, then [`Flushed::insert`] with this ticket.
    Miss(Ticket),
}

/// A cache whose flush is exact (see the module doc). Clones share their answers.
#[derive(Clone)]
pub(crate) struct Flushed<K, V> {
    cache: Cache<K, (Ticket, V)>,
    generation: Arc<AtomicU64>,
    metric: svc_metrics::Cache,
}

impl<K, V> Flushed<K, V>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    /// An empty cache of at most `capacity` answers, each kept at most `ttl`; its hit rate is
    /// reported as `metric`.
    pub(crate) fn new(capacity: usize, ttl: Duration, metric: svc_metrics::Cache) -> Self {
        Self {
            cache: Cache::new(capacity, ttl),
            generation: Arc::default(),
            metric,
        }
    }

    /// The answer kept for `key`, unless a flush came after its read.
    pub(crate) fn lookup(&self, key: &K) -> Lookup<V> {
        // Loaded before the entry: a flush between the two makes the entry stale, never
        // the other way round.
        let current = Ticket(self.generation.load(Ordering::SeqCst));
        let hit = self
            .cache
            .get(key)
            .filter(|(read_under, _)| *read_under == current);
        self.metric.lookup(hit.is_some());
        match hit {
            Some((ticket, value)) => Lookup::Hit(value, ticket),
            None => Lookup::Miss(current),
        }
    }

    /// Keeps an answer read under `ticket` (served only if no flush has come since).
    pub(crate) fn insert(&self, ticket: Ticket, key: K, value: V) {
        self.cache.insert(key, (ticket, value));
    }

    /// The answer kept for `key`, or the answer of the future `read` makes (kept for the
    /// next lookup).
    ///
    /// `read` is called only on a miss, and its future runs boxed: a store read's future is
    /// kilobytes, and held inline it would be copied into every enclosing future on every
    /// request, hit or not (callgrind counted a cached sample's `memcpy` at a sixth of its
    /// request path).
    pub(crate) async fn get_or_read<E, F>(&self, key: &K, read: impl FnOnce() -> F) -> Result<V, E>
    where
        F: Future<Output = Result<V, E>>,
    {
        match self.lookup(key) {
            Lookup::Hit(value, _) => Ok(value),
            Lookup::Miss(ticket) => {
                let value = Box::pin(read()).await?;
                self.insert(ticket, key.clone(), value.clone());
                Ok(value)
            }
        }
    }

    /// Makes every answer kept so far stale, including those of reads still in flight.
    pub(crate) fn flush(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        // Only frees memory: the generation already keeps the entries from being served.
        self.cache.clear();
    }

    /// Answers kept (stale ones included until they are found or evicted).
    pub(crate) fn entry_count(&self) -> usize {
        self.cache.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache() -> Flushed<&'static str, u32> {
        Flushed::new(10, Duration::from_secs(60), svc_metrics::Cache::Grants)
    }

    #[tokio::test]
    async fn a_read_that_straddles_a_flush_is_not_kept() {
        let cache = cache();
        let (go, wait) = tokio::sync::oneshot::channel::<()>();
        let read = cache.get_or_read(&"ana", move || async move {
            // The store answered with the old rows; the change and its flush land before
            // the answer is inserted.
            wait.await.unwrap();
            Ok::<_, ()>(1)
        });
        let flush = async {
            tokio::task::yield_now().await;
            cache.flush();
            go.send(()).unwrap();
        };
        let (answer, ()) = tokio::join!(read, flush);
        assert_eq!(answer, Ok(1), "the straddling request gets its own answer");
        let fresh = cache.get_or_read(&"ana", || async { Ok::<_, ()>(2) }).await;
        assert_eq!(fresh, Ok(2), "the next request reads the store again");
        // Without a flush in between, an answer is kept.
        let kept = cache.get_or_read(&"ana", || async { Ok::<_, ()>(3) }).await;
        assert_eq!(kept, Ok(2));
    }

    #[test]
    fn an_answer_inserted_after_a_flush_under_an_older_ticket_is_never_served() {
        // The order that emptying alone cannot catch: the read's answer lands in the cache
        // (at the same instant as the flush, or just after it), yet was read before it.
        let cache = cache();
        let Lookup::Miss(before) = cache.lookup(&"ana") else {
            panic!("empty cache hit")
        };
        cache.flush();
        cache.insert(before, "ana", 1);
        assert!(matches!(cache.lookup(&"ana"), Lookup::Miss(_)));
        // A read begun after the flush is kept, and its ticket is handed back on a hit.
        let Lookup::Miss(after) = cache.lookup(&"ana") else {
            panic!("stale answer served")
        };
        cache.insert(after, "ana", 2);
        assert!(matches!(cache.lookup(&"ana"), Lookup::Hit(2, t) if t == after));
    }

    #[tokio::test]
    async fn a_failed_read_keeps_nothing() {
        let cache = cache();
        let failed = cache
            .get_or_read(&"ana", || async { Err::<u32, _>("down") })
            .await;
        assert_eq!(failed, Err("down"));
        assert!(matches!(cache.lookup(&"ana"), Lookup::Miss(_)));
    }
}
