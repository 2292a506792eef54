//! In-memory caches of the discovery endpoints, and the table-level flush every registry
//! change goes through.

use std::sync::Arc;
use std::time::Duration;

use moka::sync::Cache;
use svc_core::hash::CacheHasher;

use crate::api::discovery::{CachedCatalog, CachedSample, SchemaResponse};

/// Schema payloads and sample payloads. (The registry snapshot lives with the access
/// check, [`svc_auth::access::Access`].)
#[derive(Clone)]
pub struct DiscoveryCaches {
    /// Schema responses by table id.
    pub schema: Cache<String, Arc<SchemaResponse>, CacheHasher>,
    /// Sample responses by `(table_id, n)`; never holds internal tables.
    pub sample: Cache<(String, usize), Arc<CachedSample>, CacheHasher>,
    /// Local tables' WHERE examples, by file version (a new file is read afresh).
    pub examples: svc_catalog::examples::LocalExamples,
    /// Catalog bodies by caller view ([`CachedCatalog::key`]): dropped whole by any table's
    /// flush, and kept at most [`CATALOG_TTL`] for what changes without one (freshness
    /// labels age, local files change size).
    pub catalog: Cache<(usize, usize), Arc<CachedCatalog>, CacheHasher>,
}

/// How long a catalog body is served before it is rebuilt.
pub const CATALOG_TTL: Duration = Duration::from_secs(5);

impl std::fmt::Debug for DiscoveryCaches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiscoveryCaches")
            .field("schema", &self.schema.entry_count())
            .field("sample", &self.sample.entry_count())
            .field("catalog", &self.catalog.entry_count())
            .finish()
    }
}

impl Default for DiscoveryCaches {
    fn default() -> Self {
        Self {
            schema: Cache::builder()
                .max_capacity(512)
                .time_to_live(Duration::from_secs(3600))
                .build_with_hasher(CacheHasher::default()),
            sample: Cache::builder()
                .max_capacity(512)
                .time_to_live(Duration::from_secs(3600))
                .support_invalidation_closures()
                .build_with_hasher(CacheHasher::default()),
            examples: Default::default(),
            catalog: Cache::builder()
                .max_capacity(10_000)
                .time_to_live(CATALOG_TTL)
                .build_with_hasher(CacheHasher::default()),
        }
    }
}

impl DiscoveryCaches {
    /// Drops everything cached about one table.
    pub fn forget_table(&self, table_id: &str) {
        self.schema.invalidate(table_id);
        // Every caller's catalog lists the table (or might, after the change).
        self.catalog.invalidate_all();
        let id = table_id.to_string();
        // Only fails when closures are not enabled, which the builder above does.
        let _ = self.sample.invalidate_entries_if(move |(t, _), _| *t == id);
    }
}
