//! MCP through a release `svc-server`, over plain JSON-RPC on HTTP (what any MCP client
//! sends): the overhead of `query` through `/mcp` against the same statement through
//! `POST /api/query` (p50 and p99 of interleaved runs), `tools/list` latency, and a
//! `SELECT *` over a 3 M-row parquet table through MCP (response bytes and time). Prints
//! figures against the targets (overhead ≤ 2 ms p50; ≤ 64 KiB and ≤ 200 ms); asserts only
//! that the answers are right.
//!
//!   cargo bench -p svc-host --bench mcp
//!
//! `SVC_BENCH_ROWS` (3000000) sizes the large table, `SVC_BENCH_RUNS` (300) the samples.

mod common;

use std::fs::File;
use std::sync::Arc;
use std::time::Instant;

use common::{percentile, Server};
use reqwest::blocking::Client;
use serde_json::{json, Value};
use svc_plugin_api::arrow::array::{ArrayRef, Float64Array, Int64Array, StringArray};
use svc_plugin_api::arrow::datatypes::{DataType, Field, Schema};
use svc_plugin_api::datafusion::parquet::arrow::ArrowWriter;
use svc_plugin_api::RecordBatch;
use svc_store::testing::TempDir;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn write_table(path: &std::path::Path, rows: i64) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("label", DataType::Utf8, false),
        Field::new("x", DataType::Float64, false),
    ]));
    let mut w = ArrowWriter::try_new(File::create(path).unwrap(), schema.clone(), None).unwrap();
    let chunk = 500_000;
    for start in (0..rows).step_by(chunk) {
        let ids = start..(start + chunk as i64).min(rows);
        let cols: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from_iter_values(ids.clone())),
            Arc::new(StringArray::from_iter_values(
                ids.clone()
                    .map(|i| format!("label-{:08}", i * 7919 % 100_000_000)),
            )),
            Arc::new(Float64Array::from_iter_values(ids.map(|i| i as f64 / 3.0))),
        ];
        w.write(&RecordBatch::try_new(schema.clone(), cols).unwrap())
            .unwrap();
    }
    w.close().unwrap();
}

/// An MCP conversation over HTTP: JSON-RPC requests with the negotiated protocol version.
struct Mcp<'a> {
    http: &'a Client,
    url: String,
    token: String,
    protocol: String,
    next_id: u64,
}

impl<'a> Mcp<'a> {
    fn open(http: &'a Client, base: &str, token: &str) -> Self {
        let mut mcp = Self {
            http,
            url: format!("{base}/mcp"),
            token: token.to_owned(),
            protocol: String::new(),
            next_id: 0,
        };
        let init = mcp.request(
            "initialize",
            json!({
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "svc-bench", "version": "1"}
            }),
        );
        mcp.protocol = init["result"]["protocolVersion"]
            .as_str()
            .expect("initialize answers a protocol version")
            .to_owned();
        mcp.notify("notifications/initialized");
        mcp
    }

    /// POSTs one JSON-RPC message with the headers every MCP call carries.
    fn post(&self, message: &Value) -> reqwest::blocking::Response {
        let mut rb = self
            .http
            .post(&self.url)
            .bearer_auth(&self.token)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        if !self.protocol.is_empty() {
            rb = rb.header("mcp-protocol-version", &self.protocol);
        }
        rb.body(message.to_string()).send().unwrap()
    }

    /// Sends one request; returns the answer's JSON and its body length.
    fn request_sized(&mut self, method: &str, params: Value) -> (Value, usize) {
        self.next_id += 1;
        let resp = self.post(
            &json!({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}),
        );
        let status = resp.status();
        let text = resp.text().unwrap();
        assert!(status.is_success(), "{method}: {status} {text}");
        // A JSON answer, or a one-event stream.
        let json_text = text
            .lines()
            .find_map(|l| l.strip_prefix("data:"))
            .unwrap_or(&text);
        (serde_json::from_str(json_text.trim()).unwrap(), text.len())
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        self.request_sized(method, params).0
    }

    fn notify(&mut self, method: &str) {
        let status = self
            .post(&json!({"jsonrpc": "2.0", "method": method}))
            .status();
        assert!(status.is_success(), "{method}: {status}");
    }

    fn tool(&mut self, name: &str, args: Value) -> (Value, usize) {
        let (answer, bytes) =
            self.request_sized("tools/call", json!({"name": name, "arguments": args}));
        let result = &answer["result"];
        assert_ne!(result["isError"], true, "{name}: {answer}");
        (result.clone(), bytes)
    }
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

