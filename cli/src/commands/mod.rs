//! One module per command area. A new area (activity, telemetry, sessions, …) is one new
//! file here plus one variant in `main.rs`'s `Command`.

pub mod activity;
pub mod admin;
pub mod admin_sessions;
pub mod auth;
pub mod discovery;
pub mod local;
pub mod marketplace;
pub mod mcp;
pub mod me;
pub mod memory;
pub mod pull;
pub mod query;
pub mod sessions;
pub mod snapshot;
pub mod telemetry;
pub mod ticketing;
pub mod views;

use std::time::Duration;

use crate::client::Client;
use crate::config;
use crate::exit::{CliError, Result};

/// Settings every command can reach: the global flags.
#[derive(Debug, Clone)]
pub struct Ctx {
    /// `--server`.
    pub server: Option<String>,
    /// `--token`.
    pub token: Option<String>,
    /// `--timeout` for queries, scans and downloads.
    pub long_timeout: Duration,
}

impl Ctx {
    /// A client for the configured server (usage error when there is none).
    pub fn client(&self) -> Result<Client> {
        let target = config::target(self.server.as_deref(), self.token.as_deref())?;
        Ok(Client::new(target, self.long_timeout))
    }

    /// A client that must carry a token.
    pub fn authed(&self) -> Result<Client> {
        let target = config::target(self.server.as_deref(), self.token.as_deref())?;
        if target.token.is_none() {
            return Err(
                CliError::new(crate::exit::Exit::Auth, "Error: not logged in")
                    .hint("svc auth login, or set SVC_TOKEN to a personal access token"),
            );
        }
        Ok(Client::new(target, self.long_timeout))
    }
}

/// A path segment, percent-encoded.
pub fn seg(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
