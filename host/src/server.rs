//! Start-up (store, seeds, first admin) and the HTTP server with graceful shutdown.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use poem::listener::{Acceptor, Listener, TcpListener};
use svc_store::audit::Actor;
use svc_store::{redact_url, Store};

use crate::config::StoreArgs;
use crate::connections::{ConnectionLimits, Connections, LimitedAcceptor};
use crate::state::{AppState, RuntimeConfig};

/// Options of `svc-server serve`.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "SVC_LISTEN", default_value = "127.0.0.1:8000")]
    pub listen: String,
    /// Largest request body accepted, in bytes.
    #[arg(long, env = "SVC_MAX_BODY_BYTES", default_value_t = 10 * 1024 * 1024)]
    pub max_body_bytes: usize,
    /// Largest table upload (`PUT /api/admin/tables/{id}/data`) accepted, in bytes.
    #[arg(long, env = "SVC_UPLOAD_MAX_BYTES", default_value_t = 4 << 30)]
    pub upload_max_bytes: u64,
    /// Largest session file upload (`POST /api/upload/sessions`) accepted, in bytes.
    #[arg(long, env = "SVC_SESSION_UPLOAD_MAX_BYTES", default_value_t = 512 << 20)]
    pub session_upload_max_bytes: u64,
    /// Largest plugin archive (`POST /api/marketplace/flea/upload`) accepted, in bytes.
    #[arg(long, env = "SVC_MARKETPLACE_UPLOAD_MAX_BYTES", default_value_t = 10 << 20)]
    pub marketplace_upload_max_bytes: u64,
    /// Days of telemetry kept; the daily prune deletes older events and summaries.
    #[arg(long, env = "SVC_TELEMETRY_RETENTION_DAYS", default_value_t = 365)]
    pub telemetry_retention_days: u32,
    /// Days of audit rows kept (pruned hourly in small batches); unset keeps every row.
    #[arg(long, env = "SVC_AUDIT_RETENTION_DAYS", value_parser = clap::value_parser!(u32).range(1..))]
    pub audit_retention_days: Option<u32>,
    /// Most telemetry events the administrators' in-memory index holds (about 20 bytes
    /// each); past it, and at 0, telemetry reads scan the event files instead.
    #[arg(long, env = "SVC_TELEMETRY_INDEX_MAX_EVENTS", default_value_t = svc_telemetry::event_index::DEFAULT_MAX_EVENTS)]
    pub telemetry_index_max_events: usize,
    /// Milliseconds of quiet after an upload before the telemetry pipeline runs.
    #[arg(long, env = "SVC_TELEMETRY_DEBOUNCE_MS", default_value_t = 2000)]
    pub telemetry_debounce_ms: u64,
    /// Take the client address from the last `X-Forwarded-For` hop (behind a reverse proxy).
    #[arg(long, env = "SVC_TRUST_PROXY", default_value_t = false)]
    pub trust_proxy: bool,
    /// Open connections at most (one more is answered 503 and closed); 0: as many as the
    /// open-files limit allows, less a reserve for files and the store.
    #[arg(long, env = "SVC_MAX_CONNECTIONS", default_value_t = 0)]
    pub max_connections: usize,
    /// Seconds a connection may sit idle (no request in flight, nothing sent) before it is closed.
    #[arg(long, env = "SVC_IDLE_TIMEOUT_SECONDS", default_value_t = 60)]
    pub idle_timeout_seconds: u64,
    /// Seconds a request's head, and separately its body, may take to arrive.
    #[arg(long, env = "SVC_REQUEST_READ_TIMEOUT_SECONDS", default_value_t = 30)]
    pub request_read_timeout_seconds: u64,
    /// E-mail of the administrator created on first start with an empty store.
    #[arg(long, env = "SVC_ADMIN_EMAIL", default_value = "admin@localhost")]
    pub admin_email: String,
    /// Directory of dynamic driver libraries (`*.so`, `*.dylib`, `*.dll`) loaded at start.
    #[arg(long, env = "SVC_DRIVER_DIR")]
    pub driver_dir: Option<PathBuf>,
    /// Largest `limit` a query may ask for.
    #[arg(long, env = "SVC_QUERY_MAX_ROWS", default_value_t = 1_000_000)]
    pub query_max_rows: usize,
    /// Seconds one query may run before it is stopped (504 `query_timeout`).
    #[arg(long, env = "SVC_QUERY_TIMEOUT_SECONDS", default_value_t = 120)]
    pub query_timeout_seconds: u64,
    /// Memory one query may use, in MiB (beyond it: 503 `resources_exhausted`).
    #[arg(long, env = "SVC_QUERY_MEMORY_MB", default_value_t = 2048)]
    pub query_memory_mb: usize,
    /// Resident memory (MiB) above which the running query holding the most memory is
    /// stopped (503 `resources_exhausted`); 0: twice the query memory plus 1024.
    #[arg(long, env = "SVC_MEMORY_CEILING_MB", default_value_t = 0)]
    pub memory_ceiling_mb: usize,
    /// Do not refresh remote tables' metadata in the background at start.
    #[arg(long, env = "SVC_SKIP_CACHE_WARMUP", value_name = "1|true")]
    pub skip_cache_warmup: Option<String>,
    /// Remote tables whose metadata one full refresh (and the warmup) fetches at once.
    #[arg(long, env = "SVC_METADATA_REFRESH_CONCURRENCY", default_value_t = svc_catalog::warmup::DEFAULT_REFRESH_CONCURRENCY)]
    pub metadata_refresh_concurrency: usize,
    /// Most rows one `/api/v2/scan` returns.
    #[arg(long, env = "SVC_SCAN_MAX_ROWS", default_value_t = 10_000_000)]
    pub scan_max_rows: usize,
    /// Most rows a script may write to its target table; a larger result fails the run and
    /// leaves the table as it was.
    #[arg(long, env = "SVC_SCRIPT_MAX_ROWS", default_value_t = 100_000_000)]
    pub script_max_rows: usize,
    /// Record and serve Prometheus metrics at `/metrics` (administrators only on this listener).
    #[arg(long, env = "SVC_METRICS", default_value = "on", value_parser = clap::builder::BoolishValueParser::new())]
    pub metrics: bool,
    /// Also serve `/metrics` here, without authentication (for a scraper on a private network).
    #[arg(long, env = "SVC_METRICS_LISTEN")]
    pub metrics_listen: Option<String>,
    /// Scans and queries one user may run at once (beyond: 429 `quota_exceeded`).
    #[arg(long, env = "SVC_SCAN_MAX_CONCURRENT_PER_USER", default_value_t = 5)]
    pub scan_max_concurrent_per_user: usize,
    /// Bytes one user's scans and queries may read per UTC day (beyond: 429 `quota_exceeded`).
    #[arg(long, env = "SVC_SCAN_MAX_DAILY_BYTES_PER_USER", default_value_t = 50 << 30)]
    pub scan_max_daily_bytes_per_user: u64,
}

