//! OpenTelemetry traces: one trace per request, exported over OTLP (http/protobuf) when
//! `OTEL_EXPORTER_OTLP_ENDPOINT` is set, off otherwise.
//!
//! The spans are `svc_trace` spans, not `tracing` ones: the request's root (made here), and
//! under it `auth.resolve`, `access.check`, `engine.plan`, `engine.execute`, `driver.*` and
//! `audit.write`, made where that work runs. With tracing on, finished spans go to a bounded
//! queue that an exporter thread ([`export`]) empties, writing OTLP protobuf itself
//! ([`otlp`]). `tracing` still carries log lines ([`super::logs`]), which name their request
//! by a [`svc_trace::LogTag`]. It used to carry the trace spans too, through a layer of svc's
//! own, but its registry and per-layer filters cost a traced cached sample 21 k instructions on the
//! request path for four spans (callgrind), where a `svc_trace` span costs an id, two clock
//! reads and a push. Before that, the OpenTelemetry SDK and its `tracing` bridge cost a traced
//! request about half again its CPU time.
//!
//! What is honoured of the standard variables: the OTLP endpoint (general or traces), headers
//! and timeout, `OTEL_EXPORTER_OTLP_PROTOCOL` (http/protobuf only), the batch processor's
//! delay, queue and batch sizes, `OTEL_TRACES_SAMPLER` (+`_ARG`), `OTEL_SERVICE_NAME` and
//! `OTEL_SDK_DISABLED`. Log events are not attached to spans.
//!
//! The correlation id written to audit rows and echoed in `X-Request-Id` follows one rule:
//! a caller's W3C `traceparent` (header, or `params._meta.traceparent` of an MCP call) makes
//! its trace id the correlation id; otherwise a caller's `X-Request-Id` is kept; otherwise the
//! request's own trace id is used (a fresh id when tracing is off). With tracing on, a root
//! span whose correlation id is the caller's `X-Request-Id` carries it as `request_id`, so a
//! trace is found from an audit row either way.

mod context;
mod export;
mod otlp;
mod post;

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use context::{RemoteParent, Sampler, TraceId};

/// The sampler, set once when tracing is on; unset means tracing is off.
static SAMPLER: OnceLock<Sampler> = OnceLock::new();

/// The trace exporter, when tracing is on. Dropping it flushes the spans still queued.
#[derive(Debug, Default)]
pub struct Tracing {
    /// Held, not read: its drop is the flush.
    _exporter: Option<export::Exporter>,
}

impl Tracing {
    /// Tracing as the environment asks: on when `OTEL_EXPORTER_OTLP_ENDPOINT` (or
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set and `OTEL_SDK_DISABLED` is not `true`.
    /// A variable svc cannot use is an error naming it.
    pub fn from_env() -> anyhow::Result<Self> {
        let var = |k: &str| std::env::var(k).ok();
        if var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
            return Ok(Self::default());
        }
        let Some(settings) = export::Settings::from_env(var).map_err(anyhow::Error::msg)? else {
            return Ok(Self::default());
        };
        let sampler = Sampler::from_env(
            var("OTEL_TRACES_SAMPLER").as_deref(),
            var("OTEL_TRACES_SAMPLER_ARG").as_deref(),
        )
        .map_err(anyhow::Error::msg)?;
        let exporter = export::Exporter::start(settings)
            .map_err(|e| anyhow::anyhow!("cannot start the trace exporter: {e}"))?;
        // A second `Tracing` in one process (tests) keeps the first sampler and sink.
        let _ = SAMPLER.set(sampler);
        svc_trace::install(exporter.queue());
        Ok(Self {
            _exporter: Some(exporter),
        })
    }
}

