//! `POST /api/v2/scan` and `POST /api/v2/scan/estimate`: one table, validated parts.

use std::sync::Arc;
use std::time::Instant;

use poem_openapi::payload::Json;
use poem_openapi::{Object, OpenApi};
use svc_auth::Caller;
use svc_core::Error;
use svc_query::format::Format;
use svc_query::scan::{check_guard, Guarded, ScanAsk, ValidScan};
use svc_store::audit::Event;
use svc_store::registry::RegistryRow;

use super::result_body::{serve_rows, ResultBody};
use super::types::FormatParam;
use super::types::Str;
use super::{ApiResult, BearerAuth, Tag};
use crate::state::AppState;

pub struct ScanApi {
    pub state: Arc<AppState>,
}

/// A scan of one table.
#[derive(Object)]
struct ScanRequest {
    /// Registry id of the table.
    table_id: Str,
    /// Columns to return (default: all).
    select: Option<Vec<String>>,
    /// A predicate over the table's columns: comparisons, AND/OR/NOT, IN, BETWEEN,
    /// LIKE/ILIKE, IS [NOT] NULL, CASE, CAST, literals and an allow-list of scalar functions.
    #[oai(rename = "where")]
    predicate: Option<String>,
    /// `column` or `column ASC|DESC` entries.
    order_by: Option<Vec<String>>,
    /// Most rows (default and maximum: the server's cap, announced in `X-Svc-Row-Cap`).
    #[oai(validator(minimum(value = "1")))]
    limit: Option<u64>,
    // Enum-typed: documented by its enum, not here (see `api::openapi_json`).
    format: Option<FormatParam>,
}

impl ScanRequest {
    fn ask(&self) -> ScanAsk<'_> {
        ScanAsk {
            table_id: &self.table_id,
            select: self.select.as_deref(),
            predicate: self.predicate.as_deref(),
            order_by: self.order_by.as_deref(),
            limit: self.limit,
        }
    }

    fn event(&self, action: &str) -> Event {
        Event::new(action)
            .resource(format!("table:{}", &*self.table_id))
            .param("select", self.select.clone())
            .param("where_present", self.predicate.is_some())
            .param("limit", self.limit)
    }
}

/// What a scan would read.
#[derive(Object)]
pub(crate) struct EstimateResponse {
    /// Registry id.
    table_id: String,
    /// Bytes the scan would read; null when the source cannot tell.
    pub(crate) estimated_bytes: Option<u64>,
    /// Rows it would return (an upper bound unless `exact`); null when unknown.
    estimated_rows: Option<u64>,
    /// Whether the figures are exact rather than bounds.
    exact: bool,
    /// The source's size guard, when it has one.
    guard_bytes: Option<u64>,
    /// Whether the scan would be refused with `remote_scan_too_large`.
    would_exceed_guard: bool,
}

/// A table the caller may read, and the scan checked against its columns.
pub(crate) struct Prepared {
    pub(crate) row: Arc<RegistryRow>,
    pub(crate) scan: ValidScan,
    schema: svc_plugin_api::arrow::datatypes::SchemaRef,
}

/// Checks a scan: the table readable by the caller (404, then 403), its parts valid
/// against the table's columns, the limit within `max_rows`.
pub(crate) async fn prepare(
    state: &AppState,
    caller: &Caller,
    ask: ScanAsk<'_>,
    max_rows: usize,
) -> ApiResult<Prepared> {
    let row = state.access.readable_table(caller, ask.table_id).await?;
    let driver = state
        .drivers
        .get(&row.source_type)
        .cloned()
        .ok_or_else(|| {
            Error::bad_request(format!(
                "Table '{}' has source type '{}', which this server has no driver for",
                row.id, row.source_type
            ))
        })?;
    let provider = driver
        .table_provider(&row.table_ref(), &caller.into())
        .await?;
    let schema = provider.schema();
    let columns: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
    let scan = ValidScan::new(ask, &columns, max_rows)?;
    Ok(Prepared { row, scan, schema })
}

