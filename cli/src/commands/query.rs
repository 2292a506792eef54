//! `svc query`: SQL on the server, printed as a table or JSON, or streamed as csv, arrow or
//! parquet to a file.

use std::io::{IsTerminal, Read, Write};
use std::path::PathBuf;

use clap::Args;
use serde_json::{json, Value};

use super::Ctx;
use crate::exit::{CliError, Exit, Result};
use crate::output::{write_atomically, Format};
use crate::render;

#[derive(Args, Debug)]
pub struct QueryArgs {
    /// The SQL (or use --file / --stdin).
    sql: Option<String>,
    /// Read the SQL from a file.
    #[arg(long, conflicts_with_all = ["sql", "stdin"])]
    file: Option<PathBuf>,
    /// Read the SQL from stdin.
    #[arg(long, conflicts_with = "sql")]
    stdin: bool,
    /// Most rows returned (1 to the server's cap).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    limit: u64,
    /// Output form.
    #[arg(long, short, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Write the result here instead of stdout (atomically: a failed query leaves no file).
    #[arg(long, short)]
    output: Option<PathBuf>,
    /// Run on this machine over pulled tables and snapshots (no server call; the same SQL
    /// dialect as the server).
    #[arg(long)]
    local: bool,
}

fn sql_text(args: &QueryArgs) -> Result<String> {
    let sql = match (&args.sql, &args.file, args.stdin) {
        (Some(s), None, false) => s.clone(),
        (None, Some(f), false) => std::fs::read_to_string(f)
            .map_err(|e| CliError::usage(format!("Error: cannot read {}: {e}", f.display())))?,
        (None, None, true) => {
            let mut s = String::new();
            std::io::stdin().read_to_string(&mut s)?;
            s
        }
        _ => {
            return Err(CliError::usage(
                "Error: give the SQL as an argument, --file or --stdin",
            ))
        }
    };
    if sql.trim().is_empty() {
        return Err(CliError::usage("Error: the SQL is empty"));
    }
    Ok(sql)
}

/// Runs `svc query`.
pub fn run(ctx: &Ctx, workspace: &std::path::Path, args: QueryArgs) -> Result<()> {
    let sql = sql_text(&args)?;
    let binary = matches!(args.format, Format::Arrow | Format::Parquet);
    if binary && args.output.is_none() && std::io::stdout().is_terminal() {
        return Err(CliError::usage(format!(
            "Error: {} output is binary; use --output FILE or redirect stdout",
            args.format.wire()
        )));
    }
    if args.local {
        return super::local::run(
            workspace,
            &sql,
            args.limit,
            args.format,
            args.output.as_deref(),
        );
    }
    let client = ctx.authed()?;
    let mut resp = client.post_long(
        "/api/query",
        &json!({"sql": sql, "limit": args.limit, "format": args.format.wire()}),
    )?;
    let truncated_header = resp
        .headers()
        .get("x-svc-truncated")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);

    if matches!(args.format, Format::Table | Format::Json) && args.output.is_none() {
        let doc: Value = resp.json().map_err(|e| {
            CliError::new(Exit::Server, format!("Error: the result broke off: {e}"))
        })?;
        render::result(&doc, args.format == Format::Json, args.limit);
        return Ok(());
    }

    // Stream the body: to a temporary file renamed into place when complete, or to stdout.
    let copied = match &args.output {
        Some(path) => write_atomically(path, &mut resp)?,
        None => {
            let mut out = std::io::stdout().lock();
            let n = std::io::copy(&mut resp, &mut out).map_err(|e| {
                if e.kind() == std::io::ErrorKind::BrokenPipe {
                    CliError::output_closed()
                } else {
                    CliError::new(Exit::Server, format!("Error: the result broke off: {e}"))
                }
            })?;
            out.flush()?;
            n
        }
    };
    if let Some(path) = &args.output {
        eprintln!("wrote {copied} bytes to {}", path.display());
    }
    if truncated_header.as_deref() == Some("true") {
        eprintln!(
            "(truncated at {} rows; raise --limit to see more)",
            args.limit
        );
    }
    Ok(())
}
