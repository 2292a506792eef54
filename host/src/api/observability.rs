//! The observability summaries and saved views (`/api/admin/observability/…`): facets and
//! KPIs over the audit log under the timeline's own filter (so the cards agree with the
//! table), and each administrator's named filter payloads, owner only. The store counts and
//! keeps ([`svc_store::audit`], [`svc_store::views`]); this file checks and shapes.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;
use poem_openapi::{Object, OpenApi};
use serde_json::{json, Value};
use svc_core::Error;
use svc_store::audit::AuditFilter;
use svc_store::views::SaveOutcome;
use svc_store::StoreError;

use super::activity::filter::{read_event, shown};
use super::activity::Params;
use super::admin_sessions::json as json_body;
use super::{AdminAuth, ApiResult, Tag};
use crate::state::AppState;

/// The longest view name, in characters.
pub const MAX_VIEW_NAME_CHARS: usize = 80;
/// The largest payload, serialized, in bytes (64 KiB).
pub const MAX_VIEW_BYTES: usize = 65_536;
/// The most views one administrator keeps.
pub const MAX_VIEWS_PER_USER: i64 = 100;

pub struct ObservabilityApi {
    pub state: Arc<AppState>,
}

/// A view to save.
#[derive(Object)]
struct ViewBody {
    /// Its name (1..80 characters, trimmed); saving under an existing name replaces that
    /// view's payload and keeps its id.
    name: String,
    /// The payload: any JSON object up to 64 KiB serialized (filters, window, sort…).
    query: Value,
}

impl ViewBody {
    /// The trimmed name and the payload, or a 422 naming the field at fault.
    fn checked(&self) -> Result<(&str, &Value), Error> {
        let name = self.name.trim();
        if name.is_empty() {
            return Err(Error::invalid("name is required"));
        }
        if name.chars().count() > MAX_VIEW_NAME_CHARS {
            return Err(Error::invalid(format!(
                "name: at most {MAX_VIEW_NAME_CHARS} characters"
            )));
        }
        if !self.query.is_object() {
            return Err(Error::invalid("query must be a JSON object"));
        }
        if self.query.to_string().len() > MAX_VIEW_BYTES {
            return Err(Error::invalid(format!(
                "query: at most {MAX_VIEW_BYTES} bytes (64 KiB) serialized"
            )));
        }
        Ok((name, &self.query))
    }
}

fn full() -> Error {
    Error::conflict(format!(
        "saved views: at most {MAX_VIEWS_PER_USER} per user; delete one before adding another"
    ))
}

fn missing() -> Error {
    Error::not_found("view not found")
}

impl ObservabilityApi {
    /// Reads one summary of the rows under the filter, audits the read like the timeline's
    /// and answers the summary with the filter it was computed under.
    async fn summary<T, F>(
        &self,
        auth: &AdminAuth,
        endpoint: &str,
        params: Params,
        read: impl FnOnce(AuditFilter) -> F,
    ) -> ApiResult<Json<Value>>
    where
        T: serde::Serialize,
        F: Future<Output = Result<T, StoreError>>,
    {
        let started = Instant::now();
        let (filter, window) = params.filter()?;
        let summary = read(filter.clone()).await.map_err(Error::from);
        let event = read_event(endpoint, &filter, window);
        self.state
            .audit
            .write_read_outcome(&auth.0.actor, event, started, &summary)
            .await;
        let mut body = serde_json::to_value(summary?).map_err(Error::internal)?;
        body["window_minutes"] = window.map_or(Value::Null, Value::from);
        body["filter"] = shown(&filter, window);
        json_body(body)
    }
}

