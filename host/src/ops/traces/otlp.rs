//! Finished spans and their OTLP encoding: each span written in protobuf as it is queued
//! ([`Encoded`]), each batch wrapped as an `ExportTraceServiceRequest` ([`encode`]).
//!
//! The messages are few and fixed (request → resource spans → resource and scope spans →
//! spans → attributes), so they are written directly rather than built as generated structs
//! first: nothing is allocated per span beyond the span itself. Field numbers
//! are those of `opentelemetry/proto/trace/v1/trace.proto` and `common/v1/common.proto`; the
//! black-box tests decode what this writes with the OpenTelemetry project's own types.

use bytes::Bytes;

use svc_trace::{Anchor, Finished, Value};

/// Who sends the spans (the OTLP resource and instrumentation scope).
#[derive(Debug, Clone)]
pub struct Origin {
    pub service_name: String,
    pub service_version: &'static str,
}

impl Origin {
    /// The lengths of the `Resource` and `InstrumentationScope` bodies.
    fn lens(&self) -> (usize, usize) {
        let resource = attribute_field_len("service.name", &Value::from(self.service_name.clone()))
            + attribute_field_len("service.version", &Value::from(self.service_version));
        let scope = field_len(1, "svc".len()) + field_len(2, self.service_version.len());
        (resource, scope)
    }

    /// The most bytes a request's head takes: the two lengths that enclose the spans are
    /// counted at their largest (five bytes each, for up to 4 GiB of spans).
    fn head_room(&self) -> usize {
        let (resource, scope) = self.lens();
        (1 + 5) + field_len(1, resource) + (1 + 5) + field_len(1, scope)
    }
}

/// Finished spans, encoded as they finish, waiting for their batch. Each is a whole
/// `ScopeSpans.spans` field (key, length, `Span`), after room for the request's head, so the
/// first batch is posted where it was written ([`Encoded::take_requests`]).
///
/// Encoding a span once, where it is queued, replaced building a span list that the exporter
/// measured in one pass and wrote in another: a second look-up of each constant attribute, a
/// length pass, and the queue's moves of each span cost more than the encoding itself.
#[derive(Debug)]
pub struct Encoded {
    /// `head` bytes of room, then the spans' fields.
    bytes: Vec<u8>,
    head: usize,
    /// Where each span's field ends in `bytes`.
    ends: Vec<usize>,
}

impl Encoded {
    /// No spans yet, with room for the head of a request from `origin`.
    pub fn new(origin: &Origin) -> Self {
        let head = origin.head_room();
        Self {
            bytes: vec![0; head],
            head,
            ends: Vec::new(),
        }
    }

    /// Spans staged on the thread that finished them, before they join a batch: no room for
    /// a request's head, since they are never posted from here ([`Encoded::append`]).
    pub fn staging() -> Self {
        Self {
            bytes: Vec::new(),
            head: 0,
            ends: Vec::new(),
        }
    }

    /// How many spans are waiting.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Moves the first `max` of `staged`'s spans after this one's (one copy of their bytes)
    /// and drops the rest; how many were moved. `staged` is left empty, its room kept.
    pub fn append(&mut self, staged: &mut Encoded, max: usize) -> usize {
        let moved = staged.ends.len().min(max);
        if moved > 0 {
            let end = staged.ends[moved - 1];
            // A span's end moves from where it was in `staged` to where its bytes land here.
            let shift = self.bytes.len() - staged.head;
            self.bytes
                .extend_from_slice(&staged.bytes[staged.head..end]);
            self.ends
                .extend(staged.ends[..moved].iter().map(|e| e + shift));
        }
        staged.bytes.truncate(staged.head);
        staged.ends.clear();
        moved
    }

    /// Encodes `span` after the waiting spans ([`encode_span`]).
    pub fn push(&mut self, span: &Finished, anchor: &Anchor) {
        encode_span(span, anchor, &mut self.bytes);
        self.ends.push(self.bytes.len());
    }

