//! Where the server is and who we are: flags, then `SVC_SERVER` / `SVC_TOKEN`, then the saved
//! file `~/.config/svc/config.toml` (or `$SVC_CONFIG_DIR/config.toml`), written with mode
//! 0600 because it holds a token.

use std::path::PathBuf;

use crate::exit::{CliError, Result};

/// The saved settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Saved {
    /// Server base URL.
    pub server: Option<String>,
    /// Bearer token (a personal access token or a session token).
    pub token: Option<String>,
    /// Whose token it is (for `whoami` without a server call).
    pub email: Option<String>,
}

/// The config directory.
pub fn dir() -> PathBuf {
    if let Some(d) = std::env::var_os("SVC_CONFIG_DIR") {
        return PathBuf::from(d);
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    home.join(".config").join("svc")
}

fn file() -> PathBuf {
    dir().join("config.toml")
}

impl Saved {
    /// Reads the file; a missing file is empty settings.
    pub fn load() -> Result<Self> {
        let path = file();
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(e) => {
                return Err(CliError::usage(format!(
                    "Error: cannot read {}: {e}",
                    path.display()
                )))
            }
        };
        let mut saved = Self::default();
        // Three string keys; written by `save` below.
        for line in text.lines() {
            let Some((key, value)) = line.split_once('=') else {
                continue;
            };
            let value: Option<String> = serde_json::from_str(value.trim()).ok();
            match key.trim() {
                "server" => saved.server = value,
                "token" => saved.token = value,
                "email" => saved.email = value,
                _ => {}
            }
        }
        Ok(saved)
    }

    /// Writes the file (mode 0600), replacing it atomically.
    pub fn save(&self) -> Result<()> {
        let dir = dir();
        std::fs::create_dir_all(&dir)
            .map_err(|e| CliError::usage(format!("Error: cannot create {}: {e}", dir.display())))?;
        let mut text = String::new();
        for (key, value) in [
            ("server", &self.server),
            ("token", &self.token),
            ("email", &self.email),
        ] {
            if let Some(v) = value {
                // A JSON string is a valid TOML basic string.
                text.push_str(&format!(
                    "{key} = {}\n",
                    serde_json::to_string(v).unwrap_or_default()
                ));
            }
        }
        let temp = dir.join(format!(".config.toml.{}", std::process::id()));
        write_private(&temp, text.as_bytes())?;
        std::fs::rename(&temp, file())
            .map_err(|e| CliError::usage(format!("Error: cannot save {}: {e}", file().display())))
    }
}

#[cfg(unix)]
fn write_private(path: &std::path::Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(bytes)?;
    Ok(())
}

#[cfg(not(unix))]
fn write_private(path: &std::path::Path, bytes: &[u8]) -> Result<()> {
    std::fs::write(path, bytes)?;
    Ok(())
}

/// Server and token in effect.
#[derive(Debug, Clone)]
pub struct Target {
    /// Base URL without a trailing slash.
    pub server: String,
    /// The bearer token, when there is one.
    pub token: Option<String>,
}

/// Resolves the server and token: flag, then environment, then the saved file.
pub fn target(server_flag: Option<&str>, token_flag: Option<&str>) -> Result<Target> {
    let saved = Saved::load()?;
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let server = server_flag
        .map(str::to_owned)
        .or_else(|| env("SVC_SERVER"))
        .or(saved.server)
        .ok_or_else(|| {
            CliError::usage("Error: no server configured")
                .hint("svc auth login --server http://HOST:8000, or set SVC_SERVER")
        })?;
    if !(server.starts_with("http://") || server.starts_with("https://")) {
        return Err(
            CliError::usage(format!("Error: the server URL '{server}' has no scheme"))
                .hint(format!("use http://{server} (or https://…)")),
        );
    }
    let token = token_flag
        .map(str::to_owned)
        .or_else(|| env("SVC_TOKEN"))
        .or(saved.token);
    Ok(Target {
        server: server.trim_end_matches('/').to_owned(),
        token,
    })
}
