//! Administrative operations on users, groups and grants, shared by the HTTP API and the
//! `svc-server` shell commands so both apply the same guards and write the same audit rows.

use serde_json::json;

use crate::api::ApiError;
use crate::audit::{Actor, Event};
use crate::auth::password;
use crate::state::AppState;
use crate::store::groups::{Grant, Group};
use crate::store::users::{Guarded, User, ADMIN_GROUP};

/// Resource types a grant may name.
pub const RESOURCE_TYPES: &[&str] = &["table"];

type Result<T> = std::result::Result<T, ApiError>;

fn user_snapshot(u: &User) -> serde_json::Value {
    json!({ "email": u.email, "name": u.name, "active": u.active })
}

/// Membership source recorded for a change made by this actor.
fn membership_source(actor: &Actor) -> &'static str {
    match actor.client_kind {
        crate::audit::ClientKind::Console => "console",
        _ => "admin",
    }
}

fn actor_label(actor: &Actor) -> String {
    actor.user_id.clone().unwrap_or_else(|| "console".into())
}

/// Creates a user, optionally with a password and Admin membership.
pub async fn create_user(
    state: &AppState,
    actor: &Actor,
    email: &str,
    name: Option<&str>,
    password: Option<&str>,
    admin: bool,
) -> Result<User> {
    let email = email.trim();
    if email.is_empty() || !email.contains('@') || email.len() > 320 {
        return Err(ApiError::unprocessable("email must be an e-mail address"));
    }
    if let Some(p) = password {
        if p.chars().count() < password::MIN_PASSWORD_LEN {
            return Err(ApiError::unprocessable(format!(
                "Password must be at least {} characters",
                password::MIN_PASSWORD_LEN
            )));
        }
    }
    let hash = password.map(password::hash);
    let user = state
        .store
        .create_user(email, name, hash.as_deref())
        .await
        .map_err(|e| crate::api::conflict_on_duplicate(e, "User with this email already exists"))?;
    state
        .audit
        .write(
            actor,
            Event::new("user.create")
                .resource(format!("user:{}", user.id))
                .param("email", user.email.clone())
                .param("admin", admin),
        )
        .await;
    if admin {
        let group = admin_group(state).await?;
        add_member(state, actor, &group, &user).await?;
    }
    Ok(user)
}

/// The `Admin` group; its absence is a broken store, not a client error.
pub async fn admin_group(state: &AppState) -> Result<Group> {
    state
        .store
        .group_by_name(ADMIN_GROUP)
        .await?
        .ok_or_else(|| ApiError::internal("the Admin group is missing"))
}

/// The answer to a change the store refused or found nothing for.
fn guarded(outcome: Guarded, last_admin: &str, missing: impl FnOnce() -> ApiError) -> Result<()> {
    match outcome {
        Guarded::Applied => Ok(()),
        Guarded::LastAdmin => Err(ApiError::conflict(last_admin)),
        Guarded::Missing => Err(missing()),
    }
}

