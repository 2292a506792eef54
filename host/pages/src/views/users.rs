use askama::Template;

use super::ActivityRow;
use crate::Chrome;

/// A user as the users page lists them.
#[derive(Debug, Clone)]
pub struct UserView {
    /// Their id.
    pub id: String,
    /// Their e-mail.
    pub email: String,
    /// Their name, or a dash.
    pub name: String,
    /// Their groups' names.
    pub groups: Vec<String>,
    /// Whether they may sign in.
    pub active: bool,
    /// Whether a password is set.
    pub has_password: bool,
    /// When they were created.
    pub created: String,
}

/// `/admin/users`.
#[derive(Template)]
#[template(path = "users.html")]
pub struct UsersPage {
    /// The frame.
    pub chrome: Chrome,
    /// This page's users, by e-mail.
    pub users: Vec<UserView>,
    /// The text e-mails and names were filtered by.
    pub q: String,
    /// Users matching the filter.
    pub total: i64,
    /// The previous page's link.
    pub prev_page: Option<String>,
    /// The next page's link.
    pub next_page: Option<String>,
}

/// One of a user's session files.
#[derive(Debug, Clone)]
pub struct UserSessionView {
    /// The file name.
    pub name: String,
    /// Its transcript page, when still on disk.
    pub href: Option<String>,
    /// Its download, when still on disk.
    pub download: Option<String>,
    /// Last modified.
    pub modified: String,
    /// Its size.
    pub size: String,
    /// Tool calls (when processed).
    pub calls: String,
    /// Failed calls (when processed).
    pub errors: String,
}

/// `/admin/users/<id>`: a user's sessions and activity.
#[derive(Template)]
#[template(path = "user.html")]
pub struct UserPage {
    /// The frame.
    pub chrome: Chrome,
    /// The user.
    pub user: UserView,
    /// This page of their session files, newest first.
    pub sessions: Vec<UserSessionView>,
    /// Every file as one ZIP.
    pub download_all: String,
    /// The sessions' JSON twin.
    pub sessions_api: String,
    /// The activity's JSON twin.
    pub activity_api: String,
    /// The audit log filtered to them.
    pub activity_page: String,
    /// Their latest audit rows.
    pub rows: Vec<ActivityRow>,
    /// Session files in all.
    pub sessions_total: i64,
    /// The previous page of session files.
    pub prev_page: Option<String>,
    /// The next page of session files.
    pub next_page: Option<String>,
}

/// A group with its members.
#[derive(Debug, Clone)]
pub struct GroupView {
    /// Its name.
    pub name: String,
    /// Its description.
    pub description: String,
    /// A system group (Admin, Everyone).
    pub system: bool,
    /// Its first members' e-mails.
    pub members: Vec<String>,
    /// Members not shown.
    pub more_members: i64,
    /// How many grants it holds.
    pub grants: i64,
}

/// `/admin/groups`.
#[derive(Template)]
#[template(path = "groups.html")]
pub struct GroupsPage {
    /// The frame.
    pub chrome: Chrome,
    /// This page's groups, system groups first.
    pub groups: Vec<GroupView>,
    /// Groups in all.
    pub total: usize,
    /// The previous page's link.
    pub prev_page: Option<String>,
    /// The next page's link.
    pub next_page: Option<String>,
}

/// `/profile/sessions`: the signed-in user's own session files.
#[derive(Template)]
#[template(path = "my_sessions.html")]
pub struct MySessionsPage {
    /// The frame.
    pub chrome: Chrome,
    /// Their files, newest first.
    pub sessions: Vec<UserSessionView>,
    /// Newer files.
    pub prev_page: Option<String>,
    /// Older files.
    pub next_page: Option<String>,
}
