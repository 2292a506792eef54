//! `svc me …`: the caller's own usage.

use clap::Subcommand;

use super::Ctx;
use crate::exit::Result;
use crate::render::{self, cell};

/// `svc me …`
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Tokens your agent sessions used: per day, per model, totals.
    Tokens {
        /// Days back, 1..365.
        #[arg(long, default_value_t = 30)]
        days: u32,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
}

/// Runs an `svc me` command.
pub fn run(ctx: &Ctx, cmd: Command) -> Result<()> {
    let client = ctx.authed()?;
    match cmd {
        Command::Tokens { days, json } => {
            let doc = client.get(&format!("/api/me/stats/tokens?days={days}"))?;
            if json {
                render::print_json(&doc);
                return Ok(());
            }
            let line = |label: String, t: &serde_json::Value| {
                vec![
                    label,
                    cell(&t["sessions"]),
                    cell(&t["input"]),
                    cell(&t["output"]),
                    cell(&t["cache_read"]),
                    cell(&t["cache_creation"]),
                    cell(&t["total"]),
                ]
            };
            let mut rows: Vec<Vec<String>> = doc["daily"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|d| line(cell(&d["day"]), d))
                .collect();
            rows.extend(
                doc["by_model"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|m| line(format!("model {}", cell(&m["model"])), m)),
            );
            rows.push(line("total".into(), &doc["totals"]));
            render::table(
                &[
                    "DAY / MODEL",
                    "SESSIONS",
                    "INPUT",
                    "OUTPUT",
                    "CACHE READ",
                    "CACHE WRITE",
                    "TOTAL",
                ]
                .map(String::from),
                &rows,
            );
        }
    }
    Ok(())
}
