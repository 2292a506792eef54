//! `svc admin activity`: the audit timeline, a page at a time or followed as it grows; and
//! `svc admin views`: saved views of the observability pages.

use std::collections::HashSet;
use std::time::Duration;

use serde_json::Value;

use super::telemetry::{query_string, window_minutes};
use crate::client::Client;
use crate::exit::{CliError, Result};
use crate::render::{self, cell};

/// How often `--follow` asks for new rows.
const FOLLOW_EVERY: Duration = Duration::from_secs(2);

/// The timeline's filters and paging.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Window: minutes, or `30m`, `12h`, `7d` (default 24h, at most 30d).
    #[arg(long, conflicts_with_all = ["from", "until"])]
    since: Option<String>,
    /// Instead of `--since`: rows at or after this date or date-time.
    #[arg(long)]
    from: Option<String>,
    /// Rows before this date or date-time.
    #[arg(long)]
    until: Option<String>,
    /// Rows of this user (id or e-mail).
    #[arg(long)]
    user: Option<String>,
    /// Actions starting with this text (literal).
    #[arg(long)]
    action: Option<String>,
    /// Actions among these, comma-separated.
    #[arg(long)]
    actions: Option<String>,
    /// Exactly this resource.
    #[arg(long)]
    resource: Option<String>,
    /// `success`, `error` or `error.<status>`.
    #[arg(long)]
    result: Option<String>,
    /// `cli`, `web`, `api`, `scheduler`, `console` or `mcp`.
    #[arg(long)]
    client_kind: Option<String>,
    /// A client kind, or `system`.
    #[arg(long)]
    source: Option<String>,
    /// Rows of this request id.
    #[arg(long)]
    correlation_id: Option<String>,
    /// Text in the parameters (literal, case-sensitive).
    #[arg(long)]
    q: Option<String>,
    /// Rows per page, 1..200.
    #[arg(long, default_value_t = 50)]
    limit: u32,
    /// Start after this `next_cursor` (printed under the table).
    #[arg(long)]
    cursor: Option<String>,
    /// Keep printing new rows as they are written (Ctrl-C to stop).
    #[arg(long, conflicts_with = "cursor")]
    follow: bool,
    /// Machine-readable output (with `--follow`: one JSON object per line).
    #[arg(long)]
    json: bool,
}

impl Args {
    /// The query's pairs, the window given as `window` (relative or absolute).
    fn pairs(
        &self,
        user_id: Option<String>,
        window: Vec<(&'static str, Option<String>)>,
    ) -> Vec<(&'static str, Option<String>)> {
        let mut pairs = window;
        pairs.extend([
            ("user_id", user_id),
            ("action_prefix", self.action.clone()),
            ("action_in", self.actions.clone()),
            ("resource", self.resource.clone()),
            ("result", self.result.clone()),
            ("client_kind", self.client_kind.clone()),
            ("source", self.source.clone()),
            ("correlation_id", self.correlation_id.clone()),
            ("q", self.q.clone()),
        ]);
        pairs
    }

    fn window(&self) -> Result<Vec<(&'static str, Option<String>)>> {
        Ok(vec![
            ("since_minutes", window_minutes(self.since.as_deref())?),
            ("since", self.from.clone()),
            ("until", self.until.clone()),
        ])
    }
}

fn table(rows: &[Value]) {
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                cell(&r["timestamp"]),
                cell(&r["user_email"]),
                cell(&r["action"]),
                cell(&r["resource"]),
                cell(&r["result"]),
                cell(&r["duration_ms"]),
                cell(&r["source"]),
            ]
        })
        .collect();
    render::table(
        &[
            "TIME", "USER", "ACTION", "RESOURCE", "RESULT", "MS", "SOURCE",
        ]
        .map(String::from),
        &cells,
    );
}

/// Runs `svc admin activity`.
pub fn run(client: &Client, args: Args) -> Result<()> {
    let user_id = args
        .user
        .as_deref()
        .map(|u| super::admin::user_id(client, u))
        .transpose()?;
    let mut pairs = args.pairs(user_id.clone(), args.window()?);
    pairs.push(("limit", Some(args.limit.to_string())));
    pairs.push(("cursor", args.cursor.clone()));
    let page = client.get(&format!("/api/admin/activity{}", query_string(&pairs)))?;
    let rows = page["rows"].as_array().cloned().unwrap_or_default();
    if !args.follow {
        if args.json {
            render::print_json(&page);
        } else {
            table(&rows);
            if let Some(next) = page["next_cursor"].as_str() {
                eprintln!("  Next page: --cursor '{next}'");
            }
        }
        return Ok(());
    }
    follow(client, &args, user_id, rows)
}

