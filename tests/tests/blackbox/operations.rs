//! Operations: materialized-table sync against the emulator, scheduled scripts, and the
//! in-process scheduler (with two replicas on one PostgreSQL store).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::discovery::{register, write_parquet};
use crate::emulator::{Emulator, Fault, FaultProxy, PROJECT};
use crate::support::{backends, server_bin, Backend, Server, TempDir};

/// Polls `/api/sync/status` until no pass runs; returns the table's entry.
pub(crate) fn wait_synced(s: &Server, admin: &str, id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, body) = s.get_json("/api/sync/status", admin);
        assert_eq!(status, 200, "{body}");
        if body["locked"] == false {
            return body["tables"]
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["table_id"] == id)
                .cloned()
                .unwrap_or_else(|| panic!("{id} not in {body}"));
        }
        assert!(Instant::now() < deadline, "sync did not finish: {body}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Names in a directory that start with a dot (temporary files).
fn hidden_files(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with('.'))
                .collect()
        })
        .unwrap_or_default()
}

/// The result rows of `sql` as objects keyed by column.
pub(crate) fn query_rows(s: &Server, token: &str, sql: &str) -> Vec<Value> {
    let (status, body) = s.post_json("/api/query", token, &json!({"sql": sql}));
    assert_eq!(status, 200, "{sql}: {body}");
    let columns = body["columns"].as_array().unwrap();
    body["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            let cells = row.as_array().unwrap();
            let pairs = columns
                .iter()
                .zip(cells)
                .map(|(c, v)| (c.as_str().unwrap().to_owned(), v.clone()));
            Value::Object(pairs.collect())
        })
        .collect()
}

fn emulator_with_orders(rows: u32) -> Option<Emulator> {
    let em = Emulator::start()?;
    em.dataset("shop");
    em.sql(&format!(
        "CREATE TABLE shop.orders AS SELECT x AS id, CONCAT('n', CAST(x AS STRING)) AS name \
         FROM UNNEST(GENERATE_ARRAY(1, {rows})) AS x"
    ));
    Some(em)
}

fn warehouse_server(endpoint: &str, extra: &[(&str, &str)]) -> Server {
    let mut env = vec![
        ("SVC_WAREHOUSE_ENDPOINT", endpoint),
        ("SVC_WAREHOUSE_PROJECT", PROJECT),
        ("SVC_SKIP_CACHE_WARMUP", "1"),
    ];
    env.extend_from_slice(extra);
    Server::start_with(Backend::Sqlite, &env)
}

const SOURCE_QUERY: &str = "SELECT id, name FROM `demo-proj.shop.orders` WHERE id > 20000";

