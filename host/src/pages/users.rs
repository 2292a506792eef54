//! `/admin/users`, `/admin/users/<id>` (the user's session files with single and ZIP
//! downloads, and their latest activity) and `/admin/groups`; read like `/api/admin/users`,
//! `/api/admin/users/{id}/sessions` and `/activity` and audited the same way.

use std::sync::Arc;
use std::time::Instant;

use poem::http::StatusCode;
use poem::web::{Data, Path};
use poem::{handler, Body, Request, Response};
use serde_json::json;
use svc_core::Error;
use svc_pages::views::{
    GroupView, GroupsPage, MySessionsPage, UserPage, UserSessionView, UserView, UsersPage,
};
use svc_pages::Page;
use svc_store::audit::{AuditFilter, Event};
use svc_store::users::User;
use svc_telemetry::sessions::UserSession;

use super::catalog::bytes;
use super::session::urlencode;
use super::{activity, outcome, pager, query, respond, session, with_outcome};
use crate::api::admin_sessions::browse_event;
use crate::state::AppState;

/// A session file as a row; links only while the file is on disk.
fn file_row(s: &UserSession, href: Option<String>, download: String) -> UserSessionView {
    UserSessionView {
        href: href.filter(|_| s.on_disk),
        download: s.on_disk.then_some(download),
        name: s.name.clone(),
        modified: s.modified_at.clone().unwrap_or_default(),
        size: s.bytes.map_or_else(|| "—".into(), |b| bytes(b as i64)),
        calls: s
            .summary
            .as_ref()
            .map_or_else(|| "—".into(), |x| x.tool_calls.to_string()),
        errors: s
            .summary
            .as_ref()
            .map_or_else(|| "—".into(), |x| x.tool_errors.to_string()),
    }
}

/// A user as a row, with their groups' names.
fn view(u: User, groups: Vec<String>) -> UserView {
    UserView {
        has_password: u.password_hash.is_some(),
        id: u.id,
        email: u.email,
        name: u.name.unwrap_or_else(|| "—".into()),
        groups,
        active: u.active,
        created: u.created_at.unwrap_or_default().chars().take(10).collect(),
    }
}

/// Users and groups per page.
const PAGE_ROWS: u32 = 100;
/// Session files a user's page lists at a time.
const USER_FILES: usize = 50;
/// Members a group's row names; the rest are counted.
const MEMBERS_SHOWN: u32 = 20;

#[handler]
pub async fn index(req: &Request, state: Data<&Arc<AppState>>) -> Response {
    let session = match session::admin(&state, req).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    let q = query(req);
    let search = q.text("q").unwrap_or_default();
    let page = q.page();
    let offset = (page as u64 - 1) * u64::from(PAGE_ROWS);
    let result = async {
        let (users, total) = state
            .store
            .users_page(Some(&search), PAGE_ROWS, offset)
            .await?;
        let ids: Vec<String> = users.iter().map(|u| u.id.clone()).collect();
        let mut groups = state.store.group_names_of_users(&ids).await?;
        let rows = users
            .into_iter()
            .map(|u| {
                let names = groups.remove(&u.id).unwrap_or_default();
                view(u, names)
            })
            .collect::<Vec<_>>();
        Ok::<_, Error>((rows, total))
    }
    .await;
    match result {
        Ok((users, total)) => {
            let (prev_page, next_page) = pager(
                "/admin/users",
                &[("q", &search)],
                page,
                PAGE_ROWS as usize,
                total as usize,
            );
            respond::page(&UsersPage {
                chrome: session.chrome(&state, Page::Users, "Users"),
                prev_page,
                next_page,
                users,
                q: search,
                total,
            })
        }
        Err(e) => respond::from_error(&state, &session, e),
    }
}

