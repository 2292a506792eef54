//! Writing a table's parquet file so that readers only ever see a whole one.
//!
//! Rows go to a hidden temporary file beside the final path; [`AtomicParquet::commit`]
//! flushes it to disk and renames it over the old file in one step. Dropping the writer
//! without committing (an error, a cancelled task) removes the temporary file; a process
//! killed mid-write leaves one behind, which [`sweep_temp_files`] removes at the next start.
//!
//! A new file can also be spliced from an old one ([`AtomicParquet::splice_row_group`]): a
//! row group whose columns are the old file's column chunks as they are, where nothing in
//! them changed, and newly encoded values where something did. An incremental merge that
//! touches a few rows then re-encodes a few columns instead of the whole file.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};
use svc_plugin_api::arrow::array::{Array as _, ArrayRef};
use svc_plugin_api::arrow::datatypes::SchemaRef;
use svc_plugin_api::datafusion::parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions,
};
use svc_plugin_api::datafusion::parquet::arrow::arrow_writer::{
    compute_leaves, ArrowRowGroupWriterFactory,
};
use svc_plugin_api::datafusion::parquet::arrow::ArrowWriter;
use svc_plugin_api::datafusion::parquet::basic::{Compression, ZstdLevel};
use svc_plugin_api::datafusion::parquet::column::writer::ColumnCloseResult;
use svc_plugin_api::datafusion::parquet::errors::ParquetError;
use svc_plugin_api::datafusion::parquet::file::metadata::PageIndexPolicy;
use svc_plugin_api::datafusion::parquet::file::page_index::column_index::ColumnIndexMetaData;
use svc_plugin_api::datafusion::parquet::file::properties::WriterProperties;
use svc_plugin_api::datafusion::parquet::file::writer::SerializedFileWriter;
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
    writer: Option<Writer>,
    schema: SchemaRef,
    row_group_rows: usize,
    rows: u64,
}

/// What writes the file: arrow's writer, which cuts row groups itself, until a row group is
/// spliced; from then on the file writer under it, which takes whole row groups.
enum Writer {
    Batches(ArrowWriter<Hashing>),
    Groups {
        file: SerializedFileWriter<Hashing>,
        encoders: ArrowRowGroupWriterFactory,
    },
}

/// An existing parquet file whose column chunks a new file may reuse: opened once, with its
/// footer and page index read.
pub struct OldFile {
    file: File,
    metadata: ArrowReaderMetadata,
}

impl OldFile {
    /// Opens `path` and reads its footer and page index.
    pub fn open(path: &Path) -> Result<Self> {
        let file = File::open(path).map_err(|e| io_error("cannot open", path, e))?;
        // The page index travels with a copied chunk, where the old file has one.
        let options = ArrowReaderOptions::new().with_page_index_policy(PageIndexPolicy::Optional);
        let metadata = ArrowReaderMetadata::load(&file, options)
            .map_err(|e| io_error("cannot read", path, e))?;
        Ok(Self { file, metadata })
    }

