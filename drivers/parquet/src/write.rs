//! Writing a table's parquet file so that readers only ever see a whole one.
//!
//! Rows go to a hidden temporary file beside the final path; [`AtomicParquet::commit`]
//! flushes it to disk and renames it over the old file in one step. Dropping the writer
//! without committing (an error, a cancelled task) removes the temporary file; a process
//! killed mid-write leaves one behind, which [`sweep_temp_files`] removes at the next start.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};
use svc_plugin_api::arrow::datatypes::SchemaRef;
use svc_plugin_api::datafusion::parquet::arrow::ArrowWriter;
use svc_plugin_api::datafusion::parquet::basic::{Compression, ZstdLevel};
use svc_plugin_api::datafusion::parquet::file::properties::WriterProperties;
use svc_plugin_api::datafusion::parquet::schema::types::ColumnPath;
use svc_plugin_api::{DriverError, RecordBatch, Result, SyncReport};

/// Marks temporary files: `.<name>.parquet<TEMP_MARK><pid>-<n>`.
const TEMP_MARK: &str = ".tmp-";
/// Rows per row group: small enough that a sample reads little, large enough to compress.
const ROW_GROUP_ROWS: usize = 65_536;

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A file writer that hashes what it writes.
struct Hashing {
    inner: BufWriter<File>,
    hash: Sha256,
    bytes: u64,
}

impl Write for Hashing {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hash.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// How an [`AtomicParquet`] lays its file out.
#[derive(Debug, Clone, Copy)]
pub struct Layout<'a> {
    /// Rows per row group, at most.
    pub row_group_rows: usize,
    /// Columns written without a dictionary: those whose values are mostly distinct (ids),
    /// for which the writer would hash every value into a dictionary only to drop it.
    pub plain_columns: &'a [&'a str],
    /// The pages' compression (zstd unless said otherwise).
    pub compression: Compression,
}

impl Default for Layout<'_> {
    fn default() -> Self {
        Self {
            row_group_rows: ROW_GROUP_ROWS,
            plain_columns: &[],
            compression: Compression::ZSTD(ZstdLevel::default()),
        }
    }
}

/// A parquet file under construction; see the module docs.
pub struct AtomicParquet {
    target: PathBuf,
    temp: PathBuf,
    writer: Option<ArrowWriter<Hashing>>,
    rows: u64,
}

impl std::fmt::Debug for AtomicParquet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AtomicParquet")
            .field("target", &self.target)
            .field("rows", &self.rows)
            .finish()
    }
}

fn io_error(what: &str, path: &Path, e: impl std::fmt::Display) -> DriverError {
    DriverError::internal(format!("{what} {}: {e}", path.display()))
}

impl AtomicParquet {
    /// Starts writing what will become `target` (its directory is created if needed).
    pub fn create(target: &Path, schema: SchemaRef) -> Result<Self> {
        Self::with_layout(target, schema, Layout::default())
    }

    /// Like [`AtomicParquet::create`], with row groups of at most `row_group_rows` rows.
    pub fn with_row_groups(
        target: &Path,
        schema: SchemaRef,
        row_group_rows: usize,
    ) -> Result<Self> {
        let layout = Layout {
            row_group_rows,
            ..Layout::default()
        };
        Self::with_layout(target, schema, layout)
    }

    /// Like [`AtomicParquet::create`], laid out as `layout` says.
    pub fn with_layout(target: &Path, schema: SchemaRef, layout: Layout<'_>) -> Result<Self> {
        let dir = target
            .parent()
            .ok_or_else(|| io_error("no directory for", target, "a bare file name"))?;
        std::fs::create_dir_all(dir).map_err(|e| io_error("cannot create", dir, e))?;
        let temp = temp_path(target);
        let file = File::create(&temp).map_err(|e| io_error("cannot create", &temp, e))?;
        let sink = Hashing {
            inner: BufWriter::with_capacity(1 << 20, file),
            hash: Sha256::new(),
            bytes: 0,
        };
        let mut props = WriterProperties::builder()
            .set_compression(layout.compression)
            .set_max_row_group_row_count(Some(layout.row_group_rows.max(1)));
        for column in layout.plain_columns {
            props = props.set_column_dictionary_enabled(ColumnPath::from(*column), false);
        }
        let props = props.build();
        let mut this = Self {
            target: target.to_owned(),
            temp,
            writer: None,
            rows: 0,
        };
        this.writer = Some(
            ArrowWriter::try_new(sink, schema, Some(props))
                .map_err(|e| io_error("cannot start parquet in", &this.temp, e))?,
        );
        Ok(this)
    }

