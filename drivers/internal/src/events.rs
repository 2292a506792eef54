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
//! they are never opened. Administrators read packs instead where there are some (many
//! files' events in one file sorted by time, built by the pipeline from the segments; the
//! store's `packs` module keeps their invariant), plus the segments of files in no pack.

use std::collections::HashSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use svc_driver_parquet::AtomicParquet;
use svc_plugin_api::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use svc_plugin_api::datafusion::catalog::Session;
use svc_plugin_api::datafusion::common::ScalarValue;
use svc_plugin_api::datafusion::common::{DFSchema, Result as DfResult};
use svc_plugin_api::datafusion::datasource::listing::PartitionedFile;
use svc_plugin_api::datafusion::datasource::physical_plan::{
    FileGroup, FileScanConfigBuilder, ParquetSource,
};
use svc_plugin_api::datafusion::datasource::source::DataSourceExec;
use svc_plugin_api::datafusion::datasource::MemTable;
use svc_plugin_api::datafusion::datasource::TableType;
use svc_plugin_api::datafusion::execution::object_store::ObjectStoreUrl;
use svc_plugin_api::datafusion::logical_expr::utils::{conjunction, split_conjunction};
use svc_plugin_api::datafusion::logical_expr::{
    Between, BinaryExpr, Expr, Operator, TableProviderFilterPushDown,
};
use svc_plugin_api::datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use svc_plugin_api::datafusion::physical_plan::empty::EmptyExec;
use svc_plugin_api::datafusion::physical_plan::ExecutionPlan;
use svc_plugin_api::{DriverError, RecordBatch, Result, TableProvider};

/// A segment being written ([`EventSegments::create`]).
pub type SegmentWriter = AtomicParquet;

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

    /// Starts the segment `name` (of [`schema`]): batches are appended to a hidden file that
    /// becomes the segment, durably and whole, on commit, or goes if it is dropped first.
    pub fn create(&self, name: &str) -> Result<SegmentWriter> {
        AtomicParquet::create(&self.path(name)?, schema())
    }

    /// Writes `batch` as the segment `name` in one go; returns the bytes written.
    pub fn write(&self, name: &str, batch: &RecordBatch) -> Result<u64> {
        let mut file = self.create(name)?;
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

    /// A provider over exactly the listed files (segments or packs), chosen by the store:
    /// the caller's.
    pub fn provider(&self, listed: &[EventFile]) -> Result<Arc<dyn TableProvider>> {
        if listed.is_empty() {
            let empty = MemTable::try_new(schema(), vec![vec![]])
                .map_err(|e| DriverError::internal(e.to_string()))?;
            return Ok(Arc::new(empty));
        }
        let mut files = Vec::with_capacity(listed.len());
        for file in listed {
            let path = self.path(&file.name)?;
            let size = std::fs::metadata(&path)
                .map_err(|e| io_error("cannot read the size of", &path, e))?
                .len();
            files.push(Spanned {
                file: PartitionedFile::new(path.to_string_lossy(), size),
                first_at: file.first_at.clone(),
                last_at: file.last_at.clone(),
            });
        }
        Ok(Arc::new(SegmentScan { files }))
    }
}

/// An event file as the store lists it: its name and the times its events span, so a scan
/// can skip the files outside a window without opening them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventFile {
    /// File name in the segment directory.
    pub name: String,
    /// Its earliest event time (None when unknown: never skipped).
    pub first_at: Option<String>,
    /// Its latest event time (None when unknown: never skipped).
    pub last_at: Option<String>,
}

#[derive(Debug, Clone)]
struct Spanned {
    file: PartitionedFile,
    first_at: Option<String>,
    last_at: Option<String>,
}

impl Spanned {
    fn overlaps(&self, (lo, hi): &(Option<String>, Option<String>)) -> bool {
        let before = matches!((&self.last_at, lo), (Some(last), Some(lo)) if last < lo);
        let after = matches!((&self.first_at, hi), (Some(first), Some(hi)) if first > hi);
        !before && !after
    }
}

/// The narrowest closed range of `occurred_at` that the (conjunctive) filters allow, either
/// end open. Only plain comparisons of the column with a text literal count; any other
/// filter leaves the range as it is, so a file is skipped only when no row of it can pass.
fn time_bounds(filters: &[Expr]) -> (Option<String>, Option<String>) {
    fn text(e: &Expr) -> Option<&str> {
        match e {
            Expr::Literal(
                ScalarValue::Utf8(Some(v))
                | ScalarValue::LargeUtf8(Some(v))
                | ScalarValue::Utf8View(Some(v)),
                _,
            ) => Some(v),
            _ => None,
        }
    }
    fn is_time(e: &Expr) -> bool {
        matches!(e, Expr::Column(c) if c.name == "occurred_at")
    }
    let (mut lo, mut hi): (Option<String>, Option<String>) = (None, None);
    let mut raise = |v: &str| {
        if lo.as_deref().is_none_or(|l| v > l) {
            lo = Some(v.to_owned());
        }
    };
    let mut lower = |v: &str| {
        if hi.as_deref().is_none_or(|h| v < h) {
            hi = Some(v.to_owned());
        }
    };
    for filter in filters {
        for e in split_conjunction(filter) {
            match e {
                Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
                    let (op, value) = if is_time(left) {
                        (*op, text(right))
                    } else if is_time(right) {
                        (op.swap().unwrap_or(*op), text(left))
                    } else {
                        continue;
                    };
                    let Some(v) = value else { continue };
                    match op {
                        Operator::Gt | Operator::GtEq => raise(v),
                        Operator::Lt | Operator::LtEq => lower(v),
                        Operator::Eq => {
                            raise(v);
                            lower(v);
                        }
                        _ => {}
                    }
                }
                Expr::Between(Between {
                    expr,
                    negated: false,
                    low,
                    high,
                }) if is_time(expr) => {
                    if let (Some(l), Some(h)) = (text(low), text(high)) {
                        raise(l);
                        lower(h);
                    }
                }
                _ => {}
            }
        }
    }
    (lo, hi)
}

