//! SQLite sources: the database file opened read-only, each column planned from its declared
//! type by SQLite's own affinity rules, and the rows read through sqlx and converted value by
//! value into Arrow builders.
//!
//! SQLite types values, not columns: a column declared `INTEGER` may hold text. A value is
//! converted when it has an exact form in the column's kind (an integer in a `REAL` column,
//! ISO 8601 text in a `DATE` or `TIMESTAMP` column, a number in a `DECIMAL(p,s)` column
//! that fits) and becomes NULL otherwise, counted in the sync's notes. Columns with no
//! declared type, or a type SQLite gives no meaning to (`NUMERIC` without digits, say), are
//! kept as text. `statement_timeout_seconds` does not apply: SQLite has no such setting.

use std::str::FromStr as _;

use futures::TryStreamExt as _;
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection, SqliteRow};
use sqlx::{Column as _, Connection as _, Decode, Executor as _, Row as _, Sqlite};
use sqlx::{TypeInfo as _, ValueRef as _};
use svc_plugin_api::{ColumnInfo, DriverError, ErrorKind, RecordBatch, Result, SourceTableInfo};
use tokio::sync::mpsc::Sender;

use crate::columns::{schema, Adjusted, Batch, Builder, Column, Kind};
use crate::config::{redact, Connection};
use crate::session::{hand_over, misconfigured, refused_query};
use crate::source::{quoted, Source};

/// The database file, opened read-only: a `source_query` can never change it.
pub(crate) async fn connect(name: &str, connection: &Connection) -> Result<SqliteConnection> {
    let options = SqliteConnectOptions::from_str(&connection.url)
        .map_err(|_| {
            misconfigured(
                name,
                format!(
                    "url {} is not a SQLite URL (sqlite:///path/to/file.db)",
                    redact(&connection.url)
                ),
            )
        })?
        .read_only(true)
        .create_if_missing(false);
    SqliteConnection::connect_with(&options)
        .await
        .map_err(|e| upstream(name, "opening the database", &e))
}

/// The source's columns, in order, each planned from its declared type.
pub(crate) async fn columns(
    conn: &mut SqliteConnection,
    name: &str,
    source: &Source,
) -> Result<Vec<Column>> {
    let declared: Vec<(String, String)> = match source {
        Source::Table(t) => {
            let rows = sqlx::query("SELECT name, type FROM pragma_table_info(?1, ?2) ORDER BY cid")
                .bind(&t.table)
                .bind(t.schema.as_deref().unwrap_or("main"))
                .fetch_all(&mut *conn)
                .await
                .map_err(|e| upstream(name, &format!("describing {}", t.display()), &e))?;
            if rows.is_empty() {
                return Err(DriverError::new(
                    ErrorKind::NotFound,
                    format!("Connection '{name}' has no table {}", t.display()),
                ));
            }
            rows.iter()
                .map(|r| Ok((text(r, 0, name)?, text(r, 1, name)?)))
                .collect::<Result<_>>()?
        }
        Source::Query(_) => {
            let described = conn
                .describe(&format!("SELECT * FROM {}", source.relation()))
                .await
                .map_err(|e| refused_query(name, &e))?;
            described
                .columns()
                .iter()
                .map(|c| (c.name().to_owned(), c.type_info().name().to_owned()))
                .collect()
        }
    };
    source.check_unique(declared.iter().map(|(n, _)| n.as_str()))?;
    Ok(declared.into_iter().map(|(n, t)| plan(n, t)).collect())
}

fn text(row: &SqliteRow, i: usize, name: &str) -> Result<String> {
    row.try_get::<Option<String>, _>(i)
        .map(Option::unwrap_or_default)
        .map_err(|e| upstream(name, "reading the schema", &e))
}

