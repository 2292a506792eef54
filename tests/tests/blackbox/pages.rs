//! The web pages in a real headless Chromium: each page loads with no console error and no
//! request off this server, its main interaction works, user content is shown as text and
//! never run, and the session rules hold (login redirect with `next`, CSRF refusal, 403 for
//! a non-admin). Every page visited leaves a screenshot under `target/page-screenshots/`.

use serde_json::{json, Value};

use crate::browser::Browser;
use crate::support::Server;

const PASSWORD: &str = "correct horse battery";
/// Markup that would show a dialog or make a request if any page ran it.
const XSS: &str = "<script>alert(1)</script><img src=x onerror=alert(2)>";

/// A server with an admin and an analyst who both have passwords.
fn server() -> Server {
    let s = Server::start();
    give_passwords(&s);
    s
}

/// Gives the admin a password and creates the analyst `ana@example.com` with one.
pub(crate) fn give_passwords(s: &Server) {
    let set = |email: &str| {
        let out = s.cli(
            &[
                "users",
                "set-password",
                "--email",
                email,
                "--password-stdin",
            ],
            Some(&format!("{PASSWORD}\n")),
        );
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    set("admin@localhost");
    if s.query("SELECT id FROM users WHERE email = 'ana@example.com'")
        .is_empty()
    {
        s.cli_ok(&["users", "create", "--email", "ana@example.com"]);
    }
    set("ana@example.com");
}

pub(crate) fn log_in(b: &Browser, s: &Server, email: &str) {
    b.goto(&s.url("/login"));
    b.type_into("#email", email);
    b.type_into("#password", PASSWORD);
    b.click("form button[type=submit]");
    b.wait_until(
        "leaving the login page",
        "return !location.pathname.startsWith('/login')",
    );
}

/// Loads `path`, saves a screenshot, and checks the page asked nothing of another host, logged
/// no console error and opened no dialog.
pub(crate) fn visit(b: &Browser, s: &Server, path: &str, shot: &str) {
    b.goto(&s.url(path));
    b.screenshot(shot);
    assert_clean(b, s, path);
}

pub(crate) fn assert_clean(b: &Browser, s: &Server, what: &str) {
    assert!(
        !b.dialog_open(),
        "{what}: a dialog opened (injected script ran?)"
    );
    assert_eq!(
        b.foreign_requests(&s.base),
        Vec::<String>::new(),
        "{what}: requests off this server"
    );
    assert_eq!(
        b.console_errors(),
        Vec::<String>::new(),
        "{what}: console errors"
    );
}

#[test]
fn login_redirects_with_next_and_refuses_open_redirects_and_forged_forms() {
    let s = server();
    let b = Browser::start();

    // An unauthenticated page goes to the login form and comes back after it.
    b.goto(&s.url("/admin/activity?window=60"));
    assert!(
        b.url()
            .contains("/login?next=%2Fadmin%2Factivity%3Fwindow%3D60"),
        "{}",
        b.url()
    );
    b.screenshot("login");
    assert_clean(&b, &s, "/login");
    b.type_into("#email", "admin@localhost");
    b.type_into("#password", "wrong password");
    b.click("form button[type=submit]");
    assert_eq!(b.text("#login-error"), "Invalid email or password");
    b.type_into("#password", PASSWORD);
    b.click("form button[type=submit]");
    b.wait_until(
        "the activity page",
        "return location.pathname === '/admin/activity'",
    );
    assert!(
        b.url().ends_with("/admin/activity?window=60"),
        "{}",
        b.url()
    );
    let rows = s.audit_rows("auth.login", 2);
    assert!(
        rows.iter()
            .any(|r| r["client_kind"] == "web" && r["result"] == "success"),
        "{rows:?}"
    );

    // `next` pointing elsewhere is ignored.
    for evil in [
        "//evil.example/x",
        "https://evil.example/",
        "/\\evil.example",
    ] {
        b.goto(&s.url(&format!("/login?next={}", urlencode(evil))));
        // Signed in already: straight on, to this server's catalog.
        assert!(b.url().starts_with(&s.base), "{evil} -> {}", b.url());
        assert!(b.url().ends_with("/catalog"), "{evil} -> {}", b.url());
    }

    // A page's script calls the API with the cookie; without the CSRF token a change is refused.
    let refused = b.js(
        "return fetch('/api/admin/observability/views', {method: 'POST', headers: {'Content-Type': 'application/json'},
           body: JSON.stringify({name: 'x', query: {}})}).then(r => r.status);",
        json!([]),
    );
    assert_eq!(refused, json!(403));
    let admin = s.admin_token();
    let (_, views) = s.get_json("/api/admin/observability/views", &admin);
    assert_eq!(views["views"], json!([]), "nothing saved without the token");
    // A form without its token is refused with a page, and changes nothing.
    let forged = b.js(
        "return fetch('/admin/tables/delete', {method: 'POST', headers: {'Content-Type': 'application/x-www-form-urlencoded'},
           body: 'id=svc_audit&csrf=forged'}).then(r => r.status);",
        json!([]),
    );
    assert_eq!(forged, json!(403));

    // A non-admin gets a 403 page on admin pages, and the catalog.
    let ana = Browser::start();
    log_in(&ana, &s, "ana@example.com");
    ana.goto(&s.url("/admin/activity"));
    ana.screenshot("forbidden");
    assert!(ana.source().contains("Administrators only"));
    ana.goto(&s.url("/admin/tokens"));
    assert!(ana.source().contains("Administrators only"));
    // The browser reports the 403 itself; nothing else may fail.
    let errors = ana.console_errors();
    assert!(
        errors.iter().all(|e| e.contains("status of 403")),
        "{errors:?}"
    );
    assert_eq!(ana.foreign_requests(&s.base), Vec::<String>::new());
    let no_redirects = reqwest::blocking::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let r = no_redirects
        .get(s.url("/admin/activity"))
        .header("cookie", "svc_session=expired.token.value")
        .send()
        .unwrap();
    assert_eq!(
        r.status().as_u16(),
        302,
        "an unusable cookie goes back to login, not a 500"
    );
    assert!(r.headers()["location"]
        .to_str()
        .unwrap()
        .starts_with("/login?next="));
    let cleared = r.headers()["set-cookie"].to_str().unwrap();
    assert!(
        cleared.starts_with("svc_session=;") && cleared.contains("Max-Age=0"),
        "{cleared}"
    );

    // Logging out ends the browser's session.
    b.goto(&s.url("/catalog"));
    b.click(".who form button");
    b.wait_until("the login page", "return location.pathname === '/login'");
    b.goto(&s.url("/catalog"));
    assert!(b.url().contains("/login?next="), "{}", b.url());
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[test]
fn catalog_and_tables_pages_show_tables_and_stream_the_warmup_log() {
    let s = server();
    let admin = s.admin_token();
    let (status, body) = s.post_json(
        "/api/admin/register-table",
        &admin,
        &json!({"id": "orders", "bucket": "sales", "description": XSS}),
    );
    assert!(status < 300, "{body}");
    let b = Browser::start();
    log_in(&b, &s, "admin@localhost");

    visit(&b, &s, "/catalog", "catalog");
    assert_eq!(
        b.text("section[aria-labelledby=business] h3")
            .split(' ')
            .next(),
        Some("sales")
    );
    assert!(
        b.source().contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "the description is shown as text"
    );
    visit(&b, &s, "/catalog?q=zzz-none", "catalog-filtered-empty");
    assert!(
        b.text("section[aria-labelledby=business] .empty")
            .contains("No table matches"),
        "an empty filter says so"
    );
    visit(&b, &s, "/catalog?q=ORDERS", "catalog-filtered");
    assert_eq!(
        b.js(
            "return [...document.querySelectorAll('section[aria-labelledby=business] tbody code')].map(c => c.textContent)",
            json!([])
        ),
        json!(["orders"])
    );
    b.goto(&s.url("/catalog?q=svc_aud"));
    b.click("a[href='/catalog/svc_audit']");
    b.wait_for("#schema");
    b.screenshot("catalog-table");
    assert_clean(&b, &s, "/catalog/svc_audit");

    visit(&b, &s, "/admin/tables", "tables");
    let tabs = b.js(
        "return [...document.querySelectorAll('.tabs a')].map(a => a.textContent.split(' ')[0]);",
        json!([]),
    );
    assert!(
        tabs.as_array().unwrap().iter().any(|t| t == "internal"),
        "{tabs}"
    );
    assert!(
        tabs.as_array().unwrap().iter().any(|t| t == "local"),
        "{tabs}"
    );
    // Register a local table from the page: the row appears, audited as a web change.
    visit(&b, &s, "/admin/tables?kind=local", "tables-local");
    b.type_into("input[name=name]", "events_page");
    b.type_into("input[name=description]", "registered from the page");
    b.click("form[action='/admin/tables/register'] button[type=submit]");
    b.wait_for("#table-events_page");
    let rows = s.audit_rows("registry.register", 1);
    assert!(rows.iter().any(|r| r["client_kind"] == "web"), "{rows:?}");

    // Found by its description; edited from the page (audited, the change shown).
    visit(
        &b,
        &s,
        "/admin/tables?kind=local&q=FROM+THE",
        "tables-found",
    );
    assert_eq!(
        b.js(
            "return [...document.querySelectorAll('tbody tr')].map(r => r.id)",
            json!([])
        ),
        json!(["table-events_page"])
    );
    b.click("a[aria-label='Edit events_page']");
    b.wait_for("form[action='/admin/tables/update']");
    b.js(
        "document.querySelector('form[action=\"/admin/tables/update\"] input[name=description]').value = arguments[0]",
        json!([XSS]),
    );
    b.click("form[action='/admin/tables/update'] button[type=submit]");
    b.wait_until(
        "the saved change",
        "return (document.querySelector('.flash.ok')?.textContent ?? '').includes('Saved events_page')",
    );
    let (_, list) = s.get_json("/api/admin/registry", &admin);
    let row = list["tables"]
        .as_array()
        .and_then(|t| t.iter().find(|r| r["id"] == "events_page"))
        .unwrap_or_else(|| panic!("events_page in {list}"));
    assert_eq!(row["description"], XSS, "{row}");
    let rows = s.audit_rows("registry.update", 1);
    assert_eq!(rows.last().unwrap()["client_kind"], "web");
    assert!(
        b.url().contains("q=FROM"),
        "the filter survives: {}",
        b.url()
    );
    assert_clean(&b, &s, "/admin/tables after an edit");
    visit(&b, &s, "/admin/tables?kind=local", "tables-local");

    // The warmup log shows new lines while a warmup runs.
    b.wait_until(
        "the stream to open",
        "return document.querySelector('[data-sse-state]').textContent === 'live'",
    );
    b.click("button[data-post='/api/admin/cache-warmup/run']");
    b.wait_until(
        "warmup lines",
        "return [...document.querySelectorAll('#warmup-log li')].some(li => li.textContent.startsWith('warmup finished'))",
    );
    b.screenshot("tables-warmup");
    assert_clean(&b, &s, "/admin/tables after a warmup");
}

