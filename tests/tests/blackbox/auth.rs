//! Authentication: first admin, PATs, sessions, failures, rate limiting, client kinds.

use serde_json::{json, Value};

use crate::support::{backends, Server};

#[test]
fn first_start_creates_an_admin_whose_console_token_works() {
    for backend in backends() {
        let s = Server::start_with(backend, &[]);
        assert!(
            s.log()
                .contains("svc-server tokens create --email admin@localhost"),
            "{}",
            s.log()
        );
        let token = s.admin_token();
        assert!(
            !token.contains('\n') && token.starts_with("eyJ"),
            "stdout holds only the token"
        );
        let (status, me) = s.get_json("/api/me", &token);
        assert_eq!(status, 200);
        assert_eq!(me["email"], "admin@localhost");
        assert_eq!(me["is_admin"], true);
        assert_eq!(me["token_type"], "pat");
        assert_eq!(me["groups"][0]["name"], "Admin");
        // The seeded admin has no password: nobody can log in with a guess.
        let (status, _) = s.send(
            s.http
                .post(s.url("/auth/token"))
                .json(&json!({"email": "admin@localhost", "password": ""})),
        );
        assert_eq!(status, 401);
    }
}

#[test]
fn missing_malformed_and_foreign_tokens_are_401_in_the_envelope() {
    let s = Server::start();
    let (status, body) = s.send(s.http.get(s.url("/api/me")));
    assert_eq!(status, 401);
    assert_eq!(body["detail"], "Missing or invalid Authorization header");
    for bad in ["garbage", "eyJhbGciOiJIUzI1NiJ9.e30.x", ""] {
        let (status, body) = s.get_json("/api/me", bad);
        assert_eq!(status, 401, "{bad}");
        assert!(body["detail"].is_string(), "{body}");
    }
    // Unknown routes and methods answer in the same envelope.
    let (status, body) = s.get_json("/api/nope", "x");
    assert_eq!((status, body["detail"].as_str()), (404, Some("Not found")));
    let (status, body) = s.send(s.http.patch(s.url("/api/health")));
    assert_eq!(status, 405);
    assert!(body["detail"].is_string(), "{body}");
    // A token signed by another server (another secret) is refused.
    let other = Server::start();
    let (status, body) = s.get_json("/api/me", &other.admin_token());
    assert_eq!(
        (status, body["detail"].as_str()),
        (401, Some("Invalid or expired token"))
    );
}

#[test]
fn password_login_issues_a_session_and_failures_are_rate_limited() {
    let s = Server::start();
    let out = s.cli(
        &[
            "users",
            "create",
            "--email",
            "ana@example.com",
            "--name",
            "Ana",
            "--password-stdin",
        ],
        Some("s3cret-pass\n"),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let (status, body) = s.send(
        s.http
            .post(s.url("/auth/token"))
            .json(&json!({"email": "ana@example.com", "password": "s3cret-pass"})),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["token_type"], "bearer");
    assert_eq!(body["is_admin"], false);
    let session = body["access_token"].as_str().unwrap().to_string();
    let (status, me) = s.get_json("/api/me", &session);
    assert_eq!((status, me["token_type"].as_str()), (200, Some("session")));

    // Wrong password and unknown user look the same.
    let (s1, b1) = s.send(
        s.http
            .post(s.url("/auth/token"))
            .json(&json!({"email": "ana@example.com", "password": "nope"})),
    );
    let (s2, b2) = s.send(
        s.http
            .post(s.url("/auth/token"))
            .json(&json!({"email": "who@example.com", "password": "nope"})),
    );
    assert_eq!((s1, s2), (401, 401));
    assert_eq!(b1, b2);
    // Ten failures a minute per address, then 429 with Retry-After — even for a right password.
    for _ in 0..8 {
        s.send(
            s.http
                .post(s.url("/auth/token"))
                .json(&json!({"email": "ana@example.com", "password": "nope"})),
        );
    }
    let r = s
        .http
        .post(s.url("/auth/token"))
        .json(&json!({"email": "ana@example.com", "password": "s3cret-pass"}))
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 429);
    assert!(r.headers().get("retry-after").is_some());
    let failed = s.audit_rows("auth.login", 11);
    assert!(failed.iter().filter(|r| r["result"] == "error.401").count() >= 10);
}

/// Creates `email` with a password and logs in: their session token.
fn password_session(s: &Server, email: &str) -> String {
    let out = s.cli(
        &["users", "create", "--email", email, "--password-stdin"],
        Some("another-pass"),
    );
    assert!(out.status.success());
    let (_, login) = s.send(
        s.http
            .post(s.url("/auth/token"))
            .json(&json!({"email": email, "password": "another-pass"})),
    );
    login["access_token"].as_str().unwrap().to_string()
}

