//! An example out-of-tree driver: tables backed by a directory of CSV files.
//!
//! The dynamic-loading issue turns this into a `cdylib` with the FFI entry symbol; until then
//! it shows the shape of a third-party driver against the plugin-api contract.

use svc_plugin_api::SourceDriver;

/// Serves `source_type = "csv"` tables from CSV files.
#[derive(Debug, Default)]
pub struct CsvDriver;

impl SourceDriver for CsvDriver {
    fn source_type(&self) -> &'static str {
        "csv"
    }
}
