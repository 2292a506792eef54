//! The composition root: every service of the crates below, assembled once at start and
//! handed to every endpoint. Services hold only the handles they use; this struct only
//! wires them together.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use svc_auth::access::Access;
use svc_auth::admin::Admin;
use svc_auth::login::Login;
use svc_auth::ratelimit::LoginLimiter;
use svc_auth::Authenticator;
use svc_catalog::caches::CacheHooks;
use svc_catalog::drivers::Drivers;
use svc_catalog::registry::Registry;
use svc_catalog::settings::DriverSettings;
use svc_catalog::warmup::MetadataWarmer;
use svc_query::Engine;
use svc_store::audit::AuditWriter;
use svc_store::Store;
use svc_telemetry::browse::Browser;
use svc_telemetry::files::SessionFiles;
use svc_telemetry::sessions::SessionBrowser;
use svc_telemetry::{EventSegments, Pipeline};

use crate::discovery::DiscoveryCaches;

/// Settings the request path needs.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// The data directory.
    pub data_dir: PathBuf,
    /// Largest request body accepted.
    pub max_body_bytes: usize,
    /// Largest table upload accepted (uploads stream to disk, so they get their own limit).
    pub upload_max_bytes: u64,
    /// Largest session file upload accepted.
    pub session_upload_max_bytes: u64,
    /// Largest plugin archive accepted.
    pub marketplace_upload_max_bytes: u64,
    /// Days of telemetry the prune keeps.
    pub telemetry_retention_days: u32,
    /// Most events the telemetry reads' in-memory index holds (0: none, reads scan).
    pub telemetry_index_max_events: usize,
    /// Days of audit rows the retention job keeps; None keeps every row.
    pub audit_retention_days: Option<u32>,
    /// Whether to take the client address from `X-Forwarded-For`.
    pub trust_proxy: bool,
    /// Where dynamic driver libraries are loaded from, if anywhere.
    pub driver_dir: Option<PathBuf>,
    /// Per-query limits.
    pub query: svc_query::QueryLimits,
    /// Every driver's `[data_source.<source_type>]` settings, with environment overrides.
    pub drivers: DriverSettings,
    /// Remote tables refreshed at once by a full metadata refresh.
    pub metadata_refresh_concurrency: usize,
    /// The LLM behind ask (`[llm]`, `SVC_LLM_*`); unconfigured by default.
    pub ask_llm: svc_ask::LlmConfig,
    /// How much one MCP result may hold (`[mcp]`, `SVC_MCP_*`).
    pub mcp: crate::mcp::McpLimits,
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
    /// Password login under the login limits (the API's and the login page's).
    pub login: Login,
    /// Registry changes and the per-table cache flushes.
    pub registry: Registry,
    /// Schema and sample caches.
    pub discovery: DiscoveryCaches,
    /// The one access check (registry snapshot and grant sets).
    pub access: Access,
    /// Administrative operations on users, groups, grants and tokens.
    pub admin: Admin,
    /// Refreshes remote tables' persistent metadata.
    pub warmer: MetadataWarmer,
    /// What the scheduler is doing (filled by its loop).
    pub scheduler: crate::jobs::scheduler::SharedStatus,
    /// Sync passes over materialized tables.
    pub sync: crate::jobs::sync::SyncRunner,
    /// Per-user scan and query quotas.
    pub quotas: Arc<svc_query::quota::Quotas>,
    /// The query engine (queries, scans, scripts).
    pub engine: Engine,
    /// The telemetry pipeline (session files to usage tables).
    pub pipeline: Arc<Pipeline>,
    /// Telemetry reads for administrators (facets, KPIs, pages, summary).
    pub telemetry: Browser,
    /// Session reads (lists, transcripts, downloads) for administrators and owners.
    pub sessions: SessionBrowser,
    /// Questions about the telemetry, answered by an LLM's SQL on the engine.
    pub ask: svc_ask::Asker,
    /// Corporate memory: contributions, review, the agents' bundle.
    pub memory: svc_memory::Memory,
    /// The plugin marketplace: curated syncs, submissions, usage-ranked listings.
    pub marketplace: svc_marketplace::Marketplace,
    /// Request-path settings.
    pub config: RuntimeConfig,
}

impl AppState {
    /// State over an open, migrated store.
    pub fn new(store: Store, jwt_secret: &[u8], config: RuntimeConfig) -> Arc<Self> {
        let discovery = DiscoveryCaches::default();
        let access = Access::new(store.clone());
        let caches = Arc::new(CacheHooks::default());
        {
            let discovery = discovery.clone();
            caches.register(Arc::new(move |id: &str| discovery.forget_table(id)));
            let access = access.clone();
            caches.register(Arc::new(move |_: &str| access.forget_registry()));
        }
        let audit = AuditWriter::start(store.clone());
        let drivers = Drivers::load(
            &config.data_dir,
            config.driver_dir.as_deref(),
            &store,
            &audit,
            &config.drivers,
        );
        let auth = Authenticator::new(store.clone(), jwt_secret);
        let admin = Admin::new(store.clone(), audit.clone(), auth.clone(), access.clone());
        let engine = Engine::new(store.clone(), drivers.clone(), access.clone(), config.query);
        let warmer = MetadataWarmer::new(
            store.clone(),
            drivers.clone(),
            caches.clone(),
            config.metadata_refresh_concurrency,
        );
        let registry = Registry::new(
            store.clone(),
            drivers.clone(),
            audit.clone(),
            caches,
            warmer.clone(),
        );
        let pipeline = Pipeline::new(
            store.clone(),
            SessionFiles::new(&config.data_dir),
            EventSegments::new(&config.data_dir),
        );
        let telemetry = Browser::new(store.clone(), &config.data_dir)
            .index_at_most(config.telemetry_index_max_events);
        let sessions = SessionBrowser::new(store.clone(), SessionFiles::new(&config.data_dir));
        let ask = svc_ask::Asker::new(engine.clone(), config.ask_llm.clone());
        let memory = svc_memory::Memory::new(store.clone(), audit.clone());
        let marketplace =
            svc_marketplace::Marketplace::new(store.clone(), audit.clone(), &config.data_dir);
        let login = Login::new(
            store.clone(),
            auth.clone(),
            Arc::new(LoginLimiter::new(10, Duration::from_secs(60))),
            audit.clone(),
        );
        Arc::new(Self {
            ask,
            memory,
            marketplace,
            engine,
            pipeline,
            telemetry,
            sessions,
            auth,
            audit,
            admin,
            registry,
            warmer,
            drivers,
            login,
            sync: crate::jobs::sync::SyncRunner::default(),
            scheduler: Default::default(),
            discovery,
            access,
            quotas: svc_query::quota::Quotas::new(
                config.query.max_concurrent_per_user,
                config.query.max_daily_bytes_per_user,
            ),
            config,
            store,
        })
    }

    /// The one flush for an access change (users, tokens, groups, memberships, grants):
    /// cached identities and grant sets are dropped, so this server never acts on access it
    /// has just changed.
    pub fn access_changed(&self) {
        self.admin.access_changed();
    }

    /// The one flush for a registry change (see [`Registry::changed`]).
    pub async fn registry_changed(&self, table_id: &str) {
        self.registry.changed(table_id).await;
    }

    /// The one flush for a data change (see [`Registry::data_changed`]).
    pub fn data_changed(&self, table_id: &str) {
        self.registry.data_changed(table_id);
    }
}
