//! `/admin/telemetry`: KPI cards, facets, the grouped table (by day by default, with a bar
//! per bucket) or the raw events, under the filters the URL holds; the figures of
//! `/api/admin/telemetry/{kpis,facets,query}`, read together ([`svc_telemetry::browse::Browser::overview`]),
//! audited as `usage.read` like them. Export links hand the filter to the export endpoint;
//! the ask box posts to `/api/admin/telemetry/ask` from the page's script.

use std::sync::Arc;
use std::time::Instant;

use poem::web::Data;
use poem::{handler, Request, Response};
use serde_json::Value;
use svc_pages::views::{Choice, TelemetryPage, TelemetryRow};
use svc_pages::Page;
use svc_telemetry::browse::{Count, GroupBy};

use super::session::urlencode;
use super::{query, respond, session, window_label, Form};
use crate::api::telemetry::{filters, read_event};
use crate::state::AppState;

const WINDOWS: [(u32, &str); 5] = [
    (1440, "Last 24 hours"),
    (10080, "Last 7 days"),
    (43200, "Last 30 days"),
    (129_600, "Last 90 days"),
    (525_600, "Last year"),
];
const GROUPINGS: [(&str, &str); 6] = [
    ("none", "None (raw events)"),
    ("day", "Day"),
    ("username", "User"),
    ("tool_name", "Tool"),
    ("source", "Source"),
    ("ref_id", "Plugin"),
];
/// The URL keys of the filter, in the order the page writes them.
const KEYS: [&str; 6] = [
    "username",
    "tool_name",
    "source",
    "event_type",
    "q",
    "only_errors",
];
const PAGE_ROWS: usize = 100;

struct View {
    window: u32,
    group_by: String,
    values: Vec<(&'static str, String)>,
}

impl View {
    fn read(q: &Form) -> Self {
        Self {
            window: q
                .get("window")
                .and_then(|w| w.parse().ok())
                .filter(|w| WINDOWS.iter().any(|(m, _)| m == w))
                .unwrap_or(10080),
            group_by: q
                .text("group_by")
                .filter(|g| GROUPINGS.iter().any(|(k, _)| k == g))
                .unwrap_or_else(|| "day".into()),
            values: KEYS
                .iter()
                .filter_map(|&k| q.text(k).map(|v| (k, v)))
                .collect(),
        }
    }

    fn get(&self, key: &str) -> Option<String> {
        self.values
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.clone())
    }

    /// The query string with `set` applied (a None value removes the key).
    fn qs(&self, set: &[(&str, Option<&str>)]) -> String {
        let mut pairs: Vec<(String, String)> = vec![
            ("window".into(), self.window.to_string()),
            ("group_by".into(), self.group_by.clone()),
        ];
        pairs.extend(
            self.values
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone())),
        );
        for (k, v) in set {
            pairs.retain(|(pk, _)| pk != k);
            if let Some(v) = v {
                pairs.push(((*k).to_owned(), (*v).to_owned()));
            }
        }
        pairs
            .iter()
            .map(|(k, v)| format!("{k}={}", urlencode(v)))
            .collect::<Vec<_>>()
            .join("&")
    }

    /// The same filter as the JSON API's parameters.
    fn api_qs(&self) -> String {
        let mut pairs = vec![format!("since_minutes={}", self.window)];
        pairs.extend(
            self.values
                .iter()
                .map(|(k, v)| format!("{k}={}", urlencode(v))),
        );
        pairs.join("&")
    }
}

fn choices(counts: &[Count], current: &str) -> Vec<Choice> {
    Choice::facet(
        counts
            .iter()
            .map(|c| (c.value.clone(), format!("{} ({})", c.value, c.count))),
        current,
    )
}

