//! The audit log counted by period, so the activity cards and facets over a day or a month
//! read a few thousand counts instead of every row of the window.
//!
//! For each hour, and each whole six hours, UTC day and week ([`Grain`]), the rollups hold
//! per [`Dim`] how many rows had each value, and how many rows took each whole number of
//! milliseconds (so the percentiles stay exact), once over every row and once over the
//! failures alone ([`Slice`]: the page's errors-only view is its commonest narrowing). A
//! read over a window, or over a window's failures ([`Split`]), takes the periods the
//! rollups cover from them and everything else (the window's ragged ends, hours not rolled
//! up yet) from the log, so every row is counted exactly once and the figures equal a count
//! of the rows.
//!
//! Coverage is one range of whole hours, `[covered_from, covered_until)`, in
//! `audit_rollup_state`; every longer period wholly inside it has its rows too, built in the
//! step that completes it. The scheduled job ([`Store::roll_up_audit`]) extends it forward
//! to [`GRACE`] before now and backward to the oldest row, an hour per transaction so the
//! audit writer never waits long. Rows that arrive later for an hour already covered (a
//! skewed clock, an import) are added to the rollups of every period holding them in the
//! transaction that stores them ([`fold_late_rows`]). Retention raises the `floor` below
//! which nothing is rolled up before it deletes, so no hour is counted while its rows are
//! being pruned. Every change to coverage happens under the state row's lock.

use std::collections::BTreeMap;
use std::time::{Duration as StdDuration, Instant};

use chrono::{DateTime, Duration, DurationRound, Utc};
use sqlx::Row;
use svc_core::clock::{format_ts, parse_ts};

use super::timeline::{where_of, AuditFilter, ResultFilter, ERROR_ROWS, SYSTEM_SOURCE};
use super::AuditRecord;
use crate::clause::Where;
use crate::{Store, StoreError};

/// How long after an hour ends it is rolled up: rows stamped by the writer reach the store
/// within seconds, so an hour this old takes no more rows in normal operation.
pub const GRACE: Duration = Duration::minutes(10);
/// How long one call of the job works before it returns (the rest waits for the next call).
const RUN_BUDGET: StdDuration = StdDuration::from_secs(20);

/// A dimension the rollups count rows by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Dim {
    /// The acting user (rows without one are not counted).
    User = 1,
    /// The action.
    Action = 2,
    /// `success`, `error.<status>`, or empty.
    Result = 3,
    /// The client kind, or `system`.
    Source = 4,
    /// The resource (rows without one are not counted).
    Resource = 5,
}

impl Dim {
    const ALL: [Self; 5] = [
        Self::User,
        Self::Action,
        Self::Result,
        Self::Source,
        Self::Resource,
    ];

    /// Its value in a log row `a`: an expression, never a bare indexed column, so SQLite
    /// groups the window's rows instead of walking a whole `(column, timestamp)` index.
    pub(super) fn expr(self) -> String {
        match self {
            Self::User => "a.user_id || ''".into(),
            Self::Action => "a.action || ''".into(),
            Self::Result => "COALESCE(a.result, '')".into(),
            Self::Source => format!("COALESCE(a.client_kind, '{SYSTEM_SOURCE}')"),
            Self::Resource => "a.resource || ''".into(),
        }
    }

    /// The condition a counted row meets, if any.
    pub(super) fn condition(self) -> Option<&'static str> {
        match self {
            Self::User => Some("a.user_id IS NOT NULL"),
            Self::Resource => Some("a.resource IS NOT NULL"),
            _ => None,
        }
    }

    /// Its value in a record, if it has one.
    fn of(self, r: &AuditRecord) -> Option<String> {
        match self {
            Self::User => r.user_id.clone(),
            Self::Action => Some(r.action.clone()),
            Self::Result => Some(r.result.clone()),
            Self::Source => Some(
                r.client_kind
                    .clone()
                    .unwrap_or_else(|| SYSTEM_SOURCE.to_owned()),
            ),
            Self::Resource => r.resource.clone(),
        }
    }
}

/// Which rows a rollup row counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Slice {
    /// Every row.
    All,
    /// Failed rows only ([`ERROR_ROWS`]).
    Errors,
}