/// Guards a remote scan on its estimate.
pub(crate) async fn guard(state: &AppState, p: &Prepared) -> svc_core::Result<()> {
    state
        .engine
        .guard_remote(&[(&p.row, p.scan.spec(&p.schema)?)])
        .await
}

/// What a prepared scan would read, and whether a remote one would pass its guard.
pub(crate) async fn estimate(state: &AppState, p: &Prepared) -> ApiResult<EstimateResponse> {
    let estimate = state
        .engine
        .estimate(&p.row, &p.scan.spec(&p.schema)?)
        .await?;
    let would_exceed = match &estimate {
        Some(e) if p.row.query_mode.is_remote() => check_guard(&[Guarded {
            table_id: &p.row.id,
            is_view: state.engine.is_view(&p.row.id).await,
            estimate: e,
        }])
        .is_err(),
        _ => false,
    };
    Ok(EstimateResponse {
        table_id: p.row.id.clone(),
        estimated_bytes: estimate.as_ref().map(|e| e.bytes),
        estimated_rows: estimate.as_ref().and_then(|e| e.rows),
        exact: estimate.as_ref().is_some_and(|e| e.exact),
        guard_bytes: estimate.as_ref().and_then(|e| e.guard_bytes),
        would_exceed_guard: would_exceed,
    })
}

impl ScanApi {
    async fn prepare(&self, caller: &Caller, req: &ScanRequest) -> ApiResult<Prepared> {
        prepare(
            &self.state,
            caller,
            req.ask(),
            self.state.config.query.scan_max_rows,
        )
        .await
    }
}

#[OpenApi(tag = "Tag::Query")]
impl ScanApi {
    /// Streams the rows of one table selected by validated columns, `where`, `order_by`
    /// and limit (Arrow IPC stream by default).
    #[oai(path = "/api/v2/scan", method = "post", operation_id = "scan")]
    async fn scan(&self, auth: BearerAuth, body: Json<ScanRequest>) -> ApiResult<ResultBody> {
        // A scan streams Arrow unless asked otherwise.
        let format = body.format.unwrap_or(FormatParam::Arrow);
        let started = Instant::now();
        let caller = &auth.0;
        let mut cap = None;
        let rows = async {
            let p = self.prepare(caller, &body).await?;
            guard(&self.state, &p).await?;
            if p.scan.capped {
                cap = Some(p.scan.limit);
            }
            // The slot is taken before planning, which can itself be heavy.
            let permit = self.state.quotas.acquire(&caller.user.id)?;
            let mut plan = None;
            let rows = self
                .state
                .engine
                .run(
                    caller,
                    &p.scan.sql(),
                    p.scan.limit,
                    &mut plan,
                    Some(&permit),
                )
                .await?;
            Ok((rows, permit))
        }
        .await;
        let event = body
            .event("scan")
            .param("format", Format::from(format).name());
        serve_rows(
            &self.state,
            &caller.actor,
            started,
            event,
            format.into(),
            cap,
            rows,
        )
        .await
    }

    /// What a scan would read, without reading it: parquet statistics for local data, the
    /// source's dry run for remote tables.
    #[oai(
        path = "/api/v2/scan/estimate",
        method = "post",
        operation_id = "estimate_scan"
    )]
    async fn scan_estimate(
        &self,
        auth: BearerAuth,
        body: Json<ScanRequest>,
    ) -> ApiResult<Json<EstimateResponse>> {
        let started = Instant::now();
        let caller = &auth.0;
        let result = async {
            let p = self.prepare(caller, &body).await?;
            estimate(&self.state, &p).await
        }
        .await;
        let event = body.event("scan.estimate");
        self.state
            .audit
            .write_outcome(&caller.actor, event, started, &result, |e, r| {
                e.param("bytes_estimated", r.estimated_bytes)
            })
            .await;
        result.map(Json)
    }
}
