//! `/corporate-memory`: the review queue (pending first), contradictions and duplicate
//! candidates, and the forms that decide them through the same `svc-memory` calls as
//! `/api/memory/admin/…` (same transition graph, same audit rows, `client_kind = web`).

use std::sync::Arc;

use poem::web::Data;
use poem::{handler, Body, Request, Response};
use svc_memory::relations::{ContradictionResolution, DuplicateResolution, Side};
use svc_memory::{Decision, Status};
use svc_pages::views::{Choice, MemoryPage, MemoryRow, Pair, Tab};
use svc_pages::Page;
use svc_store::memory::{ItemQuery, KnowledgeItem};

use super::session::{safe_next, urlencode};
use super::{outcome, query, respond, session, with_outcome};
use crate::state::AppState;

const PAGE_ITEMS: u64 = 25;
const PAIRS: u64 = 100;

fn row(i: &KnowledgeItem) -> MemoryRow {
    let from = Status::parse(&i.status).unwrap_or(Status::Pending);
    let moves = [
        Decision::Approve,
        Decision::Mandate,
        Decision::Reject,
        Decision::Revoke,
    ]
    .into_iter()
    .filter(|d| from.moves().contains(&d.target()))
    .map(Decision::name)
    .collect();
    MemoryRow {
        id: i.id.clone(),
        title: i.title.clone(),
        content: i.content.clone().unwrap_or_default(),
        status: i.status.clone(),
        domain: i.domain.clone().unwrap_or_else(|| "—".into()),
        category: i.category.clone().unwrap_or_else(|| "—".into()),
        tags: i.tags.clone(),
        contributor: i
            .source_user
            .clone()
            .or_else(|| i.created_by.clone())
            .unwrap_or_else(|| "—".into()),
        revision: i.revision,
        upvotes: i.upvotes,
        downvotes: i.downvotes,
        moves,
    }
}

fn side(s: &Side) -> String {
    match s {
        Side::Shown(item) => format!(
            "{} — {} ({})",
            item.title,
            item.content.as_deref().unwrap_or(""),
            item.status
        ),
        Side::Hidden { id, .. } => format!("{id} (personal item, hidden)"),
        Side::Gone { id, .. } => format!("{id} (deleted)"),
    }
}

#[handler]
pub async fn index(req: &Request, state: Data<&Arc<AppState>>) -> Response {
    let session = match session::admin(&state, req).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    let q = query(req);
    let caller = &session.caller;
    let tab = match q.get("tab") {
        Some("contradictions") => "contradictions",
        Some("duplicates") => "duplicates",
        _ => "items",
    };
    let status = q.text("status").unwrap_or_else(|| "pending".into());
    let search = q.text("q").unwrap_or_default();
    let page: u64 = q.get("page").and_then(|p| p.parse().ok()).unwrap_or(0);
    let pending = state
        .memory
        .list(
            caller,
            ItemQuery {
                statuses: vec!["pending".into()],
                limit: 1,
                ..ItemQuery::default()
            },
        )
        .await;
    let pending_count = match pending {
        Ok(p) => p.total_count,
        Err(e) => return respond::from_error(&state, &session, e),
    };
    let here = |page: u64| {
        format!(
            "/corporate-memory?status={}&q={}&page={page}",
            urlencode(&status),
            urlencode(&search)
        )
    };
    let (mut items, mut total, mut pairs) = (Vec::new(), 0, Vec::new());
    match tab {
        "items" => {
            let listed = state
                .memory
                .list(
                    caller,
                    ItemQuery {
                        statuses: if status == "any" {
                            vec![]
                        } else {
                            vec![status.clone()]
                        },
                        search: (!search.is_empty()).then(|| search.clone()),
                        offset: page * PAGE_ITEMS,
                        limit: PAGE_ITEMS,
                        ..ItemQuery::default()
                    },
                )
                .await;
            match listed {
                Ok(p) => {
                    items = p.items.iter().map(row).collect();
                    total = p.total_count;
                }
                Err(e) => return respond::from_error(&state, &session, e),
            }
        }
        "contradictions" => match state.memory.contradictions(Some(false), false, PAIRS).await {
            Ok(list) => {
                pairs = list
                    .iter()
                    .map(|c| Pair {
                        id: c.contradiction.id.clone(),
                        a: side(&c.item_a),
                        b: side(&c.item_b),
                        note: c.contradiction.explanation.clone().unwrap_or_default(),
                    })
                    .collect()
            }
            Err(e) => return respond::from_error(&state, &session, e),
        },
        _ => match state
            .memory
            .duplicate_candidates(Some(false), false, PAIRS)
            .await
        {
            Ok(list) => {
                pairs = list
                    .iter()
                    .map(|c| Pair {
                        id: format!("{}|{}", c.candidate.item_a_id, c.candidate.item_b_id),
                        a: side(&c.item_a),
                        b: side(&c.item_b),
                        note: format!("similarity {:.0}%", c.candidate.score * 100.0),
                    })
                    .collect()
            }
            Err(e) => return respond::from_error(&state, &session, e),
        },
    }
    let shown = items.len();
    let statuses = std::iter::once(("any", "Any status"))
        .chain(Status::ALL.iter().map(|s| (s.as_str(), s.as_str())))
        .map(|(v, l)| Choice::new(v, l, &status))
        .collect();
    let tabs = [
        ("items", "Review queue", "/corporate-memory".to_owned()),
        (
            "contradictions",
            "Contradictions",
            "/corporate-memory?tab=contradictions".into(),
        ),
        (
            "duplicates",
            "Duplicates",
            "/corporate-memory?tab=duplicates".into(),
        ),
    ]
    .into_iter()
    .map(|(key, label, href)| Tab {
        href,
        label: label.into(),
        current: key == tab,
    })
    .collect();
    respond::page(&MemoryPage {
        chrome: session
            .chrome(&state, Page::Memory, "Corporate memory")
            .with_flash(outcome(&q)),
        tab,
        tabs,
        pending_count,
        statuses,
        q: search.clone(),
        back: here(page),
        items,
        shown,
        total,
        prev_page: (page > 0).then(|| here(page - 1)),
        next_page: ((page + 1) * PAGE_ITEMS < total as u64).then(|| here(page + 1)),
        pairs,
    })
}

