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
pub fn encode(origin: &Origin, spans: &[Finished], out: &mut Vec<u8>) {
    out.clear();
    let mut w = Writer(out);
    // ExportTraceServiceRequest.resource_spans
    w.message(1, |w| {
        // ResourceSpans.resource
        w.message(1, |w| {
            w.attribute(1, "service.name", &Value::from(origin.service_name.clone()));
            w.attribute(1, "service.version", &Value::from(origin.service_version));
        });
        // ResourceSpans.scope_spans
        w.message(2, |w| {
            // ScopeSpans.scope: name, version
            w.message(1, |w| {
                w.string(1, "svc");
                w.string(2, origin.service_version);
            });
            for span in spans {
                w.message(2, |w| w.span(span));
            }
        });
    });
}

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

/// The bytes `v` takes as a varint.
fn varint_len(v: u64) -> usize {
    (64 - v.leading_zeros() as usize).div_ceil(7).max(1)
}

/// Protobuf's wire format, appended to a buffer.
struct Writer<'a>(&'a mut Vec<u8>);

/// A nested message's length is written in front of it once known; five bytes hold any
/// `u32` as a varint, so that much room is kept and the body moved back over what is unused.
const LENGTH_ROOM: usize = 5;

impl Writer<'_> {
    fn varint(&mut self, v: u64) {
        let mut bytes = [0; 10];
        let n = varint(v, &mut bytes);
        self.0.extend_from_slice(&bytes[..n]);
    }

    fn key(&mut self, field: u32, wire_type: u8) {
        self.varint((u64::from(field) << 3) | u64::from(wire_type));
    }

    fn bytes(&mut self, field: u32, bytes: &[u8]) {
        self.key(field, 2);
        self.varint(bytes.len() as u64);
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

    fn message(&mut self, field: u32, body: impl FnOnce(&mut Self)) {
        self.key(field, 2);
        let at = self.0.len();
        self.0.extend_from_slice(&[0; LENGTH_ROOM]);
        body(self);
        let len = self.0.len() - at - LENGTH_ROOM;
        let mut prefix = [0; 10];
        let used = varint(len as u64, &mut prefix);
        self.0.copy_within(at + LENGTH_ROOM.., at + used);
        self.0[at..at + used].copy_from_slice(&prefix[..used]);
        self.0.truncate(at + used + len);
    }

    /// A `KeyValue` in field `field`. Attributes are most of a span's messages, so their
    /// lengths are computed up front rather than made room for and moved into place.
    fn attribute(&mut self, field: u32, key: &str, value: &Value) {
        // KeyValue.value: AnyValue, one of string (1), bool (2), int (3), double (4); every
        // key here is one byte.
        let value_len = match value {
            Value::Str(s) => 1 + varint_len(s.len() as u64) + s.len(),
            Value::Bool(_) => 2,
            Value::Int(i) => 1 + varint_len(*i as u64),
            Value::Float(_) => 9,
        };
        let pair_len = 1
            + varint_len(key.len() as u64)
            + key.len()
            + 1
            + varint_len(value_len as u64)
            + value_len;
        self.key(field, 2);
        self.varint(pair_len as u64);
        self.string(1, key);
        self.key(2, 2);
        self.varint(value_len as u64);
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
            self.message(15, |w| w.uint(3, 2));
        }
        // Flags: sampled (only sampled spans are exported), and whether the parent is remote
        // is not known here, so the "has is_remote" bit stays clear.
        self.fixed32(16, 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn lengths_are_minimal_varints_whatever_the_body_size() {
        for size in [0usize, 1, 127, 128, 300, 16_383, 16_384, 70_000] {
            let mut out = Vec::new();
            Writer(&mut out).message(1, |w| w.0.extend(std::iter::repeat_n(7u8, size)));
            // key, then the length as the fewest varint bytes, then the body
            let mut expected = vec![0x0a];
            Writer(&mut expected).varint(size as u64);
            expected.extend(std::iter::repeat_n(7u8, size));
            assert_eq!(out, expected, "body of {size}");
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
            let (mut exact, mut framed) = (Vec::new(), Vec::new());
            Writer(&mut exact).attribute(9, "http.route", &value);
            // The same pair written with room-and-move framing, which measures as it goes.
            Writer(&mut framed).message(9, |w| {
                w.string(1, "http.route");
                w.message(2, |w| match &value {
                    Value::Str(s) => w.string(1, s),
                    Value::Bool(b) => w.uint(2, u64::from(*b)),
                    Value::Int(i) => w.uint(3, *i as u64),
                    Value::Float(f) => w.fixed64(4, f.to_bits()),
                });
            });
            assert_eq!(exact, framed, "{value:?}");
        }
        for v in [0u64, 1, 127, 128, 16_383, 16_384, u64::MAX] {
            let mut bytes = [0; 10];
            assert_eq!(varint_len(v), varint(v, &mut bytes), "{v}");
        }
    }

    #[test]
    fn negative_ints_are_ten_byte_varints() {
        let mut out = Vec::new();
        Writer(&mut out).uint(3, -1i64 as u64);
        assert_eq!(out.len(), 1 + 10);
    }
}
