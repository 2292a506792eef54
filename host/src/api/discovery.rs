//! Discovery: `GET /api/v2/catalog`, `/api/v2/schema/{table_id}`, `/api/v2/sample/{table_id}`
//! and `GET /api/data/{table_id}/download`.
//!
//! Every per-table endpoint follows the same order: registry lookup (404), access check
//! (403), and only then a cache or the driver — a cached answer is never served to a caller
//! who fails the check.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use chrono::Utc;
use poem::Body;
use poem_openapi::param::{Header, Path, Query};
use poem_openapi::payload::{Binary, Json};
use poem_openapi::types::ToJSON;
use poem_openapi::{ApiResponse, Object, OpenApi};
use serde_json::{json, Value};
use svc_auth::access::{self, RegistrySnapshot};
use svc_auth::Caller;
use svc_catalog::examples::{self, Dialect};
use svc_core::{Error, ErrorKind};
use svc_plugin_api::SourceDriver;
use svc_query::encode;
use svc_store::audit::Event;
use svc_store::metadata::MetadataRow;
use svc_store::registry::{QueryMode, RegistryRow};

use super::encoded::EncodedJson;
use super::{ApiResult, BearerAuth, Tag};
use crate::discovery::SampleKey;
use crate::state::AppState;

pub struct DiscoveryApi {
    pub state: Arc<AppState>,
}

/// One table in the catalog.
#[derive(Object, Clone)]
pub struct CatalogRow {
    /// Table id.
    pub(crate) id: String,
    /// Display name.
    pub(crate) name: String,
    /// Description (empty when none).
    pub(crate) description: String,
    /// Source kind.
    pub(crate) source_type: String,
    /// `local`, `remote`, `materialized` or `internal`.
    pub(crate) query_mode: String,
    /// SQL dialect to use for this table.
    pub(crate) sql_flavor: String,
    /// Example WHERE clauses, validated against the table's known columns.
    pub(crate) where_examples: Vec<String>,
    /// How to fetch data with the `svc` client.
    pub(crate) fetch_via: String,
    /// `small`, `medium`, `large` or `very_large`; null when unknown.
    pub(crate) rough_size_hint: Option<String>,
    /// Row count (remote tables, from the metadata cache).
    pub(crate) rows: Option<i64>,
    /// Logical size in bytes (remote tables, from the metadata cache).
    pub(crate) size_bytes: Option<i64>,
    /// Partitioning column.
    pub(crate) partition_by: Option<String>,
    /// Clustering columns.
    pub(crate) clustered_by: Vec<String>,
    /// `BASE TABLE`, `VIEW` or `MATERIALIZED VIEW` (remote tables).
    pub(crate) entity_type: Option<String>,
    /// `fresh`, `stale`, `never_fetched`, `error` or `not_applicable`: the latest refresh's
    /// outcome (`error` even when older metadata is still shown; its text is in
    /// `GET /api/v2/metadata-cache/status`).
    pub(crate) metadata_freshness: String,
}

/// The catalog.
#[derive(Object)]
struct Catalog {
    /// Tables visible to the caller, by name.
    tables: Vec<CatalogRow>,
    /// Server time (RFC 3339).
    server_time: String,
}

/// One column.
#[derive(Object, Clone)]
pub struct Column {
    /// Name.
    pub(crate) name: String,
    /// Type as the source names it.
    #[oai(rename = "type")]
    pub(crate) data_type: String,
    /// Whether nulls may occur.
    pub(crate) nullable: bool,
    /// Description (empty when none).
    pub(crate) description: String,
}

impl From<svc_plugin_api::ColumnInfo> for Column {
    fn from(c: svc_plugin_api::ColumnInfo) -> Self {
        Self {
            name: c.name,
            data_type: c.data_type,
            nullable: c.nullable,
            description: c.description,
        }
    }
}

