//! The observability summaries beside the timeline, through the real server: facets and KPIs
//! count exactly the rows the timeline lists under the same filter (percentiles checked
//! against an independent nearest-rank computation), the health card and its 30-second
//! cache, the sync feed, the catalogue of action names (and the README's copy of it),
//! audit retention by the scheduler, and the `svc admin activity` companions.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use chrono::{SecondsFormat, Utc};
use serde_json::Value;

use crate::support::{backends, exec_store, Backend, Server, TempDir};
use crate::svc_cli::{code, stderr, stdout, svc};
use crate::telemetry_export_ask::urlencode;

/// One audit row of a fixture.
struct Row {
    id: String,
    minutes_ago: i64,
    user: Option<&'static str>,
    action: &'static str,
    resource: Option<String>,
    kind: Option<&'static str>,
    result: String,
    ms: Option<i64>,
}

fn ts(minutes_ago: i64) -> String {
    (Utc::now() - chrono::Duration::minutes(minutes_ago))
        .to_rfc3339_opts(SecondsFormat::Micros, true)
}

fn insert(s: &Server, rows: &[Row]) {
    let text = |v: Option<&str>| v.map_or("NULL".to_owned(), |v| format!("'{v}'"));
    let statements: Vec<String> = rows
        .iter()
        .map(|r| {
            format!(
                "INSERT INTO audit_log (id, timestamp, user_id, action, resource, params, client_kind, result, duration_ms) \
                 VALUES ('{}', '{}', {}, '{}', {}, '{{\"rows\":3}}', {}, '{}', {})",
                r.id,
                ts(r.minutes_ago),
                text(r.user),
                r.action,
                text(r.resource.as_deref()),
                text(r.kind),
                r.result,
                r.ms.map_or("NULL".to_owned(), |m| m.to_string()),
            )
        })
        .collect();
    let refs: Vec<&str> = statements.iter().map(String::as_str).collect();
    exec_store(&s.store_url(), &refs);
}

/// 60 rows two to three hours ago: two users (one of them gone), system rows, two actions,
/// every seventh row failed, durations 10..600 ms with a few missing.
fn fixture(ana: &'static str) -> Vec<Row> {
    (1..=60)
        .map(|i: i64| Row {
            id: format!("f-{i:02}"),
            minutes_ago: 120 + i,
            user: match i % 3 {
                0 => Some(ana),
                1 => Some("gone-user"),
                _ => None,
            },
            action: if i % 2 == 0 {
                "catalog.sample"
            } else {
                "query.local"
            },
            resource: (i % 5 != 0).then(|| format!("table:t{}", i % 4)),
            kind: if i % 3 == 2 { None } else { Some("cli") },
            result: if i % 7 == 0 {
                "error.500".into()
            } else {
                "success".into()
            },
            ms: (i % 11 != 0).then_some(i * 10),
        })
        .collect()
}

/// The nearest-rank percentile of `values` (sorted here), computed independently of the server.
fn nearest_rank(values: &[i64], p: f64) -> Option<i64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_unstable();
    let rank = ((p * v.len() as f64).ceil() as usize).max(1);
    Some(v[rank - 1])
}

fn timeline_ids(s: &Server, token: &str, query: &str) -> Vec<String> {
    let mut ids = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut path = format!("/api/admin/activity?{query}&limit=200");
        if let Some(c) = &cursor {
            path.push_str(&format!("&cursor={}", urlencode(c)));
        }
        let (status, page) = s.get_json(&path, token);
        assert_eq!(status, 200, "{query}: {page}");
        for r in page["rows"].as_array().unwrap() {
            ids.push(r["id"].as_str().unwrap().to_owned());
        }
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => return ids,
        }
    }
}

