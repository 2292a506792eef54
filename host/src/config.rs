//! Command-line and environment configuration shared by every `svc-server` subcommand.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use svc_ask::LlmConfig;
use svc_catalog::settings::{DriverSettings, RawSettings};
use svc_store as store;

/// Where the state lives: the options every subcommand accepts.
#[derive(Debug, Clone, clap::Args)]
pub struct StoreArgs {
    /// Data directory (parquet extracts, state, secrets).
    #[arg(long, env = "SVC_DATA_DIR", default_value = "./data", global = true)]
    pub data_dir: PathBuf,
    /// State store URL: `sqlite://PATH` or `postgres://…` [default: SQLite at DATA_DIR/state/svc.db]
    #[arg(long, env = "SVC_DATABASE_URL", global = true, hide_env_values = true)]
    pub database_url: Option<String>,
    /// Instance config file (TOML) [default: DATA_DIR/svc.toml, when present]
    #[arg(long, env = "SVC_CONFIG", global = true)]
    pub config: Option<PathBuf>,
}

/// The instance config file: a `[data_source.<source_type>]` table per driver that takes
/// settings, and `[llm]` for ask. Every key has an environment override
/// (`SVC_<SOURCE_TYPE>_<KEY>`, `SVC_LLM_<KEY>`), which wins over the file; `svc-catalog`
/// resolves the drivers' tables, driver by driver.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct InstanceConfig {
    /// The drivers' tables, as written.
    data_source: RawSettings,
    /// `[llm]`, as written.
    llm: LlmSection,
    /// `[mcp]`, as written.
    mcp: McpSection,
    /// The bounds of MCP results, resolved (filled by [`InstanceConfig::load`]).
    #[serde(skip)]
    pub mcp_limits: crate::mcp::McpLimits,
    /// Every driver's settings, resolved (filled by [`InstanceConfig::load`]).
    #[serde(skip)]
    pub drivers: DriverSettings,
    /// The LLM ask uses, resolved (filled by [`InstanceConfig::load`]).
    #[serde(skip)]
    pub ask_llm: LlmConfig,
}

/// `[llm]`: an OpenAI-compatible chat-completions endpoint for ask.
#[derive(Clone, Default, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
struct LlmSection {
    /// API root, e.g. `http://127.0.0.1:8080/v1`.
    endpoint: Option<String>,
    /// Model name.
    model: Option<String>,
    /// The key itself (prefer `api_key_env`: a file is easier to leak than the environment).
    api_key: Option<String>,
    /// The environment variable holding the key.
    api_key_env: Option<String>,
    /// Seconds one LLM call may take.
    timeout_seconds: Option<u64>,
}

impl std::fmt::Debug for LlmSection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmSection")
            .field("endpoint", &self.endpoint)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "***"))
            .field("api_key_env", &self.api_key_env)
            .finish()
    }
}

impl LlmSection {
    /// The settings with `SVC_LLM_*` applied over the file's.
    fn resolve(self, env: &dyn Fn(&str) -> Option<String>) -> anyhow::Result<LlmConfig> {
        let pick = |key: &str, file: Option<String>| env(key).filter(|v| !v.is_empty()).or(file);
        let key_env = pick("SVC_LLM_API_KEY_ENV", self.api_key_env);
        let api_key = pick("SVC_LLM_API_KEY", self.api_key)
            .or_else(|| key_env.as_deref().and_then(env).filter(|v| !v.is_empty()));
        let timeout = match pick(
            "SVC_LLM_TIMEOUT_SECONDS",
            self.timeout_seconds.map(|s| s.to_string()),
        ) {
            None => svc_ask::llm::DEFAULT_TIMEOUT,
            Some(v) => match v.parse::<u64>() {
                Ok(s) if s > 0 => Duration::from_secs(s),
                _ => anyhow::bail!(
                    "llm timeout_seconds must be a positive number of seconds, not '{v}'"
                ),
            },
        };
        Ok(LlmConfig {
            endpoint: pick("SVC_LLM_ENDPOINT", self.endpoint),
            model: pick("SVC_LLM_MODEL", self.model),
            api_key,
            timeout,
        })
    }
}

/// `[mcp]`: how much one MCP result may hold. A model may ask for less, never for more.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
struct McpSection {
    /// Rows per result at most.
    max_rows: Option<usize>,
    /// Bytes of result text at most.
    max_bytes: Option<usize>,
}

