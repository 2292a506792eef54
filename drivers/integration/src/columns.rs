//! The Arrow form of a source column, shared by every dialect: what kind of values it holds
//! ([`Kind`]), the field it becomes ([`Column::field`]) and the builder that collects its
//! values ([`Builder`]). A dialect maps its catalog's types to kinds and decodes its wire
//! values into the builders; nothing here knows a wire format.
//!
//! Representations a user meets in the copy (also in the README):
//! - `timestamp` → `Timestamp(µs)`, `timestamptz` → `Timestamp(µs, "UTC")`; values outside
//!   Arrow's range or infinite → NULL.
//! - `numeric(p,s)` → `Decimal128(p,s)` up to 38 digits, `Decimal256(p,s)` up to 76; NaN and
//!   ±Infinity → NULL; an unconstrained `numeric` → its exact text.
//! - `uuid` → its canonical text; `json`/`jsonb` → text, described as JSON; `interval` → ISO
//!   8601 text (`P1Y2M3DT4H5M6S`); enums → dictionary-encoded labels; one-dimensional arrays
//!   of the kinds above → lists (a multi-dimensional array is flattened in row-major order).
//! - Any other type → its text form, with the source type in the column's description.

use std::sync::Arc;

use svc_plugin_api::arrow::array::{
    ArrayBuilder as _, ArrayRef, BinaryBuilder, BooleanBuilder, Date32Builder, Decimal128Builder,
    Decimal256Builder, Float32Builder, Float64Builder, Int16Builder, Int32Builder, Int64Builder,
    ListArray, NullBufferBuilder, StringBuilder, StringDictionaryBuilder, Time64MicrosecondBuilder,
    TimestampMicrosecondBuilder,
};
use svc_plugin_api::arrow::buffer::OffsetBuffer;
use svc_plugin_api::arrow::compute::kernels::cast_utils::{
    parse_decimal, string_to_datetime, Parser,
};
use svc_plugin_api::arrow::datatypes::{
    DataType, Date32Type, Decimal128Type, Decimal256Type, Field, FieldRef, Int32Type, Schema,
    SchemaRef, Time64MicrosecondType, TimeUnit,
};
use svc_plugin_api::{DriverError, RecordBatch, Result, DESCRIPTION_KEY};

/// The field metadata key holding the column's type as the source names it.
pub(crate) const SOURCE_TYPE_KEY: &str = "svc:source_type";

/// What values a column holds once extracted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Kind {
    Bool,
    I16,
    I32,
    I64,
    F32,
    F64,
    /// UTF-8 text; invalid bytes are replaced (and counted).
    Text,
    /// JSON documents, kept as their text.
    Json,
    /// A 16-byte UUID, kept as its canonical text.
    Uuid,
    Bytes,
    /// Days since 1970-01-01.
    Date,
    /// Microseconds since 1970-01-01, no time zone.
    Timestamp,
    /// Microseconds since 1970-01-01 UTC.
    TimestampUtc,
    /// Microseconds since midnight.
    Time,
    /// `precision` ≤ 38 is a Decimal128, ≤ 76 a Decimal256.
    Decimal {
        precision: u8,
        scale: i8,
    },
    /// Labels of an enumerated type.
    Enum,
    /// A list of the inner kind.
    List(Box<Kind>),
}

impl Kind {
    fn data_type(&self) -> DataType {
        match self {
            Self::Bool => DataType::Boolean,
            Self::I16 => DataType::Int16,
            Self::I32 => DataType::Int32,
            Self::I64 => DataType::Int64,
            Self::F32 => DataType::Float32,
            Self::F64 => DataType::Float64,
            Self::Text | Self::Json | Self::Uuid => DataType::Utf8,
            Self::Bytes => DataType::Binary,
            Self::Date => DataType::Date32,
            Self::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, None),
            Self::TimestampUtc => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            Self::Time => DataType::Time64(TimeUnit::Microsecond),
            Self::Decimal { precision, scale } if *precision <= 38 => {
                DataType::Decimal128(*precision, *scale)
            }
            Self::Decimal { precision, scale } => DataType::Decimal256(*precision, *scale),
            Self::Enum => DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)),
            Self::List(inner) => DataType::List(list_item(inner)),
        }
    }
}

fn list_item(inner: &Kind) -> FieldRef {
    Arc::new(Field::new("item", inner.data_type(), true))
}

