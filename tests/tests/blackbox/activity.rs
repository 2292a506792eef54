//! The audit timeline (`GET /api/admin/activity`) through the real server and the `svc`
//! client: every filter narrows to exactly the rows it names (prefixes taken literally),
//! rows carry parameters as objects and a user label even when the user is gone, the keyset
//! walk neither skips nor repeats while rows are written, reads are audited once a minute,
//! and bad input is a 422 naming the field.

use chrono::{Duration, SecondsFormat, Utc};
use serde_json::Value;

use crate::support::{backends, exec_store, Server, TempDir};
use crate::svc_cli::{code, stderr, stdout, svc};
use crate::telemetry_export_ask::urlencode;

fn ts(minutes_ago: i64) -> String {
    (Utc::now() - Duration::minutes(minutes_ago)).to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// Writes audit rows straight into the store: (id, minutes ago, user, action, resource,
/// params, client kind, result).
#[allow(clippy::type_complexity)]
fn insert(
    s: &Server,
    rows: &[(
        &str,
        i64,
        Option<&str>,
        &str,
        &str,
        &str,
        Option<&str>,
        &str,
    )],
) {
    let statements: Vec<String> = rows
        .iter()
        .map(|(id, ago, user, action, resource, params, kind, result)| {
            let text = |v: Option<&str>| v.map_or("NULL".to_owned(), |v| format!("'{v}'"));
            let params = params.replace('\'', "''");
            format!(
                "INSERT INTO audit_log (id, timestamp, user_id, action, resource, params, client_kind, correlation_id, result, duration_ms) \
                 VALUES ('{id}', '{}', {}, '{action}', '{resource}', '{params}', {}, 'req-{id}', '{result}', 5)",
                ts(*ago),
                text(*user),
                text(*kind),
            )
        })
        .collect();
    let refs: Vec<&str> = statements.iter().map(String::as_str).collect();
    exec_store(&s.store_url(), &refs);
}

fn ids(s: &Server, token: &str, query: &str) -> Vec<String> {
    let (status, page) = s.get_json(&format!("/api/admin/activity?{query}"), token);
    assert_eq!(status, 200, "{query}: {page}");
    page["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_owned())
        .filter(|id| id.starts_with("t-"))
        .collect()
}

#[test]
fn the_timeline_filters_pages_and_refuses_bad_input() {
    for backend in backends() {
        let s = Server::start_with(backend, &[]);
        let admin = s.admin_token();
        let ana = s.user_token("ana@example.com", false);
        let ana_id = s.query("SELECT id FROM users WHERE email = 'ana@example.com'")[0]["id"]
            .as_str()
            .unwrap()
            .to_owned();
        let a = Some(ana_id.as_str());
        insert(
            &s,
            &[
                (
                    "t-1",
                    10,
                    a,
                    "catalog.list",
                    "catalog",
                    r#"{"q":"it's \"quoted\" 50%"}"#,
                    Some("cli"),
                    "success",
                ),
                (
                    "t-2",
                    20,
                    a,
                    "query.run",
                    "table:orders",
                    r#"{"sql":"SELECT 1"}"#,
                    Some("web"),
                    "error.400",
                ),
                (
                    "t-3",
                    30,
                    None,
                    "query_x.run",
                    "table:orders",
                    "{}",
                    None,
                    "success",
                ),
                (
                    "t-4",
                    40,
                    Some("gone-user"),
                    "catalog.schema",
                    "table:orders",
                    "{}",
                    Some("scheduler"),
                    "error.403",
                ),
                (
                    "t-5",
                    60 * 30,
                    a,
                    "catalog.list",
                    "catalog",
                    "{}",
                    Some("cli"),
                    "success",
                ),
                (
                    "t-6",
                    60 * 24 * 40,
                    a,
                    "catalog.list",
                    "catalog",
                    "{}",
                    Some("cli"),
                    "success",
                ),
            ],
        );

        // The default window is a day; since_minutes and since/until move it.
        assert_eq!(ids(&s, &admin, "limit=200"), ["t-1", "t-2", "t-3", "t-4"]);
        assert_eq!(
            ids(&s, &admin, "since_minutes=43200&limit=200"),
            ["t-1", "t-2", "t-3", "t-4", "t-5"]
        );
        let since = ts(60 * 24 * 41);
        let until = ts(60 * 24 * 39);
        assert_eq!(
            ids(
                &s,
                &admin,
                &format!("since={}&until={}", urlencode(&since), urlencode(&until))
            ),
            ["t-6"]
        );

        // Each filter alone.
        for (query, expected) in [
            (format!("user_id={ana_id}"), vec!["t-1", "t-2"]),
            ("action_prefix=catalog.".into(), vec!["t-1", "t-4"]),
            // `_` is a character, not a wildcard: "query_" does not match "query.run".
            ("action_prefix=query_".into(), vec!["t-3"]),
            ("action_prefix=%25".into(), vec![]),
            (
                "action_in=query.run,catalog.schema".into(),
                vec!["t-2", "t-4"],
            ),
            ("resource=table:orders".into(), vec!["t-2", "t-3", "t-4"]),
            ("result=success".into(), vec!["t-1", "t-3"]),
            ("result=error".into(), vec!["t-2", "t-4"]),
            ("result=error.403".into(), vec!["t-4"]),
            ("client_kind=cli".into(), vec!["t-1"]),
            ("source=system".into(), vec!["t-3"]),
            ("source=scheduler".into(), vec!["t-4"]),
            ("correlation_id=req-t-2".into(), vec!["t-2"]),
            ("q=SELECT".into(), vec!["t-2"]),
            // As typed, or as the JSON text has it.
            (
                format!("q={}", urlencode(r#"it's "quoted" 50%"#)),
                vec!["t-1"],
            ),
            (format!("q={}", urlencode(r#"\"quoted\""#)), vec!["t-1"]),
            ("q=50_".into(), vec![]),
            (format!("q={}", "x".repeat(10_240)), vec![]),
            (format!("user_id={ana_id}&result=error"), vec!["t-2"]),
        ] {
            assert_eq!(
                ids(&s, &admin, &query),
                expected,
                "{}",
                &query[..query.len().min(80)]
            );
        }

        // Rows: parameters as objects, a source, and a user label even for a gone user.
        let (_, page) = s.get_json("/api/admin/activity?limit=200", &admin);
        let row = |id: &str| -> Value {
            page["rows"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["id"] == id)
                .cloned()
                .unwrap()
        };
        assert_eq!(row("t-2")["params"]["sql"], "SELECT 1");
        assert_eq!(row("t-1")["user_email"], "ana@example.com");
        assert_eq!(row("t-4")["user_email"], "gone-user");
        assert_eq!(row("t-4")["user_name"], "gone-user");
        assert_eq!(row("t-3")["source"], "system");
        assert!(row("t-3")["user_email"].is_null());
        assert_eq!(row("t-4")["source"], "scheduler");
        assert_eq!(page["filter"]["since_minutes"], 1440);

        // Keyset: walking two at a time while rows are written sees each older row once.
        let mut seen = Vec::new();
        let mut cursor: Option<String> = None;
        let mut written = 0;
        loop {
            let mut path = "/api/admin/activity?since_minutes=43200&limit=2".to_owned();
            if let Some(c) = &cursor {
                path.push_str(&format!("&cursor={}", urlencode(c)));
            }
            let (status, page) = s.get_json(&path, &admin);
            assert_eq!(status, 200, "{page}");
            for r in page["rows"].as_array().unwrap() {
                seen.push(r["id"].as_str().unwrap().to_owned());
            }
            // New rows arrive at the head meanwhile; the walk goes on from where it was.
            written += 1;
            let id = format!("n-{written}");
            insert(
                &s,
                &[(
                    &id,
                    0,
                    a,
                    "catalog.list",
                    "catalog",
                    "{}",
                    Some("cli"),
                    "success",
                )],
            );
            match page["next_cursor"].as_str() {
                Some(c) => cursor = Some(c.to_owned()),
                None => break,
            }
        }
        let fixture: Vec<&String> = seen.iter().filter(|id| id.starts_with("t-")).collect();
        assert_eq!(fixture, ["t-1", "t-2", "t-3", "t-4", "t-5"]);
        let mut unique = seen.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), seen.len(), "no row twice: {seen:?}");
        assert!(
            seen.iter().all(|id| !id.starts_with("n-")),
            "rows written after the first page are not in the walk"
        );

        // Reads are audited once a minute per filter; paging is not a new read.
        let reads = s.query("SELECT params FROM audit_log WHERE action = 'activity.read'");
        let with = |needle: &str| {
            reads
                .iter()
                .filter(|r| r["params"].as_str().unwrap_or_default().contains(needle))
                .count()
        };
        assert_eq!(
            with("\"since_minutes\":43200"),
            1,
            "the walk repeats an earlier read: {reads:?}"
        );
        assert_eq!(
            with("\"action_prefix\""),
            3,
            "three prefixes, three reads: {reads:?}"
        );
        assert_eq!(with("\"endpoint\":\"timeline\""), reads.len());

        // Bad input: 422 naming the field; a non-admin: 403.
        for (query, field) in [
            ("since_minutes=0", "since_minutes"),
            ("since_minutes=43201", "since_minutes"),
            ("limit=0", "limit"),
            ("limit=201", "limit"),
            ("cursor=garbage", "cursor"),
            ("cursor=2026-01-01T00:00:00Z", "cursor"),
            ("cursor=%7B%22ts%22%3A1%7D", "cursor"),
            ("since=yesterday", "since"),
            ("until=2026-13-01", "until"),
            ("since_minutes=60&since=2026-01-01", "since_minutes"),
            ("result=failed", "result"),
            ("source=martian", "source"),
            ("client_kind=system", "client_kind"),
        ] {
            let (status, body) = s.get_json(&format!("/api/admin/activity?{query}"), &admin);
            assert_eq!(status, 422, "{query}: {body}");
            assert!(body.to_string().contains(field), "{query}: {body}");
        }
        let q = "x".repeat(16_385);
        assert_eq!(
            s.get_json(&format!("/api/admin/activity?q={q}"), &admin).0,
            422
        );
        let (status, body) = s.get_json("/api/admin/activity", &ana);
        assert_eq!(status, 403, "{body}");
    }
}

/// The `svc` client prints the timeline as a table, as JSON, and filters as the API does.
#[test]
fn svc_admin_activity_lists_and_filters() {
    let s = Server::start();
    let admin = s.admin_token();
    let ana = s.user_token("ana@example.com", false);
    let ana_id = s.query("SELECT id FROM users WHERE email = 'ana@example.com'")[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    insert(
        &s,
        &[
            (
                "t-1",
                5,
                Some(ana_id.as_str()),
                "catalog.list",
                "catalog",
                "{}",
                Some("cli"),
                "success",
            ),
            (
                "t-2",
                6,
                Some(ana_id.as_str()),
                "query.run",
                "table:x",
                "{}",
                Some("cli"),
                "error.400",
            ),
        ],
    );
    let config = TempDir::new();
    let cli = |args: &[&str]| {
        let mut all = vec!["--server", s.base.as_str(), "--token", admin.as_str()];
        all.extend_from_slice(args);
        svc(&config.0, &all)
    };
    let out = cli(&[
        "admin",
        "activity",
        "--user",
        "ana@example.com",
        "--result",
        "error",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("query.run") && !text.contains("catalog.list"),
        "{text}"
    );
    assert!(
        text.contains("TIME") && text.contains("error.400"),
        "{text}"
    );
    let out = cli(&[
        "admin", "activity", "--action", "catalog.", "--since", "1h", "--json",
    ]);
    let json: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let ids: Vec<&str> = json["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["id"].as_str())
        .filter(|id| id.starts_with("t-"))
        .collect();
    assert_eq!(ids, ["t-1"], "{json}");
    let bad = cli(&["admin", "activity", "--result", "failed"]);
    assert_ne!(code(&bad), 0);
    assert!(stderr(&bad).contains("result"), "{}", stderr(&bad));
    drop(ana);
}

/// Saved views: each administrator's own, saved again under a name they keep their id, and
/// every limit is a clear error (422 naming the field, 409 naming the count).
#[test]
fn saved_views_are_each_admins_own_and_bounded() {
    const V: &str = "/api/admin/observability/views";
    for backend in backends() {
        let s = Server::start_with(backend, &[]);
        let admin = s.admin_token();
        let other = s.user_token("other-admin@example.com", true);
        let ana = s.user_token("ana@example.com", false);
        let body = |name: &str, query: Value| serde_json::json!({ "name": name, "query": query });

        let (status, first) = s.post_json(
            V,
            &admin,
            &body(" errors ", serde_json::json!({"result": "error"})),
        );
        assert_eq!(status, 200, "{first}");
        assert_eq!(first["name"], "errors");
        let id = first["id"].as_str().unwrap().to_owned();
        let (_, again) = s.post_json(
            V,
            &admin,
            &body("errors", serde_json::json!({"result": "error.500"})),
        );
        assert_eq!(
            again["id"],
            id.as_str(),
            "saved again under its name: same view"
        );
        assert_eq!(again["query"]["result"], "error.500");
        assert_eq!(again["created_at"], first["created_at"]);
        let (_, list) = s.get_json(V, &admin);
        assert_eq!(list["views"].as_array().unwrap().len(), 1, "{list}");

        // Another administrator sees none of them and can change none.
        let (_, theirs) = s.get_json(V, &other);
        assert!(theirs["views"].as_array().unwrap().is_empty(), "{theirs}");
        let one = format!("{V}/{id}");
        assert_eq!(
            s.put_json(&one, &other, &body("x", serde_json::json!({})))
                .0,
            404
        );
        assert_eq!(s.delete(&one, &other).0, 404);

        // Renaming by id; a name another view has is a conflict.
        assert_eq!(
            s.post_json(V, &admin, &body("second", serde_json::json!({})))
                .0,
            200
        );
        assert_eq!(
            s.put_json(&one, &admin, &body("second", serde_json::json!({})))
                .0,
            409
        );
        let (status, renamed) =
            s.put_json(&one, &admin, &body("renamed", serde_json::json!({"a": 1})));
        assert_eq!(
            (status, renamed["name"].as_str()),
            (200, Some("renamed")),
            "{renamed}"
        );

        for (bad, field) in [
            (body("", serde_json::json!({})), "name"),
            (body(&"n".repeat(81), serde_json::json!({})), "name"),
            (
                body("big", serde_json::json!({ "x": "y".repeat(65_536) })),
                "query",
            ),
            (body("list", serde_json::json!([1, 2])), "query"),
        ] {
            let (status, answer) = s.post_json(V, &admin, &bad);
            assert_eq!(status, 422, "{field}: {answer}");
            assert!(answer.to_string().contains(field), "{answer}");
        }
        assert_eq!(
            s.post_json(V, &admin, &body(&"n".repeat(80), serde_json::json!({})))
                .0,
            200
        );

        // At 100 views a new name is refused, naming the limit; an existing name still saves.
        for i in 0..97 {
            assert_eq!(
                s.post_json(V, &admin, &body(&format!("v{i}"), serde_json::json!({})))
                    .0,
                200
            );
        }
        let (status, answer) = s.post_json(V, &admin, &body("one-more", serde_json::json!({})));
        assert_eq!(status, 409, "{answer}");
        assert!(answer.to_string().contains("100"), "{answer}");
        assert_eq!(
            s.post_json(V, &admin, &body("second", serde_json::json!({"b": 2})))
                .0,
            200
        );

        let (status, deleted) = s.delete(&one, &admin);
        assert_eq!(
            (status, deleted["deleted"].as_str()),
            (200, Some(id.as_str()))
        );
        assert_eq!(s.delete(&one, &admin).0, 404);
        assert_eq!(s.get_json(V, &ana).0, 403);
    }
}

/// `svc admin views` saves, lists and deletes.
#[test]
fn svc_admin_views_save_list_delete() {
    let s = Server::start();
    let admin = s.admin_token();
    let config = TempDir::new();
    let cli = |args: &[&str]| {
        let mut all = vec!["--server", s.base.as_str(), "--token", admin.as_str()];
        all.extend_from_slice(args);
        svc(&config.0, &all)
    };
    let out = cli(&["admin", "views", "save", "errors", r#"{"result":"error"}"#]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let listed: Value =
        serde_json::from_str(&stdout(&cli(&["admin", "views", "list", "--json"]))).unwrap();
    let view = &listed["views"][0];
    assert_eq!(view["query"]["result"], "error", "{listed}");
    assert!(stdout(&cli(&["admin", "views", "list"])).contains("errors"));
    let bad = cli(&["admin", "views", "save", "x", "not json"]);
    assert_ne!(code(&bad), 0);
    assert!(stderr(&bad).contains("not JSON"), "{}", stderr(&bad));
    let id = view["id"].as_str().unwrap();
    assert_eq!(code(&cli(&["admin", "views", "delete", id])), 0);
    let listed: Value =
        serde_json::from_str(&stdout(&cli(&["admin", "views", "list", "--json"]))).unwrap();
    assert!(listed["views"].as_array().unwrap().is_empty(), "{listed}");
}

/// `svc admin activity --follow --json` prints the rows already there, then each row written
/// later exactly once, oldest first, until stopped.
#[test]
fn svc_admin_activity_follow_prints_new_rows_once_as_they_arrive() {
    use std::io::{BufRead, BufReader};
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    let s = Server::start();
    let admin = s.admin_token();
    insert(
        &s,
        &[(
            "f-0",
            5,
            None,
            "follow.seed",
            "x",
            "{}",
            Some("cli"),
            "success",
        )],
    );
    let config = TempDir::new();
    let mut child = crate::svc_cli::svc_command(
        &config.0,
        &[
            "--server",
            s.base.as_str(),
            "--token",
            admin.as_str(),
            "admin",
            "activity",
            "--action",
            "follow.",
            "--follow",
            "--json",
        ],
    )
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::null())
    .spawn()
    .unwrap();
    let (tx, rx) = mpsc::channel::<Value>();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if let Ok(v) = serde_json::from_str(&line) {
                if tx.send(v).is_err() {
                    return;
                }
            }
        }
    });
    // Up to `n` rows, waiting at most `secs` (the client polls every 2 s).
    let next_ids = |n: usize, secs: u64| -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(secs);
        let mut ids = Vec::new();
        while ids.len() < n && Instant::now() < deadline {
            if let Ok(v) = rx.recv_timeout(Duration::from_millis(200)) {
                ids.push(v["id"].as_str().unwrap_or_default().to_owned());
            }
        }
        ids
    };
    assert_eq!(next_ids(1, 20), ["f-0"]);
    // Three rows in two bursts; each appears once.
    insert(
        &s,
        &[
            (
                "f-1",
                0,
                None,
                "follow.a",
                "x",
                "{}",
                Some("cli"),
                "success",
            ),
            (
                "f-2",
                0,
                None,
                "follow.b",
                "x",
                "{}",
                Some("web"),
                "error.500",
            ),
        ],
    );
    let mut got = next_ids(2, 20);
    got.sort();
    assert_eq!(got, ["f-1", "f-2"]);
    insert(
        &s,
        &[(
            "f-3",
            0,
            None,
            "follow.c",
            "x",
            "{}",
            Some("cli"),
            "success",
        )],
    );
    assert_eq!(next_ids(1, 20), ["f-3"]);
    // Nothing else arrives (no row printed twice; other actions filtered out).
    insert(
        &s,
        &[("o-1", 0, None, "other.x", "x", "{}", Some("cli"), "success")],
    );
    assert!(next_ids(1, 6).is_empty(), "only new follow.* rows, once");
    let _ = child.kill();
    let _ = child.wait();
}
