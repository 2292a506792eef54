//! Saved views of the observability pages: a name and an opaque JSON payload per
//! administrator. The limits (name length, payload size, views per user) are the caller's
//! to check; [`SaveOutcome::Full`] reports the count limit from inside the transaction that
//! would have crossed it, so two saves at once cannot both slip under it.

use serde::Serialize;
use sqlx::any::AnyRow;
use sqlx::Row;
use svc_core::clock::{new_id, now};

use crate::{Store, StoreError};

/// One saved view.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SavedView {
    /// Its id (kept when the view is saved again under its name).
    pub id: String,
    /// Its name, unique per owner.
    pub name: String,
    /// The payload, as saved.
    pub query: serde_json::Value,
    /// When it was first saved.
    pub created_at: Option<String>,
}

/// What a save did.
#[derive(Debug, Clone, PartialEq)]
pub enum SaveOutcome {
    /// Saved (created, or replaced the payload of the view of that name).
    Saved(SavedView),
    /// The owner already has `limit` views and this name is new.
    Full,
    /// (Update by id) the id names no view of this owner.
    Missing,
}

fn view(r: &AnyRow) -> Result<SavedView, StoreError> {
    let text: String = r.try_get("query_json")?;
    Ok(SavedView {
        id: r.try_get("id")?,
        name: r.try_get("name")?,
        query: serde_json::from_str(&text).unwrap_or(serde_json::Value::Null),
        created_at: r.try_get("created_at")?,
    })
}

impl Store {
    /// An owner's views, newest first.
    pub async fn saved_views(&self, owner: &str) -> Result<Vec<SavedView>, StoreError> {
        crate::fetch_vec(
            self,
            sqlx::query(
                "SELECT id, name, query_json, created_at FROM user_observability_views \
                 WHERE user_id = $1 ORDER BY created_at DESC, id DESC",
            )
            .bind(owner),
            view,
        )
        .await
    }

    /// Saves `query` as the owner's view `name`: the view of that name keeps its id and
    /// creation time; a new name is refused past `limit` views.
    pub async fn save_view(
        &self,
        owner: &str,
        name: &str,
        query: &serde_json::Value,
        limit: i64,
    ) -> Result<SaveOutcome, StoreError> {
        let mut tx = self.begin_write().await?;
        let payload = query.to_string();
        let updated = sqlx::query(
            "UPDATE user_observability_views SET query_json = $1 WHERE user_id = $2 AND name = $3",
        )
        .bind(&payload)
        .bind(owner)
        .bind(name)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if updated == 0 {
            let count: i64 = sqlx::query(
                "SELECT COUNT(*) AS n FROM user_observability_views WHERE user_id = $1",
            )
            .bind(owner)
            .fetch_one(&mut *tx)
            .await?
            .try_get("n")?;
            if count >= limit {
                return Ok(SaveOutcome::Full);
            }
            sqlx::query(
                "INSERT INTO user_observability_views (id, user_id, name, query_json, created_at) \
                 VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(new_id())
            .bind(owner)
            .bind(name)
            .bind(&payload)
            .bind(now())
            .execute(&mut *tx)
            .await?;
        }
        let saved = sqlx::query(
            "SELECT id, name, query_json, created_at FROM user_observability_views \
             WHERE user_id = $1 AND name = $2",
        )
        .bind(owner)
        .bind(name)
        .fetch_one(&mut *tx)
        .await?;
        let saved = view(&saved)?;
        tx.commit().await?;
        Ok(SaveOutcome::Saved(saved))
    }

    /// Renames and replaces the payload of the owner's view `id`. A name another of the
    /// owner's views has is a unique violation (the caller's 409).
    pub async fn update_view(
        &self,
        owner: &str,
        id: &str,
        name: &str,
        query: &serde_json::Value,
    ) -> Result<SaveOutcome, StoreError> {
        let updated = sqlx::query(
            "UPDATE user_observability_views SET name = $1, query_json = $2 \
             WHERE id = $3 AND user_id = $4",
        )
        .bind(name)
        .bind(query.to_string())
        .bind(id)
        .bind(owner)
        .execute(self.pool())
        .await?
        .rows_affected();
        if updated == 0 {
            return Ok(SaveOutcome::Missing);
        }
        let row = sqlx::query(
            "SELECT id, name, query_json, created_at FROM user_observability_views WHERE id = $1",
        )
        .bind(id)
        .fetch_one(self.pool())
        .await?;
        Ok(SaveOutcome::Saved(view(&row)?))
    }

    /// Deletes the owner's view `id`; false when the owner has no such view.
    pub async fn delete_view(&self, owner: &str, id: &str) -> Result<bool, StoreError> {
        Ok(
            sqlx::query("DELETE FROM user_observability_views WHERE id = $1 AND user_id = $2")
                .bind(id)
                .bind(owner)
                .execute(self.pool())
                .await?
                .rows_affected()
                > 0,
        )
    }
}
