//! Telemetry and session reads at the scale issue 21 names: the generator's sessions (one
//! per file) for 500 users over 90 days, processed by the pipeline, then timed through the
//! same services the endpoints call — facets, KPIs, grouped pages, the session list, a
//! 20,000-turn transcript, exports to parquet and CSV, a user's sessions as a ZIP. Prints
//! figures (p50/p95 over repeated calls, rows/s, MB/s, peak RSS); asserts nothing about speed.
//!
//!   cargo bench -p svc-host --bench telemetry_reads
//!
//! `SVC_BENCH_SESSIONS` (default 100000), `SVC_BENCH_TURNS` (lines per session, default 112:
//! about 100 events, so 10 M in all), `SVC_BENCH_USERS` (500), `SVC_BENCH_DAYS` (90) and
//! `SVC_BENCH_ZIP_MB` (1000) size it; `SVC_BENCH_RUNS` (20) is the calls timed per read.
//! SQLite store only: the session list and KPIs are the store's; the event reads go
//! through the browser's event index, as the server's do (DataFusion for the exports).

mod common;

use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::Instant;

use futures::StreamExt;
use svc_query::format::Format;
use svc_store::sessions::{SessionFilter, SessionOrder};
use svc_store::testing::TempDir;
use svc_store::Store;
use svc_telemetry::browse::{Browser, Filters, GroupBy, TimeRange};
use svc_telemetry::corpus::{self, Rng};
use svc_telemetry::files::SessionFiles;
use svc_telemetry::names::UserDir;
use svc_telemetry::sessions::{window_start, SessionBrowser};
use svc_telemetry::{EventSegments, Pipeline, Trigger};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `VmHWM` or `VmRSS` of this process, in MiB.
fn rss_mib(field: &str) -> f64 {
    common::status_mib("self", field)
}

