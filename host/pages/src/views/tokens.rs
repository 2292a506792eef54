//! Personal access tokens as rows, and `/admin/tokens`: every user's tokens.

use askama::Template;

use crate::Chrome;

/// A personal access token as a row.
#[derive(Debug, Clone)]
pub struct TokenView {
    /// Its id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// The last characters of its id.
    pub prefix: String,
    /// When it was created.
    pub created: String,
    /// When it expires, or `never`.
    pub expires: String,
    /// When it was last used, or a dash.
    pub last_used: String,
    /// Address of its last use, or a dash.
    pub last_ip: String,
    /// Whether it was revoked.
    pub revoked: bool,
}

/// `/admin/tokens`: every user's tokens, newest first, filtered by owner.
#[derive(Template)]
#[template(path = "admin_tokens.html")]
pub struct AdminTokensPage {
    /// The frame.
    pub chrome: Chrome,
    /// This page's tokens, each with its owner's e-mail.
    pub tokens: Vec<(String, TokenView)>,
    /// The owner e-mail filtered by (empty: everyone).
    pub user: String,
    /// Tokens matching the filter.
    pub total: i64,
    /// The previous page's link.
    pub prev_page: Option<String>,
    /// The next page's link.
    pub next_page: Option<String>,
}
