//! Integration source benchmarks against the PostgreSQL on this machine and a real release
//! `svc-server` on loopback:
//!
//! 1. PostgreSQL → parquet, a `SVC_BENCH_ROWS`-row (default 10,000,000) 16-column table:
//!    rows/s and MB/s of svc's sync, beside ConnectorX loading the same table to Arrow
//!    (Python, from `$SVC_CX_VENV`, default `~/.cache/svc-cx-venv`; skipped when missing)
//!    and `COPY … TO STDOUT (FORMAT binary)` into /dev/null by psql (the database's own
//!    ceiling); two rounds, interleaved. Peak RSS of the server for a table a tenth the size
//!    and for the whole one (each on a fresh server), to show it does not grow with the table.
//! 2. Incremental syncs of the same table keyed by `id` with `updated_at` as the cursor: no
//!    change, then 1% of the rows changed.
//! 3. MariaDB/MySQL → parquet, a `SVC_BENCH_MYSQL_ROWS`-row (default 1,000,000) table of the
//!    same 16 columns from `$SVC_BENCH_MYSQL` (default `mysql://root@127.0.0.1:3306/test`;
//!    skipped when no server answers): rows/s of svc's sync beside the `mysql` client
//!    streaming the same rows to /dev/null and ConnectorX loading them to Arrow.
//!
//! `cargo bench -p svc-host --bench integration` (`SVC_BENCH_PART=incremental` or `mariadb`:
//! part 2 or 3 only).
//! The database comes from
//! `$SVC_BENCH_PG` (default `postgres://postgres@127.0.0.1:5432/test`); the bench creates and
//! drops its own database in it.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use reqwest::blocking::Client;
use serde_json::{json, Value};

use common::{children_cpu_seconds, named_cpu_seconds, Server};
use svc_store::testing::TempDir;

const COLUMNS: &str = "id int8 PRIMARY KEY, a int4, b int4, c int8, d float8, e float8, f float4, \
     g bool, h text, i text, j date, k timestamp, updated_at timestamptz, m numeric(12,2), \
     n int2, o varchar(10)";

const FILL: &str = "SELECT g, (g % 1000)::int4, (g * 7 % 100000)::int4, g * 31, g * 0.5, \
     sqrt(g::float8), (g % 977)::float4, g % 2 = 0, 'customer-' || (g % 5000), \
     md5(g::text), DATE '2020-01-01' + (g % 2000)::int4, \
     TIMESTAMP '2020-01-01' + g * INTERVAL '1 second', \
     TIMESTAMPTZ '2020-01-01 00:00:00+00' + g * INTERVAL '1 second', \
     (g % 100000) / 100.0, (g % 30000)::int2, 'c' || (g % 97) \
     FROM generate_series(1, $N) g";

