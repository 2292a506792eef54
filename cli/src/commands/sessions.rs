//! `svc sessions push`: upload the agent's session transcripts so they become telemetry.
//!
//! Only new or changed files go: a local state file remembers each file's size,
//! modification time and content hash (the server's xxh3-128, so a touched but unchanged
//! file is recognised without an upload). Uploads run a few at a time under one progress
//! bar; a network error, a 5xx, 408 or 429 is retried with backoff, any other 4xx is final
//! for that file.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::Ctx;
use crate::client::Client;
use crate::exit::{CliError, Exit, Result};
use crate::progress;
use crate::render::{self, cell};

/// Files uploaded at once.
const PARALLEL: usize = 4;
/// Attempts per file for failures worth retrying.
const ATTEMPTS: u32 = 4;

/// `svc sessions …`
#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// Upload new and changed session files (default: ~/.claude/projects/**/*.jsonl).
    Push {
        /// Files or directories (searched recursively for *.jsonl).
        paths: Vec<PathBuf>,
        /// List what would be uploaded, upload nothing.
        #[arg(long)]
        dry_run: bool,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Print the agent hook that pushes sessions when one ends.
    Hook,
}

/// What the state file remembers of one pushed file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Pushed {
    size: u64,
    mtime_ns: u128,
    hash: String,
}

/// A file found locally.
struct Local {
    path: PathBuf,
    size: u64,
    mtime_ns: u128,
}

fn state_file() -> PathBuf {
    crate::config::dir().join("sessions-pushed.json")
}

fn load_state() -> BTreeMap<String, Pushed> {
    std::fs::read(state_file())
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

fn save_state(state: &BTreeMap<String, Pushed>) -> Result<()> {
    let path = state_file();
    let write = || -> std::io::Result<()> {
        std::fs::create_dir_all(path.parent().unwrap_or(Path::new(".")))?;
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, serde_json::to_vec_pretty(state).unwrap_or_default())?;
        std::fs::rename(&tmp, &path)
    };
    write().map_err(|e| {
        CliError::new(
            Exit::Other,
            format!("Error: cannot save {}: {e}", path.display()),
        )
    })
}

fn default_root() -> PathBuf {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default()
        .join(".claude")
        .join("projects")
}

/// Every `*.jsonl` under `paths` (files as given, directories recursively), sorted.
fn find(paths: &[PathBuf]) -> Result<Vec<Local>> {
    let mut out = Vec::new();
    let mut stack: Vec<PathBuf> = paths.to_vec();
    while let Some(p) = stack.pop() {
        let meta = std::fs::metadata(&p)
            .map_err(|e| CliError::usage(format!("Error: cannot read {}: {e}", p.display())))?;
        if meta.is_dir() {
            let entries = std::fs::read_dir(&p)
                .map_err(|e| CliError::usage(format!("Error: cannot list {}: {e}", p.display())))?;
            for e in entries.flatten() {
                let path = e.path();
                let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
                if is_dir || path.extension().is_some_and(|x| x == "jsonl") {
                    stack.push(path);
                }
            }
        } else if meta.is_file() {
            let mtime_ns = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos());
            out.push(Local {
                path: std::fs::canonicalize(&p).unwrap_or(p),
                size: meta.len(),
                mtime_ns,
            });
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out.dedup_by(|a, b| a.path == b.path);
    Ok(out)
}

/// The content hash the server reports (xxh3-128, hex).
fn hash_file(path: &Path) -> std::io::Result<String> {
    let mut f = std::fs::File::open(path)?;
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            return Ok(format!("{:032x}", h.digest128()));
        }
        h.update(&buf[..n]);
    }
}

/// Whether a failure may pass if tried again.
fn retryable(e: &CliError) -> bool {
    matches!(e.exit, Exit::Server | Exit::RateLimited) || e.message.contains("HTTP 408")
}

fn upload(client: &Client, file: &Local, bar: &indicatif::ProgressBar) -> Result<Value> {
    let name = file
        .path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut wait = Duration::from_millis(500);
    let mut attempt = 1;
    loop {
        let sent = std::fs::File::open(&file.path)
            .map_err(|e| {
                CliError::usage(format!("Error: cannot read {}: {e}", file.path.display()))
            })
            .and_then(|f| {
                let body = reqwest::blocking::Body::sized(
                    progress::Reading::new(f, bar.clone()),
                    file.size,
                );
                client.upload_stream(
                    reqwest::Method::POST,
                    &format!("/api/upload/sessions?name={}", super::seg(&name)),
                    "application/x-ndjson",
                    body,
                )
            });
        match sent {
            Err(e) if retryable(&e) && attempt < ATTEMPTS => {
                // The bar counted the bytes of the failed try; count them again.
                bar.set_position(bar.position().saturating_sub(file.size));
                std::thread::sleep(wait);
                wait *= 2;
                attempt += 1;
            }
            other => return other,
        }
    }
}