#[test]
fn materialized_tables_sync_atomically_and_keep_the_last_good_copy() {
    let Some(em) = emulator_with_orders(120_000) else {
        return;
    };
    let proxy = FaultProxy::start(&em.endpoint, Fault::None);
    let s = warehouse_server(&proxy.endpoint, &[]);
    let admin = s.admin_token();
    register(
        &s,
        &admin,
        json!({"id": "big_orders", "name": "Big orders", "source_type": "warehouse", "bucket": "shop",
               "query_mode": "materialized", "source_query": SOURCE_QUERY, "sync_schedule": "every 1h"}),
    );
    let (status, body) = s.get_json("/api/v2/sample/big_orders?n=3", &admin);
    assert_eq!(status, 404, "before the first sync: {body}");

    // Trigger by name; a second trigger while the pass runs is refused.
    let (status, body) = s.post_json(
        "/api/sync/trigger",
        &admin,
        &json!({"tables": ["Big orders"]}),
    );
    assert_eq!(
        (status, &body["tables"]),
        (200, &json!(["Big orders"])),
        "{body}"
    );
    let (status, body) = s.post_json("/api/sync/trigger", &admin, &Value::Null);
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["detail"]["error"], "sync_already_in_progress");
    let state = wait_synced(&s, &admin, "big_orders");
    assert_eq!(
        (&state["status"], &state["rows"]),
        (&json!("ok"), &json!(100_000)),
        "{state}"
    );

    let dir = s.dir.0.join("extracts/warehouse/data");
    let file = dir.join("big_orders.parquet");
    let good = std::fs::read(&file).unwrap();
    assert_eq!(state["size_bytes"], json!(good.len()));
    assert!(hidden_files(&dir).is_empty());
    // The cost check ran first, on the row's own SQL.
    let requests = proxy.requests();
    let first_dry = requests
        .iter()
        .position(|r| r.contains("\"dryRun\":true"))
        .unwrap();
    let first_run = requests
        .iter()
        .position(|r| r.contains("id > 20000") && !r.contains("dryRun"))
        .unwrap();
    assert!(first_dry < first_run, "{requests:?}");

    // Sample, schema and SQL read the local copy.
    let (status, sample) = s.get_json("/api/v2/sample/big_orders?n=3", &admin);
    assert_eq!(status, 200, "{sample}");
    assert_eq!(sample["rows"].as_array().unwrap().len(), 3);
    let (status, schema) = s.get_json("/api/v2/schema/big_orders", &admin);
    assert_eq!(
        (status, &schema["sql_flavor"]),
        (200, &json!("datafusion")),
        "{schema}"
    );
    let rows = query_rows(
        &s,
        &admin,
        "SELECT count(*) AS n, min(id) AS lo FROM big_orders",
    );
    assert_eq!(
        (&rows[0]["n"], &rows[0]["lo"]),
        (&json!(100_000), &json!(20_001))
    );

    // The warehouse fails mid-sync: the error is recorded, the last good copy stays.
    proxy.set(Fault::Status(500, "backend error"));
    let mark = proxy.requests().len();
    let (status, _) = s.post_json("/api/sync/trigger", &admin, &json!(["big_orders"]));
    assert_eq!(status, 200);
    let state = wait_synced(&s, &admin, "big_orders");
    assert_eq!(state["status"], "error", "{state}");
    assert!(
        state["last_error"].as_str().unwrap().contains("500"),
        "{state}"
    );
    assert_eq!(
        state["rows"],
        json!(100_000),
        "last good figures kept: {state}"
    );
    assert!(state["last_success_at"].is_string());
    let tried = proxy.requests().split_off(mark);
    assert!(
        tried.iter().all(|r| r.contains("dryRun")),
        "the failed dry run stops the sync: {tried:?}"
    );
    assert_eq!(std::fs::read(&file).unwrap(), good);
    assert!(hidden_files(&dir).is_empty());

    // Over the materialization budget (default 10 GiB): refused before any data moves.
    proxy.set(Fault::DryRunBytes(20 << 30));
    let before = proxy.requests().len();
    let (status, _) = s.post_json("/api/sync/trigger", &admin, &json!(["big_orders"]));
    assert_eq!(status, 200);
    let state = wait_synced(&s, &admin, "big_orders");
    assert!(
        state["last_error"]
            .as_str()
            .unwrap()
            .contains("exceeds cap"),
        "{state}"
    );
    let after: Vec<String> = proxy.requests().split_off(before);
    assert!(after.iter().all(|r| r.contains("dryRun")), "{after:?}");
    assert_eq!(std::fs::read(&file).unwrap(), good);

    // A failed sync never serves a half-written table.
    let rows = query_rows(&s, &admin, "SELECT count(*) AS n FROM big_orders");
    assert_eq!(rows[0]["n"], json!(100_000));

    let audits = s.audit_rows("sync.table", 3);
    let results: Vec<&str> = audits
        .iter()
        .map(|r| r["result"].as_str().unwrap())
        .collect();
    assert_eq!(
        results.iter().filter(|r| **r == "success").count(),
        1,
        "{results:?}"
    );
    assert_eq!(
        results.iter().filter(|r| r.starts_with("error")).count(),
        2,
        "{results:?}"
    );
    let triggers = s.audit_rows("sync.trigger", 4);
    assert!(triggers
        .iter()
        .any(|r| r["result"].as_str().unwrap().contains("409")));

    // Bad trigger bodies; non-admins may neither trigger nor see other tables' state.
    for bad in [json!(5), json!({"tables": "big_orders"}), json!([1, 2])] {
        let (status, body) = s.post_json("/api/sync/trigger", &admin, &bad);
        assert_eq!(status, 422, "{bad}: {body}");
    }
    let analyst = s.user_token("analyst@example.com", false);
    let (status, _) = s.post_json("/api/sync/trigger", &analyst, &Value::Null);
    assert_eq!(status, 403);
    let (status, body) = s.get_json("/api/sync/status", &analyst);
    assert_eq!(status, 200);
    assert_eq!(
        (&body["tables"], &body["last_pass"]),
        (&json!([]), &Value::Null),
        "{body}"
    );
}

