//! HTTP to the server: bearer auth, timeouts, the version handshake, and turning error
//! responses into [`CliError`]s rendered from the server's `detail`.

use std::time::Duration;

use reqwest::blocking::{Client as Http, RequestBuilder, Response};
use reqwest::Method;
use serde_json::Value;

use crate::config::Target;
use crate::exit::{CliError, Exit, Result};
use crate::render;

/// Read timeout of ordinary calls (spec "Limits").
pub const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// This client's version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// A configured connection to one server.
pub struct Client {
    target: Target,
    http: Http,
    long: Http,
}

impl Client {
    /// A client for a server and token; `long_timeout` applies to queries and scans.
    pub fn new(target: Target, long_timeout: Duration) -> Self {
        let build = |t: Duration| {
            Http::builder()
                .timeout(t)
                .connect_timeout(Duration::from_secs(10))
                .user_agent(format!("svc/{VERSION}"))
                .build()
                .expect("an HTTP client builds")
        };
        Self {
            target,
            http: build(READ_TIMEOUT),
            long: build(long_timeout),
        }
    }

    /// The server URL.
    pub fn server(&self) -> &str {
        &self.target.server
    }

    pub(crate) fn request(&self, long: bool, method: Method, path: &str) -> Result<RequestBuilder> {
        let http = if long { &self.long } else { &self.http };
        let rb = http.request(method, format!("{}{path}", self.target.server));
        Ok(match &self.target.token {
            Some(t) => rb.bearer_auth(t),
            None => rb,
        })
    }

    /// Sends and checks: transport errors, the version handshake, then error statuses.
    pub fn send(&self, rb: RequestBuilder) -> Result<Response> {
        let resp = rb.send().map_err(|e| transport(&self.target.server, &e))?;
        check_version(&resp)?;
        if resp.status().is_success() {
            return Ok(resp);
        }
        let status = resp.status().as_u16();
        let text = resp.text().unwrap_or_default();
        Err(render::server_error(status, &text))
    }

    /// A JSON call on the ordinary timeout.
    pub fn json(&self, method: Method, path: &str, body: Option<&Value>) -> Result<Value> {
        let mut rb = self.request(false, method, path)?;
        if let Some(b) = body {
            rb = rb.json(b);
        }
        let resp = self.send(rb)?;
        if resp.status().as_u16() == 204 {
            return Ok(Value::Null);
        }
        resp.json().map_err(|e| {
            CliError::new(
                Exit::Server,
                format!("Error: the server answered something that is not JSON: {e}"),
            )
        })
    }

    /// GET a JSON document.
    pub fn get(&self, path: &str) -> Result<Value> {
        self.json(Method::GET, path, None)
    }

    /// GET on the long timeout with `If-None-Match`; `None` when the server says the copy is
    /// current (304).
    pub fn download(&self, path: &str, etag: Option<&str>) -> Result<Option<Response>> {
        let mut rb = self.request(true, Method::GET, path)?;
        if let Some(tag) = etag {
            rb = rb.header("if-none-match", tag);
        }
        let resp = rb.send().map_err(|e| transport(&self.target.server, &e))?;
        check_version(&resp)?;
        if resp.status().as_u16() == 304 {
            return Ok(None);
        }
        if resp.status().is_success() {
            return Ok(Some(resp));
        }
        let status = resp.status().as_u16();
        Err(render::server_error(
            status,
            &resp.text().unwrap_or_default(),
        ))
    }

    /// Sends a streamed body (`method` PUT or POST) and reads the JSON answer. No overall
    /// timeout: an upload takes as long as its size needs; the server abandons one that stalls.
    pub fn upload_stream(
        &self,
        method: Method,
        path: &str,
        content_type: &str,
        body: reqwest::blocking::Body,
    ) -> Result<Value> {
        let http = Http::builder()
            .timeout(None)
            .connect_timeout(Duration::from_secs(10))
            .user_agent(format!("svc/{VERSION}"))
            .build()
            .expect("an HTTP client builds");
        let mut rb = http
            .request(method, format!("{}{path}", self.target.server))
            .header("content-type", content_type)
            .body(body);
        if let Some(t) = &self.target.token {
            rb = rb.bearer_auth(t);
        }
        let resp = self.send(rb)?;
        resp.json().map_err(|e| {
            CliError::new(
                Exit::Server,
                format!("Error: the server answered something that is not JSON: {e}"),
            )
        })
    }

    /// POST JSON on the long timeout, returning the raw response to stream.
    pub fn post_long(&self, path: &str, body: &Value) -> Result<Response> {
        let rb = self.request(true, Method::POST, path)?.json(body);
        self.send(rb)
    }
}

/// One line plus a hint for a call that never got an HTTP answer.
fn transport(server: &str, e: &reqwest::Error) -> CliError {
    if e.is_timeout() {
        return CliError::new(
            Exit::Server,
            format!("Error: {server} did not answer in time"),
        )
        .hint("narrow the query (WHERE, LIMIT) or raise --timeout");
    }
    if e.is_connect() {
        return CliError::new(Exit::Server, format!("Error: cannot connect to {server}"))
            .hint("is the server running? check the URL (svc auth login --server, SVC_SERVER)");
    }
    CliError::new(
        Exit::Server,
        format!("Error: talking to {server} failed: {e}"),
    )
}

/// Refuses to go on when the server needs a newer client.
fn check_version(resp: &Response) -> Result<()> {
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let (Some(min), server) = (header("x-min-compat-cli-version"), header("x-svc-version")) else {
        return Ok(());
    };
    if older(VERSION, &min) {
        return Err(CliError::usage(format!(
            "error: svc {VERSION} is too old for server {} (needs at least {min})",
            server.as_deref().unwrap_or("?")
        ))
        .hint(format!("install svc {min} or newer")));
    }
    Ok(())
}

/// Whether dotted version `a` is older than `b` (unparseable parts count as 0).
pub fn older(a: &str, b: &str) -> bool {
    let parse = |v: &str| -> Vec<u64> {
        v.split(['.', '-', '+'])
            .take(3)
            .map(|p| p.parse().unwrap_or(0))
            .collect()
    };
    parse(a) < parse(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_order() {
        assert!(older("0.1.0", "0.2.0"));
        assert!(older("0.9.9", "0.10.0"));
        assert!(!older("0.1.0", "0.1.0"));
        assert!(!older("1.0.0", "0.9.0"));
    }
}
