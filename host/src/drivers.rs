//! The drivers this server can serve, keyed by `source_type`.

use std::collections::BTreeMap;
use std::sync::Arc;

use svc_plugin_api::SourceDriver;

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
    pub fn builtin() -> Self {
        let all: [Arc<dyn SourceDriver>; 5] = [
            Arc::new(svc_driver_parquet::ParquetDriver),
            Arc::new(svc_driver_warehouse::WarehouseDriver),
            Arc::new(svc_driver_integration::IntegrationDriver),
            Arc::new(svc_driver_ticketing::TicketingDriver),
            Arc::new(svc_driver_internal::InternalDriver),
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