/// Asserts that the timeline lists exactly `expected` under `query`, and that the KPIs and
/// facets count exactly them (checked against tallies computed here).
fn assert_summaries(
    s: &Server,
    admin: &str,
    ana_id: &str,
    query: &str,
    filter: &str,
    expected: &[&Row],
) {
    // The timeline lists exactly these rows.
    let listed: BTreeSet<String> = timeline_ids(s, admin, query).into_iter().collect();
    let wanted: BTreeSet<String> = expected.iter().map(|r| r.id.clone()).collect();
    assert_eq!(listed, wanted, "{filter}");

    // The KPIs count them.
    let (status, k) = s.get_json(&format!("/api/admin/observability/kpis?{query}"), admin);
    assert_eq!(status, 200, "{filter}: {k}");
    let errors = expected.iter().filter(|r| r.result != "success").count();
    let users: BTreeSet<_> = expected.iter().filter_map(|r| r.user).collect();
    let durations: Vec<i64> = expected.iter().filter_map(|r| r.ms).collect();
    assert_eq!(k["events_total"], expected.len(), "{filter}: {k}");
    assert_eq!(k["errors"], errors, "{filter}: {k}");
    assert_eq!(k["active_users"], users.len(), "{filter}: {k}");
    assert_eq!(k["timed"], durations.len(), "{filter}: {k}");
    let rate = if expected.is_empty() {
        0.0
    } else {
        (errors as f64 / expected.len() as f64 * 10_000.0).round() / 10_000.0
    };
    assert_eq!(k["error_rate"].as_f64(), Some(rate), "{filter}: {k}");
    for (key, p) in [
        ("p50_duration_ms", 0.50),
        ("p95_duration_ms", 0.95),
        ("p99_duration_ms", 0.99),
    ] {
        assert_eq!(
            k[key].as_i64(),
            nearest_rank(&durations, p),
            "{filter} {key}: {k}"
        );
    }
    assert!(k["window_minutes"].is_null(), "an absolute window: {k}");

    // The facets add up to them.
    let (status, f) = s.get_json(&format!("/api/admin/observability/facets?{query}"), admin);
    assert_eq!(status, 200, "{filter}: {f}");
    let counts = |facet: &str, key: &str| -> BTreeMap<String, i64> {
        f[facet]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| {
                (
                    v[key].as_str().unwrap().to_owned(),
                    v["count"].as_i64().unwrap(),
                )
            })
            .collect()
    };
    let tally = |value: &dyn Fn(&Row) -> Option<String>| -> BTreeMap<String, i64> {
        let mut m = BTreeMap::new();
        for r in expected {
            if let Some(v) = value(r) {
                *m.entry(v).or_insert(0) += 1;
            }
        }
        m
    };
    assert_eq!(
        counts("actions", "value"),
        tally(&|r: &Row| Some(r.action.to_owned()))
    );
    assert_eq!(
        counts("results", "value"),
        tally(&|r: &Row| Some(r.result.clone()))
    );
    assert_eq!(
        counts("resources", "value"),
        tally(&|r: &Row| r.resource.clone())
    );
    assert_eq!(
        counts("sources", "value"),
        tally(&|r: &Row| Some(r.kind.unwrap_or("system").to_owned()))
    );
    assert_eq!(
        counts("users", "id"),
        tally(&|r: &Row| r.user.map(str::to_owned))
    );
    // Labels: the e-mail, or the id of a gone user; most rows first.
    for u in f["users"].as_array().unwrap() {
        let label = if u["id"] == ana_id {
            "ana@example.com"
        } else {
            "gone-user"
        };
        assert_eq!(u["label"], label, "{u}");
    }
    let actions: Vec<i64> = f["actions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["count"].as_i64().unwrap())
        .collect();
    assert!(actions.windows(2).all(|w| w[0] >= w[1]), "{f}");
}

/// A server with an administrator and the user ana: the admin's token, ana's token and id.
fn server_with_ana(backend: Backend) -> (Server, String, String, &'static str) {
    let s = Server::start_with(backend, &[]);
    let admin = s.admin_token();
    let ana = s.user_token("ana@example.com", false);
    let ana_id: &'static str = Box::leak(
        s.query("SELECT id FROM users WHERE email = 'ana@example.com'")[0]["id"]
            .as_str()
            .unwrap()
            .to_owned()
            .into_boxed_str(),
    );
    (s, admin, ana, ana_id)
}

