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
//!
//! Files carry two hidden columns after the event columns, [`KEY_COLUMNS`]: 64-bit hashes
//! of the owner and the session. Administrators' distinct counts (owners and sessions per
//! bucket) run over them, because counting distinct 64-bit values reads and hashes a
//! tenth of the bytes the strings take (2.2–2.8× faster, measured at 3.3 M events).
//! `svc_telemetry` never shows them. Files written before the keys existed are keyed
//! again wherever they are read whole (compaction, prune, reprocess), and until then an
//! administrator's provider is built without keys, so counts fall back to the strings.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use svc_driver_parquet::{AtomicParquet, Layout};
use svc_plugin_api::arrow::array::{ArrayRef, AsArray, UInt64Array};
use svc_plugin_api::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use svc_plugin_api::datafusion::datasource::listing::PartitionedFile;
use svc_plugin_api::datafusion::datasource::MemTable;
use svc_plugin_api::datafusion::object_store::path::Path as ObjectPath;
use svc_plugin_api::datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use svc_plugin_api::datafusion::parquet::basic::Compression;
use svc_plugin_api::{DriverError, RecordBatch, Result, TableProvider};

use crate::event_scan::{SegmentScan, Spanned};

/// A segment being written ([`EventSegments::create`]).
pub type SegmentWriter = AtomicParquet;

/// Columns whose values are (nearly) all distinct, written without a dictionary.
const PLAIN_COLUMNS: &[&str] = &["id", "event_uuid", "parent_uuid"];

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

/// The hidden columns after [`schema`]'s in every file written since they were introduced:
/// [`key`] of `username`, then of `session_id`.
pub const KEY_COLUMNS: [&str; 2] = ["username_hash", "session_id_hash"];

/// The columns of an event file: [`schema`]'s, then [`KEY_COLUMNS`].
pub fn keyed_schema() -> SchemaRef {
    static SCHEMA: OnceLock<SchemaRef> = OnceLock::new();
    SCHEMA
        .get_or_init(|| {
            let mut fields: Vec<Field> = schema().fields().iter().map(|f| (**f).clone()).collect();
            fields.extend(KEY_COLUMNS.map(|name| Field::new(name, DataType::UInt64, false)));
            Arc::new(Schema::new(fields))
        })
        .clone()
}

/// The key of an owner or a session: its xxh3-64 hash. A distinct count over keys differs
/// from one over the strings only if two of them collide, which for n values has odds of
/// about n²/2⁶⁵ (3·10⁻¹⁰ for 100,000 sessions).
pub fn key(text: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(text.as_bytes())
}

/// The keys of a column of owners or sessions.
pub fn keys<'a>(texts: impl Iterator<Item = &'a str>) -> ArrayRef {
    Arc::new(UInt64Array::from_iter_values(texts.map(key)))
}

/// `batch` of [`keyed_schema`]: as it is when it has the keys, else with them computed
/// from its `username` and `session_id` (a batch of a file written before keys existed).
pub fn with_keys(batch: RecordBatch) -> Result<RecordBatch> {
    if batch.schema().fields() == keyed_schema().fields() {
        return Ok(batch);
    }
    let text = |name: &str| {
        batch
            .column_by_name(name)
            .and_then(|c| c.as_string_opt::<i32>())
            .ok_or_else(|| DriverError::internal(format!("an event file without {name}")))
    };
    let (users, sessions) = (text("username")?, text("session_id")?);
    let mut columns = batch.columns().to_vec();
    columns.push(keys(users.iter().map(Option::unwrap_or_default)));
    columns.push(keys(sessions.iter().map(Option::unwrap_or_default)));
    RecordBatch::try_new(keyed_schema(), columns)
        .map_err(|e| DriverError::internal(format!("an event file of another shape: {e}")))
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
    /// Whether each file read so far has keys: files are never rewritten under their name,
    /// so each footer is read once.
    keyed: Arc<Mutex<HashMap<String, bool>>>,
}

fn io_error(what: &str, path: &Path, e: impl std::fmt::Display) -> DriverError {
    DriverError::internal(format!("{what} {}: {e}", path.display()))
}

