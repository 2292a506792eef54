//! The one domain error. Every host crate below the HTTP layer returns it; the HTTP layer
//! renders it in the envelope `{"detail": "<message>"}` or
//! `{"detail": {"error": code, "message": ..., "details": {...}}}` with [`ErrorKind::status`].

use std::borrow::Cow;

use serde_json::{json, Value};

/// When a failure happens, and so which status the client sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// 400: the request is malformed or asks for something no input could make valid
    /// (an unknown column, SQL that is not a single SELECT, a remote scan past its guard).
    BadRequest,
    /// 401: no credentials, or credentials that resolve to no active user.
    Unauthorized,
    /// 403: the caller is known but may not do this (not an administrator, no grant).
    Forbidden,
    /// 404: the named thing (table, user, group, token, script) does not exist.
    NotFound,
    /// 409: the change collides with what exists (a duplicate name, the last administrator).
    Conflict,
    /// 413: the request or the result it asks for is larger than the configured limit.
    PayloadTooLarge,
    /// 422: well-formed input that fails validation (a bad id, an unknown field value).
    Invalid,
    /// 429: a rate or quota is exhausted; `retry_after` says when to come back.
    TooMany,
    /// 500: a bug or a local failure (the store, the disk); the cause is logged, not sent.
    Internal,
    /// 501: the source's driver does not support the operation.
    NotImplemented,
    /// 502: an upstream source failed or refused our credentials.
    Upstream,
    /// 503: the server is out of a shared resource (memory, connections) for now.
    Unavailable,
    /// 504: the work or its upstream source ran past its deadline.
    Timeout,
}

impl ErrorKind {
    /// The HTTP status this kind is answered with: the one status table. It lives here, not
    /// in the HTTP layer, because audit rows written by jobs below that layer record the
    /// same number (`error.<status>`).
    pub fn status(self) -> u16 {
        match self {
            Self::BadRequest => 400,
            Self::Unauthorized => 401,
            Self::Forbidden => 403,
            Self::NotFound => 404,
            Self::Conflict => 409,
            Self::PayloadTooLarge => 413,
            Self::Invalid => 422,
            Self::TooMany => 429,
            Self::Internal => 500,
            Self::NotImplemented => 501,
            Self::Upstream => 502,
            Self::Unavailable => 503,
            Self::Timeout => 504,
        }
    }

    /// Its name where a program reads it (an MCP tool error's `error` when the error has
    /// no code of its own).
    pub fn name(self) -> &'static str {
        match self {
            Self::BadRequest => "bad_request",
            Self::Unauthorized => "unauthorized",
            Self::Forbidden => "forbidden",
            Self::NotFound => "not_found",
            Self::Conflict => "conflict",
            Self::PayloadTooLarge => "payload_too_large",
            Self::Invalid => "invalid",
            Self::TooMany => "too_many_requests",
            Self::Internal => "internal",
            Self::NotImplemented => "not_implemented",
            Self::Upstream => "upstream",
            Self::Unavailable => "unavailable",
            Self::Timeout => "timeout",
        }
    }

    /// Whether the failure is the server's (logged, alerting) rather than the caller's.
    pub fn is_server_error(self) -> bool {
        self.status() >= 500
    }
}

/// A failure answered to a client: a kind, a message for people, and optionally a
/// machine-readable code with details for programs.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct Error {
    kind: ErrorKind,
    code: Option<Cow<'static, str>>,
    message: String,
    details: Option<Value>,
    retry_after: Option<u64>,
}

