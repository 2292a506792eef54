//! The domain error over HTTP: its status from the one status table
//! ([`svc_core::ErrorKind::status`]) and its envelope, `{"detail": "<message>"}` or
//! `{"detail": {"error": code, "message": ..., "details": {...}}}`.

use poem::http::StatusCode;
use poem::{IntoResponse, Response};
use serde_json::{json, Value};
use svc_core::{Error, ErrorKind};

/// The domain error on its way out over HTTP. Handlers return it; everything below the HTTP
/// layer returns [`svc_core::Error`], which `?` turns into this.
#[derive(Debug, Clone, thiserror::Error)]
#[error(transparent)]
pub struct ApiError(pub svc_core::Error);

/// Shorthand for handler results.
pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    /// The HTTP status: the kind's, from the one status table ([`ErrorKind::status`]).
    pub fn status(&self) -> StatusCode {
        http_status(self.0.kind())
    }
}

/// The HTTP status of a kind.
fn http_status(kind: ErrorKind) -> StatusCode {
    StatusCode::from_u16(kind.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

impl svc_store::audit::AuditedError for ApiError {
    fn status(&self) -> u16 {
        self.0.status()
    }
}

impl From<svc_core::Error> for ApiError {
    fn from(e: svc_core::Error) -> Self {
        Self(e)
    }
}

impl From<svc_plugin_api::DriverError> for ApiError {
    fn from(e: svc_plugin_api::DriverError) -> Self {
        Self(e.into())
    }
}

impl From<svc_store::StoreError> for ApiError {
    fn from(e: svc_store::StoreError) -> Self {
        Self(e.into())
    }
}

impl From<anyhow::Error> for ApiError {
    fn from(e: anyhow::Error) -> Self {
        Self(svc_core::Error::internal(format!("{e:#}")))
    }
}

impl poem::error::ResponseError for ApiError {
    fn status(&self) -> StatusCode {
        ApiError::status(self)
    }

    fn as_response(&self) -> Response {
        let mut resp = poem::web::Json(self.0.body())
            .with_status(ApiError::status(self))
            .into_response();
        if let Some(secs) = self.0.retry_after_secs() {
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
        Error::invalid(err.to_string())
    } else if err.is::<oe::AuthorizationError>() {
        Error::unauthorized("Missing or invalid Authorization header")
    } else if err.status() == StatusCode::NOT_FOUND {
        Error::not_found("Not found")
    } else if err.status().is_server_error() {
        Error::internal(err.to_string())
    } else {
        // A status no domain kind names (405, 415, ...): poem's own, in the plain envelope.
        return poem::web::Json(json!({ "detail": err.to_string() }))
            .with_status(err.status())
            .into_response();
    };
    ApiError(api).as_response()
}
