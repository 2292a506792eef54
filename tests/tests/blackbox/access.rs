//! Users, groups, memberships and grants over the admin API.

use serde_json::json;

use crate::support::{backends, Server};

#[test]
fn non_admins_get_403_on_every_admin_endpoint() {
    let s = Server::start();
    let user = s.user_token("dee@example.com", false);
    for path in [
        "/api/admin/users",
        "/api/admin/groups",
        "/api/admin/grants",
        "/api/admin/registry",
    ] {
        let (status, body) = s.get_json(path, &user);
        assert_eq!(
            (status, body["detail"].as_str()),
            (403, Some("Admin access required")),
            "{path}"
        );
    }
    let (status, _) = s.post_json(
        "/api/admin/register-table",
        &user,
        &json!({"id": "t", "source_type": "local"}),
    );
    assert_eq!(status, 403);
    let (status, me) = s.get_json("/api/me", &user);
    assert_eq!((status, me["is_admin"].as_bool()), (200, Some(false)));
}

#[test]
fn user_administration_and_last_admin_protection() {
    for backend in backends() {
        let s = Server::start_with(backend, &[]);
        let admin = s.admin_token();
        let (_, me) = s.get_json("/api/me", &admin);
        let admin_id = me["id"].as_str().unwrap().to_string();

        let (status, u) = s.post_json(
            "/api/admin/users",
            &admin,
            &json!({"email": "eve@example.com", "name": "Eve", "password": "long-enough"}),
        );
        assert_eq!(status, 201, "{u}");
        assert_eq!(
            (u["has_password"].as_bool(), u["is_admin"].as_bool()),
            (Some(true), Some(false))
        );
        let eve = u["id"].as_str().unwrap().to_string();
        let (status, _) = s.post_json(
            "/api/admin/users",
            &admin,
            &json!({"email": "eve@example.com"}),
        );
        assert_eq!(status, 409);
        let (status, _) = s.post_json(
            "/api/admin/users",
            &admin,
            &json!({"email": "x@example.com", "password": "short"}),
        );
        assert_eq!(status, 422);

        let (status, u) = s.patch_json(
            &format!("/api/admin/users/{eve}"),
            &admin,
            &json!({"name": "Eve B."}),
        );
        assert_eq!((status, u["name"].as_str()), (200, Some("Eve B.")));
        let updates = s.audit_rows("user.update", 1);
        assert!(updates[0]["params_before"]
            .as_str()
            .unwrap()
            .contains("\"Eve\""));

        // The only admin cannot deactivate or delete themselves, nor leave the Admin group.
        let (status, body) = s.post_json(
            &format!("/api/admin/users/{admin_id}/deactivate"),
            &admin,
            &json!({}),
        );
        assert_eq!(
            (status, body["detail"].as_str()),
            (409, Some("Cannot deactivate yourself"))
        );
        let (status, _) = s.delete(&format!("/api/admin/users/{admin_id}"), &admin);
        assert_eq!(status, 409);
        let (_, groups) = s.get_json("/api/admin/groups", &admin);
        let admin_group = groups
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["name"] == "Admin")
            .unwrap()["id"]
            .as_str()
            .unwrap()
            .to_string();
        let (status, body) = s.delete(
            &format!("/api/admin/groups/{admin_group}/members/{admin_id}"),
            &admin,
        );
        assert_eq!(status, 409, "{body}");
        assert!(body["detail"].as_str().unwrap().contains("last admin"));

        // With a second admin, the first may leave; then the second is the last one.
        let (status, _) = s.post_json(
            &format!("/api/admin/groups/{admin_group}/members"),
            &admin,
            &json!({"email": "eve@example.com"}),
        );
        assert_eq!(status, 201);
        let eve_token = s.cli_ok(&["tokens", "create", "--email", "eve@example.com"]);
        let (status, body) = s.delete(
            &format!("/api/admin/groups/{admin_group}/members/{admin_id}"),
            &eve_token,
        );
        assert_eq!(status, 204, "{body}; server log: {}", s.log());
        let (status, _) = s.get_json("/api/admin/users", &admin);
        assert_eq!(status, 403, "admin rights are read per request");
        let (status, _) = s.delete(
            &format!("/api/admin/groups/{admin_group}/members/{eve}"),
            &eve_token,
        );
        assert_eq!(status, 409);
    }
}

