//! PostgreSQL sources: a read-only session, the source's columns from its catalog, and the
//! rows through binary `COPY … TO STDOUT` decoded straight into Arrow builders ([`copy`]).
//!
//! The source's columns come from describing `SELECT * FROM <source>` (so a table and a
//! `source_query` are planned the same way), then the catalog for each column's base type,
//! type modifier (numeric precision, from the column it came from) and array element. Types
//! svc has no exact form for are cast to text in the COPY's SELECT (`interval` in ISO 8601,
//! by the session's `intervalstyle`).

mod copy;

use std::str::FromStr as _;

use futures::TryStreamExt as _;
use sqlx::postgres::types::Oid;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgSslMode};
use sqlx::{Column as _, Connection as _, Executor as _, Row as _};
use svc_plugin_api::{ColumnInfo, DriverError, ErrorKind, RecordBatch, Result, SourceTableInfo};
use tokio::sync::mpsc::Sender;

use crate::columns::{schema, Adjusted, Batch, Column, Kind};
use crate::config::{redact, Connection, Tls};
use crate::session::{hand_over, misconfigured, refused_query, within_30s};
use crate::source::{quoted, Source};

/// A read-only session on the connection's database.
pub(crate) async fn connect(name: &str, connection: &Connection) -> Result<PgConnection> {
    let refuse = |why: String| misconfigured(name, why);
    let mut options = PgConnectOptions::from_str(&connection.url).map_err(|_| {
        refuse(format!(
            "url {} is not a PostgreSQL URL",
            redact(&connection.url)
        ))
    })?;
    if let Some(password) = connection.password().map_err(refuse)? {
        options = options.password(&password);
    }
    if let Some(tls) = connection.tls {
        options = options.ssl_mode(match tls {
            Tls::Disable => PgSslMode::Disable,
            Tls::Prefer => PgSslMode::Prefer,
            Tls::Require => PgSslMode::Require,
            Tls::VerifyCa => PgSslMode::VerifyCa,
            Tls::VerifyFull => PgSslMode::VerifyFull,
        });
    }
    if let Some(ca) = &connection.tls_ca_file {
        options = options.ssl_root_cert(ca);
    }
    // Read-only: a source_query can never change the source, whatever it contains.
    let mut settings = vec![
        ("default_transaction_read_only", "on".to_owned()),
        ("intervalstyle", "iso_8601".to_owned()),
    ];
    if connection.statement_timeout_seconds > 0 {
        settings.push((
            "statement_timeout",
            format!("{}s", connection.statement_timeout_seconds),
        ));
    }
    options = options.application_name("svc").options(settings);
    let mut conn = within_30s(name, PgConnection::connect_with(&options), upstream).await?;
    // A SQL_ASCII database holds bytes in no particular encoding; converting them to UTF-8
    // would fail the sync on the first odd byte. Take them as they are: the decoder replaces
    // what is not UTF-8 and counts it.
    let encoding: String = sqlx::query_scalar("SHOW server_encoding")
        .fetch_one(&mut conn)
        .await
        .map_err(|e| upstream(name, "reading the server encoding", &e))?;
    if encoding.eq_ignore_ascii_case("SQL_ASCII") {
        sqlx::query("SET client_encoding TO 'SQL_ASCII'")
            .execute(&mut conn)
            .await
            .map_err(|e| upstream(name, "setting the client encoding", &e))?;
    }
    Ok(conn)
}