/// A table's columns.
#[derive(Object, Clone)]
pub struct SchemaResponse {
    /// Table id.
    pub(crate) table_id: String,
    /// Source kind.
    pub(crate) source_type: String,
    /// SQL dialect.
    pub(crate) sql_flavor: String,
    /// Columns in source order.
    pub(crate) columns: Vec<Column>,
    /// Partitioning column.
    pub(crate) partition_by: Option<String>,
    /// Clustering columns.
    pub(crate) clustered_by: Vec<String>,
    /// Dialect hints for writing WHERE clauses (empty for the default dialect).
    pub(crate) where_dialect_hints: Value,
}

/// A caller's catalog rows, encoded once, as cached and served.
pub struct CachedCatalog {
    /// Tables visible to the caller, in catalog order.
    pub rows: Vec<CatalogRow>,
    /// `rows` as a JSON array.
    tables_json: bytes::Bytes,
    /// The views the rows were built from, held so that no other snapshot can take their
    /// addresses (the cache key) while this entry lives: a hit is always built from the
    /// very views the key names.
    _views: (Arc<RegistrySnapshot>, Option<Arc<HashSet<String>>>),
}

impl std::fmt::Debug for CachedCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CachedCatalog({} rows)", self.rows.len())
    }
}

impl CachedCatalog {
    /// The cache key of a caller's view: the registry snapshot and the caller's grant set
    /// (none for administrators) by identity. Any registry or access change replaces one of
    /// them, so a body built before the change is never found under the new key.
    fn key(
        registry: &Arc<RegistrySnapshot>,
        readable: Option<&Arc<HashSet<String>>>,
    ) -> (usize, usize) {
        (
            Arc::as_ptr(registry) as usize,
            readable.map_or(0, |r| Arc::as_ptr(r) as usize),
        )
    }

    /// The `GET /api/v2/catalog` body at `server_time`, from the encoded rows.
    fn body(&self, server_time: &str) -> EncodedJson<Catalog> {
        let time = serde_json::to_string(server_time).expect("strings encode");
        let mut out = Vec::with_capacity(self.tables_json.len() + time.len() + 32);
        out.extend_from_slice(b"{\"tables\":");
        out.extend_from_slice(&self.tables_json);
        out.extend_from_slice(b",\"server_time\":");
        out.extend_from_slice(time.as_bytes());
        out.push(b'}');
        EncodedJson::from_encoded(out.into())
    }
}

/// A sample encoded once, as cached and served.
#[derive(Debug)]
pub struct CachedSample {
    /// Rows in the body.
    pub rows: usize,
    /// The encoded [`SampleResponse`].
    pub body: EncodedJson<SampleResponse>,
}

/// The first rows of a table.
#[derive(Object, Clone)]
pub struct SampleResponse {
    /// Table id.
    table_id: String,
    /// Rows as objects (column name to value); NaN and infinities are null.
    rows: Vec<Value>,
    /// The table's source kind.
    source: String,
}

#[derive(ApiResponse)]
enum Download {
    /// The table's parquet file.
    #[oai(status = 200)]
    File(
        Binary<Body>,
        #[oai(header = "ETag")] String,
        #[oai(header = "Content-Disposition")] String,
    ),
    /// The caller's copy (`If-None-Match`) is current.
    #[oai(status = 304)]
    NotModified(#[oai(header = "ETag")] String),
}

/// `rough_size_hint` buckets (inclusive upper bounds).
fn size_hint(bytes: Option<u64>) -> Option<String> {
    const MIB: u64 = 1024 * 1024;
    let b = bytes?;
    Some(
        match b {
            _ if b <= 100 * MIB => "small",
            _ if b <= 1024 * MIB => "medium",
            _ if b <= 10 * 1024 * MIB => "large",
            _ => "very_large",
        }
        .into(),
    )
}

/// How long a metadata refresh counts as fresh: twice the refresh interval. Read once per
/// process, like the scheduler that sets the interval.
fn freshness_window_secs() -> i64 {
    static WINDOW: std::sync::OnceLock<i64> = std::sync::OnceLock::new();
    *WINDOW.get_or_init(|| {
        let interval = std::env::var("SCHEDULER_WAREHOUSE_METADATA_REFRESH_INTERVAL")
            .ok()
            .and_then(|v| v.parse::<i64>().ok())
            .filter(|v| *v > 0)
            .unwrap_or(14_400);
        2 * interval
    })
}

/// Freshness of a metadata cache row: the latest refresh's outcome. A success clears the
/// error, so an error still recorded is newer than any success and wins over the age of the
/// metadata kept from before it.
pub(crate) fn freshness(meta: Option<&MetadataRow>) -> &'static str {
    let Some(m) = meta else {
        return "never_fetched";
    };
    if m.error_at.is_some() {
        return "error";
    }
    match m
        .refreshed_at
        .as_deref()
        .and_then(svc_core::clock::parse_ts)
    {
        Some(t) if (Utc::now() - t).num_seconds() <= freshness_window_secs() => "fresh",
        Some(_) => "stale",
        None => "never_fetched",
    }
}

