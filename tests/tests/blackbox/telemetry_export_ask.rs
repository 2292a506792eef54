//! Telemetry export, ask and per-user activity through the real server and the `svc`
//! client: exports in three formats agree with `svc_telemetry` in SQL and are audited with
//! their row count; ask runs an LLM's good SQL and refuses hostile SQL without running it
//! (the LLM is a stub on loopback that answers by the question's first word); a user's
//! activity pages by keyset without gaps or repeats.

use std::io::{BufRead, BufReader, Read, Write as _};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

use crate::browser::Browser;
use crate::pages::{assert_clean, give_passwords, log_in, visit};
use crate::support::{backends, Backend, Server, TempDir};
use crate::svc_cli::{code, stderr, stdout, svc};
use crate::telemetry::{rows, run, server, upload_raw, LABELLED};

/// Fills the fixture: ana's and bob's sessions, processed.
fn seeded(s: &Server) -> (String, String) {
    let admin = s.admin_token();
    let ana = s.user_token("ana@example.com", false);
    let bob = s.user_token("bob@example.com", false);
    assert_eq!(upload_raw(s, &ana, "a.jsonl", LABELLED).0, 200);
    let other = String::from_utf8_lossy(LABELLED).replace("S1", "S2");
    assert_eq!(upload_raw(s, &bob, "b.jsonl", other.as_bytes()).0, 200);
    run(s, &admin);
    (admin, ana)
}

fn bytes(s: &Server, token: &str, path: &str) -> (u16, String, Vec<u8>) {
    let r = s.http.get(s.url(path)).bearer_auth(token).send().unwrap();
    let status = r.status().as_u16();
    let kind = r
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (status, kind, r.bytes().unwrap().to_vec())
}

/// Rows of a parquet body, read back by the parquet crate's reader.
fn parquet_rows(body: &[u8]) -> usize {
    let dir = TempDir::new();
    let path = dir.0.join("body.parquet");
    std::fs::write(&path, body).unwrap();
    crate::svc_cli::parquet_rows(&path)
}