#[test]
fn personal_access_tokens_lifecycle() {
    let s = Server::start();
    let session = password_session(&s, "bo@example.com");

    let (status, created) = s.post_json(
        "/api/tokens",
        &session,
        &json!({"name": "laptop", "expires_in_days": 30}),
    );
    assert_eq!(status, 201, "{created}");
    let pat = created["token"].as_str().unwrap().to_string();
    let id = created["id"].as_str().unwrap().to_string();
    assert_eq!(created["prefix"].as_str().unwrap().len(), 8);
    assert!(created["expires_at"].is_string());

    let (status, me) = s.get_json("/api/me", &pat);
    assert_eq!((status, me["token_type"].as_str()), (200, Some("pat")));
    // Only a hash is stored, never the token.
    let stored = s.query(&format!(
        "SELECT token_hash FROM personal_access_tokens WHERE id = '{id}'"
    ));
    assert_ne!(stored[0]["token_hash"], json!(pat));
    assert_eq!(stored[0]["token_hash"].as_str().unwrap().len(), 64);

    // Its use is recorded (off the request path, at most once a minute).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let used = s.query(&format!(
            "SELECT last_used_at, last_used_ip FROM personal_access_tokens WHERE id = '{id}'"
        ));
        if used[0]["last_used_at"].is_string() {
            assert_eq!(used[0]["last_used_ip"], "127.0.0.1");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "last_used_at never set"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }

    // A PAT cannot mint PATs.
    let (status, _) = s.post_json("/api/tokens", &pat, &json!({"name": "more"}));
    assert_eq!(status, 403);
    // Listing never shows the token.
    let (status, list) = s.get_json("/api/tokens", &pat);
    assert_eq!(status, 200);
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert!(list[0].get("token").is_none());
    // Out-of-range lifetime is a validation error.
    let (status, _) = s.post_json(
        "/api/tokens",
        &session,
        &json!({"name": "x", "expires_in_days": 4000}),
    );
    assert_eq!(status, 422);

    // Use is recorded; audit rows of PAT calls say client_kind=cli, session calls api.
    let (status, _) = s.delete(&format!("/api/tokens/{id}"), &pat);
    assert_eq!(status, 204);
    let (status, body) = s.get_json("/api/me", &pat);
    assert_eq!(
        (status, body["detail"].as_str()),
        (401, Some("Token revoked"))
    );
    let revoke = s.audit_rows("token.revoke", 1);
    assert_eq!(revoke[0]["client_kind"], "cli");
    let create = s.audit_rows("token.create", 1);
    assert_eq!(create[0]["client_kind"], "api");
    // Another user's token id is not found, not revealed.
    let (status, _) = s.delete(&format!("/api/tokens/{id}"), &s.admin_token());
    assert_eq!(status, 404);
}

#[test]
fn administrators_list_and_revoke_any_users_tokens() {
    let s = Server::start();
    let session = password_session(&s, "bo@example.com");
    let mut tokens = Vec::new();
    for name in ["laptop", "ci"] {
        let (status, t) = s.post_json("/api/tokens", &session, &json!({"name": name}));
        assert_eq!(status, 201, "{t}");
        tokens.push((
            t["id"].as_str().unwrap().to_owned(),
            t["token"].as_str().unwrap().to_owned(),
        ));
    }
    let admin = s.admin_token();

    let (status, page) = s.get_json("/api/admin/tokens?user=bo@example.com", &admin);
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["total"], 2);
    let listed: Vec<&str> = page["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(listed, ["ci", "laptop"], "newest first");
    let first = &page["tokens"][0];
    assert_eq!(first["user_email"], "bo@example.com");
    assert!(first["user_id"].is_string());
    assert!(first.get("token").is_none() && first.get("token_hash").is_none());
    // Paged, with the next offset; bounds refused in the envelope.
    let (_, one) = s.get_json("/api/admin/tokens?user=bo@example.com&limit=1", &admin);
    assert_eq!(
        (one["tokens"].as_array().unwrap().len(), &one["next_offset"]),
        (1, &json!(1))
    );
    let (_, last) = s.get_json(
        "/api/admin/tokens?user=bo@example.com&limit=1&offset=1",
        &admin,
    );
    assert_eq!(last["next_offset"], Value::Null);
    let (status, bad) = s.get_json("/api/admin/tokens?limit=0", &admin);
    assert_eq!(status, 422, "{bad}");
    assert!(bad["detail"].as_str().unwrap().contains("limit"), "{bad}");
    // Every owner without the filter; never for a non-admin.
    let (_, all) = s.get_json("/api/admin/tokens", &admin);
    assert!(all["total"].as_i64().unwrap() >= 2, "{all}");
    assert_eq!(s.get_json("/api/admin/tokens", &session).0, 403);
    assert_eq!(
        s.delete(&format!("/api/admin/tokens/{}", tokens[0].0), &session)
            .0,
        403
    );

    // Revoked by an administrator: the token stops at once, the audit row names the owner.
    let (laptop_id, laptop) = &tokens[0];
    let (status, _) = s.delete(&format!("/api/admin/tokens/{laptop_id}"), &admin);
    assert_eq!(status, 204);
    let (status, body) = s.get_json("/api/me", laptop);
    assert_eq!(
        (status, body["detail"].as_str()),
        (401, Some("Token revoked"))
    );
    assert_eq!(
        s.get_json("/api/me", &tokens[1].1).0,
        200,
        "the other token still works"
    );
    let rows = s.audit_rows("token.admin_revoke", 1);
    assert_eq!(rows.len(), 1);
    let params: Value = serde_json::from_str(rows[0]["params"].as_str().unwrap()).unwrap();
    let bo_id = page["tokens"][0]["user_id"].clone();
    assert_eq!(params["owner_id"], bo_id);
    assert_eq!(rows[0]["resource"], format!("token:{laptop_id}"));
    // Again: nothing changes and nothing more is audited; an unknown id is 404.
    assert_eq!(
        s.delete(&format!("/api/admin/tokens/{laptop_id}"), &admin)
            .0,
        204
    );
    assert_eq!(s.delete("/api/admin/tokens/no-such-token", &admin).0, 404);
    let (_, after) = s.get_json("/api/admin/tokens?user=bo@example.com", &admin);
    assert!(after["tokens"][1]["revoked_at"].is_string(), "{after}");
    // The next revocation is the second row, so the repeated one wrote none.
    assert_eq!(
        s.delete(&format!("/api/admin/tokens/{}", tokens[1].0), &admin)
            .0,
        204
    );
    let rows = s.audit_rows("token.admin_revoke", 2);
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[1]["resource"], format!("token:{}", tokens[1].0));
}

