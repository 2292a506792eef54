//! The plugin marketplace through the real server on both backends: a curated marketplace
//! in a local bare git repository synced with the real `git` (a broken plugin reported while
//! the others are read; a path out of the repository refused; a failed fetch keeping the
//! previous data), telemetry attributed to the synced plugins and counted with true distinct
//! users, listings sorted by use, flea submissions approved and archived, hostile archives
//! refused, and the CLI over the same endpoints.

use std::path::Path;
use std::process::Command;

use serde_json::{json, Value};

use crate::support::{backends, TempDir};
use crate::telemetry::{run, server, upload_raw};

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.com",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// A bare repository holding a marketplace: `code-tools` (a skill named in its front matter,
/// an agent, a command), `broken` (one skill with unclosed front matter, one good),
/// `escape` (its source climbs out of the repository).
fn bare_marketplace(tmp: &Path) -> std::path::PathBuf {
    let work = tmp.join("work");
    std::fs::create_dir_all(&work).unwrap();
    write(
        &work,
        "marketplace.json",
        &json!({"name": "acme", "plugins": [
            {"name": "code-tools", "source": "./plugins/code-tools", "description": "Review helpers", "category": "dev"},
            {"name": "broken", "description": "Half readable"},
            {"name": "escape", "source": "../../etc"}
        ]})
        .to_string(),
    );
    write(
        &work,
        "plugins/code-tools/skills/rev/SKILL.md",
        "---\nname: review\ndescription: Reviews\n---\nbody",
    );
    write(
        &work,
        "plugins/code-tools/agents/planner.md",
        "---\nname: planner\n---\n",
    );
    write(
        &work,
        "plugins/code-tools/commands/ship.md",
        "no front matter",
    );
    write(
        &work,
        "plugins/broken/skills/bad/SKILL.md",
        "---\nname: bad\n",
    );
    write(
        &work,
        "plugins/broken/skills/good/SKILL.md",
        "---\nname: good-skill\n---\n",
    );
    git(&work, &["init", "-q"]);
    git(&work, &["add", "."]);
    git(&work, &["commit", "-q", "-m", "first"]);
    let bare = tmp.join("acme.git");
    git(
        tmp,
        &[
            "clone",
            "-q",
            "--bare",
            work.to_str().unwrap(),
            bare.to_str().unwrap(),
        ],
    );
    bare
}

/// A session of `user` invoking skill `skill` `n` times today.
fn session(skill: &str, n: usize) -> Vec<u8> {
    let today = chrono::Utc::now().format("%Y-%m-%d");
    let mut out = String::new();
    for i in 0..n {
        out.push_str(
            &json!({"type": "assistant", "uuid": format!("u{i}"), "sessionId": format!("S-{skill}"),
                    "timestamp": format!("{today}T10:00:{:02}.000Z", i % 60),
                    "message": {"role": "assistant", "model": "m",
                                "content": [{"type": "tool_use", "id": format!("t{i}"), "name": "Skill",
                                             "input": {"skill": skill}}]}})
            .to_string(),
        );
        out.push('\n');
    }
    out.into_bytes()
}

fn items(s: &crate::support::Server, token: &str, query: &str) -> Value {
    let (status, page) = s.get_json(&format!("/api/marketplace/items?{query}"), token);
    assert_eq!(status, 200, "{page}");
    page
}

