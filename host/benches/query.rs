//! Query benchmarks against a real release `svc-server` on loopback:
//!
//! 1. three queries over generated 1- and 10-million-row parquet files (filtered count,
//!    group-by aggregate, top-N sort; `SVC_BENCH_ROWS` sets the sizes), through
//!    `POST /api/query` with `format=arrow`, next to DuckDB (the PyPI package) on the same
//!    file in the same run, runs alternating: medians and the svc/DuckDB ratio;
//! 2. result encoding: 100,000 rows × 10 columns as json, arrow and csv — the server's
//!    encoders alone on the batches the server reads (MB/s of output and the speed ratio to
//!    json), and end to end through HTTP;
//! 3. aggregates over 1,000,000 `svc_audit` rows, which the store answers: an admin's and a
//!    non-admin's (1% of the rows are theirs) `count(*)`, a `GROUP BY`, `min`/`max`/`sum`
//!    (p50, min, max of 30).
//!
//! `cargo bench -p svc-host --bench query`; `SVC_BENCH_PARTS=sql,encode,internal` picks parts.
//! DuckDB runs from a virtualenv at `$SVC_BENCH_VENV` (default `~/.cache/svc-venv`, the one
//! the tests use for bqemulator), created with `duckdb` on first use.

mod common;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{percentile, Server};
use reqwest::blocking::Client;
use serde_json::json;
use svc_plugin_api::arrow::array::{ArrayRef, Float64Array, Int64Array, StringArray};
use svc_plugin_api::arrow::datatypes::{DataType, Field, Schema};
use svc_plugin_api::datafusion::parquet::arrow::ArrowWriter;
use svc_plugin_api::datafusion::prelude::SessionContext;
use svc_plugin_api::RecordBatch;
use svc_query::format::Format;
use svc_store::audit::AuditRecord;

const QUERIES: [(&str, &str); 3] = [
    (
        "filtered count",
        "SELECT count(*) AS n FROM facts WHERE amount > 500 AND category = 'cat-07'",
    ),
    (
        "group-by aggregate",
        "SELECT category, count(*) AS n, sum(amount) AS total, avg(quantity) AS q FROM facts GROUP BY category ORDER BY category",
    ),
    (
        "top-N sort",
        "SELECT id, amount FROM facts ORDER BY amount DESC, id LIMIT 100",
    ),
];

const RUNS: usize = 5;
/// Runs of each engine per query in the DuckDB comparison.
const COMPARE_RUNS: usize = 15;

fn write_facts(path: &Path, rows: i64) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("category", DataType::Utf8, false),
        Field::new("amount", DataType::Float64, false),
        Field::new("quantity", DataType::Int64, false),
    ]));
    let mut w = ArrowWriter::try_new(File::create(path).unwrap(), schema.clone(), None).unwrap();
    let chunk = 1_000_000i64;
    for start in (0..rows).step_by(chunk as usize) {
        let ids = start..(start + chunk).min(rows);
        // A cheap, deterministic scramble so sorts and filters have work to do.
        let amount = |i: i64| ((i.wrapping_mul(2_654_435_761) % 100_003) as f64) / 100.0;
        let cols: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from_iter_values(ids.clone())),
            Arc::new(StringArray::from_iter_values(
                ids.clone().map(|i| format!("cat-{:02}", (i * 7919) % 100)),
            )),
            Arc::new(Float64Array::from_iter_values(ids.clone().map(amount))),
            Arc::new(Int64Array::from_iter_values(ids.map(|i| i % 50))),
        ];
        w.write(&RecordBatch::try_new(schema.clone(), cols).unwrap())
            .unwrap();
    }
    w.close().unwrap();
}

fn write_wide(path: &Path, rows: i64) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut fields = Vec::new();
    let mut cols: Vec<ArrayRef> = Vec::new();
    for c in 0..5 {
        fields.push(Field::new(format!("n{c}"), DataType::Float64, false));
        cols.push(Arc::new(Float64Array::from_iter_values(
            (0..rows).map(|i| (i * (c + 3)) as f64 / 7.0),
        )));
        fields.push(Field::new(format!("s{c}"), DataType::Utf8, false));
        cols.push(Arc::new(StringArray::from_iter_values(
            (0..rows).map(|i| format!("value-{c}-{i:08}")),
        )));
    }
    let schema = Arc::new(Schema::new(fields));
    let mut w = ArrowWriter::try_new(File::create(path).unwrap(), schema.clone(), None).unwrap();
    w.write(&RecordBatch::try_new(schema, cols).unwrap())
        .unwrap();
    w.close().unwrap();
}

