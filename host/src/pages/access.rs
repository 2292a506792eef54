//! `/admin/access`: tables × groups as checkboxes, a page of tables at a time (filtered by
//! id). Saving applies the difference for the tables the form showed — never those on other
//! pages — through the same [`svc_auth::admin::Admin`] grant calls as `/api/admin/grants`
//! (one audit row per grant made or revoked, the access caches flushed). Internal tables are
//! not listed: their security is the row filter, not a grant.

use std::collections::BTreeSet;
use std::sync::Arc;

use poem::web::Data;
use poem::{handler, Body, Request, Response};
use svc_pages::views::{AccessPage, AccessRow, GrantCell};
use svc_pages::Page;
use svc_store::registry::QueryMode;

use super::{outcome, pager, query, respond, session, with_outcome};
use crate::state::AppState;

const TABLE: &str = "table";

/// Tables per page: a thousand tables times the groups would be a heavy page of boxes.
const PAGE_TABLES: usize = 100;

/// The page's link for a filter and page.
fn here(search: &str, page: usize) -> String {
    format!("/admin/access?q={}&page={page}", session::urlencode(search))
}

#[handler]
pub async fn index(req: &Request, state: Data<&Arc<AppState>>) -> Response {
    let session = match session::admin(&state, req).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    let (groups, tables, grants) = match tokio::try_join!(
        state.store.list_groups(),
        state.store.list_tables(),
        state.store.list_grants(None, Some(TABLE)),
    ) {
        Ok(all) => all,
        Err(e) => return respond::from_error(&state, &session, e.into()),
    };
    let q = query(req);
    let search = q.text("q").unwrap_or_default();
    let page = q.page();
    let granted: BTreeSet<(String, String)> = grants
        .into_iter()
        .map(|g| (g.group_id, g.resource_id))
        .collect();
    let needle = search.to_lowercase();
    let listed: Vec<_> = tables
        .iter()
        .filter(|t| t.query_mode != QueryMode::Internal)
        .filter(|t| needle.is_empty() || t.id.to_lowercase().contains(&needle))
        .collect();
    let rows = listed
        .iter()
        .skip((page - 1) * PAGE_TABLES)
        .take(PAGE_TABLES)
        .map(|t| AccessRow {
            id: t.id.clone(),
            cells: groups
                .iter()
                .map(|g| GrantCell {
                    value: format!("{}|{}", g.id, t.id),
                    checked: granted.contains(&(g.id.clone(), t.id.clone())),
                    label: format!("{} may read {}", g.name, t.id),
                })
                .collect(),
        })
        .collect();
    let (prev_page, next_page) = pager(
        "/admin/access",
        &[("q", &search)],
        page,
        PAGE_TABLES,
        listed.len(),
    );
    respond::page(&AccessPage {
        chrome: session
            .chrome(&state, Page::Users, "Resource access")
            .with_flash(outcome(&q)),
        groups: groups.into_iter().map(|g| (g.id, g.name)).collect(),
        tables: rows,
        q: search.clone(),
        page,
        matching: listed.len(),
        prev_page,
        next_page,
    })
}

/// Makes the grants of the tables the form showed (`shown`) what its checked boxes say.
#[handler]
pub async fn save(req: &Request, body: Body, state: Data<&Arc<AppState>>) -> Response {
    let (session, form) = match session::admin_form(&state, req, body).await {
        Ok(ok) => ok,
        Err(r) => return r,
    };
    let back = here(
        &form.text("q").unwrap_or_default(),
        form.get("page").and_then(|p| p.parse().ok()).unwrap_or(1),
    );
    let shown: BTreeSet<String> = form.all("shown").into_iter().collect();
    let wanted: BTreeSet<(String, String)> = form
        .all("grant")
        .iter()
        .filter_map(|v| v.split_once('|'))
        .map(|(g, t)| (g.to_owned(), t.to_owned()))
        .collect();
    let result = async {
        let groups = state.store.list_groups().await?;
        let grantable: BTreeSet<String> = state
            .store
            .list_tables()
            .await?
            .into_iter()
            .filter(|t| t.query_mode != QueryMode::Internal && shown.contains(&t.id))
            .map(|t| t.id)
            .collect();
        let current = state.store.list_grants(None, Some(TABLE)).await?;
        let (mut added, mut removed) = (0, 0);
        for grant in current
            .iter()
            .filter(|g| grantable.contains(&g.resource_id))
        {
            if !wanted.contains(&(grant.group_id.clone(), grant.resource_id.clone())) {
                state
                    .admin
                    .delete_grant(&session.caller.actor, grant)
                    .await?;
                removed += 1;
            }
        }
        for (group_id, table_id) in &wanted {
            let exists = current
                .iter()
                .any(|g| &g.group_id == group_id && &g.resource_id == table_id);
            // A box for a table or group that no longer exists changes nothing.
            let Some(group) = groups.iter().find(|g| &g.id == group_id) else {
                continue;
            };
            if !grantable.contains(table_id) {
                continue;
            }
            if !exists {
                state
                    .admin
                    .create_grant(&session.caller.actor, group, TABLE, table_id)
                    .await?;
                added += 1;
            }
        }
        Ok::<_, svc_core::Error>((added, removed))
    }
    .await;
    match result {
        Ok((added, removed)) => respond::see_other(&with_outcome(
            &back,
            true,
            &format!("Saved: {added} granted, {removed} revoked"),
        )),
        Err(e) => respond::see_other(&with_outcome(&back, false, &e.to_string())),
    }
}
