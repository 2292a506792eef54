//! Scheduled scripts: admin-registered SQL run with its owner's access.

use sqlx::any::AnyRow;
use sqlx::Row;

use super::{Store, StoreError};

/// One stored script.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ScriptRow {
    /// Stable id.
    pub id: String,
    /// Unique name.
    pub name: String,
    /// One read-only statement.
    pub sql: String,
    /// When it runs by itself (`every 15m`, `daily 03:00`); none: only on demand.
    pub schedule: Option<String>,
    /// Whose access it runs with.
    pub owner_id: String,
    /// The local table its result replaces, if any.
    pub target_table: Option<String>,
    /// When it was registered.
    pub created_at: Option<String>,
    /// When it last started.
    pub last_run: Option<String>,
    /// `running`, `success` or `failure`.
    pub last_status: Option<String>,
    /// What the last failure said.
    pub last_error: Option<String>,
    /// Rows the last success produced.
    pub last_rows: Option<i64>,
}

const COLUMNS: &str = "id, name, sql, schedule, owner_id, target_table, created_at, last_run, \
     last_status, last_error, last_rows";

fn from_row(r: &AnyRow) -> Result<ScriptRow, StoreError> {
    Ok(ScriptRow {
        id: r.try_get("id")?,
        name: r.try_get("name")?,
        sql: r.try_get("sql")?,
        schedule: r.try_get("schedule")?,
        owner_id: r.try_get("owner_id")?,
        target_table: r.try_get("target_table")?,
        created_at: r.try_get("created_at")?,
        last_run: r.try_get("last_run")?,
        last_status: r.try_get("last_status")?,
        last_error: r.try_get("last_error")?,
        last_rows: r.try_get("last_rows")?,
    })
}

impl Store {
    /// Stores a new script (the name must be free).
    pub async fn create_script(&self, s: &ScriptRow) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO scripts (id, name, sql, schedule, owner_id, target_table, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(&s.id)
        .bind(&s.name)
        .bind(&s.sql)
        .bind(&s.schedule)
        .bind(&s.owner_id)
        .bind(&s.target_table)
        .bind(&s.created_at)
        .execute(self.pool())
        .await?;
        Ok(())
    }

    /// Every script, by name.
    pub async fn list_scripts(&self) -> Result<Vec<ScriptRow>, StoreError> {
        let rows = sqlx::query(&format!("SELECT {COLUMNS} FROM scripts ORDER BY name"))
            .fetch_all(self.pool())
            .await?;
        rows.iter().map(from_row).collect()
    }

    /// One script.
    pub async fn script(&self, id: &str) -> Result<Option<ScriptRow>, StoreError> {
        let row = sqlx::query(&format!("SELECT {COLUMNS} FROM scripts WHERE id = $1"))
            .bind(id)
            .fetch_optional(self.pool())
            .await?;
        row.as_ref().map(from_row).transpose()
    }

    /// Deletes a script; false when there was none.
    pub async fn delete_script(&self, id: &str) -> Result<bool, StoreError> {
        let done = sqlx::query("DELETE FROM scripts WHERE id = $1")
            .bind(id)
            .execute(self.pool())
            .await?;
        Ok(done.rows_affected() > 0)
    }

    /// Marks a script running unless it already is, under a lease held by `lease.owner`
    /// until `lease.until`. Exactly one of several concurrent claimers (replicas included)
    /// gets true. An expired lease may be claimed again (its holder died or hung), and so may
    /// a run claimed before leases existed that started before `lease.stale_before`.
    pub async fn claim_script(&self, id: &str, lease: &Lease<'_>) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE scripts SET last_status = 'running', last_run = $1, lease_owner = $2, lease_until = $3 \
             WHERE id = $4 AND (last_status IS NULL OR last_status <> 'running' \
               OR lease_until < $1 OR (lease_until IS NULL AND last_run < $5))",
        )
        .bind(lease.now)
        .bind(lease.owner)
        .bind(lease.until)
        .bind(id)
        .bind(lease.stale_before)
        .execute(self.pool())
        .await?;
        Ok(done.rows_affected() == 1)
    }

    /// Ends the runs still marked as held by an earlier process of this replica (every
    /// owner `<replica>/…` other than `current`): that process is gone, so its runs died
    /// with it. `replica` holds no LIKE wildcards (a UUID). Returns how many were freed.
    pub async fn release_dead_leases(
        &self,
        replica: &str,
        current: &str,
    ) -> Result<u64, StoreError> {
        let done = sqlx::query(
            "UPDATE scripts SET last_status = 'failure', \
               last_error = 'the server running it stopped before it finished', \
               lease_owner = NULL, lease_until = NULL \
             WHERE last_status = 'running' AND lease_owner LIKE $1 AND lease_owner <> $2",
        )
        .bind(format!("{replica}/%"))
        .bind(current)
        .execute(self.pool())
        .await?;
        Ok(done.rows_affected())
    }

    /// Records how a claimed run ended.
    pub async fn finish_script(
        &self,
        id: &str,
        outcome: Result<i64, &str>,
    ) -> Result<(), StoreError> {
        let (status, error, rows) = match outcome {
            Ok(rows) => ("success", None, Some(rows)),
            Err(e) => (
                "failure",
                Some(e.chars().take(500).collect::<String>()),
                None,
            ),
        };
        sqlx::query(
            "UPDATE scripts SET last_status = $1, last_error = $2, \
             last_rows = COALESCE($3, last_rows), lease_owner = NULL, lease_until = NULL WHERE id = $4",
        )
        .bind(status)
        .bind(error)
        .bind(rows)
        .bind(id)
        .execute(self.pool())
        .await?;
        Ok(())
    }
}

/// A claim on a script run.
#[derive(Debug, Clone, Copy)]
pub struct Lease<'a> {
    /// The claiming process (`<replica>/<boot id>`).
    pub owner: &'a str,
    /// When the claim is made.
    pub now: &'a str,
    /// When the claim expires.
    pub until: &'a str,
    /// Runs claimed before leases existed and started before this are taken to be dead.
    pub stale_before: &'a str,
}