/// Renames a user.
pub async fn rename_user(
    state: &AppState,
    actor: &Actor,
    user: &User,
    name: Option<&str>,
) -> Result<()> {
    state.store.set_user_name(&user.id, name).await?;
    state.access_changed();
    state
        .audit
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
pub async fn set_password(
    state: &AppState,
    actor: &Actor,
    user: &User,
    new_password: &str,
) -> Result<()> {
    if new_password.chars().count() < password::MIN_PASSWORD_LEN {
        return Err(ApiError::unprocessable(format!(
            "Password must be at least {} characters",
            password::MIN_PASSWORD_LEN
        )));
    }
    state
        .store
        .set_password_hash(&user.id, Some(&password::hash(new_password)))
        .await?;
    state
        .audit
        .write(
            actor,
            Event::new("user.set_password").resource(format!("user:{}", user.id)),
        )
        .await;
    Ok(())
}

/// Activates or deactivates a user, refusing to deactivate oneself or the last admin.
pub async fn set_active(state: &AppState, actor: &Actor, user: &User, active: bool) -> Result<()> {
    if user.active == active {
        return Ok(());
    }
    if !active && actor.user_id.as_deref() == Some(user.id.as_str()) {
        return Err(ApiError::conflict("Cannot deactivate yourself"));
    }
    let outcome = state
        .store
        .set_user_active(&user.id, active, actor.user_id.as_deref())
        .await?;
    guarded(outcome, "Cannot deactivate the last active admin", || {
        ApiError::not_found("User not found")
    })?;
    state.access_changed();
    state
        .audit
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
pub async fn delete_user(state: &AppState, actor: &Actor, user: &User) -> Result<()> {
    if actor.user_id.as_deref() == Some(user.id.as_str()) {
        return Err(ApiError::conflict("Cannot delete yourself"));
    }
    let outcome = state.store.delete_user(&user.id).await?;
    guarded(outcome, "Cannot delete the last active admin", || {
        ApiError::not_found("User not found")
    })?;
    state.access_changed();
    state
        .audit
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
    state: &AppState,
    actor: &Actor,
    user: &User,
    name: &str,
    days: Option<i64>,
) -> Result<(crate::store::tokens::PatRow, String)> {
    if !user.active {
        return Err(ApiError::conflict(format!(
            "User {} is deactivated",
            user.email
        )));
    }
    if days.is_some_and(|d| !(1..=crate::auth::MAX_PAT_DAYS).contains(&d)) {
        return Err(ApiError::unprocessable(format!(
            "expires_in_days must be between 1 and {}",
            crate::auth::MAX_PAT_DAYS
        )));
    }
    let name = name.trim();
    if name.is_empty() {
        return Err(ApiError::unprocessable("name is required"));
    }
    let (row, token) = state.auth.create_pat(user, name, days).await?;
    state
        .audit
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

/// Creates a custom group.
pub async fn create_group(
    state: &AppState,
    actor: &Actor,
    name: &str,
    description: Option<&str>,
) -> Result<Group> {
    let name = name.trim();
    if name.is_empty() {
        return Err(ApiError::unprocessable("Group name is required"));
    }
    let group = state
        .store
        .create_group(name, description, &actor_label(actor))
        .await
        .map_err(|e| {
            crate::api::conflict_on_duplicate(e, format!("Group '{name}' already exists"))
        })?;
    state
        .audit
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
pub async fn ensure_group(state: &AppState, actor: &Actor, name: &str) -> Result<Group> {
    match state.store.group_by_name(name).await? {
        Some(g) => Ok(g),
        None => create_group(state, actor, name, None).await,
    }
}

/// Renames a group or changes its description; system groups keep their names.
pub async fn update_group(
    state: &AppState,
    actor: &Actor,
    group: &Group,
    name: Option<&str>,
    description: Option<Option<&str>>,
) -> Result<()> {
    let name = name.map(str::trim);
    if let Some(n) = name {
        if n.is_empty() {
            return Err(ApiError::unprocessable("Group name is required"));
        }
        if group.is_system && n != group.name {
            return Err(ApiError::conflict("System groups cannot be renamed"));
        }
    }
    state
        .store
        .update_group(&group.id, name, description)
        .await
        .map_err(|e| {
            crate::api::conflict_on_duplicate(
                e,
                format!("Group '{}' already exists", name.unwrap_or_default()),
            )
        })?;
    state
        .audit
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
pub async fn delete_group(state: &AppState, actor: &Actor, group: &Group) -> Result<()> {
    if group.is_system {
        return Err(ApiError::conflict("Cannot delete a system group"));
    }
    state.store.delete_group(&group.id).await?;
    state.access_changed();
    state
        .audit
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
pub async fn add_member(
    state: &AppState,
    actor: &Actor,
    group: &Group,
    user: &User,
) -> Result<bool> {
    let added = state
        .store
        .add_member(
            &group.id,
            &user.id,
            membership_source(actor),
            &actor_label(actor),
        )
        .await?;
    if added {
        state.access_changed();
        state
            .audit
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
pub async fn remove_member(
    state: &AppState,
    actor: &Actor,
    group: &Group,
    user: &User,
) -> Result<()> {
    let outcome = state.store.remove_member(&group.id, &user.id).await?;
    guarded(
        outcome,
        "Cannot remove the last admin — at least one user must remain in the Admin group",
        || {
            ApiError::not_found(format!(
                "User '{}' is not a member of '{}'",
                user.email, group.name
            ))
        },
    )?;
    state.access_changed();
    state
        .audit
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
    state: &AppState,
    actor: &Actor,
    group: &Group,
    resource_type: &str,
    resource_id: &str,
) -> Result<Grant> {
    if !RESOURCE_TYPES.contains(&resource_type) {
        return Err(ApiError::unprocessable(format!(
            "Unknown resource_type '{resource_type}'. Known types: {}",
            RESOURCE_TYPES.join(", ")
        )));
    }
    let resource_id = resource_id.trim();
    if resource_id.is_empty() {
        return Err(ApiError::unprocessable("resource_id is required"));
    }
    let grant = state
        .store
        .create_grant(&group.id, resource_type, resource_id, &actor_label(actor))
        .await
        .map_err(|e| {
            crate::api::conflict_on_duplicate(
                e,
                "Grant already exists for this group/resource_type/resource_id",
            )
        })?;
    state.access_changed();
    state
        .audit
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
pub async fn delete_grant(state: &AppState, actor: &Actor, grant: &Grant) -> Result<()> {
    state.store.delete_grant(&grant.id).await?;
    state.access_changed();
    state
        .audit
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
