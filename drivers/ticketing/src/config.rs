//! `[data_source.ticketing.<name>]`: the issue trackers whose webhooks svc receives.
//!
//! ```toml
//! [data_source.ticketing.jira]
//! secret_env = "JIRA_WEBHOOK_SECRET"     # or secret_file = "/etc/svc/jira.secret"
//! base_url = "https://example.atlassian.net"   # for backfill over the REST search
//! user = "svc-bot@example.com"
//! token_env = "JIRA_API_TOKEN"           # or token_file
//! project_keys = ["OPS", "DATA"]         # empty: every project
//! raw_retention_days = 90                # raw events kept; 0 keeps them all
//! max_body_bytes = 10485760              # larger deliveries are refused (413)
//! compact_interval_ms = 2000             # how often received events are folded in
//! backfill_every_minutes = 60            # scheduled backfill; 0 (the default): on demand only
//! ```
//!
//! Every key can be set or overridden by `SVC_TICKETING_<NAME>_<KEY>` (`project_keys` as a
//! comma-separated list). Secrets are read when used, never kept in these settings nor shown.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use svc_plugin_api::{read_secret, DriverSettings};

/// One issue tracker.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Connection {
    /// The variable holding the webhook signing secret.
    #[serde(default)]
    pub secret_env: Option<String>,
    /// A file holding the webhook signing secret (its first line).
    #[serde(default)]
    pub secret_file: Option<PathBuf>,
    /// The tracker's address, for backfill (`<base_url>/rest/api/3/search`).
    #[serde(default)]
    pub base_url: Option<String>,
    /// The account backfill signs in as (basic auth with the token).
    #[serde(default)]
    pub user: Option<String>,
    /// The variable holding the backfill API token.
    #[serde(default)]
    pub token_env: Option<String>,
    /// A file holding the backfill API token (its first line).
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    /// Projects kept; events of other projects are acknowledged and dropped. Empty: all.
    #[serde(default)]
    pub project_keys: Vec<String>,
    /// Days of raw events kept in the events table; 0 keeps every event.
    #[serde(default)]
    pub raw_retention_days: u32,
    /// Largest delivery accepted.
    #[serde(default = "default_max_body_bytes")]
    pub max_body_bytes: u64,
    /// Milliseconds between folds of the received events into the tables.
    #[serde(default = "default_compact_interval_ms")]
    pub compact_interval_ms: u64,
    /// Minutes between scheduled backfills; 0 runs backfill only on demand.
    #[serde(default)]
    pub backfill_every_minutes: u64,
}

fn default_max_body_bytes() -> u64 {
    10 << 20
}

fn default_compact_interval_ms() -> u64 {
    2_000
}

impl Default for Connection {
    fn default() -> Self {
        Self {
            secret_env: None,
            secret_file: None,
            base_url: None,
            user: None,
            token_env: None,
            token_file: None,
            project_keys: Vec::new(),
            raw_retention_days: 0,
            max_body_bytes: default_max_body_bytes(),
            compact_interval_ms: default_compact_interval_ms(),
            backfill_every_minutes: 0,
        }
    }
}

impl Connection {
    /// The webhook signing secret.
    pub fn secret(&self) -> Result<String, String> {
        match read_secret(
            "secret",
            self.secret_env.as_deref(),
            self.secret_file.as_deref(),
        )? {
            Some(s) if !s.is_empty() => Ok(s),
            Some(_) => Err("the webhook secret is empty".into()),
            None => Err("no webhook secret: set secret_env or secret_file".into()),
        }
    }

    /// The backfill API token, when one is configured.
    pub fn token(&self) -> Result<Option<String>, String> {
        read_secret(
            "token",
            self.token_env.as_deref(),
            self.token_file.as_deref(),
        )
    }

    /// How often received events are folded into the tables.
    pub fn compact_interval(&self) -> Duration {
        Duration::from_millis(self.compact_interval_ms.max(100))
    }

    /// How often backfill runs on its own, if it does.
    pub fn backfill_every(&self) -> Option<Duration> {
        (self.backfill_every_minutes > 0)
            .then(|| Duration::from_secs(self.backfill_every_minutes * 60))
    }

    /// Whether an event of this project is kept (an event naming no project always is).
    pub fn keeps_project(&self, project: Option<&str>) -> bool {
        match project {
            None => true,
            Some(p) => self.project_keys.is_empty() || self.project_keys.iter().any(|k| k == p),
        }
    }
}

/// Every tracker by name.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(transparent)]
pub struct TicketingConfig {
    /// Connections by name (the webhook path's `<name>` and the tables' bucket).
    pub connections: BTreeMap<String, Connection>,
}

