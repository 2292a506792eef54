//! Administrative operations on users, groups and grants, shared by the HTTP API and the
//! `svc-server` shell commands so both apply the same guards and write the same audit rows.

use std::sync::Arc;

use serde_json::json;
use svc_core::Error;
use svc_store::audit::{Actor, AuditWriter, Event};
use svc_store::groups::{Grant, Group};
use svc_store::users::{Guarded, User, ADMIN_GROUP};
use svc_store::Store;

use crate::access::Access;
use crate::password;
use crate::Authenticator;

/// Resource types a grant may name.
pub const RESOURCE_TYPES: &[&str] = &["table", "memory_domain"];

type Result<T> = std::result::Result<T, Error>;

/// Who revokes a token, which decides its audit action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Revoker {
    /// The token's owner.
    Owner,
    /// An administrator, on any user's token.
    Admin,
}

fn user_snapshot(u: &User) -> serde_json::Value {
    json!({ "email": u.email, "name": u.name, "active": u.active })
}

/// Membership source recorded for a change made by this actor.
fn membership_source(actor: &Actor) -> &'static str {
    match actor.client_kind {
        svc_store::audit::ClientKind::Console => "console",
        _ => "admin",
    }
}

fn actor_label(actor: &Actor) -> String {
    actor.user_id.clone().unwrap_or_else(|| "console".into())
}

/// The answer to a change the store refused or found nothing for.
fn guarded(outcome: Guarded, last_admin: &str, missing: impl FnOnce() -> Error) -> Result<()> {
    match outcome {
        Guarded::Applied => Ok(()),
        Guarded::LastAdmin => Err(Error::conflict(last_admin)),
        Guarded::Missing => Err(missing()),
    }
}

/// The administrative operations, over the handles they use. Every change that alters who
/// may do what ends in [`Admin::access_changed`].
#[derive(Debug, Clone)]
pub struct Admin {
    store: Store,
    audit: Arc<AuditWriter>,
    auth: Authenticator,
    access: Access,
}

impl Admin {
    /// The operations over a store, its audit writer, and the caches they must flush.
    pub fn new(store: Store, audit: Arc<AuditWriter>, auth: Authenticator, access: Access) -> Self {
        Self {
            store,
            audit,
            auth,
            access,
        }
    }

    /// The one flush for an access change (users, tokens, groups, memberships, grants):
    /// cached identities and grant sets are dropped, so this server never acts on access it
    /// has just changed.
    pub fn access_changed(&self) {
        self.auth.forget_identities();
        self.access.forget_grants();
    }

    /// Creates a user, optionally with a password and Admin membership.
    pub async fn create_user(
        &self,
        actor: &Actor,
        email: &str,
        name: Option<&str>,
        password: Option<&str>,
        admin: bool,
    ) -> Result<User> {
        let email = email.trim();
        if email.is_empty() || !email.contains('@') || email.len() > 320 {
            return Err(Error::invalid("email must be an e-mail address"));
        }
        if let Some(p) = password {
            if p.chars().count() < password::MIN_PASSWORD_LEN {
                return Err(Error::invalid(format!(
                    "Password must be at least {} characters",
                    password::MIN_PASSWORD_LEN
                )));
            }
        }
        let hash = password.map(password::hash);
        let user = self
            .store
            .create_user(email, name, hash.as_deref())
            .await
            .map_err(|e| e.conflict_on_duplicate("User with this email already exists"))?;
        self.audit
            .write(
                actor,
                Event::new("user.create")
                    .resource(format!("user:{}", user.id))
                    .param("email", user.email.clone())
                    .param("admin", admin),
            )
            .await;
        if admin {
            let group = self.admin_group().await?;
            self.add_member(actor, &group, &user).await?;
        }
        Ok(user)
    }

    /// The `Admin` group; its absence is a broken store, not a client error.
    pub async fn admin_group(&self) -> Result<Group> {
        self.store
            .group_by_name(ADMIN_GROUP)
            .await?
            .ok_or_else(|| Error::internal("the Admin group is missing"))
    }

    /// Renames a user.
    pub async fn rename_user(&self, actor: &Actor, user: &User, name: Option<&str>) -> Result<()> {
        self.store.set_user_name(&user.id, name).await?;
        self.access_changed();
        self.audit
            .write(
                actor,
                Event::new("user.update")
                    .resource(format!("user:{}", user.id))
                    .param("name", json!(name))
                    .before(user_snapshot(user)),
            )
            .await;
        Ok(())
    }

    /// Sets a user's password.
    pub async fn set_password(&self, actor: &Actor, user: &User, new_password: &str) -> Result<()> {
        if new_password.chars().count() < password::MIN_PASSWORD_LEN {
            return Err(Error::invalid(format!(
                "Password must be at least {} characters",
                password::MIN_PASSWORD_LEN
            )));
        }
        self.store
            .set_password_hash(&user.id, Some(&password::hash(new_password)))
            .await?;
        self.audit
            .write(
                actor,
                Event::new("user.set_password").resource(format!("user:{}", user.id)),
            )
            .await;
        Ok(())
    }

