//! `/api/admin/users` — user administration.

use std::sync::Arc;

use poem_openapi::param::Path;
use poem_openapi::payload::Json;
use poem_openapi::types::MaybeUndefined;
use poem_openapi::{ApiResponse, Object, OpenApi};

use super::me::GroupRef;
use super::types::Str;
use super::{ApiError, ApiResult, BearerAuth, NoContent, Tag};
use crate::admin;
use crate::state::AppState;
use crate::store::users::User;

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
            .any(|g| g.name == crate::store::users::ADMIN_GROUP);
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
            .ok_or_else(|| ApiError::not_found("User not found"))
    }
}

#[OpenApi(prefix_path = "/api/admin/users", tag = "Tag::Users")]
impl UsersApi {
    /// Every user.
    #[oai(path = "/", method = "get")]
    async fn list(&self, auth: BearerAuth) -> ApiResult<Json<Vec<UserInfo>>> {
        auth.admin()?;
        let mut out = Vec::new();
        for u in self.state.store.list_users().await? {
            out.push(self.info(u).await?);
        }
        Ok(Json(out))
    }

    /// Creates a user.
    #[oai(path = "/", method = "post")]
    async fn create(&self, auth: BearerAuth, body: Json<CreateUser>) -> ApiResult<CreatedUser> {
        let c = auth.admin()?;
        let b = body.0;
        let u = admin::create_user(
            &self.state,
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
    #[oai(path = "/:id", method = "get")]
    async fn get(&self, auth: BearerAuth, id: Path<String>) -> ApiResult<Json<UserInfo>> {
        auth.admin()?;
        let u = self.user(&id).await?;
        Ok(Json(self.info(u).await?))
    }

    /// Renames, (de)activates or sets the password of a user.
    #[oai(path = "/:id", method = "patch")]
    async fn update(
        &self,
        auth: BearerAuth,
        id: Path<String>,
        body: Json<UpdateUser>,
    ) -> ApiResult<Json<UserInfo>> {
        let c = auth.admin()?;
        let u = self.user(&id).await?;
        let b = body.0;
        if let Some(p) = &b.password {
            admin::set_password(&self.state, &c.actor, &u, p).await?;
        }
        match b.name {
            MaybeUndefined::Undefined => {}
            MaybeUndefined::Null => admin::rename_user(&self.state, &c.actor, &u, None).await?,
            MaybeUndefined::Value(n) => {
                admin::rename_user(&self.state, &c.actor, &u, Some(&n)).await?
            }
        }
        if let Some(active) = b.active {
            admin::set_active(&self.state, &c.actor, &u, active).await?;
        }
        Ok(Json(self.info(self.user(&id).await?).await?))
    }

    /// Deactivates a user: their tokens stop working at once.
    #[oai(path = "/:id/deactivate", method = "post")]
    async fn deactivate(&self, auth: BearerAuth, id: Path<String>) -> ApiResult<Json<UserInfo>> {
        let c = auth.admin()?;
        let u = self.user(&id).await?;
        admin::set_active(&self.state, &c.actor, &u, false).await?;
        Ok(Json(self.info(self.user(&id).await?).await?))
    }

    /// Reactivates a user.
    #[oai(path = "/:id/activate", method = "post")]
    async fn activate(&self, auth: BearerAuth, id: Path<String>) -> ApiResult<Json<UserInfo>> {
        let c = auth.admin()?;
        let u = self.user(&id).await?;
        admin::set_active(&self.state, &c.actor, &u, true).await?;
        Ok(Json(self.info(self.user(&id).await?).await?))
    }

    /// Deletes a user with their memberships and tokens.
    #[oai(path = "/:id", method = "delete")]
    async fn delete(&self, auth: BearerAuth, id: Path<String>) -> ApiResult<NoContent> {
        let c = auth.admin()?;
        let u = self.user(&id).await?;
        admin::delete_user(&self.state, &c.actor, &u).await?;
        Ok(NoContent::Done)
    }
}
