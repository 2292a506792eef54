//! Telemetry for administrators: facets, KPIs, grouped or raw event pages and the summary
//! (reference §5), computed by DataFusion over every committed event segment.
//!
//! Filters become DataFusion expressions with their values as literals, never SQL text, so
//! no filter value can change a query's shape. Departures from the reference, on purpose:
//! every sort has a stable tiebreak; a NULL bucket counts in `total`; the DAU series ends
//! today (the reference left today out); `q` matches `%` and `_` literally.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use chrono::{Duration, NaiveDate, Utc};
use serde::Serialize;
use serde_json::Value;
use svc_core::clock::format_ts;
use svc_core::Error;
use svc_driver_internal::events::KEY_COLUMNS;
use svc_driver_internal::InternalDriver;
use svc_plugin_api::arrow::datatypes::DataType;
use svc_plugin_api::arrow::json::writer::{JsonArray, WriterBuilder};
use svc_plugin_api::datafusion::execution::TaskContext;
use svc_plugin_api::datafusion::functions::expr_fn::substring;
use svc_plugin_api::datafusion::functions_aggregate::expr_fn::{count, count_distinct, sum};
use svc_plugin_api::datafusion::logical_expr::{
    binary_expr, cast, GroupingSet, Like, Operator, SortExpr,
};
use svc_plugin_api::datafusion::physical_plan::ExecutionPlan;
use svc_plugin_api::datafusion::prelude::{col, lit, DataFrame, Expr, SessionContext};
use svc_plugin_api::RecordBatch;
use svc_store::{Backend, Store};

use crate::event_index::{micros, text, EventIndex, Snapshot, DEFAULT_MAX_EVENTS};
use crate::tally::{self, Counts, Grouper, RawBound, Rows, Selector};

/// The facets' columns and how many of each's most frequent values they list.
const FACETS: [(&str, usize); 4] = [
    ("username", 50),
    ("tool_name", 50),
    ("source", 20),
    ("event_type", 20),
];
const FACET_TOPS: [usize; 4] = [FACETS[0].1, FACETS[1].1, FACETS[2].1, FACETS[3].1];

/// The longest window (365 days), in minutes.
pub const MAX_WINDOW_MINUTES: u32 = 525_600;
/// The default window (7 days), in minutes.
pub const DEFAULT_WINDOW_MINUTES: u32 = 10_080;

/// The filters every read but facets takes (reference §5.1).
#[derive(Debug, Clone, Default)]
pub struct Filters {
    /// Events from the last this many minutes (1..=525600).
    pub since_minutes: u32,
    /// Exact owner e-mail (or directory name).
    pub username: Option<String>,
    /// Exact tool name.
    pub tool_name: Option<String>,
    /// Exact source (`curated`, `flea`, `builtin`).
    pub source: Option<String>,
    /// Exact event type.
    pub event_type: Option<String>,
    /// Only failed calls.
    pub only_errors: bool,
    /// Substring (case-sensitive) of the tool, skill, sub-agent or command name.
    pub q: Option<String>,
    /// Exact owner id.
    pub user_id: Option<String>,
    /// An absolute time range that replaces `since_minutes` (exports).
    pub range: Option<TimeRange>,
}

pub use svc_core::clock::TimeRange;

/// How `query` buckets events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupBy {
    /// The UTC day.
    Day,
    /// The owner.
    Username,
    /// The tool.
    ToolName,
    /// The source.
    Source,
    /// The plugin.
    RefId,
}

impl GroupBy {
    /// The documented names; anything else means raw rows (reference §5.4).
    pub fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "day" => Self::Day,
            "username" => Self::Username,
            "tool_name" => Self::ToolName,
            "source" => Self::Source,
            "ref_id" => Self::RefId,
            _ => return None,
        })
    }

    fn bucket(self) -> Expr {
        match self {
            Self::Day => day(),
            Self::Username => col("username"),
            Self::ToolName => col("tool_name"),
            Self::Source => col("source"),
            Self::RefId => col("ref_id"),
        }
    }
}

