//! Finished spans and their OTLP encoding: an `ExportTraceServiceRequest` in protobuf, written
//! field by field into one reusable buffer.
//!
//! The messages are few and fixed (request → resource spans → resource and scope spans →
//! spans → attributes), so they are written directly rather than built as generated structs
//! first: the exporter then allocates nothing per span beyond the span itself. Field numbers
//! are those of `opentelemetry/proto/trace/v1/trace.proto` and `common/v1/common.proto`; the
//! black-box tests decode what this writes with the OpenTelemetry project's own types.

use svc_trace::{Finished, Kind, Value};

/// A server span that answered 5xx failed; the conventions leave 4xx unset on servers.
fn failed(span: &Finished) -> bool {
    span.kind == Kind::Server
        && span.attributes.iter().any(|(k, v)| {
            *k == "http.response.status_code" && matches!(v, Value::Int(s) if *s >= 500)
        })
}

/// Who sends the spans (the OTLP resource and instrumentation scope).
#[derive(Debug, Clone)]
pub struct Origin {
    pub service_name: String,
    pub service_version: &'static str,
}

/// Writes `spans` as one `ExportTraceServiceRequest` into `out` (cleared first).
///
/// Every message's length is worked out before it is written, so each byte is written once:
/// framing a message by making room for its length and moving its body back over the unused
/// room moved the whole batch twice (once for the scope's spans, once for the resource's).
pub fn encode(origin: &Origin, spans: &[Finished], out: &mut Vec<u8>) {
    out.clear();
    let service_name = Value::from(origin.service_name.clone());
    let service_version = Value::from(origin.service_version);
    let resource_len = attribute_field_len("service.name", &service_name)
        + attribute_field_len("service.version", &service_version);
    let scope_len = field_len(1, "svc".len()) + field_len(2, origin.service_version.len());
    let span_lens: Vec<usize> = spans.iter().map(span_len).collect();
    let scope_spans_len =
        field_len(1, scope_len) + span_lens.iter().map(|&n| field_len(2, n)).sum::<usize>();
    let resource_spans_len = field_len(1, resource_len) + field_len(2, scope_spans_len);
    out.reserve(field_len(1, resource_spans_len));

    let mut w = Writer(out);
    // ExportTraceServiceRequest.resource_spans
    w.len_prefix(1, resource_spans_len);
    // ResourceSpans.resource
    w.len_prefix(1, resource_len);
    w.attribute(1, "service.name", &service_name);
    w.attribute(1, "service.version", &service_version);
    // ResourceSpans.scope_spans
    w.len_prefix(2, scope_spans_len);
    // ScopeSpans.scope: name, version
    w.len_prefix(1, scope_len);
    w.string(1, "svc");
    w.string(2, origin.service_version);
    for (span, &len) in spans.iter().zip(&span_lens) {
        w.len_prefix(2, len);
        w.span(span);
    }
}

/// The bytes `v` takes as a varint.
fn varint_len(v: u64) -> usize {
    (64 - v.leading_zeros() as usize).div_ceil(7).max(1)
}

/// The bytes a length-delimited field takes: its key, its length, its body of `len` bytes.
fn field_len(field: u32, len: usize) -> usize {
    varint_len(u64::from(field) << 3) + varint_len(len as u64) + len
}

/// The bytes of an `AnyValue` holding `value`: one of string (1), bool (2), int (3), double (4).
fn value_len(value: &Value) -> usize {
    match value {
        Value::Str(s) => field_len(1, s.len()),
        Value::Bool(_) => 2,
        Value::Int(i) => 1 + varint_len(*i as u64),
        Value::Float(_) => 9,
    }
}

/// The bytes of a `KeyValue` body.
fn attribute_len(key: &str, value: &Value) -> usize {
    field_len(1, key.len()) + field_len(2, value_len(value))
}

/// The bytes of a `KeyValue` in a field numbered below 16 (one key byte).
fn attribute_field_len(key: &str, value: &Value) -> usize {
    field_len(1, attribute_len(key, value))
}

