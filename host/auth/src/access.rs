//! The one access check for tables.
//!
//! Internal tables: every authenticated caller (their row filter is the guard). Other
//! tables: administrators, or a `table` grant on one of the caller's groups. There is no
//! public flag and no wildcard.
//!
//! The check runs before any cache of table data, on two in-memory views of the store: the
//! registry snapshot (dropped by every registry change, [`Access::forget_registry`]) and each
//! caller's granted table ids (and groups, for `/api/me`), kept at most [`IDENTITY_TTL`] and dropped at once by every
//! grant, group or membership change made through this server ([`Access::forget_grants`]). A change made by another process takes
//! effect within that bound, like identities. A table id missing from the snapshot is looked
//! up in the store, so a table registered elsewhere is never reported missing.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use moka::sync::Cache;
use svc_core::hash::CacheHasher;
use svc_core::{Error, Result};
use svc_store::groups::Group;
use svc_store::registry::RegistryRow;
use svc_store::Store;
use svc_trace::Instrument as _;

use crate::{Caller, IDENTITY_TTL};

/// Every registered table, sorted by display name then id, with an index by id.
#[derive(Debug, Default)]
pub struct RegistrySnapshot {
    rows: Vec<RegistryRow>,
    by_id: HashMap<String, usize, CacheHasher>,
}

impl RegistrySnapshot {
    fn new(mut rows: Vec<RegistryRow>) -> Self {
        rows.sort_by(|a, b| a.name.cmp(&b.name).then_with(|| a.id.cmp(&b.id)));
        let by_id = rows
            .iter()
            .enumerate()
            .map(|(i, r)| (r.id.clone(), i))
            .collect();
        Self { rows, by_id }
    }

    /// All rows, in catalog order.
    pub fn rows(&self) -> &[RegistryRow] {
        &self.rows
    }

    /// The row with this id.
    pub fn get(&self, id: &str) -> Option<&RegistryRow> {
        self.by_id.get(id).map(|&i| &self.rows[i])
    }
}

/// A cache of views read from the store that a flush empties for good.
///
/// A plain cache has a hole: a read that started before a change (and so saw the old
/// rows) can insert its answer after the change's flush, and that stale answer would then
/// be served until it expires — a revoked grant honoured for minutes. Each flush bumps a
/// generation before it empties the cache; a reader inserts its answer and then drops it
/// again if the generation moved meanwhile. Either the reader sees the bump, or the bump
/// (and the emptying after it) came after the insert.
#[derive(Clone)]
struct Flushed<K, V> {
    cache: Cache<K, V, CacheHasher>,
    generation: Arc<AtomicU64>,
}

impl<K, V> Flushed<K, V>
where
    K: Hash + Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    fn new(capacity: u64, ttl: Duration) -> Self {
        Self {
            cache: Cache::builder()
                .max_capacity(capacity)
                .time_to_live(ttl)
                .build_with_hasher(CacheHasher::default()),
            generation: Arc::default(),
        }
    }

    /// The cached value of `key`, or `read`'s answer (kept unless a flush came meanwhile).
    async fn get_or_read<F>(&self, key: K, metric: svc_metrics::Cache, read: F) -> Result<V>
    where
        F: Future<Output = Result<V>>,
    {
        let hit = self.cache.get(&key);
        metric.lookup(hit.is_some());
        if let Some(hit) = hit {
            return Ok(hit);
        }
        let generation = self.generation.load(Ordering::SeqCst);
        let value = read.await?;
        self.cache.insert(key.clone(), value.clone());
        if self.generation.load(Ordering::SeqCst) != generation {
            self.cache.invalidate(&key);
        }
        Ok(value)
    }

    fn flush(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.cache.invalidate_all();
    }

    fn entry_count(&self) -> u64 {
        self.cache.entry_count()
    }
}

/// The one access check, over the store and the in-memory views it reads.
#[derive(Clone)]
pub struct Access {
    store: Store,
    registry: Flushed<(), Arc<RegistrySnapshot>>,
    grants: Flushed<String, Arc<HashSet<String>>>,
    groups: Flushed<String, Arc<Vec<Group>>>,
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Access")
            .field("cached_grant_sets", &self.grants.entry_count())
            .finish()
    }
}

impl Access {
    /// The access check over a store, with empty caches.
    pub fn new(store: Store) -> Self {
        Self {
            store,
            registry: Flushed::new(1, Duration::from_secs(300)),
            grants: Flushed::new(100_000, IDENTITY_TTL),
            groups: Flushed::new(100_000, IDENTITY_TTL),
        }
    }

