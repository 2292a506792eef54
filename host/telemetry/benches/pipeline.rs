//! Telemetry pipeline throughput: a generated corpus of session files on disk → events,
//! summaries and rollups committed. Prints figures; asserts nothing about speed.
//!
//!   cargo bench -p svc-telemetry --bench pipeline
//!
//! `SVC_BENCH_CORPUS_MB` (default 766) and `SVC_BENCH_FILES` (default 200) size the corpus;
//! with `SVC_TEST_DATABASE_URL` set the first run is repeated on PostgreSQL. With `ccusage`
//! installed (`SVC_BENCH_CCUSAGE`, default `~/.cache/svc-npm/node_modules/.bin/ccusage`) it
//! is timed over the same files laid out as `~/.claude/projects`. Install it with
//! `npm install ccusage@20.0.24` in `~/.cache/svc-npm` (20.0.26 lacks its linux-x64 native
//! package, so it installs but cannot run).

use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::Instant;

use svc_store::testing::TempDir;
use svc_store::Store;
use svc_telemetry::corpus::{self, Rng};
use svc_telemetry::files::SessionFiles;
use svc_telemetry::{EventSegments, Pipeline, Trigger};

const USERS: u64 = 10;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

/// Writes the corpus; returns (bytes, expected events, malformed lines).
fn generate(root: &Path, files: u64, target_bytes: u64, user_ids: &[String]) -> (u64, u64, u64) {
    let mut rng = Rng::new(20_261_124);
    let mut total = corpus::Generated::default();
    for i in 0..files {
        let dir = root.join(&user_ids[(i % USERS) as usize]);
        std::fs::create_dir_all(&dir).unwrap();
        let mut out = BufWriter::new(
            std::fs::File::create(dir.join(format!("session-{i:05}.jsonl"))).unwrap(),
        );
        total += corpus::file(&mut out, &mut rng, i * 1000, target_bytes / files.max(1)).unwrap();
        out.flush().unwrap();
    }
    (total.bytes, total.events, total.malformed)
}

async fn store_with_users(url: &str) -> (Store, Vec<String>) {
    let store = Store::open(url).await.unwrap();
    let mut ids = Vec::new();
    for u in 0..USERS {
        let user = store
            .create_user(&format!("user{u}@example.com"), None, None)
            .await
            .unwrap();
        ids.push(user.id);
    }
    (store, ids)
}

