//! Reading a large audit log: 10 M rows over 90 days (500 users, a realistic action mix) on
//! SQLite and, when `SVC_TEST_DATABASE_URL` is set, on PostgreSQL, both in one run.
//!
//! `cargo bench -p svc-store --bench audit_reads` prints, per backend:
//! - timeline pages (first, and 100 cursors deep) with no filter and with each of user, action
//!   prefix, `result=error` and `q`: p50/p95 ms (target p95 ≤ 10 ms on SQLite);
//! - facets and KPIs over 24 h and 30 days: p50/p95 ms (target p95 ≤ 200 ms for 24 h);
//! - the audit writer's rows/s alone and while the timeline is read at 50 requests/s;
//! - a keyset walk of a day's rows while 5,000 rows/s are written: rows skipped and repeated.
//!
//! `SVC_BENCH_AUDIT_ROWS` changes the row count (the window sizes scale with it).

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use svc_core::clock::format_ts;
use svc_store::audit::{
    Actor, AuditCursor, AuditFilter, AuditWriter, ClientKind, Event, ResultFilter,
};
use svc_store::testing::seed_audit;
use svc_store::{Backend, Store};

/// Rows per audit-writer measurement.
const WRITER_ROWS: u64 = 600_000;

fn ago(hours: i64) -> Option<String> {
    Some(format_ts(Utc::now() - chrono::Duration::hours(hours)))
}

fn percentile(mut ms: Vec<f64>, p: f64) -> f64 {
    ms.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let rank = ((p * ms.len() as f64).ceil() as usize).clamp(1, ms.len());
    ms[rank - 1]
}

/// Runs `f` `reps` times; returns (p50, p95) in ms.
async fn timed<F, Fut>(reps: usize, mut f: F) -> (f64, f64)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut ms = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        f().await;
        ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    (percentile(ms.clone(), 0.5), percentile(ms, 0.95))
}

fn verdict(p95: f64, target: f64) -> &'static str {
    if p95 <= target {
        "met"
    } else {
        "MISSED"
    }
}

async fn timeline(store: &Store, is_sqlite: bool) {
    let month = AuditFilter {
        since: ago(24 * 30),
        ..AuditFilter::default()
    };
    let filters: Vec<(&str, AuditFilter)> = vec![
        ("no filter", month.clone()),
        (
            "user",
            AuditFilter {
                user_id: Some("user-20".into()),
                ..month.clone()
            },
        ),
        (
            "action prefix query.",
            AuditFilter {
                action_prefix: Some("query.".into()),
                ..month.clone()
            },
        ),
        (
            "result=error",
            AuditFilter {
                result: Some(ResultFilter::Error),
                ..month.clone()
            },
        ),
        (
            "q (1% of rows)",
            AuditFilter {
                q: Some("FROM orders_7 ".into()),
                ..month.clone()
            },
        ),
    ];
    println!("  timeline, 50 rows a page, 30-day window (target p95 <= 10 ms on SQLite):");
    for (name, filter) in &filters {
        let (p50, p95) = timed(30, || async {
            store.audit_page(filter, None, 50).await.unwrap();
        })
        .await;
        // Walk to page 100 once, then time the page after it.
        let mut cursor: Option<AuditCursor> = None;
        for _ in 0..100 {
            let page = store.audit_page(filter, cursor.as_ref(), 50).await.unwrap();
            cursor = page.next_cursor.as_deref().and_then(AuditCursor::parse);
            if cursor.is_none() {
                break;
            }
        }
        let deep = match &cursor {
            Some(c) => {
                let (d50, d95) = timed(30, || async {
                    store.audit_page(filter, Some(c), 50).await.unwrap();
                })
                .await;
                format!(
                    "page 101: p50 {d50:.2} ms, p95 {d95:.2} ms{}",
                    if is_sqlite {
                        format!(" ({})", verdict(d95, 10.0))
                    } else {
                        String::new()
                    }
                )
            }
            None => "fewer than 100 pages".to_owned(),
        };
        println!(
            "    {name:<22} first page: p50 {p50:.2} ms, p95 {p95:.2} ms{}; {deep}",
            if is_sqlite {
                format!(" ({})", verdict(p95, 10.0))
            } else {
                String::new()
            }
        );
    }
}