/// The source's columns, in order, each planned.
pub(crate) async fn columns(
    conn: &mut PgConnection,
    name: &str,
    source: &Source,
) -> Result<Vec<Column>> {
    let described = conn
        .describe(&format!("SELECT * FROM {}", source.relation()))
        .await
        .map_err(|e| match &e {
            sqlx::Error::Database(db) if db.code().as_deref() == Some("42P01") => DriverError::new(
                ErrorKind::NotFound,
                format!(
                    "Connection '{name}' has no table {} (or the login may not see it)",
                    source.display()
                ),
            ),
            sqlx::Error::Database(_) if matches!(source, Source::Query(_)) => {
                refused_query(name, &e)
            }
            _ => upstream(name, &format!("describing {}", source.display()), &e),
        })?;
    source.check_unique(described.columns().iter().map(|c| c.name()))?;
    let oids: Vec<Oid> = described
        .columns()
        .iter()
        .map(|c| c.type_info().oid().unwrap_or(Oid(25)))
        .collect();
    let relations: Vec<Oid> = described
        .columns()
        .iter()
        .map(|c| c.relation_id().unwrap_or(Oid(0)))
        .collect();
    let attnums: Vec<i16> = described
        .columns()
        .iter()
        .map(|c| c.relation_attribute_no().unwrap_or(0))
        .collect();
    let types = sqlx::query(
        "SELECT format_type(t.oid, NULLIF(c.m, -1)), bt.typname::text, bt.typtype::text, \
                CASE WHEN t.typtype = 'd' THEN t.typtypmod ELSE c.m END, \
                bt.typcategory::text, COALESCE(et.typname::text, ''), COALESCE(et.typtype::text, '') \
         FROM (SELECT i, o, COALESCE((SELECT atttypmod FROM pg_attribute \
                                      WHERE attrelid = r AND attnum = n), -1) AS m \
               FROM unnest($1::oid[], $2::oid[], $3::int2[]) WITH ORDINALITY AS u(o, r, n, i)) c \
         JOIN pg_type t ON t.oid = c.o \
         JOIN pg_type bt ON bt.oid = CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE t.oid END \
         LEFT JOIN pg_type et ON bt.typcategory = 'A' AND et.oid = bt.typelem \
         ORDER BY c.i",
    )
    .bind(&oids)
    .bind(&relations)
    .bind(&attnums)
    .fetch_all(&mut *conn)
    .await
    .map_err(|e| upstream(name, "reading column types", &e))?;
    described
        .columns()
        .iter()
        .zip(&types)
        .map(|(c, t)| {
            let get = |i| {
                t.try_get::<String, _>(i)
                    .map_err(|e| upstream(name, "reading the catalog", &e))
            };
            let typmod = t
                .try_get::<i32, _>(3)
                .map_err(|e| upstream(name, "reading the catalog", &e))?;
            Ok(plan(
                c.name().to_owned(),
                get(0)?,
                &TypeFacts {
                    name: &get(1)?,
                    kind: &get(2)?,
                    typmod,
                    category: &get(4)?,
                    element: &get(5)?,
                    element_kind: &get(6)?,
                },
            ))
        })
        .collect()
}

/// What the catalog says of a column's type.
struct TypeFacts<'a> {
    /// Base type name (a domain's base).
    name: &'a str,
    /// `typtype`: `b` base, `e` enum, `c` composite, …
    kind: &'a str,
    /// The type modifier (numeric precision and scale), −1 when none.
    typmod: i32,
    /// `typcategory`: `A` for arrays.
    category: &'a str,
    /// For arrays: the element type's name and `typtype`.
    element: &'a str,
    element_kind: &'a str,
}

/// How a column is read.
fn plan(name: String, source_type: String, t: &TypeFacts<'_>) -> Column {
    let (kind, as_text) = if t.category == "A" {
        match scalar(t.element, t.element_kind, t.typmod) {
            Some((element, false)) => (Kind::List(Box::new(element)), false),
            _ => (Kind::Text, true),
        }
    } else {
        scalar(t.name, t.kind, t.typmod).unwrap_or((Kind::Text, true))
    };
    Column {
        name,
        source_type,
        kind,
        as_text,
    }
}

/// A scalar type's kind, and whether it must be cast to text to be read; `None` for a type
/// with no exact form here.
fn scalar(name: &str, typtype: &str, typmod: i32) -> Option<(Kind, bool)> {
    let kind = match name {
        "bool" => Kind::Bool,
        "int2" => Kind::I16,
        "int4" => Kind::I32,
        "int8" | "oid" => Kind::I64,
        "float4" => Kind::F32,
        "float8" => Kind::F64,
        "text" | "varchar" | "bpchar" | "name" | "citext" | "xml" => Kind::Text,
        "json" => Kind::Json,
        // jsonb's send form has a version byte; its text form is the same document.
        "jsonb" => return Some((Kind::Json, true)),
        "uuid" => Kind::Uuid,
        "bytea" => Kind::Bytes,
        "date" => Kind::Date,
        "timestamp" => Kind::Timestamp,
        "timestamptz" => Kind::TimestampUtc,
        "time" => Kind::Time,
        "numeric" => decimal(typmod)?,
        _ if typtype == "e" => Kind::Enum,
        _ => return None,
    };
    Some((kind, false))
}

