//! Getting data into a local table: `PUT /api/admin/tables/{id}/data` and `svc admin upload`,
//! and what registration says about a table's data file.

use serde_json::{json, Value};

use crate::discovery::write_parquet;
use crate::support::{backends, Server, TempDir};
use crate::svc_cli::{code, stderr, stdout, svc};

fn put(s: &Server, token: &str, path: &str, content_type: &str, body: Vec<u8>) -> (u16, Value) {
    s.send(
        s.http
            .put(s.url(path))
            .bearer_auth(token)
            .header("content-type", content_type)
            .body(body),
    )
}

fn query(s: &Server, token: &str, sql: &str) -> Value {
    let (status, out) = s.post_json("/api/query", token, &json!({"sql": sql}));
    assert_eq!(status, 200, "{sql}: {out}");
    out
}

#[test]
fn uploads_replace_a_local_tables_data_whole_or_not_at_all() {
    for backend in backends() {
        let s = Server::start_with(backend, &[("SVC_UPLOAD_MAX_BYTES", "200000")]);
        let admin = s.admin_token();
        let analyst = s.user_token("ana@example.com", false);

        // A new id without source_type is a local table; it has no data yet.
        let (status, row) = s.post_json(
            "/api/admin/register-table",
            &admin,
            &json!({"id": "orders"}),
        );
        assert_eq!(status, 201, "{row}");
        assert_eq!(
            (row["source_type"].as_str(), row["has_data"].as_bool()),
            (Some("local"), Some(false)),
            "{row}"
        );

        // CSV, converted on the server; the inferred columns come back.
        let csv = "id,customer,amount,day\n1,ann,2.5,2026-01-01\n2,bob,,2026-01-02\n3,\"c, d\",7,2026-01-03\n";
        let (status, up) = put(
            &s,
            &admin,
            "/api/admin/tables/orders/data",
            "text/csv",
            csv.into(),
        );
        assert_eq!(status, 200, "{up}");
        assert_eq!(
            (up["rows"].as_u64(), up["format"].as_str()),
            (Some(3), Some("csv"))
        );
        let types: Vec<(String, String)> = up["columns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["name"].as_str().unwrap().into(),
                    c["type"].as_str().unwrap().into(),
                )
            })
            .collect();
        assert_eq!(
            types,
            [
                ("id".to_string(), "Int64".to_string()),
                ("customer".into(), "Utf8".into()),
                ("amount".into(), "Float64".into()),
                ("day".into(), "Date32".into())
            ]
        );
        let out = query(
            &s,
            &admin,
            "SELECT customer, amount FROM orders ORDER BY id",
        );
        assert_eq!(
            out["rows"],
            json!([["ann", 2.5], ["bob", null], ["c, d", 7.0]])
        );
        // The catalog's WHERE examples come from the new file's columns and values, and run.
        let row = s.catalog_row(&admin, "orders").unwrap();
        assert_eq!(
            row["where_examples"],
            json!(["day >= DATE '2025-12-27'", "amount > 4.75"]),
            "{row}"
        );
        for ex in row["where_examples"].as_array().unwrap() {
            let sql = format!(
                "SELECT count(*) AS n FROM orders WHERE {}",
                ex.as_str().unwrap()
            );
            assert!(
                query(&s, &admin, &sql)["rows"][0][0].as_u64().unwrap() > 0,
                "{sql}"
            );
        }
        let (_, row) = s.post_json(
            "/api/admin/register-table",
            &admin,
            &json!({"id": "orders"}),
        );
        assert_eq!(
            (row["has_data"].as_bool(), row["rows"].as_u64()),
            (Some(true), Some(3)),
            "{row}"
        );
        assert!(row["bytes"].as_u64().unwrap() > 0);

        // Newline-delimited JSON by ?format=, replacing the columns too (caches follow).
        let nd = "{\"k\": \"a\", \"n\": 1}\n{\"k\": \"b\", \"n\": 2}\n";
        let (status, up) = put(
            &s,
            &admin,
            "/api/admin/tables/orders/data?format=ndjson",
            "application/octet-stream",
            nd.into(),
        );
        assert_eq!(status, 200, "{up}");
        let (status, schema) = s.get_json("/api/v2/schema/orders", &admin);
        assert_eq!(status, 200);
        let names: Vec<&str> = schema["columns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["k", "n"]);
        assert_eq!(
            query(&s, &admin, "SELECT sum(n) AS s FROM orders")["rows"],
            json!([[3]])
        );

        // Parquet as it is.
        let scratch = TempDir::new();
        let file = write_parquet(&scratch.0, "local", "x", 40, "p");
        let (status, up) = put(
            &s,
            &admin,
            "/api/admin/tables/orders/data",
            "application/vnd.apache.parquet",
            std::fs::read(&file).unwrap(),
        );
        assert_eq!((status, up["rows"].as_u64()), (200, Some(40)), "{up}");

        // Bad uploads: each refused in the envelope, the table keeps its 40 rows.
        let cases: [(&str, &str, Vec<u8>, u16); 6] = [
            (
                "not parquet",
                "/api/admin/tables/orders/data",
                b"id\n1\n".to_vec(),
                422,
            ),
            (
                "bad json",
                "/api/admin/tables/orders/data?format=ndjson",
                b"{\"k\": \n".to_vec(),
                422,
            ),
            (
                "empty",
                "/api/admin/tables/orders/data?format=csv",
                Vec::new(),
                422,
            ),
            (
                "too large",
                "/api/admin/tables/orders/data?format=csv",
                vec![b'1'; 300_000],
                413,
            ),
            (
                "unknown table",
                "/api/admin/tables/nope/data?format=csv",
                b"a\n1\n".to_vec(),
                404,
            ),
            (
                "internal table",
                "/api/admin/tables/svc_audit/data?format=csv",
                b"a\n1\n".to_vec(),
                409,
            ),
        ];
        for (what, path, body, want) in cases {
            let (status, resp) = put(&s, &admin, path, "application/octet-stream", body);
            assert_eq!(status, want, "{what}: {resp}");
            assert!(
                resp["detail"].is_object() || resp["detail"].is_string(),
                "{what}: {resp}"
            );
        }
        let (_, bad) = put(
            &s,
            &admin,
            "/api/admin/tables/orders/data",
            "application/octet-stream",
            b"nope".to_vec(),
        );
        assert_eq!(bad["detail"]["error"], "invalid_data", "{bad}");
        assert!(
            bad["detail"]["message"]
                .as_str()
                .unwrap()
                .contains("not valid parquet"),
            "{bad}"
        );
        assert_eq!(
            query(&s, &admin, "SELECT count(*) AS n FROM orders")["rows"],
            json!([[40]])
        );
        // Analysts cannot upload.
        let (status, _) = put(
            &s,
            &analyst,
            "/api/admin/tables/orders/data?format=csv",
            "text/csv",
            b"a\n1\n".to_vec(),
        );
        assert_eq!(status, 403);
        // Nothing is left behind in the data directory.
        let data = s.dir.0.join("extracts/local/data");
        let names: Vec<String> = std::fs::read_dir(&data)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["orders.parquet"], "{names:?}");

        // Every attempt is audited, with its outcome.
        let audit = s.audit_rows("table.upload", 10);
        let ok = audit.iter().filter(|r| r["result"] == "success").count();
        assert_eq!(ok, 3, "{audit:?}");
        assert!(
            audit
                .iter()
                .any(|r| r["params"].as_str().unwrap().contains("\"rows\":40")),
            "{audit:?}"
        );
    }
}