impl EventSegments {
    /// The segments of the data directory `data_dir`.
    pub fn new(data_dir: &Path) -> Self {
        Self {
            dir: data_dir.join(DIR),
            keyed: Arc::default(),
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

    /// Starts the segment `name` (of [`keyed_schema`]): batches are appended to a hidden file that
    /// becomes the segment, durably and whole, on commit, or goes if it is dropped first.
    pub fn create(&self, name: &str) -> Result<SegmentWriter> {
        let layout = Layout {
            plain_columns: PLAIN_COLUMNS,
            // A segment is one session file's events: a few thousand rows, so each column is
            // one small page, and zstd's per-column contexts (the parquet writer makes a
            // compression and a decompression context for every column it writes or reads)
            // cost more than compressing. LZ4 needs no context.
            compression: Compression::LZ4_RAW,
            ..Layout::default()
        };
        AtomicParquet::with_layout(&self.path(name)?, keyed_schema(), layout)
    }

    /// Starts the pack `name` (see [`EventSegments::create`]): many files' events, so zstd's
    /// contexts are paid once for many rows and its smaller files pay off in every read.
    pub fn create_pack(&self, name: &str) -> Result<SegmentWriter> {
        let layout = Layout {
            plain_columns: PLAIN_COLUMNS,
            ..Layout::default()
        };
        AtomicParquet::with_layout(&self.path(name)?, keyed_schema(), layout)
    }

    /// Writes `batch` (of [`keyed_schema`]) as the segment `name` in one go; returns the
    /// bytes written.
    pub fn write(&self, name: &str, batch: &RecordBatch) -> Result<u64> {
        let mut file = self.create(name)?;
        file.write(batch)?;
        Ok(file.commit()?.bytes)
    }

    /// Every row of a segment or pack, with its keys ([`with_keys`]).
    pub fn read(&self, name: &str) -> Result<Vec<RecordBatch>> {
        let path = self.path(name)?;
        let file = File::open(&path).map_err(|e| io_error("cannot open", &path, e))?;
        ParquetRecordBatchReaderBuilder::try_new(file)
            .and_then(|b| b.build())
            .map_err(|e| io_error("cannot read", &path, e))?
            .map(|batch| {
                batch
                    .map_err(|e| io_error("cannot read", &path, e))
                    .and_then(with_keys)
            })
            .collect()
    }

    /// Whether the file `name` has the key columns (its footer, read once).
    pub fn has_keys(&self, name: &str) -> Result<bool> {
        if let Some(&known) = self.cache().get(name) {
            return Ok(known);
        }
        let path = self.path(name)?;
        let file = File::open(&path).map_err(|e| io_error("cannot open", &path, e))?;
        let footer = ParquetRecordBatchReaderBuilder::try_new(file)
            .map_err(|e| io_error("cannot read", &path, e))?;
        let keyed = KEY_COLUMNS
            .iter()
            .all(|c| footer.schema().index_of(c).is_ok());
        self.cache().insert(name.to_owned(), keyed);
        Ok(keyed)
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, HashMap<String, bool>> {
        self.keyed
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
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

    /// A provider of [`schema`]'s columns over exactly the listed files (segments or
    /// packs), chosen by the store: the caller's.
    pub fn provider(&self, listed: &[EventFile]) -> Result<Arc<dyn TableProvider>> {
        self.scan(listed, schema())
    }

    /// A provider of [`keyed_schema`]'s columns over the listed files, or None when one of
    /// them predates the keys (its keys would read as NULL and be counted as none).
    pub fn keyed_provider(&self, listed: &[EventFile]) -> Result<Option<Arc<dyn TableProvider>>> {
        for file in listed {
            if !self.has_keys(&file.name)? {
                return Ok(None);
            }
        }
        // Forget files that are gone (merged into packs, pruned) once they outnumber the
        // listed ones, so the memo stays the size of the listing.
        let mut cache = self.cache();
        if cache.len() > 2 * listed.len() + 64 {
            let names: HashSet<&str> = listed.iter().map(|f| f.name.as_str()).collect();
            cache.retain(|name, _| names.contains(name.as_str()));
        }
        drop(cache);
        self.scan(listed, keyed_schema()).map(Some)
    }

    fn scan(&self, listed: &[EventFile], schema: SchemaRef) -> Result<Arc<dyn TableProvider>> {
        if listed.is_empty() {
            let empty = MemTable::try_new(schema, vec![vec![]])
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
                file: local_file(&path, size)?,
                first_at: file.first_at.clone(),
                last_at: file.last_at.clone(),
            });
        }
        Ok(Arc::new(SegmentScan::new(files, schema)))
    }
}

/// The scan's handle on a file. Not `PartitionedFile::new(path)`: that percent-encodes the
/// path's `é`, `%`, `#`, `[`, `{`…, and the local object store then looks for a file named
/// with the escapes, so a data directory named with one of them read no events at all.
fn local_file(path: &Path, size: u64) -> Result<PartitionedFile> {
    let location = std::path::absolute(path)
        .map_err(|e| io_error("cannot resolve", path, e))
        .and_then(|p| {
            ObjectPath::from_absolute_path(&p).map_err(|e| io_error("cannot read", path, e))
        })?;
    let mut file = PartitionedFile::new(String::new(), size);
    file.object_meta.location = location;
    Ok(file)
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

#[cfg(test)]
#[path = "events_tests.rs"]
mod tests;
