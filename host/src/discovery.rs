//! In-memory caches of the discovery endpoints, and the table-level flush every registry
//! change goes through.

use std::sync::Arc;
use std::time::Duration;

use moka::sync::Cache;

use crate::api::discovery::{CachedSample, SchemaResponse};

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
}

impl std::fmt::Debug for DiscoveryCaches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiscoveryCaches")
            .field("schema", &self.schema.entry_count())
            .field("sample", &self.sample.entry_count())
            .finish()
    }
}

impl Default for DiscoveryCaches {
    fn default() -> Self {
        Self {
            schema: Cache::builder()
                .max_capacity(512)
                .time_to_live(Duration::from_secs(3600))
                .build(),
            sample: Cache::builder()
                .max_capacity(512)
                .time_to_live(Duration::from_secs(3600))
                .support_invalidation_closures()
                .build(),
            examples: Default::default(),
        }
    }
}

impl DiscoveryCaches {
    /// Drops everything cached about one table.
    pub fn forget_table(&self, table_id: &str) {
        self.schema.invalidate(table_id);
        let id = table_id.to_string();
        // Only fails when closures are not enabled, which the builder above does.
        let _ = self.sample.invalidate_entries_if(move |(t, _), _| *t == id);
    }
}
