//! The table registry and the request validation it shares with every endpoint.

use serde_json::json;

use crate::support::{backends, Backend, Server};

#[test]
fn register_upsert_update_and_unregister() {
    for backend in backends() {
        let s = Server::start_with(backend, &[]);
        let admin = s.admin_token();
        let body = json!({"id": "orders", "name": "Orders", "source_type": "local", "description": "All orders", "sync_schedule": "every 15m"});
        let (status, row) = s.post_json("/api/admin/register-table", &admin, &body);
        assert_eq!(status, 201, "{row}");
        assert_eq!(
            (row["query_mode"].as_str(), row["name"].as_str()),
            (Some("local"), Some("Orders"))
        );
        // Registering the same id again updates it.
        let (status, row) = s.post_json("/api/admin/register-table", &admin, &json!({"id": "orders", "source_type": "warehouse", "bucket": "sales", "query_mode": "remote"}));
        assert_eq!(
            (status, row["source_type"].as_str(), row["bucket"].as_str()),
            (200, Some("warehouse"), Some("sales"))
        );
        let reg = s.audit_rows("registry.register", 2);
        assert!(reg[1]["params_before"]
            .as_str()
            .unwrap()
            .contains("All orders"));

        let (status, row) = s.put_json(
            "/api/admin/registry/orders",
            &admin,
            &json!({"description": "Orders, cleaned", "bucket": null}),
        );
        assert_eq!(status, 200, "{row}");
        assert_eq!(
            (
                row["description"].as_str(),
                row["bucket"].is_null(),
                row["source_type"].as_str()
            ),
            (Some("Orders, cleaned"), true, Some("warehouse"))
        );
        assert_eq!(
            s.put_json("/api/admin/registry/nope", &admin, &json!({})).0,
            404
        );
        assert_eq!(
            s.put_json(
                "/api/admin/registry/orders",
                &admin,
                &json!({"sync_schedule": "sometimes"})
            )
            .0,
            422
        );
        assert_eq!(
            s.put_json(
                "/api/admin/registry/orders",
                &admin,
                &json!({"source_query": "SELECT 1"})
            )
            .0,
            422,
            "source_query needs materialized"
        );

        let (status, list) = s.get_json("/api/admin/registry", &admin);
        assert_eq!(status, 200);
        let ids: Vec<&str> = list["tables"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["id"].as_str().unwrap())
            .collect();
        assert_eq!(
            ids,
            ["orders", "svc_audit", "svc_sessions", "svc_telemetry"]
        );
        assert_eq!(list["count"], 4);

        assert_eq!(s.delete("/api/admin/registry/orders", &admin).0, 204);
        assert_eq!(s.delete("/api/admin/registry/orders", &admin).0, 404);
        assert_eq!(s.audit_rows("registry.unregister", 1).len(), 1);
        if backend == Backend::Postgres {
            eprintln!("registry lifecycle verified on PostgreSQL");
        }
    }
}

/// Re-registering an id changes only what the body names: a field left out keeps its stored
/// value, `null` clears it, and the query mode changes only when asked.
#[test]
fn an_upsert_keeps_what_it_does_not_name() {
    let s = Server::start();
    let admin = s.admin_token();
    let register =
        |body: serde_json::Value| s.post_json("/api/admin/register-table", &admin, &body);
    let (status, row) = register(json!({
        "id": "daily", "name": "Daily", "source_type": "warehouse", "bucket": "sales",
        "query_mode": "materialized", "source_query": "SELECT 1 AS x",
        "sync_schedule": "every 6h", "description": "Daily figures"
    }));
    assert_eq!(status, 201, "{row}");

    let (status, row) = register(json!({"id": "daily", "source_type": "warehouse"}));
    assert_eq!(status, 200, "{row}");
    for (field, kept) in [
        ("name", "Daily"),
        ("bucket", "sales"),
        ("query_mode", "materialized"),
        ("source_query", "SELECT 1 AS x"),
        ("sync_schedule", "every 6h"),
        ("description", "Daily figures"),
    ] {
        assert_eq!(row[field].as_str(), Some(kept), "{field} kept: {row}");
    }

    let (status, row) = register(
        json!({"id": "daily", "source_type": "warehouse", "description": null, "name": null}),
    );
    assert_eq!(status, 200, "{row}");
    assert!(row["description"].is_null(), "null clears: {row}");
    assert_eq!(row["name"], "daily", "a cleared name falls back to the id");
    assert_eq!(row["query_mode"], "materialized");

    let (status, row) = register(
        json!({"id": "daily", "source_type": "warehouse", "query_mode": "remote", "source_query": null}),
    );
    assert_eq!(
        (status, row["query_mode"].as_str()),
        (200, Some("remote")),
        "{row}"
    );
    // A new id still defaults to a local table.
    let (status, row) = register(json!({"id": "fresh", "source_type": "local"}));
    assert_eq!(
        (status, row["query_mode"].as_str(), row["name"].as_str()),
        (201, Some("local"), Some("fresh"))
    );
}

