//! `svc admin activity`: the audit timeline, a page at a time or followed as it grows, and
//! its companions `health`, `sync`, `facets` and `kpis`.

use std::collections::HashSet;
use std::time::Duration;

use serde_json::Value;

use super::telemetry::{query_string, window_minutes};
use crate::client::Client;
use crate::exit::Result;
use crate::render::{self, cell};

/// How often `--follow` asks for new rows.
const FOLLOW_EVERY: Duration = Duration::from_secs(2);

/// `svc admin activity [health|sync|facets|kpis]`: the timeline without a subcommand.
#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Command {
    #[command(subcommand)]
    sub: Option<Sub>,
    #[command(flatten)]
    timeline: Args,
}

#[derive(clap::Subcommand, Debug)]
enum Sub {
    /// The health card: scheduler, syncs in 24 h, active users, telemetry pipeline.
    Health {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Table syncs, newest first, and each materialized table's current state.
    Sync {
        /// Window: minutes, or `30m`, `12h`, `7d` (default 24h, at most 30d).
        #[arg(long)]
        since: Option<String>,
        /// Syncs of this table only.
        #[arg(long)]
        table: Option<String>,
        /// `ok` or `error`.
        #[arg(long)]
        status: Option<String>,
        /// Rows per page, 1..500.
        #[arg(long, default_value_t = 100)]
        limit: u32,
        /// Start after this `next_cursor`.
        #[arg(long)]
        cursor: Option<String>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// The commonest users, actions, results, resources and sources under the filters.
    Facets {
        #[command(flatten)]
        filter: Filter,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Events, active users, errors, error rate and p50/p95/p99 duration under the filters.
    Kpis {
        #[command(flatten)]
        filter: Filter,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
}

/// The timeline's filters, shared by the timeline, facets and KPIs.
#[derive(clap::Args, Debug)]
pub struct Filter {
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
}

/// The timeline's filters and paging.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    filter: Filter,
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

impl Filter {
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

    /// `--user` as an id (an e-mail is looked up).
    fn user_id(&self, client: &Client) -> Result<Option<String>> {
        self.user
            .as_deref()
            .map(|u| super::admin::user_id(client, u))
            .transpose()
    }

    /// The whole query string of these filters.
    fn query(&self, client: &Client) -> Result<String> {
        Ok(query_string(
            &self.pairs(self.user_id(client)?, self.window()?),
        ))
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
pub fn run(client: &Client, cmd: Command) -> Result<()> {
    match cmd.sub {
        None => timeline(client, cmd.timeline),
        Some(Sub::Health { json }) => health(client, json),
        Some(Sub::Sync {
            since,
            table,
            status,
            limit,
            cursor,
            json,
        }) => {
            let pairs = [
                ("since_minutes", window_minutes(since.as_deref())?),
                ("table_id", table),
                ("status", status),
                ("limit", Some(limit.to_string())),
                ("cursor", cursor),
            ];
            let doc = client.get(&format!("/api/admin/activity/sync{}", query_string(&pairs)))?;
            sync(&doc, json);
            Ok(())
        }
        Some(Sub::Facets { filter, json }) => {
            let doc = client.get(&format!(
                "/api/admin/observability/facets{}",
                filter.query(client)?
            ))?;
            facets(&doc, json);
            Ok(())
        }
        Some(Sub::Kpis { filter, json }) => {
            let doc = client.get(&format!(
                "/api/admin/observability/kpis{}",
                filter.query(client)?
            ))?;
            kpis(&doc, json);
            Ok(())
        }
    }
}

fn health(client: &Client, json: bool) -> Result<()> {
    let doc = client.get("/api/admin/activity/health")?;
    if json {
        render::print_json(&doc);
        return Ok(());
    }
    let rows: Vec<Vec<String>> = doc["fields"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|f| vec![cell(&f["key"]), cell(&f["value"]), cell(&f["color"])])
        .collect();
    render::table(&["SIGNAL", "VALUE", "COLOR"].map(String::from), &rows);
    println!(
        "{}: {}",
        cell(&doc["status"]).to_uppercase(),
        cell(&doc["sentence"])
    );
    Ok(())
}

fn sync(doc: &Value, json: bool) {
    if json {
        render::print_json(doc);
        return;
    }
    let rows: Vec<Vec<String>> = doc["rows"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            vec![
                cell(&r["synced_at"]),
                cell(&r["table_id"]),
                cell(&r["status"]),
                cell(&r["rows"]),
                cell(&r["duration_ms"]),
                cell(&r["source"]),
                cell(&r["error"]),
            ]
        })
        .collect();
    render::table(
        &["TIME", "TABLE", "STATUS", "ROWS", "MS", "SOURCE", "ERROR"].map(String::from),
        &rows,
    );
    if let Some(next) = doc["next_cursor"].as_str() {
        eprintln!("  Next page: --cursor '{next}'");
    }
}

fn facets(doc: &Value, json: bool) {
    if json {
        render::print_json(doc);
        return;
    }
    let mut rows = Vec::new();
    for (facet, label) in [
        ("users", "label"),
        ("actions", "value"),
        ("results", "value"),
        ("resources", "value"),
        ("sources", "value"),
    ] {
        for v in doc[facet].as_array().into_iter().flatten() {
            rows.push(vec![facet.to_owned(), cell(&v[label]), cell(&v["count"])]);
        }
    }
    render::table(&["FACET", "VALUE", "ROWS"].map(String::from), &rows);
}

fn kpis(doc: &Value, json: bool) {
    if json {
        render::print_json(doc);
        return;
    }
    let rows: Vec<Vec<String>> = [
        "events_total",
        "active_users",
        "errors",
        "error_rate",
        "timed",
        "p50_duration_ms",
        "p95_duration_ms",
        "p99_duration_ms",
    ]
    .iter()
    .map(|k| vec![(*k).to_owned(), cell(&doc[*k])])
    .collect();
    render::table(&["KPI", "VALUE"].map(String::from), &rows);
}

/// The timeline: a page, or `--follow`.
fn timeline(client: &Client, args: Args) -> Result<()> {
    let user_id = args.filter.user_id(client)?;
    let mut pairs = args.filter.pairs(user_id.clone(), args.filter.window()?);
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
            args.filter.window()?
        } else {
            vec![("since", Some(newest.clone()))]
        };
        let mut rows = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut pairs = args.filter.pairs(user_id.clone(), window.clone());
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