/// Warehouse query texts the proxy saw since `from` (dry runs left out).
fn sent_queries(proxy: &FaultProxy, from: usize) -> Vec<String> {
    proxy
        .requests()
        .split_off(from)
        .into_iter()
        .filter(|r| r.starts_with("POST") && !r.contains("dryRun"))
        .collect()
}

#[test]
fn remote_queries_push_down_whole_or_by_filter_and_hybrids_join_here() {
    let Some(em) = emulator_with_orders(5_000) else {
        return;
    };
    let proxy = FaultProxy::start(&em.endpoint, Fault::None);
    let env = [
        ("SVC_WAREHOUSE_ENDPOINT", proxy.endpoint.as_str()),
        ("SVC_WAREHOUSE_PROJECT", PROJECT),
        ("SVC_SKIP_CACHE_WARMUP", "1"),
    ];
    let s = Server::start_prepared(Backend::Sqlite, &env, |dir| {
        write_parquet(dir, "local", "events", 100, "e");
    });
    let admin = s.admin_token();
    for id in ["orders", "orders_copy"] {
        register(
            &s,
            &admin,
            json!({"id": id, "source_type": "warehouse", "bucket": "shop", "source_table": "orders", "query_mode": "remote"}),
        );
    }
    register(&s, &admin, json!({"id": "events", "source_type": "local"}));

    // Only remote tables: the whole statement runs on the warehouse.
    let mark = proxy.requests().len();
    let rows = query_rows(
        &s,
        &admin,
        "SELECT name, count(*) AS n FROM orders WHERE id <= 30 GROUP BY name ORDER BY name LIMIT 3",
    );
    let names: Vec<&Value> = rows.iter().map(|r| &r["name"]).collect();
    assert_eq!(names, [&json!("n1"), &json!("n10"), &json!("n11")]);
    assert!(rows.iter().all(|r| r["n"] == json!(1)));
    let sent = sent_queries(&proxy, mark);
    assert!(
        sent.iter()
            .any(|r| r.contains("GROUP BY") && r.contains("LIMIT")),
        "{sent:?}"
    );
    let mark = proxy.requests().len();
    let rows = query_rows(
        &s,
        &admin,
        "SELECT count(*) AS n FROM orders a JOIN orders_copy b ON a.id = b.id WHERE a.id < 100",
    );
    assert_eq!(rows[0]["n"], json!(99));
    let sent = sent_queries(&proxy, mark);
    assert!(sent.iter().any(|r| r.contains("JOIN")), "{sent:?}");

    // A hybrid query joins here; each remote read carries the filters it can.
    let mark = proxy.requests().len();
    let rows = query_rows(
        &s,
        &admin,
        "SELECT count(*) AS n FROM orders o JOIN events e ON o.id = e.id \
         WHERE o.id BETWEEN 10 AND 19 AND o.name <> 'n15'",
    );
    assert_eq!(rows[0]["n"], json!(9));
    let sent = sent_queries(&proxy, mark);
    assert!(sent.iter().all(|r| !r.contains("JOIN")), "{sent:?}");
    // DataFusion hands BETWEEN over as two comparisons; all three conditions reach the SQL.
    assert!(
        sent.iter()
            .any(|r| r.contains("(`id` >= 10) AND (`id` <= 19) AND (`name` != 'n15')")),
        "{sent:?}"
    );
    // A filter the warehouse cannot take exactly stays with DataFusion, with the same answer.
    let rows = query_rows(
        &s,
        &admin,
        "SELECT count(*) AS n FROM orders o JOIN events e ON o.id = e.id WHERE o.name LIKE 'n4%'",
    );
    assert_eq!(rows[0]["n"], json!(11), "n4 and n40..n49 among ids 0..99");
    // Quotes in a literal reach the warehouse escaped, never as SQL.
    for sql in [
        "SELECT count(*) AS n FROM orders WHERE name = 'x'' OR 1=1 --'",
        "SELECT count(*) AS n FROM orders o JOIN events e ON o.id = e.id WHERE o.name = 'x'' OR 1=1 --'",
    ] {
        assert_eq!(query_rows(&s, &admin, sql)[0]["n"], json!(0), "{sql}");
    }
}

