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
    let Some(first) = batches.first() else {
        return Vec::new();
    };
    let names: Vec<String> = first
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    rows_as_arrays(batches)
        .into_iter()
        .map(|row| Value::Object(names.iter().cloned().zip(row).collect::<Map<_, _>>()))
        .collect()
}

/// Rows as arrays of values in column order, in batch order.
pub fn rows_as_arrays(batches: &[RecordBatch]) -> Vec<Vec<Value>> {
    let mut out = Vec::with_capacity(batches.iter().map(|b| b.num_rows()).sum());
    for batch in batches {
        let columns: Vec<Vec<Value>> = batch
            .columns()
            .iter()
            .map(|c| column_values(c.as_ref()))
            .collect();
        for row in 0..batch.num_rows() {
            out.push(columns.iter().map(|values| values[row].clone()).collect());
        }
    }
    out
}

/// Writes one column's cell `i` as JSON into a buffer.
type CellWriter<'a> = Box<dyn Fn(&mut Vec<u8>, usize) + 'a>;

/// The cell writer for a column. Integers, floats, booleans and strings are written straight
/// from the array (the bulk of query results); every other type goes through
/// [`column_values`], so both paths produce the same JSON.
fn cell_writer(array: &dyn Array) -> CellWriter<'_> {
    fn put<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, v: &T) {
        serde_json::to_writer(out, v).expect("scalars always encode");
    }
    macro_rules! prim {
        ($t:ty, $put:expr) => {{
            let a = array.as_primitive::<$t>();
            Box::new(move |out: &mut Vec<u8>, i: usize| {
                if a.is_null(i) {
                    out.extend_from_slice(b"null");
                } else {
                    $put(out, a.value(i));
                }
            })
        }};
    }
    macro_rules! text {
        ($a:expr) => {{
            let a = $a;
            Box::new(move |out: &mut Vec<u8>, i: usize| {
                if a.is_null(i) {
                    out.extend_from_slice(b"null");
                } else {
                    put(out, a.value(i));
                }
            })
        }};
    }
    let float = |out: &mut Vec<u8>, v: f64| {
        if v.is_finite() {
            put(out, &v);
        } else {
            out.extend_from_slice(b"null");
        }
    };
    match array.data_type() {
        DataType::Int8 => prim!(Int8Type, |o, v: i8| put(o, &v)),
        DataType::Int16 => prim!(Int16Type, |o, v: i16| put(o, &v)),
        DataType::Int32 => prim!(Int32Type, |o, v: i32| put(o, &v)),
        DataType::Int64 => prim!(Int64Type, |o, v: i64| put(o, &v)),
        DataType::UInt8 => prim!(UInt8Type, |o, v: u8| put(o, &v)),
        DataType::UInt16 => prim!(UInt16Type, |o, v: u16| put(o, &v)),
        DataType::UInt32 => prim!(UInt32Type, |o, v: u32| put(o, &v)),
        DataType::UInt64 => prim!(UInt64Type, |o, v: u64| put(o, &v)),
        DataType::Float32 => prim!(Float32Type, |o, v: f32| float(o, f64::from(v))),
        DataType::Float64 => prim!(Float64Type, float),
        DataType::Boolean => {
            let a = array.as_boolean();
            Box::new(move |out: &mut Vec<u8>, i: usize| {
                out.extend_from_slice(match (a.is_null(i), a.value(i)) {
                    (true, _) => b"null",
                    (false, true) => b"true",
                    (false, false) => b"false",
                });
            })
        }
        DataType::Utf8 => text!(array.as_string::<i32>()),
        DataType::LargeUtf8 => text!(array.as_string::<i64>()),
        DataType::Utf8View => text!(array.as_string_view()),
        _ => {
            let values = column_values(array);
            Box::new(move |out: &mut Vec<u8>, i: usize| put(out, &values[i]))
        }
    }
}

/// One cell writer per column of `batch`.
fn cell_writers(batch: &RecordBatch) -> Vec<CellWriter<'_>> {
    batch
        .columns()
        .iter()
        .map(|c| cell_writer(c.as_ref()))
        .collect()
}

/// Appends a batch's rows to `out` as JSON arrays in column order, comma-separated; `first`
/// says whether nothing precedes them yet and is cleared once a row is written. Cells come
/// out as [`column_values`] would render them, without a `Value` per cell (the query
/// endpoint's hot path).
pub fn write_json_rows(batch: &RecordBatch, out: &mut Vec<u8>, first: &mut bool) {
    let writers = cell_writers(batch);
    for row in 0..batch.num_rows() {
        if !std::mem::take(first) {
            out.push(b',');
        }
        out.push(b'[');
        for (c, write) in writers.iter().enumerate() {
            if c > 0 {
                out.push(b',');
            }
            write(out, row);
        }
        out.push(b']');
    }
}

