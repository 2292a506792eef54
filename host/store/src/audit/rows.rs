//! Insertion of audit rows. Records are built and queued by the writer (`super`); this module only
//! knows how to store a batch of them.

use sqlx::Row;

use crate::bulk::{storable_json_text, BulkInsert, JsonType};
use crate::{Store, StoreError};

/// One audit row, ready to store.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct AuditRecord {
    /// Row id.
    pub id: String,
    /// Event time (store timestamp format).
    pub timestamp: String,
    /// Acting user, if known.
    pub user_id: Option<String>,
    /// Dotted action name, e.g. `catalog.sample`.
    pub action: String,
    /// Target, e.g. `table:orders` (≤ 256 chars).
    pub resource: Option<String>,
    /// Parameters as a JSON object.
    pub params: Option<serde_json::Value>,
    /// State before a change.
    pub params_before: Option<serde_json::Value>,
    /// Caller address.
    pub client_ip: Option<String>,
    /// `cli`, `web`, `api`, `scheduler` or `console`.
    pub client_kind: Option<String>,
    /// The request id.
    pub correlation_id: Option<String>,
    /// `success` or `error.<status>`.
    pub result: String,
    /// Time taken by the operation.
    pub duration_ms: Option<i64>,
}

/// The stored columns, in [`AuditRecord`]'s order.
pub(super) const COLUMNS: &str =
    "id, timestamp, user_id, action, resource, params, params_before, client_ip, \
     client_kind, correlation_id, result, duration_ms";

/// `v` as the column holds it: JSON text, a NUL in it stored as the bulk insert stores one
/// in any text (so the JSON reads `␀`, not a `\u0000` a reader's parser turns back into NUL).
///
/// Written by `serde_json::to_string`, not `Value`'s `Display`: that goes through a
/// formatter adaptor and cost 2,800 instructions for a cached sample's three parameters
/// (callgrind), about a quarter of what storing the row cost on the runtime.
fn json_text(v: &Option<serde_json::Value>) -> Option<String> {
    v.as_ref()
        .filter(|v| !v.is_null())
        .map(|v| storable_json_text(serde_json::to_string(v).unwrap_or_default()))
}

/// A record as the bulk insert sends it: borrowed, with `params` and `params_before` as
/// JSON text (the columns hold text), serialized straight into the chunk's JSON.
#[derive(serde::Serialize)]
struct StoredRow<'a> {
    id: &'a str,
    timestamp: &'a str,
    user_id: Option<&'a str>,
    action: &'a str,
    resource: Option<&'a str>,
    params: Option<String>,
    params_before: Option<String>,
    client_ip: Option<&'a str>,
    client_kind: Option<&'a str>,
    correlation_id: Option<&'a str>,
    result: &'a str,
    duration_ms: Option<i64>,
}

impl<'a> From<&'a AuditRecord> for StoredRow<'a> {
    fn from(r: &'a AuditRecord) -> Self {
        Self {
            id: &r.id,
            timestamp: &r.timestamp,
            user_id: r.user_id.as_deref(),
            action: &r.action,
            resource: r.resource.as_deref(),
            params: json_text(&r.params),
            params_before: json_text(&r.params_before),
            client_ip: r.client_ip.as_deref(),
            client_kind: r.client_kind.as_deref(),
            correlation_id: r.correlation_id.as_deref(),
            result: &r.result,
            duration_ms: r.duration_ms,
        }
    }
}

/// [`COLUMNS`] and how each travels in a bulk insert (see [`crate::bulk`]).
fn bulk_columns() -> &'static [(&'static str, JsonType)] {
    static COLUMN_TYPES: std::sync::OnceLock<Vec<(&str, JsonType)>> = std::sync::OnceLock::new();
    COLUMN_TYPES.get_or_init(|| {
        COLUMNS
            .split(", ")
            .map(|c| match c {
                "duration_ms" => (c, JsonType::Int),
                _ => (c, JsonType::Text),
            })
            .collect()
    })
}

impl Store {
    /// Stores a batch of audit rows in one transaction (the group commit).
    ///
    /// Rows go in many to a statement ([`crate::bulk`]): one round trip per chunk, not one
    /// per row, is what makes group commit fast through the driver.
    ///
    /// A row stamped before [`super::ROLLUP_GRACE`] may belong to an hour the rollups already
    /// cover; such rows are added to them in the same transaction, under the rollups' lock
    /// (taken before the insert, so the job cannot count their hour in between). Rows the
    /// writer stamps are seconds old when stored, so a normal batch takes no lock.
    pub async fn insert_audit_batch(&self, records: &[AuditRecord]) -> Result<(), StoreError> {
        let rows: Vec<StoredRow<'_>> = records.iter().map(StoredRow::from).collect();
        let late_before = super::rollup::late_before(chrono::Utc::now());
        let late: Vec<&AuditRecord> = records
            .iter()
            .filter(|r| r.timestamp < late_before)
            .collect();
        let mut tx = self.begin_audit_write().await?;
        if !late.is_empty() {
            super::rollup::fold_late_rows(&mut tx, &late).await?;
        }
        BulkInsert::new(self.backend(), super::TABLE, bulk_columns())
            .run(&mut tx, &rows)
            .await?;
        Ok(tx.commit().await?)
    }

    /// Stores one audit row on its own (the naive path; kept for the benchmark's baseline).
    pub async fn insert_audit_one(&self, r: &AuditRecord) -> Result<(), StoreError> {
        self.insert_audit_batch(std::slice::from_ref(r)).await
    }

    /// Audit rows for an action, newest first (for tests and diagnostics).
    pub async fn audit_by_action(
        &self,
        action: &str,
        limit: i64,
    ) -> Result<Vec<AuditRecord>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM audit_log WHERE action = $1 ORDER BY timestamp DESC LIMIT $2"
        ))
        .bind(action)
        .bind(limit)
        .fetch_all(self.pool())
        .await?;
        Ok(rows.iter().map(record).collect::<Result<_, _>>()?)
    }
}

/// An audit row as read back; `params` and `params_before` parsed (a value that is not
/// JSON reads as null rather than failing the page).
pub(super) fn record(r: &sqlx::any::AnyRow) -> Result<AuditRecord, sqlx::Error> {
    let parse = |s: Option<String>| s.and_then(|s| serde_json::from_str(&s).ok());
    Ok(AuditRecord {
        id: r.try_get("id")?,
        timestamp: r.try_get("timestamp")?,
        user_id: r.try_get("user_id")?,
        action: r.try_get("action")?,
        resource: r.try_get("resource")?,
        params: parse(r.try_get("params")?),
        params_before: parse(r.try_get("params_before")?),
        client_ip: r.try_get("client_ip")?,
        client_kind: r.try_get("client_kind")?,
        correlation_id: r.try_get("correlation_id")?,
        result: r
            .try_get::<Option<String>, _>("result")?
            .unwrap_or_default(),
        duration_ms: r.try_get("duration_ms")?,
    })
}
