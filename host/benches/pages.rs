//! The web pages over a large store, through a release `svc-server`: time to first byte of
//! every page (p50/p95 of repeated loads by a signed-in administrator), each page's weight
//! (HTML + CSS + JS, uncompressed) and the warmup log's delay (from a line being written to
//! its arrival at a reader of the page's event stream). Prints figures against the targets
//! (TTFB p95 ≤ 50 ms, ≤ 150 KB a page, SSE p95 ≤ 250 ms); asserts nothing about speed.
//! The activity pages are measured twice: before the audit rollup job has run (every card
//! and facet counted over the log) and after it has counted the seeded backlog. The
//! telemetry pages are measured twice too: with the event index (the default) and on a second
//! server with it off (every read a scan of the event files). "first load" is the warm-up
//! load, not counted in the percentiles: for the telemetry pages it builds the index.
//!
//!   cargo bench -p svc-host --bench pages
//!
//! Seeds (SQLite store): `SVC_BENCH_SESSIONS` session files of `SVC_BENCH_TURNS` lines
//! (defaults 100000 × 112: about 10 M telemetry events, through the real pipeline),
//! `SVC_BENCH_AUDIT_ROWS` audit rows (10 M), `SVC_BENCH_TABLES` registered tables (1,000);
//! `SVC_BENCH_RUNS` (30) loads per page.

mod common;

use std::io::{BufRead, BufReader, BufWriter, Write};
use std::time::{Duration, Instant};

use common::{percentile, Server};
use reqwest::blocking::Client;
use svc_store::registry::{QueryMode, RegistryRow};
use svc_store::testing::{seed_audit, TempDir};
use svc_store::Store;
use svc_telemetry::corpus::{self, Rng};
use svc_telemetry::files::SessionFiles;
use svc_telemetry::{EventSegments, Pipeline, Trigger};

const PASSWORD: &str = "bench-password-123";

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Seeds the store and the session files; returns the admin's id and one session path.
async fn seed(store: &Store, data: &std::path::Path) -> (String, String) {
    let admin = store
        .create_user(
            "admin@localhost",
            Some("Admin"),
            Some(&svc_auth::password::hash(PASSWORD)),
        )
        .await
        .unwrap();
    store.seed_system_groups().await.unwrap();
    let group = store
        .group_by_name(svc_store::users::ADMIN_GROUP)
        .await
        .unwrap()
        .unwrap();
    store
        .add_member(&group.id, &admin.id, "manual", "bench")
        .await
        .unwrap();

    let tables = env_u64("SVC_BENCH_TABLES", 1_000);
    for i in 0..tables {
        let mut row = RegistryRow::new_local(&format!("t{i:04}"));
        row.bucket = Some(format!("bucket_{}", i % 20));
        row.description = Some(format!("Table {i} of the benchmark"));
        // A tenth are remote: the warmup has rows to refresh (and fail, with no warehouse).
        if i % 10 == 0 {
            row.source_type = "warehouse".into();
            row.query_mode = QueryMode::Remote;
        }
        store.upsert_table(&row).await.unwrap();
    }
    println!("seeded {tables} tables");

    seed_audit(store, env_u64("SVC_BENCH_AUDIT_ROWS", 10_000_000) as i64).await;

    let sessions = env_u64("SVC_BENCH_SESSIONS", 100_000);
    let turns = env_u64("SVC_BENCH_TURNS", 112);
    let users = 500u64.min(sessions.max(1));
    let root = data.join("user_sessions");
    let mut ids = Vec::new();
    for u in 0..users {
        let id = store
            .create_user(&format!("user{u}@example.com"), None, None)
            .await
            .unwrap()
            .id;
        std::fs::create_dir_all(root.join(&id)).unwrap();
        ids.push(id);
    }
    let now = chrono::Utc::now().timestamp();
    let mut rng = Rng::new(20_261_126);
    let t = Instant::now();
    for i in 0..sessions {
        let dir = root.join(&ids[(i % users) as usize]);
        let start = now - rng.below(30 * 86_400) as i64 - 3_600;
        let mut out =
            BufWriter::new(std::fs::File::create(dir.join(format!("s-{i:06}.jsonl"))).unwrap());
        corpus::session_at(&mut out, &mut rng, i, turns, start).unwrap();
        out.flush().unwrap();
    }
    let pipeline = Pipeline::new(
        store.clone(),
        SessionFiles::new(data),
        EventSegments::new(data),
    );
    let r = pipeline.run(Trigger::Manual, false).await.unwrap();
    println!(
        "seeded {} session files, {} telemetry events in {:.0} s",
        r.processed,
        r.events,
        t.elapsed().as_secs_f64()
    );
    (ids[0].clone(), "s-000000.jsonl".into())
}