    /// Appends rows.
    pub fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        let writer = self.writer.as_mut().expect("a writer until commit");
        writer
            .write(batch)
            .map_err(|e| io_error("cannot write", &self.temp, e))?;
        self.rows += batch.num_rows() as u64;
        Ok(())
    }

    /// Rows written so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Bytes of the file flushed so far (row groups still in memory not counted).
    pub fn bytes(&self) -> u64 {
        self.writer.as_ref().map_or(0, |w| w.bytes_written() as u64)
    }

    /// Finishes the file, makes it durable and puts it in place of the old one.
    pub fn commit(mut self) -> Result<SyncReport> {
        let writer = self.writer.take().expect("a writer until commit");
        let mut sink = writer
            .into_inner()
            .map_err(|e| io_error("cannot finish", &self.temp, e))?;
        sink.flush()
            .map_err(|e| io_error("cannot flush", &self.temp, e))?;
        let Hashing { inner, hash, bytes } = sink;
        let file = inner
            .into_inner()
            .map_err(|e| io_error("cannot flush", &self.temp, e.error()))?;
        file.sync_all()
            .map_err(|e| io_error("cannot sync", &self.temp, e))?;
        std::fs::rename(&self.temp, &self.target)
            .map_err(|e| io_error("cannot move into place", &self.target, e))?;
        // The rename itself is durable once the directory is synced (best effort).
        if let Some(dir) = self.target.parent() {
            let _ = File::open(dir).and_then(|d| d.sync_all());
        }
        Ok(SyncReport {
            rows: self.rows,
            bytes,
            hash: hex::encode(hash.finalize()),
            notes: Vec::new(),
        })
    }
}

impl Drop for AtomicParquet {
    fn drop(&mut self) {
        if self.writer.is_some() {
            // Not committed: the old file (if any) stays, the partial one goes.
            let _ = std::fs::remove_file(&self.temp);
        }
    }
}

/// A fresh hidden name beside `target` for a file being written: removed by
/// [`sweep_temp_files`] if the process dies before it is renamed or removed.
pub fn temp_path(target: &Path) -> PathBuf {
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    target.with_file_name(format!(
        ".{name}{TEMP_MARK}{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ))
}

/// Removes temporary files under `<data-dir>/extracts/*/data/` left by a process that was
/// killed while writing: those whose writer process is gone (Linux tells through `/proc`),
/// and any older than `min_age`. Returns how many were removed.
pub fn sweep_temp_files(data_dir: &Path, min_age: Duration) -> usize {
    let Ok(sources) = std::fs::read_dir(data_dir.join("extracts")) else {
        return 0;
    };
    let now = SystemTime::now();
    let mut removed = 0;
    for source in sources.flatten() {
        let Ok(files) = std::fs::read_dir(source.path().join("data")) else {
            continue;
        };
        for f in files.flatten() {
            let name = f.file_name().to_string_lossy().into_owned();
            let old = f
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|m| now.duration_since(m).ok())
                .is_some_and(|age| age >= min_age);
            let Some((_, owner)) = name.split_once(TEMP_MARK) else {
                continue;
            };
            let pid = owner.split('-').next().unwrap_or_default();
            let orphan = Path::new("/proc").is_dir() && !Path::new("/proc").join(pid).exists();
            if name.starts_with('.') && (old || orphan) && std::fs::remove_file(f.path()).is_ok() {
                removed += 1;
            }
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use svc_plugin_api::arrow::array::Int64Array;
    use svc_plugin_api::arrow::datatypes::{DataType, Field, Schema};

    fn batch(values: &[i64]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(values.to_vec()))]).unwrap()
    }

    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_dropped_writer_leaves_the_old_file_and_no_temp() {
        let dir = std::env::temp_dir().join(format!("svc-atomic-{}", std::process::id()));
        let target = dir.join("extracts/warehouse/data/t.parquet");
        let b = batch(&[1, 2, 3]);
        let mut w = AtomicParquet::create(&target, b.schema()).unwrap();
        w.write(&b).unwrap();
        let report = w.commit().unwrap();
        assert_eq!(report.rows, 3);
        assert_eq!(report.bytes, std::fs::metadata(&target).unwrap().len());
        let before = std::fs::read(&target).unwrap();
        assert_eq!(report.hash, hex::encode(Sha256::digest(&before)));

        let mut w = AtomicParquet::create(&target, b.schema()).unwrap();
        w.write(&batch(&[9; 1000])).unwrap();
        drop(w);
        assert_eq!(std::fs::read(&target).unwrap(), before);
        assert_eq!(entries(target.parent().unwrap()), ["t.parquet"]);

        // A temp file left by a killed process is swept once old enough.
        // One from a live writer (this process) stays until it is old; one whose writer is
        // gone goes at once.
        let live = target
            .parent()
            .unwrap()
            .join(format!(".t.parquet.tmp-{}-99", std::process::id()));
        std::fs::write(&live, b"partial").unwrap();
        let dead = target.parent().unwrap().join(".t.parquet.tmp-999999999-1");
        std::fs::write(&dead, b"partial").unwrap();
        assert_eq!(sweep_temp_files(&dir, Duration::from_secs(3600)), 1);
        assert!(live.exists() && !dead.exists());
        assert_eq!(sweep_temp_files(&dir, Duration::ZERO), 1);
        assert_eq!(entries(target.parent().unwrap()), ["t.parquet"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
