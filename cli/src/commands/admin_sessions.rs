//! `svc admin sessions …` and `svc admin user-sessions`: browse agents' sessions, read a
//! transcript in the terminal, download a file or a user's files as a ZIP.

use std::io::IsTerminal;
use std::path::PathBuf;

use clap::Subcommand;
use serde_json::Value;

use super::seg;
use crate::client::Client;
use crate::exit::{CliError, Result};
use crate::render::{self, cell};
use crate::{output, progress};

/// Events fetched per transcript page.
const PAGE_EVENTS: usize = 1_000;

/// `svc admin sessions …`
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Sessions, errors first then newest (`--sort` to change).
    List {
        #[command(flatten)]
        filters: Filters,
        /// `<column>:<asc|desc>` over started_at, ended_at, tool_calls, tool_errors,
        /// active_seconds, username, primary_model.
        #[arg(long)]
        sort: Option<String>,
        /// Rows per page, 1..200.
        #[arg(long, default_value_t = 50)]
        limit: u32,
        /// Rows to skip.
        #[arg(long, default_value_t = 0)]
        offset: u32,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Sessions, users, sessions with errors and the tool error rate.
    Kpis {
        #[command(flatten)]
        filters: Filters,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// The users and models of a window's sessions.
    Facets {
        /// Window: minutes, or `30m`, `12h`, `7d` (default 7d).
        #[arg(long)]
        since: Option<String>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Print a transcript, failed calls highlighted.
    Show {
        /// `<user dir>/<file>`, as `list` shows it.
        session: String,
        /// Only failed calls, each with the call and input that failed.
        #[arg(long)]
        errors_only: bool,
        /// Machine-readable output (all events).
        #[arg(long)]
        json: bool,
    },
    /// Save the raw JSONL of a session.
    Download {
        /// `<user dir>/<file>`, as `list` shows it.
        session: String,
        /// Where to write it (default: the file name, in the current directory).
        #[arg(long, short)]
        output: Option<PathBuf>,
    },
}

/// The filters `list` and `kpis` share.
#[derive(clap::Args, Debug)]
pub struct Filters {
    /// Window: minutes, or `30m`, `12h`, `7d` (default 7d).
    #[arg(long)]
    since: Option<String>,
    /// Exact owner e-mail.
    #[arg(long)]
    user: Option<String>,
    /// Exact primary model.
    #[arg(long)]
    model: Option<String>,
    /// Only sessions with failed tool calls.
    #[arg(long)]
    errors: bool,
    /// Text in the session id or file.
    #[arg(long)]
    q: Option<String>,
}

impl Filters {
    fn query(&self) -> Result<Vec<(&'static str, Option<String>)>> {
        Ok(vec![
            (
                "since_minutes",
                super::telemetry::window_minutes(self.since.as_deref())?,
            ),
            ("username", self.user.clone()),
            ("model", self.model.clone()),
            ("only_errors", self.errors.then(|| "true".to_owned())),
            ("q", self.q.clone()),
        ])
    }
}

/// `<dir>/<file>` split, refusing anything else before a request is made.
fn split(session: &str) -> Result<(&str, &str)> {
    session
        .split_once('/')
        .filter(|(d, f)| !d.is_empty() && !f.is_empty() && !f.contains('/'))
        .ok_or_else(|| {
            CliError::usage(format!(
                "Error: name the session as <user dir>/<file>, as `svc admin sessions list` shows it (got '{session}')"
            ))
        })
}

fn summaries(doc: &Value) {
    let rows: Vec<Vec<String>> = doc["rows"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            vec![
                cell(&r["session_file"]),
                cell(&r["username"]),
                cell(&r["started_at"]),
                cell(&r["tool_calls"]),
                cell(&r["tool_errors"]),
                cell(&r["primary_model"]),
            ]
        })
        .collect();
    render::table(
        &["SESSION", "USER", "STARTED", "CALLS", "ERRORS", "MODEL"].map(String::from),
        &rows,
    );
    if let Some(next) = doc["next_offset"].as_u64() {
        eprintln!("  Next page: --offset {next}");
    }
}

/// One line (or a few) per event; failed results in red on a terminal.
fn print_event(e: &Value, color: bool) {
    let n = cell(&e["ordinal"]);
    match e["kind"].as_str() {
        Some("tool_use") => println!(
            "#{n} {} → {} {}",
            cell(&e["role"]),
            cell(&e["tool_name"]),
            e["input"]
        ),
        Some("tool_result") => {
            let failed = e["is_error"].as_bool().unwrap_or(false);
            let head = format!(
                "#{n} result of {} (#{}){}",
                cell(&e["tool_name"]),
                cell(&e["tool_use_ordinal"]),
                if failed { " FAILED" } else { "" }
            );
            let text = cell(&e["text"]);
            if failed && color {
                println!("\x1b[31m{head}\n{text}\x1b[0m");
            } else {
                println!("{head}\n{text}");
            }
        }
        _ => println!("#{n} {}: {}", cell(&e["role"]), cell(&e["text"])),
    }
}

/// Every event of a transcript, page after page.
fn all_events(client: &Client, dir: &str, file: &str) -> Result<(Value, Vec<Value>)> {
    let base = format!("/api/admin/sessions/{}/{}/transcript", seg(dir), seg(file));
    let mut offset = 0usize;
    let mut events = Vec::new();
    loop {
        let page = client.get(&format!("{base}?offset={offset}&limit={PAGE_EVENTS}"))?;
        events.extend(page["events"].as_array().cloned().unwrap_or_default());
        match page["next_offset"].as_u64() {
            Some(next) => offset = next as usize,
            None => return Ok((page, events)),
        }
    }
}

/// Runs an `svc admin sessions` command.
pub fn run(client: &Client, cmd: Command) -> Result<()> {
    const BASE: &str = "/api/admin/sessions";
    match cmd {
        Command::List {
            filters,
            sort,
            limit,
            offset,
            json,
        } => {
            let mut q = filters.query()?;
            q.extend([
                ("sort", sort),
                ("limit", Some(limit.to_string())),
                ("offset", Some(offset.to_string())),
            ]);
            let doc = client.get(&format!(
                "{BASE}/list{}",
                super::telemetry::query_string(&q)
            ))?;
            if json {
                render::print_json(&doc);
            } else {
                summaries(&doc);
            }
        }
        Command::Kpis { filters, json } => {
            let qs = super::telemetry::query_string(&filters.query()?);
            let doc = client.get(&format!("{BASE}/kpis{qs}"))?;
            if json {
                render::print_json(&doc);
                return Ok(());
            }
            let rate = doc["tool_error_rate"].as_f64().unwrap_or(0.0) * 100.0;
            let rows = vec![
                vec!["Sessions".into(), cell(&doc["sessions_total"])],
                vec!["Distinct users".into(), cell(&doc["distinct_users"])],
                vec!["Sessions with errors".into(), cell(&doc["error_sessions"])],
                vec!["Tool calls".into(), cell(&doc["tool_calls_total"])],
                vec!["Failed calls".into(), cell(&doc["tool_errors_total"])],
                vec!["Tool error rate".into(), format!("{rate:.2}%")],
            ];
            render::table(&["METRIC".into(), "VALUE".into()], &rows);
        }
        Command::Facets { since, json } => {
            let qs = super::telemetry::query_string(&[(
                "since_minutes",
                super::telemetry::window_minutes(since.as_deref())?,
            )]);
            let doc = client.get(&format!("{BASE}/facets{qs}"))?;
            if json {
                render::print_json(&doc);
                return Ok(());
            }
            super::telemetry::counts("Users", &doc["users"]);
            super::telemetry::counts("Models", &doc["models"]);
        }
        Command::Show {
            session,
            errors_only,
            json,
        } => {
            let (dir, file) = split(&session)?;
            let (last, events) = all_events(client, dir, file)?;
            let events: Vec<Value> = if errors_only {
                let failed: Vec<&Value> = events
                    .iter()
                    .filter(|e| e["is_error"].as_bool() == Some(true))
                    .collect();
                failed
                    .iter()
                    .flat_map(|r| {
                        let call = r["tool_use_ordinal"]
                            .as_u64()
                            .and_then(|i| events.get(i as usize))
                            .cloned();
                        call.into_iter().chain([(*r).clone()])
                    })
                    .collect()
            } else {
                events
            };
            if json {
                render::print_json(&serde_json::json!({
                    "username": last["username"],
                    "session_file": last["session_file"],
                    "summary": last["summary"],
                    "error_ordinals": last["error_ordinals"],
                    "events": events,
                }));
                return Ok(());
            }
            let color = std::io::stdout().is_terminal();
            for e in &events {
                print_event(e, color);
            }
            eprintln!(
                "{} events, {} failed calls",
                cell(&last["total_events"]),
                last["error_ordinals"].as_array().map_or(0, Vec::len)
            );
        }
        Command::Download { session, output } => {
            let (dir, file) = split(&session)?;
            let path = output.unwrap_or_else(|| PathBuf::from(file));
            save(
                client,
                &format!("{BASE}/{}/{}/download", seg(dir), seg(file)),
                &path,
            )?;
        }
    }
    Ok(())
}

/// Streams a download to `path` atomically, with a progress bar on a terminal (a byte
/// counter when the server streams without a length).
pub(super) fn save(client: &Client, url: &str, path: &std::path::Path) -> Result<()> {
    let resp = client
        .download(url, None)?
        .ok_or_else(|| CliError::usage("Error: the server sent no body"))?;
    let what = path.display().to_string();
    let bar = match resp.content_length() {
        Some(total) => progress::bytes(total, &what),
        None => progress::counter("bytes", &what),
    };
    let mut reading = progress::Reading::new(resp, bar.clone());
    let n = output::write_atomically(path, &mut reading)?;
    bar.finish_and_clear();
    eprintln!("wrote {} ({n} bytes)", path.display());
    Ok(())
}

/// `svc admin user-sessions <user>`: a user's session files, or all of them as a ZIP.
pub fn user_sessions(client: &Client, user: &str, zip: Option<PathBuf>, json: bool) -> Result<()> {
    let base = format!("/api/admin/users/{}/sessions", seg(user));
    if let Some(path) = zip {
        return save(client, &format!("{base}/download-all"), &path);
    }
    let doc = client.get(&format!("{base}?limit=200"))?;
    if json {
        render::print_json(&doc);
        return Ok(());
    }
    let rows: Vec<Vec<String>> = doc["rows"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            vec![
                cell(&r["name"]),
                if r["processed"].as_bool() == Some(true) {
                    "yes"
                } else {
                    "no"
                }
                .into(),
                cell(&r["bytes"]),
                cell(&r["summary"]["started_at"]),
                cell(&r["summary"]["tool_errors"]),
            ]
        })
        .collect();
    render::table(
        &["FILE", "PROCESSED", "BYTES", "STARTED", "ERRORS"].map(String::from),
        &rows,
    );
    Ok(())
}
