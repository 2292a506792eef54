//! Authentication: first admin, PATs, sessions, failures, rate limiting, client kinds.

use serde_json::json;

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

#[test]
fn personal_access_tokens_lifecycle() {
    let s = Server::start();
    let out = s.cli(
        &[
            "users",
            "create",
            "--email",
            "bo@example.com",
            "--password-stdin",
        ],
        Some("another-pass"),
    );
    assert!(out.status.success());
    let (_, login) = s.send(
        s.http
            .post(s.url("/auth/token"))
            .json(&json!({"email": "bo@example.com", "password": "another-pass"})),
    );
    let session = login["access_token"].as_str().unwrap().to_string();

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