impl Slice {
    const ALL: [Self; 2] = [Self::All, Self::Errors];

    /// Its `slice` column value.
    fn key(self) -> &'static str {
        match self {
            Self::All => "",
            Self::Errors => "error",
        }
    }

    /// The condition its rows meet in the log, if any.
    fn condition(self) -> Option<&'static str> {
        (self == Self::Errors).then_some(ERROR_ROWS)
    }

    /// The slice that holds exactly `filter`'s rows within its window, if any.
    fn of(filter: &AuditFilter) -> Option<Self> {
        if filter.window_only() {
            return Some(Self::All);
        }
        let rest = AuditFilter {
            result: None,
            ..filter.clone()
        };
        (filter.result == Some(ResultFilter::Error) && rest.window_only()).then_some(Self::Errors)
    }

    /// The slices a row with `result` falls in, or None when its result is one whose
    /// match of [`ERROR_ROWS`] differs between backends (SQLite's `LIKE` ignores case).
    fn of_result(result: &str) -> Option<&'static [Self]> {
        let failed = result.starts_with("error.");
        if !failed && result.to_ascii_lowercase().starts_with("error.") {
            return None;
        }
        Some(if failed { &Self::ALL } else { &Self::ALL[..1] })
    }
}

/// A half-open range of store timestamps; None is unbounded.
type Range = (Option<String>, Option<String>);

/// `column` within any of `ranges` (none: no row).
fn ranges_sql(column: &str, ranges: &[Range], binds: &mut Vec<String>) -> String {
    let mut any = Vec::new();
    for (from, to) in ranges {
        let mut both = Vec::new();
        for (op, bound) in [(">=", from), ("<", to)] {
            if let Some(b) = bound {
                binds.push(b.clone());
                both.push(format!("{column} {op} ${}", binds.len()));
            }
        }
        any.push(if both.is_empty() {
            "1 = 1".to_owned()
        } else {
            both.join(" AND ")
        });
    }
    if any.is_empty() {
        "1 = 0".into()
    } else {
        format!("({})", any.join(" OR "))
    }
}

const HOUR: Duration = Duration::hours(1);
const DAY: Duration = Duration::days(1);

/// The start of the hour or day (`unit`) that holds `t`.
fn floor(t: DateTime<Utc>, unit: Duration) -> DateTime<Utc> {
    t.duration_trunc(unit).unwrap_or(t)
}

/// A length of period the rollups count by. Each is made of whole periods of the next
/// finer one, so a window splits into a few long periods and at most two of each shorter
/// length at its ends: a month reads three or four weeks and some days, quarters and hours
/// — about fifteen periods on average, where days and hours alone take thirty days and the
/// two dozen hours of its ragged ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Grain {
    /// An hour, counted from the log.
    Hour,
    /// Six hours from midnight UTC.
    Quarter,
    /// A UTC day.
    Day,
    /// Seven days from a Monday, UTC.
    Week,
}

impl Grain {
    /// Coarsest first.
    const COARSE_FIRST: [Self; 4] = [Self::Week, Self::Day, Self::Quarter, Self::Hour];
    /// The grains made of finer ones, in the order they are built.
    const BUILT: [Self; 3] = [Self::Quarter, Self::Day, Self::Week];

    /// Its `grain` column value.
    fn key(self) -> &'static str {
        match self {
            Self::Hour => "h",
            Self::Quarter => "q",
            Self::Day => "d",
            Self::Week => "w",
        }
    }

    fn length(self) -> Duration {
        match self {
            Self::Hour => HOUR,
            Self::Quarter => Duration::hours(6),
            Self::Day => DAY,
            Self::Week => Duration::days(7),
        }
    }

    /// The grain its periods are added up from.
    fn finer(self) -> Self {
        match self {
            Self::Hour | Self::Quarter => Self::Hour,
            Self::Day => Self::Quarter,
            Self::Week => Self::Day,
        }
    }

    /// The start of the period that holds `t`.
    fn floor(self, t: DateTime<Utc>) -> DateTime<Utc> {
        match self {
            // The epoch fell on a Thursday: weeks start three days after its days do.
            Self::Week => {
                let monday = Duration::days(3);
                floor(t + monday, self.length()) - monday
            }
            _ => floor(t, self.length()),
        }
    }

    /// The first period boundary at or after `t`.
    fn ceil(self, t: DateTime<Utc>) -> DateTime<Utc> {
        let f = self.floor(t);
        if f == t {
            t
        } else {
            f + self.length()
        }
    }
}

