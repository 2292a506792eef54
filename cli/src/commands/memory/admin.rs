//! `svc admin memory …`: the review queue, decisions one at a time or in a batch, edits one
//! at a time or in bulk, the tree and stats, and the contradictions and duplicate
//! candidates to settle.

use clap::Subcommand;
use reqwest::Method;
use serde_json::{json, Value};

use super::items_table;
use crate::client::Client;
use crate::commands::{seg, telemetry::query_string};
use crate::exit::Result;
use crate::render::{self, cell};

/// `svc admin memory …`
#[derive(Subcommand, Debug)]
pub enum AdminCommand {
    /// Items waiting for review, oldest first.
    Pending {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Approve an item.
    Approve(DecisionArgs),
    /// Make an item mandatory (optionally for one audience).
    Mandate {
        #[command(flatten)]
        decision: DecisionArgs,
        /// `all` or `group:<name>`.
        #[arg(long)]
        audience: Option<String>,
    },
    /// Reject an item.
    Reject(DecisionArgs),
    /// Revoke a mandatory item.
    Revoke(DecisionArgs),
    /// Edit an item's fields.
    Edit {
        /// Item id.
        id: String,
        /// New title.
        #[arg(long)]
        title: Option<String>,
        /// New content.
        #[arg(long)]
        content: Option<String>,
        /// New category.
        #[arg(long)]
        category: Option<String>,
        /// New domain.
        #[arg(long)]
        domain: Option<String>,
        /// New audience: `all` or `group:<name>`.
        #[arg(long)]
        audience: Option<String>,
        /// New tags, comma-separated (replacing the old ones).
        #[arg(long)]
        set_tags: Option<String>,
        /// The revision you read (refused if the item changed since).
        #[arg(long)]
        revision: Option<i64>,
    },
    /// One decision on many items (each reported: moved, not found, or why not).
    Batch {
        /// approve, mandate, reject or revoke.
        #[arg(value_parser = ["approve", "mandate", "reject", "revoke"])]
        action: String,
        /// Item ids, comma-separated.
        #[arg(long, value_delimiter = ',', required = true)]
        ids: Vec<String>,
        /// Why (kept in the audit log).
        #[arg(long)]
        reason: Option<String>,
        /// With mandate: `all` or `group:<name>`.
        #[arg(long)]
        audience: Option<String>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// The same field changes on many items.
    BulkEdit {
        /// Item ids, comma-separated.
        #[arg(long, value_delimiter = ',', required = true)]
        ids: Vec<String>,
        /// New category.
        #[arg(long)]
        category: Option<String>,
        /// New domain.
        #[arg(long)]
        domain: Option<String>,
        /// New audience.
        #[arg(long)]
        audience: Option<String>,
        /// A tag to add (repeat for more).
        #[arg(long = "add-tag")]
        add_tags: Vec<String>,
        /// A tag to remove (repeat for more).
        #[arg(long = "remove-tag")]
        remove_tags: Vec<String>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// How the items divide by status, category, domain, source, audience and tag.
    Stats {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Items grouped by domain, category, tag or audience.
    Tree {
        /// domain, category, tag or audience.
        #[arg(long, default_value = "domain")]
        axis: String,
        /// Statuses, comma-separated.
        #[arg(long)]
        status: Option<String>,
        /// Exact source type.
        #[arg(long)]
        source_type: Option<String>,
        /// Exact audience.
        #[arg(long)]
        audience: Option<String>,
        /// Text in the title or content.
        #[arg(short = 'q', long = "query")]
        q: Option<String>,
        /// Only items with an open duplicate candidate.
        #[arg(long)]
        has_duplicate: bool,
        /// Page of groups, from 1.
        #[arg(long, default_value_t = 1)]
        page: u64,
        /// Groups per page.
        #[arg(long, default_value_t = 50)]
        per_page: u64,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Contradictions between items.
    #[command(subcommand)]
    Contradictions(PairCommand),
    /// Likely duplicates found on contribution.
    #[command(subcommand)]
    Duplicates(PairCommand),
}

/// `svc admin memory contradictions|duplicates …`
#[derive(Subcommand, Debug)]
pub enum PairCommand {
    /// Open ones (or resolved ones, or all).
    List {
        /// Resolved ones instead of open ones.
        #[arg(long, conflicts_with = "all")]
        resolved: bool,
        /// Open and resolved.
        #[arg(long)]
        all: bool,
        /// At most this many.
        #[arg(long, default_value_t = 100)]
        limit: u64,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// File a contradiction between two items (contradictions only).
    Add {
        /// One item.
        a: String,
        /// The other.
        b: String,
        /// Why they contradict.
        #[arg(long)]
        explanation: Option<String>,
        /// low, medium or high.
        #[arg(long, default_value = "medium")]
        severity: String,
    },
    /// Settle one: a contradiction by its id (`--as kept_a|kept_b|merged|both_valid`), a
    /// duplicate pair by its two item ids (`--as duplicate|different|dismissed`).
    Resolve {
        /// The contradiction id, or the first item of a duplicate pair.
        id: String,
        /// The second item of a duplicate pair.
        other: Option<String>,
        /// The resolution.
        #[arg(long = "as")]
        resolution: String,
        /// Duplicates: the item to keep (the other is retired).
        #[arg(long)]
        keep: Option<String>,
        /// Why (kept in the audit log).
        #[arg(long)]
        reason: Option<String>,
    },
}

/// A decision's item and details.
#[derive(clap::Args, Debug)]
pub struct DecisionArgs {
    /// Item id.
    id: String,
    /// Why (kept in the audit log).
    #[arg(long)]
    reason: Option<String>,
    /// The revision you read (refused if the item changed since).
    #[arg(long)]
    revision: Option<i64>,
}

fn decide(
    client: &Client,
    decision: &str,
    args: DecisionArgs,
    audience: Option<String>,
) -> Result<()> {
    let body = json!({"reason": args.reason, "audience": audience,
                      "expected_revision": args.revision});
    let item = client.json(
        Method::POST,
        &format!("/api/memory/admin/{decision}?item_id={}", seg(&args.id)),
        Some(&body),
    )?;
    eprintln!(
        "{} is {} (revision {})",
        cell(&item["id"]),
        cell(&item["status"]),
        cell(&item["revision"])
    );
    Ok(())
}

/// Prints what a batch or bulk update did; an item that failed is named with its reason.
fn outcome(doc: &Value, done_key: &str, json: bool) {
    if json {
        render::print_json(doc);
        return;
    }
    let count = |k: &str| doc[k].as_array().map_or(0, Vec::len);
    eprintln!(
        "{} done, {} not found, {} failed",
        count(done_key),
        count("not_found"),
        count("errors")
    );
    for id in doc["not_found"].as_array().into_iter().flatten() {
        eprintln!("  not found: {}", cell(id));
    }
    for e in doc["errors"].as_array().into_iter().flatten() {
        eprintln!("  {}: {}", cell(&e["id"]), cell(&e["error"]));
    }
}

fn side(v: &Value) -> String {
    if v["hidden"] == json!(true) {
        format!("{} (personal)", cell(&v["id"]))
    } else if v["missing"] == json!(true) {
        format!("{} (deleted)", cell(&v["id"]))
    } else {
        format!(
            "{} [{}] {}",
            cell(&v["id"]),
            cell(&v["status"]),
            cell(&v["title"])
        )
    }
}

fn pairs(client: &Client, contradictions: bool, cmd: PairCommand) -> Result<()> {
    let (base, key) = if contradictions {
        ("/api/memory/admin/contradictions", "contradictions")
    } else {
        ("/api/memory/admin/duplicate-candidates", "candidates")
    };
    match cmd {
        PairCommand::List {
            resolved,
            all,
            limit,
            json,
        } => {
            let doc = client.get(&format!(
                "{base}?resolved={resolved}&all={all}&limit={limit}"
            ))?;
            if json {
                render::print_json(&doc);
                return Ok(());
            }
            let rows: Vec<Vec<String>> = doc[key]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| {
                    let what = if contradictions {
                        cell(&p["id"])
                    } else {
                        cell(&p["score"])
                    };
                    vec![
                        what,
                        side(&p["item_a"]),
                        side(&p["item_b"]),
                        cell(&p["resolution"]),
                    ]
                })
                .collect();
            let first = if contradictions { "ID" } else { "SCORE" };
            render::table(
                &[first, "ITEM A", "ITEM B", "RESOLUTION"].map(String::from),
                &rows,
            );
        }
        PairCommand::Add {
            a,
            b,
            explanation,
            severity,
        } => {
            if !contradictions {
                return Err(crate::exit::CliError::usage(
                    "duplicate candidates are found on contribution; only contradictions are filed by hand",
                ));
            }
            let c = client.json(
                Method::POST,
                base,
                Some(&json!({"item_a_id": a, "item_b_id": b,
                             "explanation": explanation, "severity": severity})),
            )?;
            eprintln!("filed contradiction {}", cell(&c["id"]));
        }
        PairCommand::Resolve {
            id,
            other,
            resolution,
            keep,
            reason,
        } => {
            let doc = if contradictions {
                client.json(
                    Method::POST,
                    &format!("{base}/{}/resolve", seg(&id)),
                    Some(&json!({"resolution": resolution, "reason": reason})),
                )?
            } else {
                let other = other.ok_or_else(|| {
                    crate::exit::CliError::usage("a duplicate pair is named by both item ids")
                })?;
                client.json(
                    Method::POST,
                    &format!(
                        "{base}/resolve?item_a_id={}&item_b_id={}",
                        seg(&id),
                        seg(&other)
                    ),
                    Some(&json!({"resolution": resolution, "keep": keep})),
                )?
            };
            eprintln!("resolved as {}", cell(&doc["resolution"]));
            if let Some(r) = doc["retired"].as_object() {
                eprintln!(
                    "  {} is now {}",
                    cell(&r["id"].clone()),
                    cell(&r["status"].clone())
                );
            }
        }
    }
    Ok(())
}

/// Runs `svc admin memory …`.
pub fn run(client: &Client, cmd: AdminCommand) -> Result<()> {
    match cmd {
        AdminCommand::Pending { json } => {
            let doc = client.get("/api/memory/admin/pending?per_page=500")?;
            if json {
                render::print_json(&doc);
            } else {
                items_table(&doc["items"]);
            }
            Ok(())
        }
        AdminCommand::Approve(a) => decide(client, "approve", a, None),
        AdminCommand::Mandate { decision, audience } => {
            decide(client, "mandate", decision, audience)
        }
        AdminCommand::Reject(a) => decide(client, "reject", a, None),
        AdminCommand::Revoke(a) => decide(client, "revoke", a, None),
        AdminCommand::Edit {
            id,
            title,
            content,
            category,
            domain,
            audience,
            set_tags,
            revision,
        } => {
            let mut body = serde_json::Map::new();
            for (k, v) in [
                ("title", title),
                ("content", content),
                ("category", category),
                ("domain", domain),
                ("audience", audience),
            ] {
                if let Some(v) = v {
                    body.insert(k.into(), v.into());
                }
            }
            if let Some(tags) = set_tags {
                let tags: Vec<&str> = tags
                    .split(',')
                    .map(str::trim)
                    .filter(|t| !t.is_empty())
                    .collect();
                body.insert("tags".into(), json!(tags));
            }
            if let Some(r) = revision {
                body.insert("expected_revision".into(), r.into());
            }
            let item = client.json(
                Method::PATCH,
                &format!("/api/memory/admin/items/{}", seg(&id)),
                Some(&Value::Object(body)),
            )?;
            eprintln!(
                "{} edited (revision {})",
                cell(&item["id"]),
                cell(&item["revision"])
            );
            Ok(())
        }
        AdminCommand::Batch {
            action,
            ids,
            reason,
            audience,
            json,
        } => {
            let doc = client.json(
                Method::POST,
                "/api/memory/admin/batch",
                Some(&json!({"item_ids": ids, "action": action,
                             "reason": reason, "audience": audience})),
            )?;
            outcome(&doc, "success", json);
            Ok(())
        }
        AdminCommand::BulkEdit {
            ids,
            category,
            domain,
            audience,
            add_tags,
            remove_tags,
            json,
        } => {
            let mut updates = serde_json::Map::new();
            for (k, v) in [
                ("category", category),
                ("domain", domain),
                ("audience", audience),
            ] {
                if let Some(v) = v {
                    updates.insert(k.into(), v.into());
                }
            }
            if !add_tags.is_empty() {
                updates.insert("tags_add".into(), json!(add_tags));
            }
            if !remove_tags.is_empty() {
                updates.insert("tags_remove".into(), json!(remove_tags));
            }
            let doc = client.json(
                Method::POST,
                "/api/memory/admin/bulk-update",
                Some(&json!({"item_ids": ids, "updates": updates})),
            )?;
            outcome(&doc, "updated", json);
            Ok(())
        }
        AdminCommand::Stats { json } => {
            let doc = client.get("/api/memory/stats")?;
            if json {
                render::print_json(&doc);
                return Ok(());
            }
            println!("total: {}", cell(&doc["total"]));
            for key in [
                "by_status",
                "by_domain",
                "categories",
                "by_audience",
                "by_tag",
            ] {
                let parts: Vec<String> = doc[key]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|v| format!("{} {}", cell(&v["value"]), cell(&v["count"])))
                    .collect();
                println!("{key}: {}", parts.join(", "));
            }
            Ok(())
        }
        AdminCommand::Tree {
            axis,
            status,
            source_type,
            audience,
            q,
            has_duplicate,
            page,
            per_page,
            json,
        } => {
            let pairs = [
                ("axis", Some(axis)),
                ("status_filter", status),
                ("source_type", source_type),
                ("audience", audience),
                ("q", q),
                ("has_duplicate", has_duplicate.then(|| "true".to_owned())),
                ("page", Some(page.to_string())),
                ("per_page", Some(per_page.to_string())),
            ];
            let doc = client.get(&format!("/api/memory/tree{}", query_string(&pairs)))?;
            if json {
                render::print_json(&doc);
                return Ok(());
            }
            for g in doc["groups"].as_array().into_iter().flatten() {
                let key = g["key"].as_str().unwrap_or("(none)");
                println!("{key} ({})", cell(&g["count"]));
                for i in g["items"].as_array().into_iter().flatten() {
                    println!(
                        "  {} [{}] {}",
                        cell(&i["id"]),
                        cell(&i["status"]),
                        cell(&i["title"])
                    );
                }
            }
            eprintln!(
                "  {} groups, {} items",
                cell(&doc["total_groups"]),
                cell(&doc["total_items"])
            );
            Ok(())
        }
        AdminCommand::Contradictions(c) => pairs(client, true, c),
        AdminCommand::Duplicates(c) => pairs(client, false, c),
    }
}
