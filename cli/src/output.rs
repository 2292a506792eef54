//! Output helpers shared by the commands that write results: the output forms and the
//! atomic file writer.

use std::io::{Read, Write};

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;

use clap::ValueEnum;

use crate::exit::{CliError, Exit, Result};
use crate::interrupt::Temp;

/// Output forms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Columns that fit the terminal (vertical records when too wide).
    Table,
    /// The server's JSON document: columns, rows, row_count, truncated.
    Json,
    /// CSV with a header line.
    Csv,
    /// An Arrow IPC stream.
    Arrow,
    /// A parquet file.
    Parquet,
}

impl Format {
    /// The format asked of the server (tables are rendered from its JSON).
    pub fn wire(self) -> &'static str {
        match self {
            Self::Table | Self::Json => "json",
            Self::Csv => "csv",
            Self::Arrow => "arrow",
            Self::Parquet => "parquet",
        }
    }
}

/// Copies `body` to `path` through a [`Temp`] beside it; nothing is left behind when the
/// copy fails or is interrupted.
pub fn write_atomically(path: &std::path::Path, body: &mut impl Read) -> Result<u64> {
    if path.file_name().is_none() {
        return Err(CliError::usage(format!(
            "Error: {} is not a file name",
            path.display()
        )));
    }
    let temp = Temp::for_target(path);
    let written = (|| {
        let mut file = std::fs::File::create(temp.path())?;
        let n = std::io::copy(body, &mut file)?;
        file.sync_all()?;
        Ok::<u64, std::io::Error>(n)
    })();
    let failed = |e: &dyn std::fmt::Display| {
        CliError::new(
            Exit::Other,
            format!("Error: writing {} failed: {e}", path.display()),
        )
        .hint("nothing was written; check the directory exists, is writable and has room")
    };
    let n = written.map_err(|e| failed(&e))?;
    temp.persist()?;
    Ok(n)
}

/// Writes batches in one of the binary-capable forms (csv, arrow, parquet), a batch at a
/// time: the one encoder behind `svc query` (server and `--local`).
pub enum BatchWriter<W: Write + Send> {
    /// CSV with a header line (the server's own settings, so both give the same bytes).
    Csv(datafusion::arrow::csv::Writer<W>),
    /// An Arrow IPC stream.
    Arrow(datafusion::arrow::ipc::writer::StreamWriter<W>),
    /// A parquet file; its footer carries `svc:truncated` like the server's.
    Parquet(datafusion::parquet::arrow::ArrowWriter<W>),
}

impl<W: Write + Send> BatchWriter<W> {
    /// A writer of `format` (csv, arrow or parquet) for rows of `schema` into `out`.
    pub fn new(format: Format, schema: &SchemaRef, out: W) -> Result<Self> {
        Ok(match format {
            Format::Csv => {
                let mut w = datafusion::arrow::csv::WriterBuilder::new()
                    .with_header(true)
                    .build(out);
                // The header line, even for an empty result.
                w.write(&RecordBatch::new_empty(schema.clone()))
                    .map_err(encode_error)?;
                Self::Csv(w)
            }
            Format::Arrow => Self::Arrow(
                datafusion::arrow::ipc::writer::StreamWriter::try_new(out, schema)
                    .map_err(encode_error)?,
            ),
            Format::Parquet => Self::Parquet(
                datafusion::parquet::arrow::ArrowWriter::try_new(out, schema.clone(), None)
                    .map_err(encode_error)?,
            ),
            Format::Table | Format::Json => {
                unreachable!("tables and JSON are rendered from the JSON document")
            }
        })
    }

    /// Appends rows.
    pub fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        match self {
            Self::Csv(w) => w.write(batch).map_err(encode_error),
            Self::Arrow(w) => w.write(batch).map_err(encode_error),
            Self::Parquet(w) => w.write(batch).map_err(encode_error),
        }
    }

    /// Ends the output.
    pub fn finish(self, truncated: bool) -> Result<()> {
        match self {
            Self::Csv(w) => {
                let mut out = w.into_inner();
                out.flush().map_err(encode_error)
            }
            Self::Arrow(mut w) => w.finish().map_err(encode_error),
            Self::Parquet(mut w) => {
                w.append_key_value_metadata(datafusion::parquet::file::metadata::KeyValue::new(
                    "svc:truncated".into(),
                    truncated.to_string(),
                ));
                w.close().map(|_| ()).map_err(encode_error)
            }
        }
    }
}

/// Encoding or writing a result failed (a closed pipe is a normal end).
pub fn encode_error(e: impl std::fmt::Display) -> CliError {
    let text = e.to_string();
    if text.contains("Broken pipe") {
        return CliError::output_closed();
    }
    CliError::new(
        Exit::Other,
        format!("Error: writing the result failed: {text}"),
    )
}

/// Copies an Arrow IPC stream from the server into `out` as `format`; returns the rows
/// written and whether the server cut the result at the limit (its stream then ends with a
/// zero-row batch, which is not copied).
pub fn copy_arrow_result(
    body: impl Read,
    format: Format,
    out: impl Write + Send,
) -> Result<(u64, bool)> {
    let broke = |e: &dyn std::fmt::Display| {
        CliError::new(Exit::Server, format!("Error: the result broke off: {e}"))
    };
    let reader =
        datafusion::arrow::ipc::reader::StreamReader::try_new(body, None).map_err(|e| broke(&e))?;
    let mut writer = BatchWriter::new(format, &reader.schema(), out)?;
    let (mut rows, mut marker) = (0u64, false);
    for batch in reader {
        let batch = batch.map_err(|e| broke(&e))?;
        if batch.num_rows() == 0 {
            marker = true;
            continue;
        }
        marker = false;
        rows += batch.num_rows() as u64;
        writer.write(&batch)?;
    }
    writer.finish(marker)?;
    Ok((rows, marker))
}
