//! `svc pull`: download every local or materialized table the caller may read into
//! `<workspace>/tables/`, skipping files the server says are unchanged (ETag), a few at a time.

use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use serde_json::json;

use super::{seg, Ctx};
use crate::exit::{CliError, Exit, Result};
use crate::progress;
use crate::render::{self, cell};
use crate::workspace::{self, Temp};

/// Files downloaded at once.
const PARALLEL: usize = 4;

/// What happened to one table.
enum Outcome {
    Downloaded(u64),
    Unchanged,
    /// Registered, but the server holds no data for it yet: skipped, not a failure.
    NoData,
    Failed(CliError),
}

/// Runs `svc pull`.
pub fn run(ctx: &Ctx, root: &Path, json_out: bool) -> Result<()> {
    let client = ctx.authed()?;
    let catalog = client.get("/api/v2/catalog")?;
    let ids: Vec<String> = catalog["tables"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| matches!(t["query_mode"].as_str(), Some("local" | "materialized")))
        .map(|t| cell(&t["id"]))
        .collect();
    let dir = workspace::dir(root, "tables")?;
    let next = AtomicUsize::new(0);
    let pulled_bytes = AtomicU64::new(0);
    let results: Mutex<Vec<(String, Outcome)>> = Mutex::new(Vec::new());
    let bar = if json_out {
        indicatif::ProgressBar::hidden()
    } else {
        progress::steps(ids.len() as u64, "pulling")
    };
    std::thread::scope(|scope| {
        for _ in 0..PARALLEL.min(ids.len()) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(id) = ids.get(i) else { break };
                let outcome = match fetch(&client, &dir, id) {
                    Ok(Some(bytes)) => Outcome::Downloaded(bytes),
                    Ok(None) => Outcome::Unchanged,
                    Err(e) if e.code.as_deref() == Some("no_data") => Outcome::NoData,
                    Err(e) => Outcome::Failed(e),
                };
                if let Outcome::Downloaded(n) = &outcome {
                    let so_far = pulled_bytes.fetch_add(*n, Ordering::Relaxed) + n;
                    bar.set_message(format!("pulling ({})", indicatif::HumanBytes(so_far)));
                }
                bar.inc(1);
                if let Ok(mut r) = results.lock() {
                    r.push((id.clone(), outcome));
                }
            });
        }
    });
    bar.finish_and_clear();
    let mut results = results.into_inner().unwrap_or_default();
    results.sort_by(|a, b| a.0.cmp(&b.0));
    let (mut downloaded, mut unchanged, mut skipped, mut failed, mut bytes) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), 0u64);
    for (id, outcome) in &results {
        match outcome {
            Outcome::Downloaded(n) => {
                bytes += n;
                downloaded.push(id.clone());
            }
            Outcome::Unchanged => unchanged.push(id.clone()),
            Outcome::NoData => skipped.push(id.clone()),
            Outcome::Failed(e) => failed.push(json!({"table": id, "error": e.message})),
        }
    }
    if json_out {
        render::print_json(
            &json!({"downloaded": downloaded, "unchanged": unchanged, "skipped": skipped,
            "failed": failed, "bytes": bytes, "directory": dir}),
        );
    } else {
        eprintln!(
            "pulled {} tables ({bytes} bytes), {} unchanged, {} without data, {} failed -> {}",
            downloaded.len(),
            unchanged.len(),
            skipped.len(),
            failed.len(),
            dir.display()
        );
        for id in &skipped {
            eprintln!("  {id}: skipped, no data on the server yet");
        }
        for f in &failed {
            eprintln!("  {}: {}", cell(&f["table"]), cell(&f["error"]));
        }
    }
    match results.into_iter().find_map(|(_, o)| match o {
        Outcome::Failed(e) => Some(e),
        _ => None,
    }) {
        Some(first) => Err(CliError::new(
            first.exit,
            format!("Error: {} of the tables failed", failed.len()),
        )),
        None if skipped.is_empty() => Ok(()),
        None => Err(CliError::new(
            Exit::Partial,
            format!(
                "Warning: {} of the tables have no data yet and were skipped ({}); the rest were pulled",
                skipped.len(),
                skipped.join(", ")
            ),
        )),
    }
}

/// Downloads one table unless the local copy is current; returns the bytes written.
fn fetch(client: &crate::client::Client, dir: &Path, id: &str) -> Result<Option<u64>> {
    let file = dir.join(format!("{id}.parquet"));
    let etag_file = dir.join(format!("{id}.etag"));
    let etag = std::fs::read_to_string(&etag_file)
        .ok()
        .filter(|_| file.exists());
    let Some(mut resp) =
        client.download(&format!("/api/data/{}/download", seg(id)), etag.as_deref())?
    else {
        return Ok(None);
    };
    let new_tag = resp
        .headers()
        .get("etag")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let temp = Temp::for_target(&file);
    let written = (|| {
        let mut out = std::fs::File::create(temp.path())?;
        let n = std::io::copy(&mut resp, &mut out)?;
        out.sync_all()?;
        Ok::<u64, std::io::Error>(n)
    })()
    .map_err(|e| {
        CliError::new(
            Exit::Other,
            format!("writing {} failed: {e}", file.display()),
        )
    })?;
    temp.persist()?;
    match new_tag {
        Some(tag) => std::fs::write(&etag_file, tag)?,
        None => {
            let _ = std::fs::remove_file(&etag_file);
        }
    }
    Ok(Some(written))
}
