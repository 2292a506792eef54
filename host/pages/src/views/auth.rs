use askama::Template;

use crate::Chrome;

/// `/login`.
#[derive(Template)]
#[template(path = "login.html")]
pub struct LoginPage {
    /// Why the last attempt failed.
    pub error: Option<String>,
    /// Where to go after logging in (already checked to be a local path).
    pub next: String,
    /// The e-mail typed last time.
    pub email: String,
    /// The stylesheet's URL.
    pub css: &'static str,
}

/// A 403 or 404 page for a signed-in user.
#[derive(Template)]
#[template(path = "error.html")]
pub struct ErrorPage {
    /// The frame.
    pub chrome: Chrome,
    /// The HTTP status.
    pub status: u16,
    /// The headline.
    pub heading: String,
    /// What happened and what to do.
    pub message: String,
}