    /// Drops the registry snapshot (a registry change).
    pub fn forget_registry(&self) {
        self.registry.flush();
    }

    /// Drops every caller's grant set and group list (a grant, group or membership change).
    pub fn forget_grants(&self) {
        self.grants.flush();
        self.groups.flush();
    }

    /// The groups the caller belongs to, system groups first; cached like grant sets.
    pub async fn groups_of(&self, caller: &Caller) -> Result<Arc<Vec<Group>>> {
        let user_id = &caller.user.id;
        self.groups
            .get_or_read(user_id.clone(), svc_metrics::Cache::Groups, async {
                Ok(Arc::new(self.store.groups_of_user(user_id).await?))
            })
            .await
    }

    /// The registry snapshot: cached, or read from the store.
    pub async fn registry(&self) -> Result<Arc<RegistrySnapshot>> {
        self.registry
            .get_or_read((), svc_metrics::Cache::Registry, async {
                Ok(Arc::new(RegistrySnapshot::new(
                    self.store.list_tables().await?,
                )))
            })
            .await
    }

    /// The registered table the caller asked for: 404 when it is not registered, 403 when the
    /// caller may not read it. Runs before any cache of table data is consulted.
    pub async fn readable_table(&self, caller: &Caller, table_id: &str) -> Result<RegistryRow> {
        async {
            // Nothing that breaks the id rules is registered: such a name (a NUL byte, a path) is
            // refused before it reaches a cache or the store.
            if !svc_core::table_id::is_valid_table_id(table_id) {
                return Err(Error::not_found(format!(
                    "Table '{}' is not registered",
                    table_id.escape_debug()
                )));
            }
            let row = match self.registry().await?.get(table_id) {
                Some(row) => row.clone(),
                None => {
                    let row = self.store.table_by_id(table_id).await?.ok_or_else(|| {
                        Error::not_found(format!("Table '{table_id}' is not registered"))
                    })?;
                    // Registered by another process since the snapshot was taken.
                    self.forget_registry();
                    row
                }
            };
            if row.query_mode.is_internal() || caller.is_admin {
                return Ok(row);
            }
            if self.granted_ids(caller).await?.contains(&row.id) {
                Ok(row)
            } else {
                Err(Error::forbidden(format!(
                    "Access denied to table '{table_id}'"
                )))
            }
        }
        .in_child("access.check")
        .await
    }

    /// The non-internal tables the caller may read; None means all (administrators).
    pub async fn readable_ids(&self, caller: &Caller) -> Result<Option<Arc<HashSet<String>>>> {
        if caller.is_admin {
            return Ok(None);
        }
        Ok(Some(self.granted_ids(caller).await?))
    }

    async fn granted_ids(&self, caller: &Caller) -> Result<Arc<HashSet<String>>> {
        let user_id = &caller.user.id;
        self.grants
            .get_or_read(user_id.clone(), svc_metrics::Cache::Grants, async {
                Ok(Arc::new(
                    self.store
                        .granted_table_ids(user_id)
                        .await?
                        .into_iter()
                        .collect(),
                ))
            })
            .await
    }
}

/// Whether a registry row is listed for a caller whose readable ids are `readable` (the
/// answer of [`Access::readable_ids`]): internal tables always, others when readable.
pub fn is_visible(row: &RegistryRow, readable: Option<&HashSet<String>>) -> bool {
    row.query_mode.is_internal() || readable.is_none_or(|ids| ids.contains(&row.id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_read_that_straddles_a_flush_is_not_kept() {
        let cache: Flushed<&str, u32> = Flushed::new(10, Duration::from_secs(60));
        let (go, wait) = tokio::sync::oneshot::channel::<()>();
        let read = cache.get_or_read("ana", svc_metrics::Cache::Grants, async {
            // The store answered with the old rows; the change and its flush land before
            // the answer is inserted.
            wait.await.unwrap();
            Ok(1)
        });
        let flush = async {
            tokio::task::yield_now().await;
            cache.flush();
            go.send(()).unwrap();
        };
        let (answer, ()) = tokio::join!(read, flush);
        assert_eq!(
            answer.unwrap(),
            1,
            "the straddling request gets its own answer"
        );
        let fresh = cache
            .get_or_read("ana", svc_metrics::Cache::Grants, async { Ok(2) })
            .await
            .unwrap();
        assert_eq!(fresh, 2, "the next request reads the store again");
        // Without a flush in between, an answer is kept.
        let kept = cache
            .get_or_read("ana", svc_metrics::Cache::Grants, async { Ok(3) })
            .await
            .unwrap();
        assert_eq!(kept, 2);
    }
}
