//! Corporate memory at scale: 100,000 items and 1,000,000 votes on SQLite and, when
//! `SVC_TEST_DATABASE_URL` is set, on PostgreSQL, both in one run.
//!
//! `cargo bench -p svc-memory --bench memory` prints p50/p95 ms of: list pages (an
//! administrator's first page, a reader's first page with visibility, a reader's approved
//! items by score, a page 100 deep), the tree (domain and tag axes for a reader, category for
//! an administrator), a review decision (approve), and the agents' bundle for a reader, both
//! assembled (a view not seen before) and repeated (kept while no item changes).
//! Targets: list and tree p95 ≤ 50 ms, a review action p95 ≤ 20 ms, the bundle ≤ 20 ms.
//!
//! `SVC_BENCH_MEMORY_ITEMS` changes the item count (votes stay at ten per item).

use std::time::Instant;

use svc_auth::jwt::TokenType;
use svc_auth::Caller;
use svc_memory::{Decision, Memory};
use svc_store::audit::{Actor, AuditWriter};
use svc_store::memory::tree::{TreeAxis, TreeQuery};
use svc_store::memory::{ItemQuery, ItemSort, Visibility};
use svc_store::users::User;
use svc_store::{Backend, Store};

/// `FROM`-able integers 1..=n, named `i`.
fn seq(backend: Backend, n: i64) -> String {
    match backend {
        Backend::Sqlite => format!(
            "(WITH RECURSIVE seq(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM seq WHERE i < {n}) SELECT i FROM seq) s"
        ),
        Backend::Postgres => format!("generate_series(1, {n}) AS s(i)"),
    }
}

/// A timestamp `i % 400` days ago, in the store's format.
fn days_ago(backend: Backend) -> &'static str {
    match backend {
        Backend::Sqlite => {
            "strftime('%Y-%m-%dT%H:%M:%S', 'now', '-' || (i % 400) || ' days', '-' || (i % 86400) || ' seconds') || '.000000Z'"
        }
        Backend::Postgres => {
            "to_char((now() AT TIME ZONE 'UTC') - (i % 400) * interval '1 day' - (i % 86400) * interval '1 second', 'YYYY-MM-DD\"T\"HH24:MI:SS') || '.000000Z'"
        }
    }
}

async fn exec(store: &Store, sql: &str) {
    sqlx::query(sql)
        .execute(store.pool())
        .await
        .unwrap_or_else(|e| panic!("{e}: {sql}"));
}

