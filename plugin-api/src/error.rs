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
    pub const ALL: [Self; 12] = [
        Self::NotFound,
        Self::UnsafeIdentifier,
        Self::NotConfigured,
        Self::UnsafeIdentity,
        Self::CrossProjectForbidden,
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
        }
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
