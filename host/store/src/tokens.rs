//! Personal access tokens: only a hash of each token is stored.

use sqlx::any::AnyRow;
use sqlx::Row;
use svc_core::clock::now;

use super::{Store, StoreError};

/// A stored personal access token (never the token itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatRow {
    /// Token id; also the JWT `jti`.
    pub id: String,
    /// Owner.
    pub user_id: String,
    /// Owner-chosen label.
    pub name: String,
    /// Hex SHA-256 of the whole token.
    pub token_hash: String,
    /// Short non-secret prefix shown in listings.
    pub prefix: String,
    /// Creation time.
    pub created_at: Option<String>,
    /// Expiry (None = never); authoritative over the JWT's own `exp`.
    pub expires_at: Option<String>,
    /// Last authenticated use (updated at most once a minute).
    pub last_used_at: Option<String>,
    /// Address of the last use.
    pub last_used_ip: Option<String>,
    /// Set when revoked; the row is kept.
    pub revoked_at: Option<String>,
}

const COLUMNS: &str =
    "id, user_id, name, token_hash, prefix, created_at, expires_at, last_used_at, last_used_ip, revoked_at";

fn from_row(r: &AnyRow) -> Result<PatRow, StoreError> {
    Ok(PatRow {
        id: r.try_get("id")?,
        user_id: r.try_get("user_id")?,
        name: r.try_get("name")?,
        token_hash: r.try_get("token_hash")?,
        prefix: r.try_get("prefix")?,
        created_at: r.try_get("created_at")?,
        expires_at: r.try_get("expires_at")?,
        last_used_at: r.try_get("last_used_at")?,
        last_used_ip: r.try_get("last_used_ip")?,
        revoked_at: r.try_get("revoked_at")?,
    })
}

impl Store {
    /// Stores a new token row.
    pub async fn insert_pat(&self, row: &PatRow) -> Result<(), StoreError> {
        sqlx::query(&format!(
            "INSERT INTO personal_access_tokens ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
        ))
        .bind(&row.id)
        .bind(&row.user_id)
        .bind(&row.name)
        .bind(&row.token_hash)
        .bind(&row.prefix)
        .bind(&row.created_at)
        .bind(&row.expires_at)
        .bind(&row.last_used_at)
        .bind(&row.last_used_ip)
        .bind(&row.revoked_at)
        .execute(self.pool())
        .await?;
        Ok(())
    }

    /// Looks a token up by id.
    pub async fn pat_by_id(&self, id: &str) -> Result<Option<PatRow>, StoreError> {
        super::fetch_opt(
            self,
            sqlx::query(&format!(
                "SELECT {COLUMNS} FROM personal_access_tokens WHERE id = $1"
            ))
            .bind(id),
            from_row,
        )
        .await
    }

    /// A user's tokens, newest first, revoked ones included.
    pub async fn pats_of_user(&self, user_id: &str) -> Result<Vec<PatRow>, StoreError> {
        super::fetch_vec(self, sqlx::query(&format!(
            "SELECT {COLUMNS} FROM personal_access_tokens WHERE user_id = $1 ORDER BY created_at DESC"
        ))
        .bind(user_id), from_row).await
    }

    /// Marks a token revoked (keeps the row).
    pub async fn revoke_pat(&self, id: &str) -> Result<(), StoreError> {
        sqlx::query("UPDATE personal_access_tokens SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL")
            .bind(now())
            .bind(id)
            .execute(self.pool())
            .await?;
        Ok(())
    }

    /// Records a use of a token.
    pub async fn touch_pat(&self, id: &str, ip: Option<&str>) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE personal_access_tokens SET last_used_at = $1, last_used_ip = $2 WHERE id = $3",
        )
        .bind(now())
        .bind(ip)
        .bind(id)
        .execute(self.pool())
        .await?;
        Ok(())
    }
}
