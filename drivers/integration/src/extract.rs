//! One table's sync: a full extract into a new copy, or an incremental one merged into the
//! existing copy. Either way the new copy is written beside the old one and renamed over it
//! only when complete ([`AtomicParquet`]), so a sync that fails or is killed leaves the last
//! good copy, and the next run starts from it.
//!
//! Incremental: with a `cursor_column`, a sync asks only for rows whose cursor is above the
//! highest value in the copy (the copy itself is the bookmark, so it can never disagree with
//! the data). With a `primary_key`, a fetched row replaces the copy's row with the same key;
//! without one, fetched rows are appended. Deletes are invisible to a cursor: a `--full`
//! sync (or a change of the source's columns, which forces one) reconciles them. A row
//! committed late with a cursor below the bookmark is missed the same way — pick a cursor
//! the source sets at commit (a sequence, an `updated_at` set by trigger).

use std::collections::HashMap;
use std::fs::File;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256};
use svc_driver_parquet::AtomicParquet;
use svc_plugin_api::arrow::array::{Array as _, ArrayRef, AsArray as _};
use svc_plugin_api::arrow::datatypes::{
    DataType, Date32Type, Decimal128Type, Int16Type, Int32Type, Int64Type, SchemaRef,
    TimestampMicrosecondType,
};
use svc_plugin_api::datafusion::parquet::arrow::arrow_reader::statistics::StatisticsConverter;
use svc_plugin_api::datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use svc_plugin_api::datafusion::parquet::arrow::ProjectionMask;
use svc_plugin_api::{
    DriverError, ErrorKind, RecordBatch, Result, SyncMode, SyncProgress, SyncReport, TableRef,
};
use tokio::sync::mpsc;

use crate::columns::{schema, Adjusted, Column, Kind};
use crate::config::{Connection, Dialect};
use crate::session::Session;
use crate::source::{plain_column, Source};

/// Batches (or, in a merge, planned row groups) in flight between a reader and the parquet
/// writer.
pub(crate) const IN_FLIGHT: usize = 4;

/// A table's keys: what identifies a row and what orders changes.
#[derive(Debug, Clone, Default)]
pub(crate) struct Keys {
    /// The primary key's columns, in order.
    pub primary: Vec<String>,
    /// The cursor column.
    pub cursor: Option<String>,
}

impl Keys {
    /// The table's `primary_key` (comma-separated) and `cursor_column`, as plain names.
    pub fn parse(table: &TableRef) -> Result<Self> {
        let primary = table
            .primary_key
            .as_deref()
            .unwrap_or("")
            .split(',')
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .map(|c| plain_column(table, "primary_key column", c))
            .collect::<Result<Vec<_>>>()?;
        let cursor = table
            .cursor_column
            .as_deref()
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .map(|c| plain_column(table, "cursor_column", c))
            .transpose()?;
        Ok(Self { primary, cursor })
    }

