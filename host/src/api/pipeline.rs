//! The request pipeline: what runs before and after every endpoint. The connection is
//! marked busy, a page's session cookie stands in for a bearer token, the body gets its
//! deadline and limit, the request its id, client address, log tag and trace; after the
//! endpoint come metrics, the error envelope and the version headers.
//!
//! One endpoint, [`Pipeline`], does it all around the route table, in place of poem's `data`
//! and `around` middleware: each middleware layer is an async call holding its own copy of
//! the request (472 bytes) besides the future under it, and the stack was copied again by
//! every layer that moved or boxed it (gdb on `memcpy`, one cached sample: a 7 KB outermost
//! future, and 3.6 KB twice for the instrumented call under it). The route table's future is
//! boxed as soon as it is made, so what the wrappers move is a pointer. And a request for
//! the OpenAPI service's own paths goes to its operations directly ([`Operations`]), not
//! through the route table that nests the service: that cost two more layers, a radix
//! match, and the matched pattern built twice.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use poem::http::{HeaderName, HeaderValue};
use poem::{Endpoint, IntoResponse, PathPattern, Request, Response, Route};
use svc_trace::{Instrument as _, LogTag, Tagged};

use super::operations::{Operations, UNMATCHED};
use super::{body, error, RequestMeta, MIN_COMPAT_CLI_VERSION, VERSION};
use crate::connections::Connections;
use crate::ops::metrics::RouteTemplates;
use crate::state::AppState;

/// Headers the pipeline reads or writes on every request, made once: a header named by its
/// text is parsed and checked on every use (callgrind: about 1,900 instructions of each
/// `/api/me`).
static X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
static X_SVC_VERSION: HeaderName = HeaderName::from_static("x-svc-version");
static X_MIN_COMPAT_CLI_VERSION: HeaderName = HeaderName::from_static("x-min-compat-cli-version");
static SVC_VERSION: HeaderValue = HeaderValue::from_static(VERSION);
static MIN_COMPAT_CLI: HeaderValue = HeaderValue::from_static(MIN_COMPAT_CLI_VERSION);

/// Paths under `/api/` that the route table serves outside the OpenAPI service (the
/// document, its page, the old telemetry paths' redirect; one ending in `/` stands for the
/// paths under it). Every other `/api/` path is the service's.
const OUTSIDE_THE_SERVICE: [&str; 3] = ["/api/openapi.json", "/api/docs", "/api/admin/usage/"];

/// Whether a request for `path` goes to the OpenAPI service directly.
fn is_the_services(path: &str) -> bool {
    path.starts_with("/api/")
        && !OUTSIDE_THE_SERVICE.iter().any(|outside| {
            if outside.ends_with('/') {
                path.starts_with(outside)
            } else {
                path == *outside
            }
        })
}

/// The whole application: the route table and the OpenAPI service behind the pipeline.
pub(super) struct Pipeline {
    /// Every route, the service included (nested at the root).
    routes: Route,
    /// The OpenAPI service's operations, for the `/api/` paths that are its own
    /// ([`is_the_services`]).
    operations: Operations,
    state: Arc<AppState>,
    connections: Arc<Connections>,
    templates: RouteTemplates,
}

impl Pipeline {
    /// `operations` are those of the service `routes` nests; `templates` names a matched
    /// route for metrics and trace spans.
    pub(super) fn new(
        routes: Route,
        operations: Operations,
        state: Arc<AppState>,
        connections: Arc<Connections>,
        templates: RouteTemplates,
    ) -> Self {
        Self {
            routes,
            operations,
            state,
            connections,
            templates,
        }
    }