/// A column's kind from its declared type, by SQLite's affinity rules (integer first, then
/// text, blob, real), after the names that say more: booleans, dates and times, JSON and
/// decimals with digits.
fn plan(name: String, declared: String) -> Column {
    let upper = declared.to_ascii_uppercase();
    let base = upper.split('(').next().unwrap_or("").trim();
    let kind = if base.contains("INT") {
        Some(Kind::I64)
    } else if base.starts_with("BOOL") {
        Some(Kind::Bool)
    } else if base == "DATE" {
        Some(Kind::Date)
    } else if base.starts_with("DATETIME") || base.starts_with("TIMESTAMP") {
        Some(if base.contains("TZ") || base.contains("TIME ZONE") {
            Kind::TimestampUtc
        } else {
            Kind::Timestamp
        })
    } else if base == "TIME" {
        Some(Kind::Time)
    } else if base.contains("JSON") {
        Some(Kind::Json)
    } else if ["CHAR", "CLOB", "TEXT"].iter().any(|t| base.contains(t)) {
        Some(Kind::Text)
    } else if base.contains("BLOB") {
        Some(Kind::Bytes)
    } else if ["REAL", "FLOA", "DOUB"].iter().any(|t| base.contains(t)) {
        Some(Kind::F64)
    } else if base == "DECIMAL" || base == "NUMERIC" {
        decimal(&upper)
    } else {
        None
    };
    Column {
        name,
        source_type: if declared.is_empty() {
            "(no declared type)".to_owned()
        } else {
            declared
        },
        as_text: kind.is_none(),
        kind: kind.unwrap_or(Kind::Text),
    }
}

/// `DECIMAL(p,s)` / `NUMERIC(p)` with 1 ≤ p ≤ 76 and 0 ≤ s ≤ p.
fn decimal(upper: &str) -> Option<Kind> {
    let inside = upper.split_once('(')?.1.strip_suffix(')')?;
    let mut parts = inside.split(',').map(|p| p.trim().parse::<u8>());
    let precision = parts.next()?.ok()?;
    let scale = match parts.next() {
        Some(s) => s.ok()?,
        None => 0,
    };
    (parts.next().is_none() && (1..=76).contains(&precision) && scale <= precision).then_some(
        Kind::Decimal {
            precision,
            scale: scale as i8,
        },
    )
}

/// Streams the source's rows to `out` in batches of `batch_rows`; `filter` is what follows
/// `WHERE`. Answers what had to change to fit.
pub(crate) async fn rows(
    conn: &mut SqliteConnection,
    name: &str,
    source: &Source,
    columns: &[Column],
    filter: Option<&str>,
    batch_rows: usize,
    out: &Sender<RecordBatch>,
) -> Result<Adjusted> {
    let select = columns
        .iter()
        .map(|c| quoted(&c.name))
        .collect::<Vec<_>>()
        .join(", ");
    let mut sql = format!("SELECT {select} FROM {}", source.relation());
    if let Some(filter) = filter {
        sql.push_str(&format!(" WHERE {filter}"));
    }
    let reading = format!("reading {}", source.display());
    let mut adjusted = Adjusted::default();
    let mut batch = Batch::new(columns, schema(columns));
    let mut stream = sqlx::query(&sql).fetch(&mut *conn);
    while let Some(row) = stream
        .try_next()
        .await
        .map_err(|e| upstream(name, &reading, &e))?
    {
        for (i, builder) in batch.builders.iter_mut().enumerate() {
            let cell = value(&row, i).map_err(|e| {
                DriverError::new(
                    ErrorKind::Upstream,
                    format!("Connection '{name}', {reading}: {e}"),
                )
            })?;
            append(builder, cell, &mut adjusted);
        }
        batch.rows += 1;
        hand_over(&mut batch, out, batch_rows).await?;
    }
    hand_over(&mut batch, out, 1).await?;
    Ok(adjusted)
}

/// A value as SQLite stores it.
#[derive(Debug, Clone, Copy)]
enum Value<'r> {
    Integer(i64),
    Real(f64),
    Text(&'r [u8]),
    Blob(&'r [u8]),
}

/// SQLite's storage classes (NULL aside).
enum Class {
    Integer,
    Real,
    Text,
    Blob,
}

fn value(row: &SqliteRow, i: usize) -> std::result::Result<Option<Value<'_>>, String> {
    let raw = row.try_get_raw(i).map_err(|e| e.to_string())?;
    if raw.is_null() {
        return Ok(None);
    }
    let class = match raw.type_info().name() {
        "INTEGER" => Class::Integer,
        "REAL" => Class::Real,
        "TEXT" => Class::Text,
        _ => Class::Blob,
    };
    let decoded = match class {
        Class::Integer => <i64 as Decode<Sqlite>>::decode(raw).map(Value::Integer),
        Class::Real => <f64 as Decode<Sqlite>>::decode(raw).map(Value::Real),
        Class::Text => <&[u8] as Decode<Sqlite>>::decode(raw).map(Value::Text),
        Class::Blob => <&[u8] as Decode<Sqlite>>::decode(raw).map(Value::Blob),
    };
    decoded.map(Some).map_err(|e| e.to_string())
}