async fn seed(store: &Store, n: i64) {
    let b = store.backend();
    let t = Instant::now();
    // 0.1% mandatory (every one is in every bundle), 40% approved, the rest in review states.
    let status = "CASE WHEN i % 1000 = 1 THEN 'mandatory' WHEN i % 100 < 42 THEN 'approved' \
                  WHEN i % 100 < 72 THEN 'pending' WHEN i % 100 < 92 THEN 'rejected' ELSE 'revoked' END";
    let domain = "CASE i % 7 WHEN 0 THEN 'finance' WHEN 1 THEN 'engineering' WHEN 2 THEN 'product' \
                  WHEN 3 THEN 'data' WHEN 4 THEN 'operations' WHEN 5 THEN 'infrastructure' ELSE NULL END";
    let personal = "(i % 50 = 0)";
    exec(
        store,
        &format!(
            "INSERT INTO knowledge_items (id, title, content, category, tags, status, source_user, created_by, \
             audience, confidence_milli, domain, source_type, is_personal, revision, upvotes, downvotes, \
             created_at, updated_at, title_key) \
             SELECT 'k' || i, 'Item ' || i || ' on topic ' || (i % 997), \
                    'The knowledge of item ' || i || ': how the team handles case ' || (i % 613) || \
                    ' when numbers disagree, which source wins, and who to ask before publishing a figure.', \
                    'cat-' || (i % 20), '[\"t' || (i % 50) || '\",\"t' || ((i / 50) % 50 + 50) || '\"]', \
                    {status}, 'user' || (i % 300) || '@example.com', 'u' || (i % 300), \
                    CASE WHEN i % 10 = 0 THEN 'group:g' || (i % 5) ELSE NULL END, 300 + (i * 7) % 700, \
                    {domain}, 'api', {personal}, 1, 0, 0, {ts}, {ts}, 'item ' || i || ' on topic ' || (i % 997) \
             FROM {src}",
            ts = days_ago(b),
            src = seq(b, n)
        ),
    )
    .await;
    // Each item's first tag row is the one that counts it (as the store marks its least).
    for (tag, counts) in [
        ("'t' || (CAST(substr(id, 2) AS INTEGER) % 50)", "TRUE"),
        (
            "'t' || ((CAST(substr(id, 2) AS INTEGER) / 50) % 50 + 50)",
            "FALSE",
        ),
    ] {
        exec(
            store,
            &format!(
                "INSERT INTO knowledge_item_tags (item_id, tag, counts_item, item_updated_at, status, is_personal, \
                 audience, domain, source_type) \
                 SELECT id, {tag}, {counts}, updated_at, status, is_personal, audience, domain, source_type \
                 FROM knowledge_items"
            ),
        )
        .await;
    }
    let votes = n * 10;
    exec(
        store,
        &format!(
            "INSERT INTO knowledge_votes (item_id, user_id, vote, voted_at) \
             SELECT 'k' || (i % {n} + 1), 'voter' || (i / {n}), CASE WHEN i % 4 = 0 THEN -1 ELSE 1 END, '2026-01-01T00:00:00.000000Z' \
             FROM {src}",
            src = seq(b, votes - 1)
        ),
    )
    .await;
    exec(
        store,
        "UPDATE knowledge_items SET \
         upvotes = (SELECT COUNT(*) FROM knowledge_votes v WHERE v.item_id = knowledge_items.id AND v.vote > 0), \
         downvotes = (SELECT COUNT(*) FROM knowledge_votes v WHERE v.item_id = knowledge_items.id AND v.vote < 0)",
    )
    .await;
    let epoch = match b {
        Backend::Sqlite => "CAST(strftime('%s', updated_at) AS INTEGER)",
        Backend::Postgres => "CAST(EXTRACT(EPOCH FROM CAST(updated_at AS TIMESTAMPTZ)) AS BIGINT)",
    };
    exec(
        store,
        &format!(
            "UPDATE knowledge_items SET score = upvotes - downvotes, \
             chars = LENGTH(title) + COALESCE(LENGTH(content), 0), updated_epoch = {epoch}"
        ),
    )
    .await;
    // The state autovacuum reaches a minute after a bulk insert: statistics, and on
    // PostgreSQL the visibility map that lets covering indexes answer without the heap.
    match b {
        Backend::Sqlite => exec(store, "ANALYZE").await,
        Backend::Postgres => exec(store, "VACUUM ANALYZE").await,
    }
    println!(
        "  seeded {n} items, {} votes in {:.1} s",
        votes - 1,
        t.elapsed().as_secs_f64()
    );
}

fn caller(id: &str, admin: bool) -> Caller {
    let mut actor = Actor::scheduler();
    actor.user_id = Some(id.to_owned());
    Caller {
        user: std::sync::Arc::new(User {
            id: id.to_owned(),
            email: format!("{id}@example.com"),
            name: None,
            password_hash: None,
            active: true,
            created_at: None,
            deactivated_at: None,
        }),
        is_admin: admin,
        token_type: TokenType::Session,
        token_id: None,
        actor,
    }
}

/// p50 and p95 of `runs` timed calls, in ms.
async fn measure<F, Fut>(label: &str, runs: usize, target_ms: f64, mut f: F)
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    f(0).await; // warm the caches once
    let mut ms = Vec::with_capacity(runs);
    for i in 0..runs {
        let t = Instant::now();
        f(i + 1).await;
        ms.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    ms.sort_by(f64::total_cmp);
    let p = |q: f64| ms[((ms.len() as f64 * q).ceil() as usize).clamp(1, ms.len()) - 1];
    let (p50, p95) = (p(0.50), p(0.95));
    let verdict = if p95 <= target_ms { "met" } else { "MISSED" };
    println!("  {label:<44} p50 {p50:>8.2} ms  p95 {p95:>8.2} ms  (target p95 <= {target_ms} ms: {verdict})");
}

