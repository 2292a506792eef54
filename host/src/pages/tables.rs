//! `/admin/tables`: a tab per source kind the server has a driver for (a driver loaded at run
//! time gets its tab) plus the read-only internal tab; register, edit and delete through the same
//! [`svc_catalog::registry::Registry`] calls as `/api/admin/…` (same checks, same audit rows);
//! and the cache-warmup log as server-sent events that resume after `Last-Event-ID`.

use std::sync::Arc;

use futures::StreamExt;
use poem::web::sse::SSE;
use poem::web::Data;
use poem::{handler, Body, IntoResponse, Request, Response};
use svc_pages::views::{TableEdit, TableRow, TableTab, TablesPage};
use svc_pages::Page;
use svc_store::registry::{QueryMode, RegistryRow};

use super::catalog::bytes;
use super::session::{safe_next, urlencode};
use super::{outcome, pager, query, respond, session, with_outcome};
use crate::api::warmup::{last_event_id, sse_event, warmup_events};
use crate::state::AppState;

const INTERNAL: &str = "internal";

/// Tables per page.
const PAGE_TABLES: usize = 100;

fn row(state: &AppState, r: &RegistryRow) -> TableRow {
    let (data, error) = match state.registry.data_facts(r) {
        Ok(None) => ("stays at the source".to_owned(), None),
        Ok(Some(None)) => ("no data yet".to_owned(), None),
        Ok(Some(Some(f))) => (format!("{} rows · {}", f.rows, bytes(f.bytes as i64)), None),
        Err(e) => (String::new(), Some(e.to_string())),
    };
    TableRow {
        id: r.id.clone(),
        mode: r.query_mode.as_str().into(),
        source: format!(
            "{} / {}",
            r.bucket.as_deref().unwrap_or("—"),
            r.source_table.as_deref().unwrap_or(&r.id)
        ),
        description: r.description.clone().unwrap_or_default(),
        registered: format!(
            "{} {}",
            r.registered_by.as_deref().unwrap_or("—"),
            r.registered_at
                .as_deref()
                .and_then(|t| t.get(..10))
                .unwrap_or("")
        ),
        synced: data,
        error,
    }
}

#[handler]
pub async fn index(req: &Request, state: Data<&Arc<AppState>>) -> Response {
    let session = match session::admin(&state, req).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    let q = query(req);
    let rows = match state.store.list_tables().await {
        Ok(rows) => rows,
        Err(e) => return respond::from_error(&state, &session, e.into()),
    };
    let mut kinds: Vec<String> = state
        .drivers
        .registrable()
        .into_iter()
        .map(str::to_owned)
        .collect();
    kinds.sort();
    kinds.push(INTERNAL.into());
    let kind = q
        .text("kind")
        .filter(|k| kinds.contains(k))
        .unwrap_or_else(|| kinds[0].clone());
    let of_kind = |k: &str| -> Vec<&RegistryRow> {
        rows.iter()
            .filter(|r| {
                if k == INTERNAL {
                    r.query_mode == QueryMode::Internal
                } else {
                    r.source_type == k && r.query_mode != QueryMode::Internal
                }
            })
            .collect()
    };
    let tabs = kinds
        .iter()
        .map(|k| TableTab {
            href: format!("/admin/tables?kind={}", urlencode(k)),
            label: k.clone(),
            count: of_kind(k).len(),
            current: *k == kind,
        })
        .collect();
    let search = q.text("q").unwrap_or_default();
    let needle = search.to_lowercase();
    let matching: Vec<&RegistryRow> = of_kind(&kind)
        .into_iter()
        .filter(|r| {
            needle.is_empty()
                || r.id.to_lowercase().contains(&needle)
                || r.description
                    .as_deref()
                    .is_some_and(|d| d.to_lowercase().contains(&needle))
        })
        .collect();
    let page = q.page();
    let shown = matching
        .iter()
        .skip((page - 1).saturating_mul(PAGE_TABLES))
        .take(PAGE_TABLES)
        .map(|r| row(&state, r))
        .collect();
    let editable = kind != INTERNAL;
    let editing = q
        .text("edit")
        .filter(|_| editable)
        .and_then(|id| matching.iter().find(|r| r.id == id).copied())
        .map(|r| TableEdit {
            id: r.id.clone(),
            bucket: r.bucket.clone().unwrap_or_default(),
            source_table: r.source_table.clone().unwrap_or_default(),
            mode: r.query_mode.as_str().into(),
            sync_schedule: r.sync_schedule.clone().unwrap_or_default(),
            description: r.description.clone().unwrap_or_default(),
        });
    let here = format!("/admin/tables?kind={}", urlencode(&kind));
    let (prev_page, next_page) = pager(&here, &[("q", &search)], page, PAGE_TABLES, matching.len());
    respond::page(&TablesPage {
        chrome: session
            .chrome(&state, Page::Tables, "Tables")
            .with_flash(outcome(&q)),
        tabs,
        back: format!("{here}&q={}&page={page}", urlencode(&search)),
        kind,
        editable,
        modes: ["local", "remote", "materialized"]
            .map(String::from)
            .to_vec(),
        rows: shown,
        matching: matching.len(),
        q: search,
        prev_page,
        next_page,
        editing,
    })
}

