use askama::Template;

use super::{Choice, Tab};
use crate::Chrome;

/// A plugin, skill or agent in the listing.
#[derive(Debug, Clone)]
pub struct MarketCard {
    /// Its page.
    pub href: String,
    /// Its name.
    pub name: String,
    /// `plugin`, `skill` or `agent`.
    pub kind: String,
    /// Its category.
    pub category: Option<String>,
    /// Its review status (flea submissions).
    pub status: Option<String>,
    /// Its description.
    pub description: String,
    /// Invocations in 30 days.
    pub invocations: i64,
    /// Distinct users in 30 days.
    pub users: i64,
    /// `▲ 12%`, `▼ 5%` or a dash (too few uses to say).
    pub trend: String,
    /// `trend-up`, `trend-down` or `muted`.
    pub trend_class: &'static str,
}

/// `/marketplace`.
#[derive(Template)]
#[template(path = "marketplace.html")]
pub struct MarketplacePage {
    /// The frame.
    pub chrome: Chrome,
    /// `curated`, `flea` or `my`.
    pub tab: String,
    /// The tabs.
    pub tabs: Vec<Tab>,
    /// The search text.
    pub q: String,
    /// Orders offered.
    pub sorts: Vec<Choice>,
    /// The JSON twin.
    pub api_url: String,
    /// Items matching.
    pub total: i64,
    /// The page.
    pub items: Vec<MarketCard>,
    /// The previous page.
    pub prev_page: Option<String>,
    /// The next page.
    pub next_page: Option<String>,
}

/// One item with its 30-day series.
#[derive(Template)]
#[template(path = "market_item.html")]
pub struct MarketItemPage {
    /// The frame.
    pub chrome: Chrome,
    /// Its name.
    pub name: String,
    /// Its description.
    pub description: String,
    /// Invocations in 30 days.
    pub invocations: i64,
    /// Distinct users in 30 days.
    pub users: i64,
    /// The trend, as text.
    pub trend: String,
    /// Its style.
    pub trend_class: &'static str,
    /// The JSON twin.
    pub api_url: String,
    /// Day and invocations, oldest first.
    pub series: Vec<(String, i64)>,
    /// The largest day (the bars' scale).
    pub max: i64,
}