#[test]
fn internal_tables_are_seeded_read_only_and_stale_ones_removed() {
    let mut s = Server::start();
    let admin = s.admin_token();
    let (_, list) = s.get_json("/api/admin/registry", &admin);
    let internal: Vec<_> = list["tables"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["source_type"] == "internal")
        .collect();
    let names: Vec<(&str, &str, &str)> = internal
        .iter()
        .map(|t| {
            (
                t["id"].as_str().unwrap(),
                t["name"].as_str().unwrap(),
                t["bucket"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        names,
        [
            ("svc_audit", "Service audit log", "Internal"),
            ("svc_sessions", "Service sessions", "Internal"),
            ("svc_telemetry", "Service telemetry events", "Internal"),
        ]
    );
    assert_eq!(
        s.put_json(
            "/api/admin/registry/svc_audit",
            &admin,
            &json!({"description": "x"})
        )
        .0,
        409
    );
    assert_eq!(s.delete("/api/admin/registry/svc_audit", &admin).0, 409);
    assert_eq!(
        s.post_json(
            "/api/admin/register-table",
            &admin,
            &json!({"id": "svc_audit", "source_type": "local"})
        )
        .0,
        409
    );
    assert_eq!(
        s.post_json(
            "/api/admin/register-table",
            &admin,
            &json!({"id": "mine", "source_type": "internal"})
        )
        .0,
        422
    );

    // A stale internal row (the old telemetry id) is removed at the next start.
    s.stop();
    crate::support::exec_store(&s.store_url(), &[
        "INSERT INTO table_registry (id, name, source_type, query_mode, bucket) VALUES ('agnes_usage', 'old', 'internal', 'internal', 'Internal')",
    ]);
    s.restart();
    let rows = s.query("SELECT id FROM table_registry WHERE source_type = 'internal' ORDER BY id");
    assert_eq!(rows.len(), 3, "{rows:?}");
}

#[test]
fn bad_input_gets_422_or_413_in_the_envelope_and_changes_nothing() {
    let s = Server::start_with(Backend::Sqlite, &[("SVC_MAX_BODY_BYTES", "4096")]);
    let admin = s.admin_token();
    let post_raw = |body: &str| {
        s.send(
            s.http
                .post(s.url("/api/admin/register-table"))
                .bearer_auth(&admin)
                .header("content-type", "application/json")
                .body(body.to_string()),
        )
    };
    let cases = [
        ("malformed JSON", r#"{"id": "#.to_string()),
        ("missing field", r#"{"source_type": "local"}"#.to_string()),
        (
            "wrong type (number for string)",
            r#"{"id": 5, "source_type": "local"}"#.to_string(),
        ),
        (
            "wrong type (array)",
            r#"{"id": ["a"], "source_type": "local"}"#.to_string(),
        ),
        (
            "wrong enum",
            r#"{"id": "a", "source_type": "local", "query_mode": "sideways"}"#.to_string(),
        ),
        (
            "unknown source_type",
            r#"{"id": "a", "source_type": "mainframe"}"#.to_string(),
        ),
        (
            "bad id (slash)",
            r#"{"id": "../etc", "source_type": "local"}"#.to_string(),
        ),
        (
            "bad id (too long)",
            format!(r#"{{"id": "{}", "source_type": "local"}}"#, "x".repeat(129)),
        ),
        (
            "bad id (only dots: no URL path or file can carry it)",
            r#"{"id": "..", "source_type": "local"}"#.to_string(),
        ),
        (
            "bad id (one dot)",
            r#"{"id": ".", "source_type": "local"}"#.to_string(),
        ),
        (
            "bad schedule",
            r#"{"id": "a", "source_type": "local", "sync_schedule": "every blue moon"}"#
                .to_string(),
        ),
    ];
    for (what, body) in cases {
        let (status, resp) = post_raw(&body);
        assert_eq!(status, 422, "{what}: {resp}");
        assert!(resp["detail"].is_string(), "{what}: envelope {resp}");
    }
    let (status, resp) = post_raw(&format!(
        r#"{{"id": "big", "source_type": "local", "description": "{}"}}"#,
        "x".repeat(10_000)
    ));
    assert_eq!(status, 413, "{resp}");
    assert!(resp["detail"].as_str().unwrap().contains("4096"));
    // A chunked body without Content-Length is limited too (kept small enough to be fully
    // sent before the server answers, so the client reads the 413 instead of a reset).
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        (0..5).map(|_| Ok(vec![b' '; 1000])).collect();
    let r = s
        .http
        .post(s.url("/api/admin/register-table"))
        .bearer_auth(&admin)
        .header("content-type", "application/json")
        .body(reqwest::blocking::Body::new(std::io::Cursor::new(
            chunks
                .into_iter()
                .flat_map(|c| c.unwrap())
                .collect::<Vec<u8>>(),
        )))
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 413);

    let rows = s.query("SELECT id FROM table_registry WHERE source_type <> 'internal'");
    assert!(rows.is_empty(), "nothing registered: {rows:?}");
    // Wrong types on other endpoints, too.
    assert_eq!(
        s.post_json(
            "/api/admin/users",
            &admin,
            &json!({"email": "a@b.c", "is_admin": "yes"})
        )
        .0,
        422
    );
    assert_eq!(
        s.post_json("/api/admin/groups", &admin, &json!({"name": 7}))
            .0,
        422
    );
}