    /// The waiting spans as `ExportTraceServiceRequest`s of at most `max` spans each, with
    /// how many each holds; leaves no span waiting, and room for as many again.
    ///
    /// The first request is the spans' own bytes with its head written into the room before
    /// them: copying a batch into a request cost a traced request more than encoding its
    /// spans. Only spans past the first `max` (a queue that filled faster than the exporter
    /// woke) are copied.
    pub fn take_requests(&mut self, origin: &Origin, max: usize) -> Vec<(Bytes, usize)> {
        let mut requests = Vec::new();
        if self.ends.is_empty() {
            return requests;
        }
        let room = self.bytes.capacity();
        let mut bytes = std::mem::replace(&mut self.bytes, Vec::with_capacity(room));
        self.bytes.resize(self.head, 0);
        let mut batches = self.ends.chunks(max.max(1));
        let first = batches.next().expect("a span is waiting");
        let end = *first.last().expect("chunks are never empty");
        let mut head = Vec::with_capacity(self.head);
        write_head(origin, end - self.head, &mut head);
        let at = self.head - head.len();
        bytes[at..self.head].copy_from_slice(&head);
        let bytes = Bytes::from(bytes);
        requests.push((bytes.slice(at..end), first.len()));
        let mut start = end;
        for batch in batches {
            let end = *batch.last().expect("chunks are never empty");
            let mut request = Vec::new();
            encode(origin, &bytes[start..end], &mut request);
            requests.push((Bytes::from(request), batch.len()));
            start = end;
        }
        self.ends.clear();
        requests
    }
}

/// Appends `span` to `out` as a whole `ScopeSpans.spans` field (key, length, `Span`), its
/// times made Unix time by `anchor`.
pub fn encode_span(span: &Finished, anchor: &Anchor, out: &mut Vec<u8>) {
    if span.attributes.is_empty() {
        // Most spans: every length is known up front, so the span goes in as one block
        // (its field's key and length, the fixed fields, the name's key and length), the
        // name's bytes, and the shared attributes' bytes.
        let name = span.name.as_bytes();
        let shared = shared(span);
        let status: &[u8] = if span.failed { &STATUS } else { &[] };
        let mut block = Block::default();
        // ScopeSpans.spans
        block.byte((2 << 3) | 2);
        let len = fixed_len(span) + field_len(5, name.len()) + shared.len() + status.len();
        block.varint(len as u64);
        block.fixed(span, anchor);
        block.name_prefix(name.len());
        // Room for it all at once, then the whole block: a copy of a size known when
        // compiling is made in place, where its used part alone was a call to `memcpy`
        // (one of the calls a traced request made per span); the unused end is cut off.
        let at = out.len();
        out.reserve(Block::MAX + name.len() + shared.len() + status.len());
        out.extend_from_slice(&block.bytes);
        out.truncate(at + block.len);
        out.extend_from_slice(name);
        // Most spans have neither: an empty copy is still a call to `memcpy`.
        if !shared.is_empty() {
            out.extend_from_slice(shared);
        }
        if !status.is_empty() {
            out.extend_from_slice(status);
        }
        return;
    }
    // The field's key, then room for its length, guessed so the body rarely moves: most
    // spans with attributes are under 16 KiB (two bytes of length).
    const ROOM: usize = 2;
    let at = out.len() + 1;
    out.extend_from_slice(&[(2 << 3) | 2, 0, 0]);
    Cursor { buf: out }.span(span, anchor);
    let body = at + ROOM;
    let len = out.len() - body;
    let (digits, used) = varint_bytes(len as u64);
    if used > ROOM {
        out.splice(body..body, std::iter::repeat_n(0, used - ROOM));
    } else if used < ROOM {
        out.copy_within(body.., at + used);
        out.truncate(at + used + len);
    }
    out[at..at + used].copy_from_slice(&digits[..used]);
}

