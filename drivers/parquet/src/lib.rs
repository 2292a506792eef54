//! Local parquet tables (`source_type = "local"`), and the shared parquet reader behind every
//! on-disk source kind (`integration`, `ticketing`, materialized warehouse tables).
//!
//! A table's data lives at `<data-dir>/extracts/<source_type>/data/<table_id>.parquet`, keyed
//! by id and never by display name. Schema comes from the parquet footer; a sample reads
//! pages only until it has `n` rows, so its cost does not grow with the file.

mod ingest;
mod stats;
mod write;

pub use ingest::{ingest, inspect, DataFacts, IngestError, UploadFormat};
pub use stats::{column_stats, ColumnStats};
pub use write::{sweep_temp_files, temp_path, AtomicParquet, Layout, OldFile};

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use svc_plugin_api::arrow::datatypes::SchemaRef;
use svc_plugin_api::datafusion::config::TableParquetOptions;
use svc_plugin_api::datafusion::datasource::file_format::parquet::ParquetFormat;
use svc_plugin_api::datafusion::datasource::listing::{
    ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl,
};
use svc_plugin_api::datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use svc_plugin_api::datafusion::prelude::SessionContext;
use svc_plugin_api::{
    Caller, DriverError, ErrorKind, RecordBatch, Result, ScanEstimate, ScanSpec, SourceDriver,
    TableProvider, TableRef, TableSchema,
};

/// Reads `<data-dir>/extracts/<source_type>/data/<table_id>.parquet` files.
#[derive(Debug, Clone)]
pub struct ParquetFiles {
    data_dir: PathBuf,
    /// Query schemas as DataFusion infers them from each file's footer. Inferring builds a
    /// session and reads the footer, a fixed cost every query paid; an entry serves only
    /// while the file keeps the size and modification time it was read at, so a replaced
    /// file (syncs rename a new one into place) is read afresh.
    schemas: Arc<Mutex<HashMap<PathBuf, (FileStamp, SchemaRef)>>>,
}

/// What tells one version of a file from the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileStamp {
    len: u64,
    modified: Option<SystemTime>,
}

impl FileStamp {
    fn of(file: &File) -> std::io::Result<Self> {
        let meta = file.metadata()?;
        Ok(Self {
            len: meta.len(),
            modified: meta.modified().ok(),
        })
    }
}