/// Whether `ts` is a timestamp in the store's own format (only those are placed in an hour
/// by parsing; others are placed by text order, which only a count over the log does).
fn canonical(ts: &str) -> Option<DateTime<Utc>> {
    parse_ts(ts).filter(|t| format_ts(*t) == ts)
}

/// The hours the rollups cover.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Coverage {
    /// Nothing before this is rolled up (retention's cutoff, raised before it deletes).
    floor: DateTime<Utc>,
    /// The first covered hour.
    from: DateTime<Utc>,
    /// The end of the last covered hour.
    until: DateTime<Utc>,
}

impl Coverage {
    /// Whether the whole `grain` period starting at `start` is covered, so has rows.
    fn has(&self, grain: Grain, start: DateTime<Utc>) -> bool {
        start >= self.from && start + grain.length() <= self.until
    }
}

const STATE_COLUMNS: &str = "floor, covered_from, covered_until";

fn coverage_of(row: &sqlx::any::AnyRow) -> Result<Option<Coverage>, StoreError> {
    let get = |c: &str| -> Result<Option<DateTime<Utc>>, StoreError> {
        Ok(parse_ts(&row.try_get::<String, _>(c)?))
    };
    Ok(
        match (get("floor")?, get("covered_from")?, get("covered_until")?) {
            (Some(floor), Some(from), Some(until)) => Some(Coverage { floor, from, until }),
            _ => None,
        },
    )
}

/// Takes the state row's lock for the rest of `tx` (a no-op write: the row lock on
/// PostgreSQL, the database's write lock on SQLite) and reads it; creates it, covering
/// nothing, when missing. An empty coverage sits at the last hour that ended [`GRACE`]
/// before `now`: placed at the current hour, the job's backward pass would count an hour
/// whose rows may still arrive, and the writer does not fold those in.
async fn lock_coverage(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    now: DateTime<Utc>,
) -> Result<Coverage, StoreError> {
    let empty_at = now - GRACE;
    let lock = "UPDATE audit_rollup_state SET id = id WHERE id = 1";
    if sqlx::query(lock).execute(&mut **tx).await?.rows_affected() == 0 {
        // Two first callers may both get here; one row is made, and both then lock it.
        let at = format_ts(floor(empty_at, HOUR));
        sqlx::query(&format!(
            "INSERT INTO audit_rollup_state (id, {STATE_COLUMNS}) VALUES (1, $1, $2, $3) \
             ON CONFLICT (id) DO NOTHING"
        ))
        .bind(format_ts(DateTime::<Utc>::UNIX_EPOCH))
        .bind(&at)
        .bind(&at)
        .execute(&mut **tx)
        .await?;
        sqlx::query(lock).execute(&mut **tx).await?;
    }
    let row = sqlx::query(&format!(
        "SELECT {STATE_COLUMNS} FROM audit_rollup_state WHERE id = 1"
    ))
    .fetch_one(&mut **tx)
    .await?;
    match coverage_of(&row)? {
        Some(c) => Ok(c),
        // A state row this code did not write: start over, covering nothing.
        None => {
            let c = Coverage {
                floor: DateTime::<Utc>::UNIX_EPOCH,
                from: floor(empty_at, HOUR),
                until: floor(empty_at, HOUR),
            };
            forget(tx, c).await?;
            Ok(c)
        }
    }
}

