//! Extraction from PostgreSQL: the table's columns from the catalog, one SELECT whose every
//! column comes back in a form with an exact Arrow twin, rows streamed into batches and
//! through the atomic parquet writer.
//!
//! Types whose value the driver reads as it is: booleans, integers, floats (NaN and ±inf
//! kept), text, bytea. Types it has the database turn into numbers first, so nothing is lost
//! in a decimal string: `date` (days since 1970), `timestamp`/`timestamptz` (microseconds
//! since 1970, UTC for the latter), `time` (microseconds since midnight), `numeric(p,s)` with
//! p ≤ 38 (the unscaled integer, as Decimal128(p,s)). Every other type (uuid, json/jsonb,
//! interval, enums, arrays, unconstrained numeric, …) comes back as its text form. Each field
//! records its source type in its metadata (`svc:source_type`), so a JSON column is known as
//! one. Infinite dates and timestamps become NULL.

use std::path::Path;
use std::str::FromStr as _;
use std::sync::Arc;
use std::time::Duration;

use futures::TryStreamExt as _;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgRow};
use sqlx::{Connection as _, Row as _};
use svc_driver_parquet::AtomicParquet;
use svc_plugin_api::arrow::array::{
    ArrayRef, BinaryBuilder, BooleanBuilder, Date32Builder, Decimal128Builder, Float32Builder,
    Float64Builder, Int16Builder, Int32Builder, Int64Builder, StringBuilder,
    Time64MicrosecondBuilder, TimestampMicrosecondBuilder,
};
use svc_plugin_api::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use svc_plugin_api::{DriverError, ErrorKind, RecordBatch, Result, SyncReport};

use crate::config::{redact, Connection};
use crate::source::SourceTable;

/// Rows per Arrow batch handed to the writer.
const BATCH_ROWS: usize = 65_536;

/// How a column is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Bool,
    I16,
    I32,
    I64,
    F32,
    F64,
    Text,
    Bytes,
    Date,
    Timestamp,
    TimestampUtc,
    Time,
    Decimal { precision: u8, scale: i8 },
}

/// One source column and how it is read.
#[derive(Debug, Clone)]
struct Column {
    name: String,
    source_type: String,
    kind: Kind,
}

impl Column {
    /// The column as the source's catalog describes it: base type name and type modifier.
    fn plan(name: String, type_name: &str, formatted: String, typmod: i32) -> Self {
        let kind = match type_name {
            "bool" => Kind::Bool,
            "int2" => Kind::I16,
            "int4" | "oid" => Kind::I32,
            "int8" => Kind::I64,
            "float4" => Kind::F32,
            "float8" => Kind::F64,
            "text" | "varchar" | "bpchar" | "name" | "char" | "citext" => Kind::Text,
            "bytea" => Kind::Bytes,
            "date" => Kind::Date,
            "timestamp" => Kind::Timestamp,
            "timestamptz" => Kind::TimestampUtc,
            "time" => Kind::Time,
            "numeric" => decimal(typmod).unwrap_or(Kind::Text),
            _ => Kind::Text,
        };
        Self {
            name,
            source_type: formatted,
            kind,
        }
    }

    fn quoted(&self) -> String {
        format!("\"{}\"", self.name.replace('"', "\"\""))
    }

    /// The SELECT expression that returns the column in its read form.
    fn select(&self) -> String {
        let c = self.quoted();
        match self.kind {
            Kind::Date => format!("CASE WHEN isfinite({c}) THEN ({c} - DATE '1970-01-01') END"),
            Kind::Timestamp | Kind::TimestampUtc => format!(
                "CASE WHEN isfinite({c}) THEN (extract(epoch FROM {c}) * 1000000)::int8 END"
            ),
            Kind::Time => format!("(extract(epoch FROM {c}) * 1000000)::int8"),
            Kind::Decimal { scale, .. } => {
                format!(
                    "({c} * 1{})::numeric(38,0)::text",
                    "0".repeat(scale as usize)
                )
            }
            Kind::Text => format!("{c}::text"),
            _ => c,
        }
    }

