//! `/api/admin/users` — user administration.

use std::sync::Arc;

use poem_openapi::param::Path;
use poem_openapi::payload::Json;
use poem_openapi::types::MaybeUndefined;
use poem_openapi::{ApiResponse, Object, OpenApi};
use svc_core::Error;
use svc_store::users::User;

use super::me::GroupRef;
use super::types::Str;
use super::{AdminAuth, ApiResult, NoContent, Tag};
use crate::state::AppState;

pub struct UsersApi {
    pub state: Arc<AppState>,
}

/// A user as administrators see it.
#[derive(Object)]
struct UserInfo {
    /// User id.
    id: String,
    /// E-mail.
    email: String,
    /// Display name.
    name: Option<String>,
    /// Deactivated users cannot authenticate.
    active: bool,
    /// Member of the `Admin` group.
    is_admin: bool,
    /// Has a password (can use `POST /auth/token`).
    has_password: bool,
    /// Groups, system groups first.
    groups: Vec<GroupRef>,
    /// Creation time.
    created_at: Option<String>,
    /// Deactivation time.
    deactivated_at: Option<String>,
}

/// A new user.
#[derive(Object)]
struct CreateUser {
    /// E-mail (unique, matched exactly).
    #[oai(validator(min_length = 3, max_length = 320))]
    email: Str,
    /// Display name.
    name: Option<Str>,
    /// Initial password (at least 8 characters); omit for a token-only user.
    password: Option<Str>,
    /// Add the user to the `Admin` group.
    #[oai(default)]
    is_admin: bool,
}

/// Changes to a user; absent fields stay as they are.
#[derive(Object)]
struct UpdateUser {
    /// New display name (null clears it).
    name: MaybeUndefined<Str>,
    /// Activate or deactivate.
    active: Option<bool>,
    /// New password.
    password: Option<Str>,
}

#[derive(ApiResponse)]
enum CreatedUser {
    /// Created.
    #[oai(status = 201)]
    Created(Json<UserInfo>),
}

impl UsersApi {
    async fn info(&self, u: User) -> ApiResult<UserInfo> {
        let groups = self.state.store.groups_of_user(&u.id).await?;
        let is_admin = groups
            .iter()
            .any(|g| g.name == svc_store::users::ADMIN_GROUP);
        Ok(UserInfo {
            has_password: u.password_hash.is_some(),
            id: u.id,
            email: u.email,
            name: u.name,
            active: u.active,
            is_admin,
            groups: groups.into_iter().map(GroupRef::from).collect(),
            created_at: u.created_at,
            deactivated_at: u.deactivated_at,
        })
    }

    async fn user(&self, id: &str) -> ApiResult<User> {
        self.state
            .store
            .user_by_id(id)
            .await?
            .ok_or_else(|| Error::not_found("User not found").into())
    }
}

#[OpenApi(prefix_path = "/api/admin/users", tag = "Tag::Users")]
impl UsersApi {
    /// Every user.
    #[oai(path = "/", method = "get", operation_id = "list_users")]
    async fn list(&self, _auth: AdminAuth) -> ApiResult<Json<Vec<UserInfo>>> {
        let mut out = Vec::new();
        for u in self.state.store.list_users().await? {
            out.push(self.info(u).await?);
        }
        Ok(Json(out))
    }

    /// Creates a user.
    #[oai(path = "/", method = "post", operation_id = "create_user")]
    async fn create(&self, auth: AdminAuth, body: Json<CreateUser>) -> ApiResult<CreatedUser> {
        let c = &auth.0;
        let b = body.0;
        let u = self
            .state
            .admin
            .create_user(
                &c.actor,
                &b.email,
                b.name.as_deref(),
                b.password.as_deref(),
                b.is_admin,
            )
            .await?;
        Ok(CreatedUser::Created(Json(self.info(u).await?)))
    }

    /// One user.
    #[oai(path = "/:id", method = "get", operation_id = "get_user")]
    async fn get(&self, _auth: AdminAuth, id: Path<String>) -> ApiResult<Json<UserInfo>> {
        let u = self.user(&id).await?;
        Ok(Json(self.info(u).await?))
    }

    /// Renames, (de)activates or sets the password of a user.
    #[oai(path = "/:id", method = "patch", operation_id = "update_user")]
    async fn update(
        &self,
        auth: AdminAuth,
        id: Path<String>,
        body: Json<UpdateUser>,
    ) -> ApiResult<Json<UserInfo>> {
        let c = &auth.0;
        let u = self.user(&id).await?;
        let b = body.0;
        if let Some(p) = &b.password {
            self.state.admin.set_password(&c.actor, &u, p).await?;
        }
        match b.name {
            MaybeUndefined::Undefined => {}
            MaybeUndefined::Null => self.state.admin.rename_user(&c.actor, &u, None).await?,
            MaybeUndefined::Value(n) => {
                self.state.admin.rename_user(&c.actor, &u, Some(&n)).await?
            }
        }
        if let Some(active) = b.active {
            self.state.admin.set_active(&c.actor, &u, active).await?;
        }
        Ok(Json(self.info(self.user(&id).await?).await?))
    }

    /// Deactivates a user: their tokens stop working at once.
    #[oai(
        path = "/:id/deactivate",
        method = "post",
        operation_id = "deactivate_user"
    )]
    async fn deactivate(&self, auth: AdminAuth, id: Path<String>) -> ApiResult<Json<UserInfo>> {
        let c = &auth.0;
        let u = self.user(&id).await?;
        self.state.admin.set_active(&c.actor, &u, false).await?;
        Ok(Json(self.info(self.user(&id).await?).await?))
    }

    /// Reactivates a user.
    #[oai(
        path = "/:id/activate",
        method = "post",
        operation_id = "activate_user"
    )]
    async fn activate(&self, auth: AdminAuth, id: Path<String>) -> ApiResult<Json<UserInfo>> {
        let c = &auth.0;
        let u = self.user(&id).await?;
        self.state.admin.set_active(&c.actor, &u, true).await?;
        Ok(Json(self.info(self.user(&id).await?).await?))
    }

    /// Deletes a user with their memberships and tokens.
    #[oai(path = "/:id", method = "delete", operation_id = "delete_user")]
    async fn delete(&self, auth: AdminAuth, id: Path<String>) -> ApiResult<NoContent> {
        let c = &auth.0;
        let u = self.user(&id).await?;
        self.state.admin.delete_user(&c.actor, &u).await?;
        Ok(NoContent::Done)
    }
}
