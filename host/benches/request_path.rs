//! The request path against its floor: a release `svc-server` and a hello-world poem server
//! (one handler answering "ok", started by this bench, same framework and runtime) under the
//! same `wrk -t2` load on the same cores, measured alternately so that drift on the machine
//! hits both alike:
//!
//! 1. a cached sample (n=5) at c=8 and c=64; `/api/health` and `/api/me` at c=64; the catalog
//!    of 204 tables at c=8 for an administrator and for an analyst granted half of them —
//!    requests/s and p99 as median, min and max over the passes, and the median as a share of
//!    the floor's median at the same concurrency;
//! 2. the server's resident memory 10 s after it became ready, idle.
//!
//! Each pass starts a fresh server. The machine's steal over the run is printed: figures
//! taken while steal is high are not comparable.
//!
//! `cargo bench -p svc-host --bench request_path`; `SVC_BENCH_PASSES` (default 2),
//! `SVC_BENCH_SECONDS` (15) and `SVC_BENCH_WARMUP` (5) set the passes and each run's length;
//! `SVC_BENCH_PASSES=0` measures the idle memory alone; `SVC_BENCH_ONLY` keeps the scenarios
//! whose label (`cached sample n=5 c=8`) contains one of its comma-separated parts, for more
//! passes of one scenario in the same time (one pass swings ±5 points of the floor here).
//! Needs `wrk`.

mod common;

use std::fs::File;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::{cpu_ticks, spread, steal_since, wrk, Load, Server};
use svc_plugin_api::arrow::array::{ArrayRef, Float64Array, Int64Array, StringArray};
use svc_plugin_api::arrow::datatypes::{DataType, Field, Schema};
use svc_plugin_api::datafusion::parquet::arrow::ArrowWriter;
use svc_plugin_api::RecordBatch;
use svc_store::registry::{QueryMode, RegistryRow};

/// Tables registered besides `orders` (the catalog lists these, `orders` and the three
/// internal tables: 204).
const EXTRA_TABLES: usize = 200;

fn env_u32(name: &str, default: u32) -> u32 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A hello-world poem server on its own runtime; returns its base URL.
fn hello_world() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            use poem::{get, handler, listener::TcpListener, Route};
            #[handler]
            fn ok() -> &'static str {
                "ok"
            }
            poem::Server::new(TcpListener::bind(addr.to_string()))
                .run(Route::new().at("/", get(ok)))
                .await
                .unwrap();
        });
    });
    let base = format!("http://{addr}");
    for _ in 0..100 {
        if reqwest::blocking::get(format!("{base}/")).is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    base
}

fn write_orders(path: &Path) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("customer", DataType::Utf8, false),
        Field::new("amount", DataType::Float64, false),
    ]));
    let n = 10_000i64;
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(Int64Array::from_iter_values(0..n)) as ArrayRef,
            Arc::new(StringArray::from_iter_values(
                (0..n).map(|i| format!("customer-{}", i % 97)),
            )),
            Arc::new(Float64Array::from_iter_values(
                (0..n).map(|i| i as f64 * 1.5),
            )),
        ],
    )
    .unwrap();
    let mut w = ArrowWriter::try_new(File::create(path).unwrap(), schema, None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
}

/// A store with `orders`, 200 more tables, and an analyst whose group is granted half.
fn seed(dir: &Path) {
    write_orders(&dir.join("extracts/local/data/orders.parquet"));
    let (rt, store, user) = common::store_with_analyst(dir);
    rt.block_on(async {
        let group = store.create_group("analysts", None, "bench").await.unwrap();
        store
            .add_member(&group.id, &user.id, "admin", "bench")
            .await
            .unwrap();
        let row = |id: String, mode| RegistryRow {
            name: id.replace('_', " "),
            id,
            source_type: "local".into(),
            bucket: Some("bench".into()),
            source_table: None,
            query_mode: mode,
            source_query: None,
            primary_key: None,
            cursor_column: None,
            sync_schedule: None,
            description: Some("benchmark table".into()),
            registered_by: None,
            registered_at: None,
            updated_at: None,
        };
        store
            .upsert_table(&row("orders".into(), QueryMode::Local))
            .await
            .unwrap();
        store
            .create_grant(&group.id, "table", "orders", "bench")
            .await
            .unwrap();
        for t in 0..EXTRA_TABLES {
            let id = format!("table_{t:03}");
            store
                .upsert_table(&row(id.clone(), QueryMode::Local))
                .await
                .unwrap();
            if t % 2 == 0 {
                store
                    .create_grant(&group.id, "table", &id, "bench")
                    .await
                    .unwrap();
            }
        }
        store.close().await;
    });
}

/// One measured scenario.
struct Scenario {
    name: &'static str,
    path: &'static str,
    /// Whose token: the administrator's, the analyst's, or none.
    who: Who,
    connections: u32,
    runs: Vec<Load>,
    floor: Vec<Load>,
}

#[derive(Clone, Copy)]
enum Who {
    Admin,
    Analyst,
    Nobody,
}