/// Whether an id is safe to use as a file name: the registry's id alphabet, and never `.`
/// or `..`. Ids come from the registry, which validates them; this is the second lock.
fn is_safe_file_stem(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id != "."
        && id != ".."
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

impl ParquetFiles {
    /// A reader rooted at the server's data directory.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        Self {
            data_dir: data_dir.into(),
            schemas: Arc::default(),
        }
    }

    /// Where a table's parquet file lives (whether or not it exists yet).
    pub fn path(&self, table: &TableRef) -> Result<PathBuf> {
        if !is_safe_file_stem(&table.id) || !is_safe_file_stem(&table.source_type) {
            return Err(DriverError::not_found(format!(
                "Table '{}' has no readable data file",
                table.id
            )));
        }
        Ok(self
            .data_dir
            .join("extracts")
            .join(&table.source_type)
            .join("data")
            .join(format!("{}.parquet", table.id)))
    }

    fn relative(&self, path: &Path) -> String {
        path.strip_prefix(&self.data_dir)
            .unwrap_or(path)
            .display()
            .to_string()
    }

    /// Opens the table's file: 404-kind when missing.
    fn open(&self, table: &TableRef) -> Result<(File, PathBuf)> {
        let path = self.path(table)?;
        match File::open(&path) {
            Ok(f) => Ok((f, path)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Err(DriverError::not_found(format!(
                    "Table '{}' has no data yet: {} does not exist",
                    table.id,
                    self.relative(&path)
                )))
            }
            Err(e) => Err(DriverError::internal(format!(
                "Table '{}': cannot open its data file: {e}",
                table.id
            ))),
        }
    }

    fn corrupt(&self, table: &TableRef, path: &Path, e: impl std::fmt::Display) -> DriverError {
        DriverError::new(
            ErrorKind::Corrupt,
            format!(
                "Table '{}': {} is not a readable parquet file ({e})",
                table.id,
                self.relative(path)
            ),
        )
    }

    /// Columns from the parquet footer.
    pub async fn schema(&self, table: &TableRef) -> Result<TableSchema> {
        let this = self.clone();
        let table = table.clone();
        blocking(move || {
            let (file, path) = this.open(&table)?;
            let builder = ParquetRecordBatchReaderBuilder::try_new(file)
                .map_err(|e| this.corrupt(&table, &path, e))?;
            Ok(TableSchema::from_arrow(builder.schema()))
        })
        .await
    }

    /// The first `n` rows, reading pages only until it has them.
    pub async fn sample(&self, table: &TableRef, n: usize) -> Result<Vec<RecordBatch>> {
        let this = self.clone();
        let table = table.clone();
        blocking(move || {
            let (file, path) = this.open(&table)?;
            let reader = ParquetRecordBatchReaderBuilder::try_new(file)
                .map_err(|e| this.corrupt(&table, &path, e))?
                .with_batch_size(n.max(1))
                .with_limit(n)
                .build()
                .map_err(|e| this.corrupt(&table, &path, e))?;
            let mut out = Vec::new();
            let mut rows = 0;
            for batch in reader {
                let batch = batch.map_err(|e| this.corrupt(&table, &path, e))?;
                rows += batch.num_rows();
                out.push(batch);
                if rows >= n {
                    break;
                }
            }
            Ok(out)
        })
        .await
    }

    /// What a scan would read, from the footer alone.
    pub async fn estimate(&self, table: &TableRef, scan: &ScanSpec) -> Result<ScanEstimate> {
        let this = self.clone();
        let table = table.clone();
        let scan = scan.clone();
        blocking(move || {
            let (file, path) = this.open(&table)?;
            let builder = ParquetRecordBatchReaderBuilder::try_new(file)
                .map_err(|e| this.corrupt(&table, &path, e))?;
            Ok(estimate::estimate(
                builder.metadata(),
                builder.schema(),
                &scan,
            ))
        })
        .await
    }

    /// A DataFusion provider over the file, for the query and scan paths.
    pub async fn table_provider(&self, table: &TableRef) -> Result<Arc<dyn TableProvider>> {
        let (file, path) = self.open(table)?;
        let url = ListingTableUrl::parse(path.to_string_lossy())
            .map_err(|e| DriverError::internal(format!("Table '{}': {e}", table.id)))?;
        // Filters are evaluated while decoding, most selective first, so columns needed only
        // by surviving rows are decoded only for them (late materialization).
        let mut parquet = TableParquetOptions::default();
        parquet.global.pushdown_filters = true;
        parquet.global.reorder_filters = true;
        let options = ListingOptions::new(Arc::new(ParquetFormat::default().with_options(parquet)))
            .with_file_extension(".parquet");
        let stamp = FileStamp::of(&file).map_err(|e| {
            DriverError::internal(format!(
                "Table '{}': cannot read the metadata of its data file: {e}",
                table.id
            ))
        })?;
        let schema = match self.cached_schema(&path, stamp) {
            Some(schema) => schema,
            None => {
                let state = SessionContext::new().state();
                let schema = options
                    .infer_schema(&state, &url)
                    .await
                    .map_err(|e| self.corrupt(table, &path, e))?;
                self.lock_schemas()
                    .insert(path.clone(), (stamp, schema.clone()));
                schema
            }
        };
        let config = ListingTableConfig::new(url)
            .with_listing_options(options)
            .with_schema(schema);
        let provider = ListingTable::try_new(config).map_err(|e| self.corrupt(table, &path, e))?;
        Ok(Arc::new(provider))
    }

    fn cached_schema(&self, path: &Path, stamp: FileStamp) -> Option<SchemaRef> {
        match self.lock_schemas().get(path) {
            Some((seen, schema)) if *seen == stamp => Some(schema.clone()),
            _ => None,
        }
    }

    fn lock_schemas(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, (FileStamp, SchemaRef)>> {
        // A panic while holding the lock cannot leave a half-written entry behind.
        self.schemas.lock().unwrap_or_else(|e| e.into_inner())
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| DriverError::internal(format!("parquet reader task failed: {e}")))?
}

/// A source driver whose data is one parquet file per table: `local` itself, and the read
/// side of the other on-disk kinds until they add syncing of their own.
#[derive(Debug, Clone)]
pub struct ParquetDriver {
    source_type: &'static str,
    files: ParquetFiles,
}

impl ParquetDriver {
    /// The `local` driver over a data directory.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        Self::for_source("local", data_dir)
    }

    /// A parquet-backed driver for another on-disk source kind.
    pub fn for_source(source_type: &'static str, data_dir: impl Into<PathBuf>) -> Self {
        Self {
            source_type,
            files: ParquetFiles::new(data_dir),
        }
    }
}

#[async_trait::async_trait]
impl SourceDriver for ParquetDriver {
    fn source_type(&self) -> &'static str {
        self.source_type
    }

    async fn schema(&self, table: &TableRef, _caller: &Caller) -> Result<TableSchema> {
        self.files.schema(table).await
    }

    async fn sample(
        &self,
        table: &TableRef,
        n: usize,
        _caller: &Caller,
    ) -> Result<Vec<RecordBatch>> {
        self.files.sample(table, n).await
    }

    async fn table_provider(
        &self,
        table: &TableRef,
        _caller: &Caller,
    ) -> Result<Arc<dyn TableProvider>> {
        self.files.table_provider(table).await
    }

    async fn estimate(&self, table: &TableRef, scan: &ScanSpec) -> Result<ScanEstimate> {
        self.files.estimate(table, scan).await
    }

    fn local_file(&self, table: &TableRef) -> Option<PathBuf> {
        self.files.path(table).ok()
    }
}

mod estimate;

#[cfg(test)]
mod tests;
