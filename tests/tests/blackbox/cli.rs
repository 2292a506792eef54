//! `svc-server` shell commands, used while a server runs on the same store.

use serde_json::json;

use crate::support::{backends, server_bin, Server, TempDir};

#[test]
fn shell_commands_set_up_access_while_the_server_runs() {
    for backend in backends() {
        let s = Server::start_with(backend, &[]);
        let id = s.cli_ok(&[
            "users",
            "create",
            "--email",
            "gus@example.com",
            "--name",
            "Gus",
        ]);
        assert_eq!(id.len(), 36);
        s.cli_ok(&[
            "groups",
            "add-member",
            "--group",
            "analysts",
            "--email",
            "gus@example.com",
        ]);
        s.cli_ok(&["grants", "add", "--group", "analysts", "--table", "orders"]);
        let token = s.cli_ok(&[
            "tokens",
            "create",
            "--email",
            "gus@example.com",
            "--name",
            "ci",
            "--days",
            "7",
        ]);

        let (status, me) = s.get_json("/api/me", &token);
        assert_eq!(status, 200);
        let groups: Vec<&str> = me["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["name"].as_str().unwrap())
            .collect();
        assert_eq!(groups, ["analysts"]);
        let (_, grants) = s.get_json("/api/admin/grants", &s.admin_token());
        assert_eq!(grants[0]["resource_id"], "orders");
        assert_eq!(grants[0]["group_name"], "analysts");

        let list = s.cli_ok(&["users", "list"]);
        assert!(list.contains("gus@example.com") && list.contains("admin@localhost"));
        s.cli_ok(&[
            "grants", "remove", "--group", "analysts", "--table", "orders",
        ]);
        s.cli_ok(&[
            "groups",
            "remove-member",
            "--group",
            "analysts",
            "--email",
            "gus@example.com",
        ]);
        // Made by another process: seen within the identity bound of 2 s.
        let removed = std::time::Instant::now();
        while !s.get_json("/api/me", &token).1["groups"]
            .as_array()
            .unwrap()
            .is_empty()
        {
            assert!(
                removed.elapsed() < std::time::Duration::from_secs(4),
                "membership still listed 4 s after its removal (bound: 2 s)"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }

        // Console changes are audited as such.
        let rows = s.audit_rows("resource_grant.created", 1);
        assert_eq!(rows[0]["client_kind"], "console");
        // Errors are one line on stderr and a failing exit code.
        let out = s.cli(&["tokens", "create", "--email", "nobody@example.com"], None);
        assert!(!out.status.success());
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("no user with e-mail nobody@example.com")
        );
        assert!(out.stdout.is_empty());
    }
}

/// The first admin gets a password from the shell and logs in with it; each shell invocation
/// audits under its own correlation id; shell commands never create a store.
#[test]
fn set_password_opens_login_and_shell_commands_need_an_existing_store() {
    let s = Server::start();
    let set = |password: &str| {
        s.cli(
            &[
                "users",
                "set-password",
                "--email",
                "admin@localhost",
                "--password-stdin",
            ],
            Some(password),
        )
    };
    let out = set("a-long-passphrase\n");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let login = |password: &str| {
        s.send(
            s.http
                .post(s.url("/auth/token"))
                .json(&json!({"email": "admin@localhost", "password": password})),
        )
    };
    let (status, body) = login("a-long-passphrase");
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["is_admin"], true);
    let (status, me) = s.get_json("/api/me", body["access_token"].as_str().unwrap());
    assert_eq!(
        (status, me["email"].as_str()),
        (200, Some("admin@localhost"))
    );

    let out = set("short\n");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("at least"));
    assert_eq!(
        login("a-long-passphrase").0,
        200,
        "a refused change keeps the old one"
    );
    let out = s.cli(
        &["users", "set-password", "--email", "admin@localhost"],
        Some("a-long-passphrase\n"),
    );
    assert!(
        !out.status.success(),
        "the password never comes from the command line"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("--password-stdin"));

    assert!(set("another-long-passphrase\n").status.success());
    let rows = s.audit_rows("user.set_password", 2);
    let ids: Vec<&str> = rows
        .iter()
        .map(|r| r["correlation_id"].as_str().expect("a correlation id"))
        .collect();
    assert!(ids.iter().all(|id| id.starts_with("console-")), "{ids:?}");
    assert_ne!(ids[0], ids[1], "one id per invocation");

    // From a directory with no store: refused, and nothing is created there.
    let empty = TempDir::new();
    let out = std::process::Command::new(server_bin())
        .env_remove("SVC_DATABASE_URL")
        .env_remove("SVC_DATA_DIR")
        .current_dir(&empty.0)
        .args(["tokens", "create", "--email", "admin@localhost"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no svc store at") && err.contains("--data-dir"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
    assert_eq!(
        std::fs::read_dir(&empty.0).unwrap().count(),
        0,
        "nothing created"
    );
}