/// One HTTP request's trace root span (empty when tracing is off or the trace is not
/// sampled) and correlation id (see the module doc for the rule). `given` is the caller's
/// sanitized `X-Request-Id`.
pub fn request_span(
    method: &'static str,
    headers: &poem::http::HeaderMap,
    given: Option<String>,
) -> (svc_trace::Span, String) {
    let (root, id) = match SAMPLER.get() {
        Some(sampler) => {
            let remote = traceparent(headers)
                .and_then(|v| v.to_str().ok())
                .and_then(RemoteParent::parse);
            let trace_id = remote.map_or_else(TraceId::random, |p| p.trace_id);
            let mut root = if sampler.samples(trace_id, remote.as_ref()) {
                let mut root = svc_trace::Span::root(
                    trace_id,
                    remote.map(|p| p.span_id),
                    method,
                    svc_trace::Kind::Server,
                );
                root.share(started(method));
                root
            } else {
                svc_trace::Span::none()
            };
            let id = match given {
                Some(given) if remote.is_none() => {
                    // The caller's id is the correlation id: the trace carries it, so a trace
                    // is found from an audit row either way.
                    root.set("request_id", given.clone());
                    given
                }
                _ => trace_id.hex(),
            };
            (root, id)
        }
        None => (
            svc_trace::Span::none(),
            given.unwrap_or_else(crate::api::new_request_id),
        ),
    };
    (root, id)
}

/// Records what is known once the request is answered. The root span takes the conventional
/// name `{method} {route}` (just `{method}` when no route matched).
pub fn finish_span(
    root: &mut svc_trace::Span,
    method: &'static str,
    route: Option<&'static str>,
    status: u16,
) {
    if !root.is_recording() {
        return;
    }
    match answered(method, route, status) {
        Some(shape) => {
            root.rename(shape.name);
            root.share(shape.attributes);
        }
        // Past the table's bound: the same, made for this span alone.
        None => {
            if let Some(route) = route {
                root.set("http.route", route);
                root.rename(format!("{method} {route}"));
            }
            root.set("http.response.status_code", status);
        }
    }
    if failed(status) {
        root.fail();
    }
}

/// Whether a server span that answered `status` failed: 5xx; the conventions leave 4xx
/// unset on servers (the caller's mistake, not the server's).
fn failed(status: u16) -> bool {
    status >= 500
}

/// The caller's `traceparent`, found by comparing names: a request carries a few headers,
/// and passing over them cost less than hashing this name for a lookup (callgrind: about
/// 170 instructions a request, traceparent or not).
pub(crate) fn traceparent(headers: &poem::http::HeaderMap) -> Option<&poem::http::HeaderValue> {
    const NAME: &str = "traceparent";
    headers
        .iter()
        .find(|(name, _)| name.as_str().len() == NAME.len() && name.as_str() == NAME)
        .map(|(_, value)| value)
}