async fn measure(label: &str, store: Store, data: &Path, bytes: u64) {
    let pipeline = Pipeline::new(store, SessionFiles::new(data), EventSegments::new(data));
    let t = Instant::now();
    let r = pipeline.run(Trigger::Manual, false).await.unwrap();
    let secs = t.elapsed().as_secs_f64();
    let mb = bytes as f64 / 1e6;
    let cpu = (r.parse_ms + r.segment_ms + r.store_ms + r.rollup_ms).max(1) as f64;
    println!(
        "{label}: {} files, {:.1} MB, {} events, {} malformed lines in {:.2} s: {:.1} MB/s, {:.0} events/s",
        r.processed, mb, r.events, r.malformed_lines, secs, mb / secs, r.events as f64 / secs
    );
    println!(
        "{label}:   parse {} ms and segments {} ms (summed over workers), store {} ms, rollups {} ms, packing {} ms ({} packs) — parse {:.0}% / segments {:.0}% / store {:.0}% of the measured work",
        r.parse_ms, r.segment_ms, r.store_ms, r.rollup_ms, r.compaction.ms, r.compaction.packs,
        100.0 * r.parse_ms as f64 / cpu, 100.0 * r.segment_ms as f64 / cpu,
        100.0 * (r.store_ms + r.rollup_ms) as f64 / cpu
    );
    let t = Instant::now();
    let again = pipeline.run(Trigger::Manual, false).await.unwrap();
    println!(
        "{label}: second run, nothing changed: {:.1} ms ({} unchanged)",
        t.elapsed().as_secs_f64() * 1e3,
        again.unchanged
    );
    // One changed file (about 4 MB), re-read with its rollup days.
    let victim = std::fs::read_dir(data.join("user_sessions"))
        .unwrap()
        .map(|d| d.unwrap().path().join("session-00000.jsonl"))
        .find(|p| p.exists())
        .unwrap();
    let size = std::fs::metadata(&victim).unwrap().len();
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&victim)
        .unwrap();
    writeln!(f, "{{\"type\":\"assistant\",\"uuid\":\"bench-extra\",\"timestamp\":\"2026-01-01T00:00:00Z\",\"message\":{{\"content\":[{{\"type\":\"tool_use\",\"id\":\"x\",\"name\":\"Bash\"}}]}}}}").unwrap();
    drop(f);
    let t = Instant::now();
    let one = pipeline.run(Trigger::Manual, false).await.unwrap();
    println!(
        "{label}: one changed {:.1} MB file re-processed with rollups: {:.1} ms ({} processed)",
        size as f64 / 1e6,
        t.elapsed().as_secs_f64() * 1e3,
        one.processed
    );
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let files = env_u64("SVC_BENCH_FILES", 200);
    let target = env_u64("SVC_BENCH_CORPUS_MB", 766) * 1_000_000;
    let tmp = TempDir::new();
    let data = tmp.0.join("data");
    let url = svc_store::default_sqlite_url(&data);
    let (store, users) = rt.block_on(store_with_users(&url));
    let t = Instant::now();
    let (bytes, events, malformed) = generate(&data.join("user_sessions"), files, target, &users);
    println!(
        "corpus: {files} files, {:.1} MB, {events} events and {malformed} malformed lines expected (generated in {:.1} s)",
        bytes as f64 / 1e6,
        t.elapsed().as_secs_f64()
    );
    println!("peak RSS before processing: {:.0} MiB", peak_rss_mib());
    rt.block_on(measure("sqlite", store, &data, bytes));
    println!("peak RSS after processing: {:.0} MiB", peak_rss_mib());
    if let Some(url) = rt.block_on(svc_store::testing::postgres_url()) {
        let (store, pg_users) = rt.block_on(store_with_users(&url));
        // The PostgreSQL store has its own user ids: lay the same files out under them.
        let root = data.join("user_sessions");
        for (old, new) in users.iter().zip(&pg_users) {
            std::fs::rename(root.join(old), root.join(new)).unwrap();
        }
        rt.block_on(measure("postgres", store, &data, bytes));
    }
    ccusage(&data.join("user_sessions"), bytes);
}

/// Times `ccusage session --json --offline` over the same files as `~/.claude/projects`.
fn ccusage(root: &Path, bytes: u64) {
    let bin = std::env::var("SVC_BENCH_CCUSAGE")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| {
            std::path::PathBuf::from(std::env::var("HOME").unwrap_or_default())
                .join(".cache/svc-npm/node_modules/.bin/ccusage")
        });
    if !bin.exists() {
        println!(
            "ccusage: not installed at {} (npm install ccusage@20.0.24); skipped",
            bin.display()
        );
        return;
    }
    let home = TempDir::new();
    let projects = home.0.join(".claude/projects");
    std::fs::create_dir_all(&projects).unwrap();
    // Hard links, not symlinks: ccusage does not follow a linked project directory (it
    // then reads nothing and looks very fast).
    for user in std::fs::read_dir(root).unwrap() {
        let user = user.unwrap();
        let project = projects.join(user.file_name());
        std::fs::create_dir_all(&project).unwrap();
        for file in std::fs::read_dir(user.path()).unwrap() {
            let file = file.unwrap();
            std::fs::hard_link(file.path(), project.join(file.file_name())).unwrap();
        }
    }
    let t = Instant::now();
    let out = std::process::Command::new(&bin)
        .args(["session", "--json", "--offline"])
        .env("HOME", &home.0)
        .env("CLAUDE_CONFIG_DIR", home.0.join(".claude"))
        .output()
        .unwrap();
    let secs = t.elapsed().as_secs_f64();
    let sessions = serde_json::from_slice::<serde_json::Value>(&out.stdout)
        .ok()
        .and_then(|v| v["session"].as_array().map(Vec::len))
        .unwrap_or(0);
    println!(
        "ccusage session --json --offline: {:.2} s, {:.1} MB/s ({}; {sessions} sessions reported, tokens and costs only)",
        secs,
        bytes as f64 / 1e6 / secs,
        out.status,
    );
}
