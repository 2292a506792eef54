//! Scan estimates from the parquet footer: row groups the filter cannot rule out (by their
//! min/max/null statistics, with DataFusion's pruning predicate), and the compressed bytes of
//! the selected columns in those row groups.

use std::collections::HashSet;
use std::sync::Arc;

use svc_plugin_api::arrow::array::{ArrayRef, BooleanArray, UInt64Array};
use svc_plugin_api::arrow::datatypes::Schema;
use svc_plugin_api::datafusion::common::pruning::PruningStatistics;
use svc_plugin_api::datafusion::common::{Column, DFSchema, ScalarValue};
use svc_plugin_api::datafusion::parquet::arrow::arrow_reader::statistics::StatisticsConverter;
use svc_plugin_api::datafusion::parquet::file::metadata::{ParquetMetaData, RowGroupMetaData};
use svc_plugin_api::datafusion::parquet::schema::types::SchemaDescriptor;
use svc_plugin_api::datafusion::physical_optimizer::pruning::PruningPredicateBuilder;
use svc_plugin_api::datafusion::prelude::SessionContext;
use svc_plugin_api::{ScanEstimate, ScanSpec};

/// Estimates `scan` over a file with this footer and Arrow schema.
pub fn estimate(metadata: &ParquetMetaData, schema: &Arc<Schema>, scan: &ScanSpec) -> ScanEstimate {
    let groups = metadata.row_groups();
    let keep = match &scan.filter {
        None => vec![true; groups.len()],
        // A filter the statistics cannot judge rules nothing out.
        Some(filter) => prune(metadata, schema, filter).unwrap_or_else(|| vec![true; groups.len()]),
    };
    let wanted: Option<HashSet<&str>> = scan
        .columns
        .as_ref()
        .map(|c| c.iter().map(String::as_str).collect());
    let mut bytes = 0u64;
    let mut rows = 0u64;
    for (group, _) in groups.iter().zip(&keep).filter(|(_, k)| **k) {
        rows += u64::try_from(group.num_rows()).unwrap_or(0);
        for chunk in group.columns() {
            let root = chunk.column_path().parts().first().map(String::as_str);
            if wanted
                .as_ref()
                .is_none_or(|w| root.is_some_and(|r| w.contains(r)))
            {
                bytes += u64::try_from(chunk.compressed_size()).unwrap_or(0);
            }
        }
    }
    if let Some(limit) = scan.limit {
        rows = rows.min(limit);
    }
    ScanEstimate {
        bytes,
        rows: Some(rows),
        exact: scan.filter.is_none(),
        guard_bytes: None,
    }
}

/// Which row groups may hold matching rows; None when the filter cannot be planned.
fn prune(
    metadata: &ParquetMetaData,
    schema: &Arc<Schema>,
    filter: &svc_plugin_api::datafusion::logical_expr::Expr,
) -> Option<Vec<bool>> {
    let df_schema = DFSchema::try_from(schema.as_ref().clone()).ok()?;
    let physical = SessionContext::new()
        .create_physical_expr(filter.clone(), &df_schema)
        .ok()?;
    let predicate = PruningPredicateBuilder::new()
        .with_file_schema(schema.clone())
        .try_build(physical)
        .ok()?;
    let stats = RowGroupStats {
        schema,
        parquet: metadata.file_metadata().schema_descr(),
        groups: metadata.row_groups(),
    };
    predicate.prune(&stats).ok()
}

struct RowGroupStats<'a> {
    schema: &'a Schema,
    parquet: &'a SchemaDescriptor,
    groups: &'a [RowGroupMetaData],
}

impl RowGroupStats<'_> {
    fn converter(&self, column: &Column) -> Option<StatisticsConverter<'_>> {
        StatisticsConverter::try_new(&column.name, self.schema, self.parquet).ok()
    }
}

impl PruningStatistics for RowGroupStats<'_> {
    fn min_values(&self, column: &Column) -> Option<ArrayRef> {
        self.converter(column)?
            .row_group_mins(self.groups.iter())
            .ok()
    }

    fn max_values(&self, column: &Column) -> Option<ArrayRef> {
        self.converter(column)?
            .row_group_maxes(self.groups.iter())
            .ok()
    }

    fn num_containers(&self) -> usize {
        self.groups.len()
    }

    fn null_counts(&self, column: &Column) -> Option<ArrayRef> {
        let counts = self
            .converter(column)?
            .row_group_null_counts(self.groups.iter())
            .ok()?;
        Some(Arc::new(counts))
    }

    fn row_counts(&self) -> Option<ArrayRef> {
        let counts: UInt64Array = self
            .groups
            .iter()
            .map(|g| u64::try_from(g.num_rows()).ok())
            .collect();
        Some(Arc::new(counts))
    }

    fn contained(&self, _column: &Column, _values: &HashSet<ScalarValue>) -> Option<BooleanArray> {
        None
    }
}
