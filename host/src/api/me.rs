//! `/api/me` and the caller's own personal access tokens (`/api/tokens`).

use std::sync::Arc;

use poem_openapi::param::Path;
use poem_openapi::payload::Json;
use poem_openapi::{ApiResponse, Object, OpenApi};
use svc_auth::admin::Revoker;
use svc_auth::jwt::TokenType;
use svc_core::Error;
use svc_store::groups::Group;
use svc_store::tokens::PatRow;

use super::encoded::EncodedJson;
use super::types::Str;
use super::{ApiResult, BearerAuth, NoContent, Tag};
use crate::state::AppState;

pub struct MeApi {
    pub state: Arc<AppState>,
}

/// A group as shown to its members.
#[derive(Object, serde::Serialize)]
pub(super) struct GroupRef {
    /// Group id.
    id: String,
    /// Group name.
    name: String,
    /// System group (`Admin`, `Everyone`).
    is_system: bool,
}

impl From<Group> for GroupRef {
    fn from(g: Group) -> Self {
        Self {
            id: g.id,
            name: g.name,
            is_system: g.is_system,
        }
    }
}

// Its `serde` form is the body (`EncodedJson::serialized`), tested to be the documented one.
/// The authenticated caller.
#[derive(Object, serde::Serialize)]
struct Me {
    /// User id.
    id: String,
    /// E-mail.
    email: String,
    /// Display name.
    name: Option<String>,
    /// Member of the `Admin` group.
    is_admin: bool,
    /// The caller's groups, system groups first.
    groups: Vec<GroupRef>,
    /// `session` or `pat`.
    token_type: String,
}

/// A new personal access token.
#[derive(Object)]
struct CreateToken {
    /// A label to recognise the token by.
    #[oai(validator(min_length = 1, max_length = 100))]
    name: Str,
    /// Lifetime in days (1–3650); omit or null for a token that never expires.
    #[oai(validator(minimum(value = "1"), maximum(value = "3650")))]
    expires_in_days: Option<i64>,
}

/// A personal access token as listed (never the token itself).
#[derive(Object)]
struct TokenInfo {
    /// Token id.
    id: String,
    /// Label.
    name: String,
    /// First characters of the id, to recognise it.
    prefix: String,
    /// Creation time.
    created_at: Option<String>,
    /// Expiry (null = never).
    expires_at: Option<String>,
    /// Last use.
    last_used_at: Option<String>,
    /// Revocation time.
    revoked_at: Option<String>,
}

impl From<PatRow> for TokenInfo {
    fn from(r: PatRow) -> Self {
        Self {
            id: r.id,
            name: r.name,
            prefix: r.prefix,
            created_at: r.created_at,
            expires_at: r.expires_at,
            last_used_at: r.last_used_at,
            revoked_at: r.revoked_at,
        }
    }
}

/// A newly created token: the only time `token` is shown.
#[derive(Object)]
struct CreatedToken {
    /// Token id.
    id: String,
    /// Label.
    name: String,
    /// Recognisable prefix.
    prefix: String,
    /// The token. Store it now; it cannot be shown again.
    token: String,
    /// Expiry (null = never).
    expires_at: Option<String>,
    /// Creation time.
    created_at: Option<String>,
}

#[derive(ApiResponse)]
enum CreatedTokenResponse {
    /// Created.
    #[oai(status = 201)]
    Created(Json<CreatedToken>),
}

#[OpenApi]
impl MeApi {
    /// The caller, their groups and whether they are an administrator.
    #[oai(
        path = "/api/me",
        method = "get",
        tag = "Tag::Auth",
        operation_id = "get_me"
    )]
    async fn me(&self, auth: BearerAuth) -> ApiResult<EncodedJson<Me>> {
        let c = auth.0;
        let groups = self.state.access.groups_of(&c).await?;
        Ok(EncodedJson::serialized(&Me {
            id: c.user.id.clone(),
            email: c.user.email.clone(),
            name: c.user.name.clone(),
            is_admin: c.is_admin,
            groups: groups.iter().cloned().map(GroupRef::from).collect(),
            token_type: match c.token_type {
                TokenType::Session => "session",
                TokenType::Pat => "pat",
            }
            .into(),
        }))
    }

    /// Creates a personal access token for the caller. Requires a session token: a PAT
    /// cannot mint further PATs.
    #[oai(
        path = "/api/tokens",
        method = "post",
        tag = "Tag::Auth",
        operation_id = "create_token"
    )]
    async fn create_token(
        &self,
        auth: BearerAuth,
        body: Json<CreateToken>,
    ) -> ApiResult<CreatedTokenResponse> {
        let c = auth.0;
        if c.token_type == TokenType::Pat {
            return Err(Error::forbidden(
                "This endpoint requires an interactive session, not a personal access token",
            )
            .into());
        }
        let (row, token) = self
            .state
            .admin
            .create_token(&c.actor, &c.user, &body.name, body.expires_in_days)
            .await?;
        Ok(CreatedTokenResponse::Created(Json(CreatedToken {
            id: row.id,
            name: row.name,
            prefix: row.prefix,
            token,
            expires_at: row.expires_at,
            created_at: row.created_at,
        })))
    }

    /// The caller's tokens, newest first, revoked ones included.
    #[oai(
        path = "/api/tokens",
        method = "get",
        tag = "Tag::Auth",
        operation_id = "list_tokens"
    )]
    async fn list_tokens(&self, auth: BearerAuth) -> ApiResult<Json<Vec<TokenInfo>>> {
        let rows = self.state.store.pats_of_user(&auth.0.user.id).await?;
        Ok(Json(rows.into_iter().map(TokenInfo::from).collect()))
    }

    /// Revokes one of the caller's tokens.
    #[oai(
        path = "/api/tokens/:id",
        method = "delete",
        tag = "Tag::Auth",
        operation_id = "revoke_token"
    )]
    async fn revoke_token(&self, auth: BearerAuth, id: Path<String>) -> ApiResult<NoContent> {
        let c = auth.0;
        let row = self.state.store.pat_by_id(&id).await?;
        let row = row
            .filter(|r| r.user_id == c.user.id)
            .ok_or_else(|| Error::not_found("Token not found"))?;
        self.state
            .admin
            .revoke_token(&c.actor, &row, Revoker::Owner)
            .await?;
        Ok(NoContent::Done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_is_the_documented_json() {
        let me = |name: Option<&str>, groups: Vec<GroupRef>| Me {
            id: "u-1".into(),
            email: "ana@example.com".into(),
            name: name.map(Into::into),
            is_admin: true,
            groups,
            token_type: "pat".into(),
        };
        let group = |id: &str, is_system| GroupRef {
            id: id.into(),
            name: format!("\"{id}\" \\ ünïcode"),
            is_system,
        };
        assert!(super::super::encoded::same_json(&me(None, vec![])));
        assert!(super::super::encoded::same_json(&me(
            Some("Ana \"A\"\n"),
            vec![group("admin", true), group("g-2", false)],
        )));
    }
}
