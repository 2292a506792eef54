//! The table registry: one row per table that svc serves.

use std::fmt;
use std::str::FromStr;

use sqlx::any::AnyRow;
use sqlx::Row;
use svc_core::clock::now;

use super::{Store, StoreError};

/// How a table's data is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueryMode {
    /// Parquet on this server's disk.
    Local,
    /// Read at the source on every request.
    Remote,
    /// Copied from the source to parquet on a schedule.
    Materialized,
    /// The service's own tables; seeded, never registered by hand.
    Internal,
}

impl QueryMode {
    /// Rows served from the state store itself (`svc_*`); the caller's row filter guards
    /// them, so every authenticated caller may read them and nothing about them is cached.
    pub fn is_internal(self) -> bool {
        self == Self::Internal
    }

    /// Rows read from the source on every request (the remote size guard and the persistent
    /// metadata cache apply).
    pub fn is_remote(self) -> bool {
        self == Self::Remote
    }

    /// Rows copied onto this server by sync passes.
    pub fn is_materialized(self) -> bool {
        self == Self::Materialized
    }

    /// Whether samples and schemas of such rows may be cached (not per-caller).
    pub fn caches_samples(self) -> bool {
        !self.is_internal()
    }

    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Local => "local",
            Self::Remote => "remote",
            Self::Materialized => "materialized",
            Self::Internal => "internal",
        }
    }
}

impl fmt::Display for QueryMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for QueryMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "local" => Ok(Self::Local),
            "remote" => Ok(Self::Remote),
            "materialized" => Ok(Self::Materialized),
            "internal" => Ok(Self::Internal),
            other => Err(format!("unknown query_mode '{other}'")),
        }
    }
}

/// One registered table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistryRow {
    /// Table id: `[A-Za-z0-9_.-]{1,128}`; the key of grants and parquet file names.
    pub id: String,
    /// Display name.
    pub name: String,
    /// Which driver serves it.
    pub source_type: String,
    /// Grouping label (the dataset for warehouse tables).
    pub bucket: Option<String>,
    /// Name at the source; the id when empty.
    pub source_table: Option<String>,
    /// How data is reached.
    pub query_mode: QueryMode,
    /// SQL run at the source for materialized tables.
    pub source_query: Option<String>,
    /// Columns identifying a row (comma-separated), for incremental syncs that merge.
    pub primary_key: Option<String>,
    /// The column marking new and changed rows, for incremental syncs.
    pub cursor_column: Option<String>,
    /// `every Nm`, `every Nh` or `daily HH:MM[,HH:MM…]` (UTC).
    pub sync_schedule: Option<String>,
    /// Free text shown in the catalog.
    pub description: Option<String>,
    /// Who registered it first.
    pub registered_by: Option<String>,
    /// When it was registered.
    pub registered_at: Option<String>,
    /// Last change.
    pub updated_at: Option<String>,
}

impl RegistryRow {
    /// A new local table named after its id, with nothing else set: the base a registration
    /// of an unknown id starts from.
    pub fn new_local(id: &str) -> Self {
        Self {
            id: id.to_owned(),
            name: id.to_owned(),
            source_type: "local".into(),
            bucket: None,
            source_table: None,
            query_mode: QueryMode::Local,
            source_query: None,
            primary_key: None,
            cursor_column: None,
            sync_schedule: None,
            description: None,
            registered_by: None,
            registered_at: None,
            updated_at: None,
        }
    }

    /// The row as drivers see it.
    pub fn table_ref(&self) -> svc_plugin_api::TableRef {
        svc_plugin_api::TableRef {
            id: self.id.clone(),
            source_type: self.source_type.clone(),
            bucket: self.bucket.clone(),
            source_table: self.source_table.clone(),
            query_mode: self.query_mode.as_str().into(),
            source_query: self.source_query.clone(),
            primary_key: self.primary_key.clone(),
            cursor_column: self.cursor_column.clone(),
        }
    }
}

const COLUMNS: &str = "id, name, source_type, bucket, source_table, query_mode, source_query, \
     sync_schedule, description, registered_by, registered_at, updated_at, primary_key, cursor_column";

fn from_row(r: &AnyRow) -> Result<RegistryRow, StoreError> {
    let id: String = r.try_get("id")?;
    let mode: Option<String> = r.try_get("query_mode")?;
    Ok(RegistryRow {
        name: r
            .try_get::<Option<String>, _>("name")?
            .unwrap_or_else(|| id.clone()),
        source_type: r
            .try_get::<Option<String>, _>("source_type")?
            .unwrap_or_else(|| "local".into()),
        bucket: r.try_get("bucket")?,
        source_table: r.try_get("source_table")?,
        query_mode: mode
            .as_deref()
            .unwrap_or("local")
            .parse()
            .map_err(|e: String| sqlx::Error::Decode(e.into()))?,
        source_query: r.try_get("source_query")?,
        primary_key: r.try_get("primary_key")?,
        cursor_column: r.try_get("cursor_column")?,
        sync_schedule: r.try_get("sync_schedule")?,
        description: r.try_get("description")?,
        registered_by: r.try_get("registered_by")?,
        registered_at: r.try_get("registered_at")?,
        updated_at: r.try_get("updated_at")?,
        id,
    })
}

