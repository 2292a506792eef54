//! Tables that live in a BigQuery-compatible REST warehouse (`source_type = "warehouse"`).
//!
//! Remote rows are read through a small typed REST client ([`client`]) against the configured
//! endpoint (the real API or an emulator); materialized rows are read from their local parquet
//! copy. Every identifier that goes into generated SQL is validated first. Until a project is
//! configured every remote read answers `not_configured` with the key to set.
//!
//! Remote reads push projection, the filters [`sql`] can render exactly, and the limit into
//! the generated SQL, and stream page by page. A materialized row's `sync` runs its
//! `source_query` and writes the result atomically ([`materialize`]).
//!
//! Calls authenticate with nothing (an emulator), a static token, or a service-account key
//! ([`auth`]).
//!
//! A query that reads only remote tables is pushed down whole ([`pushdown`]).
//!
//! Not yet built: the Storage Read API.

pub mod auth;
pub mod client;
pub mod config;
mod materialize;
mod provider;
mod pushdown;
mod sql;

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::json;
use svc_driver_parquet::ParquetFiles;
use svc_plugin_api::{
    Caller, ColumnInfo, DriverError, ErrorKind, RecordBatch, Result, ScanEstimate, ScanSpec,
    SourceDriver, SyncMode, SyncProgress, SyncReport, TableMetadata, TableProvider, TableRef,
    TableSchema,
};

use client::{Client, SqlOrigin};
pub use config::WarehouseConfig;

/// The `warehouse` source driver.
#[derive(Debug, Clone)]
pub struct WarehouseDriver {
    materialized: ParquetFiles,
    config: Arc<WarehouseConfig>,
    client: Client,
}

impl WarehouseDriver {
    /// The driver over a data directory (for materialized copies) and a warehouse config.
    pub fn new(data_dir: impl Into<PathBuf>, config: WarehouseConfig) -> Self {
        let config = Arc::new(config);
        Self {
            materialized: ParquetFiles::new(data_dir),
            client: Client::new(config.clone()),
            config,
        }
    }

    /// What a read names in `FROM`: the table path, or with `legacy_wrap_views` a view
    /// wrapped in `(SELECT * FROM view)`, as releases before 0.14 read views.
    fn read_from(&self, loc: &Location, info: &client::TableInfo) -> String {
        let is_view = info
            .table_type
            .as_deref()
            .is_some_and(|t| t.contains("VIEW"));
        if self.config.legacy_wrap_views && is_view {
            format!("(SELECT * FROM {})", loc.sql_path())
        } else {
            loc.sql_path()
        }
    }

    fn not_configured() -> DriverError {
        DriverError::new(ErrorKind::NotConfigured, "The warehouse is not configured on this instance").with_details(
            json!({ "hint": "set `project` under [data_source.warehouse] in svc.toml, or SVC_WAREHOUSE_PROJECT" }),
        )
    }

    /// Project, dataset and table of a remote row, each checked before it reaches SQL or a
    /// URL. An unconfigured warehouse wins over a bad identifier.
    fn location(&self, table: &TableRef) -> Result<Location> {
        let project = self
            .config
            .data_project()
            .ok_or_else(Self::not_configured)?;
        let dataset = table.bucket.as_deref().unwrap_or_default();
        let name = table.source_name();
        let bad = [
            ("project", project, is_project_id(project)),
            ("bucket", dataset, is_identifier(dataset)),
            ("source_table", name, is_identifier(name)),
        ]
        .into_iter()
        .find(|(_, _, ok)| !ok);
        if let Some((what, value, _)) = bad {
            return Err(DriverError::new(
                ErrorKind::UnsafeIdentifier,
                format!("Table '{}': {what} '{value}' is not a safe warehouse identifier; refusing to build SQL", table.id),
            )
            .with_details(json!({"field": what})));
        }
        Ok(Location {
            project: project.to_owned(),
            dataset: dataset.to_owned(),
            table: name.to_owned(),
        })
    }
}

/// A validated remote table address.
#[derive(Debug, Clone)]
struct Location {
    project: String,
    dataset: String,
    table: String,
}

