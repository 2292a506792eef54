//! Webhook signatures: `X-Hub-Signature: sha256=<hex>`, the HMAC-SHA256 of the raw body under
//! the connection's secret, compared in constant time.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// Why a delivery's signature was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No signature header.
    Missing,
    /// A header that is not `sha256=<64 hex digits>`.
    Malformed,
    /// A well-formed signature of some other body or secret.
    Mismatch,
}

impl Refusal {
    /// Said to the sender (and kept in the audit row).
    pub fn message(self) -> &'static str {
        match self {
            Self::Missing => "missing X-Hub-Signature header",
            Self::Malformed => "X-Hub-Signature must be sha256=<64 hex digits>",
            Self::Mismatch => "signature does not match the body",
        }
    }
}

/// `sha256=<hex>` of `body` under `secret` (what a sender puts in the header).
pub fn sign(secret: &[u8], body: &[u8]) -> String {
    format!("sha256={}", hex::encode(mac(secret, body)))
}

fn mac(secret: &[u8], body: &[u8]) -> [u8; 32] {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes keys of any length");
    mac.update(body);
    mac.finalize().into_bytes().into()
}

/// Checks `header` against `body`. The MAC is always computed, so a malformed header costs
/// the same as a wrong one.
pub fn verify(secret: &[u8], body: &[u8], header: Option<&str>) -> Result<(), Refusal> {
    let expected = mac(secret, body);
    let header = header.ok_or(Refusal::Missing)?;
    let given = header
        .trim()
        .strip_prefix("sha256=")
        .and_then(|h| hex::decode(h).ok())
        .filter(|d| d.len() == 32)
        .ok_or(Refusal::Malformed)?;
    if bool::from(expected.ct_eq(given.as_slice())) {
        Ok(())
    } else {
        Err(Refusal::Mismatch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn good_bad_and_missing_signatures() {
        let body = br#"{"webhookEvent":"jira:issue_created"}"#;
        let good = sign(b"k", body);
        assert_eq!(verify(b"k", body, Some(&good)), Ok(()));
        assert_eq!(
            verify(b"k", b"{}", Some(&good)),
            Err(Refusal::Mismatch),
            "a signature of another body"
        );
        assert_eq!(verify(b"other", body, Some(&good)), Err(Refusal::Mismatch));
        assert_eq!(verify(b"k", body, None), Err(Refusal::Missing));
        assert_eq!(
            verify(b"k", body, Some("sha1=abc")),
            Err(Refusal::Malformed)
        );
        // RFC 4231 test case 2.
        assert_eq!(
            sign(b"Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
