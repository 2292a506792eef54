//! Per-column facts from a parquet footer: type, smallest and largest value, and whether the
//! column has few distinct values. Read from the footer alone; what WHERE examples are made
//! of.

use std::fs::File;
use std::path::Path;

use svc_plugin_api::arrow::datatypes::DataType;
use svc_plugin_api::datafusion::common::ScalarValue;
use svc_plugin_api::datafusion::parquet::arrow::arrow_reader::statistics::StatisticsConverter;
use svc_plugin_api::datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use svc_plugin_api::datafusion::parquet::basic::{Encoding, PageType};
use svc_plugin_api::datafusion::parquet::file::metadata::ParquetMetaData;
use svc_plugin_api::type_name;

/// What the footer says about one column.
#[derive(Debug, Clone, PartialEq)]
pub struct ColumnStats {
    /// Column name.
    pub name: String,
    /// Arrow type name (as the schema endpoint shows it).
    pub data_type: String,
    /// Smallest value, as SQL literal text (dates `YYYY-MM-DD`, numbers plain, text raw).
    pub min: Option<String>,
    /// Largest value, likewise.
    pub max: Option<String>,
    /// Few distinct values (see [`few_values`]): worth an equality.
    pub few_values: bool,
}

/// Facts about every top-level column of the parquet file at `path`.
pub fn column_stats(path: &Path) -> Result<Vec<ColumnStats>, String> {
    let file = File::open(path).map_err(|e| e.to_string())?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| e.to_string())?;
    let meta = builder.metadata();
    let schema = builder.schema();
    let parquet_schema = meta.file_metadata().schema_descr();
    Ok(schema
        .fields()
        .iter()
        .map(|field| {
            let converter = StatisticsConverter::try_new(field.name(), schema, parquet_schema).ok();
            let bound = |max: bool| {
                let c = converter.as_ref()?;
                let values = if max {
                    c.row_group_maxes(meta.row_groups())
                } else {
                    c.row_group_mins(meta.row_groups())
                }
                .ok()?;
                let mut best: Option<ScalarValue> = None;
                for i in 0..values.len() {
                    let v = ScalarValue::try_from_array(&values, i).ok()?;
                    if v.is_null() {
                        continue;
                    }
                    let better = match &best {
                        None => true,
                        Some(b) if max => v.partial_cmp(b).is_some_and(|o| o.is_gt()),
                        Some(b) => v.partial_cmp(b).is_some_and(|o| o.is_lt()),
                    };
                    if better {
                        best = Some(v);
                    }
                }
                best.and_then(|v| literal_text(&v, field.data_type()))
            };
            let (min, max) = (bound(false), bound(true));
            let typical_len =
                (min.as_ref().map_or(8, String::len) + max.as_ref().map_or(8, String::len)) / 2;
            let few_values = converter
                .as_ref()
                .and_then(StatisticsConverter::parquet_column_index)
                .is_some_and(|i| few_values(meta, i, typical_len));
            ColumnStats {
                name: field.name().clone(),
                data_type: type_name(field.data_type()),
                min,
                max,
                few_values,
            }
        })
        .collect())
}

/// The value as text a SQL literal can hold, for the types examples use.
fn literal_text(v: &ScalarValue, data_type: &DataType) -> Option<String> {
    match data_type {
        DataType::Date32 | DataType::Date64 => Some(v.to_string()),
        DataType::Timestamp(_, _) => Some(v.to_string().replace('T', " ")),
        t if t.is_numeric() => Some(v.to_string()),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
            let s = v.to_string();
            // Long text is no example anyone would type.
            (s.len() <= 40 && !s.contains(['\n', '\r'])).then_some(s)
        }
        _ => None,
    }
}

/// Whether column `i` has few distinct values: every data page is dictionary-encoded (a
/// writer falls back to plain encoding when there are many) and the dictionary is small —
/// its size over the typical value length puts the distinct count at no more than 50 and a
/// tenth of the rows.
fn few_values(meta: &ParquetMetaData, i: usize, typical_len: usize) -> bool {
    let is_dict = |e: Encoding| matches!(e, Encoding::RLE_DICTIONARY | Encoding::PLAIN_DICTIONARY);
    let (mut dictionary_bytes, mut values) = (0i64, 0i64);
    for rg in meta.row_groups() {
        let col = rg.column(i);
        let dictionary_pages_only = match col.page_encoding_stats() {
            Some(stats) => stats
                .iter()
                .filter(|s| matches!(s.page_type, PageType::DATA_PAGE | PageType::DATA_PAGE_V2))
                .all(|s| is_dict(s.encoding)),
            None => col.encodings().any(is_dict),
        };
        let Some(start) = col.dictionary_page_offset() else {
            return false;
        };
        if !dictionary_pages_only {
            return false;
        }
        dictionary_bytes = dictionary_bytes.max(col.data_page_offset() - start);
        values += col.num_values();
    }
    let distinct = dictionary_bytes as f64 / (typical_len as f64 + 4.0);
    values > 0 && distinct <= 50.0 && distinct * 10.0 <= values as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::{ingest, UploadFormat};

    #[test]
    fn footer_facts_give_bounds_and_cardinality() {
        let dir = std::env::temp_dir().join(format!("svc-stats-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let csv = dir.join("a.csv");
        let mut text = String::from("day,country,amount,note\n");
        for i in 0..3000 {
            text.push_str(&format!(
                "2026-01-{:02},{},{},note number {i} that is unique\n",
                i % 28 + 1,
                ["CZ", "DE", "US"][i % 3],
                i
            ));
        }
        std::fs::write(&csv, text).unwrap();
        let target = dir.join("t.parquet");
        ingest(&csv, UploadFormat::Csv, &target).unwrap();
        let stats = column_stats(&target).unwrap();
        let by = |n: &str| stats.iter().find(|s| s.name == n).unwrap().clone();
        let day = by("day");
        assert_eq!(
            (
                day.data_type.as_str(),
                day.min.as_deref(),
                day.max.as_deref()
            ),
            ("Date32", Some("2026-01-01"), Some("2026-01-28"))
        );
        assert_eq!(
            (by("amount").min.as_deref(), by("amount").max.as_deref()),
            (Some("0"), Some("2999"))
        );
        assert!(by("country").few_values && !by("note").few_values && !by("amount").few_values);
        assert_eq!(by("country").min.as_deref(), Some("CZ"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