#[test]
fn activity_page_filters_pages_opens_the_json_panel_and_restores_a_saved_view() {
    let s = server();
    let admin = s.admin_token();
    // Rows to page through, one of them carrying markup in its parameters.
    for i in 0..60 {
        s.get_json(&format!("/api/v2/schema/missing_{i}"), &admin);
    }
    s.post_json(
        "/api/admin/register-table",
        &admin,
        &json!({"id": "xss_probe", "description": XSS}),
    );
    let b = Browser::start();
    log_in(&b, &s, "admin@localhost");

    visit(&b, &s, "/admin/activity", "activity");
    let count = |b: &Browser| {
        b.js(
            "return document.querySelectorAll('#activity-rows tr').length",
            json!([]),
        )
    };
    assert_eq!(count(&b), json!(50));
    b.click("button[data-more]");
    b.wait_until(
        "the next page",
        "return document.querySelectorAll('#activity-rows tr').length > 50",
    );
    assert_clean(&b, &s, "load more");

    // Filter by result: the select submits the form and the URL holds the filter.
    b.js("const s = document.querySelector('select[name=result]'); s.value = 'error'; s.dispatchEvent(new Event('change', {bubbles: true}));", json!([]));
    b.wait_until(
        "the filtered page",
        "return location.search.includes('result=error')",
    );
    let results = b.js(
        "return [...document.querySelectorAll('#activity-rows tr')].map(r => r.dataset.result)",
        json!([]),
    );
    assert!(!results.as_array().unwrap().is_empty());
    assert!(
        results
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r.as_str().unwrap().starts_with("error")),
        "{results}"
    );

    // The JSON panel of the registration shows its params as text.
    b.goto(&s.url("/admin/activity?action_prefix=registry.register"));
    b.click("#activity-rows tr details summary");
    let panel = b.text("#activity-rows tr details pre");
    assert!(panel.contains("xss_probe"), "{panel}");
    b.screenshot("activity-json-panel");
    assert_clean(&b, &s, "JSON panel");

    // Save the view, reset, and restore it from its link.
    b.type_into(
        "form[data-save-view] input[name=name]",
        "<b>registrations</b>",
    );
    b.click("form[data-save-view] button");
    b.wait_until(
        "the saved view",
        "return document.querySelectorAll('[data-delete-view]').length === 1",
    );
    b.goto(&s.url("/admin/activity"));
    let link = b.text("#views-h + p + ul a");
    assert_eq!(link, "<b>registrations</b>", "the name is text, not markup");
    b.click("#views-h + p + ul a");
    b.wait_until(
        "the restored filter",
        "return location.search.includes('action_prefix=registry.register')",
    );
    assert_eq!(
        b.js(
            "return document.querySelector('select[name=action_prefix]').value",
            json!([])
        ),
        json!("registry.register")
    );
    let rows = s.audit_rows("activity.read", 1);
    assert!(
        rows.iter().any(|r| r["client_kind"] == "web"),
        "page reads are audited as web"
    );

    // Old paths redirect permanently, keeping the query.
    let no_redirects = reqwest::blocking::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    for (from, to) in [
        ("/activity-center?window=60", "/admin/activity?window=60"),
        ("/admin/scheduler-runs", "/admin/activity?source=scheduler"),
        ("/admin/usage?window=10080", "/admin/telemetry?window=10080"),
    ] {
        let r = no_redirects.get(s.url(from)).send().unwrap();
        assert_eq!(r.status().as_u16(), 308, "{from}");
        assert_eq!(r.headers()["location"], to, "{from}");
    }
}