#[test]
fn registration_reports_and_checks_the_data_file() {
    let s = Server::start();
    let admin = s.admin_token();
    write_parquet(&s.dir.0, "local", "good", 12, "g");
    let (status, row) = s.post_json(
        "/api/admin/register-table",
        &admin,
        &json!({"id": "good", "source_type": "local"}),
    );
    assert_eq!(status, 201);
    assert_eq!(
        (row["has_data"].as_bool(), row["rows"].as_u64()),
        (Some(true), Some(12)),
        "{row}"
    );

    // A present file that is not parquet is refused at registration, naming the problem.
    let data = s.dir.0.join("extracts/local/data");
    std::fs::write(data.join("broken.parquet"), b"not parquet at all").unwrap();
    let (status, resp) = s.post_json(
        "/api/admin/register-table",
        &admin,
        &json!({"id": "broken"}),
    );
    assert_eq!(status, 422, "{resp}");
    assert_eq!(resp["detail"]["error"], "unreadable_data");
    assert!(
        resp["detail"]["message"]
            .as_str()
            .unwrap()
            .contains("not a readable parquet file"),
        "{resp}"
    );
    assert!(s
        .query("SELECT id FROM table_registry WHERE id = 'broken'")
        .is_empty());

    // source_type local with a source_table is refused rather than ignored.
    let (status, resp) = s.post_json(
        "/api/admin/register-table",
        &admin,
        &json!({"id": "other", "source_table": "elsewhere"}),
    );
    assert_eq!(status, 422, "{resp}");
    assert!(
        resp["detail"]
            .as_str()
            .unwrap()
            .contains("source_table does not apply"),
        "{resp}"
    );

    // A table id with a space names the rule, not a regular expression.
    let (status, resp) = s.post_json(
        "/api/admin/register-table",
        &admin,
        &json!({"id": "my table"}),
    );
    assert_eq!(status, 422, "{resp}");
    let msg = resp["detail"].as_str().unwrap();
    assert!(
        msg.contains("letters, digits") && !msg.contains("[A-Za-z"),
        "{msg}"
    );

    // The registry lists what each data file holds, and a remote table has none here.
    s.post_json(
        "/api/admin/register-table",
        &admin,
        &json!({"id": "wh", "source_type": "warehouse", "bucket": "b", "query_mode": "remote"}),
    );
    let (_, list) = s.get_json("/api/admin/registry", &admin);
    let find = |id: &str| {
        list["tables"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["id"] == id)
            .cloned()
            .unwrap()
    };
    assert_eq!(find("good")["rows"].as_u64(), Some(12));
    assert!(find("wh")["has_data"].is_null(), "{list}");
}

