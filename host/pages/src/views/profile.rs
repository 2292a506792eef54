use askama::Template;

use super::TokenView;
use crate::Chrome;

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
