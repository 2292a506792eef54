//! Sync state of tables whose data the server keeps a copy of (materialized tables).

use std::collections::HashMap;

use sqlx::Row;
use svc_plugin_api::SyncReport;

use super::{Store, StoreError};

/// The state of one table's local copy.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct SyncState {
    /// Registry id.
    pub table_id: String,
    /// `ok` or `error` (the last attempt's outcome).
    pub status: Option<String>,
    /// Rows of the last good copy.
    pub rows: Option<i64>,
    /// Bytes of the last good copy.
    pub size_bytes: Option<i64>,
    /// SHA-256 of the last good copy.
    pub hash: Option<String>,
    /// When the last good copy was written.
    pub last_success_at: Option<String>,
    /// When a sync last started.
    pub last_attempt_at: Option<String>,
    /// When a sync last failed.
    pub last_error_at: Option<String>,
    /// What it said.
    pub last_error: Option<String>,
    /// How long the last attempt took.
    pub duration_ms: Option<i64>,
}

impl Store {
    /// Every table's sync state, by table id.
    pub async fn sync_states(&self) -> Result<HashMap<String, SyncState>, StoreError> {
        let rows = sqlx::query(
            "SELECT table_id, status, rows, size_bytes, hash, last_success_at, last_attempt_at, \
             last_error_at, last_error, duration_ms FROM sync_state",
        )
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| {
                let s = SyncState {
                    table_id: r.try_get("table_id")?,
                    status: r.try_get("status")?,
                    rows: r.try_get("rows")?,
                    size_bytes: r.try_get("size_bytes")?,
                    hash: r.try_get("hash")?,
                    last_success_at: r.try_get("last_success_at")?,
                    last_attempt_at: r.try_get("last_attempt_at")?,
                    last_error_at: r.try_get("last_error_at")?,
                    last_error: r.try_get("last_error")?,
                    duration_ms: r.try_get("duration_ms")?,
                };
                Ok((s.table_id.clone(), s))
            })
            .collect()
    }

    /// Records a successful sync (clearing any earlier error).
    pub async fn record_sync_success(
        &self,
        table_id: &str,
        report: &SyncReport,
        duration_ms: i64,
    ) -> Result<(), StoreError> {
        let now = svc_core::clock::now();
        sqlx::query(
            "INSERT INTO sync_state (table_id, status, rows, size_bytes, hash, last_success_at, last_attempt_at, \
             last_error_at, last_error, duration_ms) VALUES ($1, 'ok', $2, $3, $4, $5, $6, NULL, NULL, $7) \
             ON CONFLICT (table_id) DO UPDATE SET status = 'ok', rows = excluded.rows, \
             size_bytes = excluded.size_bytes, hash = excluded.hash, last_success_at = excluded.last_success_at, \
             last_attempt_at = excluded.last_attempt_at, last_error_at = NULL, last_error = NULL, \
             duration_ms = excluded.duration_ms",
        )
        .bind(table_id)
        .bind(i64::try_from(report.rows).unwrap_or(i64::MAX))
        .bind(i64::try_from(report.bytes).unwrap_or(i64::MAX))
        .bind(&report.hash)
        .bind(&now)
        .bind(&now)
        .bind(duration_ms)
        .execute(self.pool())
        .await?;
        Ok(())
    }

    /// Records a failed sync; the last good copy's figures are kept.
    pub async fn record_sync_error(
        &self,
        table_id: &str,
        message: &str,
        duration_ms: i64,
    ) -> Result<(), StoreError> {
        let now = svc_core::clock::now();
        sqlx::query(
            "INSERT INTO sync_state (table_id, status, last_attempt_at, last_error_at, last_error, duration_ms) \
             VALUES ($1, 'error', $2, $3, $4, $5) ON CONFLICT (table_id) DO UPDATE SET status = 'error', \
             last_attempt_at = excluded.last_attempt_at, last_error_at = excluded.last_error_at, \
             last_error = excluded.last_error, duration_ms = excluded.duration_ms",
        )
        .bind(table_id)
        .bind(&now)
        .bind(&now)
        .bind(message.chars().take(500).collect::<String>())
        .bind(duration_ms)
        .execute(self.pool())
        .await?;
        Ok(())
    }
}
