//! MCP through a client nobody here wrote (the official Rust SDK's): over streamable HTTP at
//! `/mcp`, and over stdio through `svc mcp`. Tools, bounded results and their cursors, the
//! access checks and row filters every other path has, errors as tool results, audit rows.

use std::collections::BTreeSet;

use rmcp::model::{CallToolRequestParams, CallToolResult, ReadResourceRequestParams};
use rmcp::service::RunningService;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt as _};
use serde_json::{json, Value};

use crate::discovery::{register, write_parquet};
use crate::support::{run_async, svc_bin, Server, TempDir};

type Client = RunningService<RoleClient, ()>;

async fn connect(s: &Server, token: &str) -> Client {
    let config = StreamableHttpClientTransportConfig::with_uri(s.url("/mcp")).auth_header(token);
    ().serve(StreamableHttpClientTransport::from_config(config))
        .await
        .expect("an MCP session")
}

async fn call(c: &Client, tool: &str, args: Value) -> CallToolResult {
    let Value::Object(args) = args else {
        panic!("arguments are an object")
    };
    c.call_tool(CallToolRequestParams::new(tool.to_owned()).with_arguments(args))
        .await
        .unwrap_or_else(|e| panic!("{tool}: {e}"))
}

fn text(r: &CallToolResult) -> String {
    r.content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect()
}

fn meta(r: &CallToolResult) -> Value {
    r.structured_content.clone().unwrap_or(Value::Null)
}

fn is_error(r: &CallToolResult) -> bool {
    r.is_error == Some(true)
}

