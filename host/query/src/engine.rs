//! Runs one read-only statement with DataFusion over the registered tables it names.
//!
//! Each request gets a fresh context holding only the tables the statement references and the
//! caller may read, each under its registry id; nothing else exists in it (no files, no URLs,
//! no catalogs), and the engine's SQL options refuse DDL, DML and statements a second time.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use serde_json::json;
use svc_plugin_api::datafusion::common::TableReference;
use svc_plugin_api::datafusion::error::DataFusionError;
use svc_plugin_api::datafusion::execution::cache::cache_manager::{
    CacheManagerConfig, FileMetadataCache, DEFAULT_METADATA_CACHE_LIMIT,
};
use svc_plugin_api::datafusion::execution::cache::default_cache::DefaultCache;
use svc_plugin_api::datafusion::execution::context::SQLOptions;
use svc_plugin_api::datafusion::execution::memory_pool::FairSpillPool;
use svc_plugin_api::datafusion::execution::runtime_env::RuntimeEnvBuilder;
use svc_plugin_api::datafusion::execution::SessionStateBuilder;
use svc_plugin_api::datafusion::execution::SessionStateDefaults;
use svc_plugin_api::datafusion::logical_expr::LogicalPlan;
use svc_plugin_api::datafusion::optimizer::OptimizerRule;
use svc_plugin_api::datafusion::prelude::{DataFrame, SessionConfig, SessionContext};
use svc_plugin_api::ScanSpec;
use svc_trace::Instrument as _;

