//! `[data_source.integration.<name>]`: the operational databases tables are extracted from.
//!
//! ```toml
//! [data_source.integration.crm]
//! url = "postgres://svc_reader@db.internal:5432/crm"   # or mysql://, mariadb://, sqlite:///path
//! password_env = "CRM_DB_PASSWORD"      # or password_file = "/etc/svc/crm.pw"
//! max_connections = 2                   # tables of this connection synced at once
//! statement_timeout_seconds = 600       # 0: the database's own setting (not SQLite)
//! row_group_rows = 131072               # rows per parquet row group in the copies
//! tls = "verify_full"                   # disable, prefer (default), require, verify_ca
//! tls_ca_file = "/etc/svc/crm-ca.pem"   # the authority the server's certificate is checked against
//! ```
//!
//! Every key can be set or overridden by `SVC_INTEGRATION_<NAME>_<KEY>` (a connection may be
//! defined by its URL variable alone). A password is read when a sync connects, never kept in
//! these settings, and URLs are shown with any inline password masked.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;
use svc_plugin_api::DriverSettings;

/// One source database.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Connection {
    /// `postgres://user@host:port/db`, `mysql://user@host:port/db` (or `mariadb://`), or
    /// `sqlite:///path/to/file.db`.
    pub url: String,
    /// The variable holding the password.
    #[serde(default)]
    pub password_env: Option<String>,
    /// A file holding the password (its first line).
    #[serde(default)]
    pub password_file: Option<PathBuf>,
    /// Tables of this connection synced at once.
    #[serde(default = "default_max_connections")]
    pub max_connections: u32,
    /// Longest a sync's statement may run on the source; 0 leaves the database's setting.
    #[serde(default)]
    pub statement_timeout_seconds: u64,
    /// Rows per parquet row group in the copies (the unit a query skips or reads).
    #[serde(default = "default_row_group_rows")]
    pub row_group_rows: u64,
    /// Whether and how the connection is encrypted (PostgreSQL and MySQL); the URL's own
    /// `sslmode` applies when this is unset.
    #[serde(default)]
    pub tls: Option<Tls>,
    /// The certificate authority (PEM) the server's certificate must chain to, for
    /// `verify_ca` and `verify_full`; without it, the public web's authorities.
    #[serde(default)]
    pub tls_ca_file: Option<PathBuf>,
}

/// How a connection is encrypted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tls {
    /// Never.
    Disable,
    /// When the server offers it, without checking its certificate.
    Prefer,
    /// Always, without checking the server's certificate.
    Require,
    /// Always, with a certificate from a trusted authority (any host name).
    VerifyCa,
    /// Always, with a trusted certificate naming the host connected to.
    VerifyFull,
}

impl std::str::FromStr for Tls {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        Ok(
            match text.trim().to_ascii_lowercase().replace('-', "_").as_str() {
                "disable" => Self::Disable,
                "prefer" => Self::Prefer,
                "require" => Self::Require,
                "verify_ca" => Self::VerifyCa,
                "verify_full" => Self::VerifyFull,
                _ => {
                    return Err(format!(
                    "tls must be disable, prefer, require, verify_ca or verify_full, not '{text}'"
                ))
                }
            },
        )
    }
}

fn default_row_group_rows() -> u64 {
    131_072
}

fn default_max_connections() -> u32 {
    2
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("url", &redact(&self.url))
            .field("password_env", &self.password_env)
            .field("password_file", &self.password_file)
            .field("max_connections", &self.max_connections)
            .field("statement_timeout_seconds", &self.statement_timeout_seconds)
            .field("row_group_rows", &self.row_group_rows)
            .field("tls", &self.tls)
            .field("tls_ca_file", &self.tls_ca_file)
            .finish()
    }
}

/// The kinds of database a connection may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// PostgreSQL (and wire-compatible databases).
    Postgres,
    /// MySQL or MariaDB.
    Mysql,
    /// A SQLite database file, opened read-only.
    Sqlite,
}

impl Connection {
    /// The connection's database kind, from its URL's scheme.
    pub fn dialect(&self) -> Result<Dialect, String> {
        let scheme = self.url.split_once("://").map(|(s, _)| s).unwrap_or("");
        match scheme {
            "postgres" | "postgresql" => Ok(Dialect::Postgres),
            "mysql" | "mariadb" => Ok(Dialect::Mysql),
            "sqlite" => Ok(Dialect::Sqlite),
            _ => Err(format!(
                "url {} has no known scheme (postgres://, mysql://, mariadb://, sqlite://)",
                redact(&self.url)
            )),
        }
    }

    /// The password, when one is configured outside the URL.
    pub fn password(&self) -> Result<Option<String>, String> {
        svc_plugin_api::read_secret(
            "password",
            self.password_env.as_deref(),
            self.password_file.as_deref(),
        )
    }
}

/// Every connection by name.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(transparent)]
pub struct IntegrationConfig {
    /// Connections by name (a table's `bucket`).
    pub connections: BTreeMap<String, Connection>,
}

/// Per-connection keys, as written in the file (upper-cased after `SVC_INTEGRATION_<NAME>_`).
const CONNECTION_KEYS: &[&str] = &[
    "url",
    "password_env",
    "password_file",
    "max_connections",
    "statement_timeout_seconds",
    "row_group_rows",
    "tls",
    "tls_ca_file",
];

