//! Corporate memory through the real server on both backends: who sees what (groups,
//! memory-domain grants, personal items), the enforced review graph with undo and no-op
//! repeats, revisions against stale edits, audit rows with the acting admin and the item as
//! it was, votes, the agents' bundle, and bad input.

use serde_json::{json, Value};

use crate::support::{backends, Server};

fn create(s: &Server, token: &str, body: Value) -> String {
    let (status, item) = s.post_json("/api/memory", token, &body);
    assert_eq!(status, 201, "{item}");
    assert_eq!(item["status"], "pending");
    item["id"].as_str().unwrap().to_owned()
}

fn ids(s: &Server, token: &str, query: &str) -> Vec<String> {
    let (status, page) = s.get_json(&format!("/api/memory?per_page=500&{query}"), token);
    assert_eq!(status, 200, "{page}");
    let mut ids: Vec<String> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["title"].as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    ids
}

fn decide(s: &Server, admin: &str, decision: &str, id: &str, body: Value) -> (u16, Value) {
    s.post_json(
        &format!("/api/memory/admin/{decision}?item_id={id}"),
        admin,
        &body,
    )
}

fn join_group(s: &Server, admin: &str, group: &str, email: &str) -> String {
    let (status, g) = s.post_json("/api/admin/groups", admin, &json!({"name": group}));
    assert_eq!(status, 201, "{g}");
    let gid = g["id"].as_str().unwrap().to_owned();
    let (status, m) = s.post_json(
        &format!("/api/admin/groups/{gid}/members"),
        admin,
        &json!({"email": email}),
    );
    assert_eq!(status, 201, "{m}");
    gid
}

