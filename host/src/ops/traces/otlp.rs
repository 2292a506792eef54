//! Finished spans and their OTLP encoding: an `ExportTraceServiceRequest` in protobuf, written
//! field by field into one reusable buffer.
//!
//! The messages are few and fixed (request → resource spans → resource and scope spans →
//! spans → attributes), so they are written directly rather than built as generated structs
//! first: the exporter then allocates nothing per span beyond the span itself. Field numbers
//! are those of `opentelemetry/proto/trace/v1/trace.proto` and `common/v1/common.proto`; the
//! black-box tests decode what this writes with the OpenTelemetry project's own types.

use std::borrow::Cow;
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;

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

/// Writes `spans` as one `ExportTraceServiceRequest` into `out` (replacing what it held).
///
/// Every message's length is worked out first, so `out` grows once, to the exact total, and
/// each byte is written once: framing a message by making room for its length and moving its
/// body back moved the whole batch twice, and pushing byte by byte paid a capacity check per
/// byte. A span's ids, kind, times and flags are fixed-size, so they go in as a few
/// constant-size copies.
pub fn encode(origin: &Origin, spans: &[Finished], constants: &mut Constants, out: &mut Vec<u8>) {
    let service_name = Value::from(origin.service_name.clone());
    let service_version = Value::from(origin.service_version);
    let resource_len = attribute_field_len("service.name", &service_name)
        + attribute_field_len("service.version", &service_version);
    let scope_len = field_len(1, "svc".len()) + field_len(2, origin.service_version.len());
    let shapes: Vec<Shape> = spans
        .iter()
        .map(|span| Shape::of(span, constants))
        .collect();
    let scope_spans_len =
        field_len(1, scope_len) + shapes.iter().map(|s| field_len(2, s.len)).sum::<usize>();
    let resource_spans_len = field_len(1, resource_len) + field_len(2, scope_spans_len);
    let total = field_len(1, resource_spans_len);
    out.clear();
    // Room reserved, not filled: zeroing the batch first cost as much as writing it.
    out.reserve(total);

    let mut w = Cursor { buf: out };
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
    for (span, shape) in spans.iter().zip(&shapes) {
        w.len_prefix(2, shape.len);
        w.span(span, shape.failed, constants);
    }
    debug_assert_eq!(
        out.len(),
        total,
        "the worked-out length is what was written"
    );
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

/// What the writer needs to know of a span before writing it: its body's length, and
/// whether it failed (worked out once, in the length pass).
struct Shape {
    len: usize,
    failed: bool,
}

impl Shape {
    fn of(span: &Finished, constants: &mut Constants) -> Self {
        let failed = failed(span);
        let parent = if span.parent.is_some() { PARENT } else { 0 };
        let status = if failed { STATUS.len() } else { 0 };
        let attributes: usize = span
            .attributes
            .iter()
            .map(|(k, v)| match constants.get(k, v) {
                Some(encoded) => encoded.len(),
                None => attribute_field_len(k, v),
            })
            .sum();
        let len = IDS
            + parent
            + field_len(5, span.name.len())
            + KIND_AND_TIMES
            + attributes
            + status
            + FLAGS.len();
        Self { len, failed }
    }
}

/// Span attributes whose key and value are both constants (a method, a route template),
/// encoded once per pair as the whole field (key, length, `KeyValue`). They come from bounded
/// sets and repeat on every request, and encoding one cost more than the rest of its span.
#[derive(Debug, Default)]
pub struct Constants(HashMap<[usize; 4], Box<[u8]>, BuildHasherDefault<super::AddressHasher>>);

impl Constants {
    /// Pairs kept at most; past that, attributes are encoded each time.
    const MAX: usize = 4096;

    /// The encoded attribute, when it is a constant pair (made on first sight).
    fn get(&mut self, key: &'static str, value: &Value) -> Option<&[u8]> {
        let Value::Str(Cow::Borrowed(text)) = value else {
            return None;
        };
        let id = super::address_key(key, text);
        let kept = self.0.len();
        match self.0.entry(id) {
            Entry::Occupied(e) => Some(e.into_mut()),
            Entry::Vacant(e) if kept < Self::MAX => {
                let mut encoded = Vec::with_capacity(attribute_field_len(key, value));
                Cursor { buf: &mut encoded }.attribute(9, key, value);
                Some(e.insert(encoded.into_boxed_slice()))
            }
            Entry::Vacant(_) => None,
        }
    }
}

/// `trace_id` (field 1) and `span_id` (field 2), each a key, a length and the bytes.
const IDS: usize = 2 + 16 + 2 + 8;
/// `parent_span_id` (field 4).
const PARENT: usize = 2 + 8;
/// `kind` (field 6, a one-byte varint), `start_time_unix_nano` and `end_time_unix_nano`
/// (fields 7 and 8, fixed64).
const KIND_AND_TIMES: usize = 2 + 2 * (1 + 8);
/// `status` (field 15) holding `code = ERROR` (field 3, value 2).
const STATUS: [u8; 4] = [(15 << 3) | 2, 2, 3 << 3, 2];
/// `flags` (field 16, fixed32: the key `16 << 3 | 5` = 133 is the two varint bytes 0x85
/// 0x01) = sampled: only sampled spans are exported. Whether the parent is remote is not
/// known here, so the "has is_remote" bit stays clear.
const FLAGS: [u8; 6] = [0x85, 0x01, 1, 0, 0, 0];

/// Protobuf's wire format, appended to a buffer that has room for it all: fixed fields go
/// in as blocks, varints a byte at a time.
struct Cursor<'a> {
    buf: &'a mut Vec<u8>,
}

