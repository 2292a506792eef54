//! `/api/admin/groups` and `/api/admin/grants` — groups, memberships and resource grants.

use std::sync::Arc;

use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;
use poem_openapi::types::MaybeUndefined;
use poem_openapi::{ApiResponse, Object, OpenApi};
use svc_core::Error;
use svc_store::groups::{Grant, Group, Member};

use super::types::Str;
use super::{AdminAuth, ApiResult, NoContent, Tag};
use crate::state::AppState;

pub struct AccessApi {
    pub state: Arc<AppState>,
}

/// A group with its counts.
#[derive(Object)]
struct GroupInfo {
    /// Group id.
    id: String,
    /// Unique name.
    name: String,
    /// Free text.
    description: Option<String>,
    /// System groups cannot be renamed or deleted.
    is_system: bool,
    /// Creation time.
    created_at: Option<String>,
    /// Creator.
    created_by: Option<String>,
    /// Number of members.
    member_count: i64,
    /// Number of grants.
    grant_count: i64,
}

/// A new group.
#[derive(Object)]
struct CreateGroup {
    /// Unique name.
    #[oai(validator(min_length = 1, max_length = 200))]
    name: Str,
    /// Free text.
    description: Option<Str>,
}

/// Changes to a group.
#[derive(Object)]
struct UpdateGroup {
    /// New name (not for system groups).
    name: Option<Str>,
    /// New description (null clears it).
    description: MaybeUndefined<Str>,
}

/// A group member.
#[derive(Object)]
struct MemberInfo {
    /// User id.
    user_id: String,
    /// E-mail.
    email: Option<String>,
    /// Name.
    name: Option<String>,
    /// How the membership was made.
    source: String,
    /// When.
    added_at: Option<String>,
    /// By whom.
    added_by: Option<String>,
}

impl From<Member> for MemberInfo {
    fn from(m: Member) -> Self {
        Self {
            user_id: m.user_id,
            email: m.email,
            name: m.name,
            source: m.source,
            added_at: m.added_at,
            added_by: m.added_by,
        }
    }
}

/// A user to add to a group.
#[derive(Object)]
struct AddMember {
    /// The user's e-mail.
    email: Str,
}

/// A resource grant.
#[derive(Object)]
struct GrantInfo {
    /// Grant id.
    id: String,
    /// Group holding it.
    group_id: String,
    /// The group's name.
    group_name: Option<String>,
    /// `table`.
    resource_type: String,
    /// The table id.
    resource_id: String,
    /// When.
    assigned_at: Option<String>,
    /// By whom.
    assigned_by: Option<String>,
}

impl From<Grant> for GrantInfo {
    fn from(g: Grant) -> Self {
        Self {
            id: g.id,
            group_id: g.group_id,
            group_name: g.group_name,
            resource_type: g.resource_type,
            resource_id: g.resource_id,
            assigned_at: g.assigned_at,
            assigned_by: g.assigned_by,
        }
    }
}

/// A new grant.
#[derive(Object)]
struct CreateGrant {
    /// The group receiving access.
    group_id: Str,
    /// `table`.
    #[oai(default = "default_resource_type")]
    resource_type: Str,
    /// The table id.
    #[oai(validator(min_length = 1, max_length = 256))]
    resource_id: Str,
}

fn default_resource_type() -> Str {
    Str("table".into())
}

#[derive(ApiResponse)]
enum CreatedGroup {
    /// Created.
    #[oai(status = 201)]
    Created(Json<GroupInfo>),
}

#[derive(ApiResponse)]
enum CreatedMember {
    /// Added.
    #[oai(status = 201)]
    Created(Json<MemberInfo>),
}

#[derive(ApiResponse)]
enum CreatedGrant {
    /// Created.
    #[oai(status = 201)]
    Created(Json<GrantInfo>),
}

impl AccessApi {
    async fn group(&self, id: &str) -> ApiResult<Group> {
        self.state
            .store
            .group_by_id(id)
            .await?
            .ok_or_else(|| Error::not_found("Group not found").into())
    }

    async fn info(&self, g: Group) -> ApiResult<GroupInfo> {
        Ok(GroupInfo {
            member_count: self.state.store.count_members(&g.id).await?,
            grant_count: self.state.store.count_grants(&g.id).await?,
            id: g.id,
            name: g.name,
            description: g.description,
            is_system: g.is_system,
            created_at: g.created_at,
            created_by: g.created_by,
        })
    }
}

#[OpenApi(prefix_path = "/api/admin", tag = "Tag::Access")]
impl AccessApi {
    /// Every group, system groups first.
    #[oai(path = "/groups", method = "get", operation_id = "list_groups")]
    async fn list_groups(&self, _auth: AdminAuth) -> ApiResult<Json<Vec<GroupInfo>>> {
        let mut out = Vec::new();
        for g in self.state.store.list_groups().await? {
            out.push(self.info(g).await?);
        }
        Ok(Json(out))
    }

    /// Creates a group.
    #[oai(path = "/groups", method = "post", operation_id = "create_group")]
    async fn create_group(
        &self,
        auth: AdminAuth,
        body: Json<CreateGroup>,
    ) -> ApiResult<CreatedGroup> {
        let c = &auth.0;
        let g = self
            .state
            .admin
            .create_group(&c.actor, &body.name, body.description.as_deref())
            .await?;
        Ok(CreatedGroup::Created(Json(self.info(g).await?)))
    }