async fn save(tx: &mut sqlx::Transaction<'_, sqlx::Any>, c: Coverage) -> Result<(), StoreError> {
    sqlx::query(
        "UPDATE audit_rollup_state SET floor = $1, covered_from = $2, covered_until = $3 WHERE id = 1",
    )
    .bind(format_ts(c.floor))
    .bind(format_ts(c.from))
    .bind(format_ts(c.until))
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Drops every rollup row and saves `c` (which should cover nothing).
async fn forget(tx: &mut sqlx::Transaction<'_, sqlx::Any>, c: Coverage) -> Result<(), StoreError> {
    for t in ["audit_rollup", "audit_rollup_ms"] {
        sqlx::query(&format!("DELETE FROM {t}"))
            .execute(&mut **tx)
            .await?;
    }
    save(tx, c).await
}

/// Counts the log's rows of the hour starting at `hour` into hour rows.
async fn build_hour(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    hour: DateTime<Utc>,
) -> Result<(), StoreError> {
    let range = "a.timestamp >= $1 AND a.timestamp < $2";
    let and = |c: Option<&str>| c.map_or(String::new(), |c| format!(" AND {c}"));
    let mut counts = Vec::new();
    let mut durations = Vec::new();
    for slice in Slice::ALL {
        let (key, within) = (slice.key(), and(slice.condition()));
        for d in Dim::ALL {
            let expr = d.expr();
            counts.push(format!(
                "SELECT 'h', '{key}', {}, CAST($1 AS TEXT), {expr}, COUNT(*) FROM audit_log a \
                 WHERE {range}{within}{} GROUP BY {expr}",
                d as i64,
                and(d.condition()),
            ));
        }
        durations.push(format!(
            "SELECT 'h', '{key}', CAST($1 AS TEXT), a.duration_ms, COUNT(*) FROM audit_log a \
             WHERE {range}{within} AND a.duration_ms IS NOT NULL GROUP BY a.duration_ms"
        ));
    }
    let from = format_ts(hour);
    let to = format_ts(hour + HOUR);
    for sql in [
        format!(
            "INSERT INTO audit_rollup (grain, slice, dim, start, value, n) {}",
            counts.join(" UNION ALL ")
        ),
        format!(
            "INSERT INTO audit_rollup_ms (grain, slice, start, ms, n) {}",
            durations.join(" UNION ALL ")
        ),
    ] {
        sqlx::query(&sql)
            .bind(&from)
            .bind(&to)
            .execute(&mut **tx)
            .await?;
    }
    Ok(())
}

/// Adds up the rows of the finer grain within the `grain` period starting at `start`.
async fn build_period(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    grain: Grain,
    start: DateTime<Utc>,
) -> Result<(), StoreError> {
    let from = format_ts(start);
    let to = format_ts(start + grain.length());
    let (key, finer) = (grain.key(), grain.finer().key());
    // The key's leading columns listed, so both backends read the finer periods as ranges.
    let slices = Slice::ALL.map(|s| format!("'{}'", s.key())).join(", ");
    let dims = Dim::ALL.map(|d| (d as i64).to_string()).join(", ");
    for sql in [
        format!(
            "INSERT INTO audit_rollup (grain, slice, dim, start, value, n) SELECT '{key}', slice, dim, \
             CAST($1 AS TEXT), value, CAST(SUM(n) AS BIGINT) FROM audit_rollup WHERE grain = '{finer}' \
             AND slice IN ({slices}) AND dim IN ({dims}) AND start >= $1 AND start < $2 \
             GROUP BY slice, dim, value"
        ),
        format!(
            "INSERT INTO audit_rollup_ms (grain, slice, start, ms, n) SELECT '{key}', slice, \
             CAST($1 AS TEXT), ms, CAST(SUM(n) AS BIGINT) FROM audit_rollup_ms WHERE grain = '{finer}' \
             AND slice IN ({slices}) AND start >= $1 AND start < $2 GROUP BY slice, ms"
        ),
    ] {
        sqlx::query(&sql)
            .bind(&from)
            .bind(&to)
            .execute(&mut **tx)
            .await?;
    }
    Ok(())
}

/// Builds the longer periods that end at `cov.until` (after a forward step) or start at
/// `cov.from` (after a backward one) and are now wholly covered, finest first.
async fn build_completed(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    cov: Coverage,
    forward: bool,
) -> Result<(), StoreError> {
    for grain in Grain::BUILT {
        let edge = if forward { cov.until } else { cov.from };
        let start = if forward { edge - grain.length() } else { edge };
        if grain.floor(edge) == edge && cov.has(grain, start) {
            build_period(tx, grain, start).await?;
        }
    }
    Ok(())
}

/// What one call of the rollup job did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RollupRun {
    /// Hours counted (each with the longer periods it completed).
    pub hours: u64,
    /// Whether coverage reached both the oldest row and [`GRACE`] before now.
    pub complete: bool,
}