/// One count of a facet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Count {
    /// The value.
    pub value: String,
    /// Events with it.
    pub count: i64,
}

/// The facet lists of a window.
#[derive(Debug, Clone, Serialize)]
pub struct Facets {
    /// The window.
    pub window_minutes: u32,
    /// Top 50 owners.
    pub users: Vec<Count>,
    /// Top 50 tools.
    pub tools: Vec<Count>,
    /// Top 20 sources.
    pub sources: Vec<Count>,
    /// Top 20 event types.
    pub event_types: Vec<Count>,
}

/// Headline numbers under the filters.
#[derive(Debug, Clone, Serialize)]
pub struct Kpis {
    /// The window.
    pub window_minutes: u32,
    /// Events.
    pub events_total: i64,
    /// Distinct owners.
    pub distinct_users: i64,
    /// Distinct tools.
    pub distinct_tools: i64,
    /// Failed calls.
    pub errors: i64,
    /// `errors / events_total`, 4 decimals (0 when there are no events).
    pub error_rate: f64,
}

/// A page of `query`.
#[derive(Debug, Clone, Serialize)]
pub struct Page {
    /// The grouping, or None for raw rows.
    pub group_by: Option<GroupBy>,
    /// The rows: `{bucket, invocations, distinct_users, distinct_sessions, errors}` when
    /// grouped, else events.
    pub rows: Vec<Value>,
    /// Buckets (or events) in all.
    pub total: i64,
    /// Page size.
    pub limit: usize,
    /// Rows skipped.
    pub offset: usize,
    /// The next page's offset, if there is one.
    pub next_offset: Option<usize>,
}

impl Facets {
    fn of(window_minutes: u32, [users, tools, sources, event_types]: [Vec<Count>; 4]) -> Self {
        Self {
            window_minutes,
            users,
            tools,
            sources,
            event_types,
        }
    }
}

impl Kpis {
    /// From (events, distinct owners, distinct tools, failed events).
    fn of(
        window_minutes: u32,
        (events, distinct_users, distinct_tools, errors): (i64, i64, i64, i64),
    ) -> Self {
        Self {
            window_minutes,
            events_total: events,
            distinct_users,
            distinct_tools,
            errors,
            error_rate: rate(errors, events),
        }
    }
}

impl Page {
    fn of(
        group_by: Option<GroupBy>,
        rows: Vec<Value>,
        total: usize,
        limit: usize,
        offset: usize,
    ) -> Self {
        let next = offset + limit;
        Self {
            group_by,
            rows,
            total: total as i64,
            limit,
            offset,
            next_offset: (next < total).then_some(next),
        }
    }
}

/// The summary's window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Window {
    /// The last 7 days.
    #[serde(rename = "7d")]
    Week,
    /// The last 30 days.
    #[serde(rename = "30d")]
    Month,
    /// Everything.
    #[serde(rename = "all")]
    All,
}

impl Window {
    /// `7d`, `30d` or `all`.
    pub fn parse(name: &str) -> Result<Self, Error> {
        match name {
            "7d" => Ok(Self::Week),
            "30d" => Ok(Self::Month),
            "all" => Ok(Self::All),
            other => Err(Error::invalid(format!(
                "window must be 7d, 30d or all, not '{other}'"
            ))),
        }
    }

    fn since(self) -> String {
        match self {
            Self::Week => format_ts(Utc::now() - Duration::days(7)),
            Self::Month => format_ts(Utc::now() - Duration::days(30)),
            Self::All => String::new(),
        }
    }
}

/// The summary of a window (reference §5.5).
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// The window.
    pub window: Window,
    /// Top 10 (tool, source) by calls: `{tool_name, source, invocations}`.
    pub top_tools: Vec<Value>,
    /// Top 10 owners by events: `{username, tool_calls}`.
    pub top_users: Vec<Value>,
    /// The 10 busiest tools' error rates: `{tool_name, invocations, errors, rate}`.
    pub error_rate: Vec<Value>,
    /// Active users per day for the 30 days ending today (missing days are 0).
    pub dau_series: Vec<DayActive>,
    /// The series' mean, 1 decimal.
    pub dau_avg: f64,
    /// The slowest audited actions of the window.
    pub slow_actions: Vec<svc_store::audit::ActionTiming>,
}