    /// One group.
    #[oai(path = "/groups/:id", method = "get", operation_id = "get_group")]
    async fn get_group(&self, _auth: AdminAuth, id: Path<String>) -> ApiResult<Json<GroupInfo>> {
        let g = self.group(&id).await?;
        Ok(Json(self.info(g).await?))
    }

    /// Renames a group or edits its description.
    #[oai(path = "/groups/:id", method = "patch", operation_id = "update_group")]
    async fn update_group(
        &self,
        auth: AdminAuth,
        id: Path<String>,
        body: Json<UpdateGroup>,
    ) -> ApiResult<Json<GroupInfo>> {
        let c = &auth.0;
        let g = self.group(&id).await?;
        let description = match &body.description {
            MaybeUndefined::Undefined => None,
            MaybeUndefined::Null => Some(None),
            MaybeUndefined::Value(d) => Some(Some(&**d)),
        };
        self.state
            .admin
            .update_group(&c.actor, &g, body.name.as_deref(), description)
            .await?;
        Ok(Json(self.info(self.group(&id).await?).await?))
    }

    /// Deletes a custom group with its memberships and grants.
    #[oai(path = "/groups/:id", method = "delete", operation_id = "delete_group")]
    async fn delete_group(&self, auth: AdminAuth, id: Path<String>) -> ApiResult<NoContent> {
        let c = &auth.0;
        let g = self.group(&id).await?;
        self.state.admin.delete_group(&c.actor, &g).await?;
        Ok(NoContent::Done)
    }

    /// Members of a group.
    #[oai(
        path = "/groups/:id/members",
        method = "get",
        operation_id = "list_group_members"
    )]
    async fn members(
        &self,
        _auth: AdminAuth,
        id: Path<String>,
    ) -> ApiResult<Json<Vec<MemberInfo>>> {
        let g = self.group(&id).await?;
        let members = self.state.store.members(&g.id).await?;
        Ok(Json(members.into_iter().map(MemberInfo::from).collect()))
    }

    /// Adds a user (by e-mail) to a group.
    #[oai(
        path = "/groups/:id/members",
        method = "post",
        operation_id = "add_group_member"
    )]
    async fn add_member(
        &self,
        auth: AdminAuth,
        id: Path<String>,
        body: Json<AddMember>,
    ) -> ApiResult<CreatedMember> {
        let c = &auth.0;
        let g = self.group(&id).await?;
        let u = self
            .state
            .store
            .user_by_email(&body.email)
            .await?
            .ok_or_else(|| Error::not_found(format!("User '{}' not found", body.email)))?;
        if !self.state.admin.add_member(&c.actor, &g, &u).await? {
            return Err(Error::conflict("User already a member").into());
        }
        let m = self
            .state
            .store
            .members(&g.id)
            .await?
            .into_iter()
            .find(|m| m.user_id == u.id);
        let m = m.ok_or_else(|| Error::internal("membership vanished after insert"))?;
        Ok(CreatedMember::Created(Json(m.into())))
    }

    /// Removes a user from a group (the last active admin stays).
    #[oai(
        path = "/groups/:id/members/:user_id",
        method = "delete",
        operation_id = "remove_group_member"
    )]
    async fn remove_member(
        &self,
        auth: AdminAuth,
        id: Path<String>,
        user_id: Path<String>,
    ) -> ApiResult<NoContent> {
        let c = &auth.0;
        let g = self.group(&id).await?;
        let u = self
            .state
            .store
            .user_by_id(&user_id)
            .await?
            .ok_or_else(|| Error::not_found("User not found"))?;
        self.state.admin.remove_member(&c.actor, &g, &u).await?;
        Ok(NoContent::Done)
    }

    /// Grants, optionally filtered.
    #[oai(path = "/grants", method = "get", operation_id = "list_grants")]
    async fn list_grants(
        &self,
        _auth: AdminAuth,
        group_id: Query<Option<String>>,
        resource_type: Query<Option<String>>,
    ) -> ApiResult<Json<Vec<GrantInfo>>> {
        let grants = self
            .state
            .store
            .list_grants(group_id.as_deref(), resource_type.as_deref())
            .await?;
        Ok(Json(grants.into_iter().map(GrantInfo::from).collect()))
    }

    /// Grants a table to a group.
    #[oai(path = "/grants", method = "post", operation_id = "create_grant")]
    async fn create_grant(
        &self,
        auth: AdminAuth,
        body: Json<CreateGrant>,
    ) -> ApiResult<CreatedGrant> {
        let c = &auth.0;
        let g = self.group(&body.group_id).await?;
        let grant = self
            .state
            .admin
            .create_grant(&c.actor, &g, &body.resource_type, &body.resource_id)
            .await?;
        Ok(CreatedGrant::Created(Json(grant.into())))
    }

    /// Revokes a grant.
    #[oai(path = "/grants/:id", method = "delete", operation_id = "delete_grant")]
    async fn delete_grant(&self, auth: AdminAuth, id: Path<String>) -> ApiResult<NoContent> {
        let c = &auth.0;
        let grant = self
            .state
            .store
            .grant_by_id(&id)
            .await?
            .ok_or_else(|| Error::not_found("Grant not found"))?;
        self.state.admin.delete_grant(&c.actor, &grant).await?;
        Ok(NoContent::Done)
    }
}