/// Whether opening the state may create it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opening {
    /// `serve` (and `migrate`): a fresh data directory gets a new store.
    CreateIfMissing,
    /// Shell commands: a missing store is an error naming where it was looked for.
    MustExist,
}

/// Opens and migrates the store, seeds system groups and internal tables, and builds state.
pub async fn open_state(
    store_args: &StoreArgs,
    config: RuntimeConfig,
    opening: Opening,
) -> anyhow::Result<Arc<AppState>> {
    let url = store_args.url();
    let store = match opening {
        Opening::CreateIfMissing => Store::open(&url).await,
        Opening::MustExist => Store::open_existing(&url).await,
    }
    .with_context(|| format!("state store {}", redact_url(&url)))?;
    store.seed_system_groups().await?;
    let state = AppState::new(store, &store_args.jwt_secret()?, config);
    state.registry.seed().await?;
    Ok(state)
}

/// Runtime settings for shell commands, which never serve HTTP.
pub fn console_config(data_dir: PathBuf) -> RuntimeConfig {
    RuntimeConfig {
        data_dir,
        max_body_bytes: 0,
        upload_max_bytes: 0,
        session_upload_max_bytes: 0,
        marketplace_upload_max_bytes: 0,
        telemetry_retention_days: 365,
        telemetry_index_max_events: 0,
        audit_retention_days: None,
        trust_proxy: false,
        driver_dir: None,
        query: svc_query::QueryLimits::default(),
        drivers: Default::default(),
        metadata_refresh_concurrency: svc_catalog::warmup::DEFAULT_REFRESH_CONCURRENCY,
        ask_llm: Default::default(),
        mcp: Default::default(),
    }
}

