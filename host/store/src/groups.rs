//! Groups, memberships and resource grants.

use std::collections::HashMap;

use sqlx::any::AnyRow;
use sqlx::Row;
use svc_core::clock::{new_id, now};

use super::users::{ADMIN_GROUP, EVERYONE_GROUP};
use super::{flag, Store, StoreError};
use crate::clause::{bound, Where};

/// A user group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// Identifier.
    pub id: String,
    /// Unique name.
    pub name: String,
    /// Free text.
    pub description: Option<String>,
    /// System groups (`Admin`, `Everyone`) cannot be renamed or deleted.
    pub is_system: bool,
    /// Creation time.
    pub created_at: Option<String>,
    /// Who created it (an e-mail, or `system:seed`).
    pub created_by: Option<String>,
}

/// A user's membership in a group, joined with the user.
#[derive(Debug, Clone)]
pub struct Member {
    /// The member's id.
    pub user_id: String,
    /// The member's e-mail (None when the user row is gone).
    pub email: Option<String>,
    /// The member's name.
    pub name: Option<String>,
    /// How the membership came to be (`admin`, `system_seed`, `console`).
    pub source: String,
    /// When it was added.
    pub added_at: Option<String>,
    /// Who added it.
    pub added_by: Option<String>,
}

/// A grant of one resource to one group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// Identifier.
    pub id: String,
    /// The group holding the grant.
    pub group_id: String,
    /// The group's name.
    pub group_name: Option<String>,
    /// Resource kind; `table` today.
    pub resource_type: String,
    /// The resource (a table id).
    pub resource_id: String,
    /// When it was granted.
    pub assigned_at: Option<String>,
    /// Who granted it.
    pub assigned_by: Option<String>,
}

const GROUP_COLUMNS: &str = "id, name, description, is_system, created_at, created_by";

fn group_from_row(r: &AnyRow) -> Result<Group, StoreError> {
    Ok(Group {
        id: r.try_get("id")?,
        name: r.try_get("name")?,
        description: r.try_get("description")?,
        is_system: flag(r, "is_system")?,
        created_at: r.try_get("created_at")?,
        created_by: r.try_get("created_by")?,
    })
}

fn grant_from_row(r: &AnyRow) -> Result<Grant, StoreError> {
    Ok(Grant {
        id: r.try_get("id")?,
        group_id: r.try_get("group_id")?,
        group_name: r.try_get("group_name")?,
        resource_type: r.try_get("resource_type")?,
        resource_id: r.try_get("resource_id")?,
        assigned_at: r.try_get("assigned_at")?,
        assigned_by: r.try_get("assigned_by")?,
    })
}

const GRANT_SELECT: &str = "SELECT r.id, r.group_id, g.name AS group_name, r.resource_type, r.resource_id, \
     r.assigned_at, r.assigned_by FROM resource_grants r LEFT JOIN user_groups g ON g.id = r.group_id";

impl Store {
    /// Seeds `Admin` and `Everyone` idempotently; a same-named custom group is promoted.
    pub async fn seed_system_groups(&self) -> Result<(), StoreError> {
        for (name, description) in [
            (
                ADMIN_GROUP,
                "System: full access to all data and admin actions",
            ),
            (
                EVERYONE_GROUP,
                "System: a label group; membership is explicit",
            ),
        ] {
            match self.group_by_name(name).await? {
                Some(g) if g.is_system => {}
                Some(g) => {
                    sqlx::query("UPDATE user_groups SET is_system = $1 WHERE id = $2")
                        .bind(true)
                        .bind(&g.id)
                        .execute(self.pool())
                        .await?;
                }
                None => {
                    self.insert_group(name, Some(description), true, "system:seed")
                        .await?;
                }
            }
        }
        Ok(())
    }

