//! The ticketing source through the real server: signed webhooks (good, bad, missing, a
//! flood), replays acknowledged without a second row, bad bodies refused by name, deliveries
//! acknowledged and then SIGKILLed before any compaction all present after the restart,
//! custom fields kept byte for byte, deletes, events in shuffled order converging to the
//! in-order state, and backfill paging through a stub tracker on loopback.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;

use crate::operations::query_rows;
use crate::support::{Backend, Server};
use crate::svc_cli::{code, svc};

const SECRET: &str = "whsec-test-3f9a";

fn sign(body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// The environment of a server with ticketing connections `names`; compaction every
/// `interval_ms`.
fn env(names: &[&str], interval_ms: &str) -> Vec<(String, String)> {
    let mut env = vec![("TEST_TICKETING_SECRET".to_owned(), SECRET.to_owned())];
    for n in names {
        let up = n.to_ascii_uppercase();
        env.push((
            format!("SVC_TICKETING_{up}_SECRET_ENV"),
            "TEST_TICKETING_SECRET".into(),
        ));
        env.push((
            format!("SVC_TICKETING_{up}_COMPACT_INTERVAL_MS"),
            interval_ms.into(),
        ));
    }
    env
}

fn start(env: &[(String, String)]) -> Server {
    let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    Server::start_with(Backend::Sqlite, &pairs)
}

/// Posts a delivery; `signature` None sends none.
fn deliver(
    s: &Server,
    name: &str,
    body: &[u8],
    id: Option<&str>,
    signature: Option<&str>,
) -> (u16, Value) {
    let mut rb = s
        .http
        .post(s.url(&format!("/api/webhooks/ticketing/{name}")))
        .header("content-type", "application/json")
        .body(body.to_vec());
    if let Some(id) = id {
        rb = rb.header("X-Atlassian-Webhook-Identifier", id);
    }
    if let Some(sig) = signature {
        rb = rb.header("X-Hub-Signature", sig);
    }
    s.send(rb)
}

fn signed(s: &Server, name: &str, body: &str, id: &str) -> (u16, Value) {
    deliver(
        s,
        name,
        body.as_bytes(),
        Some(id),
        Some(&sign(body.as_bytes())),
    )
}

fn issue_event(event: &str, key: &str, t: i64, summary: &str, extra: &str) -> String {
    format!(
        r#"{{"timestamp":{t},"webhookEvent":"{event}","user":{{"displayName":"Ann"}},"issue":{{"id":"{}","key":"{key}","fields":{{"summary":"{summary}","project":{{"key":"OPS"}},"issuetype":{{"name":"Bug"}},"status":{{"name":"Open"}},"labels":["x"]{extra}}}}}}}"#,
        key.trim_start_matches("OPS-")
    )
}

fn compact(s: &Server, admin: &str, name: &str) -> Value {
    let (status, body) = s.post_json(
        &format!("/api/admin/ticketing/{name}/compact"),
        admin,
        &json!({}),
    );
    assert_eq!(status, 200, "{body}");
    body
}

const NESTED: &str = r#"{"b":[1.50,{"z":null,"a":"\u00e9\n"}],"a":{"deep":{"n":-0.0}}}"#;

#[test]
fn signed_webhooks_are_kept_once_survive_a_kill_and_fold_into_tables() {
    let mut s = start(&env(&["jira"], "3600000"));
    let admin = s.admin_token();

    // Signatures: missing, malformed, of another body → 401, audited without the body.
    let body = issue_event(
        "jira:issue_created",
        "OPS-1",
        1_700_000_000_000,
        "Disk full",
        &format!(r#","customfield_10010":{NESTED},"customfield_2":"plain""#),
    );
    let (st, e) = deliver(&s, "jira", body.as_bytes(), Some("d-1"), None);
    assert_eq!(st, 401, "{e}");
    assert!(
        e["detail"].as_str().unwrap().contains("X-Hub-Signature"),
        "{e}"
    );
    let (st, _) = deliver(&s, "jira", body.as_bytes(), Some("d-1"), Some("sha256=zz"));
    assert_eq!(st, 401);
    let (st, e) = deliver(&s, "jira", body.as_bytes(), Some("d-1"), Some(&sign(b"{}")));
    assert_eq!(st, 401, "{e}");
    let rows = s.audit_rows("ticketing.webhook_rejected", 3);
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert!(
        rows.iter().all(|r| r["resource"] == "ticketing:jira"
            && !r["params"].as_str().unwrap_or("").contains("Disk full")),
        "{rows:?}"
    );

    // An unknown connection is a 404 whatever the signature.
    let (st, _) = deliver(
        &s,
        "nope",
        body.as_bytes(),
        None,
        Some(&sign(body.as_bytes())),
    );
    assert_eq!(st, 404);

    // Good deliveries, each replayed three times: one accepted, the rest duplicates.
    let comment = r#"{"timestamp":1700000001000,"webhookEvent":"comment_created","issue":{"id":"2","key":"OPS-2","fields":{}},"comment":{"id":"900","body":"first!","author":{"displayName":"Bo"}}}"#;
    let update = issue_event("jira:issue_updated", "OPS-1", 1_700_000_002_000, "Disk full again",
        &format!(r#","customfield_10010":{NESTED}"#))
        .replacen(r#""webhookEvent""#, r#""changelog":{"id":"501","items":[{"field":"summary","fieldtype":"jira","fromString":"Disk full","toString":"Disk full again"}]},"webhookEvent""#, 1);
    let future = issue_event(
        "jira:issue_created",
        "OPS-3",
        4_102_444_800_000,
        "From the future",
        "",
    );
    let unknown =
        r#"{"timestamp":1700000003000,"webhookEvent":"sprint_started","sprint":{"id":7}}"#;
    for (id, b) in [
        ("d-1", body.as_str()),
        ("d-2", comment),
        ("d-3", update.as_str()),
        ("d-4", future.as_str()),
        ("d-5", unknown),
    ] {
        let (st, ack) = signed(&s, "jira", b, id);
        assert_eq!(
            (st, ack["status"].as_str()),
            (200, Some("accepted")),
            "{id}: {ack}"
        );
        for _ in 0..3 {
            let (st, ack) = signed(&s, "jira", b, id);
            assert_eq!(
                (st, ack["status"].as_str()),
                (200, Some("duplicate")),
                "{id}: {ack}"
            );
        }
    }
    // No identifier: deduplicated by the body's hash.
    let link =
        r#"{"timestamp":1700000004000,"webhookEvent":"issuelink_created","issueLink":{"id":1}}"#;
    let sig = sign(link.as_bytes());
    let first = deliver(&s, "jira", link.as_bytes(), None, Some(&sig)).1;
    let again = deliver(&s, "jira", link.as_bytes(), None, Some(&sig)).1;
    assert_eq!(
        (first["status"].as_str(), again["status"].as_str()),
        (Some("accepted"), Some("duplicate"))
    );
    assert!(first["delivery_id"]
        .as_str()
        .unwrap()
        .starts_with("sha256:"));

    // Bad bodies, correctly signed: refused by name.
    for (b, says) in [
        ("not json", "not JSON"),
        ("[1,2]", "JSON object"),
        (
            r#"{"webhookEvent":"jira:issue_updated","issue":{"id":"9","fields":{}}}"#,
            "issue.key",
        ),
    ] {
        let (st, e) = signed(&s, "jira", b, "bad");
        assert_eq!(st, 400, "{b}: {e}");
        assert!(e["detail"].as_str().unwrap().contains(says), "{b}: {e}");
    }
    // 20 MB announced: refused before a byte of it is read.
    let answer = s.post_head_only(
        "/api/webhooks/ticketing/jira",
        &[
            ("Content-Type", "application/json"),
            ("X-Hub-Signature", &sign(b"x")),
        ],
        20 << 20,
    );
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("exceeds the limit"), "{answer}");

    let before = s.get_json("/api/admin/ticketing/jira", &admin).1;
    assert_eq!(
        [
            &before["received"],
            &before["duplicates"],
            &before["rejected_signatures"],
            &before["pending"]
        ],
        [&json!(6), &json!(16), &json!(3), &json!(6)],
        "{before}"
    );

    // Acknowledged, then killed before any compaction (the interval is an hour, and the one
    // at start ran before these arrived): everything acknowledged is there after restart.
    s.kill();
    s.start_again();
    let admin = s.admin_token();
    let status = |s: &Server| s.get_json("/api/admin/ticketing/jira", &admin).1;
    let st = status(&s);
    assert_eq!(
        (st["received"].as_u64(), st["pending"].as_u64()),
        (Some(6), Some(0)),
        "{st}"
    );

    let events = query_rows(
        &s,
        &admin,
        "SELECT delivery_id, flags, webhook_event FROM jira_events ORDER BY delivery_id",
    );
    let ids: Vec<&str> = events
        .iter()
        .map(|r| r["delivery_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 6, "{events:?}");
    assert_eq!(&ids[..5], ["d-1", "d-2", "d-3", "d-4", "d-5"]);
    assert_eq!(events[3]["flags"], "future_timestamp", "{events:?}");

    let issues = query_rows(
        &s,
        &admin,
        "SELECT key, summary, status, custom_fields, labels FROM jira_issues ORDER BY key",
    );
    let keys: Vec<&str> = issues.iter().map(|r| r["key"].as_str().unwrap()).collect();
    // OPS-2 has a comment but no issue event yet: it is not an issue row.
    assert_eq!(keys, ["OPS-1", "OPS-3"], "{issues:?}");
    assert_eq!(issues[0]["summary"], "Disk full again");
    assert_eq!(
        issues[0]["custom_fields"].as_str().unwrap(),
        format!(r#"{{"customfield_10010":{NESTED}}}"#),
        "custom fields byte for byte"
    );
    let comments = query_rows(
        &s,
        &admin,
        "SELECT comment_id, issue_key, body, author FROM jira_comments",
    );
    assert_eq!(
        comments,
        [json!({"comment_id": "900", "issue_key": "OPS-2", "body": "first!", "author": "Bo"})]
    );
    let changes = query_rows(&s, &admin, "SELECT issue_key, changelog_id, field, from_string, to_string, author FROM jira_issue_changelog");
    assert_eq!(
        changes,
        [
            json!({"issue_key": "OPS-1", "changelog_id": 501, "field": "summary",
        "from_string": "Disk full", "to_string": "Disk full again", "author": "Ann"})
        ]
    );

    // The issue the comment named arrives later; a delete removes OPS-1 but not its history.
    let (st, _) = signed(
        &s,
        "jira",
        &issue_event("jira:issue_created", "OPS-2", 1_700_000_000_500, "Late", ""),
        "d-6",
    );
    assert_eq!(st, 200);
    let (st, _) = signed(
        &s,
        "jira",
        &issue_event(
            "jira:issue_deleted",
            "OPS-1",
            1_700_000_009_000,
            "Disk full again",
            "",
        ),
        "d-7",
    );
    assert_eq!(st, 200);
    // An older update arriving after the delete does not bring it back.
    let (st, _) = signed(
        &s,
        "jira",
        &issue_event(
            "jira:issue_updated",
            "OPS-1",
            1_700_000_005_000,
            "stale",
            "",
        ),
        "d-8",
    );
    assert_eq!(st, 200);
    let done = compact(&s, &admin, "jira");
    assert_eq!(done["events"], 3, "{done}");
    let keys: Vec<String> = query_rows(&s, &admin, "SELECT key FROM jira_issues ORDER BY key")
        .iter()
        .map(|r| r["key"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(keys, ["OPS-2", "OPS-3"]);
    let history = query_rows(
        &s,
        &admin,
        "SELECT count(*) AS n FROM jira_issue_changelog WHERE issue_key = 'OPS-1'",
    );
    assert_eq!(history[0]["n"], 1);

    // The tables are ordinary local tables in the catalog, under grants.
    let row = s
        .catalog_row(&admin, "jira_issues")
        .expect("jira_issues in the catalog");
    assert_eq!(row["source_type"], "ticketing", "{row}");
    let analyst = s.user_token("analyst@example.com", false);
    assert!(
        s.catalog_row(&analyst, "jira_issues").is_none(),
        "no grant, no table"
    );

    // The CLI's status: deliveries received survive the kill (they are in the log); the
    // replay and refusal counts since the last compaction do not.
    let config = crate::support::TempDir::new();
    let out = svc(
        &config.0,
        &[
            "--server",
            s.base.as_str(),
            "--token",
            admin.as_str(),
            "admin",
            "ticketing",
            "status",
            "jira",
            "--json",
        ],
    );
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    let out: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (&out["received"], &out["future_timestamps"], &out["pending"]),
        (&json!(9), &json!(1), &json!(0)),
        "{out}"
    );
    let tables: Vec<&str> = out["tables"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["table_id"].as_str().unwrap())
        .collect();
    assert_eq!(
        tables,
        [
            "jira_issues",
            "jira_comments",
            "jira_issue_changelog",
            "jira_events"
        ]
    );
    assert_eq!(s.audit_rows("ticketing.compact", 1).len(), 1);

    // A flood of bad signatures from one address is limited; a valid delivery still lands.
    let mut limited = 0;
    for _ in 0..40 {
        let (st, _) = deliver(&s, "jira", b"{}", None, Some(&sign(b"other")));
        assert!(st == 401 || st == 429, "{st}");
        limited += usize::from(st == 429);
    }
    assert!(limited >= 15, "{limited} of 40 limited");
    let (st, ack) = signed(&s, "jira", unknown, "d-9");
    assert_eq!(
        (st, ack["status"].as_str()),
        (200, Some("accepted")),
        "{ack}"
    );
}

/// Events for a few issues: creates, updates with changelogs, comments, deletes.
fn stream(n: usize) -> Vec<(String, String)> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % m
    };
    (0..n)
        .map(|i| {
            let key = format!("OPS-{}", next(50));
            let t = 1_700_000_000_000 + i as i64 * 1000;
            let body = match next(12) {
                0 => issue_event("jira:issue_deleted", &key, t, "gone", ""),
                1 | 2 => format!(
                    r#"{{"timestamp":{t},"webhookEvent":"comment_updated","issue":{{"id":"1","key":"{key}","fields":{{}}}},"comment":{{"id":"{}","body":"c{i}"}}}}"#,
                    next(80)
                ),
                _ => issue_event("jira:issue_updated", &key, t, &format!("s{i}"),
                    &format!(r#","customfield_1":{{"v":{i}}}"#))
                    .replacen(r#""webhookEvent""#, &format!(r#""changelog":{{"id":"{}","items":[{{"field":"summary","toString":"s{i}"}}]}},"webhookEvent""#, i + 1), 1),
            };
            (format!("e-{i}"), body)
        })
        .collect()
}

#[test]
fn events_in_shuffled_order_converge_to_the_in_order_state() {
    let s = start(&env(&["inorder", "shuffled"], "3600000"));
    let admin = s.admin_token();
    let events = stream(3_000);
    for (id, body) in &events {
        assert_eq!(signed(&s, "inorder", body, id).0, 200);
    }
    // Shuffled, from eight senders at once, each delivery twice.
    let mut shuffled: Vec<(String, String)> = events
        .iter()
        .chain(events.iter().step_by(2))
        .cloned()
        .collect();
    let mut x: u64 = 42;
    for i in (1..shuffled.len()).rev() {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        shuffled.swap(i, (x >> 33) as usize % (i + 1));
    }
    let queue = Arc::new(Mutex::new(shuffled));
    std::thread::scope(|scope| {
        for _ in 0..8 {
            let (queue, s) = (queue.clone(), &s);
            scope.spawn(move || loop {
                let Some((id, body)) = queue.lock().unwrap().pop() else {
                    break;
                };
                let (st, ack) = signed(s, "shuffled", &body, &id);
                assert_eq!(st, 200, "{ack}");
            });
        }
    });
    compact(&s, &admin, "inorder");
    compact(&s, &admin, "shuffled");
    for (table, order) in [
        ("issues", "key"),
        ("comments", "comment_id"),
        ("issue_changelog", "changelog_id, item_index"),
    ] {
        let a = query_rows(
            &s,
            &admin,
            &format!("SELECT * FROM inorder_{table} ORDER BY {order}"),
        );
        let b = query_rows(
            &s,
            &admin,
            &format!("SELECT * FROM shuffled_{table} ORDER BY {order}"),
        );
        assert!(!a.is_empty(), "{table}");
        assert_eq!(a, b, "{table} differs");
    }
    let n = query_rows(&s, &admin, "SELECT count(*) AS n FROM shuffled_events");
    assert_eq!(n[0]["n"], 3_000, "each delivery once");
}

/// Each request a stub tracker received: (request line, authorization header).
type Requests = Arc<Mutex<Vec<(String, String)>>>;

/// A stub tracker: `/rest/api/3/search` over `issues`, `page` at a time; records each
/// request's line and authorization header.
fn stub_tracker(issues: Vec<Value>, page: usize) -> (String, Requests) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            let mut auth = String::new();
            loop {
                let mut h = String::new();
                if reader.read_line(&mut h).unwrap() == 0 || h == "\r\n" {
                    break;
                }
                if let Some(v) = h.to_ascii_lowercase().strip_prefix("authorization: ") {
                    auth = v.trim().to_owned();
                }
            }
            let start: usize = line
                .split(['?', '&', ' '])
                .find_map(|p| p.strip_prefix("startAt="))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            log.lock().unwrap().push((line.clone(), auth));
            let slice: Vec<&Value> = issues.iter().skip(start).take(page).collect();
            let body = json!({"startAt": start, "maxResults": page, "total": issues.len(), "issues": slice}).to_string();
            let _ = write!(conn, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
            let _ = conn.read(&mut [0u8; 0]);
        }
    });
    (base, seen)
}

#[test]
fn backfill_pages_through_the_tracker_and_merges_with_webhooks() {
    let issue = |key: &str, updated: &str, summary: &str, history: i64| {
        json!({"id": key.trim_start_matches("OPS-"), "key": key, "fields": {
            "summary": summary, "project": {"key": "OPS"}, "status": {"name": "Done"},
            "updated": updated, "created": "2023-01-01T00:00:00.000+0000",
            "customfield_7": {"nested": [1, 2]},
            "comment": {"comments": [{"id": format!("c{history}"), "body": "from backfill",
                "updated": updated}]}},
            "changelog": {"histories": [{"id": history.to_string(), "created": updated,
                "author": {"displayName": "Cy"},
                "items": [{"field": "status", "fromString": "Open", "toString": "Done"}]}]}})
    };
    let (base, seen) = stub_tracker(
        vec![
            issue("OPS-1", "2023-11-14T22:13:20.000+0000", "from backfill", 11),
            issue("OPS-2", "2023-11-14T22:13:21.000+0000", "two", 12),
            issue("OPS-3", "2023-11-14T22:13:22.000+0000", "three", 13),
        ],
        2,
    );
    let mut env = env(&["jira"], "3600000");
    env.extend([
        ("SVC_TICKETING_JIRA_BASE_URL".to_owned(), base),
        (
            "SVC_TICKETING_JIRA_USER".to_owned(),
            "bot@example.com".to_owned(),
        ),
        (
            "SVC_TICKETING_JIRA_TOKEN_ENV".to_owned(),
            "TEST_TRACKER_TOKEN".to_owned(),
        ),
        ("TEST_TRACKER_TOKEN".to_owned(), "tok-123".to_owned()),
    ]);
    let s = start(&env);
    let admin = s.admin_token();

    // A webhook newer than what backfill will fetch for OPS-1.
    let newer = issue_event(
        "jira:issue_updated",
        "OPS-1",
        1_700_000_100_000,
        "from webhook",
        "",
    );
    assert_eq!(signed(&s, "jira", &newer, "w-1").0, 200);

    let (st, done) = s.post_json("/api/admin/ticketing/jira/backfill", &admin, &json!({}));
    assert_eq!(st, 200, "{done}");
    assert_eq!(
        (
            done["issues"].as_u64(),
            done["new"].as_u64(),
            done["pages"].as_u64()
        ),
        (Some(3), Some(3), Some(2)),
        "{done}"
    );
    {
        let requests = seen.lock().unwrap();
        assert_eq!(requests.len(), 2);
        assert!(
            requests[0].0.starts_with("GET /rest/api/3/search?"),
            "{requests:?}"
        );
        assert!(requests[0].0.contains("expand=changelog"), "{requests:?}");
        // Basic bot@example.com:tok-123
        assert_eq!(
            requests[0].1, "basic ym90qgv4yw1wbguuy29tonrvay0xmjm=",
            "{requests:?}"
        );
    }
    let issues = query_rows(
        &s,
        &admin,
        "SELECT key, summary, custom_fields FROM jira_issues ORDER BY key",
    );
    assert_eq!(issues.len(), 3, "{issues:?}");
    assert_eq!(
        issues[0]["summary"], "from webhook",
        "the newer webhook wins"
    );
    assert_eq!(
        issues[1]["custom_fields"],
        r#"{"customfield_7":{"nested":[1,2]}}"#
    );
    let changes = query_rows(&s, &admin, "SELECT count(*) AS n FROM jira_issue_changelog");
    assert_eq!(changes[0]["n"], 3);
    let comments = query_rows(&s, &admin, "SELECT count(*) AS n FROM jira_comments");
    assert_eq!(comments[0]["n"], 3);

    // Again: the same issues are known, nothing new; the search now asks since the mark.
    let (st, again) = s.post_json("/api/admin/ticketing/jira/backfill", &admin, &json!({}));
    assert_eq!(st, 200, "{again}");
    assert_eq!(again["new"], 0, "{again}");
    assert!(
        again["jql"].as_str().unwrap().contains("updated >="),
        "{again}"
    );
    let rows = s.audit_rows("ticketing.backfill", 2);
    assert_eq!(rows.len(), 2);

    let (st, e) = s.post_json("/api/admin/ticketing/nowhere/backfill", &admin, &json!({}));
    assert_eq!(st, 404, "{e}");
}
