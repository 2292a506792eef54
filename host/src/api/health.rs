//! `GET /api/health` — unauthenticated liveness with versions.

use std::sync::Arc;

use poem_openapi::payload::Json;
use poem_openapi::{ApiResponse, Object, OpenApi};
use svc_store::CURRENT_SCHEMA_VERSION;

use super::{Tag, VERSION};
use crate::state::AppState;

pub struct HealthApi {
    pub state: Arc<AppState>,
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
        let schema = self.state.store.schema_version().await.ok();
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
