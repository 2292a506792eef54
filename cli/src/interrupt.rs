//! Temporary files, and Ctrl-C: every file being written goes through [`Temp`], which is
//! registered here so that Ctrl-C removes it before the process exits (130), and removed on
//! drop unless it was moved into place.

use std::path::{Path, PathBuf};

use crate::exit::{CliError, Exit, Result};
use std::sync::Mutex;

static OPEN: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Starts watching for Ctrl-C (once, at start).
pub fn install() {
    std::thread::spawn(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build();
        if let Ok(rt) = rt {
            rt.block_on(async {
                if tokio::signal::ctrl_c().await.is_ok() {
                    // Held until exit: a file registered after the sweep could be created
                    // after it, so registering waits (and never happens).
                    let open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
                    for p in open.iter() {
                        let _ = std::fs::remove_file(p);
                    }
                    eprintln!("\ninterrupted; partial files removed");
                    std::process::exit(130);
                }
            });
        }
    });
}

/// Removes `path` if the process is interrupted.
fn track(path: &Path) {
    if let Ok(mut o) = OPEN.lock() {
        o.push(path.to_owned());
    }
}

/// Stops tracking `path`.
fn untrack(path: &Path) {
    if let Ok(mut o) = OPEN.lock() {
        o.retain(|p| p != path);
    }
}

/// A temporary file beside `target` that is removed unless [`Temp::persist`] renames it
/// into place: an error, Ctrl-C or a full disk never leaves a partial file.
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
        track(&path);
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
        untrack(&self.path);
        Ok(())
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        if !self.done {
            let _ = std::fs::remove_file(&self.path);
            untrack(&self.path);
        }
    }
}
