//! In-memory caches of the discovery endpoints, and the table-level flush every registry
//! change goes through.

use std::sync::Arc;
use std::time::Duration;

use svc_core::cache::{Cache, Equivalent};

use crate::api::discovery::{CachedCatalog, CachedSample, SchemaResponse};

/// Schema payloads and sample payloads. (The registry snapshot lives with the access
/// check, [`svc_auth::access::Access`].)
#[derive(Clone)]
pub struct DiscoveryCaches {
    /// Schema responses by table id.
    pub schema: Cache<String, Arc<SchemaResponse>>,
    /// Sample responses by `(table_id, n)`; never holds internal tables.
    pub sample: Cache<(String, usize), Arc<CachedSample>>,
    /// Local tables' WHERE examples, by file version (a new file is read afresh).
    pub examples: svc_catalog::examples::LocalExamples,
    /// Catalog bodies by caller view ([`CachedCatalog::key`]): dropped whole by any table's
    /// flush, and kept at most [`CATALOG_TTL`] for what changes without one (freshness
    /// labels age, local files change size).
    pub catalog: Cache<(usize, usize), Arc<CachedCatalog>>,
}

/// How long a catalog body is served before it is rebuilt.
pub const CATALOG_TTL: Duration = Duration::from_secs(5);

impl std::fmt::Debug for DiscoveryCaches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiscoveryCaches")
            .field("schema", &self.schema.len())
            .field("sample", &self.sample.len())
            .field("catalog", &self.catalog.len())
            .finish()
    }
}

impl Default for DiscoveryCaches {
    fn default() -> Self {
        Self {
            schema: Cache::new(512, Duration::from_secs(3600)),
            sample: Cache::new(512, Duration::from_secs(3600)),
            examples: Default::default(),
            catalog: Cache::new(10_000, CATALOG_TTL),
        }
    }
}

impl DiscoveryCaches {
    /// Drops everything cached about one table.
    pub fn forget_table(&self, table_id: &str) {
        self.schema.remove(table_id);
        // Every caller's catalog lists the table (or might, after the change).
        self.catalog.clear();
        self.sample.retain(|(t, _), _| t != table_id);
    }
}

/// A key of [`DiscoveryCaches::sample`], borrowed: a lookup copies no table id. It hashes
/// as the owned key does (a tuple hashes its fields in order).
#[derive(Hash)]
pub struct SampleKey<'a>(pub &'a str, pub usize);

impl Equivalent<(String, usize)> for SampleKey<'_> {
    fn equivalent(&self, key: &(String, usize)) -> bool {
        self.0 == key.0 && self.1 == key.1
    }
}