/// The span's shared attributes as whole `Span.attributes` fields, encoded once per set.
fn shared(span: &Finished) -> &[u8] {
    let Some(set) = span.shared else { return &[] };
    set.encoded(|attributes| {
        let mut encoded = Vec::new();
        let mut w = Cursor { buf: &mut encoded };
        for (key, value) in attributes {
            w.attribute(9, key, value);
        }
        encoded.into_boxed_slice()
    })
}

/// Writes one `ExportTraceServiceRequest` holding `spans` (fields written by
/// [`encode_span`]) into `out`, replacing what it held.
pub fn encode(origin: &Origin, spans: &[u8], out: &mut Vec<u8>) {
    out.clear();
    write_head(origin, spans.len(), out);
    out.extend_from_slice(spans);
}

/// The bytes of a request that come before its `spans_len` bytes of span fields: the
/// resource, the scope, and the lengths that enclose the spans.
fn write_head(origin: &Origin, spans_len: usize, out: &mut Vec<u8>) {
    let (resource_len, scope_len) = origin.lens();
    let scope_spans_len = field_len(1, scope_len) + spans_len;
    let resource_spans_len = field_len(1, resource_len) + field_len(2, scope_spans_len);
    let mut w = Cursor { buf: out };
    // ExportTraceServiceRequest.resource_spans
    w.len_prefix(1, resource_spans_len);
    // ResourceSpans.resource
    w.len_prefix(1, resource_len);
    w.attribute(1, "service.name", &Value::from(origin.service_name.clone()));
    w.attribute(1, "service.version", &Value::from(origin.service_version));
    // ResourceSpans.scope_spans
    w.len_prefix(2, scope_spans_len);
    // ScopeSpans.scope: name, version
    w.len_prefix(1, scope_len);
    w.string(1, "svc");
    w.string(2, origin.service_version);
    // ScopeSpans.spans follow.
}

/// `v` as a varint: its bytes and how many of them are used.
fn varint_bytes(mut v: u64) -> ([u8; 10], usize) {
    let mut bytes = [0u8; 10];
    let mut n = 0;
    while v >= 0x80 {
        bytes[n] = (v as u8) | 0x80;
        v >>= 7;
        n += 1;
    }
    bytes[n] = v as u8;
    (bytes, n + 1)
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

/// Protobuf's wire format, appended to a buffer: fixed fields go in as blocks, varints a
/// byte at a time.
struct Cursor<'a> {
    buf: &'a mut Vec<u8>,
}

impl Cursor<'_> {
    fn put(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// A byte at a time: most varints here are one or two bytes, too short to be worth a
    /// copy call.
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

    /// A `Span` body: the fixed fields, the name, the attributes, the status.
    fn span(&mut self, span: &Finished, anchor: &Anchor) {
        let name = span.name.as_bytes();
        let mut block = Block::default();
        block.fixed(span, anchor);
        block.name_prefix(name.len());
        self.put(block.bytes());
        self.put(name);
        self.put(shared(span));
        for (key, value) in &span.attributes {
            self.attribute(9, key, value);
        }
        if span.failed {
            self.put(&STATUS);
        }
    }
}

/// The most bytes a span's fixed-size fields take (with a parent).
const FIXED_MAX: usize = IDS + PARENT + KIND_AND_TIMES + FLAGS.len();

/// The bytes a span's fixed-size fields take ([`Block::fixed`]): fewer without a parent.
fn fixed_len(span: &Finished) -> usize {
    match span.parent {
        Some(_) => FIXED_MAX,
        None => FIXED_MAX - PARENT,
    }
}

/// A span's leading bytes, gathered on the stack and copied into the queue at once: written
/// field by field, each small copy was a call to `memcpy` and a capacity check.
struct Block {
    bytes: [u8; Self::MAX],
    len: usize,
}

impl Default for Block {
    fn default() -> Self {
        Self {
            bytes: [0; Self::MAX],
            len: 0,
        }
    }
}