fn cell(v: &Value) -> String {
    match v {
        Value::Null => "—".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[handler]
pub async fn index(req: &Request, state: Data<&Arc<AppState>>) -> Response {
    let session = match session::admin(&state, req).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    let q = query(req);
    let v = View::read(&q);
    let offset: usize = q.get("offset").and_then(|o| o.parse().ok()).unwrap_or(0);
    let f = filters(
        Some(v.window),
        v.get("username"),
        v.get("tool_name"),
        v.get("source"),
        v.get("event_type"),
        v.get("only_errors").map(|e| e == "true"),
        v.get("q"),
    );
    let group = GroupBy::parse(&v.group_by);
    let started = Instant::now();
    let read = state
        .telemetry
        .overview(&f, group, None, PAGE_ROWS, offset)
        .await;
    let event = read_event("query", &f, &[("group_by", Some(v.group_by.clone()))]);
    state
        .audit
        .write_read_outcome(&session.caller.actor, event, started, &read)
        .await;
    let (kpis, facets, page) = match read {
        Ok(read) => read,
        Err(e) => return respond::from_error(&state, &session, e),
    };
    let grouped = group.is_some();
    let filterable = matches!(v.group_by.as_str(), "username" | "tool_name" | "source");
    let mut columns: Vec<String> = Vec::new();
    if let (false, Some(Value::Object(first))) = (grouped, page.rows.first()) {
        columns = first.keys().cloned().collect();
    }
    let rows: Vec<TelemetryRow> = page
        .rows
        .iter()
        .map(|r| {
            if grouped {
                let bucket = cell(&r["bucket"]);
                // A null bucket (events without that field) cannot be filtered to.
                let linkable = filterable && !r["bucket"].is_null();
                TelemetryRow {
                    href: linkable.then(|| {
                        format!(
                            "/admin/telemetry?{}",
                            v.qs(&[
                                (v.group_by.as_str(), Some(&bucket)),
                                ("group_by", Some("none"))
                            ])
                        )
                    }),
                    value: r["invocations"].as_i64().unwrap_or(0),
                    cells: [
                        "bucket",
                        "invocations",
                        "distinct_users",
                        "distinct_sessions",
                        "errors",
                    ]
                    .iter()
                    .map(|k| cell(&r[*k]))
                    .collect(),
                }
            } else {
                TelemetryRow {
                    href: None,
                    value: 0,
                    cells: columns.iter().map(|c| cell(&r[c])).collect(),
                }
            }
        })
        .collect();
    let max = rows.iter().map(|r| r.value).max().unwrap_or(0).max(1);
    let window_label = window_label(&WINDOWS, v.window);
    let sentence = if kpis.events_total == 0 {
        format!("No events in the {window_label}.")
    } else {
        format!(
            "{} events in the {window_label} · {} users · {:.2}% errors.",
            kpis.events_total,
            kpis.distinct_users,
            kpis.error_rate * 100.0
        )
    };
    let here = |offset: usize| format!("/admin/telemetry?{}&offset={offset}", v.qs(&[]));
    let current = |k: &str| v.get(k).unwrap_or_default();
    respond::page(&TelemetryPage {
        chrome: session.chrome(&state, Page::Telemetry, "Telemetry"),
        ask_configured: state.ask.configured(),
        sentence,
        api_url: format!(
            "/api/admin/telemetry/query?{}&group_by={}",
            v.api_qs(),
            v.group_by
        ),
        window: v.window,
        events: kpis.events_total.to_string(),
        users: kpis.distinct_users.to_string(),
        tools: kpis.distinct_tools.to_string(),
        error_rate: format!("{:.2}%", kpis.error_rate * 100.0),
        errors: kpis.errors.to_string(),
        users_url: format!(
            "/admin/telemetry?{}",
            v.qs(&[("group_by", Some("username"))])
        ),
        tools_url: format!(
            "/admin/telemetry?{}",
            v.qs(&[("group_by", Some("tool_name"))])
        ),
        errors_url: format!(
            "/admin/telemetry?{}",
            v.qs(&[("only_errors", Some("true"))])
        ),
        windows: WINDOWS
            .iter()
            .map(|(m, l)| Choice::new(m.to_string(), *l, &v.window.to_string()))
            .collect(),
        groupings: GROUPINGS
            .iter()
            .map(|(k, l)| Choice::new(*k, *l, &v.group_by))
            .collect(),
        users_facet: choices(&facets.users, &current("username")),
        tools_facet: choices(&facets.tools, &current("tool_name")),
        sources_facet: choices(&facets.sources, &current("source")),
        types_facet: choices(&facets.event_types, &current("event_type")),
        q: current("q"),
        only_errors: current("only_errors") == "true",
        export_csv: format!("/api/admin/telemetry/export?{}&format=csv", v.api_qs()),
        export_parquet: format!("/api/admin/telemetry/export?{}&format=parquet", v.api_qs()),
        grouped,
        bucket_label: GROUPINGS
            .iter()
            .find(|(k, _)| *k == v.group_by)
            .map_or("Bucket", |(_, l)| l)
            .to_owned(),
        columns,
        rows,
        max,
        total: page.total,
        prev_page: (offset > 0).then(|| here(offset.saturating_sub(PAGE_ROWS))),
        next_page: page.next_offset.map(here),
    })
}
