//! Turning an uploaded file into a table's parquet file, and reading what a data file holds.
//!
//! Every upload is re-encoded through [`AtomicParquet`], parquet included: decoding every
//! row is what proves the file readable before it replaces the table's data, and the
//! rewrite gives uploaded tables the same row groups and compression as synced ones (so a
//! sample reads as little). CSV and newline-delimited JSON get their schema inferred from
//! the file itself; a value that does not fit the inferred type fails the upload, naming
//! the problem, and the table keeps its old data.

use std::fs::File;
use std::io::{BufReader, Seek, SeekFrom};
use std::path::Path;
use std::sync::Arc;

use svc_plugin_api::arrow::csv;
use svc_plugin_api::arrow::datatypes::{Schema, SchemaRef};
use svc_plugin_api::arrow::json;
use svc_plugin_api::arrow::record_batch::RecordBatchReader;
use svc_plugin_api::datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use svc_plugin_api::{DriverError, RecordBatch, SyncReport, TableSchema};

use crate::AtomicParquet;

/// Rows per batch while converting.
const BATCH_ROWS: usize = 8192;
/// Records read to infer a CSV or JSON schema: enough to see sparse columns, bounded so a
/// huge file is not read twice in full.
const INFER_RECORDS: usize = 100_000;

/// The formats an upload may come in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UploadFormat {
    /// A parquet file.
    Parquet,
    /// CSV with a header line.
    Csv,
    /// Newline-delimited JSON: one object per line.
    Ndjson,
}

impl UploadFormat {
    /// The name clients use.
    pub fn name(self) -> &'static str {
        match self {
            Self::Parquet => "parquet",
            Self::Csv => "csv",
            Self::Ndjson => "ndjson",
        }
    }
}

/// Why an upload was not taken.
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    /// The uploaded file is not what its format says, or holds values the table cannot take.
    #[error("{0}")]
    Unreadable(String),
    /// Writing the table's file failed on this machine.
    #[error(transparent)]
    Local(Box<DriverError>),
}

impl From<DriverError> for IngestError {
    fn from(e: DriverError) -> Self {
        Self::Local(Box::new(e))
    }
}

/// What a data file holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataFacts {
    /// Rows in the file.
    pub rows: u64,
    /// Size on disk.
    pub bytes: u64,
    /// Its columns.
    pub schema: TableSchema,
}

/// Rows, size and columns of the parquet file at `path`, from its footer; `Ok(None)` when
/// there is no file. An error says why a present file cannot be read.
pub fn inspect(path: &Path) -> Result<Option<DataFacts>, String> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot open it: {e}")),
    };
    let bytes = file.metadata().map_err(|e| e.to_string())?.len();
    let builder = ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(|e| format!("it is not a readable parquet file ({e})"))?;
    Ok(Some(DataFacts {
        rows: u64::try_from(builder.metadata().file_metadata().num_rows()).unwrap_or(0),
        bytes,
        schema: TableSchema::from_arrow(builder.schema()),
    }))
}

/// Converts the uploaded file at `source` into the parquet file at `target`, which is
/// replaced only when every row was read and written. Blocking: call it off the async
/// runtime.
pub fn ingest(
    source: &Path,
    format: UploadFormat,
    target: &Path,
) -> Result<(SyncReport, TableSchema), IngestError> {
    let unreadable = |e: &dyn std::fmt::Display| {
        IngestError::Unreadable(format!("the upload is not valid {}: {e}", format.name()))
    };
    let open = || {
        File::open(source).map_err(|e| {
            IngestError::from(DriverError::internal(format!(
                "cannot reopen the upload: {e}"
            )))
        })
    };
    let (schema, batches): (
        SchemaRef,
        Box<dyn Iterator<Item = Result<RecordBatch, String>>>,
    ) = match format {
        UploadFormat::Parquet => {
            let reader = ParquetRecordBatchReaderBuilder::try_new(open()?)
                .map_err(|e| unreadable(&e))?
                .with_batch_size(BATCH_ROWS)
                .build()
                .map_err(|e| unreadable(&e))?;
            let schema = reader.schema();
            (
                schema,
                Box::new(reader.map(|b| b.map_err(|e| e.to_string()))),
            )
        }
        UploadFormat::Csv => {
            let mut file = open()?;
            let (schema, _) = csv::reader::Format::default()
                .with_header(true)
                .infer_schema(BufReader::new(&mut file), Some(INFER_RECORDS))
                .map_err(|e| unreadable(&e))?;
            rewind(&mut file)?;
            let schema = Arc::new(schema);
            let reader = csv::ReaderBuilder::new(schema.clone())
                .with_header(true)
                .with_batch_size(BATCH_ROWS)
                .build(BufReader::new(file))
                .map_err(|e| unreadable(&e))?;
            (
                schema,
                Box::new(reader.map(|b| b.map_err(|e| e.to_string()))),
            )
        }
        UploadFormat::Ndjson => {
            let mut file = open()?;
            let (schema, _) =
                json::reader::infer_json_schema(BufReader::new(&mut file), Some(INFER_RECORDS))
                    .map_err(|e| unreadable(&e))?;
            rewind(&mut file)?;
            let schema = Arc::new(schema);
            let reader = json::ReaderBuilder::new(schema.clone())
                .with_batch_size(BATCH_ROWS)
                .build(BufReader::new(file))
                .map_err(|e| unreadable(&e))?;
            (
                schema,
                Box::new(reader.map(|b| b.map_err(|e| e.to_string()))),
            )
        }
    };
    if schema.fields().is_empty() {
        return Err(IngestError::Unreadable(format!(
            "the upload has no columns; a {} file with at least one column is needed",
            format.name()
        )));
    }
    let shown = TableSchema::from_arrow(&Schema::new(schema.fields().clone()));
    let mut out = AtomicParquet::create(target, schema)?;
    for batch in batches {
        let batch = batch.map_err(|e| unreadable(&e))?;
        out.write(&batch)?;
    }
    Ok((out.commit()?, shown))
}