impl DriverSettings for IntegrationConfig {
    const KEYS: &'static [&'static str] = &[];

    fn set(&mut self, key: &str, _value: &str) -> Result<(), String> {
        Err(format!("unknown key {key}"))
    }

    fn set_named(&mut self, rest: &str, value: &str) -> Result<bool, String> {
        let Some((name, key)) = svc_plugin_api::split_named_key(rest, CONNECTION_KEYS) else {
            return Ok(false);
        };
        let connection = self.connections.entry(name).or_insert_with(|| Connection {
            url: String::new(),
            password_env: None,
            password_file: None,
            max_connections: default_max_connections(),
            statement_timeout_seconds: 0,
            row_group_rows: default_row_group_rows(),
            tls: None,
            tls_ca_file: None,
        });
        let number = |v: &str| {
            v.trim()
                .parse::<u64>()
                .map_err(|_| format!("{key} must be a whole number, not '{v}'"))
        };
        match key {
            "url" => connection.url = value.to_owned(),
            "password_env" => connection.password_env = Some(value.to_owned()),
            "password_file" => connection.password_file = Some(value.into()),
            "max_connections" => {
                connection.max_connections =
                    u32::try_from(number(value)?).map_err(|_| format!("{key} is too large"))?
            }
            "row_group_rows" => connection.row_group_rows = number(value)?,
            "tls" => connection.tls = Some(value.parse()?),
            "tls_ca_file" => connection.tls_ca_file = Some(value.into()),
            _ => connection.statement_timeout_seconds = number(value)?,
        }
        Ok(true)
    }

    fn check(&self) -> Result<(), String> {
        for (name, c) in &self.connections {
            let at = |e: String| format!("connection '{name}': {e}");
            if !name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            {
                return Err(at("names are lower-case letters, digits and _".into()));
            }
            if c.url.is_empty() {
                return Err(at("url is missing".into()));
            }
            let dialect = c.dialect().map_err(at)?;
            if dialect == Dialect::Sqlite && (c.tls.is_some() || c.tls_ca_file.is_some()) {
                return Err(at(
                    "tls and tls_ca_file do not apply to a SQLite file".into()
                ));
            }
            if let Some(ca) = &c.tls_ca_file {
                if !ca.is_file() {
                    return Err(at(format!("tls_ca_file {} is not a file", ca.display())));
                }
            }
            if c.password_env.is_some() && c.password_file.is_some() {
                return Err(at("set password_env or password_file, not both".into()));
            }
            if c.row_group_rows == 0 {
                return Err(at("row_group_rows must be at least 1".into()));
            }
            if c.max_connections == 0 {
                return Err(at("max_connections must be at least 1".into()));
            }
            c.password().map_err(at)?;
        }
        Ok(())
    }
}

/// `url` with an inline password replaced by `***`.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, tail) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}{tail}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn environment_variables_define_and_override_named_connections() {
        let mut c = IntegrationConfig::default();
        assert!(c
            .set_named("CRM_DB_URL", "postgres://reader@db/crm")
            .unwrap());
        assert!(c.set_named("CRM_DB_MAX_CONNECTIONS", "4").unwrap());
        assert!(c
            .set_named("CRM_DB_STATEMENT_TIMEOUT_SECONDS", "30")
            .unwrap());
        assert!(!c.set_named("SOMETHING_ELSE", "x").unwrap());
        let crm = &c.connections["crm_db"];
        assert_eq!(
            (crm.max_connections, crm.statement_timeout_seconds),
            (4, 30)
        );
        assert!(c.check().is_ok());
        assert!(c.set_named("CRM_DB_MAX_CONNECTIONS", "many").is_err());
    }

    #[test]
    fn a_bad_url_or_password_source_is_named_and_secrets_are_masked() {
        let mut c = IntegrationConfig::default();
        c.set_named("X_URL", "oracle://u:hunter2@h/db").unwrap();
        let err = c.check().unwrap_err();
        assert!(
            err.contains("connection 'x'") && !err.contains("hunter2"),
            "{err}"
        );
        c.set_named("X_URL", "mysql://u@h/db").unwrap();
        assert!(c.check().is_ok());
        c.set_named("X_TLS", "verify-full").unwrap();
        assert_eq!(c.connections["x"].tls, Some(Tls::VerifyFull));
        assert!(c
            .set_named("X_TLS", "always")
            .unwrap_err()
            .contains("verify_ca"));
        c.set_named("X_TLS_CA_FILE", "/surely/not/here.pem")
            .unwrap();
        assert!(c.check().unwrap_err().contains("tls_ca_file"));
        c.connections.get_mut("x").unwrap().tls_ca_file = None;
        c.set_named("X_URL", "sqlite:///srv/app.db").unwrap();
        assert!(c.check().unwrap_err().contains("SQLite"));
        c.connections.get_mut("x").unwrap().tls = None;
        c.set_named("X_URL", "sqlite:///srv/app.db").unwrap();
        assert!(c.check().is_ok());
        c.set_named("X_URL", "postgres://u@h/db").unwrap();
        c.set_named("X_PASSWORD_ENV", "SVC_TEST_SURELY_UNSET_VAR")
            .unwrap();
        assert!(c.check().unwrap_err().contains("SVC_TEST_SURELY_UNSET_VAR"));
        assert_eq!(
            redact("postgres://u:hunter2@h:5432/db"),
            "postgres://u:***@h:5432/db"
        );
        assert!(!format!(
            "{:?}",
            Connection {
                url: "postgres://u:hunter2@h/db".into(),
                password_env: None,
                password_file: None,
                max_connections: 1,
                statement_timeout_seconds: 0,
                row_group_rows: 1,
                tls: None,
                tls_ca_file: None,
            }
        )
        .contains("hunter2"));
    }
}
