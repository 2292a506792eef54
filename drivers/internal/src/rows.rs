//! Store rows to Arrow, typed by the store's declared column types.

use std::sync::Arc;

use sqlx::any::AnyRow;
use sqlx::Row;
use svc_plugin_api::arrow::array::{
    ArrayRef, BooleanBuilder, Float64Builder, Int64Builder, StringBuilder,
};
use svc_plugin_api::arrow::datatypes::{DataType, Field, Schema};
use svc_plugin_api::{DriverError, RecordBatch, Result};

/// The Arrow type for a store column type name.
pub fn arrow_type(store_type: &str) -> DataType {
    let t = store_type.to_ascii_uppercase();
    if t.contains("BOOL") {
        DataType::Boolean
    } else if t.contains("INT") {
        DataType::Int64
    } else if t.contains("REAL")
        || t.contains("DOUBLE")
        || t.contains("FLOAT")
        || t.contains("NUMERIC")
    {
        DataType::Float64
    } else {
        DataType::Utf8
    }
}

/// Builds one batch from rows whose columns are `columns` (name, store type, nullable).
pub fn to_batch(columns: &[(String, String, bool)], rows: &[AnyRow]) -> Result<RecordBatch> {
    let mut fields = Vec::with_capacity(columns.len());
    let mut arrays: Vec<ArrayRef> = Vec::with_capacity(columns.len());
    for (i, (name, ty, _)) in columns.iter().enumerate() {
        let dt = arrow_type(ty);
        let array: ArrayRef = match dt {
            DataType::Boolean => {
                let mut b = BooleanBuilder::new();
                for r in rows {
                    let v = r
                        .try_get::<Option<bool>, _>(i)
                        .or_else(|_| r.try_get::<Option<i64>, _>(i).map(|v| v.map(|n| n != 0)))
                        .map_err(decode(name))?;
                    b.append_option(v);
                }
                Arc::new(b.finish())
            }
            DataType::Int64 => {
                let mut b = Int64Builder::new();
                for r in rows {
                    b.append_option(r.try_get::<Option<i64>, _>(i).map_err(decode(name))?);
                }
                Arc::new(b.finish())
            }
            DataType::Float64 => {
                let mut b = Float64Builder::new();
                for r in rows {
                    b.append_option(r.try_get::<Option<f64>, _>(i).map_err(decode(name))?);
                }
                Arc::new(b.finish())
            }
            _ => {
                let mut b = StringBuilder::new();
                for r in rows {
                    b.append_option(r.try_get::<Option<String>, _>(i).map_err(decode(name))?);
                }
                Arc::new(b.finish())
            }
        };
        fields.push(Field::new(name, dt, true));
        arrays.push(array);
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)
        .map_err(|e| DriverError::internal(format!("building rows: {e}")))
}

fn decode(column: &str) -> impl Fn(sqlx::Error) -> DriverError + '_ {
    move |e| DriverError::internal(format!("state store column {column}: {e}"))
}
