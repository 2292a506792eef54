//! The OTLP/HTTP sink the ops bench exports spans to.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpListener;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// An OTLP/HTTP sink that answers 200 to every export and keeps nothing but a count of the
/// spans, in `received` (so the bench can tell spans exported from spans dropped on a full
/// queue): the cost of tracing measured is the server's, not a collector's. Its address.
pub fn otlp_sink(received: Arc<AtomicU64>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let received = received.clone();
            std::thread::spawn(move || {
                let mut out = conn.try_clone().unwrap();
                let mut reader = BufReader::new(conn);
                loop {
                    let mut length = 0usize;
                    let mut line = String::new();
                    loop {
                        line.clear();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        let l = line.trim_end();
                        if l.is_empty() {
                            break;
                        }
                        if let Some((k, v)) = l.split_once(':') {
                            if k.eq_ignore_ascii_case("content-length") {
                                length = v.trim().parse().unwrap_or(0);
                            }
                        }
                    }
                    let mut body = vec![0; length];
                    if reader.read_exact(&mut body).is_err() {
                        return;
                    }
                    received.fetch_add(count_spans(&body), Ordering::Relaxed);
                    let reply = "HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
                    if out.write_all(reply.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    format!("http://{addr}")
}

/// The spans in an `ExportTraceServiceRequest`: field 2 of each `ScopeSpans` (field 2) of
/// each `ResourceSpans` (field 1), read off the protobuf wire format.
fn count_spans(request: &[u8]) -> u64 {
    /// The length-delimited fields numbered `number` in `message`.
    fn fields(message: &[u8], number: u64) -> Vec<&[u8]> {
        let mut found = Vec::new();
        let mut at = 0;
        let varint = |at: &mut usize| {
            let mut value = 0u64;
            for shift in (0..64).step_by(7) {
                let byte = message[*at];
                *at += 1;
                value |= u64::from(byte & 0x7f) << shift;
                if byte & 0x80 == 0 {
                    break;
                }
            }
            value
        };
        while at < message.len() {
            let key = varint(&mut at);
            match key & 7 {
                0 => {
                    varint(&mut at);
                }
                1 => at += 8,
                5 => at += 4,
                2 => {
                    let len = varint(&mut at) as usize;
                    if key >> 3 == number {
                        found.push(&message[at..at + len]);
                    }
                    at += len;
                }
                wire => panic!("wire type {wire} in an OTLP request"),
            }
        }
        found
    }
    fields(request, 1)
        .into_iter()
        .flat_map(|resource| fields(resource, 2))
        .map(|scope| fields(scope, 2).len() as u64)
        .sum()
}
