//! What operators watch: `/metrics` (checked by `promtool`, the Prometheus project's own
//! checker), OTLP traces (decoded by a receiver stub with the OpenTelemetry project's
//! protobuf types), and JSON logs (each line parsed, the whole run grepped for secrets).

use std::collections::BTreeSet;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message as _;
use serde_json::{json, Value};

use crate::discovery::{register, write_parquet};
use crate::support::{free_port, Backend, Server};

/// `promtool`: on the PATH, or where `.ci/run` unpacks the Debian `prometheus` package.
fn promtool() -> PathBuf {
    let unpacked = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default()
        .join(".cache/svc-promtool/root/usr/bin/promtool");
    if unpacked.exists() {
        return unpacked;
    }
    PathBuf::from("promtool")
}

/// What `promtool check metrics` says about an exposition; empty when it has nothing to say.
fn promtool_check(exposition: &str) -> String {
    let mut child = Command::new(promtool())
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian package `prometheus`; .ci/run unpacks it)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(exposition.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "promtool refused the exposition: {said}"
    );
    said
}

fn metrics_text(s: &Server, token: Option<&str>) -> (u16, String) {
    let mut rb = s.http.get(s.url("/metrics"));
    if let Some(t) = token {
        rb = rb.bearer_auth(t);
    }
    let r = rb.send().unwrap();
    (r.status().as_u16(), r.text().unwrap())
}

/// The value of the first series whose line starts with `prefix`.
fn sample(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// One MCP tool call as raw JSON-RPC (the stateless endpoint needs no session).
fn mcp_call(s: &Server, token: &str, tool: &str, args: Value, meta: Option<Value>) -> Value {
    let mut params = json!({"name": tool, "arguments": args});
    if let Some(meta) = meta {
        params["_meta"] = meta;
    }
    let r = s
        .http
        .post(s.url("/mcp"))
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}))
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    r.json().unwrap()
}

#[test]
fn metrics_are_for_admins_bounded_in_labels_and_valid_for_promtool() {
    let s = Server::start();
    let admin = s.admin_token();
    let ana = s.user_token("ana@example.com", false);
    write_parquet(&s.dir.0, "local", "orders", 40, "o");
    register(&s, &admin, json!({"id": "orders", "source_type": "local"}));
    for _ in 0..2 {
        let (status, _) = s.get_json("/api/v2/schema/orders", &admin);
        assert_eq!(status, 200);
    }
    let (status, _) = s.post_json(
        "/api/query",
        &admin,
        &json!({"sql": "SELECT * FROM orders", "limit": 10}),
    );
    assert_eq!(status, 200);
    let (status, _) = s.get_json("/api/v2/schema/no_such_table", &admin);
    assert_eq!(status, 404);
    let answer = mcp_call(&s, &admin, "query", json!({"sql": "SELECT 1 AS one"}), None);
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    let answer = mcp_call(&s, &admin, "describe_table", json!({}), None);
    assert_eq!(answer["result"]["isError"], true, "{answer}");

    assert_eq!(metrics_text(&s, None).0, 401);
    assert_eq!(metrics_text(&s, Some(&ana)).0, 403);
    let (status, text) = metrics_text(&s, Some(&admin));
    assert_eq!(status, 200, "{text}");
    promtool_check(&text);

    // Semantic-convention HTTP series, labelled by route template, never by raw path.
    let schema_route = "http_server_request_duration_seconds_count{http_request_method=\"GET\",http_route=\"/api/v2/schema/{table_id}\",http_response_status_code=\"200\"}";
    assert_eq!(sample(&text, schema_route), Some(2.0), "{text}");
    assert!(
        !text.contains("no_such_table") && !text.contains("orders"),
        "{text}"
    );
    assert!(
        text.contains("# TYPE http_server_active_requests gauge"),
        "{text}"
    );
    // svc's own series.
    for (series, at_least) in [
        (
            "svc_cache_requests_total{cache=\"schema\",result=\"hit\"}",
            1.0,
        ),
        (
            "svc_cache_requests_total{cache=\"schema\",result=\"miss\"}",
            1.0,
        ),
        ("svc_query_rows_total{route=\"local\"}", 11.0),
        ("svc_query_duration_seconds_count{route=\"local\"}", 2.0),
        ("svc_audit_rows_total{result=\"stored\"}", 3.0),
        ("svc_mcp_tool_calls_total{tool=\"query\"}", 1.0),
        ("svc_mcp_tool_errors_total{tool=\"describe_table\"}", 1.0),
    ] {
        let value = sample(&text, series).unwrap_or_else(|| panic!("{series} in {text}"));
        assert!(value >= at_least, "{series} = {value}");
    }
    assert_eq!(
        sample(&text, "svc_mcp_tool_errors_total{tool=\"query\"}"),
        None,
        "{text}"
    );
}