/// One source column.
#[derive(Debug, Clone)]
pub(crate) struct Column {
    /// Its name at the source (and in the copy).
    pub name: String,
    /// Its type as the source names it (`numeric(12,2)`, `jsonb`, `tsvector`).
    pub source_type: String,
    /// How its values are held.
    pub kind: Kind,
    /// Whether the source hands it over as text because svc has no exact form for its type.
    pub as_text: bool,
}

impl Column {
    /// The column's field: its Arrow type, with the source type kept in its metadata and a
    /// description saying what a reader needs to know about the representation.
    pub fn field(&self) -> Field {
        let description = match (&self.kind, self.as_text) {
            (Kind::Json, _) => format!("JSON text (source type {})", self.source_type),
            (_, true) => format!("{} at the source, kept as its text form", self.source_type),
            _ => String::new(),
        };
        let mut metadata: std::collections::HashMap<String, String> =
            [(SOURCE_TYPE_KEY.to_owned(), self.source_type.clone())].into();
        if !description.is_empty() {
            metadata.insert(DESCRIPTION_KEY.to_owned(), description);
        }
        Field::new(&self.name, self.kind.data_type(), true).with_metadata(metadata)
    }
}

/// The copy's schema.
pub(crate) fn schema(columns: &[Column]) -> SchemaRef {
    Arc::new(Schema::new(
        columns.iter().map(Column::field).collect::<Vec<_>>(),
    ))
}

/// One column's values on their way into an Arrow array. The dialects append to the inner
/// builders directly.
pub(crate) enum Builder {
    Bool(BooleanBuilder),
    I16(Int16Builder),
    I32(Int32Builder),
    I64(Int64Builder),
    F32(Float32Builder),
    F64(Float64Builder),
    /// Text and JSON.
    Text(StringBuilder),
    Uuid(StringBuilder),
    Bytes(BinaryBuilder),
    Date(Date32Builder),
    Timestamp(TimestampMicrosecondBuilder, Option<Arc<str>>),
    Time(Time64MicrosecondBuilder),
    Decimal128(Decimal128Builder, u8, i8),
    Decimal256(Decimal256Builder, u8, i8),
    Enum(StringDictionaryBuilder<Int32Type>),
    List {
        item: FieldRef,
        values: Box<Builder>,
        offsets: Vec<i32>,
        nulls: NullBufferBuilder,
    },
}

impl Builder {
    /// An empty builder for values of `kind`.
    pub fn new(kind: &Kind) -> Self {
        match kind {
            Kind::Bool => Self::Bool(BooleanBuilder::new()),
            Kind::I16 => Self::I16(Int16Builder::new()),
            Kind::I32 => Self::I32(Int32Builder::new()),
            Kind::I64 => Self::I64(Int64Builder::new()),
            Kind::F32 => Self::F32(Float32Builder::new()),
            Kind::F64 => Self::F64(Float64Builder::new()),
            Kind::Text | Kind::Json => Self::Text(StringBuilder::new()),
            Kind::Uuid => Self::Uuid(StringBuilder::new()),
            Kind::Bytes => Self::Bytes(BinaryBuilder::new()),
            Kind::Date => Self::Date(Date32Builder::new()),
            Kind::Timestamp => Self::Timestamp(TimestampMicrosecondBuilder::new(), None),
            Kind::TimestampUtc => {
                Self::Timestamp(TimestampMicrosecondBuilder::new(), Some("UTC".into()))
            }
            Kind::Time => Self::Time(Time64MicrosecondBuilder::new()),
            Kind::Decimal { precision, scale } if *precision <= 38 => {
                Self::Decimal128(Decimal128Builder::new(), *precision, *scale)
            }
            Kind::Decimal { precision, scale } => {
                Self::Decimal256(Decimal256Builder::new(), *precision, *scale)
            }
            Kind::Enum => Self::Enum(StringDictionaryBuilder::new()),
            Kind::List(inner) => Self::List {
                item: list_item(inner),
                values: Box::new(Self::new(inner)),
                offsets: vec![0],
                nulls: NullBufferBuilder::new(0),
            },
        }
    }