    /// Activates or deactivates a user, refusing to deactivate oneself or the last admin.
    pub async fn set_active(&self, actor: &Actor, user: &User, active: bool) -> Result<()> {
        if user.active == active {
            return Ok(());
        }
        if !active && actor.user_id.as_deref() == Some(user.id.as_str()) {
            return Err(Error::conflict("Cannot deactivate yourself"));
        }
        let outcome = self
            .store
            .set_user_active(&user.id, active, actor.user_id.as_deref())
            .await?;
        guarded(outcome, "Cannot deactivate the last active admin", || {
            Error::not_found("User not found")
        })?;
        self.access_changed();
        self.audit
            .write(
                actor,
                Event::new(if active {
                    "user.activate"
                } else {
                    "user.deactivate"
                })
                .resource(format!("user:{}", user.id))
                .param("active", active)
                .before(user_snapshot(user)),
            )
            .await;
        Ok(())
    }

    /// Deletes a user with their memberships and tokens.
    pub async fn delete_user(&self, actor: &Actor, user: &User) -> Result<()> {
        if actor.user_id.as_deref() == Some(user.id.as_str()) {
            return Err(Error::conflict("Cannot delete yourself"));
        }
        let outcome = self.store.delete_user(&user.id).await?;
        guarded(outcome, "Cannot delete the last active admin", || {
            Error::not_found("User not found")
        })?;
        self.access_changed();
        self.audit
            .write(
                actor,
                Event::new("user.delete")
                    .resource(format!("user:{}", user.id))
                    .before(user_snapshot(user)),
            )
            .await;
        Ok(())
    }

    /// Creates a personal access token for `user`; returns the stored row and the token, which
    /// is shown once.
    pub async fn create_token(
        &self,
        actor: &Actor,
        user: &User,
        name: &str,
        days: Option<i64>,
    ) -> Result<(svc_store::tokens::PatRow, String)> {
        if !user.active {
            return Err(Error::conflict(format!(
                "User {} is deactivated",
                user.email
            )));
        }
        if days.is_some_and(|d| !(1..=crate::MAX_PAT_DAYS).contains(&d)) {
            return Err(Error::invalid(format!(
                "expires_in_days must be between 1 and {}",
                crate::MAX_PAT_DAYS
            )));
        }
        let name = name.trim();
        if name.is_empty() {
            return Err(Error::invalid("name is required"));
        }
        let (row, token) = self.auth.create_pat(user, name, days).await?;
        self.audit
            .write(
                actor,
                Event::new("token.create")
                    .resource(format!("token:{}", row.id))
                    .param("name", row.name.clone())
                    .param("owner_id", user.id.clone())
                    .param("expires_at", json!(row.expires_at)),
            )
            .await;
        Ok((row, token))
    }

    /// Revokes a token (the row is kept, so listings still show it). `by` says whose
    /// decision it was: the owner's (`token.revoke`) or an administrator's
    /// (`token.admin_revoke`, naming the owner). Revoking a revoked token changes nothing and
    /// is not audited again.
    pub async fn revoke_token(
        &self,
        actor: &Actor,
        row: &svc_store::tokens::PatRow,
        by: Revoker,
    ) -> Result<()> {
        // Decided by the store's conditional update, so two revokes at once audit once.
        if !self.store.revoke_pat(&row.id).await? {
            return Ok(());
        }
        self.access_changed();
        let event = match by {
            Revoker::Owner => Event::new("token.revoke"),
            Revoker::Admin => {
                Event::new("token.admin_revoke").param("owner_id", row.user_id.clone())
            }
        };
        self.audit
            .write(
                actor,
                event
                    .resource(format!("token:{}", row.id))
                    .param("name", row.name.clone()),
            )
            .await;
        Ok(())
    }

    /// Creates a custom group.
    pub async fn create_group(
        &self,
        actor: &Actor,
        name: &str,
        description: Option<&str>,
    ) -> Result<Group> {
        let name = name.trim();
        if name.is_empty() {
            return Err(Error::invalid("Group name is required"));
        }
        let group = self
            .store
            .create_group(name, description, &actor_label(actor))
            .await
            .map_err(|e| e.conflict_on_duplicate(format!("Group '{name}' already exists")))?;
        self.audit
            .write(
                actor,
                Event::new("user_group.created")
                    .resource(format!("group:{}", group.id))
                    .param("name", group.name.clone()),
            )
            .await;
        Ok(group)
    }

    /// The group with this name, created when missing (shell commands use this).
    pub async fn ensure_group(&self, actor: &Actor, name: &str) -> Result<Group> {
        match self.store.group_by_name(name).await? {
            Some(g) => Ok(g),
            None => self.create_group(actor, name, None).await,
        }
    }

