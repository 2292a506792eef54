//! Sessions through the real server: the admin browser (list, KPIs, facets) agrees with
//! `svc_sessions` in SQL; transcripts page and jump to errors; downloads and the per-user
//! ZIP (read back by Python's `zipfile`, a reader nobody here wrote) return the bytes
//! uploaded and are audited; the path guards refuse traversal, encoded traversal, NUL and a
//! symlink out of the root; owners see only their own files; non-admins are refused.

use std::io::{Read, Write};
use std::process::Command;

use serde_json::{json, Value};

use crate::support::{backends, Server, TempDir};
use crate::svc_cli::{code, stderr, stdout, svc};
use crate::telemetry::{rows, run, server, upload_raw, user_id, LABELLED};

const YEAR: &str = "since_minutes=525600";

/// A session with one tool call that worked, on another day.
const CLEAN: &str = concat!(
    r#"{"type":"user","uuid":"c1","sessionId":"S3","timestamp":"2026-11-03T09:00:00Z","message":{"role":"user","content":"hello"}}"#,
    "\n",
    r#"{"type":"assistant","uuid":"c2","sessionId":"S3","timestamp":"2026-11-03T09:00:05Z","message":{"model":"m9","content":[{"type":"tool_use","id":"k1","name":"Read","input":{"file_path":"/x"}}]}}"#,
    "\n",
    r#"{"type":"user","uuid":"c3","sessionId":"S3","timestamp":"2026-11-03T09:00:09Z","message":{"content":[{"type":"tool_result","tool_use_id":"k1","content":"fine"}]}}"#,
    "\n",
);

fn get(s: &Server, token: &str, path: &str) -> Value {
    let (status, body) = s.get_json(path, token);
    assert_eq!(status, 200, "{path}: {body}");
    body
}

fn bytes(s: &Server, token: &str, path: &str) -> (u16, Vec<u8>, String) {
    let r = s.http.get(s.url(path)).bearer_auth(token).send().unwrap();
    let status = r.status().as_u16();
    let disposition = r
        .headers()
        .get("content-disposition")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (status, r.bytes().unwrap().to_vec(), disposition)
}

