//! `GET /metrics`: the Prometheus exposition. On the main listener only administrators may
//! read it (series names reveal what the server does and how busy it is); with
//! `SVC_METRICS_LISTEN` a second listener serves it to anyone who can reach that address,
//! for a scraper on a private network.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::Context as _;
use poem::listener::{Listener as _, TcpListener};
use poem::{Endpoint, Request, Response, Route};
use svc_core::{Error, ErrorKind};
use svc_metrics::Exporter;

use crate::api::ApiError;
use crate::state::AppState;

/// The exposition's media type (text format 0.0.4).
const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// `GET /metrics` on the main listener.
pub struct MetricsEndpoint {
    state: Arc<AppState>,
    exporter: Option<Exporter>,
}

impl MetricsEndpoint {
    /// The endpoint; `exporter` is None when metrics are off (it answers 404 then).
    pub fn new(state: Arc<AppState>, exporter: Option<Exporter>) -> Self {
        Self { state, exporter }
    }
}

impl Endpoint for MetricsEndpoint {
    type Output = Response;

    async fn call(&self, req: Request) -> poem::Result<Response> {
        use poem::error::ResponseError as _;
        let caller = match crate::api::bearer_caller(&self.state, &req).await {
            Ok(caller) => caller,
            Err(refused) => return Ok(refused),
        };
        if !caller.is_admin {
            return Ok(ApiError(Error::forbidden("Admin access required")).as_response());
        }
        Ok(exposition(self.exporter.as_ref()))
    }
}

fn exposition(exporter: Option<&Exporter>) -> Response {
    use poem::error::ResponseError as _;
    match exporter {
        Some(exporter) => Response::builder()
            .content_type(CONTENT_TYPE)
            .body(exporter.render()),
        None => ApiError(Error::new(
            ErrorKind::NotFound,
            "Metrics are off on this server (SVC_METRICS)",
        ))
        .as_response(),
    }
}

/// Serves `/metrics`, without authentication, on its own address until the process ends.
pub async fn serve_separately(listen: &str, exporter: Exporter) -> anyhow::Result<()> {
    let acceptor = TcpListener::bind(listen.to_owned())
        .into_acceptor()
        .await
        .with_context(|| format!("cannot listen for metrics on {listen}"))?;
    tracing::info!("metrics on http://{listen}/metrics (SVC_METRICS_LISTEN)");
    let app = Route::new().at(
        "/metrics",
        poem::endpoint::make_sync(move |_| exposition(Some(&exporter))),
    );
    tokio::spawn(async move {
        if let Err(e) = poem::Server::new_with_acceptor(acceptor).run(app).await {
            tracing::error!(error = %e, "the metrics listener stopped");
        }
    });
    Ok(())
}

/// Folds histogram samples into buckets every few seconds, so an unscraped server's
/// memory stays flat.
pub fn keep_up(exporter: Exporter) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        loop {
            tick.tick().await;
            exporter.upkeep();
        }
    });
}

/// Route templates as operators read them (`/api/v2/schema/{table_id}`), from the patterns the
/// router matched. poem-openapi numbers its parameters (`:param0`), so those routes are named
/// from the OpenAPI document's paths; the rest (pages, and API routes without parameters) name
/// themselves, with a `:name` written `{name}`. The document is read on the first numbered
/// pattern, not at start-up: generating it runs a few MiB of code an idle server never needs.
/// A pattern is named once and the name kept for the life of the process (`'static`, so a
/// request's metric labels need no reference counting): the set is the router's, so it stays
/// small.
pub struct RouteTemplates {
    named: RwLock<HashMap<Arc<str>, &'static str, svc_core::hash::CacheHasher>>,
    /// The OpenAPI document's text, asked for once.
    document: Box<dyn Fn() -> bytes::Bytes + Send + Sync>,
    seeded: std::sync::Once,
}

impl std::fmt::Debug for RouteTemplates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RouteTemplates")
            .field("named", &self.named)
            .finish_non_exhaustive()
    }
}

impl RouteTemplates {
    /// Names numbered patterns from the `paths` of the OpenAPI document `document` returns.
    pub fn from_openapi(document: impl Fn() -> bytes::Bytes + Send + Sync + 'static) -> Self {
        Self {
            named: RwLock::default(),
            document: Box::new(document),
            seeded: std::sync::Once::new(),
        }
    }

    /// The template of a matched pattern.
    pub fn name(&self, pattern: &Arc<str>) -> &'static str {
        if let Some(&named) = self.named.read().expect("route names").get(pattern) {
            return named;
        }
        if has_numbered_parameter(pattern) && !self.seeded.is_completed() {
            self.seeded.call_once(|| self.seed());
            return self.name(pattern);
        }
        let mut known = self.named.write().expect("route names");
        if let Some(&named) = known.get(pattern) {
            return named;
        }
        let named = intern(braced(pattern));
        known.insert(pattern.clone(), named);
        named
    }

    /// Adds every path of the document under its numbered pattern.
    fn seed(&self) {
        let document = (self.document)();
        let paths = serde_json::from_slice::<serde_json::Value>(&document)
            .ok()
            .and_then(|doc| doc.get("paths")?.as_object().cloned())
            .unwrap_or_default();
        let mut known = self.named.write().expect("route names");
        for path in paths.keys() {
            known
                .entry(Arc::from(numbered(path)))
                .or_insert_with(|| intern(path.clone()));
        }
    }
}

/// Whether a pattern has a parameter poem-openapi numbered (`:param0`).
fn has_numbered_parameter(pattern: &str) -> bool {
    pattern.split('/').any(|segment| {
        segment
            .strip_prefix(":param")
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    })
}

/// A route name kept for the life of the process.
fn intern(name: String) -> &'static str {
    Box::leak(name.into_boxed_str())
}

/// An OpenAPI path as poem-openapi's router writes it: `{table_id}` → `:param0`.
fn numbered(path: &str) -> String {
    let mut n = 0;
    path.split('/')
        .map(|segment| {
            if segment.starts_with('{') && segment.ends_with('}') {
                n += 1;
                format!(":param{}", n - 1)
            } else {
                segment.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// A router pattern in template form: `:name` and `*name` → `{name}`.
fn braced(pattern: &str) -> String {
    pattern
        .split('/')
        .map(|segment| match segment.strip_prefix([':', '*']) {
            Some(name) => format!("{{{name}}}"),
            None => segment.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_are_named_from_the_document_or_their_own_parameter_names() {
        let doc = r#"{"paths": {"/api/v2/schema/{table_id}": {}, "/api/tokens/{id}": {}}}"#;
        let asked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = asked.clone();
        let routes = RouteTemplates::from_openapi(move || {
            counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            bytes::Bytes::from_static(doc.as_bytes())
        });
        let name = |p: &str| routes.name(&Arc::from(p));
        let times_asked = || asked.load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(name("/mcp"), "/mcp");
        assert_eq!(
            times_asked(),
            0,
            "a pattern without parameters needs no document"
        );
        assert_eq!(name("/api/v2/schema/:param0"), "/api/v2/schema/{table_id}");
        assert_eq!(name("/api/tokens/:param0"), "/api/tokens/{id}");
        assert_eq!(
            name("/admin/sessions/:username/:file"),
            "/admin/sessions/{username}/{file}"
        );
        assert_eq!(name("/static/*path"), "/static/{path}");
        assert_eq!(times_asked(), 1, "the document is read once");
    }
}
