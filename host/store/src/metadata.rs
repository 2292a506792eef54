//! The persistent metadata cache of remote tables.

use std::collections::HashMap;

use sqlx::Row;
use svc_plugin_api::TableMetadata;

use super::{Store, StoreError};

/// One cached metadata row: what the driver reported, and when.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetadataRow {
    /// The metadata itself.
    pub metadata: TableMetadata,
    /// Last successful refresh.
    pub refreshed_at: Option<String>,
    /// Last failed refresh.
    pub error_at: Option<String>,
    /// What the last failed refresh said.
    pub error: Option<String>,
}

fn json_list(s: Option<String>) -> Vec<String> {
    s.and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or_default()
}

impl Store {
    /// Every cached metadata row, by table id (one read per catalog request).
    pub async fn all_metadata(&self) -> Result<HashMap<String, MetadataRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT table_id, entity_type, rows, size_bytes, partition_by, clustered_by, known_columns, column_types, \
             refreshed_at, error_at, error_msg FROM table_metadata_cache",
        )
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| {
                Ok((
                    r.try_get("table_id")?,
                    MetadataRow {
                        metadata: TableMetadata {
                            entity_type: r.try_get("entity_type")?,
                            rows: r.try_get("rows")?,
                            size_bytes: r.try_get("size_bytes")?,
                            partition_by: r.try_get("partition_by")?,
                            clustered_by: json_list(r.try_get("clustered_by")?),
                            known_columns: json_list(r.try_get("known_columns")?),
                            column_types: json_list(r.try_get("column_types")?),
                        },
                        refreshed_at: r.try_get("refreshed_at")?,
                        error_at: r.try_get("error_at")?,
                        error: r.try_get("error_msg")?,
                    },
                ))
            })
            .collect()
    }

    /// Records a successful refresh of a table's metadata (clearing any earlier error).
    pub async fn save_metadata(&self, table_id: &str, m: &TableMetadata) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO table_metadata_cache (table_id, entity_type, rows, size_bytes, partition_by,              clustered_by, known_columns, column_types, refreshed_at, error_at, error_msg)              VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, NULL, NULL)              ON CONFLICT (table_id) DO UPDATE SET entity_type = excluded.entity_type, rows = excluded.rows,              size_bytes = excluded.size_bytes, partition_by = excluded.partition_by,              clustered_by = excluded.clustered_by, known_columns = excluded.known_columns,              column_types = excluded.column_types, refreshed_at = excluded.refreshed_at, error_at = NULL, error_msg = NULL",
        )
        .bind(table_id)
        .bind(m.entity_type.clone())
        .bind(m.rows)
        .bind(m.size_bytes)
        .bind(m.partition_by.clone())
        .bind(serde_json::to_string(&m.clustered_by).unwrap_or_default())
        .bind(serde_json::to_string(&m.known_columns).unwrap_or_default())
        .bind(serde_json::to_string(&m.column_types).unwrap_or_default())
        .bind(svc_core::clock::now())
        .execute(self.pool())
        .await?;
        Ok(())
    }

    /// Records a failed refresh; earlier metadata is kept (stale beats nothing).
    pub async fn record_metadata_error(
        &self,
        table_id: &str,
        message: &str,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO table_metadata_cache (table_id, error_at, error_msg) VALUES ($1, $2, $3)              ON CONFLICT (table_id) DO UPDATE SET error_at = excluded.error_at, error_msg = excluded.error_msg",
        )
        .bind(table_id)
        .bind(svc_core::clock::now())
        .bind(message.chars().take(200).collect::<String>())
        .execute(self.pool())
        .await?;
        Ok(())
    }

    /// Removes a table's cached metadata (registry changes call this through the flush).
    pub async fn forget_metadata(&self, table_id: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM table_metadata_cache WHERE table_id = $1")
            .bind(table_id)
            .execute(self.pool())
            .await?;
        Ok(())
    }

    /// Table ids granted to any of the user's groups.
    pub async fn granted_table_ids(&self, user_id: &str) -> Result<Vec<String>, StoreError> {
        let rows = sqlx::query(
            "SELECT DISTINCT r.resource_id FROM resource_grants r JOIN user_group_members m ON m.group_id = r.group_id \
             WHERE m.user_id = $1 AND r.resource_type = 'table'",
        )
        .bind(user_id)
        .fetch_all(self.pool())
        .await?;
        Ok(rows
            .iter()
            .map(|r| r.try_get("resource_id"))
            .collect::<Result<_, sqlx::Error>>()?)
    }
}
