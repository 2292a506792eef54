//! Corporate memory review at scale through the real server on both backends: the tree on
//! every axis with visibility, batch decisions and bulk updates that report what they could
//! not do, duplicates found on contribution, contradictions filed and settled (keeping one
//! side retires the other), each audited; and the admin CLI over the same endpoints.

use serde_json::{json, Value};

use crate::support::{backends, Server};

fn create(s: &Server, token: &str, body: Value) -> String {
    let (status, item) = s.post_json("/api/memory", token, &body);
    assert_eq!(status, 201, "{item}");
    item["id"].as_str().unwrap().to_owned()
}

fn item(s: &Server, token: &str, id: &str) -> Value {
    let (status, item) = s.get_json(&format!("/api/memory/{id}"), token);
    assert_eq!(status, 200, "{item}");
    item
}

/// `[(key, count)]` of a tree page.
fn groups(tree: &Value) -> Vec<(Option<String>, i64)> {
    tree["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["key"].as_str().map(str::to_owned),
                g["count"].as_i64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn tree_batch_bulk_duplicates_and_contradictions() {
    for backend in backends() {
        let s = Server::start_with(backend, &[]);
        let admin = s.admin_token();
        let ana = s.user_token("ana@example.com", false);
        let bo = s.user_token("bo@example.com", false);

        let a = create(
            &s,
            &ana,
            json!({"title": "Revenue is net of refunds", "domain": "finance", "tags": ["kpi", "revenue"]}),
        );
        let b = create(
            &s,
            &ana,
            json!({"title": "Deploy on Tuesdays", "domain": "engineering", "tags": ["deploy"]}),
        );
        let c = create(
            &s,
            &bo,
            json!({"title": "Churn counts paused accounts", "domain": "finance", "tags": ["kpi"]}),
        );
        let d = create(&s, &bo, json!({"title": "No tags here"}));
        let private = create(
            &s,
            &ana,
            json!({"title": "ana's own", "domain": "finance", "tags": ["kpi"]}),
        );
        let (status, _) = s.post_json(
            &format!("/api/memory/{private}/personal"),
            &ana,
            &json!({"is_personal": true}),
        );
        assert_eq!(status, 200);

        let (status, e) = s.post_json(&format!("/api/memory/{a}/vote"), &bo, &json!({"vote": 2}));
        assert_eq!(status, 422, "a vote of 2: {e}");

        // The tree: counts per axis value, the null group last, personal items only for admins.
        let (status, t) = s.get_json("/api/memory/tree?axis=domain", &bo);
        assert_eq!(status, 200, "{t}");
        assert_eq!(
            groups(&t),
            [
                (Some("finance".into()), 2),
                (Some("engineering".into()), 1),
                (None, 1)
            ]
        );
        assert_eq!(
            (t["total_groups"].as_i64(), t["total_items"].as_i64()),
            (Some(3), Some(4))
        );
        let (_, t) = s.get_json("/api/memory/tree?axis=domain", &admin);
        assert_eq!(groups(&t)[0], (Some("finance".into()), 3), "{t}");
        let (_, t) = s.get_json("/api/memory/tree?axis=tag&per_page=2", &bo);
        assert_eq!(
            groups(&t),
            [(Some("kpi".into()), 2), (Some("deploy".into()), 1)],
            "an item is in every tag's group; pages are over groups: {t}"
        );
        assert_eq!(
            t["total_groups"], 4,
            "kpi, deploy, revenue and untagged: {t}"
        );
        assert_eq!(
            t["total_items"], 4,
            "each item once, however many tags: {t}"
        );
        let ids = |group: &Value| -> Vec<String> {
            group["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i["id"].as_str().unwrap().to_owned())
                .collect()
        };
        assert_eq!(
            ids(&t["groups"][0]),
            [c.as_str(), a.as_str()],
            "newest first: {t}"
        );
        assert_eq!(ids(&t["groups"][1]), [b.as_str()], "{t}");
        // Administrators see the personal item; a text filter reads the items, not tag rows.
        let (_, t) = s.get_json("/api/memory/tree?axis=tag", &admin);
        assert_eq!(groups(&t)[0], (Some("kpi".into()), 3), "{t}");
        assert_eq!(
            ids(&t["groups"][0]),
            [private.as_str(), c.as_str(), a.as_str()],
            "{t}"
        );
        assert_eq!(t["total_items"], 5, "{t}");
        let (_, t) = s.get_json("/api/memory/tree?axis=tag&q=Revenue", &bo);
        assert_eq!(
            groups(&t),
            [(Some("kpi".into()), 1), (Some("revenue".into()), 1)],
            "{t}"
        );
        assert_eq!(t["total_items"], 1, "{t}");
        assert_eq!(ids(&t["groups"][1]), [a.as_str()], "{t}");
        let (_, t) = s.get_json(
            "/api/memory/tree?axis=tag&page=2&per_page=2&items_per_group=1",
            &bo,
        );
        assert_eq!(groups(&t), [(Some("revenue".into()), 1), (None, 1)], "{t}");
        assert_eq!(t["groups"][1]["items"][0]["id"], d.as_str());
        // Tag groups follow their items' changes: made personal, `a` leaves bo's tree.
        let personal = |on: bool| {
            let (status, e) = s.post_json(
                &format!("/api/memory/{a}/personal"),
                &ana,
                &json!({"is_personal": on}),
            );
            assert_eq!(status, 200, "{e}");
        };
        personal(true);
        let (_, t) = s.get_json("/api/memory/tree?axis=tag", &bo);
        assert_eq!(
            groups(&t),
            [
                (Some("deploy".into()), 1),
                (Some("kpi".into()), 1),
                (None, 1)
            ],
            "{t}"
        );
        personal(false);
        let (status, e) = s.get_json("/api/memory/tree?axis=colour", &bo);
        assert_eq!(status, 422, "{e}");
        assert!(
            e.to_string().contains("domain, category, tag or audience"),
            "{e}"
        );

        // Batch: applied where legal, the rest reported by id.
        let (status, out) = s.post_json(
            "/api/memory/admin/batch",
            &admin,
            &json!({"item_ids": [a, b, "nope"], "action": "approve", "reason": "reviewed"}),
        );
        assert_eq!(status, 200, "{out}");
        assert_eq!(out["success"].as_array().unwrap().len(), 2, "{out}");
        assert_eq!(out["not_found"], json!(["nope"]));
        let (_, t) = s.get_json("/api/memory/tree?axis=tag&status_filter=approved", &bo);
        assert_eq!(
            groups(&t),
            [
                (Some("deploy".into()), 1),
                (Some("kpi".into()), 1),
                (Some("revenue".into()), 1)
            ],
            "the approved items' tags only: {t}"
        );
        let (_, _) = s.post_json(
            &format!("/api/memory/admin/reject?item_id={c}"),
            &admin,
            &json!({}),
        );
        let (status, out) = s.post_json(
            "/api/memory/admin/batch",
            &admin,
            &json!({"item_ids": [a, c], "action": "revoke"}),
        );
        assert_eq!(status, 200, "{out}");
        assert_eq!(
            out["errors"].as_array().unwrap().len(),
            2,
            "approved and rejected cannot be revoked: {out}"
        );
        assert_eq!(out["errors"][0]["status"], 409);
        assert!(
            out["errors"][0]["error"]
                .as_str()
                .unwrap()
                .contains("may become"),
            "{out}"
        );
        assert_eq!(s.audit_rows("corporate_memory.approve", 2).len(), 2);
        let (status, e) = s.post_json(
            "/api/memory/admin/batch",
            &admin,
            &json!({"item_ids": [a], "action": "bless"}),
        );
        assert_eq!(status, 422, "{e}");
        assert_eq!(
            s.post_json(
                "/api/memory/admin/batch",
                &ana,
                &json!({"item_ids": [a], "action": "approve"})
            )
            .0,
            403
        );

        // Bulk update: tags added and removed per item, unknown keys refused.
        let (status, out) = s.post_json(
            "/api/memory/admin/bulk-update",
            &admin,
            &json!({"item_ids": [a, c, "gone"], "updates": {"tags_add": ["audited"], "tags_remove": ["kpi"], "category": "metrics"}}),
        );
        assert_eq!(status, 200, "{out}");
        assert_eq!(out["updated"].as_array().unwrap().len(), 2, "{out}");
        assert_eq!(out["not_found"], json!(["gone"]));
        let got = item(&s, &admin, &a);
        assert_eq!(got["tags"], json!(["revenue", "audited"]));
        assert_eq!(got["category"], "metrics");
        assert_eq!(s.audit_rows("corporate_memory.bulk_update", 2).len(), 2);
        let (status, e) = s.post_json(
            "/api/memory/admin/bulk-update",
            &admin,
            &json!({"item_ids": [a], "updates": {"status": "approved"}}),
        );
        assert!(status == 400 || status == 422, "{status} {e}");
        let (status, e) = s.post_json(
            "/api/memory/admin/bulk-update",
            &admin,
            &json!({"item_ids": [a], "updates": {"domain": "astrology"}}),
        );
        assert_eq!(status, 422, "{e}");

        // Duplicates: found on contribution when titles match after normalisation.
        let dup = create(&s, &bo, json!({"title": "revenue is NET of refunds!"}));
        create(&s, &bo, json!({"title": "Revenue is gross"}));
        let (status, list) = s.get_json("/api/memory/admin/duplicate-candidates", &admin);
        assert_eq!(status, 200, "{list}");
        assert_eq!(list["count"], 1, "{list}");
        let pair = &list["candidates"][0];
        let mut got = [
            pair["item_a_id"].as_str().unwrap(),
            pair["item_b_id"].as_str().unwrap(),
        ];
        got.sort();
        let mut want = [a.as_str(), dup.as_str()];
        want.sort();
        assert_eq!(got, want);
        assert_eq!(pair["score"], 1.0);
        let (_, t) = s.get_json("/api/memory/tree?axis=domain&has_duplicate=true", &admin);
        assert_eq!(t["total_items"], 2, "{t}");
        let resolve = |keep: &str, resolution: &str| {
            s.post_json(
                &format!(
                    "/api/memory/admin/duplicate-candidates/resolve?item_a_id={dup}&item_b_id={a}"
                ),
                &admin,
                &json!({"resolution": resolution, "keep": keep}),
            )
        };
        assert_eq!(resolve(&a, "same").0, 422);
        assert_eq!(resolve("elsewhere", "duplicate").0, 422);
        let (status, out) = resolve(&a, "duplicate");
        assert_eq!(status, 200, "{out}");
        assert_eq!(out["retired"]["status"], "rejected", "{out}");
        assert_eq!(item(&s, &admin, &dup)["status"], "rejected");
        assert_eq!(
            resolve(&a, "duplicate").0,
            400,
            "resolving twice is refused"
        );
        assert_eq!(
            s.audit_rows("corporate_memory.resolve_duplicate", 1).len(),
            1
        );
        let (_, list) = s.get_json(
            "/api/memory/admin/duplicate-candidates?resolved=true",
            &admin,
        );
        assert_eq!(list["candidates"][0]["resolution"], "duplicate");

        // Contradictions: filed by hand, a personal side hidden, keeping one retires the other.
        let (status, e) = s.post_json(
            "/api/memory/admin/contradictions",
            &admin,
            &json!({"item_a_id": a, "item_b_id": a}),
        );
        assert_eq!(status, 422, "{e}");
        let (status, e) = s.post_json(
            "/api/memory/admin/contradictions",
            &admin,
            &json!({"item_a_id": a, "item_b_id": "missing"}),
        );
        assert_eq!(status, 404, "{e}");
        let (status, cx) = s.post_json(
            "/api/memory/admin/contradictions",
            &admin,
            &json!({"item_a_id": b, "item_b_id": private, "explanation": "they disagree", "severity": "high"}),
        );
        assert_eq!(status, 200, "{cx}");
        let cid = cx["id"].as_str().unwrap().to_owned();
        let (_, list) = s.get_json("/api/memory/admin/contradictions", &admin);
        assert_eq!(list["count"], 1);
        assert_eq!(
            list["contradictions"][0]["item_b"],
            json!({"id": private, "hidden": true})
        );
        assert_eq!(
            list["contradictions"][0]["item_a"]["title"],
            "Deploy on Tuesdays"
        );
        let (_, list) = s.get_json(
            "/api/memory/admin/contradictions?exclude_personal=false",
            &admin,
        );
        assert_eq!(list["contradictions"][0]["item_b"]["title"], "ana's own");
        let (status, e) = s.post_json(
            &format!("/api/memory/admin/contradictions/{cid}/resolve"),
            &admin,
            &json!({"resolution": "kept_c"}),
        );
        assert_eq!(status, 422, "{e}");
        let (status, out) = s.post_json(
            &format!("/api/memory/admin/contradictions/{cid}/resolve"),
            &admin,
            &json!({"resolution": "kept_a", "reason": "policy changed"}),
        );
        assert_eq!(status, 200, "{out}");
        assert_eq!(item(&s, &admin, &private)["status"], "rejected");
        assert_eq!(item(&s, &admin, &b)["status"], "approved");
        let (status, _) = s.post_json(
            &format!("/api/memory/admin/contradictions/{cid}/resolve"),
            &admin,
            &json!({"resolution": "both_valid"}),
        );
        assert_eq!(status, 400);
        assert_eq!(
            s.post_json(
                "/api/memory/admin/contradictions/nope/resolve",
                &admin,
                &json!({"resolution": "merged"})
            )
            .0,
            404
        );
        let rows = s.audit_rows("corporate_memory.resolve_contradiction", 1);
        assert_eq!(rows[0]["resource"], b.as_str());
        assert!(rows[0]["params"].as_str().unwrap().contains("kept_a"));
        assert_eq!(s.get_json("/api/memory/admin/contradictions", &bo).0, 403);
    }
}

/// `svc admin memory batch|bulk-edit|tree|stats|duplicates|contradictions`.
#[test]
fn svc_admin_memory_review_commands() {
    use crate::support::TempDir;
    use crate::svc_cli::{code, stderr, stdout, svc};

    let s = Server::start();
    let admin = s.admin_token();
    let config = TempDir::new();
    let run = |args: &[&str]| {
        let mut all = vec!["--server", s.base.as_str(), "--token", admin.as_str()];
        all.extend_from_slice(args);
        svc(&config.0, &all)
    };
    let a = create(
        &s,
        &admin,
        json!({"title": "Quarter ends in March", "domain": "finance"}),
    );
    let b = create(
        &s,
        &admin,
        json!({"title": "quarter ends in march", "domain": "finance"}),
    );
    let ids = format!("{a},{b},missing");

    let out = run(&[
        "admin", "memory", "batch", "approve", "--ids", &ids, "--json",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let doc: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(doc["success"].as_array().unwrap().len(), 2, "{doc}");
    assert_eq!(doc["not_found"], json!(["missing"]));
    let out = run(&[
        "admin",
        "memory",
        "bulk-edit",
        "--ids",
        &format!("{a},{b}"),
        "--add-tag",
        "calendar",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stderr(&out).contains("2 done"), "{}", stderr(&out));
    let out = run(&["admin", "memory", "tree", "--axis", "tag", "--json"]);
    let tree: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(tree["groups"][0]["key"], "calendar", "{tree}");
    assert_eq!(tree["groups"][0]["count"], 2, "{tree}");
    let out = run(&["admin", "memory", "stats"]);
    assert!(stdout(&out).contains("approved 2"), "{}", stdout(&out));

    let out = run(&["admin", "memory", "duplicates", "list", "--json"]);
    let dups: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(dups["count"], 1, "{dups}");
    let out = run(&[
        "admin",
        "memory",
        "duplicates",
        "resolve",
        &a,
        &b,
        "--as",
        "duplicate",
        "--keep",
        &a,
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stderr(&out).contains("rejected"), "{}", stderr(&out));

    let out = run(&[
        "admin",
        "memory",
        "contradictions",
        "add",
        &a,
        &b,
        "--severity",
        "low",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = run(&["admin", "memory", "contradictions", "list", "--json"]);
    let list: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let cid = list["contradictions"][0]["id"].as_str().unwrap().to_owned();
    let out = run(&[
        "admin",
        "memory",
        "contradictions",
        "resolve",
        &cid,
        "--as",
        "both_valid",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let out = run(&[
        "admin",
        "memory",
        "contradictions",
        "resolve",
        &cid,
        "--as",
        "both_valid",
    ]);
    assert_ne!(code(&out), 0, "a second resolution is refused");
    assert!(
        stderr(&out).contains("already resolved"),
        "{}",
        stderr(&out)
    );
}
