//! Audit writer throughput: group commit (the real writer) against one insert per row, both
//! into SQLite in the same run, the store configured exactly as `svc-server` configures it.
//!
//! `cargo bench -p svc-store --bench audit_writer` prints rows/s for each path and the ratio.
//! Set `SVC_TEST_DATABASE_URL` to also measure PostgreSQL. It uses the server's allocator
//! (mimalloc), so its figures are the server's.

use std::sync::Arc;
use std::time::Instant;

use svc_store::audit::{Actor, AuditWriter, ClientKind, Event};
use svc_store::Store;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const NAIVE_ROWS: usize = 3_000;
const BATCHED_ROWS: usize = 200_000;
const PRODUCERS: usize = 8;

fn actor(i: usize) -> Actor {
    Actor {
        user_id: Some(format!("user-{}", i % 50)),
        client_kind: ClientKind::Cli,
        client_ip: Some("127.0.0.1".into()),
        correlation_id: Some(format!("req-{i}")),
        started: None,
    }
}

fn event(i: usize) -> Event {
    Event::new("catalog.sample")
        .resource(format!("table:orders_{}", i % 100))
        .param("rows_returned", 5)
        .param("n", 5)
}

async fn naive(store: &Store) -> f64 {
    // The writer's own record construction, then one transaction per row, as a handler that
    // inserted synchronously would do. Producers run concurrently, like requests.
    let started = Instant::now();
    let per = NAIVE_ROWS / PRODUCERS;
    let mut tasks = Vec::new();
    for p in 0..PRODUCERS {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..per {
                let rec = svc_store::audit::record_for_bench(&actor(p * per + i), event(i));
                store.insert_audit_one(&rec).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    (per * PRODUCERS) as f64 / started.elapsed().as_secs_f64()
}

async fn batched(store: &Store) -> f64 {
    let writer = AuditWriter::start(store.clone());
    let started = Instant::now();
    let per = BATCHED_ROWS / PRODUCERS;
    let mut tasks = Vec::new();
    for p in 0..PRODUCERS {
        let writer = Arc::clone(&writer);
        tasks.push(tokio::spawn(async move {
            for i in 0..per {
                writer.write(&actor(p * per + i), event(i)).await;
                if i % 1024 == 0 {
                    tokio::task::yield_now().await;
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    writer.flush().await;
    (per * PRODUCERS) as f64 / started.elapsed().as_secs_f64()
}

async fn count(store: &Store) -> i64 {
    use sqlx::Row;
    sqlx::query("SELECT COUNT(*) AS n FROM audit_log")
        .fetch_one(store.pool())
        .await
        .unwrap()
        .get("n")
}

async fn measure(label: &str, url: &str) {
    let store = Store::open(url).await.unwrap();
    let before = count(&store).await;
    let naive_rate = naive(&store).await;
    let batched_rate = batched(&store).await;
    let stored = count(&store).await - before;
    assert_eq!(
        stored as usize,
        NAIVE_ROWS / PRODUCERS * PRODUCERS + BATCHED_ROWS / PRODUCERS * PRODUCERS
    );
    println!("audit writer on {label}:");
    println!("  one insert per row : {naive_rate:>10.0} rows/s ({NAIVE_ROWS} rows, {PRODUCERS} concurrent producers)");
    println!("  group commit       : {batched_rate:>10.0} rows/s ({BATCHED_ROWS} rows, {PRODUCERS} concurrent producers)");
    println!(
        "  ratio              : {:>10.1}x",
        batched_rate / naive_rate
    );
    store.close().await;
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let dir = std::env::temp_dir().join(format!("svc-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    measure(
        "SQLite (WAL, synchronous=NORMAL)",
        &svc_store::default_sqlite_url(&dir),
    )
    .await;
    let _ = std::fs::remove_dir_all(&dir);
    if let Ok(admin) = std::env::var("SVC_TEST_DATABASE_URL") {
        let name = format!("svc_bench_{}", std::process::id());
        let a = Store::connect(&admin).await.unwrap();
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(a.pool())
            .await
            .unwrap();
        let base = admin.rsplit_once('/').unwrap().0;
        measure("PostgreSQL", &format!("{base}/{name}")).await;
        sqlx::query(&format!("DROP DATABASE {name}"))
            .execute(a.pool())
            .await
            .unwrap();
    }
}
