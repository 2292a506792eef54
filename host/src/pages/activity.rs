//! `/admin/activity`: the audit timeline under the filter the URL holds, with the cards and
//! facets computed under the same filter (the JSON twins `/api/admin/activity`,
//! `/observability/kpis` and `/facets` read the same store functions through the same
//! [`Params`]). `?fragment=rows&cursor=…` answers only the next page's rows ("Load more").

use std::sync::Arc;
use std::time::Instant;

use chrono::Utc;
use poem::http::StatusCode;
use poem::web::Data;
use poem::{handler, Request, Response};
use serde_json::Value;
use svc_core::Error;
use svc_pages::views::{ActivityPage, ActivityRow, ActivityRows, Choice, Kpis, SavedView};
use svc_pages::{Page, Template};
use svc_store::audit::{AuditFilter, AuditRow};

use super::session::urlencode;
use super::{outcome, query, respond, session, window_label, Form};
use crate::api::activity::filter::read_event;
use crate::api::activity::{parse_cursor, Params};
use crate::state::AppState;

/// The windows offered, in minutes.
const WINDOWS: [(u32, &str); 5] = [
    (60, "Last hour"),
    (360, "Last 6 hours"),
    (1440, "Last 24 hours"),
    (10080, "Last 7 days"),
    (43200, "Last 30 days"),
];
const PAGE_ROWS: u32 = 50;
/// The URL keys that make up a view (what a saved view restores).
const KEYS: [&str; 5] = ["user_id", "action_prefix", "result", "source", "q"];

/// The page's filter, as the URL gives it.
struct Filters {
    window: u32,
    values: Vec<(&'static str, String)>,
}

impl Filters {
    fn read(q: &Form) -> Self {
        let window = q
            .get("window")
            .and_then(|w| w.parse().ok())
            .filter(|w| WINDOWS.iter().any(|(m, _)| m == w))
            .unwrap_or(1440);
        let values = KEYS
            .iter()
            .filter_map(|&k| q.text(k).map(|v| (k, v)))
            .collect();
        Self { window, values }
    }

    fn get(&self, key: &str) -> Option<String> {
        self.values
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.clone())
    }

    fn params(&self) -> Params {
        Params {
            since_minutes: Some(self.window),
            user_id: self.get("user_id"),
            action_prefix: self.get("action_prefix"),
            result: self.get("result"),
            source: self.get("source"),
            q: self.get("q"),
            ..Params::default()
        }
    }

    /// This page's URL with `key` set to `value` (None: removed).
    fn url_with(&self, key: &str, value: Option<&str>) -> String {
        let mut pairs: Vec<(String, String)> = vec![("window".into(), self.window.to_string())];
        pairs.extend(
            self.values
                .iter()
                .filter(|(k, _)| *k != key)
                .map(|(k, v)| ((*k).to_owned(), v.clone())),
        );
        if let Some(v) = value {
            pairs.push((key.to_owned(), v.to_owned()));
        }
        let qs: Vec<String> = pairs
            .iter()
            .map(|(k, v)| format!("{k}={}", urlencode(v)))
            .collect();
        format!("/admin/activity?{}", qs.join("&"))
    }

    fn api_url(&self) -> String {
        self.url_with("", None).replacen(
            "/admin/activity?window=",
            "/api/admin/activity?since_minutes=",
            1,
        )
    }
}

fn pretty(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => "—".into(),
        Some(v) => serde_json::to_string_pretty(v).unwrap_or_default(),
    }
}