/// Each field's `"name":` as JSON, for [`write_json_objects`].
pub fn object_keys(schema: &svc_plugin_api::arrow::datatypes::SchemaRef) -> Vec<Vec<u8>> {
    schema
        .fields()
        .iter()
        .map(|f| {
            let mut key = serde_json::to_vec(f.name()).expect("strings encode");
            key.push(b':');
            key
        })
        .collect()
}

/// Appends a batch's rows to `out` as JSON objects, one per line (NDJSON), with the keys of
/// [`object_keys`]; cells as [`write_json_rows`] writes them, nulls kept.
pub fn write_json_objects(batch: &RecordBatch, keys: &[Vec<u8>], out: &mut Vec<u8>) {
    let writers = cell_writers(batch);
    for row in 0..batch.num_rows() {
        out.push(b'{');
        for (c, (write, key)) in writers.iter().zip(keys).enumerate() {
            if c > 0 {
                out.push(b',');
            }
            out.extend_from_slice(key);
            write(out, row);
        }
        out.extend_from_slice(b"}\n");
    }
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

    /// The `Value` path for rows as arrays: what the direct writer must match.
    fn rows_as_arrays(batches: &[RecordBatch]) -> Vec<Value> {
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

    #[test]
    fn direct_json_rows_equal_the_value_path_for_every_kind_of_column() {
        use svc_plugin_api::arrow::array::{
            ArrayRef, BooleanArray, Float32Array, Int64Array, Int8Array, LargeStringArray,
            ListArray, StringViewArray, UInt64Array,
        };

        let columns: Vec<(&str, ArrayRef)> = vec![
            (
                "i8",
                Arc::new(Int8Array::from(vec![Some(-128), None, Some(7)])),
            ),
            (
                "i64",
                Arc::new(Int64Array::from(vec![Some(i64::MIN), Some(0), None])),
            ),
            (
                "u64",
                Arc::new(UInt64Array::from(vec![Some(u64::MAX), None, Some(1)])),
            ),
            (
                "f32",
                Arc::new(Float32Array::from(vec![Some(0.1), Some(f32::NAN), None])),
            ),
            (
                "f64",
                Arc::new(Float64Array::from(vec![
                    Some(1e300),
                    Some(-0.0),
                    Some(f64::NEG_INFINITY),
                ])),
            ),
            (
                "b",
                Arc::new(BooleanArray::from(vec![Some(true), None, Some(false)])),
            ),
            (
                "s",
                Arc::new(StringArray::from(vec![
                    Some("quote \" \\ \n é"),
                    None,
                    Some(""),
                ])),
            ),
            (
                "ls",
                Arc::new(LargeStringArray::from(vec![
                    None,
                    Some("\u{1}ctl"),
                    Some("x"),
                ])),
            ),
            (
                "sv",
                Arc::new(StringViewArray::from(vec![
                    Some("a string longer than twelve bytes"),
                    Some("short"),
                    None,
                ])),
            ),
            (
                "d",
                Arc::new(Date32Array::from(vec![Some(19723), None, Some(0)])),
            ),
            (
                "m",
                Arc::new(
                    Decimal128Array::from(vec![Some(-5), None, Some(100)])
                        .with_precision_and_scale(10, 2)
                        .unwrap(),
                ),
            ),
            (
                "l",
                Arc::new(ListArray::from_iter_primitive::<Int32Type, _, _>(vec![
                    Some(vec![Some(1), None]),
                    None,
                    Some(vec![]),
                ])),
            ),
        ];
        let schema = Arc::new(Schema::new(
            columns
                .iter()
                .map(|(n, a)| Field::new(*n, a.data_type().clone(), true))
                .collect::<Vec<_>>(),
        ));
        let batch =
            RecordBatch::try_new(schema, columns.into_iter().map(|(_, a)| a).collect()).unwrap();

        let mut direct = b"[".to_vec();
        let mut first = true;
        write_json_rows(&batch, &mut direct, &mut first);
        write_json_rows(&batch.slice(1, 2), &mut direct, &mut first);
        direct.push(b']');
        let mut expected = rows_as_arrays(std::slice::from_ref(&batch));
        expected.extend(rows_as_arrays(&[batch.slice(1, 2)]));
        assert_eq!(
            String::from_utf8(direct).unwrap(),
            serde_json::to_string(&expected).unwrap()
        );
        assert!(!first);
    }

    #[test]
    fn ndjson_rows_are_objects_one_per_line_with_escaped_keys_and_nulls_kept() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("n\"ame", DataType::Utf8, true),
            Field::new("i", DataType::Int32, true),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(StringArray::from(vec![Some("a\nb\"c"), None])),
                Arc::new(Int32Array::from(vec![None, Some(7)])),
            ],
        )
        .unwrap();
        let mut out = Vec::new();
        write_json_objects(&batch, &object_keys(&schema), &mut out);
        let text = String::from_utf8(out).unwrap();
        let rows: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(
            rows,
            vec![
                serde_json::json!({"n\"ame": "a\nb\"c", "i": null}),
                serde_json::json!({"n\"ame": null, "i": 7}),
            ]
        );
        assert!(text.ends_with('\n'));
    }
}
