//! Output helpers shared by the commands that write results: the output forms and the
//! atomic file writer.

use std::io::Read;

use clap::ValueEnum;

use crate::exit::{CliError, Exit, Result};

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

/// Copies `body` to `path` through a temporary file beside it; nothing is left behind when
/// the copy fails.
pub fn write_atomically(path: &std::path::Path, body: &mut impl Read) -> Result<u64> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    let name = path
        .file_name()
        .ok_or_else(|| CliError::usage(format!("Error: {} is not a file name", path.display())))?;
    let temp = dir.join(format!(
        ".{}.{}.tmp",
        name.to_string_lossy(),
        std::process::id()
    ));
    let result = (|| {
        let mut file = std::fs::File::create(&temp)?;
        let n = std::io::copy(body, &mut file)?;
        file.sync_all()?;
        std::fs::rename(&temp, path)?;
        Ok::<u64, std::io::Error>(n)
    })();
    result.map_err(|e| {
        let _ = std::fs::remove_file(&temp);
        CliError::new(
            Exit::Other,
            format!("Error: writing {} failed: {e}", path.display()),
        )
        .hint("nothing was written; check the directory exists, is writable and has room")
    })
}
