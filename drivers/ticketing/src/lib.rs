//! Issue-tracker data, received by webhook and kept as incremental parquet.
//!
//! Registered with the host under `source_type = "ticketing"`. Reading goes through the shared
//! parquet reader (`extracts/ticketing/data/<table_id>.parquet`); fetching data from the source
//! into that file arrives with the sync issue.

use std::path::PathBuf;

use svc_driver_parquet::ParquetDriver;

/// The `ticketing` source kind's driver over a data directory.
pub fn driver(data_dir: impl Into<PathBuf>) -> ParquetDriver {
    ParquetDriver::for_source("ticketing", data_dir)
}
