//! Hostile input: requests that once crashed the server, bypassed a limit or raced a guard.
//! Each test here failed (or took the server down) before its fix.

use serde_json::{json, Value};

use crate::discovery::{register, write_parquet};
use crate::support::{backends, Backend, Server};

/// Creates `email` with `password` through the console.
fn user_with_password(s: &Server, email: &str, password: &str) {
    let out = s.cli(
        &["users", "create", "--email", email, "--password-stdin"],
        Some(&format!("{password}\n")),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// One login attempt from `ip` (the server trusts `X-Forwarded-For`).
fn login(s: &Server, ip: &str, email: &str, password: &str) -> (u16, Value) {
    s.send(
        s.http
            .post(s.url("/auth/token"))
            .header("x-forwarded-for", ip)
            .json(&json!({"email": email, "password": password})),
    )
}

#[test]
fn concurrent_guesses_are_counted_before_the_password_is_checked() {
    let s = Server::start_with(Backend::Sqlite, &[("SVC_TRUST_PROXY", "true")]);
    user_with_password(&s, "victim@example.com", "right-password-1");
    let statuses: Vec<u16> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..60)
            .map(|i| {
                let s = &s;
                scope.spawn(move || {
                    login(s, "10.1.0.1", "victim@example.com", &format!("guess-{i}")).0
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let checked = statuses.iter().filter(|&&st| st == 401).count();
    let refused = statuses.iter().filter(|&&st| st == 429).count();
    assert_eq!(checked + refused, 60, "{statuses:?}");
    assert_eq!(
        checked, 10,
        "at most ten guesses reach the password check: {statuses:?}"
    );
}

#[test]
fn a_login_to_ones_own_account_does_not_reset_the_count_and_accounts_are_limited_too() {
    let s = Server::start_with(Backend::Sqlite, &[("SVC_TRUST_PROXY", "true")]);
    user_with_password(&s, "victim@example.com", "victim-password-1");
    user_with_password(&s, "mallory@example.com", "mallory-password-1");
    // Interleaved: nine guesses, then a correct login to the attacker's own account, again
    // and again. Only the guesses count, so the address is refused after ten of them.
    let mut checked = 0;
    for round in 0..6 {
        for i in 0..9 {
            let (st, _) = login(
                &s,
                "10.2.0.1",
                "victim@example.com",
                &format!("g{round}-{i}"),
            );
            if st == 401 {
                checked += 1;
            } else {
                assert_eq!(st, 429);
            }
        }
        login(&s, "10.2.0.1", "mallory@example.com", "mallory-password-1");
    }
    assert_eq!(checked, 10, "guesses on the victim in one minute");

    // Per account: guesses spread over many addresses still stop at ten.
    user_with_password(&s, "target@example.com", "target-password-1");
    let mut statuses = Vec::new();
    for i in 0..14 {
        statuses.push(login(&s, &format!("10.3.0.{i}"), "target@example.com", "nope").0);
    }
    assert_eq!(
        statuses.iter().filter(|&&st| st == 401).count(),
        10,
        "{statuses:?}"
    );
    let (st, body) = login(&s, "10.3.1.1", "target@example.com", "nope");
    assert_eq!(st, 429);
    assert!(
        body["detail"].to_string().contains("on this account"),
        "{body}"
    );
    // Other accounts from fresh addresses are untouched.
    let (st, _) = login(&s, "10.4.0.1", "victim@example.com", "victim-password-1");
    assert_eq!(st, 429, "the victim's own window is still used up");
    let (st, body) = login(&s, "10.4.0.2", "mallory@example.com", "mallory-password-1");
    assert_eq!(st, 200, "{body}");
    // Only checked guesses reach the audit log as failures.
    // Twenty failures and two successes (mallory's first, and the last).
    let failed = s
        .audit_rows("auth.login", 22)
        .into_iter()
        .filter(|r| r["result"] == "error.401")
        .count();
    assert_eq!(failed, 20);
}

/// Thirty nested hex encodings of eight bytes: 8 GiB if nothing stops it.
const NESTED_ENCODE: &str = "SELECT length(encode(encode(encode(encode(encode(encode(encode(encode(encode(encode(encode(encode(encode(encode(encode(encode(encode(encode(encode(encode(encode(encode(encode(encode(encode(encode(encode(encode(encode(encode('abcdefgh', 'hex'), 'hex'), 'hex'), 'hex'), 'hex'), 'hex'), 'hex'), 'hex'), 'hex'), 'hex'), 'hex'), 'hex'), 'hex'), 'hex'), 'hex'), 'hex'), 'hex'), 'hex'), 'hex'), 'hex'), 'hex'), 'hex'), 'hex'), 'hex'), 'hex'), 'hex'), 'hex'), 'hex'), 'hex'), 'hex')) AS v";

/// A statement that runs for hours on one core, holding almost no memory.
const RUNAWAY: &str = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r WHERE x < 1000000000000) SELECT count(*) AS n FROM r";

/// The user id behind a token.
fn user_id(s: &Server, token: &str) -> String {
    let (status, me) = s.get_json("/api/me", token);
    assert_eq!(status, 200, "{me}");
    me["id"].as_str().unwrap().to_owned()
}

#[test]
fn two_admins_deactivating_each_other_at_once_leave_one_active() {
    for backend in backends() {
        let s = Server::start_with(backend, &[]);
        let seeded = s.admin_token();
        let a = s.user_token("a@example.com", true);
        let b = s.user_token("b@example.com", true);
        let seeded_id = user_id(&s, &seeded);
        let (ida, idb) = (user_id(&s, &a), user_id(&s, &b));
        let (st, body) = s.post_json(
            &format!("/api/admin/users/{seeded_id}/deactivate"),
            &a,
            &json!({}),
        );
        assert_eq!(st, 200, "{body}");
        let active_admins = || {
            s.query(
                "SELECT COUNT(DISTINCT u.id) AS n FROM users u \
                 JOIN user_group_members m ON m.user_id = u.id \
                 JOIN user_groups g ON g.id = m.group_id \
                 WHERE g.name = 'Admin' AND u.active = TRUE",
            )[0]["n"]
                .to_string()
                .trim_matches('"')
                .to_owned()
        };
        for round in 0..8 {
            let [ra, rb] = std::thread::scope(|scope| {
                let one = scope.spawn(|| {
                    s.post_json(
                        &format!("/api/admin/users/{idb}/deactivate"),
                        &a,
                        &json!({}),
                    )
                });
                let two = scope.spawn(|| {
                    s.post_json(
                        &format!("/api/admin/users/{ida}/deactivate"),
                        &b,
                        &json!({}),
                    )
                });
                [one.join().unwrap(), two.join().unwrap()]
            });
            assert_eq!(active_admins(), "1", "round {round}: {ra:?} {rb:?}");
            let ok = [&ra, &rb].iter().filter(|r| r.0 == 200).count();
            assert_eq!(ok, 1, "round {round}: exactly one wins: {ra:?} {rb:?}");
            // The loser is refused: the last-admin conflict, or its own deactivation.
            let lost = if ra.0 == 200 { &rb } else { &ra };
            assert!(matches!(lost.0, 401 | 409), "round {round}: {lost:?}");
            // The winner brings the other back for the next round.
            let (winner, loser_id) = if ra.0 == 200 { (&a, &idb) } else { (&b, &ida) };
            let (st, body) = s.post_json(
                &format!("/api/admin/users/{loser_id}/activate"),
                winner,
                &json!({}),
            );
            assert_eq!(st, 200, "{body}");
        }
    }
}

/// A server on `backend` with a small query memory (so every function budget is 32 MiB)
/// and a deadline of `timeout_seconds`, an `orders` table, and an analyst granted it; returns
/// the server, an admin token and the analyst's token.
fn analyst_server(backend: Backend, timeout_seconds: &str) -> (Server, String, String) {
    let s = Server::start_with(
        backend,
        &[
            ("SVC_QUERY_MEMORY_MB", "256"),
            ("SVC_QUERY_TIMEOUT_SECONDS", timeout_seconds),
        ],
    );
    let admin = s.admin_token();
    write_parquet(&s.dir.0, "local", "orders", 50, "o");
    register(&s, &admin, json!({"id": "orders", "source_type": "local"}));
    let analyst = s.user_token("ana@example.com", false);
    s.cli_ok(&[
        "groups",
        "add-member",
        "--group",
        "analysts",
        "--email",
        "ana@example.com",
    ]);
    s.cli_ok(&["grants", "add", "--group", "analysts", "--table", "orders"]);
    (s, admin, analyst)
}

/// The server still answers, and its process is still the one started.
fn assert_alive(s: &Server, after: &str) {
    let r = s.http.get(s.url("/api/health")).send();
    assert!(
        r.is_ok_and(|r| r.status().is_success()),
        "the server died after {after}: {}",
        s.log()
    );
}

fn query(s: &Server, token: &str, sql: &str) -> (u16, Value) {
    s.post_json("/api/query", token, &json!({"sql": sql, "format": "json"}))
}

fn scan_where(s: &Server, token: &str, predicate: &str) -> (u16, Value) {
    s.post_json(
        "/api/v2/scan",
        token,
        &json!({"table_id": "orders", "where": predicate, "format": "json"}),
    )
}

/// The error kind of an enveloped error.
fn kind(body: &Value) -> &str {
    body["detail"]["error"].as_str().unwrap_or("")
}

#[test]
fn no_single_request_aborts_the_server() {
    // Budgets and depth limits refuse these, not the deadline: a long one keeps a slow debug
    // build's planning of the accepted 1,000-level chain from reading as a timeout.
    let (s, _, ana) = analyst_server(Backend::Sqlite, "120");

    // Functions that build large values: refused before they allocate.
    for (sql, what) in [
        ("SELECT repeat('x', 1000000000) AS v", "repeat"),
        ("SELECT length(lpad('', 1000000000, 'x')) AS v", "lpad"),
        ("SELECT range(300000000) AS v", "range"),
        (
            "SELECT count(*) AS n FROM (SELECT unnest(range(100000000)) AS v)",
            "unnest(range)",
        ),
        ("SELECT array_repeat(1, 1000000000) AS v", "array_repeat"),
        // A 20 MB value is allowed; joined to every row of a batch it is not.
        (
            "SELECT length(name || repeat('x', 20000000)) AS v FROM orders",
            "||",
        ),
        (
            "SELECT length(concat(name, repeat('x', 20000000))) AS v FROM orders",
            "concat",
        ),
        // Literal arguments DataFusion would merge (rebuilding the call unchecked).
        (
            "SELECT length(concat(name, '', 'a', repeat('x', 20000000))) AS v FROM orders",
            "concat of literals",
        ),
        (
            "SELECT length(concat_ws('-', name, 'a', 'b', repeat('x', 20000000))) AS v FROM orders",
            "concat_ws",
        ),
        (
            "SELECT length(replace(name, '', repeat('x', 1000000))) AS v FROM orders",
            "replace",
        ),
        (
            "SELECT cardinality(array_concat(make_array(id), range(1000000))) AS v FROM orders",
            "array_concat broadcast",
        ),
    ] {
        let (st, body) = query(&s, &ana, sql);
        assert_eq!(
            (st, kind(&body)),
            (503, "resources_exhausted"),
            "{what}: {body}"
        );
        assert_alive(&s, what);
    }

    // The same functions within their budget still work.
    let (st, body) = query(
        &s,
        &ana,
        "SELECT length(repeat('ab', 1000)) AS v, length(lpad('x', 10)) AS w",
    );
    assert_eq!((st, &body["rows"]), (200, &json!([[2000, 10]])), "{body}");
    let (st, body) = query(
        &s,
        &ana,
        "SELECT name || '!' AS v FROM orders ORDER BY id LIMIT 2",
    );
    assert_eq!(
        (st, &body["rows"]),
        (200, &json!([["o0!"], ["o1!"]])),
        "{body}"
    );
    assert_eq!(body["columns"], json!(["v"]));
    let (st, body) = query(
        &s,
        &ana,
        "SELECT NULL || 'a' AS v, 'a' || 1 AS w, make_array(1) || make_array(2) AS x",
    );
    assert_eq!(
        (st, &body["rows"]),
        (200, &json!([[null, "a1", [1, 2]]])),
        "{body}"
    );

    // 64-bit-offset types would let a large value broadcast ask for it all at once.
    let (st, body) = query(
        &s,
        &ana,
        "SELECT arrow_cast(name, 'LargeUtf8') AS v FROM orders",
    );
    assert_eq!(st, 400, "{body}");
    assert!(body["detail"].to_string().contains("not allowed"), "{body}");
    let (st, body) = query(
        &s,
        &ana,
        "SELECT arrow_cast(id, 'Utf8') AS v FROM orders ORDER BY id LIMIT 1",
    );
    assert_eq!((st, &body["rows"]), (200, &json!([["0"]])), "{body}");

    // The scan predicate that aborted the server in one 89-byte body.
    let (st, body) = scan_where(&s, &ana, "lpad(name, 1000000000, 'x') = ''");
    assert_eq!((st, kind(&body)), (503, "resources_exhausted"), "{body}");
    assert_alive(&s, "lpad in a scan");

    // Deep expressions: refused with the limit named, the accepted depth still runs.
    let chain = |n: usize| vec!["1"; n].join("+");
    let (st, body) = query(&s, &ana, &format!("SELECT {} AS v", chain(2000)));
    assert_eq!(st, 400, "{body}");
    assert!(body["detail"].to_string().contains("1000 levels"), "{body}");
    assert_alive(&s, "a 2,000-term sum");
    let (st, body) = query(&s, &ana, &format!("SELECT {} AS v", chain(1000)));
    assert_eq!((st, &body["rows"]), (200, &json!([[1000]])), "{body}");
    let ors = |n: usize| {
        (0..n)
            .map(|i| format!("id = {i}"))
            .collect::<Vec<_>>()
            .join(" OR ")
    };
    let (st, body) = query(
        &s,
        &ana,
        &format!("SELECT count(*) AS n FROM orders WHERE {}", ors(490)),
    );
    assert_eq!((st, &body["rows"]), (200, &json!([[50]])), "{body}");
    // The largest SQL accepted, all one chain: refused, not a crash.
    let (st, _) = query(&s, &ana, &format!("SELECT {} AS v", chain(128 * 1024 - 8)));
    assert_eq!(st, 400);
    assert_alive(&s, "a 256 KiB chain");

    // A 9 MiB OR chain as a scan `where` (under the body limit): refused by size.
    let huge = vec!["id = 1"; 900_000].join(" OR ");
    let (st, body) = scan_where(&s, &ana, &huge);
    assert_eq!(st, 400, "{body}");
    assert_eq!(body["detail"]["details"]["reason"], "too_large", "{body}");
    let (st, body) = scan_where(&s, &ana, &ors(200));
    assert_eq!(st, 400, "{body}");
    assert_eq!(body["detail"]["details"]["reason"], "too_deep", "{body}");
    assert_alive(&s, "a 9 MiB predicate");

    // Names that break the id rules never reach the store.
    let (st, body) = s.get_json("/api/v2/schema/bad%00id", &ana);
    assert_eq!(st, 404, "{body}");
}

#[test]
fn nul_bytes_are_refused_not_500_on_either_backend() {
    for backend in backends() {
        let s = Server::start_with(backend, &[]);
        let admin = s.admin_token();
        for path in ["/api/v2/schema/a%00b", "/api/v2/sample/%00"] {
            let (st, body) = s.get_json(path, &admin);
            assert_eq!(st, 404, "{path}: {body}");
        }
        let (st, body) = s.send(
            s.http
                .post(s.url("/auth/token"))
                .json(&json!({"email": "a\u{0}b@example.com", "password": "x"})),
        );
        assert!(matches!(st, 400 | 401), "{st}: {body}");
        let (st, body) = s.post_json(
            "/api/query",
            &admin,
            &json!({"sql": "SELECT * FROM \"a\u{0}b\""}),
        );
        assert_eq!(st, 400, "{body}");

        // Text a caller writes is refused alike on both backends (SQLite could hold the NUL,
        // PostgreSQL cannot), naming where it is, and nothing is stored.
        let (st, body) = s.post_json(
            "/api/memory",
            &admin,
            &json!({"title": "ok", "content": "fine", "tags": ["a", "b\u{0}"]}),
        );
        assert_eq!(st, 400, "{backend:?}: {body}");
        let detail = &body["detail"];
        assert_eq!(detail["error"], "nul_in_text", "{body}");
        assert_eq!(detail["details"]["pointer"], "/tags/1", "{body}");
        assert!(
            detail["message"].as_str().unwrap().contains("`/tags/1`"),
            "{body}"
        );
        let (_, page) = s.get_json("/api/memory?per_page=500", &admin);
        assert_eq!(page["items"], json!([]), "nothing stored: {page}");
        // An escaped backslash before `u0000` is text, not a NUL: stored as sent.
        let literal = "C:\\u0000\\dir";
        let (st, item) = s.post_json(
            "/api/memory",
            &admin,
            &json!({"title": literal, "content": "a path"}),
        );
        assert_eq!(st, 201, "{backend:?}: {item}");
        let (_, page) = s.get_json("/api/memory?per_page=500", &admin);
        assert_eq!(page["items"][0]["title"], literal, "{page}");
    }
}

#[test]
fn a_script_writes_its_whole_result_or_leaves_the_table_alone() {
    let s = Server::start_with(Backend::Sqlite, &[("SVC_SCRIPT_MAX_ROWS", "100")]);
    let admin = s.admin_token();
    write_parquet(&s.dir.0, "local", "orders", 60, "o");
    register(&s, &admin, json!({"id": "orders", "source_type": "local"}));
    let (st, script) = s.post_json(
        "/api/scripts",
        &admin,
        &json!({"name": "copy", "sql": "SELECT * FROM orders", "schedule": "every 1h",
                "target_table": "orders_copy"}),
    );
    assert_eq!(st, 201, "{script}");
    let id = script["id"].as_str().unwrap();
    let (st, body) = s.post_json(&format!("/api/scripts/{id}/run"), &admin, &json!({}));
    assert_eq!(st, 200, "{body}");
    let count = |s: &Server| {
        let (st, body) = s.post_json(
            "/api/query",
            &admin,
            &json!({"sql": "SELECT count(*) AS n FROM orders_copy", "format": "json"}),
        );
        assert_eq!(st, 200, "{body}");
        body["rows"][0][0].as_i64().unwrap()
    };
    assert_eq!(count(&s), 60);
    // The source grows past the maximum: the run fails and the copy keeps its 60 rows.
    write_parquet(&s.dir.0, "local", "orders", 300, "o");
    let (st, body) = s.post_json(&format!("/api/scripts/{id}/run"), &admin, &json!({}));
    assert_eq!(st, 422, "{body}");
    assert!(
        body["detail"].to_string().contains("SVC_SCRIPT_MAX_ROWS"),
        "{body}"
    );
    assert_eq!(count(&s), 60);
}

/// A seeded generator of hostile inputs (xorshift: the same seed gives the same inputs).
struct Hostile(u64);

impl Hostile {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n.max(1) as u64) as usize
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }

    fn huge(&mut self) -> String {
        self.pick(&[
            "1000000000",
            "300000000",
            "2147483647",
            "9223372036854775807",
            "-1",
            "100000",
        ])
        .to_owned()
    }

    /// An expression over `orders` that builds, nests or computes too much.
    fn expr(&mut self, depth: usize) -> String {
        if depth == 0 {
            return self
                .pick(&["name", "id", "'x'", "1", "NULL", "2.5"])
                .to_owned();
        }
        let a = self.expr(depth - 1);
        let n = self.huge();
        match self.below(12) {
            0 => format!("repeat({a}, {n})"),
            1 => format!("lpad(CAST({a} AS VARCHAR), {n}, 'xy')"),
            2 => format!("rpad(CAST({a} AS VARCHAR), {n})"),
            3 => format!("concat({a}, {a}, {a}, {a})"),
            4 => format!("({a} || {a})"),
            5 => format!("replace(CAST({a} AS VARCHAR), '', repeat('z', 100000))"),
            6 => format!("regexp_replace(CAST({a} AS VARCHAR), '', '\\\\0\\\\0\\\\0', 'g')"),
            7 => vec![a.as_str(); 1 + self.below(3000)].join(" + "),
            8 => format!(
                "{}{a}{}",
                "(".repeat(self.below(200)),
                ")".repeat(self.below(200))
            ),
            9 => format!("length(CAST(array_repeat({a}, {n}) AS VARCHAR))"),
            10 => format!("cardinality(range({n}))"),
            _ => format!("CASE WHEN {a} IS NULL THEN {a} ELSE {a} END"),
        }
    }

    fn sql(&mut self) -> String {
        let depth = 1 + self.below(3);
        let e = self.expr(depth);
        match self.below(8) {
            0 => format!("SELECT {e} AS v FROM orders"),
            1 => format!("SELECT count(*) FROM orders WHERE {e} IS NOT NULL"),
            2 => "SELECT * FROM secret".to_owned(),
            3 => format!("SELECT * FROM orders o JOIN secret s ON {e} = s.name"),
            4 => format!("SELECT count(*) FROM (SELECT unnest(range({})) AS x)", self.huge()),
            5 => "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT count(*) FROM r".to_owned(),
            6 => format!("SELECT * FROM svc_audit WHERE {e} IS NULL"),
            _ => {
                let junk: String = (0..self.below(200))
                    .map(|_| self.pick(&["SELECT", "(", ")", "'", "\"", ";", "--", "/*", "\u{0}", "é", "secret", ","]))
                    .collect::<Vec<_>>()
                    .join(" ");
                junk
            }
        }
    }

    fn id(&mut self) -> String {
        match self.below(5) {
            0 => "..%2F..%2Fetc%2Fpasswd".to_owned(),
            1 => "secret".to_owned(),
            2 => "%00".repeat(1 + self.below(5)),
            3 => "a".repeat(1 + self.below(400)),
            _ => (0..1 + self.below(20))
                .map(|_| format!("%{:02X}", self.below(256)))
                .collect(),
        }
    }
}

/// What a campaign saw.
#[derive(Debug, Default)]
struct Campaign {
    tried: usize,
    by_category: std::collections::BTreeMap<&'static str, usize>,
    peak_rss: u64,
    leaked: Vec<String>,
    server_errors: Vec<String>,
    died: Option<String>,
    health_ms: Vec<f64>,
}

/// Sends `inputs` hostile requests as a non-admin analyst; stops at the first death.
fn campaign(seed: u64, inputs: usize, backend: Backend) -> Campaign {
    let (s, admin, ana) = analyst_server(backend, "2");
    // A table the analyst has no grant to, whose values must never appear in an answer.
    write_parquet(&s.dir.0, "local", "secret", 5, "SECRET-7f3a");
    register(&s, &admin, json!({"id": "secret", "source_type": "local"}));

    let mut g = Hostile(seed);
    let mut seen = Campaign::default();
    for i in 0..inputs {
        let category = ["sql", "sql", "scan_where", "table_id", "token"][g.below(5)];
        *seen.by_category.entry(category).or_default() += 1;
        let (what, sent) = match category {
            "sql" => {
                let sql = g.sql();
                (
                    format!("query {sql:.200}"),
                    s.http
                        .post(s.url("/api/query"))
                        .bearer_auth(&ana)
                        .json(&json!({"sql": sql, "format": "json"}))
                        .send(),
                )
            }
            "scan_where" => {
                let depth = 1 + g.below(2);
                let e = g.expr(depth);
                (format!("scan {e:.200}"), s.http.post(s.url("/api/v2/scan")).bearer_auth(&ana).json(&json!({"table_id": "orders", "where": format!("{e} IS NOT NULL"), "format": "json"})).send())
            }
            "table_id" => {
                let id = g.id();
                (
                    format!("schema {id:.200}"),
                    s.http
                        .get(s.url(&format!("/api/v2/sample/{id}")))
                        .bearer_auth(&ana)
                        .send(),
                )
            }
            _ => {
                let token: String = (0..g.below(300))
                    .map(|_| char::from(33 + g.below(90) as u8))
                    .collect();
                (
                    format!("token {token:.80}"),
                    s.http.get(s.url("/api/me")).bearer_auth(&token).send(),
                )
            }
        };
        seen.tried += 1;
        match sent {
            Ok(r) => {
                let status = r.status().as_u16();
                let body = r.text().unwrap_or_default();
                if body.contains("SECRET-7f3a") {
                    seen.leaked.push(what.clone());
                }
                // 503 (a resource limit) and 504 (a deadline) are answers; other 5xx are bugs.
                if status >= 500 && status != 503 && status != 504 {
                    seen.server_errors
                        .push(format!("{status} {what}: {body:.300}"));
                }
            }
            Err(e) if e.is_timeout() => seen.server_errors.push(format!("client timeout {what}")),
            Err(_) => {}
        }
        let started = std::time::Instant::now();
        let healthy = s
            .http
            .get(s.url("/api/health"))
            .send()
            .is_ok_and(|r| r.status().is_success());
        seen.health_ms.push(started.elapsed().as_secs_f64() * 1e3);
        if !healthy {
            seen.died = Some(format!("input {i}: {what}\n{}", s.log()));
            break;
        }
    }
    seen.peak_rss = s.peak_rss().unwrap_or(0);
    seen
}

fn report(label: &str, c: &Campaign) {
    let mut h = c.health_ms.clone();
    h.sort_by(f64::total_cmp);
    let p99 = h.get(h.len() * 99 / 100).copied().unwrap_or(0.0);
    println!(
        "hostile {label}: tried {} {:?}, leaked {}, 5xx {}, aborts {}, health p99 {p99:.1} ms, \
         server peak RSS {} MiB (query memory 256 MiB)",
        c.tried,
        c.by_category,
        c.leaked.len(),
        c.server_errors.len(),
        usize::from(c.died.is_some()),
        c.peak_rss >> 20
    );
}

#[test]
fn a_seeded_hostile_campaign_finds_no_leak_no_crash_and_no_500() {
    let inputs = std::env::var("SVC_HOSTILE_INPUTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(250);
    for backend in backends() {
        let label = format!("{backend:?}");
        let c = campaign(0x5eed_0017, inputs, backend);
        report(&label, &c);
        assert_eq!(c.died, None, "{label}: the server died");
        assert!(
            c.leaked.is_empty(),
            "{label}: leaked through {:?}",
            c.leaked
        );
        assert!(
            c.server_errors.is_empty(),
            "{label}: {:#?}",
            c.server_errors
        );
    }
}

#[test]
fn a_script_killed_mid_run_can_run_again_after_a_restart() {
    for backend in backends() {
        let mut s = Server::start_with(backend, &[("SVC_QUERY_TIMEOUT_SECONDS", "600")]);
        let admin = s.admin_token();
        let (st, script) = s.post_json(
            "/api/scripts",
            &admin,
            &json!({"name": "forever", "schedule": "every 1h",
                    "sql": RUNAWAY}),
        );
        assert_eq!(st, 201, "{script}");
        let id = script["id"].as_str().unwrap().to_owned();
        let run = start_run(&s, &admin, &id);
        // Running: a second run is refused.
        wait_running(&s, &admin, "never running");
        let (st, body) = s.post_json(&format!("/api/scripts/{id}/run"), &admin, &json!({}));
        assert_eq!(st, 409, "{body}");
        s.kill();
        assert!(run.join().unwrap().is_err(), "the killed server answered");
        s.start_again();
        // The dead process's run is over, and says why.
        let (_, list) = s.get_json("/api/scripts", &admin);
        assert_eq!(list["scripts"][0]["last_status"], "failure", "{list}");
        assert!(
            list["scripts"][0]["last_error"]
                .to_string()
                .contains("stopped"),
            "{list}"
        );
        // A run can be claimed again at once, not only when the old lease expires.
        let again = start_run(&s, &admin, &id);
        wait_running(&s, &admin, "not claimed again");
        s.kill();
        let _ = again.join();
    }
}

/// Starts `POST /api/scripts/{id}/run` (which waits for the run) on a thread of its own.
fn start_run(
    s: &Server,
    token: &str,
    id: &str,
) -> std::thread::JoinHandle<reqwest::Result<reqwest::blocking::Response>> {
    let (http, url, token) = (
        s.http.clone(),
        s.url(&format!("/api/scripts/{id}/run")),
        token.to_owned(),
    );
    std::thread::spawn(move || http.post(url).bearer_auth(token).json(&json!({})).send())
}

/// Waits until the only script is marked running; fails with `why` after 20 s.
fn wait_running(s: &Server, token: &str, why: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let (_, list) = s.get_json("/api/scripts", token);
        if list["scripts"][0]["last_status"] == "running" {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{why}: {list}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Reads what the server sends until it closes the socket or `within` passes; None if
/// still open then.
fn read_until_closed(
    sock: &mut std::net::TcpStream,
    within: std::time::Duration,
) -> Option<String> {
    use std::io::Read;
    sock.set_read_timeout(Some(within)).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        match sock.read(&mut buf) {
            Ok(0) => return Some(String::from_utf8_lossy(&got).into_owned()),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                return Some(String::from_utf8_lossy(&got).into_owned())
            }
            Err(_) => return None,
        }
    }
}

#[test]
fn idle_and_slow_connections_are_closed_and_the_cap_refuses_clearly() {
    use std::io::Write;
    use std::net::TcpStream;
    use std::time::{Duration, Instant};
    let s = Server::start_with(
        Backend::Sqlite,
        &[
            ("SVC_MAX_CONNECTIONS", "200"),
            ("SVC_IDLE_TIMEOUT_SECONDS", "3"),
            ("SVC_REQUEST_READ_TIMEOUT_SECONDS", "2"),
        ],
    );
    let addr = s.base.trim_start_matches("http://").to_owned();
    // 150 idle sockets: the server still answers.
    let mut idle: Vec<TcpStream> = (0..150)
        .map(|_| TcpStream::connect(&addr).unwrap())
        .collect();
    let (st, _) = s.send(s.http.get(s.url("/api/health")));
    assert_eq!(st, 200);
    // Past the cap, connections are refused with a 503 in the usual envelope.
    let more: Vec<TcpStream> = (0..60)
        .map(|_| TcpStream::connect(&addr).unwrap())
        .collect();
    let mut refused = Vec::new();
    for mut sock in more {
        sock.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let mut buf = [0u8; 512];
        match std::io::Read::read(&mut sock, &mut buf) {
            Ok(n) if n > 0 => refused.push(String::from_utf8_lossy(&buf[..n]).into_owned()),
            _ => idle.push(sock),
        }
    }
    assert!(!refused.is_empty(), "the cap refused no connection");
    assert!(refused[0].starts_with("HTTP/1.1 503"), "{}", refused[0]);
    assert!(
        refused[0].contains("Too many open connections"),
        "{}",
        refused[0]
    );

    // Idle sockets are closed after 3 s, which frees room; then a slow sender (one byte of
    // its head every 300 ms) is cut off by the 2 s read deadline.
    std::thread::sleep(Duration::from_millis(4500));
    let head = b"GET /api/health HTTP/1.1\r\nHost: x\r\nX-Pad: aaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    let mut slow = TcpStream::connect(&addr).unwrap();
    let started = Instant::now();
    let mut cut = false;
    for b in head.iter() {
        if slow.write_all(&[*b]).is_err() {
            cut = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(300));
        if started.elapsed() > Duration::from_secs(20) {
            break;
        }
    }
    let closed = cut || read_until_closed(&mut slow, Duration::from_secs(5)).is_some();
    assert!(closed, "a trickled request head is cut off");

    // The idle sockets were closed by the server.
    let still_open = idle
        .iter_mut()
        .map(|sock| read_until_closed(sock, Duration::from_millis(50)))
        .filter(Option::is_none)
        .count();
    assert_eq!(still_open, 0, "idle connections left open");
    let (st, _) = s.send(s.http.get(s.url("/api/health")));
    assert_eq!(st, 200);

    // A body sent too slowly: the request fails, the connection is freed.
    let mut sock = TcpStream::connect(&addr).unwrap();
    sock.write_all(b"POST /auth/token HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{").unwrap();
    let answer = read_until_closed(&mut sock, Duration::from_secs(10));
    assert!(answer.is_some(), "a stalled body is not held forever");
}

#[test]
fn health_answers_with_ten_thousand_idle_sockets_open() {
    let s = Server::start();
    let addr = s.base.trim_start_matches("http://").to_owned();
    let limit = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|l| {
            l.lines()
                .find(|l| l.starts_with("Max open files"))
                .and_then(|l| {
                    l.split_whitespace()
                        .nth(3)
                        .and_then(|v| v.parse::<usize>().ok())
                })
        })
        .unwrap_or(1024);
    let n = 10_000.min(limit.saturating_sub(600));
    let socks: Vec<_> = (0..n)
        .filter_map(|_| std::net::TcpStream::connect(&addr).ok())
        .collect();
    assert_eq!(socks.len(), n, "every socket connected");
    let mut worst = std::time::Duration::ZERO;
    for _ in 0..20 {
        let started = std::time::Instant::now();
        let (st, _) = s.send(s.http.get(s.url("/api/health")));
        assert_eq!(st, 200);
        worst = worst.max(started.elapsed());
    }
    println!("{n} idle sockets open: slowest of 20 health checks {worst:?}");
}

#[test]
fn a_query_past_the_memory_ceiling_is_stopped_not_the_server() {
    // A ceiling below what the idle server already holds: any query still running when the
    // watchdog samples is over it.
    let s = Server::start_with(
        Backend::Sqlite,
        &[
            ("SVC_MEMORY_CEILING_MB", "1"),
            ("SVC_QUERY_TIMEOUT_SECONDS", "60"),
        ],
    );
    let admin = s.admin_token();
    let started = std::time::Instant::now();
    let (st, body) = query(&s, &admin, RUNAWAY);
    assert_eq!((st, kind(&body)), (503, "resources_exhausted"), "{body}");
    assert!(
        body["detail"]["message"]
            .to_string()
            .contains("SVC_MEMORY_CEILING_MB"),
        "{body}"
    );
    let took = started.elapsed();
    println!("a runaway query stopped by the memory ceiling after {took:?}");
    assert!(
        took.as_secs() < 30,
        "stopped by the ceiling, not the deadline"
    );
    assert_alive(&s, "a query stopped by the ceiling");
    assert!(s.log().contains("memory ceiling reached"), "{}", s.log());
}

#[test]
fn runaway_queries_of_every_kind_answer_504_at_their_deadline() {
    let (s, _, ana) = analyst_server(Backend::Sqlite, "3");
    let deadline = 3.0;
    for (class, sql) in [
        ("recursion", RUNAWAY),
        (
            "cross join",
            "SELECT count(*) AS n FROM orders a, orders b, orders c, orders d, orders e, orders f \
             WHERE a.id + b.id + c.id + d.id + e.id + f.id = -1",
        ),
        (
            "regex per row",
            "SELECT count(*) AS n FROM orders a, orders b, orders c, orders d, orders e \
             WHERE regexp_like(a.name || b.name || c.name || d.name || e.name, '^(o|1|2|3)*x$')",
        ),
        (
            "sort",
            "SELECT a.id FROM orders a, orders b, orders c, orders d, orders e, orders f ORDER BY random() LIMIT 1",
        ),
    ] {
        let started = std::time::Instant::now();
        let (st, body) = query(&s, &ana, sql);
        let took = started.elapsed().as_secs_f64();
        println!("runaway {class}: {st} {} after {took:.3} s (deadline {deadline} s)", kind(&body));
        // A sort may run out of its memory first; otherwise the deadline answers.
        assert!(
            (st, kind(&body)) == (504, "query_timeout") || (st, kind(&body)) == (503, "resources_exhausted"),
            "{class}: {st} {body}"
        );
        if st == 504 {
            assert!(took < deadline + 2.0, "{class}: 504 only after {took:.3} s");
        }
        assert_alive(&s, class);
    }

    // Each level doubles what it is given: thirty levels of eight bytes would be 8 GiB. The
    // level that passes the budget is refused; constant folding may retry the levels below
    // it until the deadline, so either answer ends it. Last: that folding keeps a core busy
    // after the answer until it finishes (it cannot be interrupted mid-call).
    let (st, body) = query(&s, &ana, NESTED_ENCODE);
    assert!(
        matches!(
            (st, kind(&body)),
            (503, "resources_exhausted") | (504, "query_timeout")
        ),
        "nested encode: {body}"
    );
    assert_alive(&s, "nested encode");
}

#[test]
fn a_query_that_could_overshoot_the_daily_bytes_is_refused_before_it_runs() {
    let dir_bytes = |s: &Server| {
        std::fs::metadata(s.dir.0.join("extracts/local/data/orders.parquet"))
            .unwrap()
            .len()
    };
    // Measure the file once, then allow one byte less than it for the day.
    let probe = Server::start();
    write_parquet(&probe.dir.0, "local", "orders", 50, "o");
    let size = dir_bytes(&probe);
    drop(probe);
    let allowance = (size - 1).to_string();
    let s = Server::start_with(
        Backend::Sqlite,
        &[("SVC_SCAN_MAX_DAILY_BYTES_PER_USER", allowance.as_str())],
    );
    let admin = s.admin_token();
    write_parquet(&s.dir.0, "local", "orders", 50, "o");
    register(&s, &admin, json!({"id": "orders", "source_type": "local"}));
    let (st, body) = query(
        &s,
        &admin,
        "SELECT count(*) AS n FROM orders WHERE name <> ''",
    );
    assert_eq!(st, 429, "{body}");
    assert_eq!(body["detail"]["details"]["kind"], "daily_bytes", "{body}");
    assert!(
        body["detail"]["message"]
            .to_string()
            .contains(&size.to_string()),
        "{body}"
    );
    // Nothing was read, so a query over no table still runs.
    let (st, body) = query(&s, &admin, "SELECT 1 AS one");
    assert_eq!(st, 200, "{body}");
}
