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