#[test]
fn exports_stream_every_format_under_the_filters_and_are_audited() {
    for backend in backends() {
        let s = server(backend, &[]);
        let (admin, ana) = seeded(&s);
        let all = rows(&s, &admin, "SELECT count(*) FROM svc_telemetry")[0][0]
            .as_u64()
            .unwrap() as usize;
        assert_eq!(all, 16);

        // CSV: a header, then one line per event; every column.
        let (status, kind, body) = bytes(&s, &admin, "/api/admin/telemetry/export");
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        assert!(kind.starts_with("text/csv"), "{kind}");
        let text = String::from_utf8(body).unwrap();
        let mut lines = text.lines();
        let header = lines.next().unwrap();
        assert!(
            header.starts_with("id,session_id,session_file,username,user_id"),
            "{header}"
        );
        assert_eq!(lines.count(), all);

        // NDJSON under filters: the SQL path agrees on which events.
        let (status, kind, body) = bytes(
            &s,
            &admin,
            "/api/admin/telemetry/export?format=ndjson&username=ana@example.com&only_errors=true",
        );
        assert_eq!((status, kind.as_str()), (200, "application/x-ndjson"));
        let events: Vec<Value> = String::from_utf8(body)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let expected = rows(
            &s,
            &admin,
            "SELECT id FROM svc_telemetry WHERE username = 'ana@example.com' AND is_error ORDER BY id",
        );
        let mut ids: Vec<Value> = events.iter().map(|e| json!([e["id"]])).collect();
        ids.sort_by_key(|v| v.to_string());
        assert_eq!(ids, expected);
        assert!(events
            .iter()
            .all(|e| e["is_error"] == true && e["user_id"].is_string()));

        // The user_id filter filters by the user id, and an absolute range by time.
        let ana_id = s.query("SELECT id FROM users WHERE email = 'ana@example.com'")[0]["id"]
            .as_str()
            .unwrap()
            .to_owned();
        let (_, _, body) = bytes(
            &s,
            &admin,
            &format!("/api/admin/telemetry/export?format=ndjson&user_id={ana_id}"),
        );
        assert_eq!(String::from_utf8(body).unwrap().lines().count(), 8);
        for (range, expected) in [
            ("since=2026-11-01&until=2026-11-02", "2026-11-01"),
            ("since=2030-01-01", ""),
        ] {
            let (status, _, body) = bytes(
                &s,
                &admin,
                &format!("/api/admin/telemetry/export?format=ndjson&{range}"),
            );
            assert_eq!(status, 200);
            let text = String::from_utf8(body).unwrap();
            if expected.is_empty() {
                assert_eq!(text, "", "{range}");
            } else {
                let days: Vec<Value> = text
                    .lines()
                    .map(|l| serde_json::from_str::<Value>(l).unwrap()["occurred_at"].clone())
                    .collect();
                assert!(!days.is_empty());
                assert!(days
                    .iter()
                    .all(|d| d.as_str().unwrap().starts_with(expected)));
            }
        }

        // Parquet: a readable file with every event.
        let (status, kind, body) = bytes(&s, &admin, "/api/admin/telemetry/export?format=parquet");
        assert_eq!(
            (status, kind.as_str()),
            (200, "application/vnd.apache.parquet")
        );
        assert_eq!(parquet_rows(&body), all);

        // Audited once the stream ended, with the format, filters and row count.
        let audited = s.audit_rows("usage.export", 6);
        let params: Vec<Value> = audited
            .iter()
            .map(|r| serde_json::from_str(r["params"].as_str().unwrap()).unwrap())
            .collect();
        assert!(params
            .iter()
            .any(|p| p["format"] == "csv" && p["row_count"] == all));
        assert!(params
            .iter()
            .any(|p| p["format"] == "parquet" && p["row_count"] == all));
        assert!(params
            .iter()
            .any(|p| p["username"] == "ana@example.com" && p["only_errors"] == true));
        assert!(audited.iter().all(|r| r["result"] == "success"));

        // Bad input is 422 naming the field; analysts are refused.
        for (query, field) in [
            ("format=xml", "format"),
            ("since=not-a-date", "since"),
            ("until=2026-13-45", "until"),
            ("since=2026-11-02&until=2026-11-01", "until"),
            ("since=2026-11-01&since_minutes=60", "since_minutes"),
            ("since_minutes=0", "since_minutes"),
        ] {
            let (status, body) =
                s.get_json(&format!("/api/admin/telemetry/export?{query}"), &admin);
            assert_eq!(status, 422, "{query}: {body}");
            assert!(body.to_string().contains(field), "{query}: {body}");
        }
        let (status, body) = s.get_json("/api/admin/telemetry/export", &ana);
        assert_eq!(status, 403, "{body}");

        // The client: a file written atomically (no temporary left), and standard output.
        let config = TempDir::new();
        let out_dir = TempDir::new();
        let cli = |args: &[&str]| {
            let mut all = vec!["--server", s.base.as_str(), "--token", admin.as_str()];
            all.extend_from_slice(args);
            svc(&config.0, &all)
        };
        let file = out_dir.0.join("events.parquet");
        let out = cli(&[
            "admin",
            "telemetry",
            "export",
            "--format",
            "parquet",
            "-o",
            file.to_str().unwrap(),
        ]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        assert_eq!(parquet_rows(&std::fs::read(&file).unwrap()), all);
        assert_eq!(std::fs::read_dir(&out_dir.0).unwrap().count(), 1);
        let out = cli(&[
            "admin",
            "telemetry",
            "export",
            "--format",
            "ndjson",
            "--user",
            "bob@example.com",
            "--since",
            "2026-11-01",
        ]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        assert_eq!(stdout(&out).lines().count(), 8);
        let out = cli(&["admin", "telemetry", "export", "--format", "xml"]);
        assert_eq!(code(&out), 2, "a bad format is a usage error");

        // Reprocess and prune from the client.
        let out = cli(&[
            "admin",
            "telemetry",
            "reprocess",
            "--user-id",
            &ana_id,
            "--json",
        ]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let report: Value = serde_json::from_str(&stdout(&out)).unwrap();
        assert_eq!(report["processed"], 1, "{report}");
        assert_eq!(
            rows(&s, &admin, "SELECT count(*) FROM svc_telemetry")[0][0],
            16
        );
        let out = cli(&["admin", "telemetry", "prune", "--retention-days", "36500"]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        assert!(
            stdout(&out).starts_with("Pruned 0 events"),
            "{}",
            stdout(&out)
        );
        let out = cli(&["admin", "telemetry", "prune", "--retention-days", "0"]);
        assert_eq!(code(&out), 9, "{}", stderr(&out));
    }
}

/// An OpenAI-compatible chat-completions stub: answers by the question's first word, and
/// records each request's Authorization header.
struct StubLlm {
    url: String,
    auth: Arc<Mutex<Vec<String>>>,
}

fn answer(content: &str) -> String {
    json!({"choices": [{"message": {"role": "assistant", "content": content}, "finish_reason": "stop"}]})
        .to_string()
}

fn sql_answer(sql: &str) -> String {
    answer(&json!({"sql": sql, "rationale": "because"}).to_string())
}

impl StubLlm {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/v1", listener.local_addr().unwrap());
        let auth = Arc::new(Mutex::new(Vec::new()));
        let seen = auth.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let seen = seen.clone();
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(conn.try_clone().unwrap());
                    let mut length = 0;
                    loop {
                        let mut line = String::new();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        let lower = line.to_ascii_lowercase();
                        if let Some(v) = lower.strip_prefix("content-length:") {
                            length = v.trim().parse().unwrap();
                        }
                        if lower.starts_with("authorization:") {
                            seen.lock().unwrap().push(line.trim().to_owned());
                        }
                        if line == "\r\n" {
                            break;
                        }
                    }
                    let mut body = vec![0; length];
                    reader.read_exact(&mut body).unwrap();
                    let request: Value = serde_json::from_slice(&body).unwrap();
                    let question = request["messages"][1]["content"].as_str().unwrap();
                    let word = question
                        .trim_start_matches("Question: ")
                        .split_whitespace()
                        .next()
                        .unwrap_or("")
                        .trim_matches(|c: char| !c.is_alphanumeric())
                        .to_owned();
                    let (status, reply) = match word.as_str() {
                        "good" => (200, sql_answer(
                            "SELECT username, count(*) AS events FROM svc_telemetry GROUP BY username ORDER BY username;",
                        )),
                        "many" => (200, sql_answer(
                            "SELECT a.id FROM svc_telemetry a, svc_telemetry b, svc_telemetry c",
                        )),
                        "drop" => (200, sql_answer("DROP TABLE svc_telemetry")),
                        "markup" => (200, sql_answer(
                            "SELECT '<img src=x onerror=alert(1)>' AS shown FROM svc_sessions LIMIT 1",
                        )),
                        "users" => (200, sql_answer("SELECT * FROM users")),
                        "file" => (200, sql_answer("SELECT * FROM read_parquet('/etc/passwd')")),
                        "two" => (200, sql_answer(
                            "SELECT count(*) FROM svc_telemetry; SELECT count(*) FROM svc_sessions",
                        )),
                        "broken" => (200, sql_answer("SELECT no_such_column FROM svc_sessions")),
                        "garbage" => (200, answer("Sure! Here is what I think about that.")),
                        "slow" => {
                            std::thread::sleep(std::time::Duration::from_secs(4));
                            (200, sql_answer("SELECT 1 FROM svc_telemetry"))
                        }
                        _ => (500, "{}".to_owned()),
                    };
                    let _ = write!(
                        conn,
                        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}",
                        reply.len()
                    );
                });
            }
        });
        Self { url, auth }
    }
}