    async fn insert_group(
        &self,
        name: &str,
        description: Option<&str>,
        is_system: bool,
        created_by: &str,
    ) -> Result<Group, StoreError> {
        let id = new_id();
        sqlx::query(
            "INSERT INTO user_groups (id, name, description, is_system, created_at, created_by) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(&id)
        .bind(name)
        .bind(description)
        .bind(is_system)
        .bind(now())
        .bind(created_by)
        .execute(self.pool())
        .await?;
        Ok(self.group_by_id(&id).await?.expect("just inserted"))
    }

    /// Creates a custom group; fails on a duplicate name.
    pub async fn create_group(
        &self,
        name: &str,
        description: Option<&str>,
        created_by: &str,
    ) -> Result<Group, StoreError> {
        self.insert_group(name, description, false, created_by)
            .await
    }

    /// Looks a group up by id.
    pub async fn group_by_id(&self, id: &str) -> Result<Option<Group>, StoreError> {
        super::fetch_opt(
            self,
            sqlx::query(&format!(
                "SELECT {GROUP_COLUMNS} FROM user_groups WHERE id = $1"
            ))
            .bind(id),
            group_from_row,
        )
        .await
    }

    /// Looks a group up by its unique name.
    pub async fn group_by_name(&self, name: &str) -> Result<Option<Group>, StoreError> {
        super::fetch_opt(
            self,
            sqlx::query(&format!(
                "SELECT {GROUP_COLUMNS} FROM user_groups WHERE name = $1"
            ))
            .bind(name),
            group_from_row,
        )
        .await
    }

    /// Every group, system groups first, then by name.
    pub async fn list_groups(&self) -> Result<Vec<Group>, StoreError> {
        super::fetch_vec(
            self,
            sqlx::query(&format!(
                "SELECT {GROUP_COLUMNS} FROM user_groups ORDER BY is_system DESC, name"
            )),
            group_from_row,
        )
        .await
    }

    /// The groups a user belongs to, system groups first.
    pub async fn groups_of_user(&self, user_id: &str) -> Result<Vec<Group>, StoreError> {
        super::fetch_vec(
            self,
            sqlx::query(
                "SELECT g.id, g.name, g.description, g.is_system, g.created_at, g.created_by \
             FROM user_groups g JOIN user_group_members m ON m.group_id = g.id \
             WHERE m.user_id = $1 ORDER BY g.is_system DESC, g.name",
            )
            .bind(user_id),
            group_from_row,
        )
        .await
    }

    /// The group names of each of `user_ids`, system groups first (users in no group are
    /// absent): one statement for a page of users.
    pub async fn group_names_of_users(
        &self,
        user_ids: &[String],
    ) -> Result<HashMap<String, Vec<String>>, StoreError> {
        let mut out: HashMap<String, Vec<String>> = HashMap::new();
        if user_ids.is_empty() {
            return Ok(out);
        }
        let mut w = Where::new();
        w.push_in("m.user_id", user_ids);
        let sql = format!(
            "SELECT m.user_id, g.name FROM user_group_members m \
             JOIN user_groups g ON g.id = m.group_id{} ORDER BY m.user_id, g.is_system DESC, g.name",
            w.sql
        );
        for r in bound(&sql, &w.binds).fetch_all(self.pool()).await? {
            out.entry(r.try_get("user_id")?)
                .or_default()
                .push(r.try_get("name")?);
        }
        Ok(out)
    }

    /// Updates a group's name and/or description.
    pub async fn update_group(
        &self,
        id: &str,
        name: Option<&str>,
        description: Option<Option<&str>>,
    ) -> Result<(), StoreError> {
        if let Some(name) = name {
            sqlx::query("UPDATE user_groups SET name = $1 WHERE id = $2")
                .bind(name)
                .bind(id)
                .execute(self.pool())
                .await?;
        }
        if let Some(description) = description {
            sqlx::query("UPDATE user_groups SET description = $1 WHERE id = $2")
                .bind(description)
                .bind(id)
                .execute(self.pool())
                .await?;
        }
        Ok(())
    }

    /// Deletes a group with its memberships and grants, in one transaction.
    pub async fn delete_group(&self, id: &str) -> Result<(), StoreError> {
        let mut tx = self.begin_write().await?;
        for sql in [
            "DELETE FROM user_group_members WHERE group_id = $1",
            "DELETE FROM resource_grants WHERE group_id = $1",
            "DELETE FROM user_groups WHERE id = $1",
        ] {
            sqlx::query(sql).bind(id).execute(&mut *tx).await?;
        }
        Ok(tx.commit().await?)
    }

    /// Number of members of a group.
    pub async fn count_members(&self, group_id: &str) -> Result<i64, StoreError> {
        sqlx::query("SELECT COUNT(*) AS n FROM user_group_members WHERE group_id = $1")
            .bind(group_id)
            .fetch_one(self.pool())
            .await?
            .try_get("n")
            .map_err(StoreError::from)
    }

    /// Members of a group, by e-mail.
    pub async fn members(&self, group_id: &str) -> Result<Vec<Member>, StoreError> {
        let rows = sqlx::query(
            "SELECT m.user_id, u.email, u.name, m.source, m.added_at, m.added_by \
             FROM user_group_members m LEFT JOIN users u ON u.id = m.user_id \
             WHERE m.group_id = $1 ORDER BY u.email",
        )
        .bind(group_id)
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| {
                Ok(Member {
                    user_id: r.try_get("user_id")?,
                    email: r.try_get("email")?,
                    name: r.try_get("name")?,
                    source: r.try_get("source")?,
                    added_at: r.try_get("added_at")?,
                    added_by: r.try_get("added_by")?,
                })
            })
            .collect()
    }

