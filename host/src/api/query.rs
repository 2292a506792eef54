//! `POST /api/query` — SQL over registered tables.

use std::sync::Arc;
use std::time::Instant;

use poem_openapi::payload::Json;
use poem_openapi::{Object, OpenApi};
use svc_core::{Error, ErrorKind};
use svc_query::engine::{QueryPlan, Route};
use svc_query::format::Format;
use svc_store::audit::Event;

use super::result_body::{serve_rows, ResultBody};
use super::types::FormatParam;
use super::types::Str;
use super::{ApiError, ApiResult, BearerAuth, Tag};
use crate::state::AppState;

pub struct QueryApi {
    pub state: Arc<AppState>,
}

/// One read-only SQL statement.
#[derive(Object)]
struct QueryRequest {
    /// A SELECT (or EXPLAIN of one) over registered table ids.
    sql: Str,
    /// Most rows returned (1 to the server's cap, default 1000).
    #[oai(default = "default_limit", validator(minimum(value = "1")))]
    limit: u64,
    // Enum-typed: documented by its enum, not here (see `api::openapi_json`).
    format: Option<FormatParam>,
}

fn default_limit() -> u64 {
    1000
}

/// Longest SQL text accepted.
const MAX_SQL_BYTES: usize = 256 * 1024;

/// Refuses SQL text longer than [`MAX_SQL_BYTES`] (413), before anything parses it.
pub(crate) fn check_sql_size(sql: &str) -> svc_core::Result<()> {
    if sql.len() > MAX_SQL_BYTES {
        return Err(Error::new(
            ErrorKind::PayloadTooLarge,
            format!(
                "The SQL is {} bytes; the most accepted is {MAX_SQL_BYTES}",
                sql.len()
            ),
        ));
    }
    Ok(())
}

/// The audit event of a query: its route's action, the statement's start and tables.
pub(crate) fn query_event(sql: &str, plan: Option<&QueryPlan>, caller_is_admin: bool) -> Event {
    let mut event = Event::new(plan.map_or("query.local", |p| p.route.action()))
        .resource("query")
        .param("sql_preview", sql.chars().take(200).collect::<String>())
        .param("tables", plan.map(|p| p.tables.clone()).unwrap_or_default());
    if plan.is_some_and(|p| p.route == Route::Internal) {
        event = event.param("is_admin", caller_is_admin);
    }
    event
}

impl QueryApi {
    /// Request checks the engine does not make: SQL size and the row cap.
    fn checked(&self, sql: &str, limit: usize) -> ApiResult<()> {
        check_sql_size(sql)?;
        let max = self.state.config.query.max_rows;
        if limit > max {
            return Err(Error::invalid(format!(
                "limit {limit} is above this server's cap of {max} rows (SVC_QUERY_MAX_ROWS)"
            ))
            .into());
        }
        Ok(())
    }
}

#[OpenApi(tag = "Tag::Query")]
impl QueryApi {
    /// Runs one read-only SQL statement over the registered tables the caller may read and
    /// streams the result.
    #[oai(path = "/api/query", method = "post", operation_id = "query")]
    async fn query(&self, auth: BearerAuth, body: Json<QueryRequest>) -> ApiResult<ResultBody> {
        let started = Instant::now();
        let caller = &auth.0;
        let format = body.format.unwrap_or_default();
        let limit = usize::try_from(body.limit).unwrap_or(usize::MAX);
        let mut plan: Option<QueryPlan> = None;
        let rows = match self.checked(&body.sql, limit) {
            Err(e) => Err(e),
            // The slot is taken before planning, which can itself be heavy.
            Ok(()) => match self.state.quotas.acquire(&caller.user.id) {
                Err(e) => Err(e.into()),
                Ok(permit) => self
                    .state
                    .engine
                    .run(caller, &body.sql, limit, &mut plan, Some(&permit))
                    .await
                    .map(|rows| (rows, permit))
                    .map_err(ApiError::from),
            },
        };

        let event = query_event(&body.sql, plan.as_ref(), caller.is_admin)
            .param("format", Format::from(format).name());
        serve_rows(
            &self.state,
            &caller.actor,
            started,
            event,
            format.into(),
            None,
            rows,
        )
        .await
    }
}
