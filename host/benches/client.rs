//! `svc` client benchmarks against a real release `svc-server` on loopback:
//!
//! 1. `svc pull` of 20 tables totalling about 1 GB: MB/s and the client's peak RSS (memory
//!    must not follow file size);
//! 2. `svc snapshot create` of 5,000,000 rows: rows/s end to end (scan, Arrow stream,
//!    parquet file);
//! 3. process start to first byte of `svc catalog --json` against a warm server (target
//!    ≤ 30 ms).
//!
//! `cargo bench -p svc-host --bench client` (it builds the release `svc` first).

mod common;

use std::fs::File;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use svc_plugin_api::arrow::array::{ArrayRef, Float64Array, Int64Array, StringArray};
use svc_plugin_api::arrow::datatypes::{DataType, Field, Schema};
use svc_plugin_api::datafusion::parquet::arrow::ArrowWriter;
use svc_plugin_api::datafusion::parquet::basic::Compression;
use svc_plugin_api::datafusion::parquet::file::properties::WriterProperties;
use svc_plugin_api::RecordBatch;

use common::{percentile, Server, SERVER};

/// Writes `rows` rows of hard-to-compress data (so 20 files make about 1 GB).
fn write_table(path: &Path, rows: i64, seed: i64) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("label", DataType::Utf8, false),
        Field::new("x", DataType::Float64, false),
    ]));
    let props = WriterProperties::builder()
        .set_compression(Compression::UNCOMPRESSED)
        .build();
    let mut w =
        ArrowWriter::try_new(File::create(path).unwrap(), schema.clone(), Some(props)).unwrap();
    let chunk = 500_000;
    for start in (0..rows).step_by(chunk as usize) {
        let ids = start..(start + chunk).min(rows);
        let mix = |i: i64| (i ^ seed).wrapping_mul(6_364_136_223_846_793_005);
        let cols: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from_iter_values(ids.clone())),
            Arc::new(StringArray::from_iter_values(
                ids.clone().map(|i| format!("{:016x}", mix(i))),
            )),
            Arc::new(Float64Array::from_iter_values(
                ids.map(|i| mix(i) as f64 / 3.0),
            )),
        ];
        w.write(&RecordBatch::try_new(schema.clone(), cols).unwrap())
            .unwrap();
    }
    w.close().unwrap();
}

/// Runs `svc` and returns (seconds, peak RSS in KiB). The peak comes from GNU time
/// (`/usr/bin/time -f %M`, Debian package `time`); without it the RSS reads 0.
fn run_measured(svc: &Path, args: &[&str], env: &[(&str, &str)]) -> (f64, u64) {
    let started = Instant::now();
    let out = if Path::new("/usr/bin/time").exists() {
        Command::new("/usr/bin/time")
            .arg("-f")
            .arg("%M")
            .arg(svc)
            .args(args)
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .output()
            .unwrap()
    } else {
        Command::new(svc)
            .args(args)
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .output()
            .unwrap()
    };
    let secs = started.elapsed().as_secs_f64();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rss = String::from_utf8_lossy(&out.stderr)
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or(0);
    (secs, rss)
}

fn main() {
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args([
            "build",
            "--release",
            "--quiet",
            // With the host in the same run, shared dependencies resolve to the server's
            // features and are reused instead of built a second time for the client alone.
            "-p",
            "svc-host",
            "-p",
            "svc-cli",
            "--bin",
            "svc",
        ])
        .status()
        .unwrap();
    assert!(status.success(), "building svc");
    let svc = Path::new(SERVER).with_file_name("svc");

    let dir = std::env::temp_dir().join(format!("svc-bench-client-{}", std::process::id()));
    let data = dir.join("data");
    let mut total = 0u64;
    for i in 0..20 {
        let path = data.join(format!("extracts/local/data/t{i:02}.parquet"));
        write_table(&path, 1_250_000, i);
        total += std::fs::metadata(&path).unwrap().len();
    }
    write_table(&data.join("extracts/local/data/big.parquet"), 5_000_000, 99);
    let s = Server::start_with(
        &data,
        &[
            ("SCHEDULER_ENABLED", "false"),
            ("SVC_SKIP_CACHE_WARMUP", "1"),
        ],
    );
    let token = s.cli(&["tokens", "create", "--email", "admin@localhost"]);
    let http = reqwest::blocking::Client::new();
    for i in 0..20 {
        http.post(format!("{}/api/admin/register-table", s.base))
            .bearer_auth(&token)
            .json(&serde_json::json!({"id": format!("t{i:02}"), "source_type": "local"}))
            .send()
            .unwrap();
    }
    let ws = dir.join("ws");
    let config = dir.join("config");
    let env = [
        ("SVC_SERVER", s.base.as_str()),
        ("SVC_TOKEN", token.as_str()),
        ("SVC_CONFIG_DIR", config.to_str().unwrap()),
        ("SVC_WORKSPACE", ws.to_str().unwrap()),
    ];
    println!("svc client benchmarks (release svc and svc-server on loopback, 2 cores shared)");

    let (secs, rss) = run_measured(&svc, &["pull", "--json"], &env);
    println!(
        "  pull of 20 tables, {:.0} MB: {:.1} s, {:.0} MB/s, client peak RSS {} MiB",
        total as f64 / 1e6,
        secs,
        total as f64 / 1e6 / secs,
        rss / 1024
    );
    let pulled: u64 = std::fs::read_dir(ws.join("tables"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "parquet"))
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum();
    assert_eq!(pulled, total, "the pull wrote every byte of every table");
    let (secs, _) = run_measured(&svc, &["pull", "--json"], &env);
    println!("  second pull (nothing changed): {:.0} ms", secs * 1000.0);

    // Registered only now, so the pulls above move exactly the 20 tables.
    http.post(format!("{}/api/admin/register-table", s.base))
        .bearer_auth(&token)
        .json(&serde_json::json!({"id": "big", "source_type": "local"}))
        .send()
        .unwrap();
    let (secs, rss) = run_measured(
        &svc,
        &["snapshot", "create", "big", "--as", "big_snap", "--force"],
        &env,
    );
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(ws.join("snapshots/big_snap.meta.json")).unwrap())
            .unwrap();
    assert_eq!(meta["rows"], 5_000_000, "{meta}");
    println!(
        "  snapshot create of 5,000,000 rows: {:.1} s, {:.0} rows/s, client peak RSS {} MiB",
        secs,
        5e6 / secs,
        rss / 1024
    );

    // Start to first byte of `svc catalog --json`: spawn, then time until stdout yields.
    let mut samples = Vec::new();
    for _ in 0..30 {
        let started = Instant::now();
        let mut child = Command::new(&svc)
            .args(["catalog", "--json"])
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = [0u8; 1];
        use std::io::Read;
        child
            .stdout
            .as_mut()
            .unwrap()
            .read_exact(&mut first)
            .unwrap();
        samples.push(started.elapsed().as_secs_f64() * 1000.0);
        let _ = child.wait();
    }
    samples.sort_by(f64::total_cmp);
    println!(
        "  svc catalog --json, process start to first byte: p50 {:.1} ms, p95 {:.1} ms (target <= 30 ms)",
        percentile(&samples, 0.5),
        percentile(&samples, 0.95)
    );
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
}
