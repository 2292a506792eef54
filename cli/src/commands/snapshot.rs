//! `svc snapshot`: a validated scan of one table saved as local parquet, with its estimate
//! first and a meta file beside it.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use datafusion::arrow::ipc::reader::StreamReader;
use datafusion::parquet::arrow::ArrowWriter;
use serde_json::{json, Value};

use super::Ctx;
use crate::exit::{CliError, Exit, Result};
use crate::progress;
use crate::render::{self, cell};
use crate::workspace::{self, Temp};

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Scan a table into `<workspace>/snapshots/<name>.parquet`.
    Create(CreateArgs),
    /// Local snapshots.
    List {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Fetch a snapshot again with its saved parameters.
    Refresh {
        /// Snapshot name.
        name: String,
    },
    /// Delete a snapshot.
    Drop {
        /// Snapshot name.
        name: String,
    },
}

#[derive(Args, Debug, Clone, Default)]
pub struct CreateArgs {
    /// Table id.
    table: String,
    /// Columns, comma-separated (default: all).
    #[arg(long, value_delimiter = ',')]
    select: Vec<String>,
    /// A predicate over the table's columns (validated by the server).
    #[arg(long = "where")]
    predicate: Option<String>,
    /// Sort columns, comma-separated (`col` or `col DESC`).
    #[arg(long, value_delimiter = ',')]
    order_by: Vec<String>,
    /// Most rows.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    limit: Option<u64>,
    /// Snapshot name (default: the table id): letters, digits, `_`, at most 64.
    #[arg(long = "as")]
    name: Option<String>,
    /// Print the server's estimate and stop.
    #[arg(long)]
    estimate: bool,
    /// Replace an existing snapshot.
    #[arg(long)]
    force: bool,
}

/// Snapshot names are file names: `^[A-Za-z_][A-Za-z0-9_]{0,63}$`.
fn check_name(name: &str) -> Result<()> {
    let ok = (1..=64).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(CliError::usage(format!(
            "Error: snapshot name '{name}' must be letters, digits and _ (not starting with a digit), at most 64"
        )))
    }
}

fn paths(root: &Path, name: &str) -> Result<(PathBuf, PathBuf)> {
    let dir = workspace::dir(root, "snapshots")?;
    Ok((
        dir.join(format!("{name}.parquet")),
        dir.join(format!("{name}.meta.json")),
    ))
}

/// Runs an `svc snapshot` command.
pub fn run(ctx: &Ctx, root: &Path, cmd: Command) -> Result<()> {
    match cmd {
        Command::Create(args) => create(ctx, root, args),
        Command::List { json } => list(root, json),
        Command::Refresh { name } => {
            check_name(&name)?;
            let (_, meta_path) = paths(root, &name)?;
            let meta: Value = std::fs::read(&meta_path)
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok())
                .ok_or_else(|| {
                    CliError::new(Exit::Denied, format!("Error: no snapshot '{name}'"))
                })?;
            let strings = |k: &str| -> Vec<String> {
                meta[k]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            };
            create(
                ctx,
                root,
                CreateArgs {
                    table: cell(&meta["table"]),
                    select: strings("select"),
                    predicate: meta["where"].as_str().map(str::to_owned),
                    order_by: strings("order_by"),
                    limit: meta["limit"].as_u64(),
                    name: Some(name),
                    estimate: false,
                    force: true,
                },
            )
        }
        Command::Drop { name } => {
            check_name(&name)?;
            let (data, meta) = paths(root, &name)?;
            if !data.exists() {
                return Err(CliError::new(
                    Exit::Denied,
                    format!("Error: no snapshot '{name}'"),
                ));
            }
            std::fs::remove_file(&data)?;
            let _ = std::fs::remove_file(&meta);
            eprintln!("dropped snapshot {name}");
            Ok(())
        }
    }
}