/// Signs in through the login form; returns the session cookie.
fn log_in(http: &Client, base: &str) -> String {
    let resp = http
        .post(format!("{base}/login"))
        .form(&[
            ("email", "admin@localhost"),
            ("password", PASSWORD),
            ("next", "/catalog"),
        ])
        .send()
        .unwrap();
    let cookie = resp
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with("svc_session="))
        .expect("a session cookie");
    cookie.split(';').next().unwrap().to_owned()
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let tmp = TempDir::new();
    let data = tmp.0.join("data");
    let store = rt
        .block_on(Store::open(&svc_store::default_sqlite_url(&data)))
        .unwrap();
    let (user, file) = rt.block_on(seed(&store, &data));
    rt.block_on(store.close());

    // The bench runs the audit rollup job itself, between two passes over the activity pages.
    let server = Server::start_with(
        &data,
        &[
            ("SVC_SKIP_CACHE_WARMUP", "1"),
            ("SCHEDULER_ENABLED", "false"),
        ],
    );
    let base = server.base.clone();
    let http = Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap();
    let cookie = log_in(&http, &base);
    let asset = |path: &str| {
        http.get(format!("{base}{path}"))
            .send()
            .unwrap()
            .bytes()
            .unwrap()
            .len()
    };
    let assets = asset(svc_pages::assets::css()) + asset(svc_pages::assets::js());
    let runs = env_u64("SVC_BENCH_RUNS", 30) as usize;
    let pages = [
        "/catalog".to_owned(),
        "/catalog/t0001".into(),
        "/admin/activity".into(),
        "/admin/activity?window=10080".into(),
        "/admin/activity?window=43200".into(),
        "/admin/activity?window=43200&result=error".into(),
        "/admin/telemetry".into(),
        "/admin/telemetry?window=43200&group_by=tool_name".into(),
        "/admin/telemetry?window=10080&group_by=none".into(),
        "/admin/sessions".into(),
        format!("/admin/sessions/{user}/{file}"),
        "/admin/tables".into(),
        "/admin/access".into(),
        "/admin/users".into(),
        format!("/admin/users/{user}"),
        "/admin/groups".into(),
        "/corporate-memory".into(),
        "/marketplace".into(),
        "/profile".into(),
        "/profile/sessions".into(),
    ];
    let measure_at = |base: &str, page: &str| {
        let mut ttfb = Vec::with_capacity(runs);
        let mut html = 0;
        let mut first_load = 0.0;
        for i in 0..=runs {
            let t = Instant::now();
            let resp = http
                .get(format!("{base}{page}"))
                .header("cookie", &cookie)
                .send()
                .unwrap();
            let first = t.elapsed().as_secs_f64() * 1e3;
            let status = resp.status();
            html = resp.bytes().unwrap().len();
            assert!(status.is_success(), "{page}: {status}");
            if i > 0 {
                ttfb.push(first);
            } else {
                first_load = t.elapsed().as_secs_f64() * 1e3;
            }
        }
        ttfb.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let p95 = percentile(&ttfb, 0.95);
        let kb = (html + assets) as f64 / 1024.0;
        println!(
            "{page:<52} {:>7.1} ms {:>7.1} ms ({})   {kb:>6.1} KB ({})   {first_load:>8.1} ms",
            percentile(&ttfb, 0.5),
            p95,
            if p95 <= 50.0 { "met" } else { "MISSED" },
            if kb <= 150.0 { "met" } else { "MISSED" },
        );
    };
    let measure = |page: &str| measure_at(&base, page);
    let header = "page                                                  TTFB p50   TTFB p95   weight (HTML+CSS+JS)   first load";
    println!("\nBefore the audit rollups (every count over the log)\n{header}");
    for page in &pages {
        measure(page);
    }

    // The scheduler's rollup job, run to completion over the seeded backlog.
    let t = Instant::now();
    let hours = rt.block_on(async {
        let store = Store::open(&svc_store::default_sqlite_url(&data))
            .await
            .unwrap();
        let mut hours = 0;
        loop {
            let run = store.roll_up_audit(chrono::Utc::now()).await.unwrap();
            hours += run.hours;
            if run.complete {
                store.close().await;
                return hours;
            }
        }
    });
    println!(
        "\naudit rollup backlog: {hours} hours counted in {:.1} s (the scheduler does this in the background)",
        t.elapsed().as_secs_f64()
    );
    println!("After the audit rollups\n{header}");
    for page in pages.iter().filter(|p| p.starts_with("/admin/activity")) {
        measure(page);
    }

    // The telemetry pages once more, on a second server over the same store with the event
    // index off: every read scans the event files, as before the index.
    println!(
        "\nserver RSS with the telemetry index built: {:.0} MiB",
        server.rss_mib()
    );
    {
        let scanning = Server::start_with(
            &data,
            &[
                ("SVC_SKIP_CACHE_WARMUP", "1"),
                ("SCHEDULER_ENABLED", "false"),
                ("SVC_TELEMETRY_INDEX_MAX_EVENTS", "0"),
            ],
        );
        println!("The telemetry pages with the event index off (scans)\n{header}");
        for page in pages.iter().filter(|p| p.starts_with("/admin/telemetry")) {
            measure_at(&scanning.base, page);
        }
        println!(
            "server RSS after the scans: {:.0} MiB\n",
            scanning.rss_mib()
        );
    }

    // Warmup log delay: a reader of the page's stream, and warmups started one after another.
    let warmups = env_u64("SVC_BENCH_WARMUPS", 5);
    let reader = {
        let (base, cookie) = (base.clone(), cookie.clone());
        std::thread::spawn(move || {
            let http = Client::builder().timeout(None).build().unwrap();
            let resp = http
                .get(format!("{base}/admin/tables/warmup/events"))
                .header("cookie", cookie)
                .send()
                .unwrap();
            let mut delays = Vec::new();
            let mut completes = 0;
            for line in BufReader::new(resp).lines() {
                let line = line.unwrap();
                let Some(data) = line.strip_prefix("data: ") else {
                    continue;
                };
                let v: serde_json::Value = serde_json::from_str(data).unwrap();
                if let Some(at) = v["at"].as_str().and_then(svc_core::clock::parse_ts) {
                    let ms = (chrono::Utc::now() - at).num_microseconds().unwrap() as f64 / 1e3;
                    delays.push(ms);
                }
                if v["type"] == "complete" {
                    completes += 1;
                    if completes == warmups {
                        return delays;
                    }
                }
            }
            delays
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    for _ in 0..warmups {
        let token = server.cli(&["tokens", "create", "--email", "admin@localhost"]);
        let resp = http
            .post(format!("{base}/api/admin/cache-warmup/run"))
            .bearer_auth(token)
            .send()
            .unwrap();
        assert!(resp.status().is_success(), "{}", resp.status());
        // The next run starts after this one ends.
        let deadline = Instant::now() + Duration::from_secs(120);
        while Instant::now() < deadline {
            let token = server.cli(&["tokens", "create", "--email", "admin@localhost"]);
            let status: serde_json::Value = http
                .get(format!("{base}/api/admin/cache-warmup/status"))
                .bearer_auth(token)
                .send()
                .unwrap()
                .json()
                .unwrap();
            if status["running"] == false {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let mut delays = reader.join().unwrap();
    delays.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let p95 = percentile(&delays, 0.95);
    println!(
        "\nwarmup log: {} lines from {warmups} runs; delay from written to read p50 {:.1} ms, p95 {p95:.1} ms (target p95 <= 250 ms: {})",
        delays.len(),
        percentile(&delays, 0.5),
        if p95 <= 250.0 { "met" } else { "MISSED" }
    );
}
