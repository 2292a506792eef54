//! OpenTelemetry traces: one trace per request, exported over OTLP (http/protobuf) when
//! `OTEL_EXPORTER_OTLP_ENDPOINT` is set, off otherwise.
//!
//! The spans are `svc_trace` spans, not `tracing` ones: the request's root (made here), and
//! under it `auth.resolve`, `access.check`, `engine.plan`, `engine.execute`, `driver.*` and
//! `audit.write`, made where that work runs. With tracing on, finished spans go to a bounded
//! queue that an exporter thread ([`export`]) empties, writing OTLP protobuf itself
//! ([`otlp`]). `tracing` still carries log lines and the request span that names them
//! ([`super::logs`]); it used to carry the trace spans too, through a layer of svc's own, but
//! its registry and per-layer filters cost a traced cached sample 21 k instructions on the
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

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{OnceLock, RwLock};

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

/// One HTTP request's spans and correlation id (see the module doc for the rule): the
/// `tracing` span its log lines carry, and its trace's root span (empty when tracing is off
/// or the trace is not sampled). `given` is the caller's sanitized `X-Request-Id`.
pub fn request_span(
    method: &'static str,
    headers: &poem::http::HeaderMap,
    given: Option<String>,
) -> (tracing::Span, svc_trace::Span, String) {
    let (root, id) = match SAMPLER.get() {
        Some(sampler) => {
            let remote = headers
                .get(&TRACEPARENT)
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
                root.set("http.request.method", method);
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
    let span = tracing::info_span!(
        parent: None,
        "request",
        http.request.method = method,
        request_id = id.as_str(),
    );
    (span, root, id)
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
    if let Some(route) = route {
        root.set("http.route", route);
        root.rename(root_name(method, route));
    }
    root.set("http.response.status_code", status);
}

/// The W3C trace context header, named once (a name given as text is parsed per lookup).
static TRACEPARENT: poem::http::HeaderName = poem::http::HeaderName::from_static("traceparent");

/// `{method} {route}`, made once per pair and kept: both come from bounded sets (method
/// labels and route templates), and formatting the name cost a traced request more than
/// its clock reads.
fn root_name(method: &'static str, route: &'static str) -> &'static str {
    type Names = HashMap<[usize; 4], &'static str, BuildHasherDefault<AddressHasher>>;
    static NAMES: OnceLock<RwLock<Names>> = OnceLock::new();
    let names = NAMES.get_or_init(RwLock::default);
    let key = address_key(method, route);
    if let Some(&name) = names.read().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return name;
    }
    let mut names = names.write().unwrap_or_else(|e| e.into_inner());
    names
        .entry(key)
        .or_insert_with(|| Box::leak(format!("{method} {route}").into_boxed_str()))
}

/// A pair of constant strings as their addresses and lengths: the same constant is the same
/// string, so this keys a pair without reading or hashing its text.
fn address_key(a: &'static str, b: &'static str) -> [usize; 4] {
    [a.as_ptr() as usize, a.len(), b.as_ptr() as usize, b.len()]
}

/// Hashes addresses and lengths with one multiply each (SipHash, the default, cost more
/// than the formatting it saves; nothing here comes from a caller, so flooding is moot).
#[derive(Default)]
struct AddressHasher(u64);

impl Hasher for AddressHasher {
    /// A word at a time: an array of addresses arrives here as its bytes, and a multiply per
    /// byte cost more than the lookup it serves.
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_usize(u64::from_ne_bytes(word) as usize);
        }
    }

    fn write_usize(&mut self, n: usize) {
        self.0 = (self.0.rotate_left(5) ^ n as u64).wrapping_mul(0x517c_c1b7_2722_0a95);
    }

    fn finish(&self) -> u64 {
        self.0
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_root_name_is_made_once_per_method_and_route() {
        let first = root_name("GET", "/api/v2/sample/{table_id}");
        assert_eq!(first, "GET /api/v2/sample/{table_id}");
        assert!(std::ptr::eq(
            first,
            root_name("GET", "/api/v2/sample/{table_id}")
        ));
        assert_eq!(
            root_name("POST", "/api/v2/sample/{table_id}"),
            "POST /api/v2/sample/{table_id}"
        );
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
