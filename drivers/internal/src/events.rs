//! `svc_telemetry`'s rows: one parquet segment of usage events per session file, under
//! `<data dir>/telemetry/usage_events/`.
//!
//! Why segments and not a store table: every event was a 20-column row in a table with
//! eight indexes, and on this class of machine the store took 14–22 k such rows a second
//! (SQLite) — a tenth of what the extractor yields. A file's events are written once and
//! read in columns, so they are kept the way they are read, and the store keeps only what is
//! small and transactional: each file's state row (which names its segment and owner), its
//! summary and its per-day counts (the rollups' source).
//!
//! Commit order is what keeps readers safe: a segment is written in full under a fresh
//! name (temporary file, fsync, rename) *before* the state row naming it commits, so a
//! reader only ever opens whole, committed segments; a crash leaves at worst an unnamed
//! segment, which the pipeline's next run removes ([`EventSegments::remove_unlisted`]).
//!
//! The row filter is the segment list: a caller's provider is built over the segments whose
//! owner is the caller and no others, so no query shape can reach another user's rows —
//! they are never opened.

use std::collections::HashSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use svc_driver_parquet::AtomicParquet;
use svc_plugin_api::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use svc_plugin_api::datafusion::catalog::Session;
use svc_plugin_api::datafusion::common::{DFSchema, Result as DfResult};
use svc_plugin_api::datafusion::datasource::listing::PartitionedFile;
use svc_plugin_api::datafusion::datasource::physical_plan::{
    FileGroup, FileScanConfigBuilder, ParquetSource,
};
use svc_plugin_api::datafusion::datasource::source::DataSourceExec;
use svc_plugin_api::datafusion::datasource::MemTable;
use svc_plugin_api::datafusion::datasource::TableType;
use svc_plugin_api::datafusion::execution::object_store::ObjectStoreUrl;
use svc_plugin_api::datafusion::logical_expr::utils::conjunction;
use svc_plugin_api::datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use svc_plugin_api::datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use svc_plugin_api::datafusion::physical_plan::ExecutionPlan;
use svc_plugin_api::{DriverError, RecordBatch, Result, TableProvider};

/// Where the segments live, under the data directory.
pub const DIR: &str = "telemetry/usage_events";

/// The columns of a usage event, in order (the spec's `usage_events`).
pub fn schema() -> SchemaRef {
    static SCHEMA: OnceLock<SchemaRef> = OnceLock::new();
    SCHEMA
        .get_or_init(|| {
            let text = |name: &str, nullable: bool| Field::new(name, DataType::Utf8, nullable);
            Arc::new(Schema::new(vec![
                text("id", false),
                text("session_id", false),
                text("session_file", false),
                text("username", false),
                text("user_id", true),
                text("event_uuid", true),
                text("parent_uuid", true),
                text("event_type", false),
                text("tool_name", true),
                text("skill_name", true),
                text("subagent_type", true),
                text("command_name", true),
                Field::new("is_error", DataType::Boolean, false),
                text("source", false),
                text("ref_id", true),
                text("model", true),
                text("cwd", true),
                text("occurred_at", false),
                Field::new("processor_version", DataType::Int64, false),
                text("extracted_at", false),
            ]))
        })
        .clone()
}

/// Whether `name` is one this module could have made: `<letters, digits, ->.parquet`.
/// Names come from the store; this is the second lock on the path.
fn is_segment_name(name: &str) -> bool {
    name.strip_suffix(".parquet").is_some_and(|stem| {
        (1..=100).contains(&stem.len())
            && stem.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    })
}

/// The segment directory.
#[derive(Debug, Clone)]
pub struct EventSegments {
    dir: PathBuf,
}

fn io_error(what: &str, path: &Path, e: impl std::fmt::Display) -> DriverError {
    DriverError::internal(format!("{what} {}: {e}", path.display()))
}

impl EventSegments {
    /// The segments of the data directory `data_dir`.
    pub fn new(data_dir: &Path) -> Self {
        Self {
            dir: data_dir.join(DIR),
        }
    }

    /// A segment's path, or an error for a name this module never makes.
    pub fn path(&self, name: &str) -> Result<PathBuf> {
        if !is_segment_name(name) {
            return Err(DriverError::internal(format!(
                "'{name}' is not a usage event segment name"
            )));
        }
        Ok(self.dir.join(name))
    }

