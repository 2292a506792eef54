//! Insertion of audit rows. Records are built and queued by `crate::audit`; this module only
//! knows how to store a batch of them.

use sqlx::Row;

use super::{Backend, Store};

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

const COLUMNS: &str =
    "id, timestamp, user_id, action, resource, params, params_before, client_ip, \
     client_kind, correlation_id, result, duration_ms";

/// Rows per PostgreSQL statement: bounds the size of its one JSON parameter.
const ROWS_PER_STATEMENT: usize = 1_000;

/// Rows per SQLite statement, largest first (12 parameters a row stays far below SQLite's
/// 32,766-parameter limit). A batch is cut into these sizes only, so the ten statements are
/// prepared once per connection and then reused from sqlx's statement cache; a statement per
/// batch length would be prepared anew for almost every batch.
const SQLITE_CHUNK_ROWS: [usize; 10] = [512, 256, 128, 64, 32, 16, 8, 4, 2, 1];

/// The SQLite statement for a chunk of `rows` rows (one of `SQLITE_CHUNK_ROWS`).
fn sqlite_insert(rows: usize) -> &'static str {
    static STATEMENTS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    let statements = STATEMENTS.get_or_init(|| {
        SQLITE_CHUNK_ROWS
            .iter()
            .map(|&n| values_insert(n))
            .collect()
    });
    let at = SQLITE_CHUNK_ROWS
        .iter()
        .position(|&n| n == rows)
        .expect("a chunk size from SQLITE_CHUNK_ROWS");
    &statements[at]
}

/// `records` cut into chunks whose sizes all come from `SQLITE_CHUNK_ROWS`.
fn sqlite_chunks(mut records: &[AuditRecord]) -> Vec<&[AuditRecord]> {
    let mut chunks = Vec::new();
    while !records.is_empty() {
        let size = SQLITE_CHUNK_ROWS
            .iter()
            .copied()
            .find(|&n| n <= records.len())
            .expect("1 fits any non-empty rest");
        let (chunk, rest) = records.split_at(size);
        chunks.push(chunk);
        records = rest;
    }
    chunks
}

fn json_text(v: &Option<serde_json::Value>) -> Option<String> {
    v.as_ref().filter(|v| !v.is_null()).map(|v| v.to_string())
}

/// `INSERT … VALUES ($1, …, $12), ($13, …)` for `rows` rows (SQLite).
fn values_insert(rows: usize) -> String {
    let width = COLUMNS.split(", ").count();
    let tuples: Vec<String> = (0..rows)
        .map(|r| {
            let params: Vec<String> = (1..=width).map(|c| format!("${}", r * width + c)).collect();
            format!("({})", params.join(", "))
        })
        .collect();
    format!(
        "INSERT INTO audit_log ({COLUMNS}) VALUES {}",
        tuples.join(", ")
    )
}

impl Store {
    /// Stores a batch of audit rows in one transaction (the group commit).
    ///
    /// Each chunk is one statement: on SQLite a multi-row `VALUES` with bound parameters, on
    /// PostgreSQL one JSON array unpacked by `json_to_recordset`. One round trip per chunk
    /// instead of one per row is what makes group commit fast through the driver.
    pub async fn insert_audit_batch(&self, records: &[AuditRecord]) -> Result<(), sqlx::Error> {
        let mut tx = self.pool().begin().await?;
        let chunks = match self.backend() {
            Backend::Sqlite => sqlite_chunks(records),
            Backend::Postgres => records.chunks(ROWS_PER_STATEMENT).collect(),
        };
        for chunk in chunks {
            match self.backend() {
                Backend::Sqlite => {
                    let mut q = sqlx::query(sqlite_insert(chunk.len()));
                    for r in chunk {
                        q = q
                            .bind(r.id.clone())
                            .bind(r.timestamp.clone())
                            .bind(r.user_id.clone())
                            .bind(r.action.clone())
                            .bind(r.resource.clone())
                            .bind(json_text(&r.params))
                            .bind(json_text(&r.params_before))
                            .bind(r.client_ip.clone())
                            .bind(r.client_kind.clone())
                            .bind(r.correlation_id.clone())
                            .bind(r.result.clone())
                            .bind(r.duration_ms);
                    }
                    q.execute(&mut *tx).await?;
                }
                Backend::Postgres => {
                    let sql = format!(
                        "INSERT INTO audit_log ({COLUMNS}) SELECT {COLUMNS} FROM json_to_recordset($1::json) AS x({})",
                        COLUMNS
                            .split(", ")
                            .map(|c| format!("{c} {}", if c == "duration_ms" { "bigint" } else { "text" }))
                            .collect::<Vec<_>>()
                            .join(", ")
                    );
                    let rows: Vec<serde_json::Value> = chunk
                        .iter()
                        .map(|r| {
                            serde_json::json!({
                                "id": r.id, "timestamp": r.timestamp, "user_id": r.user_id, "action": r.action,
                                "resource": r.resource, "params": json_text(&r.params),
                                "params_before": json_text(&r.params_before), "client_ip": r.client_ip,
                                "client_kind": r.client_kind, "correlation_id": r.correlation_id,
                                "result": r.result, "duration_ms": r.duration_ms,
                            })
                        })
                        .collect();
                    sqlx::query(&sql)
                        .bind(serde_json::Value::Array(rows).to_string())
                        .execute(&mut *tx)
                        .await?;
                }
            }
        }
        tx.commit().await
    }

    /// Stores one audit row on its own (the naive path; kept for the benchmark's baseline).
    pub async fn insert_audit_one(&self, r: &AuditRecord) -> Result<(), sqlx::Error> {
        self.insert_audit_batch(std::slice::from_ref(r)).await
    }

    /// Audit rows for an action, newest first (for tests and diagnostics).
    pub async fn audit_by_action(
        &self,
        action: &str,
        limit: i64,
    ) -> Result<Vec<AuditRecord>, sqlx::Error> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM audit_log WHERE action = $1 ORDER BY timestamp DESC LIMIT $2"
        ))
        .bind(action)
        .bind(limit)
        .fetch_all(self.pool())
        .await?;
        let parse = |s: Option<String>| s.and_then(|s| serde_json::from_str(&s).ok());
        rows.iter()
            .map(|r| {
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
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(i: usize) -> AuditRecord {
        AuditRecord {
            id: i.to_string(),
            timestamp: String::new(),
            user_id: None,
            action: "a".into(),
            resource: None,
            params: None,
            params_before: None,
            client_ip: None,
            client_kind: None,
            correlation_id: None,
            result: "success".into(),
            duration_ms: None,
        }
    }

    #[test]
    fn sqlite_chunks_keep_every_row_in_order_with_only_the_fixed_sizes() {
        for n in [1, 2, 3, 511, 512, 513, 1_000, 4_999] {
            let records: Vec<_> = (0..n).map(record).collect();
            let chunks = sqlite_chunks(&records);
            assert!(chunks.iter().all(|c| SQLITE_CHUNK_ROWS.contains(&c.len())));
            let ids: Vec<&str> = chunks
                .iter()
                .flat_map(|c| c.iter())
                .map(|r| r.id.as_str())
                .collect();
            let expected: Vec<String> = (0..n).map(|i| i.to_string()).collect();
            assert_eq!(ids, expected);
            // Greedy largest-first: never more than one chunk of each size below 512.
            assert!(chunks.len() <= n / 512 + SQLITE_CHUNK_ROWS.len());
        }
    }
}