/// Changes a registered table's bucket, source table, mode, schedule and description through
/// the same [`svc_catalog::registry::Registry::update`] as `PUT /api/admin/registry/{id}`
/// (same checks, `registry.update` audit row). An empty field clears it.
#[handler]
pub async fn update(req: &Request, body: Body, state: Data<&Arc<AppState>>) -> Response {
    let (session, form) = match session::admin_form(&state, req, body).await {
        Ok(ok) => ok,
        Err(r) => return r,
    };
    let back = safe_next(form.get("back"));
    let id = form.get("id").unwrap_or_default();
    let mode = match form.text("query_mode").map(|m| m.parse::<QueryMode>()) {
        None => None,
        Some(Ok(m)) if !m.is_internal() => Some(m),
        Some(_) => return respond::see_other(&with_outcome(&back, false, "Unknown query mode.")),
    };
    let updated = state
        .registry
        .update(&session.caller.actor, id, |row| {
            if let Some(m) = mode {
                row.query_mode = m;
            }
            row.bucket = form.text("bucket");
            row.source_table = form.text("source_table");
            row.sync_schedule = form.text("sync_schedule");
            row.description = form.text("description");
        })
        .await;
    match updated {
        Ok(_) => respond::see_other(&with_outcome(&back, true, &format!("Saved {id}"))),
        Err(e) => respond::see_other(&with_outcome(&back, false, &e.to_string())),
    }
}

#[handler]
pub async fn register(req: &Request, body: Body, state: Data<&Arc<AppState>>) -> Response {
    let (session, form) = match session::admin_form(&state, req, body).await {
        Ok(ok) => ok,
        Err(r) => return r,
    };
    let back = safe_next(form.get("back"));
    let Some(id) = form.text("name") else {
        return respond::see_other(&with_outcome(&back, false, "A table needs a name."));
    };
    let mode = match form
        .text("query_mode")
        .unwrap_or_else(|| "local".into())
        .parse::<QueryMode>()
    {
        Ok(m) if !m.is_internal() => m,
        _ => return respond::see_other(&with_outcome(&back, false, "Unknown query mode.")),
    };
    let source_type = form.text("source_type");
    let registered = state
        .registry
        .register(&session.caller.actor, &id, |row| {
            if let Some(st) = source_type {
                row.source_type = st;
            }
            row.query_mode = mode;
            row.bucket = form.text("bucket");
            row.source_table = form.text("source_table");
            row.description = form.text("description");
        })
        .await;
    match registered {
        Ok(_) => respond::see_other(&with_outcome(&back, true, &format!("Registered {id}"))),
        Err(e) => respond::see_other(&with_outcome(&back, false, &e.to_string())),
    }
}

#[handler]
pub async fn delete(req: &Request, body: Body, state: Data<&Arc<AppState>>) -> Response {
    let (session, form) = match session::admin_form(&state, req, body).await {
        Ok(ok) => ok,
        Err(r) => return r,
    };
    let back = safe_next(form.get("back"));
    let id = form.get("id").unwrap_or_default();
    match state.registry.unregister(&session.caller.actor, id).await {
        Ok(()) => respond::see_other(&with_outcome(&back, true, &format!("Deleted {id}"))),
        Err(e) => respond::see_other(&with_outcome(&back, false, &e.to_string())),
    }
}

/// The warmup log for the page (the same stream as `/api/admin/cache-warmup/stream`).
#[handler]
pub async fn warmup_log(req: &Request, state: Data<&Arc<AppState>>) -> Response {
    if let Err(r) = session::admin(&state, req).await {
        return r;
    }
    let after = last_event_id(
        req.headers()
            .get("last-event-id")
            .and_then(|v| v.to_str().ok()),
    );
    let events = warmup_events(&state.warmer, after, true).map(sse_event);
    SSE::new(events)
        .keep_alive(std::time::Duration::from_secs(15))
        .into_response()
}
