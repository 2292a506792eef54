//! Drivers' settings: the one path from `[data_source.<source_type>]` of the instance config
//! file and `SVC_<SOURCE_TYPE>_<KEY>` environment overrides to each driver's own typed
//! settings ([`svc_plugin_api::DriverSettings`]).

use std::collections::BTreeMap;

use anyhow::anyhow;
use svc_driver_integration::IntegrationConfig;
use svc_driver_ticketing::TicketingConfig;
use svc_driver_warehouse::WarehouseConfig;
use svc_plugin_api::DriverSettings as Settings;

/// The `[data_source.*]` tables of the instance config file, as written.
pub type RawSettings = BTreeMap<String, toml::Table>;

/// Every built-in driver's settings, resolved at start (file, then environment, then the
/// driver's own check).
#[derive(Debug, Clone, Default)]
pub struct DriverSettings {
    warehouse: WarehouseConfig,
    integration: IntegrationConfig,
    ticketing: TicketingConfig,
}

/// The source types whose drivers take settings.
const WITH_SETTINGS: &[&str] = &["warehouse", "integration", "ticketing"];

impl DriverSettings {
    /// Resolves the file's tables with the environment; errors name the table and the key.
    pub fn resolve(mut raw: RawSettings) -> anyhow::Result<Self> {
        if let Some(unknown) = raw.keys().find(|k| !WITH_SETTINGS.contains(&k.as_str())) {
            return Err(anyhow!(
                "[data_source.{unknown}]: no driver takes settings under that name (known: {})",
                WITH_SETTINGS.join(", ")
            ));
        }
        Ok(Self {
            warehouse: resolve("warehouse", raw.remove("warehouse"))?,
            integration: resolve("integration", raw.remove("integration"))?,
            ticketing: resolve("ticketing", raw.remove("ticketing"))?,
        })
    }

    /// `[data_source.integration.<name>]`.
    pub fn integration(&self) -> &IntegrationConfig {
        &self.integration
    }

    /// `[data_source.ticketing.<name>]`.
    pub fn ticketing(&self) -> &TicketingConfig {
        &self.ticketing
    }

    /// `[data_source.warehouse]`.
    pub fn warehouse(&self) -> &WarehouseConfig {
        &self.warehouse
    }
}

/// One driver's settings: its table (or the defaults), then `SVC_<TYPE>_<KEY>` overrides,
/// then its check.
fn resolve<T: Settings>(source_type: &str, table: Option<toml::Table>) -> anyhow::Result<T> {
    let mut settings: T = match table {
        None => T::default(),
        Some(t) => toml::Value::Table(t)
            .try_into()
            .map_err(|e| anyhow!("[data_source.{source_type}] {e}"))?,
    };
    let prefix = format!("SVC_{}_", source_type.to_ascii_uppercase());
    for key in T::KEYS {
        let var = format!("{prefix}{}", key.to_ascii_uppercase());
        if let Ok(value) = std::env::var(&var) {
            settings
                .set(key, &value)
                .map_err(|e| anyhow!("{var}: {e}"))?;
        }
    }
    // Sorted, so a later variable for the same connection and key cannot depend on the
    // environment's order.
    let mut named: Vec<(String, String)> = std::env::vars()
        .filter_map(|(var, value)| {
            let rest = var.strip_prefix(&prefix)?;
            let fixed = T::KEYS.iter().any(|k| k.eq_ignore_ascii_case(rest));
            (!fixed).then(|| (var.clone(), value))
        })
        .collect();
    named.sort();
    for (var, value) in named {
        settings
            .set_named(&var[prefix.len()..], &value)
            .map_err(|e| anyhow!("{var}: {e}"))?;
    }
    settings
        .check()
        .map_err(|e| anyhow!("[data_source.{source_type}] {e}"))?;
    Ok(settings)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> RawSettings {
        #[derive(serde::Deserialize)]
        struct File {
            data_source: RawSettings,
        }
        toml::from_str::<File>(text).unwrap().data_source
    }

    #[test]
    fn the_file_then_the_environment() {
        // Only this test sets this variable.
        std::env::set_var("SVC_WAREHOUSE_LEGACY_WRAP_VIEWS", "true");
        let s = DriverSettings::resolve(raw(
            "[data_source.warehouse]\nproject = \"demo-proj\"\nlocation = \"US\"\nmax_scan_bytes = 100\n",
        ))
        .unwrap();
        std::env::remove_var("SVC_WAREHOUSE_LEGACY_WRAP_VIEWS");
        let w = s.warehouse();
        assert_eq!(w.data_project(), Some("demo-proj"));
        assert_eq!(w.job_project(), Some("demo-proj"));
        assert_eq!((w.max_scan_bytes, w.legacy_wrap_views), (100, true));
        assert_eq!(w.endpoint, svc_driver_warehouse::config::DEFAULT_ENDPOINT);

        let none = DriverSettings::resolve(RawSettings::new()).unwrap();
        assert_eq!(none.warehouse().data_project(), None);
    }

    #[test]
    fn unknown_tables_and_keys_are_named() {
        let err = DriverSettings::resolve(raw("[data_source.warehous]\nproject = \"x\"\n"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("data_source.warehous") && err.contains("known: warehouse"),
            "{err}"
        );
        let err = DriverSettings::resolve(raw("[data_source.warehouse]\nprojekt = \"x\"\n"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("projekt"), "{err}");
    }
}