/// Starts a new peak: the kernel resets `VmHWM` to the current RSS.
fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// p50 and p95 of `runs` calls of `f`, in milliseconds (after one warm-up call). A failed
/// call stops the bench: the time of an error is not a figure.
async fn time<F, Fut, T>(runs: usize, mut f: F) -> (f64, f64)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, svc_core::Error>>,
{
    f().await.expect("the read fails");
    let mut ms: Vec<f64> = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        f().await.expect("the read fails");
        ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| ms[((ms.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.95))
}

fn report(what: &str, (p50, p95): (f64, f64), target_ms: f64) {
    let verdict = if p95 <= target_ms { "met" } else { "MISSED" };
    println!("{what}: p50 {p50:.1} ms, p95 {p95:.1} ms (target p95 <= {target_ms} ms: {verdict})");
}

struct Corpus {
    events: u64,
    bytes: u64,
    big: (String, String),
    zip_user: String,
}

/// Writes the sessions, the 20,000-turn transcript and the ZIP user's files.
async fn generate(store: &Store, root: &Path) -> Corpus {
    let sessions = env_u64("SVC_BENCH_SESSIONS", 100_000);
    let turns = env_u64("SVC_BENCH_TURNS", 112);
    let users = env_u64("SVC_BENCH_USERS", 500);
    let days = env_u64("SVC_BENCH_DAYS", 90) as i64;
    let mut ids = Vec::new();
    for u in 0..users {
        ids.push(
            store
                .create_user(&format!("user{u}@example.com"), None, None)
                .await
                .unwrap()
                .id,
        );
    }
    let now = chrono::Utc::now().timestamp();
    let mut rng = Rng::new(20_261_125);
    let mut total = corpus::Generated::default();
    let t = Instant::now();
    for i in 0..sessions {
        let dir = root.join(&ids[(i % users) as usize]);
        if i < users {
            std::fs::create_dir_all(&dir).unwrap();
        }
        let start = now - rng.below(days as u64 * 86_400) as i64 - 3_600;
        let mut out =
            BufWriter::new(std::fs::File::create(dir.join(format!("s-{i:06}.jsonl"))).unwrap());
        total += corpus::session_at(&mut out, &mut rng, i, turns, start).unwrap();
        out.flush().unwrap();
    }
    // The long transcript, owned by the first user.
    let big = "big-20000.jsonl".to_owned();
    let mut out = BufWriter::new(std::fs::File::create(root.join(&ids[0]).join(&big)).unwrap());
    total += corpus::session_at(&mut out, &mut rng, sessions, 20_000, now - 86_400).unwrap();
    out.flush().unwrap();
    println!(
        "corpus: {} session files for {users} users over {days} days, {:.1} GB, {} events expected (generated in {:.0} s)",
        sessions + 1,
        total.bytes as f64 / 1e9,
        total.events,
        t.elapsed().as_secs_f64()
    );
    Corpus {
        events: total.events,
        bytes: total.bytes,
        big: (ids[0].clone(), big),
        zip_user: ids[1].clone(),
    }
}

/// Adds about `mb` MB of sessions to `user`'s directory (after processing, so they do not
/// change the event counts the reads see).
fn zip_corpus(root: &Path, user: &str, mb: u64) -> u64 {
    let dir = root.join(user);
    let mut rng = Rng::new(7);
    let mut bytes = 0;
    let mut i = 0;
    while bytes < mb * 1_000_000 {
        let mut out =
            BufWriter::new(std::fs::File::create(dir.join(format!("zip-{i:04}.jsonl"))).unwrap());
        bytes += corpus::file(&mut out, &mut rng, 10_000_000 + i * 1_000, 10_000_000)
            .unwrap()
            .bytes;
        out.flush().unwrap();
        i += 1;
    }
    bytes
}

/// Encodes every event of the export plan into `path`; returns rows.
async fn export(browser: &Browser, format: Format, path: &Path) -> u64 {
    let filters = Filters {
        range: Some(TimeRange::default()),
        ..Filters::default()
    };
    let (plan, context) = browser.export_plan(&filters).await.unwrap();
    let mut encoder = format.encoder(&plan.schema()).unwrap();
    let mut out = BufWriter::with_capacity(1 << 20, std::fs::File::create(path).unwrap());
    out.write_all(&encoder.begin().unwrap()).unwrap();
    let mut rows = 0;
    let mut batches = svc_query::runtime::execute(plan, context);
    while let Some(batch) = batches.next().await {
        let batch = batch.unwrap();
        rows += batch.num_rows() as u64;
        out.write_all(&encoder.batch(&batch).unwrap()).unwrap();
    }
    out.write_all(&encoder.finish(false).unwrap()).unwrap();
    out.flush().unwrap();
    rows
}

/// The export in a process of its own (this binary, re-run with `SVC_BENCH_EXPORT_ONLY`),
/// so its peak RSS is the export's and not the generator's and pipeline's leftovers.
fn export_alone(rt: &tokio::runtime::Runtime, data: &Path, name: &str) {
    let format = if name == "parquet" {
        Format::Parquet
    } else {
        Format::Csv
    };
    let url = svc_store::default_sqlite_url(data);
    let store = rt.block_on(Store::open(&url)).unwrap();
    let browser = Browser::new(store, data);
    let path = data.join(format!("export-alone.{name}"));
    let t = Instant::now();
    let rows = rt.block_on(export(&browser, format, &path));
    let secs = t.elapsed().as_secs_f64();
    let _ = std::fs::remove_file(&path);
    println!(
        "export {name} in a process of its own: {rows} rows in {secs:.1} s: {:.2} M rows/s; peak RSS {:.0} MiB (target <= 256 MiB: {})",
        rows as f64 / secs / 1e6,
        rss_mib("VmHWM:"),
        if rss_mib("VmHWM:") <= 256.0 { "met" } else { "MISSED" }
    );
}

fn main() {
    // Internal errors are logged with their cause and returned without it.
    tracing_subscriber::fmt()
        .with_env_filter("warn")
        .with_writer(std::io::stderr)
        .init();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    if let (Ok(data), Ok(format)) = (
        std::env::var("SVC_BENCH_EXPORT_ONLY"),
        std::env::var("SVC_BENCH_EXPORT_FORMAT"),
    ) {
        return export_alone(&rt, Path::new(&data), &format);
    }
    let tmp = TempDir::new();
    let data = tmp.0.join("data");
    let root = data.join("user_sessions");
    let url = svc_store::default_sqlite_url(&data);
    let store = rt.block_on(Store::open(&url)).unwrap();
    let corpus = rt.block_on(generate(&store, &root));

    let pipeline = Pipeline::new(
        store.clone(),
        SessionFiles::new(&data),
        EventSegments::new(&data),
    );
    let t = Instant::now();
    let r = rt.block_on(pipeline.run(Trigger::Manual, false)).unwrap();
    println!(
        "pipeline: {} files, {} events ({} expected) in {:.0} s ({:.0} events/s, {:.0} MB/s), packing included: {} packs of {} files in {:.1} s",
        r.processed,
        r.events,
        corpus.events,
        t.elapsed().as_secs_f64(),
        r.events as f64 / t.elapsed().as_secs_f64(),
        corpus.bytes as f64 / 1e6 / t.elapsed().as_secs_f64(),
        r.compaction.packs,
        r.compaction.files,
        r.compaction.ms as f64 / 1e3,
    );

    let browser = Browser::new(store.clone(), &data);
    let sessions = SessionBrowser::new(store.clone(), SessionFiles::new(&data));
    let runs = env_u64("SVC_BENCH_RUNS", 20) as usize;
    rt.block_on(async {
        let week = Filters {
            since_minutes: 10_080,
            ..Filters::default()
        };
        let month = Filters {
            since_minutes: 43_200,
            ..Filters::default()
        };
        report(
            "telemetry facets, 7 days",
            time(runs, || browser.facets(10_080)).await,
            200.0,
        );
        report(
            "telemetry kpis, 7 days",
            time(runs, || browser.kpis(&week)).await,
            200.0,
        );
        for g in [GroupBy::Day, GroupBy::Username, GroupBy::ToolName] {
            report(
                &format!("telemetry query group_by {g:?}, 30 days"),
                time(runs, || browser.query(&month, Some(g), None, 100, 0)).await,
                300.0,
            );
        }

        let all = SessionFilter {
            since: Some(window_start(525_600).unwrap()),
            ..SessionFilter::default()
        };
        let listed = sessions
            .list(&all, SessionOrder::ErrorsFirst, 50, 0)
            .await
            .unwrap();
        println!("sessions: {} in the list's window", listed.total);
        for offset in [0, 10_000] {
            report(
                &format!("sessions list errors-first, offset {offset}"),
                time(runs, || {
                    sessions.list(&all, SessionOrder::ErrorsFirst, 50, offset)
                })
                .await,
                150.0,
            );
        }

        let (dir, file) = &corpus.big;
        let t = Instant::now();
        let first = sessions.transcript(dir, file, 0, 200).await.unwrap();
        let cold = t.elapsed().as_secs_f64() * 1e3;
        println!(
            "20,000-turn transcript: {} events, {} failed calls; first page cold (index built) {cold:.1} ms (target <= 200 ms: {})",
            first.page.total_events,
            first.page.error_ordinals.len(),
            if cold <= 200.0 { "met" } else { "MISSED" }
        );
        report(
            "20,000-turn transcript first page, index cached",
            time(runs, || sessions.transcript(dir, file, 0, 200)).await,
            200.0,
        );
        let errors = first.page.error_ordinals.clone();
        let mut k = 0;
        report(
            "20,000-turn transcript next-error jump",
            time(runs, || {
                k = (k + 1) % errors.len().max(1);
                let at = errors.get(k).copied().unwrap_or(0) as usize;
                sessions.transcript(dir, file, at, 200)
            })
            .await,
            50.0,
        );

        for (format, name) in [(Format::Parquet, "parquet"), (Format::Csv, "csv")] {
            let path = tmp.0.join(format!("export.{name}"));
            reset_peak();
            let before = rss_mib("VmRSS:");
            let t = Instant::now();
            let rows = export(&browser, format, &path).await;
            let secs = t.elapsed().as_secs_f64();
            let rate = rows as f64 / secs;
            println!(
                "export {name}: {rows} rows, {:.0} MB in {secs:.1} s: {:.2} M rows/s{}; peak RSS {:.0} MiB (RSS before {before:.0} MiB; target <= 256 MiB)",
                std::fs::metadata(&path).unwrap().len() as f64 / 1e6,
                rate / 1e6,
                if format == Format::Parquet {
                    if rate >= 1e6 { " (target >= 1 M rows/s: met)" } else { " (target >= 1 M rows/s: MISSED)" }
                } else {
                    ""
                },
                rss_mib("VmHWM:"),
            );
            let _ = std::fs::remove_file(&path);
            let status = std::process::Command::new(std::env::current_exe().unwrap())
                .env("SVC_BENCH_EXPORT_ONLY", &data)
                .env("SVC_BENCH_EXPORT_FORMAT", name)
                .status()
                .unwrap();
            assert!(status.success(), "the export process failed");
        }
    });

    let zip_mb = env_u64("SVC_BENCH_ZIP_MB", 1_000);
    let added = zip_corpus(&root, &corpus.zip_user, zip_mb);
    println!(
        "bulk zip: added {:.0} MB of sessions to one user",
        added as f64 / 1e6
    );
    let dir = UserDir::for_user(&corpus.zip_user).unwrap();
    reset_peak();
    let before = rss_mib("VmRSS:");
    let t = Instant::now();
    let sink = std::io::BufWriter::new(std::fs::File::create(tmp.0.join("user.zip")).unwrap());
    let zipped = sessions.zip_user_sessions(&dir, sink).unwrap();
    let secs = t.elapsed().as_secs_f64();
    println!(
        "bulk zip: {} files, {:.0} MB in {secs:.1} s: {:.0} MB/s, archive {:.0} MB; peak RSS {:.0} MiB (RSS before {before:.0} MiB)",
        zipped.file_count,
        zipped.total_bytes as f64 / 1e6,
        zipped.total_bytes as f64 / 1e6 / secs,
        std::fs::metadata(tmp.0.join("user.zip")).unwrap().len() as f64 / 1e6,
        rss_mib("VmHWM:"),
    );
}
