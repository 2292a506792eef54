//! Issue-tracker data, received by webhook and kept as incremental parquet.
//!
//! Registered with the host under `source_type = "ticketing"`. The data side of the driver
//! (schema, sample, table provider, …) is filled in by the discovery and later issues; today
//! it lets the host accept registrations of this source kind.

use svc_plugin_api::SourceDriver;

/// The `ticketing` source driver.
#[derive(Debug, Default)]
pub struct TicketingDriver;

impl SourceDriver for TicketingDriver {
    fn source_type(&self) -> &'static str {
        "ticketing"
    }
}
