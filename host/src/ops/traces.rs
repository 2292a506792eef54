//! OpenTelemetry traces: one trace per request, exported over OTLP (http/protobuf) when
//! `OTEL_EXPORTER_OTLP_ENDPOINT` is set, off otherwise.
//!
//! The spans are ordinary `tracing` spans (`request`, then `auth.resolve`, `access.check`,
//! `engine.plan`, `engine.execute`, `driver.*`, `audit.write` below it); the OTLP layer is
//! only added to the subscriber when tracing is on, so with it off a span costs what any
//! `tracing` span costs and nothing is exported.
//!
//! The correlation id written to audit rows and echoed in `X-Request-Id` follows one rule:
//! a caller's W3C `traceparent` (header, or `params._meta.traceparent` of an MCP call) makes
//! its trace id the correlation id; otherwise a caller's `X-Request-Id` is kept; otherwise the
//! request's own trace id is used (a fresh id when tracing is off). With tracing on, every
//! request span also carries `request_id`, so a trace is found from an audit row either way.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use opentelemetry::propagation::TextMapPropagator as _;
use opentelemetry::trace::{TraceContextExt as _, TracerProvider as _};
use opentelemetry_otlp::{Protocol, WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use tracing::Span;
use tracing_opentelemetry::{OpenTelemetryLayer, OpenTelemetrySpanExt as _};

/// Whether this process exports traces (set once, by [`Tracing::from_env`]).
static ON: AtomicBool = AtomicBool::new(false);

/// The trace exporter, when tracing is on. Dropping it flushes the spans still queued.
#[derive(Debug, Default)]
pub struct Tracing {
    provider: Option<SdkTracerProvider>,
}

impl Tracing {
    /// Tracing as the environment asks: on when `OTEL_EXPORTER_OTLP_ENDPOINT` (or
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set and `OTEL_SDK_DISABLED` is not `true`.
    /// The exporter reads the other standard `OTEL_*` variables itself (headers, timeout,
    /// batch delay).
    pub fn from_env() -> anyhow::Result<Self> {
        let set = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let disabled = set("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"));
        if disabled
            || (set("OTEL_EXPORTER_OTLP_ENDPOINT").is_none()
                && set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_none())
        {
            return Ok(Self::default());
        }
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_http_client(BlockingClient::default())
            .build()
            .map_err(|e| anyhow::anyhow!("cannot set up the OTLP trace exporter: {e}"))?;
        let resource = opentelemetry_sdk::Resource::builder()
            .with_service_name("svc")
            .with_attribute(opentelemetry::KeyValue::new(
                "service.version",
                crate::api::VERSION,
            ))
            .build();
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource)
            .build();
        ON.store(true, Ordering::Relaxed);
        Ok(Self {
            provider: Some(provider),
        })
    }

    /// The subscriber layer that turns spans into OTel spans, when tracing is on.
    pub(super) fn layer<S>(&self) -> Option<OpenTelemetryLayer<S, SdkTracer>>
    where
        S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    {
        let provider = self.provider.as_ref()?;
        // Per-span extras cost a clock read on every poll (busy/idle time) or attributes
        // nobody queries (source location, thread); a span says what it is by its name.
        Some(
            tracing_opentelemetry::layer()
                .with_tracer(provider.tracer("svc"))
                .with_tracked_inactivity(false)
                .with_location(false)
                .with_threads(false),
        )
    }
}

impl Drop for Tracing {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take() {
            if let Err(e) = provider.shutdown_with_timeout(Duration::from_secs(5)) {
                eprintln!("svc-server: traces not flushed at exit: {e}");
            }
        }
    }
}

/// Whether traces are exported.
pub fn is_on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// The span of one HTTP request and its correlation id (see the module doc for the rule).
/// `given` is the caller's sanitized `X-Request-Id`.
pub fn request_span(
    method: &str,
    headers: &poem::http::HeaderMap,
    given: Option<String>,
) -> (Span, String) {
    let span = tracing::info_span!(
        "request",
        otel.name = method,
        otel.kind = "server",
        http.request.method = %method,
        http.route = tracing::field::Empty,
        http.response.status_code = tracing::field::Empty,
        request_id = tracing::field::Empty,
    );
    let id = if is_on() {
        let parent =
            TraceContextPropagator::new().extract(&opentelemetry_http::HeaderExtractor(headers));
        let remote = parent.span().span_context().is_valid();
        if remote {
            let _ = span.set_parent(parent);
        }
        let trace_id = span.context().span().span_context().trace_id().to_string();
        match given {
            Some(given) if !remote => given,
            _ => trace_id,
        }
    } else {
        given.unwrap_or_else(crate::api::new_request_id)
    };
    span.record("request_id", id.as_str());
    (span, id)
}

/// Records what is known once the request is answered; the span takes the conventional
/// name `{method} {route}` once the route is known.
pub fn finish_span(span: &Span, method: &str, route: Option<&str>, status: u16) {
    if let Some(route) = route {
        span.record("http.route", route);
        if is_on() {
            // The OTel span started when its context was read; renaming goes to it directly.
            span.context()
                .span()
                .update_name(format!("{method} {route}"));
        }
    }
    span.record("http.response.status_code", status);
}

/// The `traceparent` an MCP call carries in `params._meta`, if any (the MCP convention for
/// trace context, since a client's HTTP transport may not let it set headers).
pub fn mcp_traceparent(body: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Call {
        params: Option<Params>,
    }
    #[derive(serde::Deserialize)]
    struct Params {
        #[serde(rename = "_meta")]
        meta: Option<Meta>,
    }
    #[derive(serde::Deserialize)]
    struct Meta {
        traceparent: Option<String>,
    }
    let call: Call = serde_json::from_slice(body).ok()?;
    call.params?.meta?.traceparent
}

/// OTLP over a blocking client: the batch exporter exports from its own thread, outside any
/// async runtime, where reqwest's blocking client runs as it is.
#[derive(Debug, Default)]
struct BlockingClient {
    client: std::sync::OnceLock<reqwest::blocking::Client>,
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for BlockingClient {
    async fn send_bytes(
        &self,
        request: poem::http::Request<bytes::Bytes>,
    ) -> Result<poem::http::Response<bytes::Bytes>, opentelemetry_http::HttpError> {
        let client = self.client.get_or_init(|| {
            reqwest::blocking::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .unwrap_or_default()
        });
        let (parts, body) = request.into_parts();
        let answer = client
            .request(parts.method, parts.uri.to_string())
            .headers(parts.headers)
            .body(body.to_vec())
            .send()?;
        let status = answer.status();
        let body = answer.bytes()?;
        Ok(poem::http::Response::builder().status(status).body(body)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_mcp_call_carries_its_traceparent_in_meta() {
        let body = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"query","_meta":{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}}"#;
        assert_eq!(
            mcp_traceparent(body).as_deref(),
            Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
        );
        assert_eq!(mcp_traceparent(br#"{"params":{}}"#), None);
        assert_eq!(mcp_traceparent(b"not json"), None);
    }
}
