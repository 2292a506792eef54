//! How long audited actions took: the telemetry summary's slowest actions.

use serde::Serialize;
use sqlx::Row;

use crate::{Store, StoreError};

/// One action's timing percentiles over a window (milliseconds).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ActionTiming {
    /// The action name.
    pub action: String,
    /// Median.
    pub p50: i64,
    /// 95th percentile.
    pub p95: i64,
    /// 99th percentile.
    pub p99: i64,
    /// The slowest.
    pub max_ms: i64,
    /// Timed rows.
    pub n: i64,
}

/// The `p` quantile of sorted values, interpolated linearly at `p·(n−1)`.
fn quantile(sorted: &[i64], p: f64) -> i64 {
    let at = p * (sorted.len() - 1) as f64;
    let (lo, hi) = (at.floor() as usize, at.ceil() as usize);
    let w = at - lo as f64;
    (sorted[lo] as f64 * (1.0 - w) + sorted[hi] as f64 * w).round() as i64
}

impl Store {
    /// Actions audited since `since` with at least `min_n` timed rows, slowest p95 first
    /// (ties by name), at most `top`.
    pub async fn slow_actions(
        &self,
        since: &str,
        min_n: usize,
        top: usize,
    ) -> Result<Vec<ActionTiming>, StoreError> {
        let rows = sqlx::query(
            "SELECT action, duration_ms FROM audit_log \
             WHERE timestamp >= $1 AND duration_ms > 0 ORDER BY action, duration_ms",
        )
        .bind(since)
        .fetch_all(self.pool())
        .await?;
        let mut out = Vec::new();
        let mut current: Option<(String, Vec<i64>)> = None;
        let mut finish = |(action, ms): (String, Vec<i64>)| {
            if ms.len() >= min_n.max(1) {
                out.push(ActionTiming {
                    p50: quantile(&ms, 0.50),
                    p95: quantile(&ms, 0.95),
                    p99: quantile(&ms, 0.99),
                    max_ms: *ms.last().unwrap_or(&0),
                    n: ms.len() as i64,
                    action,
                });
            }
        };
        for r in rows {
            let action: String = r.try_get("action")?;
            let ms: i64 = r.try_get("duration_ms")?;
            match &mut current {
                Some((a, v)) if *a == action => v.push(ms),
                _ => {
                    if let Some(done) = current.replace((action, vec![ms])) {
                        finish(done);
                    }
                }
            }
        }
        if let Some(done) = current {
            finish(done);
        }
        out.sort_by(|a, b| b.p95.cmp(&a.p95).then_with(|| a.action.cmp(&b.action)));
        out.truncate(top);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::quantile;

    #[test]
    fn quantiles_interpolate_between_ranks() {
        let v = [10, 20, 30, 40, 50];
        assert_eq!(
            (quantile(&v, 0.5), quantile(&v, 0.95), quantile(&v, 0.0)),
            (30, 48, 10)
        );
        assert_eq!(quantile(&[7], 0.99), 7);
    }
}