/// Shorthand for results in every host crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A plain-message error of `kind` (the envelope's `detail` is the message).
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            code: None,
            message: message.into(),
            details: None,
            retry_after: None,
        }
    }

    /// A structured error: `code` names it for programs, `details` carries the specifics.
    pub fn coded(
        kind: ErrorKind,
        code: impl Into<Cow<'static, str>>,
        message: impl Into<String>,
        details: Value,
    ) -> Self {
        Self {
            kind,
            code: Some(code.into()),
            message: message.into(),
            details: Some(details),
            retry_after: None,
        }
    }

    /// [`ErrorKind::BadRequest`].
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::BadRequest, message)
    }

    /// An I/O failure while storing an upload at `path` (`what`: create, write, rename, …).
    /// A full disk is the operator's to fix, not a bug, so it is said plainly (503); the
    /// caller's temporary file is what failed, so whatever was stored before is intact.
    pub fn upload_io(what: &str, path: &std::path::Path, e: std::io::Error) -> Self {
        if e.kind() == std::io::ErrorKind::StorageFull {
            Self::new(
                ErrorKind::Unavailable,
                "The server's disk is full; the upload was not stored and the previous data is intact",
            )
        } else {
            Self::internal(format!("cannot {what} {}: {e}", path.display()))
        }
    }
    /// [`ErrorKind::Unauthorized`].
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unauthorized, message)
    }
    /// [`ErrorKind::Forbidden`].
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Forbidden, message)
    }
    /// [`ErrorKind::NotFound`].
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, message)
    }
    /// [`ErrorKind::Conflict`].
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Conflict, message)
    }
    /// [`ErrorKind::Invalid`].
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Invalid, message)
    }
    /// [`ErrorKind::TooMany`], with when to retry.
    pub fn too_many(message: impl Into<String>, retry_after_secs: u64) -> Self {
        Self::new(ErrorKind::TooMany, message).retry_after(retry_after_secs)
    }
    /// [`ErrorKind::Internal`]: the cause is logged here and never sent.
    pub fn internal(cause: impl std::fmt::Display) -> Self {
        tracing::error!(error = %cause, "internal error");
        Self::new(ErrorKind::Internal, "Internal server error")
    }

    /// Adds when to retry (seconds; a `Retry-After` header over HTTP).
    pub fn retry_after(mut self, secs: u64) -> Self {
        self.retry_after = Some(secs);
        self
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }
    /// The status this error is answered with (see [`ErrorKind::status`]).
    pub fn status(&self) -> u16 {
        self.kind.status()
    }
    /// Seconds after which a retry may succeed, when known.
    pub fn retry_after_secs(&self) -> Option<u64> {
        self.retry_after
    }
    /// The machine-readable code, for structured errors.
    pub fn code(&self) -> Option<&str> {
        self.code.as_deref()
    }

    /// The envelope body.
    pub fn body(&self) -> Value {
        match &self.code {
            None => json!({ "detail": self.message }),
            Some(code) => json!({ "detail": {
                "error": code,
                "message": self.message,
                "details": self.details.clone().unwrap_or_else(|| json!({})),
            }}),
        }
    }
}

impl From<svc_plugin_api::DriverError> for Error {
    /// Driver kinds become domain kinds here, once; `svc-plugin-api` documents the result.
    fn from(e: svc_plugin_api::DriverError) -> Self {
        use svc_plugin_api::ErrorKind as K;
        svc_metrics::driver::error(e.kind.as_str());
        let kind = match e.kind {
            K::NotFound => ErrorKind::NotFound,
            K::UnsafeIdentifier
            | K::UnsafeIdentity
            | K::BadRequest
            | K::RemoteScanTooLarge
            | K::ResponseTooLarge => ErrorKind::BadRequest,
            K::CrossProjectForbidden => ErrorKind::Forbidden,
            K::Upstream | K::AuthFailed | K::SourceForbidden => ErrorKind::Upstream,
            K::Timeout => ErrorKind::Timeout,
            K::Unsupported => ErrorKind::NotImplemented,
            K::NotConfigured | K::Corrupt | K::Internal => ErrorKind::Internal,
        };
        if kind.is_server_error() {
            tracing::error!(kind = e.kind.as_str(), error = %e.message, "driver error");
        }
        let code = e.code.unwrap_or_else(|| e.kind.as_str().to_owned());
        Self::coded(kind, code, e.message, e.details)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_and_coded_envelopes() {
        let plain = Error::not_found("Table 'x' is not registered");
        assert_eq!(plain.status(), 404);
        assert_eq!(
            plain.body(),
            json!({"detail": "Table 'x' is not registered"})
        );
        let coded = Error::coded(
            ErrorKind::Unavailable,
            "resources_exhausted",
            "m",
            json!({"a": 1}),
        );
        assert_eq!(
            coded.body(),
            json!({"detail": {"error": "resources_exhausted", "message": "m", "details": {"a": 1}}})
        );
    }

    #[test]
    fn driver_kinds_keep_their_names_and_statuses() {
        let e: Error =
            svc_plugin_api::DriverError::new(svc_plugin_api::ErrorKind::Timeout, "slow").into();
        assert_eq!((e.status(), e.code()), (504, Some("timeout")));
        let e: Error = svc_plugin_api::DriverError::new(svc_plugin_api::ErrorKind::Upstream, "x")
            .with_code("warehouse_bad_request")
            .into();
        assert_eq!((e.status(), e.code()), (502, Some("warehouse_bad_request")));
    }
}