impl DiscoveryApi {
    fn driver(&self, row: &RegistryRow) -> svc_core::Result<&Arc<dyn SourceDriver>> {
        self.state.drivers.get(&row.source_type).ok_or_else(|| {
            Error::new(
                ErrorKind::NotImplemented,
                format!(
                    "Table '{}' has source_type '{}', which this server has no driver for",
                    row.id, row.source_type
                ),
            )
        })
    }

    /// Registry lookup (404) then access check (403): the order every table endpoint uses.
    async fn readable(
        &self,
        caller: &Caller,
        table_id: &str,
    ) -> svc_core::Result<Arc<RegistryRow>> {
        self.state.access.readable_table(caller, table_id).await
    }

    fn catalog_row(&self, row: &RegistryRow, meta: Option<&MetadataRow>) -> CatalogRow {
        let driver = self.state.drivers.get(&row.source_type);
        let table = row.table_ref();
        let mut out = CatalogRow {
            id: row.id.clone(),
            name: row.name.clone(),
            description: row.description.clone().unwrap_or_default(),
            source_type: row.source_type.clone(),
            query_mode: row.query_mode.as_str().into(),
            sql_flavor: driver
                .map(|d| d.sql_flavor(&table))
                .unwrap_or("datafusion")
                .into(),
            where_examples: Vec::new(),
            fetch_via: "already local — query directly via `svc query`".into(),
            rough_size_hint: None,
            rows: None,
            size_bytes: None,
            partition_by: None,
            clustered_by: Vec::new(),
            entity_type: None,
            metadata_freshness: "not_applicable".into(),
        };
        match row.query_mode {
            QueryMode::Local | QueryMode::Materialized => {
                out.rough_size_hint = size_hint(driver.and_then(|d| d.size_on_disk(&table)));
                if let Some(path) = driver.and_then(|d| d.local_file(&table)) {
                    out.where_examples = self.state.discovery.examples.for_file(&path);
                }
            }
            QueryMode::Remote => {
                out.fetch_via = format!(
                    "svc snapshot create {} --select <cols> --where '<predicate>' --limit <N>",
                    row.id
                );
                out.metadata_freshness = freshness(meta).into();
                if let Some(m) = meta.map(|m| &m.metadata) {
                    out.rows = m.rows;
                    out.size_bytes = m.size_bytes;
                    out.partition_by = m.partition_by.clone();
                    out.clustered_by = m.clustered_by.clone();
                    out.entity_type = m.entity_type.clone();
                    out.rough_size_hint =
                        size_hint(m.size_bytes.and_then(|b| u64::try_from(b).ok()));
                    let dialect = if out.sql_flavor == "bigquery" {
                        Dialect::BigQuery
                    } else {
                        Dialect::DataFusion
                    };
                    out.where_examples = examples::generate(&examples::remote_facts(m), dialect);
                }
            }
            QueryMode::Internal => {}
        }
        out
    }