#[test]
fn memory_page_decides_items_and_escapes_their_content() {
    let s = server();
    let ana = s.user_token("bo@example.com", false);
    let mut ids = Vec::new();
    for title in [
        format!("Revenue rule {XSS}"),
        "Fiscal year starts in April".into(),
    ] {
        let (status, item) = s.post_json(
            "/api/memory",
            &ana,
            &json!({"title": title, "content": format!("content {XSS}"), "category": "finance"}),
        );
        assert_eq!(status, 201, "{item}");
        ids.push(item["id"].as_str().unwrap().to_owned());
    }
    let b = Browser::start();
    log_in(&b, &s, "admin@localhost");
    visit(&b, &s, "/corporate-memory", "memory");
    assert_eq!(
        b.js(
            "return document.querySelectorAll('tbody tr').length",
            json!([])
        ),
        json!(2)
    );
    assert!(
        b.text(&format!("#item-{} .item-title", ids[0]))
            .contains("<script>"),
        "shown as text"
    );

    // Approve one from its row: the item's state changes, audited with the reason.
    b.type_into("input[name=reason]", "checked with finance");
    b.click(&format!("button[value='approve:{}']", ids[0]));
    b.wait_until(
        "the outcome",
        "return document.querySelector('.flash.ok') !== null",
    );
    let admin = s.admin_token();
    let (_, item) = s.get_json(&format!("/api/memory/{}", ids[0]), &admin);
    assert_eq!(item["status"], "approved", "{item}");
    let rows = s.audit_rows("corporate_memory.approve", 1);
    assert_eq!(rows[0]["client_kind"], "web");
    let params: Value = rows[0]["params"].clone();
    assert!(
        params.to_string().contains("checked with finance"),
        "{params}"
    );
    b.screenshot("memory-decided");
    assert_clean(&b, &s, "memory after a decision");

    // Batch: tick the remaining pending item and reject it. The last decision's message
    // goes first, so the wait below sees this decision's page, not the one before.
    b.js(
        "document.querySelectorAll('.flash').forEach(e => e.remove())",
        json!([]),
    );
    b.click(&format!("input[name=ids][value='{}']", ids[1]));
    b.click("button[value='reject:*']");
    b.wait_until(
        "the outcome",
        "return document.querySelector('.flash.ok') !== null",
    );
    let (_, item) = s.get_json(&format!("/api/memory/{}", ids[1]), &admin);
    assert_eq!(item["status"], "rejected", "{item}");

    // Only the moves the transition graph allows are offered: an approved item cannot be
    // approved again, a rejected one can.
    b.goto(&s.url("/corporate-memory?status=any"));
    let offered = |id: &str, d: &str| {
        b.js(
            &format!("return document.querySelector(\"button[value='{d}:{id}']\") !== null"),
            json!([]),
        )
    };
    assert_eq!(offered(&ids[0], "approve"), json!(false));
    assert_eq!(offered(&ids[0], "mandate"), json!(true));
    assert_eq!(offered(&ids[1], "approve"), json!(true));
}