#[test]
fn metrics_can_be_turned_off_or_served_on_their_own_address() {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let s = Server::start_with(Backend::Sqlite, &[("SVC_METRICS_LISTEN", listen.as_str())]);
    let _ = s.get_json("/api/health", "");
    // The separate listener needs no token (it is meant for a private network).
    let r = s
        .http
        .get(format!("http://{listen}/metrics"))
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let text = r.text().unwrap();
    assert!(
        text.contains("http_route=\"/api/health\""),
        "the main listener's requests are counted: {text}"
    );
    promtool_check(&text);

    let off = Server::start_with(Backend::Sqlite, &[("SVC_METRICS", "off")]);
    let (status, body) = metrics_text(&off, Some(&off.admin_token()));
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("SVC_METRICS"), "{body}");
}

/// An OTLP/HTTP receiver on a loopback port: every span it is sent, decoded.
struct Receiver {
    port: u16,
    spans: Arc<Mutex<Vec<Span>>>,
}

#[derive(Debug, Clone)]
struct Span {
    trace_id: String,
    span_id: String,
    parent_span_id: String,
    name: String,
    /// Unix time in nanoseconds.
    start: u64,
    end: u64,
    /// Each attribute's key and value, the value as text.
    attributes: Vec<(String, String)>,
}

