//! The web pages over HTTP: routes, the browser session (cookie and CSRF token), the
//! embedded assets and the old paths' redirects. What a page shows comes from the same
//! services and store reads as its JSON twin (named on every page); `svc-pages` renders it.

mod access;
mod activity;
mod catalog;
mod login;
mod marketplace;
mod memory;
mod profile;
pub mod respond;
pub mod session;
mod sessions;
mod tables;
mod telemetry;
mod tokens;
mod users;

use std::sync::Arc;

use poem::http::{header, StatusCode};
use poem::web::Data;
use poem::{get, handler, post, Body, Request, Response, Route};

use crate::state::AppState;

/// Adds every page route.
pub fn routes(route: Route) -> Route {
    route
        .at("/", get(home))
        .at("/login", get(login::form_page).post(login::submit))
        .at("/logout", post(login::logout))
        .at("/catalog", get(catalog::index))
        .at("/catalog/:table_id", get(catalog::table))
        .at("/admin/activity", get(activity::index))
        .at("/corporate-memory", get(memory::index))
        .at("/corporate-memory/decide", post(memory::decide))
        .at("/corporate-memory/resolve", post(memory::resolve))
        .at("/admin/sessions", get(sessions::index))
        .at("/admin/sessions/:username/:file", get(sessions::transcript))
        .at("/admin/telemetry", get(telemetry::index))
        .at("/marketplace", get(marketplace::index))
        .at("/marketplace/item", get(marketplace::item))
        .at("/profile", get(profile::index))
        .at("/tokens", get(profile::index))
        .at("/profile/sessions", get(users::mine))
        .at("/admin/users", get(users::index))
        .at("/admin/users/:id", get(users::detail))
        .at(
            "/admin/groups",
            get(users::groups_page).post(users::create_group),
        )
        .at("/admin/access", get(access::index).post(access::save))
        .at("/admin/tokens", get(tokens::index))
        .at("/admin/tables", get(tables::index))
        .at("/admin/tables/register", post(tables::register))
        .at("/admin/tables/update", post(tables::update))
        .at("/admin/tables/delete", post(tables::delete))
        .at("/admin/tables/warmup/events", get(tables::warmup_log))
        .at("/activity-center", get(redirect_activity_center))
        .at("/admin/scheduler-runs", get(redirect_scheduler_runs))
        .at("/admin/usage", get(redirect_usage))
        .at("/static/:file", get(asset))
        .at("/api/docs", get(api_docs))
}

/// Swagger UI over `/api/openapi.json`: public, like the document it shows.
#[handler]
fn api_docs() -> Response {
    respond::page(&svc_pages::views::ApiDocsPage::default())
}

#[handler]
async fn home(req: &Request, state: Data<&Arc<AppState>>) -> Response {
    match session::signed_in(&state, req).await {
        Ok(_) => respond::see_other("/catalog"),
        Err(to_login) => to_login,
    }
}

/// A permanent redirect that keeps the method and, when `keep_query`, the query string.
fn moved(req: &Request, to: &str, keep_query: bool) -> Response {
    let mut location = to.to_owned();
    if let Some(q) = req.uri().query().filter(|q| keep_query && !q.is_empty()) {
        location.push(if to.contains('?') { '&' } else { '?' });
        location.push_str(q);
    }
    Response::builder()
        .status(StatusCode::PERMANENT_REDIRECT)
        .header(header::LOCATION, location)
        .finish()
}

#[handler]
fn redirect_activity_center(req: &Request) -> Response {
    moved(req, "/admin/activity", true)
}

#[handler]
fn redirect_scheduler_runs(req: &Request) -> Response {
    moved(req, "/admin/activity?source=scheduler", true)
}

#[handler]
fn redirect_usage(req: &Request) -> Response {
    moved(req, "/admin/telemetry", true)
}