#[test]
fn sessions_page_lists_failed_sessions_and_the_viewer_jumps_between_errors() {
    let s = crate::telemetry::server(crate::support::Backend::Sqlite, &[]);
    let set = s.cli(
        &[
            "users",
            "set-password",
            "--email",
            "admin@localhost",
            "--password-stdin",
        ],
        Some(&format!("{PASSWORD}\n")),
    );
    assert!(set.status.success());
    let admin = s.admin_token();
    let ana = s.user_token("ana@example.com", false);
    let ana_id = crate::telemetry::user_id(&s, &ana);
    let transcript = String::from_utf8_lossy(crate::telemetry::LABELLED).replace("hello", XSS);
    assert_eq!(
        crate::telemetry::upload_raw(&s, &ana, "a.jsonl", transcript.as_bytes()).0,
        200
    );
    crate::telemetry::run(&s, &admin);
    let (_, api) = s.get_json(
        &format!("/api/admin/sessions/{ana_id}/a.jsonl/transcript"),
        &admin,
    );
    let errors: Vec<u64> = api["error_ordinals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert!(!errors.is_empty(), "{api}");

    let b = Browser::start();
    log_in(&b, &s, "admin@localhost");
    visit(&b, &s, "/admin/sessions?window=525600", "sessions");
    b.click("tbody tr a");
    b.wait_for(".transcript");
    b.screenshot("transcript");
    assert_clean(&b, &s, "transcript");
    // `n` jumps to the first failed call, the button to the next one (wrapping round).
    b.key("n");
    let focused = || b.js("return document.activeElement.dataset.ordinal", json!([]));
    assert_eq!(focused(), json!(errors[0].to_string()));
    b.click("button[data-error-step='1']");
    assert_eq!(focused(), json!(errors[1 % errors.len()].to_string()));
    // Telemetry of the same upload: by day, then by tool; a tool's row filters to its events.
    visit(&b, &s, "/admin/telemetry?window=525600", "telemetry");
    assert!(
        b.source().contains("SVC_LLM_ENDPOINT"),
        "without an LLM the ask box says how to configure one"
    );
    assert!(
        b.js(
            "return document.querySelectorAll('#telemetry-groups tbody tr').length",
            json!([])
        )
        .as_u64()
        .unwrap()
            >= 1
    );
    b.js(
        "const g = document.querySelector('select[name=group_by]'); g.value = 'tool_name'; g.dispatchEvent(new Event('change', {bubbles: true}));",
        json!([]),
    );
    b.wait_until(
        "the tool grouping",
        "return location.search.includes('group_by=tool_name')",
    );
    let tool = b.text("#telemetry-groups tbody tr td a");
    b.click("#telemetry-groups tbody tr td a");
    b.wait_for("#telemetry-raw");
    let shown = b.js(
        "return [...document.querySelectorAll('#telemetry-raw tbody tr')].length",
        json!([]),
    );
    assert!(shown.as_u64().unwrap() >= 1, "{shown}");
    assert!(
        b.url().contains(&format!("tool_name={}", urlencode(&tool))),
        "{}",
        b.url()
    );
    b.screenshot("telemetry-raw");
    assert_clean(&b, &s, "telemetry");

    // The user's page: their files with downloads (the API, through the session cookie).
    visit(&b, &s, "/admin/users?q=ANA%40", "users-found");
    assert_eq!(
        b.js(
            "return [...document.querySelectorAll('#users tbody tr td:first-child')].map(t => t.textContent)",
            json!([])
        ),
        json!(["ana@example.com"]),
        "the filter finds by e-mail in any case"
    );
    visit(&b, &s, "/admin/users?q=%25", "users-none");
    assert!(
        b.source().contains("No user matches"),
        "% is not a wildcard"
    );
    visit(&b, &s, "/admin/users", "users");
    b.click(&format!("a[href='/admin/users/{ana_id}']"));
    b.wait_for("#user-sessions");
    b.screenshot("user");
    assert_clean(&b, &s, "user page");
    let download = b.js(
        "return fetch(document.querySelector('#user-sessions a[href$=\"/download\"]').href).then(r => r.text())",
        json!([]),
    );
    assert_eq!(
        download.as_str().unwrap(),
        transcript,
        "the download is the file uploaded"
    );
    assert!(
        b.js(
            "return document.querySelectorAll('#activity-rows tr').length",
            json!([])
        )
        .as_u64()
        .unwrap()
            >= 1
    );
    b.goto(&s.url(&format!("/admin/users/{ana_id}?page=9")));
    assert!(
        b.text("#sessions-h + p")
            .starts_with("No files on this page"),
        "a page past the end says so and links back"
    );
    b.goto(&s.url("/admin/users/no-such-user"));
    assert!(b.source().contains("User not found"));
    let errors = b.console_errors();
    assert!(
        errors.iter().all(|e| e.contains("status of 404")),
        "only the 404 itself: {errors:?}"
    );
    // Groups: created from the page.
    b.goto(&s.url("/admin/groups"));
    b.type_into("input[name=name]", "<b>finance</b>");
    b.click("form[action='/admin/groups'] button");
    b.wait_until(
        "the new group",
        "return document.querySelector('.flash.ok') !== null",
    );
    assert!(b.text("#groups").contains("<b>finance</b>"));

    // The admin's own files on their profile, downloaded through `/api/me/sessions`.
    let own = b"{\"type\":\"user\",\"uuid\":\"m1\",\"sessionId\":\"M\",\"timestamp\":\"2026-11-02T09:00:00Z\",\"message\":{\"role\":\"user\",\"content\":\"hi\"}}\n";
    assert_eq!(
        crate::telemetry::upload_raw(&s, &admin, "mine.jsonl", own).0,
        200
    );
    visit(&b, &s, "/profile/sessions", "my-sessions");
    assert_eq!(b.text("#my-sessions tbody tr td"), "mine.jsonl");
    let mine = b.js(
        "return fetch(document.querySelector('#my-sessions a').href).then(r => r.text())",
        json!([]),
    );
    assert_eq!(mine.as_str().unwrap().as_bytes(), own);

    // A path that names no session is a 404 page.
    b.goto(&s.url(&format!("/admin/sessions/{ana_id}/missing.jsonl")));
    assert!(b.source().contains("Session not found"));
}

#[test]
fn marketplace_page_lists_searches_and_shows_an_items_series() {
    let s = server();
    let admin = s.admin_token();
    let bo = s.user_token("bo@example.com", false);
    let mut ids = Vec::new();
    for (name, description) in [("sql-helper", XSS), ("chart-maker", "Draws charts.")] {
        let (status, e) = s.post_json(
            "/api/marketplace/flea",
            &bo,
            &json!({"type": "skill", "name": name, "description": description, "content": "Text.", "category": "data"}),
        );
        assert_eq!(status, 201, "{e}");
        let id = e["id"].as_str().unwrap().to_owned();
        let (status, d) = s.post_json(
            &format!("/api/admin/marketplace/flea/{id}/approve"),
            &admin,
            &json!({}),
        );
        assert!(status < 300, "{d}");
        ids.push(id);
    }
    let b = Browser::start();
    log_in(&b, &s, "ana@example.com");
    visit(&b, &s, "/marketplace?tab=flea", "marketplace");
    let names = || {
        b.js(
            "return [...document.querySelectorAll('.market-item h2')].map(h => h.textContent)",
            json!([]),
        )
    };
    assert_eq!(names().as_array().unwrap().len(), 2, "{}", names());
    assert!(
        b.source().contains("&lt;script&gt;"),
        "descriptions are text"
    );
    // Search narrows the list (and stays in the URL); sorting by use keeps both.
    b.type_into("input[name=q]", "chart");
    b.wait_until("the search", "return location.search.includes('q=chart')");
    assert_eq!(names(), json!(["chart-maker"]));
    b.js("const s = document.querySelector('select[name=sort]'); s.value = 'most_used'; s.dispatchEvent(new Event('change', {bubbles: true}));", json!([]));
    b.wait_until(
        "the order",
        "return location.search.includes('sort=most_used')",
    );
    assert_eq!(names(), json!(["chart-maker"]), "the search is kept");
    // The item's page shows its 30 zero-filled days.
    b.click(".market-item h2 a");
    b.wait_for("#daily-series");
    assert_eq!(
        b.js(
            "return document.querySelectorAll('#daily-series tbody tr').length",
            json!([])
        ),
        json!(30)
    );
    b.screenshot("marketplace-item");
    assert_clean(&b, &s, "marketplace item");
}

#[test]
fn a_grant_checkbox_on_the_access_page_changes_what_a_user_can_read() {
    let s = server();
    let admin = s.admin_token();
    for (path, body) in [
        ("/api/admin/register-table", json!({"id": "orders"})),
        ("/api/admin/register-table", json!({"id": "returns"})),
        ("/api/admin/groups", json!({"name": "analysts"})),
    ] {
        let (status, b) = s.post_json(path, &admin, &body);
        assert!(status < 300, "{b}");
    }
    // A grant on a table the filtered page does not show: saving that page leaves it alone.
    let (_, groups) = s.get_json("/api/admin/groups", &admin);
    let analysts = groups
        .as_array()
        .and_then(|g| g.iter().find(|g| g["name"] == "analysts"))
        .map(|g| g["id"].as_str().unwrap().to_owned())
        .expect("the analysts group");
    let (status, grant) = s.post_json(
        "/api/admin/grants",
        &admin,
        &json!({"group_id": analysts, "resource_type": "table", "resource_id": "returns"}),
    );
    assert_eq!(status, 201, "{grant}");
    s.cli_ok(&[
        "groups",
        "add-member",
        "--group",
        "analysts",
        "--email",
        "ana@example.com",
    ]);
    let ana = s.cli_ok(&["tokens", "create", "--email", "ana@example.com"]);
    assert_eq!(s.get_json("/api/v2/schema/orders", &ana).0, 403);

    let b = Browser::start();
    log_in(&b, &s, "admin@localhost");
    visit(&b, &s, "/admin/access", "access");
    let rows = || {
        b.js(
            "return [...document.querySelectorAll('#grants tbody th')].map(t => t.textContent)",
            json!([]),
        )
    };
    assert_eq!(
        rows(),
        json!(["orders", "returns"]),
        "internal tables are not listed"
    );
    visit(&b, &s, "/admin/access?q=ORD", "access-filtered");
    assert_eq!(rows(), json!(["orders"]), "the filter ignores case");
    let box_for = "#access-orders input[aria-label='analysts may read orders']";
    b.click(box_for);
    b.wait_until(
        "the saved grant",
        "return (document.querySelector('.flash.ok')?.textContent ?? '').includes('1 granted')",
    );
    assert_ne!(
        s.get_json("/api/v2/schema/orders", &ana).0,
        403,
        "the grant took effect"
    );
    // The first grant (on `returns`) came through the API; the page's is the second.
    let rows = s.audit_rows("resource_grant.created", 2);
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[1]["client_kind"], "web");
    // Unticking revokes it.
    b.click(box_for);
    b.wait_until(
        "the revoked grant",
        "return (document.querySelector('.flash.ok')?.textContent ?? '').includes('1 revoked')",
    );
    assert_eq!(
        b.js(
            "return document.querySelector('#access-orders input:checked')",
            json!([])
        ),
        Value::Null
    );
    assert_eq!(s.get_json("/api/v2/schema/orders", &ana).0, 403);
    assert!(
        b.url().contains("q=ORD"),
        "the filter survives a save: {}",
        b.url()
    );
    assert_ne!(
        s.get_json("/api/v2/schema/returns", &ana).0,
        403,
        "a table the page did not show keeps its grant"
    );
    b.screenshot("access-revoked");
    assert_clean(&b, &s, "access");

    // Tokens: created on the page (shown once), usable, then revoked on the page.
    visit(&b, &s, "/tokens", "tokens");
    b.type_into("form[data-create-token] input[name=name]", "<i>laptop</i>");
    b.click("form[data-create-token] button");
    b.wait_until(
        "the new token",
        "return document.getElementById('new-token').textContent.length > 20",
    );
    let token = b.text("#new-token");
    assert_eq!(s.get_json("/api/me", &token).0, 200);
    b.goto(&s.url("/tokens"));
    assert_eq!(
        b.text("#tokens tbody tr td"),
        "<i>laptop</i>",
        "the name is text"
    );
    b.click("button[data-revoke-token]");
    b.wait_until(
        "the revoked state",
        "return document.querySelector('#tokens .pill.err') !== null",
    );
    assert_eq!(s.get_json("/api/me", &token).0, 401);
    assert_clean(&b, &s, "tokens");

    // Every user's tokens for administrators: filtered by owner, revoked in place.
    visit(
        &b,
        &s,
        "/admin/tokens?user=ana%40example.com",
        "admin-tokens",
    );
    assert_eq!(b.text("#tokens tbody tr td"), "ana@example.com");
    assert_eq!(
        b.js(
            "return document.querySelectorAll('#tokens tbody tr').length",
            json!([])
        ),
        json!(1),
        "only ana's token"
    );
    b.click("button[data-revoke-base]");
    b.wait_until(
        "the revoked state",
        "return document.querySelector('#tokens .pill.err') !== null",
    );
    assert_eq!(s.get_json("/api/me", &ana).0, 401);
    let rows = s.audit_rows("token.admin_revoke", 1);
    assert_eq!(rows[0]["client_kind"], "web");
    assert_clean(&b, &s, "admin tokens");
}

