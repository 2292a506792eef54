//! `svc memory …`: corporate memory for everyone (contribute, list, show, vote, the agents'
//! bundle); [`admin`] holds `svc admin memory …`, the review side.

pub mod admin;

pub use admin::{run as admin, AdminCommand};

use clap::Subcommand;
use reqwest::Method;
use serde_json::{json, Value};

use super::{seg, telemetry::query_string, Ctx};
use crate::exit::Result;
use crate::render::{self, cell};

/// `svc memory …`
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Contribute an item (it waits for review as `pending`).
    Add {
        /// Title (at most 200 characters).
        title: String,
        /// The knowledge itself.
        #[arg(long)]
        content: Option<String>,
        /// Category.
        #[arg(long)]
        category: Option<String>,
        /// finance, engineering, product, data, operations or infrastructure.
        #[arg(long)]
        domain: Option<String>,
        /// A tag (repeat for more).
        #[arg(long = "tag")]
        tags: Vec<String>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// The items you can see.
    List {
        /// Statuses, comma-separated (pending, approved, mandatory, rejected, revoked, expired).
        #[arg(long)]
        status: Option<String>,
        /// Exact domain.
        #[arg(long)]
        domain: Option<String>,
        /// Exact category.
        #[arg(long)]
        category: Option<String>,
        /// Text in the title or content.
        #[arg(long)]
        search: Option<String>,
        /// updated, created, score, confidence or title.
        #[arg(long)]
        sort: Option<String>,
        /// Page, from 1.
        #[arg(long, default_value_t = 1)]
        page: u64,
        /// Items per page, 1..500.
        #[arg(long, default_value_t = 50)]
        per_page: u64,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// One item.
    Show {
        /// Item id.
        id: String,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Vote on an item: up, down or clear.
    Vote {
        /// Item id.
        id: String,
        /// up, down or clear.
        #[arg(value_parser = ["up", "down", "clear"])]
        vote: String,
    },
    /// What an agent loads: mandatory items, then the best approved ones within a budget.
    Bundle {
        /// Token budget.
        #[arg(long, default_value_t = 6000)]
        budget: usize,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
}

pub(super) fn items_table(items: &Value) {
    render::records(
        items,
        &[
            ("ID", "id"),
            ("STATUS", "status"),
            ("DOMAIN", "domain"),
            ("SCORE", "score"),
            ("TITLE", "title"),
        ],
    );
}

fn print_item(item: &Value, json: bool) {
    if json {
        render::print_json(item);
        return;
    }
    for key in [
        "id",
        "title",
        "status",
        "domain",
        "category",
        "audience",
        "confidence",
        "score",
        "revision",
        "source_user",
        "updated_at",
    ] {
        println!("{key:>12}: {}", cell(&item[key]));
    }
    if let Some(c) = item["content"].as_str() {
        println!("\n{c}");
    }
}

/// Runs `svc memory …`.
pub fn run(ctx: &Ctx, cmd: Command) -> Result<()> {
    let client = ctx.authed()?;
    match cmd {
        Command::Add {
            title,
            content,
            category,
            domain,
            tags,
            json,
        } => {
            let body = json!({"title": title, "content": content, "category": category,
                              "domain": domain, "tags": tags});
            let item = client.json(Method::POST, "/api/memory", Some(&body))?;
            if json {
                render::print_json(&item);
            } else {
                eprintln!("contributed {} (pending review)", cell(&item["id"]));
            }
        }
        Command::List {
            status,
            domain,
            category,
            search,
            sort,
            page,
            per_page,
            json,
        } => {
            let pairs = [
                ("status_filter", status),
                ("domain", domain),
                ("category", category),
                ("search", search),
                ("sort", sort),
                ("page", Some(page.to_string())),
                ("per_page", Some(per_page.to_string())),
            ];
            let doc = client.get(&format!("/api/memory{}", query_string(&pairs)))?;
            if json {
                render::print_json(&doc);
            } else {
                items_table(&doc["items"]);
                eprintln!(
                    "  page {} of {} ({} items)",
                    cell(&doc["page"]),
                    cell(&doc["total_pages"]),
                    cell(&doc["total_count"])
                );
            }
        }
        Command::Show { id, json } => {
            let item = client.get(&format!("/api/memory/{}", seg(&id)))?;
            print_item(&item, json);
        }
        Command::Vote { id, vote } => {
            let v = match vote.as_str() {
                "up" => 1,
                "down" => -1,
                _ => 0,
            };
            let counts = client.json(
                Method::POST,
                &format!("/api/memory/{}/vote", seg(&id)),
                Some(&json!({ "vote": v })),
            )?;
            eprintln!(
                "{} up, {} down",
                cell(&counts["upvotes"]),
                cell(&counts["downvotes"])
            );
        }
        Command::Bundle { budget, json } => {
            let doc = client.get(&format!("/api/memory/bundle?budget_tokens={budget}"))?;
            if json {
                render::print_json(&doc);
            } else {
                for (label, key) in [("MANDATORY", "mandatory"), ("APPROVED", "approved")] {
                    println!("{label}");
                    for i in doc[key].as_array().into_iter().flatten() {
                        println!("- {}: {}", cell(&i["title"]), cell(&i["content"]));
                    }
                }
                eprintln!(
                    "  ~{} of {} tokens",
                    cell(&doc["token_estimate"]),
                    cell(&doc["token_budget"])
                );
            }
        }
    }
    Ok(())
}
