//! Telemetry pipeline throughput: a generated corpus of session files on disk → events,
//! summaries and rollups committed. Prints figures; asserts nothing about speed.
//!
//!   cargo bench -p svc-telemetry --bench pipeline
//!
//! `SVC_BENCH_CORPUS_MB` (default 766) and `SVC_BENCH_FILES` (default 200) size the corpus.
//! `SVC_BENCH_ROUNDS` (default 3) cold runs, each on a fresh SQLite store, alternate with
//! runs of `ccusage` (`SVC_BENCH_CCUSAGE`, default `~/.cache/svc-npm/node_modules/.bin/ccusage`)
//! over the same files laid out as `~/.claude/projects`; the median, min and max of each and
//! the machine's steal during them are printed. Install ccusage with
//! `npm install ccusage@20.0.24` in `~/.cache/svc-npm` (20.0.26 lacks its linux-x64 native
//! package, so it installs but cannot run). Each round also measures the floors of
//! [`floor`] over the same files: reading and hashing them, validating every line as JSON
//! (serde_json), and the same validation by simdjson where Debian's `libsimdjson-dev` is
//! installed — what any pipeline that must count malformed lines could reach here. Then the
//! last store measures an unchanged run and one changed file; with `SVC_TEST_DATABASE_URL`
//! set, one cold run on PostgreSQL follows.
//!
//! The bench uses the server's allocator (mimalloc), so its figures are the server's.

use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use svc_store::testing::TempDir;
use svc_store::Store;
use svc_telemetry::corpus::{self, Rng};
use svc_telemetry::files::SessionFiles;
use svc_telemetry::{EventSegments, Pipeline, Trigger};

#[path = "../../benches/common/stats.rs"]
mod stats;

mod floor;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const USERS: u64 = 10;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn peak_rss_mib() -> f64 {
    stats::status_mib("self", "VmHWM:")
}