async fn summaries(store: &Store, is_sqlite: bool) {
    println!("  facets and KPIs (target p95 <= 200 ms for 24 h):");
    for (label, hours, reps) in [("24 h", 24, 20), ("30 days", 24 * 30, 3)] {
        let filter = AuditFilter {
            since: ago(hours),
            ..AuditFilter::default()
        };
        let rows = store.audit_kpis(&filter).await.unwrap().events_total;
        let (f50, f95) = timed(reps, || async {
            store.audit_facets(&filter).await.unwrap();
        })
        .await;
        let (k50, k95) = timed(reps, || async {
            store.audit_kpis(&filter).await.unwrap();
        })
        .await;
        let target = |p95: f64| {
            if hours == 24 && is_sqlite {
                format!(" ({})", verdict(p95, 200.0))
            } else {
                String::new()
            }
        };
        println!(
            "    {label:<8} ({rows} rows): facets p50 {f50:.1} ms, p95 {f95:.1} ms{}; kpis p50 {k50:.1} ms, p95 {k95:.1} ms{}",
            target(f95),
            target(k95)
        );
    }
}

fn actor(i: u64) -> Actor {
    Actor {
        user_id: Some(format!("user-{}", i % 500)),
        client_kind: ClientKind::Cli,
        client_ip: Some("127.0.0.1".into()),
        correlation_id: Some(format!("bench-{i}")),
        started: None,
    }
}

