//! The one error type drivers return. Kinds are mapped to HTTP statuses by the host alone.

use serde_json::{json, Value};

/// What went wrong, independent of transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The table's data does not exist (e.g. no parquet file yet).
    NotFound,
    /// An identifier from the registry is unsafe to put in a query.
    UnsafeIdentifier,
    /// The source is not configured on this instance.
    NotConfigured,
    /// The caller's identity cannot be used for a row filter.
    UnsafeIdentity,
    /// The source refused access across projects.
    CrossProjectForbidden,
    /// The source refused our credentials.
    AuthFailed,
    /// The source refused access for another reason.
    SourceForbidden,
    /// The source would not return a result this large.
    ResponseTooLarge,
    /// The request is invalid for this source.
    BadRequest,
    /// The source failed or answered something unusable.
    Upstream,
    /// A remote scan is larger than the configured guard.
    RemoteScanTooLarge,
    /// The source did not answer in time.
    Timeout,
    /// The data exists but cannot be read (corrupt file, wrong format).
    Corrupt,
    /// The driver does not support the operation.
    Unsupported,
    /// A bug or an unexpected local failure.
    Internal,
}

impl ErrorKind {
    /// Every kind, for parsing names back (dynamic drivers send errors as JSON).
    pub const ALL: [Self; 15] = [
        Self::NotFound,
        Self::UnsafeIdentifier,
        Self::NotConfigured,
        Self::UnsafeIdentity,
        Self::CrossProjectForbidden,
        Self::AuthFailed,
        Self::SourceForbidden,
        Self::ResponseTooLarge,
        Self::BadRequest,
        Self::Upstream,
        Self::RemoteScanTooLarge,
        Self::Timeout,
        Self::Corrupt,
        Self::Unsupported,
        Self::Internal,
    ];

    /// The kind named `name` (see [`ErrorKind::as_str`]).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == name)
    }

    /// The machine-readable name used in error envelopes.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotFound => "not_found",
            Self::UnsafeIdentifier => "unsafe_identifier",
            Self::NotConfigured => "not_configured",
            Self::UnsafeIdentity => "unsafe_identity",
            Self::CrossProjectForbidden => "cross_project_forbidden",
            Self::AuthFailed => "auth_failed",
            Self::SourceForbidden => "source_forbidden",
            Self::ResponseTooLarge => "response_too_large",
            Self::BadRequest => "bad_request",
            Self::Upstream => "upstream_error",
            Self::RemoteScanTooLarge => "remote_scan_too_large",
            Self::Timeout => "timeout",
            Self::Corrupt => "corrupt_data",
            Self::Unsupported => "unsupported",
            Self::Internal => "internal",
        }
    }
}

/// A driver failure: a kind, a message for people, and details for programs.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct DriverError {
    /// What went wrong.
    pub kind: ErrorKind,
    /// Actionable message (names the table where there is one).
    pub message: String,
    /// Structured details (hints, offending values).
    pub details: Value,
    /// A source-specific name for the envelope's `error` (e.g. `warehouse_bad_request`);
    /// the kind's name when absent. The status always follows the kind.
    pub code: Option<String>,
}

/// Result of driver calls.
pub type Result<T> = std::result::Result<T, DriverError>;

impl DriverError {
    /// An error of `kind` with no details.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            details: json!({}),
            code: None,
        }
    }

    /// Names the error for the envelope (the status still follows the kind).
    pub fn with_code(mut self, code: impl Into<String>) -> Self {
        self.code = Some(code.into());
        self
    }

    /// The envelope's `error`: the code, or the kind's name.
    pub fn name(&self) -> &str {
        self.code.as_deref().unwrap_or(self.kind.as_str())
    }

    /// Adds structured details.
    pub fn with_details(mut self, details: Value) -> Self {
        self.details = details;
        self
    }

    /// [`ErrorKind::NotFound`].
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, message)
    }

    /// [`ErrorKind::Unsupported`].
    pub fn unsupported(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unsupported, message)
    }

    /// [`ErrorKind::Internal`].
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, message)
    }
}