    fn field(&self) -> Field {
        let data_type = match self.kind {
            Kind::Bool => DataType::Boolean,
            Kind::I16 => DataType::Int16,
            Kind::I32 => DataType::Int32,
            Kind::I64 => DataType::Int64,
            Kind::F32 => DataType::Float32,
            Kind::F64 => DataType::Float64,
            Kind::Text => DataType::Utf8,
            Kind::Bytes => DataType::Binary,
            Kind::Date => DataType::Date32,
            Kind::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, None),
            Kind::TimestampUtc => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            Kind::Time => DataType::Time64(TimeUnit::Microsecond),
            Kind::Decimal { precision, scale } => DataType::Decimal128(precision, scale),
        };
        Field::new(&self.name, data_type, true).with_metadata(
            [("svc:source_type".to_owned(), self.source_type.clone())]
                .into_iter()
                .collect(),
        )
    }
}

/// `numeric(p,s)` with 0 ≤ s ≤ p ≤ 38 as a Decimal128; anything else is read as text.
fn decimal(typmod: i32) -> Option<Kind> {
    if typmod < 4 {
        return None;
    }
    let packed = typmod - 4;
    let precision = (packed >> 16) & 0xffff;
    let scale = packed & 0xffff;
    ((1..=38).contains(&precision) && scale <= precision).then_some(Kind::Decimal {
        precision: precision as u8,
        scale: scale as i8,
    })
}

/// Replaces `target` with the source table's rows.
pub(crate) async fn extract(
    name: &str,
    connection: &Connection,
    source: &SourceTable,
    target: &Path,
) -> Result<SyncReport> {
    let mut conn = connect(name, connection).await?;
    let columns = columns(&mut conn, name, source).await?;
    let schema: SchemaRef = Arc::new(Schema::new(
        columns.iter().map(Column::field).collect::<Vec<_>>(),
    ));
    let sql = format!(
        "SELECT {} FROM {}",
        columns
            .iter()
            .map(Column::select)
            .collect::<Vec<_>>()
            .join(", "),
        source.quoted()
    );
    let mut writer = AtomicParquet::create(target, schema.clone())?;
    let mut batch = Batch::new(&columns);
    let mut rows = sqlx::query(&sql).fetch(&mut conn);
    while let Some(row) = rows
        .try_next()
        .await
        .map_err(|e| upstream(name, &format!("reading {}", source.display()), &e))?
    {
        batch.push(&row, &columns)?;
        if batch.len == BATCH_ROWS {
            writer.write(&batch.finish(&schema)?)?;
        }
    }
    drop(rows);
    if batch.len > 0 {
        writer.write(&batch.finish(&schema)?)?;
    }
    let _ = conn.close().await;
    writer.commit()
}

async fn connect(name: &str, connection: &Connection) -> Result<PgConnection> {
    let refuse = |why: String| {
        DriverError::new(
            ErrorKind::NotConfigured,
            format!("Connection '{name}': {why}"),
        )
    };
    let mut options = PgConnectOptions::from_str(&connection.url).map_err(|_| {
        refuse(format!(
            "url {} is not a PostgreSQL URL",
            redact(&connection.url)
        ))
    })?;
    if let Some(password) = connection.password().map_err(refuse)? {
        options = options.password(&password);
    }
    options = options.application_name("svc");
    if connection.statement_timeout_seconds > 0 {
        options = options.options([(
            "statement_timeout",
            format!("{}s", connection.statement_timeout_seconds),
        )]);
    }
    tokio::time::timeout(
        Duration::from_secs(30),
        PgConnection::connect_with(&options),
    )
    .await
    .map_err(|_| {
        DriverError::new(
            ErrorKind::Timeout,
            format!("Connection '{name}': no answer from the database within 30 s"),
        )
    })?
    .map_err(|e| upstream(name, "connecting", &e))
}