    /// Runs before and after the endpoint: request id, client address, body limit, log tag
    /// and trace, metrics, envelope. `body_limit` is the most bytes the body may hold, given
    /// only for a body to check (not for none, nor for an upload, which has its own limit).
    async fn answer(&self, mut req: Request, body_limit: Option<usize>) -> Response {
        let given = req
            .headers()
            .get(&X_REQUEST_ID)
            .and_then(|v| v.to_str().ok())
            .filter(|v| is_sane_request_id(v))
            .map(str::to_string);
        // Reads before the endpoint are boxed and made only when needed: held inline, their
        // futures would be copied with this one by every request.
        if svc_trace::is_on() && may_carry_mcp_traceparent(&req) {
            Box::pin(adopt_mcp_traceparent(&mut req, body_limit)).await;
        }
        let method = svc_metrics::http::method_label(req.method().as_str());
        let (mut root, request_id) = crate::ops::traces::request_span(method, req.headers(), given);
        let tag = LogTag::new(method, &request_id);
        let _active = svc_metrics::http::active(method);
        let began = Instant::now();
        let client_ip = client_ip(&req, self.state.config.trust_proxy);
        req.extensions_mut().insert(RequestMeta {
            request_id: request_id.clone(),
            client_ip,
        });
        let is_api = req.uri().path().starts_with("/api/");

        let limited = match body_limit {
            Some(max) => Box::pin(body::check(&mut req, max, is_api)).await,
            None => Ok(()),
        };
        let (mut resp, route) = match limited {
            Err(e) => (poem::error::ResponseError::as_response(&e), None),
            Ok(()) => match Tagged::new(
                self.route(req).in_context(root.context()),
                Some(tag.clone()),
            )
            .await
            {
                Ok(r) => {
                    let r = r.into_response();
                    let route = self.route_name(r.data::<PathPattern>());
                    (r, route)
                }
                Err(e) => {
                    let route = self.route_name(e.data::<PathPattern>());
                    (error::render(e), route)
                }
            },
        };
        let status = resp.status().as_u16();
        let took = began.elapsed();
        tag.in_scope(|| tracing::debug!(status, took_ms = took.as_secs_f64() * 1e3, "answered"));
        crate::ops::traces::finish_span(&mut root, method, route, status);
        drop(root);
        svc_metrics::http::request(method, route, status, took);
        let h = resp.headers_mut();
        if let Ok(v) = HeaderValue::from_str(&request_id) {
            h.insert(X_REQUEST_ID.clone(), v);
        }
        if is_api {
            h.insert(X_SVC_VERSION.clone(), SVC_VERSION.clone());
            h.insert(X_MIN_COMPAT_CLI_VERSION.clone(), MIN_COMPAT_CLI.clone());
        }
        resp
    }
}

impl Pipeline {
    /// The endpoint's answer, boxed at once (see the module doc).
    fn route(&self, req: Request) -> BoxFuture<'_, poem::Result<Response>> {
        if is_the_services(req.uri().path()) {
            self.operations.call(req)
        } else {
            Box::pin(self.routes.call(req))
        }
    }

    /// The template of the route a request matched, if it matched one.
    fn route_name(&self, pattern: Option<&PathPattern>) -> Option<&'static str> {
        pattern
            .filter(|p| &*p.0 != UNMATCHED)
            .map(|p| self.templates.name(&p.0))
    }
}

impl Endpoint for Pipeline {
    type Output = Response;

    async fn call(&self, mut req: Request) -> poem::Result<Response> {
        let _busy = self.connections.begin(&req.remote_addr().0);
        // An upload streams to disk under its own size limit and stall timeout.
        let upload = super::upload::is_upload(&req);
        // Asked once (two header lookups), and not for an upload, which has its own limits.
        let has_body = !upload && body::is_present(&req);
        if has_body {
            deadline_body(&mut req, self.connections.limits().request_read);
        } else if upload && !req.headers().contains_key(poem::http::header::CONTENT_TYPE) {
            // Agents send raw files without a type; a body is bytes whatever it says.
            req.headers_mut().insert(
                poem::http::header::CONTENT_TYPE,
                poem::http::HeaderValue::from_static("application/octet-stream"),
            );
        }
        let body_limit = has_body.then_some(self.state.config.max_body_bytes);
        // A page's script calls the API with its session cookie (and CSRF token).
        if req.uri().path().starts_with("/api/") {
            if let Err(refused) = crate::pages::session::bridge(&mut req, &self.state.auth) {
                return Ok(*refused);
            }
        }
        req.extensions_mut().insert(self.state.clone());
        Ok(self.answer(req, body_limit).await)
    }
}