    /// The caller's catalog: built once per view of the registry and grants (see
    /// [`CachedCatalog::key`]) and served from memory until a flush or [`crate::discovery::CATALOG_TTL`].
    async fn catalog_inner(&self, caller: &Caller) -> ApiResult<Arc<CachedCatalog>> {
        let registry = self.state.access.registry().await?;
        let readable = self.state.access.readable_ids(caller).await?;
        let key = CachedCatalog::key(&registry, readable.as_ref());
        let cache = &self.state.discovery.catalog;
        let hit = cache.get(&key);
        svc_metrics::Cache::Catalog.lookup(hit.is_some());
        if let Some(hit) = hit {
            return Ok(hit);
        }
        let metadata = self.state.store.all_metadata().await?;
        let rows: Vec<CatalogRow> = registry
            .rows()
            .iter()
            .filter(|r| access::is_visible(r, readable.as_deref()))
            .map(|r| self.catalog_row(r, metadata.get(&r.id)))
            .collect();
        let tables_json = serde_json::to_vec(&rows.to_json()).expect("JSON values always encode");
        let built = Arc::new(CachedCatalog {
            rows,
            tables_json: tables_json.into(),
            _views: (registry, readable),
        });
        cache.insert(key, built.clone());
        Ok(built)
    }

    async fn schema_inner(
        &self,
        caller: &Caller,
        table_id: &str,
    ) -> ApiResult<Arc<SchemaResponse>> {
        let row = self.readable(caller, table_id).await?;
        let hit = self.state.discovery.schema.get(table_id);
        svc_metrics::Cache::Schema.lookup(hit.is_some());
        if let Some(hit) = hit {
            return Ok(hit);
        }
        let driver = self.driver(&row)?;
        let table = row.table_ref();
        let schema = driver.schema(&table, &caller.into()).await?;
        let resp = Arc::new(SchemaResponse {
            table_id: row.id.clone(),
            source_type: row.source_type.clone(),
            sql_flavor: driver.sql_flavor(&table).into(),
            columns: schema.columns.into_iter().map(Column::from).collect(),
            partition_by: schema.partition_by,
            clustered_by: schema.clustered_by,
            where_dialect_hints: json!({}),
        });
        self.state
            .discovery
            .schema
            .insert(row.id.clone(), resp.clone());
        Ok(resp)
    }

    async fn sample_inner(
        &self,
        caller: &Caller,
        table_id: &str,
        n: usize,
    ) -> ApiResult<Arc<CachedSample>> {
        let row = self.readable(caller, table_id).await?;
        // Internal rows differ per caller: never cached.
        let cacheable = row.query_mode.caches_samples();
        if cacheable {
            let hit = self.state.discovery.sample.get(&SampleKey(&row.id, n));
            svc_metrics::Cache::Sample.lookup(hit.is_some());
            if let Some(hit) = hit {
                return Ok(hit);
            }
        }
        let driver = self.driver(&row)?;
        let batches = driver.sample(&row.table_ref(), n, &caller.into()).await?;
        let mut rows = encode::rows_as_objects(&batches);
        rows.truncate(n);
        let resp = Arc::new(CachedSample {
            rows: rows.len(),
            body: EncodedJson::new(&SampleResponse {
                table_id: row.id.clone(),
                rows,
                source: row.source_type.clone(),
            }),
        });
        if cacheable {
            let key = (row.id.clone(), n);
            self.state.discovery.sample.insert(key, resp.clone());
        }
        Ok(resp)
    }

    /// The catalog for a caller, audited as `catalog.list` (the API's and the page's).
    pub(crate) async fn catalog_for(&self, caller: &Caller) -> ApiResult<Arc<CachedCatalog>> {
        let started = Instant::now();
        let result = self.catalog_inner(caller).await;
        let rows = result.as_ref().ok().map(|c| c.rows.len());
        let event = Event::new("catalog.list").resource("catalog");
        self.audit(caller, event, started, &result, rows).await;
        result
    }

