//! Catalog, schema, sample and download over real parquet files.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::json;
use svc_plugin_api::arrow::array::{Float64Array, Int64Array, StringArray};
use svc_plugin_api::arrow::datatypes::{DataType, Field, Schema};
use svc_plugin_api::datafusion::parquet::arrow::ArrowWriter;
use svc_plugin_api::RecordBatch;

use crate::support::Server;

/// Writes `extracts/<source_type>/data/<id>.parquet` with `rows` rows: id, name, score (the
/// first three scores are NaN, +inf and -inf).
pub(crate) fn write_parquet(
    data_dir: &Path,
    source_type: &str,
    id: &str,
    rows: i64,
    tag: &str,
) -> PathBuf {
    write_parquet_groups(data_dir, source_type, id, rows, tag, 1 << 20)
}

/// Like [`write_parquet`], in row groups of `group_rows` rows.
pub(crate) fn write_parquet_groups(
    data_dir: &Path,
    source_type: &str,
    id: &str,
    rows: i64,
    tag: &str,
    group_rows: usize,
) -> PathBuf {
    let path = data_dir
        .join("extracts")
        .join(source_type)
        .join("data")
        .join(format!("{id}.parquet"));
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
        Field::new("score", DataType::Float64, true),
    ]));
    let scores = (0..rows).map(|i| match i {
        0 => f64::NAN,
        1 => f64::INFINITY,
        2 => f64::NEG_INFINITY,
        _ => i as f64 / 2.0,
    });
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(Int64Array::from_iter_values(0..rows)),
            Arc::new(StringArray::from_iter_values(
                (0..rows).map(|i| format!("{tag}{i}")),
            )),
            Arc::new(Float64Array::from_iter_values(scores)),
        ],
    )
    .unwrap();
    let props = svc_plugin_api::datafusion::parquet::file::properties::WriterProperties::builder()
        .set_max_row_group_row_count(Some(group_rows))
        .build();
    let mut w =
        ArrowWriter::try_new(std::fs::File::create(&path).unwrap(), schema, Some(props)).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    path
}

pub(crate) fn register(s: &Server, admin: &str, body: serde_json::Value) {
    let (status, resp) = s.post_json("/api/admin/register-table", admin, &body);
    assert!(status == 201 || status == 200, "{resp}");
}