impl McpSection {
    /// The limits with `SVC_MCP_MAX_ROWS` / `SVC_MCP_MAX_BYTES` applied over the file's.
    fn resolve(
        self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> anyhow::Result<crate::mcp::McpLimits> {
        let defaults = crate::mcp::McpLimits::default();
        let pick = |key: &str, file: Option<usize>, default: usize| -> anyhow::Result<usize> {
            match env(key).filter(|v| !v.is_empty()) {
                Some(v) => match v.parse::<usize>() {
                    Ok(n) if n > 0 => Ok(n),
                    _ => anyhow::bail!("{key} must be a positive whole number, not '{v}'"),
                },
                None => match file {
                    Some(0) => anyhow::bail!("[mcp] {} must be positive", &key[8..].to_lowercase()),
                    Some(n) => Ok(n),
                    None => Ok(default),
                },
            }
        };
        Ok(crate::mcp::McpLimits {
            max_rows: pick("SVC_MCP_MAX_ROWS", self.max_rows, defaults.max_rows)?,
            max_bytes: pick("SVC_MCP_MAX_BYTES", self.max_bytes, defaults.max_bytes)?,
        })
    }
}

impl InstanceConfig {
    /// Reads `path` (which must exist when given) or `DATA_DIR/svc.toml` (when present), then
    /// applies the environment. Errors name the file and the key.
    pub fn load(path: Option<&Path>, data_dir: &Path) -> anyhow::Result<Self> {
        let default = data_dir.join("svc.toml");
        let file = match path {
            Some(p) => Some(p.to_path_buf()),
            None => default.exists().then_some(default),
        };
        let mut config: Self = match &file {
            None => Self::default(),
            Some(f) => {
                let text = std::fs::read_to_string(f)
                    .with_context(|| format!("reading config file {}", f.display()))?;
                toml::from_str(&text).with_context(|| format!("config file {}", f.display()))?
            }
        };
        let where_ = || match &file {
            Some(f) => format!("config file {}", f.display()),
            None => "[llm] settings from the environment".to_owned(),
        };
        config.ask_llm = std::mem::take(&mut config.llm)
            .resolve(&|k| std::env::var(k).ok())
            .with_context(where_)?;
        config.mcp_limits = std::mem::take(&mut config.mcp)
            .resolve(&|k| std::env::var(k).ok())
            .with_context(where_)?;
        let raw = std::mem::take(&mut config.data_source);
        config.drivers = DriverSettings::resolve(raw).with_context(|| match &file {
            Some(f) => format!("config file {}", f.display()),
            None => "driver settings from the environment".to_owned(),
        })?;
        Ok(config)
    }
}

impl StoreArgs {
    /// The store URL in effect.
    pub fn url(&self) -> String {
        self.database_url
            .clone()
            .unwrap_or_else(|| store::default_sqlite_url(&self.data_dir))
    }

    /// The JWT signing secret: `SVC_JWT_SECRET`, else `DATA_DIR/state/jwt_secret`, generated
    /// once (mode 0600). Several replicas must share `SVC_JWT_SECRET`.
    pub fn jwt_secret(&self) -> anyhow::Result<Vec<u8>> {
        if let Ok(s) = std::env::var("SVC_JWT_SECRET") {
            if s.len() < 32 {
                tracing::warn!("SVC_JWT_SECRET is shorter than 32 characters");
            }
            return Ok(s.into_bytes());
        }
        load_or_create_secret(&self.data_dir.join("state").join("jwt_secret"))
    }
}

fn load_or_create_secret(path: &Path) -> anyhow::Result<Vec<u8>> {
    if let Ok(s) = std::fs::read_to_string(path) {
        let s = s.trim();
        if !s.is_empty() {
            return Ok(s.as_bytes().to_vec());
        }
    }
    let dir = path.parent().context("secret path has no directory")?;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let secret = hex::encode(rand::random::<[u8; 32]>());
    // Write to a temporary file created 0600 and rename, so a concurrent start never reads a
    // half-written secret and the secret is never world-readable, even briefly.
    let tmp = dir.join(format!(".jwt_secret.{}", std::process::id()));
    {
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
        let mut f = opts
            .open(&tmp)
            .with_context(|| format!("cannot create {}", tmp.display()))?;
        f.write_all(secret.as_bytes())?;
        f.sync_all()?;
    }
    // Another process may have won the race: keep theirs.
    if path.exists() {
        let _ = std::fs::remove_file(&tmp);
        return Ok(std::fs::read_to_string(path)?.trim().as_bytes().to_vec());
    }
    std::fs::rename(&tmp, path)?;
    tracing::info!(path = %path.display(), "generated a JWT signing secret");
    Ok(secret.into_bytes())
}

#[cfg(test)]
mod tests {
    #[test]
    fn secret_is_created_once_with_owner_only_permissions() {
        let dir = svc_store::testing::TempDir::new();
        let path = dir.0.join("state").join("jwt_secret");
        let a = super::load_or_create_secret(&path).unwrap();
        let b = super::load_or_create_secret(&path).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.len(), 64);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(
                std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
                0o600
            );
        }
    }
}

