//! `svc mcp`: a local stdio MCP server for agent hosts (Claude Code, Claude Desktop, …) that
//! forwards every message to the configured server's `/mcp` with the user's token.
//!
//! The server holds the tools; this is a pipe, not a second implementation: each JSON-RPC
//! line from standard input is POSTed as is, and each message of the answer (one JSON body,
//! or the `data:` events of a stream) is written back as one line. A message the server
//! cannot take (unreachable, token refused) is answered with a JSON-RPC error for its id, so
//! the host shows the reason instead of hanging.

use std::io::{BufRead as _, Write as _};

use reqwest::header::{HeaderValue, ACCEPT, CONTENT_TYPE};
use reqwest::Method;
use serde_json::{json, Value};

use super::Ctx;
use crate::exit::Result;

/// The protocol version header the transport asks for after initialization.
const PROTOCOL_HEADER: &str = "mcp-protocol-version";
/// A session id, when the server keeps sessions (svc's does not; other servers may).
const SESSION_HEADER: &str = "mcp-session-id";

/// Runs until standard input closes.
pub fn run(ctx: &Ctx) -> Result<()> {
    let client = ctx.authed()?;
    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    let mut protocol: Option<String> = None;
    let mut session: Option<String> = None;
    for line in stdin.lock().lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let id = serde_json::from_str::<Value>(&line)
            .ok()
            .and_then(|m| m.get("id").cloned());
        let mut rb = client
            .request(true, Method::POST, "/mcp")?
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, "application/json, text/event-stream")
            .body(line.clone());
        if let Some(p) = &protocol {
            rb = rb.header(PROTOCOL_HEADER, p);
        }
        if let Some(s) = &session {
            rb = rb.header(SESSION_HEADER, s);
        }
        let answers = match rb.send() {
            Err(e) => id
                .map(|id| vec![failure(id, &format!("svc server unreachable: {e}"))])
                .unwrap_or_default(),
            Ok(resp) => {
                if let Some(s) = resp.headers().get(SESSION_HEADER) {
                    session = s.to_str().ok().map(str::to_owned);
                }
                let status = resp.status();
                let is_stream = resp
                    .headers()
                    .get(CONTENT_TYPE)
                    .is_some_and(|v| starts_with(v, "text/event-stream"));
                let body = resp.text().unwrap_or_default();
                if status.is_success() {
                    messages(&body, is_stream)
                } else if body.contains("\"jsonrpc\"") {
                    // A protocol error the server phrased itself.
                    messages(&body, is_stream)
                } else {
                    id.map(|id| vec![failure(id, &refusal(status.as_u16(), &body))])
                        .unwrap_or_default()
                }
            }
        };
        for answer in answers {
            if protocol.is_none() {
                protocol = answer["result"]["protocolVersion"]
                    .as_str()
                    .map(str::to_owned);
            }
            writeln!(out, "{answer}")?;
        }
        out.flush()?;
    }
    Ok(())
}

fn starts_with(v: &HeaderValue, prefix: &str) -> bool {
    v.to_str().is_ok_and(|s| s.starts_with(prefix))
}

/// The JSON-RPC messages of an answer body: one JSON document, or the `data:` lines of
/// server-sent events (an event's data may span several lines).
fn messages(body: &str, is_stream: bool) -> Vec<Value> {
    if !is_stream {
        return serde_json::from_str(body)
            .map(|v| vec![v])
            .unwrap_or_default();
    }
    let mut out = Vec::new();
    for event in body.split("\n\n") {
        let data: Vec<&str> = event
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(str::trim_start)
            .collect();
        if let Ok(v) = serde_json::from_str::<Value>(&data.join("\n")) {
            out.push(v);
        }
    }
    out
}

/// What the server's refusal says, from its error envelope when it sent one.
fn refusal(status: u16, body: &str) -> String {
    let detail = serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| match &v["detail"] {
            Value::String(s) => Some(s.clone()),
            Value::Object(o) => o.get("message").and_then(Value::as_str).map(str::to_owned),
            _ => None,
        })
        .unwrap_or_else(|| body.chars().take(200).collect());
    match status {
        401 => format!("svc refused the token ({detail}); run `svc auth login` or set SVC_TOKEN"),
        _ => format!("svc answered {status}: {detail}"),
    }
}

fn failure(id: Value, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32000, "message": message}})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_events_and_json_bodies_become_messages() {
        let sse = "id: 1\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n\
                   data: {\"jsonrpc\":\"2.0\",\n\
                   data: \"method\":\"notifications/progress\"}\n\n";
        let got = messages(sse, true);
        assert_eq!(got.len(), 2);
        assert_eq!(got[1]["method"], "notifications/progress");
        assert_eq!(messages("{\"a\":1}", false), vec![json!({"a": 1})]);
        assert!(messages("", false).is_empty(), "a 202 has no message");
        assert!(refusal(401, "{\"detail\":\"Token revoked\"}").contains("Token revoked"));
    }
}