    /// Appends a NULL.
    pub fn append_null(&mut self) {
        match self {
            Self::Bool(b) => b.append_null(),
            Self::I16(b) => b.append_null(),
            Self::I32(b) => b.append_null(),
            Self::I64(b) => b.append_null(),
            Self::F32(b) => b.append_null(),
            Self::F64(b) => b.append_null(),
            Self::Text(b) | Self::Uuid(b) => b.append_null(),
            Self::Bytes(b) => b.append_null(),
            Self::Date(b) => b.append_null(),
            Self::Timestamp(b, _) => b.append_null(),
            Self::Time(b) => b.append_null(),
            Self::Decimal128(b, ..) => b.append_null(),
            Self::Decimal256(b, ..) => b.append_null(),
            Self::Enum(b) => b.append_null(),
            Self::List { offsets, nulls, .. } => {
                offsets.push(*offsets.last().expect("offsets start at 0"));
                nulls.append_null();
            }
        }
    }

    /// Appends text, replacing bytes that are not UTF-8; true when some were replaced.
    pub fn append_text(b: &mut StringBuilder, bytes: &[u8]) -> bool {
        match std::str::from_utf8(bytes) {
            Ok(s) => {
                b.append_value(s);
                false
            }
            Err(_) => {
                b.append_value(String::from_utf8_lossy(bytes));
                true
            }
        }
    }

    /// Appends a value given in its text form (how SQLite hands over text, and how MySQL's
    /// text protocol hands over every value), parsed into the builder's kind; NULL, counted
    /// in `adjusted`, when the text has no exact form there (`twelve` in an integer column, a
    /// zero date, a decimal with more digits than its scale).
    pub fn append_text_form(&mut self, bytes: &[u8], adjusted: &mut Adjusted) {
        let text = || std::str::from_utf8(bytes).ok().map(str::trim);
        let fitted = match self {
            Self::Text(b) | Self::Uuid(b) => {
                if Self::append_text(b, bytes) {
                    adjusted.replaced_text += 1;
                }
                Some(())
            }
            Self::Enum(b) => {
                let label = String::from_utf8_lossy(bytes);
                if matches!(label, std::borrow::Cow::Owned(_)) {
                    adjusted.replaced_text += 1;
                }
                b.append_value(label);
                Some(())
            }
            Self::Bytes(b) => {
                b.append_value(bytes);
                Some(())
            }
            Self::Bool(b) => match text().map(str::to_ascii_lowercase).as_deref() {
                Some("true" | "t" | "1") => Some(true),
                Some("false" | "f" | "0") => Some(false),
                _ => None,
            }
            .map(|v| b.append_value(v)),
            Self::I16(b) => text()
                .and_then(|s| s.parse().ok())
                .map(|v| b.append_value(v)),
            Self::I32(b) => text()
                .and_then(|s| s.parse().ok())
                .map(|v| b.append_value(v)),
            Self::I64(b) => text()
                .and_then(|s| s.parse().ok())
                .map(|v| b.append_value(v)),
            Self::F32(b) => text()
                .and_then(|s| s.parse().ok())
                .map(|v| b.append_value(v)),
            Self::F64(b) => text()
                .and_then(|s| s.parse().ok())
                .map(|v| b.append_value(v)),
            Self::Date(b) => text()
                .and_then(Date32Type::parse)
                .map(|d| b.append_value(d)),
            Self::Timestamp(b, _) => text()
                .and_then(timestamp_micros)
                .map(|at| b.append_value(at)),
            Self::Time(b) => text()
                .and_then(Time64MicrosecondType::parse)
                .map(|t| b.append_value(t)),
            Self::Decimal128(b, precision, scale) => text()
                .filter(|s| exact_at(s, *scale))
                .and_then(|s| parse_decimal::<Decimal128Type>(s, *precision, *scale).ok())
                .map(|d| b.append_value(d)),
            Self::Decimal256(b, precision, scale) => text()
                .filter(|s| exact_at(s, *scale))
                .and_then(|s| parse_decimal::<Decimal256Type>(s, *precision, *scale).ok())
                .map(|d| b.append_value(d)),
            Self::List { .. } => None,
        };
        if fitted.is_none() {
            self.append_null();
            adjusted.nulled += 1;
        }
    }

    /// Closes a list value whose items were appended to its values builder.
    pub fn close_list(offsets: &mut Vec<i32>, nulls: &mut NullBufferBuilder, values: &Builder) {
        offsets.push(i32::try_from(values.len()).unwrap_or(i32::MAX));
        nulls.append_non_null();
    }

