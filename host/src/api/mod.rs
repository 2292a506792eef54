//! The HTTP surface: routes, the request pipeline (request id, client address, body limit,
//! error envelope), bearer authentication, and the OpenAPI document.

pub(crate) mod activity;
mod admin_groups;
pub(crate) mod admin_sessions;
mod admin_tokens;
mod admin_users;
mod ask;
mod auth;
mod body;
pub(crate) mod discovery;
pub mod encoded;
pub mod error;
mod export;
mod health;
pub(crate) mod marketplace;
mod me;
mod memory;
mod metadata;
mod observability;
mod operations;
mod pipeline;
pub(crate) mod query;
mod registry;
mod result_body;
pub(crate) mod scan;
mod scheduler;
mod scripts;
mod sessions;
mod sync;
pub(crate) mod telemetry;
mod ticketing;
mod types;
mod upload;
pub(crate) mod warmup;

use std::net::IpAddr;
use std::sync::Arc;
use svc_core::Error;

use poem::{Endpoint, Request, Response, Route};
use poem_openapi::auth::Bearer;
use poem_openapi::{OpenApiService, SecurityScheme, Tags};

use crate::connections::Connections;
use crate::state::AppState;
pub use error::{ApiError, ApiResult};

/// The server's version, reported by `/api/health` and response headers.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The oldest `svc` client this server still speaks to (sent on every `/api/*` response).
pub const MIN_COMPAT_CLI_VERSION: &str = "0.1.0";

#[derive(Tags)]
enum Tag {
    /// Liveness and versions.
    Health,
    /// Logging in and personal access tokens.
    Auth,
    /// Users (admin).
    Users,
    /// Groups, memberships and resource grants (admin).
    Access,
    /// The table registry (admin).
    Registry,
    /// Catalog, schema, sample and download.
    Discovery,
    /// SQL over registered tables.
    Query,
    /// The persistent metadata cache of remote tables.
    Metadata,
    /// Sync of materialized tables, scheduled scripts and the scheduler (admin).
    Operations,
    /// Agent session uploads and the telemetry pipeline.
    Telemetry,
    /// The audit timeline and saved observability views (admin).
    Activity,
    /// Corporate memory: contributions, review, the agents' bundle.
    Memory,
    /// The plugin marketplace: usage-ranked listings, submissions, curated syncs.
    Marketplace,
}

/// An empty success.
#[derive(poem_openapi::ApiResponse)]
pub(crate) enum NoContent {
    /// Done.
    #[oai(status = 204)]
    Done,
}

/// Request context attached by the pipeline before any handler runs.
#[derive(Debug, Clone)]
pub struct RequestMeta {
    /// Sanitized `X-Request-Id`, or a generated one; echoed in the response.
    pub request_id: String,
    /// The caller's address.
    pub client_ip: Option<IpAddr>,
}

impl RequestMeta {
    pub(crate) fn of(req: &Request) -> Self {
        req.extensions()
            .get::<RequestMeta>()
            .cloned()
            .unwrap_or_else(|| RequestMeta {
                request_id: new_request_id(),
                client_ip: None,
            })
    }

    /// The address as stored in audit rows.
    pub fn ip_string(&self) -> Option<String> {
        self.client_ip.map(ip_text)
    }
}

/// `ip` as its `Display` writes it. An IPv4 address, every request's in practice, is written
/// octet by octet: through `fmt` (a `write!` of four `u8`s, each through the integer
/// formatter's padding logic) it cost a cached sample 1,300 instructions (callgrind).
fn ip_text(ip: IpAddr) -> String {
    let IpAddr::V4(v4) = ip else {
        return ip.to_string();
    };
    let mut out = String::with_capacity(15);
    for (i, octet) in v4.octets().into_iter().enumerate() {
        if i > 0 {
            out.push('.');
        }
        if octet >= 100 {
            out.push(char::from(b'0' + octet / 100));
        }
        if octet >= 10 {
            out.push(char::from(b'0' + octet / 10 % 10));
        }
        out.push(char::from(b'0' + octet % 10));
    }
    out
}

/// `Authorization: Bearer <token>` — a session JWT or a personal access token.
#[derive(SecurityScheme)]
#[oai(ty = "bearer", bearer_format = "JWT", checker = "check_bearer")]
pub struct BearerAuth(svc_auth::Caller);

async fn check_bearer(req: &Request, bearer: Bearer) -> poem::Result<svc_auth::Caller> {
    let state = req
        .data::<Arc<AppState>>()
        .expect("state is attached to every route");
    let meta = RequestMeta::of(req);
    state
        .auth
        .resolve(
            &bearer.token,
            meta.ip_string(),
            Some(meta.request_id),
            req.extensions()
                .get::<crate::pages::session::ViaCookie>()
                .is_some(),
        )
        .await
        .map_err(|e| match e {
            svc_auth::ResolveError::Refused(f) => ApiError(Error::unauthorized(f.message())).into(),
            svc_auth::ResolveError::Store(e) => ApiError::from(e).into(),
        })
}