fn create(ctx: &Ctx, root: &Path, args: CreateArgs) -> Result<()> {
    let name = args
        .name
        .clone()
        .unwrap_or_else(|| args.table.replace(['.', '-'], "_"));
    check_name(&name)?;
    let (data_path, meta_path) = paths(root, &name)?;
    if data_path.exists() && !args.force && !args.estimate {
        return Err(CliError::new(
            Exit::Exists,
            format!("Error: snapshot '{name}' exists ({})", data_path.display()),
        )
        .hint("add --force to replace it"));
    }
    let mut body = json!({"table_id": args.table});
    if !args.select.is_empty() {
        body["select"] = json!(args.select);
    }
    if let Some(p) = &args.predicate {
        body["where"] = json!(p);
    }
    if !args.order_by.is_empty() {
        body["order_by"] = json!(args.order_by);
    }
    if let Some(l) = args.limit {
        body["limit"] = json!(l);
    }
    let client = ctx.authed()?;
    let estimate = client.json(reqwest::Method::POST, "/api/v2/scan/estimate", Some(&body))?;
    eprintln!(
        "estimate: {} bytes scanned, {} rows{}",
        estimate["estimated_bytes"]
            .as_u64()
            .map_or("unknown".into(), |b| b.to_string()),
        estimate["estimated_rows"]
            .as_u64()
            .map_or("unknown".into(), |r| r.to_string()),
        if estimate["would_exceed_guard"] == true {
            " — above the server's scan guard"
        } else {
            ""
        }
    );
    if args.estimate {
        render::print_json(&estimate);
        return Ok(());
    }

    body["format"] = json!("arrow");
    let resp = client.post_long("/api/v2/scan", &body)?;
    let truncated = resp
        .headers()
        .get("x-svc-truncated")
        .and_then(|v| v.to_str().ok())
        == Some("true");
    let reader = StreamReader::try_new(resp, None).map_err(|e| {
        CliError::new(
            Exit::Server,
            format!("Error: the scan did not start an Arrow stream: {e}"),
        )
    })?;
    let temp = Temp::for_target(&data_path);
    let file = std::fs::File::create(temp.path()).map_err(|e| write_error(&data_path, e))?;
    let mut writer = ArrowWriter::try_new(file, reader.schema(), None)
        .map_err(|e| write_error(&data_path, e))?;
    let bar = progress::counter("rows", &format!("snapshot {name}"));
    let mut rows = 0u64;
    for batch in reader {
        let batch = batch
            .map_err(|e| CliError::new(Exit::Server, format!("Error: the scan broke off: {e}")))?;
        rows += batch.num_rows() as u64;
        writer
            .write(&batch)
            .map_err(|e| write_error(&data_path, e))?;
        bar.inc(batch.num_rows() as u64);
    }
    let file = writer
        .into_inner()
        .map_err(|e| write_error(&data_path, e))?;
    file.sync_all().map_err(|e| write_error(&data_path, e))?;
    bar.finish_and_clear();
    let bytes = std::fs::metadata(temp.path()).map(|m| m.len()).unwrap_or(0);
    let meta = json!({
        "name": name, "table": args.table, "select": args.select, "where": args.predicate,
        "order_by": args.order_by, "limit": args.limit, "fetched_at": now(), "rows": rows,
        "bytes": bytes, "truncated": truncated, "estimated_bytes": estimate["estimated_bytes"],
    });
    let meta_temp = Temp::for_target(&meta_path);
    std::fs::write(
        meta_temp.path(),
        serde_json::to_vec_pretty(&meta).unwrap_or_default(),
    )
    .map_err(|e| write_error(&meta_path, e))?;
    // Both files are complete before either takes its name: a snapshot never appears
    // without its meta file.
    temp.persist()?;
    meta_temp.persist()?;
    eprintln!(
        "snapshot {name}: {rows} rows, {bytes} bytes -> {}",
        data_path.display()
    );
    if truncated {
        eprintln!("(the server's row cap cut the scan; narrow it with --where or --limit)");
    }
    Ok(())
}

fn write_error(path: &Path, e: impl std::fmt::Display) -> CliError {
    CliError::new(
        Exit::Other,
        format!("Error: writing {} failed: {e}", path.display()),
    )
    .hint("nothing was kept; check the workspace is writable and has room")
}

/// Now as RFC 3339 UTC (`2026-11-22T12:00:00Z`).
fn now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Days since 1970-01-01 to a civil date (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3_600,
        rest % 3_600 / 60,
        rest % 60
    )
}

fn list(root: &Path, json: bool) -> Result<()> {
    let dir = workspace::dir(root, "snapshots")?;
    let mut metas: Vec<Value> = std::fs::read_dir(&dir)?
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".meta.json"))
        .filter_map(|e| std::fs::read(e.path()).ok())
        .filter_map(|b| serde_json::from_slice(&b).ok())
        .collect();
    metas.sort_by_key(|m| cell(&m["name"]));
    if json {
        render::print_json(&Value::Array(metas));
        return Ok(());
    }
    let headers = ["NAME", "TABLE", "ROWS", "BYTES", "WHERE", "FETCHED"].map(String::from);
    let rows: Vec<Vec<String>> = metas
        .iter()
        .map(|m| {
            ["name", "table", "rows", "bytes", "where", "fetched_at"]
                .iter()
                .map(|k| cell(&m[*k]))
                .collect()
        })
        .collect();
    render::table(&headers, &rows);
    Ok(())
}
