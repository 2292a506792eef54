//! Runs one read-only statement with DataFusion over the registered tables it names.
//!
//! Each request gets a fresh context holding only the tables the statement references and the
//! caller may read, each under its registry id; nothing else exists in it (no files, no URLs,
//! no catalogs), and the engine's SQL options refuse DDL, DML and statements a second time.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use poem::http::StatusCode;
use serde_json::json;
use svc_plugin_api::datafusion::common::TableReference;
use svc_plugin_api::datafusion::error::DataFusionError;
use svc_plugin_api::datafusion::execution::context::SQLOptions;
use svc_plugin_api::datafusion::execution::memory_pool::FairSpillPool;
use svc_plugin_api::datafusion::execution::runtime_env::RuntimeEnvBuilder;
use svc_plugin_api::datafusion::physical_plan::execute_stream;
use svc_plugin_api::datafusion::prelude::{SessionConfig, SessionContext};
use svc_plugin_api::ScanSpec;

use super::statement::parse_read_only;
use super::stream::{timeout_error, RowStream};
use crate::access;
use crate::api::discovery::driver_caller;
use crate::api::{ApiError, ApiResult};
use crate::auth::Caller;
use crate::state::AppState;
use crate::store::registry::{QueryMode, RegistryRow};

/// Per-query limits (`SVC_QUERY_*`).
#[derive(Debug, Clone, Copy)]
pub struct QueryLimits {
    /// Largest `limit` a request may ask for.
    pub max_rows: usize,
    /// Wall-clock budget of one query.
    pub timeout: Duration,
    /// Memory one query may use for sorts, joins and aggregations.
    pub memory_bytes: usize,
    /// Most rows one scan returns.
    pub scan_max_rows: usize,
    /// Scans and queries one user may run at once.
    pub max_concurrent_per_user: usize,
    /// Bytes one user may read per UTC day.
    pub max_daily_bytes_per_user: u64,
}

impl Default for QueryLimits {
    fn default() -> Self {
        Self {
            max_rows: 1_000_000,
            timeout: Duration::from_secs(120),
            memory_bytes: 2048 << 20,
            scan_max_rows: 10_000_000,
            max_concurrent_per_user: 5,
            max_daily_bytes_per_user: 50 << 30,
        }
    }
}

/// Which sources a query read, for its audit action (`query.<route>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// Only data on this server.
    Local,
    /// Only remote tables.
    Remote,
    /// Both.
    Hybrid,
    /// The `svc_*` tables.
    Internal,
}

impl Route {
    /// The audit action.
    pub fn action(self) -> &'static str {
        match self {
            Self::Local => "query.local",
            Self::Remote => "query.remote",
            Self::Hybrid => "query.hybrid",
            Self::Internal => "query.internal",
        }
    }

    fn of(tables: &[RegistryRow]) -> Self {
        let remote = tables.iter().any(|t| t.query_mode == QueryMode::Remote);
        let here = tables.iter().any(|t| t.query_mode != QueryMode::Remote);
        if tables.iter().any(|t| t.query_mode == QueryMode::Internal) {
            Self::Internal
        } else if remote && here {
            Self::Hybrid
        } else if remote {
            Self::Remote
        } else {
            Self::Local
        }
    }
}

/// What the audit row needs whether or not the query succeeded.
#[derive(Debug, Clone)]
pub struct QueryPlan {
    /// Registry ids read.
    pub tables: Vec<String>,
    /// The route, once the tables are known.
    pub route: Route,
}

