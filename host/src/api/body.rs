//! What a request body must be before an endpoint reads it: within the size limit, and, for
//! a JSON body to the API, free of NUL characters.
//!
//! Why NUL is refused here: PostgreSQL cannot store it in text, SQLite can. Without one check
//! at the door, a memory item's title with `\u0000` in it was a 400 on one backend and stored
//! on the other, and which one a caller got depended on the operator's choice of store. Bulk
//! inserts (transcripts, audit rows) store a NUL as `␀` instead; what a caller sends is
//! refused, naming the field, so it can be sent again without it.

use svc_core::{Error, ErrorKind};

use poem::Request;

use super::error::ApiError;

/// Whether the request may carry a body: a length other than 0, a chunked one, or (HTTP/2
/// and later, where a body needs neither header) no length at all.
pub(super) fn is_present(req: &Request) -> bool {
    let headers = req.headers();
    match headers.get(poem::http::header::CONTENT_LENGTH) {
        Some(length) => length.as_bytes() != b"0",
        None => {
            headers.contains_key(poem::http::header::TRANSFER_ENCODING)
                || req.version() >= poem::http::Version::HTTP_2
        }
    }
}

/// What every body must be before its endpoint reads it: within `max` bytes, and for the
/// API (`is_api`) free of NUL in JSON text.
pub(super) async fn check(req: &mut Request, max: usize, is_api: bool) -> Result<(), ApiError> {
    limit_body(req, max).await?;
    if is_api {
        refuse_nul_text(req).await
    } else {
        Ok(())
    }
}

/// 413 for bodies over the limit, whether or not they announce their length.
async fn limit_body(req: &mut Request, max: usize) -> Result<(), ApiError> {
    let too_large = || {
        Error::new(
            ErrorKind::PayloadTooLarge,
            format!("Request body exceeds the limit of {max} bytes"),
        )
    };
    let declared = req
        .headers()
        .get(poem::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    match declared {
        Some(n) if n > max => Err(too_large().into()),
        Some(_) => Ok(()),
        // Chunked, or HTTP/2 without a length: read it, within the limit.
        None => {
            let body = req
                .take_body()
                .into_bytes_limit(max)
                .await
                .map_err(|_| too_large())?;
            req.set_body(body);
            Ok(())
        }
    }
}

/// 400 for a JSON body holding a NUL character in any string or key, naming where (a JSON
/// pointer). Runs after [`limit_body`], so the body read here is bounded. A body that is not
/// JSON, or not well-formed, is put back untouched for the endpoint to judge.
async fn refuse_nul_text(req: &mut Request) -> Result<(), ApiError> {
    let is_json = req
        .headers()
        .get(poem::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            let essence = v.split(';').next().unwrap_or("").trim();
            essence.eq_ignore_ascii_case("application/json")
        });
    if !is_json {
        return Ok(());
    }
    let body = req
        .take_body()
        .into_bytes()
        .await
        .map_err(|e| Error::bad_request(format!("The request body could not be read: {e}")))?;
    // Only a body with the escape can hold a NUL (JSON forbids a raw one); the parse that
    // follows decides, so an escaped backslash before `u0000` is not mistaken for one.
    let found = std::str::from_utf8(&body)
        .ok()
        .filter(|text| text.contains("\\u0000"))
        .and_then(|text| serde_json::from_str::<serde_json::Value>(text).ok())
        .and_then(|value| nul_at(&value, String::new()));
    req.set_body(body);
    match found {
        None => Ok(()),
        Some(pointer) => Err(Error::coded(
            ErrorKind::BadRequest,
            "nul_in_text",
            format!(
                "The request body holds a NUL character (\\u0000) at `{pointer}`, which svc \
                 does not accept in text; send it without"
            ),
            serde_json::json!({ "pointer": pointer }),
        )
        .into()),
    }
}

/// The JSON pointer (RFC 6901) of the first string or key in `value` holding a NUL.
fn nul_at(value: &serde_json::Value, at: String) -> Option<String> {
    use serde_json::Value;
    let escaped = |key: &str| key.replace('~', "~0").replace('/', "~1");
    match value {
        Value::String(s) if s.contains('\0') => Some(at),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, item)| nul_at(item, format!("{at}/{i}"))),
        Value::Object(fields) => fields.iter().find_map(|(key, item)| {
            let here = format!("{at}/{}", escaped(key));
            if key.contains('\0') {
                // Shown as its escape: the pointer is read in a message, not resolved.
                Some(here.replace('\0', "\\u0000"))
            } else {
                nul_at(item, here)
            }
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::nul_at;
    use serde_json::json;

    #[test]
    fn the_pointer_names_the_first_string_or_key_with_a_nul() {
        assert_eq!(nul_at(&json!({"a": "ok"}), String::new()), None);
        assert_eq!(
            nul_at(&json!({"a": "ok", "b": ["x", "y\u{0}"]}), String::new()).as_deref(),
            Some("/b/1")
        );
        assert_eq!(
            nul_at(&json!({"k\u{0}": 1}), String::new()).as_deref(),
            Some("/k\\u0000")
        );
        assert_eq!(
            nul_at(&json!({"a/b": {"c~d": "\u{0}"}}), String::new()).as_deref(),
            Some("/a~1b/c~0d")
        );
        assert_eq!(nul_at(&json!("\u{0}"), String::new()).as_deref(), Some(""));
    }
}