/// Runs `svc sessions …`.
pub fn run(ctx: &Ctx, command: Command) -> Result<()> {
    match command {
        Command::Hook => {
            println!("{}", hook_snippet());
            Ok(())
        }
        Command::Push {
            paths,
            dry_run,
            json,
        } => push(ctx, paths, dry_run, json),
    }
}

fn hook_snippet() -> String {
    let settings = json!({
        "hooks": {
            "SessionEnd": [
                {"hooks": [{"type": "command", "command": "svc sessions push --json >/dev/null 2>&1 || true"}]}
            ]
        }
    });
    format!(
        "# Add to ~/.claude/settings.json (merge with any hooks you have): every session is\n\
         # pushed when it ends; `svc sessions push` sends only new or changed files.\n{}",
        serde_json::to_string_pretty(&settings).unwrap_or_default()
    )
}

fn push(ctx: &Ctx, paths: Vec<PathBuf>, dry_run: bool, json_out: bool) -> Result<()> {
    let paths = if paths.is_empty() {
        let root = default_root();
        if !root.exists() {
            return Err(CliError::usage(format!(
                "Error: no session files at {} (the agent's default)",
                root.display()
            ))
            .hint("name files or directories: svc sessions push PATH..."));
        }
        vec![root]
    } else {
        paths
    };
    let mut state = load_state();
    let mut unchanged = 0usize;
    let mut todo = Vec::new();
    for file in find(&paths)? {
        let key = file.path.display().to_string();
        match state.get(&key) {
            Some(p) if p.size == file.size && p.mtime_ns == file.mtime_ns => unchanged += 1,
            // Touched but the same bytes: remember the new time, send nothing.
            Some(p) if p.size == file.size && hash_file(&file.path).is_ok_and(|h| h == p.hash) => {
                unchanged += 1;
                let hash = p.hash.clone();
                state.insert(
                    key,
                    Pushed {
                        size: file.size,
                        mtime_ns: file.mtime_ns,
                        hash,
                    },
                );
            }
            _ => todo.push(file),
        }
    }
    if dry_run {
        let rows: Vec<Value> = todo
            .iter()
            .map(|f| json!({"path": f.path.display().to_string(), "bytes": f.size}))
            .collect();
        if json_out {
            render::print_json(&json!({"would_push": rows, "unchanged": unchanged}));
        } else {
            let table: Vec<Vec<String>> = rows
                .iter()
                .map(|r| vec![cell(&r["path"]), cell(&r["bytes"])])
                .collect();
            render::table(&["PATH".into(), "BYTES".into()], &table);
            eprintln!(
                "{} to push, {unchanged} unchanged (dry run: nothing sent)",
                todo.len()
            );
        }
        return Ok(());
    }
    let client = ctx.authed()?;
    let total: u64 = todo.iter().map(|f| f.size).sum();
    let bar = if json_out {
        indicatif::ProgressBar::hidden()
    } else {
        progress::bytes(total, &format!("pushing {} sessions", todo.len()))
    };
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<(usize, Result<Value>)>> = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..PARALLEL.min(todo.len()) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(file) = todo.get(i) else { break };
                let r = upload(&client, file, &bar);
                results.lock().expect("results").push((i, r));
            });
        }
    });
    bar.finish_and_clear();
    let mut results = results.into_inner().expect("results");
    results.sort_by_key(|(i, _)| *i);
    let mut report = Vec::new();
    let mut failed = 0;
    let mut first_error = None;
    for (i, r) in results {
        let file = &todo[i];
        let path = file.path.display().to_string();
        match r {
            Ok(answer) => {
                state.insert(
                    path.clone(),
                    Pushed {
                        size: file.size,
                        mtime_ns: file.mtime_ns,
                        hash: cell(&answer["content_hash"]),
                    },
                );
                report.push(json!({"path": path, "outcome": answer["outcome"], "bytes": answer["bytes"], "session_file": answer["session_file"]}));
            }
            Err(e) => {
                failed += 1;
                report.push(json!({"path": path, "error": e.message}));
                first_error.get_or_insert(e);
            }
        }
    }
    save_state(&state)?;
    let pushed = report.len() - failed;
    if json_out {
        render::print_json(
            &json!({"pushed": pushed, "failed": failed, "unchanged": unchanged, "files": report}),
        );
    } else {
        for r in report.iter().filter(|r| r.get("error").is_some()) {
            eprintln!("failed: {}: {}", cell(&r["path"]), cell(&r["error"]));
        }
        eprintln!(
            "pushed {pushed} sessions ({total} bytes), {unchanged} unchanged, {failed} failed"
        );
    }
    // Nothing went: the one cause (a refused token, say) keeps its own exit code.
    if let (0, Some(e)) = (pushed, first_error) {
        return Err(e);
    }
    if failed > 0 {
        return Err(CliError::new(
            Exit::Partial,
            format!(
                "Error: {failed} of {} session files were not pushed",
                todo.len()
            ),
        )
        .hint("run it again: files already pushed are skipped"));
    }
    Ok(())
}
