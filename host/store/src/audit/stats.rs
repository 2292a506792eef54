//! What the audit log adds up to under a filter: the observability page's cards (KPIs) and
//! facets, over exactly the rows the timeline shows for the same filter, so the numbers
//! above the table agree with the table.

use sqlx::Row;
use tokio::try_join;

use super::timeline::{where_of, AuditFilter, SYSTEM_SOURCE};
use crate::clause::Where;
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
    /// Runs `SELECT {select} FROM audit_log a {where} {tail}` with the filter's binds.
    async fn audit_rows(
        &self,
        select: &str,
        filter: &Where,
        tail: &str,
    ) -> Result<Vec<sqlx::any::AnyRow>, StoreError> {
        let sql = format!("SELECT {select} FROM audit_log a{} {tail}", filter.sql);
        let mut query = sqlx::query(&sql);
        for b in &filter.binds {
            query = query.bind(b);
        }
        Ok(query.fetch_all(self.pool()).await?)
    }

    /// The top values of one expression under the filter, most rows first (ties by value).
    ///
    /// Group by an expression, never a bare indexed column: without statistics SQLite
    /// would walk the whole `(action, timestamp)` or `(user_id, timestamp)` index to group
    /// in index order (every row of the log) instead of the window's rows by timestamp.
    async fn facet(
        &self,
        filter: &AuditFilter,
        expr: &str,
        not_null: bool,
        limit: Option<u32>,
    ) -> Result<Vec<FacetCount>, StoreError> {
        let mut w = where_of(filter);
        if not_null {
            w.push_fixed(&format!("{expr} IS NOT NULL"));
        }
        let limit = limit.map_or(String::new(), |n| format!(" LIMIT {n}"));
        let rows = self
            .audit_rows(
                &format!("{expr} AS value, COUNT(*) AS n"),
                &w,
                &format!("GROUP BY {expr} ORDER BY n DESC, value{limit}"),
            )
            .await?;
        rows.iter()
            .map(|r| {
                Ok(FacetCount {
                    value: r.try_get::<Option<String>, _>("value")?.unwrap_or_default(),
                    count: r.try_get("n")?,
                })
            })
            .collect()
    }

    /// The acting users under the filter, most rows first, labelled by e-mail.
    async fn user_facet(&self, filter: &AuditFilter) -> Result<Vec<UserCount>, StoreError> {
        let mut w = where_of(filter);
        w.push_fixed("a.user_id IS NOT NULL");
        // Group first (by an expression: see `facet`), then label the fifty: the join runs
        // on 50 rows, not on the window.
        let sql = format!(
            "SELECT g.user_id, g.n, u.email FROM (SELECT a.user_id || '' AS user_id, COUNT(*) AS n \
             FROM audit_log a{} GROUP BY a.user_id || '' ORDER BY n DESC, 1 LIMIT {FACET_LIMIT}) g \
             LEFT JOIN users u ON u.id = g.user_id ORDER BY g.n DESC, g.user_id",
            w.sql
        );
        let mut query = sqlx::query(&sql);
        for b in &w.binds {
            query = query.bind(b);
        }
        query
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
        let source = format!("COALESCE(a.client_kind, '{SYSTEM_SOURCE}')");
        let (users, actions, results, resources, sources) = try_join!(
            self.user_facet(filter),
            self.facet(filter, "a.action || ''", false, Some(FACET_LIMIT)),
            self.facet(filter, "a.result || ''", false, Some(FACET_LIMIT)),
            self.facet(filter, "a.resource || ''", true, Some(FACET_LIMIT)),
            self.facet(filter, &source, false, None),
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
        let all = where_of(filter);
        let mut timed = where_of(filter);
        timed.push_fixed("a.duration_ms IS NOT NULL");
        let (counts, histogram) = try_join!(
            self.audit_rows(
                "COUNT(*) AS events, COUNT(DISTINCT a.user_id) AS users, \
                 COALESCE(SUM(CASE WHEN a.result LIKE 'error.%' THEN 1 ELSE 0 END), 0) AS errors",
                &all,
                "",
            ),
            self.audit_rows(
                "a.duration_ms AS ms, COUNT(*) AS n",
                &timed,
                "GROUP BY a.duration_ms ORDER BY a.duration_ms",
            ),
        )?;
        let row = counts.first().ok_or(sqlx::Error::RowNotFound)?;
        let events_total: i64 = row.try_get("events")?;
        let errors: i64 = row.try_get("errors")?;
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
            active_users: row.try_get("users")?,
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