#[test]
fn ask_runs_good_sql_and_refuses_hostile_sql_without_running_it() {
    let llm = StubLlm::start();
    for backend in backends() {
        let s = server(
            backend,
            &[
                ("SVC_LLM_ENDPOINT", llm.url.as_str()),
                ("SVC_LLM_MODEL", "stub-model"),
                ("SVC_LLM_API_KEY", "sk-test-secret-42"),
                ("SVC_LLM_TIMEOUT_SECONDS", "1"),
            ],
        );
        let (admin, ana) = seeded(&s);
        let ask =
            |q: &str| s.post_json("/api/admin/telemetry/ask", &admin, &json!({"question": q}));

        let (status, body) = ask("good: events per user?");
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["outcome"], "answered", "{body}");
        assert_eq!(body["columns"], json!(["username", "events"]));
        assert_eq!(
            body["rows"],
            json!([{"username": "ana@example.com", "events": 8}, {"username": "bob@example.com", "events": 8}])
        );
        assert_eq!(
            (&body["row_count"], &body["truncated"]),
            (&json!(2), &json!(false))
        );
        assert!(
            body["sql"].as_str().unwrap().ends_with("ORDER BY username"),
            "{body}"
        );
        // The configured key goes to the LLM as a bearer token.
        let sent = llm.auth.lock().unwrap().clone();
        assert!(!sent.is_empty());
        assert!(
            sent.iter().all(|h| h.ends_with("Bearer sk-test-secret-42")),
            "{sent:?}"
        );

        // At most 1,000 rows, marked truncated.
        let (status, body) = ask("many rows please");
        assert_eq!(
            (status, &body["outcome"]),
            (200, &json!("answered")),
            "{body}"
        );
        assert_eq!(
            (&body["row_count"], &body["truncated"]),
            (&json!(1000), &json!(true))
        );

        // Hostile SQL is rejected and nothing runs: the tables are intact afterwards.
        for (question, why) in [
            ("drop everything", "not allowed"),
            ("users and their passwords", "'users'"),
            ("file contents", "read_parquet"),
            ("two statements", "2 statements"),
        ] {
            let (status, body) = ask(question);
            assert_eq!(status, 200, "{question}: {body}");
            assert_eq!(body["outcome"], "rejected", "{question}: {body}");
            assert!(
                body["error"].as_str().unwrap().contains(why),
                "{question}: {body}"
            );
            assert_eq!(body["rows"], json!([]));
        }
        assert_eq!(
            rows(&s, &admin, "SELECT count(*) FROM svc_telemetry")[0][0],
            16
        );
        // SQL that is allowed but fails is reported as failed.
        let (status, body) = ask("broken column");
        assert_eq!(
            (status, &body["outcome"]),
            (200, &json!("failed")),
            "{body}"
        );
        assert!(
            body["error"].as_str().unwrap().contains("no_such_column"),
            "{body}"
        );

        // LLM failures are envelopes that say what happened.
        let (status, body) = ask("garbage please");
        assert_eq!(
            (status, &body["detail"]["error"]),
            (502, &json!("llm_bad_output")),
            "{body}"
        );
        let (status, body) = ask("slow answer");
        assert_eq!(
            (status, &body["detail"]["error"]),
            (503, &json!("llm_timeout")),
            "{body}"
        );
        let (status, body) = ask("unknown word");
        assert_eq!(
            (status, &body["detail"]["error"]),
            (502, &json!("llm_failed")),
            "{body}"
        );

        // Bad questions, and analysts.
        for q in ["", "   ", &"x".repeat(1001)] {
            let (status, body) = ask(q);
            assert_eq!(status, 422, "{body}");
            assert!(body.to_string().contains("question"), "{body}");
        }
        let (status, _) = s.post_json(
            "/api/admin/telemetry/ask",
            &ana,
            &json!({"question": "good: events per user?"}),
        );
        assert_eq!(status, 403);

        // Every ask is audited with its outcome; the key is never logged or audited.
        let audited = s.audit_rows("usage.ask", 13);
        let results: Vec<&str> = audited
            .iter()
            .map(|r| r["result"].as_str().unwrap())
            .collect();
        assert_eq!(
            results.iter().filter(|r| **r == "success").count(),
            2,
            "{results:?}"
        );
        assert_eq!(
            results.iter().filter(|r| **r == "error.422").count(),
            4 + 3,
            "{results:?}"
        );
        let drop_row = audited
            .iter()
            .find(|r| r["params"].as_str().unwrap().contains("DROP TABLE"))
            .expect("the rejected DROP is on record");
        assert_eq!(drop_row["result"], "error.422");
        let everything = format!("{}{}", s.log(), serde_json::to_string(&audited).unwrap());
        assert!(!everything.contains("sk-test-secret-42"));

        // The client prints the answer, and exits 9 on a rejected statement.
        let config = TempDir::new();
        let cli = |args: &[&str]| {
            let mut all = vec!["--server", s.base.as_str(), "--token", admin.as_str()];
            all.extend_from_slice(args);
            svc(&config.0, &all)
        };
        let out = cli(&["admin", "telemetry", "ask", "good: events per user?"]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        assert!(stdout(&out).contains("bob@example.com"), "{}", stdout(&out));
        let out = cli(&["admin", "telemetry", "ask", "drop it", "--json"]);
        assert_eq!(code(&out), 9, "{}", stderr(&out));
        let doc: Value = serde_json::from_str(&stdout(&out)).unwrap();
        assert_eq!(doc["outcome"], "rejected");
    }
}

