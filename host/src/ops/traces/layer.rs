//! The `tracing` layer that turns svc's spans into OTLP spans.
//!
//! A span's trace context is kept in its extensions while it is open: a child takes its
//! parent's trace id and sampling decision, a root takes the context [`super::request_span`]
//! handed off (a caller's `traceparent`) or starts a trace of its own. Only a sampled span
//! records its fields and clock; on close it is queued for the exporter (a full queue drops
//! it and counts the drop). Log events are not exported: they stay lines.

use std::borrow::Cow;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::Subscriber;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

use super::context::{self, Sampler, SpanId, TraceId};
use super::export::Queue;
use super::otlp::{FinishedSpan, SpanKind, Value};

/// See the module doc.
pub struct SpanLayer {
    queue: Arc<Queue>,
    sampler: Sampler,
}

impl SpanLayer {
    pub(super) fn new(queue: Arc<Queue>, sampler: Sampler) -> Self {
        Self { queue, sampler }
    }
}

/// An open span's trace context, and what it records when sampled.
struct Open {
    trace_id: TraceId,
    span_id: SpanId,
    parent: Option<SpanId>,
    sampled: bool,
    name: Cow<'static, str>,
    kind: SpanKind,
    start_ns: u64,
    attributes: Vec<(&'static str, Value)>,
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

impl<S> Layer<S> for SpanLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let inherited = span.parent().and_then(|parent| {
            let extensions = parent.extensions();
            let open = extensions.get::<Open>()?;
            Some((open.trace_id, Some(open.span_id), open.sampled))
        });
        let (trace_id, parent, sampled) =
            inherited.unwrap_or_else(|| match context::take_handoff() {
                Some(root) => (root.trace_id, root.parent, root.sampled),
                None => {
                    let trace_id = TraceId::random();
                    (trace_id, None, self.sampler.samples(trace_id, None))
                }
            });
        let mut open = Open {
            trace_id,
            span_id: SpanId::random(),
            parent,
            sampled,
            name: Cow::Borrowed(attrs.metadata().name()),
            kind: SpanKind::Internal,
            start_ns: 0,
            attributes: Vec::new(),
        };
        if sampled {
            attrs.record(&mut Fields(&mut open));
            open.start_ns = now_ns();
        }
        span.extensions_mut().insert(open);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut extensions = span.extensions_mut();
        if let Some(open) = extensions.get_mut::<Open>().filter(|o| o.sampled) {
            values.record(&mut Fields(open));
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else { return };
        let Some(open) = span.extensions_mut().remove::<Open>() else {
            return;
        };
        if !open.sampled {
            return;
        }
        let name = match open.kind {
            SpanKind::Server => server_name(&open.attributes).map_or(open.name, Cow::Owned),
            _ => open.name,
        };
        let finished = FinishedSpan {
            trace_id: open.trace_id,
            span_id: open.span_id,
            parent: open.parent,
            name,
            kind: open.kind,
            start_ns: open.start_ns,
            end_ns: now_ns(),
            attributes: open.attributes,
        };
        self.queue.push(finished);
    }
}

/// An HTTP server span's conventional name: `{method} {route}`, or the method alone when no
/// route matched.
fn server_name(attributes: &[(&'static str, Value)]) -> Option<String> {
    let text = |key: &str| {
        attributes.iter().find_map(|(k, v)| match v {
            Value::Str(s) if *k == key => Some(s.as_str()),
            _ => None,
        })
    };
    let method = text("http.request.method")?;
    Some(match text("http.route") {
        Some(route) => format!("{method} {route}"),
        None => method.to_owned(),
    })
}

/// Reads a span's fields: `otel.name` and `otel.kind` set the span's name and kind (the
/// convention `tracing-opentelemetry` set), the rest become attributes.
struct Fields<'a>(&'a mut Open);

impl Fields<'_> {
    fn set(&mut self, key: &'static str, value: Value) {
        match (key, value) {
            ("otel.name", Value::Str(name)) => self.0.name = Cow::Owned(name),
            (key, value) => {
                let attributes = &mut self.0.attributes;
                match attributes.iter_mut().find(|(k, _)| *k == key) {
                    Some(slot) => slot.1 = value,
                    None => attributes.push((key, value)),
                }
            }
        }
    }
}

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "otel.kind" => self.0.kind = SpanKind::named(value),
            name => self.set(name, Value::Str(value.to_owned())),
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.set(field.name(), Value::Int(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.set(
            field.name(),
            Value::Int(i64::try_from(value).unwrap_or(i64::MAX)),
        );
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.set(field.name(), Value::Bool(value));
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.set(field.name(), Value::Float(value));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
        self.set(field.name(), Value::Str(format!("{value:?}")));
    }
}

#[cfg(test)]
mod tests {
    use tracing_subscriber::layer::SubscriberExt as _;