impl Cursor<'_> {
    fn put(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// A byte at a time, into room already reserved: most varints here are one or two
    /// bytes, too short to be worth a copy call.
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.buf.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.buf.push(v as u8);
    }

    /// The key and length of a length-delimited field whose body follows.
    fn len_prefix(&mut self, field: u32, len: usize) {
        self.varint((u64::from(field) << 3) | 2);
        self.varint(len as u64);
    }

    fn string(&mut self, field: u32, s: &str) {
        self.len_prefix(field, s.len());
        self.put(s.as_bytes());
    }

    /// A `KeyValue` in field `field`.
    fn attribute(&mut self, field: u32, key: &str, value: &Value) {
        self.len_prefix(field, attribute_len(key, value));
        self.string(1, key);
        self.len_prefix(2, value_len(value));
        match value {
            Value::Str(s) => self.string(1, s),
            Value::Bool(b) => self.put(&[2 << 3, u8::from(*b)]),
            Value::Int(i) => {
                self.put(&[3 << 3]);
                self.varint(*i as u64);
            }
            Value::Float(f) => {
                let mut bytes = [(4 << 3) | 1; 9];
                bytes[1..].copy_from_slice(&f.to_bits().to_le_bytes());
                self.put(&bytes);
            }
        }
    }

    /// A `Span` body, fields in number order.
    fn span(&mut self, span: &Finished, failed: bool, constants: &mut Constants) {
        let mut ids = [0u8; IDS + PARENT];
        ids[0] = (1 << 3) | 2;
        ids[1] = 16;
        ids[2..18].copy_from_slice(&span.trace_id.0);
        ids[18] = (2 << 3) | 2;
        ids[19] = 8;
        ids[20..28].copy_from_slice(&span.span_id.0);
        match span.parent {
            Some(parent) => {
                ids[28] = (4 << 3) | 2;
                ids[29] = 8;
                ids[30..38].copy_from_slice(&parent.0);
                self.put(&ids);
            }
            None => self.put(&ids[..IDS]),
        }
        self.string(5, &span.name);
        let mut fixed = [0u8; KIND_AND_TIMES];
        fixed[0] = 6 << 3;
        fixed[1] = span.kind as u8;
        fixed[2] = (7 << 3) | 1;
        fixed[3..11].copy_from_slice(&span.start_ns.to_le_bytes());
        fixed[11] = (8 << 3) | 1;
        fixed[12..20].copy_from_slice(&span.end_ns.to_le_bytes());
        self.put(&fixed);
        for (key, value) in &span.attributes {
            match constants.get(key, value) {
                Some(encoded) => self.put(encoded),
                None => self.attribute(9, key, value),
            }
        }
        if failed {
            self.put(&STATUS);
        }
        self.put(&FLAGS);
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

    /// The wire format the slow, obviously right way, to check the encoder against: a field
    /// at a time, each message framed by making room for its length, writing the body, then
    /// writing the length as the fewest varint bytes and moving the body back over the rest.
    struct Reference(Vec<u8>);

    impl Reference {
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

        fn bytes(&mut self, field: u32, bytes: &[u8]) {
            self.key(field, 2);
            self.varint(bytes.len() as u64);
            self.0.extend_from_slice(bytes);
        }

        fn uint(&mut self, field: u32, v: u64) {
            self.key(field, 0);
            self.varint(v);
        }

        fn fixed64(&mut self, field: u32, v: u64) {
            self.key(field, 1);
            self.0.extend_from_slice(&v.to_le_bytes());
        }

        fn framed(&mut self, field: u32, body: impl FnOnce(&mut Self)) {
            const ROOM: usize = 5;
            self.key(field, 2);
            let at = self.0.len();
            self.0.extend_from_slice(&[0; ROOM]);
            body(self);
            let len = self.0.len() - at - ROOM;
            let mut prefix = Reference(Vec::new());
            prefix.varint(len as u64);
            let used = prefix.0.len();
            self.0.copy_within(at + ROOM.., at + used);
            self.0[at..at + used].copy_from_slice(&prefix.0);
            self.0.truncate(at + used + len);
        }

        fn attribute(&mut self, field: u32, key: &str, value: &Value) {
            self.framed(field, |w| {
                w.bytes(1, key.as_bytes());
                w.framed(2, |w| match value {
                    Value::Str(s) => w.bytes(1, s.as_bytes()),
                    Value::Bool(b) => w.uint(2, u64::from(*b)),
                    Value::Int(i) => w.uint(3, *i as u64),
                    Value::Float(f) => w.fixed64(4, f.to_bits()),
                });
            });
        }

        fn span(&mut self, span: &Finished) {
            self.bytes(1, &span.trace_id.0);
            self.bytes(2, &span.span_id.0);
            if let Some(parent) = span.parent {
                self.bytes(4, &parent.0);
            }
            self.bytes(5, span.name.as_bytes());
            self.uint(6, span.kind as u64);
            self.fixed64(7, span.start_ns);
            self.fixed64(8, span.end_ns);
            for (key, value) in &span.attributes {
                self.attribute(9, key, value);
            }
            if failed(span) {
                self.framed(15, |w| w.uint(3, 2));
            }
            self.key(16, 5);
            self.0.extend_from_slice(&1u32.to_le_bytes());
        }
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
                    ("empty", Value::from(String::new())),
                    ("long", Value::from("y".repeat(300))),
                ],
            })
            .collect()
    }

    #[test]
    fn the_encoder_writes_what_the_reference_writes() {
        let origin = Origin {
            service_name: "svc-test".into(),
            service_version: "1.2.3",
        };
        // Kept across batches, as the exporter keeps it: constant attributes are encoded
        // the first time they are seen and copied after.
        let mut constants = Constants::default();
        // From no span to batches whose outer lengths take three varint bytes.
        for n in [0, 1, 2, 10, 200, 600] {
            let batch = spans(n);
            let mut encoded = vec![7; 3];
            encode(&origin, &batch, &mut constants, &mut encoded);
            let mut reference = Reference(Vec::new());
            reference.framed(1, |w| {
                w.framed(1, |w| {
                    w.attribute(1, "service.name", &Value::from("svc-test"));
                    w.attribute(1, "service.version", &Value::from("1.2.3"));
                });
                w.framed(2, |w| {
                    w.framed(1, |w| {
                        w.bytes(1, b"svc");
                        w.bytes(2, b"1.2.3");
                    });
                    for span in &batch {
                        w.framed(2, |w| w.span(span));
                    }
                });
            });
            assert_eq!(encoded, reference.0, "{n} spans");
            if n == 600 {
                assert!(encoded.len() > 16_384, "three-byte lengths are covered");
            }
        }
    }

    #[test]
    fn lengths_are_worked_out_as_written() {
        for v in [0u64, 1, 127, 128, 16_383, 16_384, u64::MAX] {
            let mut written = Reference(Vec::new());
            written.varint(v);
            assert_eq!(varint_len(v), written.0.len(), "{v}");
        }
        let mut negative = Reference(Vec::new());
        negative.uint(3, -1i64 as u64);
        assert_eq!(
            negative.0.len(),
            1 + 10,
            "a negative int is a ten-byte varint"
        );
        assert_eq!(value_len(&Value::Int(-1)), 1 + 10);
    }
}
