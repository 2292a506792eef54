//! `svc admin views`: the caller's saved views of the observability pages.

use serde_json::Value;

use crate::client::Client;
use crate::exit::{CliError, Result};
use crate::render::{self, cell};

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
