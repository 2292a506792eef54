//! Ticketing source benchmarks against a real release `svc-server` on loopback:
//!
//! 1. Webhook ingest: signed Jira-shaped deliveries (about 2 KB, unique delivery ids over
//!    10,000 issues) from 32 concurrent senders, each acknowledged only once fsynced: events/s
//!    and ack latency p50/p99, `SVC_BENCH_EVENTS` (default 60,000) per pass, two passes on
//!    fresh servers, with the fsync rate of this disk measured alone for reference.
//! 2. Event to visible: 20 deliveries a second for 10 s, each of a new issue; a poller reads
//!    the issues table through `/api/query` every 100 ms. p50/p95 from the ack to the first
//!    read that shows it (the compactor runs every 2 s, its default); once on a fresh server
//!    and once on the server the ingest pass filled.
//! 3. Compaction of `SVC_BENCH_COMPACT_EVENTS` (default 1,000,000) logged events into the
//!    tables: the log is written directly, then a server starts on it and folds it in;
//!    seconds and the server's peak RSS.
//!
//! `cargo bench -p svc-host --bench ticketing`.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{percentile, Server};
use serde_json::{json, Value};
use svc_driver_ticketing::log::{EventLog, Origin, Record};
use svc_driver_ticketing::signature::sign;
use svc_store::testing::TempDir;

const SECRET: &str = "bench-secret";
const SENDERS: usize = 32;

fn env_count(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A Jira Cloud `jira:issue_updated` delivery of about 2 KB.
fn payload(i: usize, key: &str) -> String {
    let t = 1_700_000_000_000i64 + i as i64 * 10;
    let description = "x".repeat(600);
    format!(
        r#"{{"timestamp":{t},"webhookEvent":"jira:issue_updated","issue_event_type_name":"issue_generic","user":{{"accountId":"5b10a2844c20165700ede21g","displayName":"Ann Analyst","active":true,"timeZone":"Europe/Prague"}},"issue":{{"id":"{i}","self":"https://example.atlassian.net/rest/api/3/issue/{i}","key":"{key}","fields":{{"summary":"Nightly load of orders failed ({i})","issuetype":{{"id":"10004","name":"Bug","subtask":false}},"project":{{"id":"10000","key":"OPS","name":"Operations"}},"status":{{"id":"3","name":"In Progress","statusCategory":{{"key":"indeterminate"}}}},"priority":{{"id":"2","name":"High"}},"assignee":{{"accountId":"5b10a2844c20165700ede21g","displayName":"Ann Analyst"}},"reporter":{{"accountId":"5b10ac8d82e05b22cc7d4ef5","displayName":"Bo Builder"}},"created":"2023-11-14T22:13:20.000+0000","updated":"2023-11-14T22:13:21.000+0000","resolution":null,"labels":["etl","nightly"],"description":"{description}","customfield_10010":{{"id":"14","name":"Sprint 14","state":"active","boardId":3}},"customfield_10020":[{{"value":"EMEA","id":"10100"}}],"customfield_10030":4.5}}}},"changelog":{{"id":"{}","items":[{{"field":"status","fieldtype":"jira","fieldId":"status","from":"1","fromString":"Open","to":"3","toString":"In Progress"}}]}}}}"#,
        i + 1
    )
}

fn config(interval_ms: &str) -> Vec<(&'static str, String)> {
    vec![
        ("BENCH_TICKETING_SECRET", SECRET.to_owned()),
        (
            "SVC_TICKETING_JIRA_SECRET_ENV",
            "BENCH_TICKETING_SECRET".to_owned(),
        ),
        (
            "SVC_TICKETING_JIRA_COMPACT_INTERVAL_MS",
            interval_ms.to_owned(),
        ),
        ("SCHEDULER_ENABLED", "false".to_owned()),
        ("SVC_SKIP_CACHE_WARMUP", "1".to_owned()),
    ]
}

fn start(dir: &std::path::Path, interval_ms: &str) -> Server {
    let env = config(interval_ms);
    let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    Server::start_with(dir, &pairs)
}

fn admin_token(s: &Server) -> String {
    s.cli(&["tokens", "create", "--email", "admin@localhost"])
}

/// Sends `n` deliveries from `SENDERS` tasks; returns (events/s, ack latencies in ms).
fn ingest(base: &str, n: usize, id_prefix: &str) -> (f64, Vec<f64>) {
    let bodies: Arc<Vec<(String, String)>> = Arc::new(
        (0..1_000)
            .map(|i| {
                let body = payload(i, &format!("OPS-{}", i * 10));
                let sig = sign(SECRET.as_bytes(), body.as_bytes());
                (body, sig)
            })
            .collect(),
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(SENDERS)
            .build()
            .unwrap();
        let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let url = format!("{base}/api/webhooks/ticketing/jira");
        let began = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..SENDERS {
            let (client, next, url, bodies) =
                (client.clone(), next.clone(), url.clone(), bodies.clone());
            let prefix = id_prefix.to_owned();
            tasks.push(tokio::spawn(async move {
                let mut took = Vec::new();
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if i >= n {
                        return took;
                    }
                    let (body, sig) = &bodies[i % bodies.len()];
                    let sent = Instant::now();
                    let resp = client
                        .post(&url)
                        .header("content-type", "application/json")
                        .header("X-Hub-Signature", sig)
                        .header("X-Atlassian-Webhook-Identifier", format!("{prefix}-{i}"))
                        .body(body.clone())
                        .send()
                        .await
                        .unwrap();
                    assert!(resp.status().is_success(), "{}", resp.status());
                    let _ = resp.bytes().await;
                    took.push(sent.elapsed().as_secs_f64() * 1e3);
                }
            }));
        }
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.unwrap());
        }
        let secs = began.elapsed().as_secs_f64();
        all.sort_by(f64::total_cmp);
        (n as f64 / secs, all)
    })
}