#[test]
fn svc_admin_upload_sends_a_file_and_prints_its_columns() {
    let s = Server::start();
    let admin = s.admin_token();
    let home = TempDir::new();
    let cfg = home.0.as_path();
    let o = svc(
        cfg,
        &["--server", &s.base, "--token", &admin, "auth", "login"],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = svc(cfg, &["admin", "register-table", "events"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));

    let file = home.0.join("events.jsonl");
    let mut text = String::new();
    for i in 0..5000 {
        text.push_str(&format!("{{\"id\": {i}, \"kind\": \"k{}\"}}\n", i % 7));
    }
    std::fs::write(&file, text).unwrap();
    let o = svc(cfg, &["admin", "upload", "events", file.to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("uploaded events: 5000 rows, 2 columns"),
        "{}",
        stderr(&o)
    );
    assert!(
        stdout(&o).contains("kind") && stdout(&o).contains("Utf8"),
        "{}",
        stdout(&o)
    );

    let o = svc(
        cfg,
        &[
            "query",
            "SELECT count(DISTINCT kind) AS k FROM events",
            "-f",
            "csv",
        ],
    );
    assert_eq!(
        (code(&o), stdout(&o).as_str()),
        (0, "k\n7\n"),
        "{}",
        stderr(&o)
    );

    // Seven distinct kinds in 5,000 rows: an equality with a value the table holds (the id
    // column gets no numeric bound).
    let row = s.catalog_row(&admin, "events").unwrap();
    assert_eq!(row["where_examples"], json!(["kind = 'k0'"]), "{row}");

    // --json; an unknown extension needs --format; a bad file exits 9 with the server's reason.
    let o = svc(
        cfg,
        &[
            "admin",
            "upload",
            "events",
            file.to_str().unwrap(),
            "--json",
        ],
    );
    let answer: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(answer["rows"], 5000);
    let odd = home.0.join("events.data");
    std::fs::write(&odd, "id\n1\n").unwrap();
    let o = svc(cfg, &["admin", "upload", "events", odd.to_str().unwrap()]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("--format"), "{}", stderr(&o));
    let o = svc(
        cfg,
        &[
            "admin",
            "upload",
            "events",
            odd.to_str().unwrap(),
            "--format",
            "parquet",
        ],
    );
    assert_eq!(code(&o), 9, "{}", stderr(&o));
    assert!(stderr(&o).contains("invalid_data"), "{}", stderr(&o));
}
