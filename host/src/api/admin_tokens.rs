//! `/api/admin/tokens` — every user's personal access tokens, for administrators: who holds
//! which token, when it was last used and from where, and revoking any of them.

use std::sync::Arc;

use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;
use poem_openapi::{Object, OpenApi};
use svc_auth::admin::Revoker;
use svc_core::Error;
use svc_store::tokens::OwnedPat;

use super::{AdminAuth, ApiResult, NoContent, Tag};
use crate::state::AppState;

/// Tokens per page unless asked otherwise.
const DEFAULT_LIMIT: usize = 100;
/// The most a page may hold.
const MAX_LIMIT: usize = 500;

pub struct AdminTokensApi {
    pub state: Arc<AppState>,
}

/// A personal access token as administrators see it (never the token itself).
#[derive(Object)]
struct AdminTokenInfo {
    /// Token id.
    id: String,
    /// The owner's label for it.
    name: String,
    /// First characters of the id, to recognise it.
    prefix: String,
    /// Owner's user id.
    user_id: String,
    /// Owner's e-mail (null when the owner no longer exists).
    user_email: Option<String>,
    /// Creation time.
    created_at: Option<String>,
    /// Expiry (null = never).
    expires_at: Option<String>,
    /// Last use.
    last_used_at: Option<String>,
    /// Address of the last use.
    last_used_ip: Option<String>,
    /// Revocation time.
    revoked_at: Option<String>,
}

impl From<OwnedPat> for AdminTokenInfo {
    fn from(t: OwnedPat) -> Self {
        let r = t.pat;
        Self {
            id: r.id,
            name: r.name,
            prefix: r.prefix,
            user_id: r.user_id,
            user_email: t.owner_email,
            created_at: r.created_at,
            expires_at: r.expires_at,
            last_used_at: r.last_used_at,
            last_used_ip: r.last_used_ip,
            revoked_at: r.revoked_at,
        }
    }
}

/// A page of tokens.
#[derive(Object)]
struct AdminTokenPage {
    /// Tokens, newest first, revoked ones included.
    tokens: Vec<AdminTokenInfo>,
    /// Tokens matching the filter on every page.
    total: i64,
    /// Page size.
    limit: usize,
    /// Tokens skipped.
    offset: usize,
    /// Offset of the next page; null on the last.
    next_offset: Option<usize>,
}

#[OpenApi(prefix_path = "/api/admin/tokens", tag = "Tag::Users")]
impl AdminTokensApi {
    /// Every user's personal access tokens, newest first, revoked ones included; `user`
    /// keeps one owner's (exact e-mail).
    #[oai(path = "/", method = "get", operation_id = "list_all_tokens")]
    async fn list(
        &self,
        _auth: AdminAuth,
        /// Only this owner's tokens (exact e-mail).
        user: Query<Option<String>>,
        /// Tokens per page, 1..500 (default 100).
        limit: Query<Option<usize>>,
        /// Tokens to skip.
        offset: Query<Option<usize>>,
    ) -> ApiResult<Json<AdminTokenPage>> {
        let limit = limit.0.unwrap_or(DEFAULT_LIMIT);
        if !(1..=MAX_LIMIT).contains(&limit) {
            return Err(Error::invalid(format!("limit must be between 1 and {MAX_LIMIT}")).into());
        }
        let offset = offset.0.unwrap_or(0);
        let user = user.as_deref().map(str::trim).filter(|u| !u.is_empty());
        let page = self
            .state
            .store
            .list_pats(user, limit as u32, offset as u64)
            .await?;
        let next = offset + page.tokens.len();
        Ok(Json(AdminTokenPage {
            next_offset: ((next as i64) < page.total && !page.tokens.is_empty()).then_some(next),
            tokens: page.tokens.into_iter().map(AdminTokenInfo::from).collect(),
            total: page.total,
            limit,
            offset,
        }))
    }

    /// Revokes any user's token (audited as `token.admin_revoke` with the owner's id).
    /// Revoking a revoked token succeeds and changes nothing.
    #[oai(path = "/:id", method = "delete", operation_id = "admin_revoke_token")]
    async fn revoke(&self, auth: AdminAuth, id: Path<String>) -> ApiResult<NoContent> {
        let row = self
            .state
            .store
            .pat_by_id(&id)
            .await?
            .ok_or_else(|| Error::not_found("Token not found"))?;
        self.state
            .admin
            .revoke_token(&auth.0.actor, &row, Revoker::Admin)
            .await?;
        Ok(NoContent::Done)
    }
}
