//! Personal access tokens: only a hash of each token is stored.

use sqlx::any::AnyRow;
use sqlx::Row;
use svc_core::clock::now;

use super::{Store, StoreError};
use crate::clause::{bound, Where};

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

/// A token with its owner's e-mail, as administrators list every user's tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnedPat {
    /// The token row.
    pub pat: PatRow,
    /// The owner's e-mail; `None` when the owner no longer exists.
    pub owner_email: Option<String>,
}

/// One page of [`Store::list_pats`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatPage {
    /// Tokens, newest first (ties by id).
    pub tokens: Vec<OwnedPat>,
    /// Tokens matching the filter on every page.
    pub total: i64,
}

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

    /// Every user's tokens (or only those of the user with e-mail `owner_email`), newest
    /// first, revoked ones included.
    pub async fn list_pats(
        &self,
        owner_email: Option<&str>,
        limit: u32,
        offset: u64,
    ) -> Result<PatPage, StoreError> {
        let mut w = Where::new();
        if let Some(email) = owner_email {
            w.push("u.email = $?", email.to_owned());
        }
        let from = format!(
            "FROM personal_access_tokens t LEFT JOIN users u ON u.id = t.user_id{}",
            w.sql
        );
        let total: i64 = bound(&format!("SELECT COUNT(*) AS n {from}"), &w.binds)
            .fetch_one(self.pool())
            .await?
            .try_get("n")?;
        let columns = COLUMNS
            .split(", ")
            .map(|c| format!("t.{c}"))
            .collect::<Vec<_>>()
            .join(", ");
        let sql = format!(
            "SELECT {columns}, u.email AS owner_email {from} \
             ORDER BY t.created_at DESC, t.id LIMIT {limit} OFFSET {offset}"
        );
        let rows = bound(&sql, &w.binds).fetch_all(self.pool()).await?;
        let tokens = rows
            .iter()
            .map(|r| {
                Ok(OwnedPat {
                    pat: from_row(r)?,
                    owner_email: r.try_get("owner_email")?,
                })
            })
            .collect::<Result<_, StoreError>>()?;
        Ok(PatPage { tokens, total })
    }

    /// Marks a token revoked (keeps the row); false when it already was.
    pub async fn revoke_pat(&self, id: &str) -> Result<bool, StoreError> {
        let done = sqlx::query("UPDATE personal_access_tokens SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL")
            .bind(now())
            .bind(id)
            .execute(self.pool())
            .await?;
        Ok(done.rows_affected() > 0)
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

#[cfg(test)]
mod tests {
    use super::PatRow;
    use crate::testing;

    fn pat(id: &str, user_id: &str, created_at: &str) -> PatRow {
        PatRow {
            id: id.into(),
            user_id: user_id.into(),
            name: format!("name-{id}"),
            token_hash: format!("hash-{id}"),
            prefix: id.chars().take(8).collect(),
            created_at: Some(created_at.into()),
            expires_at: None,
            last_used_at: None,
            last_used_ip: None,
            revoked_at: None,
        }
    }

    /// Administrators' listing: every owner's tokens newest first, ties by id, filtered by
    /// the owner's exact e-mail, paged, with the count of every page — on both backends.
    #[tokio::test]
    async fn list_pats_filters_by_owner_and_pages_on_both_backends() {
        for (store, _dir) in testing::all_backends().await {
            let a = store
                .create_user("a@example.com", None, None)
                .await
                .unwrap();
            let b = store
                .create_user("b@example.com", None, None)
                .await
                .unwrap();
            for row in [
                pat("t1", &a.id, "2026-01-01T00:00:00Z"),
                pat("t3", &b.id, "2026-01-03T00:00:00Z"),
                pat("t2", &a.id, "2026-01-03T00:00:00Z"),
                pat("t4", &a.id, "2026-01-04T00:00:00Z"),
            ] {
                store.insert_pat(&row).await.unwrap();
            }
            assert!(store.revoke_pat("t1").await.unwrap());
            assert!(!store.revoke_pat("t1").await.unwrap(), "already revoked");
            let ids = |page: &super::PatPage| {
                page.tokens
                    .iter()
                    .map(|t| t.pat.id.clone())
                    .collect::<Vec<_>>()
            };
            let all = store.list_pats(None, 10, 0).await.unwrap();
            assert_eq!(ids(&all), ["t4", "t2", "t3", "t1"]);
            assert_eq!(all.total, 4);
            assert_eq!(all.tokens[2].owner_email.as_deref(), Some("b@example.com"));
            assert!(
                all.tokens[3].pat.revoked_at.is_some(),
                "revoked ones listed"
            );
            let mine = store.list_pats(Some("a@example.com"), 2, 1).await.unwrap();
            assert_eq!(
                (ids(&mine), mine.total),
                (vec!["t2".into(), "t1".into()], 3)
            );
            let nobody = store.list_pats(Some("A@example.com"), 10, 0).await.unwrap();
            assert_eq!((nobody.tokens.len(), nobody.total), (0, 0), "exact e-mail");
        }
    }
}
