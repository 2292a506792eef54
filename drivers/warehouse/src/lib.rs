//! Tables that live in a BigQuery-compatible REST warehouse.
//!
//! Registered with the host under `source_type = "warehouse"`. The data side of the driver
//! (schema, sample, table provider, …) is filled in by the discovery and later issues; today
//! it lets the host accept registrations of this source kind.

use svc_plugin_api::SourceDriver;

/// The `warehouse` source driver.
#[derive(Debug, Default)]
pub struct WarehouseDriver;

impl SourceDriver for WarehouseDriver {
    fn source_type(&self) -> &'static str {
        "warehouse"
    }
}