    /// Values appended since the last finish.
    pub fn len(&self) -> usize {
        match self {
            Self::Bool(b) => b.len(),
            Self::I16(b) => b.len(),
            Self::I32(b) => b.len(),
            Self::I64(b) => b.len(),
            Self::F32(b) => b.len(),
            Self::F64(b) => b.len(),
            Self::Text(b) | Self::Uuid(b) => b.len(),
            Self::Bytes(b) => b.len(),
            Self::Date(b) => b.len(),
            Self::Timestamp(b, _) => b.len(),
            Self::Time(b) => b.len(),
            Self::Decimal128(b, ..) => b.len(),
            Self::Decimal256(b, ..) => b.len(),
            Self::Enum(b) => b.len(),
            Self::List { offsets, .. } => offsets.len() - 1,
        }
    }

    /// The values so far as an array; the builder starts over.
    pub fn finish(&mut self) -> std::result::Result<ArrayRef, String> {
        Ok(match self {
            Self::Bool(b) => Arc::new(b.finish()),
            Self::I16(b) => Arc::new(b.finish()),
            Self::I32(b) => Arc::new(b.finish()),
            Self::I64(b) => Arc::new(b.finish()),
            Self::F32(b) => Arc::new(b.finish()),
            Self::F64(b) => Arc::new(b.finish()),
            Self::Text(b) | Self::Uuid(b) => Arc::new(b.finish()),
            Self::Bytes(b) => Arc::new(b.finish()),
            Self::Date(b) => Arc::new(b.finish()),
            Self::Timestamp(b, tz) => Arc::new(b.finish().with_timezone_opt(tz.clone())),
            Self::Time(b) => Arc::new(b.finish()),
            Self::Decimal128(b, precision, scale) => Arc::new(
                b.finish()
                    .with_precision_and_scale(*precision, *scale)
                    .map_err(|e| e.to_string())?,
            ),
            Self::Decimal256(b, precision, scale) => Arc::new(
                b.finish()
                    .with_precision_and_scale(*precision, *scale)
                    .map_err(|e| e.to_string())?,
            ),
            Self::Enum(b) => Arc::new(b.finish()),
            Self::List {
                item,
                values,
                offsets,
                nulls,
            } => {
                let values = values.finish()?;
                let offsets = OffsetBuffer::new(std::mem::replace(offsets, vec![0]).into());
                Arc::new(
                    ListArray::try_new(item.clone(), offsets, values, nulls.finish())
                        .map_err(|e| e.to_string())?,
                )
            }
        })
    }
}

/// Microseconds since the epoch of an ISO 8601 date and time (`T` or a space between them; an
/// offset, when given, is honoured; none means UTC). Arrow's own parser goes through
/// nanoseconds and so stops at the years 1677 and 2262; this one reaches 0001 and 9999.
pub(crate) fn timestamp_micros(text: &str) -> Option<i64> {
    string_to_datetime(&chrono::Utc, text)
        .ok()
        .map(|at| at.timestamp_micros())
}

/// Whether `text` has no nonzero digit past `scale` fractional digits (a decimal parse would
/// drop them silently).
pub(crate) fn exact_at(text: &str, scale: i8) -> bool {
    match text.split_once('.') {
        Some((_, fraction)) if !fraction.contains(['e', 'E']) => fraction
            .bytes()
            .skip(scale.max(0) as usize)
            .all(|b| b == b'0'),
        _ => true,
    }
}

/// What an extraction had to change to fit, reported with the sync.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Adjusted {
    /// Text values with bytes that were not UTF-8 (replaced by U+FFFD).
    pub replaced_text: u64,
    /// Values with no Arrow form (NaN or infinite decimals, dates past Arrow's range): NULL.
    pub nulled: u64,
    /// Multi-dimensional arrays flattened.
    pub flattened: u64,
}

/// The rows of the batch being built.
pub(crate) struct Batch {
    pub builders: Vec<Builder>,
    pub rows: usize,
    schema: SchemaRef,
}

impl Batch {
    /// An empty batch of these columns.
    pub fn new(columns: &[Column], schema: SchemaRef) -> Self {
        Self {
            builders: columns.iter().map(|c| Builder::new(&c.kind)).collect(),
            rows: 0,
            schema,
        }
    }

    /// The rows so far as a record batch; the builders start over.
    pub fn finish(&mut self) -> Result<RecordBatch> {
        let arrays = self
            .builders
            .iter_mut()
            .map(Builder::finish)
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(DriverError::internal)?;
        self.rows = 0;
        RecordBatch::try_new(self.schema.clone(), arrays)
            .map_err(|e| DriverError::internal(format!("cannot assemble a batch: {e}")))
    }
}
