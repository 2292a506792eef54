//! svc-auth: who the caller is and what they may do.
//!
//! - Authentication: bearer tokens (session JWTs and personal access tokens) to a [`Caller`]
//!   ([`Authenticator`]), passwords, and login rate limits.
//! - The one access check for tables ([`access::Access`]).
//! - The administrative operations on users, groups, grants and tokens ([`admin::Admin`]),
//!   shared by the HTTP API and the shell commands.
//!
//! Must never import poem or any svc crate above it (catalog, query, the host); it stands on
//! `svc-store` and `svc-core`.

pub mod access;
pub mod admin;
mod flushed;
pub mod jwt;
pub mod login;
pub mod password;
pub mod ratelimit;

use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use flushed::{Flushed, Lookup, Ticket};
use jwt::{Claims, JwtKeys, TokenType};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use svc_core::cache::Cache;
use svc_core::clock::{format_ts, new_id, parse_ts};
use svc_store::audit::{Actor, ClientKind};
use svc_store::tokens::PatRow;
use svc_store::users::{Identity, User};
use svc_store::Store;
use svc_trace::Instrument as _;

/// Lifetime of a session token from `POST /auth/token`.
pub const SESSION_HOURS: i64 = 24;
/// Longest PAT lifetime accepted.
pub const MAX_PAT_DAYS: i64 = 3650;
/// `last_used_at` is written at most this often per token.
const TOUCH_INTERVAL_SECS: i64 = 60;

/// How long a resolved identity (user, admin flag, PAT row) is reused without a store read.
///
/// Changes made through this server (deactivation, membership, token revocation) forget
/// cached identities at once; changes made by another process (an `svc-server` shell command,
/// another replica) take effect within this bound.
pub const IDENTITY_TTL: std::time::Duration = std::time::Duration::from_secs(2);

/// Cache key: the user id and the PAT id (None for sessions).
type IdentityKey = (String, Option<String>);

/// An authenticated caller, with the request context every audit row needs.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The user (shared with the cached identity it was resolved from).
    pub user: Arc<User>,
    /// Member of the `Admin` group (read from the store at most [`IDENTITY_TTL`] ago).
    pub is_admin: bool,
    /// Session or PAT.
    pub token_type: TokenType,
    /// The PAT's id when `token_type` is `Pat`.
    pub token_id: Option<String>,
    /// Audit context (user, client kind, address, request id).
    pub actor: Actor,
}

impl From<&Caller> for svc_plugin_api::Caller {
    /// The identity a driver sees: enough for a row filter, nothing of the session.
    fn from(c: &Caller) -> Self {
        svc_plugin_api::Caller {
            user_id: c.user.id.clone(),
            username: c.user.email.clone(),
            is_admin: c.is_admin,
        }
    }
}

/// Why a bearer token was refused; each maps to a 401 message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthFailure {
    /// Bad signature, malformed, or expired JWT.
    InvalidToken,
    /// The user in `sub` no longer exists.
    UserNotFound,
    /// The user is deactivated.
    Deactivated,
    /// A PAT with no stored row.
    TokenUnknown,
    /// A revoked PAT.
    TokenRevoked,
    /// A PAT past its stored expiry.
    TokenExpired,
    /// A PAT whose stored hash differs.
    TokenMismatch,
}

impl AuthFailure {
    /// The message shown to the caller.
    pub fn message(self) -> &'static str {
        match self {
            Self::InvalidToken => "Invalid or expired token",
            Self::UserNotFound => "User not found",
            Self::Deactivated => "Account deactivated",
            Self::TokenUnknown => "Token unknown",
            Self::TokenRevoked => "Token revoked",
            Self::TokenExpired => "Token expired",
            Self::TokenMismatch => "Token mismatch",
        }
    }
}

/// Failure to resolve: either the token is bad, or the store is.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// The token was refused.
    #[error("{}", .0.message())]
    Refused(AuthFailure),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] svc_store::StoreError),
}

/// Hex SHA-256 of a token, as stored.
pub fn token_hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// Issues and checks tokens.
#[derive(Clone)]
pub struct Authenticator {
    keys: JwtKeys,
    /// Keys [`Authenticator::seal`] (derived from the signing secret, so every replica with
    /// the same secret accepts the same CSRF tokens and cursors).
    seal_key: [u8; 32],
    store: Store,
    identities: Flushed<IdentityKey, Arc<Known>>,
    /// Tokens whose signature has been checked, by their exact text (see [`Verified`]).
    verified: Cache<String, Arc<Verified>>,
}

