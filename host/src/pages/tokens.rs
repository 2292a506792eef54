//! `/admin/tokens`: every user's personal access tokens, a page at a time, filtered by owner
//! (`?user=<e-mail>`); the same store read as `GET /api/admin/tokens`, and revoked by the
//! page's script through `DELETE /api/admin/tokens/{id}` with the session's CSRF token.

use std::sync::Arc;

use poem::web::Data;
use poem::{handler, Request, Response};
use svc_pages::views::AdminTokensPage;
use svc_pages::Page;

use super::profile::token_view;
use super::{pager, query, respond, session};
use crate::state::AppState;

/// Tokens per page.
const PAGE_TOKENS: usize = 100;

#[handler]
pub async fn index(req: &Request, state: Data<&Arc<AppState>>) -> Response {
    let session = match session::admin(&state, req).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    let q = query(req);
    let owner = q.text("user");
    let page = q.page();
    let offset = (page as u64 - 1).saturating_mul(PAGE_TOKENS as u64);
    let found = match state
        .store
        .list_pats(owner.as_deref(), PAGE_TOKENS as u32, offset)
        .await
    {
        Ok(found) => found,
        Err(e) => return respond::from_error(&state, &session, e.into()),
    };
    let user = owner.unwrap_or_default();
    let (prev_page, next_page) = pager(
        "/admin/tokens",
        &[("user", &user)],
        page,
        PAGE_TOKENS,
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
