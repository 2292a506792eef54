//! svc-pages: what each web page shows, as compile-time-checked templates over plain view
//! models, and the stylesheet and script they load.
//!
//! Owns the templates (`templates/`, askama: a missing field is a compile error and every
//! value is HTML-escaped unless a template says otherwise, which none does), the view models
//! the host fills from the same services its JSON API uses, and the embedded, content-hashed
//! assets ([`assets`]). It knows nothing of HTTP, cookies or the store: the host's `pages`
//! module reads the data, checks the session and CSRF token, and sends what this crate
//! renders. Must never import poem or any svc crate; its principal type is [`Chrome`], the
//! frame every page is drawn in.

pub mod assets;
mod chrome;
pub mod views;

pub use askama::Template;
pub use chrome::{Chrome, Flash, NavLink, Page};