impl Location {
    fn sql_path(&self) -> String {
        format!("`{}.{}.{}`", self.project, self.dataset, self.table)
    }
}

/// A dataset or table name: letters, digits, `_` and `-`, no dots, quotes or spaces.
fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphanumeric() || c == '_')
        && s.len() <= 1024
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// The GCP project id grammar: `^[a-z][a-z0-9-]{4,28}[a-z0-9]$`.
fn is_project_id(s: &str) -> bool {
    let b = s.as_bytes();
    (6..=30).contains(&b.len())
        && b[0].is_ascii_lowercase()
        && (b[b.len() - 1].is_ascii_lowercase() || b[b.len() - 1].is_ascii_digit())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

fn is_materialized(table: &TableRef) -> bool {
    table.query_mode == "materialized"
}

fn number(v: &Option<String>) -> Option<i64> {
    v.as_deref().and_then(|s| s.parse().ok())
}

#[async_trait::async_trait]
impl SourceDriver for WarehouseDriver {
    fn source_type(&self) -> &'static str {
        "warehouse"
    }

    fn sql_flavor(&self, table: &TableRef) -> &'static str {
        if is_materialized(table) {
            "datafusion"
        } else {
            "bigquery"
        }
    }

    async fn schema(&self, table: &TableRef, _caller: &Caller) -> Result<TableSchema> {
        if is_materialized(table) {
            return self.materialized.schema(table).await;
        }
        let loc = self.location(table)?;
        let info = self
            .client
            .table(&loc.project, &loc.dataset, &loc.table)
            .await?;
        let columns = info
            .fields()
            .iter()
            .map(|f| ColumnInfo {
                name: f.name.clone(),
                data_type: svc_plugin_api::type_name(&client::arrow_type(f)),
                nullable: f.mode.as_deref() != Some("REQUIRED"),
                description: f.description.clone().unwrap_or_default(),
            })
            .collect();
        Ok(TableSchema {
            columns,
            partition_by: info
                .time_partitioning
                .as_ref()
                .and_then(|p| p["field"].as_str().map(str::to_owned)),
            clustered_by: clustering(&info),
        })
    }

    async fn sample(
        &self,
        table: &TableRef,
        n: usize,
        _caller: &Caller,
    ) -> Result<Vec<RecordBatch>> {
        if is_materialized(table) {
            return self.materialized.sample(table, n).await;
        }
        let loc = self.location(table)?;
        let source = if self.config.legacy_wrap_views {
            let info = self
                .client
                .table(&loc.project, &loc.dataset, &loc.table)
                .await?;
            self.read_from(&loc, &info)
        } else {
            loc.sql_path()
        };
        let sql = format!("SELECT * FROM {source} LIMIT {n}");
        let result = self.client.query(&sql, n as u64, SqlOrigin::Server).await?;
        Ok(vec![result.batch])
    }

    async fn table_provider(
        &self,
        table: &TableRef,
        _caller: &Caller,
    ) -> Result<Arc<dyn TableProvider>> {
        if is_materialized(table) {
            return self.materialized.table_provider(table).await;
        }
        let loc = self.location(table)?;
        let info = self
            .client
            .table(&loc.project, &loc.dataset, &loc.table)
            .await?;
        Ok(Arc::new(provider::RemoteTable::new(
            self.client.clone(),
            self.read_from(&loc, &info),
            client::arrow_schema(info.fields()),
        )))
    }

    async fn refresh_metadata(&self, table: &TableRef) -> Result<TableMetadata> {
        let loc = self.location(table)?;
        let info = self
            .client
            .table(&loc.project, &loc.dataset, &loc.table)
            .await?;
        let entity_type = info
            .table_type
            .as_deref()
            .map(|t| t.replace('_', " "))
            .map(|t| match t.as_str() {
                "TABLE" => "BASE TABLE".to_owned(),
                _ => t,
            });
        let is_view = entity_type.as_deref().is_some_and(|t| t.contains("VIEW"));
        let size = number(&info.num_active_logical_bytes)
            .map(|a| a + number(&info.num_long_term_logical_bytes).unwrap_or(0));
        Ok(TableMetadata {
            rows: if is_view {
                None
            } else {
                number(&info.num_rows)
            },
            size_bytes: if is_view { None } else { size },
            partition_by: info
                .time_partitioning
                .as_ref()
                .and_then(|p| p["field"].as_str().map(str::to_owned)),
            clustered_by: clustering(&info),
            known_columns: info.fields().iter().map(|f| f.name.clone()).collect(),
            column_types: info.fields().iter().map(|f| f.field_type.clone()).collect(),
            entity_type,
        })
    }

    async fn estimate(&self, table: &TableRef, scan: &ScanSpec) -> Result<ScanEstimate> {
        if is_materialized(table) {
            return self.materialized.estimate(table, scan).await;
        }
        let loc = self.location(table)?;
        let columns = match &scan.columns {
            Some(c) if c.iter().all(|c| is_identifier(c)) => c
                .iter()
                .map(|c| format!("`{c}`"))
                .collect::<Vec<_>>()
                .join(", "),
            _ => "*".to_owned(),
        };
        let sql = format!("SELECT {columns} FROM {}", loc.sql_path());
        let bytes = self.client.dry_run(&sql, SqlOrigin::User).await?;
        Ok(ScanEstimate {
            bytes,
            rows: None,
            exact: false,
            guard_bytes: Some(self.config.max_scan_bytes),
        })
    }

    async fn push_down(
        &self,
        plan: &svc_plugin_api::datafusion::logical_expr::LogicalPlan,
        tables: &[TableRef],
    ) -> Result<Option<Arc<dyn TableProvider>>> {
        // With legacy view wrapping each table is read through its own provider, which
        // knows whether it is a view.
        if tables.is_empty() || tables.iter().any(is_materialized) || self.config.legacy_wrap_views
        {
            return Ok(None);
        }
        let mut addresses = std::collections::HashMap::new();
        for t in tables {
            let loc = self.location(t)?;
            addresses.insert(
                t.id.clone(),
                pushdown::Address {
                    project: loc.project,
                    dataset: loc.dataset,
                    table: loc.table,
                },
            );
        }
        let Some(sql) = pushdown::warehouse_sql(plan, &addresses) else {
            return Ok(None);
        };
        Ok(Some(Arc::new(pushdown::RemoteQuery {
            client: self.client.clone(),
            sql,
            schema: Arc::new(plan.schema().as_arrow().clone()),
        })))
    }

    async fn sync(
        &self,
        table: &TableRef,
        _mode: SyncMode,
        progress: &SyncProgress,
    ) -> Result<SyncReport> {
        if !is_materialized(table) {
            return Err(DriverError::unsupported(format!(
                "'{}' is read from the warehouse directly (query_mode {}); only materialized tables sync",
                table.id, table.query_mode
            )));
        }
        self.config
            .data_project()
            .ok_or_else(Self::not_configured)?;
        materialize::materialize(
            &self.client,
            &self.config,
            &self.materialized,
            table,
            progress,
        )
        .await
    }

    fn local_file(&self, table: &TableRef) -> Option<PathBuf> {
        is_materialized(table)
            .then(|| self.materialized.path(table).ok())
            .flatten()
    }
}

fn clustering(info: &client::TableInfo) -> Vec<String> {
    info.clustering
        .as_ref()
        .and_then(|c| c["fields"].as_array())
        .map(|f| {
            f.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_refuse_quotes_dots_and_spaces() {
        for ok in ["orders", "my-table_1", "_x"] {
            assert!(is_identifier(ok), "{ok}");
        }
        for bad in ["", "a`b", "a'b", "a b", "..", "a.b", "-x", "名前"] {
            assert!(!is_identifier(bad), "{bad}");
        }
        assert!(is_project_id("demo-proj"));
        for bad in ["Demo-proj", "demo", "demo-proj-", "1demo-proj", "demo_proj"] {
            assert!(!is_project_id(bad), "{bad}");
        }
    }
}
