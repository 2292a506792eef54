//! Output helpers shared by the commands that write results: the output forms and the
//! atomic file writer.

use std::io::Read;

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