fn main() {
    let passes = env_u32("SVC_BENCH_PASSES", 2);
    let seconds = env_u32("SVC_BENCH_SECONDS", 15);
    let warmup = env_u32("SVC_BENCH_WARMUP", 5);
    let dir = std::env::temp_dir().join(format!("svc-bench-request-{}", std::process::id()));
    seed(&dir);
    let floor = hello_world();
    if wrk(&format!("{floor}/"), None, 2, 0, 1).is_none() {
        println!("request path: wrk is not installed (apt-get install wrk); skipped");
        return;
    }

    let mut scenarios: Vec<Scenario> = [
        (
            "cached sample n=5",
            "/api/v2/sample/orders?n=5",
            Who::Admin,
            8,
        ),
        (
            "cached sample n=5",
            "/api/v2/sample/orders?n=5",
            Who::Admin,
            64,
        ),
        ("/api/health", "/api/health", Who::Nobody, 64),
        ("/api/me", "/api/me", Who::Admin, 64),
        (
            "catalog, 204 tables, admin",
            "/api/v2/catalog",
            Who::Admin,
            8,
        ),
        (
            "catalog, 204 tables, analyst",
            "/api/v2/catalog",
            Who::Analyst,
            8,
        ),
    ]
    .into_iter()
    .map(|(name, path, who, connections)| Scenario {
        name,
        path,
        who,
        connections,
        runs: Vec::new(),
        floor: Vec::new(),
    })
    .collect();
    if let Ok(only) = std::env::var("SVC_BENCH_ONLY") {
        let parts: Vec<&str> = only.split(',').map(str::trim).collect();
        scenarios.retain(|sc| {
            let label = format!("{} c={}", sc.name, sc.connections);
            parts.iter().any(|part| label.contains(part))
        });
        assert!(
            !scenarios.is_empty(),
            "SVC_BENCH_ONLY={only} keeps no scenario; labels look like `cached sample n=5 c=8`"
        );
    }

    let started = cpu_ticks();
    for pass in 0..passes {
        let s = Server::start(&dir);
        if pass == 0 {
            // The seeded analyst means no first administrator was made at start.
            s.cli(&["users", "create", "--email", "admin@localhost", "--admin"]);
        }
        let admin = s.cli(&["tokens", "create", "--email", "admin@localhost"]);
        let analyst = s.cli(&["tokens", "create", "--email", "analyst@example.com"]);
        for sc in &mut scenarios {
            let token = match sc.who {
                Who::Admin => Some(admin.as_str()),
                Who::Analyst => Some(analyst.as_str()),
                Who::Nobody => None,
            };
            let hello = wrk(&format!("{floor}/"), None, sc.connections, warmup, seconds).unwrap();
            let ours = wrk(
                &format!("{}{}", s.base, sc.path),
                token,
                sc.connections,
                warmup,
                seconds,
            )
            .unwrap();
            eprintln!(
                "pass {pass}: {} c={}: {:.0} req/s (floor {:.0}), p99 {:.2} ms, errors {}",
                sc.name, sc.connections, ours.rps, hello.rps, ours.p99_ms, ours.errors
            );
            sc.floor.push(hello);
            sc.runs.push(ours);
        }
    }
    let steal = steal_since(started);

    if passes > 0 {
        println!(
            "request path ({passes} passes of {warmup} s warm-up + {seconds} s, wrk -t2, alternating with the floor; steal {steal:.1}%):"
        );
        for sc in &scenarios {
            let rps: Vec<f64> = sc.runs.iter().map(|l| l.rps).collect();
            let p99: Vec<f64> = sc.runs.iter().map(|l| l.p99_ms).collect();
            let floor: Vec<f64> = sc.floor.iter().map(|l| l.rps).collect();
            let errors: u64 = sc.runs.iter().map(|l| l.errors).sum();
            let (rps_med, rps_min, rps_max) = spread(&rps);
            let (p99_med, p99_min, p99_max) = spread(&p99);
            let (floor_med, _, _) = spread(&floor);
            println!(
                "  {} c={}: {rps_med:.0} req/s (min {rps_min:.0}, max {rps_max:.0}) = {:.0}% of the floor's {floor_med:.0}; p99 {p99_med:.2} ms (min {p99_min:.2}, max {p99_max:.2}){}",
                sc.name,
                sc.connections,
                100.0 * rps_med / floor_med,
                if errors > 0 { format!("; {errors} errors") } else { String::new() }
            );
        }
    }

    // Idle memory: a fresh server, 10 s after it answers.
    let s = Server::start(&dir);
    std::thread::sleep(Duration::from_secs(10));
    println!(
        "idle RSS 10 s after ready: {:.1} MiB, of which {:.1} MiB anonymous and {:.1} MiB the binary's pages (target ≤ 30 MB)",
        s.rss_kib() as f64 / 1024.0,
        s.status_kib("RssAnon:") as f64 / 1024.0,
        s.status_kib("RssFile:") as f64 / 1024.0,
    );
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
}