impl Block {
    /// A span field's key and length, the fixed fields, the name's key and length.
    const MAX: usize = 1 + 10 + FIXED_MAX + 1 + 10;

    fn bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    fn byte(&mut self, b: u8) {
        self.bytes[self.len] = b;
        self.len += 1;
    }

    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.bytes[self.len] = (v as u8) | 0x80;
            self.len += 1;
            v >>= 7;
        }
        self.bytes[self.len] = v as u8;
        self.len += 1;
    }

    /// `trace_id` (1), `span_id` (2), `parent_span_id` (4), `kind` (6), the start and end
    /// times (7, 8) and `flags` (16): every field of a known size, written in place
    /// ([`fixed_len`] bytes). They go before the name, out of number order, so they are
    /// stores into this block rather than copies; protobuf readers take fields in any order.
    fn fixed(&mut self, span: &Finished, anchor: &Anchor) {
        let b = &mut self.bytes[self.len..self.len + FIXED_MAX];
        b[0] = (1 << 3) | 2;
        b[1] = 16;
        b[2..18].copy_from_slice(&span.trace_id.0);
        b[18] = (2 << 3) | 2;
        b[19] = 8;
        b[20..IDS].copy_from_slice(&span.span_id.0);
        let mut at = IDS;
        if let Some(parent) = span.parent {
            b[at] = (4 << 3) | 2;
            b[at + 1] = 8;
            b[at + 2..at + PARENT].copy_from_slice(&parent.0);
            at += PARENT;
        }
        let tail = &mut b[at..at + KIND_AND_TIMES + FLAGS.len()];
        tail[0] = 6 << 3;
        tail[1] = span.kind as u8;
        tail[2] = (7 << 3) | 1;
        tail[3..11].copy_from_slice(&anchor.unix_ns(span.start).to_le_bytes());
        tail[11] = (8 << 3) | 1;
        tail[12..20].copy_from_slice(&anchor.unix_ns(span.end).to_le_bytes());
        tail[20..].copy_from_slice(&FLAGS);
        self.len += at + tail.len();
    }

    /// The name's key and length; its bytes follow the block.
    fn name_prefix(&mut self, len: usize) {
        self.byte((5 << 3) | 2);
        self.varint(len as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use svc_trace::Kind;

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

        /// The encoder's field order: the fixed-size fields first, then the name, the
        /// attributes and the status.
        fn span(&mut self, span: &Finished, anchor: &Anchor) {
            self.bytes(1, &span.trace_id.0);
            self.bytes(2, &span.span_id.0);
            if let Some(parent) = span.parent {
                self.bytes(4, &parent.0);
            }
            self.uint(6, span.kind as u64);
            self.fixed64(7, anchor.unix_ns(span.start));
            self.fixed64(8, anchor.unix_ns(span.end));
            self.key(16, 5);
            self.0.extend_from_slice(&1u32.to_le_bytes());
            self.bytes(5, span.name.as_bytes());
            for (key, value) in span.all_attributes() {
                self.attribute(9, key, value);
            }
            if span.failed {
                self.framed(15, |w| w.uint(3, 2));
            }
        }
    }

    fn spans(n: usize) -> Vec<Finished> {
        // Sets shared by many spans, as a server span's method, route and status are.
        let ok = svc_trace::Shared::leak(vec![
            ("http.request.method", Value::from("GET")),
            ("http.route", Value::from("/api/v2/sample/{table_id}")),
            ("http.response.status_code", Value::Int(200)),
        ]);
        let failing = svc_trace::Shared::leak(vec![
            ("http.request.method", Value::from("POST")),
            ("http.response.status_code", Value::Int(500)),
        ]);
        (0..n)
            .map(|i| Finished {
                trace_id: svc_trace::TraceId::random(),
                span_id: svc_trace::SpanId::random(),
                parent: (i % 3 != 0).then(svc_trace::SpanId::random),
                name: match i % 7 {
                    // A body past 16 KiB: a three-byte length.
                    5 if i % 2 == 1 => "z".repeat(20_000).into(),
                    0 => "x".repeat(200).into(),
                    _ => "auth.resolve".into(),
                },
                kind: if i % 2 == 0 {
                    Kind::Server
                } else {
                    Kind::Internal
                },
                start: svc_trace::Ticks::now(),
                end: svc_trace::Ticks::now(),
                // Alone, with no attributes of its own, and before some.
                shared: match i % 6 {
                    1 | 3 => Some(ok),
                    4 | 5 => Some(failing),
                    _ => None,
                },
                // Bodies under 128 bytes (a one-byte length) with no attributes and with one.
                attributes: match i % 4 {
                    3 => Vec::new(),
                    2 => vec![("cached", Value::Bool(false))],
                    _ => vec![
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
                },
                // With attributes of its own and without.
                failed: i % 5 == 0,
            })
            .collect()
    }

    /// What the reference writes for one request holding `spans`.
    fn reference_request(spans: &[Finished], anchor: &Anchor) -> Vec<u8> {
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
                for span in spans {
                    w.framed(2, |w| w.span(span, anchor));
                }
            });
        });
        reference.0
    }

    fn origin() -> Origin {
        Origin {
            service_name: "svc-test".into(),
            service_version: "1.2.3",
        }
    }

    #[test]
    fn the_encoder_writes_what_the_reference_writes() {
        let origin = origin();
        // Kept across batches, as the queue keeps it: the room spans took is reused.
        let mut queued = Encoded::new(&origin);
        assert!(queued.take_requests(&origin, 512).is_empty());
        // From one span to requests whose outer lengths take three varint bytes.
        for n in [1, 2, 10, 200, 600] {
            let batch = spans(n);
            let anchor = Anchor::now();
            for span in &batch {
                queued.push(span, &anchor);
            }
            assert_eq!(queued.len(), n);
            let requests = queued.take_requests(&origin, n);
            assert_eq!(queued.len(), 0, "taken");
            let [(request, count)] = requests.as_slice() else {
                panic!("{} requests for {n} spans of at most {n}", requests.len());
            };
            assert_eq!(*count, n);
            let reference = reference_request(&batch, &anchor);
            assert_eq!(request.as_ref(), reference.as_slice(), "{n} spans");
            let mut copied = vec![7; 3];
            encode(
                &origin,
                &request[request.len() - span_bytes(&batch, &anchor)..],
                &mut copied,
            );
            assert_eq!(copied, reference, "{n} spans, copied");
            if n == 600 {
                assert!(request.len() > 16_384, "three-byte lengths are covered");
            }
        }
        assert!(encode_nothing(&origin).len() < origin.head_room());
    }

    /// The bytes the spans' fields take, as the reference writes them.
    fn span_bytes(spans: &[Finished], anchor: &Anchor) -> usize {
        let mut fields = Reference(Vec::new());
        for span in spans {
            fields.framed(2, |w| w.span(span, anchor));
        }
        fields.0.len()
    }

    fn encode_nothing(origin: &Origin) -> Vec<u8> {
        let mut out = Vec::new();
        encode(origin, &[], &mut out);
        assert_eq!(out, reference_request(&[], &Anchor::now()));
        out
    }

    #[test]
    fn requests_hold_at_most_the_batch_size_and_every_span_once() {
        let origin = origin();
        let (batch, anchor) = (spans(23), Anchor::now());
        let mut queued = Encoded::new(&origin);
        for _round in 0..2 {
            for span in &batch {
                queued.push(span, &anchor);
            }
            let requests = queued.take_requests(&origin, 10);
            assert_eq!(
                requests.iter().map(|(_, n)| *n).collect::<Vec<_>>(),
                [10, 10, 3]
            );
            for ((request, _), expected) in requests.iter().zip(batch.chunks(10)) {
                assert_eq!(request.as_ref(), reference_request(expected, &anchor));
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
