//! `POST /api/v2/scan` and `/api/v2/scan/estimate` over real parquet files and the internal
//! tables.

use serde_json::json;

use crate::discovery::{register, write_parquet, write_parquet_groups};
use crate::query::{arrow_rows, header, post_raw};
use crate::support::{Backend, Server};

#[test]
fn scans_select_filter_order_and_announce_the_row_cap() {
    let s = Server::start_with(Backend::Sqlite, &[("SVC_SCAN_MAX_ROWS", "20")]);
    let admin = s.admin_token();
    write_parquet(&s.dir.0, "local", "orders", 50, "o");
    register(&s, &admin, json!({"id": "orders", "source_type": "local"}));

    let (status, body) = s.post_json(
        "/api/v2/scan",
        &admin,
        &json!({"table_id": "orders", "select": ["id", "name"],
                "where": "id >= 10 AND name LIKE 'o1%' -- and the rest",
                "order_by": ["id DESC"], "limit": 3, "format": "json"}),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["rows"], json!([[19, "o19"], [18, "o18"], [17, "o17"]]));
    assert_eq!(body["truncated"], true);

    // Arrow by default; no limit → the server's cap, announced.
    let r = post_raw(&s, "/api/v2/scan", &admin, &json!({"table_id": "orders"}));
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "x-svc-row-cap").as_deref(), Some("20"));
    assert_eq!(header(&r, "x-svc-truncated").as_deref(), Some("true"));
    let batches = arrow_rows(&r.bytes().unwrap());
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 20);
    assert_eq!(batches[0].num_columns(), 3);
    // Under the cap: no announcement.
    let r = post_raw(
        &s,
        "/api/v2/scan",
        &admin,
        &json!({"table_id": "orders", "limit": 5}),
    );
    assert_eq!(header(&r, "x-svc-row-cap"), None);

    let audit = s.audit_rows("scan", 3);
    let params: serde_json::Value =
        serde_json::from_str(audit[0]["params"].as_str().unwrap()).unwrap();
    assert_eq!(
        (
            params["where_present"].as_bool(),
            params["rows_returned"].as_u64()
        ),
        (Some(true), Some(3))
    );
}

#[test]
fn scan_bad_input_is_refused_with_the_offending_part() {
    let s = Server::start();
    let admin = s.admin_token();
    write_parquet(&s.dir.0, "local", "orders", 5, "o");
    register(&s, &admin, json!({"id": "orders", "source_type": "local"}));
    let scan = |body: serde_json::Value| s.post_json("/api/v2/scan", &admin, &body);

    let (status, body) = scan(json!({"table_id": "orders", "select": ["id", "nope"]}));
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["detail"]["details"]["columns"], json!(["nope"]));

    for (predicate, reason) in [
        ("1=1; DROP TABLE orders", "multi_statement"),
        ("(SELECT max(id) FROM orders) > 1", "nested_select"),
        ("id IN (SELECT id FROM svc_audit)", "nested_select"),
        ("read_parquet('/etc/passwd') IS NULL", "unknown_function"),
        ("\"名前\" = 'x'", "unknown_column"),
        ("other.id = 1", "cross_table_reference"),
        ("id = 1 UNION SELECT 1", "parse_error"),
    ] {
        let (status, body) =
            scan(json!({"table_id": "orders", "where": predicate, "format": "json"}));
        assert_eq!(status, 400, "{predicate}: {body}");
        assert_eq!(body["detail"]["error"], "invalid_where", "{predicate}");
        assert_eq!(
            body["detail"]["details"]["reason"], reason,
            "{predicate}: {body}"
        );
    }
    // A `--` tail is a comment, dropped with the raw text.
    let (status, body) =
        scan(json!({"table_id": "orders", "where": "id = 1 --", "format": "json"}));
    assert_eq!((status, &body["rows"]), (200, &json!([[1, "o1", null]])));

    let (status, _) = scan(json!({"table_id": "orders", "order_by": ["id; DROP"]}));
    assert_eq!(status, 400);
    assert_eq!(scan(json!({"table_id": "orders", "limit": 0})).0, 422);
    assert_eq!(scan(json!({"table_id": "missing"})).0, 404);
    let ana = s.user_token("ana@example.com", false);
    let (status, _) = s.post_json("/api/v2/scan", &ana, &json!({"table_id": "orders"}));
    assert_eq!(status, 403);
    assert_eq!(s.get_json("/api/health", "").0, 200);
}

#[test]
fn estimates_prune_row_groups_by_their_statistics() {
    let s = Server::start();
    let admin = s.admin_token();
    // Four row groups of 25 rows, ids ascending.
    write_parquet_groups(&s.dir.0, "local", "orders", 100, "o", 25);
    register(&s, &admin, json!({"id": "orders", "source_type": "local"}));
    let estimate = |body: serde_json::Value| {
        let (status, e) = s.post_json("/api/v2/scan/estimate", &admin, &body);
        assert_eq!(status, 200, "{e}");
        e
    };

    let all = estimate(json!({"table_id": "orders"}));
    assert_eq!(all["estimated_rows"], 100);
    assert_eq!(
        (all["exact"].as_bool(), all["would_exceed_guard"].as_bool()),
        (Some(true), Some(false))
    );
    assert!(all["guard_bytes"].is_null());
    let all_bytes = all["estimated_bytes"].as_u64().unwrap();

    let one_group = estimate(json!({"table_id": "orders", "where": "id < 20"}));
    assert_eq!(one_group["estimated_rows"], 25);
    assert_eq!(one_group["exact"], false);
    let some_bytes = one_group["estimated_bytes"].as_u64().unwrap();
    assert!(some_bytes * 3 < all_bytes, "{some_bytes} vs {all_bytes}");

    let one_column = estimate(json!({"table_id": "orders", "select": ["id"]}));
    assert!(one_column["estimated_bytes"].as_u64().unwrap() < all_bytes);
    let limited = estimate(json!({"table_id": "orders", "limit": 7}));
    assert_eq!(limited["estimated_rows"], 7);

    // The same validation as the scan.
    let (status, body) = s.post_json(
        "/api/v2/scan/estimate",
        &admin,
        &json!({"table_id": "orders", "where": "id = 1; DROP TABLE orders"}),
    );
    assert_eq!(
        (status, &body["detail"]["error"]),
        (400, &json!("invalid_where"))
    );
    let audit = s.audit_rows("scan.estimate", 5);
    assert!(audit.iter().any(|r| r["result"] == "error.400"));
}

#[test]
fn a_scan_of_an_internal_table_returns_only_the_callers_rows() {
    let s = Server::start();
    let admin = s.admin_token();
    let ana = s.user_token("ana@example.com", false);
    s.get_json("/api/v2/catalog", &ana);
    s.get_json("/api/v2/catalog", &admin);
    s.audit_rows("catalog.list", 2);
    let (_, me) = s.get_json("/api/me", &ana);

    let (status, body) = s.post_json(
        "/api/v2/scan",
        &ana,
        &json!({"table_id": "svc_audit", "select": ["user_id", "action"],
                "where": "action = 'catalog.list' OR user_id <> ''", "format": "json"}),
    );
    assert_eq!(status, 200, "{body}");
    let rows = body["rows"].as_array().unwrap();
    assert!(!rows.is_empty());
    assert!(rows.iter().all(|r| r[0] == me["id"]), "{body}");
}