/// The caller of a route outside the OpenAPI service (`/mcp`, `/metrics`), from its
/// `Authorization: Bearer` header; or the 401 to answer, in the envelope and with the
/// `WWW-Authenticate` challenge clients look for.
pub(crate) async fn bearer_caller(
    state: &AppState,
    req: &Request,
) -> Result<svc_auth::Caller, Response> {
    use poem::error::ResponseError as _;
    let unauthorized = |message: &str| {
        let mut resp = ApiError(Error::unauthorized(message)).as_response();
        resp.headers_mut().insert(
            poem::http::header::WWW_AUTHENTICATE,
            poem::http::HeaderValue::from_static("Bearer"),
        );
        resp
    };
    let meta = RequestMeta::of(req);
    let Some(token) = req
        .headers()
        .get(poem::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        // The scheme's name is case-insensitive (RFC 9110 §11.1).
        .and_then(|v| {
            v.get(7..)
                .filter(|_| v[..7].eq_ignore_ascii_case("bearer "))
        })
        .map(str::trim)
        .filter(|t| !t.is_empty())
    else {
        return Err(unauthorized("Missing or invalid Authorization header"));
    };
    match state
        .auth
        .resolve(token, meta.ip_string(), Some(meta.request_id), false)
        .await
    {
        Ok(caller) => Ok(caller),
        Err(svc_auth::ResolveError::Refused(f)) => Err(unauthorized(f.message())),
        Err(svc_auth::ResolveError::Store(e)) => Err(ApiError::from(e).as_response()),
    }
}

impl BearerAuth {
    /// The caller, after checking they are an administrator (403 otherwise). Only for the
    /// endpoints that audit a refused attempt; every other admin endpoint takes [`AdminAuth`].
    fn admin(&self) -> ApiResult<&svc_auth::Caller> {
        if self.0.is_admin {
            Ok(&self.0)
        } else {
            Err(Error::forbidden("Admin access required").into())
        }
    }
}

// An administrator's bearer token: the same scheme as `BearerAuth` in the OpenAPI document
// (same name and doc text, so the document is unchanged), but refused with 403 before the
// handler runs when the caller is not an administrator, so an admin endpoint cannot forget
// the check.
/// `Authorization: Bearer <token>` — a session JWT or a personal access token.
#[derive(SecurityScheme)]
#[oai(
    rename = "BearerAuth",
    ty = "bearer",
    bearer_format = "JWT",
    checker = "check_admin"
)]
pub struct AdminAuth(svc_auth::Caller);

async fn check_admin(req: &Request, bearer: Bearer) -> poem::Result<svc_auth::Caller> {
    let caller = check_bearer(req, bearer).await?;
    if caller.is_admin {
        Ok(caller)
    } else {
        Err(ApiError(Error::forbidden("Admin access required")).into())
    }
}

/// Grouped because poem-openapi implements `OpenApi` for tuples of at most 16.
type Apis = (
    (
        health::HealthApi,
        auth::AuthApi,
        me::MeApi,
        admin_users::UsersApi,
        admin_tokens::AdminTokensApi,
        admin_groups::AccessApi,
    ),
    (
        registry::RegistryApi,
        discovery::DiscoveryApi,
        query::QueryApi,
        scan::ScanApi,
        metadata::MetadataApi,
        sync::SyncApi,
        scheduler::SchedulerApi,
        scripts::ScriptsApi,
        upload::UploadApi,
        ticketing::TicketingApi,
    ),
    (
        sessions::SessionsApi,
        admin_sessions::AdminSessionsApi,
        telemetry::TelemetryApi,
        ask::AskApi,
        activity::ActivityApi,
        observability::ObservabilityApi,
        memory::MemoryApi,
        memory::review::MemoryReviewApi,
        marketplace::MarketplaceApi,
    ),
);

fn service(state: &Arc<AppState>) -> OpenApiService<Apis, ()> {
    OpenApiService::new(apis(state), "svc", VERSION)
        .description("Data access and observability for analysts and their AI agents.")
}

/// Every operation group, each holding the state it serves from.
fn apis(state: &Arc<AppState>) -> Apis {
    (
        (
            health::HealthApi::new(state.clone()),
            auth::AuthApi {
                state: state.clone(),
            },
            me::MeApi {
                state: state.clone(),
            },
            admin_users::UsersApi {
                state: state.clone(),
            },
            admin_tokens::AdminTokensApi {
                state: state.clone(),
            },
            admin_groups::AccessApi {
                state: state.clone(),
            },
        ),
        (
            registry::RegistryApi {
                state: state.clone(),
            },
            discovery::DiscoveryApi {
                state: state.clone(),
            },
            query::QueryApi {
                state: state.clone(),
            },
            scan::ScanApi {
                state: state.clone(),
            },
            metadata::MetadataApi {
                state: state.clone(),
            },
            sync::SyncApi {
                state: state.clone(),
            },
            scheduler::SchedulerApi {
                state: state.clone(),
            },
            scripts::ScriptsApi {
                state: state.clone(),
            },
            upload::UploadApi {
                state: state.clone(),
            },
            ticketing::TicketingApi::new(state.clone()),
        ),
        (
            sessions::SessionsApi {
                state: state.clone(),
            },
            admin_sessions::AdminSessionsApi {
                state: state.clone(),
            },
            telemetry::TelemetryApi {
                state: state.clone(),
            },
            ask::AskApi {
                state: state.clone(),
            },
            activity::ActivityApi {
                state: state.clone(),
                health: Default::default(),
            },
            observability::ObservabilityApi {
                state: state.clone(),
            },
            memory::MemoryApi {
                state: state.clone(),
            },
            memory::review::MemoryReviewApi {
                state: state.clone(),
            },
            marketplace::MarketplaceApi {
                state: state.clone(),
            },
        ),
    )
}