fn psql(url: &str, sql: &str) {
    let out = Command::new("psql")
        .args([url, "-v", "ON_ERROR_STOP=1", "-q", "-c", sql])
        .output()
        .expect("psql");
    assert!(
        out.status.success(),
        "{sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

struct Database {
    admin: String,
    name: String,
    url: String,
}

impl Database {
    fn create(admin: &str) -> Self {
        let name = format!("svc_bench_int_{}", std::process::id());
        psql(admin, &format!("DROP DATABASE IF EXISTS {name}"));
        psql(admin, &format!("CREATE DATABASE {name}"));
        let url = format!("{}/{name}", admin.rsplit_once('/').unwrap().0);
        Self {
            admin: admin.to_owned(),
            name,
            url,
        }
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        psql(
            &self.admin,
            &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
        );
    }
}

fn main() {
    let part = std::env::var("SVC_BENCH_PART").unwrap_or_default();
    if part == "mariadb" {
        return mariadb();
    }
    let admin_url = std::env::var("SVC_BENCH_PG")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let rows: u64 = std::env::var("SVC_BENCH_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000_000);
    let db = Database::create(&admin_url);
    let started = Instant::now();
    let tables: &[(&str, u64)] = if part == "incremental" {
        &[("big", rows)]
    } else {
        &[("big", rows), ("tenth", rows / 10)]
    };
    for &(table, n) in tables {
        psql(&db.url, &format!("CREATE TABLE {table} ({COLUMNS})"));
        psql(
            &db.url,
            &format!("INSERT INTO {table} {}", FILL.replace("$N", &n.to_string())),
        );
        // A cursor column is indexed at any source that syncs incrementally.
        psql(&db.url, &format!("CREATE INDEX ON {table} (updated_at)"));
        psql(&db.url, &format!("VACUUM ANALYZE {table}"));
    }
    println!(
        "source: {rows} rows x 16 columns (and a {}-row copy) made in {:.0} s",
        rows / 10,
        started.elapsed().as_secs_f64()
    );

    if part == "incremental" {
        return incremental(&db.url, rows);
    }

    let cx_python = std::env::var("SVC_CX_VENV")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| {
            std::path::PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/svc-cx-venv")
        })
        .join("bin/python");
    let have_cx = cx_python.exists();
    if !have_cx {
        println!("connectorx: no venv at {} (skipped)", cx_python.display());
    }

    let mut svc_s = Vec::new();
    let mut cx_s = Vec::new();
    let mut copy_s = Vec::new();
    let mut parquet_bytes = 0u64;
    // CPU microseconds a row, per round: (database, reader) for each of the three.
    let (mut copy_cpu, mut cx_cpu, mut svc_cpu) = (Vec::new(), Vec::new(), Vec::new());
    let per_row = |secs: f64| secs * 1e6 / rows as f64;
    for round in 1..=2 {
        let (pg, kids) = (named_cpu_seconds("postgres"), children_cpu_seconds());
        let t = Instant::now();
        let out = Command::new("sh")
            .args([
                "-c",
                &format!(
                    "psql '{}' -q -c 'COPY big TO STDOUT (FORMAT binary)' > /dev/null",
                    db.url
                ),
            ])
            .status()
            .unwrap();
        assert!(out.success());
        copy_s.push(t.elapsed().as_secs_f64());
        copy_cpu.push((
            per_row(named_cpu_seconds("postgres") - pg),
            per_row(children_cpu_seconds() - kids),
        ));

        if have_cx {
            let (pg, kids) = (named_cpu_seconds("postgres"), children_cpu_seconds());
            let out = Command::new(&cx_python)
                .args([
                    "-c",
                    "import sys, time, resource, connectorx as cx\n\
                     t = time.time()\n\
                     tbl = cx.read_sql(sys.argv[1], 'SELECT * FROM big', return_type='arrow')\n\
                     print(time.time() - t, tbl.num_rows, \
                     resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)",
                    &db.url,
                ])
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            let parts: Vec<&str> = text.split_whitespace().collect();
            match parts.as_slice() {
                [secs, n, rss] => {
                    cx_s.push(secs.parse::<f64>().unwrap());
                    cx_cpu.push((
                        per_row(named_cpu_seconds("postgres") - pg),
                        per_row(children_cpu_seconds() - kids),
                    ));
                    println!(
                        "round {round}: connectorx {n} rows in {secs} s, peak RSS {} MiB",
                        rss.parse::<u64>().unwrap_or(0) / 1024
                    );
                }
                _ => println!(
                    "round {round}: connectorx failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                ),
            }
        }

        let synced = svc_sync(&db.url, "big", rows);
        parquet_bytes = synced.parquet_bytes;
        svc_s.push(synced.secs);
        svc_cpu.push((per_row(synced.pg_cpu), per_row(synced.svc_cpu)));
        println!(
            "round {round}: COPY binary to /dev/null {:.2} s; svc sync {:.2} s \
             ({:.0} rows/s, {:.1} MB/s of parquet), server peak RSS {} MiB",
            copy_s[copy_s.len() - 1],
            synced.secs,
            rows as f64 / synced.secs,
            synced.parquet_bytes as f64 / 1e6 / synced.secs,
            synced.peak_kib / 1024
        );
    }
    let best = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
    let svc = best(&svc_s);
    println!(
        "\nPostgreSQL -> parquet, {rows} rows x 16 columns (best of {}):",
        svc_s.len()
    );
    println!(
        "  svc sync               {svc:.2} s  {:>10.0} rows/s  {:.1} MB/s parquet written  (target >= 1,000,000 rows/s)",
        rows as f64 / svc,
        parquet_bytes as f64 / 1e6 / svc
    );
    println!(
        "  COPY binary /dev/null  {:.2} s  {:>10.0} rows/s  (the database's ceiling)",
        best(&copy_s),
        rows as f64 / best(&copy_s)
    );
    if !cx_s.is_empty() {
        let cx = best(&cx_s);
        println!(
            "  connectorx to Arrow    {cx:.2} s  {:>10.0} rows/s  svc/connectorx = {:.2}x (target <= 1.5x)",
            rows as f64 / cx,
            svc / cx
        );
    }
    cpu_account(&copy_cpu, &cx_cpu, &svc_cpu);
    let small_peak = svc_sync(&db.url, "tenth", rows / 10).peak_kib;
    let big_peak = svc_sync(&db.url, "big", rows).peak_kib;
    println!(
        "  server peak RSS: {} MiB syncing {} rows, {} MiB syncing {rows} rows (target <= 512 MiB, flat)",
        small_peak / 1024,
        rows / 10,
        big_peak / 1024
    );

    incremental(&db.url, rows);
    mariadb();
}

/// Where the CPU goes, per row: the database's side and the reader's, for each way of
/// reading the table, and the rate the machine's cores could reach if the CPU were the only
/// limit (cores ÷ the two sides' sum). A rate above that needs more cores, whatever the
/// reader does: the database's own part alone bounds it at cores ÷ its share.
fn cpu_account(copy: &[(f64, f64)], cx: &[(f64, f64)], svc: &[(f64, f64)]) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    println!("  CPU per row (medians over rounds; {cores} cores; database side = every postgres process):");
    for (name, rounds) in [
        ("COPY binary (psql)", copy),
        ("connectorx", cx),
        ("svc sync", svc),
    ] {
        if rounds.is_empty() {
            continue;
        }
        let pg = common::spread(&rounds.iter().map(|r| r.0).collect::<Vec<_>>()).0;
        let reader = common::spread(&rounds.iter().map(|r| r.1).collect::<Vec<_>>()).0;
        println!(
            "    {name:<20} database {pg:.2} µs + reader {reader:.2} µs = {:.2} µs  \
             -> CPU-bound ceiling {:>9.0} rows/s on {cores} cores",
            pg + reader,
            cores * 1e6 / (pg + reader)
        );
    }
}

fn mysql(url: &str, sql: &str) -> bool {
    let (auth, database) = url
        .trim_start_matches("mysql://")
        .split_once('/')
        .expect("mysql://user@host:port/db");
    let (user, host) = auth.split_once('@').unwrap_or(("root", auth));
    let (host, port) = host.split_once(':').unwrap_or((host, "3306"));
    Command::new("mysql")
        .args(["-h", host, "-P", port, "-u", user, database, "-e", sql])
        .stdout(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

const MYSQL_COLUMNS: &str = "id BIGINT PRIMARY KEY, a INT, b INT, c BIGINT, d DOUBLE, \
     e DOUBLE, f FLOAT, g BOOL, h VARCHAR(32), i CHAR(32), j DATE, k DATETIME(6), \
     updated_at TIMESTAMP(6) NULL, m DECIMAL(12,2), n SMALLINT, o VARCHAR(10)";

const MYSQL_FILL: &str = "SELECT seq, seq % 1000, seq * 7 % 100000, seq * 31, seq * 0.5, \
     sqrt(seq), seq % 977, seq % 2 = 0, concat('customer-', seq % 5000), md5(seq), \
     DATE '2020-01-01' + INTERVAL (seq % 2000) DAY, \
     TIMESTAMP '2020-01-01 00:00:00' + INTERVAL seq SECOND, \
     TIMESTAMP '2020-01-01 00:00:00' + INTERVAL seq SECOND, (seq % 100000) / 100.0, seq % 30000, \
     concat('c', seq % 97) FROM seq_1_to_$N";

/// MariaDB/MySQL → parquet beside the `mysql` client and ConnectorX.
fn mariadb() {
    let admin = std::env::var("SVC_BENCH_MYSQL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".into());
    let rows: u64 = std::env::var("SVC_BENCH_MYSQL_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let name = format!("svc_bench_my_{}", std::process::id());
    if !mysql(&admin, &format!("CREATE DATABASE {name}")) {
        println!("\nMariaDB/MySQL: no server answers at {admin} (skipped)");
        return;
    }
    let url = format!("{}/{name}", admin.rsplit_once('/').unwrap().0);
    let t = Instant::now();
    assert!(mysql(&url, &format!("CREATE TABLE big ({MYSQL_COLUMNS})")));
    assert!(mysql(
        &url,
        &format!(
            "INSERT INTO big {}",
            MYSQL_FILL.replace("$N", &rows.to_string())
        )
    ));
    println!(
        "\nMariaDB source: {rows} rows x 16 columns made in {:.0} s",
        t.elapsed().as_secs_f64()
    );
    let (auth, _) = url.trim_start_matches("mysql://").split_once('/').unwrap();
    let (user, host) = auth.split_once('@').unwrap_or(("root", auth));
    let (host, port) = host.split_once(':').unwrap_or((host, "3306"));
    let cx_python = std::path::PathBuf::from(std::env::var("HOME").unwrap())
        .join(".cache/svc-cx-venv/bin/python");
    for round in 1..=2 {
        let t = Instant::now();
        let streamed = Command::new("sh")
            .args([
                "-c",
                &format!(
                    "mysql --quick -h {host} -P {port} -u {user} {name} \
                     -e 'SELECT * FROM big' > /dev/null"
                ),
            ])
            .status()
            .unwrap();
        assert!(streamed.success());
        let client = t.elapsed().as_secs_f64();
        let cx = if cx_python.exists() {
            let out = Command::new(&cx_python)
                .args([
                    "-c",
                    "import sys, time, connectorx as cx\n\
                     t = time.time()\n\
                     tbl = cx.read_sql(sys.argv[1], 'SELECT * FROM big', return_type='arrow')\n\
                     print(time.time() - t, tbl.num_rows)",
                    &url,
                ])
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout)
                .split_whitespace()
                .next()
                .and_then(|s| s.parse::<f64>().ok())
        } else {
            None
        };
        let Synced {
            secs,
            parquet_bytes: bytes,
            peak_kib: peak,
            ..
        } = svc_sync_from(&name, &url, "big", rows);
        println!(
            "round {round}: svc sync {secs:.2} s ({:.0} rows/s, {:.1} MB/s of parquet, server \
             peak RSS {} MiB); mysql client to /dev/null {client:.2} s ({:.0} rows/s); {}",
            rows as f64 / secs,
            bytes as f64 / 1e6 / secs,
            peak / 1024,
            rows as f64 / client,
            match cx {
                Some(cx) => format!(
                    "connectorx to Arrow {cx:.2} s ({:.0} rows/s, svc/connectorx = {:.2}x)",
                    rows as f64 / cx,
                    secs / cx
                ),
                None => "connectorx: not installed".to_owned(),
            }
        );
    }
    mysql(&admin, &format!("DROP DATABASE {name}"));
}

/// One sync's figures.
struct Synced {
    secs: f64,
    parquet_bytes: u64,
    /// The server's peak RSS, KiB.
    peak_kib: u64,
    /// CPU seconds the server and the database spent on the sync.
    svc_cpu: f64,
    pg_cpu: f64,
}

/// A fresh server syncs `table` once.
fn svc_sync(url: &str, table: &str, rows: u64) -> Synced {
    svc_sync_from("public", url, table, rows)
}

/// [`svc_sync`] of `schema.table`.
fn svc_sync_from(schema: &str, url: &str, table: &str, rows: u64) -> Synced {
    let id = format!("bench_{table}");
    let (_dir, server, token, http) = registered(
        url,
        json!({"id": id, "source_type": "integration", "bucket": "bench",
               "source_table": format!("{schema}.{table}"), "query_mode": "materialized"}),
    );
    let (svc_cpu, pg_cpu) = (server.cpu_seconds(), named_cpu_seconds("postgres"));
    let t = Instant::now();
    let state = sync(&http, &server.base, &token, &id, false);
    let secs = t.elapsed().as_secs_f64();
    assert_eq!(state["status"], "ok", "{state}");
    assert_eq!(state["rows"], rows, "{state}");
    Synced {
        secs,
        parquet_bytes: state["size_bytes"].as_u64().unwrap_or(0),
        peak_kib: server.peak_rss_kib(),
        svc_cpu: server.cpu_seconds() - svc_cpu,
        pg_cpu: named_cpu_seconds("postgres") - pg_cpu,
    }
}

/// A fresh server with the bench connection and one table registered by `body`: its data
/// directory (kept alive by the caller), the server, an admin token and a client.
fn registered(url: &str, body: Value) -> (TempDir, Server, String, Client) {
    let dir = TempDir::new();
    let server = Server::start_with(&dir.0, &[("SVC_INTEGRATION_BENCH_URL", url)]);
    let token = server.cli(&["tokens", "create", "--email", "admin@localhost"]);
    let http = Client::builder()
        .timeout(Duration::from_secs(3600))
        .build()
        .unwrap();
    let r = http
        .post(format!("{}/api/admin/register-table", server.base))
        .bearer_auth(&token)
        .json(&body)
        .send()
        .unwrap();
    assert!(r.status().is_success(), "{}", r.text().unwrap());
    (dir, server, token, http)
}

/// Triggers a sync of `id` and waits for it; answers its sync state.
fn sync(http: &Client, base: &str, token: &str, id: &str, full: bool) -> Value {
    let r = http
        .post(format!("{base}/api/sync/trigger"))
        .bearer_auth(token)
        .json(&json!({"tables": [id], "full": full}))
        .send()
        .unwrap();
    assert!(r.status().is_success(), "{}", r.text().unwrap());
    loop {
        std::thread::sleep(Duration::from_millis(20));
        let status: Value = http
            .get(format!("{base}/api/sync/status"))
            .bearer_auth(token)
            .send()
            .unwrap()
            .json()
            .unwrap();
        if status["locked"] == false && !status["last_pass"]["finished_at"].is_null() {
            return status["tables"]
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["table_id"] == id)
                .cloned()
                .unwrap();
        }
    }
}

fn incremental(url: &str, rows: u64) {
    let (_dir, server, token, http) = registered(
        url,
        json!({"id": "bench_inc", "source_type": "integration", "bucket": "bench",
               "source_table": "public.big", "query_mode": "materialized",
               "primary_key": "id", "cursor_column": "updated_at"}),
    );
    let first = sync(&http, &server.base, &token, "bench_inc", false);
    assert_eq!(first["rows"], rows);
    let t = Instant::now();
    let same = sync(&http, &server.base, &token, "bench_inc", false);
    let unchanged = t.elapsed().as_secs_f64();
    assert_eq!(same["hash"], first["hash"]);
    psql(
        url,
        "UPDATE big SET i = 'changed', updated_at = now() WHERE id % 100 = 0",
    );
    let t = Instant::now();
    let changed = sync(&http, &server.base, &token, "bench_inc", false);
    let one_percent = t.elapsed().as_secs_f64();
    assert_eq!(changed["rows"], rows);
    println!(
        "\nincremental sync of the {rows}-row table (primary key id, cursor updated_at, indexed):"
    );
    println!("  no change:          {unchanged:.2} s (target <= 1 s)");
    println!(
        "  1% of rows changed: {one_percent:.2} s ({} rows merged into the copy)",
        rows / 100
    );
}
