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
use std::sync::Arc;
use std::time::Duration;

use svc_core::hash::CacheHasher;
use svc_core::{Error, Result};
use svc_store::groups::Group;
use svc_store::registry::RegistryRow;
use svc_store::Store;
use svc_trace::Instrument as _;

use crate::flushed::Flushed;
use crate::{Caller, IDENTITY_TTL};

/// Every registered table, sorted by display name then id, with an index by id. Rows are
/// shared: a request takes its table's row without copying a dozen strings.
#[derive(Debug, Default)]
pub struct RegistrySnapshot {
    rows: Vec<Arc<RegistryRow>>,
    by_id: HashMap<String, usize, CacheHasher>,
}

impl RegistrySnapshot {
    fn new(rows: Vec<RegistryRow>) -> Self {
        let mut rows: Vec<Arc<RegistryRow>> = rows.into_iter().map(Arc::new).collect();
        rows.sort_by(|a, b| a.name.cmp(&b.name).then_with(|| a.id.cmp(&b.id)));
        let by_id = rows
            .iter()
            .enumerate()
            .map(|(i, r)| (r.id.clone(), i))
            .collect();
        Self { rows, by_id }
    }

    /// All rows, in catalog order.
    pub fn rows(&self) -> &[Arc<RegistryRow>] {
        &self.rows
    }

    /// The row with this id.
    pub fn get(&self, id: &str) -> Option<&Arc<RegistryRow>> {
        self.by_id.get(id).map(|&i| &self.rows[i])
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
            registry: Flushed::new(1, Duration::from_secs(300), svc_metrics::Cache::Registry),
            grants: Flushed::new(100_000, IDENTITY_TTL, svc_metrics::Cache::Grants),
            groups: Flushed::new(100_000, IDENTITY_TTL, svc_metrics::Cache::Groups),
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
            .get_or_read(user_id, move || async move {
                Ok(Arc::new(self.store.groups_of_user(user_id).await?))
            })
            .await
    }

    /// The registry snapshot: cached, or read from the store.
    pub async fn registry(&self) -> Result<Arc<RegistrySnapshot>> {
        self.registry
            .get_or_read(&(), move || async move {
                Ok(Arc::new(RegistrySnapshot::new(
                    self.store.list_tables().await?,
                )))
            })
            .await
    }

    /// The registered table the caller asked for: 404 when it is not registered, 403 when the
    /// caller may not read it. Runs before any cache of table data is consulted.
    pub async fn readable_table(
        &self,
        caller: &Caller,
        table_id: &str,
    ) -> Result<Arc<RegistryRow>> {
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
                    // Boxed: held inline, the store read's future would be copied with
                    // this one on every request (see `Flushed::get_or_read`).
                    let row = Box::pin(self.store.table_by_id(table_id))
                        .await?
                        .ok_or_else(|| {
                            Error::not_found(format!("Table '{table_id}' is not registered"))
                        })?;
                    // Registered by another process since the snapshot was taken.
                    self.forget_registry();
                    Arc::new(row)
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
            .get_or_read(user_id, move || async move {
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