#[test]
fn an_agent_discovers_queries_and_pages_through_bounded_results() {
    let s = Server::start();
    let admin = s.admin_token();
    write_parquet(&s.dir.0, "local", "orders", 250, "o");
    register(
        &s,
        &admin,
        json!({"id": "orders", "source_type": "local", "description": "Customer orders"}),
    );
    let ana = s.user_token("ana@example.com", false);
    let (_, me) = s.get_json("/api/me", &ana);
    let ana_id = me["id"].as_str().unwrap().to_owned();

    run_async(async {
        let c = connect(&s, &admin).await;
        let tools: BTreeSet<String> = c
            .list_all_tools()
            .await
            .unwrap()
            .into_iter()
            .inspect(|t| {
                assert!(
                    t.description.as_ref().is_some_and(|d| d.len() > 80),
                    "{} is described for a model",
                    t.name
                );
                assert_eq!(t.input_schema["type"], "object", "{}", t.name);
            })
            .map(|t| t.name.to_string())
            .collect();
        assert_eq!(
            tools,
            [
                "describe_table",
                "list_tables",
                "memory_bundle",
                "query",
                "scan",
                "scan_estimate"
            ]
            .map(String::from)
            .into()
        );

        let listed = call(&c, "list_tables", json!({"q": "customer"})).await;
        assert!(!is_error(&listed));
        let lines = text(&listed);
        assert!(lines.contains("\norders,"), "{lines}");
        assert!(
            !lines.contains("svc_audit"),
            "filtered by the words: {lines}"
        );

        let described = call(&c, "describe_table", json!({"table_id": "orders"})).await;
        let d = meta(&described);
        let columns: Vec<&str> = d["columns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(columns, ["id", "name", "score"], "{d}");
        assert_eq!(d["sample_rows"].as_array().unwrap().len(), 5, "{d}");

        // Paging: 100 rows a page (the default cap), a cursor to the next, none at the end.
        let sql = "SELECT id FROM orders ORDER BY id";
        let mut seen = Vec::new();
        let mut cursor: Option<String> = None;
        for page in 0..3 {
            let mut args = json!({"sql": sql});
            if let Some(c) = &cursor {
                args["cursor"] = json!(c);
            }
            let r = call(&c, "query", args).await;
            assert!(!is_error(&r), "{}", text(&r));
            let m = meta(&r);
            let ids: Vec<i64> = text(&r)
                .lines()
                .skip(1)
                .filter_map(|l| l.parse().ok())
                .collect();
            assert_eq!(ids.len() as u64, m["returned_rows"].as_u64().unwrap());
            seen.extend(ids);
            cursor = m["next_cursor"].as_str().map(str::to_owned);
            assert_eq!(m["truncated"], page < 2, "page {page}: {m}");
            assert_eq!(cursor.is_some(), page < 2, "page {page}: {m}");
        }
        assert_eq!(
            seen,
            (0..250).collect::<Vec<_>>(),
            "every row once, in order"
        );

        let r = call(
            &c,
            "query",
            json!({"sql": sql, "max_rows": 7, "format": "json"}),
        )
        .await;
        let rows: Value = serde_json::from_str(text(&r).split("\n[").next().unwrap()).unwrap();
        assert_eq!(rows["rows"], json!([[0], [1], [2], [3], [4], [5], [6]]));
        assert_eq!(meta(&r)["truncated"], true);

        // A cursor only continues the statement (and user) it was made for.
        let first = meta(&call(&c, "query", json!({"sql": sql})).await);
        let foreign = call(
            &c,
            "query",
            json!({"sql": "SELECT name FROM orders", "cursor": first["next_cursor"]}),
        )
        .await;
        assert!(is_error(&foreign));
        assert!(text(&foreign).contains("cursor"), "{}", text(&foreign));

        // The byte budget: wide rows stop well before the row cap, and say so.
        let wide = call(
            &c,
            "query",
            json!({"sql": "SELECT id, repeat(name, 400) AS wide FROM orders ORDER BY id"}),
        )
        .await;
        let m = meta(&wide);
        let shown = m["returned_rows"].as_u64().unwrap();
        assert!((1..100).contains(&shown), "{m}");
        assert_eq!(m["truncated"], true);
        assert!(
            text(&wide).len() <= 64 * 1024 + 300,
            "{}",
            text(&wide).len()
        );

        // Mistakes are tool results naming the problem, never protocol errors.
        for (tool, args, needle) in [
            ("query", json!({"sql": 5}), "'sql'"),
            ("query", json!({}), "'sql'"),
            (
                "query",
                json!({"sql": "SELECT 1", "rows": 3}),
                "unknown argument 'rows'",
            ),
            ("query", json!({"sql": "DROP TABLE orders"}), "not allowed"),
            (
                "query",
                json!({"sql": "SELECT 1; SELECT 2"}),
                "2 statements",
            ),
            ("describe_table", json!({"table_id": "nope"}), "not_found"),
            (
                "memory_bundle",
                json!({"budget_tokens": 0}),
                "'budget_tokens'",
            ),
            ("drop_everything", json!({}), "no tool"),
        ] {
            let r = call(&c, tool, args.clone()).await;
            assert!(is_error(&r), "{tool} {args}: {}", text(&r));
            let body: Value = serde_json::from_str(&text(&r)).unwrap();
            assert!(body.to_string().contains(needle), "{tool} {args}: {body}");
            assert!(body["hint"].as_str().is_some_and(|h| !h.is_empty()));
        }

        let scanned = call(
            &c,
            "scan",
            json!({"table_id": "orders", "select": ["id"], "where": "id >= 240", "order_by": ["id DESC"]}),
        )
        .await;
        let scanned_text = text(&scanned);
        let ids: Vec<&str> = scanned_text.lines().skip(1).take(3).collect();
        assert_eq!(ids, ["249", "248", "247"], "{scanned_text}");
        assert_eq!(meta(&scanned)["returned_rows"], 10);
        // A scan pages up to its own limit and no further.
        let first = meta(&call(&c, "scan", json!({"table_id": "orders", "limit": 150})).await);
        assert_eq!(
            (
                first["returned_rows"].as_u64(),
                first["truncated"].as_bool()
            ),
            (Some(100), Some(true)),
            "{first}"
        );
        let rest = meta(
            &call(
                &c,
                "scan",
                json!({"table_id": "orders", "limit": 150, "cursor": first["next_cursor"]}),
            )
            .await,
        );
        assert_eq!(rest["returned_rows"], 50, "{rest}");
        assert_eq!(
            (rest["truncated"].as_bool(), rest["next_cursor"].is_null()),
            (Some(false), true),
            "{rest}"
        );
        let estimate = call(&c, "scan_estimate", json!({"table_id": "orders"})).await;
        assert_eq!(meta(&estimate)["table_id"], "orders", "{}", text(&estimate));

        let bundle = call(&c, "memory_bundle", json!({"budget_tokens": 500})).await;
        assert_eq!(meta(&bundle)["token_budget"], 500, "{}", text(&bundle));

        let resources = c.list_all_resources().await.unwrap();
        assert!(resources.iter().any(|r| r.uri == "svc://table/orders"));
        let read = c
            .read_resource(ReadResourceRequestParams::new("svc://table/orders"))
            .await
            .unwrap();
        let json_text = serde_json::to_value(&read.contents[0]).unwrap();
        assert!(json_text["text"].as_str().unwrap().contains("\"score\""));
        c.cancel().await.unwrap();

        // A reader: the same grants and row filters as every other path.
        let c = connect(&s, &ana).await;
        let listed = text(&call(&c, "list_tables", json!({})).await);
        assert!(
            !listed.contains("\norders,"),
            "no grant, not listed: {listed}"
        );
        let r = call(&c, "describe_table", json!({"table_id": "orders"})).await;
        assert!(is_error(&r));
        assert_eq!(meta(&r)["status"], 403, "{}", text(&r));
        let r = call(
            &c,
            "query",
            json!({"sql": "SELECT DISTINCT user_id FROM svc_audit"}),
        )
        .await;
        assert!(!is_error(&r), "{}", text(&r));
        let users_text = text(&r);
        let users: Vec<&str> = users_text
            .lines()
            .skip(1)
            .filter(|l| !l.starts_with('['))
            .collect();
        assert_eq!(users, [ana_id.as_str()], "only the reader's own audit rows");
        c.cancel().await.unwrap();
    });

    // Audited like every other path, as `mcp`; refusals before an operation as `mcp.call`.
    let schema = s.audit_rows("catalog.schema", 1);
    assert!(
        schema.iter().any(|r| r["client_kind"] == "mcp"),
        "{schema:?}"
    );
    let queries = s.audit_rows("query.local", 4);
    assert!(queries.iter().all(|r| r["client_kind"] == "mcp"));
    let refused = s.audit_rows("mcp.call", 5);
    assert!(refused.len() >= 5, "{refused:?}");
    assert!(refused
        .iter()
        .any(|r| r["resource"] == "tool:drop_everything"));
    let internal = s.audit_rows("query.internal", 1);
    assert_eq!(internal[0]["user_id"], ana_id.as_str());
}

#[test]
fn tokens_are_checked_on_every_call_and_bad_bodies_or_a_thousand_sessions_leave_the_server_fine() {
    let s = Server::start();
    let token = s.cli_ok(&["tokens", "create", "--email", "admin@localhost"]);
    let no_token = s
        .http
        .post(s.url("/mcp"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#)
        .send()
        .unwrap();
    assert_eq!(no_token.status(), 401);
    assert_eq!(no_token.headers()["www-authenticate"], "Bearer");
    let lower_case_scheme = s
        .http
        .post(s.url("/mcp"))
        .header("authorization", format!("bearer {token}"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
        .send()
        .unwrap();
    assert_ne!(
        lower_case_scheme.status(),
        401,
        "the scheme is case-insensitive"
    );

    let malformed = s
        .http
        .post(s.url("/mcp"))
        .bearer_auth(&token)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body("{not json")
        .send()
        .unwrap();
    assert!(
        malformed.status().is_client_error(),
        "{}",
        malformed.status()
    );
    assert_eq!(
        s.get_json("/api/health", &token).0,
        200,
        "the server is fine"
    );

    // Waves of a thousand sessions opened at once and dropped: the server keeps nothing of
    // them, so after the allocator has warmed up (the first waves) more waves leave its
    // memory where it was. A session kept would cost far more than 24 KiB each.
    let wave = || {
        run_async(async {
            let http = reqwest::Client::new();
            let mut calls = tokio::task::JoinSet::new();
            for _ in 0..1000 {
                let request = http
                    .post(s.url("/mcp"))
                    .bearer_auth(&token)
                    .header("accept", "application/json, text/event-stream")
                    .json(
                        &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                        "protocolVersion": "2025-06-18", "capabilities": {},
                        "clientInfo": {"name": "wave", "version": "1"}}}),
                    );
                calls.spawn(async move { request.send().await.map(|r| r.status().as_u16()) });
            }
            let mut opened = 0;
            while let Some(done) = calls.join_next().await {
                if matches!(done, Ok(Ok(200))) {
                    opened += 1;
                }
            }
            assert_eq!(opened, 1000, "every session opened");
        });
        s.rss().expect("the server's resident memory")
    };
    wave();
    let warmed = wave();
    wave();
    let after = wave();
    assert!(
        after < warmed + (48 << 20),
        "memory grew from {} MiB to {} MiB over 2,000 sessions",
        warmed >> 20,
        after >> 20
    );

    run_async(async {
        let c = connect(&s, &token).await;
        assert!(!is_error(&call(&c, "list_tables", json!({})).await));
        // The blocking HTTP client runs on its own thread, outside this runtime.
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    let (_, tokens) = s.get_json("/api/tokens", &token);
                    let id = tokens
                        .as_array()
                        .and_then(|t| t.first())
                        .map(|t| t["id"].as_str().unwrap().to_owned())
                        .expect("the token is listed");
                    assert!(s.delete(&format!("/api/tokens/{id}"), &token).0 < 300);
                })
                .join()
                .unwrap()
        });
        let after = c.call_tool(CallToolRequestParams::new("list_tables")).await;
        assert!(
            after.is_err(),
            "a revoked token is refused on its next call"
        );
    });
}