    /// Checks the keys against the source's columns: they exist and the cursor orders.
    pub fn check(&self, table: &TableRef, columns: &[Column], dialect: Dialect) -> Result<()> {
        let find = |name: &str, what: &str| {
            columns.iter().find(|c| c.name == name).ok_or_else(|| {
                DriverError::new(
                    ErrorKind::BadRequest,
                    format!(
                        "Table '{}': {what} '{name}' is not a column of the source (it has {})",
                        table.id,
                        columns
                            .iter()
                            .map(|c| c.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                )
            })
        };
        for key in &self.primary {
            find(key, "primary_key column")?;
        }
        if let Some(cursor) = &self.cursor {
            let column = find(cursor, "cursor_column")?;
            if !orders(&column.kind, dialect) {
                return Err(DriverError::new(
                    ErrorKind::BadRequest,
                    format!(
                        "Table '{}': cursor_column '{cursor}' is {}, which cannot mark changes; \
                         use {}",
                        table.id,
                        column.source_type,
                        match dialect {
                            Dialect::Postgres | Dialect::Mysql =>
                                "an integer, numeric(p,s ≤ 38 digits), date or timestamp column",
                            // SQLite keeps dates and times as text in whatever form the writer
                            // chose, which does not order like the times it means.
                            Dialect::Sqlite => "an integer or DECIMAL(p,s ≤ 38 digits) column",
                        }
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// Whether values of `kind` order the way the source orders them, and print exactly.
fn orders(kind: &Kind, dialect: Dialect) -> bool {
    let times = matches!(kind, Kind::Date | Kind::Timestamp | Kind::TimestampUtc);
    matches!(kind, Kind::I16 | Kind::I32 | Kind::I64)
        || matches!(kind, Kind::Decimal { precision, .. } if *precision <= 38)
        || (times && dialect != Dialect::Sqlite)
}

/// Where the copy goes and how its row groups are cut.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub path: PathBuf,
    pub row_group_rows: usize,
    pub batch_rows: usize,
    /// The hashes of copies this process already knows.
    pub hashes: std::sync::Arc<KnownHashes>,
}

/// The hashes of the copies this process wrote or read, so a sync that changes nothing
/// reports its copy's hash without reading the whole file again. An entry holds only while
/// the file is the one hashed: same inode, size and modification time.
#[derive(Debug, Default)]
pub(crate) struct KnownHashes(std::sync::Mutex<HashMap<PathBuf, (FileStamp, String)>>);

/// What tells one version of a file from another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileStamp {
    inode: u64,
    len: u64,
    modified: Option<std::time::SystemTime>,
}

impl FileStamp {
    fn of(path: &Path) -> Option<Self> {
        use std::os::unix::fs::MetadataExt as _;
        let meta = std::fs::metadata(path).ok()?;
        Some(Self {
            inode: meta.ino(),
            len: meta.len(),
            modified: meta.modified().ok(),
        })
    }
}

impl KnownHashes {
    /// The hash of `path` as it is now, when known.
    fn get(&self, path: &Path) -> Option<String> {
        let stamp = FileStamp::of(path)?;
        let known = self.0.lock().expect("hashes lock");
        known
            .get(path)
            .filter(|(at, _)| *at == stamp)
            .map(|(_, hash)| hash.clone())
    }

    /// Remembers the hash of `path` as it is now.
    fn put(&self, path: &Path, hash: &str) {
        if let Some(stamp) = FileStamp::of(path) {
            let mut known = self.0.lock().expect("hashes lock");
            known.insert(path.to_owned(), (stamp, hash.to_owned()));
        }
    }
}

/// Brings `target` up to date with the table's source.
pub(crate) async fn sync(
    name: &str,
    connection: &Connection,
    table: &TableRef,
    target: &Target,
    mode: SyncMode,
    progress: &SyncProgress,
) -> Result<SyncReport> {
    let source = Source::parse(table)?;
    let keys = Keys::parse(table)?;
    let mut conn = Session::open(name, connection).await?;
    let columns = conn.columns(name, &source).await?;
    keys.check(table, &columns, conn.dialect())?;
    let schema = schema(&columns);
    let mut notes = Vec::new();
    let existing = existing_schema(&target.path)?;
    let same_columns = existing
        .as_ref()
        .is_some_and(|old| same_fields(old, &schema));
    if existing.is_some() && !same_columns {
        notes.push(
            "the source's columns changed since the last sync: the copy was rebuilt with the \
             new columns"
                .to_owned(),
        );
    }
    let bookmark = match (&keys.cursor, mode, same_columns) {
        (Some(cursor), SyncMode::Auto, true) => {
            let kind = &columns
                .iter()
                .find(|c| &c.name == cursor)
                .expect("checked")
                .kind;
            let path = target.path.clone();
            let (cursor, kind, dialect) = (cursor.clone(), kind.clone(), conn.dialect());
            blocking(move || highest(&path, &cursor, &kind, dialect)).await?
        }
        _ => None,
    };
    let job = Job {
        name,
        source: &source,
        columns: &columns,
        target,
        schema,
        progress,
    };
    let outcome = match (&bookmark, &keys.cursor) {
        (Some(literal), Some(cursor)) => {
            let filter = format!("\"{cursor}\" > {literal} ORDER BY \"{cursor}\"");
            incremental(&mut conn, &job, &keys, &filter).await
        }
        _ => full(&mut conn, &job).await,
    };
    conn.close().await;
    let (mut report, adjusted) = outcome?;
    target.hashes.put(&target.path, &report.hash);
    notes.extend(describe(&adjusted));
    report.notes.extend(notes);
    Ok(report)
}

/// One sync's source, columns and destination, as the two modes need them.
struct Job<'a> {
    name: &'a str,
    source: &'a Source,
    columns: &'a [Column],
    target: &'a Target,
    schema: SchemaRef,
    progress: &'a SyncProgress,
}

/// Everything, into a new copy.
async fn full(conn: &mut Session, job: &Job<'_>) -> Result<(SyncReport, Adjusted)> {
    let (tx, mut rx) = mpsc::channel::<RecordBatch>(IN_FLIGHT);
    let (path, rows) = (job.target.path.clone(), job.target.row_group_rows);
    let (schema, progress) = (job.schema.clone(), job.progress.clone());
    let writer = tokio::task::spawn_blocking(move || -> Result<AtomicParquet> {
        let mut w = AtomicParquet::with_row_groups(&path, schema, rows)?;
        while let Some(batch) = rx.blocking_recv() {
            w.write(&batch)?;
            progress.advance(batch.num_rows() as u64, w.bytes());
        }
        Ok(w)
    });
    let read = conn
        .rows(
            job.name,
            job.source,
            job.columns,
            None,
            job.target.batch_rows,
            &tx,
        )
        .await;
    drop(tx);
    let written = writer
        .await
        .map_err(|e| DriverError::internal(format!("the parquet writer failed: {e}")))?;
    // A writer failure shows up on the reader's side as a closed channel: report the cause.
    let writer = written?;
    let adjusted = read?;
    let report = blocking(move || writer.commit()).await?;
    Ok((report, adjusted))
}

/// Rows past the bookmark, merged into the existing copy.
async fn incremental(
    conn: &mut Session,
    job: &Job<'_>,
    keys: &Keys,
    filter: &str,
) -> Result<(SyncReport, Adjusted)> {
    let (tx, mut rx) = mpsc::channel::<RecordBatch>(IN_FLIGHT);
    let progress = job.progress.clone();
    let collect = tokio::spawn(async move {
        let mut batches = Vec::new();
        while let Some(b) = rx.recv().await {
            progress.advance(b.num_rows() as u64, 0);
            batches.push(b);
        }
        batches
    });
    let (target, columns, schema) = (job.target, job.columns, job.schema.clone());
    let read = conn
        .rows(
            job.name,
            job.source,
            columns,
            Some(filter),
            target.batch_rows,
            &tx,
        )
        .await;
    drop(tx);
    let changes = collect
        .await
        .map_err(|e| DriverError::internal(format!("collecting changes failed: {e}")))?;
    let adjusted = read?;
    let changed: usize = changes.iter().map(RecordBatch::num_rows).sum();
    let target = target.clone();
    let key_columns: Vec<usize> = keys
        .primary
        .iter()
        .map(|k| columns.iter().position(|c| &c.name == k).expect("checked"))
        .collect();
    let mut report = blocking(move || {
        if changed == 0 {
            unchanged(&target.path, &target.hashes)
        } else {
            crate::merge::merge(&target, schema, &changes, &key_columns)
        }
    })
    .await?;
    report.notes.push(format!(
        "incremental: {changed} new or changed rows fetched"
    ));
    Ok((report, adjusted))
}

/// The copy as it is, when nothing changed at the source.
fn unchanged(path: &Path, hashes: &KnownHashes) -> Result<SyncReport> {
    let rows = ParquetRecordBatchReaderBuilder::try_new(open(path)?)
        .map_err(|e| corrupt(path, e))?
        .metadata()
        .file_metadata()
        .num_rows();
    let rows = u64::try_from(rows).unwrap_or(0);
    if let Some(hash) = hashes.get(path) {
        let bytes = std::fs::metadata(path).map_or(0, |m| m.len());
        return Ok(SyncReport {
            rows,
            bytes,
            hash,
            notes: Vec::new(),
        });
    }
    let mut file = open(path)?;
    let mut hash = Sha256::new();
    let mut buf = vec![0; 1 << 20];
    let mut bytes = 0u64;
    loop {
        let n = file
            .read(&mut buf)
            .map_err(|e| DriverError::internal(format!("reading {}: {e}", path.display())))?;
        if n == 0 {
            break;
        }
        hash.update(&buf[..n]);
        bytes += n as u64;
    }
    Ok(SyncReport {
        rows,
        bytes,
        hash: hex::encode(hash.finalize()),
        notes: Vec::new(),
    })
}

/// The copy's schema, when there is a copy.
fn existing_schema(path: &Path) -> Result<Option<SchemaRef>> {
    match File::open(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(DriverError::internal(format!("{}: {e}", path.display()))),
        // An unreadable copy is replaced by a full sync rather than failing every sync.
        Ok(file) => Ok(ParquetRecordBatchReaderBuilder::try_new(file)
            .ok()
            .map(|b| b.schema().clone())),
    }
}

/// Same column names and types, in order (metadata aside).
fn same_fields(a: &SchemaRef, b: &SchemaRef) -> bool {
    a.fields().len() == b.fields().len()
        && a.fields()
            .iter()
            .zip(b.fields())
            .all(|(x, y)| x.name() == y.name() && x.data_type() == y.data_type())
}

/// The cursor's highest value in the copy, as a SQL literal of the source; `None` when the
/// copy is empty (the sync is then a full one). Read from the row groups' statistics in the
/// footer when they are exact (a no-change sync of a large copy then reads no rows), else
/// from the column itself.
fn highest(path: &Path, cursor: &str, kind: &Kind, dialect: Dialect) -> Result<Option<String>> {
    let builder =
        ParquetRecordBatchReaderBuilder::try_new(open(path)?).map_err(|e| corrupt(path, e))?;
    if let Some(best) = highest_in_footer(&builder, cursor) {
        return Ok(best?.map(|v| literal(v, kind, dialect)));
    }
    let index = builder
        .schema()
        .index_of(cursor)
        .map_err(|e| corrupt(path, e))?;
    let mask = ProjectionMask::roots(builder.parquet_schema(), [index]);
    let reader = builder
        .with_projection(mask)
        .build()
        .map_err(|e| corrupt(path, e))?;
    let mut best: Option<i128> = None;
    for batch in reader {
        let batch = batch.map_err(|e| corrupt(path, e))?;
        best = best.max(column_max(batch.column(0), cursor)?);
    }
    Ok(best.map(|v| literal(v, kind, dialect)))
}

/// The cursor's highest value from the row groups' statistics; `None` when some row group
/// with values has no exact maximum recorded.
fn highest_in_footer(
    builder: &ParquetRecordBatchReaderBuilder<File>,
    cursor: &str,
) -> Option<Result<Option<i128>>> {
    let groups = builder.metadata().row_groups();
    let converter =
        StatisticsConverter::try_new(cursor, builder.schema(), builder.parquet_schema()).ok()?;
    let maxes = converter.row_group_maxes(groups).ok()?;
    let exact = converter.row_group_is_max_value_exact(groups).ok()?;
    let nulls = converter.row_group_null_counts(groups).ok()?;
    let complete = groups.iter().enumerate().all(|(i, group)| {
        let only_nulls =
            nulls.is_valid(i) && i64::try_from(nulls.value(i)).ok() == Some(group.num_rows());
        only_nulls || (maxes.is_valid(i) && exact.is_valid(i) && exact.value(i))
    });
    complete.then(|| column_max(&maxes, cursor))
}

/// The highest value of a cursor column's values, widened to i128.
fn column_max(column: &ArrayRef, cursor: &str) -> Result<Option<i128>> {
    Ok(match column.data_type() {
        DataType::Int16 => max_of(column.as_primitive::<Int16Type>().iter(), i128::from),
        DataType::Int32 => max_of(column.as_primitive::<Int32Type>().iter(), i128::from),
        DataType::Int64 => max_of(column.as_primitive::<Int64Type>().iter(), i128::from),
        DataType::Date32 => max_of(column.as_primitive::<Date32Type>().iter(), i128::from),
        DataType::Timestamp(..) => max_of(
            column.as_primitive::<TimestampMicrosecondType>().iter(),
            i128::from,
        ),
        DataType::Decimal128(..) => max_of(column.as_primitive::<Decimal128Type>().iter(), |v| v),
        other => {
            return Err(DriverError::internal(format!(
                "cursor column '{cursor}' holds {other} in the copy"
            )))
        }
    })
}

fn max_of<T>(values: impl Iterator<Item = Option<T>>, widen: impl Fn(T) -> i128) -> Option<i128> {
    values.flatten().map(widen).max()
}

/// A cursor value as a literal the source compares with the column (dates and times not on
/// SQLite, see [`orders`]). Built from a number, never from text, so it cannot carry anything
/// but that value. A MySQL session runs in UTC, so its `TIMESTAMP` literal is UTC already.
fn literal(v: i128, kind: &Kind, dialect: Dialect) -> String {
    match kind {
        Kind::Date => {
            let day = chrono::DateTime::from_timestamp(v as i64 * 86_400, 0).unwrap_or_default();
            format!("DATE '{}'", day.format("%Y-%m-%d"))
        }
        Kind::Timestamp | Kind::TimestampUtc => {
            let at = chrono::DateTime::from_timestamp_micros(v as i64).unwrap_or_default();
            let text = at.format("%Y-%m-%d %H:%M:%S%.6f");
            if *kind == Kind::Timestamp || dialect == Dialect::Mysql {
                format!("TIMESTAMP '{text}'")
            } else {
                format!("TIMESTAMPTZ '{text}+00'")
            }
        }
        Kind::Decimal { scale, .. } if *scale > 0 => {
            let digits = v.unsigned_abs().to_string();
            let scale = *scale as usize;
            let padded = format!("{digits:0>width$}", width = scale + 1);
            let (whole, frac) = padded.split_at(padded.len() - scale);
            format!("{}{whole}.{frac}", if v < 0 { "-" } else { "" })
        }
        _ => v.to_string(),
    }
}

/// What the admin should hear about values that had to change.
fn describe(a: &Adjusted) -> Vec<String> {
    let mut notes = Vec::new();
    if a.replaced_text > 0 {
        notes.push(format!(
            "{} text values held bytes that are not UTF-8; they were replaced by U+FFFD",
            a.replaced_text
        ));
    }
    if a.nulled > 0 {
        notes.push(format!(
            "{} values have no exact form in their column's type (NaN or infinite numerics, \
             infinite dates, text in a number or date column) and are NULL",
            a.nulled
        ));
    }
    if a.flattened > 0 {
        notes.push(format!(
            "{} multi-dimensional arrays were flattened into lists",
            a.flattened
        ));
    }
    notes
}

pub(crate) fn open(path: &Path) -> Result<File> {
    File::open(path).map_err(|e| DriverError::internal(format!("{}: {e}", path.display())))
}

pub(crate) fn corrupt(path: &Path, e: impl std::fmt::Display) -> DriverError {
    DriverError::new(
        ErrorKind::Corrupt,
        format!("the copy {} cannot be read: {e}", path.display()),
    )
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| DriverError::internal(format!("a blocking task failed: {e}")))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursor_literals_are_exact() {
        assert_eq!(literal(42, &Kind::I64, Dialect::Postgres), "42");
        assert_eq!(literal(1, &Kind::Date, Dialect::Mysql), "DATE '1970-01-02'");
        assert_eq!(
            literal(1_709_296_496_789_012, &Kind::Timestamp, Dialect::Postgres),
            "TIMESTAMP '2024-03-01 12:34:56.789012'"
        );
        assert_eq!(
            literal(0, &Kind::TimestampUtc, Dialect::Postgres),
            "TIMESTAMPTZ '1970-01-01 00:00:00.000000+00'"
        );
        assert_eq!(
            literal(0, &Kind::TimestampUtc, Dialect::Mysql),
            "TIMESTAMP '1970-01-01 00:00:00.000000'"
        );
        let money = Kind::Decimal {
            precision: 12,
            scale: 2,
        };
        assert_eq!(literal(-5, &money, Dialect::Sqlite), "-0.05");
        assert_eq!(literal(123_456, &money, Dialect::Sqlite), "1234.56");
    }

    #[test]
    fn the_highest_cursor_comes_from_the_footer_and_skips_groups_of_nulls() {
        use svc_plugin_api::arrow::array::{Decimal128Array, Int64Array};
        use svc_plugin_api::arrow::datatypes::{Field, Schema};
        let dir = std::env::temp_dir().join(format!("svc-highest-{}", std::process::id()));
        let path = dir.join("copy.parquet");
        let schema = std::sync::Arc::new(Schema::new(vec![
            Field::new("n", DataType::Int64, true),
            Field::new("m", DataType::Decimal128(12, 2), true),
        ]));
        let mut w = AtomicParquet::with_row_groups(&path, schema.clone(), 2).unwrap();
        for (n, m) in [
            ([Some(5), Some(9)], [Some(150), Some(-3)]),
            ([None, None], [None, None]),
            ([Some(7), None], [Some(1_234), None]),
        ] {
            let batch = RecordBatch::try_new(
                schema.clone(),
                vec![
                    std::sync::Arc::new(Int64Array::from(n.to_vec())),
                    std::sync::Arc::new(
                        Decimal128Array::from(m.to_vec())
                            .with_precision_and_scale(12, 2)
                            .unwrap(),
                    ),
                ],
            )
            .unwrap();
            w.write(&batch).unwrap();
        }
        w.commit().unwrap();
        let builder = ParquetRecordBatchReaderBuilder::try_new(open(&path).unwrap()).unwrap();
        assert_eq!(builder.metadata().num_row_groups(), 3);
        assert_eq!(highest_in_footer(&builder, "n").unwrap().unwrap(), Some(9));
        assert_eq!(
            highest_in_footer(&builder, "m").unwrap().unwrap(),
            Some(1_234)
        );
        let money = Kind::Decimal {
            precision: 12,
            scale: 2,
        };
        assert_eq!(
            highest(&path, "m", &money, Dialect::Postgres).unwrap(),
            Some("12.34".to_owned())
        );
        let _ = std::fs::remove_dir_all(dir);
    }
}