/// Adds `records`, which are being stored in `tx`, to the rollups of the hours already
/// covered. Only rows older than [`GRACE`] can fall in one; the writer calls this only when
/// a batch has such a row, so the common batch pays nothing.
pub(super) async fn fold_late_rows(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    records: &[&AuditRecord],
) -> Result<(), StoreError> {
    let cov = lock_coverage(tx, Utc::now()).await?;
    let (from, until) = (format_ts(cov.from), format_ts(cov.until));
    // Keyed (grain, slice, start, dim, value) and (grain, slice, start, ms).
    type Key<T> = (&'static str, &'static str, String, T);
    let mut counts: BTreeMap<Key<(i64, String)>, i64> = BTreeMap::new();
    let mut ms: BTreeMap<Key<i64>, i64> = BTreeMap::new();
    for r in records {
        if r.timestamp < from || r.timestamp >= until {
            continue;
        }
        let (Some(t), Some(slices)) = (canonical(&r.timestamp), Slice::of_result(&r.result)) else {
            // Its hour by text order, or its slice by each backend's `LIKE`, is not worth
            // deriving for a row no writer of ours stamps: count everything from the log again.
            let empty = Coverage {
                from: cov.until,
                ..cov
            };
            return forget(tx, empty).await;
        };
        let periods: Vec<(&str, String)> = Grain::COARSE_FIRST
            .into_iter()
            .map(|g| (g, g.floor(t)))
            .filter(|(g, start)| cov.has(*g, *start))
            .map(|(g, start)| (g.key(), format_ts(start)))
            .collect();
        for (grain, start) in &periods {
            for slice in slices.iter().map(|s| s.key()) {
                for dim in Dim::ALL {
                    if let Some(value) = dim.of(r) {
                        let key = (*grain, slice, start.clone(), (dim as i64, value));
                        *counts.entry(key).or_default() += 1;
                    }
                }
                if let Some(d) = r.duration_ms {
                    *ms.entry((*grain, slice, start.clone(), d)).or_default() += 1;
                }
            }
        }
    }
    for ((grain, slice, start, (dim, value)), n) in counts {
        sqlx::query(
            "INSERT INTO audit_rollup (grain, slice, dim, start, value, n) \
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (grain, slice, dim, start, value) \
             DO UPDATE SET n = audit_rollup.n + excluded.n",
        )
        .bind(grain)
        .bind(slice)
        .bind(dim)
        .bind(start)
        .bind(value)
        .bind(n)
        .execute(&mut **tx)
        .await?;
    }
    for ((grain, slice, start, d), n) in ms {
        sqlx::query(
            "INSERT INTO audit_rollup_ms (grain, slice, start, ms, n) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (grain, slice, start, ms) DO UPDATE SET n = audit_rollup_ms.n + excluded.n",
        )
        .bind(grain)
        .bind(slice)
        .bind(start)
        .bind(d)
        .bind(n)
        .execute(&mut **tx)
        .await?;
    }
    Ok(())
}

/// Where rows older than [`GRACE`] begin: a batch with a row before this folds it in.
pub(super) fn late_before(now: DateTime<Utc>) -> String {
    format_ts(now - GRACE)
}

/// Splits the whole hours `[lo, hi)` into the longest periods of `grains` (coarsest first,
/// ending with hours) that fit, appending `(grain, range)`s in time order within a grain.
fn split_periods(
    lo: DateTime<Utc>,
    hi: DateTime<Utc>,
    grains: &[Grain],
    out: &mut Vec<(Grain, Range)>,
) {
    let Some((&grain, finer)) = grains.split_first() else {
        return;
    };
    if lo >= hi {
        return;
    }
    let (a, b) = (grain.ceil(lo), grain.floor(hi));
    if finer.is_empty() || a < b {
        let (a, b) = if finer.is_empty() { (lo, hi) } else { (a, b) };
        out.push((grain, (Some(format_ts(a)), Some(format_ts(b)))));
        split_periods(lo, a, finer, out);
        split_periods(b, hi, finer, out);
    } else {
        split_periods(lo, hi, finer, out);
    }
}