#[test]
fn svc_mcp_serves_a_stdio_host_through_the_server() {
    let s = Server::start();
    let admin = s.admin_token();
    write_parquet(&s.dir.0, "local", "orders", 20, "o");
    register(&s, &admin, json!({"id": "orders", "source_type": "local"}));
    let config = TempDir::new();
    run_async(async {
        let mut cmd = tokio::process::Command::new(svc_bin());
        cmd.arg("mcp")
            .env("SVC_CONFIG_DIR", &config.0)
            .env("SVC_SERVER", &s.base)
            .env("SVC_TOKEN", &admin);
        let c =
            ().serve(TokioChildProcess::new(cmd).unwrap())
                .await
                .expect("an MCP session over stdio");
        let tools = c.list_all_tools().await.unwrap();
        assert_eq!(tools.len(), 6);
        let r = call(
            &c,
            "query",
            json!({"sql": "SELECT count(*) AS n FROM orders"}),
        )
        .await;
        assert!(text(&r).starts_with("n\n20\n"), "{}", text(&r));
        let r = call(&c, "describe_table", json!({"table_id": "missing"})).await;
        assert!(is_error(&r));
        c.cancel().await.unwrap();
    });
    let rows = s.audit_rows("query.local", 1);
    assert_eq!(rows[0]["client_kind"], "mcp");
}

