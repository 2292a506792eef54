//! The drivers this server can serve, keyed by `source_type`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use svc_plugin_api::SourceDriver;

use crate::store::{Backend, Store};

/// Source drivers by `source_type`.
#[derive(Clone)]
pub struct Drivers {
    by_type: BTreeMap<&'static str, Arc<dyn SourceDriver>>,
}

impl std::fmt::Debug for Drivers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.by_type.keys()).finish()
    }
}

impl Drivers {
    /// The drivers compiled into svc-server.
    pub fn builtin(data_dir: &Path, store: &Store) -> Self {
        let all: [Arc<dyn SourceDriver>; 5] = [
            Arc::new(svc_driver_parquet::ParquetDriver::new(data_dir)),
            Arc::new(svc_driver_warehouse::WarehouseDriver::new(data_dir)),
            Arc::new(svc_driver_integration::driver(data_dir)),
            Arc::new(svc_driver_ticketing::driver(data_dir)),
            Arc::new(svc_driver_internal::InternalDriver::new(
                store.pool().clone(),
                store.backend() == Backend::Postgres,
            )),
        ];
        Self {
            by_type: all.into_iter().map(|d| (d.source_type(), d)).collect(),
        }
    }

    /// The driver for a source type, if this server has one.
    pub fn get(&self, source_type: &str) -> Option<&Arc<dyn SourceDriver>> {
        self.by_type.get(source_type)
    }

    /// Source types admins may register tables of.
    pub fn registrable(&self) -> Vec<&'static str> {
        self.by_type
            .iter()
            .filter(|(_, d)| d.registrable())
            .map(|(t, _)| *t)
            .collect()
    }
}
