use askama::Template;

use crate::Chrome;

/// A tab: one source kind.
#[derive(Debug, Clone)]
pub struct TableTab {
    /// Its link.
    pub href: String,
    /// The source kind.
    pub label: String,
    /// Tables of that kind.
    pub count: usize,
    /// Whether it is shown.
    pub current: bool,
}

/// A registered table.
#[derive(Debug, Clone)]
pub struct TableRow {
    /// Its id.
    pub id: String,
    /// Its query mode.
    pub mode: String,
    /// `bucket / source table`.
    pub source: String,
    /// Its description.
    pub description: String,
    /// Who registered it and when.
    pub registered: String,
    /// The last sync, or a dash.
    pub synced: String,
    /// The last sync error.
    pub error: Option<String>,
}

/// The fields of a table being edited, as the edit form shows them.
#[derive(Debug, Clone, Default)]
pub struct TableEdit {
    /// Its id (not editable).
    pub id: String,
    /// Its bucket, or empty.
    pub bucket: String,
    /// Its source table, or empty.
    pub source_table: String,
    /// Its query mode.
    pub mode: String,
    /// Its sync schedule, or empty.
    pub sync_schedule: String,
    /// Its description, or empty.
    pub description: String,
}

/// `/admin/tables`.
#[derive(Template)]
#[template(path = "tables.html")]
pub struct TablesPage {
    /// The frame.
    pub chrome: Chrome,
    /// A tab per source kind.
    pub tabs: Vec<TableTab>,
    /// The kind shown.
    pub kind: String,
    /// Whether its rows may be edited (not internal).
    pub editable: bool,
    /// The query modes a table of this kind may have.
    pub modes: Vec<String>,
    /// This page's tables.
    pub rows: Vec<TableRow>,
    /// The text ids and descriptions were filtered by.
    pub q: String,
    /// Tables of this kind matching the filter.
    pub matching: usize,
    /// The previous page's link.
    pub prev_page: Option<String>,
    /// The next page's link.
    pub next_page: Option<String>,
    /// The table whose edit form is open (`edit=<id>`).
    pub editing: Option<TableEdit>,
    /// This page's URL.
    pub back: String,
}
