//! `svc query`: SQL on the server, printed as a table or JSON, or streamed as csv, arrow or
//! parquet to a file.

use std::io::{IsTerminal, Read, Write};
use std::path::PathBuf;

use clap::Args;
use serde_json::{json, Value};

use super::Ctx;
use crate::exit::{CliError, Exit, Result};
use crate::interrupt::Temp;
use crate::output::{copy_arrow_result, write_atomically, Format};
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
    /// Most rows returned (1 to the server's cap) [default: 1000 on screen; every row the
    /// server allows when writing a file (-o, arrow, parquet)].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    limit: Option<u64>,
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
    // A file is for the whole result: it gets every row allowed, and a cut one is an error
    // unless --limit asked for it. A screen gets the first 1,000.
    let to_file = args.output.is_some() || binary;
    if args.local {
        let limit = args
            .limit
            .unwrap_or(if to_file { u64::MAX } else { SCREEN_ROWS });
        return super::local::run(workspace, &sql, limit, args.format, args.output.as_deref());
    }
    let client = ctx.authed()?;
    let limit = match args.limit {
        Some(n) => n,
        None if to_file => server_row_cap(&client),
        None => SCREEN_ROWS,
    };
    // Tables and JSON come from the server's JSON document; every other form is written
    // here from an Arrow stream, whose final zero-row batch says whether the server cut the
    // result — known at the end even when the header could not say (`unknown`).
    let json_doc = matches!(args.format, Format::Table | Format::Json);
    let mut resp = client.post_long(
        "/api/query",
        &json!({"sql": sql, "limit": limit, "format": if json_doc { "json" } else { "arrow" }}),
    )?;
    let header = resp
        .headers()
        .get("x-svc-truncated")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);

    let truncated = match (&args.output, json_doc) {
        (None, true) => {
            let doc: Value = resp.json().map_err(|e| {
                CliError::new(Exit::Server, format!("Error: the result broke off: {e}"))
            })?;
            render::result(&doc, args.format == Format::Json, limit);
            return Ok(());
        }
        (Some(path), true) => {
            let copied = write_atomically(path, &mut resp)?;
            eprintln!("wrote {copied} bytes to {}", path.display());
            match header.as_deref() {
                Some("true") => true,
                Some("false") => false,
                // The document ends with its `truncated` field.
                _ => json_tail_says_truncated(path),
            }
        }
        (Some(path), false) => {
            let temp = Temp::for_target(path);
            let failed = |e: std::io::Error| {
                CliError::new(
                    Exit::Other,
                    format!("Error: writing {} failed: {e}", path.display()),
                )
            };
            let mut file =
                std::io::BufWriter::new(std::fs::File::create(temp.path()).map_err(failed)?);
            let (rows, truncated) = copy_arrow_result(&mut resp, args.format, &mut file)?;
            let file = file.into_inner().map_err(|e| failed(e.into_error()))?;
            file.sync_all().map_err(failed)?;
            temp.persist()?;
            eprintln!("wrote {rows} rows to {}", path.display());
            truncated
        }
        (None, false) => {
            let mut out = std::io::BufWriter::new(std::io::stdout());
            let (_, truncated) = copy_arrow_result(&mut resp, args.format, &mut out)?;
            out.flush()?;
            truncated
        }
    };
    if truncated {
        if to_file && args.limit.is_none() {
            return Err(CliError::new(
                Exit::Partial,
                format!(
                    "Error: the result has more rows than the server returns at once ({limit}); the output holds only the first {limit}"
                ),
            )
            .hint("narrow the query, or pass --limit to accept the first rows"));
        }
        eprintln!("(truncated at {limit} rows; raise --limit to see more)");
    }
    Ok(())
}

/// Whether a JSON result document at `path` ends saying it was truncated.
fn json_tail_says_truncated(path: &std::path::Path) -> bool {
    use std::io::{Seek, SeekFrom};
    let mut tail = String::new();
    let read = std::fs::File::open(path).and_then(|mut f| {
        let len = f.metadata()?.len();
        f.seek(SeekFrom::Start(len.saturating_sub(64)))?;
        f.read_to_string(&mut tail)
    });
    read.is_ok() && tail.contains("\"truncated\":true")
}

/// Rows shown on a screen unless --limit says otherwise.
const SCREEN_ROWS: u64 = 1000;

/// The most rows this server returns for one query (its `/api/health` limits); the screen
/// default for a server too old to say.
fn server_row_cap(client: &crate::client::Client) -> u64 {
    client
        .get("/api/health")
        .ok()
        .and_then(|h| h["limits"]["query_max_rows"].as_u64())
        .unwrap_or(SCREEN_ROWS)
}
