//! One module per page: its template struct and the rows it lists. Every field is plain,
//! already-formatted data; templates escape it.

mod access;
mod activity;
mod auth;
mod catalog;
mod marketplace;
mod memory;
mod profile;
mod sessions;
mod tables;
mod telemetry;
mod tokens;
mod users;

pub use access::{AccessPage, AccessRow, GrantCell};
pub use activity::{ActivityPage, ActivityRow, ActivityRows, Kpis, SavedView};
pub use auth::{ApiDocsPage, ErrorPage, LoginPage};
pub use catalog::{Bucket, CatalogEntry, CatalogPage, TablePage};
pub use marketplace::{MarketCard, MarketItemPage, MarketplacePage};
pub use memory::{MemoryPage, MemoryRow, Pair};
pub use profile::ProfilePage;
pub use sessions::{SessionRow, SessionsPage, TranscriptPage, TurnView};
pub use tables::{TableEdit, TableRow, TableTab, TablesPage};
pub use telemetry::{TelemetryPage, TelemetryRow};
pub use tokens::{AdminTokensPage, TokenView};
pub use users::{
    GroupView, GroupsPage, MySessionsPage, UserPage, UserSessionView, UserView, UsersPage,
};

/// An option of a `<select>`.
#[derive(Debug, Clone)]
pub struct Choice {
    /// Its value.
    pub value: String,
    /// What it shows.
    pub label: String,
    /// Whether it is chosen.
    pub selected: bool,
}

impl Choice {
    /// An option, chosen when `value` equals `current`.
    pub fn new(value: impl Into<String>, label: impl Into<String>, current: &str) -> Self {
        let value = value.into();
        Self {
            selected: value == current,
            label: label.into(),
            value,
        }
    }

    /// The options of a facet filter (value, label), the `current` one selected. A current
    /// value the facet no longer lists (nothing matched it) stays first and selected, so the
    /// filter shown is the filter applied.
    pub fn facet(options: impl IntoIterator<Item = (String, String)>, current: &str) -> Vec<Self> {
        let mut out: Vec<Self> = options
            .into_iter()
            .map(|(value, label)| Self::new(value, label, current))
            .collect();
        if !current.is_empty() && !out.iter().any(|c| c.selected) {
            out.insert(0, Self::new(current, current, current));
        }
        out
    }
}

/// A tab of a page.
#[derive(Debug, Clone)]
pub struct Tab {
    /// Its link.
    pub href: String,
    /// What it says.
    pub label: String,
    /// Whether it is the one shown.
    pub current: bool,
}
