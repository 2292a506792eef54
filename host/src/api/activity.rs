//! The audit timeline for administrators (`GET /api/admin/activity`): the audit log newest
//! first under filters, a page at a time by keyset ([`svc_store::audit::AuditFilter`] does
//! the reading; this file parses, validates, audits and shapes).

use std::sync::Arc;
use std::time::Instant;

use chrono::{Duration, Utc};
use poem_openapi::param::Query;
use poem_openapi::payload::Json;
use poem_openapi::OpenApi;
use serde_json::{json, Value};
use svc_core::clock::{format_ts, TimeRange};
use svc_core::Error;
use svc_store::audit::{AuditCursor, AuditFilter, Event, ResultFilter, SYSTEM_SOURCE};

use super::admin_sessions::json as json_body;
use super::{AdminAuth, ApiResult, Tag};
use crate::state::AppState;

/// The longest window by `since_minutes` (30 days).
pub const MAX_SINCE_MINUTES: u32 = 43_200;
/// The default window (24 hours).
pub const DEFAULT_SINCE_MINUTES: u32 = 1_440;
/// The longest `q`, in characters.
const MAX_Q_CHARS: usize = 16_384;
/// The most actions `action_in` may name.
const MAX_ACTIONS: usize = 100;
/// What `client_kind` may be; `source` may also be `system` (rows no client caused).
const CLIENT_KINDS: &[&str] = &["cli", "web", "api", "scheduler", "console", "mcp"];

pub struct ActivityApi {
    pub state: Arc<AppState>,
}

/// The timeline's query, as given.
struct Params {
    since_minutes: Option<u32>,
    since: Option<String>,
    until: Option<String>,
    user_id: Option<String>,
    action_prefix: Option<String>,
    action_in: Option<String>,
    resource: Option<String>,
    result: Option<String>,
    client_kind: Option<String>,
    source: Option<String>,
    correlation_id: Option<String>,
    q: Option<String>,
}

fn given(v: Option<String>) -> Option<String> {
    v.filter(|v| !v.is_empty())
}

impl Params {
    /// The filter and, for a window relative to now, its minutes; or a 422 naming the field
    /// at fault.
    fn filter(self) -> Result<(AuditFilter, Option<u32>), Error> {
        let mut relative = None;
        let (since, until) = match (self.since_minutes, &self.since, &self.until) {
            (Some(_), Some(_), _) | (Some(_), _, Some(_)) => {
                return Err(Error::invalid(
                    "give since_minutes or since/until, not both",
                ))
            }
            (None, None, None) | (Some(_), None, None) => {
                let minutes = self.since_minutes.unwrap_or(DEFAULT_SINCE_MINUTES);
                if !(1..=MAX_SINCE_MINUTES).contains(&minutes) {
                    return Err(Error::invalid(format!(
                        "since_minutes must be between 1 and {MAX_SINCE_MINUTES}"
                    )));
                }
                relative = Some(minutes);
                let since = format_ts(Utc::now() - Duration::minutes(i64::from(minutes)));
                (Some(since), None)
            }
            (None, since, until) => {
                let range = TimeRange::parse(since.as_deref(), until.as_deref())?;
                (range.since, range.until)
            }
        };
        let result = match given(self.result) {
            None => None,
            Some(r) => Some(ResultFilter::parse(&r).ok_or_else(|| {
                Error::invalid(format!(
                    "result must be success, error or error.<status> (e.g. error.403), not '{r}'"
                ))
            })?),
        };
        let kind = |field: &str, v: Option<String>, system: bool| -> Result<_, Error> {
            match given(v) {
                Some(k)
                    if !(CLIENT_KINDS.contains(&k.as_str()) || system && k == SYSTEM_SOURCE) =>
                {
                    let mut allowed = CLIENT_KINDS.join(", ");
                    if system {
                        allowed.push_str(", system");
                    }
                    Err(Error::invalid(format!(
                        "{field} must be one of {allowed}, not '{k}'"
                    )))
                }
                k => Ok(k),
            }
        };
        let action_in: Vec<String> = given(self.action_in)
            .map(|list| {
                list.split(',')
                    .map(str::trim)
                    .filter(|a| !a.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        if action_in.len() > MAX_ACTIONS {
            return Err(Error::invalid(format!(
                "action_in names at most {MAX_ACTIONS} actions"
            )));
        }
        let q = given(self.q);
        if q.as_ref().is_some_and(|q| q.chars().count() > MAX_Q_CHARS) {
            return Err(Error::invalid(format!(
                "q must be at most {MAX_Q_CHARS} characters"
            )));
        }
        let filter = AuditFilter {
            since,
            until,
            user_id: given(self.user_id),
            action_prefix: given(self.action_prefix),
            action_in,
            resource: given(self.resource),
            result,
            client_kind: kind("client_kind", self.client_kind, false)?,
            source: kind("source", self.source, true)?,
            correlation_id: given(self.correlation_id),
            q,
        };
        Ok((filter, relative))
    }
}

/// The filter as the response and the audit row show it.
fn describe(f: &AuditFilter) -> Value {
    json!({
        "since": f.since,
        "until": f.until,
        "user_id": f.user_id,
        "action_prefix": f.action_prefix,
        "action_in": f.action_in,
        "resource": f.resource,
        "result": f.result.map(|r| match r {
            ResultFilter::Success => "success".to_owned(),
            ResultFilter::Error => "error".to_owned(),
            ResultFilter::Status(s) => format!("error.{s}"),
        }),
        "client_kind": f.client_kind,
        "source": f.source,
        "correlation_id": f.correlation_id,
        "q": f.q,
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
        let limit = limit.0.unwrap_or(50);
        if !(1..=200).contains(&limit) {
            return Err(Error::invalid("limit must be between 1 and 200").into());
        }
        let cursor =
            match cursor.0.as_deref() {
                None | Some("") => None,
                Some(token) => Some(AuditCursor::parse(token).ok_or_else(|| {
                    Error::invalid("cursor: not a next_cursor this server returned")
                })?),
            };
        let page = self
            .state
            .store
            .audit_page(&filter, cursor.as_ref(), limit)
            .await
            .map_err(Error::from);
        // The filter as asked (a relative window, not the instant it resolved to), so
        // repeating a read within the minute is one audited read; paging is never a new one.
        let mut asked = describe(&filter);
        if let Some(minutes) = window {
            asked["since"] = Value::Null;
            asked["since_minutes"] = minutes.into();
        }
        let mut event = Event::new("activity.read")
            .resource("activity")
            .param("endpoint", "timeline");
        if let Value::Object(fields) = &asked {
            for (k, v) in fields {
                if !v.is_null() && v != &json!([]) {
                    event = event.param(k, v.clone());
                }
            }
        }
        let event = event.outcome(&page, |e, _| e).timed(started);
        self.state.audit.write_read(&auth.0.actor, event).await;
        let page = page?;
        let mut shown = describe(&filter);
        shown["since_minutes"] = window.map_or(Value::Null, Value::from);
        json_body(json!({
            "rows": page.rows,
            "next_cursor": page.next_cursor,
            "filter": shown,
        }))
    }
}
