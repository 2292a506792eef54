//! Credentials for warehouse calls: none (an emulator), a static access token, or a
//! service-account key file exchanged for short-lived tokens (OAuth 2.0 JWT-bearer flow,
//! RFC 7523): a JWT signed with the key's RS256 private key is posted to the key's
//! `token_uri`, and the access token it returns is reused until a minute before it expires.
//!
//! The private key and tokens are never logged or put in error messages.

use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde::Deserialize;
use serde_json::json;
use svc_plugin_api::{DriverError, ErrorKind, Result};
use tokio::sync::Mutex;

use crate::config::WarehouseConfig;

/// The OAuth scope warehouse calls need.
const SCOPE: &str = "https://www.googleapis.com/auth/bigquery";
/// Lifetime asked for each assertion (the most Google accepts).
const ASSERTION_SECONDS: u64 = 3600;
/// A token is renewed this long before it expires.
const RENEW_EARLY: Duration = Duration::from_secs(60);

/// The fields of a service-account key file that the flow needs.
#[derive(Deserialize)]
struct KeyFile {
    client_email: String,
    private_key: String,
    #[serde(default = "default_token_uri")]
    token_uri: String,
}

fn default_token_uri() -> String {
    "https://oauth2.googleapis.com/token".into()
}

/// A parsed, usable service-account key.
pub struct ServiceAccount {
    email: String,
    key: EncodingKey,
    token_uri: String,
    cached: Mutex<Option<(String, Instant)>>,
}

impl std::fmt::Debug for ServiceAccount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key or a token.
        f.debug_struct("ServiceAccount")
            .field("email", &self.email)
            .field("token_uri", &self.token_uri)
            .finish()
    }
}

impl ServiceAccount {
    /// Reads and checks a key file; the error names the file and what is wrong, never the key.
    pub fn read(path: &Path) -> std::result::Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("credentials_file {}: {e}", path.display()))?;
        let file: KeyFile = serde_json::from_str(&text).map_err(|e| {
            format!(
                "credentials_file {}: not a service-account key (needs client_email and private_key): {}",
                path.display(),
                e.to_string().split(" at line").next().unwrap_or_default()
            )
        })?;
        let key = EncodingKey::from_rsa_pem(file.private_key.as_bytes()).map_err(|_| {
            format!(
                "credentials_file {}: private_key is not an RSA private key in PEM form",
                path.display()
            )
        })?;
        Ok(Self {
            email: file.client_email,
            key,
            token_uri: file.token_uri,
            cached: Mutex::new(None),
        })
    }

    /// A valid access token, from the cache or a fresh exchange.
    async fn token(&self, http: &reqwest::Client) -> Result<String> {
        let mut cached = self.cached.lock().await;
        if let Some((token, until)) = cached.as_ref() {
            if Instant::now() < *until {
                return Ok(token.clone());
            }
        }
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let claims = json!({
            "iss": self.email, "scope": SCOPE, "aud": self.token_uri,
            "iat": now, "exp": now + ASSERTION_SECONDS,
        });
        let assertion = jsonwebtoken::encode(&Header::new(Algorithm::RS256), &claims, &self.key)
            .map_err(|e| DriverError::internal(format!("signing the token request: {e}")))?;
        let body = format!(
            "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion={assertion}"
        );
        let failed = |why: String| {
            DriverError::new(
                ErrorKind::AuthFailed,
                format!("The token endpoint refused the service account {}: {why}", self.email),
            )
            .with_code("auth_failed")
            .with_details(json!({"hint": "check credentials_file under [data_source.warehouse]: the key may be revoked or the account disabled"}))
        };
        let resp = http
            .post(&self.token_uri)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await
            .map_err(|e| failed(format!("unreachable ({e})")))?;
        let status = resp.status();
        let answer: serde_json::Value = resp.json().await.unwrap_or_default();
        let token = answer["access_token"]
            .as_str()
            .filter(|_| status.is_success());
        let Some(token) = token else {
            let why = answer["error_description"]
                .as_str()
                .or(answer["error"].as_str())
                .unwrap_or("no access_token in the answer");
            return Err(failed(format!("HTTP {status}: {why}")));
        };
        let lifetime = Duration::from_secs(answer["expires_in"].as_u64().unwrap_or(3600));
        let until = Instant::now() + lifetime.saturating_sub(RENEW_EARLY);
        *cached = Some((token.to_owned(), until));
        Ok(token.to_owned())
    }
}

/// How calls authenticate.
#[derive(Debug)]
pub enum Credentials {
    /// No `Authorization` header (an emulator).
    None,
    /// A fixed bearer token.
    Static(String),
    /// Tokens exchanged for a service-account key.
    ServiceAccount(ServiceAccount),
    /// The key file could not be used; every call fails with this message.
    Broken(String),
}

impl Credentials {
    /// From the config: a key file wins over a static token.
    pub fn from_config(config: &WarehouseConfig) -> Self {
        if let Some(file) = config.credentials_file.as_deref().filter(|f| !f.is_empty()) {
            return match ServiceAccount::read(Path::new(file)) {
                Ok(sa) => Self::ServiceAccount(sa),
                Err(e) => Self::Broken(e),
            };
        }
        match config.access_token.as_deref().filter(|t| !t.is_empty()) {
            Some(t) => Self::Static(t.to_owned()),
            None => Self::None,
        }
    }

    /// The bearer token for the next call, if any.
    pub async fn bearer(&self, http: &reqwest::Client) -> Result<Option<String>> {
        match self {
            Self::None => Ok(None),
            Self::Static(t) => Ok(Some(t.clone())),
            Self::ServiceAccount(sa) => sa.token(http).await.map(Some),
            Self::Broken(why) => {
                Err(DriverError::new(ErrorKind::AuthFailed, why.clone()).with_code("auth_failed"))
            }
        }
    }
}