#[test]
fn curated_sync_attribution_listing_and_flea() {
    for backend in backends() {
        let tmp = TempDir::new();
        let bare = bare_marketplace(&tmp.0);
        let s = server(backend, &[]);
        let admin = s.admin_token();
        let ana = s.user_token("ana@example.com", false);
        let bo = s.user_token("bo@example.com", false);

        let (status, m) = s.post_json(
            "/api/admin/marketplaces",
            &admin,
            &json!({"id": "acme", "url": bare.to_str().unwrap()}),
        );
        assert_eq!(status, 201, "{m}");
        assert_eq!(
            s.post_json(
                "/api/admin/marketplaces",
                &admin,
                &json!({"id": "acme", "url": bare.to_str().unwrap()})
            )
            .0,
            409
        );
        let (status, e) = s.post_json(
            "/api/admin/marketplaces",
            &admin,
            &json!({"id": "evil", "url": "--upload-pack=touch /tmp/pwned"}),
        );
        assert_eq!(status, 422, "{e}");
        assert_eq!(
            s.post_json(
                "/api/admin/marketplaces",
                &ana,
                &json!({"id": "x", "url": "/tmp"})
            )
            .0,
            403
        );

        let (status, out) = s.post_json("/api/marketplace/sync?id=acme", &admin, &json!({}));
        assert_eq!(status, 200, "{out}");
        let report = &out["reports"][0];
        assert_eq!(report["error"], Value::Null, "{out}");
        assert_eq!(report["plugins"], 3, "{out}");
        assert_eq!(report["commit"].as_str().map(str::len), Some(40), "{out}");
        let broken: Vec<&str> = report["broken"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["name"].as_str().unwrap())
            .collect();
        assert_eq!(broken, ["broken", "escape"], "{out}");
        let (_, plugins) = s.get_json("/api/admin/marketplaces/acme/plugins", &admin);
        let by_name = |n: &str| {
            plugins["plugins"]
                .as_array()
                .unwrap()
                .iter()
                .find(|p| p["name"] == n)
                .unwrap()
                .clone()
        };
        let tools = by_name("code-tools");
        assert_eq!(tools["skills"], json!(["review"]));
        assert_eq!(tools["agents"], json!(["planner"]));
        assert_eq!(tools["commands"], json!(["ship"]));
        let half = by_name("broken");
        assert_eq!(
            half["skills"],
            json!(["good-skill"]),
            "the readable part is still attributed"
        );
        assert!(
            half["error"].as_str().unwrap().contains("not closed"),
            "{half}"
        );
        assert!(
            by_name("escape")["error"]
                .as_str()
                .unwrap()
                .contains("leaves"),
            "{plugins}"
        );
        assert_eq!(s.audit_rows("marketplace.sync", 1)[0]["resource"], "acme");

        // Telemetry credits the plugin; distinct users are counted once over 30 days.
        for (token, n) in [(&ana, 5), (&bo, 2)] {
            let (status, up) = upload_raw(&s, token, "mkt.jsonl", &session("code-tools:review", n));
            assert_eq!(status, 200, "{up}");
        }
        let (status, up) = upload_raw(&s, &ana, "other.jsonl", &session("good-skill", 1));
        assert_eq!(status, 200, "{up}");
        run(&s, &admin);
        let page = items(&s, &ana, "sort=most_used");
        assert_eq!(page["total"], 3, "{page}");
        let first = &page["items"][0];
        assert_eq!(
            (
                first["id"].as_str(),
                first["invocations_30d"].as_i64(),
                first["unique_users_30d"].as_i64()
            ),
            (Some("acme/code-tools"), Some(7), Some(2)),
            "{page}"
        );
        assert_eq!(
            first["trend_pct"],
            Value::Null,
            "below the minimum sample: {first}"
        );
        assert_eq!(page["items"][1]["id"], "acme/broken");
        assert_eq!(items(&s, &ana, "sort=trending")["total"], 0);
        let (status, e) = s.get_json("/api/marketplace/items?sort=popular", &ana);
        assert_eq!(status, 422, "{e}");
        assert!(e.to_string().contains("most_used"), "{e}");
        let (status, detail) = s.get_json("/api/marketplace/plugins/acme/code-tools", &ana);
        assert_eq!(status, 200, "{detail}");
        let series = detail["telemetry"]["daily_series"].as_array().unwrap();
        assert_eq!(series.len(), 30);
        assert_eq!(series[29]["invocations"], 7, "{detail}");
        assert_eq!(series[0]["invocations"], 0);
        assert_eq!(
            s.get_json("/api/marketplace/plugins/acme/nope", &ana).0,
            404
        );

        // A fetch that fails keeps the previous plugins and says why.
        std::fs::remove_dir_all(&bare).unwrap();
        let (status, out) = s.post_json("/api/marketplace/sync", &admin, &json!({}));
        assert_eq!(status, 200, "{out}");
        assert!(
            out["reports"][0]["error"]
                .as_str()
                .unwrap()
                .contains("git clone failed"),
            "{out}"
        );
        let (_, list) = s.get_json("/api/admin/marketplaces", &admin);
        assert!(
            list["marketplaces"][0]["last_error"].as_str().is_some(),
            "{list}"
        );
        assert_eq!(list["marketplaces"][0]["plugin_count"], 3);
        assert_eq!(
            items(&s, &ana, "sort=most_used")["items"][0]["invocations_30d"],
            7
        );

        // Flea: a skill submitted, invisible until approved, attributed once approved.
        let (status, e) = s.post_json(
            "/api/marketplace/flea",
            &bo,
            &json!({"type": "skill", "name": "sql-helper", "content": "Write SQL.", "category": "data"}),
        );
        assert_eq!(status, 201, "{e}");
        let fid = e["id"].as_str().unwrap().to_owned();
        assert_eq!(items(&s, &ana, "tab=flea")["total"], 0);
        assert_eq!(items(&s, &bo, "tab=my")["items"][0]["status"], "pending");
        assert_eq!(
            s.get_json(&format!("/api/marketplace/flea/{fid}"), &ana).0,
            404
        );
        let (status, d) = s.post_json(
            &format!("/api/admin/marketplace/flea/{fid}/approve"),
            &admin,
            &json!({}),
        );
        assert_eq!(
            (status, d["status"].as_str()),
            (200, Some("approved")),
            "{d}"
        );
        let (status, up) = upload_raw(&s, &ana, "flea.jsonl", &session("sql-helper", 3));
        assert_eq!(status, 200, "{up}");
        run(&s, &admin);
        let flea = items(&s, &ana, "tab=flea&sort=most_used");
        assert_eq!(flea["items"][0]["invocations_30d"], 3, "{flea}");
        let (status, d) = s.post_json(
            &format!("/api/admin/marketplace/flea/{fid}/archive"),
            &admin,
            &json!({}),
        );
        assert_eq!(
            (status, d["status"].as_str()),
            (200, Some("archived")),
            "{d}"
        );
        assert_eq!(items(&s, &ana, "tab=flea")["total"], 0);
        assert_eq!(
            s.audit_rows("marketplace.flea_archive", 1)[0]["resource"],
            fid.as_str()
        );

        // Bad submissions.
        for body in [
            json!({"type": "widget", "name": "x", "content": "c"}),
            json!({"type": "skill", "name": "../x", "content": "c"}),
            json!({"type": "skill", "name": "x", "content": ""}),
        ] {
            let (status, e) = s.post_json("/api/marketplace/flea", &ana, &body);
            assert_eq!(status, 422, "{body} {e}");
        }
    }
}

