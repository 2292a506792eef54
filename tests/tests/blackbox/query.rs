//! `POST /api/query` over real parquet files and the internal tables.

use serde_json::json;

use crate::discovery::{register, write_parquet};
use crate::support::Server;

#[test]
fn sql_over_a_parquet_table_returns_typed_rows_and_reports_truncation() {
    let s = Server::start();
    let admin = s.admin_token();
    write_parquet(&s.dir.0, "local", "orders", 50, "o");
    register(&s, &admin, json!({"id": "orders", "source_type": "local"}));

    let (status, body) = s.post_json(
        "/api/query",
        &admin,
        &json!({"sql": "SELECT id, name, score FROM orders WHERE id < 4 ORDER BY id"}),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["columns"], json!(["id", "name", "score"]));
    assert_eq!(body["column_types"], json!(["Int64", "Utf8", "Float64"]));
    // NaN and ±inf have no JSON form.
    assert_eq!(
        body["rows"],
        json!([
            [0, "o0", null],
            [1, "o1", null],
            [2, "o2", null],
            [3, "o3", 1.5]
        ])
    );
    assert_eq!(
        (body["row_count"].as_u64(), body["truncated"].as_bool()),
        (Some(4), Some(false))
    );

    let (status, body) = s.post_json(
        "/api/query",
        &admin,
        &json!({"sql": "SELECT id FROM orders ORDER BY id", "limit": 3}),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (body["row_count"].as_u64(), body["truncated"].as_bool()),
        (Some(3), Some(true))
    );

    let audit = s.audit_rows("query.local", 2);
    let params: serde_json::Value =
        serde_json::from_str(audit[1]["params"].as_str().unwrap()).unwrap();
    assert_eq!(params["tables"], json!(["orders"]));
    assert_eq!(params["rows_returned"], 3);
    assert!(params["sql_preview"]
        .as_str()
        .unwrap()
        .starts_with("SELECT id FROM orders"));
}

#[test]
fn a_group_by_a_string_column_answers_through_http() {
    let s = Server::start();
    let admin = s.admin_token();
    write_parquet(&s.dir.0, "local", "orders", 300, "o");
    register(&s, &admin, json!({"id": "orders", "source_type": "local"}));

    let sql = "SELECT name, count(*) AS n, sum(id) AS total FROM orders WHERE id >= 100 GROUP BY name ORDER BY total DESC LIMIT 3";
    let (status, body) = s.post_json("/api/query", &admin, &json!({ "sql": sql }));
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["rows"],
        json!([["o299", 1, 299], ["o298", 1, 298], ["o297", 1, 297]])
    );

    // EXPLAIN shows the plan, with the string-keyed partial aggregate in it; a limit smaller
    // than the plan's rows cuts it and says so.
    let explain = format!("EXPLAIN {sql}");
    let (status, body) = s.post_json("/api/query", &admin, &json!({ "sql": explain }));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["columns"], json!(["plan_type", "plan"]));
    assert!(
        body["rows"].to_string().contains("StringKeyAggregateExec"),
        "{body}"
    );
    let (status, body) = s.post_json("/api/query", &admin, &json!({ "sql": explain, "limit": 1 }));
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (body["row_count"].clone(), body["truncated"].clone()),
        (json!(1), json!(true))
    );
}