/// The bytes of a `Span` body, as [`Writer::span`] writes it.
fn span_len(span: &Finished) -> usize {
    const TRACE_ID: usize = 2 + 16;
    const SPAN_ID: usize = 2 + 8;
    const KIND: usize = 2;
    const TIMES: usize = 2 * (1 + 8);
    // Status { code = ERROR } in field 15.
    const STATUS: usize = 4;
    // Field 16 (a two-byte key) as fixed32.
    const FLAGS: usize = 2 + 4;
    let parent = if span.parent.is_some() { SPAN_ID } else { 0 };
    let status = if failed(span) { STATUS } else { 0 };
    let attributes: usize = span
        .attributes
        .iter()
        .map(|(k, v)| attribute_field_len(k, v))
        .sum();
    TRACE_ID
        + SPAN_ID
        + parent
        + field_len(5, span.name.len())
        + KIND
        + TIMES
        + attributes
        + status
        + FLAGS
}

/// Protobuf's wire format, appended to a buffer.
struct Writer<'a>(&'a mut Vec<u8>);

impl Writer<'_> {
    /// One byte at a time: most varints here are one or two bytes, too short to be worth a
    /// copy call.
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }

    fn key(&mut self, field: u32, wire_type: u8) {
        self.varint((u64::from(field) << 3) | u64::from(wire_type));
    }

    /// The key and length of a length-delimited field whose body follows.
    fn len_prefix(&mut self, field: u32, len: usize) {
        self.key(field, 2);
        self.varint(len as u64);
    }

    fn bytes(&mut self, field: u32, bytes: &[u8]) {
        self.len_prefix(field, bytes.len());
        self.0.extend_from_slice(bytes);
    }

    fn string(&mut self, field: u32, s: &str) {
        self.bytes(field, s.as_bytes());
    }

    fn uint(&mut self, field: u32, v: u64) {
        self.key(field, 0);
        self.varint(v);
    }

    fn fixed64(&mut self, field: u32, v: u64) {
        self.key(field, 1);
        self.0.extend_from_slice(&v.to_le_bytes());
    }

    fn fixed32(&mut self, field: u32, v: u32) {
        self.key(field, 5);
        self.0.extend_from_slice(&v.to_le_bytes());
    }

    /// A `KeyValue` in field `field`.
    fn attribute(&mut self, field: u32, key: &str, value: &Value) {
        self.len_prefix(field, attribute_len(key, value));
        self.string(1, key);
        self.len_prefix(2, value_len(value));
        match value {
            Value::Str(s) => self.string(1, s),
            Value::Bool(b) => self.uint(2, u64::from(*b)),
            Value::Int(i) => self.uint(3, *i as u64),
            Value::Float(f) => self.fixed64(4, f.to_bits()),
        }
    }

    fn span(&mut self, span: &Finished) {
        self.bytes(1, &span.trace_id.0);
        self.bytes(2, &span.span_id.0);
        if let Some(parent) = span.parent {
            self.bytes(4, &parent.0);
        }
        self.string(5, &span.name);
        self.uint(6, span.kind as u64);
        self.fixed64(7, span.start_ns);
        self.fixed64(8, span.end_ns);
        for (key, value) in &span.attributes {
            self.attribute(9, key, value);
        }
        if failed(span) {
            // Status.code = ERROR
            self.len_prefix(15, 2);
            self.uint(3, 2);
        }
        // Flags: sampled (only sampled spans are exported), and whether the parent is remote
        // is not known here, so the "has is_remote" bit stays clear.
        self.fixed32(16, 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `v` as a varint into `out`; returns the bytes used.
    fn varint(mut v: u64, out: &mut [u8; 10]) -> usize {
        let mut n = 0;
        while v >= 0x80 {
            out[n] = (v as u8) | 0x80;
            v >>= 7;
            n += 1;
        }
        out[n] = v as u8;
        n + 1
    }

    #[test]
    fn only_a_server_span_that_answered_5xx_failed() {
        let span = |kind, status: i64| Finished {
            trace_id: svc_trace::TraceId::random(),
            span_id: svc_trace::SpanId::random(),
            parent: None,
            name: "GET /api/health".into(),
            kind,
            start_ns: 1,
            end_ns: 2,
            attributes: vec![("http.response.status_code", Value::Int(status))],
        };
        assert!(failed(&span(Kind::Server, 503)));
        assert!(!failed(&span(Kind::Server, 404)));
        assert!(!failed(&span(Kind::Internal, 500)));
    }

    /// A message framed the slow, obviously right way: room for the length, the body, then
    /// the length written as the fewest varint bytes and the body moved back over the rest.
    fn framed(w: &mut Writer<'_>, field: u32, body: impl FnOnce(&mut Writer<'_>)) {
        const ROOM: usize = 5;
        w.key(field, 2);
        let at = w.0.len();
        w.0.extend_from_slice(&[0; ROOM]);
        body(w);
        let len = w.0.len() - at - ROOM;
        let mut prefix = [0; 10];
        let used = varint(len as u64, &mut prefix);
        w.0.copy_within(at + ROOM.., at + used);
        w.0[at..at + used].copy_from_slice(&prefix[..used]);
        w.0.truncate(at + used + len);
    }

    fn spans(n: usize) -> Vec<Finished> {
        (0..n)
            .map(|i| Finished {
                trace_id: svc_trace::TraceId::random(),
                span_id: svc_trace::SpanId::random(),
                parent: (i % 3 != 0).then(svc_trace::SpanId::random),
                name: if i % 7 == 0 {
                    "x".repeat(200).into()
                } else {
                    "auth.resolve".into()
                },
                kind: if i % 2 == 0 {
                    Kind::Server
                } else {
                    Kind::Internal
                },
                start_ns: 1_700_000_000_000_000_000 + i as u64,
                end_ns: 1_700_000_000_000_500_000 + i as u64,
                attributes: vec![
                    (
                        "http.response.status_code",
                        Value::Int(if i % 5 == 0 { 503 } else { 200 }),
                    ),
                    ("http.route", Value::from("/api/v2/sample/{table_id}")),
                    ("rows", Value::Int(-1)),
                    ("cached", Value::Bool(true)),
                    ("ratio", Value::Float(0.25)),
                ],
            })
            .collect()
    }

    #[test]
    fn exact_lengths_write_what_measuring_as_it_goes_writes() {
        let origin = Origin {
            service_name: "svc-test".into(),
            service_version: "1.2.3",
        };
        // From one span to batches whose outer lengths take three varint bytes.
        for n in [0, 1, 2, 10, 200, 600] {
            let batch = spans(n);
            let mut exact = Vec::new();
            encode(&origin, &batch, &mut exact);
            let mut reference = Vec::new();
            let mut w = Writer(&mut reference);
            framed(&mut w, 1, |w| {
                framed(w, 1, |w| {
                    w.attribute(1, "service.name", &Value::from("svc-test"));
                    w.attribute(1, "service.version", &Value::from("1.2.3"));
                });
                framed(w, 2, |w| {
                    framed(w, 1, |w| {
                        w.string(1, "svc");
                        w.string(2, "1.2.3");
                    });
                    for span in &batch {
                        framed(w, 2, |w| w.span(span));
                    }
                });
            });
            assert_eq!(exact, reference, "{n} spans");
            if n == 600 {
                assert!(exact.len() > 16_384, "three-byte lengths are covered");
            }
        }
    }

    #[test]
    fn attribute_lengths_match_what_is_written() {
        for value in [
            Value::from(String::new()),
            Value::from("x".repeat(200)),
            Value::Bool(true),
            Value::Int(0),
            Value::Int(-1),
            Value::Int(503),
            Value::Float(0.25),
        ] {
            let (mut exact, mut reference) = (Vec::new(), Vec::new());
            Writer(&mut exact).attribute(9, "http.route", &value);
            framed(&mut Writer(&mut reference), 9, |w| {
                w.string(1, "http.route");
                framed(w, 2, |w| match &value {
                    Value::Str(s) => w.string(1, s),
                    Value::Bool(b) => w.uint(2, u64::from(*b)),
                    Value::Int(i) => w.uint(3, *i as u64),
                    Value::Float(f) => w.fixed64(4, f.to_bits()),
                });
            });
            assert_eq!(exact, reference, "{value:?}");
            assert_eq!(exact.len(), attribute_field_len("http.route", &value));
        }
        for v in [0u64, 1, 127, 128, 16_383, 16_384, u64::MAX] {
            let mut bytes = [0; 10];
            assert_eq!(varint_len(v), varint(v, &mut bytes), "{v}");
            let mut written = Vec::new();
            Writer(&mut written).varint(v);
            assert_eq!(written, bytes[..varint_len(v)], "{v}");
        }
    }

    #[test]
    fn negative_ints_are_ten_byte_varints() {
        let mut out = Vec::new();
        Writer(&mut out).uint(3, -1i64 as u64);
        assert_eq!(out.len(), 1 + 10);
    }
}
