//! The frame around every page: title, navigation, the signed-in user and the CSRF token
//! that the page's forms and scripts send back.

/// One navigation link.
#[derive(Debug, Clone)]
pub struct NavLink {
    /// Where it goes.
    pub href: &'static str,
    /// What it says.
    pub label: &'static str,
    /// Whether it is the page being shown.
    pub current: bool,
}

/// A one-line outcome shown at the top of a page (after a form was sent).
#[derive(Debug, Clone)]
pub struct Flash {
    /// The text.
    pub text: String,
    /// Success (true) or failure.
    pub ok: bool,
}

/// Which page is being drawn, for the navigation's `aria-current`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Page {
    /// `/catalog` and a table's page.
    Catalog,
    /// `/marketplace`.
    Marketplace,
    /// `/profile` and the user's own pages.
    Profile,
    /// `/admin/activity`.
    Activity,
    /// `/admin/telemetry`.
    Telemetry,
    /// `/admin/sessions`.
    Sessions,
    /// `/admin/tables`.
    Tables,
    /// `/admin/users`, groups, access and tokens.
    Users,
    /// `/corporate-memory`.
    Memory,
    /// An error page.
    Error,
}

const LINKS: [(&str, &str, Page, bool); 8] = [
    ("/catalog", "Catalog", Page::Catalog, false),
    ("/marketplace", "Marketplace", Page::Marketplace, false),
    ("/admin/activity", "Audit log", Page::Activity, true),
    ("/admin/telemetry", "Telemetry", Page::Telemetry, true),
    ("/admin/sessions", "Sessions", Page::Sessions, true),
    ("/admin/tables", "Tables", Page::Tables, true),
    ("/admin/users", "Users & access", Page::Users, true),
    ("/corporate-memory", "Memory", Page::Memory, true),
];

/// The frame: every page template extends `base.html`, which reads this.
#[derive(Debug, Clone)]
pub struct Chrome {
    /// The page's title.
    pub title: String,
    /// The signed-in user's e-mail.
    pub user: String,
    /// Whether they are an administrator (admin links are shown only then).
    pub is_admin: bool,
    /// The session's CSRF token, for forms (`csrf` field) and scripts (`X-CSRF-Token`).
    pub csrf: String,
    /// The links the user may follow.
    pub nav: Vec<NavLink>,
    /// An outcome to show.
    pub flash: Option<Flash>,
    /// The stylesheet's hashed URL.
    pub css: &'static str,
    /// The script's hashed URL.
    pub js: &'static str,
}

impl Chrome {
    /// The frame of `page` for a user.
    pub fn new(
        page: Page,
        title: impl Into<String>,
        user: &str,
        is_admin: bool,
        csrf: String,
    ) -> Self {
        Self {
            title: title.into(),
            user: user.to_owned(),
            is_admin,
            csrf,
            nav: LINKS
                .iter()
                .filter(|(_, _, _, admin_only)| is_admin || !admin_only)
                .map(|&(href, label, p, _)| NavLink {
                    href,
                    label,
                    current: p == page,
                })
                .collect(),
            flash: None,
            css: crate::assets::css(),
            js: crate::assets::js(),
        }
    }

    /// The same frame with an outcome to show.
    pub fn with_flash(mut self, flash: Option<Flash>) -> Self {
        self.flash = flash;
        self
    }
}
