//! Telemetry reads for administrators through the real server: facets, KPIs, grouped and
//! raw pages and the summary agree with the same questions asked of `svc_telemetry` in SQL
//! (two independent paths over the same segments); bad parameters are 422 naming the field;
//! the old `/api/admin/usage` prefix redirects; non-admins are refused.

use serde_json::{json, Value};

use crate::support::{backends, Server, TempDir};
use crate::svc_cli::{code, stderr, stdout, svc};
use crate::telemetry::{rows, run, server, upload_raw, LABELLED};

/// A year: the fixture's events are from 2026-11.
const YEAR: &str = "since_minutes=525600";

fn get(s: &Server, token: &str, path: &str) -> Value {
    let (status, body) = s.get_json(path, token);
    assert_eq!(status, 200, "{path}: {body}");
    body
}

/// `[value, count]` pairs of a facet list.
fn pairs(list: &Value) -> Vec<Value> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|c| json!([c["value"], c["count"]]))
        .collect()
}

#[test]
fn administrators_read_facets_kpis_pages_and_the_summary() {
    for backend in backends() {
        let s = server(backend, &[]);
        let admin = s.admin_token();
        let ana = s.user_token("ana@example.com", false);
        let bob = s.user_token("bob@example.com", false);
        assert_eq!(upload_raw(&s, &ana, "a.jsonl", LABELLED).0, 200);
        let other = String::from_utf8_lossy(LABELLED).replace("S1", "S2");
        assert_eq!(upload_raw(&s, &bob, "b.jsonl", other.as_bytes()).0, 200);
        run(&s, &admin);

        // Facets: the SQL path over svc_telemetry gives the same lists, same order.
        let facets = get(&s, &admin, &format!("/api/admin/telemetry/facets?{YEAR}"));
        assert_eq!(facets["window_minutes"], 525_600);
        let sql_tools = rows(
            &s,
            &admin,
            "SELECT tool_name, count(*) AS n FROM svc_telemetry WHERE tool_name IS NOT NULL \
             GROUP BY tool_name ORDER BY n DESC, tool_name",
        );
        assert_eq!(pairs(&facets["tools"]), sql_tools);
        assert_eq!(
            pairs(&facets["users"]),
            [json!(["ana@example.com", 8]), json!(["bob@example.com", 8])]
        );
        let types = rows(
            &s,
            &admin,
            "SELECT event_type, count(*) AS n FROM svc_telemetry GROUP BY event_type ORDER BY n DESC, event_type",
        );
        assert_eq!(pairs(&facets["event_types"]), types);
        // The default window (a week) ends before the fixture's days.
        let recent = get(&s, &admin, "/api/admin/telemetry/facets");
        assert_eq!(recent["tools"], json!([]));

        // KPIs under filters.
        let kpis = get(&s, &admin, &format!("/api/admin/telemetry/kpis?{YEAR}"));
        let errors = rows(
            &s,
            &admin,
            "SELECT count(*) FROM svc_telemetry WHERE is_error",
        )[0][0]
            .as_i64()
            .unwrap();
        assert_eq!(
            (
                &kpis["events_total"],
                &kpis["distinct_users"],
                &kpis["errors"]
            ),
            (&json!(16), &json!(2), &json!(errors))
        );
        let rate = (errors as f64 / 16.0 * 10_000.0).round() / 10_000.0;
        assert_eq!(kpis["error_rate"], json!(rate));
        let ana_bash = get(
            &s,
            &admin,
            &format!("/api/admin/telemetry/kpis?{YEAR}&username=ana@example.com&tool_name=Bash&only_errors=true"),
        );
        assert_eq!(
            (&ana_bash["events_total"], &ana_bash["distinct_users"]),
            (&json!(1), &json!(1))
        );
        // `q` is a literal substring: `%` and `_` match only themselves.
        let wild = get(
            &s,
            &admin,
            &format!("/api/admin/telemetry/kpis?{YEAR}&q=%25"),
        );
        assert_eq!(wild["events_total"], 0, "{wild}");
        let mcp = get(
            &s,
            &admin,
            &format!("/api/admin/telemetry/kpis?{YEAR}&q=mcp__"),
        );
        let sql_mcp = rows(
            &s,
            &admin,
            "SELECT count(*) FROM svc_telemetry WHERE strpos(tool_name, 'mcp__') > 0",
        )[0][0]
            .clone();
        assert_eq!(mcp["events_total"], sql_mcp);

        // Grouped pages, with a stable order and honest paging.
        let by_tool = get(
            &s,
            &admin,
            &format!("/api/admin/telemetry/query?{YEAR}&group_by=tool_name&limit=2"),
        );
        let buckets = rows(
            &s,
            &admin,
            "SELECT count(DISTINCT coalesce(tool_name, '<null>')) FROM svc_telemetry",
        )[0][0]
            .clone();
        assert_eq!(by_tool["total"], buckets, "a NULL bucket counts: {by_tool}");
        assert_eq!(
            (&by_tool["group_by"], &by_tool["next_offset"]),
            (&json!("tool_name"), &json!(2))
        );
        let first = &by_tool["rows"][0];
        assert!(
            first["invocations"].as_i64().unwrap()
                >= by_tool["rows"][1]["invocations"].as_i64().unwrap()
        );
        let by_day = get(
            &s,
            &admin,
            &format!("/api/admin/telemetry/query?{YEAR}&group_by=day&sort=bucket:asc"),
        );
        assert_eq!(by_day["rows"][0]["bucket"], "2026-11-01", "{by_day}");
        assert_eq!(by_day["rows"][0]["distinct_users"], 2);
        assert_eq!(by_day["next_offset"], Value::Null);
        // Raw rows: newest first by default, unknown sort columns fall back, never a 500.
        let raw = get(
            &s,
            &admin,
            &format!("/api/admin/telemetry/query?{YEAR}&group_by=nonsense&sort=drop_table:desc&limit=500&username=ana@example.com"),
        );
        assert_eq!((&raw["group_by"], &raw["total"]), (&Value::Null, &json!(8)));
        let times: Vec<&str> = raw["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["occurred_at"].as_str().unwrap())
            .collect();
        assert!(times.windows(2).all(|w| w[0] >= w[1]), "{times:?}");
        assert!(
            raw["rows"][0].get("is_error").is_some() && raw["rows"][0].get("session_id").is_some()
        );

        // Summary: top lists, a 30-day DAU series ending today, audited.
        let summary = get(&s, &admin, "/api/admin/telemetry/summary?window=all");
        assert_eq!(summary["window"], "all");
        assert_eq!(summary["top_users"][0]["tool_calls"], 8);
        let dau = summary["dau_series"].as_array().unwrap();
        assert_eq!(dau.len(), 30);
        let today = chrono::Utc::now().format("%Y-%m-%d").to_string();
        assert_eq!(dau[29]["day"], today.as_str());
        let busiest = &summary["error_rate"][0];
        assert!(busiest["rate"].as_f64().unwrap() <= 1.0, "{summary}");
        assert_eq!(
            summary["top_tools"][0]["invocations"], sql_tools[0][1],
            "{summary}"
        );
        let audited = s.audit_rows("usage.summary", 1);
        assert_eq!(audited[0]["result"], "success");

        // Bad input: 422 naming the field, never a 500.
        for (path, field) in [
            ("/api/admin/telemetry/kpis?since_minutes=0", "since_minutes"),
            (
                "/api/admin/telemetry/kpis?since_minutes=525601",
                "since_minutes",
            ),
            (
                "/api/admin/telemetry/facets?since_minutes=0",
                "since_minutes",
            ),
            ("/api/admin/telemetry/query?limit=0", "limit"),
            ("/api/admin/telemetry/query?limit=501", "limit"),
            ("/api/admin/telemetry/query?offset=50001", "offset"),
            ("/api/admin/telemetry/summary?window=1y", "window"),
        ] {
            let (status, body) = s.get_json(path, &admin);
            assert_eq!(status, 422, "{path}: {body}");
            assert!(body.to_string().contains(field), "{path}: {body}");
        }
        // Not for analysts.
        for path in ["facets", "kpis", "query", "summary"] {
            let (status, body) = s.get_json(&format!("/api/admin/telemetry/{path}"), &ana);
            assert_eq!(status, 403, "{path}: {body}");
        }

        // The old prefix redirects, keeping the query.
        let plain = reqwest::blocking::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        let r = plain
            .get(s.url(&format!("/api/admin/usage/kpis?{YEAR}")))
            .bearer_auth(&admin)
            .send()
            .unwrap();
        assert_eq!(r.status(), 308);
        assert_eq!(
            r.headers()["location"],
            format!("/api/admin/telemetry/kpis?{YEAR}").as_str()
        );
        let followed = get(&s, &admin, &format!("/api/admin/usage/kpis?{YEAR}"));
        assert_eq!(followed["events_total"], 16);

        // The client: the same numbers, a readable table, and the old name still works.
        let config = TempDir::new();
        let cli = |token: &str, args: &[&str]| {
            let mut all = vec!["--server", s.base.as_str(), "--token", token];
            all.extend_from_slice(args);
            svc(&config.0, &all)
        };
        let out = cli(
            &admin,
            &["admin", "telemetry", "kpis", "--since", "365d", "--json"],
        );
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        let doc: Value = serde_json::from_str(&stdout(&out)).unwrap();
        assert_eq!(doc["events_total"], 16);
        let out = cli(
            &admin,
            &[
                "admin",
                "telemetry",
                "query",
                "--since",
                "365d",
                "--group-by",
                "tool_name",
                "--limit",
                "2",
            ],
        );
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        assert!(stdout(&out).contains("INVOCATIONS"), "{}", stdout(&out));
        assert!(
            stderr(&out).contains("Next page: --offset 2"),
            "{}",
            stderr(&out)
        );
        let out = cli(
            &admin,
            &["admin", "usage", "facets", "--since", "365d", "--json"],
        );
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        assert!(
            stderr(&out).contains("svc admin telemetry"),
            "{}",
            stderr(&out)
        );
        let doc: Value = serde_json::from_str(&stdout(&out)).unwrap();
        assert_eq!(pairs(&doc["tools"]), sql_tools);
        let out = cli(
            &admin,
            &["admin", "telemetry", "summary", "--window", "all"],
        );
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        assert!(stdout(&out).contains("Top tools"), "{}", stdout(&out));
        let out = cli(&admin, &["admin", "telemetry", "kpis", "--since", "soon"]);
        assert_eq!(code(&out), 2, "a bad duration is a usage error");
        let out = cli(&ana, &["admin", "telemetry", "kpis"]);
        assert_eq!(code(&out), 8, "forbidden: {}", stderr(&out));
    }
}