/// Resolves, checks and starts `sql`; the stream yields at most `limit` rows.
///
/// `plan` is filled as soon as the tables are known, so a failure later is audited under the
/// right route. The deadline covers planning and every later pull of the stream.
pub async fn run(
    state: &AppState,
    caller: &Caller,
    sql: &str,
    limit: usize,
    plan: &mut Option<QueryPlan>,
) -> ApiResult<RowStream> {
    let limits = state.config.query;
    let deadline = Instant::now() + limits.timeout;
    let parsed = parse_read_only(sql).map_err(|e| ApiError::bad_request(e.0))?;
    let tables = resolve(state, caller, &parsed.tables).await?;
    let route = Route::of(&tables);
    *plan = Some(QueryPlan {
        tables: tables.iter().map(|t| t.id.clone()).collect(),
        route,
    });
    if route == Route::Internal && tables.iter().any(|t| t.query_mode != QueryMode::Internal) {
        return Err(ApiError::bad_request(format!(
            "Internal tables ({}) cannot be combined with other tables in one query; query them separately",
            internal_ids()
        )));
    }

    if matches!(route, Route::Remote | Route::Hybrid) {
        // Guard on full reads: the bound for any plan; pushed filters and aggregates read less.
        let reads: Vec<_> = tables.iter().map(|t| (t, ScanSpec::default())).collect();
        super::scan::guard_remote(state, &reads).await?;
    }

    let ctx = context(limits)?;
    let who = driver_caller(caller);
    for row in &tables {
        let driver = state.drivers.get(&row.source_type).ok_or_else(|| {
            ApiError::bad_request(format!(
                "Table '{}' has source type '{}', which this server has no driver for",
                row.id, row.source_type
            ))
        })?;
        let provider = driver.table_provider(&row.table_ref(), &who).await?;
        ctx.register_table(TableReference::bare(row.id.as_str()), provider)
            .map_err(engine_error)?;
    }
    let options = SQLOptions::new()
        .with_allow_ddl(false)
        .with_allow_dml(false)
        .with_allow_statements(false);
    let start = async {
        let df = ctx
            .sql_with_options(sql, options)
            .await
            .map_err(engine_error)?;
        let df = match push_down(state, route, &tables, &df).await? {
            Some(result) => ctx.read_table(result).map_err(engine_error)?,
            None => df,
        };
        // One row past the limit tells whether the result was cut.
        let df = df
            .limit(0, Some(limit.saturating_add(1)))
            .map_err(engine_error)?;
        let physical = df.create_physical_plan().await.map_err(engine_error)?;
        let stream = execute_stream(physical.clone(), ctx.task_ctx()).map_err(engine_error)?;
        Ok::<_, ApiError>((physical, stream))
    };
    let (physical, stream) = tokio::time::timeout_at(deadline, start)
        .await
        .map_err(|_| timeout_error(limits.timeout))??;
    Ok(RowStream::new(
        physical,
        stream,
        limit,
        deadline,
        limits.timeout,
    ))
}

/// Hands a query that reads only remote tables of one driver to that driver to run whole;
/// None when the route is another or the driver declines.
async fn push_down(
    state: &AppState,
    route: Route,
    tables: &[RegistryRow],
    df: &svc_plugin_api::datafusion::prelude::DataFrame,
) -> ApiResult<Option<Arc<dyn svc_plugin_api::TableProvider>>> {
    let Some(first) = tables.first() else {
        return Ok(None);
    };
    if route != Route::Remote || tables.iter().any(|t| t.source_type != first.source_type) {
        return Ok(None);
    }
    let Some(driver) = state.drivers.get(&first.source_type) else {
        return Ok(None);
    };
    let refs: Vec<_> = tables.iter().map(RegistryRow::table_ref).collect();
    Ok(driver.push_down(df.logical_plan(), &refs).await?)
}

/// A fresh context: only the tables registered next, identifiers as written (registry ids
/// are case-sensitive), and a memory pool of its own.
fn context(limits: QueryLimits) -> ApiResult<SessionContext> {
    let mut config = SessionConfig::new()
        .with_information_schema(false)
        .with_default_catalog_and_schema("svc", "public");
    config.options_mut().sql_parser.enable_ident_normalization = false;
    let runtime = RuntimeEnvBuilder::new()
        .with_memory_pool(Arc::new(FairSpillPool::new(limits.memory_bytes)))
        .build_arc()
        .map_err(ApiError::internal)?;
    Ok(SessionContext::new_with_config_rt(config, runtime))
}