/// The source's columns, in order, from its catalog.
async fn columns(conn: &mut PgConnection, name: &str, source: &SourceTable) -> Result<Vec<Column>> {
    let rows = sqlx::query(
        "SELECT a.attname::text, bt.typname::text, format_type(a.atttypid, a.atttypmod), \
                CASE WHEN t.typtype = 'd' THEN t.typtypmod ELSE a.atttypmod END \
         FROM pg_attribute a \
         JOIN pg_type t ON t.oid = a.atttypid \
         JOIN pg_type bt ON bt.oid = CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE t.oid END \
         WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped \
         ORDER BY a.attnum",
    )
    .bind(source.quoted())
    .fetch_all(&mut *conn)
    .await
    .map_err(|e| {
        upstream(
            name,
            &format!("reading the columns of {}", source.display()),
            &e,
        )
    })?;
    if rows.is_empty() {
        return Err(DriverError::new(
            ErrorKind::NotFound,
            format!(
                "Connection '{name}' has no table {} (or it has no columns the login may see)",
                source.display()
            ),
        ));
    }
    rows.iter()
        .map(|r| {
            let get = |i| {
                r.try_get::<String, _>(i)
                    .map_err(|e| upstream(name, "reading the catalog", &e))
            };
            Ok(Column::plan(
                get(0)?,
                &get(1)?,
                get(2)?,
                r.try_get::<i32, _>(3)
                    .map_err(|e| upstream(name, "reading the catalog", &e))?,
            ))
        })
        .collect()
}

fn upstream(name: &str, doing: &str, e: &sqlx::Error) -> DriverError {
    let kind = match e {
        sqlx::Error::Database(db) if db.code().as_deref() == Some("28P01") => ErrorKind::AuthFailed,
        sqlx::Error::Database(db) if db.code().as_deref() == Some("42501") => {
            ErrorKind::SourceForbidden
        }
        sqlx::Error::Database(db) if db.code().as_deref() == Some("57014") => ErrorKind::Timeout,
        _ => ErrorKind::Upstream,
    };
    DriverError::new(kind, format!("Connection '{name}', {doing}: {e}"))
}

/// One column's values on their way into an Arrow array.
enum Builder {
    Bool(BooleanBuilder),
    I16(Int16Builder),
    I32(Int32Builder),
    I64(Int64Builder),
    F32(Float32Builder),
    F64(Float64Builder),
    Text(StringBuilder),
    Bytes(BinaryBuilder),
    Date(Date32Builder),
    Timestamp(TimestampMicrosecondBuilder, Option<Arc<str>>),
    Time(Time64MicrosecondBuilder),
    Decimal(Decimal128Builder, u8, i8),
}

impl Builder {
    fn new(kind: Kind) -> Self {
        match kind {
            Kind::Bool => Self::Bool(BooleanBuilder::new()),
            Kind::I16 => Self::I16(Int16Builder::new()),
            Kind::I32 => Self::I32(Int32Builder::new()),
            Kind::I64 => Self::I64(Int64Builder::new()),
            Kind::F32 => Self::F32(Float32Builder::new()),
            Kind::F64 => Self::F64(Float64Builder::new()),
            Kind::Text => Self::Text(StringBuilder::new()),
            Kind::Bytes => Self::Bytes(BinaryBuilder::new()),
            Kind::Date => Self::Date(Date32Builder::new()),
            Kind::Timestamp => Self::Timestamp(TimestampMicrosecondBuilder::new(), None),
            Kind::TimestampUtc => {
                Self::Timestamp(TimestampMicrosecondBuilder::new(), Some("UTC".into()))
            }
            Kind::Time => Self::Time(Time64MicrosecondBuilder::new()),
            Kind::Decimal { precision, scale } => {
                Self::Decimal(Decimal128Builder::new(), precision, scale)
            }
        }
    }