#[test]
fn deactivated_and_deleted_users_lose_access_at_once() {
    let s = Server::start();
    let admin = s.admin_token();
    let token = s.user_token("cy@example.com", false);
    let (_, users) = s.get_json("/api/admin/users", &admin);
    let cy = users
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["email"] == "cy@example.com")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();

    let (status, _) = s.post_json(
        &format!("/api/admin/users/{cy}/deactivate"),
        &admin,
        &json!({}),
    );
    assert_eq!(status, 200);
    let (status, body) = s.get_json("/api/me", &token);
    assert_eq!(
        (status, body["detail"].as_str()),
        (401, Some("Account deactivated"))
    );
    let (status, _) = s.post_json(
        &format!("/api/admin/users/{cy}/activate"),
        &admin,
        &json!({}),
    );
    assert_eq!(status, 200);
    assert_eq!(s.get_json("/api/me", &token).0, 200);

    let (status, _) = s.delete(&format!("/api/admin/users/{cy}"), &admin);
    assert_eq!(status, 204);
    let (status, body) = s.get_json("/api/me", &token);
    assert_eq!(
        (status, body["detail"].as_str()),
        (401, Some("User not found"))
    );
    let deleted = s.audit_rows("user.delete", 1);
    assert!(deleted[0]["params_before"]
        .as_str()
        .unwrap()
        .contains("cy@example.com"));
}

#[test]
fn request_ids_are_echoed_and_become_correlation_ids() {
    let s = Server::start();
    let admin = s.admin_token();
    let r = s
        .http
        .post(s.url("/api/admin/groups"))
        .bearer_auth(&admin)
        .header("x-request-id", "trace-42_a")
        .json(&json!({"name": "analysts"}))
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 201);
    assert_eq!(r.headers()["x-request-id"], "trace-42_a");
    assert!(r.headers().get("x-svc-version").is_some());
    assert!(r.headers().get("x-min-compat-cli-version").is_some());
    let rows = s.audit_rows("user_group.created", 1);
    assert_eq!(rows[0]["correlation_id"], "trace-42_a");
    assert_eq!(rows[0]["client_ip"], "127.0.0.1");
    // An unsafe id is replaced, not echoed.
    let r = s
        .http
        .get(s.url("/api/health"))
        .header("x-request-id", "bad id<script>")
        .send()
        .unwrap();
    let echoed = r.headers()["x-request-id"].to_str().unwrap().to_string();
    assert!(!echoed.contains('<') && !echoed.is_empty());
}

#[test]
fn shutdown_flushes_the_audit_queue() {
    let mut s = Server::start();
    let admin = s.admin_token();
    for i in 0..50 {
        let (status, _) = s.post_json(
            "/api/admin/groups",
            &admin,
            &json!({"name": format!("g{i}")}),
        );
        assert_eq!(status, 201);
    }
    assert!(s.stop(), "clean exit on SIGTERM: {}", s.log());
    let n = s.query("SELECT COUNT(*) AS n FROM audit_log WHERE action = 'user_group.created'");
    assert_eq!(n[0]["n"], 50);
}

#[test]
fn changes_from_another_process_apply_within_the_identity_cache_bound() {
    let s = Server::start();
    let token = s.user_token("dee@example.com", false);
    // Warm the server's identity cache with the non-admin identity.
    assert_eq!(s.get_json("/api/admin/users", &token).0, 403);
    // A shell command writes the store directly; the running server was not told.
    s.cli_ok(&[
        "groups",
        "add-member",
        "--group",
        "Admin",
        "--email",
        "dee@example.com",
    ]);
    let changed = std::time::Instant::now();
    while s.get_json("/api/admin/users", &token).0 != 200 {
        assert!(
            changed.elapsed() < std::time::Duration::from_secs(4),
            "still not admin 4 s after the change (bound: 2 s)"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}