#[test]
fn facets_and_kpis_count_the_rows_the_timeline_lists() {
    for backend in backends() {
        let (s, admin, ana, ana_id) = server_with_ana(backend);
        let rows = fixture(ana_id);
        insert(&s, &rows);
        // A window that holds the fixture and nothing the server writes meanwhile.
        let window = format!(
            "since={}&until={}",
            urlencode(&ts(200)),
            urlencode(&ts(100))
        );

        for (filter, keep) in [
            ("", Box::new(|_: &Row| true) as Box<dyn Fn(&Row) -> bool>),
            ("&result=error", Box::new(|r: &Row| r.result != "success")),
            (
                "&user_id=gone-user",
                Box::new(|r: &Row| r.user == Some("gone-user")),
            ),
            (
                "&action_prefix=catalog.",
                Box::new(|r: &Row| r.action == "catalog.sample"),
            ),
            ("&source=system", Box::new(|r: &Row| r.kind.is_none())),
            (
                "&resource=table:t1&result=success",
                Box::new(|r: &Row| {
                    r.resource.as_deref() == Some("table:t1") && r.result == "success"
                }),
            ),
        ] {
            let query = format!("{window}{filter}");
            let expected: Vec<&Row> = rows.iter().filter(|r| keep(r)).collect();

            assert_summaries(&s, &admin, ana_id, &query, filter, &expected);
        }

        // A relative window is echoed; the default is a day.
        let (_, k) = s.get_json("/api/admin/observability/kpis", &admin);
        assert_eq!(k["window_minutes"], 1440, "{k}");
        assert!(k["events_total"].as_i64().unwrap() >= 60, "{k}");

        // Reads are audited once a minute per filter, like the timeline's. Rows are stored
        // by a queue in order, so once a later marker read's row is visible, every earlier
        // one that was going to be written is too.
        let kpi_reads = || {
            s.query(
                "SELECT params FROM audit_log WHERE action = 'activity.read' \
                 AND params LIKE '%\"endpoint\":\"kpis\"%'",
            )
            .len()
        };
        let marker = |minutes: u32| {
            s.get_json(
                &format!("/api/admin/activity?since_minutes={minutes}"),
                &admin,
            );
            wait_for(10, "the marker read's row", || {
                (!s.query(&format!(
                    "SELECT id FROM audit_log WHERE action = 'activity.read' \
                     AND params LIKE '%\"since_minutes\":{minutes}%'"
                ))
                .is_empty())
                .then_some(())
            });
        };
        marker(77);
        assert_eq!(kpi_reads(), 7, "six filters and the default");
        s.get_json("/api/admin/observability/kpis", &admin);
        marker(78);
        assert_eq!(
            kpi_reads(),
            7,
            "a repeat within the minute is not a new read"
        );

        // The timeline's bad input is bad here too; non-admins are refused.
        for path in [
            "/api/admin/observability/kpis",
            "/api/admin/observability/facets",
        ] {
            for (query, field) in [
                ("since_minutes=0", "since_minutes"),
                ("since_minutes=43201", "since_minutes"),
                ("result=failed", "result"),
                ("source=martian", "source"),
                ("since=yesterday", "since"),
            ] {
                let (status, body) = s.get_json(&format!("{path}?{query}"), &admin);
                assert_eq!(status, 422, "{path}?{query}: {body}");
                assert!(body.to_string().contains(field), "{path}?{query}: {body}");
            }
            assert_eq!(s.get_json(path, &ana).0, 403);
        }
    }
}