#[test]
fn ask_without_an_llm_says_how_to_configure_one() {
    let s = Server::start();
    let admin = s.admin_token();
    let (status, body) = s.post_json(
        "/api/admin/telemetry/ask",
        &admin,
        &json!({"question": "how many events?"}),
    );
    assert_eq!(
        (status, &body["detail"]["error"]),
        (503, &json!("not_configured")),
        "{body}"
    );
    assert!(body["detail"]["details"]["hint"]
        .as_str()
        .unwrap()
        .contains("SVC_LLM_ENDPOINT"));
}

#[test]
fn a_users_activity_pages_by_keyset_and_its_reads_are_audited_once_a_minute() {
    for backend in backends() {
        let s = server(backend, &[]);
        let (admin, ana) = seeded(&s);
        // Ana's own reads add audited rows of hers.
        for _ in 0..7 {
            assert_eq!(s.get_json("/api/v2/catalog", &ana).0, 200);
        }
        let ana_id = s.query("SELECT id FROM users WHERE email = 'ana@example.com'")[0]["id"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(s.audit_rows("catalog.list", 7).len() >= 7);
        let total = s.query(&format!(
            "SELECT count(*) AS n FROM audit_log WHERE user_id = '{ana_id}'"
        ))[0]["n"]
            .as_i64()
            .unwrap() as usize;
        assert!(total >= 8, "{total}");

        let mut seen = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut path = format!("/api/admin/users/{ana_id}/activity?limit=3");
            if let Some(c) = &cursor {
                path.push_str(&format!("&cursor={}", urlencode(c)));
            }
            let (status, page) = s.get_json(&path, &admin);
            assert_eq!(status, 200, "{page}");
            for row in page["rows"].as_array().unwrap() {
                assert_eq!(row["user_id"], ana_id.as_str());
                assert_eq!(row["user_email"], "ana@example.com");
                seen.push((
                    row["timestamp"].as_str().unwrap().to_owned(),
                    row["id"].as_str().unwrap().to_owned(),
                ));
            }
            match page["next_cursor"].as_str() {
                Some(c) => cursor = Some(c.to_owned()),
                None => break,
            }
        }
        assert_eq!(seen.len(), total, "every row once");
        let mut sorted = seen.clone();
        sorted.sort_by(|a, b| b.cmp(a));
        sorted.dedup();
        assert_eq!(sorted, seen, "newest first, no repeats");

        // A file deleted after it was listed: 404 on download, and the list says so.
        let listed = s
            .get_json(&format!("/api/admin/users/{ana_id}/sessions"), &admin)
            .1;
        assert_eq!(listed["rows"][0]["name"], "a.jsonl", "{listed}");
        std::fs::remove_file(s.dir.0.join("user_sessions").join(&ana_id).join("a.jsonl")).unwrap();
        let (status, body) = s.get_json(
            &format!("/api/admin/users/{ana_id}/sessions/a.jsonl/download"),
            &admin,
        );
        assert_eq!(status, 404, "{body}");
        let listed = s
            .get_json(&format!("/api/admin/users/{ana_id}/sessions"), &admin)
            .1;
        assert_eq!(listed["rows"][0]["on_disk"], false, "{listed}");

        // Paging through is one audited read within the minute.
        let reads = s.audit_rows("admin.user_activity_read", 1);
        assert_eq!(reads.len(), 1, "{reads:?}");

        for (path, status) in [
            (format!("/api/admin/users/{ana_id}/activity?limit=0"), 422),
            (format!("/api/admin/users/{ana_id}/activity?limit=201"), 422),
            (
                format!("/api/admin/users/{ana_id}/activity?cursor=garbage"),
                422,
            ),
            ("/api/admin/users/nobody/activity".to_owned(), 404),
        ] {
            assert_eq!(s.get_json(&path, &admin).0, status, "{path}");
        }
        assert_eq!(
            s.get_json(&format!("/api/admin/users/{ana_id}/activity"), &ana)
                .0,
            403
        );
    }
}