impl Store {
    /// Inserts or replaces a row by id; the first registrant and registration time are kept.
    pub async fn upsert_table(&self, row: &RegistryRow) -> Result<(), StoreError> {
        let ts = now();
        sqlx::query(&format!(
            "INSERT INTO table_registry ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11, $12, $13) \
             ON CONFLICT (id) DO UPDATE SET name = excluded.name, source_type = excluded.source_type, \
             bucket = excluded.bucket, source_table = excluded.source_table, query_mode = excluded.query_mode, \
             source_query = excluded.source_query, sync_schedule = excluded.sync_schedule, \
             description = excluded.description, updated_at = excluded.updated_at, \
             primary_key = excluded.primary_key, cursor_column = excluded.cursor_column"
        ))
        .bind(&row.id)
        .bind(&row.name)
        .bind(&row.source_type)
        .bind(&row.bucket)
        .bind(&row.source_table)
        .bind(row.query_mode.as_str())
        .bind(&row.source_query)
        .bind(&row.sync_schedule)
        .bind(&row.description)
        .bind(&row.registered_by)
        .bind(&ts)
        .bind(&row.primary_key)
        .bind(&row.cursor_column)
        .execute(self.pool())
        .await?;
        Ok(())
    }

    /// Looks a table up by id.
    pub async fn table_by_id(&self, id: &str) -> Result<Option<RegistryRow>, StoreError> {
        super::fetch_opt(
            self,
            sqlx::query(&format!(
                "SELECT {COLUMNS} FROM table_registry WHERE id = $1"
            ))
            .bind(id),
            from_row,
        )
        .await
    }

    /// A table and whether any of the user's groups holds a grant on it, in one round trip
    /// (the lookup and access check of every per-table request).
    pub async fn table_with_grant(
        &self,
        id: &str,
        user_id: &str,
    ) -> Result<Option<(RegistryRow, bool)>, StoreError> {
        let cols: Vec<String> = COLUMNS.split(", ").map(|c| format!("t.{c}")).collect();
        let row = sqlx::query(&format!(
            "SELECT {}, EXISTS (SELECT 1 FROM resource_grants r JOIN user_group_members m ON m.group_id = r.group_id \
             WHERE m.user_id = $2 AND r.resource_type = 'table' AND r.resource_id = t.id) AS granted \
             FROM table_registry t WHERE t.id = $1",
            cols.join(", ")
        ))
        .bind(id)
        .bind(user_id)
        .fetch_optional(self.pool())
        .await?;
        row.map(|r| Ok((from_row(&r)?, super::flag(&r, "granted")?)))
            .transpose()
    }

    /// Every registered table, by id.
    pub async fn list_tables(&self) -> Result<Vec<RegistryRow>, StoreError> {
        super::fetch_vec(
            self,
            sqlx::query(&format!("SELECT {COLUMNS} FROM table_registry ORDER BY id")),
            from_row,
        )
        .await
    }

    /// Deletes a row; returns false when there was none.
    pub async fn delete_table(&self, id: &str) -> Result<bool, StoreError> {
        Ok(sqlx::query("DELETE FROM table_registry WHERE id = $1")
            .bind(id)
            .execute(self.pool())
            .await?
            .rows_affected()
            > 0)
    }

    /// Whether the store holds a table of this name (the internal tables' backing tables are
    /// checked against what the migrations created).
    pub async fn has_table(&self, name: &str) -> Result<bool, StoreError> {
        let sql = match self.backend() {
            crate::Backend::Sqlite => {
                "SELECT COUNT(*) FROM sqlite_master WHERE type IN ('table', 'view') AND name = $1"
            }
            crate::Backend::Postgres => {
                "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = current_schema() AND table_name = $1"
            }
        };
        let n: i64 = sqlx::query_scalar(sql)
            .bind(name)
            .fetch_one(self.pool())
            .await?;
        Ok(n > 0)
    }

    /// Deletes seeded (`internal` query mode) rows whose id is not in `keep`; returns the
    /// ids removed.
    pub async fn prune_internal_tables(&self, keep: &[&str]) -> Result<Vec<String>, StoreError> {
        let mut removed = Vec::new();
        for row in self.list_tables().await? {
            if row.query_mode.is_internal() && !keep.contains(&row.id.as_str()) {
                self.delete_table(&row.id).await?;
                removed.push(row.id);
            }
        }
        Ok(removed)
    }
}