#[test]
fn groups_memberships_and_grants() {
    for backend in backends() {
        let s = Server::start_with(backend, &[]);
        let admin = s.admin_token();
        let (status, g) = s.post_json(
            "/api/admin/groups",
            &admin,
            &json!({"name": "finance", "description": "Money people"}),
        );
        assert_eq!(status, 201, "{g}");
        let gid = g["id"].as_str().unwrap().to_string();
        assert_eq!(
            s.post_json("/api/admin/groups", &admin, &json!({"name": "finance"}))
                .0,
            409
        );
        assert_eq!(
            s.post_json("/api/admin/groups", &admin, &json!({"name": ""}))
                .0,
            422
        );

        s.cli_ok(&["users", "create", "--email", "fay@example.com"]);
        let (status, m) = s.post_json(
            &format!("/api/admin/groups/{gid}/members"),
            &admin,
            &json!({"email": "fay@example.com"}),
        );
        assert_eq!((status, m["source"].as_str()), (201, Some("admin")));
        assert_eq!(
            s.post_json(
                &format!("/api/admin/groups/{gid}/members"),
                &admin,
                &json!({"email": "fay@example.com"})
            )
            .0,
            409
        );
        assert_eq!(
            s.post_json(
                &format!("/api/admin/groups/{gid}/members"),
                &admin,
                &json!({"email": "nobody@example.com"})
            )
            .0,
            404
        );

        let (status, grant) = s.post_json(
            "/api/admin/grants",
            &admin,
            &json!({"group_id": gid, "resource_type": "table", "resource_id": "orders"}),
        );
        assert_eq!(status, 201, "{grant}");
        assert_eq!(grant["group_name"], "finance");
        assert_eq!(
            s.post_json(
                "/api/admin/grants",
                &admin,
                &json!({"group_id": gid, "resource_id": "orders"})
            )
            .0,
            409
        );
        assert_eq!(
            s.post_json(
                "/api/admin/grants",
                &admin,
                &json!({"group_id": gid, "resource_type": "plugin", "resource_id": "x"})
            )
            .0,
            422
        );
        assert_eq!(
            s.post_json(
                "/api/admin/grants",
                &admin,
                &json!({"group_id": "missing", "resource_id": "x"})
            )
            .0,
            404
        );
        let (_, list) = s.get_json(&format!("/api/admin/grants?group_id={gid}"), &admin);
        assert_eq!(list.as_array().unwrap().len(), 1);

        let (_, g) = s.get_json(&format!("/api/admin/groups/{gid}"), &admin);
        assert_eq!(
            (g["member_count"].as_i64(), g["grant_count"].as_i64()),
            (Some(1), Some(1))
        );
        let (status, g) = s.patch_json(
            &format!("/api/admin/groups/{gid}"),
            &admin,
            &json!({"description": null}),
        );
        assert_eq!((status, g["description"].is_null()), (200, true));

        // System groups keep their names and cannot be deleted.
        let (_, groups) = s.get_json("/api/admin/groups", &admin);
        let everyone = groups
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["name"] == "Everyone")
            .unwrap()["id"]
            .as_str()
            .unwrap()
            .to_string();
        assert_eq!(
            s.patch_json(
                &format!("/api/admin/groups/{everyone}"),
                &admin,
                &json!({"name": "All"})
            )
            .0,
            409
        );
        assert_eq!(
            s.delete(&format!("/api/admin/groups/{everyone}"), &admin).0,
            409
        );

        let gr = grant["id"].as_str().unwrap();
        assert_eq!(s.delete(&format!("/api/admin/grants/{gr}"), &admin).0, 204);
        assert_eq!(s.delete(&format!("/api/admin/grants/{gr}"), &admin).0, 404);
        let deleted = s.audit_rows("resource_grant.deleted", 1);
        assert!(deleted[0]["params_before"]
            .as_str()
            .unwrap()
            .contains("orders"));

        assert_eq!(s.delete(&format!("/api/admin/groups/{gid}"), &admin).0, 204);
        assert_eq!(
            s.get_json(&format!("/api/admin/groups/{gid}"), &admin).0,
            404
        );
        let left = s.query(&format!(
            "SELECT COUNT(*) AS n FROM user_group_members WHERE group_id = '{gid}'"
        ));
        assert_eq!(left[0]["n"], 0, "memberships go with the group");
    }
}
