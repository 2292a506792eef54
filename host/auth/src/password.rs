//! Password hashing with argon2 (PHC strings, the crate's default parameters).

use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;

/// Shortest password accepted.
pub const MIN_PASSWORD_LEN: usize = 8;

/// Hashes a password into a PHC string.
pub fn hash(password: &str) -> String {
    let salt = SaltString::generate(&mut OsRng);
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .expect("argon2 hashing with a generated salt cannot fail")
        .to_string()
}

/// Checks a password against a stored PHC string (constant time inside argon2).
pub fn verify(password: &str, phc: &str) -> bool {
    PasswordHash::new(phc)
        .map(|h| {
            Argon2::default()
                .verify_password(password.as_bytes(), &h)
                .is_ok()
        })
        .unwrap_or(false)
}

/// A hash to verify against when the user does not exist, so timing does not reveal that.
pub fn decoy() -> &'static str {
    static DECOY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DECOY.get_or_init(|| hash("decoy-password-never-matches"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn round_trip() {
        let h = super::hash("correct horse");
        assert!(super::verify("correct horse", &h));
        assert!(!super::verify("wrong horse", &h));
        assert!(!super::verify("x", "not a phc string"));
    }
}