/// Prints `first` (newest first, as served) oldest first, then polls for the rows written
/// since the newest printed one, every page of them; rows of that instant already printed
/// are skipped (the window includes it).
fn follow(client: &Client, args: &Args, user_id: Option<String>, first: Vec<Value>) -> Result<()> {
    let print = |rows: &[Value], header: bool| {
        if args.json {
            for r in rows {
                println!("{r}");
            }
        } else if header || !rows.is_empty() {
            table(rows);
        }
    };
    let mut batch: Vec<Value> = first.into_iter().rev().collect();
    let mut newest = String::new();
    let mut printed_at_newest: HashSet<String> = HashSet::new();
    remember(&batch, &mut newest, &mut printed_at_newest);
    print(&batch, true);
    loop {
        std::thread::sleep(FOLLOW_EVERY);
        let window = if newest.is_empty() {
            args.window()?
        } else {
            vec![("since", Some(newest.clone()))]
        };
        let mut rows = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut pairs = args.pairs(user_id.clone(), window.clone());
            pairs.push(("limit", Some("200".into())));
            pairs.push(("cursor", cursor.clone()));
            let page = client.get(&format!("/api/admin/activity{}", query_string(&pairs)))?;
            rows.extend(page["rows"].as_array().cloned().unwrap_or_default());
            match page["next_cursor"].as_str() {
                Some(next) => cursor = Some(next.to_owned()),
                None => break,
            }
        }
        batch = rows
            .into_iter()
            .rev()
            .filter(|r| !printed_at_newest.contains(&cell(&r["id"])))
            .collect();
        remember(&batch, &mut newest, &mut printed_at_newest);
        print(&batch, false);
    }
}

/// Moves `newest` to the latest row of `batch`, keeping the ids printed at that instant.
fn remember(batch: &[Value], newest: &mut String, printed_at_newest: &mut HashSet<String>) {
    for r in batch {
        let ts = cell(&r["timestamp"]);
        if ts != *newest {
            *newest = ts;
            printed_at_newest.clear();
        }
        printed_at_newest.insert(cell(&r["id"]));
    }
}

/// `svc admin views …`: the caller's saved views of the observability pages.
#[derive(clap::Subcommand, Debug)]
pub enum ViewsCommand {
    /// The saved views, newest first.
    List {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Saves a view (replacing the payload of the view of that name).
    Save {
        /// The view's name (at most 80 characters).
        name: String,
        /// The payload: a JSON object (`-` reads it from standard input).
        query: String,
    },
    /// Deletes a view by id.
    Delete {
        /// The view's id, as `list` shows it.
        id: String,
    },
}

/// Runs `svc admin views`.
pub fn views(client: &Client, cmd: ViewsCommand) -> Result<()> {
    const BASE: &str = "/api/admin/observability/views";
    match cmd {
        ViewsCommand::List { json } => {
            let doc = client.get(BASE)?;
            if json {
                render::print_json(&doc);
            } else {
                let rows: Vec<Vec<String>> = doc["views"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|v| vec![cell(&v["id"]), cell(&v["name"]), cell(&v["created_at"])])
                    .collect();
                render::table(&["ID", "NAME", "CREATED"].map(String::from), &rows);
            }
        }
        ViewsCommand::Save { name, query } => {
            let text = if query == "-" {
                std::io::read_to_string(std::io::stdin()).map_err(|e| {
                    CliError::usage(format!("Error: cannot read standard input: {e}"))
                })?
            } else {
                query
            };
            let payload: Value = serde_json::from_str(&text).map_err(|e| {
                CliError::usage(format!("Error: the view's query is not JSON: {e}"))
            })?;
            let body = serde_json::json!({ "name": name, "query": payload });
            let saved = client.json(reqwest::Method::POST, BASE, Some(&body))?;
            eprintln!(
                "saved view '{}' ({})",
                cell(&saved["name"]),
                cell(&saved["id"])
            );
        }
        ViewsCommand::Delete { id } => {
            client.json(
                reqwest::Method::DELETE,
                &format!("{BASE}/{}", super::seg(&id)),
                None,
            )?;
            eprintln!("deleted view {id}");
        }
    }
    Ok(())
}