fn rewind(file: &mut File) -> Result<(), IngestError> {
    file.seek(SeekFrom::Start(0)).map(|_| ()).map_err(|e| {
        IngestError::from(DriverError::internal(format!(
            "cannot reread the upload: {e}"
        )))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn csv_and_ndjson_become_parquet_with_inferred_types() {
        let dir = std::env::temp_dir().join(format!("svc-ingest-{}", uuid_like()));
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("t.parquet");
        let csv = write(&dir, "a.csv", "id,name,amount\n1,a,2.5\n2,b,\n");
        let (report, schema) = ingest(&csv, UploadFormat::Csv, &target).unwrap();
        assert_eq!(report.rows, 2);
        let types: Vec<_> = schema
            .columns
            .iter()
            .map(|c| (c.name.as_str(), c.data_type.as_str()))
            .collect();
        assert_eq!(
            types,
            [("id", "Int64"), ("name", "Utf8"), ("amount", "Float64")]
        );
        let facts = inspect(&target).unwrap().unwrap();
        assert_eq!((facts.rows, facts.schema), (2, schema));

        let nd = write(&dir, "a.jsonl", "{\"k\": 1}\n{\"k\": 2, \"v\": \"x\"}\n");
        let (report, schema) = ingest(&nd, UploadFormat::Ndjson, &target).unwrap();
        assert_eq!((report.rows, schema.columns.len()), (2, 2));

        // A parquet upload is decoded in full and rewritten.
        let copy = dir.join("copy.parquet");
        std::fs::copy(&target, &copy).unwrap();
        let (report, _) = ingest(&copy, UploadFormat::Parquet, &target).unwrap();
        assert_eq!(report.rows, 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_bad_upload_leaves_the_old_file() {
        let dir = std::env::temp_dir().join(format!("svc-ingest-{}", uuid_like()));
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("t.parquet");
        let good = write(&dir, "a.csv", "id\n1\n");
        ingest(&good, UploadFormat::Csv, &target).unwrap();
        let before = std::fs::read(&target).unwrap();

        let not_parquet = write(&dir, "b.parquet", "id\n1\n");
        let err = ingest(&not_parquet, UploadFormat::Parquet, &target).unwrap_err();
        assert!(
            matches!(&err, IngestError::Unreadable(m) if m.contains("not valid parquet")),
            "{err}"
        );
        // The type inferred from the first rows does not hold further down.
        let mut text = String::from("id\n");
        for i in 0..(INFER_RECORDS + 10) {
            text.push_str(&format!("{i}\n"));
        }
        text.push_str("oops\n");
        let drifting = write(&dir, "c.csv", &text);
        let err = ingest(&drifting, UploadFormat::Csv, &target).unwrap_err();
        assert!(matches!(err, IngestError::Unreadable(_)), "{err}");
        let empty = write(&dir, "d.jsonl", "");
        assert!(ingest(&empty, UploadFormat::Ndjson, &target).is_err());

        assert_eq!(std::fs::read(&target).unwrap(), before);
        let leftovers: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(".t.parquet"))
            .collect();
        assert!(leftovers.is_empty(), "no temporary file is left");
        assert_eq!(inspect(&dir.join("missing.parquet")).unwrap(), None);
        assert!(inspect(&not_parquet).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn uuid_like() -> String {
        format!(
            "{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        )
    }
}