    use super::*;
    use crate::ops::traces::context::RootContext;

    /// Runs `work` under a subscriber with the layer; returns the spans it exported.
    fn exported(sampler: Sampler, work: impl FnOnce()) -> Vec<FinishedSpan> {
        let queue = Arc::new(Queue::new(64, 64));
        let subscriber =
            tracing_subscriber::registry().with(SpanLayer::new(queue.clone(), sampler));
        tracing::subscriber::with_default(subscriber, work);
        queue.take()
    }

    #[test]
    fn children_join_their_root_trace_and_a_handed_off_context_continues_the_callers() {
        let caller_trace = TraceId::random();
        let caller_span = SpanId::random();
        let spans = exported(Sampler::default(), || {
            context::hand_off(Some(RootContext {
                trace_id: caller_trace,
                parent: Some(caller_span),
                sampled: true,
            }));
            let root = tracing::info_span!(
                parent: None,
                "request",
                otel.kind = "server",
                http.request.method = "GET",
                http.route = tracing::field::Empty,
                http.response.status_code = tracing::field::Empty
            );
            root.in_scope(|| {
                let child = tracing::info_span!("access.check", table = "orders");
                child.in_scope(|| tracing::info_span!("driver.scan").in_scope(|| {}));
            });
            root.record("http.route", "/api/v2/sample/{table_id}");
            root.record("http.response.status_code", 503u16);
            drop(root);
            // Another root on the thread starts a trace of its own.
            drop(tracing::info_span!("scheduler.job"));
        });
        let by_name = |name: &str| {
            spans
                .iter()
                .find(|s| s.name == name)
                .unwrap_or_else(|| panic!("{name} not exported: {spans:?}"))
        };
        let root = by_name("GET /api/v2/sample/{table_id}");
        assert_eq!(root.trace_id, caller_trace);
        assert_eq!(root.parent, Some(caller_span));
        assert_eq!(root.kind, SpanKind::Server);
        assert!(root.failed(), "a 503 marks the server span failed");
        let check = by_name("access.check");
        assert_eq!(
            (check.trace_id, check.parent),
            (caller_trace, Some(root.span_id))
        );
        assert_eq!(
            check.attributes,
            vec![("table", Value::Str("orders".into()))]
        );
        let scan = by_name("driver.scan");
        assert_eq!(
            (scan.trace_id, scan.parent),
            (caller_trace, Some(check.span_id))
        );
        assert!(scan.start_ns >= check.start_ns && scan.end_ns <= check.end_ns);
        let job = by_name("scheduler.job");
        assert_ne!(job.trace_id, caller_trace);
        assert_eq!(job.parent, None);
    }

    #[test]
    fn an_unsampled_trace_exports_none_of_its_spans() {
        let off = Sampler::from_env(Some("parentbased_always_off"), None).unwrap();
        let spans = exported(off, || {
            let root = tracing::info_span!("request");
            root.in_scope(|| drop(tracing::info_span!("access.check")));
        });
        assert!(spans.is_empty(), "{spans:?}");

        // A caller that did not sample its trace is followed by the default sampler.
        let spans = exported(Sampler::default(), || {
            context::hand_off(Some(RootContext {
                trace_id: TraceId::random(),
                parent: Some(SpanId::random()),
                sampled: false,
            }));
            let root = tracing::info_span!(parent: None, "request");
            root.in_scope(|| drop(tracing::info_span!("access.check")));
        });
        assert!(spans.is_empty(), "{spans:?}");
    }
}