    /// Writes `batch` (of [`schema`]) as the segment `name`, durably and whole; returns
    /// the bytes written.
    pub fn write(&self, name: &str, batch: &RecordBatch) -> Result<u64> {
        let mut file = AtomicParquet::create(&self.path(name)?, schema())?;
        file.write(batch)?;
        Ok(file.commit()?.bytes)
    }

    /// Every row of a segment.
    pub fn read(&self, name: &str) -> Result<Vec<RecordBatch>> {
        let path = self.path(name)?;
        let file = File::open(&path).map_err(|e| io_error("cannot open", &path, e))?;
        ParquetRecordBatchReaderBuilder::try_new(file)
            .and_then(|b| b.build())
            .map_err(|e| io_error("cannot read", &path, e))?
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| io_error("cannot read", &path, e))
    }

    /// Removes the segments not named in `keep` (and temporary files of killed writers);
    /// returns how many. Called only by the one pipeline run that holds the lease, so
    /// nothing is being written meanwhile.
    pub fn remove_unlisted(&self, keep: &HashSet<String>) -> usize {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return 0;
        };
        let mut removed = 0;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !keep.contains(&name) && std::fs::remove_file(entry.path()).is_ok() {
                removed += 1;
            }
        }
        removed
    }

    /// A provider over exactly the named segments: the caller's, chosen by the store.
    pub fn provider(&self, names: &[String]) -> Result<Arc<dyn TableProvider>> {
        if names.is_empty() {
            let empty = MemTable::try_new(schema(), vec![vec![]])
                .map_err(|e| DriverError::internal(e.to_string()))?;
            return Ok(Arc::new(empty));
        }
        let mut files = Vec::with_capacity(names.len());
        for name in names {
            let path = self.path(name)?;
            let size = std::fs::metadata(&path)
                .map_err(|e| io_error("cannot read the size of", &path, e))?
                .len();
            files.push(PartitionedFile::new(path.to_string_lossy(), size));
        }
        Ok(Arc::new(SegmentScan { files }))
    }
}

/// The named segments as one table.
///
/// Not a `ListingTable` over one URL per segment: that asks the object store about every
/// URL at once, and each answer holds its file open until the listing is collected, so a
/// few thousand segments ran out of file descriptors (EMFILE) and every telemetry read
/// failed. Here the files and sizes are known up front and are opened only as the scan
/// reaches them; filters still prune row groups by their statistics.
#[derive(Debug)]
struct SegmentScan {
    files: Vec<PartitionedFile>,
}

#[async_trait::async_trait]
impl TableProvider for SegmentScan {
    fn schema(&self) -> SchemaRef {
        schema()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DfResult<Vec<TableProviderFilterPushDown>> {
        // Row groups are pruned by them; rows are filtered again above the scan.
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let mut source = ParquetSource::new(schema());
        if let Some(predicate) = conjunction(filters.iter().cloned()) {
            let columns = DFSchema::try_from(schema())?;
            source = source.with_predicate(state.create_physical_expr(predicate, &columns)?);
        }
        // Files dealt round-robin, so each partition gets a share of every owner and day.
        let partitions = state
            .config()
            .target_partitions()
            .clamp(1, self.files.len().max(1));
        let mut groups = vec![Vec::new(); partitions];
        for (i, file) in self.files.iter().enumerate() {
            groups[i % partitions].push(file.clone());
        }
        let config =
            FileScanConfigBuilder::new(ObjectStoreUrl::local_filesystem(), Arc::new(source))
                .with_file_groups(groups.into_iter().map(FileGroup::new).collect())
                .with_projection_indices(projection.cloned())?
                .with_limit(limit)
                .build();
        Ok(DataSourceExec::from_data_source(config))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_names_this_module_makes_are_paths() {
        let s = EventSegments::new(Path::new("/data"));
        assert!(s.path("0190a-b2.parquet").is_ok());
        for bad in [
            "../x.parquet",
            "a/b.parquet",
            ".parquet",
            "x.csv",
            "a b.parquet",
            "",
        ] {
            assert!(s.path(bad).is_err(), "{bad:?}");
        }
    }
}
