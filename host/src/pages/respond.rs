//! How a page answers: HTML with a strict content security policy, error pages, redirects.

use poem::http::{header, StatusCode};
use poem::{Body, Response};
use svc_core::Error;
use svc_pages::views::ErrorPage;
use svc_pages::{Page, Template};

use super::session::PageSession;
use crate::state::AppState;

/// Scripts and styles only from this server, no inline script, no framing, forms only to
/// this server: injected markup can neither run nor phone home.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; \
                   form-action 'self'; frame-ancestors 'none'";

/// An HTML response with the page headers.
pub fn html(status: StatusCode, body: String) -> Response {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "text/html; charset=utf-8")
        .header(header::CONTENT_SECURITY_POLICY, CSP)
        .header(header::X_CONTENT_TYPE_OPTIONS, "nosniff")
        .header(header::REFERRER_POLICY, "same-origin")
        // Pages show per-user data: never kept by a shared cache or the back button's disk.
        .header(header::CACHE_CONTROL, "no-store")
        .body(Body::from_string(body))
}

/// A rendered template, 200.
pub fn page(t: &impl Template) -> Response {
    match t.render() {
        Ok(body) => html(StatusCode::OK, body),
        Err(e) => server_error(Error::internal(format!("template: {e}"))),
    }
}

/// A 303 to `to` (after a form: the browser then GETs it, so a reload does not resend).
pub fn see_other(to: &str) -> Response {
    Response::builder()
        .status(StatusCode::SEE_OTHER)
        .header(header::LOCATION, to)
        .finish()
}

/// A 500 page that names no internals (the cause goes to the log).
pub fn server_error(e: Error) -> Response {
    tracing::error!(error = %e, "page failed");
    html(
        StatusCode::INTERNAL_SERVER_ERROR,
        "<!doctype html><title>Error · svc</title><h1>Something went wrong</h1>\
         <p>The error was logged. Try again, or go back to <a href=\"/catalog\">the catalog</a>.</p>"
            .to_owned(),
    )
}

/// An error page in the frame (a signed-in user) or bare.
pub fn error_page(
    state: &AppState,
    session: Option<&PageSession>,
    status: StatusCode,
    heading: &str,
    message: &str,
) -> Response {
    let Some(session) = session else {
        return html(
            status,
            format!(
                "<!doctype html><title>{0} · svc</title><h1>{0}</h1>",
                status.as_u16()
            ),
        );
    };
    let t = ErrorPage {
        chrome: session.chrome(state, Page::Error, heading),
        status: status.as_u16(),
        heading: heading.to_owned(),
        message: message.to_owned(),
    };
    match t.render() {
        Ok(body) => html(status, body),
        Err(e) => server_error(Error::internal(format!("template: {e}"))),
    }
}

/// The page for a domain error: its status, and its message (which is written for users).
pub fn from_error(state: &AppState, session: &PageSession, e: Error) -> Response {
    let status = crate::api::ApiError(e.clone()).status();
    if status.is_server_error() {
        return server_error(e);
    }
    let heading = match status {
        StatusCode::NOT_FOUND => "Not found",
        StatusCode::FORBIDDEN => "Not allowed",
        _ => "Request refused",
    };
    error_page(state, Some(session), status, heading, &e.to_string())
}