/// A GET sent byte for byte, so no client library normalises `%2e%2e` away first.
fn raw_status(s: &Server, token: &str, path: &str) -> (u16, String) {
    let addr = s.base.trim_start_matches("http://").to_owned();
    let mut sock = std::net::TcpStream::connect(addr).unwrap();
    sock.set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    // HTTP/1.0: the server closes the connection after its answer, which ends the read.
    write!(
        sock,
        "GET {path} HTTP/1.0\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    sock.read_to_string(&mut out).unwrap();
    let status = out[9..12].parse().unwrap();
    (status, out)
}

fn session_files(list: &Value) -> Vec<String> {
    list["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["session_file"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn administrators_browse_read_and_download_sessions() {
    for backend in backends() {
        let s = server(backend, &[]);
        let admin = s.admin_token();
        let ana = s.user_token("ana@example.com", false);
        let bob = s.user_token("bob@example.com", false);
        let (ana_id, bob_id) = (user_id(&s, &ana), user_id(&s, &bob));
        assert_eq!(upload_raw(&s, &ana, "a.jsonl", LABELLED).0, 200);
        let other = String::from_utf8_lossy(LABELLED).replace("S1", "S2");
        assert_eq!(upload_raw(&s, &bob, "b.jsonl", other.as_bytes()).0, 200);
        assert_eq!(upload_raw(&s, &bob, "c.jsonl", CLEAN.as_bytes()).0, 200);
        run(&s, &admin);

        // List: errors first, then newest, and the same sessions SQL sees.
        let list = get(&s, &admin, &format!("/api/admin/sessions/list?{YEAR}"));
        assert_eq!(list["total"], 3, "{list}");
        assert_eq!(list["next_offset"], Value::Null);
        let files = session_files(&list);
        assert_eq!(
            files[2],
            format!("{bob_id}/c.jsonl"),
            "the clean session is last"
        );
        let mut erring = vec![format!("{ana_id}/a.jsonl"), format!("{bob_id}/b.jsonl")];
        erring.sort();
        let mut first_two = files[..2].to_vec();
        first_two.sort();
        assert_eq!(first_two, erring);
        let sql = rows(
            &s,
            &admin,
            "SELECT count(*), count(DISTINCT username), sum(tool_calls), sum(tool_errors), \
             sum(CASE WHEN tool_errors > 0 THEN 1 ELSE 0 END) FROM svc_sessions",
        );
        let kpis = get(&s, &admin, &format!("/api/admin/sessions/kpis?{YEAR}"));
        assert_eq!(
            json!([
                kpis["sessions_total"],
                kpis["distinct_users"],
                kpis["tool_calls_total"],
                kpis["tool_errors_total"],
                kpis["error_sessions"]
            ]),
            sql[0],
            "{kpis}"
        );
        // Pages are stable and chained by next_offset.
        let page1 = get(
            &s,
            &admin,
            &format!("/api/admin/sessions/list?{YEAR}&limit=2"),
        );
        assert_eq!(page1["next_offset"], 2);
        let page2 = get(
            &s,
            &admin,
            &format!("/api/admin/sessions/list?{YEAR}&limit=2&offset=2"),
        );
        assert_eq!(session_files(&page2), [files[2].clone()]);
        // Filters: errors only, owner, model, literal text, a sort column.
        let errs = get(
            &s,
            &admin,
            &format!("/api/admin/sessions/list?{YEAR}&only_errors=true"),
        );
        assert_eq!(errs["total"], 2);
        let bobs = get(
            &s,
            &admin,
            &format!(
                "/api/admin/sessions/list?{YEAR}&username=bob%40example.com&sort=tool_calls:asc"
            ),
        );
        assert_eq!(
            session_files(&bobs),
            [format!("{bob_id}/c.jsonl"), format!("{bob_id}/b.jsonl")]
        );
        let m9 = get(
            &s,
            &admin,
            &format!("/api/admin/sessions/list?{YEAR}&model=m9"),
        );
        assert_eq!(session_files(&m9), [format!("{bob_id}/c.jsonl")]);
        let pct = get(
            &s,
            &admin,
            &format!("/api/admin/sessions/list?{YEAR}&q=%25"),
        );
        assert_eq!(pct["total"], 0, "% is literal");
        let s2 = get(&s, &admin, &format!("/api/admin/sessions/list?{YEAR}&q=S2"));
        assert_eq!(session_files(&s2), [format!("{bob_id}/b.jsonl")]);
        let facets = get(&s, &admin, &format!("/api/admin/sessions/facets?{YEAR}"));
        assert_eq!(
            facets["users"],
            json!([{"value": "bob@example.com", "count": 2}, {"value": "ana@example.com", "count": 1}])
        );
        // The default window (a week) holds none of November's fixture sessions... unless
        // the test runs in that week; either way it is a subset.
        let recent = get(&s, &admin, "/api/admin/sessions/list");
        assert!(recent["total"].as_i64().unwrap() <= 3);

        // Transcript: events, the error linked to its call, paging and the error jump.
        let path = format!("/api/admin/sessions/{ana_id}/a.jsonl/transcript");
        let t = get(&s, &admin, &path);
        assert_eq!(t["summary"]["session_id"], "S1");
        assert_eq!(t["username"], ana_id.as_str());
        let total = t["total_events"].as_u64().unwrap();
        assert_eq!(t["events"].as_array().unwrap().len() as u64, total);
        let errors = t["error_ordinals"].as_array().unwrap().clone();
        assert!(!errors.is_empty(), "{t}");
        let first_error = errors[0].as_u64().unwrap();
        let jump = get(&s, &admin, &format!("{path}?offset={first_error}&limit=1"));
        let e = &jump["events"][0];
        assert_eq!(
            (&e["kind"], &e["is_error"], &e["tool_name"], &e["text"]),
            (
                &json!("tool_result"),
                &json!(true),
                &json!("Bash"),
                &json!("boom")
            )
        );
        let call = &t["events"][e["tool_use_ordinal"].as_u64().unwrap() as usize];
        assert_eq!(
            (&call["kind"], &call["input"]),
            (&json!("tool_use"), &json!({"command": "ls"}))
        );
        assert_eq!(jump["next_offset"], first_error + 1);
        // Two reads of the same transcript within a minute: one audit row.
        let views = s.audit_rows("session.transcript_view", 1);
        assert_eq!(views.len(), 1, "{views:?}");
        assert_eq!(views[0]["resource"], format!("{ana_id}/a.jsonl"));

        // Download: the bytes uploaded, audited with the size.
        let (status, body, disposition) = bytes(
            &s,
            &admin,
            &format!("/api/admin/sessions/{ana_id}/a.jsonl/download"),
        );
        assert_eq!(status, 200);
        assert_eq!(body, LABELLED);
        assert!(disposition.contains("a.jsonl"), "{disposition}");
        let downloads = s.audit_rows("session.download", 1);
        assert!(downloads[0]["params"]
            .as_str()
            .unwrap()
            .contains(&format!("\"bytes\":{}", LABELLED.len())));

        // Path guards: each refused with a clear status, never a 500.
        for (bad, want) in [
            ("/api/admin/sessions/../a.jsonl/transcript".to_owned(), 400),
            (
                "/api/admin/sessions/%2e%2e/a.jsonl/transcript".to_owned(),
                400,
            ),
            (
                format!("/api/admin/sessions/{ana_id}%2Fx/a.jsonl/download"),
                400,
            ),
            (
                format!("/api/admin/sessions/{ana_id}/a%00.jsonl/download"),
                400,
            ),
            (
                format!("/api/admin/sessions/{ana_id}/..%2F..%2Fstate%2Fsvc.db/download"),
                400,
            ),
            (
                format!("/api/admin/sessions/{ana_id}/gone.jsonl/transcript"),
                404,
            ),
        ] {
            let (status, out) = raw_status(&s, &admin, &bad);
            // `..` may be resolved by the router itself into another path: then no route.
            assert!(
                status == want || (bad.contains("/../") && status == 404),
                "{bad}: {out}"
            );
        }
        let root = s.dir.0.join("user_sessions").join(&ana_id);
        std::os::unix::fs::symlink("/etc/passwd", root.join("evil.jsonl")).unwrap();
        let (status, out) = raw_status(
            &s,
            &admin,
            &format!("/api/admin/sessions/{ana_id}/evil.jsonl/download"),
        );
        assert_eq!(status, 400, "{out}");
        assert!(out.contains("path escape rejected"), "{out}");
        assert!(!out.contains("root:"), "{out}");

        // Per user: processed and unprocessed files, then the ZIP of them all.
        std::fs::write(root.join("late.jsonl"), CLEAN).unwrap();
        let mine = get(&s, &admin, &format!("/api/admin/users/{ana_id}/sessions"));
        let by_name: Vec<(String, bool)> = mine["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["name"].as_str().unwrap().to_owned(),
                    r["processed"].as_bool().unwrap(),
                )
            })
            .collect();
        assert!(by_name.contains(&("a.jsonl".into(), true)), "{mine}");
        assert!(by_name.contains(&("late.jsonl".into(), false)), "{mine}");
        assert!(
            !by_name.iter().any(|(n, _)| n == "evil.jsonl"),
            "links are not listed"
        );
        let (status, zip, disposition) = bytes(
            &s,
            &admin,
            &format!("/api/admin/users/{ana_id}/sessions/download-all"),
        );
        assert_eq!(status, 200);
        assert!(disposition.ends_with(".zip\""), "{disposition}");
        let zip_path = s.dir.0.join("sessions.zip");
        std::fs::write(&zip_path, &zip).unwrap();
        let listing = Command::new("python3")
            .args([
                "-c",
                "import sys, zipfile, hashlib\n\
                 z = zipfile.ZipFile(sys.argv[1]); assert z.testzip() is None\n\
                 for n in sorted(z.namelist()): print(n, len(z.read(n)), hashlib.sha256(z.read(n)).hexdigest())",
            ])
            .arg(&zip_path)
            .output()
            .unwrap();
        assert!(
            listing.status.success(),
            "{}",
            String::from_utf8_lossy(&listing.stderr)
        );
        let sha = |b: &[u8]| {
            use sha2::Digest;
            hex::encode(sha2::Sha256::digest(b))
        };
        assert_eq!(
            String::from_utf8_lossy(&listing.stdout),
            format!(
                "a.jsonl {} {}\nlate.jsonl {} {}\n",
                LABELLED.len(),
                sha(LABELLED),
                CLEAN.len(),
                sha(CLEAN.as_bytes())
            )
        );
        let bulk = s.audit_rows("session.bulk_download", 1);
        assert!(
            bulk[0]["params"]
                .as_str()
                .unwrap()
                .contains("\"file_count\":2"),
            "{bulk:?}"
        );
        // The refused `a%00.jsonl` is audited with its NUL as U+2400: PostgreSQL stores no
        // NUL, and the row (with every row batched beside it) was lost.
        let downloads = s.audit_rows("session.download", 1);
        assert!(
            downloads.iter().any(|r| r["resource"]
                .as_str()
                .is_some_and(|x| x.ends_with("/a\u{2400}.jsonl"))),
            "{downloads:?}"
        );
        let (status, one, _) = bytes(
            &s,
            &admin,
            &format!("/api/admin/users/{ana_id}/sessions/late.jsonl/download"),
        );
        assert_eq!((status, one.as_slice()), (200, CLEAN.as_bytes()));
        let (status, _) = s.get_json("/api/admin/users/nobody/sessions", &admin);
        assert_eq!(status, 404);

        // Owners: their own files only; someone else's name is 404, never 403.
        let own = get(&s, &bob, "/api/me/sessions");
        assert_eq!(own["total"], 2, "{own}");
        let (status, body, _) = bytes(&s, &bob, "/api/me/sessions/c.jsonl");
        assert_eq!((status, body.as_slice()), (200, CLEAN.as_bytes()));
        for other in ["a.jsonl", "..%2Fx.jsonl", "nope.jsonl"] {
            let (status, _) = raw_status(&s, &bob, &format!("/api/me/sessions/{other}"));
            assert_eq!(status, 404, "{other}");
        }
        let tokens = get(&s, &ana, "/api/me/stats/tokens?days=365");
        assert_eq!(tokens["totals"]["sessions"], 1, "{tokens}");
        assert_eq!(tokens["totals"]["input"], 11, "{tokens}");
        assert_eq!(tokens["by_model"][0]["model"], "m1");
        let (status, body) = s.get_json("/api/me/stats/tokens?days=0", &ana);
        assert_eq!(status, 422, "{body}");
        assert!(body.to_string().contains("days"), "{body}");

        // The client: the same list, a transcript in the terminal, files saved atomically.
        let config = TempDir::new();
        let cli = |token: &str, args: &[&str]| {
            let mut all = vec!["--server", s.base.as_str(), "--token", token];
            all.extend_from_slice(args);
            svc(&config.0, &all)
        };
        let out = cli(
            &admin,
            &["admin", "sessions", "list", "--since", "365d", "--json"],
        );
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let doc: Value = serde_json::from_str(&stdout(&out)).unwrap();
        assert_eq!(session_files(&doc), files);
        let out = cli(
            &admin,
            &[
                "admin", "sessions", "list", "--since", "365d", "--limit", "1",
            ],
        );
        assert!(stdout(&out).contains("ERRORS"), "{}", stdout(&out));
        assert!(
            stderr(&out).contains("Next page: --offset 1"),
            "{}",
            stderr(&out)
        );
        let session = format!("{ana_id}/a.jsonl");
        let out = cli(
            &admin,
            &["admin", "sessions", "show", &session, "--errors-only"],
        );
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let shown = stdout(&out);
        assert!(shown.contains("→ Bash {\"command\":\"ls\"}"), "{shown}");
        assert!(
            shown.contains("result of Bash") && shown.contains("FAILED"),
            "{shown}"
        );
        assert!(!shown.contains("Read"), "only failing calls: {shown}");
        let saved = config.0.join("a-copy.jsonl");
        let out = cli(
            &admin,
            &[
                "admin",
                "sessions",
                "download",
                &session,
                "-o",
                saved.to_str().unwrap(),
            ],
        );
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        assert_eq!(std::fs::read(&saved).unwrap(), LABELLED);
        let zip_out = config.0.join("ana.zip");
        let out = cli(
            &admin,
            &[
                "admin",
                "user-sessions",
                "ana@example.com",
                "--zip",
                zip_out.to_str().unwrap(),
            ],
        );
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        assert_eq!(std::fs::read(&zip_out).unwrap()[..4], *b"PK\x03\x04");
        let out = cli(&admin, &["admin", "sessions", "show", "no-slash"]);
        assert_eq!(code(&out), 2, "{}", stderr(&out));
        let out = cli(&ana, &["me", "tokens", "--days", "365", "--json"]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let doc: Value = serde_json::from_str(&stdout(&out)).unwrap();
        assert_eq!(doc["totals"], tokens["totals"]);

        // Bad parameters name the field; non-admins are refused everywhere here.
        for (q, field) in [
            ("since_minutes=0", "since_minutes"),
            ("limit=201", "limit"),
            ("offset=50001", "offset"),
        ] {
            let (status, body) = s.get_json(&format!("/api/admin/sessions/list?{q}"), &admin);
            assert_eq!(status, 422, "{q}: {body}");
            assert!(body.to_string().contains(field), "{q}: {body}");
        }
        let (status, _) = s.get_json(&format!("{path}?limit=0"), &admin);
        assert_eq!(status, 422);
        for p in [
            "/api/admin/sessions/list".to_owned(),
            "/api/admin/sessions/kpis".to_owned(),
            "/api/admin/sessions/facets".to_owned(),
            path.clone(),
            format!("/api/admin/sessions/{ana_id}/a.jsonl/download"),
            format!("/api/admin/users/{ana_id}/sessions"),
            format!("/api/admin/users/{ana_id}/sessions/download-all"),
        ] {
            let (status, body) = s.get_json(&p, &bob);
            assert_eq!(status, 403, "{p}: {body}");
            assert!(!body["detail"].is_null(), "{p}: {body}");
        }
    }
}