#[test]
fn bad_queries_get_actionable_errors_and_writes_never_run() {
    let s = Server::start();
    let admin = s.admin_token();
    write_parquet(&s.dir.0, "local", "orders", 5, "o");
    register(&s, &admin, json!({"id": "orders", "source_type": "local"}));
    let ask = |sql: &str| s.post_json("/api/query", &admin, &json!({ "sql": sql }));

    let (status, body) = ask("SELECT * FROM ordres");
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["detail"]["error"], "unknown_table");
    assert_eq!(body["detail"]["details"]["suggestions"], json!(["orders"]));

    for sql in [
        "DROP TABLE orders",
        "INSERT INTO orders VALUES (1, 'x', 1.0)",
        "CREATE EXTERNAL TABLE t STORED AS CSV LOCATION '/etc/passwd'",
        "COPY orders TO '/tmp/stolen.parquet'",
        "SELECT 1; SELECT 2",
    ] {
        let (status, body) = ask(sql);
        assert_eq!(status, 400, "{sql}: {body}");
        assert!(
            body["detail"].as_str().unwrap().contains("read-only"),
            "{sql}: {body}"
        );
    }
    assert!(!std::path::Path::new("/tmp/stolen.parquet").exists());

    // File-reading table functions and URLs are not tables here.
    let (status, body) = ask("SELECT * FROM read_parquet('/etc/passwd')");
    assert_eq!(status, 400, "{body}");
    let (status, body) = ask("SELECT * FROM 'https://example.com/x.parquet'");
    assert_eq!(status, 400, "{body}");

    let (status, body) = ask("SELECT nope FROM orders");
    assert_eq!(status, 400, "{body}");
    let msg = body["detail"].as_str().unwrap();
    assert!(msg.contains("nope") && msg.contains("score"), "{msg}");

    let (status, body) = ask("SELECT 'a' + 1 FROM orders");
    assert_eq!(status, 400, "{body}");

    let (status, body) = s.post_json(
        "/api/query",
        &admin,
        &json!({"sql": "SELECT 1", "limit": 2_000_000}),
    );
    assert_eq!(status, 422, "{body}");
    assert!(body.to_string().contains("1000000"), "{body}");

    // Without a grant: 403 naming the table.
    let ana = s.user_token("ana@example.com", false);
    let (status, body) = s.post_json("/api/query", &ana, &json!({"sql": "SELECT * FROM orders"}));
    assert_eq!(status, 403, "{body}");
    assert!(body.to_string().contains("orders"), "{body}");
    assert_eq!(s.get_json("/api/health", "").0, 200);
}

#[test]
fn internal_tables_answer_only_the_callers_rows_and_stay_apart() {
    let s = Server::start();
    let admin = s.admin_token();
    write_parquet(&s.dir.0, "local", "orders", 5, "o");
    register(&s, &admin, json!({"id": "orders", "source_type": "local"}));
    let ana = s.user_token("ana@example.com", false);
    // Give both users audit rows.
    s.get_json("/api/v2/catalog", &ana);
    s.get_json("/api/v2/catalog", &admin);
    s.audit_rows("catalog.list", 2);
    let (_, me) = s.get_json("/api/me", &ana);
    let ana_id = me["id"].as_str().unwrap().to_string();

    let (status, body) = s.post_json(
        "/api/query",
        &ana,
        &json!({"sql": "SELECT user_id, count(*) AS n FROM svc_audit WHERE user_id <> 'nobody' OR 1 = 1 GROUP BY user_id"}),
    );
    assert_eq!(status, 200, "{body}");
    let users: Vec<&str> = body["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r[0].as_str().unwrap())
        .collect();
    assert_eq!(users, [ana_id.as_str()], "{body}");
    // That aggregate ran in the store (behind the same row filter), not over fetched rows.
    let (status, body) = s.post_json(
        "/api/query",
        &ana,
        &json!({"sql": "EXPLAIN SELECT user_id, count(*) AS n FROM svc_audit GROUP BY user_id"}),
    );
    assert_eq!(status, 200, "{body}");
    assert!(body.to_string().contains("store_aggregate"), "{body}");

    let (status, body) = s.post_json(
        "/api/query",
        &admin,
        &json!({"sql": "SELECT count(DISTINCT user_id) AS users FROM svc_audit"}),
    );
    assert_eq!(status, 200, "{body}");
    assert!(body["rows"][0][0].as_i64().unwrap() >= 2, "{body}");

    let (status, body) = s.post_json(
        "/api/query",
        &ana,
        &json!({"sql": "SELECT * FROM audit_log"}),
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("svc_audit"), "{body}");
    // A CTE named like the backing table is only a name: the rows are still the caller's.
    let (status, body) = s.post_json(
        "/api/query",
        &ana,
        &json!({"sql": "WITH audit_log AS (SELECT * FROM svc_audit) SELECT DISTINCT user_id FROM audit_log -- svc_sessions"}),
    );
    assert_eq!((status, &body["rows"]), (200, &json!([[ana_id]])), "{body}");
    // An internal id inside a literal is not a reference.
    let (status, body) = s.post_json(
        "/api/query",
        &ana,
        &json!({"sql": "SELECT 'svc_audit' AS t FROM orders"}),
    );
    assert_eq!(
        status, 403,
        "orders is the only table, and ana has no grant: {body}"
    );

    let (status, body) = s.post_json(
        "/api/query",
        &admin,
        &json!({"sql": "SELECT * FROM svc_audit a JOIN orders o ON a.id = o.name"}),
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("separately"), "{body}");

    let rows = s.audit_rows("query.internal", 3);
    assert!(rows
        .iter()
        .any(|r| r["params"].as_str().unwrap().contains("\"is_admin\":false")));
}

/// POSTs a query and returns the raw response.
pub(crate) fn post_raw(
    s: &Server,
    path: &str,
    token: &str,
    body: &serde_json::Value,
) -> reqwest::blocking::Response {
    s.http
        .post(s.url(path))
        .bearer_auth(token)
        .json(body)
        .send()
        .unwrap()
}

pub(crate) fn header(r: &reqwest::blocking::Response, name: &str) -> Option<String> {
    r.headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_string())
}

