//! The in-memory cache of the request path: bounded, concurrent, each entry kept at most a
//! fixed time after it was inserted.
//!
//! Over `quick_cache` (S3-FIFO eviction, a read lock per shard on a lookup) rather than moka:
//! a moka lookup records the read for its eviction policy in a shared queue and drains that
//! queue now and then, about a thousand instructions a lookup (callgrind), and a cached
//! sample made five (the verified token, the identity, the registry snapshot, the grants,
//! the sample). Expiry is checked on lookup: an expired entry is never served, and is
//! dropped when found or evicted, whichever comes first.

use std::hash::Hash;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What a key can be looked up by (`str` for `String`, a borrowed form of a tuple key).
pub use quick_cache::Equivalent;
use quick_cache::UnitWeighter;

use crate::hash::CacheHasher;

/// A bounded concurrent cache whose entries expire a fixed time after their insert. Values
/// are cloned out on a hit: keep them behind an `Arc`. Clones share their entries.
pub struct Cache<K, V> {
    entries: Arc<quick_cache::sync::Cache<K, Entry<V>, UnitWeighter, CacheHasher>>,
    ttl: Duration,
}

impl<K, V> Clone for Cache<K, V> {
    fn clone(&self) -> Self {
        Self {
            entries: self.entries.clone(),
            ttl: self.ttl,
        }
    }
}

#[derive(Clone)]
struct Entry<V> {
    inserted: Instant,
    value: V,
}

impl<K, V> Cache<K, V>
where
    K: Hash + Eq + Clone,
    V: Clone,
{
    /// An empty cache of at most about `capacity` entries, each served at most `ttl` after
    /// it was inserted.
    pub fn new(capacity: usize, ttl: Duration) -> Self {
        let capacity = capacity.max(1);
        // The tables are sized for the estimate up front; a cache allowed 100,000 entries
        // (one per caller) holds a few dozen on most servers, and grows when it needs to.
        let estimate = capacity.min(1_024);
        Self {
            entries: Arc::new(quick_cache::sync::Cache::with(
                estimate,
                capacity as u64,
                UnitWeighter,
                CacheHasher::default(),
                Default::default(),
            )),
            ttl,
        }
    }

    /// The value kept for `key`, unless it has expired.
    pub fn get<Q>(&self, key: &Q) -> Option<V>
    where
        Q: Hash + Equivalent<K> + ?Sized,
    {
        let entry = self.entries.get(key)?;
        if entry.inserted.elapsed() < self.ttl {
            return Some(entry.value);
        }
        self.entries.remove(key);
        None
    }

    /// Keeps `value` for `key` (in place of what was kept), from now.
    pub fn insert(&self, key: K, value: V) {
        let inserted = Instant::now();
        self.entries.insert(key, Entry { inserted, value });
    }

    /// Forgets `key`.
    pub fn remove<Q>(&self, key: &Q)
    where
        Q: Hash + Equivalent<K> + ?Sized,
    {
        self.entries.remove(key);
    }

    /// Forgets the entries `keep` says no to.
    pub fn retain(&self, keep: impl Fn(&K, &V) -> bool) {
        self.entries.retain(|key, entry| keep(key, &entry.value));
    }

    /// Forgets everything.
    pub fn clear(&self) {
        self.entries.clear();
    }

    /// Entries kept, expired ones included until they are found or evicted.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.entries.len() == 0
    }
}

impl<K: Hash + Eq + Clone, V: Clone> std::fmt::Debug for Cache<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache")
            .field("entries", &self.entries.len())
            .field("ttl", &self.ttl)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_what_was_inserted_until_it_expires_is_replaced_or_removed() {
        let cache: Cache<String, u32> = Cache::new(100, Duration::from_millis(200));
        assert_eq!(cache.get("a"), None);
        cache.insert("a".into(), 1);
        cache.insert("b".into(), 2);
        assert_eq!(cache.get("a"), Some(1), "looked up by &str");
        cache.insert("a".into(), 3);
        assert_eq!(cache.get("a"), Some(3));
        cache.remove("b");
        assert_eq!(cache.get("b"), None);
        std::thread::sleep(Duration::from_millis(250));
        assert_eq!(cache.get("a"), None, "expired");
        assert!(cache.is_empty(), "an expired entry found is dropped");
    }

    #[test]
    fn retain_and_clear_forget_what_they_say() {
        let cache: Cache<(String, usize), u32> = Cache::new(100, Duration::from_secs(60));
        for (t, n) in [("t1", 5), ("t1", 10), ("t2", 5)] {
            cache.insert((t.into(), n), 1);
        }
        cache.retain(|(t, _), _| t != "t1");
        assert_eq!(cache.len(), 1);
        assert_eq!(cache.get(&("t2".to_string(), 5)), Some(1));
        cache.clear();
        assert!(cache.is_empty());
    }

    #[test]
    fn a_borrowed_key_finds_the_owned_one() {
        #[derive(Hash)]
        struct Borrowed<'a>(&'a str, usize);
        impl Equivalent<(String, usize)> for Borrowed<'_> {
            fn equivalent(&self, key: &(String, usize)) -> bool {
                self.0 == key.0 && self.1 == key.1
            }
        }
        let cache: Cache<(String, usize), u32> = Cache::new(100, Duration::from_secs(60));
        for i in 0..50 {
            cache.insert((format!("t{i}"), 5), i);
        }
        for i in 0..50 {
            assert_eq!(cache.get(&Borrowed(&format!("t{i}"), 5)), Some(i));
        }
        assert_eq!(cache.get(&Borrowed("t1", 6)), None);
    }

    #[test]
    fn clones_share_their_entries() {
        let cache: Cache<u32, u32> = Cache::new(10, Duration::from_secs(60));
        let other = cache.clone();
        other.insert(1, 1);
        assert_eq!(cache.get(&1), Some(1));
        cache.clear();
        assert_eq!(other.get(&1), None);
    }

    #[test]
    fn a_cache_of_one_keeps_its_one_entry() {
        let cache: Cache<(), u32> = Cache::new(1, Duration::from_secs(60));
        cache.insert((), 7);
        assert_eq!(cache.get(&()), Some(7));
        cache.insert((), 8);
        assert_eq!(cache.get(&()), Some(8));
    }

    #[test]
    fn stays_near_its_capacity() {
        let cache: Cache<u64, u64> = Cache::new(1_000, Duration::from_secs(60));
        for i in 0..100_000 {
            cache.insert(i, i);
        }
        assert!(cache.len() <= 1_100, "{}", cache.len());
        assert_eq!(cache.get(&99_999), Some(99_999), "the newest is kept");
    }
}
