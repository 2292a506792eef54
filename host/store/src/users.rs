//! Users, and the admin question (membership in the `Admin` group).

use sqlx::any::AnyRow;
use sqlx::Row;
use svc_core::clock::{new_id, now};

use super::{flag, Store, StoreError};
use crate::clause::{bound, like_literal, Where};

/// Name of the system group whose members are administrators.
pub const ADMIN_GROUP: &str = "Admin";
/// Name of the system label group.
pub const EVERYONE_GROUP: &str = "Everyone";

/// A stored user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// Stable identifier (UUID).
    pub id: String,
    /// Unique e-mail address; matched exactly.
    pub email: String,
    /// Display name.
    pub name: Option<String>,
    /// argon2 PHC string; None for passwordless users (token-only).
    pub password_hash: Option<String>,
    /// Deactivated users cannot authenticate.
    pub active: bool,
    /// When the user was created.
    pub created_at: Option<String>,
    /// When the user was deactivated, if they are.
    pub deactivated_at: Option<String>,
}

const COLUMNS: &str = "id, email, name, password_hash, active, created_at, deactivated_at";

fn from_row(r: &AnyRow) -> Result<User, StoreError> {
    Ok(User {
        id: r.try_get("id")?,
        email: r.try_get("email")?,
        name: r.try_get("name")?,
        password_hash: r.try_get("password_hash")?,
        active: flag(r, "active")?,
        created_at: r.try_get("created_at")?,
        deactivated_at: r.try_get("deactivated_at")?,
    })
}

/// Everything authentication needs about a token's user, read in one query.
#[derive(Debug, Clone)]
pub struct Identity {
    /// The user.
    pub user: User,
    /// Member of the `Admin` group.
    pub is_admin: bool,
    /// The personal access token row, when one was asked for and exists.
    pub pat: Option<super::tokens::PatRow>,
}

impl Store {
    /// The user, their admin flag and (optionally) one of their PAT rows, in one round trip:
    /// this runs on every authenticated request.
    pub async fn identity(
        &self,
        user_id: &str,
        pat_id: Option<&str>,
    ) -> Result<Option<Identity>, StoreError> {
        let row = sqlx::query(
            "SELECT u.id, u.email, u.name, u.password_hash, u.active, u.created_at, u.deactivated_at, \
             EXISTS (SELECT 1 FROM user_group_members m JOIN user_groups g ON g.id = m.group_id \
                     WHERE m.user_id = u.id AND g.name = $3) AS is_admin, \
             p.id AS p_id, p.user_id AS p_user_id, p.name AS p_name, p.token_hash AS p_token_hash, \
             p.prefix AS p_prefix, p.created_at AS p_created_at, p.expires_at AS p_expires_at, \
             p.last_used_at AS p_last_used_at, p.last_used_ip AS p_last_used_ip, p.revoked_at AS p_revoked_at \
             FROM users u LEFT JOIN personal_access_tokens p ON p.id = $2 WHERE u.id = $1",
        )
        .bind(user_id)
        .bind(pat_id)
        .bind(ADMIN_GROUP)
        .fetch_optional(self.pool())
        .await?;
        let Some(r) = row else { return Ok(None) };
        let pat = match r.try_get::<Option<String>, _>("p_id")? {
            None => None,
            Some(id) => Some(super::tokens::PatRow {
                id,
                user_id: r.try_get("p_user_id")?,
                name: r.try_get("p_name")?,
                token_hash: r.try_get("p_token_hash")?,
                prefix: r.try_get("p_prefix")?,
                created_at: r.try_get("p_created_at")?,
                expires_at: r.try_get("p_expires_at")?,
                last_used_at: r.try_get("p_last_used_at")?,
                last_used_ip: r.try_get("p_last_used_ip")?,
                revoked_at: r.try_get("p_revoked_at")?,
            }),
        };
        Ok(Some(Identity {
            user: from_row(&r)?,
            is_admin: flag(&r, "is_admin")?,
            pat,
        }))
    }

    /// Creates a user; fails on a duplicate e-mail (unique constraint).
    pub async fn create_user(
        &self,
        email: &str,
        name: Option<&str>,
        password_hash: Option<&str>,
    ) -> Result<User, StoreError> {
        let id = new_id();
        let ts = now();
        sqlx::query(
            "INSERT INTO users (id, email, name, password_hash, active, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $6)",
        )
        .bind(&id)
        .bind(email)
        .bind(name)
        .bind(password_hash)
        .bind(true)
        .bind(&ts)
        .execute(self.pool())
        .await?;
        Ok(self.user_by_id(&id).await?.expect("just inserted"))
    }

