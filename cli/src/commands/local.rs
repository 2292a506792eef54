//! `svc query --local`: DataFusion (the server's engine and dialect) over the workspace's
//! pulled tables and snapshots, with no server call. Read-only: DDL, DML and statements such
//! as `COPY` are refused.

use std::path::Path;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::execution::context::SQLOptions;
use datafusion::prelude::{ParquetReadOptions, SessionConfig, SessionContext};
use serde_json::{json, Map, Value};

use crate::exit::{CliError, Exit, Result};
use crate::output::{encode_error, write_atomically, BatchWriter, Format};
use crate::render;

/// Registers every parquet file of `<workspace>/tables` and `<workspace>/snapshots` under its
/// file stem (a snapshot wins over a table of the same name).
async fn context(root: &Path) -> Result<(SessionContext, usize)> {
    let mut config = SessionConfig::new();
    config.options_mut().sql_parser.enable_ident_normalization = false;
    let ctx = SessionContext::new_with_config(config);
    let mut registered = 0;
    for sub in ["tables", "snapshots"] {
        let Ok(entries) = std::fs::read_dir(root.join(sub)) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(stem) = name
                .strip_suffix(".parquet")
                .filter(|s| !s.starts_with('.'))
            else {
                continue;
            };
            let _ = ctx.deregister_table(stem);
            ctx.register_parquet(
                stem,
                path.to_string_lossy().as_ref(),
                ParquetReadOptions::default(),
            )
            .await
            .map_err(|e| {
                CliError::new(
                    Exit::Other,
                    format!("Error: cannot read {}: {e}", path.display()),
                )
            })?;
            registered += 1;
        }
    }
    Ok((ctx, registered))
}

/// Runs `sql` locally and prints or writes the result like the server would.
pub fn run(
    root: &Path,
    sql: &str,
    limit: u64,
    format: Format,
    output: Option<&Path>,
) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let (schema, batches) = rt.block_on(async {
        let (ctx, registered) = context(root).await?;
        let options = SQLOptions::new()
            .with_allow_ddl(false)
            .with_allow_dml(false)
            .with_allow_statements(false);
        let fail = |e: datafusion::error::DataFusionError| {
            let mut err = CliError::new(Exit::Other, format!("Error: {}", e.find_root()));
            if registered == 0 {
                err = err.hint("the workspace has no tables yet: svc pull, or svc snapshot create");
            }
            err
        };
        let df = ctx.sql_with_options(sql, options).await.map_err(&fail)?;
        let cap = usize::try_from(limit).unwrap_or(usize::MAX);
        let df = df.limit(0, Some(cap.saturating_add(1))).map_err(&fail)?;
        let schema: SchemaRef = df.schema().as_arrow().clone().into();
        let batches = df.collect().await.map_err(&fail)?;
        Ok::<_, CliError>((schema, batches))
    })?;
    let (batches, truncated) = cut(batches, usize::try_from(limit).unwrap_or(usize::MAX));
    let mut body: Vec<u8> = Vec::new();
    match format {
        Format::Table | Format::Json => {
            let doc = document(&schema, &batches, truncated)?;
            if output.is_none() {
                render::result(&doc, format == Format::Json, limit);
                return Ok(());
            }
            body = serde_json::to_vec(&doc).unwrap_or_default();
        }
        Format::Csv | Format::Arrow | Format::Parquet => {
            let mut w = BatchWriter::new(format, &schema, &mut body)?;
            for b in batches.iter().filter(|b| b.num_rows() > 0) {
                w.write(b)?;
            }
            w.finish(truncated)?;
        }
    }
    match output {
        Some(path) => {
            write_atomically(path, &mut &body[..])?;
        }
        None => {
            use std::io::Write;
            std::io::stdout().write_all(&body)?;
        }
    }
    if truncated {
        render::truncated(limit);
    }
    Ok(())
}

/// At most `limit` rows, and whether there were more.
fn cut(batches: Vec<RecordBatch>, limit: usize) -> (Vec<RecordBatch>, bool) {
    let mut left = limit;
    let mut out = Vec::new();
    let mut truncated = false;
    for b in batches {
        if left == 0 {
            truncated |= b.num_rows() > 0;
            continue;
        }
        if b.num_rows() > left {
            out.push(b.slice(0, left));
            truncated = true;
            left = 0;
        } else {
            left -= b.num_rows();
            out.push(b);
        }
    }
    (out, truncated)
}

/// The server's JSON result shape: columns, column_types, rows as arrays, row_count, truncated.
fn document(schema: &SchemaRef, batches: &[RecordBatch], truncated: bool) -> Result<Value> {
    let mut buf = Vec::new();
    {
        let mut w = datafusion::arrow::json::ArrayWriter::new(&mut buf);
        for b in batches {
            w.write(b).map_err(encode_error)?;
        }
        w.finish().map_err(encode_error)?;
    }
    let objects: Vec<Map<String, Value>> = if buf.is_empty() {
        Vec::new()
    } else {
        serde_json::from_slice(&buf).map_err(encode_error)?
    };
    let names: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            Value::Array(
                names
                    .iter()
                    .map(|n| o.get(n).cloned().unwrap_or(Value::Null))
                    .collect(),
            )
        })
        .collect();
    Ok(json!({
        "columns": names,
        "column_types": schema.fields().iter().map(|f| f.data_type().to_string()).collect::<Vec<_>>(),
        "row_count": rows.len(),
        "rows": rows,
        "truncated": truncated,
    }))
}
