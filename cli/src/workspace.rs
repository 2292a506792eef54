//! The local workspace: pulled tables and snapshots as parquet files, for offline SQL.
//!
//! `<workspace>/tables/<id>.parquet` (with `<id>.etag`) and `<workspace>/snapshots/<name>.parquet`
//! (with `<name>.meta.json`). The workspace is `--workspace`, else `SVC_WORKSPACE`, else
//! `~/.local/share/svc`.

use std::path::{Path, PathBuf};

use crate::exit::{CliError, Exit, Result};

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

/// A temporary file beside `target` that is removed unless [`Temp::persist`] renames it
/// into place: an error, Ctrl-C (see `main`) or a full disk never leaves a partial file.
pub struct Temp {
    path: PathBuf,
    target: PathBuf,
    done: bool,
}

impl Temp {
    /// A temp path for `target`, registered for removal on Ctrl-C.
    pub fn for_target(target: &Path) -> Self {
        let name = target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let path = target.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
        crate::interrupt::track(&path);
        Self {
            path,
            target: target.to_owned(),
            done: false,
        }
    }

    /// Where to write.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Moves the finished file into place.
    pub fn persist(mut self) -> Result<()> {
        std::fs::rename(&self.path, &self.target).map_err(|e| {
            CliError::new(
                Exit::Other,
                format!(
                    "Error: cannot move {} into place: {e}",
                    self.target.display()
                ),
            )
        })?;
        self.done = true;
        crate::interrupt::untrack(&self.path);
        Ok(())
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        if !self.done {
            let _ = std::fs::remove_file(&self.path);
            crate::interrupt::untrack(&self.path);
        }
    }
}
