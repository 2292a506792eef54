//! Tables extracted from operational SQL databases into parquet.
//!
//! Registered with the host under `source_type = "integration"`. The data side of the driver
//! (schema, sample, table provider, …) is filled in by the discovery and later issues; today
//! it lets the host accept registrations of this source kind.

use svc_plugin_api::SourceDriver;

/// The `integration` source driver.
#[derive(Debug, Default)]
pub struct IntegrationDriver;

impl SourceDriver for IntegrationDriver {
    fn source_type(&self) -> &'static str {
        "integration"
    }
}