/// Assets come compressed as the client asks (brotli, else gzip, else plain), each decoding
/// to the same bytes, and are cached for a year under their content hash.
#[test]
fn assets_are_served_with_brotli_or_gzip_as_the_client_accepts() {
    use std::io::Read;
    let s = Server::start();
    let html = s.http.get(s.url("/login")).send().unwrap().text().unwrap();
    let css = html
        .split('"')
        .find(|p| p.starts_with("/static/app.") && p.ends_with(".css"))
        .expect("the stylesheet's link")
        .to_owned();
    let fetch = |accept: &str| {
        let r = s
            .http
            .get(s.url(&css))
            .header("accept-encoding", accept)
            .send()
            .unwrap();
        assert_eq!(r.status(), 200);
        assert!(r.headers()["cache-control"]
            .to_str()
            .unwrap()
            .contains("immutable"));
        let coding = r
            .headers()
            .get("content-encoding")
            .map(|v| v.to_str().unwrap().to_owned());
        (coding, r.bytes().unwrap().to_vec())
    };
    let (coding, plain) = fetch("identity");
    assert_eq!(coding, None);
    assert!(String::from_utf8_lossy(&plain).contains("font-family"));
    let (coding, packed) = fetch("gzip, deflate, br");
    assert_eq!(coding.as_deref(), Some("br"));
    let mut back = Vec::new();
    brotli::BrotliDecompress(&mut packed.as_slice(), &mut back).unwrap();
    assert_eq!(back, plain);
    let (coding, zipped) = fetch("br;q=0, gzip");
    assert_eq!(coding.as_deref(), Some("gzip"));
    let mut back = Vec::new();
    flate2::read::GzDecoder::new(zipped.as_slice())
        .read_to_end(&mut back)
        .unwrap();
    assert_eq!(back, plain);
}

