//! `/mcp`: the Model Context Protocol for agents, on the official SDK (`rmcp`) over streamable
//! HTTP. The transport and JSON-RPC are rmcp's; what a tool does is the API's own code path —
//! the same access check, row filters, quotas and audit rows — so MCP is never a way around
//! them. `svc mcp` in the client forwards a local stdio session here.
//!
//! Every request is authenticated here, before rmcp sees it (a PAT or session JWT as bearer;
//! a revoked token fails its very next call), and the caller rides along in the request's
//! extensions, where rmcp hands them to the tool. The server is stateless: each POST carries
//! its own token and holds nothing after it, so a thousand dropped sessions cost nothing.

mod args;
mod results;
mod specs;
mod tools;

use std::sync::Arc;

use futures::StreamExt as _;
use http_body_util::{BodyExt as _, Full};
use poem::{Endpoint, Request, Response};
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use svc_store::audit::ClientKind;
use tower_service::Service as _;

use crate::state::AppState;

pub use results::McpLimits;
use tools::Tools;

/// The `/mcp` endpoint.
pub struct McpEndpoint {
    state: Arc<AppState>,
    service: StreamableHttpService<Tools, NeverSessionManager>,
}

/// The endpoint serving the tools over `state`.
pub fn endpoint(state: Arc<AppState>) -> McpEndpoint {
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        // Every request carries a bearer token checked before rmcp runs, so the DNS-rebinding
        // guard for unauthenticated local servers would only refuse real host names.
        .disable_allowed_hosts()
        .with_max_request_body_bytes(state.config.max_body_bytes.max(64 << 10));
    let for_tools = state.clone();
    let service = StreamableHttpService::new(
        move || Ok(Tools::new(for_tools.clone())),
        Arc::new(NeverSessionManager::default()),
        config,
    );
    McpEndpoint { state, service }
}

impl Endpoint for McpEndpoint {
    type Output = Response;

    async fn call(&self, req: Request) -> poem::Result<Response> {
        let mut caller = match crate::api::bearer_caller(&self.state, &req).await {
            Ok(c) => c,
            Err(refused) => return Ok(refused),
        };
        caller.actor.client_kind = ClientKind::Mcp;

        let (method, uri, headers) = (
            req.method().clone(),
            req.uri().clone(),
            req.headers().clone(),
        );
        // The pipeline has already bounded the body.
        let body = req.into_body().into_bytes().await?;
        let mut forwarded = poem::http::Request::new(Full::new(body));
        *forwarded.method_mut() = method;
        *forwarded.uri_mut() = uri;
        *forwarded.headers_mut() = headers;
        forwarded.extensions_mut().insert(caller);
        if let Some(trace) = svc_trace::current() {
            forwarded.extensions_mut().insert(trace);
        }
        let answer = match self.service.clone().call(forwarded).await {
            Ok(r) => r,
            Err(never) => match never {},
        };
        let (parts, body) = answer.into_parts();
        // JSON answers arrive whole; an SSE answer streams frame by frame.
        let chunks = body
            .into_data_stream()
            .map(|chunk| chunk.map_err(std::io::Error::other));
        let mut resp = Response::builder()
            .status(parts.status)
            .body(poem::Body::from_bytes_stream(chunks));
        resp.headers_mut().extend(parts.headers);
        Ok(resp)
    }
}