    /// Renames a group or changes its description; system groups keep their names.
    pub async fn update_group(
        &self,
        actor: &Actor,
        group: &Group,
        name: Option<&str>,
        description: Option<Option<&str>>,
    ) -> Result<()> {
        let name = name.map(str::trim);
        if let Some(n) = name {
            if n.is_empty() {
                return Err(Error::invalid("Group name is required"));
            }
            if group.is_system && n != group.name {
                return Err(Error::conflict("System groups cannot be renamed"));
            }
        }
        self.store
            .update_group(&group.id, name, description)
            .await
            .map_err(|e| {
                e.conflict_on_duplicate(format!(
                    "Group '{}' already exists",
                    name.unwrap_or_default()
                ))
            })?;
        self.audit
            .write(
                actor,
                Event::new("user_group.updated")
                    .resource(format!("group:{}", group.id))
                    .param("name", json!(name))
                    .param("description", json!(description))
                    .before(json!({ "name": group.name, "description": group.description })),
            )
            .await;
        Ok(())
    }

    /// Deletes a custom group with its memberships and grants.
    pub async fn delete_group(&self, actor: &Actor, group: &Group) -> Result<()> {
        if group.is_system {
            return Err(Error::conflict("Cannot delete a system group"));
        }
        self.store.delete_group(&group.id).await?;
        self.access_changed();
        self.audit
            .write(
                actor,
                Event::new("user_group.deleted")
                    .resource(format!("group:{}", group.id))
                    .before(json!({ "name": group.name, "description": group.description })),
            )
            .await;
        Ok(())
    }

    /// Adds a user to a group; `Ok(false)` when they already were a member.
    pub async fn add_member(&self, actor: &Actor, group: &Group, user: &User) -> Result<bool> {
        let added = self
            .store
            .add_member(
                &group.id,
                &user.id,
                membership_source(actor),
                &actor_label(actor),
            )
            .await?;
        if added {
            self.access_changed();
            self.audit
                .write(
                    actor,
                    Event::new("user_group.member_added")
                        .resource(format!("group:{}", group.id))
                        .param("user_id", user.id.clone())
                        .param("email", user.email.clone()),
                )
                .await;
        }
        Ok(added)
    }

    /// Removes a user from a group, keeping at least one active admin.
    pub async fn remove_member(&self, actor: &Actor, group: &Group, user: &User) -> Result<()> {
        let outcome = self.store.remove_member(&group.id, &user.id).await?;
        guarded(
            outcome,
            "Cannot remove the last admin — at least one user must remain in the Admin group",
            || {
                Error::not_found(format!(
                    "User '{}' is not a member of '{}'",
                    user.email, group.name
                ))
            },
        )?;
        self.access_changed();
        self.audit
            .write(
                actor,
                Event::new("user_group.member_removed")
                    .resource(format!("group:{}", group.id))
                    .param("user_id", user.id.clone())
                    .before(json!({ "member": true })),
            )
            .await;
        Ok(())
    }

    /// Grants a resource to a group.
    pub async fn create_grant(
        &self,
        actor: &Actor,
        group: &Group,
        resource_type: &str,
        resource_id: &str,
    ) -> Result<Grant> {
        if !RESOURCE_TYPES.contains(&resource_type) {
            return Err(Error::invalid(format!(
                "Unknown resource_type '{resource_type}'. Known types: {}",
                RESOURCE_TYPES.join(", ")
            )));
        }
        let resource_id = resource_id.trim();
        if resource_id.is_empty() {
            return Err(Error::invalid("resource_id is required"));
        }
        if resource_type == "memory_domain"
            && !svc_store::memory::MEMORY_DOMAINS.contains(&resource_id)
        {
            return Err(Error::invalid(format!(
                "a memory_domain grant names one of: {}",
                svc_store::memory::MEMORY_DOMAINS.join(", ")
            )));
        }
        let grant = self
            .store
            .create_grant(&group.id, resource_type, resource_id, &actor_label(actor))
            .await
            .map_err(|e| {
                e.conflict_on_duplicate(
                    "Grant already exists for this group/resource_type/resource_id",
                )
            })?;
        self.access_changed();
        self.audit
            .write(
                actor,
                Event::new("resource_grant.created")
                    .resource(format!("grant:{}", grant.id))
                    .param("group_id", group.id.clone())
                    .param("resource_type", resource_type)
                    .param("resource_id", resource_id),
            )
            .await;
        Ok(grant)
    }

    /// Revokes a grant.
    pub async fn delete_grant(&self, actor: &Actor, grant: &Grant) -> Result<()> {
        self.store.delete_grant(&grant.id).await?;
        self.access_changed();
        self.audit
            .write(
                actor,
                Event::new("resource_grant.deleted")
                    .resource(format!("grant:{}", grant.id))
                    .before(json!({
                        "group_id": grant.group_id,
                        "resource_type": grant.resource_type,
                        "resource_id": grant.resource_id,
                    })),
            )
            .await;
        Ok(())
    }
}
