//! The marketplace at scale on SQLite and, when `SVC_TEST_DATABASE_URL` is set, on
//! PostgreSQL: 5,000 curated plugins with 90 days of usage (the files' daily counts the
//! rollups are built from), and a marketplace of 200 plugins / 2,000 skill files.
//!
//! `cargo bench -p svc-marketplace --bench marketplace` prints the usage-figures refresh
//! time, p50/p95 ms of listings sorted `most_used`, `trending` and `recent` (first page and a
//! deep page; target p95 ≤ 50 ms), and the time to sync the 200-plugin marketplace from a
//! local directory and through `git` from a local bare repository (target: seconds).

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use svc_marketplace::Marketplace;
use svc_store::audit::{Actor, AuditWriter};
use svc_store::marketplace::{ItemsQuery, MarketSort, MarketTab};
use svc_store::{Backend, Store};

const PLUGINS: i64 = 5_000;
const DAYS: i64 = 90;

fn seq(backend: Backend, n: i64) -> String {
    match backend {
        Backend::Sqlite => format!(
            "(WITH RECURSIVE seq(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM seq WHERE i < {n}) SELECT i FROM seq) s"
        ),
        Backend::Postgres => format!("generate_series(1, {n}) AS s(i)"),
    }
}

/// The day `d` days before today, as `YYYY-MM-DD` (d from an integer column).
fn day_expr(backend: Backend, d: &str) -> String {
    match backend {
        Backend::Sqlite => format!("date('now', '-' || ({d}) || ' days')"),
        Backend::Postgres => {
            format!("to_char((now() AT TIME ZONE 'UTC')::date - ({d}), 'YYYY-MM-DD')")
        }
    }
}

async fn exec(store: &Store, sql: &str) {
    sqlx::query(sql)
        .execute(store.pool())
        .await
        .unwrap_or_else(|e| panic!("{e}: {sql}"));
}

/// 5,000 plugins; for every plugin-day a usage row of 1–3 users (the popular plugins used
/// more), so 90 days hold about a million rows.
async fn seed(store: &Store) {
    let b = store.backend();
    let t = Instant::now();
    exec(
        store,
        &format!(
            "INSERT INTO marketplace_plugins (marketplace_id, name, ref_id, description, category, skills, agents, commands, created_at, synced_at) \
             SELECT 'm' || (i % 10), 'plugin-' || i, 'm' || (i % 10) || '/plugin-' || i, 'Plugin number ' || i, 'cat-' || (i % 12), \
                    '[]', '[]', '[]', '2026-01-01T00:00:00.000000Z', '2026-01-01T00:00:00.000000Z' FROM {}",
            seq(b, PLUGINS)
        ),
    )
    .await;
    // Row r: plugin r % 5000 + 1, day (r / 5000) % 90, user slot r / 450000 (0..2).
    let rows = PLUGINS * DAYS * 2;
    exec(
        store,
        &format!(
            "INSERT INTO usage_file_daily (session_file, day, session_id, user_key, tool_name, source, ref_id, invocations, error_count) \
             SELECT 'f' || (i % 997), {day}, 's' || (i % 50000), 'user' || ((i * 7 + i / {pd}) % 400), 'Skill', 'curated', \
                    'm' || ((i % {PLUGINS} + 1) % 10) || '/plugin-' || (i % {PLUGINS} + 1), \
                    1 + ((i % {PLUGINS}) * 37 + (i / {PLUGINS})) % 9, 0 FROM {src}",
            day = day_expr(b, &format!("(i / {PLUGINS}) % {DAYS}")),
            pd = PLUGINS * DAYS,
            src = seq(b, rows)
        ),
    )
    .await;
    exec(
        store,
        "INSERT INTO usage_plugin_daily (day, source, ref_id, invocations, distinct_users, distinct_sessions) \
         SELECT day, source, ref_id, SUM(invocations), COUNT(DISTINCT user_key), COUNT(DISTINCT session_id) \
         FROM usage_file_daily GROUP BY day, source, ref_id",
    )
    .await;
    exec(store, "ANALYZE").await;
    println!(
        "  seeded {PLUGINS} plugins and {rows} daily usage rows over {DAYS} days in {:.1} s",
        t.elapsed().as_secs_f64()
    );
}

async fn measure<F, Fut>(label: &str, runs: usize, target_ms: f64, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    f().await;
    let mut ms = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        f().await;
        ms.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    ms.sort_by(f64::total_cmp);
    let p = |q: f64| ms[((ms.len() as f64 * q).ceil() as usize).clamp(1, ms.len()) - 1];
    let (p50, p95) = (p(0.50), p(0.95));
    let verdict = if p95 <= target_ms { "met" } else { "MISSED" };
    println!("  {label:<40} p50 {p50:>8.2} ms  p95 {p95:>8.2} ms  (target p95 <= {target_ms} ms: {verdict})");
}

