//! Local parquet tables, and the shared parquet reader for every on-disk source kind.
//!
//! Registered with the host under `source_type = "local"`. The data side of the driver
//! (schema, sample, table provider, …) is filled in by the discovery and later issues; today
//! it lets the host accept registrations of this source kind.

use svc_plugin_api::SourceDriver;

/// The `local` source driver.
#[derive(Debug, Default)]
pub struct ParquetDriver;

impl SourceDriver for ParquetDriver {
    fn source_type(&self) -> &'static str {
        "local"
    }
}
