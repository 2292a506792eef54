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
    /// Its tables.
    pub rows: Vec<TableRow>,
    /// This page's URL.
    pub back: String,
}