fn row(r: &AuditRow, f: &Filters, today: &str) -> ActivityRow {
    let rec = &r.record;
    let time = match (rec.timestamp.get(..10), rec.timestamp.get(11..19)) {
        (Some(day), Some(clock)) if day == today => clock.to_owned(),
        (Some(day), Some(clock)) => format!(
            "{}.{} {}",
            day.get(8..10).unwrap_or(""),
            day.get(5..7).unwrap_or(""),
            clock.get(..5).unwrap_or("")
        ),
        _ => rec.timestamp.clone(),
    };
    let user_id = rec.user_id.clone().unwrap_or_default();
    let user = r
        .user_email
        .clone()
        .or_else(|| (!user_id.is_empty()).then(|| user_id.clone()))
        .unwrap_or_else(|| "—".into());
    let duration_ms = rec.duration_ms.unwrap_or(-1);
    ActivityRow {
        id: rec.id.clone(),
        timestamp: rec.timestamp.clone(),
        time,
        user,
        source: r.source.clone(),
        action: rec.action.clone(),
        resource: rec.resource.clone().unwrap_or_default(),
        duration: rec
            .duration_ms
            .map_or_else(|| "—".into(), |d| format!("{d} ms")),
        duration_ms,
        is_error: rec.result.to_ascii_lowercase().starts_with("error"),
        result: rec.result.clone(),
        params: pretty(rec.params.as_ref()),
        params_before: pretty(rec.params_before.as_ref()),
        client_ip: rec.client_ip.clone(),
        correlation_id: rec.correlation_id.clone(),
        user_filter: f.url_with("user_id", Some(&user_id)),
        user_id,
        action_filter: f.url_with("action_prefix", Some(&rec.action)),
    }
}

#[handler]
pub async fn index(req: &Request, state: Data<&Arc<AppState>>) -> Response {
    let session = match session::admin(&state, req).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    let q = query(req);
    let f = Filters::read(&q);
    let started = Instant::now();
    let (filter, window) = match f.params().filter() {
        Ok(ok) => ok,
        Err(e) => return respond::from_error(&state, &session, e),
    };
    let cursor = match parse_cursor(q.get("cursor")) {
        Ok(c) => c,
        Err(e) => return respond::from_error(&state, &session, e),
    };
    // The rows, the cards and facets, and the saved views are read together: the page
    // waits for the slowest, not for their sum. A "load more" fragment needs only rows.
    let fragment = q.get("fragment") == Some("rows");
    let (page, summary, views) = tokio::join!(
        state.store.audit_page(&filter, cursor.as_ref(), PAGE_ROWS),
        async {
            match fragment {
                true => None,
                false => Some(summary(&state, &filter).await),
            }
        },
        async {
            match fragment {
                true => Vec::new(),
                false => state
                    .store
                    .saved_views(&session.caller.user.id)
                    .await
                    .unwrap_or_default(),
            }
        },
    );
    let page = page.map_err(Error::from);
    state
        .audit
        .write_read_outcome(
            &session.caller.actor,
            read_event("timeline", &filter, window),
            started,
            &page,
        )
        .await;
    let page = match page {
        Ok(p) => p,
        Err(e) => return respond::from_error(&state, &session, e),
    };
    let today = Utc::now().format("%Y-%m-%d").to_string();
    let rows: Vec<ActivityRow> = page.rows.iter().map(|r| row(r, &f, &today)).collect();
    let next_page = page.next_cursor.as_ref().map(|c| {
        format!(
            "{}&fragment=rows&cursor={}",
            f.url_with("", None),
            urlencode(c)
        )
    });
    if fragment {
        let mut resp = match (ActivityRows { rows }).render() {
            Ok(body) => respond::html(StatusCode::OK, body),
            Err(e) => return respond::server_error(Error::internal(e)),
        };
        if let Some(next) = next_page.and_then(|n| n.parse().ok()) {
            resp.headers_mut().insert("x-next-page", next);
        }
        return resp;
    }
    match summary {
        Some(Ok((kpis, facets))) => render(
            &state, &session, &q, &f, kpis, facets, views, rows, next_page,
        ),
        Some(Err(e)) => respond::from_error(&state, &session, e),
        None => respond::server_error(Error::internal("the summary of a whole page was not read")),
    }
}