#[test]
fn memory_visibility_review_revisions_and_the_bundle() {
    for backend in backends() {
        let s = Server::start_with(backend, &[]);
        let admin = s.admin_token();
        let ana = s.user_token("ana@example.com", false);
        let bo = s.user_token("bo@example.com", false);
        let cy = s.user_token("cy@example.com", false);
        join_group(&s, &admin, "finance-team", "ana@example.com");
        let eng = join_group(&s, &admin, "eng", "bo@example.com");

        let shared = create(
            &s,
            &ana,
            json!({"title": "shared", "content": "for all", "tags": ["a", "a", "b"]}),
        );
        let fin = create(
            &s,
            &ana,
            json!({"title": "fin-only", "content": "finance team", "domain": "finance"}),
        );
        let eng_item = create(
            &s,
            &bo,
            json!({"title": "eng-note", "domain": "engineering"}),
        );
        let private = create(&s, &ana, json!({"title": "ana-private"}));
        let (status, p) = s.post_json(
            &format!("/api/memory/{private}/personal"),
            &ana,
            &json!({"is_personal": true}),
        );
        assert_eq!(
            (status, p["is_personal"].as_bool()),
            (200, Some(true)),
            "{p}"
        );

        // Review: approve, mandate for a group.
        let (status, a) = decide(&s, &admin, "approve", &shared, json!({"reason": "useful"}));
        assert_eq!(
            (status, a["status"].as_str()),
            (200, Some("approved")),
            "{a}"
        );
        let (status, m) = decide(
            &s,
            &admin,
            "mandate",
            &fin,
            json!({"audience": "group:finance-team"}),
        );
        assert_eq!(status, 200, "{m}");
        assert_eq!(m["audience"], "group:finance-team");

        // Who sees what.
        assert_eq!(ids(&s, &cy, ""), ["eng-note", "shared"]);
        assert_eq!(ids(&s, &ana, ""), ["eng-note", "fin-only", "shared"]);
        assert_eq!(ids(&s, &bo, ""), ["eng-note", "shared"]);
        assert_eq!(
            ids(&s, &admin, ""),
            ["ana-private", "eng-note", "fin-only", "shared"]
        );
        // A memory-domain grant opens the finance domain to bo's group.
        let (status, g) = s.post_json(
            "/api/admin/grants",
            &admin,
            &json!({"group_id": eng, "resource_type": "memory_domain", "resource_id": "finance"}),
        );
        assert_eq!(status, 201, "{g}");
        assert_eq!(ids(&s, &bo, ""), ["eng-note", "fin-only", "shared"]);
        let (status, _) = s.post_json(
            "/api/admin/grants",
            &admin,
            &json!({"group_id": eng, "resource_type": "memory_domain", "resource_id": "astrology"}),
        );
        assert_eq!(status, 422);
        // Filters and sort.
        assert_eq!(
            ids(&s, &admin, "status_filter=pending"),
            ["ana-private", "eng-note"]
        );
        assert_eq!(ids(&s, &admin, "domain=finance"), ["fin-only"]);
        assert_eq!(ids(&s, &admin, "search=finance%20team"), ["fin-only"]);
        let (_, sorted) = s.get_json("/api/memory?sort=title", &admin);
        let titles: Vec<&str> = sorted["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["title"].as_str().unwrap())
            .collect();
        assert_eq!(titles, ["ana-private", "eng-note", "fin-only", "shared"]);
        assert_eq!(sorted["total_count"], 4);
        assert_eq!(s.get_json("/api/memory?sort=popular", &admin).0, 422);
        for bad in [
            "page=0",
            "page=18446744073709551615",
            "per_page=501",
            "status_filter=done",
        ] {
            assert_eq!(
                s.get_json(&format!("/api/memory?{bad}"), &admin).0,
                422,
                "{bad}"
            );
        }

        // Stats count what the reader sees.
        let (_, st) = s.get_json("/api/memory/stats", &cy);
        assert_eq!(st["total"], 2, "{st}");
        let (_, st) = s.get_json("/api/memory/stats", &admin);
        assert_eq!(st["total"], 4, "{st}");
        assert_eq!(
            st["by_status"],
            json!([{"value": "pending", "count": 2}, {"value": "approved", "count": 1},
                   {"value": "mandatory", "count": 1}])
        );
        assert_eq!(
            st["by_tag"],
            json!([{"value": "a", "count": 1}, {"value": "b", "count": 1}])
        );
        assert_eq!(st["by_domain"][0], json!({"value": "(none)", "count": 2}));

        // Personal items: hidden from others (404, not 403), listed for their owner.
        for path in [
            format!("/api/memory/{private}"),
            format!("/api/memory/{private}/provenance"),
        ] {
            assert_eq!(s.get_json(&path, &bo).0, 404, "{path}");
        }
        assert_eq!(
            s.post_json(
                &format!("/api/memory/{private}/vote"),
                &bo,
                &json!({"vote": 1})
            )
            .0,
            404
        );
        assert_eq!(
            s.post_json(&format!("/api/memory/{fin}/vote"), &cy, &json!({"vote": 1}))
                .0,
            404,
            "a group's item is hidden from outsiders"
        );
        let (_, mine) = s.get_json("/api/memory/my-contributions", &ana);
        assert_eq!(mine["total_count"], 3, "{mine}");
        assert_eq!(
            s.post_json(
                &format!("/api/memory/{shared}/personal"),
                &bo,
                &json!({"is_personal": true})
            )
            .0,
            403
        );

        // Votes.
        let vote = |t: &str, v: i64| {
            s.post_json(
                &format!("/api/memory/{shared}/vote"),
                t,
                &json!({"vote": v}),
            )
        };
        assert_eq!(vote(&bo, 1).1, json!({"upvotes": 1, "downvotes": 0}));
        assert_eq!(vote(&cy, -1).1, json!({"upvotes": 1, "downvotes": 1}));
        assert_eq!(vote(&cy, 1).1, json!({"upvotes": 2, "downvotes": 0}));
        assert_eq!(vote(&bo, 0).1, json!({"upvotes": 1, "downvotes": 0}));
        assert_eq!(vote(&bo, 2).0, 422);
        let (_, votes) = s.get_json("/api/memory/my-votes", &cy);
        assert_eq!(votes[&shared], 1);

        // The graph is enforced; decisions undo; a repeat is a no-op.
        let (status, r) = decide(&s, &admin, "reject", &shared, json!({"reason": "outdated"}));
        assert_eq!(
            (status, r["status"].as_str()),
            (200, Some("rejected")),
            "{r}"
        );
        let (status, body) = decide(&s, &admin, "mandate", &shared, json!({}));
        assert_eq!(status, 409, "{body}");
        let text = body.to_string();
        assert!(
            text.contains("rejected") && text.contains("approved"),
            "{text}"
        );
        let (_, back) = decide(&s, &admin, "approve", &shared, json!({}));
        assert_eq!(back["status"], "approved");
        let before = back["revision"].as_i64().unwrap();
        let rows_before = s.audit_rows("corporate_memory.approve", 2).len();
        let (status, again) = decide(&s, &admin, "approve", &shared, json!({}));
        assert_eq!((status, again["revision"].as_i64()), (200, Some(before)));
        assert_eq!(decide(&s, &admin, "revoke", &eng_item, json!({})).0, 409);
        assert_eq!(decide(&s, &admin, "promote", &eng_item, json!({})).0, 404);
        assert_eq!(
            decide(&s, &admin, "approve", "no-such-item", json!({})).0,
            404
        );
        assert_eq!(
            decide(
                &s,
                &admin,
                "mandate",
                &eng_item,
                json!({"audience": "group:nobody"})
            )
            .0,
            422
        );

        // Revisions: a stale edit is refused, by body or If-Match.
        let edit = |body: Value, if_match: Option<&str>| {
            let mut rb = s
                .http
                .patch(s.url(&format!("/api/memory/admin/items/{shared}")))
                .bearer_auth(&admin)
                .json(&body);
            if let Some(m) = if_match {
                rb = rb.header("if-match", m);
            }
            s.send(rb)
        };
        let (status, body) = edit(
            json!({"title": "shared v2", "expected_revision": before - 1}),
            None,
        );
        assert_eq!(status, 409, "{body}");
        let (status, body) = edit(
            json!({"title": "shared v2"}),
            Some(&format!("\"{}\"", before - 1)),
        );
        assert_eq!(status, 409, "{body}");
        let (status, edited) = edit(
            json!({"title": "shared v2", "category": null}),
            Some(&before.to_string()),
        );
        assert_eq!(status, 200, "{edited}");
        assert_eq!(edited["revision"], before + 1);
        assert_eq!(edited["title"], "shared v2");
        assert_eq!(edit(json!({"title": null}), None).0, 422);
        assert_eq!(edit(json!({"domain": "astrology"}), None).0, 422);

        // Audit: the admin's user id, the item as resource, the item as it was.
        let rows = s.audit_rows("corporate_memory.approve", rows_before);
        assert_eq!(rows.len(), rows_before, "the no-op wrote nothing");
        let admin_id = crate::telemetry::user_id(&s, &admin);
        let first = &rows[0];
        assert_eq!(first["user_id"], admin_id.as_str());
        assert_eq!(first["resource"], shared.as_str());
        let before_json: Value =
            serde_json::from_str(first["params_before"].as_str().unwrap()).unwrap();
        assert_eq!(before_json["status"], "pending");
        let rejected = s.audit_rows("corporate_memory.reject", 1);
        assert!(rejected[0]["params"].as_str().unwrap().contains("outdated"));

        // The bundle: mandatory for its audience, approved ones, never pending or personal.
        let (status, b) = s.get_json("/api/memory/bundle", &ana);
        assert_eq!(status, 200, "{b}");
        let titles = |list: &Value| -> Vec<String> {
            list.as_array()
                .unwrap()
                .iter()
                .map(|i| i["title"].as_str().unwrap().to_owned())
                .collect()
        };
        assert_eq!(titles(&b["mandatory"]), ["fin-only"]);
        assert_eq!(titles(&b["approved"]), ["shared v2"]);
        assert_eq!(b["token_budget"], 6000);
        let (_, b) = s.get_json("/api/memory/bundle", &cy);
        assert!(titles(&b["mandatory"]).is_empty(), "{b}");
        let (_, b) = s.get_json("/api/memory/bundle?budget_tokens=1", &ana);
        assert!(
            titles(&b["approved"]).is_empty(),
            "nothing approved fits 1 token: {b}"
        );
        assert_eq!(
            s.get_json("/api/memory/bundle?budget_tokens=0", &ana).0,
            422
        );

        // Bad input and roles.
        for body in [
            json!({"title": ""}),
            json!({"title": "x".repeat(10_000)}),
            json!({"title": "t", "domain": "astrology"}),
            json!({"title": "t", "tags": vec!["t"; 31]}),
        ] {
            let (status, e) = s.post_json("/api/memory", &cy, &body);
            assert_eq!(status, 422, "{e}");
        }
        assert_eq!(s.get_json("/api/memory/no-such-item", &cy).0, 404);
        assert_eq!(decide(&s, &ana, "approve", &eng_item, json!({})).0, 403);
        assert_eq!(s.get_json("/api/memory/admin/pending", &ana).0, 403);
        let (_, pending) = s.get_json("/api/memory/admin/pending", &admin);
        assert_eq!(pending["total_count"], 2, "{pending}");
    }
}

/// `svc memory` and `svc admin memory`: contribute, review, read, vote, bundle.
#[test]
fn svc_memory_commands_round_trip() {
    use crate::support::TempDir;
    use crate::svc_cli::{code, stderr, stdout, svc};

    let s = Server::start();
    let admin = s.admin_token();
    let ana = s.user_token("ana@example.com", false);
    let config = TempDir::new();
    let as_user = |token: &str, args: &[&str]| {
        let mut all = vec!["--server", s.base.as_str(), "--token", token];
        all.extend_from_slice(args);
        svc(&config.0, &all)
    };
    let out = as_user(
        &ana,
        &[
            "memory",
            "add",
            "Deploys freeze on Fridays",
            "--content",
            "No deploys after noon.",
            "--domain",
            "engineering",
            "--tag",
            "deploy",
            "--json",
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let item: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let id = item["id"].as_str().unwrap().to_owned();

    let out = as_user(&admin, &["admin", "memory", "pending", "--json"]);
    let pending: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(pending["items"][0]["id"], id.as_str());
    let out = as_user(
        &admin,
        &["admin", "memory", "mandate", &id, "--reason", "policy"],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stderr(&out).contains("mandatory"), "{}", stderr(&out));
    let out = as_user(&admin, &["admin", "memory", "reject", &id]);
    assert_ne!(code(&out), 0, "mandatory -> rejected is not a legal move");
    assert!(stderr(&out).contains("mandatory"), "{}", stderr(&out));
    let out = as_user(
        &admin,
        &[
            "admin",
            "memory",
            "edit",
            &id,
            "--set-tags",
            "deploy,policy",
            "--revision",
            "1",
        ],
    );
    assert_ne!(code(&out), 0, "revision 1 is stale");

    let out = as_user(&ana, &["memory", "vote", &id, "up"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = as_user(&ana, &["memory", "list", "--status", "mandatory"]);
    assert!(
        stdout(&out).contains("Deploys freeze on Fridays"),
        "{}",
        stdout(&out)
    );
    let out = as_user(&ana, &["memory", "bundle"]);
    assert!(
        stdout(&out).contains("No deploys after noon."),
        "{}",
        stdout(&out)
    );
    let out = as_user(&ana, &["memory", "show", &id, "--json"]);
    let shown: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(
        (shown["status"].as_str(), shown["score"].as_i64()),
        (Some("mandatory"), Some(1))
    );
    let out = as_user(&ana, &["memory", "add", "x", "--domain", "astrology"]);
    assert_ne!(code(&out), 0);
    assert!(stderr(&out).contains("domain"), "{}", stderr(&out));
}