/// The official MCP Inspector's CLI (npm), which `.ci/run` installs under `$SVC_TEST_NPM`
/// (default `~/.cache/svc-npm`); without it the test says so and skips.
#[test]
fn the_official_inspector_cli_lists_and_calls_the_tools() {
    let inspector =
        crate::sdk::tools("SVC_TEST_NPM", "svc-npm").join("node_modules/.bin/mcp-inspector");
    if !inspector.exists() {
        eprintln!(
            "notice: MCP Inspector test skipped: no {} (run .ci/run once to install it)",
            inspector.display()
        );
        return;
    }
    let s = Server::start();
    let admin = s.admin_token();
    write_parquet(&s.dir.0, "local", "orders", 30, "o");
    register(&s, &admin, json!({"id": "orders", "source_type": "local"}));
    let inspect = |args: &[&str]| -> Value {
        let out = std::process::Command::new(&inspector)
            .arg("--cli")
            .arg(s.url("/mcp"))
            .arg("--header")
            .arg(format!("Authorization: Bearer {admin}"))
            .args(args)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        // The result first; a failed tool adds a line of its own after it.
        serde_json::Deserializer::from_str(&stdout)
            .into_iter::<Value>()
            .next()
            .and_then(Result::ok)
            .unwrap_or_else(|| {
                panic!(
                    "{args:?}: {stdout} {}",
                    String::from_utf8_lossy(&out.stderr)
                )
            })
    };
    let listed = inspect(&["--method", "tools/list"]);
    let names: Vec<&str> = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"query") && names.len() == 6, "{names:?}");
    let counted = inspect(&[
        "--method",
        "tools/call",
        "--tool-name",
        "query",
        "--tool-arg",
        "sql=SELECT count(*) AS n FROM orders",
    ]);
    assert_eq!(counted["isError"], false, "{counted}");
    assert_eq!(counted["structuredContent"]["returned_rows"], 1);
    assert!(counted["content"][0]["text"]
        .as_str()
        .unwrap()
        .starts_with("n\n30\n"));
    let missing = inspect(&[
        "--method",
        "tools/call",
        "--tool-name",
        "describe_table",
        "--tool-arg",
        "table_id=nope",
    ]);
    assert_eq!(missing["isError"], true, "{missing}");
    assert_eq!(missing["structuredContent"]["status"], 404);
}
