//! The one error envelope: `{"detail": "<message>"}` or
//! `{"detail": {"error": kind, "message": ..., "details": {...}}}`.

use poem::http::StatusCode;
use poem::{IntoResponse, Response};
use serde_json::{json, Value};

/// An error answered to a client.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    status: StatusCode,
    kind: Option<std::borrow::Cow<'static, str>>,
    message: String,
    details: Option<Value>,
    retry_after: Option<u64>,
}

/// Shorthand for handler results.
pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    /// A plain-message error.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            kind: None,
            message: message.into(),
            details: None,
            retry_after: None,
        }
    }

    /// A structured error with a machine-readable kind.
    pub fn kind(
        status: StatusCode,
        kind: &'static str,
        message: impl Into<String>,
        details: Value,
    ) -> Self {
        Self {
            status,
            kind: Some(kind.into()),
            message: message.into(),
            details: Some(details),
            retry_after: None,
        }
    }

    /// 400.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }
    /// 401.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, message)
    }
    /// 403.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, message)
    }
    /// 404.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, message)
    }
    /// 409.
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, message)
    }
    /// 422.
    pub fn unprocessable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, message)
    }
    /// 429 with a `Retry-After` header.
    pub fn too_many(message: impl Into<String>, retry_after_secs: u64) -> Self {
        let mut e = Self::new(StatusCode::TOO_MANY_REQUESTS, message);
        e.retry_after = Some(retry_after_secs);
        e
    }
    /// Adds a `Retry-After` header (seconds).
    pub fn retry_after(mut self, secs: u64) -> Self {
        self.retry_after = Some(secs);
        self
    }
    /// 500 for a store failure; the cause is logged, never sent.
    pub fn internal(cause: impl std::fmt::Display) -> Self {
        tracing::error!(error = %cause, "internal error");
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "Internal server error")
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The body.
    pub fn body(&self) -> Value {
        match &self.kind {
            None => json!({ "detail": self.message }),
            Some(kind) => json!({ "detail": {
                "error": kind,
                "message": self.message,
                "details": self.details.clone().unwrap_or_else(|| json!({})),
            }}),
        }
    }
}

impl From<sqlx::Error> for ApiError {
    /// Store failures are the server's, except text PostgreSQL cannot hold (a NUL byte, code
    /// 22021): that came from the request, and is refused as such on either backend's terms.
    fn from(e: sqlx::Error) -> Self {
        match &e {
            sqlx::Error::Database(db) if db.code().as_deref() == Some("22021") => {
                Self::bad_request("The request holds text with a NUL byte, which is not allowed")
            }
            _ => Self::internal(e),
        }
    }
}

impl From<svc_plugin_api::DriverError> for ApiError {
    /// The host alone maps driver error kinds to HTTP statuses.
    fn from(e: svc_plugin_api::DriverError) -> Self {
        use svc_plugin_api::ErrorKind as K;
        let status = match e.kind {
            K::NotFound => StatusCode::NOT_FOUND,
            K::UnsafeIdentifier | K::UnsafeIdentity | K::BadRequest | K::RemoteScanTooLarge => {
                StatusCode::BAD_REQUEST
            }
            K::CrossProjectForbidden => StatusCode::FORBIDDEN,
            K::Upstream | K::AuthFailed | K::SourceForbidden => StatusCode::BAD_GATEWAY,
            K::ResponseTooLarge => StatusCode::BAD_REQUEST,
            K::Timeout => StatusCode::GATEWAY_TIMEOUT,
            K::Unsupported => StatusCode::NOT_IMPLEMENTED,
            K::NotConfigured | K::Corrupt | K::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        };
        if status.is_server_error() {
            tracing::error!(kind = e.kind.as_str(), error = %e.message, "driver error");
        }
        let mut err = Self::kind(status, e.kind.as_str(), e.message, e.details);
        if let Some(code) = e.code {
            err.kind = Some(code.into());
        }
        err
    }
}

impl From<anyhow::Error> for ApiError {
    fn from(e: anyhow::Error) -> Self {
        Self::internal(format!("{e:#}"))
    }
}

impl poem::error::ResponseError for ApiError {
    fn status(&self) -> StatusCode {
        self.status
    }

    fn as_response(&self) -> Response {
        let mut resp = poem::web::Json(self.body())
            .with_status(self.status)
            .into_response();
        if let Some(secs) = self.retry_after {
            resp.headers_mut().insert("retry-after", secs.into());
        }
        resp
    }
}

/// The error envelope as documented in the OpenAPI document.
#[derive(poem_openapi::Object)]
#[oai(rename = "Error")]
pub struct ErrorBody {
    /// A message string, or `{"error": kind, "message": ..., "details": {...}}`.
    detail: Value,
}

impl poem_openapi::ApiResponse for ApiError {
    fn meta() -> poem_openapi::registry::MetaResponses {
        use poem_openapi::ResponseContent as _;
        poem_openapi::registry::MetaResponses {
            responses: vec![poem_openapi::registry::MetaResponse {
                description: "An error, in the envelope",
                status: None,
                status_range: None,
                content: poem_openapi::payload::Json::<ErrorBody>::media_types(),
                headers: vec![],
            }],
        }
    }

    fn register(registry: &mut poem_openapi::registry::Registry) {
        <poem_openapi::payload::Json<ErrorBody> as poem_openapi::ResponseContent>::register(
            registry,
        );
    }
}

/// Renders any error that reached the top of the stack in the envelope.
///
/// poem-openapi answers malformed requests with text bodies and 400; here they become 422
/// in the envelope, like every other validation failure.
pub fn render(err: poem::Error) -> Response {
    use poem::error::ResponseError as _;
    use poem_openapi::error as oe;
    if let Some(api) = err.downcast_ref::<ApiError>() {
        return api.as_response();
    }
    let validation = err.is::<oe::ParseRequestPayloadError>()
        || err.is::<oe::ParseParamError>()
        || err.is::<oe::ParsePathError>()
        || err.is::<oe::ParseMultipartError>()
        || err.is::<poem::error::ParseJsonError>();
    let api = if validation {
        ApiError::unprocessable(err.to_string())
    } else if err.is::<oe::AuthorizationError>() {
        ApiError::unauthorized("Missing or invalid Authorization header")
    } else if err.status() == StatusCode::NOT_FOUND {
        ApiError::not_found("Not found")
    } else if err.status().is_server_error() {
        ApiError::internal(err.to_string())
    } else {
        ApiError::new(err.status(), err.to_string())
    };
    api.as_response()
}
