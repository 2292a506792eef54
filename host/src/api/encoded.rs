//! A JSON response body encoded once and sent many times.
//!
//! poem-openapi's `Json<T>` converts `T` to a `serde_json::Value` and then to bytes on every
//! response. Cached payloads (samples) are encoded when they are cached; every hit sends the
//! same bytes. The OpenAPI document still describes the body as `T`.

use std::marker::PhantomData;

use poem::http::HeaderValue;
use poem::{Body, IntoResponse, Response};
use poem_openapi::payload::Payload;
use poem_openapi::registry::{MetaMediaType, MetaResponse, MetaResponses, MetaSchemaRef, Registry};
use poem_openapi::types::{ToJSON, Type};
use poem_openapi::ApiResponse;

const JSON: &str = "application/json; charset=utf-8";

/// JSON bytes of a `T`.
pub struct EncodedJson<T> {
    bytes: bytes::Bytes,
    _body: PhantomData<fn() -> T>,
}

impl<T> Clone for EncodedJson<T> {
    fn clone(&self) -> Self {
        Self {
            bytes: self.bytes.clone(),
            _body: PhantomData,
        }
    }
}

impl<T> std::fmt::Debug for EncodedJson<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "EncodedJson({} bytes)", self.bytes.len())
    }
}

impl<T: ToJSON> EncodedJson<T> {
    /// The encoded bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Bytes already encoded from a `T` (assembled from encoded parts).
    pub fn from_encoded(bytes: bytes::Bytes) -> Self {
        Self {
            bytes,
            _body: PhantomData,
        }
    }

    /// Encodes `value` once.
    pub fn new(value: &T) -> Self {
        let bytes = serde_json::to_vec(&value.to_json()).expect("JSON values always encode");
        Self {
            bytes: bytes.into(),
            _body: PhantomData,
        }
    }
}

impl<T: ToJSON + serde::Serialize> EncodedJson<T> {
    /// Encodes `value` through its `serde` form, with no `serde_json::Value` in between: for
    /// a body made afresh on every request (`Json<T>` cost `/api/me` a fifth of its
    /// instructions, callgrind). The two forms must give the same JSON: see [`same_json`].
    pub fn serialized(value: &T) -> Self {
        let bytes = serde_json::to_vec(value).expect("svc's response types always encode");
        Self {
            bytes: bytes.into(),
            _body: PhantomData,
        }
    }
}

/// Whether `value`'s `serde` form is the JSON its OpenAPI form (`to_json`) is, so that a
/// body [`EncodedJson::serialized`] is what the document describes. For tests.
#[cfg(test)]
pub(crate) fn same_json<T: ToJSON + serde::Serialize>(value: &T) -> bool {
    let documented = value.to_json().unwrap_or_default();
    let serialized: serde_json::Value =
        serde_json::from_slice(EncodedJson::serialized(value).bytes()).expect("valid JSON");
    documented == serialized
}

impl<T: Type> Payload for EncodedJson<T> {
    const CONTENT_TYPE: &'static str = JSON;

    fn check_content_type(content_type: &str) -> bool {
        content_type.starts_with("application/json")
    }

    fn schema_ref() -> MetaSchemaRef {
        T::schema_ref()
    }

    fn register(registry: &mut Registry) {
        T::register(registry);
    }
}

impl<T: Send> IntoResponse for EncodedJson<T> {
    fn into_response(self) -> Response {
        // Made once: a type given as text is checked byte by byte on every response.
        static CONTENT_TYPE: HeaderValue = HeaderValue::from_static(JSON);
        let mut resp = Response::from(Body::from_bytes(self.bytes));
        resp.headers_mut()
            .insert(poem::http::header::CONTENT_TYPE, CONTENT_TYPE.clone());
        resp
    }
}

impl<T: Type> ApiResponse for EncodedJson<T> {
    fn meta() -> MetaResponses {
        MetaResponses {
            responses: vec![MetaResponse {
                description: "",
                status: Some(200),
                status_range: None,
                content: vec![MetaMediaType {
                    content_type: Self::CONTENT_TYPE,
                    schema: Self::schema_ref(),
                }],
                headers: vec![],
            }],
        }
    }

    fn register(registry: &mut Registry) {
        T::register(registry);
    }
}
