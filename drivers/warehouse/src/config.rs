//! `[data_source.warehouse]` of the instance config file, with `SVC_WAREHOUSE_<KEY>`
//! environment overrides applied by the host.

use serde::Deserialize;
use svc_plugin_api::DriverSettings;

/// Default API root; the driver appends `/bigquery/v2/...`.
pub const DEFAULT_ENDPOINT: &str = "https://bigquery.googleapis.com";

/// How the warehouse is reached.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct WarehouseConfig {
    /// API root (an emulator's address in tests).
    pub endpoint: String,
    /// The project holding the data; the warehouse is configured when it is set.
    pub project: Option<String>,
    /// The project jobs are billed to (default: `project`).
    pub billing_project: Option<String>,
    /// Job location (e.g. `EU`).
    pub location: Option<String>,
    /// A static OAuth access token (no credentials at all suits an emulator).
    pub access_token: Option<String>,
    /// A service-account key file (OAuth JWT-bearer flow).
    pub credentials_file: Option<String>,
    /// The remote size guard: most bytes one scan or query may read.
    pub max_scan_bytes: u64,
    /// Most bytes one materialization may read.
    pub max_bytes_per_materialize: u64,
    /// Read views through a wrapping query instead of direct table reads.
    pub legacy_wrap_views: bool,
}

impl Default for WarehouseConfig {
    fn default() -> Self {
        Self {
            endpoint: DEFAULT_ENDPOINT.to_owned(),
            project: None,
            billing_project: None,
            location: None,
            access_token: None,
            credentials_file: None,
            max_scan_bytes: 5 << 30,
            max_bytes_per_materialize: 10 << 30,
            legacy_wrap_views: false,
        }
    }
}

impl DriverSettings for WarehouseConfig {
    const KEYS: &'static [&'static str] = &[
        "endpoint",
        "project",
        "billing_project",
        "location",
        "access_token",
        "credentials_file",
        "max_scan_bytes",
        "max_bytes_per_materialize",
        "legacy_wrap_views",
    ];

    fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        let number = |v: &str| {
            v.trim()
                .parse::<u64>()
                .map_err(|_| format!("{key} must be a whole number of bytes, not '{v}'"))
        };
        let text = || (!value.is_empty()).then(|| value.to_owned());
        match key {
            "endpoint" => self.endpoint = value.trim_end_matches('/').to_owned(),
            "project" => self.project = text(),
            "billing_project" => self.billing_project = text(),
            "location" => self.location = text(),
            "access_token" => self.access_token = text(),
            "credentials_file" => self.credentials_file = text(),
            "max_scan_bytes" => self.max_scan_bytes = number(value)?,
            "max_bytes_per_materialize" => self.max_bytes_per_materialize = number(value)?,
            "legacy_wrap_views" => {
                self.legacy_wrap_views = match value.trim().to_ascii_lowercase().as_str() {
                    "1" | "true" | "yes" => true,
                    "0" | "false" | "no" | "" => false,
                    other => return Err(format!("{key} must be true or false, not '{other}'")),
                }
            }
            other => return Err(format!("unknown warehouse setting '{other}'")),
        }
        Ok(())
    }

    /// A key file that cannot be used stops the start, rather than failing every call.
    fn check(&self) -> Result<(), String> {
        if let Some(file) = self.credentials_file.as_deref().filter(|f| !f.is_empty()) {
            crate::auth::ServiceAccount::read(std::path::Path::new(file))?;
        }
        Ok(())
    }
}

impl WarehouseConfig {
    /// The data project, when configured.
    pub fn data_project(&self) -> Option<&str> {
        self.project.as_deref().filter(|p| !p.is_empty())
    }

    /// The project jobs run in.
    pub fn job_project(&self) -> Option<&str> {
        self.billing_project
            .as_deref()
            .filter(|p| !p.is_empty())
            .or(self.data_project())
    }
}