pub(crate) fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The ask box on `/admin/telemetry`: the SQL is shown before its rows, the rows are the
/// API's answer, values are text (markup in a result never runs), and refused SQL says so.
#[test]
fn the_telemetry_page_asks_and_shows_the_sql_then_its_rows_as_text() {
    let llm = StubLlm::start();
    let s = server(
        Backend::Sqlite,
        &[
            ("SVC_LLM_ENDPOINT", llm.url.as_str()),
            ("SVC_LLM_MODEL", "stub-model"),
            ("SVC_LLM_TIMEOUT_SECONDS", "5"),
        ],
    );
    let (admin, _) = seeded(&s);
    give_passwords(&s);
    let b = Browser::start();
    log_in(&b, &s, "admin@localhost");
    visit(&b, &s, "/admin/telemetry?window=525600", "telemetry-ask");
    let ask = |question: &str| {
        b.js(
            "document.getElementById('ask-question').value = arguments[0]; \
             document.getElementById('ask-answer').hidden = true;",
            json!([question]),
        );
        b.click("form[data-ask] button");
        b.wait_until(
            "the answer",
            "return !document.getElementById('ask-answer').hidden",
        );
    };

    ask("good: events per user?");
    assert!(b.text("#ask-sql").contains("FROM svc_telemetry"));
    let shown = b.js(
        "return [...document.querySelectorAll('#ask-rows tbody tr')]\
         .map(r => [...r.cells].map(c => c.textContent))",
        json!([]),
    );
    let (status, api) = s.post_json(
        "/api/admin/telemetry/ask",
        &admin,
        &json!({"question": "good: events per user?"}),
    );
    assert_eq!(status, 200, "{api}");
    let columns: Vec<&str> = api["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    let expected: Vec<Vec<String>> = api["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            columns
                .iter()
                .map(|c| match &r[*c] {
                    Value::String(v) => v.clone(),
                    other => other.to_string(),
                })
                .collect()
        })
        .collect();
    assert!(!expected.is_empty());
    assert_eq!(shown, json!(expected), "the page shows the API's rows");
    let page_ask = s.audit_rows("usage.ask", 1);
    assert_eq!(page_ask[0]["client_kind"], "web");

    ask("markup please");
    assert_eq!(b.text("#ask-rows tbody td"), "<img src=x onerror=alert(1)>");
    assert_clean(&b, &s, "ask with markup in a result");

    ask("drop everything");
    assert!(
        b.text("#ask-status").starts_with("Refused:"),
        "{}",
        b.text("#ask-status")
    );
    assert_eq!(
        b.js(
            "return document.querySelectorAll('#ask-rows tr').length",
            json!([])
        ),
        json!(0)
    );
    b.screenshot("telemetry-ask-refused");
}