/// The OpenAPI document (what `svc-server openapi` prints and `/api/openapi.json` serves).
///
/// Code generators refuse `allOf` over an enum (and then drop every operation using it);
/// poem-openapi writes a field of a named type that way when the field has its own doc
/// comment or default. So enum-typed fields carry neither: their enum documents them.
pub fn openapi_json(state: &Arc<AppState>) -> String {
    service(state).spec()
}

/// `/api/admin/usage/…` is the old name of `/api/admin/telemetry/…`: a permanent redirect
/// that keeps the method, body and query (308), so old clients and scripts keep working.
fn usage_alias(req: Request) -> Response {
    let path = req.uri().path();
    let rest = path.strip_prefix("/api/admin/usage").unwrap_or("");
    let mut location = format!("/api/admin/telemetry{rest}");
    if let Some(q) = req.uri().query() {
        location.push('?');
        location.push_str(q);
    }
    Response::builder()
        .status(poem::http::StatusCode::PERMANENT_REDIRECT)
        .header(poem::http::header::LOCATION, location)
        .finish()
}

/// The complete HTTP application.
///
/// `connections` learns which connection is handling a request (see [`crate::connections`]).
/// `metrics` is the Prometheus recorder behind `/metrics` (None: metrics are off).
pub fn app(
    state: Arc<AppState>,
    connections: Arc<Connections>,
    metrics: Option<svc_metrics::Exporter>,
) -> impl Endpoint<Output = Response> {
    let svc = service(&state);
    // The document is generated once, on first use: for `/api/openapi.json`'s body and for
    // the names of routes with parameters.
    let document = {
        let state = state.clone();
        let body = Arc::new(std::sync::OnceLock::<bytes::Bytes>::new());
        move || {
            body.get_or_init(|| bytes::Bytes::from(service(&state).spec()))
                .clone()
        }
    };
    let templates = crate::ops::metrics::RouteTemplates::from_openapi(document.clone());
    let spec = poem::endpoint::make_sync(move |_| {
        Response::builder()
            .content_type("application/json; charset=utf-8")
            .body(document())
    });
    // The API is served from both: its operations answer the service's own `/api/` paths
    // directly (see `pipeline::Pipeline` and `operations::Operations`), and the service
    // answers the rest (`/auth/…`) through the table.
    let api = Arc::new(poem::IntoEndpoint::into_endpoint(svc));
    let operations = operations::Operations::new(apis(&state), api.clone());
    let routes = crate::pages::routes(Route::new())
        .at("/api/openapi.json", spec)
        .at(
            "/api/admin/usage/*rest",
            poem::endpoint::make_sync(usage_alias),
        )
        .at("/mcp", crate::mcp::endpoint(state.clone()))
        .at(
            "/metrics",
            crate::ops::metrics::MetricsEndpoint::new(state.clone(), metrics),
        )
        .nest("/", api);
    pipeline::Pipeline::new(routes, operations, state, connections, templates)
}

/// A fresh correlation id: 32 lower-case hex digits, the shape a trace id has, so an id is
/// read the same whether tracing made it or not. Drawn from svc-trace's per-thread generator:
/// a v4 UUID asked the kernel for entropy on every request (a system call) and went through
/// `fmt`.
pub(crate) fn new_request_id() -> String {
    svc_trace::TraceId::random().hex()
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

    #[test]
    fn addresses_are_written_as_display_writes_them() {
        for octet in 0..=255u8 {
            for ip in [
                Ipv4Addr::new(octet, 0, 0, 1),
                Ipv4Addr::new(127, octet, 10, 255),
                Ipv4Addr::new(9, 99, octet, 100),
                Ipv4Addr::new(200, 1, 0, octet),
            ] {
                assert_eq!(super::ip_text(IpAddr::V4(ip)), ip.to_string());
            }
        }
        for ip in [
            Ipv6Addr::LOCALHOST,
            Ipv4Addr::new(10, 0, 0, 1).to_ipv6_mapped(),
        ] {
            assert_eq!(super::ip_text(IpAddr::V6(ip)), ip.to_string());
        }
    }
}
