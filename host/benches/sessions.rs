//! Session upload against a real release `svc-server` on loopback: one ~100 MB transcript
//! posted raw (as `svc sessions push` and agents do), then the same bytes again (answered
//! `unchanged` after hashing), then gzip-encoded; MB/s of each and the server's peak RSS,
//! which must not follow the file's size (the body streams to disk). Ends with the pipeline
//! run over the stored file. Prints figures; asserts only that each step worked.
//!
//! `cargo bench -p svc-host --bench sessions` (`SVC_BENCH_UPLOAD_MB`, default 100).

mod common;

use std::io::Write;
use std::time::Instant;

use svc_telemetry::corpus::{self, Rng};

use common::Server;

fn upload(
    http: &reqwest::blocking::Client,
    s: &Server,
    token: &str,
    body: Vec<u8>,
    gzip: bool,
) -> (f64, serde_json::Value) {
    let mut rb = http
        .post(format!("{}/api/upload/sessions?name=bench.jsonl", s.base))
        .bearer_auth(token)
        .header("content-type", "application/octet-stream");
    if gzip {
        rb = rb.header("content-encoding", "gzip");
    }
    let started = Instant::now();
    let r = rb.body(body).send().unwrap();
    let secs = started.elapsed().as_secs_f64();
    assert!(r.status().is_success(), "upload: {}", r.status());
    (secs, r.json().unwrap())
}

fn main() {
    let mb: u64 = std::env::var("SVC_BENCH_UPLOAD_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let mut file = Vec::with_capacity((mb as usize + 1) << 20);
    let mut rng = Rng::new(20_261_125);
    let mut part = 0;
    while (file.len() as u64) < mb * 1_000_000 {
        corpus::session(&mut file, &mut rng, part, 60).unwrap();
        part += 1;
    }
    let size = file.len() as f64 / 1e6;

    let dir = std::env::temp_dir().join(format!("svc-bench-sessions-{}", std::process::id()));
    let s = Server::start_with(
        &dir,
        &[
            ("SCHEDULER_ENABLED", "false"),
            ("SVC_SKIP_CACHE_WARMUP", "1"),
            // Processing waits for the explicit run below, not the upload's debounce.
            ("SVC_TELEMETRY_DEBOUNCE_MS", "600000"),
        ],
    );
    let token = s.cli(&["tokens", "create", "--email", "admin@localhost"]);
    let http = reqwest::blocking::Client::builder()
        .timeout(None)
        .build()
        .unwrap();
    let idle = s.peak_rss_kib();
    println!("session upload (release svc-server on loopback, 2 cores shared; server peak RSS before: {} MiB)", idle / 1024);

    let (secs, answer) = upload(&http, &s, &token, file.clone(), false);
    assert_eq!(answer["outcome"], "new", "{answer}");
    println!(
        "  raw upload of {size:.1} MB: {secs:.2} s, {:.0} MB/s; server peak RSS {} MiB",
        size / secs,
        s.peak_rss_kib() / 1024
    );
    let (secs, answer) = upload(&http, &s, &token, file.clone(), false);
    assert_eq!(answer["outcome"], "unchanged", "{answer}");
    println!(
        "  the same bytes again (hashed, left as stored): {secs:.2} s, {:.0} MB/s",
        size / secs
    );
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&file).unwrap();
    let gz = gz.finish().unwrap();
    let (secs, answer) = upload(&http, &s, &token, gz.clone(), true);
    assert_eq!(answer["outcome"], "unchanged", "{answer}");
    println!(
        "  gzip-encoded ({:.1} MB on the wire): {secs:.2} s, {:.0} MB/s of session data; server peak RSS {} MiB",
        gz.len() as f64 / 1e6,
        size / secs,
        s.peak_rss_kib() / 1024
    );

    let started = Instant::now();
    let report: serde_json::Value = http
        .post(format!("{}/api/admin/telemetry/run", s.base))
        .bearer_auth(&token)
        .send()
        .unwrap()
        .json()
        .unwrap();
    let secs = started.elapsed().as_secs_f64();
    assert_eq!(report["processed"], 1, "{report}");
    println!(
        "  pipeline run over it: {secs:.2} s, {:.0} MB/s, {} events; server peak RSS {} MiB",
        size / secs,
        report["events"],
        s.peak_rss_kib() / 1024
    );
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
}