#[test]
fn sigterm_during_a_materialization_leaves_no_partial_file() {
    let Some(em) = emulator_with_orders(120_000) else {
        return;
    };
    // The first page arrives at once; the next ones are slow, so the temp file exists
    // while the server is told to stop.
    let proxy = FaultProxy::start(&em.endpoint, Fault::SlowPages(Duration::from_secs(4)));
    let mut s = warehouse_server(&proxy.endpoint, &[]);
    let admin = s.admin_token();
    register(
        &s,
        &admin,
        json!({"id": "big_orders", "source_type": "warehouse", "bucket": "shop",
               "query_mode": "materialized", "source_query": SOURCE_QUERY}),
    );
    let (status, _) = s.post_json("/api/sync/trigger", &admin, &json!(["big_orders"]));
    assert_eq!(status, 200);
    let dir = s.dir.0.join("extracts/warehouse/data");
    let deadline = Instant::now() + Duration::from_secs(30);
    while hidden_files(&dir).is_empty() {
        assert!(Instant::now() < deadline, "no temporary file appeared");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(s.stop(), "clean shutdown: {}", s.log());
    assert!(hidden_files(&dir).is_empty(), "{:?}", hidden_files(&dir));
    assert!(!dir.join("big_orders.parquet").exists());

    // A partial file left by a process that was killed outright is swept at the next start.
    let stray = dir.join(".big_orders.parquet.tmp-999999999-0");
    std::fs::write(&stray, b"PAR1 half").unwrap();
    s.start_again();
    assert!(!stray.exists());
    let (status, body) = s.get_json("/api/v2/sample/big_orders?n=1", &admin);
    assert_eq!(status, 404, "{body}");
}

#[test]
fn scripts_run_with_their_owners_access_and_write_local_tables() {
    let s = Server::start_prepared(Backend::Sqlite, &[], |dir| {
        write_parquet(dir, "local", "events", 100, "e");
    });
    let admin = s.admin_token();
    register(&s, &admin, json!({"id": "events", "source_type": "local"}));
    let script = json!({"name": "rollup", "sql": "SELECT count(*) AS n, max(id) AS hi FROM events",
                        "schedule": "every 1h", "target_table": "events_rollup"});
    let (status, created) = s.post_json("/api/scripts", &admin, &script);
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();

    // Bad input.
    let (status, body) = s.post_json("/api/scripts", &admin, &script);
    assert_eq!(status, 409, "duplicate name: {body}");
    let bad = [
        (json!({"name": "w", "sql": "DELETE FROM events"}), 400),
        (
            json!({"name": "s", "sql": "SELECT 1", "schedule": "sometimes"}),
            422,
        ),
        (json!({"name": "../x", "sql": "SELECT 1"}), 422),
        (
            json!({"name": "t", "sql": "SELECT 1", "target_table": "events"}),
            409,
        ),
    ];
    for (body, want) in bad {
        let (status, resp) = s.post_json("/api/scripts", &admin, &body);
        assert_eq!(status, want, "{body}: {resp}");
    }
    let analyst = s.user_token("analyst@example.com", false);
    assert_eq!(s.get_json("/api/scripts", &analyst).0, 403);
    assert_eq!(
        s.post_json("/api/scripts/run-due", &analyst, &Value::Null)
            .0,
        403
    );

    // Due now (never run): claimed once, written as a local table, registered.
    let (status, claimed) = s.post_json("/api/scripts/run-due", &admin, &Value::Null);
    assert_eq!(
        (status, &claimed["claimed"]),
        (200, &json!([id])),
        "{claimed}"
    );
    let (_, again) = s.post_json("/api/scripts/run-due", &admin, &Value::Null);
    assert_eq!(again["count"], 0, "not due again for an hour: {again}");
    let deadline = Instant::now() + Duration::from_secs(20);
    let listed = loop {
        let (_, list) = s.get_json("/api/scripts", &admin);
        let row = list["scripts"][0].clone();
        if row["last_status"] != "running" {
            break row;
        }
        assert!(Instant::now() < deadline, "{row}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(
        (&listed["last_status"], &listed["last_rows"]),
        (&json!("success"), &json!(1)),
        "{listed}"
    );
    let rows = query_rows(&s, &admin, "SELECT n, hi FROM events_rollup");
    assert_eq!((&rows[0]["n"], &rows[0]["hi"]), (&json!(100), &json!(99)));
    assert_eq!(
        s.catalog_row(&admin, "events_rollup").unwrap()["source_type"],
        "local"
    );

    // Run now, again: the same table is replaced.
    let (status, run) = s.post_json(&format!("/api/scripts/{id}/run"), &admin, &Value::Null);
    assert_eq!((status, &run["rows"]), (200, &json!(1)), "{run}");

    // The owner's access, as it is at run time: a deactivated owner's script fails.
    let ops = s.user_token("ops@example.com", true);
    let (status, own) = s.post_json(
        "/api/scripts",
        &ops,
        &json!({"name": "ops_count", "sql": "SELECT count(*) AS n FROM events"}),
    );
    assert_eq!(status, 201, "{own}");
    let (_, users) = s.get_json("/api/admin/users", &admin);
    let ops_id = users
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["email"] == "ops@example.com")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, _) = s.post_json(
        &format!("/api/admin/users/{ops_id}/deactivate"),
        &admin,
        &Value::Null,
    );
    assert_eq!(status, 200);
    let (status, body) = s.post_json(
        &format!("/api/scripts/{}/run", own["id"].as_str().unwrap()),
        &admin,
        &Value::Null,
    );
    assert_eq!(status, 403, "{body}");
    let runs = s.audit_rows("script.run", 3);
    assert!(
        runs.iter()
            .any(|r| r["result"].as_str().unwrap().starts_with("error")),
        "{runs:?}"
    );

    assert_eq!(s.delete(&format!("/api/scripts/{id}"), &admin).0, 204);
    assert_eq!(s.delete(&format!("/api/scripts/{id}"), &admin).0, 404);
}