/// Polls `f` until it returns Some, for at most `secs` seconds.
fn wait_for<T>(secs: u64, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn sync_row(id: &str, minutes_ago: i64, table: &str, ok: bool, user: Option<&'static str>) -> Row {
    Row {
        id: id.to_owned(),
        minutes_ago,
        user,
        action: "sync.table",
        resource: Some(table.to_owned()),
        kind: Some(if user.is_some() { "cli" } else { "scheduler" }),
        result: if ok {
            "success".into()
        } else {
            "error.502".into()
        },
        ms: Some(40),
    }
}

/// 240 rows spread over the two days before the last 40 minutes, every dimension varied.
fn wide_fixture(ana: &'static str) -> Vec<Row> {
    (1..=240)
        .map(|i: i64| Row {
            id: format!("w-{i:03}"),
            minutes_ago: 40 + i * 12,
            user: match i % 4 {
                0 | 3 => Some(ana),
                1 => Some("gone-user"),
                _ => None,
            },
            action: ["catalog.sample", "query.local", "scan"][(i % 3) as usize],
            resource: (i % 5 != 0).then(|| format!("table:t{}", i % 4)),
            kind: [None, Some("cli"), Some("web")][(i % 3) as usize],
            result: match i % 9 {
                0 => "error.500".into(),
                4 => "error.403".into(),
                _ => "success".into(),
            },
            ms: (i % 11 != 0).then_some((i * 37) % 700),
        })
        .collect()
}

#[test]
fn rolled_up_cards_and_facets_still_count_exactly_the_rows() {
    for backend in backends() {
        let (s, admin, _, ana_id) = server_with_ana(backend);
        let rows = wide_fixture(ana_id);
        insert(&s, &rows);
        // A second server on the same store runs the rollup job over them.
        let job = Server::start_beside(
            &s,
            &[
                ("SCHEDULER_ENABLED", "true"),
                ("SCHEDULER_STARTUP_GRACE_SECONDS", "0"),
                ("SCHEDULER_TICK_SECONDS", "1"),
                ("SCHEDULER_AUDIT_ROLLUP_INTERVAL", "1"),
            ],
        );
        let oldest = s.query("SELECT MIN(timestamp) AS t FROM audit_log")[0]["t"]
            .as_str()
            .unwrap()
            .to_owned();
        wait_for(60, "the rollup job to reach the oldest row", || {
            let covered = s.query("SELECT covered_from FROM audit_rollup_state WHERE id = 1");
            let from = covered.first()?["covered_from"].as_str()?.to_owned();
            (from <= oldest).then_some(())
        });
        let day_rows = s.query("SELECT COUNT(*) AS n FROM audit_rollup WHERE grain = 'd'");
        assert!(day_rows[0]["n"].as_i64().unwrap() > 0, "{day_rows:?}");
        drop(job);

        // Windows with whole days, whole hours and ragged ends, through both servers' store.
        // Rows sit every 12 minutes at 52, 64, …; each bound is 6 minutes from any row, so
        // the minutes the job took since the insert do not move a row across it.
        for (since, until) in [(2_899, 46), (1_498, 694), (130, 46)] {
            let query = format!(
                "since={}&until={}",
                urlencode(&ts(since)),
                urlencode(&ts(until))
            );
            let expected: Vec<&Row> = rows
                .iter()
                .filter(|r| r.minutes_ago <= since && r.minutes_ago > until)
                .collect();
            assert!(!expected.is_empty());
            assert_summaries(
                &s,
                &admin,
                ana_id,
                &query,
                &format!("{since}..{until}"),
                &expected,
            );
            // The errors-only view reads the rollups' error slice.
            let failed: Vec<&Row> = expected
                .iter()
                .copied()
                .filter(|r| r.result.starts_with("error."))
                .collect();
            assert!(!failed.is_empty());
            assert_summaries(
                &s,
                &admin,
                ana_id,
                &format!("{query}&result=error"),
                &format!("{since}..{until}, errors only"),
                &failed,
            );
        }
    }
}

#[test]
fn health_card_and_sync_feed() {
    let s = Server::start_with(
        Backend::Sqlite,
        &[
            ("SCHEDULER_ENABLED", "true"),
            ("SCHEDULER_STARTUP_GRACE_SECONDS", "0"),
            ("SCHEDULER_TICK_SECONDS", "1"),
        ],
    );
    let admin = s.admin_token();
    let ana = s.user_token("ana@example.com", false);
    // 19 good syncs and one failure in the last day (95% ok: yellow), one failure older.
    let mut rows: Vec<Row> = (0..19)
        .map(|i| sync_row(&format!("s-{i:02}"), 10 + i, "orders", true, None))
        .collect();
    rows.push(sync_row("s-bad", 5, "events", false, Some("gone-user")));
    rows.push(sync_row("s-old", 60 * 30, "orders", false, None));
    insert(&s, &rows);
    exec_store(
        &s.store_url(),
        &[
            "INSERT INTO sync_state (table_id, status, rows, last_attempt_at, last_error) \
           VALUES ('events', 'error', 12, '2026-01-01T00:00:00.000000Z', 'warehouse unreachable')",
        ],
    );
    // The scheduler's first tick runs every job: a scheduler.run row, a telemetry run.
    wait_for(30, "the first scheduled runs", || {
        let runs = s.query("SELECT status FROM telemetry_runs WHERE finished_at IS NOT NULL");
        let sched = s.query("SELECT id FROM audit_log WHERE action = 'scheduler.run'");
        (!runs.is_empty() && !sched.is_empty()).then_some(())
    });

    let (status, card) = s.get_json("/api/admin/activity/health", &admin);
    assert_eq!(status, 200, "{card}");
    let field = |key: &str| -> Value {
        card["fields"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["key"] == key)
            .cloned()
            .unwrap_or_else(|| panic!("no {key} in {card}"))
    };
    assert_eq!(field("scheduler")["color"], "green", "{card}");
    assert!(
        field("scheduler")["value"]
            .as_str()
            .unwrap()
            .ends_with(" ago"),
        "{card}"
    );
    assert_eq!(field("sync_24h")["value"], "19 ok / 1 fail", "{card}");
    assert_eq!(
        field("sync_24h")["raw"],
        serde_json::json!({"ok": 19, "fail": 1})
    );
    assert_eq!(field("sync_24h")["color"], "yellow", "{card}");
    // Only gone-user acted today (tokens are created from the console, without a user).
    assert_eq!(field("active_users_today")["raw"], 1, "{card}");
    assert_eq!(field("telemetry_pipeline")["color"], "green", "{card}");
    assert_eq!(card["status"], "yellow", "{card}");
    assert_eq!(
        card["sentence"],
        "Degraded: sync_24h. Filter the activity timeline to these subsystems to investigate."
    );
    // Cached for everyone for 30 s: the same card, one audited read.
    let (_, again) = s.get_json("/api/admin/activity/health", &admin);
    assert_eq!(again["checked_at"], card["checked_at"]);
    let reads = s.audit_rows("activity.read", 1);
    let health_reads = reads
        .iter()
        .filter(|r| {
            r["params"]
                .as_str()
                .unwrap_or_default()
                .contains("\"health\"")
        })
        .count();
    assert_eq!(health_reads, 1, "{reads:?}");
    assert_eq!(s.get_json("/api/admin/activity/health", &ana).0, 403);

    // The sync feed: the day's syncs newest first, with the tables' current state.
    let (status, feed) = s.get_json("/api/admin/activity/sync", &admin);
    assert_eq!(status, 200, "{feed}");
    let ids: Vec<&str> = feed["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    let mut expected: Vec<String> = vec!["s-bad".into()];
    expected.extend((0..19).map(|i| format!("s-{i:02}")));
    assert_eq!(ids, expected, "{feed}");
    let bad = &feed["rows"][0];
    assert_eq!(bad["table_id"], "events");
    assert_eq!(bad["status"], "error");
    assert_eq!(bad["result"], "error.502");
    assert_eq!(bad["duration_ms"], 40);
    assert_eq!(bad["rows"], 3);
    assert_eq!(bad["user_email"], "gone-user");
    assert_eq!(feed["rows"][1]["source"], "scheduler");
    assert_eq!(feed["tables"][0]["table_id"], "events");
    assert_eq!(feed["tables"][0]["last_error"], "warehouse unreachable");
    assert_eq!(feed["window_minutes"], 1440);

    // Filters and paging.
    let (_, errors) = s.get_json(
        "/api/admin/activity/sync?status=error&since_minutes=43200",
        &admin,
    );
    let ids: Vec<&str> = errors["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["s-bad", "s-old"], "{errors}");
    let (_, orders) = s.get_json("/api/admin/activity/sync?table_id=orders&limit=10", &admin);
    assert_eq!(orders["rows"].as_array().unwrap().len(), 10);
    assert!(orders["tables"].as_array().unwrap().is_empty(), "{orders}");
    let next = orders["next_cursor"].as_str().unwrap();
    let (_, rest) = s.get_json(
        &format!(
            "/api/admin/activity/sync?table_id=orders&limit=10&cursor={}",
            urlencode(next)
        ),
        &admin,
    );
    assert_eq!(rest["rows"].as_array().unwrap().len(), 9, "{rest}");
    assert!(rest["next_cursor"].is_null());
    for (query, field) in [
        ("status=failed", "status"),
        ("limit=0", "limit"),
        ("limit=501", "limit"),
        ("since_minutes=0", "since_minutes"),
        ("cursor=nope", "cursor"),
    ] {
        let (status, body) = s.get_json(&format!("/api/admin/activity/sync?{query}"), &admin);
        assert_eq!(status, 422, "{query}: {body}");
        assert!(body.to_string().contains(field), "{query}: {body}");
    }
    assert_eq!(s.get_json("/api/admin/activity/sync", &ana).0, 403);

    // The CLI's companions.
    let config = TempDir::new();
    let cli = |args: &[&str]| {
        let mut all = vec!["--server", s.base.as_str(), "--token", admin.as_str()];
        all.extend_from_slice(args);
        svc(&config.0, &all)
    };
    let out = cli(&["admin", "activity", "health"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stdout(&out).contains("YELLOW: Degraded: sync_24h"),
        "{}",
        stdout(&out)
    );
    let out = cli(&[
        "admin", "activity", "sync", "--status", "error", "--since", "30d",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stdout(&out).contains("events") && stdout(&out).contains("error"),
        "{}",
        stdout(&out)
    );
    let out = cli(&[
        "admin",
        "activity",
        "kpis",
        "--actions",
        "sync.table",
        "--json",
    ]);
    let k: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(k["events_total"], 20, "{k}");
    assert_eq!(k["errors"], 1, "{k}");
    let out = cli(&["admin", "activity", "facets", "--actions", "sync.table"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stdout(&out).contains("orders") && stdout(&out).contains("19"),
        "{}",
        stdout(&out)
    );
    let bad = cli(&["admin", "activity", "kpis", "--result", "failed"]);
    assert_ne!(code(&bad), 0);
    assert!(stderr(&bad).contains("result"), "{}", stderr(&bad));
}

#[test]
fn the_catalogue_of_actions_is_served_and_in_the_readme() {
    let s = Server::start();
    let admin = s.admin_token();
    let ana = s.user_token("ana@example.com", false);
    let (status, doc) = s.get_json("/api/admin/audit/actions", &admin);
    assert_eq!(status, 200, "{doc}");
    let actions = doc["actions"].as_array().unwrap();
    assert!(actions.len() >= 40, "{doc}");
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    for a in actions {
        let name = a["action"].as_str().unwrap();
        assert!(!a["meaning"].as_str().unwrap().is_empty(), "{a}");
        assert!(
            readme.contains(&format!("`{name}`")),
            "README does not list `{name}`"
        );
    }
    assert_eq!(s.get_json("/api/admin/audit/actions", &ana).0, 403);
}

#[test]
fn audit_retention_prunes_old_rows_and_reports_it() {
    let s = Server::start_with(
        Backend::Sqlite,
        &[
            ("SCHEDULER_ENABLED", "true"),
            ("SCHEDULER_STARTUP_GRACE_SECONDS", "0"),
            ("SCHEDULER_TICK_SECONDS", "1"),
            ("SVC_AUDIT_RETENTION_DAYS", "30"),
        ],
    );
    let mut rows: Vec<Row> = (0..30)
        .map(|i| sync_row(&format!("old-{i}"), 60 * 24 * 31 + i, "orders", true, None))
        .collect();
    rows.push(sync_row("recent", 60 * 24 * 29, "orders", true, None));
    insert(&s, &rows);
    // The first tick may have run before, during or after the inserts: restart so one runs
    // after them, then every old row must be gone and the runs' reports must add up to 30.
    let mut s = s;
    s.restart();
    wait_for(30, "the old rows to be pruned", || {
        s.query("SELECT id FROM audit_log WHERE id LIKE 'old-%'")
            .is_empty()
            .then_some(())
    });
    let reports = wait_for(30, "the retention runs' reports", || {
        let rows = s.query(
            "SELECT params FROM audit_log WHERE action = 'scheduler.run' \
             AND resource = 'audit_retention' AND params LIKE '%pruned%'",
        );
        let pruned: u64 = rows
            .iter()
            .filter_map(|r| {
                let params: Value = serde_json::from_str(r["params"].as_str()?).ok()?;
                let outcome = params["outcome"].as_str()?.to_owned();
                assert!(outcome.ends_with("older than 30 days"), "{outcome}");
                outcome.split(' ').nth(1)?.parse::<u64>().ok()
            })
            .sum();
        (pruned == 30).then_some(rows)
    });
    assert!(!reports.is_empty());
    let left = s.query("SELECT id FROM audit_log WHERE id LIKE 'old-%' OR id = 'recent'");
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(left[0]["id"], "recent");
}