    /// One table's catalog entry for a caller (404, then 403, as every table read): the
    /// MCP `describe_table` takes its size, freshness and WHERE examples from it.
    pub(crate) async fn catalog_entry(
        &self,
        caller: &Caller,
        table_id: &str,
    ) -> svc_core::Result<CatalogRow> {
        let row = self.readable(caller, table_id).await?;
        let metadata = self.state.store.all_metadata().await?;
        Ok(self.catalog_row(&row, metadata.get(&row.id)))
    }

    /// A table's schema for a caller, audited as `catalog.schema`.
    pub(crate) async fn schema_for(
        &self,
        caller: &Caller,
        table_id: &str,
    ) -> ApiResult<Arc<SchemaResponse>> {
        let started = Instant::now();
        let result = self.schema_inner(caller, table_id).await;
        let event = Event::new("catalog.schema").resource(format!("table:{table_id}"));
        self.audit(caller, event, started, &result, None).await;
        result
    }

    /// A table's first `n` rows for a caller, audited as `catalog.sample`.
    pub(crate) async fn sample_for(
        &self,
        caller: &Caller,
        table_id: &str,
        n: usize,
    ) -> ApiResult<Arc<CachedSample>> {
        let started = Instant::now();
        let result = self.sample_inner(caller, table_id, n).await;
        let rows = result.as_ref().ok().map(|r| r.rows);
        let event = Event::new("catalog.sample")
            .resource(format!("table:{table_id}"))
            .param("n", n);
        self.audit(caller, event, started, &result, rows).await;
        result
    }

    /// Writes the audit row for a table operation, success or failure.
    async fn audit<T>(
        &self,
        caller: &Caller,
        event: Event,
        started: Instant,
        result: &ApiResult<T>,
        rows: Option<usize>,
    ) {
        self.state
            .audit
            .write_outcome(
                &caller.actor,
                event,
                started,
                result,
                |event, _| match rows {
                    Some(n) => event.param("rows_returned", n),
                    None => event,
                },
            )
            .await;
    }
}

#[OpenApi(tag = "Tag::Discovery")]
impl DiscoveryApi {
    /// Tables the caller can read (internal tables for everyone), with size and freshness
    /// hints. Remote rows are enriched only from the metadata cache.
    #[oai(path = "/api/v2/catalog", method = "get", operation_id = "get_catalog")]
    async fn catalog(&self, auth: BearerAuth) -> ApiResult<EncodedJson<Catalog>> {
        let catalog = self.catalog_for(&auth.0).await?;
        Ok(catalog.body(&svc_core::clock::now()))
    }

    /// A table's columns.
    #[oai(
        path = "/api/v2/schema/:table_id",
        method = "get",
        operation_id = "get_schema"
    )]
    async fn schema(
        &self,
        auth: BearerAuth,
        table_id: Path<String>,
    ) -> ApiResult<Json<SchemaResponse>> {
        let result = self.schema_for(&auth.0, &table_id).await;
        result.map(|r| Json((*r).clone()))
    }

    /// The first `n` rows of a table (default 5, 1–100).
    #[oai(
        path = "/api/v2/sample/:table_id",
        method = "get",
        operation_id = "get_sample"
    )]
    async fn sample(
        &self,
        auth: BearerAuth,
        table_id: Path<String>,
        #[oai(validator(minimum(value = "1"), maximum(value = "100")))] n: Query<Option<i64>>,
    ) -> ApiResult<EncodedJson<SampleResponse>> {
        let n = usize::try_from(n.unwrap_or(5).clamp(1, 100)).unwrap_or(5);
        let result = self.sample_for(&auth.0, &table_id, n).await;
        result.map(|r| r.body.clone())
    }

    /// Downloads a table's parquet file (local and materialized tables). Send the `ETag`
    /// back in `If-None-Match` to skip an unchanged file.
    #[oai(
        path = "/api/data/:table_id/download",
        method = "get",
        tag = "Tag::Discovery",
        operation_id = "download_table"
    )]
    async fn download(
        &self,
        auth: BearerAuth,
        table_id: Path<String>,
        #[oai(name = "If-None-Match")] if_none_match: Header<Option<String>>,
    ) -> ApiResult<Download> {
        let started = Instant::now();
        let result = self
            .download_inner(&auth.0, &table_id, if_none_match.0.as_deref())
            .await;
        let mut event = Event::new("data.download").resource(format!("table:{}", *table_id));
        if let Ok((_, bytes, not_modified)) = &result {
            event = event
                .param("bytes", *bytes)
                .param("not_modified", *not_modified);
        }
        self.audit(&auth.0, event, started, &result, None).await;
        result.map(|(d, _, _)| d)
    }
}