const FAST_SCHEDULER: [(&str, &str); 5] = [
    ("SCHEDULER_ENABLED", "true"),
    ("SCHEDULER_STARTUP_GRACE_SECONDS", "0"),
    ("SCHEDULER_TICK_SECONDS", "1"),
    ("SCHEDULER_SCRIPT_RUN_INTERVAL", "1"),
    ("SCHEDULER_DATA_REFRESH_INTERVAL", "2"),
];

#[test]
fn the_scheduler_runs_due_work_under_its_own_identity() {
    let s = Server::start_prepared(Backend::Sqlite, &FAST_SCHEDULER, |dir| {
        write_parquet(dir, "local", "events", 10, "e");
    });
    let admin = s.admin_token();
    register(&s, &admin, json!({"id": "events", "source_type": "local"}));
    let (status, created) = s.post_json(
        "/api/scripts",
        &admin,
        &json!({"name": "nightly", "sql": "SELECT count(*) AS n FROM events", "schedule": "every 1h",
                "target_table": "nightly_counts"}),
    );
    assert_eq!(status, 201, "{created}");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, list) = s.get_json("/api/scripts", &admin);
        if list["scripts"][0]["last_status"] == "success" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the scheduler never ran the script: {list}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let runs = s.audit_rows("scheduler.run", 4);
    assert!(
        runs.iter().all(|r| r["client_kind"] == "scheduler"),
        "{runs:?}"
    );
    let jobs: Vec<&str> = runs
        .iter()
        .map(|r| r["resource"].as_str().unwrap())
        .collect();
    for job in ["sync", "scripts", "telemetry_prune", "usage_processor"] {
        assert!(jobs.contains(&job), "{jobs:?}");
    }
    let claims = s.audit_rows("scripts.run_due", 1);
    assert_eq!(claims[0]["client_kind"], "scheduler");
    let (status, st) = s.get_json("/api/admin/scheduler", &admin);
    assert_eq!(
        (status, &st["enabled"], &st["leader"]),
        (200, &json!(true), &json!(true)),
        "{st}"
    );
}