async fn bench(store: Store, label: &str, n: i64) {
    println!("{label}:");
    seed(&store, n).await;
    let reader = Visibility::Reader {
        groups: vec!["g1".into()],
        domains: vec![],
    };
    let page = |sort, offset, statuses: Vec<String>, exclude_personal| ItemQuery {
        statuses,
        sort,
        offset,
        limit: 50,
        exclude_personal,
        ..ItemQuery::default()
    };
    for (name, vis, q) in [
        (
            "list: admin, first page",
            Visibility::All,
            page(ItemSort::Updated, 0, vec![], false),
        ),
        (
            "list: reader, first page",
            reader.clone(),
            page(ItemSort::Updated, 0, vec![], true),
        ),
        (
            "list: reader, approved by score",
            reader.clone(),
            page(ItemSort::Score, 0, vec!["approved".into()], true),
        ),
        (
            "list: reader, page 100",
            reader.clone(),
            page(ItemSort::Updated, 4950, vec![], true),
        ),
    ] {
        measure(name, 100, 50.0, |_| {
            let (store, vis, q) = (&store, &vis, &q);
            async move {
                let p = store.knowledge_items(vis, q).await.unwrap();
                assert!(!p.items.is_empty());
            }
        })
        .await;
    }
    let tree = |axis, exclude_personal| TreeQuery {
        axis,
        statuses: vec![],
        source_type: None,
        audience: None,
        search: None,
        has_duplicate: None,
        exclude_personal,
        offset: 0,
        limit: 50,
        items_per_group: 20,
    };
    for (name, vis, q) in [
        (
            "tree: reader, domain axis",
            reader.clone(),
            tree(TreeAxis::Domain, true),
        ),
        (
            "tree: reader, tag axis (100 tags)",
            reader.clone(),
            tree(TreeAxis::Tag, true),
        ),
        (
            "tree: admin, category axis",
            Visibility::All,
            tree(TreeAxis::Category, false),
        ),
    ] {
        measure(name, 50, 50.0, |_| {
            let (store, vis, q) = (&store, &vis, &q);
            async move {
                let t = store.knowledge_tree(vis, q).await.unwrap();
                assert!(!t.groups.is_empty());
            }
        })
        .await;
    }
    let audit = AuditWriter::start(store.clone());
    let memory = Memory::new(store.clone(), audit);
    let admin = caller("admin", true);
    // Items 101, 201, …: pending ones (i % 100 in 42..72 are pending; 50 is).
    measure("review: approve a pending item", 100, 20.0, |k| {
        let (memory, admin) = (&memory, &admin);
        async move {
            let id = format!("k{}", k * 100 + 50);
            memory
                .decide(
                    admin,
                    &id,
                    Decision::Approve,
                    Some("bench".into()),
                    None,
                    None,
                )
                .await
                .unwrap();
        }
    })
    .await;
    let ana = caller("u7", false);
    // The bundle's ranking alone: the best page of approved items at a new moment.
    measure("bundle: ranked page of 256 (store)", 50, 20.0, |k| {
        let (store, reader) = (&store, &reader);
        async move {
            let now = chrono::Utc::now().timestamp() + k as i64;
            let page = store
                .knowledge_bundle_ranked(reader, now, 0, 256)
                .await
                .unwrap();
            assert_eq!(page.len(), 256);
        }
    })
    .await;
    // A budget never asked before is a view the cache has not seen: the bundle is assembled.
    measure("bundle: assembled (first for a view)", 50, 20.0, |k| {
        let (memory, ana) = (&memory, &ana);
        async move {
            let b = memory.bundle(ana, 6000 + k).await.unwrap();
            assert!(!b.approved.is_empty());
        }
    })
    .await;
    measure(
        "bundle: repeated (kept; no item changed)",
        200,
        20.0,
        |_| {
            let (memory, ana) = (&memory, &ana);
            async move {
                let b = memory.bundle(ana, 6000).await.unwrap();
                assert!(!b.approved.is_empty());
            }
        },
    )
    .await;
}

#[tokio::main]
async fn main() {
    let n: i64 = std::env::var("SVC_BENCH_MEMORY_ITEMS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let dir = std::env::temp_dir().join(format!("svc-memory-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sqlite = Store::open(&svc_store::default_sqlite_url(&dir))
        .await
        .unwrap();
    bench(sqlite, "SQLite", n).await;
    let _ = std::fs::remove_dir_all(&dir);
    match std::env::var("SVC_TEST_DATABASE_URL") {
        Ok(admin_url) => {
            let name = format!("svc_bench_memory_{}", std::process::id());
            let admin = Store::connect(&admin_url).await.unwrap();
            exec(&admin, &format!("CREATE DATABASE {name}")).await;
            let base = admin_url.rsplit_once('/').map(|(b, _)| b).unwrap();
            let pg = Store::open(&format!("{base}/{name}")).await.unwrap();
            bench(pg.clone(), "PostgreSQL", n).await;
            pg.close().await;
            // The audit writer's connection may linger: drop the database regardless.
            exec(&admin, &format!("DROP DATABASE {name} WITH (FORCE)")).await;
        }
        Err(_) => println!("PostgreSQL: skipped (set SVC_TEST_DATABASE_URL to measure it)"),
    }
}