/// `numeric(p,s)` with 0 ≤ s ≤ p ≤ 76 as a decimal; anything else is read as text.
fn decimal(typmod: i32) -> Option<Kind> {
    if typmod < 4 {
        return None;
    }
    let packed = typmod - 4;
    let precision = (packed >> 16) & 0xffff;
    let scale = packed & 0xffff;
    ((1..=76).contains(&precision) && scale <= precision).then_some(Kind::Decimal {
        precision: precision as u8,
        scale: scale as i8,
    })
}

/// Streams the source's rows to `out` in batches of `batch_rows`; `filter` is what follows
/// `WHERE` (a condition, and an `ORDER BY` when order matters). Answers what had to change
/// to fit.
pub(crate) async fn copy_rows(
    conn: &mut PgConnection,
    name: &str,
    source: &Source,
    columns: &[Column],
    filter: Option<&str>,
    batch_rows: usize,
    out: &Sender<RecordBatch>,
) -> Result<Adjusted> {
    let select = columns
        .iter()
        .map(|c| {
            let q = quoted(&c.name);
            if c.as_text {
                format!("{q}::text")
            } else {
                q
            }
        })
        .collect::<Vec<_>>()
        .join(", ");
    let mut sql = format!("COPY (SELECT {select} FROM {}", source.relation());
    if let Some(filter) = filter {
        sql.push_str(&format!(" WHERE {filter}"));
    }
    sql.push_str(") TO STDOUT (FORMAT binary)");
    let reading = format!("reading {}", source.display());
    let mut stream = conn
        .copy_out_raw(&sql)
        .await
        .map_err(|e| upstream(name, &reading, &e))?;
    let mut decoder = copy::CopyDecoder::default();
    let mut batch = Batch::new(columns, schema(columns));
    let fail = |e: String| {
        DriverError::new(
            ErrorKind::Upstream,
            format!("Connection '{name}', {reading}: {e}"),
        )
    };
    while let Some(chunk) = stream
        .try_next()
        .await
        .map_err(|e| upstream(name, &reading, &e))?
    {
        decoder.feed(&chunk, &mut batch).map_err(fail)?;
        hand_over(&mut batch, out, batch_rows).await?;
    }
    decoder.check_end().map_err(fail)?;
    hand_over(&mut batch, out, 1).await?;
    Ok(decoder.adjusted)
}