/// A marketplace of 200 plugins with 10 skills each, as a directory and as a bare repo.
fn big_marketplace(root: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let dir = root.join("big");
    let mut plugins = Vec::new();
    for p in 0..200 {
        plugins.push(
            serde_json::json!({"name": format!("p{p}"), "description": format!("plugin {p}")}),
        );
        for s in 0..10 {
            let d = dir.join(format!("plugins/p{p}/skills/s{s}"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(
                d.join("SKILL.md"),
                format!("---\nname: p{p}-skill-{s}\ndescription: skill {s} of plugin {p}\n---\nDo the thing.\n"),
            )
            .unwrap();
        }
    }
    std::fs::write(
        dir.join("marketplace.json"),
        serde_json::json!({"name": "big", "plugins": plugins}).to_string(),
    )
    .unwrap();
    let git = |args: &[&str], cwd: &Path| {
        let ok = Command::new("git")
            .args(["-c", "user.name=b", "-c", "user.email=b@example.com"])
            .args(args)
            .current_dir(cwd)
            .output()
            .unwrap()
            .status
            .success();
        assert!(ok, "git {args:?}");
    };
    git(&["init", "-q"], &dir);
    git(&["add", "."], &dir);
    git(&["commit", "-q", "-m", "big"], &dir);
    let bare = root.join("big.git");
    git(
        &[
            "clone",
            "-q",
            "--bare",
            dir.to_str().unwrap(),
            bare.to_str().unwrap(),
        ],
        root,
    );
    (dir, bare)
}

async fn bench(store: Store, label: &str, data: &Path) {
    println!("{label}:");
    seed(&store).await;
    let t = Instant::now();
    store
        .refresh_marketplace_stats(chrono::Utc::now().date_naive())
        .await
        .unwrap();
    println!(
        "  usage figures refreshed (30-day distinct users, trend) in {:.0} ms",
        t.elapsed().as_secs_f64() * 1000.0
    );
    let audit = AuditWriter::start(store.clone());
    let market = Marketplace::new(store.clone(), audit, data);
    for (name, sort, offset) in [
        ("listing: most_used, first page", MarketSort::MostUsed, 0),
        ("listing: trending, first page", MarketSort::Trending, 0),
        ("listing: recent, first page", MarketSort::Recent, 0),
        ("listing: most_used, page 100", MarketSort::MostUsed, 2376),
    ] {
        let q = ItemsQuery {
            tab: MarketTab::Curated,
            q: None,
            category: None,
            item_type: None,
            sort,
            offset,
            limit: 24,
        };
        measure(name, 100, 50.0, || {
            let (market, q) = (&market, &q);
            async move {
                let page = market.items(q).await.unwrap();
                assert_eq!(page.items.len(), 24);
            }
        })
        .await;
    }
    let (dir, bare) = big_marketplace(data);
    for (id, url) in [
        ("dir", dir.to_str().unwrap()),
        ("git", bare.to_str().unwrap()),
    ] {
        sqlx::query(
            "INSERT INTO marketplaces (id, name, url, plugin_count) VALUES ($1, $1, $2, 0)",
        )
        .bind(id)
        .bind(url)
        .execute(store.pool())
        .await
        .unwrap();
        let t = Instant::now();
        let r = market.sync(&Actor::scheduler(), Some(id)).await.unwrap();
        assert_eq!(r[0].plugins, 200, "{:?}", r[0].error);
        println!(
            "  sync of 200 plugins / 2,000 skill files ({id:<3}) {:>8.2} s (target: seconds)",
            t.elapsed().as_secs_f64()
        );
    }
}

#[tokio::main]
async fn main() {
    let root = std::env::temp_dir().join(format!("svc-market-bench-{}", std::process::id()));
    std::fs::create_dir_all(&root).unwrap();
    let sqlite = Store::open(&svc_store::default_sqlite_url(&root.join("s")))
        .await
        .unwrap();
    bench(sqlite, "SQLite", &root.join("s")).await;
    match std::env::var("SVC_TEST_DATABASE_URL") {
        Ok(admin_url) => {
            let name = format!("svc_bench_market_{}", std::process::id());
            let admin = Store::connect(&admin_url).await.unwrap();
            exec(&admin, &format!("CREATE DATABASE {name}")).await;
            let base = admin_url.rsplit_once('/').map(|(b, _)| b).unwrap();
            let pg = Store::open(&format!("{base}/{name}")).await.unwrap();
            std::fs::create_dir_all(root.join("p")).unwrap();
            bench(pg.clone(), "PostgreSQL", &root.join("p")).await;
            pg.close().await;
            exec(&admin, &format!("DROP DATABASE {name} WITH (FORCE)")).await;
        }
        Err(_) => println!("PostgreSQL: skipped (set SVC_TEST_DATABASE_URL to measure it)"),
    }
    let _ = std::fs::remove_dir_all(&root);
}