    /// Looks a user up by id.
    pub async fn user_by_id(&self, id: &str) -> Result<Option<User>, StoreError> {
        super::fetch_opt(
            self,
            sqlx::query(&format!("SELECT {COLUMNS} FROM users WHERE id = $1")).bind(id),
            from_row,
        )
        .await
    }

    /// Looks a user up by exact e-mail.
    pub async fn user_by_email(&self, email: &str) -> Result<Option<User>, StoreError> {
        super::fetch_opt(
            self,
            sqlx::query(&format!("SELECT {COLUMNS} FROM users WHERE email = $1")).bind(email),
            from_row,
        )
        .await
    }

    /// Every user, by e-mail.
    pub async fn list_users(&self) -> Result<Vec<User>, StoreError> {
        super::fetch_vec(
            self,
            sqlx::query(&format!("SELECT {COLUMNS} FROM users ORDER BY email")),
            from_row,
        )
        .await
    }

    /// A page of users by e-mail, those whose e-mail or name contains `text` (any case) when
    /// given, and how many match on every page.
    pub async fn users_page(
        &self,
        text: Option<&str>,
        limit: u32,
        offset: u64,
    ) -> Result<(Vec<User>, i64), StoreError> {
        let mut w = Where::new();
        if let Some(text) = text.filter(|t| !t.is_empty()) {
            w.push(
                "(LOWER(email) LIKE $? ESCAPE '\\' OR LOWER(COALESCE(name, '')) LIKE $? ESCAPE '\\')",
                format!("%{}%", like_literal(&text.to_lowercase())),
            );
        }
        let total: i64 = bound(
            &format!("SELECT COUNT(*) AS n FROM users{}", w.sql),
            &w.binds,
        )
        .fetch_one(self.pool())
        .await?
        .try_get("n")?;
        let sql = format!(
            "SELECT {COLUMNS} FROM users{} ORDER BY email LIMIT {limit} OFFSET {offset}",
            w.sql
        );
        let rows = bound(&sql, &w.binds).fetch_all(self.pool()).await?;
        let users = rows.iter().map(from_row).collect::<Result<_, _>>()?;
        Ok((users, total))
    }

    /// Number of users (0 on a fresh store).
    pub async fn count_users(&self) -> Result<i64, StoreError> {
        sqlx::query("SELECT COUNT(*) AS n FROM users")
            .fetch_one(self.pool())
            .await?
            .try_get("n")
            .map_err(StoreError::from)
    }

    /// Renames a user.
    pub async fn set_user_name(&self, id: &str, name: Option<&str>) -> Result<(), StoreError> {
        sqlx::query("UPDATE users SET name = $1, updated_at = $2 WHERE id = $3")
            .bind(name)
            .bind(now())
            .bind(id)
            .execute(self.pool())
            .await?;
        Ok(())
    }

    /// Sets or clears a user's password hash.
    pub async fn set_password_hash(&self, id: &str, hash: Option<&str>) -> Result<(), StoreError> {
        sqlx::query("UPDATE users SET password_hash = $1, updated_at = $2 WHERE id = $3")
            .bind(hash)
            .bind(now())
            .bind(id)
            .execute(self.pool())
            .await?;
        Ok(())
    }

    /// Activates or deactivates a user; deactivating the last active admin is refused, with
    /// the check and the change in one transaction (see [`is_last_active_admin`]).
    pub async fn set_user_active(
        &self,
        id: &str,
        active: bool,
        by: Option<&str>,
    ) -> Result<Guarded, StoreError> {
        let ts = now();
        let (at, by) = if active {
            (None, None)
        } else {
            (Some(ts.as_str()), by)
        };
        let mut tx = self.begin_write().await?;
        if !active && is_last_active_admin(&mut tx, id).await? {
            // Ended here, not on drop: a dropped transaction holds SQLite's write lock
            // until its connection is next used.
            tx.rollback().await?;
            return Ok(Guarded::LastAdmin);
        }
        let n = sqlx::query(
            "UPDATE users SET active = $1, deactivated_at = $2, deactivated_by = $3, updated_at = $4 WHERE id = $5",
        )
        .bind(active)
        .bind(at)
        .bind(by)
        .bind(&ts)
        .bind(id)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        tx.commit().await?;
        Ok(Guarded::applied_if(n > 0))
    }