#[test]
fn invalid_scheduler_settings_stop_the_start_naming_the_variable() {
    for (var, value) in [
        ("SCHEDULER_STARTUP_GRACE_SECONDS", "-1"),
        ("SCHEDULER_WAREHOUSE_METADATA_REFRESH_INTERVAL", "often"),
        ("SCHEDULER_TICK_SECONDS", "100000"),
    ] {
        let dir = TempDir::new();
        let out = Command::new(server_bin())
            .args([
                "--data-dir",
                dir.0.to_str().unwrap(),
                "serve",
                "--listen",
                "127.0.0.1:0",
            ])
            .env_remove("SVC_DATABASE_URL")
            .env(var, value)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{var}={value} started");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(var), "{var}: {stderr}");
    }
}

#[test]
fn with_postgresql_one_replica_runs_the_jobs_and_another_takes_over() {
    if !backends().contains(&Backend::Postgres) {
        eprintln!("notice: replica test skipped: SVC_TEST_DATABASE_URL is not set");
        return;
    }
    let mut env = FAST_SCHEDULER.to_vec();
    env.push((
        "SVC_JWT_SECRET",
        "a-shared-secret-of-at-least-32-characters",
    ));
    let a = Server::start_with(Backend::Postgres, &env);
    let b = Server::start_beside(&a, &env);
    let admin = a.admin_token();
    let leaders = |servers: &[&Server]| -> Vec<bool> {
        servers
            .iter()
            .map(|s| {
                let (status, st) = s.get_json("/api/admin/scheduler", &admin);
                assert_eq!(status, 200, "{st}");
                st["leader"] == true
            })
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let l = leaders(&[&a, &b]);
        if l.iter().filter(|x| **x).count() == 1 {
            // It stays exactly one over several ticks.
            std::thread::sleep(Duration::from_secs(3));
            assert_eq!(leaders(&[&a, &b]), l);
            break;
        }
        assert!(Instant::now() < deadline, "{l:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let a_leads = leaders(&[&a])[0];
    let (mut leader, follower) = if a_leads { (a, b) } else { (b, a) };
    assert!(leader.stop());
    let deadline = Instant::now() + Duration::from_secs(20);
    while !leaders(&[&follower])[0] {
        assert!(
            Instant::now() < deadline,
            "the other replica never took over"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn legacy_wrap_views_reads_views_through_a_wrapping_query() {
    let Some(em) = emulator_with_orders(100) else {
        return;
    };
    em.sql("CREATE VIEW shop.small_orders AS SELECT id, name FROM shop.orders WHERE id <= 10");
    let proxy = FaultProxy::start(&em.endpoint, Fault::None);
    let s = warehouse_server(
        &proxy.endpoint,
        &[("SVC_WAREHOUSE_LEGACY_WRAP_VIEWS", "true")],
    );
    let admin = s.admin_token();
    for id in ["orders", "small_orders"] {
        register(
            &s,
            &admin,
            json!({"id": id, "source_type": "warehouse", "bucket": "shop", "query_mode": "remote"}),
        );
    }
    let rows = query_rows(&s, &admin, "SELECT count(*) AS n FROM small_orders");
    assert_eq!(rows[0]["n"], json!(10));
    let rows = query_rows(&s, &admin, "SELECT count(*) AS n FROM orders WHERE id > 90");
    assert_eq!(rows[0]["n"], json!(10));
    let (status, sample) = s.get_json("/api/v2/sample/small_orders?n=2", &admin);
    assert_eq!(
        (status, sample["rows"].as_array().map(Vec::len)),
        (200, Some(2))
    );
    let sent = sent_queries(&proxy, 0);
    let view_reads: Vec<&String> = sent.iter().filter(|r| r.contains("small_orders")).collect();
    assert!(!view_reads.is_empty());
    assert!(
        view_reads
            .iter()
            .all(|r| r.contains("(SELECT * FROM `demo-proj.shop.small_orders`)")),
        "{view_reads:?}"
    );
    assert!(
        sent.iter()
            .filter(|r| r.contains("shop.orders`"))
            .all(|r| !r.contains("(SELECT * FROM `demo-proj.shop.orders`)")),
        "{sent:?}"
    );
}