pub(crate) fn arrow_rows(bytes: &[u8]) -> Vec<svc_plugin_api::RecordBatch> {
    svc_plugin_api::arrow::ipc::reader::StreamReader::try_new(bytes, None)
        .unwrap()
        .map(|b| b.unwrap())
        .collect()
}

#[test]
fn every_format_streams_and_reports_truncation() {
    let s = Server::start();
    let admin = s.admin_token();
    write_parquet(&s.dir.0, "local", "orders", 50, "o");
    register(&s, &admin, json!({"id": "orders", "source_type": "local"}));
    let sql = "SELECT id, name FROM orders ORDER BY id";

    let r = post_raw(
        &s,
        "/api/query",
        &admin,
        &json!({"sql": sql, "limit": 10, "format": "arrow"}),
    );
    assert_eq!(r.status(), 200);
    assert_eq!(
        header(&r, "content-type").as_deref(),
        Some("application/vnd.apache.arrow.stream")
    );
    assert_eq!(header(&r, "x-svc-truncated").as_deref(), Some("true"));
    let batches = arrow_rows(&r.bytes().unwrap());
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 10);
    assert_eq!(batches[0].schema().field(1).name(), "name");
    // A truncated arrow stream ends with one zero-row batch; a whole one does not.
    assert_eq!(batches.last().unwrap().num_rows(), 0);
    let r = post_raw(
        &s,
        "/api/query",
        &admin,
        &json!({"sql": sql, "limit": 50, "format": "arrow"}),
    );
    let batches = arrow_rows(&r.bytes().unwrap());
    assert!(batches.iter().all(|b| b.num_rows() > 0));

    let r = post_raw(
        &s,
        "/api/query",
        &admin,
        &json!({"sql": sql, "limit": 100, "format": "csv"}),
    );
    assert_eq!(header(&r, "x-svc-truncated").as_deref(), Some("false"));
    let csv = r.text().unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!((lines.len(), lines[0], lines[1]), (51, "id,name", "0,o0"));

    let r = post_raw(
        &s,
        "/api/query",
        &admin,
        &json!({"sql": sql, "limit": 5, "format": "parquet"}),
    );
    assert_eq!(r.status(), 200);
    let file = r.bytes().unwrap();
    let reader =
        svc_plugin_api::datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
            .unwrap();
    let kv = reader
        .metadata()
        .file_metadata()
        .key_value_metadata()
        .unwrap()
        .clone();
    assert!(kv
        .iter()
        .any(|e| e.key == "svc:truncated" && e.value.as_deref() == Some("true")));
    let rows: usize = reader.build().unwrap().map(|b| b.unwrap().num_rows()).sum();
    assert_eq!(rows, 5);

    let r = post_raw(&s, "/api/query", &admin, &json!({"sql": sql, "limit": 50}));
    assert_eq!(header(&r, "x-svc-truncated").as_deref(), Some("false"));
    let body: serde_json::Value = r.json().unwrap();
    assert_eq!(
        (body["row_count"].as_u64(), body["truncated"].as_bool()),
        (Some(50), Some(false))
    );

    // CSV cannot hold nested values: refused before any byte.
    let (status, body) = s.post_json(
        "/api/query",
        &admin,
        &json!({"sql": "SELECT make_array(id, id) AS pair FROM orders", "format": "csv"}),
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("pair"), "{body}");
    let (status, body) = s.post_json(
        "/api/query",
        &admin,
        &json!({"sql": "SELECT make_array(id, id) AS pair FROM orders WHERE id = 3"}),
    );
    assert_eq!((status, &body["rows"]), (200, &json!([[[3, 3]]])));

    // A megabyte of SQL is refused at once.
    let huge = format!("SELECT {} FROM orders", vec!["id"; 200_000].join(", "));
    let started = std::time::Instant::now();
    let (status, body) = s.post_json("/api/query", &admin, &json!({ "sql": huge }));
    assert_eq!(status, 413, "{body}");
    assert!(started.elapsed() < std::time::Duration::from_secs(5));

    // The audit row is written when the body is done, with what was read.
    let rows = s.audit_rows("query.local", 5);
    let params: Vec<serde_json::Value> = rows
        .iter()
        .filter(|r| r["result"] == "success")
        .map(|r| serde_json::from_str(r["params"].as_str().unwrap()).unwrap())
        .collect();
    let csv_row = params.iter().find(|p| p["format"] == "csv").unwrap();
    assert_eq!(csv_row["rows_returned"], 50);
    assert!(csv_row["bytes_scanned"].as_u64().unwrap() > 0, "{csv_row}");
}

