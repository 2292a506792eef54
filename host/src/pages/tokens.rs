//! `/admin/tokens`: every user's personal access tokens, a page at a time, filtered by owner
//! (`?user=<e-mail>`); read like `GET /api/admin/tokens`, and revoked by the page's script
//! through `DELETE /api/admin/tokens/{id}` with the session's CSRF token.

use std::sync::Arc;

use poem::web::Data;
use poem::{handler, Request, Response};
use svc_pages::views::AdminTokensPage;
use svc_pages::Page;

use super::profile::token_view;
use super::{pager, query, respond, session};
use crate::api::admin_tokens::{self, DEFAULT_LIMIT};
use crate::state::AppState;

#[handler]
pub async fn index(req: &Request, state: Data<&Arc<AppState>>) -> Response {
    let session = match session::admin(&state, req).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    let q = query(req);
    let user = q.text("user").unwrap_or_default();
    let page = q.page();
    let offset = (page - 1).saturating_mul(DEFAULT_LIMIT);
    let (found, _, _) =
        match admin_tokens::page(&state, Some(&user), Some(DEFAULT_LIMIT), Some(offset)).await {
            Ok(found) => found,
            Err(e) => return respond::from_error(&state, &session, e),
        };
    let (prev_page, next_page) = pager(
        "/admin/tokens",
        &[("user", &user)],
        page,
        DEFAULT_LIMIT,
        found.total as usize,
    );
    respond::page(&AdminTokensPage {
        chrome: session.chrome(&state, Page::Users, "Tokens"),
        prev_page,
        next_page,
        tokens: found
            .tokens
            .into_iter()
            .map(|t| (t.owner_email.unwrap_or_default(), token_view(t.pat)))
            .collect(),
        user,
        total: found.total,
    })
}