/// On an empty store, creates the first administrator (no password) and says how to log in.
async fn ensure_first_admin(
    state: &AppState,
    email: &str,
    store_args: &StoreArgs,
) -> anyhow::Result<()> {
    if state.store.count_users().await? > 0 {
        return Ok(());
    }
    match state
        .admin
        .create_user(&Actor::console(), email, Some("Admin"), None, true)
        .await
    {
        Ok(_) => {}
        // Another replica starting at the same moment created it first.
        Err(e) if e.status() == poem::http::StatusCode::CONFLICT => return Ok(()),
        Err(e) => anyhow::bail!("cannot create the first admin {email}: {e}"),
    }
    let mut cmd = format!("svc-server tokens create --email {email}");
    if store_args.database_url.is_some() {
        cmd.push_str(" --database-url <same URL>");
    } else {
        cmd.push_str(&format!(" --data-dir {}", store_args.data_dir.display()));
    }
    tracing::info!("created the first administrator {email}; get a token with: {cmd}");
    Ok(())
}

/// `svc-server serve`.
pub async fn serve(store_args: StoreArgs, args: ServeArgs) -> anyhow::Result<()> {
    let scheduler = crate::jobs::scheduler::SchedulerConfig::from_env(&|k| std::env::var(k).ok())
        .map_err(anyhow::Error::msg)?;
    let instance =
        crate::config::InstanceConfig::load(store_args.config.as_deref(), &store_args.data_dir)?;
    // Before anything records: series that keep their handles register them on first use.
    let exporter = start_metrics(&args).await?;
    let config = RuntimeConfig {
        drivers: instance.drivers,
        ask_llm: instance.ask_llm,
        mcp: instance.mcp_limits,
        metadata_refresh_concurrency: args.metadata_refresh_concurrency,
        data_dir: store_args.data_dir.clone(),
        max_body_bytes: args.max_body_bytes,
        upload_max_bytes: args.upload_max_bytes,
        session_upload_max_bytes: args.session_upload_max_bytes,
        marketplace_upload_max_bytes: args.marketplace_upload_max_bytes,
        telemetry_retention_days: args.telemetry_retention_days.max(1),
        telemetry_index_max_events: args.telemetry_index_max_events,
        audit_retention_days: args.audit_retention_days,
        trust_proxy: args.trust_proxy,
        driver_dir: args.driver_dir.clone(),
        query: svc_query::QueryLimits {
            max_rows: args.query_max_rows,
            timeout: Duration::from_secs(args.query_timeout_seconds.max(1)),
            memory_bytes: args.query_memory_mb.max(16) << 20,
            scan_max_rows: args.scan_max_rows.max(1),
            script_max_rows: args.script_max_rows.max(1),
            max_concurrent_per_user: args.scan_max_concurrent_per_user.max(1),
            max_daily_bytes_per_user: args.scan_max_daily_bytes_per_user,
        },
    };
    let ceiling_mb = match args.memory_ceiling_mb {
        0 => args.query_memory_mb.max(16) * 2 + 1024,
        mb => mb,
    };
    svc_query::watchdog::set_ceiling(ceiling_mb << 20);
    let state = open_state(&store_args, config, Opening::CreateIfMissing).await?;
    ensure_first_admin(&state, &args.admin_email, &store_args).await?;
    crate::jobs::scripts::release_dead_leases(&state)
        .await
        .map_err(|e| anyhow::anyhow!("cannot free the previous process's script runs: {e}"))?;
    let swept =
        svc_catalog::drivers::sweep_temp_files(&store_args.data_dir, Duration::from_secs(3600));
    if swept > 0 {
        tracing::info!(
            files = swept,
            "removed partial parquet files left by an interrupted write"
        );
    }
    let skip = args
        .skip_cache_warmup
        .as_deref()
        .map(str::to_ascii_lowercase);
    let mut warmed = false;
    if matches!(skip.as_deref(), Some("1" | "true" | "yes" | "on")) {
        tracing::info!("cache warmup skipped (SVC_SKIP_CACHE_WARMUP)");
    } else if let Err(e) = state.warmer.refresh_all().await {
        // Start-up never waits for, or fails on, the warmup.
        tracing::warn!(error = %e, "cache warmup could not start");
    } else {
        warmed = true;
    }
    crate::jobs::scheduler::start(state.clone(), scheduler, warmed);
    crate::jobs::ticketing::start(state.clone());
    state
        .pipeline
        .start(Duration::from_millis(args.telemetry_debounce_ms));

    let acceptor = TcpListener::bind(args.listen.clone())
        .into_acceptor()
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let addrs: Vec<SocketAddr> = acceptor
        .local_addr()
        .iter()
        .filter_map(|a| a.as_socket_addr().copied())
        .collect();
    for a in &addrs {
        tracing::info!("svc-server {} listening on http://{a}", crate::api::VERSION);
    }
    let connections = Connections::new(connection_limits(&args));
    let acceptor = LimitedAcceptor::new(acceptor, connections.clone());
    let app = crate::api::app(state.clone(), connections, exporter);
    let released = crate::ops::code_pages::release();
    tracing::debug!(
        kib = released / 1024,
        "start-up code let go of (it stays in the page cache)"
    );
    poem::Server::new_with_acceptor(acceptor)
        .run_with_graceful_shutdown(app, shutdown_signal(), Some(Duration::from_secs(30)))
        .await?;
    tracing::info!("shutting down: flushing the audit queue");
    state.audit.flush().await;
    state.store.close().await;
    Ok(())
}