fn summary(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    (percentile(&v, 0.5), percentile(&v, 0.99))
}

fn main() {
    let tmp = TempDir::new();
    let rows = env_u64("SVC_BENCH_ROWS", 3_000_000) as i64;
    let runs = env_u64("SVC_BENCH_RUNS", 300) as usize;
    let data = tmp.0.join("data");
    let t = Instant::now();
    write_table(&data.join("extracts/local/data/big.parquet"), rows);
    write_table(&data.join("extracts/local/data/small.parquet"), 20);
    println!("wrote {rows} rows in {:.1} s", t.elapsed().as_secs_f64());

    let server = Server::start_with(&data, &[("SVC_SKIP_CACHE_WARMUP", "1")]);
    let token = server.cli(&["tokens", "create", "--email", "admin@localhost"]);
    let http = Client::new();
    for id in ["big", "small"] {
        let status = http
            .post(format!("{}/api/admin/register-table", server.base))
            .bearer_auth(&token)
            .json(&json!({"id": id, "source_type": "local"}))
            .send()
            .unwrap()
            .status();
        assert!(status.is_success(), "register {id}: {status}");
    }
    let mut mcp = Mcp::open(&http, &server.base, &token);

    // The same small statement both ways, interleaved so both see the same machine.
    let sql = "SELECT id, label, x FROM small ORDER BY id";
    let (mut api, mut via_mcp) = (Vec::new(), Vec::new());
    for i in 0..runs + 20 {
        let t = Instant::now();
        let body: Value = http
            .post(format!("{}/api/query", server.base))
            .bearer_auth(&token)
            .json(&json!({"sql": sql}))
            .send()
            .unwrap()
            .json()
            .unwrap();
        let a = ms(t);
        assert_eq!(body["row_count"], 20);
        let t = Instant::now();
        let (result, _) = mcp.tool("query", json!({"sql": sql}));
        let m = ms(t);
        assert_eq!(result["structuredContent"]["returned_rows"], 20);
        if i >= 20 {
            api.push(a);
            via_mcp.push(m);
        }
    }
    let (api50, api99) = summary(api);
    let (mcp50, mcp99) = summary(via_mcp);
    let verdict = if mcp50 - api50 <= 2.0 {
        "met"
    } else {
        "MISSED"
    };
    println!("\nquery of a small cached result ({runs} runs each, interleaved)");
    println!("  POST /api/query       p50 {api50:7.2} ms   p99 {api99:7.2} ms");
    println!("  MCP tools/call query  p50 {mcp50:7.2} ms   p99 {mcp99:7.2} ms");
    println!(
        "  overhead              p50 {:+7.2} ms   p99 {:+7.2} ms   (target p50 <= 2 ms: {verdict})",
        mcp50 - api50,
        mcp99 - api99
    );

    let mut list = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        let answer = mcp.request("tools/list", json!({}));
        list.push(ms(t));
        assert_eq!(answer["result"]["tools"].as_array().unwrap().len(), 6);
    }
    let (l50, l99) = summary(list);
    println!("tools/list             p50 {l50:7.2} ms   p99 {l99:7.2} ms");

    let mut times = Vec::new();
    let mut bytes = 0;
    for _ in 0..10 {
        let t = Instant::now();
        let (result, size) = mcp.tool("query", json!({"sql": "SELECT * FROM big"}));
        times.push(ms(t));
        bytes = size;
        assert_eq!(result["structuredContent"]["truncated"], true);
    }
    let (b50, b99) = summary(times);
    let verdict = if bytes <= 64 << 10 && b50 <= 200.0 {
        "met"
    } else {
        "MISSED"
    };
    println!(
        "SELECT * over {rows} rows via MCP: response {:.1} KiB, p50 {b50:.1} ms, max {b99:.1} ms   (target <= 64 KiB and <= 200 ms: {verdict})",
        bytes as f64 / 1024.0
    );
}
