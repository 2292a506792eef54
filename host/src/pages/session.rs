//! Browser sessions: the session cookie, its CSRF token, the login redirect and the bridge
//! that lets a page's scripts call the JSON API with the cookie instead of a bearer header.
//!
//! The cookie holds the same session JWT `POST /auth/token` returns (HttpOnly, SameSite=Lax,
//! Secure behind TLS). SameSite alone is not trusted: every state-changing request a page
//! makes carries the session's CSRF token (a form's `csrf` field or the `X-CSRF-Token`
//! header), which is bound to the session token ([`svc_auth::Authenticator::csrf_token`]).

use poem::http::{header, HeaderValue, Method, StatusCode};
use poem::{Request, Response};
use svc_auth::Caller;
use svc_core::Error;
use svc_pages::{Chrome, Page};

use super::respond;
use crate::api::{ApiError, RequestMeta};
use crate::state::AppState;

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "svc_session";
/// The header a page's scripts send the CSRF token in.
pub const CSRF_HEADER: &str = "x-csrf-token";

/// Marks an `/api/` request authenticated by the session cookie (audited as `web`).
#[derive(Debug, Clone, Copy)]
pub struct ViaCookie;

/// A signed-in browser.
pub struct PageSession {
    /// Who it is.
    pub caller: Caller,
    /// The session token (the cookie's value).
    token: String,
}

impl PageSession {
    /// The frame of a page for this user.
    pub fn chrome(&self, state: &AppState, page: Page, title: &str) -> Chrome {
        Chrome::new(
            page,
            title,
            &self.caller.user.email,
            self.caller.is_admin,
            state.auth.csrf_token(&self.token),
        )
    }

    /// Refuses (403 page) a form whose `csrf` field is not this session's token.
    pub fn check_csrf(
        &self,
        state: &AppState,
        presented: Option<&str>,
    ) -> Result<(), Box<Response>> {
        if presented.is_some_and(|p| state.auth.csrf_ok(&self.token, p)) {
            Ok(())
        } else {
            Err(Box::new(respond::error_page(
                state,
                Some(self),
                StatusCode::FORBIDDEN,
                "Request refused",
                "The form's security token is missing or out of date. Reload the page and try again.",
            )))
        }
    }
}

/// The value of a cookie in the request.
pub fn cookie(req: &Request, name: &str) -> Option<String> {
    req.headers()
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_owned())
}

/// The signed-in user, or a redirect to `/login?next=<this page>` (clearing a cookie that no
/// longer works, so an expired session lands on the login form rather than an error).
pub async fn signed_in(state: &AppState, req: &Request) -> Result<PageSession, Response> {
    let to_login = |clear: bool| {
        let here = req
            .uri()
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_owned();
        let mut resp = Response::builder()
            .status(StatusCode::FOUND)
            .header(
                header::LOCATION,
                format!("/login?next={}", urlencode(&here)),
            )
            .finish();
        if clear {
            set_cookie(&mut resp, &clear_cookie(req));
        }
        resp
    };
    let Some(token) = cookie(req, SESSION_COOKIE) else {
        return Err(to_login(false));
    };
    let meta = RequestMeta::of(req);
    match state
        .auth
        .resolve(&token, meta.ip_string(), Some(meta.request_id), true)
        .await
    {
        Ok(caller) if caller.token_type == svc_auth::jwt::TokenType::Session => {
            Ok(PageSession { caller, token })
        }
        Ok(_) | Err(svc_auth::ResolveError::Refused(_)) => Err(to_login(true)),
        Err(svc_auth::ResolveError::Store(e)) => Err(respond::server_error(Error::from(e))),
    }
}

/// The signed-in administrator; anyone else gets the login redirect or a 403 page.
pub async fn admin(state: &AppState, req: &Request) -> Result<PageSession, Response> {
    let session = signed_in(state, req).await?;
    if session.caller.is_admin {
        Ok(session)
    } else {
        Err(respond::error_page(
            state,
            Some(&session),
            StatusCode::FORBIDDEN,
            "Administrators only",
            "This page is for administrators. Ask one to add you to the Admin group if you need it.",
        ))
    }
}