/// Seconds for one query through HTTP, reading the whole body; returns (seconds, bytes).
fn time_query(
    http: &Client,
    s: &Server,
    token: &str,
    sql: &str,
    format: &str,
    limit: u64,
) -> (f64, usize) {
    let t = Instant::now();
    let r = http
        .post(format!("{}/api/query", s.base))
        .bearer_auth(token)
        .json(&json!({"sql": sql, "format": format, "limit": limit}))
        .send()
        .unwrap();
    assert!(r.status().is_success(), "{}", r.text().unwrap());
    let bytes = r.bytes().unwrap().len();
    (t.elapsed().as_secs_f64(), bytes)
}

/// The server's result encoders on the batches `SELECT * FROM wide` yields (read the way the
/// server reads parquet: DataFusion, string view columns, 8,192-row batches).
fn encode_in_process(path: &Path) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let batches = rt.block_on(async {
        SessionContext::new()
            .read_parquet(path.to_str().unwrap(), Default::default())
            .await
            .unwrap()
            .collect()
            .await
            .unwrap()
    });
    let schema = batches[0].schema();
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    let mut json_secs = 0.0;
    for format in [Format::Json, Format::Arrow, Format::Csv] {
        let mut times = Vec::new();
        let mut bytes = 0;
        for _ in 0..=RUNS {
            let t = Instant::now();
            let mut encoder = format.encoder(&schema).unwrap();
            let mut n = encoder.begin().unwrap().len();
            for b in &batches {
                n += encoder.batch(b).unwrap().len();
            }
            n += encoder.finish(false).unwrap().len();
            times.push(t.elapsed().as_secs_f64());
            bytes = n;
        }
        times.remove(0);
        let secs = median(times);
        if format == Format::Json {
            json_secs = secs;
        }
        println!(
            "encoder alone, {rows} rows x {} columns as {}: {:.1} ms, {:.1} MB, {:.0} MB/s, {:.2}x the speed of json (target arrow ≥ 5x)",
            schema.fields().len(),
            format.name(),
            secs * 1e3,
            bytes as f64 / 1e6,
            bytes as f64 / 1e6 / secs,
            json_secs / secs
        );
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    percentile(&v, 0.5)
}

fn python() -> Option<PathBuf> {
    let venv = std::env::var_os("SVC_BENCH_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/svc-venv")
        });
    let py = venv.join("bin/python");
    let has_duckdb = |py: &Path| {
        Command::new(py)
            .args(["-c", "import duckdb"])
            .status()
            .is_ok_and(|s| s.success())
    };
    if has_duckdb(&py) {
        return Some(py);
    }
    eprintln!("creating {} with duckdb", venv.display());
    let ok = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .status()
        .is_ok_and(|s| s.success())
        && Command::new(&py)
            .args(["-m", "pip", "install", "-q", "duckdb", "pyarrow"])
            .status()
            .is_ok_and(|s| s.success());
    (ok && has_duckdb(&py)).then_some(py)
}

/// DuckDB in a process of its own over the same file, timing one query per request, so its
/// runs can alternate with svc's and both see the same machine.
struct DuckDb {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    stdout: std::io::BufReader<std::process::ChildStdout>,
}

impl DuckDb {
    fn start(py: &Path, file: &Path) -> Self {
        let script = format!(
            r#"
import duckdb, json, sys, time
con = duckdb.connect()
con.execute("CREATE VIEW facts AS SELECT * FROM read_parquet('{}')")
for line in sys.stdin:
    sql = json.loads(line)
    t = time.perf_counter()
    con.sql(sql).to_arrow_table()
    print(time.perf_counter() - t, flush=True)
"#,
            file.display()
        );
        let mut child = Command::new(py)
            .args(["-c", &script])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        Self {
            child,
            stdin,
            stdout,
        }
    }

    /// Seconds DuckDB took for `sql`, result materialized as Arrow.
    fn time(&mut self, sql: &str) -> f64 {
        use std::io::{BufRead, Write};
        writeln!(self.stdin, "{}", serde_json::to_string(sql).unwrap()).unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        line.trim()
            .parse()
            .unwrap_or_else(|_| panic!("DuckDB failed on {sql}"))
    }
}

