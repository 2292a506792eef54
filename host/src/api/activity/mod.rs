//! The audit activity views for administrators: the timeline (`GET /api/admin/activity`,
//! the audit log newest first under filters, a page at a time by keyset), the health card
//! (`/activity/health`) and the sync feed (`/activity/sync`). The store does the reading
//! ([`svc_store::audit::AuditFilter`]); this module parses, validates, audits and shapes.

use std::sync::Arc;
use std::time::Instant;

use poem_openapi::param::Query;
use poem_openapi::payload::Json;
use poem_openapi::OpenApi;
use serde_json::{json, Value};
use svc_core::Error;
use svc_store::audit::{AuditCursor, AuditRow, ResultFilter};

use super::admin_sessions::json as json_body;
use super::{AdminAuth, ApiResult, Tag};
use crate::state::AppState;

pub(crate) mod filter;
mod health;

pub(crate) use filter::Params;
use filter::{read_event, shown};
use health::HealthCache;

pub struct ActivityApi {
    pub state: Arc<AppState>,
    /// The health card, shared by every administrator for 30 s.
    pub health: HealthCache,
}

/// A `cursor` query value as a keyset position; a token this server did not issue is a 422.
pub(crate) fn parse_cursor(cursor: Option<&str>) -> Result<Option<AuditCursor>, Error> {
    match cursor {
        None | Some("") => Ok(None),
        Some(token) => AuditCursor::parse(token)
            .map(Some)
            .ok_or_else(|| Error::invalid("cursor: not a next_cursor this server returned")),
    }
}

/// `limit` within `1..=max`, or a 422 naming it.
pub(crate) fn page_limit(limit: Option<u32>, default: u32, max: u32) -> Result<u32, Error> {
    let limit = limit.unwrap_or(default);
    if (1..=max).contains(&limit) {
        Ok(limit)
    } else {
        Err(Error::invalid(format!("limit must be between 1 and {max}")))
    }
}

/// A `sync.table` audit row as the sync feed shows it.
fn sync_row(row: &AuditRow) -> Value {
    let r = &row.record;
    let param = |k: &str| r.params.as_ref().and_then(|p| p.get(k)).cloned();
    json!({
        "id": r.id,
        "table_id": r.resource,
        "synced_at": r.timestamp,
        "status": if r.result == "success" { "ok" } else { "error" },
        "result": r.result,
        "rows": param("rows"),
        "bytes": param("bytes"),
        "duration_ms": r.duration_ms,
        "error": param("error"),
        "source": row.source,
        "user_email": row.user_email,
        "correlation_id": r.correlation_id,
    })
}