#[test]
fn a_client_that_goes_away_cancels_its_query_and_frees_its_slot() {
    let s = Server::start_with(
        crate::support::Backend::Sqlite,
        &[("SVC_SCAN_MAX_CONCURRENT_PER_USER", "1")],
    );
    let admin = s.admin_token();
    write_parquet(&s.dir.0, "local", "orders", 200, "o");
    register(&s, &admin, json!({"id": "orders", "source_type": "local"}));
    // 1.6 billion rows: far more than would ever finish during this test.
    let endless =
        "SELECT a.id, b.id AS b, c.id AS c, d.id AS d FROM orders a, orders b, orders c, orders d";
    let mut r = post_raw(
        &s,
        "/api/query",
        &admin,
        &json!({"sql": endless, "limit": 1_000_000, "format": "csv"}),
    );
    assert_eq!(r.status(), 200);
    let mut first = [0u8; 4096];
    std::io::Read::read_exact(&mut r, &mut first).unwrap();

    // While it streams, the user's one slot is taken.
    let (status, body) = s.post_json("/api/query", &admin, &json!({"sql": "SELECT 1"}));
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["detail"]["details"]["kind"], "concurrent_scans");

    drop(r);
    let gone = std::time::Instant::now();
    loop {
        let (status, _) = s.post_json("/api/query", &admin, &json!({"sql": "SELECT 1"}));
        if status == 200 {
            break;
        }
        assert!(
            gone.elapsed() < std::time::Duration::from_secs(10),
            "the slot was not freed after the client left"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let cancelled = s.query(
        "SELECT result FROM audit_log WHERE action = 'query.local' AND result = 'error.499'",
    );
    assert_eq!(cancelled.len(), 1, "{cancelled:?}");
}

#[test]
fn the_daily_byte_allowance_answers_429_with_retry_after() {
    let s = Server::start_with(
        crate::support::Backend::Sqlite,
        &[("SVC_SCAN_MAX_DAILY_BYTES_PER_USER", "1")],
    );
    let admin = s.admin_token();
    write_parquet(&s.dir.0, "local", "orders", 20, "o");
    register(&s, &admin, json!({"id": "orders", "source_type": "local"}));
    // The table's bytes are held before the query runs: more than the allowance, so the
    // first query is refused rather than let through to overshoot it.
    let ask = json!({"sql": "SELECT * FROM orders"});
    let r = post_raw(&s, "/api/query", &admin, &ask);
    assert_eq!(r.status(), 429);
    let retry: u64 = header(&r, "retry-after").unwrap().parse().unwrap();
    let body: serde_json::Value = r.json().unwrap();
    assert_eq!(body["detail"]["error"], "quota_exceeded");
    assert_eq!(body["detail"]["details"]["kind"], "daily_bytes");
    assert_eq!(body["detail"]["details"]["retry_after_seconds"], retry);
    assert!((1..=86_400).contains(&retry));
    // Another user is unaffected.
    let ana = s.user_token("ana@example.com", false);
    assert_eq!(
        s.post_json("/api/query", &ana, &json!({"sql": "SELECT 1"}))
            .0,
        200
    );
}

#[test]
fn the_deadline_and_the_memory_pool_stop_a_query_and_the_server_stays_up() {
    let s = Server::start_with(
        crate::support::Backend::Sqlite,
        &[
            // Two seconds: the small queries below must finish in time in a debug build
            // while other tests load both cores.
            ("SVC_QUERY_TIMEOUT_SECONDS", "2"),
            ("SVC_QUERY_MEMORY_MB", "16"),
        ],
    );
    let admin = s.admin_token();
    write_parquet(&s.dir.0, "local", "orders", 200, "o");
    register(&s, &admin, json!({"id": "orders", "source_type": "local"}));

    let started = std::time::Instant::now();
    let ((status, body), health_first) = std::thread::scope(|scope| {
        let heavy = scope.spawn(|| {
            let answer = s.post_json(
                "/api/query",
                &admin,
                // 200^5 combinations: hours of work, where four tables (1.6e9) finished in
                // about a second on this machine and raced the one-second deadline.
                &json!({"sql": "SELECT count(*) FROM orders a, orders b, orders c, orders d, orders e WHERE a.id + b.id + c.id + d.id + e.id = -1"}),
            );
            (answer, std::time::Instant::now())
        });
        // While the query keeps the query runtime's threads busy, other requests are answered.
        std::thread::sleep(std::time::Duration::from_millis(300));
        assert_eq!(s.get_json("/api/health", "").0, 200);
        let health_done = std::time::Instant::now();
        let (answer, query_done) = heavy.join().unwrap();
        (answer, health_done < query_done)
    });
    assert_eq!(
        (status, &body["detail"]["error"]),
        (504, &json!("query_timeout")),
        "{body}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    assert!(
        health_first,
        "the health check waited for the running query to stop"
    );

    // The stopped query stops computing: the idle server's CPU time settles within a few
    // seconds (it kept a core busy for hours when an operator's loop never yielded).
    let settle = std::time::Instant::now();
    loop {
        let before = s.cpu_seconds().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(1000));
        let used = s.cpu_seconds().unwrap() - before;
        if used < 0.3 {
            break;
        }
        assert!(
            settle.elapsed() < std::time::Duration::from_secs(15),
            "the server still used {used:.2} s of CPU a second, 15 s after the deadline stopped the query"
        );
    }
    let (status, body) = s.post_json(
        "/api/query",
        &admin,
        &json!({"sql": "SELECT array_agg(a.name || b.name) FROM orders a, orders b"}),
    );
    assert_eq!(status, 200, "{body}");
    let (status, body) = s.post_json(
        "/api/query",
        &admin,
        &json!({"sql": "SELECT array_agg(a.name || b.name || c.name) FROM orders a, orders b, orders c"}),
    );
    assert_eq!(
        (status, &body["detail"]["error"]),
        (503, &json!("resources_exhausted")),
        "{body}"
    );
    assert_eq!(s.get_json("/api/health", "").0, 200);
}

