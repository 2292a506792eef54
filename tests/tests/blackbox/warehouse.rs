//! The warehouse driver against the BigQuery-compatible emulator: sample, schema, metadata
//! refresh of tables and views, estimates, unsafe identifiers and an emulator that goes away.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::discovery::{register, write_parquet};
use crate::emulator::{Emulator, Fault, FaultProxy, PROJECT};
use crate::support::{Backend, Server};

#[test]
fn remote_rows_sample_describe_refresh_and_estimate_through_the_emulator() {
    let Some(em) = Emulator::start() else {
        return;
    };
    em.dataset("shop");
    em.sql("CREATE TABLE shop.orders (id INT64, name STRING, amount FLOAT64, event_date DATE, ts TIMESTAMP)");
    em.sql("INSERT INTO shop.orders VALUES (1, 'a', 1.5, DATE '2026-01-02', TIMESTAMP '2026-01-02 03:04:05 UTC'), (2, NULL, NULL, NULL, NULL)");
    em.sql("CREATE VIEW shop.big_orders AS SELECT id FROM shop.orders WHERE amount > 1");
    em.sql("CREATE MATERIALIZED VIEW shop.order_ids AS SELECT id FROM shop.orders");
    let mut s = Server::start_with(
        Backend::Sqlite,
        &[
            ("SVC_WAREHOUSE_ENDPOINT", em.endpoint.as_str()),
            ("SVC_WAREHOUSE_PROJECT", PROJECT),
        ],
    );
    let admin = s.admin_token();
    for id in ["orders", "big_orders"] {
        register(
            &s,
            &admin,
            json!({"id": id, "source_type": "warehouse", "bucket": "shop", "query_mode": "remote"}),
        );
    }

    let (status, body) = s.get_json("/api/v2/sample/orders?n=5", &admin);
    assert_eq!(status, 200, "{body}");
    let rows = body["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{body}");
    let first = rows.iter().find(|r| r["id"] == 1).unwrap();
    assert_eq!(
        (&first["name"], &first["amount"], &first["event_date"]),
        (&json!("a"), &json!(1.5), &json!("2026-01-02"))
    );
    assert!(
        first["ts"]
            .as_str()
            .unwrap()
            .starts_with("2026-01-02T03:04:05"),
        "{first}"
    );
    assert!(rows.iter().any(|r| r["id"] == 2 && r["name"].is_null()));

    let (status, schema) = s.get_json("/api/v2/schema/orders", &admin);
    assert_eq!(status, 200, "{schema}");
    assert_eq!(schema["sql_flavor"], "bigquery");
    let types: Vec<(&str, &str)> = schema["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["name"].as_str().unwrap(), c["type"].as_str().unwrap()))
        .collect();
    assert_eq!(types[0], ("id", "Int64"));
    assert_eq!(types[3], ("event_date", "Date32"));
    assert!(types[4].1.starts_with("Timestamp"), "{types:?}");

    // Registration re-warms each row's metadata in the background.
    let warmed = Instant::now();
    let (orders, view) = loop {
        let o = s.catalog_row(&admin, "orders").unwrap();
        let v = s.catalog_row(&admin, "big_orders").unwrap();
        if o["metadata_freshness"] == "fresh" && v["metadata_freshness"] == "fresh" {
            break (o, v);
        }
        assert!(warmed.elapsed() < Duration::from_secs(20), "{o} {v}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(orders["entity_type"], "BASE TABLE");
    assert_eq!(view["entity_type"], "VIEW");
    assert!(
        view["rows"].is_null() && view["size_bytes"].is_null(),
        "{view}"
    );
    // Generated from the table's columns: a date range and a numeric bound (not on id),
    // each a filter the warehouse accepts.
    let examples: Vec<&str> = orders["where_examples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    assert_eq!(examples.len(), 2, "{orders}");
    assert!(
        examples[0].starts_with("event_date >= DATE '"),
        "{examples:?}"
    );
    assert_eq!(examples[1], "amount > 0");
    for ex in &examples {
        let (status, out) = s.post_json(
            "/api/v2/scan",
            &admin,
            &json!({"table_id": "orders", "where": ex, "format": "json"}),
        );
        assert_eq!(status, 200, "{ex}: {out}");
    }

    let (status, e) = s.post_json(
        "/api/v2/scan/estimate",
        &admin,
        &json!({"table_id": "orders", "select": ["id"]}),
    );
    assert_eq!(status, 200, "{e}");
    assert_eq!(e["guard_bytes"], 5u64 << 30);
    assert_eq!(e["would_exceed_guard"], false);

    // The metadata cache endpoints.
    let (status, m) = s.post_json(
        "/api/v2/metadata-cache/refresh?table=big_orders",
        &admin,
        &json!({}),
    );
    assert_eq!(status, 200, "{m}");
    assert_eq!(
        (m["entity_type"].as_str(), m["metadata_freshness"].as_str()),
        (Some("VIEW"), Some("fresh"))
    );
    assert_eq!(
        s.post_json(
            "/api/v2/metadata-cache/refresh?table=nope",
            &admin,
            &json!({})
        )
        .0,
        404
    );
    let ana = s.user_token("ana@example.com", false);
    assert_eq!(
        s.post_json(
            "/api/v2/metadata-cache/refresh?table=orders",
            &ana,
            &json!({})
        )
        .0,
        403
    );
    let (status, st) = s.get_json("/api/v2/metadata-cache/status", &ana);
    assert_eq!(
        (status, &st["tables"]),
        (200, &json!([])),
        "ana can see no remote table"
    );
    let (_, st) = s.get_json("/api/v2/metadata-cache/status", &admin);
    let ids: Vec<&str> = st["tables"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["table_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["big_orders", "orders"]);
    let (status, run) = s.post_json(
        "/api/admin/run-warehouse-metadata-refresh",
        &admin,
        &json!({}),
    );
    assert_eq!((status, &run["tables"]), (202, &json!(2)), "{run}");
    let again = s
        .post_json(
            "/api/admin/run-warehouse-metadata-refresh",
            &admin,
            &json!({}),
        )
        .0;
    assert!(again == 202 || again == 409, "{again}");
    assert!(!s.audit_rows("metadata_cache.refresh", 3).is_empty());

    // The cache warmup: on demand with a server-sent event stream, and at every start.
    let (status, _) = s.post_json("/api/admin/cache-warmup/run", &admin, &json!({}));
    assert!(status == 202 || status == 409, "{status}");
    let events = s
        .http
        .get(s.url("/api/admin/cache-warmup/stream"))
        .bearer_auth(&admin)
        .send()
        .unwrap()
        .text()
        .unwrap();
    assert!(events.starts_with("event: snapshot"), "{events}");
    let done = Instant::now();
    let snapshot = loop {
        let (_, st) = s.get_json("/api/admin/cache-warmup/status", &admin);
        if st["running"] == false {
            break st;
        }
        assert!(done.elapsed() < Duration::from_secs(20), "{st}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let states: Vec<&str> = snapshot["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["fresh", "fresh"], "{snapshot}");
    assert_eq!(s.get_json("/api/admin/cache-warmup/status", &ana).0, 403);
    s.restart();
    let restarted = Instant::now();
    loop {
        let (_, st) = s.get_json("/api/admin/cache-warmup/status", &admin);
        if st["finished_at"].is_string() {
            assert_eq!(st["rows"].as_array().unwrap().len(), 2, "{st}");
            break;
        }
        assert!(
            restarted.elapsed() < Duration::from_secs(20),
            "no warmup after a restart: {st}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // SQL over the remote table, alone and joined with a local parquet table; a scan with a
    // predicate.
    write_parquet(&s.dir.0, "local", "customers", 5, "c");
    register(
        &s,
        &admin,
        json!({"id": "customers", "source_type": "local"}),
    );
    let (status, body) = s.post_json(
        "/api/query",
        &admin,
        &json!({"sql": "SELECT count(*) AS n, sum(amount) AS total FROM orders"}),
    );
    assert_eq!((status, &body["rows"]), (200, &json!([[2, 1.5]])), "{body}");
    let (status, body) = s.post_json(
        "/api/query",
        &admin,
        &json!({"sql": "SELECT o.id, c.name FROM orders o JOIN customers c ON o.id = c.id ORDER BY o.id"}),
    );
    assert_eq!(
        (status, &body["rows"]),
        (200, &json!([[1, "c1"], [2, "c2"]])),
        "{body}"
    );
    assert_eq!(s.audit_rows("query.remote", 1).len(), 1);
    assert_eq!(s.audit_rows("query.hybrid", 1).len(), 1);
    let (status, body) = s.post_json(
        "/api/v2/scan",
        &admin,
        &json!({"table_id": "orders", "select": ["id", "name"], "where": "amount > 1", "format": "json"}),
    );
    assert_eq!((status, &body["rows"]), (200, &json!([[1, "a"]])), "{body}");

    // Identifiers are checked before any SQL is built.
    let (status, _) = s.post_json(
        "/api/admin/register-table",
        &admin,
        &json!({"id": "sneaky", "source_type": "warehouse", "bucket": "shop", "source_table": "orders` WHERE 1=1 --", "query_mode": "remote"}),
    );
    if status < 300 {
        let (status, body) = s.get_json("/api/v2/sample/sneaky", &admin);
        assert_eq!(
            (status, &body["detail"]["error"]),
            (400, &json!("unsafe_identifier")),
            "{body}"
        );
    }

    // A materialized view is a view to the cache: no row count or size.
    register(
        &s,
        &admin,
        json!({"id": "order_ids", "source_type": "warehouse", "bucket": "shop", "query_mode": "remote"}),
    );
    let (status, mv) = s.post_json(
        "/api/v2/metadata-cache/refresh?table=order_ids",
        &admin,
        &json!({}),
    );
    assert_eq!(status, 200, "{mv}");
    assert_eq!(mv["entity_type"], "MATERIALIZED VIEW", "{mv}");
    assert!(mv["rows"].is_null() && mv["size_bytes"].is_null(), "{mv}");

    // The emulator goes away: a clear 502, and the server carries on.
    drop(em);
    let (status, body) = s.get_json("/api/v2/sample/orders?n=1", &admin);
    assert_eq!(
        (status, &body["detail"]["error"]),
        (502, &json!("warehouse_upstream_error")),
        "{body}"
    );
    assert_eq!(s.get_json("/api/health", "").0, 200);
}

#[test]
fn the_size_guard_and_upstream_errors_through_a_fault_injecting_proxy() {
    let Some(em) = Emulator::start() else {
        return;
    };
    em.dataset("shop");
    em.sql("CREATE TABLE shop.events (id INT64, kind STRING)");
    em.sql("INSERT INTO shop.events VALUES (1, 'a')");
    em.sql("CREATE VIEW shop.daily AS SELECT kind, count(*) AS n FROM shop.events GROUP BY kind");
    // Dry runs claim 10 GiB, above the default 5 GiB guard.
    let proxy = FaultProxy::start(&em.endpoint, Fault::DryRunBytes(10 << 30));
    let s = Server::start_with(
        Backend::Sqlite,
        &[
            ("SVC_WAREHOUSE_ENDPOINT", proxy.endpoint.as_str()),
            ("SVC_WAREHOUSE_PROJECT", PROJECT),
        ],
    );
    let admin = s.admin_token();
    for id in ["events", "daily"] {
        register(
            &s,
            &admin,
            json!({"id": id, "source_type": "warehouse", "bucket": "shop", "query_mode": "remote"}),
        );
    }
    // Wait for the re-warm to record the view's entity type.
    let warmed = Instant::now();
    while s.catalog_row(&admin, "daily").unwrap()["entity_type"] != "VIEW" {
        assert!(warmed.elapsed() < Duration::from_secs(20));
        std::thread::sleep(Duration::from_millis(200));
    }

    let (status, body) = s.post_json("/api/v2/scan", &admin, &json!({"table_id": "events"}));
    assert_eq!(status, 400, "{body}");
    let d = &body["detail"];
    assert_eq!(d["error"], "remote_scan_too_large");
    assert_eq!(
        (
            d["details"]["scan_bytes"].as_u64(),
            d["details"]["limit_bytes"].as_u64()
        ),
        (Some(10 << 30), Some(5 << 30))
    );
    assert_eq!(d["details"]["view_targets"], json!([]));

    let (status, body) = s.post_json(
        "/api/query",
        &admin,
        &json!({"sql": "SELECT * FROM daily LIMIT 1"}),
    );
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["detail"]["details"]["view_targets"], json!(["daily"]));
    assert!(body["detail"]["details"]["suggestion"]
        .as_str()
        .unwrap()
        .contains("LIMIT"));

    let (status, e) = s.post_json(
        "/api/v2/scan/estimate",
        &admin,
        &json!({"table_id": "events"}),
    );
    assert_eq!(
        (status, &e["would_exceed_guard"]),
        (200, &json!(true)),
        "{e}"
    );

    // Upstream failures keep their kinds.
    for (fault, status, kind) in [
        (
            Fault::Status(403, "Caller does not have serviceusage.services.use"),
            403,
            "cross_project_forbidden",
        ),
        (
            Fault::Status(403, "Access Denied: Table shop.events"),
            502,
            "warehouse_forbidden",
        ),
        (
            Fault::Status(401, "Request had invalid authentication credentials"),
            502,
            "auth_failed",
        ),
        (
            Fault::Status(500, "backendError"),
            502,
            "warehouse_upstream_error",
        ),
    ] {
        let proxy = FaultProxy::start(&em.endpoint, fault);
        let s = Server::start_with(
            Backend::Sqlite,
            &[
                ("SVC_WAREHOUSE_ENDPOINT", proxy.endpoint.as_str()),
                ("SVC_WAREHOUSE_PROJECT", PROJECT),
                ("SVC_SKIP_CACHE_WARMUP", "true"),
            ],
        );
        let admin = s.admin_token();
        register(
            &s,
            &admin,
            json!({"id": "events", "source_type": "warehouse", "bucket": "shop", "query_mode": "remote"}),
        );
        let (got, body) = s.get_json("/api/v2/sample/events", &admin);
        assert_eq!(
            (got, body["detail"]["error"].as_str()),
            (status, Some(kind)),
            "{body}"
        );
        assert_eq!(s.get_json("/api/health", "").0, 200);
    }
}

/// A token endpoint that accepts a JWT-bearer assertion only when `openssl` verifies its
/// RS256 signature with `public_key`; counts the exchanges.
fn token_endpoint(
    public_key: std::path::PathBuf,
) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use base64::Engine as _;
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/token", listener.local_addr().unwrap());
    let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = count.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut length = 0;
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                if line.trim().is_empty() {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap();
                }
            }
            let mut body = vec![0; length];
            reader.read_exact(&mut body).unwrap();
            let body = String::from_utf8(body).unwrap();
            let assertion = body
                .strip_prefix(
                    "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=",
                )
                .unwrap_or_default();
            let parts: Vec<&str> = assertion.split('.').collect();
            let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
            let verified = parts.len() == 3 && {
                let dir =
                    std::env::temp_dir().join(format!("svc-jwt-{}", uuid::Uuid::new_v4().simple()));
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(dir.join("input"), format!("{}.{}", parts[0], parts[1])).unwrap();
                std::fs::write(dir.join("sig"), b64.decode(parts[2]).unwrap_or_default()).unwrap();
                let ok = std::process::Command::new("openssl")
                    .args(["dgst", "-sha256", "-verify"])
                    .arg(&public_key)
                    .arg("-signature")
                    .arg(dir.join("sig"))
                    .arg(dir.join("input"))
                    .output()
                    .is_ok_and(|o| o.status.success());
                let claims: serde_json::Value =
                    serde_json::from_slice(&b64.decode(parts[1]).unwrap_or_default())
                        .unwrap_or_default();
                ok && claims["iss"] == "reader@demo-proj.iam.gserviceaccount.com"
                    && claims["scope"]
                        .as_str()
                        .is_some_and(|s| s.contains("bigquery"))
            };
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let (status, reply) = if verified {
                (
                    200,
                    json!({"access_token": "ya29.from-the-key", "expires_in": 3600, "token_type": "Bearer"}),
                )
            } else {
                (
                    400,
                    json!({"error": "invalid_grant", "error_description": "Invalid JWT Signature."}),
                )
            };
            let reply = reply.to_string();
            let mut stream = stream;
            let _ = write!(
                stream,
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{reply}",
                reply.len()
            );
        }
    });
    (url, count)
}

#[test]
fn a_service_account_key_is_exchanged_for_a_token_and_reused() {
    let Some(em) = Emulator::start() else {
        return;
    };
    em.dataset("shop");
    em.sql("CREATE TABLE shop.orders (id INT64)");
    em.sql("INSERT INTO shop.orders VALUES (1), (2)");
    let keys = crate::support::TempDir::new();
    let (key, public) = (keys.0.join("key.pem"), keys.0.join("pub.pem"));
    let ok = std::process::Command::new("openssl")
        .args([
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
            "-out",
        ])
        .arg(&key)
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap()
        .success()
        && std::process::Command::new("openssl")
            .args(["rsa", "-pubout", "-in"])
            .arg(&key)
            .arg("-out")
            .arg(&public)
            .status()
            .unwrap()
            .success();
    assert!(ok, "openssl could not make a key pair");
    let (token_uri, exchanges) = token_endpoint(public);
    let key_file = keys.0.join("sa.json");
    let key_json = json!({"type": "service_account", "client_email": "reader@demo-proj.iam.gserviceaccount.com",
        "private_key": std::fs::read_to_string(&key).unwrap(), "token_uri": token_uri});
    std::fs::write(&key_file, key_json.to_string()).unwrap();
    let proxy = FaultProxy::start(&em.endpoint, Fault::None);
    let s = Server::start_with(
        Backend::Sqlite,
        &[
            ("SVC_WAREHOUSE_ENDPOINT", proxy.endpoint.as_str()),
            ("SVC_WAREHOUSE_PROJECT", PROJECT),
            ("SVC_WAREHOUSE_CREDENTIALS_FILE", key_file.to_str().unwrap()),
            ("SVC_SKIP_CACHE_WARMUP", "1"),
        ],
    );
    let admin = s.admin_token();
    register(
        &s,
        &admin,
        json!({"id": "orders", "source_type": "warehouse", "bucket": "shop", "query_mode": "remote"}),
    );
    for _ in 0..3 {
        let (status, body) = s.get_json("/api/v2/sample/orders?n=5", &admin);
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["rows"].as_array().unwrap().len(), 2);
    }
    let requests = proxy.requests();
    assert!(!requests.is_empty());
    assert!(
        requests
            .iter()
            .all(|r| r.contains("[Bearer ya29.from-the-key]")),
        "{requests:?}"
    );
    // Several calls (registration re-warm, samples), one exchange.
    assert_eq!(exchanges.load(std::sync::atomic::Ordering::SeqCst), 1);
    let log = s.log();
    assert!(
        !log.contains("PRIVATE KEY") && !log.contains("ya29."),
        "secrets in the log"
    );
}

#[test]
fn unsafe_identifiers_and_an_unconfigured_warehouse_are_refused_before_any_call() {
    // No emulator: nothing here may reach a warehouse.
    let endpoint = format!("http://127.0.0.1:{}", crate::support::free_port());
    let s = Server::start_with(
        Backend::Sqlite,
        &[
            ("SVC_WAREHOUSE_ENDPOINT", endpoint.as_str()),
            ("SVC_WAREHOUSE_PROJECT", "Bad_Project"),
            ("SVC_SKIP_CACHE_WARMUP", "1"),
        ],
    );
    let admin = s.admin_token();
    register(
        &s,
        &admin,
        json!({"id": "t", "source_type": "warehouse", "bucket": "shop", "query_mode": "remote"}),
    );
    let (status, body) = s.get_json("/api/v2/sample/t", &admin);
    assert_eq!(
        (status, &body["detail"]["error"]),
        (400, &json!("unsafe_identifier")),
        "{body}"
    );
    assert_eq!(body["detail"]["details"]["field"], "project");

    let mut s = Server::start_with(
        Backend::Sqlite,
        &[
            ("SVC_WAREHOUSE_ENDPOINT", endpoint.as_str()),
            ("SVC_WAREHOUSE_PROJECT", PROJECT),
            ("SVC_SKIP_CACHE_WARMUP", "1"),
        ],
    );
    let admin = s.admin_token();
    let bad = [
        ("bucket", "sh`op"),
        ("bucket", "sh'op"),
        ("bucket", "my shop"),
        ("bucket", ".."),
        ("source_table", "a.b"),
        ("source_table", "x\" OR \"1"),
    ];
    for (i, (field, value)) in bad.iter().enumerate() {
        let mut row = json!({"id": format!("bad{i}"), "source_type": "warehouse", "bucket": "shop", "query_mode": "remote"});
        row[field] = json!(value);
        register(&s, &admin, row);
        for path in [
            format!("/api/v2/sample/bad{i}"),
            format!("/api/v2/schema/bad{i}"),
        ] {
            let (status, body) = s.get_json(&path, &admin);
            assert_eq!(
                (status, &body["detail"]["error"]),
                (400, &json!("unsafe_identifier")),
                "{value}: {body}"
            );
            assert_eq!(body["detail"]["details"]["field"], *field);
        }
    }
    // Not configured wins over a bad identifier, with a hint naming the key.
    assert!(s.stop());
    s.start_again_with(&[("SVC_WAREHOUSE_PROJECT", "")]);
    let (status, body) = s.get_json("/api/v2/sample/bad0", &admin);
    assert_eq!(
        (status, &body["detail"]["error"]),
        (500, &json!("not_configured")),
        "{body}"
    );
    assert!(body["detail"]["details"]["hint"]
        .as_str()
        .unwrap()
        .contains("project"));
}
