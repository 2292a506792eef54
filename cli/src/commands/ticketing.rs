//! `svc admin ticketing`: issue-tracker connections (`[data_source.ticketing.<name>]`).

use clap::Subcommand;
use reqwest::Method;
use serde_json::{json, Value};

use super::seg;
use crate::client::Client;
use crate::exit::{CliError, Exit, Result};
use crate::render::{self, cell};

#[derive(Subcommand, Debug)]
pub enum TicketingCommand {
    /// Deliveries received, replays, refused signatures, backlog and the last compaction.
    Status {
        /// Connection name.
        name: String,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Fetch issues updated since the last backfill (all the first time) from the tracker's
    /// REST search and fold them in.
    Backfill {
        /// Connection name.
        name: String,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Fold the received events into the tables now (the server does it every few seconds).
    Compact {
        /// Connection name.
        name: String,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
}

/// Runs an `svc admin ticketing` command.
pub fn run(client: &Client, cmd: TicketingCommand) -> Result<()> {
    match cmd {
        TicketingCommand::Status { name, json } => {
            let doc = client.get(&format!("/api/admin/ticketing/{}", seg(&name)))?;
            if json {
                render::print_json(&doc);
                return Ok(());
            }
            let lag = match doc["lag_seconds"].as_f64() {
                Some(s) => format!("{s:.1} s"),
                None => "none".into(),
            };
            println!("connection           {}", cell(&doc["connection"]));
            for (label, key) in [
                ("received", "received"),
                ("duplicates", "duplicates"),
                ("rejected signatures", "rejected_signatures"),
                ("bad payloads", "bad_payloads"),
                ("filtered", "filtered"),
                ("unknown events", "unknown_events"),
                ("future timestamps", "future_timestamps"),
                ("pending", "pending"),
            ] {
                println!("{label:<20} {}", cell(&doc[key]));
            }
            println!("{:<20} {lag}", "lag");
            match doc.get("last_compaction") {
                Some(c) if c.is_object() => println!(
                    "{:<20} {} ({} events, {:.2} s){}",
                    "last compaction",
                    cell(&c["at"]),
                    cell(&c["events"]),
                    c["seconds"].as_f64().unwrap_or(0.0),
                    c["error"]
                        .as_str()
                        .map(|e| format!(" FAILED: {e}"))
                        .unwrap_or_default()
                ),
                _ => println!("{:<20} never", "last compaction"),
            }
            if let Some(since) = doc["backfill_since"].as_str() {
                println!("{:<20} {since}", "backfilled through");
            }
            if doc["log_failed"].as_bool() == Some(true) {
                println!(
                    "the event log could not be written: deliveries are refused until a restart"
                );
            }
            println!();
            render::records(&doc["tables"], &[("TABLE", "table_id"), ("ROWS", "rows")]);
        }
        TicketingCommand::Backfill { name, json } => {
            eprintln!("backfilling {name} from the tracker…");
            let resp = client.post_long(
                &format!("/api/admin/ticketing/{}/backfill", seg(&name)),
                &json!({}),
            )?;
            let doc: Value = resp.json().map_err(|e| {
                CliError::new(Exit::Server, format!("Error: the answer is not JSON: {e}"))
            })?;
            if json {
                render::print_json(&doc);
            } else {
                println!(
                    "{}: {} issues read in {} pages, {} new or changed, {} skipped",
                    cell(&doc["connection"]),
                    cell(&doc["issues"]),
                    cell(&doc["pages"]),
                    cell(&doc["new"]),
                    cell(&doc["skipped"]),
                );
            }
        }
        TicketingCommand::Compact { name, json } => {
            let doc = client.json(
                Method::POST,
                &format!("/api/admin/ticketing/{}/compact", seg(&name)),
                None,
            )?;
            if json {
                render::print_json(&doc);
            } else {
                println!(
                    "{}: {} events folded in, {} tables rewritten in {:.2} s",
                    cell(&doc["connection"]),
                    cell(&doc["events"]),
                    doc["tables"].as_array().map_or(0, Vec::len),
                    doc["seconds"].as_f64().unwrap_or(0.0)
                );
            }
        }
    }
    Ok(())
}
