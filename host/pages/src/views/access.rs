use askama::Template;

use crate::Chrome;

/// One checkbox: a table granted, or not, to a group.
#[derive(Debug, Clone)]
pub struct GrantCell {
    /// `<group id>|<table id>`.
    pub value: String,
    /// Whether the grant exists.
    pub checked: bool,
    /// What the box means, for screen readers.
    pub label: String,
}

/// A table's row of checkboxes.
#[derive(Debug, Clone)]
pub struct AccessRow {
    /// The table id.
    pub id: String,
    /// One cell per group, in the header's order.
    pub cells: Vec<GrantCell>,
}

/// `/admin/access`.
#[derive(Template)]
#[template(path = "access.html")]
pub struct AccessPage {
    /// The frame.
    pub chrome: Chrome,
    /// Group ids and names, the columns.
    pub groups: Vec<(String, String)>,
    /// This page's tables, the rows.
    pub tables: Vec<AccessRow>,
    /// The text table ids were filtered by.
    pub q: String,
    /// This page's number (1-based), sent back with the form.
    pub page: usize,
    /// How many tables match the filter.
    pub matching: usize,
    /// The previous page's link.
    pub prev_page: Option<String>,
    /// The next page's link.
    pub next_page: Option<String>,
}
