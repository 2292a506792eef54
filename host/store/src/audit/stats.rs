//! What the audit log adds up to under a filter: the observability page's cards (KPIs) and
//! facets, over exactly the rows the timeline shows for the same filter, so the numbers
//! above the table agree with the table. Over a plain time window most of the counting is
//! already done ([`super::rollup`]).

use sqlx::Row;
use tokio::try_join;

use super::rollup::{Dim, Split};
use super::timeline::AuditFilter;
use crate::clause::{bound, Where};
use crate::{Store, StoreError};

/// Values each facet lists at most (sources are few and always all listed).
pub const FACET_LIMIT: u32 = 50;

/// One facet value and how many rows have it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FacetCount {
    /// The value.
    pub value: String,
    /// Rows with it.
    pub count: i64,
}

/// One user and how many rows they caused.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct UserCount {
    /// The user id.
    pub id: String,
    /// Their e-mail, or the id when the user is gone.
    pub label: String,
    /// Rows of theirs.
    pub count: i64,
}

/// The commonest values of each dimension, most rows first.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct AuditFacets {
    /// Acting users (rows without a user are not counted here).
    pub users: Vec<UserCount>,
    /// Action names.
    pub actions: Vec<FacetCount>,
    /// `success` and `error.<status>` values.
    pub results: Vec<FacetCount>,
    /// Resources (rows without one are not counted here).
    pub resources: Vec<FacetCount>,
    /// Client kinds, and `system` for rows no client caused.
    pub sources: Vec<FacetCount>,
}

/// The cards: how much happened, to whom, how much failed and how long it took.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct AuditKpis {
    /// Rows.
    pub events_total: i64,
    /// Distinct acting users.
    pub active_users: i64,
    /// Rows whose result is an error.
    pub errors: i64,
    /// `errors / events_total`, to four decimals (0 when there are no rows).
    pub error_rate: f64,
    /// Rows that recorded a duration (the percentiles are over these).
    pub timed: i64,
    /// Median duration in ms; None when no row recorded one.
    pub p50_duration_ms: Option<i64>,
    /// 95th percentile duration in ms (nearest rank).
    pub p95_duration_ms: Option<i64>,
    /// 99th percentile duration in ms (nearest rank).
    pub p99_duration_ms: Option<i64>,
}

/// The value at nearest-rank percentile `p` (0..=1) of a distribution given as
/// `(value, count)` pairs in ascending value order with `total` counts in all.
fn percentile(histogram: &[(i64, i64)], total: i64, p: f64) -> Option<i64> {
    if total == 0 {
        return None;
    }
    // Nearest rank: the smallest value with at least ceil(p * total) rows at or below it.
    let rank = ((p * total as f64).ceil() as i64).max(1);
    let mut seen = 0;
    for &(value, count) in histogram {
        seen += count;
        if seen >= rank {
            return Some(value);
        }
    }
    histogram.last().map(|(v, _)| *v)
}

impl Store {
    /// Runs `SELECT value, n` over `counts` (`(value, n)` rows) added up per value, most
    /// rows first (ties by value).
    async fn top(&self, counts: Where, limit: Option<u32>) -> Result<Vec<FacetCount>, StoreError> {
        let limit = limit.map_or(String::new(), |n| format!(" LIMIT {n}"));
        let sql = format!(
            "SELECT value, CAST(SUM(n) AS BIGINT) AS n FROM ({}) r GROUP BY value \
             ORDER BY n DESC, value{limit}",
            counts.sql
        );
        bound(&sql, &counts.binds)
            .fetch_all(self.pool())
            .await?
            .iter()
            .map(|r| {
                Ok(FacetCount {
                    value: r.try_get("value")?,
                    count: r.try_get("n")?,
                })
            })
            .collect()
    }

    /// The acting users under the split, most rows first, labelled by e-mail.
    async fn user_facet(&self, split: &Split) -> Result<Vec<UserCount>, StoreError> {
        let counts = split.counts(Dim::User);
        // Add up first, then label the fifty: the join runs on 50 rows, not on the window.
        let sql = format!(
            "SELECT g.value AS user_id, g.n, u.email FROM (SELECT value, CAST(SUM(n) AS BIGINT) AS n \
             FROM ({}) r GROUP BY value ORDER BY n DESC, value LIMIT {FACET_LIMIT}) g \
             LEFT JOIN users u ON u.id = g.value ORDER BY g.n DESC, g.value",
            counts.sql
        );
        bound(&sql, &counts.binds)
            .fetch_all(self.pool())
            .await?
            .iter()
            .map(|r| {
                let id: String = r.try_get("user_id")?;
                let email: Option<String> = r.try_get("email")?;
                Ok(UserCount {
                    label: email.unwrap_or_else(|| id.clone()),
                    id,
                    count: r.try_get("n")?,
                })
            })
            .collect()
    }

