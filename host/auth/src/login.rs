//! Password login: the one path from an e-mail and a password to a session token, shared by
//! `POST /auth/token` and the `/login` page so both count attempts, hide which accounts
//! exist and audit `auth.login` the same way.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use svc_core::Error;
use svc_store::audit::{Actor, AuditWriter, ClientKind, Event};
use svc_store::users::User;
use svc_store::Store;

use crate::password;
use crate::ratelimit::{LimitedBy, LoginLimiter};
use crate::Authenticator;

/// What every refused password says, whatever the reason, so it reveals no account.
pub const BAD_CREDENTIALS: &str = "Invalid email or password";

/// A successful login.
#[derive(Debug, Clone)]
pub struct Session {
    /// The session token (a JWT valid [`crate::SESSION_HOURS`] hours).
    pub token: String,
    /// When it expires (RFC 3339).
    pub expires_at: String,
    /// Who logged in.
    pub user: User,
    /// Whether they are an administrator.
    pub is_admin: bool,
}

/// Where a login attempt came from, for the limiter and the audit row.
#[derive(Debug, Clone)]
pub struct Origin {
    /// The client's address (unknown: counted as `0.0.0.0`).
    pub ip: Option<IpAddr>,
    /// The request id.
    pub request_id: Option<String>,
    /// `web` for the login page, `api` for `POST /auth/token`.
    pub client_kind: ClientKind,
}

/// Checks passwords under the login limits.
#[derive(Debug, Clone)]
pub struct Login {
    store: Store,
    auth: Authenticator,
    limiter: Arc<LoginLimiter>,
    audit: Arc<AuditWriter>,
}

impl Login {
    /// A login service over the server's store, authenticator, limiter and audit writer.
    pub fn new(
        store: Store,
        auth: Authenticator,
        limiter: Arc<LoginLimiter>,
        audit: Arc<AuditWriter>,
    ) -> Self {
        Self {
            store,
            auth,
            limiter,
            audit,
        }
    }

    /// A session for `email` when `password` is theirs: 429 past the limits, 401 otherwise
    /// (the same message whether or not the account exists).
    pub async fn password(
        &self,
        email: &str,
        password: &str,
        origin: Origin,
    ) -> Result<Session, Error> {
        let started = Instant::now();
        let ip = origin.ip.unwrap_or(std::net::Ipv4Addr::UNSPECIFIED.into());
        let attempt = self.limiter.attempt(ip, email).map_err(|refused| {
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
        let user = self.store.user_by_email(email).await?;
        // Verify against a decoy when there is no hash, so timing does not reveal accounts.
        // The hash is slow by design: it runs off the request workers.
        let hash = user
            .as_ref()
            .and_then(|u| u.password_hash.clone())
            .unwrap_or_else(|| password::decoy().to_owned());
        let candidate = password.to_owned();
        let password_ok = tokio::task::spawn_blocking(move || password::verify(&candidate, &hash))
            .await
            .map_err(Error::internal)?;
        let mut actor = Actor::anonymous(origin.ip.map(|i| i.to_string()), origin.request_id);
        actor.client_kind = origin.client_kind;
        actor.user_id = user.as_ref().map(|u| u.id.clone());
        let event = Event::new("auth.login").resource(format!("user:{email}"));
        let user = match user {
            Some(u) if password_ok && u.password_hash.is_some() => u,
            _ => {
                self.audit
                    .write(&actor, event.failed(401, BAD_CREDENTIALS).timed(started))
                    .await;
                return Err(Error::unauthorized(BAD_CREDENTIALS));
            }
        };
        if !user.active {
            self.audit
                .write(
                    &actor,
                    event.failed(401, "Account deactivated").timed(started),
                )
                .await;
            return Err(Error::unauthorized("Account deactivated"));
        }
        self.limiter.succeeded(attempt);
        let (token, expires_at) = self.auth.issue_session(&user);
        let is_admin = self.store.is_admin(&user.id).await?;
        self.audit.write(&actor, event.timed(started)).await;
        Ok(Session {
            token,
            expires_at,
            user,
            is_admin,
        })
    }
}