/// Appends `value` in the builder's kind, or NULL (counted) when it has no exact form there.
fn append(builder: &mut Builder, value: Option<Value<'_>>, adjusted: &mut Adjusted) {
    let Some(value) = value else {
        builder.append_null();
        return;
    };
    let (integer, real) = match value {
        Value::Text(t) => return builder.append_text_form(t, adjusted),
        Value::Blob(b) => {
            // A blob is bytes whatever the column says; only text and bytes columns hold it.
            return match builder {
                Builder::Text(_) | Builder::Bytes(_) => builder.append_text_form(b, adjusted),
                _ => {
                    builder.append_null();
                    adjusted.nulled += 1;
                }
            };
        }
        Value::Integer(i) => (Some(i), None),
        Value::Real(f) => (None, Some(f)),
    };
    let fitted = match (&mut *builder, integer, real) {
        (Builder::I64(b), Some(i), _) => {
            b.append_value(i);
            true
        }
        (Builder::I64(b), _, Some(f)) if f.fract() == 0.0 && f.abs() < 9.2e18 => {
            b.append_value(f as i64);
            true
        }
        (Builder::F64(b), i, f) => {
            b.append_value(f.unwrap_or(i.unwrap_or_default() as f64));
            true
        }
        (Builder::Bool(b), Some(i), _) => {
            b.append_value(i != 0);
            true
        }
        // SQLite's other common form of a time: seconds since the Unix epoch.
        (Builder::Timestamp(b, _), Some(secs), _) => match secs.checked_mul(1_000_000) {
            Some(at) => {
                b.append_value(at);
                true
            }
            None => false,
        },
        // A number in a text or bytes column, or a decimal's digits: an integer as it is, a
        // REAL (how SQLite keeps a fractional DECIMAL) rounded to the scale.
        (Builder::Text(_) | Builder::Bytes(_), i, f) => {
            let digits = i.map_or_else(|| f.unwrap_or_default().to_string(), |i| i.to_string());
            return builder.append_text_form(digits.as_bytes(), adjusted);
        }
        (Builder::Decimal128(_, _, scale) | Builder::Decimal256(_, _, scale), i, f) => {
            let digits = match (i, f) {
                (Some(i), _) => i.to_string(),
                (_, Some(f)) if f.is_finite() => format!("{f:.*}", (*scale).max(0) as usize),
                _ => String::new(),
            };
            return builder.append_text_form(digits.as_bytes(), adjusted);
        }
        _ => false,
    };
    if !fitted {
        builder.append_null();
        adjusted.nulled += 1;
    }
}

