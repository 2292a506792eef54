//! The persistent metadata cache of remote tables: refresh one row, refresh all, status.

use std::sync::Arc;
use std::time::Instant;

use futures::stream::BoxStream;
use poem_openapi::param::{Header, Query};
use poem_openapi::payload::{EventStream, Json};
use poem_openapi::{ApiResponse, Object, OpenApi};
use serde_json::{json, Value};
use svc_auth::access;
use svc_catalog::warmup::Rewarm;
use svc_core::{Error, ErrorKind};
use svc_store::audit::Event;
use svc_store::metadata::MetadataRow;

use super::discovery::freshness;
use super::warmup;
use super::{AdminAuth, ApiResult, BearerAuth, Tag};
use crate::state::AppState;

pub struct MetadataApi {
    pub state: Arc<AppState>,
}

/// One remote table's cached metadata.
#[derive(Object)]
struct MetadataStatus {
    /// Registry id.
    table_id: String,
    /// `never_fetched`, `fresh`, `stale` or `error`.
    metadata_freshness: String,
    /// `BASE TABLE`, `VIEW`, `MATERIALIZED VIEW`, … when known.
    entity_type: Option<String>,
    /// Row count (null for views).
    rows: Option<i64>,
    /// Logical bytes (null for views).
    size_bytes: Option<i64>,
    /// Last successful refresh.
    refreshed_at: Option<String>,
    /// Last failed refresh.
    error_at: Option<String>,
    /// What the last failed refresh said.
    error: Option<String>,
}

impl MetadataStatus {
    fn new(table_id: String, m: Option<&MetadataRow>) -> Self {
        Self {
            metadata_freshness: freshness(m).into(),
            entity_type: m.and_then(|m| m.metadata.entity_type.clone()),
            rows: m.and_then(|m| m.metadata.rows),
            size_bytes: m.and_then(|m| m.metadata.size_bytes),
            refreshed_at: m.and_then(|m| m.refreshed_at.clone()),
            error_at: m.and_then(|m| m.error_at.clone()),
            error: m.and_then(|m| m.error.clone()),
            table_id,
        }
    }
}

/// Cached metadata of the remote tables the caller can see.
#[derive(Object)]
struct StatusList {
    /// One entry per remote table.
    tables: Vec<MetadataStatus>,
}

/// A full refresh was started.
#[derive(Object)]
struct RefreshStarted {
    /// Remote tables being refreshed.
    tables: usize,
}

#[derive(ApiResponse)]
enum RunResponse {
    /// Started in the background.
    #[oai(status = 202)]
    Started(Json<RefreshStarted>),
}

impl MetadataApi {
    /// Starts a full refresh: 202 with the row count, 409 while one runs. Audited as `action`.
    async fn start_refresh(&self, auth: &BearerAuth, action: &str) -> ApiResult<RunResponse> {
        let started = Instant::now();
        let result = async {
            auth.admin()?;
            match self.state.warmer.refresh_all().await? {
                Some(n) => Ok(n),
                None => Err(Error::conflict("A metadata refresh is already running").into()),
            }
        }
        .await;
        self.state
            .audit
            .write_outcome(
                &auth.0.actor,
                Event::new(action),
                started,
                &result,
                |e, n| e.param("tables", *n),
            )
            .await;
        result.map(|tables| RunResponse::Started(Json(RefreshStarted { tables })))
    }
}