/// How a read over a filter splits between the rollups and the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Split {
    /// The rows the rollup reads count.
    slice: Slice,
    /// The periods read from rollup rows ([`split_periods`]).
    periods: Vec<(Grain, Range)>,
    /// The log rows under the filter that the rollups do not cover.
    pub raw: Where,
}

impl Split {
    /// Everything from the log.
    pub(super) fn raw(filter: &AuditFilter) -> Self {
        Self {
            slice: Slice::All,
            periods: Vec::new(),
            raw: where_of(filter),
        }
    }

    /// The split of `filter` under `cov`: only a filter whose rows within its window are
    /// one [`Slice`] can be answered from per-dimension counts.
    pub(super) fn of(filter: &AuditFilter, cov: Option<Coverage>) -> Self {
        let (Some(cov), Some(slice)) = (cov, Slice::of(filter)) else {
            return Self::raw(filter);
        };
        let since = filter.since.as_deref();
        let until = filter.until.as_deref();
        let parsed = |b: Option<&str>| b.map(parse_ts);
        let lo = match parsed(since) {
            None => cov.from,
            Some(None) => return Self::raw(filter),
            Some(Some(t)) => Grain::Hour.ceil(t).max(cov.from),
        };
        let hi = match parsed(until) {
            None => cov.until,
            Some(None) => return Self::raw(filter),
            Some(Some(t)) => floor(t, HOUR).min(cov.until),
        };
        let (lo_ts, hi_ts) = (format_ts(lo), format_ts(hi));
        // Text order decides which rows a bound takes; the covered part must lie inside it.
        if lo >= hi
            || since.is_some_and(|s| lo_ts.as_str() < s)
            || until.is_some_and(|u| hi_ts.as_str() > u)
        {
            return Self::raw(filter);
        }
        let mut periods = Vec::new();
        split_periods(lo, hi, &Grain::COARSE_FIRST, &mut periods);
        let mut raw = where_of(&AuditFilter {
            result: filter.result,
            ..AuditFilter::default()
        });
        let ends = [
            (since.map(str::to_owned), Some(lo_ts)),
            (Some(hi_ts), until.map(str::to_owned)),
        ];
        let sql = ranges_sql("a.timestamp", &ends, &mut raw.binds);
        raw.push_fixed(&sql);
        Self {
            slice,
            periods,
            raw,
        }
    }

    /// The rollup reads (`SELECT value, n …` per grain) for `dim`, binding into `binds`.
    fn rolled(
        &self,
        table: &str,
        select: &str,
        dim: Option<Dim>,
        binds: &mut Vec<String>,
    ) -> Vec<String> {
        let slice = self.slice.key();
        let dim = dim.map_or(String::new(), |d| format!(" AND dim = {}", d as i64));
        // One branch per range: SQLite walks the key `(grain, dim, start, …)` as a range only
        // for a single range; an OR of two would scan every period of the dimension.
        self.periods
            .iter()
            .map(|(grain, range)| {
                let grain = grain.key();
                let within = ranges_sql("start", std::slice::from_ref(range), binds);
                format!(
                    "SELECT {select} FROM {table} WHERE grain = '{grain}' AND slice = '{slice}'\
                     {dim} AND {within}"
                )
            })
            .collect()
    }

    /// `(value, n)` rows for `dim`: one per period and value from the rollups, one per value
    /// from the log; binds in the result.
    pub(super) fn counts(&self, dim: Dim) -> Where {
        let mut w = self.raw.clone();
        if let Some(c) = dim.condition() {
            w.push_fixed(c);
        }
        let expr = dim.expr();
        w.sql = format!(
            "SELECT {expr} AS value, COUNT(*) AS n FROM audit_log a{} GROUP BY {expr}",
            w.sql
        );
        let rolled = self.rolled("audit_rollup", "value, n", Some(dim), &mut w.binds);
        for part in rolled {
            w.sql.push_str(" UNION ALL ");
            w.sql.push_str(&part);
        }
        w
    }

