//! Store rows to Arrow, typed by the store's declared column types.

use std::sync::Arc;

use sqlx::any::AnyRow;
use sqlx::Row;
use svc_plugin_api::arrow::array::{
    ArrayRef, BooleanBuilder, Float64Builder, Int64Builder, StringBuilder,
};
use svc_plugin_api::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use svc_plugin_api::arrow::record_batch::RecordBatchOptions;
use svc_plugin_api::{DriverError, RecordBatch, Result};

/// A backing-table column as the store declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreColumn {
    /// Column name.
    pub name: String,
    /// The store's type name.
    pub store_type: String,
    /// Whether nulls may occur.
    pub nullable: bool,
}

impl StoreColumn {
    /// The Arrow type rows of this column are read as.
    pub fn data_type(&self) -> DataType {
        arrow_type(&self.store_type)
    }
}

/// The Arrow schema of rows read with `columns`.
pub fn schema(columns: &[StoreColumn]) -> SchemaRef {
    Arc::new(Schema::new(
        columns
            .iter()
            .map(|c| Field::new(&c.name, c.data_type(), true))
            .collect::<Vec<_>>(),
    ))
}

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

/// Builds one batch from rows read with `columns` (no columns: a batch of row count only).
pub fn to_batch(columns: &[StoreColumn], rows: &[AnyRow]) -> Result<RecordBatch> {
    let mut arrays: Vec<ArrayRef> = Vec::with_capacity(columns.len());
    for (i, column) in columns.iter().enumerate() {
        let name = &column.name;
        let array: ArrayRef = match column.data_type() {
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
        arrays.push(array);
    }
    let options = RecordBatchOptions::new().with_row_count(Some(rows.len()));
    RecordBatch::try_new_with_options(schema(columns), arrays, &options)
        .map_err(|e| DriverError::internal(format!("building rows: {e}")))
}

fn decode(column: &str) -> impl Fn(sqlx::Error) -> DriverError + '_ {
    move |e| DriverError::internal(format!("state store column {column}: {e}"))
}

/// `batch` under `schema` (same columns, possibly narrower nullability); as is when equal.
pub fn retype(batch: RecordBatch, schema: &SchemaRef) -> Result<RecordBatch> {
    if batch.schema_ref() == schema {
        return Ok(batch);
    }
    let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    RecordBatch::try_new_with_options(schema.clone(), batch.columns().to_vec(), &options)
        .map_err(|e| DriverError::internal(format!("building rows: {e}")))
}
