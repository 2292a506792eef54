//! Arrow batches to JSON rows for API responses.
//!
//! Numbers stay numbers, NaN and ±infinity become null (they have no JSON form), lists become
//! arrays and structs and string-keyed maps become objects (recursively), and types JSON
//! lacks (dates, timestamps, decimals, binary) use Arrow's canonical text rendering:
//! ISO-8601 for dates and times, exact digits for decimals.

use serde_json::{Map, Number, Value};
use svc_plugin_api::arrow::array::{Array, AsArray};
use svc_plugin_api::arrow::compute::cast;
use svc_plugin_api::arrow::datatypes::{
    DataType, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type, UInt16Type,
    UInt32Type, UInt64Type, UInt8Type,
};
use svc_plugin_api::arrow::util::display::{ArrayFormatter, FormatOptions};
use svc_plugin_api::RecordBatch;

fn float(v: f64) -> Value {
    Number::from_f64(v)
        .map(Value::Number)
        .unwrap_or(Value::Null)
}

/// One column's values as JSON.
fn column_values(array: &dyn Array) -> Vec<Value> {
    macro_rules! prim {
        ($t:ty, $conv:expr) => {{
            let a = array.as_primitive::<$t>();
            (0..a.len())
                .map(|i| {
                    if a.is_null(i) {
                        Value::Null
                    } else {
                        $conv(a.value(i))
                    }
                })
                .collect()
        }};
    }
    match array.data_type() {
        DataType::Null => vec![Value::Null; array.len()],
        DataType::Boolean => {
            let a = array.as_boolean();
            (0..a.len())
                .map(|i| {
                    if a.is_null(i) {
                        Value::Null
                    } else {
                        Value::Bool(a.value(i))
                    }
                })
                .collect()
        }
        DataType::Int8 => prim!(Int8Type, |v: i8| Value::from(v)),
        DataType::Int16 => prim!(Int16Type, |v: i16| Value::from(v)),
        DataType::Int32 => prim!(Int32Type, |v: i32| Value::from(v)),
        DataType::Int64 => prim!(Int64Type, |v: i64| Value::from(v)),
        DataType::UInt8 => prim!(UInt8Type, |v: u8| Value::from(v)),
        DataType::UInt16 => prim!(UInt16Type, |v: u16| Value::from(v)),
        DataType::UInt32 => prim!(UInt32Type, |v: u32| Value::from(v)),
        DataType::UInt64 => prim!(UInt64Type, |v: u64| Value::from(v)),
        DataType::Float16 => match cast(array, &DataType::Float64) {
            Ok(wide) => column_values(wide.as_ref()),
            Err(_) => vec![Value::Null; array.len()],
        },
        DataType::Float32 => prim!(Float32Type, |v: f32| float(f64::from(v))),
        DataType::Float64 => prim!(Float64Type, float),
        DataType::Utf8 => strings(array.as_string::<i32>().iter()),
        DataType::LargeUtf8 => strings(array.as_string::<i64>().iter()),
        DataType::Utf8View => strings(array.as_string_view().iter()),
        DataType::List(_) => lists(array, |i| array.as_list::<i32>().value(i)),
        DataType::LargeList(_) => lists(array, |i| array.as_list::<i64>().value(i)),
        DataType::FixedSizeList(..) => lists(array, |i| array.as_fixed_size_list().value(i)),
        DataType::Struct(fields) => {
            let s = array.as_struct();
            let children: Vec<Vec<Value>> = s
                .columns()
                .iter()
                .map(|c| column_values(c.as_ref()))
                .collect();
            (0..s.len())
                .map(|i| {
                    if s.is_null(i) {
                        return Value::Null;
                    }
                    let obj = fields
                        .iter()
                        .zip(&children)
                        .map(|(f, values)| (f.name().clone(), values[i].clone()))
                        .collect();
                    Value::Object(obj)
                })
                .collect()
        }
        DataType::Map(..) => {
            let m = array.as_map();
            (0..m.len())
                .map(|i| {
                    if m.is_null(i) {
                        return Value::Null;
                    }
                    let entries = m.value(i);
                    let keys = column_values(entries.column(0).as_ref());
                    let values = column_values(entries.column(1).as_ref());
                    // String keys make an object; other keys keep their type as pairs.
                    if keys.iter().all(Value::is_string) {
                        let obj = keys
                            .into_iter()
                            .zip(values)
                            .map(|(k, v)| (k.as_str().unwrap_or_default().to_owned(), v))
                            .collect();
                        Value::Object(obj)
                    } else {
                        Value::Array(
                            keys.into_iter()
                                .zip(values)
                                .map(|(k, v)| Value::Array(vec![k, v]))
                                .collect(),
                        )
                    }
                })
                .collect()
        }
        _ => {
            let options = FormatOptions::default();
            match ArrayFormatter::try_new(array, &options) {
                Ok(f) => (0..array.len())
                    .map(|i| {
                        if array.is_null(i) {
                            Value::Null
                        } else {
                            Value::String(f.value(i).to_string())
                        }
                    })
                    .collect(),
                Err(_) => vec![Value::Null; array.len()],
            }
        }
    }
}