/// Per-connection keys, as written in the file (upper-cased after `SVC_TICKETING_<NAME>_`).
const CONNECTION_KEYS: &[&str] = &[
    "secret_env",
    "secret_file",
    "base_url",
    "user",
    "token_env",
    "token_file",
    "project_keys",
    "raw_retention_days",
    "max_body_bytes",
    "compact_interval_ms",
    "backfill_every_minutes",
];

impl DriverSettings for TicketingConfig {
    const KEYS: &'static [&'static str] = &[];

    fn set(&mut self, key: &str, _value: &str) -> Result<(), String> {
        Err(format!("unknown key {key}"))
    }

    fn set_named(&mut self, rest: &str, value: &str) -> Result<bool, String> {
        let Some((name, key)) = svc_plugin_api::split_named_key(rest, CONNECTION_KEYS) else {
            return Ok(false);
        };
        let c = self.connections.entry(name).or_default();
        let number = |v: &str| {
            v.trim()
                .parse::<u64>()
                .map_err(|_| format!("{key} must be a whole number, not '{v}'"))
        };
        let text = || Some(value.to_owned());
        match key {
            "secret_env" => c.secret_env = text(),
            "secret_file" => c.secret_file = Some(value.into()),
            "base_url" => c.base_url = text(),
            "user" => c.user = text(),
            "token_env" => c.token_env = text(),
            "token_file" => c.token_file = Some(value.into()),
            "project_keys" => {
                c.project_keys = value
                    .split(',')
                    .map(str::trim)
                    .filter(|k| !k.is_empty())
                    .map(str::to_owned)
                    .collect()
            }
            "raw_retention_days" => {
                c.raw_retention_days =
                    u32::try_from(number(value)?).map_err(|_| format!("{key} is too large"))?
            }
            "max_body_bytes" => c.max_body_bytes = number(value)?,
            "backfill_every_minutes" => c.backfill_every_minutes = number(value)?,
            _ => c.compact_interval_ms = number(value)?,
        }
        Ok(true)
    }

    fn check(&self) -> Result<(), String> {
        for (name, c) in &self.connections {
            let at = |e: String| format!("connection '{name}': {e}");
            // The name becomes table ids (`<name>_issues`) and a directory.
            if name.is_empty()
                || name.len() > 64
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            {
                return Err(at("names are 1-64 lower-case letters, digits and _".into()));
            }
            if c.secret_env.is_some() && c.secret_file.is_some() {
                return Err(at("set secret_env or secret_file, not both".into()));
            }
            if c.token_env.is_some() && c.token_file.is_some() {
                return Err(at("set token_env or token_file, not both".into()));
            }
            c.secret().map_err(at)?;
            c.token().map_err(at)?;
            if let Some(url) = &c.base_url {
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(at(format!("base_url {url} is not an http(s) address")));
                }
            }
            if let Some(bad) = c.project_keys.iter().find(|k| {
                !k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') || k.is_empty()
            }) {
                return Err(at(format!(
                    "project key '{bad}' is not letters, digits and _"
                )));
            }
            if c.backfill_every_minutes > 0 && (c.base_url.is_none() || c.user.is_none()) {
                return Err(at(
                    "backfill_every_minutes needs base_url, user and a token".into(),
                ));
            }
            if c.max_body_bytes == 0 {
                return Err(at("max_body_bytes must be at least 1".into()));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn environment_variables_define_connections_and_bad_ones_are_named() {
        let mut c = TicketingConfig::default();
        std::env::set_var("SVC_TEST_TICKETING_SECRET_A", "s3cret");
        assert!(c
            .set_named("JIRA_CLOUD_SECRET_ENV", "SVC_TEST_TICKETING_SECRET_A")
            .unwrap());
        assert!(c.set_named("JIRA_CLOUD_PROJECT_KEYS", "OPS, DATA").unwrap());
        assert!(!c.set_named("SOMETHING", "x").unwrap());
        let jira = &c.connections["jira_cloud"];
        assert_eq!(jira.project_keys, ["OPS", "DATA"]);
        assert!(jira.keeps_project(Some("OPS")) && !jira.keeps_project(Some("HR")));
        assert!(
            jira.keeps_project(None),
            "events naming no project are kept"
        );
        assert_eq!(jira.secret().unwrap(), "s3cret");
        assert!(c.check().is_ok());

        c.set_named("OTHER_SECRET_ENV", "SVC_TEST_SURELY_UNSET_VAR")
            .unwrap();
        let err = c.check().unwrap_err();
        assert!(
            err.contains("'other'") && err.contains("SVC_TEST_SURELY_UNSET_VAR"),
            "{err}"
        );
        let mut none = TicketingConfig::default();
        none.connections.insert("x".into(), Connection::default());
        assert!(none.check().unwrap_err().contains("no webhook secret"));
    }
}