impl Drop for DuckDb {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn seed_audit(dir: &Path, rows: usize, share: usize) {
    let (rt, store, user) = common::store_with_analyst(dir);
    rt.block_on(async {
        let mut batch = Vec::with_capacity(10_000);
        for i in 0..rows {
            batch.push(AuditRecord {
                id: format!("bench-{i:08}"),
                timestamp: svc_core::clock::now(),
                user_id: Some(if i % share == 0 {
                    user.id.clone()
                } else {
                    format!("other-{}", i % 997)
                }),
                action: [
                    "catalog.sample",
                    "query.local",
                    "catalog.list",
                    "auth.login",
                ][i % 4]
                    .into(),
                resource: Some(format!("table:t{}", i % 100)),
                params: Some(json!({"n": 5, "rows_returned": 5})),
                params_before: None,
                client_ip: Some("127.0.0.1".into()),
                client_kind: Some("cli".into()),
                correlation_id: None,
                result: "success".into(),
                duration_ms: Some(1),
            });
            if batch.len() == 10_000 {
                store.insert_audit_batch(&batch).await.unwrap();
                batch.clear();
            }
        }
        store.insert_audit_batch(&batch).await.unwrap();
        store.close().await;
    });
}

/// Whether `SVC_BENCH_PARTS` (comma-separated: `sql`, `encode`, `internal`; default all)
/// asks for `part`.
fn wanted(part: &str) -> bool {
    std::env::var("SVC_BENCH_PARTS")
        .map_or(true, |parts| parts.split(',').any(|p| p.trim() == part))
}

/// Row counts of the facts tables compared with DuckDB: `SVC_BENCH_ROWS`, comma-separated
/// (default `1000000,10000000`, the issue's two sizes).
fn row_counts() -> Vec<i64> {
    std::env::var("SVC_BENCH_ROWS")
        .unwrap_or_else(|_| "1000000,10000000".into())
        .split(',')
        .map(|n| {
            n.trim()
                .parse()
                .expect("SVC_BENCH_ROWS: comma-separated row counts")
        })
        .collect()
}

/// A row count as the figures print it: `10M`, or the number when not whole millions.
fn short_count(rows: i64) -> String {
    match rows {
        r if r % 1_000_000 == 0 => format!("{}M", r / 1_000_000),
        r => r.to_string(),
    }
}

/// The table (and file stem) holding `rows` generated facts, e.g. `facts_10m`.
fn facts_table(rows: i64) -> String {
    format!("facts_{}", short_count(rows).to_lowercase())
}

/// The three queries over `rows` facts through svc and through DuckDB on the same file,
/// runs alternating: medians and the ratio.
fn compare_with_duckdb(
    http: &Client,
    s: &Server,
    admin: &str,
    py: Option<&Path>,
    data: &Path,
    rows: i64,
) {
    let table = facts_table(rows);
    let mut duckdb = py.map(|py| DuckDb::start(py, &data.join(format!("{table}.parquet"))));
    let label = format!("{} rows", short_count(rows));
    for (name, sql) in QUERIES {
        // DuckDB's view is named `facts`; svc's table is named by its size.
        let ours_sql = sql.replace("FROM facts", &format!("FROM {table}"));
        time_query(http, s, admin, &ours_sql, "arrow", 1000);
        let mut ours = Vec::new();
        let mut theirs = Vec::new();
        if let Some(d) = duckdb.as_mut() {
            d.time(sql);
        }
        for _ in 0..COMPARE_RUNS {
            ours.push(time_query(http, s, admin, &ours_sql, "arrow", 1000).0);
            if let Some(d) = duckdb.as_mut() {
                theirs.push(d.time(sql));
            }
        }
        let ours = median(ours);
        if theirs.is_empty() {
            println!(
                "{label}, {name}: svc {:.1} ms; DuckDB unavailable",
                ours * 1e3
            );
        } else {
            let theirs = median(theirs);
            println!(
                "{label}, {name}: svc {:.1} ms, DuckDB {:.1} ms (medians of {COMPARE_RUNS} alternating runs), ratio {:.2}x (target ≤ 1.0x, parity)",
                ours * 1e3,
                theirs * 1e3,
                ours / theirs
            );
        }
    }
}

fn main() {
    let dir = std::env::temp_dir().join(format!("svc-bench-query-{}", std::process::id()));
    let data = dir.join("extracts/local/data");
    let http = Client::builder()
        .timeout(Duration::from_secs(600))
        .build()
        .unwrap();

    if !wanted("sql") && !wanted("encode") {
        internal_aggregates(&dir.join("internal"), &http);
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    let t = Instant::now();
    let sizes = if wanted("sql") {
        row_counts()
    } else {
        Vec::new()
    };
    for &rows in &sizes {
        write_facts(&data.join(format!("{}.parquet", facts_table(rows))), rows);
    }
    write_wide(&data.join("wide.parquet"), 100_000);
    eprintln!("wrote the data in {:.1}s", t.elapsed().as_secs_f64());

    let s = Server::start(&dir);
    let admin = s.cli(&["tokens", "create", "--email", "admin@localhost"]);
    let ids = sizes.iter().map(|&rows| facts_table(rows));
    for id in ids.chain(["wide".to_owned()]) {
        let r = http
            .post(format!("{}/api/admin/register-table", s.base))
            .bearer_auth(&admin)
            .json(&json!({"id": id, "source_type": "local"}))
            .send()
            .unwrap();
        assert!(r.status().is_success());
    }

    // What every query pays before it reads a row: auth, parsing, planning, audit, HTTP.
    let mut fixed: Vec<f64> = (0..=COMPARE_RUNS)
        .map(|_| time_query(&http, &s, &admin, "SELECT 1", "arrow", 1000).0)
        .collect();
    fixed.remove(0);
    println!(
        "per-request floor (SELECT 1 through HTTP): median {:.2} ms",
        median(fixed) * 1e3
    );

    // 1. svc against DuckDB, runs alternating so drift on the machine hits both alike.
    let py = if sizes.is_empty() { None } else { python() };
    for &rows in &sizes {
        compare_with_duckdb(&http, &s, &admin, py.as_deref(), &data, rows);
    }

    // 2. Encoding: the encoders alone, then end to end.
    if wanted("encode") {
        encode_in_process(&data.join("wide.parquet"));
    }
    let sql = "SELECT * FROM wide";
    let mut json_secs = 0.0;
    for format in ["json", "arrow", "csv"]
        .into_iter()
        .filter(|_| wanted("encode"))
    {
        time_query(&http, &s, &admin, sql, format, 100_000);
        let runs: Vec<(f64, usize)> = (0..RUNS)
            .map(|_| time_query(&http, &s, &admin, sql, format, 100_000))
            .collect();
        let secs = median(runs.iter().map(|r| r.0).collect());
        let bytes = runs[0].1;
        if format == "json" {
            json_secs = secs;
        }
        println!(
            "end to end, 100,000 rows x 10 columns as {format}: {:.1} ms, {:.1} MB, {:.0} MB/s, {:.2}x the speed of json (target arrow ≥ 5x)",
            secs * 1e3,
            bytes as f64 / 1e6,
            bytes as f64 / 1e6 / secs,
            json_secs / secs
        );
    }
    drop(s);

    if wanted("internal") {
        internal_aggregates(&dir.join("internal"), &http);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The count with a target.
const COUNT: &str = "SELECT count(*) AS n FROM svc_audit";

/// Part 3: aggregates over 1,000,000 audit rows, answered by the store (admin and a
/// non-admin whose row filter admits 1% of them).
fn internal_aggregates(dir: &Path, http: &Client) {
    let t = Instant::now();
    seed_audit(dir, 1_000_000, 100);
    eprintln!(
        "seeded 1,000,000 audit rows in {:.1}s",
        t.elapsed().as_secs_f64()
    );
    let s = Server::start(dir);
    // The seeded analyst means no first administrator was made at start.
    s.cli(&["users", "create", "--email", "admin@localhost", "--admin"]);
    let admin = s.cli(&["tokens", "create", "--email", "admin@localhost"]);
    let analyst = s.cli(&["tokens", "create", "--email", "analyst@example.com"]);
    for (who, token, sql) in [
        ("admin", &admin, COUNT),
        ("non-admin", &analyst, COUNT),
        (
            "admin",
            &admin,
            "SELECT action, count(*) AS n FROM svc_audit GROUP BY action ORDER BY n DESC",
        ),
        (
            "admin",
            &admin,
            "SELECT min(timestamp), max(timestamp), sum(duration_ms) FROM svc_audit",
        ),
    ] {
        let mut times = Vec::new();
        let mut first = serde_json::Value::Null;
        for _ in 0..30 {
            let t = Instant::now();
            let r = http
                .post(format!("{}/api/query", s.base))
                .bearer_auth(token)
                .json(&json!({ "sql": sql }))
                .send()
                .unwrap();
            let body: serde_json::Value = r.json().unwrap();
            times.push(t.elapsed().as_secs_f64() * 1e3);
            first = body["rows"][0].clone();
        }
        times.sort_by(|a, b| a.partial_cmp(b).unwrap());
        println!(
            "svc_audit, 1,000,000 rows, {who}: {sql} → {first}: p50 {:.1} ms, min {:.1}, max {:.1}{}",
            percentile(&times, 0.5),
            times[0],
            times[times.len() - 1],
            if sql == COUNT { " (target ≤ 50 ms)" } else { "" },
        );
    }
}
