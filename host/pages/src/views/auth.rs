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

/// `/api/docs`: Swagger UI over the server's OpenAPI document (public, like the document).
#[derive(Template)]
#[template(path = "api_docs.html")]
pub struct ApiDocsPage {
    /// Swagger UI's stylesheet.
    pub css: &'static str,
    /// Swagger UI.
    pub bundle: &'static str,
    /// The script that starts it.
    pub init: &'static str,
}

impl Default for ApiDocsPage {
    fn default() -> Self {
        use crate::assets::Named;
        ApiDocsPage {
            css: Named::SwaggerCss.path(),
            bundle: Named::SwaggerJs.path(),
            init: Named::DocsJs.path(),
        }
    }
}
