//! Shared server state, built once at start and handed to every endpoint.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use svc_plugin_api::datafusion::execution::cache::cache_manager::FileMetadataCache;

use crate::access::AccessCaches;
use crate::audit::AuditWriter;
use crate::auth::ratelimit::LoginLimiter;
use crate::auth::Authenticator;
use crate::discovery::DiscoveryCaches;
use crate::drivers::Drivers;
use crate::store::Store;
use crate::warmup::MetadataWarmer;

/// Settings the request path needs.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// The data directory.
    pub data_dir: PathBuf,
    /// Largest request body accepted.
    pub max_body_bytes: usize,
    /// Whether to take the client address from `X-Forwarded-For`.
    pub trust_proxy: bool,
    /// Where dynamic driver libraries are loaded from, if anywhere.
    pub driver_dir: Option<PathBuf>,
    /// Per-query limits.
    pub query: crate::query::QueryLimits,
    /// `[data_source.warehouse]` with its environment overrides.
    pub warehouse: svc_driver_warehouse::WarehouseConfig,
    /// Remote tables refreshed at once by a full metadata refresh.
    pub metadata_refresh_concurrency: usize,
}

/// A cache that holds per-table entries and must drop them when the registry changes.
pub type FlushHook = Arc<dyn Fn(&str) + Send + Sync>;

/// The one cache-flush path: every registry change calls [`CacheHooks::flush_table`], and
/// every cache that holds per-table data registers a hook here.
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
    /// Adds a cache to flush on registry changes.
    pub fn register(&self, hook: FlushHook) {
        self.hooks.write().expect("hooks lock").push(hook);
    }

    /// Drops everything cached about one table.
    pub fn flush_table(&self, table_id: &str) {
        for hook in self.hooks.read().expect("hooks lock").iter() {
            hook(table_id);
        }
    }
}

/// Everything the endpoints share.
#[derive(Debug)]
pub struct AppState {
    /// The state store.
    pub store: Store,
    /// Token issuing and checking.
    pub auth: Authenticator,
    /// The one audit writer.
    pub audit: Arc<AuditWriter>,
    /// Source drivers by `source_type`.
    pub drivers: Drivers,
    /// Failed-login limiter.
    pub login_limiter: LoginLimiter,
    /// Registry-change cache flush.
    pub caches: CacheHooks,
    /// Schema and sample caches.
    pub discovery: DiscoveryCaches,
    /// The registry snapshot and grant sets the access check reads.
    pub access: AccessCaches,
    /// Refreshes remote tables' persistent metadata.
    pub warmer: MetadataWarmer,
    /// What the scheduler is doing (filled by its loop).
    pub scheduler: crate::scheduler::SharedStatus,
    /// Sync passes over materialized tables.
    pub sync: crate::sync::SyncRunner,
    /// Per-user scan and query quotas.
    pub quotas: Arc<crate::query::quota::Quotas>,
    /// Parquet metadata shared by every query (see `query::engine::file_metadata_cache`).
    pub file_metadata: Arc<FileMetadataCache>,
    /// Request-path settings.
    pub config: RuntimeConfig,
}

impl AppState {
    /// State over an open, migrated store.
    pub fn new(store: Store, jwt_secret: &[u8], config: RuntimeConfig) -> Arc<Self> {
        let discovery = DiscoveryCaches::default();
        let access = AccessCaches::default();
        let caches = CacheHooks::default();
        {
            let discovery = discovery.clone();
            caches.register(Arc::new(move |id: &str| discovery.flush_table(id)));
            let access = access.clone();
            caches.register(Arc::new(move |_: &str| access.forget_registry()));
        }
        let drivers = Drivers::load(
            &config.data_dir,
            config.driver_dir.as_deref(),
            &store,
            &config.warehouse,
        );
        Arc::new(Self {
            auth: Authenticator::new(store.clone(), jwt_secret),
            audit: AuditWriter::start(store.clone()),
            warmer: MetadataWarmer::new(
                store.clone(),
                drivers.clone(),
                config.metadata_refresh_concurrency,
            ),
            drivers,
            login_limiter: LoginLimiter::new(10, Duration::from_secs(60)),
            sync: crate::sync::SyncRunner::default(),
            scheduler: Default::default(),
            caches,
            discovery,
            access,
            quotas: crate::query::quota::Quotas::new(
                config.query.max_concurrent_per_user,
                config.query.max_daily_bytes_per_user,
            ),
            file_metadata: crate::query::engine::file_metadata_cache(),
            config,
            store,
        })
    }

    /// The one flush for an access change (users, tokens, groups, memberships, grants):
    /// cached identities and grant sets are dropped, so this server never acts on access it
    /// has just changed.
    pub fn access_changed(&self) {
        self.auth.forget_identities();
        self.access.forget_grants();
    }

    /// The one flush for a registry change: in-memory caches through their hooks, and the
    /// table's persistent metadata (its source may have changed), then a background re-warm
    /// of that row. A failure to forget the metadata is logged; the registry change itself
    /// has already happened.
    pub async fn flush_table(&self, table_id: &str) {
        self.caches.flush_table(table_id);
        if let Err(e) = self.store.forget_metadata(table_id).await {
            tracing::warn!(table = %table_id, error = %e, "could not forget cached metadata");
        }
        self.warmer.schedule(table_id);
    }
}