/// The tables and views of the database (every attached schema), with each column as it
/// would be extracted.
pub(crate) async fn discover(
    conn: &mut SqliteConnection,
    name: &str,
) -> Result<Vec<SourceTableInfo>> {
    let schemas: Vec<String> = sqlx::query_scalar("SELECT name FROM pragma_database_list")
        .fetch_all(&mut *conn)
        .await
        .map_err(|e| upstream(name, "listing databases", &e))?;
    let mut tables: Vec<SourceTableInfo> = Vec::new();
    for schema_name in schemas.into_iter().filter(|s| s != "temp") {
        let rows = sqlx::query(&format!(
            "SELECT m.name, m.type, p.name, p.type, p.\"notnull\" \
             FROM {}.sqlite_schema m, pragma_table_info(m.name, ?1) p \
             WHERE m.type IN ('table', 'view') AND m.name NOT LIKE 'sqlite\\_%' ESCAPE '\\' \
             ORDER BY m.name, p.cid",
            quoted(&schema_name)
        ))
        .bind(&schema_name)
        .fetch_all(&mut *conn)
        .await
        .map_err(|e| upstream(name, "listing tables", &e))?;
        for r in &rows {
            let (table, kind) = (text(r, 0, name)?, text(r, 1, name)?);
            let column = plan(text(r, 2, name)?, text(r, 3, name)?);
            let info = ColumnInfo {
                name: column.name.clone(),
                data_type: svc_plugin_api::type_name(column.field().data_type()),
                nullable: r.try_get::<i64, _>(4).map(|n| n == 0).unwrap_or(true),
                description: if column.as_text {
                    format!("{} (kept as text)", column.source_type)
                } else {
                    column.source_type.clone()
                },
            };
            match tables.last_mut() {
                Some(t) if t.schema == schema_name && t.name == table => t.columns.push(info),
                _ => tables.push(SourceTableInfo {
                    schema: schema_name.clone(),
                    name: table,
                    kind,
                    estimated_rows: None,
                    columns: vec![info],
                }),
            }
        }
    }
    Ok(tables)
}

/// A driver error for a database error: a missing table is not found, the rest upstream.
fn upstream(name: &str, doing: &str, e: &sqlx::Error) -> DriverError {
    let kind = match e {
        sqlx::Error::Database(db) if db.message().starts_with("no such table") => {
            ErrorKind::NotFound
        }
        _ => ErrorKind::Upstream,
    };
    DriverError::new(kind, format!("Connection '{name}', {doing}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declared_types_plan_by_affinity_and_decimals_keep_their_digits() {
        for (declared, kind, as_text) in [
            ("INTEGER", Kind::I64, false),
            ("unsigned big int", Kind::I64, false),
            ("BOOLEAN", Kind::Bool, false),
            ("DATE", Kind::Date, false),
            ("DATETIME", Kind::Timestamp, false),
            ("TIME", Kind::Time, false),
            ("VARCHAR(20)", Kind::Text, false),
            ("JSON", Kind::Json, false),
            ("BLOB", Kind::Bytes, false),
            ("DOUBLE PRECISION", Kind::F64, false),
            (
                "DECIMAL(12,2)",
                Kind::Decimal {
                    precision: 12,
                    scale: 2,
                },
                false,
            ),
            ("NUMERIC", Kind::Text, true),
            ("", Kind::Text, true),
            ("DECIMAL(2,5)", Kind::Text, true),
        ] {
            let c = plan("c".into(), declared.into());
            assert_eq!((c.kind, c.as_text), (kind, as_text), "{declared}");
        }
    }

    #[test]
    fn a_value_without_an_exact_form_is_null_and_counted() {
        let mut adjusted = Adjusted::default();
        let mut ints = Builder::new(&Kind::I64);
        for v in [
            Value::Integer(7),
            Value::Real(3.0),
            Value::Real(3.5),
            Value::Text(b" 12 "),
            Value::Text(b"twelve"),
        ] {
            append(&mut ints, Some(v), &mut adjusted);
        }
        append(&mut ints, None, &mut adjusted);
        let mut money = Builder::new(&Kind::Decimal {
            precision: 5,
            scale: 2,
        });
        for v in [
            Value::Real(12.5),
            Value::Integer(999),
            Value::Integer(1000),
            Value::Text(b"1.005"),
        ] {
            append(&mut money, Some(v), &mut adjusted);
        }
        let mut text = Builder::new(&Kind::Text);
        append(&mut text, Some(Value::Text(b"\xffok")), &mut adjusted);
        let ints = ints.finish().unwrap();
        let money = money.finish().unwrap();
        assert_eq!(
            format!("{ints:?}").split_whitespace().collect::<String>(),
            "PrimitiveArray<Int64>[7,3,null,12,null,null,]"
        );
        assert_eq!(
            format!("{money:?}").split_whitespace().collect::<String>(),
            "PrimitiveArray<Decimal128(5,2)>[1250,99900,null,null,]"
        );
        assert_eq!((adjusted.nulled, adjusted.replaced_text), (4, 1));
    }
}
