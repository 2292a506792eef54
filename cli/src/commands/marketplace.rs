//! `svc marketplace …`: plugins, skills and agents ranked by what agents use, and
//! submissions; `svc admin marketplace …`: curated marketplaces, their syncs and the
//! submissions queue.

use clap::Subcommand;
use reqwest::Method;
use serde_json::{json, Value};

use super::{seg, telemetry::query_string, Ctx};
use crate::client::Client;
use crate::exit::{CliError, Result};
use crate::render::{self, cell};

/// `svc marketplace …`
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Items with their 30-day use.
    List {
        /// curated, flea or my (your submissions).
        #[arg(long, default_value = "curated", value_parser = ["curated", "flea", "my"])]
        tab: String,
        /// recent, most_used or trending.
        #[arg(long, default_value = "recent", value_parser = ["recent", "most_used", "trending"])]
        sort: String,
        /// Text in the name or description.
        #[arg(short = 'q', long = "query")]
        q: Option<String>,
        /// plugin, skill or agent.
        #[arg(long = "type")]
        item_type: Option<String>,
        /// Exact category.
        #[arg(long)]
        category: Option<String>,
        /// Page, from 1.
        #[arg(long, default_value_t = 1)]
        page: u64,
        /// Items per page, 1..100.
        #[arg(long, default_value_t = 24)]
        page_size: u64,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// One item: `<marketplace>/<plugin>` for a curated plugin, else a submission's id.
    Show {
        /// The item's id.
        id: String,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Submit a skill or agent (its text from a file), or a plugin directory (a tar or
    /// tar.gz of it), for review.
    Submit {
        /// skill, agent or plugin.
        #[arg(long = "type", value_parser = ["skill", "agent", "plugin"])]
        item_type: String,
        /// Its name (what agents invoke).
        #[arg(long)]
        name: String,
        /// The text (skill, agent) or the archive (plugin).
        file: std::path::PathBuf,
        /// Description.
        #[arg(long)]
        description: Option<String>,
        /// Category.
        #[arg(long)]
        category: Option<String>,
    },
}

/// `svc admin marketplace …`
#[derive(Subcommand, Debug)]
pub enum AdminCommand {
    /// Register a curated marketplace (a git URL or an absolute local directory).
    Add {
        /// Its id.
        id: String,
        /// Its git URL or directory.
        url: String,
        /// Display name.
        #[arg(long)]
        name: Option<String>,
        /// The branch to fetch.
        #[arg(long)]
        branch: Option<String>,
    },
    /// Fetch one marketplace (or every one) and re-read its plugins.
    Sync {
        /// The marketplace (default: all).
        id: Option<String>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// The curated marketplaces and their last sync.
    List {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Submissions waiting for review (or in another status).
    Submissions {
        /// pending, approved, archived or all.
        #[arg(long, default_value = "pending")]
        status: String,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Approve a submission (it is listed and attributed).
    Approve {
        /// The submission's id.
        id: String,
    },
    /// Archive a submission (withdrawn; its attribution removed).
    Archive {
        /// The submission's id.
        id: String,
    },
}

fn trend(v: &Value) -> String {
    match v.as_f64() {
        Some(t) if t >= 0.0 => format!("+{t:.0}%"),
        Some(t) => format!("{t:.0}%"),
        None => "-".into(),
    }
}

/// Runs `svc marketplace …`.
pub fn run(ctx: &Ctx, cmd: Command) -> Result<()> {
    let client = ctx.authed()?;
    match cmd {
        Command::List {
            tab,
            sort,
            q,
            item_type,
            category,
            page,
            page_size,
            json,
        } => {
            let pairs = [
                ("tab", Some(tab)),
                ("sort", Some(sort)),
                ("q", q),
                ("type", item_type),
                ("category", category),
                ("page", Some(page.to_string())),
                ("page_size", Some(page_size.to_string())),
            ];
            let doc = client.get(&format!("/api/marketplace/items{}", query_string(&pairs)))?;
            if json {
                render::print_json(&doc);
                return Ok(());
            }
            let rows: Vec<Vec<String>> = doc["items"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|i| {
                    vec![
                        cell(&i["id"]),
                        cell(&i["item_type"]),
                        cell(&i["invocations_30d"]),
                        cell(&i["unique_users_30d"]),
                        trend(&i["trend_pct"]),
                        cell(&i["description"]),
                    ]
                })
                .collect();
            render::table(
                &[
                    "ID",
                    "TYPE",
                    "USES 30D",
                    "USERS 30D",
                    "TREND",
                    "DESCRIPTION",
                ]
                .map(String::from),
                &rows,
            );
            eprintln!("  {} items", cell(&doc["total"]));
        }
        Command::Show { id, json } => {
            let path = match id.split_once('/') {
                Some((m, p)) => format!("/api/marketplace/plugins/{}/{}", seg(m), seg(p)),
                None => format!("/api/marketplace/flea/{}", seg(&id)),
            };
            let doc = client.get(&path)?;
            if json {
                render::print_json(&doc);
                return Ok(());
            }
            let item = if doc["plugin"].is_object() {
                &doc["plugin"]
            } else {
                &doc["entity"]
            };
            for key in [
                "name",
                "description",
                "category",
                "status",
                "skills",
                "agents",
                "commands",
                "error",
            ] {
                if !item[key].is_null() {
                    println!("{key:>12}: {}", cell(&item[key]));
                }
            }
            let t = &doc["telemetry"];
            println!(
                "{:>12}: {} uses by {} users in 30 days (trend {})",
                "usage",
                cell(&t["invocations_30d"]),
                cell(&t["unique_users_30d"]),
                trend(&t["trend_pct"])
            );
        }
        Command::Submit {
            item_type,
            name,
            file,
            description,
            category,
        } => {
            let bytes = std::fs::read(&file)
                .map_err(|e| CliError::usage(format!("cannot read {}: {e}", file.display())))?;
            let doc = if item_type == "plugin" {
                let pairs = [
                    ("name", Some(name)),
                    ("description", description),
                    ("category", category),
                ];
                let rb = client
                    .request(
                        true,
                        Method::POST,
                        &format!("/api/marketplace/flea/upload{}", query_string(&pairs)),
                    )?
                    .header("content-type", "application/octet-stream")
                    .body(bytes);
                client
                    .send(rb)?
                    .json()
                    .map_err(|e| CliError::usage(e.to_string()))?
            } else {
                let content = String::from_utf8(bytes)
                    .map_err(|_| CliError::usage("the file is not UTF-8 text"))?;
                client.json(
                    Method::POST,
                    "/api/marketplace/flea",
                    Some(&json!({"type": item_type, "name": name, "content": content,
                                 "description": description, "category": category})),
                )?
            };
            eprintln!("submitted {} (pending review)", cell(&doc["id"]));
        }
    }
    Ok(())
}

/// Runs `svc admin marketplace …`.
pub fn admin(client: &Client, cmd: AdminCommand) -> Result<()> {
    match cmd {
        AdminCommand::Add {
            id,
            url,
            name,
            branch,
        } => {
            let m = client.json(
                Method::POST,
                "/api/admin/marketplaces",
                Some(&json!({"id": id, "url": url, "name": name, "branch": branch})),
            )?;
            eprintln!(
                "registered {}; run `svc admin marketplace sync {}`",
                cell(&m["id"]),
                cell(&m["id"])
            );
        }
        AdminCommand::Sync { id, json } => {
            let path = match &id {
                Some(id) => format!("/api/marketplace/sync?id={}", seg(id)),
                None => "/api/marketplace/sync".to_owned(),
            };
            let doc = client.json(Method::POST, &path, Some(&json!({})))?;
            if json {
                render::print_json(&doc);
                return Ok(());
            }
            let mut failed = false;
            for r in doc["reports"].as_array().into_iter().flatten() {
                match r["error"].as_str() {
                    Some(e) => {
                        failed = true;
                        eprintln!("{}: failed (previous plugins kept): {e}", cell(&r["id"]));
                    }
                    None => eprintln!(
                        "{}: {} plugins, {} with problems",
                        cell(&r["id"]),
                        cell(&r["plugins"]),
                        r["broken"].as_array().map_or(0, Vec::len)
                    ),
                }
                for b in r["broken"].as_array().into_iter().flatten() {
                    eprintln!("  {}: {}", cell(&b["name"]), cell(&b["error"]));
                }
            }
            if failed {
                return Err(CliError::new(
                    crate::exit::Exit::Partial,
                    "a marketplace failed to sync",
                ));
            }
        }
        AdminCommand::List { json } => {
            let doc = client.get("/api/admin/marketplaces")?;
            if json {
                render::print_json(&doc);
                return Ok(());
            }
            render::records(
                &doc["marketplaces"],
                &[
                    ("ID", "id"),
                    ("PLUGINS", "plugin_count"),
                    ("SYNCED", "last_synced_at"),
                    ("ERROR", "last_error"),
                    ("URL", "url"),
                ],
            );
        }
        AdminCommand::Submissions { status, json } => {
            let doc = client.get(&format!(
                "/api/admin/marketplace/flea?status={}",
                seg(&status)
            ))?;
            if json {
                render::print_json(&doc);
                return Ok(());
            }
            render::records(
                &doc["entities"],
                &[
                    ("ID", "id"),
                    ("TYPE", "entity_type"),
                    ("NAME", "name"),
                    ("STATUS", "status"),
                    ("SUBMITTER", "submitter_email"),
                ],
            );
        }
        AdminCommand::Approve { id } => decide(client, &id, "approve")?,
        AdminCommand::Archive { id } => decide(client, &id, "archive")?,
    }
    Ok(())
}

fn decide(client: &Client, id: &str, decision: &str) -> Result<()> {
    let e = client.json(
        Method::POST,
        &format!("/api/admin/marketplace/flea/{}/{decision}", seg(id)),
        Some(&json!({})),
    )?;
    eprintln!("{} is {}", cell(&e["id"]), cell(&e["status"]));
    Ok(())
}