#[OpenApi(tag = "Tag::Activity")]
impl ActivityApi {
    /// The audit timeline, newest first, a page at a time: every row with its parameters as
    /// JSON objects, its `source` (the client kind, or `system`) and the acting user's
    /// `user_email` and `user_name` (the user id when the user is gone). Pass `next_cursor`
    /// back as `cursor` for the next page (null on the last); rows written meanwhile never
    /// shift a page. The window is `since_minutes` (default 1440, at most 43200) or
    /// `since`/`until`. Audited as `activity.read` once a minute per admin and filter,
    /// however many pages.
    #[oai(
        path = "/api/admin/activity",
        method = "get",
        operation_id = "get_activity"
    )]
    #[allow(clippy::too_many_arguments)]
    async fn timeline(
        &self,
        auth: AdminAuth,
        /// Rows of the last this many minutes, 1..43200 (default 1440).
        since_minutes: Query<Option<u32>>,
        /// Instead of `since_minutes`: rows at or after this date or date-time.
        since: Query<Option<String>>,
        /// Rows before this date or date-time.
        until: Query<Option<String>>,
        /// Rows of this user.
        user_id: Query<Option<String>>,
        /// Actions starting with this text (literal: `%` and `_` are not wildcards).
        action_prefix: Query<Option<String>>,
        /// Actions among these, comma-separated (at most 100).
        action_in: Query<Option<String>>,
        /// Exactly this resource.
        resource: Query<Option<String>>,
        /// `success`, `error` (any failure) or `error.<status>`.
        result: Query<Option<String>>,
        /// `cli`, `web`, `api`, `scheduler`, `console` or `mcp`.
        client_kind: Query<Option<String>>,
        /// A client kind, or `system` for rows no client caused.
        source: Query<Option<String>>,
        /// Rows of this request (its `X-Request-Id`).
        correlation_id: Query<Option<String>>,
        /// Text the row's parameters contain (literal, case-sensitive).
        q: Query<Option<String>>,
        /// Rows per page, 1..200 (default 50).
        limit: Query<Option<u32>>,
        /// The `next_cursor` of the previous page.
        cursor: Query<Option<String>>,
    ) -> ApiResult<Json<Value>> {
        let started = Instant::now();
        let params = Params {
            since_minutes: since_minutes.0,
            since: since.0,
            until: until.0,
            user_id: user_id.0,
            action_prefix: action_prefix.0,
            action_in: action_in.0,
            resource: resource.0,
            result: result.0,
            client_kind: client_kind.0,
            source: source.0,
            correlation_id: correlation_id.0,
            q: q.0,
        };
        let (filter, window) = params.filter()?;
        let limit = page_limit(limit.0, 50, 200)?;
        let cursor = parse_cursor(cursor.0.as_deref())?;
        let page = self
            .state
            .store
            .audit_page(&filter, cursor.as_ref(), limit)
            .await
            .map_err(Error::from);
        let event = read_event("timeline", &filter, window);
        self.state
            .audit
            .write_read_outcome(&auth.0.actor, event, started, &page)
            .await;
        let page = page?;
        json_body(json!({
            "rows": page.rows,
            "next_cursor": page.next_cursor,
            "filter": shown(&filter, window),
        }))
    }

    /// The health card: `status` (green, yellow or red: the worst of its fields), `fields`
    /// (`scheduler`: the last scheduled job run; `sync_24h`: table syncs that succeeded and
    /// failed in 24 h; `active_users_today`; `telemetry_pipeline`: the last finished run),
    /// each `{key, value, raw, color}`, and a `sentence`. Computed at most every 30 s and
    /// shared by every administrator; audited when computed, not when served from the cache.
    #[oai(
        path = "/api/admin/activity/health",
        method = "get",
        operation_id = "get_activity_health"
    )]
    async fn health(&self, auth: AdminAuth) -> ApiResult<Json<Value>> {
        if let Some(card) = self.health.fresh() {
            return Ok(Json(card));
        }
        let started = Instant::now();
        let card = health::gather(&self.state.store)
            .await
            .map_err(Error::from)
            .and_then(|signals| {
                serde_json::to_value(health::assess(&signals)).map_err(Error::internal)
            });
        let event = svc_store::audit::Event::new("activity.read")
            .resource("activity")
            .param("endpoint", "health");
        self.state
            .audit
            .write_read_outcome(&auth.0.actor, event, started, &card)
            .await;
        let card = card?;
        self.health.keep(card.clone());
        Ok(Json(card))
    }

    /// The sync feed: every table sync in the window, newest first (`rows`: `table_id`,
    /// `synced_at`, `status` ok or error, `rows`, `bytes`, `duration_ms`, `error`, `source`
    /// (scheduler, cli…), `correlation_id`), and each materialized table's current state
    /// (`tables`). Pages by `cursor` like the timeline. Audited like the timeline.
    #[oai(
        path = "/api/admin/activity/sync",
        method = "get",
        operation_id = "get_activity_sync"
    )]
    async fn sync_feed(
        &self,
        auth: AdminAuth,
        /// Syncs of the last this many minutes, 1..43200 (default 1440).
        since_minutes: Query<Option<u32>>,
        /// Syncs of this table only.
        table_id: Query<Option<String>>,
        /// `ok` or `error`.
        status: Query<Option<String>>,
        /// Rows per page, 1..500 (default 100).
        limit: Query<Option<u32>>,
        /// The `next_cursor` of the previous page.
        cursor: Query<Option<String>>,
    ) -> ApiResult<Json<Value>> {
        let started = Instant::now();
        let result = match status.0.as_deref() {
            None | Some("") => None,
            Some("ok") => Some(ResultFilter::Success),
            Some("error") => Some(ResultFilter::Error),
            Some(other) => {
                return Err(
                    Error::invalid(format!("status must be ok or error, not '{other}'")).into(),
                )
            }
        };
        let params = Params {
            since_minutes: since_minutes.0,
            ..Params::default()
        };
        let (mut filter, window) = params.filter()?;
        filter.action_in = vec!["sync.table".into()];
        filter.resource = table_id.0.filter(|t| !t.is_empty());
        filter.result = result;
        let limit = page_limit(limit.0, 100, 500)?;
        let cursor = parse_cursor(cursor.0.as_deref())?;
        let read = async {
            tokio::try_join!(
                self.state.store.audit_page(&filter, cursor.as_ref(), limit),
                self.state.store.sync_states(),
            )
            .map_err(Error::from)
        }
        .await;
        let event = read_event("sync", &filter, window);
        self.state
            .audit
            .write_read_outcome(&auth.0.actor, event, started, &read)
            .await;
        let (page, states) = read?;
        let mut tables: Vec<_> = states
            .into_values()
            .filter(|s| filter.resource.as_ref().is_none_or(|t| *t == s.table_id))
            .collect();
        tables.sort_by(|a, b| b.last_attempt_at.cmp(&a.last_attempt_at));
        json_body(json!({
            "rows": page.rows.iter().map(sync_row).collect::<Vec<_>>(),
            "next_cursor": page.next_cursor,
            "tables": tables,
            "window_minutes": window,
        }))
    }

    /// Every action name the audit log holds rows of, each with a one-line meaning
    /// (`{actions: [{action, meaning}]}`); the README lists the same.
    #[oai(
        path = "/api/admin/audit/actions",
        method = "get",
        operation_id = "list_audit_actions"
    )]
    async fn actions(&self, _auth: AdminAuth) -> ApiResult<Json<Value>> {
        json_body(json!({ "actions": svc_store::audit::ACTIONS }))
    }
}