/// A list column: each row's child slice, encoded recursively.
fn lists(
    array: &dyn Array,
    row: impl Fn(usize) -> svc_plugin_api::arrow::array::ArrayRef,
) -> Vec<Value> {
    (0..array.len())
        .map(|i| {
            if array.is_null(i) {
                Value::Null
            } else {
                Value::Array(column_values(row(i).as_ref()))
            }
        })
        .collect()
}

fn strings<'a>(values: impl Iterator<Item = Option<&'a str>>) -> Vec<Value> {
    values
        .map(|v| v.map_or(Value::Null, |s| Value::String(s.to_string())))
        .collect()
}

/// Rows as objects (column name to value), in batch order.
pub fn rows_as_objects(batches: &[RecordBatch]) -> Vec<Value> {
    let mut out = Vec::with_capacity(batches.iter().map(|b| b.num_rows()).sum());
    for batch in batches {
        let schema = batch.schema();
        let columns: Vec<Vec<Value>> = batch
            .columns()
            .iter()
            .map(|c| column_values(c.as_ref()))
            .collect();
        for row in 0..batch.num_rows() {
            let mut obj = Map::with_capacity(columns.len());
            for (field, values) in schema.fields().iter().zip(&columns) {
                obj.insert(field.name().clone(), values[row].clone());
            }
            out.push(Value::Object(obj));
        }
    }
    out
}

/// Rows as arrays in column order (the query endpoint's shape), in batch order.
pub fn rows_as_arrays(batches: &[RecordBatch]) -> Vec<Value> {
    let mut out = Vec::with_capacity(batches.iter().map(|b| b.num_rows()).sum());
    for batch in batches {
        let mut columns: Vec<std::vec::IntoIter<Value>> = batch
            .columns()
            .iter()
            .map(|c| column_values(c.as_ref()).into_iter())
            .collect();
        for _ in 0..batch.num_rows() {
            out.push(Value::Array(
                columns
                    .iter_mut()
                    .map(|c| c.next().unwrap_or(Value::Null))
                    .collect(),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use svc_plugin_api::arrow::array::{
        Date32Array, Decimal128Array, Float64Array, Int32Array, StringArray,
    };
    use svc_plugin_api::arrow::datatypes::{Field, Schema};

    use super::*;

    #[test]
    fn non_finite_floats_become_null_and_types_keep_their_json_form() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("f", DataType::Float64, true),
            Field::new("i", DataType::Int32, true),
            Field::new("s", DataType::Utf8, true),
            Field::new("d", DataType::Date32, true),
            Field::new("m", DataType::Decimal128(10, 2), true),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Float64Array::from(vec![
                    Some(1.5),
                    Some(f64::NAN),
                    Some(f64::INFINITY),
                    Some(f64::NEG_INFINITY),
                    None,
                ])),
                Arc::new(Int32Array::from(vec![
                    Some(1),
                    None,
                    Some(3),
                    Some(4),
                    Some(5),
                ])),
                Arc::new(StringArray::from(vec![
                    Some("a"),
                    Some("b"),
                    None,
                    Some("d"),
                    Some("e"),
                ])),
                Arc::new(Date32Array::from(vec![
                    Some(0),
                    Some(19723),
                    None,
                    None,
                    None,
                ])),
                Arc::new(
                    Decimal128Array::from(vec![Some(1234), None, None, None, None])
                        .with_precision_and_scale(10, 2)
                        .unwrap(),
                ),
            ],
        )
        .unwrap();
        let rows = rows_as_objects(&[batch]);
        assert_eq!(rows.len(), 5);
        assert_eq!(
            rows[0],
            serde_json::json!({"f": 1.5, "i": 1, "s": "a", "d": "1970-01-01", "m": "12.34"})
        );
        for r in &rows[1..4] {
            assert!(r["f"].is_null(), "{r}");
        }
        assert_eq!(rows[1]["d"], "2024-01-01");
        assert!(rows[1]["i"].is_null());
    }

    #[test]
    fn nested_values_become_json_arrays_and_objects() {
        use svc_plugin_api::arrow::array::{ListArray, StructArray};
        use svc_plugin_api::arrow::datatypes::Int32Type;

        let list = ListArray::from_iter_primitive::<Int32Type, _, _>(vec![
            Some(vec![Some(1), None]),
            None,
        ]);
        let inner = Arc::new(Float64Array::from(vec![Some(f64::NAN), Some(2.5)]));
        let strukt = StructArray::from(vec![(
            Arc::new(Field::new("x", DataType::Float64, true)),
            inner as svc_plugin_api::arrow::array::ArrayRef,
        )]);
        let schema = Arc::new(Schema::new(vec![
            Field::new("l", list.data_type().clone(), true),
            Field::new("s", strukt.data_type().clone(), true),
        ]));
        let batch = RecordBatch::try_new(schema, vec![Arc::new(list), Arc::new(strukt)]).unwrap();
        let rows = rows_as_objects(&[batch]);
        assert_eq!(
            rows,
            [
                serde_json::json!({"l": [1, null], "s": {"x": null}}),
                serde_json::json!({"l": null, "s": {"x": 2.5}}),
            ]
        );
    }
}