#[test]
fn catalog_schema_and_sample_read_real_parquet() {
    let s = Server::start();
    let admin = s.admin_token();
    write_parquet(&s.dir.0, "local", "orders", 50, "o");
    register(
        &s,
        &admin,
        json!({"id": "orders", "name": "Orders", "source_type": "local", "description": "All orders"}),
    );
    register(
        &s,
        &admin,
        json!({"id": "events", "source_type": "warehouse", "bucket": "analytics", "query_mode": "remote"}),
    );

    let (status, cat) = s.get_json("/api/v2/catalog", &admin);
    assert_eq!(status, 200, "{cat}");
    assert!(cat["server_time"].is_string());
    let tables = cat["tables"].as_array().unwrap();
    let orders = tables.iter().find(|t| t["id"] == "orders").unwrap();
    assert_eq!(orders["rough_size_hint"], "small");
    assert_eq!(orders["metadata_freshness"], "not_applicable");
    assert_eq!(orders["description"], "All orders");
    assert!(orders["fetch_via"].as_str().unwrap().contains("svc query"));
    let keys: Vec<&String> = orders.as_object().unwrap().keys().collect();
    assert_eq!(keys.len(), 15, "{keys:?}");
    let events = tables.iter().find(|t| t["id"] == "events").unwrap();
    assert_eq!(
        (
            events["metadata_freshness"].as_str(),
            events["where_examples"].as_array().unwrap().len()
        ),
        (Some("never_fetched"), 0)
    );
    assert!(events["fetch_via"]
        .as_str()
        .unwrap()
        .starts_with("svc snapshot create events"));
    let internal: Vec<&str> = tables
        .iter()
        .filter(|t| t["source_type"] == "internal")
        .map(|t| t["id"].as_str().unwrap())
        .collect();
    assert_eq!(internal.len(), 3);

    let (status, schema) = s.get_json("/api/v2/schema/orders", &admin);
    assert_eq!(status, 200, "{schema}");
    let cols: Vec<(&str, &str, bool)> = schema["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap(),
                c["type"].as_str().unwrap(),
                c["nullable"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        cols,
        [
            ("id", "Int64", false),
            ("name", "Utf8", true),
            ("score", "Float64", true)
        ]
    );

    let (status, sample) = s.get_json("/api/v2/sample/orders?n=4", &admin);
    assert_eq!(status, 200, "{sample}");
    assert_eq!(
        (sample["table_id"].as_str(), sample["source"].as_str()),
        (Some("orders"), Some("local"))
    );
    let rows = sample["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 4);
    assert_eq!(rows[0], json!({"id": 0, "name": "o0", "score": null}));
    assert!(rows[1]["score"].is_null() && rows[2]["score"].is_null());
    assert_eq!(rows[3]["score"], 1.5);
    let (_, default) = s.get_json("/api/v2/sample/orders", &admin);
    assert_eq!(default["rows"].as_array().unwrap().len(), 5);

    let audit = s.audit_rows("catalog.sample", 2);
    let params: serde_json::Value =
        serde_json::from_str(audit[0]["params"].as_str().unwrap()).unwrap();
    assert_eq!(params["rows_returned"], 4);
    assert!(params["duration_ms"].is_number());
    assert_eq!(audit[0]["resource"], "table:orders");
    assert_eq!(s.audit_rows("catalog.list", 1)[0]["result"], "success");
    assert_eq!(s.audit_rows("catalog.schema", 1)[0]["result"], "success");

    // A remote warehouse table needs the warehouse configured.
    let (status, body) = s.get_json("/api/v2/sample/events", &admin);
    assert_eq!(status, 500, "{body}");
    assert_eq!(body["detail"]["error"], "not_configured");
    assert!(body["detail"]["details"]["hint"]
        .as_str()
        .unwrap()
        .contains("data_source.warehouse"));
}

#[test]
fn grants_decide_visibility_and_a_cached_sample_never_outlives_a_revoke() {
    let s = Server::start();
    let admin = s.admin_token();
    write_parquet(&s.dir.0, "local", "orders", 10, "o");
    register(&s, &admin, json!({"id": "orders", "source_type": "local"}));
    let user = s.user_token("ana@example.com", false);
    let visible = |token: &str| {
        let (_, cat) = s.get_json("/api/v2/catalog", token);
        cat["tables"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["id"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };

    let ids = visible(&user);
    assert!(!ids.contains(&"orders".into()) && ids.len() == 3, "{ids:?}");
    let (status, body) = s.get_json("/api/v2/sample/orders", &user);
    assert_eq!(
        (status, body["detail"].as_str()),
        (403, Some("Access denied to table 'orders'"))
    );
    assert_eq!(s.get_json("/api/v2/schema/orders", &user).0, 403);

    // Changes through this server apply to its very next request, although it has just
    // cached this caller's (empty) grant set.
    let (_, group) = s.post_json("/api/admin/groups", &admin, &json!({"name": "analysts"}));
    let group_id = group["id"].as_str().unwrap().to_string();
    let (status, _) = s.post_json(
        &format!("/api/admin/groups/{group_id}/members"),
        &admin,
        &json!({"email": "ana@example.com"}),
    );
    assert!(status < 300, "{status}");
    let grant = |s: &Server| {
        let (status, g) = s.post_json(
            "/api/admin/grants",
            &admin,
            &json!({"group_id": group_id, "resource_id": "orders"}),
        );
        assert_eq!(status, 201, "{g}");
        g["id"].as_str().unwrap().to_string()
    };
    let grant_id = grant(&s);
    assert!(visible(&user).contains(&"orders".into()));
    assert_eq!(s.get_json("/api/v2/sample/orders?n=3", &user).0, 200);
    assert_eq!(
        s.get_json("/api/v2/sample/orders?n=3", &user).0,
        200,
        "now cached"
    );

    assert_eq!(
        s.delete(&format!("/api/admin/grants/{grant_id}"), &admin).0,
        204
    );
    assert_eq!(
        s.get_json("/api/v2/sample/orders?n=3", &user).0,
        403,
        "the cache sits behind the check"
    );
    assert_eq!(s.get_json("/api/v2/schema/orders", &user).0, 403);
    assert!(!visible(&user).contains(&"orders".into()));
    let denied = s.audit_rows("catalog.sample", 4);
    assert_eq!(
        denied.iter().filter(|r| r["result"] == "error.403").count(),
        2
    );

    // A revoke by another process (a shell command on the store) applies within the
    // identity bound of 2 s.
    grant(&s);
    assert_eq!(s.get_json("/api/v2/sample/orders?n=3", &user).0, 200);
    s.cli_ok(&[
        "grants", "remove", "--group", "analysts", "--table", "orders",
    ]);
    let revoked = std::time::Instant::now();
    while s.get_json("/api/v2/sample/orders?n=3", &user).0 != 403 {
        assert!(
            revoked.elapsed() < std::time::Duration::from_secs(4),
            "cached sample still served 4 s after a revoke (bound: 2 s)"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Catalog bodies are cached per caller view; under load, each grant change and registry
/// change shows in the very next catalog, and one caller's body never reaches another.
#[test]
fn cached_catalogs_follow_grants_and_registry_changes_under_load() {
    let s = Server::start();
    let admin = s.admin_token();
    write_parquet(&s.dir.0, "local", "orders", 10, "o");
    register(&s, &admin, json!({"id": "orders", "source_type": "local"}));
    let ana = s.user_token("ana@example.com", false);
    let bob = s.user_token("bob@example.com", false);
    let (_, group) = s.post_json("/api/admin/groups", &admin, &json!({"name": "analysts"}));
    let group_id = group["id"].as_str().unwrap().to_string();
    let (status, _) = s.post_json(
        &format!("/api/admin/groups/{group_id}/members"),
        &admin,
        &json!({"email": "ana@example.com"}),
    );
    assert!(status < 300, "{status}");
    let catalog = |token: &str| {
        let (status, cat) = s.get_json("/api/v2/catalog", token);
        assert_eq!(status, 200, "{cat}");
        assert!(cat["server_time"].as_str().is_some(), "{cat}");
        cat["tables"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                (
                    t["id"].as_str().unwrap().to_string(),
                    t["description"].as_str().unwrap().to_string(),
                )
            })
            .collect::<Vec<_>>()
    };
    let sees_orders = |token: &str| catalog(token).iter().any(|(id, _)| id == "orders");

    let stop = std::sync::atomic::AtomicBool::new(false);
    /// Stops the load threads when the rounds end, and also when one of them panics: the
    /// scope waits for its threads, so without this a failed assertion would hang the test.
    struct StopOnDrop<'a>(&'a std::sync::atomic::AtomicBool);
    impl Drop for StopOnDrop<'_> {
        fn drop(&mut self) {
            self.0.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
    std::thread::scope(|scope| {
        let load: Vec<_> = [ana.as_str(), bob.as_str(), admin.as_str()]
            .into_iter()
            .map(|token| {
                let (stop, catalog, bob) = (&stop, &catalog, bob.as_str());
                scope.spawn(move || {
                    let mut served = 0;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let ids = catalog(token);
                        if token == bob {
                            assert!(ids.iter().all(|(id, _)| id != "orders"), "{ids:?}");
                        }
                        served += 1;
                    }
                    served
                })
            })
            .collect();
        let stopper = StopOnDrop(&stop);
        for round in 0..8 {
            let (status, g) = s.post_json(
                "/api/admin/grants",
                &admin,
                &json!({"group_id": group_id, "resource_id": "orders"}),
            );
            assert_eq!(status, 201, "{g}");
            assert!(sees_orders(&ana), "round {round}: granted, not listed");
            let grant_id = g["id"].as_str().unwrap();
            assert_eq!(
                s.delete(&format!("/api/admin/grants/{grant_id}"), &admin).0,
                204
            );
            assert!(!sees_orders(&ana), "round {round}: revoked, still listed");
            let description = format!("round {round}");
            let (status, _) = s.put_json(
                "/api/admin/registry/orders",
                &admin,
                &json!({ "description": description }),
            );
            assert_eq!(status, 200);
            assert!(
                catalog(&admin).contains(&("orders".into(), description.clone())),
                "round {round}: old description served"
            );
        }
        drop(stopper);
        for l in load {
            assert!(l.join().unwrap() > 0);
        }
    });
}

#[test]
fn registry_changes_flush_cached_samples_and_schemas() {
    let s = Server::start();
    let admin = s.admin_token();
    write_parquet(&s.dir.0, "local", "orders", 10, "old");
    register(&s, &admin, json!({"id": "orders", "source_type": "local"}));
    let (_, first) = s.get_json("/api/v2/sample/orders?n=2", &admin);
    assert_eq!(first["rows"][0]["name"], "old0");
    write_parquet(&s.dir.0, "local", "orders", 10, "new");
    let (_, cached) = s.get_json("/api/v2/sample/orders?n=2", &admin);
    assert_eq!(cached["rows"][0]["name"], "old0", "served from the cache");
    let (status, _) = s.put_json(
        "/api/admin/registry/orders",
        &admin,
        &json!({"description": "refreshed"}),
    );
    assert_eq!(status, 200);
    let (_, fresh) = s.get_json("/api/v2/sample/orders?n=2", &admin);
    assert_eq!(fresh["rows"][0]["name"], "new0");
    let (_, cat) = s.get_json("/api/v2/catalog", &admin);
    assert_eq!(
        cat["tables"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["id"] == "orders")
            .unwrap()["description"],
        "refreshed"
    );
}

#[test]
fn bad_input_on_discovery_endpoints() {
    let s = Server::start();
    let admin = s.admin_token();
    write_parquet(&s.dir.0, "local", "orders", 10, "o");
    register(&s, &admin, json!({"id": "orders", "source_type": "local"}));

    let (status, body) = s.get_json("/api/v2/sample/nope", &admin);
    assert_eq!(
        (status, body["detail"].as_str()),
        (404, Some("Table 'nope' is not registered"))
    );
    for n in ["0", "101", "abc", "-1"] {
        let (status, body) = s.get_json(&format!("/api/v2/sample/orders?n={n}"), &admin);
        assert_eq!(status, 422, "n={n}: {body}");
    }
    for path in ["..", "%2e%2e", "..%2fx", "a%2fb", "x%00y", "%00"] {
        let (status, _) = s.get_json(&format!("/api/v2/sample/{path}"), &admin);
        assert_eq!(status, 404, "{path}");
    }
    // Registered, but no file yet: 404 naming the table.
    register(&s, &admin, json!({"id": "later", "source_type": "local"}));
    let (status, body) = s.get_json("/api/v2/sample/later", &admin);
    assert_eq!(status, 404, "{body}");
    assert!(body["detail"]["message"]
        .as_str()
        .unwrap()
        .contains("'later'"));
    assert_eq!(s.get_json("/api/v2/schema/later", &admin).0, 404);

    // Truncated and non-parquet files: a 500 envelope naming the table; the server stays up.
    // (Registration refuses an unreadable file, so the file breaks after it.)
    let path = write_parquet(&s.dir.0, "local", "broken", 100, "b");
    register(&s, &admin, json!({"id": "broken", "source_type": "local"}));
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let (status, body) = s.get_json("/api/v2/sample/broken", &admin);
    assert_eq!(
        (status, body["detail"]["error"].as_str()),
        (500, Some("corrupt_data")),
        "{body}"
    );
    assert!(body["detail"]["message"]
        .as_str()
        .unwrap()
        .contains("'broken'"));
    std::fs::write(&path, b"this is not parquet").unwrap();
    assert_eq!(s.get_json("/api/v2/schema/broken", &admin).0, 500);
    let (status, _) = s.send(s.http.get(s.url("/api/health")));
    assert_eq!(status, 200, "still serving");
    assert_eq!(s.get_json("/api/v2/sample/orders", &admin).0, 200);
    let errors = s.audit_rows("catalog.sample", 3);
    assert!(errors.iter().any(|r| r["result"] == "error.500"));
}

#[test]
fn internal_tables_filter_rows_per_caller() {
    let s = Server::start();
    let admin = s.admin_token();
    let user = s.user_token("bo@example.com", false);
    let (_, me) = s.get_json("/api/me", &user);
    let user_id = me["id"].as_str().unwrap().to_string();
    // Both callers leave audit rows.
    s.get_json("/api/v2/catalog", &admin);
    s.get_json("/api/v2/catalog", &user);
    s.audit_rows("catalog.list", 2);

    let (status, mine) = s.get_json("/api/v2/sample/svc_audit?n=100", &user);
    assert_eq!(status, 200, "{mine}");
    let rows = mine["rows"].as_array().unwrap();
    assert!(!rows.is_empty());
    assert!(
        rows.iter().all(|r| r["user_id"] == user_id.as_str()),
        "only own rows: {rows:?}"
    );
    let (_, all) = s.get_json("/api/v2/sample/svc_audit?n=100", &admin);
    assert!(all["rows"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["user_id"] != user_id.as_str()));

    let (status, schema) = s.get_json("/api/v2/schema/svc_audit", &user);
    assert_eq!(status, 200);
    let names: Vec<&str> = schema["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"action") && names.contains(&"correlation_id"),
        "{names:?}"
    );
    assert_eq!(s.get_json("/api/v2/sample/svc_sessions", &user).0, 200);

    // An e-mail no identity pattern admits still reads its own rows: sessions, telemetry
    // and audit all filter on the user id, bound as a parameter, never on the e-mail.
    let odd = s.user_token("o'neil@example.com", false);
    let (status, body) = s.get_json("/api/v2/sample/svc_sessions", &odd);
    assert_eq!((status, &body["rows"]), (200, &json!([])), "{body}");
    let (status, body) = s.get_json("/api/v2/sample/svc_audit?n=100", &odd);
    assert_eq!(status, 200, "{body}");
    assert!(
        body["rows"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["user_id"] != user_id.as_str()),
        "{body}"
    );
}

#[test]
fn download_streams_the_file_with_an_etag() {
    let s = Server::start();
    let admin = s.admin_token();
    let path = write_parquet(&s.dir.0, "local", "orders", 1000, "o");
    register(&s, &admin, json!({"id": "orders", "source_type": "local"}));
    let r = s
        .http
        .get(s.url("/api/data/orders/download"))
        .bearer_auth(&admin)
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let etag = r.headers()["etag"].to_str().unwrap().to_string();
    assert!(r.headers()["content-disposition"]
        .to_str()
        .unwrap()
        .contains("orders.parquet"));
    let body = r.bytes().unwrap();
    assert_eq!(body.as_ref(), std::fs::read(&path).unwrap().as_slice());

    let r = s
        .http
        .get(s.url("/api/data/orders/download"))
        .bearer_auth(&admin)
        .header("if-none-match", &etag)
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 304);
    write_parquet(&s.dir.0, "local", "orders", 1001, "o");
    let r = s
        .http
        .get(s.url("/api/data/orders/download"))
        .bearer_auth(&admin)
        .header("if-none-match", &etag)
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200, "a changed file is sent again");

    let user = s.user_token("cy@example.com", false);
    assert_eq!(s.get_json("/api/data/orders/download", &user).0, 403);
    assert_eq!(s.get_json("/api/data/nope/download", &admin).0, 404);
    register(
        &s,
        &admin,
        json!({"id": "events", "source_type": "warehouse", "query_mode": "remote"}),
    );
    assert_eq!(s.get_json("/api/data/events/download", &admin).0, 404);
    let rows = s.audit_rows("data.download", 3);
    let first: serde_json::Value =
        serde_json::from_str(rows[0]["params"].as_str().unwrap()).unwrap();
    assert_eq!(first["bytes"].as_u64(), Some(body.len() as u64));
}

#[test]
fn a_table_registered_by_another_process_is_found_at_once() {
    let s = Server::start();
    let admin = s.admin_token();
    // The server now holds a registry snapshot without `late`.
    assert!(s.catalog_row(&admin, "late").is_none());
    write_parquet(&s.dir.0, "local", "late", 4, "l");
    crate::support::exec_store(&s.store_url(), &[
        "INSERT INTO table_registry (id, name, source_type, query_mode) VALUES ('late', 'late', 'local', 'local')",
    ]);
    let (status, body) = s.get_json("/api/v2/sample/late?n=2", &admin);
    assert_eq!(
        (status, body["rows"][1]["name"].as_str()),
        (200, Some("l1"))
    );
    assert!(
        s.catalog_row(&admin, "late").is_some(),
        "the miss refreshed the snapshot"
    );
}