/// The attributes a root span starts with: its method, one set per method label.
fn started(method: &'static str) -> &'static svc_trace::Shared {
    use svc_metrics::http::METHODS;
    static SETS: OnceLock<Vec<&'static svc_trace::Shared>> = OnceLock::new();
    let sets = SETS.get_or_init(|| {
        METHODS
            .iter()
            .map(|m| svc_trace::Shared::leak(vec![("http.request.method", (*m).into())]))
            .collect()
    });
    // A label not in the list cannot happen (labels come from it); it reads as the last.
    let at = METHODS.iter().position(|m| *m == method);
    sets[at.unwrap_or(METHODS.len() - 1)]
}

/// What an answered request's root span ends as: its name and attributes.
struct Shape {
    name: &'static str,
    attributes: &'static svc_trace::Shared,
}

/// The shape of a root span answered with `status` on `route`, made once per (method,
/// route, status) and kept: all three come from bounded sets (method labels, route
/// templates, the statuses svc sends), and naming the span and setting its attributes one
/// at a time cost a traced request more than its clock reads. None past [`MAX_SHAPES`].
fn answered(
    method: &'static str,
    route: Option<&'static str>,
    status: u16,
) -> Option<&'static Shape> {
    type Shapes = HashMap<[usize; 5], &'static Shape, svc_core::hash::CacheHasher>;
    static SHAPES: OnceLock<Mutex<Shapes>> = OnceLock::new();
    thread_local! {
        /// The shapes this thread has used, copied out of `SHAPES` (so at most as many):
        /// even a read of the shared table writes its lock's word, and with two workers
        /// answering traced requests that word moved between their cores on every request.
        static KNOWN: RefCell<Shapes> = RefCell::default();
        /// The shape this thread used last, and its key: a run of requests to one route
        /// finds it by comparing five words, where hashing them for `KNOWN` cost a traced
        /// request about 150 instructions (callgrind).
        static LAST: Cell<Option<([usize; 5], &'static Shape)>> = const { Cell::new(None) };
    }
    // The method and route by address and length: the same constant is the same text, so
    // this keys them without reading or hashing their text.
    let template = route.unwrap_or_default();
    let key = [
        method.as_ptr() as usize,
        method.len(),
        template.as_ptr() as usize,
        template.len(),
        usize::from(status),
    ];
    if let Some((last, shape)) = LAST.get() {
        if last == key {
            return Some(shape);
        }
    }
    if let Some(shape) = KNOWN.with_borrow(|known| known.get(&key).copied()) {
        LAST.set(Some((key, shape)));
        return Some(shape);
    }
    let shapes = SHAPES.get_or_init(Mutex::default);
    let mut shapes = shapes.lock().unwrap_or_else(|e| e.into_inner());
    if shapes.len() >= MAX_SHAPES && !shapes.contains_key(&key) {
        return None;
    }
    let shape = *shapes.entry(key).or_insert_with(|| {
        let mut attributes = vec![("http.request.method", method.into())];
        let name: &'static str = match route {
            Some(route) => {
                attributes.push(("http.route", route.into()));
                Box::leak(format!("{method} {route}").into_boxed_str())
            }
            None => method,
        };
        attributes.push(("http.response.status_code", status.into()));
        Box::leak(Box::new(Shape {
            name,
            attributes: svc_trace::Shared::leak(attributes),
        }))
    });
    KNOWN.with_borrow_mut(|known| known.insert(key, shape));
    LAST.set(Some((key, shape)));
    Some(shape)
}

/// Root span shapes kept at most; past that, a span's are made for it alone.
const MAX_SHAPES: usize = 4096;

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_root_shape_is_made_once_per_method_route_and_status() {
        let route = "/api/v2/sample/{table_id}";
        let first = answered("GET", Some(route), 200).unwrap();
        assert_eq!(first.name, "GET /api/v2/sample/{table_id}");
        assert_eq!(
            first.attributes.attributes(),
            [
                ("http.request.method", "GET".into()),
                ("http.route", route.into()),
                ("http.response.status_code", 200u16.into()),
            ]
        );
        assert!(std::ptr::eq(
            first,
            answered("GET", Some(route), 200).unwrap()
        ));
        let other = answered("GET", Some(route), 404).unwrap();
        assert!(!std::ptr::eq(first, other));
        assert_eq!(other.name, first.name);
        let unrouted = answered("POST", None, 404).unwrap();
        assert_eq!(unrouted.name, "POST");
        assert_eq!(
            unrouted.attributes.attributes(),
            [
                ("http.request.method", "POST".into()),
                ("http.response.status_code", 404u16.into()),
            ]
        );
        assert_eq!(
            started("DELETE").attributes(),
            [("http.request.method", "DELETE".into())]
        );
    }

    #[test]
    fn a_server_span_fails_on_5xx_only() {
        assert!(failed(500) && failed(503) && failed(599));
        assert!(!failed(200) && !failed(404) && !failed(499));
    }

    #[test]
    fn traceparent_is_found_whatever_the_other_headers() {
        let mut headers = poem::http::HeaderMap::new();
        assert!(traceparent(&headers).is_none());
        headers.insert("x-request-id", "abc".parse().unwrap());
        headers.insert("tracestate", "k=v".parse().unwrap());
        headers.insert(poem::http::header::HOST, "svc".parse().unwrap());
        assert!(traceparent(&headers).is_none());
        headers.insert("TraceParent", "00-x".parse().unwrap());
        assert_eq!(traceparent(&headers).unwrap(), "00-x");
    }

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