/// Rows/s through the real writer from 8 producers, optionally with the timeline read at
/// 50 requests/s meanwhile; returns (rows/s, reads done, read p95 ms).
async fn writer_rate(store: &Store, rows: u64, with_reads: bool) -> (f64, usize, f64) {
    let writer = AuditWriter::start(store.clone());
    let stop = Arc::new(AtomicBool::new(false));
    let reader = with_reads.then(|| {
        let store = store.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let filter = AuditFilter {
                since: ago(24),
                ..AuditFilter::default()
            };
            let mut every = tokio::time::interval(Duration::from_millis(20));
            let mut ms = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                every.tick().await;
                let t = Instant::now();
                store.audit_page(&filter, None, 50).await.unwrap();
                ms.push(t.elapsed().as_secs_f64() * 1e3);
            }
            ms
        })
    });
    let started = Instant::now();
    let per = rows / 8;
    let mut tasks = Vec::new();
    for p in 0..8 {
        let writer = writer.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..per {
                writer
                    .write(
                        &actor(p * per + i),
                        Event::new("catalog.sample")
                            .resource(format!("table:t{}", i % 2000))
                            .param("rows_returned", 5),
                    )
                    .await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    writer.flush().await;
    let rate = (per * 8) as f64 / started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    match reader {
        Some(r) => {
            let ms = r.await.unwrap();
            let n = ms.len();
            (rate, n, if n > 0 { percentile(ms, 0.95) } else { 0.0 })
        }
        None => (rate, 0, 0.0),
    }
}

/// Walks a day of rows 200 at a time while rows are written at 5,000/s; every row older
/// than the walk's start (less the group-commit margin) must be seen exactly once.
async fn keyset_under_load(store: &Store) {
    let writer = AuditWriter::start(store.clone());
    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicU64::new(0));
    let inserter = {
        let writer = writer.clone();
        let stop = stop.clone();
        let written = written.clone();
        tokio::spawn(async move {
            // 50 rows every 10 ms.
            let mut every = tokio::time::interval(Duration::from_millis(10));
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                every.tick().await;
                for _ in 0..50 {
                    writer
                        .write(&actor(i), Event::new("keyset.insert").param("i", i))
                        .await;
                    i += 1;
                }
                written.store(i, Ordering::Relaxed);
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let filter = AuditFilter {
        since: ago(24),
        ..AuditFilter::default()
    };
    let started = Instant::now();
    let mut seen: Vec<String> = Vec::new();
    let mut top: Option<String> = None;
    let mut cursor: Option<AuditCursor> = None;
    let mut pages = 0;
    loop {
        let page = store
            .audit_page(&filter, cursor.as_ref(), 200)
            .await
            .unwrap();
        pages += 1;
        if top.is_none() {
            top = page.rows.first().map(|r| r.record.timestamp.clone());
        }
        seen.extend(page.rows.iter().map(|r| r.record.id.clone()));
        cursor = page.next_cursor.as_deref().and_then(AuditCursor::parse);
        if cursor.is_none() {
            break;
        }
    }
    let walk = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    inserter.await.unwrap();
    writer.flush().await;
    let inserted = written.load(Ordering::Relaxed);
    // Rows a group commit may still have been holding when the walk began are newer than
    // this margin; everything older must be in the walk.
    let top = svc_core::clock::parse_ts(&top.unwrap()).unwrap();
    let settled = format_ts(top - chrono::Duration::seconds(2));
    let expected: HashSet<String> = store
        .audit_page(
            &AuditFilter {
                since: filter.since.clone(),
                until: Some(settled),
                ..AuditFilter::default()
            },
            None,
            10_000_000,
        )
        .await
        .unwrap()
        .rows
        .into_iter()
        .map(|r| r.record.id)
        .collect();
    let unique: HashSet<&String> = seen.iter().collect();
    let repeated = seen.len() - unique.len();
    let skipped = expected.iter().filter(|id| !unique.contains(id)).count();
    println!(
        "  keyset walk of 24 h ({} rows, {pages} pages of 200, {:.1} s) while {inserted} rows were written ({:.0}/s): {skipped} skipped, {repeated} repeated ({})",
        seen.len(),
        walk.as_secs_f64(),
        inserted as f64 / walk.as_secs_f64().max(0.001),
        if skipped == 0 && repeated == 0 { "ok" } else { "FAILED" }
    );
}

async fn bench(store: Store, label: &str, rows: i64) {
    println!("{label}:");
    let is_sqlite = store.backend() == Backend::Sqlite;
    seed_audit(&store, rows).await;
    timeline(&store, is_sqlite).await;
    summaries(&store, is_sqlite).await;
    // Long enough (tens of seconds) that a 2-core machine's scheduling noise does not
    // decide the comparison; alone, read, alone again, the alone figure their mean.
    let (first, _, _) = writer_rate(&store, WRITER_ROWS, false).await;
    let (with_reads, reads, read_p95) = writer_rate(&store, WRITER_ROWS, true).await;
    let (second, _, _) = writer_rate(&store, WRITER_ROWS, false).await;
    let alone = (first + second) / 2.0;
    println!(
        "  audit writer: {alone:.0} rows/s alone (mean of {first:.0} before and {second:.0} after), {with_reads:.0} rows/s with the timeline read at 50/s ({reads} reads, p95 {read_p95:.1} ms): {:+.1}% ({})",
        (with_reads / alone - 1.0) * 100.0,
        if with_reads >= alone * 0.9 { "within 10%" } else { "MISSED: more than 10% slower" }
    );
    keyset_under_load(&store).await;
}

#[tokio::main]
async fn main() {
    let rows: i64 = std::env::var("SVC_BENCH_AUDIT_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000_000);
    let dir = std::env::temp_dir().join(format!("svc-audit-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sqlite = Store::open(&svc_store::default_sqlite_url(&dir))
        .await
        .unwrap();
    bench(sqlite, "SQLite", rows).await;
    let _ = std::fs::remove_dir_all(&dir);

    match std::env::var("SVC_TEST_DATABASE_URL") {
        Ok(admin_url) => {
            let name = format!("svc_bench_audit_{}", std::process::id());
            let admin = Store::connect(&admin_url).await.unwrap();
            sqlx::query(&format!("CREATE DATABASE {name}"))
                .execute(admin.pool())
                .await
                .unwrap();
            let base = admin_url.rsplit_once('/').map(|(b, _)| b).unwrap();
            let pg = Store::open(&format!("{base}/{name}")).await.unwrap();
            bench(pg.clone(), "PostgreSQL", rows).await;
            pg.close().await;
            sqlx::query(&format!("DROP DATABASE {name}"))
                .execute(admin.pool())
                .await
                .unwrap();
        }
        Err(_) => println!("PostgreSQL: skipped (set SVC_TEST_DATABASE_URL to measure it)"),
    }
}