#[OpenApi(tag = "Tag::Metadata")]
impl MetadataApi {
    /// Refreshes one remote table's metadata now (admin).
    #[oai(
        path = "/api/v2/metadata-cache/refresh",
        method = "post",
        operation_id = "refresh_metadata"
    )]
    async fn refresh(
        &self,
        auth: BearerAuth,
        table: Query<String>,
    ) -> ApiResult<Json<MetadataStatus>> {
        let started = Instant::now();
        let result = async {
            auth.admin()?;
            let row = self.state.access.readable_table(&auth.0, &table).await?;
            if !row.query_mode.is_remote() {
                return Err(Error::bad_request(format!(
                    "Table '{}' is {}, not a remote table; only remote tables keep metadata",
                    row.id,
                    row.query_mode.as_str()
                ))
                .into());
            }
            if let Rewarm::Failed(message) = self.state.warmer.rewarm(&row.id).await {
                return Err(Error::coded(
                    ErrorKind::Upstream,
                    "metadata_refresh_failed",
                    format!("Refreshing '{}' failed: {message}", row.id),
                    json!({"table_id": row.id}),
                )
                .into());
            }
            let all = self.state.store.all_metadata().await?;
            Ok(MetadataStatus::new(row.id.clone(), all.get(&row.id)))
        }
        .await;
        let event = Event::new("metadata_cache.refresh").resource(format!("table:{}", *table));
        self.state
            .audit
            .write_outcome(&auth.0.actor, event, started, &result, |e, _| e)
            .await;
        result.map(Json)
    }

    /// Cached metadata of every remote table the caller can see.
    #[oai(
        path = "/api/v2/metadata-cache/status",
        method = "get",
        operation_id = "metadata_status"
    )]
    async fn status(&self, auth: BearerAuth) -> ApiResult<Json<StatusList>> {
        let registry = self.state.access.registry().await?;
        let readable = self.state.access.readable_ids(&auth.0).await?;
        let all = self.state.store.all_metadata().await?;
        let tables = registry
            .rows()
            .iter()
            .filter(|r| r.query_mode.is_remote())
            .filter(|r| access::is_visible(r, readable.as_deref()))
            .map(|r| MetadataStatus::new(r.id.clone(), all.get(&r.id)))
            .collect();
        Ok(Json(StatusList { tables }))
    }

    /// Refreshes every remote table's metadata in the background, `SVC_METADATA_REFRESH_CONCURRENCY` at a time (admin);
    /// 409 while a full refresh runs.
    #[oai(
        path = "/api/admin/run-warehouse-metadata-refresh",
        method = "post",
        operation_id = "refresh_all_metadata"
    )]
    async fn run_all(&self, auth: BearerAuth) -> ApiResult<RunResponse> {
        self.start_refresh(&auth, "metadata_cache.refresh_all")
            .await
    }

    /// Runs the cache warmup (the same full refresh the server starts with) (admin).
    #[oai(
        path = "/api/admin/cache-warmup/run",
        method = "post",
        operation_id = "run_cache_warmup"
    )]
    async fn warmup_run(&self, auth: BearerAuth) -> ApiResult<RunResponse> {
        self.start_refresh(&auth, "cache_warmup.run").await
    }

    /// Where the last (or current) warmup stands, row by row (admin).
    #[oai(
        path = "/api/admin/cache-warmup/status",
        method = "get",
        operation_id = "cache_warmup_status"
    )]
    async fn warmup_status(&self, _auth: AdminAuth) -> ApiResult<Json<Value>> {
        Ok(Json(json!(self.state.warmer.snapshot())))
    }

    /// Server-sent events of the warmup (admin): `snapshot` first, then `start`, `row` and
    /// `complete`, each with its line number as the event id; closes after `complete`, at
    /// once when none runs, or after 30 s without an event. Send the last id seen as
    /// `Last-Event-ID` to resume after it.
    #[oai(
        path = "/api/admin/cache-warmup/stream",
        method = "get",
        operation_id = "cache_warmup_stream"
    )]
    async fn warmup_stream(
        &self,
        _auth: AdminAuth,
        /// The id of the last event received (resume after it).
        #[oai(name = "Last-Event-ID")]
        last_event_id: Header<Option<String>>,
    ) -> ApiResult<EventStream<BoxStream<'static, Value>>> {
        let after = warmup::last_event_id(last_event_id.0.as_deref());
        let events = warmup::warmup_events(&self.state.warmer, after, false);
        Ok(EventStream::new(events).to_event(warmup::sse_event))
    }
}