/// Installs the metrics recorder unless metrics are off, and starts the separate listener
/// when one is configured.
async fn start_metrics(args: &ServeArgs) -> anyhow::Result<Option<svc_metrics::Exporter>> {
    if !args.metrics {
        if args.metrics_listen.is_some() {
            anyhow::bail!("SVC_METRICS_LISTEN is set but metrics are off (SVC_METRICS)");
        }
        return Ok(None);
    }
    let exporter = svc_metrics::Exporter::install().map_err(anyhow::Error::msg)?;
    crate::ops::metrics::keep_up(exporter.clone());
    if let Some(listen) = &args.metrics_listen {
        crate::ops::metrics::serve_separately(listen, exporter.clone()).await?;
    }
    Ok(Some(exporter))
}

/// The connection limits: the cap defaults to the open-files limit less a reserve for the
/// store, parquet files and dynamic drivers.
fn connection_limits(args: &ServeArgs) -> ConnectionLimits {
    const RESERVE: usize = 512;
    let files = crate::connections::open_files_limit().unwrap_or(1024);
    let fits = files.saturating_sub(RESERVE).max(64);
    let max_connections = match args.max_connections {
        0 => fits,
        n => n,
    };
    if max_connections > fits {
        tracing::warn!(
            max_connections,
            open_files = files,
            "SVC_MAX_CONNECTIONS is above what the open-files limit leaves room for; raise the limit (ulimit -n, LimitNOFILE=)"
        );
    }
    ConnectionLimits {
        max_connections,
        idle: Duration::from_secs(args.idle_timeout_seconds.max(1)),
        request_read: Duration::from_secs(args.request_read_timeout_seconds.max(1)),
    }
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}