/// fsyncs a second this disk does alone (4 KiB writes), for reference.
fn fsync_rate(dir: &std::path::Path) -> f64 {
    use std::io::Write;
    let mut f = std::fs::File::create(dir.join("fsync-probe")).unwrap();
    let began = Instant::now();
    let mut n = 0;
    while began.elapsed() < Duration::from_secs(2) {
        f.write_all(&[0u8; 4096]).unwrap();
        f.sync_data().unwrap();
        n += 1;
    }
    n as f64 / began.elapsed().as_secs_f64()
}

fn status(http: &reqwest::blocking::Client, s: &Server, token: &str) -> Value {
    http.get(format!("{}/api/admin/ticketing/jira", s.base))
        .bearer_auth(token)
        .send()
        .unwrap()
        .json()
        .unwrap()
}

/// Ack-to-visible latencies (ms) of `n` new issues sent 20 a second.
fn visibility(s: &Server, token: &str, tag: &str, n: usize) -> Vec<f64> {
    let http = reqwest::blocking::Client::new();
    let acked: Arc<std::sync::Mutex<Vec<(String, Instant)>>> = Arc::default();
    let sender = {
        let (acked, base, tag) = (acked.clone(), s.base.clone(), tag.to_owned());
        std::thread::spawn(move || {
            let http = reqwest::blocking::Client::new();
            for i in 0..n {
                let key = format!("VIS{tag}-{i}");
                let body = payload(900_000 + i, &key);
                let resp = http
                    .post(format!("{base}/api/webhooks/ticketing/jira"))
                    .header("X-Hub-Signature", sign(SECRET.as_bytes(), body.as_bytes()))
                    .header("X-Atlassian-Webhook-Identifier", format!("vis-{tag}-{i}"))
                    .body(body)
                    .send()
                    .unwrap();
                assert!(resp.status().is_success());
                acked.lock().unwrap().push((key, Instant::now()));
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    let mut seen: std::collections::HashMap<String, Instant> = Default::default();
    let deadline = Instant::now() + Duration::from_secs(60);
    let sql = format!("SELECT key FROM jira_issues WHERE key LIKE 'VIS{tag}-%'");
    while seen.len() < n && Instant::now() < deadline {
        let doc: Value = http
            .post(format!("{}/api/query", s.base))
            .bearer_auth(token)
            .json(&json!({ "sql": sql }))
            .send()
            .unwrap()
            .json()
            .unwrap();
        let now = Instant::now();
        for row in doc["rows"].as_array().into_iter().flatten() {
            if let Some(k) = row[0].as_str() {
                seen.entry(k.to_owned()).or_insert(now);
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    sender.join().unwrap();
    let acked = acked.lock().unwrap();
    let mut lat: Vec<f64> = acked
        .iter()
        .map(|(k, at)| match seen.get(k) {
            Some(v) => v.saturating_duration_since(*at).as_secs_f64() * 1e3,
            None => f64::INFINITY,
        })
        .collect();
    lat.sort_by(f64::total_cmp);
    lat
}

fn main() {
    let events = env_count("SVC_BENCH_EVENTS", 60_000);
    let compact_events = env_count("SVC_BENCH_COMPACT_EVENTS", 1_000_000);
    let probe = TempDir::new();
    println!(
        "ticketing bench: this disk alone does {:.0} fsyncs/s (4 KiB)",
        fsync_rate(&probe.0)
    );

    // 1. Ingest, two passes on fresh servers.
    let mut filled = None;
    for pass in 1..=2 {
        let dir = TempDir::new();
        let s = start(&dir.0, "2000");
        let cpu = s.cpu_seconds();
        let (rate, lat) = ingest(&s.base, events, &format!("p{pass}"));
        println!(
            "ingest pass {pass}: {events} events at c={SENDERS}: {rate:.0} events/s; ack p50 {:.2} ms, p99 {:.2} ms; server CPU {:.1} s",
            percentile(&lat, 0.50),
            percentile(&lat, 0.99),
            s.cpu_seconds() - cpu
        );
        filled = Some((s, dir));
    }

    // 2. Event to visible: fresh, then on the filled server.
    let (s, _dir_filled) = filled.unwrap();
    let token = admin_token(&s);
    let http = reqwest::blocking::Client::new();
    // Let the filled server fold its backlog first.
    let deadline = Instant::now() + Duration::from_secs(600);
    while status(&http, &s, &token)["pending"].as_u64() != Some(0) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    let filled_rows = status(&http, &s, &token)["tables"].clone();
    let fresh_dir = TempDir::new();
    let fresh = start(&fresh_dir.0, "2000");
    let fresh_token = admin_token(&fresh);
    for (label, server, token) in [
        ("fresh server", &fresh, fresh_token.as_str()),
        ("after the ingest pass", &s, token.as_str()),
    ] {
        let lat = visibility(
            server,
            token,
            if label.starts_with('f') { "F" } else { "A" },
            200,
        );
        let last = status(&http, server, token)["last_compaction"].clone();
        println!(
            "event to visible ({label}): p50 {:.0} ms, p95 {:.0} ms, max {:.0} ms (last compaction {:.2} s)",
            percentile(&lat, 0.50),
            percentile(&lat, 0.95),
            lat[lat.len() - 1],
            last["seconds"].as_f64().unwrap_or(0.0)
        );
    }
    println!("  tables after the ingest pass: {filled_rows}");
    drop(s);
    drop(fresh);

    // 3. Compaction of a large log: written directly, folded by a server at its start.
    let dir = TempDir::new();
    let log_dir = dir.0.join("ticketing/jira/log");
    let log = EventLog::open(&log_dir).unwrap();
    let now = chrono::Utc::now().timestamp_millis();
    let mut last = None;
    let mut bytes = 0usize;
    for i in 0..compact_events {
        let body = payload(i, &format!("OPS-{}", i % 10_000)).into_bytes();
        bytes += body.len();
        let (_, wait) = log.enqueue(Record {
            delivery_id: format!("c-{i}"),
            received_at_ms: now,
            origin: Origin::Webhook,
            body,
        });
        last = Some(wait);
        if i % 50_000 == 49_999 {
            let rt = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            rt.block_on(last.take().unwrap()).unwrap().unwrap();
        }
    }
    if let Some(wait) = last {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(wait).unwrap().unwrap();
    }
    drop(log);
    let began = Instant::now();
    let s = start(&dir.0, "3600000");
    let token = admin_token(&s);
    let deadline = Instant::now() + Duration::from_secs(1800);
    let mut st = status(&http, &s, &token);
    while st["last_compaction"]["events"].as_u64().unwrap_or(0) < compact_events as u64
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(500));
        st = status(&http, &s, &token);
    }
    println!(
        "compaction of {compact_events} events ({:.0} MB logged): {:.1} s folding ({:.1} s from server start to done); server peak RSS {} MiB; tables {}",
        bytes as f64 / 1e6,
        st["last_compaction"]["seconds"].as_f64().unwrap_or(f64::NAN),
        began.elapsed().as_secs_f64(),
        s.peak_rss_kib() / 1024,
        st["tables"]
    );
}