    /// Its footer, schema and page index.
    pub fn metadata(&self) -> &ArrowReaderMetadata {
        &self.metadata
    }
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
            schema: schema.clone(),
            row_group_rows: layout.row_group_rows.max(1),
            rows: 0,
        };
        this.writer = Some(Writer::Batches(
            ArrowWriter::try_new(sink, schema, Some(props))
                .map_err(|e| io_error("cannot start parquet in", &this.temp, e))?,
        ));
        Ok(this)
    }

    /// Appends rows.
    pub fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        if let Some(Writer::Batches(writer)) = self.writer.as_mut() {
            writer
                .write(batch)
                .map_err(|e| io_error("cannot write", &self.temp, e))?;
            self.rows += batch.num_rows() as u64;
            return Ok(());
        }
        // Whole row groups from here on: the batch is cut into groups of its own.
        let step = self.row_group_rows;
        for at in (0..batch.num_rows()).step_by(step) {
            let part = batch.slice(at, step.min(batch.num_rows() - at));
            let columns: Vec<_> = part.columns().iter().cloned().map(Some).collect();
            self.encode_row_group(None, &columns, part.num_rows())?;
        }
        Ok(())
    }

    /// Appends row group `group` of `old` with some columns replaced: `replaced` holds, for
    /// each of the schema's columns, new values for the group, or `None` to keep the old
    /// column chunk's bytes as they are. New values may drop rows only when every column
    /// is replaced. The old file must have this file's schema ([`AtomicParquet::can_splice`]).
    pub fn splice_row_group(
        &mut self,
        old: &OldFile,
        group: usize,
        replaced: &[Option<ArrayRef>],
    ) -> Result<()> {
        // Replaced values may hold fewer rows than the old group (rows removed).
        let rows = match replaced.iter().flatten().next() {
            Some(values) => values.len(),
            None => {
                let rows = old.metadata.metadata().row_group(group).num_rows();
                usize::try_from(rows).unwrap_or(0)
            }
        };
        if replaced.iter().flatten().any(|v| v.len() != rows) {
            return Err(DriverError::internal(
                "a spliced row group's new columns differ in length",
            ));
        }
        if rows != old.metadata.metadata().row_group(group).num_rows() as usize
            && replaced.iter().any(Option::is_none)
        {
            return Err(DriverError::internal(
                "a spliced row group keeps old columns but not the old rows",
            ));
        }
        self.encode_row_group(Some((old, group)), replaced, rows)
    }

    /// Whether row groups of `old` can be spliced into this file: the same parquet schema.
    pub fn can_splice(&mut self, old: &OldFile) -> bool {
        match self.groups() {
            Ok(Writer::Groups { file, .. }) => {
                file.schema_descr() == old.metadata.metadata().file_metadata().schema_descr()
            }
            _ => false,
        }
    }

    /// The file writer, once whole row groups are written (switching to it if need be).
    fn groups(&mut self) -> Result<&mut Writer> {
        if let Some(Writer::Batches(_)) = &self.writer {
            let Some(Writer::Batches(batches)) = self.writer.take() else {
                unreachable!("matched above")
            };
            let (file, encoders) = batches.into_serialized_writer().map_err(|e| {
                // No writer is left for the drop to see: the partial file goes now.
                let _ = std::fs::remove_file(&self.temp);
                io_error("cannot write", &self.temp, e)
            })?;
            self.writer = Some(Writer::Groups { file, encoders });
        }
        Ok(self.writer.as_mut().expect("just set"))
    }

    /// Writes one row group of `rows` rows: each column encoded from `columns`, or (where
    /// `None`) copied from `old`'s row group.
    fn encode_row_group(
        &mut self,
        old: Option<(&OldFile, usize)>,
        columns: &[Option<ArrayRef>],
        rows: usize,
    ) -> Result<()> {
        let (temp, schema) = (self.temp.clone(), self.schema.clone());
        let failed = |e: ParquetError| io_error("cannot write", &temp, e);
        let Writer::Groups { file, encoders } = self.groups()? else {
            unreachable!("groups() switches to row groups")
        };
        let mut writers = encoders
            .create_column_writers(file.flushed_row_groups().len())
            .map_err(failed)?
            .into_iter();
        // A column is one leaf unless nested: its leaves are those rooted at it.
        let descriptor = file.schema_descr();
        let mut leaves = vec![0; schema.fields().len()];
        for l in 0..descriptor.num_columns() {
            leaves[descriptor.get_column_root_idx(l)] += 1;
        }
        let mut group = file.next_row_group().map_err(failed)?;
        let mut leaf = 0;
        for ((field, column), leaves) in schema.fields().iter().zip(columns).zip(leaves) {
            match (column, old) {
                (Some(values), _) => {
                    let parts = compute_leaves(field, values).map_err(failed)?;
                    for part in parts {
                        let mut writer = writers.next().expect("a writer per leaf");
                        writer.write(&part).map_err(failed)?;
                        writer
                            .close()
                            .map_err(failed)?
                            .append_to_row_group(&mut group)
                            .map_err(failed)?;
                    }
                }
                (None, Some((old, index))) => {
                    let meta = old.metadata.metadata();
                    for l in leaf..leaf + leaves {
                        writers.next();
                        let chunk = meta.row_group(index).column(l);
                        let column_index = meta
                            .column_index()
                            .and_then(|i| i.get(index)?.get(l))
                            .filter(|i| !matches!(i, ColumnIndexMetaData::NONE))
                            .cloned();
                        let offset_index = meta
                            .offset_index()
                            .and_then(|i| i.get(index)?.get(l))
                            .cloned();
                        let close = ColumnCloseResult {
                            bytes_written: chunk.compressed_size() as u64,
                            rows_written: rows as u64,
                            metadata: chunk.clone(),
                            bloom_filter: None,
                            column_index,
                            offset_index,
                        };
                        group.append_column(&old.file, close).map_err(failed)?;
                    }
                }
                (None, None) => unreachable!("new rows are always encoded"),
            }
            leaf += leaves;
        }
        group.close().map_err(failed)?;
        self.rows += rows as u64;
        Ok(())
    }

    /// Rows written so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Bytes of the file flushed so far (row groups still in memory not counted).
    pub fn bytes(&self) -> u64 {
        match &self.writer {
            Some(Writer::Batches(w)) => w.bytes_written() as u64,
            Some(Writer::Groups { file, .. }) => file.bytes_written() as u64,
            None => 0,
        }
    }

    /// Finishes the file, makes it durable and puts it in place of the old one.
    pub fn commit(mut self) -> Result<SyncReport> {
        let sink = match self.writer.take().expect("a writer until commit") {
            Writer::Batches(w) => w.into_inner(),
            Writer::Groups { file, .. } => file.into_inner(),
        };
        let mut sink = sink.map_err(|e| io_error("cannot finish", &self.temp, e))?;
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