#[cfg(test)]
mod instance_tests {
    use super::*;

    fn write(text: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("svc-config-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("svc.toml"), text).unwrap();
        dir
    }

    #[test]
    fn llm_settings_come_from_the_file_with_the_environment_winning() {
        let section: LlmSection = toml::from_str(
            "endpoint = \"http://file/v1\"\nmodel = \"m\"\napi_key_env = \"MY_KEY\"\ntimeout_seconds = 5\n",
        )
        .unwrap();
        let env = |k: &str| match k {
            "SVC_LLM_MODEL" => Some("env-model".to_owned()),
            "MY_KEY" => Some("sk-1".to_owned()),
            _ => None,
        };
        let c = section.clone().resolve(&env).unwrap();
        assert_eq!(c.endpoint.as_deref(), Some("http://file/v1"));
        assert_eq!(c.model.as_deref(), Some("env-model"));
        assert_eq!(c.api_key.as_deref(), Some("sk-1"));
        assert_eq!(c.timeout, Duration::from_secs(5));
        assert!(!format!("{section:?}{c:?}").contains("sk-1"));
        let bad = |k: &str| (k == "SVC_LLM_TIMEOUT_SECONDS").then(|| "soon".to_owned());
        let e = LlmSection::default().resolve(&bad).unwrap_err();
        assert!(e.to_string().contains("soon"), "{e}");
    }

    #[test]
    fn mcp_limits_default_read_the_file_and_yield_to_the_environment() {
        let none = |_: &str| None;
        assert_eq!(
            McpSection::default().resolve(&none).unwrap(),
            crate::mcp::McpLimits::default()
        );
        let section: McpSection = toml::from_str("max_rows = 20\nmax_bytes = 4096\n").unwrap();
        let env = |k: &str| (k == "SVC_MCP_MAX_ROWS").then(|| "7".to_owned());
        let limits = section.resolve(&env).unwrap();
        assert_eq!((limits.max_rows, limits.max_bytes), (7, 4096));
        let zero: McpSection = toml::from_str("max_rows = 0\n").unwrap();
        let e = zero.resolve(&none).unwrap_err();
        assert!(e.to_string().contains("max_rows"), "{e}");
        let bad = |k: &str| (k == "SVC_MCP_MAX_BYTES").then(|| "lots".to_owned());
        let e = McpSection::default().resolve(&bad).unwrap_err();
        assert!(e.to_string().contains("lots"), "{e}");
    }

    #[test]
    fn mistakes_name_the_file_and_the_key() {
        let dir = write("[data_source.warehouse]\nprojekt = \"x\"\n");
        let err = format!("{:#}", InstanceConfig::load(None, &dir).unwrap_err());
        assert!(err.contains("svc.toml") && err.contains("projekt"), "{err}");
        let dir = write("[data_source.warehouse]\ncredentials_file = \"/k.json\"\n");
        let err = format!("{:#}", InstanceConfig::load(None, &dir).unwrap_err());
        assert!(err.contains("credentials_file /k.json"), "{err}");
        std::fs::write(
            dir.join("k.json"),
            r#"{"client_email": "a@b", "private_key": "not a key"}"#,
        )
        .unwrap();
        std::fs::write(
            dir.join("svc.toml"),
            format!(
                "[data_source.warehouse]\ncredentials_file = {:?}\n",
                dir.join("k.json")
            ),
        )
        .unwrap();
        let err = format!("{:#}", InstanceConfig::load(None, &dir).unwrap_err());
        assert!(
            err.contains("not an RSA private key") && !err.contains("not a key"),
            "{err}"
        );
        let err = InstanceConfig::load(Some(&dir.join("absent.toml")), &dir).unwrap_err();
        assert!(format!("{err:#}").contains("absent.toml"));
    }
}