/// A token whose signature this process has checked, kept so the next request with the same
/// token skips the HMAC and the SHA-256 of its hash (two thirds of what resolving a cached
/// caller cost). Only what the signature proves is kept: the expiry is checked on every use,
/// and revocation, deactivation and group changes still come from the identity every time.
#[derive(Debug)]
struct Verified {
    claims: Claims,
    /// The stored-hash form of a PAT (empty for session tokens, which are not stored).
    pat_hash: String,
    /// The identity cache's key for this token, made once rather than on every request.
    key: IdentityKey,
}

/// An identity as the cache keeps it, with what every request checks already parsed: the
/// PAT's stored times were parsed from text on every request, about 1,300 instructions of
/// a cached sample, and the user was copied field by field into each caller.
#[derive(Debug, Clone)]
struct Known {
    user: Arc<User>,
    is_admin: bool,
    /// The PAT row; its text times are not read here (the parsed ones below are).
    pat: Option<PatRow>,
    /// The PAT's expiry (None: it never expires, or the stored text is not a time).
    pat_expires: Option<DateTime<Utc>>,
    /// The PAT's last recorded use.
    pat_last_used: Option<DateTime<Utc>>,
}

impl From<Identity> for Known {
    fn from(identity: Identity) -> Self {
        let parsed = |t: Option<&str>| t.and_then(parse_ts);
        Self {
            pat_expires: parsed(identity.pat.as_ref().and_then(|p| p.expires_at.as_deref())),
            pat_last_used: parsed(
                identity
                    .pat
                    .as_ref()
                    .and_then(|p| p.last_used_at.as_deref()),
            ),
            user: Arc::new(identity.user),
            is_admin: identity.is_admin,
            pat: identity.pat,
        }
    }
}

/// Verified tokens kept at most (about 0.5 KB each).
const VERIFIED_CAPACITY: usize = 10_000;
/// How long a token's signature check is kept (then it is checked again).
const VERIFIED_TTL: std::time::Duration = std::time::Duration::from_secs(600);

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("cached_identities", &self.identities.entry_count())
            .finish()
    }
}

impl Authenticator {
    /// An authenticator over a store with a signing secret.
    pub fn new(store: Store, secret: &[u8]) -> Self {
        Self {
            keys: JwtKeys::new(secret),
            seal_key: Sha256::new()
                .chain_update(b"svc-csrf\0")
                .chain_update(secret)
                .finalize()
                .into(),
            store,
            identities: Flushed::new(100_000, IDENTITY_TTL, svc_metrics::Cache::Identity),
            verified: Cache::new(VERIFIED_CAPACITY, VERIFIED_TTL),
        }
    }

    /// The token's claims if its signature is ours and it has not expired: from the
    /// verified tokens, or checked (and then kept).
    fn verify(&self, token: &str, now: DateTime<Utc>) -> Option<Arc<Verified>> {
        if let Some(hit) = self.verified.get(token) {
            // The same rule as the signature check: expired once `exp` is in the past.
            if hit.claims.exp.is_some_and(|exp| exp < now.timestamp()) {
                self.verified.remove(token);
                return None;
            }
            return Some(hit);
        }
        let claims = self.keys.verify(token)?;
        let pat_hash = match claims.typ {
            TokenType::Pat => token_hash(token),
            TokenType::Session => String::new(),
        };
        let pat_id = (claims.typ == TokenType::Pat).then(|| claims.jti.clone());
        let key = (claims.sub.clone(), pat_id);
        let verified = Arc::new(Verified {
            claims,
            pat_hash,
            key,
        });
        self.verified.insert(token.to_owned(), verified.clone());
        Some(verified)
    }

    /// Forgets every cached identity. Called after any change to users, memberships or
    /// tokens, so this server never acts on an identity it has changed.
    pub fn forget_identities(&self) {
        self.identities.flush();
    }

    /// The identity behind a token's claims: cached, or read in one store query. The ticket
    /// is what a later update of the cached identity must be inserted with.
    async fn identity(
        &self,
        key: &IdentityKey,
    ) -> Result<Option<(Arc<Known>, Ticket)>, svc_store::StoreError> {
        let ticket = match self.identities.lookup(key) {
            Lookup::Hit(known, ticket) => return Ok(Some((known, ticket))),
            Lookup::Miss(ticket) => ticket,
        };
        // Boxed, as `Flushed::get_or_read` boxes its reads: only a miss pays for it.
        let Some(identity) = Box::pin(self.store.identity(&key.0, key.1.as_deref())).await? else {
            return Ok(None);
        };
        let known = Arc::new(Known::from(identity));
        self.identities.insert(ticket, key.clone(), known.clone());
        Ok(Some((known, ticket)))
    }