    /// The facets of the rows under `filter` (the timeline's filter).
    pub async fn audit_facets(&self, filter: &AuditFilter) -> Result<AuditFacets, StoreError> {
        self.facets_of(&self.split(filter).await?).await
    }

    /// The facets of the rows `split` counts.
    pub(super) async fn facets_of(&self, split: &Split) -> Result<AuditFacets, StoreError> {
        let (users, actions, results, resources, sources) = try_join!(
            self.user_facet(split),
            self.top(split.counts(Dim::Action), Some(FACET_LIMIT)),
            self.top(split.counts(Dim::Result), Some(FACET_LIMIT)),
            self.top(split.counts(Dim::Resource), Some(FACET_LIMIT)),
            self.top(split.counts(Dim::Source), None),
        )?;
        Ok(AuditFacets {
            users,
            actions,
            results,
            resources,
            sources,
        })
    }

    /// The KPIs of the rows under `filter` (the timeline's filter). Percentiles are exact
    /// (nearest rank) over the rows that recorded a duration: durations are whole
    /// milliseconds, so their histogram is small even when the rows are millions.
    pub async fn audit_kpis(&self, filter: &AuditFilter) -> Result<AuditKpis, StoreError> {
        self.kpis_of(&self.split(filter).await?).await
    }

    /// The KPIs of the rows `split` counts.
    pub(super) async fn kpis_of(&self, split: &Split) -> Result<AuditKpis, StoreError> {
        let results = split.counts(Dim::Result);
        let users = split.counts(Dim::User);
        let durations = split.durations();
        let counts_sql = format!(
            "SELECT CAST(COALESCE(SUM(n), 0) AS BIGINT) AS events, \
             CAST(COALESCE(SUM(CASE WHEN value LIKE 'error.%' THEN n ELSE 0 END), 0) AS BIGINT) AS errors \
             FROM ({}) r",
            results.sql
        );
        let users_sql = format!(
            "SELECT COUNT(DISTINCT value) AS users FROM ({}) r",
            users.sql
        );
        let histogram_sql = format!(
            "SELECT ms, CAST(SUM(n) AS BIGINT) AS n FROM ({}) r GROUP BY ms ORDER BY ms",
            durations.sql
        );
        let (counts, users, histogram) = try_join!(
            bound(&counts_sql, &results.binds).fetch_one(self.pool()),
            bound(&users_sql, &users.binds).fetch_one(self.pool()),
            bound(&histogram_sql, &durations.binds).fetch_all(self.pool()),
        )?;
        let events_total: i64 = counts.try_get("events")?;
        let errors: i64 = counts.try_get("errors")?;
        let histogram: Vec<(i64, i64)> = histogram
            .iter()
            .map(|r| Ok((r.try_get("ms")?, r.try_get("n")?)))
            .collect::<Result<_, sqlx::Error>>()?;
        let timed: i64 = histogram.iter().map(|(_, n)| n).sum();
        let error_rate = if events_total == 0 {
            0.0
        } else {
            (errors as f64 / events_total as f64 * 10_000.0).round() / 10_000.0
        };
        Ok(AuditKpis {
            events_total,
            active_users: users.try_get("users")?,
            errors,
            error_rate,
            timed,
            p50_duration_ms: percentile(&histogram, timed, 0.50),
            p95_duration_ms: percentile(&histogram, timed, 0.95),
            p99_duration_ms: percentile(&histogram, timed, 0.99),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        // 100 rows: 1..=100 ms, one each.
        let h: Vec<(i64, i64)> = (1..=100).map(|v| (v, 1)).collect();
        assert_eq!(percentile(&h, 100, 0.95), Some(95));
        assert_eq!(percentile(&h, 100, 0.99), Some(99));
        assert_eq!(percentile(&h, 100, 0.50), Some(50));
        // Skewed: 90 fast rows and 10 slow ones; p95 lands among the slow.
        let h = [(2, 90), (500, 9), (9_000, 1)];
        assert_eq!(percentile(&h, 100, 0.50), Some(2));
        assert_eq!(percentile(&h, 100, 0.95), Some(500));
        assert_eq!(percentile(&h, 100, 0.99), Some(500));
        assert_eq!(percentile(&h, 100, 1.0), Some(9_000));
        assert_eq!(percentile(&[], 0, 0.95), None);
        assert_eq!(percentile(&[(7, 1)], 1, 0.99), Some(7));
    }
}