    /// Appends column `i` of `row`.
    fn push(&mut self, row: &PgRow, i: usize) -> std::result::Result<(), sqlx::Error> {
        match self {
            Self::Bool(b) => b.append_option(row.try_get::<Option<bool>, _>(i)?),
            Self::I16(b) => b.append_option(row.try_get::<Option<i16>, _>(i)?),
            Self::I32(b) => b.append_option(row.try_get::<Option<i32>, _>(i)?),
            Self::I64(b) => b.append_option(row.try_get::<Option<i64>, _>(i)?),
            Self::Time(b) => b.append_option(row.try_get::<Option<i64>, _>(i)?),
            Self::Timestamp(b, _) => b.append_option(row.try_get::<Option<i64>, _>(i)?),
            Self::F32(b) => b.append_option(row.try_get::<Option<f32>, _>(i)?),
            Self::F64(b) => b.append_option(row.try_get::<Option<f64>, _>(i)?),
            Self::Text(b) => {
                // Read as bytes: a database in another encoding (SQL_ASCII) may hold bytes
                // that are not UTF-8; they are replaced rather than failing the sync.
                match row.try_get_unchecked::<Option<&[u8]>, _>(i)? {
                    Some(bytes) => b.append_value(String::from_utf8_lossy(bytes)),
                    None => b.append_null(),
                }
            }
            Self::Bytes(b) => b.append_option(row.try_get::<Option<Vec<u8>>, _>(i)?),
            Self::Date(b) => b.append_option(row.try_get::<Option<i32>, _>(i)?),
            Self::Decimal(b, ..) => {
                // NaN and ±Infinity have no decimal form: NULL.
                let text = row.try_get::<Option<String>, _>(i)?;
                b.append_option(text.and_then(|t| t.parse::<i128>().ok()));
            }
        }
        Ok(())
    }

    fn finish(&mut self) -> std::result::Result<ArrayRef, String> {
        Ok(match self {
            Self::Bool(b) => Arc::new(b.finish()),
            Self::I16(b) => Arc::new(b.finish()),
            Self::I32(b) => Arc::new(b.finish()),
            Self::I64(b) => Arc::new(b.finish()),
            Self::F32(b) => Arc::new(b.finish()),
            Self::F64(b) => Arc::new(b.finish()),
            Self::Text(b) => Arc::new(b.finish()),
            Self::Bytes(b) => Arc::new(b.finish()),
            Self::Date(b) => Arc::new(b.finish()),
            Self::Timestamp(b, tz) => Arc::new(b.finish().with_timezone_opt(tz.clone())),
            Self::Time(b) => Arc::new(b.finish()),
            Self::Decimal(b, precision, scale) => Arc::new(
                b.finish()
                    .with_precision_and_scale(*precision, *scale)
                    .map_err(|e| e.to_string())?,
            ),
        })
    }
}

/// The rows of the batch being built.
struct Batch {
    builders: Vec<Builder>,
    len: usize,
}

impl Batch {
    fn new(columns: &[Column]) -> Self {
        Self {
            builders: columns.iter().map(|c| Builder::new(c.kind)).collect(),
            len: 0,
        }
    }

    fn push(&mut self, row: &PgRow, columns: &[Column]) -> Result<()> {
        for (i, b) in self.builders.iter_mut().enumerate() {
            b.push(row, i).map_err(|e| {
                DriverError::new(
                    ErrorKind::Upstream,
                    format!(
                        "column {} ({}): {e}",
                        columns[i].name, columns[i].source_type
                    ),
                )
            })?;
        }
        self.len += 1;
        Ok(())
    }

    /// The rows so far as a batch; the builders start over.
    fn finish(&mut self, schema: &SchemaRef) -> Result<RecordBatch> {
        let arrays = self
            .builders
            .iter_mut()
            .map(Builder::finish)
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(DriverError::internal)?;
        self.len = 0;
        RecordBatch::try_new(schema.clone(), arrays)
            .map_err(|e| DriverError::internal(format!("cannot assemble a batch: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numeric_modifiers_become_decimals_within_38_digits() {
        let typmod = |p: i32, s: i32| ((p << 16) | s) + 4;
        assert_eq!(
            decimal(typmod(12, 2)),
            Some(Kind::Decimal {
                precision: 12,
                scale: 2
            })
        );
        assert_eq!(decimal(typmod(60, 2)), None);
        assert_eq!(decimal(-1), None);
        let c = Column::plan(
            "a\"b".into(),
            "numeric",
            "numeric(10,3)".into(),
            typmod(10, 3),
        );
        assert_eq!(c.select(), "(\"a\"\"b\" * 1000)::numeric(38,0)::text");
    }
}
