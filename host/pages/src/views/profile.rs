use askama::Template;

use crate::Chrome;

/// One of the user's personal access tokens.
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
    /// Whether it was revoked.
    pub revoked: bool,
}

/// `/profile` (and `/tokens`): who the user is and their tokens.
#[derive(Template)]
#[template(path = "profile.html")]
pub struct ProfilePage {
    /// The frame.
    pub chrome: Chrome,
    /// The user's name (or e-mail).
    pub name: String,
    /// Their e-mail.
    pub email: String,
    /// Their groups.
    pub groups: Vec<String>,
    /// Their tokens, newest first.
    pub tokens: Vec<TokenView>,
}