/// One HTTP/1.1 POST over a plain socket asking for trailers: the response head, the
/// de-chunked body and the trailer lines.
fn post_with_trailers(
    s: &Server,
    token: &str,
    body: &serde_json::Value,
) -> (String, Vec<u8>, String) {
    use std::io::{BufRead, BufReader, Read, Write};
    let addr = s.base.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    let body = body.to_string();
    write!(
        stream,
        "POST /api/query HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nTE: trailers\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut r = BufReader::new(stream);
    let mut head = String::new();
    loop {
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        if line == "\r\n" {
            break;
        }
        head.push_str(&line.to_ascii_lowercase());
    }
    assert!(head.contains("transfer-encoding: chunked"), "{head}");
    let mut data = Vec::new();
    loop {
        let mut size = String::new();
        r.read_line(&mut size).unwrap();
        let n = usize::from_str_radix(size.trim(), 16).unwrap();
        if n == 0 {
            break;
        }
        let start = data.len();
        data.resize(start + n, 0);
        r.read_exact(&mut data[start..]).unwrap();
        let mut crlf = [0u8; 2];
        r.read_exact(&mut crlf).unwrap();
    }
    let mut trailers = String::new();
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap() == 0 || line == "\r\n" {
            break;
        }
        trailers.push_str(&line.to_ascii_lowercase());
    }
    (head, data, trailers)
}

