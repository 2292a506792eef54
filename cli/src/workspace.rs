//! The local workspace: pulled tables and snapshots as parquet files, for offline SQL.
//!
//! `<workspace>/tables/<id>.parquet` (with `<id>.etag`) and `<workspace>/snapshots/<name>.parquet`
//! (with `<name>.meta.json`). The workspace is `--workspace`, else `SVC_WORKSPACE`, else
//! `~/.local/share/svc`.

use std::path::{Path, PathBuf};

use crate::exit::{CliError, Exit, Result};
pub use crate::interrupt::Temp;

/// The workspace directory in effect.
pub fn root(flag: Option<&Path>) -> PathBuf {
    if let Some(p) = flag {
        return p.to_owned();
    }
    if let Some(p) = std::env::var_os("SVC_WORKSPACE").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    home.join(".local").join("share").join("svc")
}

/// A sub-directory, created when missing.
pub fn dir(root: &Path, name: &str) -> Result<PathBuf> {
    let d = root.join(name);
    std::fs::create_dir_all(&d).map_err(|e| {
        CliError::new(
            Exit::Other,
            format!("Error: cannot create {}: {e}", d.display()),
        )
        .hint("choose a writable workspace with --workspace or SVC_WORKSPACE")
    })?;
    Ok(d)
}
