use askama::Template;

use super::{Choice, Tab};
use crate::Chrome;

/// One knowledge item in the review list.
#[derive(Debug, Clone)]
pub struct MemoryRow {
    /// Its id.
    pub id: String,
    /// Its title.
    pub title: String,
    /// Its content.
    pub content: String,
    /// Its status.
    pub status: String,
    /// Its domain, or a dash.
    pub domain: String,
    /// Its category, or a dash.
    pub category: String,
    /// Its tags.
    pub tags: Vec<String>,
    /// Who contributed it.
    pub contributor: String,
    /// Its revision.
    pub revision: i64,
    /// Up-votes.
    pub upvotes: i64,
    /// Down-votes.
    pub downvotes: i64,
    /// The decisions the transition graph allows from its status.
    pub moves: Vec<&'static str>,
}

/// Two items a contradiction or duplicate candidate relates.
#[derive(Debug, Clone)]
pub struct Pair {
    /// The relation's id.
    pub id: String,
    /// The first item, as shown.
    pub a: String,
    /// The second.
    pub b: String,
    /// A note (why they were paired).
    pub note: String,
}

/// `/corporate-memory`: the review queue, contradictions and duplicates.
#[derive(Template)]
#[template(path = "memory.html")]
pub struct MemoryPage {
    /// The frame.
    pub chrome: Chrome,
    /// `items`, `contradictions` or `duplicates`.
    pub tab: &'static str,
    /// The tabs.
    pub tabs: Vec<Tab>,
    /// Items waiting for review.
    pub pending_count: i64,
    /// Status filter options.
    pub statuses: Vec<Choice>,
    /// The search text.
    pub q: String,
    /// This page's URL (forms come back to it).
    pub back: String,
    /// The items.
    pub items: Vec<MemoryRow>,
    /// Items shown.
    pub shown: usize,
    /// Items matching.
    pub total: i64,
    /// The previous page.
    pub prev_page: Option<String>,
    /// The next page.
    pub next_page: Option<String>,
    /// Contradictions or duplicate candidates.
    pub pairs: Vec<Pair>,
}
