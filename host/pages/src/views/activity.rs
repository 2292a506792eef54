use askama::Template;

use super::Choice;
use crate::Chrome;

/// The four cards over the rows under the filter.
#[derive(Debug, Clone)]
pub struct Kpis {
    /// Rows.
    pub events: String,
    /// Distinct users.
    pub users: String,
    /// Failed share, as a percentage.
    pub error_rate: String,
    /// Failed rows.
    pub errors: String,
    /// 95th percentile duration, or a dash.
    pub p95: String,
}

/// One audit row.
#[derive(Debug, Clone)]
pub struct ActivityRow {
    /// Its id.
    pub id: String,
    /// Its timestamp (RFC 3339).
    pub timestamp: String,
    /// The time as shown (`HH:MM:SS` today, else `DD.MM HH:MM`).
    pub time: String,
    /// The user's e-mail or id.
    pub user: String,
    /// The user id.
    pub user_id: String,
    /// The source (client kind or `system`).
    pub source: String,
    /// The action.
    pub action: String,
    /// The resource.
    pub resource: String,
    /// Milliseconds, for sorting.
    pub duration_ms: i64,
    /// The duration as shown.
    pub duration: String,
    /// `success` or the error.
    pub result: String,
    /// Whether it failed.
    pub is_error: bool,
    /// The parameters, pretty JSON.
    pub params: String,
    /// The state before, pretty JSON or a dash.
    pub params_before: String,
    /// The client's address.
    pub client_ip: Option<String>,
    /// The request id.
    pub correlation_id: Option<String>,
    /// This page filtered to the row's user.
    pub user_filter: String,
    /// This page filtered to the row's action.
    pub action_filter: String,
}

/// A saved view of the signed-in administrator.
#[derive(Debug, Clone)]
pub struct SavedView {
    /// Its id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// The page with its filters.
    pub url: String,
}

/// `/admin/activity`.
#[derive(Template)]
#[template(path = "activity.html")]
pub struct ActivityPage {
    /// The frame.
    pub chrome: Chrome,
    /// One sentence over the window.
    pub sentence: String,
    /// The same rows from the JSON API.
    pub api_url: String,
    /// The cards.
    pub kpis: Kpis,
    /// This page filtered to failures.
    pub error_url: String,
    /// Minutes of the window.
    pub window: u32,
    /// The windows offered: minutes and label.
    pub windows: Vec<(u32, &'static str)>,
    /// User filter options.
    pub users: Vec<Choice>,
    /// Action filter options.
    pub actions: Vec<Choice>,
    /// Result filter options.
    pub results: Vec<Choice>,
    /// Source filter options.
    pub sources: Vec<Choice>,
    /// The parameter search text.
    pub q: String,
    /// Auto-refresh on.
    pub live: bool,
    /// The administrator's saved views.
    pub views: Vec<SavedView>,
    /// The first page of rows.
    pub rows: Vec<ActivityRow>,
    /// The next page's fragment URL.
    pub next_page: Option<String>,
}

/// The rows of a further page ("Load more"), as table rows only.
#[derive(Template)]
#[template(path = "activity_rows.html")]
pub struct ActivityRows {
    /// The rows.
    pub rows: Vec<ActivityRow>,
}