/// Active users on one day.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DayActive {
    /// `YYYY-MM-DD`.
    pub day: String,
    /// Distinct owners with events that day.
    pub active_users: i64,
}

/// Reads the telemetry for administrators; holds the store (for the audit timings), the
/// internal driver (for the event files) and one DataFusion context, whose runtime caches
/// the event files' parquet footers between reads (packs and segments are immutable).
///
/// The context is made on the first read and shared by every clone: making one registers
/// every built-in function, planner and optimiser rule, which at start-up faulted in about
/// 10 MB of the binary's code (perf, page faults of an idle release server) for a page an
/// administrator may never open.
#[derive(Clone)]
pub struct Browser {
    store: Store,
    events: InternalDriver,
    context: Arc<OnceLock<SessionContext>>,
    /// None when configured off: every read scans.
    index: Option<EventIndex>,
}

impl std::fmt::Debug for Browser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Browser")
            .field("events", &self.events)
            .finish()
    }
}

fn df_error(e: impl std::fmt::Display) -> Error {
    Error::internal(format!("telemetry query: {e}"))
}

fn day() -> Expr {
    substring(col("occurred_at"), lit(1_i64), lit(10_i64))
}

/// `expr` contains `needle` literally (`%`, `_` and `\` escaped).
fn contains(expr: Expr, needle: &str) -> Expr {
    let mut pattern = String::with_capacity(needle.len() + 2);
    pattern.push('%');
    for c in needle.chars() {
        if matches!(c, '%' | '_' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('%');
    Expr::Like(Like::new(
        false,
        Box::new(expr),
        Box::new(lit(pattern)),
        Some('\\'),
        false,
    ))
}

fn errors() -> Expr {
    sum(cast(col("is_error"), DataType::Int64))
}

impl Filters {
    /// Refuses values out of range, naming the field.
    pub fn validate(&self) -> Result<(), Error> {
        if self.range.is_none() && !(1..=MAX_WINDOW_MINUTES).contains(&self.since_minutes) {
            return Err(Error::invalid(format!(
                "since_minutes must be between 1 and {MAX_WINDOW_MINUTES}"
            )));
        }
        Ok(())
    }

    /// The window's start, when it is `since_minutes` (not an absolute range).
    fn since(&self) -> Option<String> {
        self.range
            .is_none()
            .then(|| format_ts(Utc::now() - Duration::minutes(i64::from(self.since_minutes))))
    }

    /// Whether the event index holds every field these filters test.
    fn indexable(&self) -> bool {
        self.range.is_none() && self.user_id.is_none()
    }

    fn predicate(&self) -> Expr {
        self.predicate_since(self.since().as_deref())
    }

    /// The predicate, with the rolling window's start (`since()`) computed by the caller,
    /// so that two reads of one request agree on it.
    fn predicate_since(&self, since: Option<&str>) -> Expr {
        let mut p = lit(true);
        let range = self.range.clone().unwrap_or_default();
        for (op, bound) in [
            (Operator::GtEq, since.map(str::to_owned).or(range.since)),
            (Operator::Lt, range.until),
        ] {
            if let Some(bound) = bound {
                p = p.and(binary_expr(col("occurred_at"), op, lit(bound)));
            }
        }
        for (column, value) in [
            ("user_id", &self.user_id),
            ("username", &self.username),
            ("tool_name", &self.tool_name),
            ("source", &self.source),
            ("event_type", &self.event_type),
        ] {
            if let Some(v) = value {
                p = p.and(col(column).eq(lit(v.clone())));
            }
        }
        if self.only_errors {
            p = p.and(col("is_error").eq(lit(true)));
        }
        if let Some(q) = self.q.as_deref().filter(|q| !q.is_empty()) {
            let any = ["tool_name", "skill_name", "subagent_type", "command_name"]
                .into_iter()
                .map(|c| contains(col(c), q))
                .reduce(Expr::or)
                .expect("four columns");
            p = p.and(any);
        }
        p
    }
}

/// Batches as JSON objects, nulls kept.
fn to_json(batches: &[RecordBatch]) -> Result<Vec<Value>, Error> {
    let mut writer = WriterBuilder::new()
        .with_explicit_nulls(true)
        .build::<_, JsonArray>(Vec::new());
    let refs: Vec<&RecordBatch> = batches.iter().collect();
    writer.write_batches(&refs).map_err(df_error)?;
    writer.finish().map_err(df_error)?;
    let bytes = writer.into_inner();
    if bytes.is_empty() {
        return Ok(Vec::new());
    }
    match serde_json::from_slice(&bytes).map_err(df_error)? {
        Value::Array(rows) => Ok(rows),
        _ => Ok(Vec::new()),
    }
}

fn int(row: &Value, key: &str) -> i64 {
    row.get(key).and_then(Value::as_i64).unwrap_or(0)
}

/// Events and the two expressions that identify their owners and sessions.
struct Counted {
    events: DataFrame,
    users: Expr,
    sessions: Expr,
}

impl Browser {
    /// A browser over the store and the event segments in `data_dir`.
    pub fn new(store: Store, data_dir: &Path) -> Self {
        let postgres = store.backend() == Backend::Postgres;
        let events = InternalDriver::new(store.pool().clone(), postgres, data_dir);
        Self {
            store,
            events,
            context: Arc::default(),
            index: Some(EventIndex::new(DEFAULT_MAX_EVENTS)),
        }
    }

    /// The same browser with an index of at most `max_events` events (0: every read
    /// scans the event files).
    pub fn index_at_most(mut self, max_events: usize) -> Self {
        self.index = (max_events > 0).then(|| EventIndex::new(max_events));
        self
    }

    /// `count` over the event index's snapshot of the current listing, on a blocking
    /// thread; None when the index cannot answer (the caller scans instead).
    async fn tally<T: Send + 'static>(
        &self,
        count: impl FnOnce(&Snapshot) -> T + Send + 'static,
    ) -> Result<Option<T>, Error> {
        let Some(index) = self.index.clone() else {
            return Ok(None);
        };
        let listed = self
            .events
            .admin_event_files()
            .await
            .map_err(|e| Error::internal(e.message))?;
        tokio::task::spawn_blocking(move || Ok(index.snapshot(&listed)?.map(|s| count(&s))))
            .await
            .map_err(Error::internal)?
    }

    /// The context reads go through, made on first use.
    fn context(&self) -> &SessionContext {
        self.context.get_or_init(SessionContext::new)
    }

    /// Whether the context has been made (by this browser or a clone).
    #[cfg(test)]
    pub(crate) fn has_context(&self) -> bool {
        self.context.get().is_some()
    }

    async fn frame(&self) -> Result<DataFrame, Error> {
        let provider = self
            .events
            .event_provider(None)
            .await
            .map_err(|e| Error::internal(e.message))?;
        self.context().read_table(provider).map_err(df_error)
    }

    /// The events with what distinct owners and sessions are counted over: the hidden keys
    /// when every file has them (the internal driver's `events` module says why), else the
    /// strings — the same counts, slower.
    async fn counted(&self) -> Result<Counted, Error> {
        let keyed = self
            .events
            .keyed_event_provider()
            .await
            .map_err(|e| Error::internal(e.message))?;
        Ok(match keyed {
            Some(provider) => {
                let [username_hash, session_id_hash] = KEY_COLUMNS;
                Counted {
                    events: self.context().read_table(provider).map_err(df_error)?,
                    users: col(username_hash),
                    sessions: col(session_id_hash),
                }
            }
            None => Counted {
                events: self.frame().await?,
                users: col("username"),
                sessions: col("session_id"),
            },
        })
    }

    async fn rows(&self, df: DataFrame) -> Result<Vec<Value>, Error> {
        to_json(&df.collect().await.map_err(df_error)?)
    }

    /// Facets of a window (reference §5.2): the most frequent owners, tools, sources and
    /// event types, counted in one scan (a grouping set per facet).
    pub async fn facets(&self, since_minutes: u32) -> Result<Facets, Error> {
        let window = Filters {
            since_minutes,
            ..Filters::default()
        };
        window.validate()?;
        let since = window.since();
        if let Some(start) = since.as_deref().and_then(micros) {
            let counted = self
                .tally(move |snap| {
                    Counts::of(snap, &Selector::window(snap, start)).facets(snap, FACET_TOPS)
                })
                .await?;
            if let Some(lists) = counted {
                return Ok(Facets::of(since_minutes, lists));
            }
        }
        let sets = FACETS.iter().map(|(c, _)| vec![col(*c)]).collect();
        let df = self
            .frame()
            .await?
            .filter(window.predicate_since(since.as_deref()))
            .and_then(|d| {
                d.aggregate(
                    vec![Expr::GroupingSet(GroupingSet::GroupingSets(sets))],
                    vec![count(lit(1)).alias("count")],
                )
            })
            .map_err(df_error)?;
        // Each row belongs to one set: the facet whose column is set (a NULL value of a
        // facet has every column NULL and counts in none).
        let mut lists: Vec<Vec<Count>> = vec![Vec::new(); FACETS.len()];
        for row in self.rows(df).await? {
            for (i, (column, _)) in FACETS.iter().enumerate() {
                if let Some(value) = row.get(*column).and_then(Value::as_str) {
                    lists[i].push(Count {
                        value: value.to_owned(),
                        count: int(&row, "count"),
                    });
                    break;
                }
            }
        }
        for (list, (_, top)) in lists.iter_mut().zip(FACETS) {
            list.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.value.cmp(&b.value)));
            list.truncate(top);
        }
        let lists = <[Vec<Count>; 4]>::try_from(lists).expect("four facets");
        Ok(Facets::of(since_minutes, lists))
    }

    /// Headline numbers under the filters (reference §5.3).
    pub async fn kpis(&self, filters: &Filters) -> Result<Kpis, Error> {
        filters.validate()?;
        let since = filters.since();
        if let Some(start) = self.indexed_start(filters, since.as_deref()) {
            let f = filters.clone();
            let counted = self
                .tally(move |snap| Counts::of(snap, &Selector::new(snap, &f, start)).kpis(snap))
                .await?;
            if let Some(counts) = counted {
                return Ok(Kpis::of(filters.since_minutes, counts));
            }
        }
        let Counted { events, users, .. } = self.counted().await?;
        let df = events
            .filter(filters.predicate_since(since.as_deref()))
            .and_then(|d| {
                d.aggregate(
                    vec![],
                    vec![
                        count(lit(1)).alias("events_total"),
                        count_distinct(users).alias("distinct_users"),
                        count_distinct(col("tool_name")).alias("distinct_tools"),
                        errors().alias("errors"),
                    ],
                )
            })
            .map_err(df_error)?;
        let row = self.rows(df).await?.pop().unwrap_or_default();
        let counts =
            ["events_total", "distinct_users", "distinct_tools", "errors"].map(|c| int(&row, c));
        Ok(Kpis::of(filters.since_minutes, counts.into()))
    }

    /// A page of grouped buckets or raw events (reference §5.4). `sort` is
    /// `<column>:<asc|desc>`; an unknown column falls back to the default, never an error.
    pub async fn query(
        &self,
        filters: &Filters,
        group_by: Option<GroupBy>,
        sort: Option<&str>,
        limit: usize,
        offset: usize,
    ) -> Result<Page, Error> {
        let (column, ascending) = page_order(filters, sort, limit, offset)?;
        let since = filters.since();
        // From the index: a grouped page whole; for raw rows, their number and a bound on
        // the time that lets the scan read only the files holding the page.
        let mut raw = None;
        if let Some(start) = self.indexed_start(filters, since.as_deref()) {
            let f = filters.clone();
            let order = (column.to_owned(), ascending);
            let counted = self
                .tally(move |snap| {
                    let sel = Selector::new(snap, &f, start);
                    match group_by {
                        Some(g) => Ok(tally::grouped(
                            snap,
                            &sel,
                            g,
                            (&order.0, order.1),
                            offset,
                            limit,
                        )),
                        None => Err(tally::raw_bound(snap, &sel, offset + limit, !order.1)),
                    }
                })
                .await?;
            match counted {
                Some(Ok((rows, total))) => {
                    return Ok(Page::of(group_by, rows, total, limit, offset))
                }
                Some(Err(counted)) => raw = Some(counted),
                None => {}
            }
        }
        let order = (column, ascending);
        self.scan_page(
            filters,
            since.as_deref(),
            group_by,
            order,
            (limit, offset),
            raw,
        )
        .await
    }

    /// What the telemetry page shows: the KPIs under `filters`, the facets of their
    /// window and a page of [`query`](Self::query) — counted in one walk over the event
    /// index when it can answer (three reads walk the events three times), else by the
    /// three reads.
    pub async fn overview(
        &self,
        filters: &Filters,
        group_by: Option<GroupBy>,
        sort: Option<&str>,
        limit: usize,
        offset: usize,
    ) -> Result<(Kpis, Facets, Page), Error> {
        let (column, ascending) = page_order(filters, sort, limit, offset)?;
        let since = filters.since();
        if let Some(start) = self.indexed_start(filters, since.as_deref()) {
            let f = filters.clone();
            let order = (column.to_owned(), ascending);
            let counted = self
                .tally(move |snap| {
                    let sel = Selector::new(snap, &f, start);
                    let rows = || match group_by {
                        Some(g) => Rows::Grouped(Grouper::new(snap, g, start)),
                        None => Rows::Raw(RawBound::new(offset + limit, !order.1)),
                    };
                    let (all, picked, rows) = tally::page(snap, &sel, rows);
                    let rows = match rows {
                        Rows::Grouped(g) => Ok(g.finish(snap, (&order.0, order.1), offset, limit)),
                        Rows::Raw(r) => Err(r.finish(picked.events())),
                    };
                    (all.facets(snap, FACET_TOPS), picked.kpis(snap), rows)
                })
                .await?;
            if let Some((facets, kpis, rows)) = counted {
                let page = match rows {
                    Ok((rows, total)) => Page::of(group_by, rows, total, limit, offset),
                    Err(raw) => {
                        let order = (column, ascending);
                        self.scan_page(
                            filters,
                            since.as_deref(),
                            None,
                            order,
                            (limit, offset),
                            Some(raw),
                        )
                        .await?
                    }
                };
                let window = filters.since_minutes;
                return Ok((Kpis::of(window, kpis), Facets::of(window, facets), page));
            }
        }
        let (kpis, facets, page) = tokio::join!(
            self.kpis(filters),
            self.facets(filters.since_minutes),
            self.query(filters, group_by, sort, limit, offset),
        );
        Ok((kpis?, facets?, page?))
    }

    /// The window's start in microseconds, when the index can answer `filters`.
    fn indexed_start(&self, filters: &Filters, since: Option<&str>) -> Option<i64> {
        since
            .and_then(micros)
            .filter(|_| self.index.is_some() && filters.indexable())
    }

    /// A page of `query` by a scan of the event files. `raw`: the index's count of the
    /// raw rows and the bound on their time ([`tally::RawBound`]).
    async fn scan_page(
        &self,
        filters: &Filters,
        since: Option<&str>,
        group_by: Option<GroupBy>,
        (column, ascending): (&str, bool),
        (limit, offset): (usize, usize),
        raw: Option<(usize, Option<i64>)>,
    ) -> Result<Page, Error> {
        let mut predicate = filters.predicate_since(since);
        let raw_total = raw.map(|(total, _)| total);
        if let Some(bound) = raw.and_then(|(_, bound)| bound).map(text) {
            let op = if ascending {
                Operator::LtEq
            } else {
                Operator::GtEq
            };
            predicate = predicate.and(binary_expr(col("occurred_at"), op, lit(bound)));
        }
        let Counted {
            events,
            users,
            sessions,
        } = self.counted().await?;
        let base = events.filter(predicate).map_err(df_error)?;
        let (df, total, order) = match group_by {
            Some(g) => {
                let grouped = base
                    .aggregate(
                        vec![cast(g.bucket(), DataType::Utf8).alias("bucket")],
                        vec![
                            count(lit(1)).alias("invocations"),
                            count_distinct(users).alias("distinct_users"),
                            count_distinct(sessions).alias("distinct_sessions"),
                            errors().alias("errors"),
                        ],
                    )
                    .map_err(df_error)?;
                // Buckets are few (days, owners, tools): computed once, then counted, sorted
                // and paged in memory instead of aggregating every event twice.
                let buckets = grouped.collect().await.map_err(df_error)?;
                let total = buckets.iter().map(RecordBatch::num_rows).sum::<usize>();
                if total == 0 {
                    // No batches, so no schema to sort by.
                    return Ok(Page::of(group_by, Vec::new(), 0, limit, offset));
                }
                let grouped = self.context().read_batches(buckets).map_err(df_error)?;
                let by = match column {
                    "bucket" | "invocations" | "distinct_users" | "distinct_sessions"
                    | "errors" => column,
                    _ => "invocations",
                };
                let mut order: Vec<SortExpr> = vec![col(by).sort(ascending, false)];
                if by != "bucket" {
                    order.push(col("bucket").sort(true, false));
                }
                (grouped, total, order)
            }
            None => {
                let raw = base
                    .select_columns(&[
                        "id",
                        "occurred_at",
                        "username",
                        "source",
                        "ref_id",
                        "event_type",
                        "tool_name",
                        "skill_name",
                        "subagent_type",
                        "command_name",
                        "is_error",
                        "session_id",
                        "model",
                    ])
                    .map_err(df_error)?;
                let total = match raw_total {
                    Some(total) => total,
                    None => raw.clone().count().await.map_err(df_error)?,
                };
                // The only sortable column is the time; ties broken by id.
                let order = vec![
                    col("occurred_at").sort(ascending, false),
                    col("id").sort(true, false),
                ];
                (raw, total, order)
            }
        };
        let page = df
            .sort(order)
            .and_then(|d| d.limit(offset, Some(limit)))
            .map_err(df_error)?;
        let rows = self.rows(page).await?;
        Ok(Page::of(group_by, rows, total, limit, offset))
    }

    /// The plan of an export: every column of the events the filters select. Rows come
    /// segment by segment, not sorted: a global sort of ten million events would hold them
    /// all (or spill them) before the first byte, where this streams in constant memory.
    pub async fn export_plan(
        &self,
        filters: &Filters,
    ) -> Result<(Arc<dyn ExecutionPlan>, Arc<TaskContext>), Error> {
        filters.validate()?;
        let df = self
            .frame()
            .await?
            .filter(filters.predicate())
            .map_err(df_error)?;
        let context = Arc::new(df.task_ctx());
        let plan = df.create_physical_plan().await.map_err(df_error)?;
        Ok((plan, context))
    }

    /// The summary of a window (reference §5.5, quirks fixed).
    pub async fn summary(&self, window: Window) -> Result<Summary, Error> {
        let since = window.since();
        // One listing of the segments serves every part of the summary.
        let Counted {
            events: all, users, ..
        } = self.counted().await?;
        let events = all
            .clone()
            .filter(col("occurred_at").gt_eq(lit(since.clone())))
            .map_err(df_error)?;
        let calls = events
            .clone()
            .filter(col("tool_name").is_not_null())
            .map_err(df_error)?;
        let top_tools = calls
            .clone()
            .aggregate(
                vec![col("tool_name"), col("source")],
                vec![count(lit(1)).alias("invocations")],
            )
            .and_then(|d| {
                d.sort(vec![
                    col("invocations").sort(false, false),
                    col("tool_name").sort(true, false),
                    col("source").sort(true, false),
                ])
            })
            .and_then(|d| d.limit(0, Some(10)))
            .map_err(df_error)?;
        let by_tool = calls
            .aggregate(
                vec![col("tool_name")],
                vec![count(lit(1)).alias("invocations"), errors().alias("errors")],
            )
            .and_then(|d| {
                d.sort(vec![
                    col("invocations").sort(false, false),
                    col("tool_name").sort(true, false),
                ])
            })
            .and_then(|d| d.limit(0, Some(10)))
            .map_err(df_error)?;
        let top_users = events
            .aggregate(
                vec![col("username")],
                vec![count(lit(1)).alias("tool_calls")],
            )
            .and_then(|d| {
                d.sort(vec![
                    col("tool_calls").sort(false, false),
                    col("username").sort(true, false),
                ])
            })
            .and_then(|d| d.limit(0, Some(10)))
            .map_err(df_error)?;
        let error_rate = self
            .rows(by_tool)
            .await?
            .into_iter()
            .map(|mut r| {
                let rate = rate(int(&r, "errors"), int(&r, "invocations"));
                r["rate"] = rate.into();
                r
            })
            .collect();
        let (dau_series, dau_avg) = self.dau(all, users).await?;
        let slow_actions = self
            .store
            .slow_actions(&since, 5, 10)
            .await
            .map_err(Error::from)?;
        Ok(Summary {
            window,
            top_tools: self.rows(top_tools).await?,
            top_users: self.rows(top_users).await?,
            error_rate,
            dau_series,
            dau_avg,
            slow_actions,
        })
    }

    /// Active users (`users` told apart) per day among `events` for the 30 days ending
    /// today, and their mean.
    async fn dau(&self, events: DataFrame, users: Expr) -> Result<(Vec<DayActive>, f64), Error> {
        let today = Utc::now().date_naive();
        let first = today - Duration::days(29);
        let df = events
            .filter(col("occurred_at").gt_eq(lit(first.format("%Y-%m-%d").to_string())))
            .and_then(|d| {
                d.aggregate(
                    vec![day().alias("day")],
                    vec![count_distinct(users).alias("active_users")],
                )
            })
            .map_err(df_error)?;
        let active: HashMap<String, i64> = self
            .rows(df)
            .await?
            .into_iter()
            .map(|r| {
                let day = r["day"].as_str().unwrap_or_default().to_owned();
                (day, int(&r, "active_users"))
            })
            .collect();
        let series: Vec<DayActive> = first
            .iter_days()
            .take_while(|d| *d <= today)
            .map(|d: NaiveDate| {
                let day = d.format("%Y-%m-%d").to_string();
                DayActive {
                    active_users: active.get(&day).copied().unwrap_or(0),
                    day,
                }
            })
            .collect();
        let total: i64 = series.iter().map(|d| d.active_users).sum();
        let avg = (total as f64 / series.len() as f64 * 10.0).round() / 10.0;
        Ok((series, avg))
    }
}

/// Checks a page request; returns the sort column and whether it ascends (`sort` is
/// `<column>:<asc|desc>`, descending when no direction is given).
fn page_order<'a>(
    filters: &Filters,
    sort: Option<&'a str>,
    limit: usize,
    offset: usize,
) -> Result<(&'a str, bool), Error> {
    filters.validate()?;
    if !(1..=500).contains(&limit) {
        return Err(Error::invalid("limit must be between 1 and 500"));
    }
    if offset > 50_000 {
        return Err(Error::invalid("offset must be between 0 and 50000"));
    }
    Ok(match sort.and_then(|s| s.split_once(':')) {
        Some((c, dir)) => (c, dir == "asc"),
        None => (sort.unwrap_or(""), false),
    })
}

fn rate(part: i64, whole: i64) -> f64 {
    if whole == 0 {
        return 0.0;
    }
    (part as f64 / whole as f64 * 10_000.0).round() / 10_000.0
}