/// One decision (`approve:<id>`) or the same decision on every ticked item (`approve:*`).
#[handler]
pub async fn decide(req: &Request, body: Body, state: Data<&Arc<AppState>>) -> Response {
    let (session, form) = match session::admin_form(&state, req, body).await {
        Ok(ok) => ok,
        Err(r) => return r,
    };
    let back = safe_next(form.get("back"));
    let Some((decision, target)) = form
        .get("act")
        .and_then(|a| a.split_once(':'))
        .and_then(|(d, t)| Decision::parse(d).map(|d| (d, t.to_owned())))
    else {
        return respond::see_other(&with_outcome(&back, false, "Choose a decision."));
    };
    let (reason, audience) = (form.text("reason"), form.text("audience"));
    let caller = &session.caller;
    let text = if target == "*" {
        let ids = form.all("ids");
        match state
            .memory
            .batch(caller, &ids, decision, reason, audience)
            .await
        {
            Ok(out) if out.errors.is_empty() && out.not_found.is_empty() => {
                Ok(format!("{}: {} items", decision.name(), out.success.len()))
            }
            Ok(out) => Err(format!(
                "{}: {} done, {} not found, {} refused ({})",
                decision.name(),
                out.success.len(),
                out.not_found.len(),
                out.errors.len(),
                out.errors
                    .iter()
                    .map(|e| e.error.as_str())
                    .collect::<Vec<_>>()
                    .join("; ")
            )),
            Err(e) => Err(e.to_string()),
        }
    } else {
        match state
            .memory
            .decide(caller, &target, decision, reason, audience, None)
            .await
        {
            Ok(item) => Ok(format!("'{}' is now {}", item.title, item.status)),
            Err(e) => Err(e.to_string()),
        }
    };
    match text {
        Ok(t) => respond::see_other(&with_outcome(&back, true, &t)),
        Err(t) => respond::see_other(&with_outcome(&back, false, &t)),
    }
}

/// Resolves a contradiction (`kind=contradiction`) or a duplicate candidate.
#[handler]
pub async fn resolve(req: &Request, body: Body, state: Data<&Arc<AppState>>) -> Response {
    let (session, form) = match session::admin_form(&state, req, body).await {
        Ok(ok) => ok,
        Err(r) => return r,
    };
    let id = form.get("id").unwrap_or_default();
    let resolution = form.get("resolution").unwrap_or_default();
    let caller = &session.caller;
    let (back, result) = if form.get("kind") == Some("duplicate") {
        let back = "/corporate-memory?tab=duplicates";
        let Some((a, b)) = id.split_once('|') else {
            return respond::see_other(&with_outcome(back, false, "Unknown pair."));
        };
        let done = match DuplicateResolution::parse(resolution) {
            Ok(r) => state.memory.resolve_duplicate(caller, a, b, r, None).await,
            Err(e) => Err(e),
        };
        (back, done)
    } else {
        let back = "/corporate-memory?tab=contradictions";
        let done = match ContradictionResolution::parse(resolution) {
            Ok(r) => {
                state
                    .memory
                    .resolve_contradiction(caller, id, r, form.text("note"))
                    .await
            }
            Err(e) => Err(e),
        };
        (back, done)
    };
    match result {
        Ok(_) => respond::see_other(&with_outcome(
            back,
            true,
            &format!("Resolved: {resolution}"),
        )),
        Err(e) => respond::see_other(&with_outcome(back, false, &e.to_string())),
    }
}
