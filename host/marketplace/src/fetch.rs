//! Bringing a marketplace's files onto this machine: a local directory is read where it
//! is; anything else is cloned with the `git` command (shallow, non-interactive, with a
//! deadline) into a fresh directory, so a failed fetch never touches the last good copy.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::process::Command;

/// How long one clone may take.
pub const CLONE_DEADLINE: Duration = Duration::from_secs(300);

/// Refuses URLs that could make `git` run something or read options: a leading `-`, the
/// `ext::` transport, control characters. Accepts `https://`, `http://`, `ssh://`, `git://`,
/// `file://`, `user@host:path` and absolute local paths.
pub fn check_url(url: &str) -> Result<(), String> {
    if url.is_empty() || url.len() > 2048 {
        return Err("url: 1 to 2048 characters".into());
    }
    if url.starts_with('-') || url.chars().any(char::is_control) {
        return Err("url: must not start with '-' or hold control characters".into());
    }
    let lower = url.to_ascii_lowercase();
    let ok = ["https://", "http://", "ssh://", "git://", "file://"]
        .iter()
        .any(|p| lower.starts_with(p))
        || url.starts_with('/')
        || (url.contains('@') && url.contains(':') && !lower.contains("::"));
    if ok && !lower.starts_with("ext::") {
        Ok(())
    } else {
        Err(format!(
            "url: a git URL (https://, ssh://, git://, file://, user@host:path) or an absolute path, not '{url}'"
        ))
    }
}

/// A local directory holding a catalogue, read in place.
pub fn local_dir(url: &str) -> Option<PathBuf> {
    let p = Path::new(url);
    (p.is_absolute() && p.join(crate::layout::CATALOGUE).is_file()).then(|| p.to_path_buf())
}

/// Clones `url` (at `branch`) into `dest`, which must not exist; returns the commit.
pub async fn clone(url: &str, branch: Option<&str>, dest: &Path) -> Result<String, String> {
    let mut cmd = Command::new("git");
    cmd.args([
        "-c",
        "protocol.ext.allow=never",
        "clone",
        "--depth",
        "1",
        "--quiet",
    ]);
    if let Some(b) = branch {
        cmd.args(["--branch", b]);
    }
    cmd.arg("--").arg(url).arg(dest);
    let out = run(cmd).await?;
    if !out.status.success() {
        return Err(format!(
            "git clone failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let mut rev = Command::new("git");
    rev.arg("-C").arg(dest).args(["rev-parse", "HEAD"]);
    let out = run(rev).await?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

async fn run(mut cmd: Command) -> Result<std::process::Output, String> {
    cmd.env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_ASKPASS", "true")
        .env("SSH_ASKPASS", "true")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    match tokio::time::timeout(CLONE_DEADLINE, cmd.output()).await {
        Err(_) => Err(format!(
            "git ran past {} seconds and was stopped",
            CLONE_DEADLINE.as_secs()
        )),
        Ok(Err(e)) => Err(format!("cannot run git: {e}")),
        Ok(Ok(out)) => Ok(out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_that_could_run_commands_are_refused() {
        assert!(check_url("https://example.com/mkt.git").is_ok());
        assert!(check_url("/srv/git/mkt.git").is_ok());
        assert!(check_url("git@example.com:org/mkt.git").is_ok());
        assert!(check_url("--upload-pack=touch /tmp/x").is_err());
        assert!(check_url("ext::sh -c touch% /tmp/x").is_err());
        assert!(check_url("relative/path").is_err());
        assert!(check_url("https://x\n").is_err());
    }
}
