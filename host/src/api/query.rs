//! `POST /api/query` — SQL over registered tables.

use std::sync::Arc;
use std::time::Instant;

use poem_openapi::payload::Json;
use poem_openapi::{Enum, Object, OpenApi};
use serde_json::Value;

use super::types::Str;
use super::{ApiResult, BearerAuth, Tag};
use crate::audit::Event;
use crate::query::engine::{self, QueryPlan};
use crate::state::AppState;

pub struct QueryApi {
    pub state: Arc<AppState>,
}

/// Result formats.
#[derive(Enum, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[oai(rename_all = "lowercase")]
enum Format {
    /// `{"columns", "column_types", "rows", "row_count", "truncated"}`.
    #[default]
    Json,
}

/// One read-only SQL statement.
#[derive(Object)]
struct QueryRequest {
    /// A SELECT (or EXPLAIN of one) over registered table ids.
    sql: Str,
    /// Most rows returned (1 to the server's cap, default 1000).
    #[oai(default = "default_limit", validator(minimum(value = "1")))]
    limit: u64,
    /// Result format.
    #[oai(default)]
    format: Format,
}

fn default_limit() -> u64 {
    1000
}

/// A query result.
#[derive(Object)]
struct QueryResponse {
    /// Column names in order.
    columns: Vec<String>,
    /// Arrow type of each column.
    column_types: Vec<String>,
    /// Rows as arrays in column order; dates and timestamps as ISO-8601 text, decimals as
    /// text, NaN and infinities as null.
    rows: Vec<Value>,
    /// Rows returned.
    row_count: usize,
    /// More rows existed than `limit`.
    truncated: bool,
}

#[OpenApi(tag = "Tag::Query")]
impl QueryApi {
    /// Runs one read-only SQL statement over the registered tables the caller may read.
    #[oai(path = "/api/query", method = "post")]
    async fn query(
        &self,
        auth: BearerAuth,
        body: Json<QueryRequest>,
    ) -> ApiResult<Json<QueryResponse>> {
        let started = Instant::now();
        let caller = &auth.0;
        let Format::Json = body.format;
        let limit = usize::try_from(body.limit).unwrap_or(usize::MAX);
        let mut plan: Option<QueryPlan> = None;
        let result = engine::run(&self.state, caller, &body.sql, limit, &mut plan).await;

        let action = plan.as_ref().map_or("query.local", |p| p.route.action());
        let mut event = Event::new(action)
            .resource("query")
            .param(
                "sql_preview",
                body.sql.chars().take(200).collect::<String>(),
            )
            .param(
                "tables",
                plan.as_ref().map(|p| p.tables.clone()).unwrap_or_default(),
            );
        if plan
            .as_ref()
            .is_some_and(|p| p.route == engine::Route::Internal)
        {
            event = event.param("is_admin", caller.is_admin);
        }
        let event = match &result {
            Ok(out) => event.param(
                "rows_returned",
                out.batches.iter().map(|b| b.num_rows()).sum::<usize>(),
            ),
            Err(e) => event.failed(e.status().as_u16(), &e.to_string()),
        };
        self.state
            .audit
            .write(&caller.actor, event.timed(started))
            .await;

        let out = result?;
        let rows = crate::encode::rows_as_arrays(&out.batches);
        Ok(Json(QueryResponse {
            columns: out
                .schema
                .fields()
                .iter()
                .map(|f| f.name().clone())
                .collect(),
            column_types: out
                .schema
                .fields()
                .iter()
                .map(|f| svc_plugin_api::type_name(f.data_type()))
                .collect(),
            row_count: rows.len(),
            rows,
            truncated: out.truncated,
        }))
    }
}
