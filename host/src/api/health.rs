//! `GET /api/health` — unauthenticated liveness with versions.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use poem_openapi::payload::Json;
use poem_openapi::{ApiResponse, Object, OpenApi};
use svc_store::{Store, CURRENT_SCHEMA_VERSION};

use super::{Tag, VERSION};
use crate::state::AppState;

pub struct HealthApi {
    state: Arc<AppState>,
    probe: SchemaProbe,
}

impl HealthApi {
    pub fn new(state: Arc<AppState>) -> Self {
        Self {
            state,
            probe: SchemaProbe::default(),
        }
    }
}

/// How long a store reading answers health checks: a load balancer polling many times a
/// second costs the store one query per second, and an outage shows within a second.
const PROBE_TTL: Duration = Duration::from_secs(1);

/// The store's schema version, read at most once per [`PROBE_TTL`].
#[derive(Default)]
struct SchemaProbe {
    /// When it was last read, and what it said (None: unreadable).
    last: Mutex<Option<(Instant, Option<i64>)>>,
    /// Held by the one request re-reading it; the others answer with the last reading.
    reading: tokio::sync::Mutex<()>,
}

impl SchemaProbe {
    async fn version(&self, store: &Store) -> Option<i64> {
        let last = *self.last.lock().unwrap_or_else(|p| p.into_inner());
        let _reading = match last {
            Some((at, version)) if at.elapsed() < PROBE_TTL => return version,
            Some((_, version)) => match self.reading.try_lock() {
                Ok(guard) => guard,
                Err(_) => return version,
            },
            // Nothing read yet: wait for the first reading rather than guess.
            None => self.reading.lock().await,
        };
        if let Some((at, version)) = *self.last.lock().unwrap_or_else(|p| p.into_inner()) {
            if at.elapsed() < PROBE_TTL {
                return version;
            }
        }
        // Boxed: once a second at most, and inline the store read's future would be copied
        // with every health check's (see `svc_auth`'s `Flushed::get_or_read`).
        let version = Box::pin(store.schema_version()).await.ok();
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some((Instant::now(), version));
        version
    }
}

/// Service health.
#[derive(Object)]
struct Health {
    /// `ok`, or `unhealthy` when the store cannot be read or is at another schema version.
    status: String,
    /// Server version.
    version: String,
    /// Schema version recorded in the store (null when unreachable).
    schema_version: Option<i64>,
    /// Schema version this server expects.
    expected_schema_version: i64,
    // Documented by its type (see `api::openapi_json`).
    limits: Limits,
}

/// A server's caps on what one request may ask for.
#[derive(Object)]
struct Limits {
    /// Largest `limit` a query may ask for.
    query_max_rows: u64,
    /// Most rows one scan returns.
    scan_max_rows: u64,
    /// Largest table upload, in bytes.
    upload_max_bytes: u64,
}

#[derive(ApiResponse)]
enum HealthResponse {
    /// Healthy.
    #[oai(status = 200)]
    Ok(Json<Health>),
    /// The store is unreachable or at an unexpected schema version.
    #[oai(status = 503)]
    Unhealthy(Json<Health>),
}

#[OpenApi]
impl HealthApi {
    /// Liveness, server version and schema version. No authentication.
    #[oai(
        path = "/api/health",
        method = "get",
        tag = "Tag::Health",
        operation_id = "get_health"
    )]
    async fn health(&self) -> HealthResponse {
        let schema = self.probe.version(&self.state.store).await;
        let healthy = schema == Some(CURRENT_SCHEMA_VERSION);
        let body = Json(Health {
            status: if healthy { "ok" } else { "unhealthy" }.into(),
            version: VERSION.into(),
            schema_version: schema,
            expected_schema_version: CURRENT_SCHEMA_VERSION,
            limits: Limits {
                query_max_rows: self.state.config.query.max_rows as u64,
                scan_max_rows: self.state.config.query.scan_max_rows as u64,
                upload_max_bytes: self.state.config.upload_max_bytes,
            },
        });
        if healthy {
            HealthResponse::Ok(body)
        } else {
            HealthResponse::Unhealthy(body)
        }
    }
}