/// Whether `req` is an MCP call with no `traceparent` header, whose body may carry one.
/// Asked before [`adopt_mcp_traceparent`] is boxed: every other traced request would pay
/// for the box and its poll.
fn may_carry_mcp_traceparent(req: &Request) -> bool {
    req.method() == poem::http::Method::POST
        && req.uri().path() == "/mcp"
        && crate::ops::traces::traceparent(req.headers()).is_none()
}

/// With tracing on, an MCP call's `params._meta.traceparent` stands in for a missing
/// `traceparent` header (for calls [`may_carry_mcp_traceparent`] lets through). Only a body
/// that declares a length within the limit is read here (the limit check that follows
/// refuses the rest); it is put back as it was.
async fn adopt_mcp_traceparent(req: &mut Request, max_body: Option<usize>) {
    let declared = req
        .headers()
        .get(poem::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    let Some(length) = declared else { return };
    if max_body.is_some_and(|max| length > max) {
        return;
    }
    // A body that cannot be read now could not be read by the endpoint either.
    let body = req.take_body().into_bytes().await.unwrap_or_default();
    if let Some(parent) = crate::ops::traces::mcp_traceparent(&body)
        .and_then(|v| poem::http::HeaderValue::from_str(&v).ok())
    {
        req.headers_mut().insert("traceparent", parent);
    }
    req.set_body(body);
}

/// A request body (the caller has seen there is one) must arrive within `limit` of the
/// request's head (a slow sender holds a connection and a handler); past it the read fails
/// and the request gets 400.
fn deadline_body(req: &mut Request, limit: Duration) {
    let mut expired = Box::pin(tokio::time::sleep(limit));
    let mut body = Box::pin(req.take_body().into_bytes_stream());
    let chunks = futures::stream::poll_fn(move |cx| {
        use futures::Stream;
        use std::future::Future;
        use std::task::Poll;
        match body.as_mut().poll_next(cx) {
            Poll::Pending => match expired.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "the request body did not arrive in time",
                )))),
                Poll::Pending => Poll::Pending,
            },
            ready => ready,
        }
    });
    req.set_body(poem::Body::from_bytes_stream(chunks));
}

fn is_sane_request_id(v: &str) -> bool {
    (1..=64).contains(&v.len())
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

/// The peer address, or with `trust_proxy` the last `X-Forwarded-For` hop (the one our own
/// proxy appended; earlier hops are client-controlled).
fn client_ip(req: &Request, trust_proxy: bool) -> Option<IpAddr> {
    if trust_proxy {
        let forwarded = req
            .headers()
            .get("x-forwarded-for")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.rsplit(',').next())
            .and_then(|v| v.trim().parse().ok());
        if forwarded.is_some() {
            return forwarded;
        }
    }
    req.remote_addr().as_socket_addr().map(|a| a.ip())
}

#[cfg(test)]
mod tests {
    use super::is_the_services;

    #[test]
    fn the_services_paths_are_the_api_ones_the_route_table_does_not_serve() {
        for path in [
            "/api/v2/catalog",
            "/api/v2/sample/orders",
            "/api/openapi.jsonx",
            "/api/admin/usage",
            "/api/admin/telemetry/x",
        ] {
            assert!(is_the_services(path), "{path}");
        }
        for path in [
            "/api/openapi.json",
            "/api/docs",
            "/api/admin/usage/",
            "/api/admin/usage/sessions?x=1",
            "/auth/token",
            "/mcp",
            "/",
            "/api",
        ] {
            assert!(!is_the_services(path), "{path}");
        }
    }
}