/// Starts the peak RSS afresh (Linux's `clear_refs` 5), so a peak read after a cold run is
/// that run's, not the floors' that ran before it.
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// Writes the corpus under `root/u<n>/`; returns (bytes, expected events, malformed lines).
fn generate(root: &Path, files: u64, target_bytes: u64) -> (u64, u64, u64) {
    let mut rng = Rng::new(20_261_124);
    let mut total = corpus::Generated::default();
    for i in 0..files {
        let dir = root.join(format!("u{}", i % USERS));
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

/// Hard-links the corpus's user directories into `to`, the n-th under `names[n]`.
fn link_corpus(corpus: &Path, to: &Path, names: &[String]) {
    for (u, name) in names.iter().enumerate() {
        let (from, into) = (corpus.join(format!("u{u}")), to.join(name));
        std::fs::create_dir_all(&into).unwrap();
        for file in std::fs::read_dir(&from).unwrap() {
            let file = file.unwrap();
            std::fs::hard_link(file.path(), into.join(file.file_name())).unwrap();
        }
    }
}

/// A fresh store at `url` whose users own the corpus under `data`.
async fn fresh(url: &str, data: &Path, corpus: &Path) -> Arc<Pipeline> {
    let (store, users) = store_with_users(url).await;
    link_corpus(corpus, &data.join("user_sessions"), &users);
    Pipeline::new(store, SessionFiles::new(data), EventSegments::new(data))
}

/// One cold run over the whole corpus; prints its figures and returns its MB/s.
async fn cold_run(label: &str, pipeline: &Pipeline, bytes: u64) -> f64 {
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
    mb / secs
}

/// An unchanged run, then one changed file, on a store that has processed the corpus.
async fn incremental(label: &str, pipeline: &Pipeline, data: &Path) {
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

/// `median (min–max)` of some figures.
fn shown(v: &[f64]) -> String {
    if v.is_empty() {
        return "—".into();
    }
    let (median, min, max) = stats::spread(v);
    format!("{median:.1} ({min:.1}–{max:.1})")
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let files = env_u64("SVC_BENCH_FILES", 200);
    let target = env_u64("SVC_BENCH_CORPUS_MB", 766) * 1_000_000;
    let rounds = env_u64("SVC_BENCH_ROUNDS", 3).max(1);
    let tmp = TempDir::new();
    let corpus_dir = tmp.0.join("corpus");
    let t = Instant::now();
    let (bytes, events, malformed) = generate(&corpus_dir, files, target);
    println!(
        "corpus: {files} files, {:.1} MB, {events} events and {malformed} malformed lines expected (generated in {:.1} s)",
        bytes as f64 / 1e6,
        t.elapsed().as_secs_f64()
    );
    println!("peak RSS before processing: {:.0} MiB", peak_rss_mib());
    let projects = claude_projects(&corpus_dir);
    let files = floor::files(&corpus_dir);
    let simdjson = floor::build_simdjson(&tmp.0)
        .map_err(|why| println!("simdjson floor skipped: {why}"))
        .ok();
    let (mut svc, mut cc, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    let (mut reading, mut validating, mut simd) = (Vec::new(), Vec::new(), Vec::new());
    let (mut simd_alone, mut simd_ratios) = (Vec::new(), Vec::new());
    let (mut last, mut peak) = (None, 0.0f64);
    let steal_before = stats::cpu_ticks();
    for round in 1..=rounds {
        let data = tmp.0.join(format!("data-{round}"));
        let url = svc_store::default_sqlite_url(&data);
        let pipeline = rt.block_on(fresh(&url, &data, &corpus_dir));
        reset_peak_rss();
        let rate = rt.block_on(cold_run(
            &format!("sqlite, round {round}"),
            &pipeline,
            bytes,
        ));
        svc.push(rate);
        peak = peak.max(peak_rss_mib());
        let theirs = ccusage(&projects, bytes);
        if let Some(theirs) = theirs {
            cc.push(theirs);
            ratios.push(rate / theirs);
        }
        reading.push(floor::reading(&files));
        validating.push(floor::validating(&files));
        let (write_secs, written) = floor::writing(&data, &tmp.0.join(format!("floor-{round}")));
        println!(
            "every event ({written}) written once as one segment, one thread: {:.0} ms",
            write_secs * 1e3
        );
        if let Some((rate, bad)) = simdjson.as_deref().and_then(|b| floor::simdjson(b, &files)) {
            println!("simdjson, every line validated: {rate:.1} MB/s ({bad} malformed lines)");
            simd.push(rate);
            // The least CPU any pipeline spends: validate every line (simdjson, on every
            // core) and write the events once. Spread over the cores with nothing idle, that
            // is its shortest run; ccusage's time over it is the best ratio it could show.
            let cores = floor::threads() as f64;
            let least_cpu = bytes as f64 / 1e6 / rate * cores + write_secs;
            if let Some(theirs) = theirs {
                simd_alone.push(rate / theirs);
                simd_ratios.push(bytes as f64 / 1e6 / theirs / (least_cpu / cores));
            }
        }
        last = Some((pipeline, data));
    }
    let steal = stats::steal_since(steal_before);
    println!("peak RSS of the cold runs: {peak:.0} MiB (target ≤ 256 MiB, flat in corpus size)");
    println!(
        "svc, {rounds} cold runs (SQLite): {} MB/s; ccusage: {} MB/s; svc ÷ ccusage per round: {} (target ≥ 5); steal {steal:.1}%",
        shown(&svc),
        shown(&cc),
        shown(&ratios)
    );
    println!(
        "floors on {} threads, same rounds: reading + hashing {} MB/s; every line validated by serde_json {} MB/s, by simdjson {} MB/s, {}× ccusage per round; the best any pipeline could show against ccusage (simdjson's validation and one write of the events, nothing else), per round: {}× (the target needs 5)",
        floor::threads(),
        shown(&reading),
        shown(&validating),
        shown(&simd),
        shown(&simd_alone),
        shown(&simd_ratios)
    );
    if let Some((pipeline, data)) = last {
        rt.block_on(incremental("sqlite", &pipeline, &data));
    }
    if let Some(url) = rt.block_on(svc_store::testing::postgres_url()) {
        let data = tmp.0.join("data-postgres");
        let pipeline = rt.block_on(fresh(&url, &data, &corpus_dir));
        rt.block_on(cold_run("postgres", &pipeline, bytes));
        rt.block_on(incremental("postgres", &pipeline, &data));
    }
}

/// The corpus laid out as `~/.claude/projects` under a home of its own; returns the home.
/// Hard links, not symlinks: ccusage does not follow a linked project directory (it then
/// reads nothing and looks very fast).
fn claude_projects(corpus: &Path) -> TempDir {
    let home = TempDir::new();
    let projects = home.0.join(".claude/projects");
    let names: Vec<String> = (0..USERS).map(|u| format!("project-{u}")).collect();
    link_corpus(corpus, &projects, &names);
    home
}

/// Times `ccusage session --json --offline` over the corpus in `home`; its MB/s, or None
/// when it is not installed.
fn ccusage(home: &TempDir, bytes: u64) -> Option<f64> {
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
        return None;
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
    let rate = bytes as f64 / 1e6 / secs;
    println!(
        "ccusage session --json --offline: {secs:.2} s, {rate:.1} MB/s ({}; {sessions} sessions reported, tokens and costs only)",
        out.status,
    );
    out.status.success().then_some(rate)
}
