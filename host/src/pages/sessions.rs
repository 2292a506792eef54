//! `/admin/sessions` (the browser, failed sessions first) and
//! `/admin/sessions/<username>/<file>` (the transcript viewer, a page of events at a time),
//! read through the same [`svc_telemetry::sessions::SessionBrowser`] calls and audited the
//! same way as `/api/admin/sessions/…`. The file path goes through the browser's path guards.

use std::sync::Arc;
use std::time::Instant;

use poem::http::StatusCode;
use poem::web::{Data, Path};
use poem::{handler, Request, Response};
use serde_json::json;
use svc_pages::views::{Choice, SessionRow, SessionsPage, TranscriptPage, TurnView};
use svc_pages::Page;
use svc_store::audit::Event;
use svc_store::sessions::SessionOrder;
use svc_telemetry::transcript_view::TranscriptEvent;

use super::session::urlencode;
use super::{query, respond, session};
use crate::api::admin_sessions::{browse_event, filter};
use crate::state::AppState;

const WINDOWS: [(u32, &str); 4] = [
    (1440, "Last 24 hours"),
    (10080, "Last 7 days"),
    (43200, "Last 30 days"),
    (525_600, "Last year"),
];
const PAGE_ROWS: usize = 50;
const PAGE_EVENTS: usize = 100;
/// Texts longer than this are folded.
const FOLD_CHARS: usize = 600;

#[handler]
pub async fn index(req: &Request, state: Data<&Arc<AppState>>) -> Response {
    let session = match session::admin(&state, req).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    let q = query(req);
    let window = q
        .get("window")
        .and_then(|w| w.parse().ok())
        .filter(|w| WINDOWS.iter().any(|(m, _)| m == w))
        .unwrap_or(10080);
    let username = q.text("username");
    let search = q.text("q");
    let only_errors = q.get("only_errors") == Some("true");
    let offset: usize = q.get("offset").and_then(|o| o.parse().ok()).unwrap_or(0);
    let started = Instant::now();
    let result = async {
        let f = filter(
            Some(window),
            username.clone(),
            None,
            only_errors.then_some(true),
            search.clone(),
        )?;
        state
            .sessions
            .list(&f, SessionOrder::default(), PAGE_ROWS, offset)
            .await
    }
    .await;
    let asked = [
        ("since_minutes", json!(window)),
        ("username", json!(username)),
        ("only_errors", json!(only_errors)),
        ("q", json!(search)),
    ];
    state
        .audit
        .write_read_outcome(
            &session.caller.actor,
            browse_event("list", &asked),
            started,
            &result,
        )
        .await;
    let page = match result {
        Ok(p) => p,
        Err(e) => return respond::from_error(&state, &session, e),
    };
    let here = |offset: usize| {
        format!(
            "/admin/sessions?window={window}&username={}&q={}{}&offset={offset}",
            urlencode(username.as_deref().unwrap_or("")),
            urlencode(search.as_deref().unwrap_or("")),
            if only_errors { "&only_errors=true" } else { "" },
        )
    };
    let rows = page
        .rows
        .iter()
        .map(|s| {
            let (dir, file) = s
                .session_file
                .split_once('/')
                .unwrap_or(("", s.session_file.as_str()));
            SessionRow {
                href: format!("/admin/sessions/{}/{}", urlencode(dir), urlencode(file)),
                file: file.to_owned(),
                user: s.username.clone(),
                started: s.started_at.clone().unwrap_or_default(),
                model: s.primary_model.clone().unwrap_or_else(|| "—".into()),
                calls: s.tool_calls,
                errors: s.tool_errors,
            }
        })
        .collect();
    respond::page(&SessionsPage {
        chrome: session.chrome(&state, Page::Sessions, "Sessions"),
        windows: WINDOWS
            .iter()
            .map(|(m, l)| Choice::new(m.to_string(), *l, &window.to_string()))
            .collect(),
        username: username.clone().unwrap_or_default(),
        q: search.clone().unwrap_or_default(),
        only_errors,
        total: page.total,
        rows,
        prev_page: (offset > 0).then(|| here(offset.saturating_sub(PAGE_ROWS))),
        next_page: page.next_offset.map(here),
    })
}

fn turn(e: &TranscriptEvent) -> TurnView {
    let text = e.text.clone().unwrap_or_default();
    let long = text.chars().count() > FOLD_CHARS;
    TurnView {
        ordinal: e.ordinal,
        kind: serde_json::to_value(e.kind)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default(),
        role: e.role.clone(),
        ts: e.ts.clone().unwrap_or_default(),
        tool: e.tool_name.clone(),
        preview: text
            .lines()
            .next()
            .unwrap_or("")
            .chars()
            .take(160)
            .collect(),
        long,
        text,
        input: e
            .input
            .as_ref()
            .map(|i| serde_json::to_string_pretty(i).unwrap_or_default()),
        is_error: e.is_error == Some(true),
    }
}

#[handler]
pub async fn transcript(
    req: &Request,
    Path((username, file)): Path<(String, String)>,
    state: Data<&Arc<AppState>>,
) -> Response {
    let session = match session::admin(&state, req).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    let offset: usize = query(req)
        .get("offset")
        .and_then(|o| o.parse().ok())
        .unwrap_or(0);
    let started = Instant::now();
    let result = state
        .sessions
        .transcript(&username, &file, offset, PAGE_EVENTS)
        .await;
    let event = Event::new("session.transcript_view")
        .resource(format!("{username}/{file}"))
        .outcome(&result, |e, t| e.param("events", t.page.total_events))
        .timed(started);
    state.audit.write_read(&session.caller.actor, event).await;
    let t =
        match result {
            Ok(t) => t,
            Err(e) if e.status() == 404 || e.status() == 422 => return respond::error_page(
                &state,
                Some(&session),
                StatusCode::NOT_FOUND,
                "Session not found",
                "No session file has this path. It may have been removed, or the link is wrong.",
            ),
            Err(e) => return respond::from_error(&state, &session, e),
        };
    let base = format!(
        "/admin/sessions/{}/{}",
        urlencode(&username),
        urlencode(&file)
    );
    let events: Vec<TurnView> = t.page.events.iter().map(turn).collect();
    let first = t.page.offset + 1;
    let last = t.page.offset + events.len();
    respond::page(&TranscriptPage {
        chrome: session.chrome(&state, Page::Sessions, &file),
        back: "/admin/sessions".into(),
        owner: t.username.clone(),
        file: t.session_file.clone(),
        total: t.page.total_events,
        error_count: t.page.error_ordinals.len(),
        download: format!(
            "/api/admin/sessions/{}/{}/download",
            urlencode(&username),
            urlencode(&file)
        ),
        api: format!(
            "/api/admin/sessions/{}/{}/transcript",
            urlencode(&username),
            urlencode(&file)
        ),
        events,
        first,
        last,
        prev_page: (offset > 0)
            .then(|| format!("{base}?offset={}", offset.saturating_sub(PAGE_EVENTS))),
        next_page: t.page.next_offset.map(|n| format!("{base}?offset={n}")),
    })
}
