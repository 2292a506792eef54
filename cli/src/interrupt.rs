//! Ctrl-C: temporary files being written are removed before the process exits (130).

use std::path::{Path, PathBuf};
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
                    for p in OPEN.lock().map(|o| o.clone()).unwrap_or_default() {
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
pub fn track(path: &Path) {
    if let Ok(mut o) = OPEN.lock() {
        o.push(path.to_owned());
    }
}

/// Stops tracking `path`.
pub fn untrack(path: &Path) {
    if let Ok(mut o) = OPEN.lock() {
        o.retain(|p| p != path);
    }
}