#[OpenApi(tag = "Tag::Activity")]
impl ObservabilityApi {
    /// The facets of the audit rows under the timeline's filter (same parameters, same
    /// meaning): the top 50 `users` (`{id, label, count}`, label the e-mail or the id of a
    /// gone user), `actions`, `results` and `resources` (`{value, count}`), and every
    /// `source` (client kind, or `system`), most rows first. Audited like the timeline.
    #[oai(
        path = "/api/admin/observability/facets",
        method = "get",
        operation_id = "get_observability_facets"
    )]
    #[allow(clippy::too_many_arguments)]
    async fn facets(
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
    ) -> ApiResult<Json<Value>> {
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
        let store = self.state.store.clone();
        self.summary(&auth, "facets", params, |f| async move {
            store.audit_facets(&f).await
        })
        .await
    }

    /// The KPIs of the audit rows under the timeline's filter (same parameters, same
    /// meaning): `events_total`, `active_users`, `errors`, `error_rate` (four decimals),
    /// and over the rows that recorded a duration (`timed`) the exact `p50_duration_ms`,
    /// `p95_duration_ms` and `p99_duration_ms` (null when none did). Audited like the
    /// timeline.
    #[oai(
        path = "/api/admin/observability/kpis",
        method = "get",
        operation_id = "get_observability_kpis"
    )]
    #[allow(clippy::too_many_arguments)]
    async fn kpis(
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
    ) -> ApiResult<Json<Value>> {
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
        let store = self.state.store.clone();
        self.summary(&auth, "kpis", params, |f| async move {
            store.audit_kpis(&f).await
        })
        .await
    }

    /// The caller's saved views, newest first: `{views: [{id, name, query, created_at}]}`.
    #[oai(
        path = "/api/admin/observability/views",
        method = "get",
        operation_id = "list_observability_views"
    )]
    async fn list(&self, auth: AdminAuth) -> ApiResult<Json<Value>> {
        let views = self.state.store.saved_views(&auth.0.user.id).await?;
        json_body(json!({ "views": views }))
    }

    /// Saves a view under its name: a new name creates one (at most 100 per user: 409), an
    /// existing one replaces its payload and keeps its id.
    #[oai(
        path = "/api/admin/observability/views",
        method = "post",
        operation_id = "save_observability_view"
    )]
    async fn save(&self, auth: AdminAuth, body: Json<ViewBody>) -> ApiResult<Json<Value>> {
        let (name, query) = body.0.checked()?;
        match self
            .state
            .store
            .save_view(&auth.0.user.id, name, query, MAX_VIEWS_PER_USER)
            .await?
        {
            SaveOutcome::Saved(view) => json_body(view),
            SaveOutcome::Full => Err(full().into()),
            SaveOutcome::Missing => Err(missing().into()),
        }
    }

    /// Renames a view of the caller's and replaces its payload (404 for a view that is not
    /// theirs; 409 when another of their views has the name).
    #[oai(
        path = "/api/admin/observability/views/:id",
        method = "put",
        operation_id = "update_observability_view"
    )]
    async fn update(
        &self,
        auth: AdminAuth,
        id: Path<String>,
        body: Json<ViewBody>,
    ) -> ApiResult<Json<Value>> {
        let (name, query) = body.0.checked()?;
        let outcome = self
            .state
            .store
            .update_view(&auth.0.user.id, &id.0, name, query)
            .await
            .map_err(|e| {
                e.conflict_on_duplicate(format!("you already have a view named '{name}'"))
            })?;
        match outcome {
            SaveOutcome::Saved(view) => json_body(view),
            SaveOutcome::Full => Err(full().into()),
            SaveOutcome::Missing => Err(missing().into()),
        }
    }

    /// Deletes a view of the caller's: `{deleted: id}` (404 for a view that is not theirs).
    #[oai(
        path = "/api/admin/observability/views/:id",
        method = "delete",
        operation_id = "delete_observability_view"
    )]
    async fn delete(&self, auth: AdminAuth, id: Path<String>) -> ApiResult<Json<Value>> {
        if self.state.store.delete_view(&auth.0.user.id, &id.0).await? {
            json_body(json!({ "deleted": id.0 }))
        } else {
            Err(missing().into())
        }
    }
}