/// An embedded asset: cached for a year (its name changes with its content), compressed with
/// brotli or gzip when the browser accepts it.
#[handler]
fn asset(req: &Request) -> Response {
    let Some(asset) = svc_pages::assets::find(req.uri().path()) else {
        return Response::builder().status(StatusCode::NOT_FOUND).finish();
    };
    let accepted = req
        .headers()
        .get(header::ACCEPT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let builder = Response::builder()
        .header(header::CONTENT_TYPE, asset.content_type)
        .header(header::CACHE_CONTROL, "public, max-age=31536000, immutable")
        .header(header::X_CONTENT_TYPE_OPTIONS, "nosniff")
        .header(header::VARY, "Accept-Encoding");
    if accepts(accepted, "br") {
        builder
            .header(header::CONTENT_ENCODING, "br")
            .body(Body::from_bytes(bytes::Bytes::from_static(asset.brotli)))
    } else if accepts(accepted, "gzip") {
        builder
            .header(header::CONTENT_ENCODING, "gzip")
            .body(Body::from_bytes(bytes::Bytes::from_static(asset.gzipped())))
    } else {
        builder.body(Body::from_bytes(bytes::Bytes::from_static(asset.plain())))
    }
}

/// Whether an `Accept-Encoding` value accepts `coding`: named with a non-zero weight
/// (`br;q=0` refuses it), or `*` with one (RFC 9110 §12.5.3).
fn accepts(header: &str, coding: &str) -> bool {
    let weight = |name: &str| {
        header.split(',').find_map(|item| {
            let mut parts = item.split(';');
            let token = parts.next()?.trim();
            token.eq_ignore_ascii_case(name).then(|| {
                parts
                    .find_map(|p| p.trim().strip_prefix("q="))
                    .and_then(|q| q.trim().parse::<f32>().ok())
                    .unwrap_or(1.0)
            })
        })
    };
    weight(coding)
        .or_else(|| weight("*"))
        .is_some_and(|q| q > 0.0)
}

/// A form body's fields, in order (a name may repeat: checkboxes).
pub(crate) struct Form(Vec<(String, String)>);

impl Form {
    /// Reads an `application/x-www-form-urlencoded` body.
    pub(crate) async fn read(body: Body) -> Self {
        let bytes = body.into_vec().await.unwrap_or_default();
        Self(form_urlencoded::parse(&bytes).into_owned().collect())
    }

    /// The first value of a field.
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The first value of a field, trimmed, when not empty.
    pub(crate) fn text(&self, name: &str) -> Option<String> {
        self.get(name)
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
    }

    /// The 1-based page number a list was asked for (`page`), 1 when absent or not one.
    pub(crate) fn page(&self) -> usize {
        self.get("page")
            .and_then(|p| p.parse().ok())
            .filter(|p| *p >= 1)
            .unwrap_or(1)
    }

    /// Every value of a field.
    pub(crate) fn all(&self, name: &str) -> Vec<String> {
        self.0
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .collect()
    }
}

/// A query string's fields.
pub(crate) fn query(req: &Request) -> Form {
    Form(
        form_urlencoded::parse(req.uri().query().unwrap_or("").as_bytes())
            .into_owned()
            .collect(),
    )
}

/// The previous and next links of page `page` (1-based) of a list of `total` rows shown
/// `per_page` at a time: `path?<kept filters>&page=<n>`, so the filter survives paging.
pub(crate) fn pager(
    path: &str,
    kept: &[(&str, &str)],
    page: usize,
    per_page: usize,
    total: usize,
) -> (Option<String>, Option<String>) {
    let sep = if path.contains('?') { '&' } else { '?' };
    let link = |n: usize| {
        let mut url = format!("{path}{sep}");
        for (key, value) in kept {
            url.push_str(&format!("{key}={}&", session::urlencode(value)));
        }
        format!("{url}page={n}")
    };
    (
        (page > 1).then(|| link(page - 1)),
        (page.saturating_mul(per_page) < total).then(|| link(page + 1)),
    )
}

/// Appends `flash=<text>` (ok) or `error=<text>` to a local path, for the page after a form.
pub(crate) fn with_outcome(back: &str, ok: bool, text: &str) -> String {
    let key = if ok { "flash" } else { "error" };
    let sep = if back.contains('?') { '&' } else { '?' };
    format!("{back}{sep}{key}={}", session::urlencode(text))
}

/// The outcome a form left in the query string.
pub(crate) fn outcome(q: &Form) -> Option<svc_pages::Flash> {
    if let Some(text) = q.text("flash") {
        return Some(svc_pages::Flash { text, ok: true });
    }
    q.text("error")
        .map(|text| svc_pages::Flash { text, ok: false })
}

/// The lower-case label of a window among those a page offers (`last 24 hours`).
pub(crate) fn window_label(windows: &[(u32, &str)], minutes: u32) -> String {
    windows
        .iter()
        .find(|(m, _)| *m == minutes)
        .map_or("", |(_, l)| l)
        .to_lowercase()
}

#[cfg(test)]
mod tests {
    use super::{accepts, pager};

    #[test]
    fn pager_links_keep_the_filters_and_stop_at_the_ends() {
        assert_eq!(
            pager("/admin/users", &[("q", "a b&c")], 1, 100, 250),
            (None, Some("/admin/users?q=a+b%26c&page=2".into()))
        );
        assert_eq!(
            pager("/admin/tables?kind=local", &[("q", "")], 3, 100, 250),
            (Some("/admin/tables?kind=local&q=&page=2".into()), None)
        );
        assert_eq!(pager("/admin/groups", &[], 1, 100, 100), (None, None));
        assert_eq!(
            pager("/admin/users/u1", &[], 2, 50, 120).1.as_deref(),
            Some("/admin/users/u1?page=3")
        );
    }

    #[test]
    fn accept_encoding_weights_are_honoured() {
        assert!(accepts("gzip, deflate, br, zstd", "br"));
        assert!(accepts("gzip, deflate", "gzip"));
        assert!(!accepts("gzip, deflate", "br"));
        assert!(!accepts("br;q=0, gzip", "br"), "q=0 refuses");
        assert!(accepts("BR ; q=0.5", "br"));
        assert!(accepts("*", "br"));
        assert!(!accepts("*;q=0", "gzip"));
        assert!(
            !accepts("gzip;q=0, *", "gzip"),
            "a named weight wins over *"
        );
        assert!(!accepts("", "gzip"));
        assert!(!accepts("gzipx", "gzip"));
    }
}
