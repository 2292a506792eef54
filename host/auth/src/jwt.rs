//! HS256 JSON Web Tokens: session tokens and personal access tokens share one format.

use jsonwebtoken::{decode, encode, Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

/// What kind of token a JWT is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TokenType {
    /// A login session (expires).
    Session,
    /// A personal access token backed by a stored row.
    Pat,
}

/// The claims svc issues. Unknown claims (such as a legacy `role`) are ignored on decode.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Claims {
    /// User id.
    pub sub: String,
    /// User e-mail at issue time (informational).
    pub email: String,
    /// Token type.
    pub typ: TokenType,
    /// Issued at (seconds since the epoch).
    pub iat: i64,
    /// Expiry; absent on PATs that never expire.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exp: Option<i64>,
    /// Token id (for PATs, the stored row id).
    pub jti: String,
}

/// Signs and verifies tokens with one secret.
#[derive(Clone)]
pub struct JwtKeys {
    encoding: EncodingKey,
    decoding: DecodingKey,
}

impl std::fmt::Debug for JwtKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JwtKeys(..)")
    }
}

impl JwtKeys {
    /// Keys from a shared secret.
    pub fn new(secret: &[u8]) -> Self {
        Self {
            encoding: EncodingKey::from_secret(secret),
            decoding: DecodingKey::from_secret(secret),
        }
    }

    /// Signs claims.
    pub fn sign(&self, claims: &Claims) -> String {
        encode(&Header::new(Algorithm::HS256), claims, &self.encoding)
            .expect("HS256 signing cannot fail")
    }

    /// Verifies the signature (HS256 only) and, when present, the expiry.
    pub fn verify(&self, token: &str) -> Option<Claims> {
        let mut validation = Validation::new(Algorithm::HS256);
        // `exp` is optional (never-expiring PATs); when present it is still enforced.
        validation.required_spec_claims.clear();
        validation.leeway = 0;
        let claims = decode::<Claims>(token, &self.decoding, &validation)
            .ok()?
            .claims;
        // Sessions always expire; a session token without `exp` was not minted by us.
        if claims.typ == TokenType::Session && claims.exp.is_none() {
            return None;
        }
        Some(claims)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims(typ: TokenType, exp: Option<i64>) -> Claims {
        Claims {
            sub: "u".into(),
            email: "a@b".into(),
            typ,
            iat: 0,
            exp,
            jti: "j".into(),
        }
    }

    #[test]
    fn verifies_own_tokens_and_rejects_others() {
        let keys = JwtKeys::new(b"0123456789abcdef0123456789abcdef");
        let far = chrono::Utc::now().timestamp() + 3600;
        let t = keys.sign(&claims(TokenType::Session, Some(far)));
        assert_eq!(keys.verify(&t).unwrap().sub, "u");
        assert!(JwtKeys::new(b"another-secret-another-secret-xx")
            .verify(&t)
            .is_none());
        assert!(
            keys.verify(&keys.sign(&claims(TokenType::Session, Some(1))))
                .is_none(),
            "expired"
        );
        assert!(
            keys.verify(&keys.sign(&claims(TokenType::Session, None)))
                .is_none(),
            "session without exp"
        );
        assert!(
            keys.verify(&keys.sign(&claims(TokenType::Pat, None)))
                .is_some(),
            "PAT without exp"
        );
        assert!(keys.verify("garbage").is_none());
    }

    #[test]
    fn a_legacy_role_claim_is_ignored() {
        let keys = JwtKeys::new(b"0123456789abcdef0123456789abcdef");
        let far = chrono::Utc::now().timestamp() + 3600;
        let mut v = serde_json::to_value(claims(TokenType::Session, Some(far))).unwrap();
        v["role"] = "admin".into();
        let t = encode(&Header::new(Algorithm::HS256), &v, &keys.encoding).unwrap();
        assert_eq!(keys.verify(&t).unwrap().typ, TokenType::Session);
    }
}