async fn summary(
    state: &AppState,
    filter: &AuditFilter,
) -> Result<(svc_store::audit::AuditKpis, svc_store::audit::AuditFacets), Error> {
    let (kpis, facets) = tokio::join!(
        state.store.audit_kpis(filter),
        state.store.audit_facets(filter)
    );
    Ok((kpis?, facets?))
}

#[allow(clippy::too_many_arguments)]
fn render(
    state: &AppState,
    session: &session::PageSession,
    q: &Form,
    f: &Filters,
    kpis: svc_store::audit::AuditKpis,
    facets: svc_store::audit::AuditFacets,
    views: Vec<svc_store::views::SavedView>,
    rows: Vec<ActivityRow>,
    next_page: Option<String>,
) -> Response {
    let current = |k: &str| f.get(k).unwrap_or_default();
    let window_label = window_label(&WINDOWS, f.window);
    let sentence = if kpis.events_total == 0 {
        format!("No activity in the {window_label}.")
    } else {
        format!(
            "{} events in the {window_label} · {} users · {:.2}% errors · p95 {}",
            kpis.events_total,
            kpis.active_users,
            kpis.error_rate * 100.0,
            kpis.p95_duration_ms
                .map_or_else(|| "—".into(), |p| format!("{p} ms"))
        )
    };
    let counted = |v: &str, label: &str, n: i64| (v.to_owned(), format!("{label} ({n})"));
    let users = Choice::facet(
        facets
            .users
            .iter()
            .map(|u| counted(&u.id, &u.label, u.count)),
        &current("user_id"),
    );
    let actions = Choice::facet(
        facets
            .actions
            .iter()
            .map(|a| counted(&a.value, &a.value, a.count)),
        &current("action_prefix"),
    );
    let sources = Choice::facet(
        facets
            .sources
            .iter()
            .map(|a| counted(&a.value, &a.value, a.count)),
        &current("source"),
    );
    let results = [("", "Any"), ("success", "success"), ("error", "error")]
        .iter()
        .map(|(v, l)| Choice::new(*v, *l, &current("result")))
        .collect();
    let views = views
        .into_iter()
        .map(|v| SavedView {
            url: view_url(&v.query),
            id: v.id,
            name: v.name,
        })
        .collect();
    respond::page(&ActivityPage {
        chrome: session
            .chrome(state, Page::Activity, "Audit log")
            .with_flash(outcome(q)),
        sentence,
        api_url: f.api_url(),
        kpis: Kpis {
            events: kpis.events_total.to_string(),
            users: kpis.active_users.to_string(),
            error_rate: format!("{:.2}%", kpis.error_rate * 100.0),
            errors: kpis.errors.to_string(),
            p95: kpis
                .p95_duration_ms
                .map_or_else(|| "—".into(), |p| format!("{p} ms")),
        },
        error_url: f.url_with("result", Some("error")),
        window: f.window,
        windows: WINDOWS.to_vec(),
        users,
        actions,
        results,
        sources,
        q: current("q"),
        live: q.get("live") == Some("1"),
        views,
        rows,
        next_page,
    })
}

/// The page URL a saved view's payload stands for (only the keys this page knows).
fn view_url(query: &Value) -> String {
    let mut parts = Vec::new();
    for key in std::iter::once("window").chain(KEYS) {
        if let Some(v) = query
            .get(key)
            .and_then(Value::as_str)
            .filter(|v| !v.is_empty())
        {
            parts.push(format!("{key}={}", urlencode(v)));
        }
    }
    format!("/admin/activity?{}", parts.join("&"))
}

/// Audit rows as the activity table shows them, their filter links scoped to one user
/// (the per-user page).
pub(super) fn user_rows(rows: &[AuditRow], user_id: &str) -> Vec<ActivityRow> {
    let f = Filters {
        window: 43200,
        values: vec![("user_id", user_id.to_owned())],
    };
    let today = Utc::now().format("%Y-%m-%d").to_string();
    rows.iter().map(|r| row(r, &f, &today)).collect()
}
