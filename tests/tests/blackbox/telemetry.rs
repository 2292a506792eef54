//! Session uploads and the telemetry pipeline, through the real server: uploads stored
//! whole or not at all, the pipeline's events and summaries, each user's rows their own in
//! `svc_sessions` / `svc_telemetry`, incremental runs, reprocess with new attribution.

use std::io::{Read, Write};
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::{backends, exec_store, Server, SmallDisk};

/// The hand-labelled transcript the telemetry crate's unit tests check line by line:
/// 8 events, 3 malformed lines, session id `S1`.
pub(crate) const LABELLED: &[u8] =
    include_bytes!("../../../host/telemetry/fixtures/labelled.jsonl");

/// A server whose pipeline runs only when a test asks (no debounce run can race it).
pub(crate) fn server(backend: crate::support::Backend, env: &[(&str, &str)]) -> Server {
    let mut all = vec![("SVC_TELEMETRY_DEBOUNCE_MS", "3600000")];
    all.extend_from_slice(env);
    Server::start_with(backend, &all)
}

pub(crate) fn upload_raw(s: &Server, token: &str, name: &str, body: &[u8]) -> (u16, Value) {
    s.send(
        s.http
            .post(s.url("/api/upload/sessions"))
            .query(&[("name", name)])
            .bearer_auth(token)
            .body(body.to_vec()),
    )
}

/// Uploads `body` gzip-compressed, declared with `Content-Encoding: gzip`.
fn upload_gzip(s: &Server, token: &str, name: &str, body: &[u8]) -> (u16, Value) {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(body).unwrap();
    s.send(
        s.http
            .post(s.url("/api/upload/sessions"))
            .query(&[("name", name)])
            .bearer_auth(token)
            .header("content-encoding", "gzip")
            .body(gz.finish().unwrap()),
    )
}

fn upload_multipart(s: &Server, token: &str, filename: &str, body: &[u8]) -> (u16, Value) {
    let boundary = "svc-test-boundary-7d1f";
    let mut form = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\nhello\r\n\
         --{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{filename}\"\r\n\
         Content-Type: application/x-ndjson\r\n\r\n"
    )
    .into_bytes();
    form.extend_from_slice(body);
    form.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    s.send(
        s.http
            .post(s.url("/api/upload/sessions"))
            .bearer_auth(token)
            .header(
                "content-type",
                format!("multipart/form-data; boundary={boundary}"),
            )
            .body(form),
    )
}

pub(crate) fn run(s: &Server, admin: &str) -> Value {
    let (status, report) = s.post_json("/api/admin/telemetry/run", admin, &json!({}));
    assert_eq!(status, 200, "{report}");
    report
}

pub(crate) fn rows(s: &Server, token: &str, sql: &str) -> Vec<Value> {
    let (status, body) = s.post_json("/api/query", token, &json!({"sql": sql, "limit": 1000}));
    assert_eq!(status, 200, "{sql}: {body}");
    body["rows"].as_array().unwrap().clone()
}