impl Receiver {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let spans: Arc<Mutex<Vec<Span>>> = Arc::default();
        let sink = spans.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { return };
                let sink = sink.clone();
                std::thread::spawn(move || serve_otlp(conn, &sink));
            }
        });
        Self { port, spans }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The spans of one trace, once `min` of them have arrived (or 20 s have passed).
    /// The spans of `trace_id` once `ready` holds for them (or after 20 s): spans close and
    /// are exported in batches, so a count alone can be met before the ones a test needs.
    fn trace(&self, trace_id: &str, ready: impl Fn(&[Span]) -> bool) -> Vec<Span> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let found: Vec<Span> = self
                .spans
                .lock()
                .unwrap()
                .iter()
                .filter(|s| s.trace_id == trace_id)
                .cloned()
                .collect();
            if ready(&found) || Instant::now() > deadline {
                return found;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

fn unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// An attribute's value as text: a string as it is, a number in decimal.
fn attribute_text(value: Option<opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    use opentelemetry_proto::tonic::common::v1::any_value::Value as V;
    match value.and_then(|v| v.value) {
        Some(V::StringValue(s)) => s,
        Some(V::IntValue(i)) => i.to_string(),
        Some(V::BoolValue(b)) => b.to_string(),
        Some(V::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}

/// HTTP/1.1 with keep-alive, just enough for an exporter's POSTs.
fn serve_otlp(conn: std::net::TcpStream, sink: &Mutex<Vec<Span>>) {
    let mut writer = conn.try_clone().unwrap();
    let mut reader = BufReader::new(conn);
    loop {
        let mut length = 0usize;
        let mut line = String::new();
        loop {
            line.clear();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    length = v.trim().parse().unwrap_or(0);
                }
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let request = ExportTraceServiceRequest::decode(body.as_slice()).expect("OTLP protobuf");
        let mut spans = sink.lock().unwrap();
        for rs in request.resource_spans {
            for ss in rs.scope_spans {
                for s in ss.spans {
                    spans.push(Span {
                        trace_id: hex::encode(&s.trace_id),
                        span_id: hex::encode(&s.span_id),
                        parent_span_id: hex::encode(&s.parent_span_id),
                        name: s.name,
                        start: s.start_time_unix_nano,
                        end: s.end_time_unix_nano,
                        attributes: s
                            .attributes
                            .into_iter()
                            .map(|kv| (kv.key, attribute_text(kv.value)))
                            .collect(),
                    });
                }
            }
        }
        drop(spans);
        let reply =
            "HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
        if writer.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}

#[test]
fn a_request_is_one_trace_whose_id_is_the_audit_correlation_id() {
    let receiver = Receiver::start();
    let endpoint = receiver.endpoint();
    let s = Server::start_with(
        Backend::Sqlite,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    );
    let admin = s.admin_token();
    write_parquet(&s.dir.0, "local", "orders", 40, "o");
    register(&s, &admin, json!({"id": "orders", "source_type": "local"}));

    // The caller's trace context is honoured: its trace id, our root span under its span.
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let caller_span = "00f067aa0ba902b7";
    let before = unix_ns();
    let r = s
        .http
        .post(s.url("/api/query"))
        .bearer_auth(&admin)
        .header("traceparent", format!("00-{trace_id}-{caller_span}-01"))
        .json(&json!({"sql": "SELECT count(*) AS n FROM orders"}))
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(r.headers()["x-request-id"], trace_id);
    let _ = r.bytes().unwrap();

    // The root span is named as the conventions say: method and route template.
    let spans = receiver.trace(trace_id, |s| s.len() >= 7);
    let root = spans
        .iter()
        .find(|s| s.parent_span_id == caller_span)
        .unwrap_or_else(|| panic!("no span under the caller's: {spans:?}"));
    assert_eq!(root.name, "POST /api/query");
    let mut attributes = root.attributes.clone();
    attributes.sort();
    assert_eq!(
        attributes,
        [
            ("http.request.method", "POST"),
            ("http.response.status_code", "200"),
            ("http.route", "/api/query"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned())),
        "the root span's attributes, each once"
    );
    let expected = [
        "auth.resolve",
        "engine.plan",
        "access.check",
        "driver.table_provider",
        "engine.execute",
        "audit.write",
    ];
    let spans = receiver.trace(trace_id, |s| s.len() >= expected.len());
    let names: BTreeSet<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    for name in expected {
        assert!(names.contains(name), "{name} missing from {names:?}");
    }
    // Spans are timed on the CPU's counter and made Unix time at export: each one lies
    // within the request as the wall clock saw it (a few milliseconds either way).
    let after = unix_ns();
    let slack = 5_000_000;
    for span in &spans {
        assert!(
            before - slack <= span.start && span.start <= span.end && span.end <= after + slack,
            "{} ran {}..{}, outside the request's {before}..{after}",
            span.name,
            span.start,
            span.end
        );
    }
    let ids: BTreeSet<&str> = spans.iter().map(|s| s.span_id.as_str()).collect();
    for span in spans.iter().filter(|s| s.span_id != root.span_id) {
        assert!(
            ids.contains(span.parent_span_id.as_str()),
            "{} hangs under a span of its trace",
            span.name
        );
    }
    let audit = s.audit_rows("query.local", 1);
    assert_eq!(audit[0]["correlation_id"], trace_id, "{audit:?}");

    // Without a traceparent or request id, the server's own trace id is the correlation id.
    let r = s
        .http
        .get(s.url("/api/v2/schema/orders"))
        .bearer_auth(&admin)
        .send()
        .unwrap();
    let own = r.headers()["x-request-id"].to_str().unwrap().to_owned();
    assert_eq!(own.len(), 32);
    let root = |s: &Span| s.name == "GET /api/v2/schema/{table_id}" && s.parent_span_id.is_empty();
    let spans = receiver.trace(&own, |s| s.iter().any(root));
    assert!(spans.iter().any(root), "{spans:?}");

    // An MCP call's `_meta.traceparent` is honoured like the header.
    let mcp_trace = "0af7651916cd43dd8448eb211c80319c";
    let answer = mcp_call(
        &s,
        &admin,
        "query",
        json!({"sql": "SELECT count(*) FROM orders"}),
        Some(json!({"traceparent": format!("00-{mcp_trace}-b7ad6b7169203331-01")})),
    );
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    let both = |spans: &[Span]| {
        ["POST /mcp", "engine.plan"]
            .iter()
            .all(|n| spans.iter().any(|s| s.name == *n))
    };
    let spans = receiver.trace(mcp_trace, both);
    let names: BTreeSet<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    assert!(both(&spans), "{names:?}");
}

/// A trace setting svc cannot use stops start-up, naming the variable; a sampler that
/// records nothing still gives every request a trace id as its correlation id.
#[test]
fn trace_settings_are_checked_at_start_and_sampling_keeps_correlation_ids() {
    let receiver = Receiver::start();
    let endpoint = receiver.endpoint();
    for (key, value) in [
        ("OTEL_TRACES_SAMPLER", "sometimes"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ("OTEL_BSP_SCHEDULE_DELAY", "soon"),
    ] {
        let dir = crate::support::TempDir::new();
        let out = Command::new(crate::support::server_bin())
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
            .env(key, value)
            .env("SCHEDULER_ENABLED", "false")
            .arg("--data-dir")
            .arg(&dir.0)
            .args(["serve", "--listen", &format!("127.0.0.1:{}", free_port())])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{key}={value} started");
        assert!(stderr.contains(key), "{key}: {stderr}");
    }

    let s = Server::start_with(
        Backend::Sqlite,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
            ("OTEL_TRACES_SAMPLER", "always_off"),
        ],
    );
    let admin = s.admin_token();
    let r = s
        .http
        .get(s.url("/api/me"))
        .bearer_auth(&admin)
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let id = r.headers()["x-request-id"].to_str().unwrap().to_owned();
    assert!(
        id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()),
        "{id}"
    );
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        receiver.spans.lock().unwrap().is_empty(),
        "always_off exported spans"
    );
}

#[test]
fn json_logs_carry_the_request_id_and_never_a_secret() {
    let secret = "jwt-secret-that-must-never-appear-0123456789";
    let mut s = Server::start_with(
        Backend::Sqlite,
        &[
            ("SVC_LOG_FORMAT", "json"),
            ("SVC_LOG", "debug"),
            ("SVC_JWT_SECRET", secret),
        ],
    );
    let password = "pass-word-that-must-never-appear";
    let out = s.cli(
        &[
            "users",
            "create",
            "--email",
            "ana@example.com",
            "--password-stdin",
        ],
        Some(&format!("{password}\n")),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (status, login) = s.send(
        s.http
            .post(s.url("/auth/token"))
            .json(&json!({"email": "ana@example.com", "password": password})),
    );
    assert_eq!(status, 200, "{login}");
    let session = login["access_token"].as_str().unwrap().to_owned();
    let (status, pat) = s.post_json("/api/tokens", &session, &json!({"name": "laptop"}));
    assert!(status == 200 || status == 201, "{pat}");
    let pat = pat["token"].as_str().unwrap().to_owned();
    let admin = s.admin_token();
    let (status, _) = s.send(
        s.http
            .get(s.url("/api/v2/catalog"))
            .bearer_auth(&pat)
            .header("x-request-id", "ops-test-request-1"),
    );
    assert_eq!(status, 200);
    let (status, _) = s.send(
        s.http
            .post(s.url("/api/query"))
            .bearer_auth(&admin)
            .header("x-request-id", "ops-test-query")
            .json(&json!({"sql": "SELECT 1"})),
    );
    assert_eq!(status, 200);
    let (status, _) = s.get_json("/api/v2/catalog", "not-a-token");
    assert_eq!(status, 401);
    let wrong = s.send(
        s.http
            .post(s.url("/auth/token"))
            .json(&json!({"email": "ana@example.com", "password": "wrong-pass-word-xyz"})),
    );
    assert_eq!(wrong.0, 401);
    assert!(s.stop(), "the server stops cleanly");

    let log = s.log();
    let mut tagged = 0;
    let mut engine_lines = 0;
    for line in log.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
        assert!(
            v["timestamp"].is_string() && v["level"].is_string(),
            "{line}"
        );
        let spans = v["spans"].as_array().cloned().unwrap_or_default();
        if spans
            .iter()
            .any(|s| s["request_id"] == "ops-test-request-1")
        {
            tagged += 1;
        }
        // A line logged inside the engine, on the query runtime, still names its request.
        if v["target"]
            .as_str()
            .is_some_and(|t| t.starts_with("datafusion"))
            && spans.iter().any(|s| s["request_id"] == "ops-test-query")
        {
            engine_lines += 1;
        }
    }
    assert!(tagged > 0, "no line carries the request id: {log}");
    assert!(engine_lines > 0, "no engine line carries its request id");
    for (what, value) in [
        ("the JWT secret", secret),
        ("a password", password),
        ("a failed password", "wrong-pass-word-xyz"),
        ("a session token", session.as_str()),
        ("a personal access token", pat.as_str()),
        ("an admin token", admin.as_str()),
    ] {
        assert!(!log.contains(value), "{what} is in the log");
    }
}
