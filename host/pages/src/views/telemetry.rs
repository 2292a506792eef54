use askama::Template;

use super::Choice;
use crate::Chrome;

/// A row of the grouped or raw table.
#[derive(Debug, Clone)]
pub struct TelemetryRow {
    /// The cells, as text.
    pub cells: Vec<String>,
    /// Invocations, for the bar.
    pub value: i64,
    /// The page filtered to this bucket (user, tool and source groupings).
    pub href: Option<String>,
}

/// `/admin/telemetry`.
#[derive(Template)]
#[template(path = "telemetry.html")]
pub struct TelemetryPage {
    /// The frame.
    pub chrome: Chrome,
    /// One sentence over the window.
    pub sentence: String,
    /// The JSON twin.
    pub api_url: String,
    /// Minutes of the window.
    pub window: u32,
    /// Events.
    pub events: String,
    /// Distinct users.
    pub users: String,
    /// Distinct tools.
    pub tools: String,
    /// Failed share.
    pub error_rate: String,
    /// Failed events.
    pub errors: String,
    /// Grouped by user.
    pub users_url: String,
    /// Grouped by tool.
    pub tools_url: String,
    /// Only failures.
    pub errors_url: String,
    /// Windows offered.
    pub windows: Vec<Choice>,
    /// Groupings offered.
    pub groupings: Vec<Choice>,
    /// User options.
    pub users_facet: Vec<Choice>,
    /// Tool options.
    pub tools_facet: Vec<Choice>,
    /// Source options.
    pub sources_facet: Vec<Choice>,
    /// Event type options.
    pub types_facet: Vec<Choice>,
    /// The search text.
    pub q: String,
    /// Only failed calls.
    pub only_errors: bool,
    /// CSV export of the filter.
    pub export_csv: String,
    /// Parquet export of the filter.
    pub export_parquet: String,
    /// Whether the rows are grouped.
    pub grouped: bool,
    /// The bucket column's header.
    pub bucket_label: String,
    /// Raw rows' columns.
    pub columns: Vec<String>,
    /// The rows.
    pub rows: Vec<TelemetryRow>,
    /// The largest invocation count (the bars' scale).
    pub max: i64,
    /// Rows in all.
    pub total: i64,
    /// The previous page.
    pub prev_page: Option<String>,
    /// The next page.
    pub next_page: Option<String>,
    /// Whether the ask box can be used (an LLM is configured).
    pub ask_configured: bool,
}