    /// A session token for a user; returns the token and its expiry.
    pub fn issue_session(&self, user: &User) -> (String, String) {
        let now = Utc::now();
        let exp = now + Duration::hours(SESSION_HOURS);
        let claims = Claims {
            sub: user.id.clone(),
            email: user.email.clone(),
            typ: TokenType::Session,
            iat: now.timestamp(),
            exp: Some(exp.timestamp()),
            jti: uuid::Uuid::new_v4().simple().to_string(),
        };
        (self.keys.sign(&claims), format_ts(exp))
    }

    /// A keyed digest of `message` for `purpose`: how the server recognises a value it
    /// handed out (a CSRF token, a result cursor) as its own without storing it. The
    /// purpose keeps a value minted for one use from passing for another.
    pub fn seal(&self, purpose: &str, message: &str) -> String {
        let digest = Sha256::new()
            .chain_update(self.seal_key)
            .chain_update(purpose.as_bytes())
            .chain_update([0])
            .chain_update(message.as_bytes())
            .finalize();
        hex::encode(&digest[..20])
    }

    /// Whether `presented` is [`Authenticator::seal`] of `message` for `purpose`
    /// (compared in constant time).
    pub fn sealed(&self, purpose: &str, message: &str, presented: &str) -> bool {
        let expected = self.seal(purpose, message);
        same_secret(expected.as_bytes(), presented.as_bytes())
    }

    /// The CSRF token of a browser session: bound to its session token, so a token read from
    /// one session is worthless in another, and nothing needs storing.
    pub fn csrf_token(&self, session_token: &str) -> String {
        self.seal("csrf", session_token)
    }

    /// Whether `presented` is the CSRF token of `session_token` (compared in constant time).
    pub fn csrf_ok(&self, session_token: &str, presented: &str) -> bool {
        self.sealed("csrf", session_token, presented)
    }

    /// Creates a PAT; returns the stored row and the token, which is shown once.
    pub async fn create_pat(
        &self,
        user: &User,
        name: &str,
        days: Option<i64>,
    ) -> Result<(PatRow, String), svc_store::StoreError> {
        let now = Utc::now();
        let id = new_id();
        let exp = days.map(|d| now + Duration::days(d));
        let claims = Claims {
            sub: user.id.clone(),
            email: user.email.clone(),
            typ: TokenType::Pat,
            iat: now.timestamp(),
            exp: exp.map(|e| e.timestamp()),
            jti: id.clone(),
        };
        let token = self.keys.sign(&claims);
        let row = PatRow {
            // The id is a UUIDv7 whose leading digits encode the time; the tail is random.
            prefix: id[id.len() - 8..].to_string(),
            id,
            user_id: user.id.clone(),
            name: name.to_string(),
            token_hash: token_hash(&token),
            created_at: Some(format_ts(now)),
            expires_at: exp.map(format_ts),
            last_used_at: None,
            last_used_ip: None,
            revoked_at: None,
        };
        self.store.insert_pat(&row).await?;
        Ok((row, token))
    }

    /// Resolves a bearer token to a caller. `client_ip` and `request_id` go into the audit
    /// context; `via_cookie` marks browser sessions.
    pub async fn resolve(
        &self,
        token: &str,
        client_ip: Option<String>,
        request_id: Option<String>,
        via_cookie: bool,
    ) -> Result<Caller, ResolveError> {
        async {
            let refused = ResolveError::Refused;
            let now = Utc::now();
            let verified = self
                .verify(token, now)
                .ok_or(refused(AuthFailure::InvalidToken))?;
            let claims = &verified.claims;
            let key = &verified.key;
            let (known, ticket) = self
                .identity(key)
                .await?
                .ok_or(refused(AuthFailure::UserNotFound))?;
            let user = known.user.clone();
            if !user.active {
                return Err(refused(AuthFailure::Deactivated));
            }
            let mut token_id = None;
            if claims.typ == TokenType::Pat {
                let row = known
                    .pat
                    .as_ref()
                    .ok_or(refused(AuthFailure::TokenUnknown))?;
                if row.revoked_at.is_some() {
                    return Err(refused(AuthFailure::TokenRevoked));
                }
                if known.pat_expires.is_some_and(|e| e <= now) {
                    return Err(refused(AuthFailure::TokenExpired));
                }
                let presented = &verified.pat_hash;
                if !same_secret(presented.as_bytes(), row.token_hash.as_bytes())
                    || row.user_id != user.id
                {
                    return Err(refused(AuthFailure::TokenMismatch));
                }
                self.touch_if_stale(ticket, key, &known, now, client_ip.as_deref());
                token_id = Some(row.id.clone());
            }
            let is_admin = known.is_admin;
            let client_kind = match (claims.typ, via_cookie) {
                (TokenType::Pat, _) => ClientKind::Cli,
                (TokenType::Session, true) => ClientKind::Web,
                (TokenType::Session, false) => ClientKind::Api,
            };
            Ok(Caller {
                actor: Actor {
                    user_id: Some(user.id.clone()),
                    client_kind,
                    client_ip,
                    correlation_id: request_id,
                    started: Some(std::time::Instant::now()),
                },
                user,
                is_admin,
                token_type: claims.typ,
                token_id,
            })
        }
        .in_child("auth.resolve")
        .await
    }