/// Registry rows for the referenced names: unknown → 400 naming it with the closest ids;
/// not readable → 403 naming it.
async fn resolve(
    state: &AppState,
    caller: &Caller,
    names: &[String],
) -> ApiResult<Vec<RegistryRow>> {
    let mut rows = Vec::with_capacity(names.len());
    for name in names {
        match access::readable_table(state, caller, name).await {
            Ok(row) => rows.push(row),
            Err(e) if e.status() == StatusCode::NOT_FOUND => {
                return Err(unknown_table(state, caller, name).await);
            }
            Err(e) => return Err(e),
        }
    }
    Ok(rows)
}

async fn unknown_table(state: &AppState, caller: &Caller, name: &str) -> ApiError {
    if let Some(t) = svc_driver_internal::ROSTER
        .iter()
        .find(|t| t.backing_table.eq_ignore_ascii_case(name))
    {
        return ApiError::bad_request(format!(
            "Unknown table '{name}'. Store tables are not queryable; use the internal table '{}' instead (internal tables: {})",
            t.id,
            internal_ids()
        ));
    }
    let visible: Vec<String> = match (
        access::registry(state).await,
        access::readable_ids(state, caller).await,
    ) {
        (Ok(all), Ok(readable)) => all
            .rows()
            .iter()
            .filter(|r| access::is_visible(r, readable.as_deref()))
            .map(|r| r.id.clone())
            .collect(),
        _ => Vec::new(),
    };
    let suggestions = closest(name, &visible);
    let hint = if suggestions.is_empty() {
        "see `svc catalog` for the tables you can query".to_owned()
    } else {
        format!("did you mean {}?", suggestions.join(", "))
    };
    ApiError::kind(
        StatusCode::BAD_REQUEST,
        "unknown_table",
        format!("Unknown table '{name}'; {hint}"),
        json!({ "table": name, "suggestions": suggestions }),
    )
}

/// Up to three ids nearest to `name` by edit distance (case-insensitive), best first.
fn closest(name: &str, ids: &[String]) -> Vec<String> {
    let target = name.to_ascii_lowercase();
    let mut scored: Vec<(usize, &String)> = ids
        .iter()
        .map(|id| (edit_distance(&target, &id.to_ascii_lowercase()), id))
        .filter(|(d, _)| *d <= (target.len() / 3).max(2))
        .collect();
    scored.sort();
    scored
        .into_iter()
        .take(3)
        .map(|(_, id)| id.clone())
        .collect()
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != *cb))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

fn internal_ids() -> String {
    svc_driver_internal::ROSTER
        .iter()
        .map(|t| t.id)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Engine errors are the user's to fix (400), except exhausted resources (503) and bugs.
pub(super) fn engine_error(e: DataFusionError) -> ApiError {
    match e.find_root() {
        DataFusionError::ResourcesExhausted(msg) => ApiError::kind(
            StatusCode::SERVICE_UNAVAILABLE,
            "resources_exhausted",
            format!("The query needs more memory than one query may use: {msg}. Aggregate, filter or LIMIT it"),
            json!({}),
        ),
        DataFusionError::External(inner) => match inner.downcast_ref::<svc_plugin_api::DriverError>() {
            Some(d) => ApiError::from(d.clone()),
            None => ApiError::bad_request(e.to_string()),
        },
        DataFusionError::Internal(_) => ApiError::internal(e),
        // DataFusion wraps messages in context; the root message is what a user can act on.
        root => ApiError::bad_request(root.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions_are_the_nearest_visible_ids() {
        let ids: Vec<String> = ["orders", "order_items", "customers", "svc_audit"]
            .into_iter()
            .map(String::from)
            .collect();
        assert_eq!(closest("ordres", &ids), ["orders"]);
        assert_eq!(closest("Customer", &ids), ["customers"]);
        assert!(closest("zzzzzzzz", &ids).is_empty());
    }
}
