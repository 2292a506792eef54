use askama::Template;

use crate::Chrome;

/// A table as the catalog lists it.
#[derive(Debug, Clone)]
pub struct CatalogEntry {
    /// Its id.
    pub id: String,
    /// Its description.
    pub description: String,
    /// Its query mode (`local`, `remote`, …).
    pub mode: String,
    /// What the mode means for a reader.
    pub mode_hint: String,
    /// Rows and bytes, as text.
    pub size: String,
    /// When its data or metadata was last refreshed.
    pub freshness: String,
}

/// The business tables of one bucket.
#[derive(Debug, Clone)]
pub struct Bucket {
    /// The bucket (`default` when unset).
    pub name: String,
    /// How many tables it holds in all (a page may show part of them).
    pub total: usize,
    /// Its tables on this page.
    pub tables: Vec<CatalogEntry>,
}

/// `/catalog`: business data by bucket, then the internal tables.
#[derive(Template)]
#[template(path = "catalog.html")]
pub struct CatalogPage {
    /// The frame.
    pub chrome: Chrome,
    /// The text tables were filtered by (id or description).
    pub q: String,
    /// This page's business tables by bucket.
    pub buckets: Vec<Bucket>,
    /// The internal tables.
    pub internal: Vec<CatalogEntry>,
    /// How many business tables match.
    pub business_count: usize,
    /// The previous page's link.
    pub prev_page: Option<String>,
    /// The next page's link.
    pub next_page: Option<String>,
}

/// `/catalog/<id>`: a table's schema and sample.
#[derive(Template)]
#[template(path = "table.html")]
pub struct TablePage {
    /// The frame.
    pub chrome: Chrome,
    /// The table id.
    pub id: String,
    /// Its description.
    pub description: String,
    /// Name, type, nullable.
    pub columns: Vec<(String, String, bool)>,
    /// Why the schema could not be read.
    pub schema_error: Option<String>,
    /// The sample's header.
    pub sample_columns: Vec<String>,
    /// The sample's rows, as text.
    pub sample_rows: Vec<Vec<String>>,
    /// Why the sample could not be read.
    pub sample_error: Option<String>,
}
