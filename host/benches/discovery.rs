//! Discovery benchmarks against a real release `svc-server` on loopback:
//!
//! 1. cached sample under `wrk` (requests/s, p99);
//! 2. uncached sample of n=100 from a parquet file of at least 1 GiB (p50, and the server's
//!    peak RSS next to a run on a small file, to show memory does not follow file size);
//! 3. catalog for a non-admin with 1,000 tables, 200 groups and 10,000 grants (p50/p95).
//!
//! `cargo bench -p svc-host --bench discovery`. (1) needs `wrk`; the rest speaks HTTP with
//! reqwest. `SVC_BENCH_BIG_GIB` sets the big file's size (default 1).

use std::fs::File;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::blocking::Client;
use serde_json::json;
use svc_plugin_api::arrow::array::{ArrayRef, Float64Array, Int64Array, StringArray};
use svc_plugin_api::arrow::datatypes::{DataType, Field, Schema};
use svc_plugin_api::datafusion::parquet::arrow::ArrowWriter;
use svc_plugin_api::RecordBatch;
use svc_store::registry::{QueryMode, RegistryRow};

mod common;

use common::{percentile, wrk, Server};

fn write_parquet(path: &Path, min_bytes: u64) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("label", DataType::Utf8, false),
        Field::new("a", DataType::Float64, false),
        Field::new("b", DataType::Float64, false),
    ]));
    let mut w = ArrowWriter::try_new(File::create(path).unwrap(), schema.clone(), None).unwrap();
    let rows = 1_000_000i64;
    let mut start = 0i64;
    loop {
        let ids = Int64Array::from_iter_values(start..start + rows);
        let labels = StringArray::from_iter_values(
            (start..start + rows).map(|i| format!("label-{i:012}-{}", i % 97)),
        );
        let a = Float64Array::from_iter_values((start..start + rows).map(|i| i as f64 * 0.5));
        let b = Float64Array::from_iter_values((start..start + rows).map(|i| (i % 1000) as f64));
        let cols: Vec<ArrayRef> = vec![Arc::new(ids), Arc::new(labels), Arc::new(a), Arc::new(b)];
        w.write(&RecordBatch::try_new(schema.clone(), cols).unwrap())
            .unwrap();
        start += rows;
        if w.bytes_written() as u64 >= min_bytes {
            break;
        }
    }
    w.close().unwrap();
}

