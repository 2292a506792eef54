//! The per-table caches' flush hooks.

use std::sync::{Arc, RwLock};

/// A cache that holds per-table entries and must drop them when the table changes.
pub type FlushHook = Arc<dyn Fn(&str) + Send + Sync>;

/// Every cache that holds per-table data registers a hook here; a registry change and a data
/// change both run them all ([`crate::registry::Registry::changed`],
/// [`crate::registry::Registry::data_changed`]).
#[derive(Default)]
pub struct CacheHooks {
    hooks: RwLock<Vec<FlushHook>>,
}

impl std::fmt::Debug for CacheHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "CacheHooks({})",
            self.hooks.read().map(|h| h.len()).unwrap_or(0)
        )
    }
}

impl CacheHooks {
    /// Adds a cache to flush on table changes.
    pub fn register(&self, hook: FlushHook) {
        self.hooks.write().expect("hooks lock").push(hook);
    }

    /// Drops everything cached about one table.
    pub fn forget_table(&self, table_id: &str) {
        for hook in self.hooks.read().expect("hooks lock").iter() {
            hook(table_id);
        }
    }
}
