//! `svc admin telemetry`: facets, KPIs, event pages and the summary of agents' tool usage
//! (`svc admin usage` is the deprecated name).

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, Subcommand};
use serde_json::{json, Value};

use super::seg;
use crate::client::Client;
use crate::exit::{CliError, Result};
use crate::render::{self, cell};

#[derive(Subcommand, Debug)]
pub enum Command {
    /// The most frequent users, tools, sources and event types of a window.
    Facets {
        /// Window: minutes, or `30m`, `12h`, `7d` (default 7d).
        #[arg(long)]
        since: Option<String>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Events, distinct users and tools, errors and the error rate.
    Kpis {
        #[command(flatten)]
        filters: FilterArgs,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Events grouped by day, user, tool, source or plugin, or raw (newest first).
    Query {
        #[command(flatten)]
        filters: FilterArgs,
        /// `day`, `username`, `tool_name`, `source` or `ref_id` (default: raw events).
        #[arg(long)]
        group_by: Option<String>,
        /// `<column>:<asc|desc>` (default `invocations:desc`).
        #[arg(long)]
        sort: Option<String>,
        /// Rows per page, 1..500.
        #[arg(long, default_value_t = 100)]
        limit: u32,
        /// Rows to skip.
        #[arg(long, default_value_t = 0)]
        offset: u32,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Every event under the filters as a CSV, NDJSON or parquet file, streamed.
    Export {
        #[command(flatten)]
        filters: FilterArgs,
        /// `csv`, `ndjson` or `parquet`.
        #[arg(long, value_enum, default_value_t = ExportFormat::Csv)]
        format: ExportFormat,
        /// Events before this date or date-time (`--since` takes one too, or a window
        /// such as `7d`; default: all events).
        #[arg(long)]
        until: Option<String>,
        /// Exact owner id.
        #[arg(long)]
        user_id: Option<String>,
        /// Write here (atomically, with progress); default: standard output.
        #[arg(long, short)]
        output: Option<PathBuf>,
    },
    /// Asks a question about the telemetry: the server's LLM writes SQL over the telemetry
    /// tables and the server runs it. Exits 9 when the SQL was rejected or failed.
    Ask {
        /// The question (1 to 1,000 characters).
        question: String,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Reads session files again (all, one user's, or one file) and prints the run.
    Reprocess {
        /// One user's files (their id).
        #[arg(long, conflicts_with = "session_file")]
        user_id: Option<String>,
        /// One file, `<user id>/<file name>`.
        #[arg(long)]
        session_file: Option<String>,
        /// Rebuild every day's rollups, not only the affected days.
        #[arg(long)]
        full_rollup: bool,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Deletes telemetry older than the retention (session files stay).
    Prune {
        /// Keep this many days (default: the server's retention).
        #[arg(long)]
        retention_days: Option<u32>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Top tools and users, error rates, daily active users, slowest actions.
    Summary {
        /// `7d`, `30d` or `all`.
        #[arg(long, default_value = "7d")]
        window: String,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
}

/// The file format of an export.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportFormat {
    /// CSV with a header line.
    Csv,
    /// One JSON object per line.
    Ndjson,
    /// A parquet file.
    Parquet,
}

/// The filters the server shares across reads.
#[derive(Args, Debug, Default, Clone)]
pub struct FilterArgs {
    /// Window: minutes, or `30m`, `12h`, `7d` (default 7d).
    #[arg(long)]
    since: Option<String>,
    /// Exact owner e-mail.
    #[arg(long)]
    user: Option<String>,
    /// Exact tool name.
    #[arg(long)]
    tool: Option<String>,
    /// `curated`, `flea` or `builtin`.
    #[arg(long)]
    source: Option<String>,
    /// `tool_use`, `mcp_call`, `subagent` or `slash_command`.
    #[arg(long)]
    event_type: Option<String>,
    /// Only failed calls.
    #[arg(long)]
    errors: bool,
    /// Text in the tool, skill, sub-agent or command name.
    #[arg(long)]
    q: Option<String>,
}

/// Minutes from `90`, `90m`, `12h` or `7d`.
pub(super) fn minutes(since: &str) -> Result<u64> {
    let s = since.trim();
    let (digits, unit) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => (&s[..i], c.to_ascii_lowercase()),
        _ => (s, 'm'),
    };
    let n: u64 = digits.parse().map_err(|_| {
        CliError::usage(format!(
            "Error: cannot read the duration '{since}' (minutes, or 30m, 12h, 7d)"
        ))
    })?;
    match unit {
        'm' => Ok(n),
        'h' => Ok(n * 60),
        'd' => Ok(n * 1440),
        _ => Err(CliError::usage(format!(
            "Error: unknown unit in '{since}' (use m, h or d)"
        ))),
    }
}

/// `--since` (minutes, or `30m`, `12h`, `7d`) as the `since_minutes` value, if given.
pub(super) fn window_minutes(since: Option<&str>) -> Result<Option<String>> {
    Ok(since.map(minutes).transpose()?.map(|m| m.to_string()))
}

/// `?k=v&…` of the given pairs, values percent-encoded, absent ones left out.
pub(super) fn query_string(pairs: &[(&str, Option<String>)]) -> String {
    let parts: Vec<String> = pairs
        .iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}={}", seg(v))))
        .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!("?{}", parts.join("&"))
    }
}

impl FilterArgs {
    fn pairs(&self) -> Result<Vec<(&'static str, Option<String>)>> {
        Ok(vec![
            ("since_minutes", window_minutes(self.since.as_deref())?),
            ("username", self.user.clone()),
            ("tool_name", self.tool.clone()),
            ("source", self.source.clone()),
            ("event_type", self.event_type.clone()),
            ("only_errors", self.errors.then(|| "true".to_owned())),
            ("q", self.q.clone()),
        ])
    }
}

pub(super) fn counts(title: &str, list: &Value) {
    println!("{title}");
    let rows: Vec<Vec<String>> = list
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| vec![cell(&c["value"]), cell(&c["count"])])
        .collect();
    render::table(&["VALUE".into(), "EVENTS".into()], &rows);
}

/// A table of `list`'s objects over `keys` (headers are the keys, upper-cased).
fn objects(list: &Value, keys: &[&str]) {
    let headers: Vec<String> = keys.iter().map(|k| k.to_ascii_uppercase()).collect();
    let rows: Vec<Vec<String>> = list
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| keys.iter().map(|k| cell(&r[*k])).collect())
        .collect();
    render::table(&headers, &rows);
}

/// Runs an `svc admin telemetry` command.
pub fn run(client: &Client, cmd: Command) -> Result<()> {
    const BASE: &str = "/api/admin/telemetry";
    match cmd {
        Command::Facets { since, json } => {
            let window = since.as_deref().map(minutes).transpose()?;
            let qs = query_string(&[("since_minutes", window.map(|m| m.to_string()))]);
            let doc = client.get(&format!("{BASE}/facets{qs}"))?;
            if json {
                render::print_json(&doc);
                return Ok(());
            }
            counts("Users", &doc["users"]);
            counts("Tools", &doc["tools"]);
            counts("Sources", &doc["sources"]);
            counts("Event types", &doc["event_types"]);
        }
        Command::Kpis { filters, json } => {
            let doc = client.get(&format!("{BASE}/kpis{}", query_string(&filters.pairs()?)))?;
            if json {
                render::print_json(&doc);
                return Ok(());
            }
            let rate = doc["error_rate"].as_f64().unwrap_or(0.0) * 100.0;
            let rows = vec![
                vec!["Events".into(), cell(&doc["events_total"])],
                vec!["Distinct users".into(), cell(&doc["distinct_users"])],
                vec!["Distinct tools".into(), cell(&doc["distinct_tools"])],
                vec!["Errors".into(), cell(&doc["errors"])],
                vec!["Error rate".into(), format!("{rate:.2}%")],
            ];
            render::table(&["METRIC".into(), "VALUE".into()], &rows);
        }
        Command::Query {
            filters,
            group_by,
            sort,
            limit,
            offset,
            json,
        } => {
            let mut pairs = filters.pairs()?;
            pairs.extend([
                ("group_by", group_by),
                ("sort", sort),
                ("limit", Some(limit.to_string())),
                ("offset", Some(offset.to_string())),
            ]);
            let doc = client.get(&format!("{BASE}/query{}", query_string(&pairs)))?;
            if json {
                render::print_json(&doc);
                return Ok(());
            }
            if doc["group_by"].is_null() {
                objects(
                    &doc["rows"],
                    &[
                        "occurred_at",
                        "username",
                        "event_type",
                        "tool_name",
                        "is_error",
                        "source",
                    ],
                );
            } else {
                objects(
                    &doc["rows"],
                    &[
                        "bucket",
                        "invocations",
                        "distinct_users",
                        "distinct_sessions",
                        "errors",
                    ],
                );
            }
            let shown = doc["rows"].as_array().map_or(0, Vec::len);
            eprint!("Showing {shown} of {}.", cell(&doc["total"]));
            match doc["next_offset"].as_u64() {
                Some(next) => eprintln!("  Next page: --offset {next}"),
                None => eprintln!(),
            }
        }
        Command::Export {
            filters,
            format,
            until,
            user_id,
            output,
        } => {
            // `--since` is a window (`7d`) or, for an export, also a date or date-time.
            let mut pairs = FilterArgs {
                since: None,
                ..filters.clone()
            }
            .pairs()?;
            match filters.since.as_deref().map(|s| (s, minutes(s))) {
                Some((_, Ok(m))) => pairs.push(("since_minutes", Some(m.to_string()))),
                Some((s, Err(_))) => pairs.push(("since", Some(s.to_owned()))),
                None => {}
            }
            let name = match format {
                ExportFormat::Csv => "csv",
                ExportFormat::Ndjson => "ndjson",
                ExportFormat::Parquet => "parquet",
            };
            pairs.extend([
                ("format", Some(name.to_owned())),
                ("until", until),
                ("user_id", user_id),
            ]);
            let url = format!("{BASE}/export{}", query_string(&pairs));
            match output {
                Some(path) => super::admin_sessions::save(client, &url, &path)?,
                None => {
                    let mut resp = client
                        .download(&url, None)?
                        .ok_or_else(|| CliError::usage("Error: the server sent no body"))?;
                    let mut out = std::io::stdout().lock();
                    std::io::copy(&mut resp, &mut out)?;
                    out.flush()?;
                }
            }
        }
        Command::Ask { question, json } => {
            let doc: Value = client
                .post_long(&format!("{BASE}/ask"), &json!({ "question": question }))?
                .json()
                .map_err(|e| {
                    CliError::usage(format!("Error: the server's answer is not JSON: {e}"))
                })?;
            if json {
                render::print_json(&doc);
            } else {
                println!("Question:  {}", cell(&doc["question"]));
                println!("Rationale: {}", cell(&doc["rationale"]));
                println!("SQL:       {}", cell(&doc["sql"]));
                if doc["outcome"] == "answered" {
                    let keys: Vec<&str> = doc["columns"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                        .collect();
                    if doc["row_count"].as_u64() == Some(0) {
                        println!("(no rows)");
                    } else {
                        objects(&doc["rows"], &keys);
                    }
                    if doc["truncated"] == true {
                        eprintln!(
                            "(only the first {} rows are shown)",
                            cell(&doc["row_count"])
                        );
                    }
                    eprintln!(
                        "(rows={}, llm={}ms, exec={}ms)",
                        cell(&doc["row_count"]),
                        cell(&doc["llm_ms"]),
                        cell(&doc["exec_ms"])
                    );
                }
            }
            if doc["outcome"] != "answered" {
                return Err(CliError::new(
                    crate::exit::Exit::Other,
                    format!(
                        "Error: the SQL was {}: {}",
                        cell(&doc["outcome"]),
                        cell(&doc["error"])
                    ),
                ));
            }
        }
        Command::Reprocess {
            user_id,
            session_file,
            full_rollup,
            json,
        } => {
            // A reprocess reads files for as long as they take: the long timeout.
            let doc: Value = client
                .post_long(
                    &format!("{BASE}/reprocess"),
                    &json!({"user_id": user_id, "session_file": session_file, "full_rollup": full_rollup}),
                )?
                .json()
                .map_err(|e| CliError::usage(format!("Error: the server's answer is not JSON: {e}")))?;
            if json {
                render::print_json(&doc);
                return Ok(());
            }
            println!(
                "Reprocessed: {} files read, {} failed, {} events.",
                cell(&doc["processed"]),
                cell(&doc["failed"]),
                cell(&doc["events"])
            );
        }
        Command::Prune {
            retention_days,
            json,
        } => {
            let doc = client.json(
                reqwest::Method::POST,
                &format!("{BASE}/prune"),
                Some(&json!({ "retention_days": retention_days })),
            )?;
            if json {
                render::print_json(&doc);
                return Ok(());
            }
            println!(
                "Pruned {} events and {} session summaries older than {} days.",
                cell(&doc["events"]),
                cell(&doc["sessions"]),
                cell(&doc["retention_days"])
            );
        }
        Command::Summary { window, json } => {
            let doc = client.get(&format!(
                "{BASE}/summary{}",
                query_string(&[("window", Some(window))])
            ))?;
            if json {
                render::print_json(&doc);
                return Ok(());
            }
            println!("Top tools");
            objects(&doc["top_tools"], &["tool_name", "source", "invocations"]);
            println!("Top users");
            objects(&doc["top_users"], &["username", "tool_calls"]);
            println!("Error rate of the busiest tools");
            objects(
                &doc["error_rate"],
                &["tool_name", "invocations", "errors", "rate"],
            );
            println!("Slowest actions (ms)");
            objects(
                &doc["slow_actions"],
                &["action", "p50", "p95", "p99", "max_ms", "n"],
            );
            println!(
                "Daily active users, last 30 days: {} on average",
                cell(&doc["dau_avg"])
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_minutes() {
        assert_eq!(minutes("90").unwrap(), 90);
        assert_eq!(minutes("12h").unwrap(), 720);
        assert_eq!(minutes("7d").unwrap(), 10_080);
        assert!(minutes("7w").is_err());
        assert!(minutes("soon").is_err());
        assert_eq!(
            query_string(&[("q", Some("a b&c".into())), ("x", None)]),
            "?q=a%20b%26c"
        );
    }
}
