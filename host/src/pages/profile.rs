//! `/profile` (also `/tokens`): the signed-in user, their groups and their personal access
//! tokens, read like `GET /api/me` and `/api/tokens`; creating and revoking a token is the
//! page's script calling `/api/tokens` with the session's CSRF token.

use std::sync::Arc;

use poem::web::Data;
use poem::{handler, Request, Response};
use svc_pages::views::{ProfilePage, TokenView};
use svc_pages::Page;
use svc_store::tokens::PatRow;

use super::{respond, session};
use crate::state::AppState;

fn day(ts: Option<&str>, none: &str) -> String {
    ts.map_or_else(
        || none.to_owned(),
        |t| t.get(..16).unwrap_or(t).replace('T', " "),
    )
}

/// A token as a row of the profile page or of `/admin/tokens`.
pub(super) fn token_view(t: PatRow) -> TokenView {
    TokenView {
        created: day(t.created_at.as_deref(), "—"),
        expires: day(t.expires_at.as_deref(), "never"),
        last_used: day(t.last_used_at.as_deref(), "—"),
        last_ip: t.last_used_ip.unwrap_or_else(|| "—".into()),
        revoked: t.revoked_at.is_some(),
        id: t.id,
        name: t.name,
        prefix: t.prefix,
    }
}

#[handler]
pub async fn index(req: &Request, state: Data<&Arc<AppState>>) -> Response {
    let session = match session::signed_in(&state, req).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    let user = &session.caller.user;
    let (groups, tokens) = match tokio::try_join!(
        state.store.groups_of_user(&user.id),
        state.store.pats_of_user(&user.id),
    ) {
        Ok(both) => both,
        Err(e) => return respond::from_error(&state, &session, e.into()),
    };
    respond::page(&ProfilePage {
        chrome: session.chrome(&state, Page::Profile, "Profile"),
        name: user.name.clone().unwrap_or_else(|| user.email.clone()),
        email: user.email.clone(),
        groups: groups.into_iter().map(|g| g.name).collect(),
        tokens: tokens.into_iter().map(token_view).collect(),
    })
}