#[handler]
pub async fn detail(req: &Request, id: Path<String>, state: Data<&Arc<AppState>>) -> Response {
    let session = match session::admin(&state, req).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    let user = match state.store.user_by_id(&id).await {
        Ok(Some(u)) => u,
        Ok(None) => {
            return respond::error_page(
                &state,
                Some(&session),
                StatusCode::NOT_FOUND,
                "User not found",
                "No user has this id.",
            )
        }
        Err(e) => return respond::from_error(&state, &session, e.into()),
    };
    let actor = &session.caller.actor;
    let started = Instant::now();
    let page = query(req).page();
    let files = state
        .sessions
        .user_sessions(&user.id, USER_FILES, (page - 1).saturating_mul(USER_FILES))
        .await;
    let event = browse_event("user_sessions", &[("user_id", json!(user.id))]);
    state
        .audit
        .write_read_outcome(actor, event, started, &files)
        .await;
    let started = Instant::now();
    let filter = AuditFilter {
        user_id: Some(user.id.clone()),
        ..AuditFilter::default()
    };
    let activity = state
        .store
        .audit_page(&filter, None, 20)
        .await
        .map_err(Error::from);
    let event = Event::new("admin.user_activity_read")
        .resource(format!("users/{}/activity", user.id))
        .param("target_user_id", user.id.as_str());
    state
        .audit
        .write_read_outcome(actor, event, started, &activity)
        .await;
    let (files, activity) = match (files, activity) {
        (Ok(f), Ok(a)) => (f, a),
        (Err(e), _) | (_, Err(e)) => return respond::from_error(&state, &session, e),
    };
    let uid = urlencode(&user.id);
    let sessions = files
        .rows
        .iter()
        .map(|s| {
            let href = format!("/admin/sessions/{uid}/{}", urlencode(&s.name));
            let download = format!(
                "/api/admin/users/{uid}/sessions/{}/download",
                urlencode(&s.name)
            );
            file_row(s, Some(href), download)
        })
        .collect();
    let rows = activity::user_rows(&activity.rows, &user.id);
    let user = match state.store.groups_of_user(&user.id).await {
        Ok(groups) => view(user, groups.into_iter().map(|g| g.name).collect()),
        Err(e) => return respond::from_error(&state, &session, e.into()),
    };
    let (prev_page, next_page) = pager(
        &format!("/admin/users/{uid}"),
        &[],
        page,
        USER_FILES,
        files.total as usize,
    );
    respond::page(&UserPage {
        chrome: session.chrome(&state, Page::Users, &user.email),
        sessions_total: files.total,
        prev_page,
        next_page,
        download_all: format!("/api/admin/users/{uid}/sessions/download-all"),
        sessions_api: format!("/api/admin/users/{uid}/sessions"),
        activity_api: format!("/api/admin/users/{uid}/activity"),
        activity_page: format!("/admin/activity?window=43200&user_id={uid}"),
        user,
        sessions,
        rows,
    })
}

#[handler]
pub async fn groups_page(req: &Request, state: Data<&Arc<AppState>>) -> Response {
    let session = match session::admin(&state, req).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    let q = query(req);
    let page = q.page();
    let result = async {
        let all = state.store.list_groups().await?;
        let total = all.len();
        let mut out = Vec::new();
        let skip = (page - 1).saturating_mul(PAGE_ROWS as usize);
        for g in all.into_iter().skip(skip).take(PAGE_ROWS as usize) {
            let (members, count, grants) = tokio::try_join!(
                state.store.first_members(&g.id, MEMBERS_SHOWN),
                state.store.count_members(&g.id),
                state.store.count_grants(&g.id),
            )?;
            out.push(GroupView {
                more_members: count - members.len() as i64,
                members,
                grants,
                name: g.name,
                description: g.description.unwrap_or_default(),
                system: g.is_system,
            });
        }
        Ok::<_, Error>((out, total))
    }
    .await;
    match result {
        Ok((groups, total)) => {
            let (prev_page, next_page) =
                pager("/admin/groups", &[], page, PAGE_ROWS as usize, total);
            respond::page(&GroupsPage {
                chrome: session
                    .chrome(&state, Page::Users, "Groups")
                    .with_flash(outcome(&q)),
                prev_page,
                next_page,
                groups,
                total,
            })
        }
        Err(e) => respond::from_error(&state, &session, e),
    }
}

#[handler]
pub async fn create_group(req: &Request, body: Body, state: Data<&Arc<AppState>>) -> Response {
    let (session, form) = match session::admin_form(&state, req, body).await {
        Ok(ok) => ok,
        Err(r) => return r,
    };
    let name = form.text("name").unwrap_or_default();
    let description = form.text("description");
    match state
        .admin
        .create_group(&session.caller.actor, &name, description.as_deref())
        .await
    {
        Ok(g) => respond::see_other(&with_outcome(
            "/admin/groups",
            true,
            &format!("Created {}", g.name),
        )),
        Err(e) => respond::see_other(&with_outcome("/admin/groups", false, &e.to_string())),
    }
}

/// `/profile/sessions`: the signed-in user's own files, as `GET /api/me/sessions` lists them.
#[handler]
pub async fn mine(req: &Request, state: Data<&Arc<AppState>>) -> Response {
    let session = match session::signed_in(&state, req).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    const PAGE: usize = 50;
    let offset: usize = query(req)
        .get("offset")
        .and_then(|o| o.parse().ok())
        .unwrap_or(0);
    let files = match state
        .sessions
        .user_sessions(&session.caller.user.id, PAGE, offset)
        .await
    {
        Ok(f) => f,
        Err(e) => return respond::from_error(&state, &session, e),
    };
    let sessions = files
        .rows
        .iter()
        .map(|s| file_row(s, None, format!("/api/me/sessions/{}", urlencode(&s.name))))
        .collect();
    respond::page(&MySessionsPage {
        chrome: session.chrome(&state, Page::Profile, "My sessions"),
        sessions,
        prev_page: (offset > 0)
            .then(|| format!("/profile/sessions?offset={}", offset.saturating_sub(PAGE))),
        next_page: files
            .next_offset
            .map(|n| format!("/profile/sessions?offset={n}")),
    })
}