/// The listed files as one table.
///
/// Not a `ListingTable` over one URL per file: that asks the object store about every URL
/// at once, and each answer holds its file open until the listing is collected, so a few
/// thousand segments ran out of file descriptors (EMFILE) and every telemetry read failed.
/// Here the files, sizes and time spans are known up front: files outside the filters'
/// time range are never opened, the rest only as the scan reaches them, and filters still
/// prune row groups by their statistics.
#[derive(Debug)]
struct SegmentScan {
    files: Vec<Spanned>,
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
        // Files and row groups are pruned by them; rows are filtered again above the scan.
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let window = time_bounds(filters);
        let mut files: Vec<&Spanned> = self.files.iter().filter(|f| f.overlaps(&window)).collect();
        if files.is_empty() {
            let projected = match projection {
                Some(p) => Arc::new(schema().project(p)?),
                None => schema(),
            };
            return Ok(Arc::new(EmptyExec::new(projected)));
        }
        let mut source = ParquetSource::new(schema());
        if let Some(predicate) = conjunction(filters.iter().cloned()) {
            let columns = DFSchema::try_from(schema())?;
            source = source.with_predicate(state.create_physical_expr(predicate, &columns)?);
        }
        // Largest first, each to the partition with the fewest bytes so far, so a few large
        // packs and many small segments both spread evenly.
        let partitions = state.config().target_partitions().clamp(1, files.len());
        files.sort_by_key(|f| std::cmp::Reverse(f.file.object_meta.size));
        let mut groups = vec![(0_u64, Vec::new()); partitions];
        for f in files {
            let lightest = groups
                .iter_mut()
                .min_by_key(|(bytes, _)| *bytes)
                .expect("at least one partition");
            lightest.0 += f.file.object_meta.size;
            lightest.1.push(f.file.clone());
        }
        let config =
            FileScanConfigBuilder::new(ObjectStoreUrl::local_filesystem(), Arc::new(source))
                .with_file_groups(groups.into_iter().map(|(_, g)| FileGroup::new(g)).collect())
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

#[cfg(test)]
mod window_tests {
    use super::*;
    use svc_plugin_api::datafusion::prelude::{col, lit};

    fn spanned(first: &str, last: &str) -> Spanned {
        Spanned {
            file: PartitionedFile::new("/x.parquet", 1),
            first_at: Some(first.into()),
            last_at: Some(last.into()),
        }
    }

    #[test]
    fn the_time_range_comes_from_plain_comparisons_only() {
        let t = || col("occurred_at");
        let both = time_bounds(&[
            t().gt_eq(lit("2026-01-02")).and(lit("2026-01-05").gt(t())),
            t().gt(lit("2026-01-01")),
            col("username").lt(lit("a")),
        ]);
        assert_eq!(both, (Some("2026-01-02".into()), Some("2026-01-05".into())));
        let between = time_bounds(&[t().between(lit("2026-01-03"), lit("2026-01-04"))]);
        assert_eq!(
            between,
            (Some("2026-01-03".into()), Some("2026-01-04".into()))
        );
        // An OR, a negation or a non-text literal says nothing about the range.
        let none = time_bounds(&[
            t().gt(lit("2026-01-02")).or(col("is_error")),
            t().not_between(lit("a"), lit("b")),
            t().gt(lit(5_i64)),
        ]);
        assert_eq!(none, (None, None));
    }

    #[test]
    fn a_file_is_skipped_only_when_it_cannot_hold_a_row_of_the_range() {
        let f = spanned("2026-01-02T10:00:00Z", "2026-01-03T10:00:00Z");
        let range = |lo: Option<&str>, hi: Option<&str>| (lo.map(Into::into), hi.map(Into::into));
        assert!(f.overlaps(&range(None, None)));
        assert!(f.overlaps(&range(Some("2026-01-03"), None)));
        assert!(!f.overlaps(&range(Some("2026-01-04"), None)));
        assert!(f.overlaps(&range(None, Some("2026-01-02T10:00:00Z"))));
        assert!(!f.overlaps(&range(None, Some("2026-01-02"))));
        let unknown = Spanned {
            first_at: None,
            last_at: None,
            ..f
        };
        assert!(unknown.overlaps(&range(Some("2027"), Some("2028"))));
    }
}