    /// `(ms, n)` rows: how many rows took each duration.
    pub(super) fn durations(&self) -> Where {
        let mut w = self.raw.clone();
        w.push_fixed("a.duration_ms IS NOT NULL");
        let mut parts = vec![format!(
            "SELECT a.duration_ms AS ms, COUNT(*) AS n FROM audit_log a{} GROUP BY a.duration_ms",
            w.sql
        )];
        parts.extend(self.rolled("audit_rollup_ms", "ms, n", None, &mut w.binds));
        Where {
            sql: parts.join(" UNION ALL "),
            binds: w.binds,
        }
    }
}

impl Store {
    /// The rollups' coverage, if the job has run.
    pub(super) async fn rollup_coverage(&self) -> Result<Option<Coverage>, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT {STATE_COLUMNS} FROM audit_rollup_state WHERE id = 1"
        ))
        .fetch_optional(self.pool())
        .await?;
        match row {
            Some(row) => coverage_of(&row),
            None => Ok(None),
        }
    }

    /// How a read under `filter` splits between the rollups and the log.
    pub(super) async fn split(&self, filter: &AuditFilter) -> Result<Split, StoreError> {
        Ok(Split::of(filter, self.rollup_coverage().await?))
    }

    /// Extends the rollups: forward to [`GRACE`] before `now`, then backward to the oldest
    /// row (never below retention's floor), an hour per transaction, for up to 20 s. The
    /// scheduled job calls it; a call that did not finish says so and the next continues.
    pub async fn roll_up_audit(&self, now: DateTime<Utc>) -> Result<RollupRun, StoreError> {
        let started = Instant::now();
        let target = floor(now - GRACE, HOUR);
        let mut run = RollupRun::default();
        while started.elapsed() < RUN_BUDGET {
            let mut tx = self.begin_write().await?;
            let mut cov = lock_coverage(&mut tx, now).await?;
            if cov.until < target {
                let hour = cov.until;
                build_hour(&mut tx, hour).await?;
                cov.until = hour + HOUR;
                build_completed(&mut tx, cov, true).await?;
            } else {
                let oldest: Option<String> =
                    sqlx::query_scalar("SELECT MIN(timestamp) FROM audit_log WHERE timestamp < $1")
                        .bind(format_ts(cov.from))
                        .fetch_one(&mut *tx)
                        .await?;
                let lowest = oldest
                    .as_deref()
                    .and_then(parse_ts)
                    .map(|t| floor(t, HOUR).max(Grain::Hour.ceil(cov.floor)));
                match lowest {
                    Some(lowest) if lowest < cov.from => {
                        let hour = cov.from - HOUR;
                        build_hour(&mut tx, hour).await?;
                        cov.from = hour;
                        build_completed(&mut tx, cov, false).await?;
                    }
                    _ => {
                        tx.rollback().await?;
                        run.complete = true;
                        return Ok(run);
                    }
                }
            }
            save(&mut tx, cov).await?;
            tx.commit().await?;
            run.hours += 1;
        }
        Ok(run)
    }

    /// Before retention deletes rows older than `before`: nothing below it is rolled up
    /// from now on, and the rollups of the hours it reaches into are dropped.
    pub(super) async fn raise_rollup_floor(&self, before: &str) -> Result<(), StoreError> {
        let mut tx = self.begin_write().await?;
        let mut cov = lock_coverage(&mut tx, Utc::now()).await?;
        let Some(cut) = parse_ts(before) else {
            let empty = Coverage {
                from: cov.until,
                ..cov
            };
            forget(&mut tx, empty).await?;
            return Ok(tx.commit().await?);
        };
        cov.floor = cov.floor.max(Grain::Hour.ceil(cut));
        if cov.from < cov.floor {
            cov.from = cov.floor;
            cov.until = cov.until.max(cov.from);
            let from = format_ts(cov.from);
            for t in ["audit_rollup", "audit_rollup_ms"] {
                sqlx::query(&format!("DELETE FROM {t} WHERE start < $1"))
                    .bind(&from)
                    .execute(&mut *tx)
                    .await?;
            }
        }
        save(&mut tx, cov).await?;
        Ok(tx.commit().await?)
    }
}

#[cfg(test)]
mod tests;
