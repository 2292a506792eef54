//! Migrations on both backends: fresh stores, a hand-made legacy store, and idempotence.

use std::process::Command;

use serde_json::Value;

use crate::support::{
    backends, exec_store, fresh_postgres_url, query_store, server_bin, sqlite_url, Backend, TempDir,
};

const CURRENT: i64 = 60;

fn store_url(backend: Backend, dir: &TempDir) -> String {
    match backend {
        Backend::Sqlite => sqlite_url(&dir.0.join("state/svc.db")),
        Backend::Postgres => fresh_postgres_url().unwrap(),
    }
}

fn migrate(url: &str, dir: &TempDir) {
    let out = Command::new(server_bin())
        .args([
            "--data-dir",
            dir.0.to_str().unwrap(),
            "--database-url",
            url,
            "migrate",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "migrate: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains(&format!("schema v{CURRENT}")));
}

fn is_pg(url: &str) -> bool {
    url.starts_with("postgres")
}

fn tables(url: &str) -> Vec<String> {
    let sql = if is_pg(url) {
        "SELECT table_name::text AS name FROM information_schema.tables WHERE table_schema = current_schema() ORDER BY 1"
    } else {
        "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY 1"
    };
    query_store(url, sql)
        .iter()
        .map(|r| r["name"].as_str().unwrap().to_string())
        .collect()
}

fn columns(url: &str, table: &str) -> Vec<String> {
    let sql = if is_pg(url) {
        format!("SELECT column_name::text AS name FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = '{table}' ORDER BY 1")
    } else {
        format!("SELECT name FROM pragma_table_info('{table}') ORDER BY 1")
    };
    query_store(url, &sql)
        .iter()
        .map(|r| r["name"].as_str().unwrap().to_string())
        .collect()
}

fn indices(url: &str) -> Vec<String> {
    let sql = if is_pg(url) {
        "SELECT indexname::text AS name FROM pg_indexes WHERE schemaname = current_schema() ORDER BY 1"
    } else {
        "SELECT name FROM sqlite_master WHERE type = 'index' ORDER BY 1"
    };
    query_store(url, sql)
        .iter()
        .map(|r| r["name"].as_str().unwrap().to_string())
        .collect()
}

/// Everything about the schema, for before/after comparisons.
fn schema_dump(url: &str) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = tables(url)
        .into_iter()
        .map(|t| {
            let c = columns(url, &t);
            (t, c)
        })
        .collect();
    out.push(("<indices>".into(), indices(url)));
    out.push((
        "<versions>".into(),
        query_store(url, "SELECT version FROM schema_version ORDER BY version")
            .iter()
            .map(|r| r["version"].to_string())
            .collect(),
    ));
    out
}

fn assert_current_schema(url: &str) {
    let t = tables(url);
    for expected in [
        "users",
        "user_groups",
        "user_group_members",
        "resource_grants",
        "personal_access_tokens",
        "table_registry",
        "audit_log",
        "schema_version",
        "usage_session_summary",
        "usage_file_daily",
        "session_file_state",
        "usage_event_packs",
        "usage_tool_daily",
        "usage_plugin_daily",
        "usage_attribution_skills",
        "usage_attribution_agents",
        "usage_attribution_commands",
        "user_observability_views",
        "knowledge_items",
        "knowledge_votes",
        "knowledge_item_tags",
        "knowledge_contradictions",
        "knowledge_item_relations",
        "marketplaces",
        "marketplace_plugins",
        "flea_entities",
        "marketplace_item_stats",
        "knowledge_tree_counts",
    ] {
        assert!(
            t.contains(&expected.to_string()),
            "missing table {expected} in {t:?}"
        );
    }
    let audit = columns(url, "audit_log");
    for c in [
        "params_before",
        "client_ip",
        "client_kind",
        "correlation_id",
        "duration_ms",
        "result",
    ] {
        assert!(
            audit.contains(&c.to_string()),
            "audit_log lacks {c}: {audit:?}"
        );
    }
    let idx = indices(url);
    for i in [
        "idx_audit_timestamp",
        "idx_audit_user_time",
        "idx_audit_action_time",
        "idx_obs_views_user",
        "idx_session_file_state_pack",
        "idx_usage_summary_errors_first",
        "idx_knowledge_tags_tree",
    ] {
        assert!(idx.contains(&i.to_string()), "missing index {i}: {idx:?}");
    }
    // v55 replaced it with `idx_knowledge_tags_tree`.
    assert!(
        !idx.contains(&"idx_knowledge_tags_recent".to_string()),
        "{idx:?}"
    );
    // v49: events live in per-file parquet segments, not in a store table.
    assert!(!t.contains(&"usage_events".to_string()), "{t:?}");
    let state = columns(url, "session_file_state");
    for c in ["segment", "user_id", "first_at", "last_at", "pack"] {
        assert!(
            state.contains(&c.to_string()),
            "session_file_state lacks {c}"
        );
    }
    let v = query_store(url, "SELECT MAX(version) AS v FROM schema_version");
    assert_eq!(v[0]["v"], Value::from(CURRENT));
}

#[test]
fn a_fresh_store_migrates_to_current_and_a_second_run_changes_nothing() {
    for backend in backends() {
        let dir = TempDir::new();
        let url = store_url(backend, &dir);
        migrate(&url, &dir);
        assert_current_schema(&url);
        let before = schema_dump(&url);
        migrate(&url, &dir);
        assert_eq!(
            before,
            schema_dump(&url),
            "{backend:?}: second migration changed the schema"
        );
    }
}

#[test]
fn a_hand_made_legacy_store_migrates_with_its_data_intact() {
    for backend in backends() {
        let dir = TempDir::new();
        let url = store_url(backend, &dir);
        exec_store(&url, &[
            "CREATE TABLE users (id TEXT PRIMARY KEY, email TEXT NOT NULL UNIQUE, name TEXT, role TEXT, password_hash TEXT, created_at TEXT)",
            "INSERT INTO users (id, email, name, role, created_at) VALUES ('u1', 'old@example.com', 'Old Timer', 'admin', '2024-01-01T00:00:00Z')",
            "CREATE TABLE table_registry (id TEXT PRIMARY KEY, name TEXT NOT NULL, source_type TEXT, bucket TEXT, source_table TEXT, \
             query_mode TEXT DEFAULT 'local', is_public BOOLEAN DEFAULT TRUE, description TEXT, registered_by TEXT, registered_at TEXT)",
            "INSERT INTO table_registry (id, name, source_type, query_mode, is_public, description) VALUES ('legacy_orders', 'Legacy orders', 'local', 'local', TRUE, 'from v1')",
            "CREATE TABLE dataset_permissions (user_id TEXT, dataset TEXT, access TEXT)",
            "INSERT INTO dataset_permissions VALUES ('u1', 'legacy_orders', 'read')",
            "CREATE TABLE access_requests (id TEXT PRIMARY KEY, user_id TEXT, table_id TEXT, status TEXT)",
            "CREATE TABLE audit_log (id TEXT PRIMARY KEY, timestamp TEXT NOT NULL, user_id TEXT, action TEXT NOT NULL, resource TEXT, params TEXT, result TEXT)",
            "INSERT INTO audit_log VALUES ('a1', '2024-01-02T00:00:00Z', 'u1', 'catalog.list', 'catalog', '{\"n\": 1}', 'success')",
            "CREATE TABLE user_groups (id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE)",
            "INSERT INTO user_groups (id, name) VALUES ('g-admin', 'Admin')",
            // A knowledge item as v51 kept it: v52 gives it tag rows and its duplicate key.
            "CREATE TABLE knowledge_items (id TEXT PRIMARY KEY, title TEXT NOT NULL, content TEXT, tags TEXT, status TEXT, updated_at TEXT)",
            "INSERT INTO knowledge_items (id, title, content, tags, status, updated_at) VALUES ('k1', 'Revenue, NET!', 'x', '[\"kpi\",\"finance\"]', 'approved', '2026-01-01T00:00:00.000000Z')",
        ]);
        migrate(&url, &dir);
        let tags = query_store(
            &url,
            "SELECT tag FROM knowledge_item_tags WHERE item_id = 'k1' ORDER BY tag",
        );
        assert_eq!(tags.len(), 2, "{tags:?}");
        assert_eq!(tags[0]["tag"], "finance");
        // v55: exactly one of an item's tag rows counts it in the tag tree's total.
        let counting = query_store(
            &url,
            "SELECT tag FROM knowledge_item_tags WHERE item_id = 'k1' AND counts_item = TRUE",
        );
        assert_eq!(counting.len(), 1, "{counting:?}");
        assert_eq!(counting[0]["tag"], "finance");
        let key = query_store(
            &url,
            "SELECT title_key FROM knowledge_items WHERE id = 'k1'",
        );
        assert_eq!(key[0]["title_key"], "revenue net");
        // v55: the change time in unix seconds, for the bundle's rank.
        let epoch = query_store(
            &url,
            "SELECT updated_epoch FROM knowledge_items WHERE id = 'k1'",
        );
        assert_eq!(epoch[0]["updated_epoch"], 1_767_225_600, "{epoch:?}");
        // v56: the tree's counts, computed from the rows the earlier steps left.
        let counts = query_store(
            &url,
            "SELECT axis, k, n FROM knowledge_tree_counts WHERE n <> 0 ORDER BY axis, k",
        );
        let counts: Vec<(&str, Option<&str>, i64)> = counts
            .iter()
            .map(|r| {
                (
                    r["axis"].as_str().unwrap(),
                    r["k"].as_str(),
                    r["n"].as_i64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            counts,
            [
                ("audience", None, 1),
                ("category", None, 1),
                ("domain", None, 1),
                ("tag", Some("finance"), 1),
                ("tag", Some("kpi"), 1),
            ],
            "{backend:?}"
        );
        assert_current_schema(&url);

        let t = tables(&url);
        assert!(
            !t.contains(&"dataset_permissions".into()) && !t.contains(&"access_requests".into()),
            "{t:?}"
        );
        assert!(!columns(&url, "users").contains(&"role".into()));
        assert!(!columns(&url, "table_registry").contains(&"is_public".into()));

        let users = query_store(&url, "SELECT id, email, name, created_at FROM users");
        assert_eq!(users.len(), 1);
        assert_eq!(
            (users[0]["email"].as_str(), users[0]["name"].as_str()),
            (Some("old@example.com"), Some("Old Timer"))
        );
        let reg = query_store(
            &url,
            "SELECT id, name, description FROM table_registry WHERE id = 'legacy_orders'",
        );
        assert_eq!(reg[0]["description"], "from v1");
        let audit = query_store(
            &url,
            "SELECT id, action, params, client_kind FROM audit_log",
        );
        assert_eq!(audit.len(), 1);
        assert_eq!(
            (audit[0]["action"].as_str(), audit[0]["params"].as_str()),
            (Some("catalog.list"), Some("{\"n\": 1}"))
        );
        assert!(audit[0]["client_kind"].is_null());
        // The pre-existing custom "Admin" group was promoted, not duplicated.
        let groups = query_store(
            &url,
            "SELECT id, name FROM user_groups WHERE name = 'Admin'",
        );
        assert_eq!(
            (groups.len(), groups[0]["id"].as_str()),
            (1, Some("g-admin"))
        );

        let before = schema_dump(&url);
        migrate(&url, &dir);
        assert_eq!(
            before,
            schema_dump(&url),
            "{backend:?}: re-running changed the schema"
        );
    }
}

#[test]
fn a_store_newer_than_the_binary_is_refused_with_a_clear_message() {
    let dir = TempDir::new();
    let url = store_url(Backend::Sqlite, &dir);
    migrate(&url, &dir);
    exec_store(
        &url,
        &["INSERT INTO schema_version (version, applied_at) VALUES (99, 'future')"],
    );
    let out = Command::new(server_bin())
        .args([
            "--data-dir",
            dir.0.to_str().unwrap(),
            "--database-url",
            &url,
            "migrate",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("newer than this svc-server"));
}

#[test]
fn health_reports_versions_without_auth() {
    let s = crate::support::Server::start();
    let (status, body) = s.send(s.http.get(s.url("/api/health")));
    assert_eq!(status, 200);
    assert_eq!(
        (body["status"].as_str(), body["schema_version"].as_i64()),
        (Some("ok"), Some(CURRENT))
    );
    assert!(body["version"].is_string());
}
