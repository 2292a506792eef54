//! Materialized tables: a row's `source_query` runs on the warehouse and its result becomes
//! the local parquet file that sample, schema, query and scan read.
//!
//! A dry run checks the cost first (`max_bytes_per_materialize`; 0 turns the check off); a
//! dry run that fails stops the sync, so the budget cannot be bypassed by an unparsable
//! estimate. Pages are written as they arrive through [`AtomicParquet`], so the previous
//! copy stays readable until the new one is complete.

use serde_json::json;
use svc_driver_parquet::{AtomicParquet, ParquetFiles};
use svc_plugin_api::{DriverError, ErrorKind, Result, SyncProgress, SyncReport, TableRef};

use crate::client::{arrow_schema, Client, SqlOrigin};
use crate::config::WarehouseConfig;

/// Runs the table's `source_query` and replaces its parquet file with the result.
pub(crate) async fn materialize(
    client: &Client,
    config: &WarehouseConfig,
    files: &ParquetFiles,
    table: &TableRef,
    progress: &SyncProgress,
) -> Result<SyncReport> {
    let sql = table
        .source_query
        .as_deref()
        .filter(|q| !q.trim().is_empty())
        .ok_or_else(|| {
            DriverError::new(
                ErrorKind::BadRequest,
                format!("Materialized table '{}' has no source_query", table.id),
            )
        })?;
    let cap = config.max_bytes_per_materialize;
    if cap > 0 {
        let estimate = client.dry_run(sql, SqlOrigin::User).await?;
        if estimate > cap {
            return Err(DriverError::new(
                ErrorKind::RemoteScanTooLarge,
                format!(
                    "dry-run estimate {estimate} bytes exceeds cap {cap} for table '{}'",
                    table.id
                ),
            )
            .with_code("materialize_budget_exceeded")
            .with_details(json!({"estimated_bytes": estimate, "limit": cap,
                "hint": "raise max_bytes_per_materialize under [data_source.warehouse], or narrow the source_query"})));
        }
    }
    let target = files.path(table)?;
    let mut pages = client.pages(sql, u64::MAX, SqlOrigin::User).await?;
    let mut out: Option<AtomicParquet> = None;
    while let Some(batch) = pages.next_batch().await? {
        let writer = match &mut out {
            Some(w) => w,
            None => out.insert(AtomicParquet::create(&target, batch.schema())?),
        };
        writer.write(&batch)?;
        progress.advance(batch.num_rows() as u64, writer.bytes());
    }
    // An empty result is still a table: its columns, no rows.
    let writer = match out {
        Some(w) => w,
        None => AtomicParquet::create(&target, arrow_schema(pages.fields().unwrap_or_default()))?,
    };
    writer.commit()
}
