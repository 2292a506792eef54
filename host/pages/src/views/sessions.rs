use askama::Template;

use super::Choice;
use crate::Chrome;

/// A session in the browser.
#[derive(Debug, Clone)]
pub struct SessionRow {
    /// Its transcript page.
    pub href: String,
    /// The file name.
    pub file: String,
    /// Its owner.
    pub user: String,
    /// When it started.
    pub started: String,
    /// The primary model.
    pub model: String,
    /// Tool calls.
    pub calls: i64,
    /// Failed tool calls.
    pub errors: i64,
}

/// `/admin/sessions` (and `/profile/sessions`).
#[derive(Template)]
#[template(path = "sessions.html")]
pub struct SessionsPage {
    /// The frame.
    pub chrome: Chrome,
    /// Windows offered.
    pub windows: Vec<Choice>,
    /// The owner filter.
    pub username: String,
    /// The search text.
    pub q: String,
    /// Only sessions with errors.
    pub only_errors: bool,
    /// Sessions matching.
    pub total: i64,
    /// The page.
    pub rows: Vec<SessionRow>,
    /// The previous page.
    pub prev_page: Option<String>,
    /// The next page.
    pub next_page: Option<String>,
}

/// One transcript event.
#[derive(Debug, Clone)]
pub struct TurnView {
    /// Its position.
    pub ordinal: u32,
    /// `text`, `tool_use` or `tool_result`.
    pub kind: String,
    /// Who spoke.
    pub role: String,
    /// When.
    pub ts: String,
    /// The tool, for calls.
    pub tool: Option<String>,
    /// The text (results and messages).
    pub text: String,
    /// Whether the text is long enough to fold.
    pub long: bool,
    /// Its first line, for a folded text.
    pub preview: String,
    /// The tool input, pretty JSON.
    pub input: Option<String>,
    /// A failed call or its result.
    pub is_error: bool,
}

/// `/admin/sessions/<user>/<file>`: a page of a transcript.
#[derive(Template)]
#[template(path = "transcript.html")]
pub struct TranscriptPage {
    /// The frame.
    pub chrome: Chrome,
    /// The session list.
    pub back: String,
    /// The file.
    pub file: String,
    /// Its owner.
    pub owner: String,
    /// Events in all.
    pub total: u32,
    /// Failed calls in all.
    pub error_count: usize,
    /// The raw file.
    pub download: String,
    /// The JSON twin.
    pub api: String,
    /// This page's events.
    pub events: Vec<TurnView>,
    /// The first event's number (1-based).
    pub first: usize,
    /// The last event's number.
    pub last: usize,
    /// Earlier events.
    pub prev_page: Option<String>,
    /// Later events.
    pub next_page: Option<String>,
}
