//! `POST /auth/token` — e-mail and password to a session token.

use std::sync::Arc;

use poem::Request;
use poem_openapi::payload::Json;
use poem_openapi::{Object, OpenApi};
use svc_auth::login::Origin;
use svc_store::audit::ClientKind;

use super::types::Str;
use super::{ApiResult, RequestMeta, Tag};
use crate::state::AppState;

pub struct AuthApi {
    pub state: Arc<AppState>,
}

/// Login credentials.
#[derive(Object)]
struct LoginRequest {
    /// The account's e-mail (exact match).
    email: Str,
    /// The account's password.
    #[oai(validator(max_length = 1024))]
    password: Str,
}

/// A session token.
#[derive(Object)]
struct TokenResponse {
    /// The bearer token.
    access_token: String,
    /// Always `bearer`.
    token_type: String,
    /// When the token expires (RFC 3339).
    expires_at: String,
    /// The user's id.
    user_id: String,
    /// The user's e-mail.
    email: String,
    /// Whether the user is an administrator.
    is_admin: bool,
}

#[OpenApi]
impl AuthApi {
    /// Exchanges e-mail and password for a session token (valid 24 h). Attempts are limited
    /// per client address and per account (10 a minute each; a success frees only its own).
    #[oai(
        path = "/auth/token",
        method = "post",
        tag = "Tag::Auth",
        operation_id = "login"
    )]
    async fn token(
        &self,
        req: &Request,
        body: Json<LoginRequest>,
    ) -> ApiResult<Json<TokenResponse>> {
        let meta = RequestMeta::of(req);
        let session = self
            .state
            .login
            .password(
                &body.email,
                &body.password,
                Origin {
                    ip: meta.client_ip,
                    request_id: Some(meta.request_id),
                    client_kind: ClientKind::Api,
                },
            )
            .await?;
        Ok(Json(TokenResponse {
            access_token: session.token,
            token_type: "bearer".into(),
            expires_at: session.expires_at,
            user_id: session.user.id,
            email: session.user.email,
            is_admin: session.is_admin,
        }))
    }
}