use super::bounded;
use super::quota::Permit;
use super::runtime;
use super::statement::parse_read_only;
use super::stream::{timeout_error, RowStream};
use super::string_key::StringKeyAggregation;
use svc_auth::access::{self, Access};
use svc_auth::Caller;
use svc_catalog::drivers::Drivers;
use svc_core::{Error, ErrorKind, Result};
use svc_store::registry::RegistryRow;
use svc_store::Store;

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
    /// Most rows a script writes (a larger result fails the run).
    pub script_max_rows: usize,
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
            script_max_rows: 100_000_000,
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

    /// The metrics label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Local => "local",
            Self::Remote => "remote",
            Self::Hybrid => "hybrid",
            Self::Internal => "internal",
        }
    }

    fn of(tables: &[Arc<RegistryRow>]) -> Self {
        let remote = tables.iter().any(|t| t.query_mode.is_remote());
        let here = tables.iter().any(|t| !t.query_mode.is_remote());
        if tables.iter().any(|t| t.query_mode.is_internal()) {
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

/// The query engine over the handles it uses: the drivers it reads through, the access check
/// it resolves names with, the store (metadata for the remote guard), and its limits.
#[derive(Debug, Clone)]
pub struct Engine {
    store: Store,
    drivers: Drivers,
    access: Access,
    limits: QueryLimits,
    file_metadata: Arc<FileMetadataCache>,
}

impl Engine {
    /// An engine with a fresh parquet metadata cache shared by all its queries.
    pub fn new(store: Store, drivers: Drivers, access: Access, limits: QueryLimits) -> Self {
        Self {
            store,
            drivers,
            access,
            limits,
            file_metadata: file_metadata_cache(),
        }
    }

    /// The drivers queries read through.
    pub fn drivers(&self) -> &Drivers {
        &self.drivers
    }

    /// The ids of the tables the drivers seed (the internal tables), for messages.
    fn internal_ids(&self) -> String {
        self.drivers
            .seeded_tables()
            .into_iter()
            .filter(|(_, t)| t.mode == svc_plugin_api::SeedMode::Internal)
            .map(|(_, t)| t.id)
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The store the remote guard reads metadata from.
    pub(crate) fn store(&self) -> &Store {
        &self.store
    }

    /// Resolves, checks and starts `sql`; the stream yields at most `limit` rows.
    ///
    /// `plan` is filled as soon as the tables are known, so a failure later is audited under the
    /// right route. The deadline covers planning and every later pull of the stream.
    pub async fn run(
        &self,
        caller: &Caller,
        sql: &str,
        limit: usize,
        plan: &mut Option<QueryPlan>,
        quota: Option<&Permit>,
    ) -> Result<RowStream> {
        self.run_window(caller, sql, 0, limit, plan, quota).await
    }

    /// [`Engine::run`] from row `offset` of the result on: the skip is part of the plan, so
    /// a later page of a large result reads no more than the rows up to its end.
    pub async fn run_window(
        &self,
        caller: &Caller,
        sql: &str,
        offset: usize,
        limit: usize,
        plan: &mut Option<QueryPlan>,
        quota: Option<&Permit>,
    ) -> Result<RowStream> {
        async {
            let started = std::time::Instant::now();
            let limits = self.limits;
            let deadline = Instant::now() + limits.timeout;
            // Parsed on the query runtime: its threads have the stack a deeply nested statement
            // needs, even to be refused and dropped.
            let text = sql.to_owned();
            let parsed = tokio::time::timeout_at(
                deadline,
                runtime::run(async move { parse_read_only(&text) }),
            )
            .await
            .map_err(|_| timeout_error(limits.timeout))?
            .map_err(engine_error)?
            .map_err(|e| Error::bad_request(e.0))?;
            let tables = self.resolve(caller, &parsed.tables).await?;
            let route = Route::of(&tables);
            *plan = Some(QueryPlan {
                tables: tables.iter().map(|t| t.id.clone()).collect(),
                route,
            });
            if route == Route::Internal && tables.iter().any(|t| !t.query_mode.is_internal()) {
                return Err(Error::bad_request(format!(
                    "Internal tables ({}) cannot be combined with other tables in one query; \
                 query them separately",
                    self.internal_ids()
                )));
            }

            if let Some(permit) = quota {
                // What the local tables hold bounds what the query reads of them; remote reads are
                // bounded by the remote guard and counted once done.
                let most: u64 = tables
                    .iter()
                    .filter_map(|t| {
                        let driver = self.drivers.get(&t.source_type)?;
                        driver.size_on_disk(&t.table_ref())
                    })
                    .sum();
                permit.reserve(most)?;
            }

            if matches!(route, Route::Remote | Route::Hybrid) {
                // Guard on full reads: the bound for any plan; pushed filters and aggregates
                // read less.
                let reads: Vec<_> = tables.iter().map(|t| (&**t, ScanSpec::default())).collect();
                self.guard_remote(&reads).await?;
            }

            // Each driver read adds its own rules once (the internal driver's aggregate push-down).
            let mut source_types: Vec<&str> =
                tables.iter().map(|t| t.source_type.as_str()).collect();
            source_types.sort_unstable();
            source_types.dedup();
            let rules = source_types
                .into_iter()
                .filter_map(|t| self.drivers.get(t))
                .flat_map(|d| d.optimizer_rules())
                .collect();
            let ctx = context(limits, &self.file_metadata, rules)?;
            let who: svc_plugin_api::Caller = caller.into();
            for row in &tables {
                let driver = self.drivers.get(&row.source_type).ok_or_else(|| {
                    Error::bad_request(format!(
                        "Table '{}' has source type '{}', which this server has no driver for",
                        row.id, row.source_type
                    ))
                })?;
                let mut span = svc_trace::Span::child("driver.table_provider");
                if span.is_recording() {
                    span.set("source_type", row.source_type.clone());
                }
                let provider = driver
                    .table_provider(&row.table_ref(), &who)
                    .in_span(span)
                    .await?;
                ctx.register_table(TableReference::bare(row.id.as_str()), provider)
                    .map_err(engine_error)?;
            }
            let options = SQLOptions::new()
                .with_allow_ddl(false)
                .with_allow_dml(false)
                .with_allow_statements(false);
            let push_down = self.push_down_driver(route, &tables);
            let text = sql.to_owned();
            // Planning runs on the query runtime: constant folding evaluates functions, so a plan
            // can take as long as a query, and the deadline must be able to fire while it does.
            let start = async move {
                let df = ctx
                    .sql_with_options(&text, options)
                    .await
                    .map_err(engine_error)?;
                let pushed = match &push_down {
                    Some((driver, refs)) => driver.push_down(df.logical_plan(), refs).await?,
                    None => None,
                };
                let df = match pushed {
                    Some(result) => ctx.read_table(result).map_err(engine_error)?,
                    None => df,
                };
                // One row past the limit tells whether the result was cut. EXPLAIN must stay its
                // plan's root; the stream alone caps its few rows.
                let df = if matches!(
                    df.logical_plan(),
                    LogicalPlan::Explain(_) | LogicalPlan::Analyze(_)
                ) {
                    df
                } else {
                    df.limit(offset, Some(limit.saturating_add(1)))
                        .map_err(engine_error)?
                };
                let df = without_futile_topk_filters(df);
                let physical = df.create_physical_plan().await.map_err(engine_error)?;
                let stream = runtime::execute(physical.clone(), ctx.task_ctx());
                Ok::<_, Error>((physical, stream))
            };
            let (physical, stream) = tokio::time::timeout_at(deadline, runtime::run(start))
                .await
                .map_err(|_| timeout_error(limits.timeout))?
                .map_err(engine_error)??;
            Ok(RowStream::new(
                physical,
                stream,
                limit,
                deadline,
                limits.timeout,
                route,
                started,
            ))
        }
        .in_child("engine.plan")
        .await
    }

    /// The driver to hand a query to whole, with the tables it reads: when the query reads only
    /// remote tables of one driver (which may still decline).
    fn push_down_driver(
        &self,
        route: Route,
        tables: &[Arc<RegistryRow>],
    ) -> Option<(
        Arc<dyn svc_plugin_api::SourceDriver>,
        Vec<svc_plugin_api::TableRef>,
    )> {
        let first = tables.first()?;
        if route != Route::Remote || tables.iter().any(|t| t.source_type != first.source_type) {
            return None;
        }
        let driver = self.drivers.get(&first.source_type)?.clone();
        Some((driver, tables.iter().map(|t| t.table_ref()).collect()))
    }

    /// Registry rows for the referenced names: unknown → 400 naming it with the closest ids;
    /// not readable → 403 naming it.
    async fn resolve(&self, caller: &Caller, names: &[String]) -> Result<Vec<Arc<RegistryRow>>> {
        async {
            let mut rows = Vec::with_capacity(names.len());
            for name in names {
                match self.access.readable_table(caller, name).await {
                    Ok(row) => rows.push(row),
                    Err(e) if e.kind() == ErrorKind::NotFound => {
                        return Err(self.unknown_table(caller, name).await);
                    }
                    Err(e) => return Err(e),
                }
            }
            Ok(rows)
        }
        .in_child("access.check")
        .await
    }

    async fn unknown_table(&self, caller: &Caller, name: &str) -> Error {
        if let Some((_, t)) = self
            .drivers
            .seeded_tables()
            .into_iter()
            .filter(|(_, t)| t.mode == svc_plugin_api::SeedMode::Internal)
            .find(|(_, t)| t.source_table.eq_ignore_ascii_case(name))
        {
            return Error::bad_request(format!(
                "Unknown table '{name}'. Store tables are not queryable; use the internal table '{}' instead (internal tables: {})",
                t.id,
                self.internal_ids()
            ));
        }
        let visible: Vec<String> = match (
            self.access.registry().await,
            self.access.readable_ids(caller).await,
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
        Error::coded(
            ErrorKind::BadRequest,
            "unknown_table",
            format!("Unknown table '{name}'; {hint}"),
            json!({ "table": name, "suggestions": suggestions }),
        )
    }
}

/// DataFusion hands a TopK's running threshold to the scan below it as a dynamic filter.
/// When the sort reads a hash aggregate's output, the threshold exists only after the
/// aggregate has consumed the whole scan, so the filter can never prune; the parquet reader
/// still evaluates it for every row, which costs a 10M-row group-by about a sixth of its
/// time. Such queries plan without TopK filters; all others keep them, since over raw rows
/// they skip row groups and late-decode columns.
fn without_futile_topk_filters(df: DataFrame) -> DataFrame {
    if !sorts_aggregate_output(df.logical_plan()) {
        return df;
    }
    let (mut state, plan) = df.into_parts();
    state
        .config_mut()
        .options_mut()
        .optimizer
        .enable_topk_dynamic_filter_pushdown = false;
    DataFrame::new(state, plan)
}

/// Whether the result's outermost sort orders the output of an aggregate.
fn sorts_aggregate_output(plan: &LogicalPlan) -> bool {
    match plan {
        LogicalPlan::Sort(sort) => reads_aggregate(&sort.input),
        LogicalPlan::Limit(_) | LogicalPlan::Projection(_) | LogicalPlan::SubqueryAlias(_) => {
            plan.inputs().into_iter().any(sorts_aggregate_output)
        }
        _ => false,
    }
}

fn reads_aggregate(plan: &LogicalPlan) -> bool {
    match plan {
        LogicalPlan::Aggregate(_) | LogicalPlan::Distinct(_) => true,
        // HAVING is a filter over the aggregate.
        LogicalPlan::Projection(_) | LogicalPlan::SubqueryAlias(_) | LogicalPlan::Filter(_) => {
            plan.inputs().into_iter().any(reads_aggregate)
        }
        _ => false,
    }
}

/// Parquet footers and page indexes, shared by every query's context so a table's metadata
/// is read and decoded once rather than at planning and again by each scan partition of
/// every query. DataFusion checks each entry against the file's current size and
/// modification time, so a replaced file is read afresh; only files of tables a query was
/// allowed to register are ever read through it.
pub fn file_metadata_cache() -> Arc<FileMetadataCache> {
    Arc::new(DefaultCache::new(DEFAULT_METADATA_CACHE_LIMIT).with_name("svc-file-metadata"))
}

/// A fresh context: only the tables registered next, identifiers as written (registry ids
/// are case-sensitive), a memory pool of its own, the shared parquet metadata cache, and the
/// string-keyed partial aggregate, plus the optimizer `rules` of the drivers read.
fn context(
    limits: QueryLimits,
    file_metadata: &Arc<FileMetadataCache>,
    rules: Vec<Arc<dyn OptimizerRule + Send + Sync>>,
) -> Result<SessionContext> {
    let mut config = SessionConfig::new()
        .with_information_schema(false)
        .with_default_catalog_and_schema("svc", "public");
    config.options_mut().sql_parser.enable_ident_normalization = false;
    let runtime = RuntimeEnvBuilder::new()
        .with_memory_pool(Arc::new(FairSpillPool::new(limits.memory_bytes)))
        .with_cache_manager(
            CacheManagerConfig::default().with_file_metadata_cache(Some(file_metadata.clone())),
        )
        .build_arc()
        .map_err(Error::internal)?;
    // Size checks on functions that build large values: the pool does not see their buffers.
    let budget = limits.memory_bytes / 8;
    let mut planners = vec![bounded::planner(budget)];
    planners.extend(SessionStateDefaults::default_expr_planners());
    let state = rules
        .into_iter()
        .fold(
            SessionStateBuilder::new()
                .with_config(config)
                .with_runtime_env(runtime)
                .with_default_features()
                .with_expr_planners(planners)
                .with_physical_optimizer_rule(Arc::new(StringKeyAggregation)),
            |builder, rule| builder.with_optimizer_rule(rule),
        )
        .build();
    let ctx = SessionContext::new_with_state(state);
    bounded::install(&ctx, budget);
    Ok(ctx)
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

/// How a `ResourcesExhausted` error reads once flattened into another error's text.
const EXHAUSTED_IN_TEXT: &str = "ResourcesExhausted(\"";

/// Engine errors are the user's to fix (400), except exhausted resources (503) and bugs.
pub(super) fn engine_error(e: DataFusionError) -> Error {
    let exhausted = |msg: &str| {
        Error::coded(ErrorKind::Unavailable,
            "resources_exhausted",
            format!("The query needs more memory than one query may use: {msg}. Aggregate, filter or LIMIT it"),
            json!({}),
        )
    };
    match e.find_root() {
        DataFusionError::ResourcesExhausted(msg) => exhausted(msg),
        // A filter the parquet reader evaluates while decoding reaches us as text only (its
        // error passes through arrow's `ComputeError(String)`): the kind is in the text.
        root if root.to_string().contains(EXHAUSTED_IN_TEXT) => {
            let text = root.to_string();
            let msg = text
                .split_once(EXHAUSTED_IN_TEXT)
                .map_or(text.as_str(), |(_, rest)| rest.trim_end_matches([')', '"']));
            exhausted(msg)
        }
        DataFusionError::External(inner) => {
            match inner.downcast_ref::<svc_plugin_api::DriverError>() {
                Some(d) => Error::from(d.clone()),
                None => Error::bad_request(e.to_string()),
            }
        }
        DataFusionError::Internal(_) => Error::internal(e),
        // DataFusion wraps messages in context; the root message is what a user can act on.
        root => Error::bad_request(root.to_string()),
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

    /// The physical plan of `sql` capped the way `run` caps it.
    async fn capped_plan(ctx: &SessionContext, sql: &str) -> String {
        let df = ctx.sql(sql).await.unwrap().limit(0, Some(1001)).unwrap();
        let plan = without_futile_topk_filters(df)
            .create_physical_plan()
            .await
            .unwrap();
        let text = svc_plugin_api::datafusion::physical_plan::displayable(plan.as_ref())
            .indent(true)
            .to_string();
        text
    }

    #[tokio::test]
    async fn only_sorts_over_raw_rows_push_topk_filters_into_the_scan() {
        use svc_plugin_api::arrow::array::{Int64Array, StringArray};
        use svc_plugin_api::arrow::datatypes::{DataType, Field, Schema};
        use svc_plugin_api::datafusion::parquet::arrow::ArrowWriter;

        let dir = std::env::temp_dir().join(format!("svc-engine-topk-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.parquet");
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Utf8, false),
            Field::new("v", DataType::Int64, false),
        ]));
        let batch = svc_plugin_api::RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(StringArray::from(vec!["a", "b", "a"])),
                Arc::new(Int64Array::from(vec![1, 2, 3])),
            ],
        )
        .unwrap();
        let mut w =
            ArrowWriter::try_new(std::fs::File::create(&path).unwrap(), schema, None).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();

        let ctx = context(QueryLimits::default(), &file_metadata_cache(), Vec::new()).unwrap();
        ctx.register_parquet("t", path.to_str().unwrap(), Default::default())
            .await
            .unwrap();
        for sql in [
            "SELECT k, sum(v) FROM t GROUP BY k ORDER BY k",
            "SELECT k, sum(v) AS s FROM t GROUP BY k HAVING sum(v) > 1 ORDER BY s DESC LIMIT 5",
            "SELECT DISTINCT k FROM t ORDER BY k",
        ] {
            let plan = capped_plan(&ctx, sql).await;
            assert!(plan.contains("TopK"), "{sql}:\n{plan}");
            assert!(!plan.contains("DynamicFilter"), "{sql}:\n{plan}");
        }
        for sql in [
            "SELECT k, v FROM t ORDER BY v",
            "SELECT k FROM t ORDER BY v DESC LIMIT 2",
        ] {
            let plan = capped_plan(&ctx, sql).await;
            assert!(plan.contains("DynamicFilter"), "{sql}:\n{plan}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
