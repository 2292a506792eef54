//! `POST /auth/token` — e-mail and password to a session token.

use std::sync::Arc;
use std::time::Instant;

use poem::Request;
use poem_openapi::payload::Json;
use poem_openapi::{Object, OpenApi};
use svc_auth::password;
use svc_auth::ratelimit::LimitedBy;
use svc_core::Error;
use svc_store::audit::{Actor, Event};

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

const BAD_CREDENTIALS: &str = "Invalid email or password";

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
        let started = Instant::now();
        let meta = RequestMeta::of(req);
        let ip = meta
            .client_ip
            .unwrap_or(std::net::Ipv4Addr::UNSPECIFIED.into());
        let limiter = &self.state.login_limiter;
        let attempt = limiter.attempt(ip, &body.email).map_err(|refused| {
            let from = match refused.by {
                LimitedBy::Address => "from this address",
                LimitedBy::Account => "on this account",
            };
            Error::too_many(
                format!(
                    "Too many login attempts {from}; retry in {} s",
                    refused.retry_after
                ),
                refused.retry_after,
            )
        })?;
        let user = self.state.store.user_by_email(&body.email).await?;
        // Verify against a decoy when there is no hash, so timing does not reveal accounts.
        // The hash is slow by design: it runs off the request workers.
        let hash = user
            .as_ref()
            .and_then(|u| u.password_hash.clone())
            .unwrap_or_else(|| password::decoy().to_owned());
        let candidate = body.password.to_string();
        let password_ok = tokio::task::spawn_blocking(move || password::verify(&candidate, &hash))
            .await
            .map_err(Error::internal)?;
        let mut actor = Actor::anonymous(meta.ip_string(), Some(meta.request_id.clone()));
        actor.user_id = user.as_ref().map(|u| u.id.clone());
        let event = Event::new("auth.login").resource(format!("user:{}", body.email));
        let user = match user {
            Some(u) if password_ok && u.password_hash.is_some() => u,
            _ => {
                self.state
                    .audit
                    .write(&actor, event.failed(401, BAD_CREDENTIALS).timed(started))
                    .await;
                return Err(Error::unauthorized(BAD_CREDENTIALS).into());
            }
        };
        if !user.active {
            self.state
                .audit
                .write(
                    &actor,
                    event.failed(401, "Account deactivated").timed(started),
                )
                .await;
            return Err(Error::unauthorized("Account deactivated").into());
        }
        limiter.succeeded(attempt);
        let (access_token, expires_at) = self.state.auth.issue_session(&user);
        let is_admin = self.state.store.is_admin(&user.id).await?;
        self.state.audit.write(&actor, event.timed(started)).await;
        Ok(Json(TokenResponse {
            access_token,
            token_type: "bearer".into(),
            expires_at,
            user_id: user.id,
            email: user.email,
            is_admin,
        }))
    }
}