    /// Deletes a user and their memberships and tokens, in one transaction; the last active
    /// admin is refused.
    pub async fn delete_user(&self, id: &str) -> Result<Guarded, StoreError> {
        let mut tx = self.begin_write().await?;
        if is_last_active_admin(&mut tx, id).await? {
            // Ended here, not on drop: a dropped transaction holds SQLite's write lock
            // until its connection is next used.
            tx.rollback().await?;
            return Ok(Guarded::LastAdmin);
        }
        for sql in [
            "DELETE FROM user_group_members WHERE user_id = $1",
            "DELETE FROM personal_access_tokens WHERE user_id = $1",
        ] {
            sqlx::query(sql).bind(id).execute(&mut *tx).await?;
        }
        let n = sqlx::query("DELETE FROM users WHERE id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        tx.commit().await?;
        Ok(Guarded::applied_if(n > 0))
    }

    /// Whether the user is a member of the `Admin` group. A missing group denies everyone.
    pub async fn is_admin(&self, user_id: &str) -> Result<bool, StoreError> {
        Ok(sqlx::query(
            "SELECT 1 AS one FROM user_group_members m JOIN user_groups g ON g.id = m.group_id \
             WHERE m.user_id = $1 AND g.name = $2",
        )
        .bind(user_id)
        .bind(ADMIN_GROUP)
        .fetch_optional(self.pool())
        .await?
        .is_some())
    }

    /// Active members of the `Admin` group (the last-admin guard counts these).
    pub async fn count_active_admins(&self) -> Result<i64, StoreError> {
        sqlx::query(
            "SELECT COUNT(DISTINCT u.id) AS n FROM users u \
             JOIN user_group_members m ON m.user_id = u.id \
             JOIN user_groups g ON g.id = m.group_id \
             WHERE g.name = $1 AND u.active = $2",
        )
        .bind(ADMIN_GROUP)
        .bind(true)
        .fetch_one(self.pool())
        .await?
        .try_get("n")
        .map_err(StoreError::from)
    }
}

/// What a change that could leave the store without an active admin did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Guarded {
    /// The change was made.
    Applied,
    /// Nothing matched: no such user, or no such membership.
    Missing,
    /// Refused: the user is the last active admin.
    LastAdmin,
}

impl Guarded {
    fn applied_if(changed: bool) -> Self {
        if changed {
            Self::Applied
        } else {
            Self::Missing
        }
    }
}

/// Inside a transaction about to remove an admin (deactivate, delete, or take out of the
/// `Admin` group): whether `user_id` is the last active one.
///
/// It first writes the `Admin` group's row, which serialises every such transaction (a row
/// lock on PostgreSQL, the write lock on SQLite). The count after it therefore sees every
/// change committed before, so two admins removing each other at the same moment cannot
/// both pass: the second sees the first's change and is refused.
/// Takes the write lock the last-admin guard serialises on (the `Admin` group row). It must be
/// a transaction's first statement: on SQLite a transaction that reads and only then writes
/// fails at once (`SQLITE_BUSY_SNAPSHOT`, no busy wait) when another connection committed in
/// between — the audit writer commits all the time.
pub(super) async fn lock_admin_group(tx: &mut sqlx::AnyConnection) -> Result<(), StoreError> {
    sqlx::query("UPDATE user_groups SET name = name WHERE name = $1")
        .bind(ADMIN_GROUP)
        .execute(&mut *tx)
        .await?;
    Ok(())
}

pub(super) async fn is_last_active_admin(
    tx: &mut sqlx::AnyConnection,
    user_id: &str,
) -> Result<bool, StoreError> {
    lock_admin_group(tx).await?;
    let row = sqlx::query(
        "SELECT \
           COUNT(DISTINCT CASE WHEN u.id = $3 THEN u.id END) AS target, \
           COUNT(DISTINCT CASE WHEN u.id <> $3 THEN u.id END) AS others \
         FROM users u \
         JOIN user_group_members m ON m.user_id = u.id \
         JOIN user_groups g ON g.id = m.group_id \
         WHERE g.name = $1 AND u.active = $2",
    )
    .bind(ADMIN_GROUP)
    .bind(true)
    .bind(user_id)
    .fetch_one(&mut *tx)
    .await?;
    let target: i64 = row.try_get("target")?;
    let others: i64 = row.try_get("others")?;
    Ok(target > 0 && others == 0)
}