impl DiscoveryApi {
    async fn download_inner(
        &self,
        caller: &Caller,
        table_id: &str,
        if_none_match: Option<&str>,
    ) -> ApiResult<(Download, u64, bool)> {
        let row = self.readable(caller, table_id).await?;
        let no_file = || {
            Error::coded(
                ErrorKind::NotFound,
                "no_data",
                format!("Table '{table_id}' has no data file on this server to download"),
                json!({"table_id": table_id, "hint": "its parquet file is not on the server yet (a local table's file, or a materialized table's first sync)"}),
            )
        };
        let path = self
            .driver(&row)?
            .local_file(&row.table_ref())
            .ok_or_else(no_file)?;
        let file = tokio::fs::File::open(&path).await.map_err(|_| no_file())?;
        let meta = file.metadata().await.map_err(Error::internal)?;
        let mtime = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let etag = format!("\"{:x}-{:x}\"", meta.len(), mtime);
        let matches = if_none_match
            .is_some_and(|h| h.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
        if matches {
            return Ok((Download::NotModified(etag), 0, true));
        }
        let body = Body::from_async_read(file);
        let disposition = format!("attachment; filename=\"{}.parquet\"", row.id);
        Ok((
            Download::File(Binary(body), etag, disposition),
            meta.len(),
            false,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_hints_follow_the_thresholds() {
        const MIB: u64 = 1024 * 1024;
        assert_eq!(size_hint(None), None);
        assert_eq!(size_hint(Some(0)).as_deref(), Some("small"));
        assert_eq!(size_hint(Some(100 * MIB)).as_deref(), Some("small"));
        assert_eq!(size_hint(Some(100 * MIB + 1)).as_deref(), Some("medium"));
        assert_eq!(size_hint(Some(1024 * MIB)).as_deref(), Some("medium"));
        assert_eq!(size_hint(Some(10 * 1024 * MIB)).as_deref(), Some("large"));
        assert_eq!(
            size_hint(Some(10 * 1024 * MIB + 1)).as_deref(),
            Some("very_large")
        );
    }

    #[test]
    fn freshness_of_cache_rows() {
        assert_eq!(freshness(None), "never_fetched");
        let fresh = MetadataRow {
            refreshed_at: Some(svc_core::clock::now()),
            ..Default::default()
        };
        assert_eq!(freshness(Some(&fresh)), "fresh");
        let old = MetadataRow {
            refreshed_at: Some("2020-01-01T00:00:00Z".into()),
            ..Default::default()
        };
        assert_eq!(freshness(Some(&old)), "stale");
        let failed = MetadataRow {
            error_at: Some(svc_core::clock::now()),
            ..Default::default()
        };
        assert_eq!(freshness(Some(&failed)), "error");
        // Refreshed once, then failed: the failure is the news, the old metadata stays.
        let failed_later = MetadataRow {
            refreshed_at: Some(svc_core::clock::now()),
            error_at: Some(svc_core::clock::now()),
            error: Some("upstream said no".into()),
            ..Default::default()
        };
        assert_eq!(freshness(Some(&failed_later)), "error");
        let failed_after_old = MetadataRow {
            refreshed_at: Some("2020-01-01T00:00:00Z".into()),
            ..failed_later
        };
        assert_eq!(freshness(Some(&failed_after_old)), "error");
    }
}