#[test]
fn truncation_past_the_look_ahead_is_settled_at_the_end() {
    let s = Server::start_with(
        crate::support::Backend::Sqlite,
        &[("SVC_QUERY_MAX_ROWS", "1200000")],
    );
    let admin = s.admin_token();
    // Around 20 MB of CSV: more than the 16 MiB held back before the first byte.
    write_parquet(&s.dir.0, "local", "big", 1_300_000, "b");
    register(&s, &admin, json!({"id": "big", "source_type": "local"}));
    let all = "SELECT id, name FROM big";
    let some = "SELECT id, name FROM big WHERE id < 1100000";
    for (sql, limit, rows, want) in [
        (all, 1_000_000, 1_000_000, "true"),
        (some, 1_200_000, 1_100_000, "false"),
    ] {
        let (head, data, trailers) = post_with_trailers(
            &s,
            &admin,
            &json!({"sql": sql, "limit": limit, "format": "csv"}),
        );
        assert!(head.contains("x-svc-truncated: unknown"), "{head}");
        assert!(head.contains("trailer: x-svc-truncated"), "{head}");
        assert_eq!(trailers.trim(), format!("x-svc-truncated: {want}"), "{sql}");
        let lines = data.iter().filter(|b| **b == b'\n').count();
        assert_eq!(lines, rows + 1, "{sql}");
    }

    // The svc client learns it from the arrow stream's end: a file cut at the server's cap
    // exits 4; a whole one larger than the look-ahead is not an error.
    let home = crate::support::TempDir::new();
    let cfg = home.0.as_path();
    let o = crate::svc_cli::svc(
        cfg,
        &["--server", &s.base, "--token", &admin, "auth", "login"],
    );
    assert_eq!(crate::svc_cli::code(&o), 0);
    let out = home.0.join("big.csv");
    let o = crate::svc_cli::svc(
        cfg,
        &["query", all, "-f", "csv", "-o", out.to_str().unwrap()],
    );
    assert_eq!(
        crate::svc_cli::code(&o),
        4,
        "{}",
        crate::svc_cli::stderr(&o)
    );
    let text = std::fs::read_to_string(&out).unwrap();
    assert_eq!(text.lines().count(), 1_200_001);
    assert!(text.starts_with("id,name\n"));
    let o = crate::svc_cli::svc(
        cfg,
        &["query", some, "-f", "csv", "-o", out.to_str().unwrap()],
    );
    assert_eq!(
        crate::svc_cli::code(&o),
        0,
        "{}",
        crate::svc_cli::stderr(&o)
    );
    assert!(
        !crate::svc_cli::stderr(&o).contains("truncated"),
        "{}",
        crate::svc_cli::stderr(&o)
    );
    assert_eq!(
        std::fs::read_to_string(&out).unwrap().lines().count(),
        1_100_001
    );
}