pub(crate) fn tar_of(entries: &[(&str, &[u8], bool)]) -> Vec<u8> {
    // Hand-written ustar headers, so hostile names and symlinks are kept as they are.
    let mut out = Vec::new();
    for (name, data, symlink) in entries {
        let mut h = [0u8; 512];
        h[..name.len()].copy_from_slice(name.as_bytes());
        h[100..107].copy_from_slice(b"0000644");
        h[108..115].copy_from_slice(b"0000000");
        h[116..123].copy_from_slice(b"0000000");
        let size = if *symlink { 0 } else { data.len() };
        h[124..135].copy_from_slice(format!("{size:011o}").as_bytes());
        h[136..147].copy_from_slice(b"00000000000");
        h[156] = if *symlink { b'2' } else { b'0' };
        if *symlink {
            h[157..157 + data.len()].copy_from_slice(data);
        }
        h[257..263].copy_from_slice(b"ustar\0");
        h[263..265].copy_from_slice(b"00");
        h[148..156].copy_from_slice(b"        ");
        let sum: u32 = h.iter().map(|b| u32::from(*b)).sum();
        h[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
        out.extend_from_slice(&h);
        if !*symlink {
            out.extend_from_slice(data);
            out.resize(out.len().div_ceil(512) * 512, 0);
        }
    }
    out.resize(out.len() + 1024, 0);
    out
}

#[test]
fn plugin_archives_and_the_cli() {
    use crate::svc_cli::{code, stderr, stdout, svc};

    let tmp = TempDir::new();
    let s = server(
        crate::support::Backend::Sqlite,
        &[("SVC_MARKETPLACE_UPLOAD_MAX_BYTES", "200000")],
    );
    let admin = s.admin_token();
    let ana = s.user_token("ana@example.com", false);
    let upload = |name: &str, body: Vec<u8>| {
        s.send(
            s.http
                .post(s.url("/api/marketplace/flea/upload"))
                .query(&[("name", name)])
                .bearer_auth(&ana)
                .header("content-type", "application/octet-stream")
                .body(body),
        )
    };
    let good = tar_of(&[
        ("skills/lint/SKILL.md", b"---\nname: lint\n---\n", false),
        ("commands/fix.md", b"---\nname: /fix\n---\n", false),
    ]);
    let (status, e) = upload("linting", good);
    assert_eq!(status, 201, "{e}");
    assert_eq!(
        (e["skills"].clone(), e["commands"].clone()),
        (json!(["lint"]), json!(["fix"]))
    );
    for (what, body) in [
        ("traversal", tar_of(&[("../outside.md", b"x", false)])),
        ("absolute", tar_of(&[("/etc/cron.d/x", b"x", false)])),
        (
            "symlink",
            tar_of(&[("skills/x/SKILL.md", b"/etc/passwd", true)]),
        ),
        ("zip", b"PK\x03\x04 not supported".to_vec()),
    ] {
        let (status, e) = upload("bad", body);
        assert_eq!(status, 422, "{what}: {e}");
    }
    // A bomb: 60 MB of zeros declared in the header, a few hundred KB compressed.
    let mut bomb = tar_of(&[("big.bin", &vec![0u8; 60 << 20], false)]);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    std::io::Write::write_all(&mut gz, &bomb).unwrap();
    bomb = gz.finish().unwrap();
    assert!(bomb.len() < 200_000, "{}", bomb.len());
    let (status, e) = upload("bomb", bomb);
    assert_eq!(status, 422, "{e}");
    assert!(e.to_string().contains("unpacks to more"), "{e}");
    let (status, e) = upload("huge", vec![7u8; 300_000]);
    assert_eq!(status, 413, "{e}");
    let flea_dirs = std::fs::read_dir(s.dir.0.join("flea")).unwrap().count();
    assert_eq!(flea_dirs, 1, "refused archives leave nothing behind");

    // The CLI: add, sync, list and show.
    let work = tmp.0.join("local");
    write(
        &work,
        "marketplace.json",
        "{\"plugins\": [{\"name\": \"p1\"}]}",
    );
    write(
        &work,
        "plugins/p1/agents/helper.md",
        "---\nname: helper\n---\n",
    );
    let config = TempDir::new();
    let run_as = |token: &str, args: &[&str]| {
        let mut all = vec!["--server", s.base.as_str(), "--token", token];
        all.extend_from_slice(args);
        svc(&config.0, &all)
    };
    let out = run_as(
        &admin,
        &[
            "admin",
            "marketplace",
            "add",
            "local",
            work.to_str().unwrap(),
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = run_as(&admin, &["admin", "marketplace", "sync", "local"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stderr(&out).contains("1 plugins"), "{}", stderr(&out));
    let out = run_as(&admin, &["admin", "marketplace", "list", "--json"]);
    let list: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(list["marketplaces"][0]["plugin_count"], 1);
    let out = run_as(
        &ana,
        &["marketplace", "list", "--sort", "most_used", "--json"],
    );
    let page: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(page["items"][0]["id"], "local/p1", "{page}");
    let out = run_as(&ana, &["marketplace", "show", "local/p1"]);
    assert!(stdout(&out).contains("helper"), "{}", stdout(&out));
    let out = run_as(&ana, &["marketplace", "list", "--sort", "popular"]);
    assert_eq!(code(&out), 2, "clap refuses an unknown sort");
    let skill = tmp.0.join("skill.md");
    std::fs::write(&skill, "Explain plans.").unwrap();
    let out = run_as(
        &ana,
        &[
            "marketplace",
            "submit",
            "--type",
            "skill",
            "--name",
            "explainer",
            skill.to_str().unwrap(),
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = run_as(&admin, &["admin", "marketplace", "submissions", "--json"]);
    let queue: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(queue["count"], 2, "{queue}");
}
