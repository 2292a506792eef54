//! `svc-server` shell commands, used while a server runs on the same store.

use crate::support::{backends, Server};

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
        let (_, me) = s.get_json("/api/me", &token);
        assert!(me["groups"].as_array().unwrap().is_empty());

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
