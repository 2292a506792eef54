//! The drivers this server can serve, keyed by `source_type`: the built-in ones, then any
//! dynamic driver libraries found in the driver directory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use svc_driver_internal::PendingWrites;
use svc_plugin_api::ffi::DriverConfig;
use svc_plugin_api::{SeededTable, SourceDriver};
use svc_store::audit::AuditWriter;
use svc_store::{Backend, Store};

use crate::settings::DriverSettings;

/// Source drivers by `source_type`.
#[derive(Clone)]
pub struct Drivers {
    by_type: BTreeMap<&'static str, Arc<dyn SourceDriver>>,
    /// The ticketing driver again, typed: its webhook receiver, compactor and backfill are
    /// endpoints and jobs of their own, beyond the `SourceDriver` contract.
    ticketing: Arc<svc_driver_ticketing::TicketingDriver>,
}

impl std::fmt::Debug for Drivers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.by_type.keys()).finish()
    }
}

impl Drivers {
    /// The drivers compiled into svc-server. Reads of the audit log through the internal
    /// driver first wait for `audit`'s queued rows (a caller sees its own actions).
    pub fn builtin(
        data_dir: &Path,
        store: &Store,
        audit: &Arc<AuditWriter>,
        settings: &DriverSettings,
    ) -> Self {
        let writer = audit.clone();
        let audit_queued: PendingWrites = Arc::new(move || {
            let writer = writer.clone();
            Box::pin(async move { writer.flush().await })
        });
        let ticketing = Arc::new(svc_driver_ticketing::TicketingDriver::new(
            data_dir,
            settings.ticketing().clone(),
        ));
        let all: [Arc<dyn SourceDriver>; 5] = [
            Arc::new(svc_driver_parquet::ParquetDriver::new(data_dir)),
            Arc::new(svc_driver_warehouse::WarehouseDriver::new(
                data_dir,
                settings.warehouse().clone(),
            )),
            Arc::new(svc_driver_integration::IntegrationDriver::new(
                data_dir,
                settings.integration().clone(),
            )),
            ticketing.clone(),
            Arc::new(
                svc_driver_internal::InternalDriver::new(
                    store.pool().clone(),
                    store.backend() == Backend::Postgres,
                    data_dir,
                )
                .with_pending_writes(svc_store::audit::TABLE, audit_queued),
            ),
        ];
        Self {
            by_type: all.into_iter().map(|d| (d.source_type(), d)).collect(),
            ticketing,
        }
    }

    /// The built-in drivers plus every loadable library in `driver_dir`.
    ///
    /// A library that cannot be used is refused with one log line naming the file and the
    /// reason; the server starts without it.
    pub fn load(
        data_dir: &Path,
        driver_dir: Option<&Path>,
        store: &Store,
        audit: &Arc<AuditWriter>,
        settings: &DriverSettings,
    ) -> Self {
        let mut drivers = Self::builtin(data_dir, store, audit, settings);
        let Some(dir) = driver_dir else {
            return drivers;
        };
        let config = DriverConfig {
            data_dir: data_dir.to_owned(),
        };
        for path in library_files(dir) {
            match svc_plugin_api::ffi::load(&path, &config) {
                Ok(driver) => {
                    if let Err(reason) = drivers.add(driver) {
                        tracing::warn!(file = %path.display(), "driver library refused: {reason}");
                    } else {
                        tracing::info!(file = %path.display(), "driver library loaded");
                    }
                }
                Err(reason) => {
                    tracing::warn!(file = %path.display(), "driver library refused: {reason}");
                }
            }
        }
        drivers
    }

    fn add(&mut self, driver: Arc<dyn SourceDriver>) -> Result<(), String> {
        let source_type = driver.source_type();
        if self.by_type.contains_key(source_type) {
            return Err(format!(
                "source type '{source_type}' is already served by another driver"
            ));
        }
        self.by_type.insert(source_type, driver);
        Ok(())
    }

    /// The driver for a source type, if this server has one.
    pub fn get(&self, source_type: &str) -> Option<&Arc<dyn SourceDriver>> {
        self.by_type.get(source_type)
    }

    /// The ticketing driver: webhook deliveries, compaction, backfill, status.
    pub fn ticketing(&self) -> &Arc<svc_driver_ticketing::TicketingDriver> {
        &self.ticketing
    }

    /// The tables every driver declares for the host to seed, with their `source_type`.
    pub fn seeded_tables(&self) -> Vec<(&'static str, SeededTable)> {
        self.by_type
            .iter()
            .flat_map(|(kind, d)| d.seeded_tables().into_iter().map(move |t| (*kind, t)))
            .collect()
    }

    /// The `source_type`s admins may register tables of.
    pub fn registrable(&self) -> Vec<&'static str> {
        self.by_type
            .iter()
            .filter(|(_, d)| d.registrable())
            .map(|(t, _)| *t)
            .collect()
    }
}

/// Shared libraries in `dir`, in name order so start-up is deterministic.
fn library_files(dir: &Path) -> Vec<PathBuf> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => {
            tracing::warn!(dir = %dir.display(), "driver directory unreadable: {e}");
            return Vec::new();
        }
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_file()
                && matches!(
                    p.extension().and_then(|e| e.to_str()),
                    Some("so" | "dylib" | "dll")
                )
        })
        .collect();
    files.sort();
    files
}

/// The atomic parquet writer every on-disk source shares: rows go to a temporary file beside
/// the target, renamed over it on commit (scripts write their tables' files with it).
pub use svc_driver_parquet::AtomicParquet;

/// Removes partial files an interrupted write left under `data_dir` older than `age` (the
/// on-disk drivers share one atomic writer); returns how many were removed.
pub fn sweep_temp_files(data_dir: &Path, age: std::time::Duration) -> usize {
    svc_driver_parquet::sweep_temp_files(data_dir, age)
}