/// The tables and views the login may read, with each column as it would be extracted.
pub(crate) async fn discover(conn: &mut PgConnection, name: &str) -> Result<Vec<SourceTableInfo>> {
    let rows = sqlx::query(
        "SELECT n.nspname::text, c.relname::text, \
                CASE c.relkind WHEN 'v' THEN 'view' WHEN 'm' THEN 'materialized view' \
                               WHEN 'f' THEN 'foreign table' ELSE 'table' END, \
                GREATEST(c.reltuples, -1)::int8, a.attname::text, \
                format_type(a.atttypid, a.atttypmod), bt.typname::text, bt.typtype::text, \
                CASE WHEN t.typtype = 'd' THEN t.typtypmod ELSE a.atttypmod END, \
                bt.typcategory::text, COALESCE(et.typname::text, ''), COALESCE(et.typtype::text, ''), \
                NOT a.attnotnull \
         FROM pg_class c \
         JOIN pg_namespace n ON n.oid = c.relnamespace \
         JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped \
         JOIN pg_type t ON t.oid = a.atttypid \
         JOIN pg_type bt ON bt.oid = CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE t.oid END \
         LEFT JOIN pg_type et ON bt.typcategory = 'A' AND et.oid = bt.typelem \
         WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f') \
           AND n.nspname NOT IN ('pg_catalog', 'information_schema') \
           AND n.nspname NOT LIKE 'pg\\_toast%' AND n.nspname NOT LIKE 'pg\\_temp%' \
           AND has_table_privilege(c.oid, 'SELECT') \
         ORDER BY 1, 2, a.attnum",
    )
    .fetch_all(&mut *conn)
    .await
    .map_err(|e| upstream(name, "listing tables", &e))?;
    let mut tables: Vec<SourceTableInfo> = Vec::new();
    for r in &rows {
        let text = |i| {
            r.try_get::<String, _>(i)
                .map_err(|e| upstream(name, "reading the catalog", &e))
        };
        let (schema, table) = (text(0)?, text(1)?);
        let column = plan(
            text(4)?,
            text(5)?,
            &TypeFacts {
                name: &text(6)?,
                kind: &text(7)?,
                typmod: r
                    .try_get(8)
                    .map_err(|e| upstream(name, "reading the catalog", &e))?,
                category: &text(9)?,
                element: &text(10)?,
                element_kind: &text(11)?,
            },
        );
        let field = column.field();
        let info = ColumnInfo {
            name: column.name.clone(),
            data_type: svc_plugin_api::type_name(field.data_type()),
            nullable: r.try_get(12).unwrap_or(true),
            description: if column.as_text && column.kind != Kind::Json {
                format!("{} (kept as text)", column.source_type)
            } else {
                column.source_type.clone()
            },
        };
        match tables.last_mut() {
            Some(t) if t.schema == schema && t.name == table => t.columns.push(info),
            _ => tables.push(SourceTableInfo {
                schema,
                name: table,
                kind: text(2)?,
                estimated_rows: r
                    .try_get::<i64, _>(3)
                    .ok()
                    .and_then(|n| u64::try_from(n).ok()),
                columns: vec![info],
            }),
        }
    }
    Ok(tables)
}

/// A driver error for a database error, by its SQLSTATE where one says more than "failed".
fn upstream(name: &str, doing: &str, e: &sqlx::Error) -> DriverError {
    let kind = match e {
        sqlx::Error::Database(db) => match db.code().as_deref() {
            Some("28P01" | "28000") => ErrorKind::AuthFailed,
            Some("42501") => ErrorKind::SourceForbidden,
            Some("57014") => ErrorKind::Timeout,
            _ => ErrorKind::Upstream,
        },
        _ => ErrorKind::Upstream,
    };
    DriverError::new(kind, format!("Connection '{name}', {doing}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numeric_modifiers_become_decimals_within_76_digits() {
        let typmod = |p: i32, s: i32| ((p << 16) | s) + 4;
        assert_eq!(
            decimal(typmod(12, 2)),
            Some(Kind::Decimal {
                precision: 12,
                scale: 2
            })
        );
        assert_eq!(
            decimal(typmod(60, 2)),
            Some(Kind::Decimal {
                precision: 60,
                scale: 2
            })
        );
        assert_eq!(decimal(typmod(90, 2)), None);
        assert_eq!(decimal(-1), None);
    }

    #[test]
    fn arrays_of_known_elements_are_lists_and_the_rest_text() {
        let facts = |name, kind, category, element| TypeFacts {
            name,
            kind,
            typmod: -1,
            category,
            element,
            element_kind: "b",
        };
        let ints = plan(
            "a".into(),
            "integer[]".into(),
            &facts("_int4", "b", "A", "int4"),
        );
        assert_eq!(
            (ints.kind, ints.as_text),
            (Kind::List(Box::new(Kind::I32)), false)
        );
        let boxes = plan("b".into(), "box[]".into(), &facts("_box", "b", "A", "box"));
        assert_eq!((boxes.kind, boxes.as_text), (Kind::Text, true));
        let mood = plan("m".into(), "mood".into(), &facts("mood", "e", "E", ""));
        assert_eq!((mood.kind, mood.as_text), (Kind::Enum, false));
        let doc = plan("d".into(), "jsonb".into(), &facts("jsonb", "b", "U", ""));
        assert_eq!((doc.kind, doc.as_text), (Kind::Json, true));
    }
}
