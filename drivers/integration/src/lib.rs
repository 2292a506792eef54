//! Tables extracted from operational SQL databases into parquet.
//!
//! Registered with the host under `source_type = "integration"`. Reading goes through the shared
//! parquet reader (`extracts/integration/data/<table_id>.parquet`); fetching data from the source
//! into that file arrives with the sync issue.

use std::path::PathBuf;

use svc_driver_parquet::ParquetDriver;

/// The `integration` source kind's driver over a data directory.
pub fn driver(data_dir: impl Into<PathBuf>) -> ParquetDriver {
    ParquetDriver::for_source("integration", data_dir)
}