/// A form an administrator's page posted: the session and the fields, once the form's CSRF
/// token is checked (the login redirect, a 403 page or the refusal otherwise).
pub(crate) async fn admin_form(
    state: &AppState,
    req: &Request,
    body: poem::Body,
) -> Result<(PageSession, super::Form), Response> {
    let form = super::Form::read(body).await;
    let session = admin(state, req).await?;
    session
        .check_csrf(state, form.get("csrf"))
        .map_err(|refused| *refused)?;
    Ok((session, form))
}

/// Where to go after logging in: a path on this server, never another host (`//evil`,
/// `/\evil`, `https://…` all fall back to the catalog).
pub fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(n)
            if n.starts_with('/')
                && !n.starts_with("//")
                && !n.starts_with("/\\")
                && !n.chars().any(|c| c.is_control())
                && !n.starts_with("/login") =>
        {
            n.to_owned()
        }
        _ => "/catalog".to_owned(),
    }
}

/// Whether the browser reached us over TLS (directly, or through a trusted proxy).
fn over_tls(req: &Request, state_trusts_proxy: bool) -> bool {
    req.uri().scheme_str() == Some("https")
        || (state_trusts_proxy
            && req
                .headers()
                .get("x-forwarded-proto")
                .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"https")))
}

/// The `Set-Cookie` value of a new session.
pub fn session_cookie(req: &Request, token: &str, trust_proxy: bool) -> String {
    let secure = if over_tls(req, trust_proxy) {
        "; Secure"
    } else {
        ""
    };
    format!(
        "{SESSION_COOKIE}={token}; Path=/; HttpOnly; SameSite=Lax; Max-Age={}{secure}",
        svc_auth::SESSION_HOURS * 3600
    )
}

/// The `Set-Cookie` value that ends a session in the browser.
pub fn clear_cookie(_req: &Request) -> String {
    format!("{SESSION_COOKIE}=; Path=/; HttpOnly; SameSite=Lax; Max-Age=0")
}

/// Adds a `Set-Cookie` header.
pub fn set_cookie(resp: &mut Response, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        resp.headers_mut().append(header::SET_COOKIE, v);
    }
}

/// Percent-encodes a query value.
pub fn urlencode(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// Lets a page's script call `/api/…` with its session cookie: the cookie's token becomes the
/// bearer token, and a state-changing method must carry the session's CSRF token in
/// `X-CSRF-Token` (403 otherwise). A request with its own `Authorization` is left alone.
pub fn bridge(req: &mut Request, auth: &svc_auth::Authenticator) -> Result<(), Box<Response>> {
    if req.headers().contains_key(header::AUTHORIZATION) {
        return Ok(());
    }
    let Some(token) = cookie(req, SESSION_COOKIE) else {
        return Ok(());
    };
    let reads = matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    if !reads {
        let presented = req
            .headers()
            .get(CSRF_HEADER)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if !auth.csrf_ok(&token, presented) {
            let refused = Error::forbidden(
                "CSRF token missing or invalid: a page must send its X-CSRF-Token with the session cookie",
            );
            return Err(Box::new(poem::error::ResponseError::as_response(
                &ApiError(refused),
            )));
        }
    }
    if let Ok(v) = HeaderValue::from_str(&format!("Bearer {token}")) {
        req.headers_mut().insert(header::AUTHORIZATION, v);
        req.extensions_mut().insert(ViaCookie);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::safe_next;

    #[test]
    fn next_stays_on_this_server() {
        assert_eq!(
            safe_next(Some("/admin/activity?window=60")),
            "/admin/activity?window=60"
        );
        for bad in [
            "//evil.example",
            "/\\evil",
            "https://evil.example/",
            "evil",
            "",
            "/login?next=/x",
        ] {
            assert_eq!(safe_next(Some(bad)), "/catalog", "{bad}");
        }
        assert_eq!(safe_next(None), "/catalog");
    }
}
