//! `/login` and `/logout`.

use std::sync::Arc;

use poem::http::{header, StatusCode};
use poem::web::Data;
use poem::{handler, Body, Request, Response};
use svc_auth::login::Origin;
use svc_core::ErrorKind;
use svc_pages::views::LoginPage;
use svc_pages::Template;
use svc_store::audit::ClientKind;

use super::session::{self, safe_next};
use super::{query, respond, Form};
use crate::api::RequestMeta;
use crate::state::AppState;

fn login_page(status: StatusCode, error: Option<String>, next: String, email: String) -> Response {
    let page = LoginPage {
        error,
        next,
        email,
        css: svc_pages::assets::css(),
    };
    match page.render() {
        Ok(body) => respond::html(status, body),
        Err(e) => respond::server_error(svc_core::Error::internal(e)),
    }
}

#[handler]
pub async fn form_page(req: &Request, state: Data<&Arc<AppState>>) -> Response {
    let q = query(req);
    let next = safe_next(q.get("next"));
    // Already signed in: straight on.
    if session::signed_in(&state, req).await.is_ok() {
        return respond::see_other(&next);
    }
    login_page(StatusCode::OK, None, next, String::new())
}

/// A login form from another site is refused: the browser names the page that sent it.
fn cross_site(req: &Request) -> bool {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok());
    let origin = req
        .headers()
        .get(header::ORIGIN)
        .and_then(|v| v.to_str().ok());
    match (origin, host) {
        (Some("null"), _) => true,
        (Some(origin), Some(host)) => origin.split_once("://").map(|(_, h)| h) != Some(host),
        _ => false,
    }
}

#[handler]
pub async fn submit(req: &Request, body: Body, state: Data<&Arc<AppState>>) -> Response {
    let form = Form::read(body).await;
    let next = safe_next(form.get("next"));
    let email = form.text("email").unwrap_or_default();
    if cross_site(req) {
        return login_page(
            StatusCode::FORBIDDEN,
            Some("This login form was sent from another site and was refused.".into()),
            next,
            email,
        );
    }
    let password = form.get("password").unwrap_or_default();
    if email.is_empty() || password.is_empty() {
        return login_page(
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("Enter your e-mail and password.".into()),
            next,
            email,
        );
    }
    let meta = RequestMeta::of(req);
    let origin = Origin {
        ip: meta.client_ip,
        request_id: Some(meta.request_id),
        client_kind: ClientKind::Web,
    };
    match state.login.password(&email, password, origin).await {
        Ok(s) => {
            let mut resp = respond::see_other(&next);
            session::set_cookie(
                &mut resp,
                &session::session_cookie(req, &s.token, state.config.trust_proxy),
            );
            resp
        }
        Err(e) if e.kind() == ErrorKind::TooMany || e.kind() == ErrorKind::Unauthorized => {
            let status = crate::api::ApiError(e.clone()).status();
            login_page(status, Some(e.to_string()), next, email)
        }
        Err(e) => respond::server_error(e),
    }
}

#[handler]
pub async fn logout(req: &Request, body: Body, state: Data<&Arc<AppState>>) -> Response {
    let form = Form::read(body).await;
    let session = match session::signed_in(&state, req).await {
        Ok(s) => s,
        Err(to_login) => return to_login,
    };
    if let Err(refused) = session.check_csrf(&state, form.get("csrf")) {
        return *refused;
    }
    let mut resp = respond::see_other("/login");
    session::set_cookie(&mut resp, &session::clear_cookie(req));
    resp
}