    /// Updates `last_used_at` off the request path, at most once a minute per token (the
    /// cached identity is updated too, so the next request sees the touch).
    fn touch_if_stale(
        &self,
        ticket: Ticket,
        key: &IdentityKey,
        known: &Known,
        now: DateTime<Utc>,
        ip: Option<&str>,
    ) {
        let Some(row) = known.pat.as_ref() else {
            return;
        };
        let fresh = known
            .pat_last_used
            .is_some_and(|t| (now - t).num_seconds() < TOUCH_INTERVAL_SECS);
        if fresh && row.last_used_ip.as_deref() == ip {
            return;
        }
        let mut touched = known.clone();
        touched.pat_last_used = Some(now);
        if let Some(pat) = touched.pat.as_mut() {
            pat.last_used_ip = ip.map(str::to_string);
        }
        // Under the ticket the identity was read with: a revocation flushed since then
        // still wins.
        self.identities
            .insert(ticket, key.clone(), Arc::new(touched));
        let store = self.store.clone();
        let (id, ip) = (row.id.clone(), ip.map(str::to_string));
        tokio::spawn(async move {
            if let Err(err) = store.touch_pat(&id, ip.as_deref()).await {
                tracing::warn!(token_id = %id, error = %err, "could not record token use");
            }
        });
    }
}

/// Whether two secrets (or their digests) are equal, in time that depends only on their
/// lengths. Compared a word at a time: `subtle` a byte at a time cost every PAT's check 668
/// instructions a request (callgrind), with the same guarantee for each word.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let (a_words, b_words) = (a.chunks_exact(8), b.chunks_exact(8));
    let mut equal = a_words.remainder().ct_eq(b_words.remainder());
    for (x, y) in a_words.zip(b_words) {
        let word = |w: &[u8]| u64::from_ne_bytes(w.try_into().expect("chunks of eight"));
        equal &= word(x).ct_eq(&word(y));
    }
    bool::from(equal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_equal_only_when_every_byte_is() {
        let digest = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
        assert!(same_secret(digest.as_bytes(), digest.to_owned().as_bytes()));
        assert!(same_secret(b"", b""));
        assert!(same_secret(b"odd-length", b"odd-length"));
        // A difference in any word, or in the bytes past the last whole word, is seen.
        for at in [0, 7, 8, 31, 63] {
            let mut other = digest.as_bytes().to_vec();
            other[at] ^= 1;
            assert!(!same_secret(digest.as_bytes(), &other), "byte {at}");
        }
        assert!(!same_secret(b"odd-length", b"odd-lengtH"));
        assert!(!same_secret(digest.as_bytes(), &digest.as_bytes()[..63]));
    }

    /// A token kept as verified is still refused once it expires, and a token that differs
    /// by one byte from a kept one is checked, not matched.
    #[tokio::test]
    async fn a_kept_token_is_refused_once_it_expires() {
        let dir = svc_store::testing::TempDir::new();
        let store = Store::open(&svc_store::default_sqlite_url(&dir.0))
            .await
            .unwrap();
        let user = store
            .create_user("a@example.com", None, None)
            .await
            .unwrap();
        let auth = Authenticator::new(store, b"0123456789abcdef0123456789abcdef");
        let now = Utc::now().timestamp();
        let token = auth.keys.sign(&Claims {
            sub: user.id.clone(),
            email: user.email.clone(),
            typ: TokenType::Session,
            iat: now,
            exp: Some(now + 1),
            jti: "j".into(),
        });
        for _ in 0..2 {
            let caller = auth.resolve(&token, None, None, false).await.unwrap();
            assert_eq!(caller.user.id, user.id);
        }
        assert!(auth.verified.get(&token).is_some());
        // One character changed inside the signature.
        let mut forged = token.clone().into_bytes();
        let i = forged.len() - 10;
        forged[i] = if forged[i] == b'A' { b'B' } else { b'A' };
        let forged = String::from_utf8(forged).unwrap();
        assert!(matches!(
            auth.resolve(&forged, None, None, false).await,
            Err(ResolveError::Refused(AuthFailure::InvalidToken))
        ));
        tokio::time::sleep(std::time::Duration::from_millis(2_100)).await;
        assert!(matches!(
            auth.resolve(&token, None, None, false).await,
            Err(ResolveError::Refused(AuthFailure::InvalidToken))
        ));
    }
}