/// Store rows as their values joined by spaces, in key order (numbers come back as text or
/// numbers depending on the backend).
fn texts(rows: &[Value]) -> Vec<String> {
    rows.iter()
        .map(|r| {
            r.as_object()
                .unwrap()
                .values()
                .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

pub(crate) fn user_id(s: &Server, token: &str) -> String {
    let (status, me) = s.get_json("/api/me", token);
    assert_eq!(status, 200, "{me}");
    me["id"].as_str().unwrap().to_owned()
}

#[test]
fn uploaded_sessions_become_each_users_own_telemetry() {
    for backend in backends() {
        let s = server(backend, &[]);
        let admin = s.admin_token();
        let ana = s.user_token("ana@example.com", false);
        // An e-mail no row-filter pattern admits: the rows are still theirs alone.
        let bob = s.user_token("o'neil@example.com", false);
        let (ana_id, bob_id) = (user_id(&s, &ana), user_id(&s, &bob));

        let (status, up) = upload_raw(&s, &ana, "s1.jsonl", LABELLED);
        assert_eq!(status, 200, "{up}");
        assert_eq!(up["outcome"], "new");
        assert_eq!(up["session_file"], format!("{ana_id}/s1.jsonl"));
        assert_eq!(up["bytes"], LABELLED.len());
        let (status, up) = upload_multipart(&s, &bob, "C:\\agent\\b 1.jsonl", LABELLED);
        assert_eq!(status, 200, "{up}");
        assert_eq!(
            (&up["name"], &up["outcome"]),
            (&json!("b_1.jsonl"), &json!("new"))
        );
        let (_, again) = upload_raw(&s, &ana, "s1.jsonl", LABELLED);
        assert_eq!(
            (&again["outcome"], &again["queued"]),
            (&json!("unchanged"), &json!(false))
        );

        let report = run(&s, &admin);
        assert_eq!(
            (&report["scanned"], &report["processed"], &report["failed"]),
            (&json!(2), &json!(2), &json!(0)),
            "{report}"
        );
        assert_eq!(
            (&report["events"], &report["malformed_lines"]),
            (&json!(16), &json!(6))
        );
        let problems = &report["problem_files"][0]["problems"];
        assert_eq!(problems[0]["line"], 6, "{report}");

        // Each user sees their own rows; the administrator sees both.
        let count = "SELECT count(*) AS n, count(DISTINCT user_id) AS u FROM svc_telemetry";
        assert_eq!(rows(&s, &ana, count)[0], json!([8, 1]));
        assert_eq!(rows(&s, &bob, count)[0], json!([8, 1]));
        assert_eq!(rows(&s, &admin, count)[0], json!([16, 2]));
        let mine = rows(
            &s,
            &bob,
            "SELECT DISTINCT user_id, username FROM svc_telemetry",
        );
        assert_eq!(mine, [json!([bob_id, "o'neil@example.com"])]);
        // Events live in per-file segments: another user's are never opened, whatever the SQL.
        let reach = format!(
            "SELECT count(*) FROM svc_telemetry WHERE user_id = '{ana_id}' OR 1 = 1 \
             UNION ALL SELECT count(*) FROM (SELECT * FROM svc_telemetry t1 JOIN svc_telemetry t2 USING (id)) j"
        );
        assert_eq!(rows(&s, &bob, &reach), [json!([8]), json!([8])]);
        let (status, sample) = s.get_json("/api/v2/sample/svc_sessions?n=10", &ana);
        assert_eq!(status, 200, "{sample}");
        let sessions = sample["rows"].as_array().unwrap();
        assert_eq!(sessions.len(), 1, "{sample}");
        assert_eq!(
            (
                &sessions[0]["session_id"],
                &sessions[0]["tool_calls"],
                &sessions[0]["user_id"]
            ),
            (&json!("S1"), &json!(6), &json!(ana_id))
        );
        let tools = rows(
            &s,
            &admin,
            "SELECT tool_name, count(*) FROM svc_telemetry WHERE tool_name IS NOT NULL \
             GROUP BY tool_name ORDER BY tool_name",
        );
        assert_eq!(tools.len(), 6);
        assert_eq!(tools[0], json!(["Agent", 2]));

        // Rollups: one day, per tool; Bash failed once per session.
        let daily = texts(&s.query(
            "SELECT day, invocations, error_count, distinct_users, distinct_sessions \
             FROM usage_tool_daily WHERE tool_name = 'Bash'",
        ));
        // Keys sort: day, distinct_sessions, distinct_users, error_count, invocations.
        assert_eq!(daily, ["2026-11-01 1 2 2 2"]);

        // Nothing changed: nothing read.
        let report = run(&s, &admin);
        assert_eq!(
            (&report["processed"], &report["unchanged"]),
            (&json!(0), &json!(2)),
            "{report}"
        );
        // A changed file replaces its events, it does not add to them.
        let mut changed = LABELLED.to_vec();
        changed.extend_from_slice(
            b"\n{\"type\":\"assistant\",\"uuid\":\"u99\",\"timestamp\":\"2026-11-02T09:00:00Z\",\"message\":{\"content\":[{\"type\":\"tool_use\",\"id\":\"tu99\",\"name\":\"Write\"}]}}\n",
        );
        let (_, up) = upload_raw(&s, &ana, "s1.jsonl", &changed);
        assert_eq!(up["outcome"], "changed");
        let report = run(&s, &admin);
        assert_eq!(report["processed"], 1, "{report}");
        assert_eq!(report["rollup_days"], "2026-11-01..2026-11-02", "{report}");
        assert_eq!(rows(&s, &ana, count)[0], json!([9, 1]));

        // New attribution reaches existing events on reprocess.
        exec_store(
            &s.store_url(),
            &["INSERT INTO usage_attribution_skills (source, ref_id, skill_name) VALUES ('curated', 'mkt/code-tools', 'review')"],
        );
        let (status, report) = s.post_json(
            "/api/admin/telemetry/reprocess",
            &admin,
            &json!({"user_id": ana_id, "full_rollup": true}),
        );
        assert_eq!(status, 200, "{report}");
        assert_eq!(
            (&report["processed"], &report["rollup_days"]),
            (&json!(1), &json!("all"))
        );
        let attributed = rows(
            &s,
            &admin,
            "SELECT user_id, source, ref_id FROM svc_telemetry WHERE skill_name = 'review'",
        );
        let ana_row = attributed.iter().find(|r| r[0] == json!(ana_id)).unwrap();
        assert_eq!(ana_row, &json!([ana_id, "curated", "mkt/code-tools"]));
        let plugin_daily =
            texts(&s.query("SELECT source, ref_id, invocations FROM usage_plugin_daily"));
        assert!(
            plugin_daily.contains(&"1 mkt/code-tools curated".to_string()),
            "{plugin_daily:?}"
        );

        // Non-admins cannot run or read the pipeline; its runs are listed for admins.
        let (status, _) = s.post_json("/api/admin/telemetry/run", &ana, &json!({}));
        assert_eq!(status, 403);
        let (status, pipeline) = s.get_json("/api/admin/telemetry/pipeline", &admin);
        assert_eq!(status, 200, "{pipeline}");
        assert_eq!(pipeline["files"], 2);
        assert_eq!(pipeline["runs"].as_array().unwrap().len(), 4, "{pipeline}");
        assert_eq!(pipeline["runs"][0]["trigger"], "reprocess");
        assert_eq!(pipeline["runs"][0]["status"], "ok");

        let uploads = s.audit_rows("session.upload", 4);
        assert_eq!(uploads.len(), 4);
        assert!(
            uploads.iter().all(|r| r["result"] == "success"),
            "{uploads:?}"
        );
        assert_eq!(s.audit_rows("usage.reprocess", 1).len(), 1);
    }
}

/// A transcript is what an agent wrote, and a NUL in it (here in a tool's name, a session
/// id and a model) is stored as `␀` in the store's rows. PostgreSQL refused the whole batch
/// of files over one such cell, and the file was read again and refused again every run.
#[test]
fn a_nul_in_a_transcript_costs_no_run_on_either_backend() {
    const NUL_LINES: &[u8] = br#"{"type": "user", "uuid": "n1", "sessionId": "S\u00002", "timestamp": "2026-11-03T10:00:00Z", "message": {"role": "user", "content": "go"}}
{"type": "assistant", "uuid": "n2", "sessionId": "S\u00002", "timestamp": "2026-11-03T10:00:05Z", "message": {"model": "m\u0000", "content": [{"type": "tool_use", "id": "t1", "name": "Bash\u0000x", "input": {"c": "\u0000"}}]}}
"#;
    for backend in backends() {
        let s = server(backend, &[]);
        let admin = s.admin_token();
        let ana = s.user_token("ana@example.com", false);
        let bob = s.user_token("bob@example.com", false);
        let (status, up) = upload_raw(&s, &ana, "nul.jsonl", NUL_LINES);
        assert_eq!(status, 200, "{up}");
        let (status, up) = upload_raw(&s, &bob, "plain.jsonl", LABELLED);
        assert_eq!(status, 200, "{up}");

        let report = run(&s, &admin);
        assert_eq!(
            (&report["processed"], &report["failed"]),
            (&json!(2), &json!(0)),
            "{backend:?}: {report}"
        );
        let (status, sample) = s.get_json("/api/v2/sample/svc_sessions?n=10", &ana);
        assert_eq!(status, 200, "{sample}");
        assert_eq!(sample["rows"][0]["session_id"], "S\u{2400}2", "{sample}");
        assert_eq!(sample["rows"][0]["tool_calls"], 1, "{sample}");
        let daily = s.query("SELECT tool_name FROM usage_file_daily WHERE tool_name LIKE 'Bash%x'");
        assert_eq!(
            daily,
            [json!({"tool_name": "Bash\u{2400}x"})],
            "{backend:?}"
        );
        // The segment keeps the transcript's own text; its event is there once.
        let events = rows(
            &s,
            &ana,
            "SELECT count(*) FROM svc_telemetry WHERE tool_name LIKE 'Bash%x'",
        );
        assert_eq!(events, [json!([1])], "{backend:?}");
        // Bob's file, in the same batch, is whole.
        let count = "SELECT count(*) FROM svc_telemetry";
        assert_eq!(rows(&s, &bob, count), [json!([8])]);

        // Stored, not to be read again.
        let report = run(&s, &admin);
        assert_eq!(
            (
                &report["processed"],
                &report["unchanged"],
                &report["failed"]
            ),
            (&json!(0), &json!(2), &json!(0)),
            "{backend:?}: {report}"
        );
    }
}

fn session_dir_entries(s: &Server, user: &str) -> Vec<String> {
    let dir = s.dir.0.join("user_sessions").join(user);
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|r| {
            r.map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[test]
fn bad_uploads_are_refused_and_leave_nothing_behind() {
    let s = server(
        crate::support::Backend::Sqlite,
        &[("SVC_SESSION_UPLOAD_MAX_BYTES", "80000000")],
    );
    let admin = s.admin_token();
    let ana = s.user_token("ana@example.com", false);
    let ana_id = user_id(&s, &ana);
    let long = format!("{}.jsonl", "a".repeat(300));
    for (name, want) in [
        ("a\u{0}b.jsonl", "NUL"),
        (long.as_str(), "at most 200"),
        ("notes.txt", "must end in .jsonl"),
        ("", "must end in .jsonl"),
        ("..", "must end in .jsonl"),
    ] {
        let (status, body) = upload_raw(&s, &ana, name, b"{}\n");
        assert_eq!(status, 422, "{name:?}: {body}");
        assert!(
            body["detail"].as_str().unwrap().contains(want),
            "{name:?}: {body}"
        );
    }
    let (status, body) = s.send(
        s.http
            .post(s.url("/api/upload/sessions"))
            .bearer_auth(&ana)
            .body("{}"),
    );
    assert_eq!(status, 422, "no name: {body}");
    let (status, _) = upload_raw(&s, "not-a-token", "x.jsonl", b"{}");
    assert_eq!(status, 401);
    // Path parts are cut off, never followed.
    let (status, up) = upload_raw(&s, &ana, "../../state/evil.jsonl", b"");
    assert_eq!((status, &up["name"]), (200, &json!("evil.jsonl")), "{up}");
    assert!(!s.dir.0.join("state/evil.jsonl").exists());

    // Over the limit: 413 in the envelope before a byte of the body is read.
    let answer = s.post_head_only(
        "/api/upload/sessions?name=big.jsonl",
        &[("Authorization", &format!("Bearer {ana}"))],
        80_000_001,
    );
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("SVC_SESSION_UPLOAD_MAX_BYTES"), "{answer}");

    // A client that goes away mid-body leaves no file, visible or hidden.
    let addr = s.base.trim_start_matches("http://").to_owned();
    let mut tcp = std::net::TcpStream::connect(&addr).unwrap();
    write!(
        tcp,
        "POST /api/upload/sessions?name=cut.jsonl HTTP/1.1\r\nHost: {addr}\r\n\
         Authorization: Bearer {ana}\r\nContent-Length: 1000000\r\n\r\n"
    )
    .unwrap();
    tcp.write_all(&[b'{'; 4096]).unwrap();
    drop(tcp);

    // Two uploads of one name at once: one wins, whole.
    let a = vec![b'a'; 3_000_000];
    let b = vec![b'b'; 3_000_000];
    std::thread::scope(|scope| {
        let (s, ana) = (&s, &ana);
        let ta = scope.spawn(|| upload_raw(s, ana, "race.jsonl", &a).0);
        let tb = scope.spawn(|| upload_raw(s, ana, "race.jsonl", &b).0);
        assert_eq!((ta.join().unwrap(), tb.join().unwrap()), (200, 200));
    });
    let raced = std::fs::read(
        s.dir
            .0
            .join("user_sessions")
            .join(&ana_id)
            .join("race.jsonl"),
    )
    .unwrap();
    assert!(
        raced == a || raced == b,
        "a mixed file of {} bytes",
        raced.len()
    );

    // Hostile content is stored, and processing counts what it cannot use.
    let garbage: Vec<u8> = (0..100_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    assert_eq!(upload_raw(&s, &ana, "garbage.jsonl", &garbage).0, 200);
    let mut huge = b"{\"type\":\"user\",\"message\":{\"content\":\"".to_vec();
    huge.resize(70 << 20, b'x');
    huge.extend_from_slice(b"\"}}\n{\"type\":\"assistant\",\"timestamp\":\"2026-11-01T00:00:00Z\",\"message\":{\"content\":[{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"Bash\"}]}}\n");
    assert_eq!(upload_raw(&s, &ana, "huge.jsonl", &huge).0, 200);
    // Sent gzip-encoded: stored decoded (its three lines are read below).
    let (status, zipped) = upload_gzip(&s, &ana, "array.jsonl", b"[1]\n\"x\"\n42\n");
    assert_eq!((status, &zipped["bytes"]), (200, &json!(11)), "{zipped}");
    // A small body that decodes past the limit is refused like a large one.
    let (status, bomb) = upload_gzip(&s, &ana, "bomb.jsonl", &vec![b' '; 80_000_001]);
    assert_eq!(status, 413, "{bomb}");
    assert!(
        bomb["detail"].as_str().unwrap().contains("decodes to more"),
        "{bomb}"
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        session_dir_entries(&s, &ana_id),
        [
            "array.jsonl",
            "evil.jsonl",
            "garbage.jsonl",
            "huge.jsonl",
            "race.jsonl"
        ],
        "no cut.jsonl, no temporary file"
    );

    let report = run(&s, &admin);
    assert_eq!(
        (&report["processed"], &report["failed"]),
        (&json!(5), &json!(0)),
        "{report}"
    );
    let problem = |file: &str| -> Value {
        report["problem_files"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["session_file"] == format!("{ana_id}/{file}"))
            .cloned()
            .unwrap_or(Value::Null)
    };
    assert_eq!(problem("array.jsonl")["malformed_lines"], 3, "{report}");
    let huge_problem = problem("huge.jsonl");
    assert_eq!(huge_problem["malformed_lines"], 1, "{report}");
    assert!(huge_problem["problems"][0]["problem"]
        .as_str()
        .unwrap()
        .contains("64 MiB"));
    assert!(
        problem("garbage.jsonl")["malformed_lines"]
            .as_u64()
            .unwrap()
            > 0
    );
    // The line after the oversized one still counts.
    let bash = rows(
        &s,
        &ana,
        "SELECT count(*) FROM svc_telemetry WHERE tool_name = 'Bash'",
    );
    assert_eq!(bash[0], json!([1]));
    // The empty file still has a summary (no events), keyed by its file.
    let empty = rows(
        &s,
        &ana,
        "SELECT session_id, tool_calls FROM svc_sessions WHERE session_file LIKE '%evil.jsonl'",
    );
    assert_eq!(empty, [json!([format!("{ana_id}/evil.jsonl"), 0])]);
    let mut log = String::new();
    std::fs::File::open(s.dir.0.join("server.log"))
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    assert!(!log.contains(&ana), "a token reached the log");
}

#[test]
fn a_full_disk_refuses_the_upload_and_keeps_the_previous_file() {
    let s = server(crate::support::Backend::Sqlite, &[]);
    let ana = s.user_token("ana@example.com", false);
    let ana_id = user_id(&s, &ana);
    let dir = s.dir.0.join("user_sessions").join(&ana_id);
    let Some(_disk) = SmallDisk::mount(&dir, "256k") else {
        return;
    };
    assert_eq!(upload_raw(&s, &ana, "s.jsonl", LABELLED).0, 200);
    let (status, body) = upload_raw(&s, &ana, "s.jsonl", &vec![b'x'; 1 << 20]);
    assert_eq!(status, 503, "{body}");
    assert!(
        body["detail"].as_str().unwrap().contains("disk is full"),
        "{body}"
    );
    assert_eq!(std::fs::read(dir.join("s.jsonl")).unwrap(), LABELLED);
    assert_eq!(
        session_dir_entries(&s, &ana_id),
        ["s.jsonl"],
        "no temporary file left"
    );
    // The store was never touched by the failed write: the server answers and audits it.
    let failed = s.audit_rows("session.upload", 2);
    assert!(
        failed.iter().any(|r| r["result"] == "error.503"),
        "{failed:?}"
    );
}

#[test]
fn svc_sessions_push_sends_only_new_and_changed_files() {
    use crate::svc_cli::{code, stderr, stdout, svc};
    let s = server(crate::support::Backend::Sqlite, &[]);
    let admin = s.admin_token();
    let ana = s.user_token("ana@example.com", false);
    let config = crate::support::TempDir::new();
    let agent = crate::support::TempDir::new();
    let project = agent.0.join("projects/-home-ana-repo");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("s1.jsonl"), LABELLED).unwrap();
    std::fs::write(project.join("s2.jsonl"), b"{\"type\":\"user\"}\n").unwrap();
    std::fs::write(project.join("notes.txt"), b"not a session").unwrap();
    let dir = agent.0.join("projects").display().to_string();
    let login = |args: &[&str]| {
        let mut all = vec!["--server", s.base.as_str(), "--token", ana.as_str()];
        all.extend_from_slice(args);
        svc(&config.0, &all)
    };
    let json_of = |o: &std::process::Output| -> Value {
        assert_eq!(code(o), 0, "{}", stderr(o));
        serde_json::from_str(&stdout(o)).unwrap()
    };

    let dry = json_of(&login(&["sessions", "push", "--dry-run", "--json", &dir]));
    assert_eq!(dry["would_push"].as_array().unwrap().len(), 2, "{dry}");
    let pushed = json_of(&login(&["sessions", "push", "--json", &dir]));
    assert_eq!(
        (&pushed["pushed"], &pushed["failed"]),
        (&json!(2), &json!(0)),
        "{pushed}"
    );
    assert!(pushed["files"]
        .as_array()
        .unwrap()
        .iter()
        .all(|f| f["outcome"] == "new"));
    let again = json_of(&login(&["sessions", "push", "--json", &dir]));
    assert_eq!(
        (&again["pushed"], &again["unchanged"]),
        (&json!(0), &json!(2)),
        "{again}"
    );
    // Touched, same bytes: nothing sent.
    let s2 = project.join("s2.jsonl");
    std::fs::write(&s2, b"{\"type\":\"user\"}\n").unwrap();
    let touched = json_of(&login(&["sessions", "push", "--json", &dir]));
    assert_eq!(touched["pushed"], 0, "{touched}");
    std::fs::write(&s2, b"{\"type\":\"user\"}\n{\"type\":\"assistant\"}\n").unwrap();
    let changed = json_of(&login(&["sessions", "push", "--json", &dir]));
    assert_eq!(changed["pushed"], 1, "{changed}");
    assert_eq!(changed["files"][0]["outcome"], "changed");

    let report = run(&s, &admin);
    assert_eq!(report["processed"], 2, "{report}");
    assert_eq!(
        rows(&s, &ana, "SELECT count(*) FROM svc_telemetry")[0],
        json!([8])
    );
    // Prune: the fixture's events (November 2026) are within a century, not within a day.
    let (status, body) = s.post_json(
        "/api/admin/telemetry/prune",
        &admin,
        &json!({"retention_days": 0}),
    );
    assert_eq!(status, 422, "{body}");
    let (status, _) = s.post_json("/api/admin/telemetry/prune", &ana, &json!({}));
    assert_eq!(status, 403);
    let (status, kept) = s.post_json(
        "/api/admin/telemetry/prune",
        &admin,
        &json!({"retention_days": 36500}),
    );
    assert_eq!((status, &kept["events"]), (200, &json!(0)), "{kept}");
    let (status, pruned) = s.post_json(
        "/api/admin/telemetry/prune",
        &admin,
        &json!({"retention_days": 1}),
    );
    assert_eq!((status, &pruned["events"]), (200, &json!(8)), "{pruned}");
    assert_eq!(
        rows(&s, &ana, "SELECT count(*) FROM svc_telemetry")[0],
        json!([0])
    );
    // Each attempt is audited, the refused one too, with what it deleted.
    let audited = s.audit_rows("usage.prune", 3);
    let results: Vec<&str> = audited
        .iter()
        .map(|r| r["result"].as_str().unwrap())
        .collect();
    assert_eq!(results, ["error.422", "success", "success"], "{audited:?}");
    let params: Value = serde_json::from_str(audited[2]["params"].as_str().unwrap()).unwrap();
    assert_eq!(
        (&params["retention_days"], &params["events"]),
        (&json!(1), &json!(8))
    );

    let hook = login(&["sessions", "hook"]);
    assert!(
        stdout(&hook).contains("\"SessionEnd\""),
        "{}",
        stdout(&hook)
    );
    // A refused token is permanent (no retries) and keeps its own exit code.
    std::fs::write(project.join("s3.jsonl"), b"{}\n").unwrap();
    let refused = svc(
        &config.0,
        &[
            "--server", &s.base, "--token", "nope", "sessions", "push", "--json", &dir,
        ],
    );
    assert_eq!(code(&refused), 7, "{}", stderr(&refused));
    assert!(
        stdout(&refused).contains("\"failed\": 1"),
        "{}",
        stdout(&refused)
    );
}