    /// The first `n` members' e-mails (or ids, for a member whose user is gone), by e-mail.
    pub async fn first_members(&self, group_id: &str, n: u32) -> Result<Vec<String>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT COALESCE(u.email, m.user_id) AS who FROM user_group_members m \
             LEFT JOIN users u ON u.id = m.user_id WHERE m.group_id = $1 ORDER BY who LIMIT {n}"
        ))
        .bind(group_id)
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| r.try_get("who").map_err(StoreError::from))
            .collect()
    }

    /// Adds a membership; returns false when it already existed (the original is kept).
    pub async fn add_member(
        &self,
        group_id: &str,
        user_id: &str,
        source: &str,
        added_by: &str,
    ) -> Result<bool, StoreError> {
        let n = sqlx::query(
            "INSERT INTO user_group_members (user_id, group_id, source, added_at, added_by) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (user_id, group_id) DO NOTHING",
        )
        .bind(user_id)
        .bind(group_id)
        .bind(source)
        .bind(now())
        .bind(added_by)
        .execute(self.pool())
        .await?
        .rows_affected();
        Ok(n > 0)
    }

    /// Removes a membership; taking the last active admin out of the `Admin` group is
    /// refused, with the check and the change in one transaction.
    pub async fn remove_member(
        &self,
        group_id: &str,
        user_id: &str,
    ) -> Result<super::users::Guarded, StoreError> {
        use super::users::{is_last_active_admin, lock_admin_group, Guarded};
        let mut tx = self.begin_write().await?;
        lock_admin_group(&mut tx).await?;
        let is_admin_group =
            sqlx::query("SELECT 1 AS one FROM user_groups WHERE id = $1 AND name = $2")
                .bind(group_id)
                .bind(ADMIN_GROUP)
                .fetch_optional(&mut *tx)
                .await?
                .is_some();
        if is_admin_group && is_last_active_admin(&mut tx, user_id).await? {
            // Ended here, not on drop: a dropped transaction holds SQLite's write lock
            // until its connection is next used.
            tx.rollback().await?;
            return Ok(Guarded::LastAdmin);
        }
        let n = sqlx::query("DELETE FROM user_group_members WHERE group_id = $1 AND user_id = $2")
            .bind(group_id)
            .bind(user_id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        tx.commit().await?;
        Ok(if n > 0 {
            Guarded::Applied
        } else {
            Guarded::Missing
        })
    }

    /// Number of grants a group holds.
    pub async fn count_grants(&self, group_id: &str) -> Result<i64, StoreError> {
        sqlx::query("SELECT COUNT(*) AS n FROM resource_grants WHERE group_id = $1")
            .bind(group_id)
            .fetch_one(self.pool())
            .await?
            .try_get("n")
            .map_err(StoreError::from)
    }

    /// Grants, optionally filtered by group and resource type.
    pub async fn list_grants(
        &self,
        group_id: Option<&str>,
        resource_type: Option<&str>,
    ) -> Result<Vec<Grant>, StoreError> {
        super::fetch_vec(self, sqlx::query(&format!(
            "{GRANT_SELECT} WHERE ($1 IS NULL OR r.group_id = $1) AND ($2 IS NULL OR r.resource_type = $2) \
             ORDER BY g.name, r.resource_type, r.resource_id"
        ))
        .bind(group_id)
        .bind(resource_type), grant_from_row).await
    }

    /// Looks a grant up by id.
    pub async fn grant_by_id(&self, id: &str) -> Result<Option<Grant>, StoreError> {
        super::fetch_opt(
            self,
            sqlx::query(&format!("{GRANT_SELECT} WHERE r.id = $1")).bind(id),
            grant_from_row,
        )
        .await
    }

    /// Looks a grant up by its natural key.
    pub async fn find_grant(
        &self,
        group_id: &str,
        resource_type: &str,
        resource_id: &str,
    ) -> Result<Option<Grant>, StoreError> {
        super::fetch_opt(
            self,
            sqlx::query(&format!(
            "{GRANT_SELECT} WHERE r.group_id = $1 AND r.resource_type = $2 AND r.resource_id = $3"
        ))
            .bind(group_id)
            .bind(resource_type)
            .bind(resource_id),
            grant_from_row,
        )
        .await
    }

    /// Creates a grant; fails on a duplicate (unique constraint).
    pub async fn create_grant(
        &self,
        group_id: &str,
        resource_type: &str,
        resource_id: &str,
        assigned_by: &str,
    ) -> Result<Grant, StoreError> {
        let id = new_id();
        sqlx::query(
            "INSERT INTO resource_grants (id, group_id, resource_type, resource_id, assigned_at, assigned_by) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(&id)
        .bind(group_id)
        .bind(resource_type)
        .bind(resource_id)
        .bind(now())
        .bind(assigned_by)
        .execute(self.pool())
        .await?;
        Ok(self.grant_by_id(&id).await?.expect("just inserted"))
    }

    /// Deletes a grant; returns false when it did not exist.
    pub async fn delete_grant(&self, id: &str) -> Result<bool, StoreError> {
        Ok(sqlx::query("DELETE FROM resource_grants WHERE id = $1")
            .bind(id)
            .execute(self.pool())
            .await?
            .rows_affected()
            > 0)
    }
}