/// `/api/docs` runs the embedded Swagger UI under the pages' strict content security policy:
/// every operation of the document is listed, with no console error and nothing fetched off
/// this server; its bundle comes brotli-compressed from the binary.
#[test]
fn api_docs_list_every_operation_of_the_document() {
    let s = Server::start();
    let doc: Value = s
        .http
        .get(s.url("/api/openapi.json"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let operations: usize = doc["paths"]
        .as_object()
        .unwrap()
        .values()
        .map(|item| item.as_object().unwrap().len())
        .sum();
    let b = Browser::start();
    b.goto(&s.url("/api/docs"));
    b.wait_for(".opblock");
    b.screenshot("api-docs");
    let shown = b.js(
        "return document.querySelectorAll('.opblock').length",
        json!([]),
    );
    assert_eq!(shown.as_u64(), Some(operations as u64), "operations listed");
    assert_clean(&b, &s, "/api/docs");
    let html = s.http.get(s.url("/api/docs")).send().unwrap();
    assert!(html.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .contains("script-src 'self'"));
    let bundle = html
        .text()
        .unwrap()
        .split('"')
        .find(|p| p.starts_with("/static/swagger-ui-bundle."))
        .expect("the bundle's script tag")
        .to_owned();
    let r = s
        .http
        .get(s.url(&bundle))
        .header("accept-encoding", "br")
        .send()
        .unwrap();
    assert_eq!(r.headers()["content-encoding"], "br");
    assert!(r.bytes().unwrap().len() < 400_000);
}