/// Times `iterations` uncached samples: each one follows a registry change, which flushes
/// the table's cached samples (the flush itself is not timed).
fn uncached_sample_ms(
    http: &Client,
    s: &Server,
    token: &str,
    table: &str,
    iterations: usize,
) -> Vec<f64> {
    let mut times = Vec::new();
    for i in 0..iterations {
        let r = http
            .put(format!("{}/api/admin/registry/{table}", s.base))
            .bearer_auth(token)
            .json(&json!({"description": format!("run {i}")}))
            .send()
            .unwrap();
        assert!(r.status().is_success());
        let t = Instant::now();
        let r = http
            .get(format!("{}/api/v2/sample/{table}?n=100", s.base))
            .bearer_auth(token)
            .send()
            .unwrap();
        assert!(r.status().is_success(), "{}", r.text().unwrap());
        r.bytes().unwrap();
        times.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    times.sort_by(|a, b| a.partial_cmp(b).unwrap());
    times
}

fn main() {
    let dir = std::env::temp_dir().join(format!("svc-bench-discovery-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let http = Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let gib: u64 = std::env::var("SVC_BENCH_BIG_GIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);

    let data = dir.join("extracts/local/data");
    write_parquet(&data.join("orders.parquet"), 1 << 20);
    let t = Instant::now();
    write_parquet(&data.join("big.parquet"), gib << 30);
    let big_bytes = std::fs::metadata(data.join("big.parquet")).unwrap().len();
    eprintln!(
        "wrote big.parquet ({big_bytes} bytes) in {:.1}s",
        t.elapsed().as_secs_f64()
    );

    let s = Server::start(&dir);
    let admin = s.cli(&["tokens", "create", "--email", "admin@localhost"]);
    for id in ["orders", "big"] {
        let r = http
            .post(format!("{}/api/admin/register-table", s.base))
            .bearer_auth(&admin)
            .json(&json!({"id": id, "source_type": "local"}))
            .send()
            .unwrap();
        assert!(r.status().is_success());
    }

    // 1. Cached sample.
    let url = format!("{}/api/v2/sample/orders?n=5", s.base);
    http.get(&url).bearer_auth(&admin).send().unwrap();
    match wrk(&url, Some(&admin), 32, 0, 10) {
        Some(l) => println!(
            "cached sample (wrk -t2 -c32 10s): {:.0} req/s, p99 {:.2} ms (the request_path bench sets it against its floor)",
            l.rps, l.p99_ms
        ),
        None => println!("cached sample: wrk not installed, skipped"),
    }

    // 2. Uncached n=100 samples: small file first, then the big one; peak RSS after each.
    let small = uncached_sample_ms(&http, &s, &admin, "orders", 30);
    let rss_small = s.peak_rss_kib();
    let big = uncached_sample_ms(&http, &s, &admin, "big", 30);
    let rss_big = s.peak_rss_kib();
    println!(
        "uncached sample n=100: 1 MiB file p50 {:.2} ms; {:.2} GiB file p50 {:.2} ms, p95 {:.2} ms",
        percentile(&small, 0.5),
        big_bytes as f64 / (1u64 << 30) as f64,
        percentile(&big, 0.5),
        percentile(&big, 0.95)
    );
    println!(
        "server peak RSS: {} MiB after small-file samples, {} MiB after big-file samples",
        rss_small / 1024,
        rss_big / 1024
    );
    drop(s);

    // 3. Catalog at scale for a non-admin.
    let dir2 = dir.join("catalog");
    let (rt, store, user) = common::store_with_analyst(&dir2);
    rt.block_on(async {
        for t in 0..1000 {
            let row = RegistryRow {
                id: format!("table_{t:04}"),
                name: format!("Table {t:04}"),
                source_type: "local".into(),
                bucket: Some(format!("bucket_{}", t % 20)),
                source_table: None,
                query_mode: if t % 4 == 0 {
                    QueryMode::Remote
                } else {
                    QueryMode::Local
                },
                source_query: None,
                primary_key: None,
                cursor_column: None,
                sync_schedule: None,
                description: Some("benchmark table".into()),
                registered_by: None,
                registered_at: None,
                updated_at: None,
            };
            store.upsert_table(&row).await.unwrap();
        }
        for g in 0..200 {
            let group = store
                .create_group(&format!("group_{g:03}"), None, "bench")
                .await
                .unwrap();
            if g % 10 == 0 {
                store
                    .add_member(&group.id, &user.id, "admin", "bench")
                    .await
                    .unwrap();
            }
            for k in 0..50 {
                let t = (g * 50 + k) % 1000;
                store
                    .create_grant(&group.id, "table", &format!("table_{t:04}"), "bench")
                    .await
                    .unwrap();
            }
        }
        store.close().await;
    });
    let s = Server::start(&dir2);
    let token = s.cli(&["tokens", "create", "--email", "analyst@example.com"]);
    let mut times = Vec::new();
    let mut visible = 0;
    for i in 0..220 {
        let t = Instant::now();
        let r = http
            .get(format!("{}/api/v2/catalog", s.base))
            .bearer_auth(&token)
            .send()
            .unwrap();
        let body: serde_json::Value = r.json().unwrap();
        if i >= 20 {
            times.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        visible = body["tables"].as_array().map(Vec::len).unwrap_or(0);
    }
    times.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!(
        "catalog (1,000 tables, 200 groups, 10,000 grants; non-admin sees {visible}): p50 {:.2} ms, p95 {:.2} ms",
        percentile(&times, 0.5),
        percentile(&times, 0.95)
    );
    drop(s);
    let _ = std::fs::remove_dir_all(&dir);
}
