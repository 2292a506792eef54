//! MySQL and MariaDB sources: a read-only session in UTC with ANSI quoting, each table's
//! columns planned from `information_schema` (so a `decimal(12,2)` keeps its digits), and the
//! rows read over the text protocol, each value parsed from its text form into its builder.
//!
//! The session is set up so the SQL the other dialects build works unchanged: `ANSI_QUOTES`
//! makes `"name"` an identifier, `time_zone = '+00:00'` makes a `TIMESTAMP` literal UTC, and
//! `TRANSACTION READ ONLY` refuses any write a `source_query` might attempt.
//!
//! Representations (also in the README): `tinyint`…`bigint` → the smallest Arrow integer that
//! holds every value (`bigint unsigned` → `Decimal128(20,0)`), `bit(1)` → boolean and wider
//! `bit(n)` → Int64, `year` → Int16, `decimal(p,s)` → Decimal, `datetime` → Timestamp(µs),
//! `timestamp` → Timestamp(µs, UTC), `time` → Time64(µs) (values outside a day, which MySQL
//! allows for durations, and zero dates → NULL, counted), `enum` → dictionary labels, `json`
//! (also MariaDB's `json_valid` text columns) → JSON text, `uuid` → text, geometries → WKT
//! text, `set`, `inet6` and anything else → its text form. A `source_query`'s columns are
//! planned from the result's metadata, which carries no decimal digits: its decimals are
//! kept as their exact text.

use std::str::FromStr as _;

use futures::TryStreamExt as _;
use sqlx::mysql::{MySql, MySqlConnectOptions, MySqlConnection, MySqlRow, MySqlSslMode};
use sqlx::{Column as _, Connection as _, Decode, Executor as _, Row as _};
use sqlx::{TypeInfo as _, ValueRef as _};
use svc_plugin_api::{ColumnInfo, DriverError, ErrorKind, RecordBatch, Result, SourceTableInfo};
use tokio::sync::mpsc::Sender;

use crate::columns::{schema, Adjusted, Batch, Column, Kind};
use crate::config::{redact, Connection, Tls};
use crate::session::{hand_over, misconfigured, refused_query, within_30s};
use crate::source::{quoted, Source};

/// An open session and which of the two servers it talks to.
pub(crate) struct MySqlSession {
    conn: MySqlConnection,
    /// MariaDB keeps `JSON` columns as `longtext` with a `json_valid` check.
    mariadb: bool,
}

impl MySqlSession {
    /// Closes the session politely.
    pub async fn close(self) -> std::result::Result<(), sqlx::Error> {
        self.conn.close().await
    }
}

/// A read-only session in UTC with ANSI quoting on the connection's database.
pub(crate) async fn connect(name: &str, connection: &Connection) -> Result<MySqlSession> {
    let refuse = |why: String| misconfigured(name, why);
    // sqlx knows the scheme as mysql:// only; MariaDB speaks the same protocol.
    let url = match connection.url.strip_prefix("mariadb://") {
        Some(rest) => format!("mysql://{rest}"),
        None => connection.url.clone(),
    };
    let mut options = MySqlConnectOptions::from_str(&url).map_err(|_| {
        refuse(format!(
            "url {} is not a MySQL URL (mysql://user@host:3306/database)",
            redact(&connection.url)
        ))
    })?;
    if let Some(password) = connection.password().map_err(refuse)? {
        options = options.password(&password);
    }
    if let Some(tls) = connection.tls {
        options = options.ssl_mode(match tls {
            Tls::Disable => MySqlSslMode::Disabled,
            Tls::Prefer => MySqlSslMode::Preferred,
            Tls::Require => MySqlSslMode::Required,
            Tls::VerifyCa => MySqlSslMode::VerifyCa,
            Tls::VerifyFull => MySqlSslMode::VerifyIdentity,
        });
    }
    if let Some(ca) = &connection.tls_ca_file {
        options = options.ssl_ca(ca);
    }
    options = options
        .timezone(Some("+00:00".to_owned()))
        .charset("utf8mb4")
        .statement_cache_capacity(0);
    let mut conn = within_30s(name, MySqlConnection::connect_with(&options), upstream).await?;
    let version: String = sqlx::query_scalar("SELECT VERSION()")
        .fetch_one(&mut conn)
        .await
        .map_err(|e| upstream(name, "reading the server version", &e))?;
    let mariadb = version.to_ascii_lowercase().contains("mariadb");
    let mut setup = vec![
        "SET SESSION sql_mode = CONCAT(@@sql_mode, ',ANSI_QUOTES')".to_owned(),
        "SET SESSION TRANSACTION READ ONLY".to_owned(),
    ];
    let timeout = connection.statement_timeout_seconds;
    if timeout > 0 {
        setup.push(if mariadb {
            format!("SET SESSION max_statement_time = {timeout}")
        } else {
            format!("SET SESSION max_execution_time = {}", timeout * 1000)
        });
    }
    for statement in setup {
        conn.execute(statement.as_str())
            .await
            .map_err(|e| upstream(name, "setting up the session", &e))?;
    }
    Ok(MySqlSession { conn, mariadb })
}

/// What the catalog (or a result's metadata) says of a column's type.
struct TypeFacts<'a> {
    /// The base type, lower case: `int`, `decimal`, `varchar`, …
    data_type: &'a str,
    /// The full type as declared: `decimal(12,2)`, `int(10) unsigned`, `enum('a','b')`.
    column_type: &'a str,
    /// Digits of a decimal, or bits of a `bit`.
    precision: Option<u64>,
    /// Fractional digits of a decimal.
    scale: Option<u64>,
    /// A MariaDB text column constrained by `json_valid`.
    json: bool,
}

/// How a column is read.
fn plan(name: String, t: &TypeFacts<'_>) -> Column {
    let unsigned = t.column_type.to_ascii_lowercase().contains("unsigned");
    let kind = match t.data_type {
        "tinyint" | "year" => Some(Kind::I16),
        "smallint" if unsigned => Some(Kind::I32),
        "smallint" => Some(Kind::I16),
        "mediumint" => Some(Kind::I32),
        "int" | "integer" if unsigned => Some(Kind::I64),
        "int" | "integer" => Some(Kind::I32),
        "bigint" if unsigned => Some(Kind::Decimal {
            precision: 20,
            scale: 0,
        }),
        "bigint" => Some(Kind::I64),
        "bit" if t.precision == Some(1) => Some(Kind::Bool),
        "bit" if t.precision.is_some_and(|bits| bits < 64) => Some(Kind::I64),
        "bit" => Some(Kind::Decimal {
            precision: 20,
            scale: 0,
        }),
        "float" => Some(Kind::F32),
        "double" | "real" => Some(Kind::F64),
        "decimal" | "numeric" | "dec" | "fixed" => match (t.precision, t.scale) {
            (Some(p), Some(s)) if (1..=76).contains(&p) && s <= p => Some(Kind::Decimal {
                precision: p as u8,
                scale: s as i8,
            }),
            _ => None,
        },
        "char" | "varchar" | "tinytext" | "text" | "mediumtext" | "longtext" if t.json => {
            Some(Kind::Json)
        }
        "char" | "varchar" | "tinytext" | "text" | "mediumtext" | "longtext" => Some(Kind::Text),
        "json" => Some(Kind::Json),
        "binary" | "varbinary" | "tinyblob" | "blob" | "mediumblob" | "longblob" => {
            Some(Kind::Bytes)
        }
        "date" => Some(Kind::Date),
        "datetime" => Some(Kind::Timestamp),
        "timestamp" => Some(Kind::TimestampUtc),
        "time" => Some(Kind::Time),
        "enum" => Some(Kind::Enum),
        "uuid" => Some(Kind::Uuid),
        _ => None,
    };
    Column {
        name,
        source_type: t.column_type.to_owned(),
        as_text: kind.is_none(),
        kind: kind.unwrap_or(Kind::Text),
    }
}

/// The spatial types, read as their WKT text (their wire form is binary WKB).
fn is_geometry(source_type: &str) -> bool {
    let base = source_type.split('(').next().unwrap_or("").trim();
    [
        "geometry",
        "point",
        "linestring",
        "polygon",
        "multipoint",
        "multilinestring",
        "multipolygon",
        "geometrycollection",
        "geomcollection",
    ]
    .contains(&base.to_ascii_lowercase().as_str())
}

/// The expression that reads a column as text the builders parse.
fn select_item(c: &Column) -> String {
    let q = quoted(&c.name);
    if c.as_text && is_geometry(&c.source_type) {
        format!("ST_AsText({q}) AS {q}")
    } else if c.source_type.to_ascii_lowercase().starts_with("bit") {
        // A bit value's text form is its raw bytes; adding 0 makes it a number.
        format!("({q} + 0) AS {q}")
    } else {
        q
    }
}

/// The catalog columns every query of `information_schema.COLUMNS` reads, in this order.
fn catalog_columns(mariadb: bool) -> String {
    let json = if mariadb {
        "EXISTS (SELECT 1 FROM information_schema.CHECK_CONSTRAINTS k \
                 WHERE k.CONSTRAINT_SCHEMA = c.TABLE_SCHEMA AND k.TABLE_NAME = c.TABLE_NAME \
                   AND k.CONSTRAINT_NAME = c.COLUMN_NAME AND k.CHECK_CLAUSE LIKE 'json_valid(%')"
    } else {
        "0"
    };
    format!(
        "c.COLUMN_NAME, c.DATA_TYPE, c.COLUMN_TYPE, \
         CAST(c.NUMERIC_PRECISION AS SIGNED), CAST(c.NUMERIC_SCALE AS SIGNED), \
         CAST({json} AS SIGNED), c.IS_NULLABLE"
    )
}

/// The column planned from a catalog row whose catalog columns start at `at`.
fn planned(row: &MySqlRow, at: usize, name: &str) -> Result<Column> {
    let data_type = text(row, at + 1, name)?.to_ascii_lowercase();
    let column_type = text(row, at + 2, name)?;
    let number = |i| {
        row.try_get_unchecked::<Option<i64>, _>(i)
            .map(|n| n.and_then(|n| u64::try_from(n).ok()))
            .map_err(|e| upstream(name, "reading the catalog", &e))
    };
    Ok(plan(
        text(row, at, name)?,
        &TypeFacts {
            data_type: &data_type,
            column_type: &column_type,
            precision: number(at + 3)?,
            scale: number(at + 4)?,
            json: number(at + 5)? == Some(1),
        },
    ))
}

/// The source's columns, in order, each planned.
pub(crate) async fn columns(
    session: &mut MySqlSession,
    name: &str,
    source: &Source,
) -> Result<Vec<Column>> {
    let columns: Vec<Column> = match source {
        Source::Table(t) => {
            let rows = sqlx::query(&format!(
                "SELECT {} FROM information_schema.COLUMNS c \
                 WHERE c.TABLE_SCHEMA = COALESCE(?, DATABASE()) AND c.TABLE_NAME = ? \
                 ORDER BY c.ORDINAL_POSITION",
                catalog_columns(session.mariadb)
            ))
            .bind(t.schema.as_deref())
            .bind(&t.table)
            .fetch_all(&mut session.conn)
            .await
            .map_err(|e| upstream(name, &format!("describing {}", t.display()), &e))?;
            if rows.is_empty() {
                return Err(DriverError::new(
                    ErrorKind::NotFound,
                    format!(
                        "Connection '{name}' has no table {} (or the login may not see it)",
                        t.display()
                    ),
                ));
            }
            rows.iter()
                .map(|r| planned(r, 0, name))
                .collect::<Result<_>>()?
        }
        Source::Query(_) => {
            let described = session
                .conn
                .describe(&format!("SELECT * FROM {}", source.relation()))
                .await
                .map_err(|e| refused_query(name, &e))?;
            described
                .columns()
                .iter()
                .map(|c| {
                    let declared = c.type_info().name().to_ascii_lowercase();
                    let base = declared.trim_end_matches(" unsigned");
                    let base = if base == "boolean" { "tinyint" } else { base };
                    plan(
                        c.name().to_owned(),
                        &TypeFacts {
                            data_type: base,
                            column_type: &declared,
                            precision: None,
                            scale: None,
                            json: false,
                        },
                    )
                })
                .collect()
        }
    };
    source.check_unique(columns.iter().map(|c| c.name.as_str()))?;
    Ok(columns)
}

fn text(row: &MySqlRow, i: usize, name: &str) -> Result<String> {
    // information_schema's columns are binary-collated on some servers, which sqlx's type
    // check takes for bytes; their contents are UTF-8 names all the same.
    row.try_get_unchecked::<Option<String>, _>(i)
        .map(Option::unwrap_or_default)
        .map_err(|e| upstream(name, "reading the catalog", &e))
}

/// Streams the source's rows to `out` in batches of `batch_rows`; `filter` is what follows
/// `WHERE`. Answers what had to change to fit.
pub(crate) async fn rows(
    session: &mut MySqlSession,
    name: &str,
    source: &Source,
    columns: &[Column],
    filter: Option<&str>,
    batch_rows: usize,
    out: &Sender<RecordBatch>,
) -> Result<Adjusted> {
    let select = columns
        .iter()
        .map(select_item)
        .collect::<Vec<_>>()
        .join(", ");
    let mut sql = format!("SELECT {select} FROM {}", source.relation());
    if let Some(filter) = filter {
        sql.push_str(&format!(" WHERE {filter}"));
    }
    let reading = format!("reading {}", source.display());
    let mut adjusted = Adjusted::default();
    let mut batch = Batch::new(columns, schema(columns));
    // The text protocol (no arguments): every value arrives as its text, parsed below.
    let mut stream = sqlx::raw_sql(&sql).fetch(&mut session.conn);
    while let Some(row) = stream
        .try_next()
        .await
        .map_err(|e| upstream(name, &reading, &e))?
    {
        for (i, builder) in batch.builders.iter_mut().enumerate() {
            let raw = row
                .try_get_raw(i)
                .map_err(|e| upstream(name, &reading, &e))?;
            if raw.is_null() {
                builder.append_null();
                continue;
            }
            let bytes = <&[u8] as Decode<MySql>>::decode(raw).map_err(|e| {
                DriverError::new(
                    ErrorKind::Upstream,
                    format!("Connection '{name}', {reading}: {e}"),
                )
            })?;
            builder.append_text_form(bytes, &mut adjusted);
        }
        batch.rows += 1;
        hand_over(&mut batch, out, batch_rows).await?;
    }
    hand_over(&mut batch, out, 1).await?;
    Ok(adjusted)
}

/// The tables and views the login may read (the server's own schemas aside), with each
/// column as it would be extracted.
pub(crate) async fn discover(
    session: &mut MySqlSession,
    name: &str,
) -> Result<Vec<SourceTableInfo>> {
    let rows = sqlx::query(&format!(
        "SELECT c.TABLE_SCHEMA, c.TABLE_NAME, t.TABLE_TYPE, CAST(t.TABLE_ROWS AS SIGNED), {} \
         FROM information_schema.COLUMNS c \
         JOIN information_schema.TABLES t \
           ON t.TABLE_SCHEMA = c.TABLE_SCHEMA AND t.TABLE_NAME = c.TABLE_NAME \
         WHERE c.TABLE_SCHEMA NOT IN ('mysql', 'information_schema', 'performance_schema', 'sys') \
         ORDER BY c.TABLE_SCHEMA, c.TABLE_NAME, c.ORDINAL_POSITION",
        catalog_columns(session.mariadb)
    ))
    .fetch_all(&mut session.conn)
    .await
    .map_err(|e| upstream(name, "listing tables", &e))?;
    let mut tables: Vec<SourceTableInfo> = Vec::new();
    for r in &rows {
        let (schema, table) = (text(r, 0, name)?, text(r, 1, name)?);
        let column = planned(r, 4, name)?;
        let info = ColumnInfo {
            name: column.name.clone(),
            data_type: svc_plugin_api::type_name(column.field().data_type()),
            nullable: text(r, 10, name)? != "NO",
            description: if column.as_text {
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
                kind: if text(r, 2, name)? == "VIEW" {
                    "view".to_owned()
                } else {
                    "table".to_owned()
                },
                estimated_rows: r
                    .try_get_unchecked::<Option<i64>, _>(3)
                    .ok()
                    .flatten()
                    .and_then(|n| u64::try_from(n).ok()),
                columns: vec![info],
            }),
        }
    }
    Ok(tables)
}

/// A driver error for a database error, by MySQL's error number where it says more than
/// "failed". The server's messages name the user, never the password.
fn upstream(name: &str, doing: &str, e: &sqlx::Error) -> DriverError {
    let number = match e {
        sqlx::Error::Database(db) => db
            .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
            .map(|m| m.number()),
        _ => None,
    };
    let kind = match number {
        Some(1045 | 1698) => ErrorKind::AuthFailed,
        Some(1044 | 1142 | 1143) => ErrorKind::SourceForbidden,
        Some(1049 | 1146) => ErrorKind::NotFound,
        // MariaDB's max_statement_time, MySQL's max_execution_time.
        Some(1969 | 3024) => ErrorKind::Timeout,
        _ => ErrorKind::Upstream,
    };
    DriverError::new(kind, format!("Connection '{name}', {doing}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts<'a>(data_type: &'a str, column_type: &'a str) -> TypeFacts<'a> {
        TypeFacts {
            data_type,
            column_type,
            precision: None,
            scale: None,
            json: false,
        }
    }

    #[test]
    fn every_integer_fits_its_kind_and_decimals_keep_their_digits() {
        for (data_type, column_type, kind) in [
            ("tinyint", "tinyint(3) unsigned", Kind::I16),
            ("smallint", "smallint(5) unsigned", Kind::I32),
            ("int", "int(11)", Kind::I32),
            ("int", "int(10) unsigned", Kind::I64),
            (
                "bigint",
                "bigint(20) unsigned",
                Kind::Decimal {
                    precision: 20,
                    scale: 0,
                },
            ),
            ("datetime", "datetime(6)", Kind::Timestamp),
            ("timestamp", "timestamp", Kind::TimestampUtc),
            ("enum", "enum('a','b')", Kind::Enum),
        ] {
            let c = plan("c".into(), &facts(data_type, column_type));
            assert_eq!((c.kind, c.as_text), (kind, false), "{column_type}");
        }
        let money = plan(
            "m".into(),
            &TypeFacts {
                precision: Some(65),
                scale: Some(30),
                ..facts("decimal", "decimal(65,30)")
            },
        );
        assert_eq!(
            money.kind,
            Kind::Decimal {
                precision: 65,
                scale: 30
            }
        );
        let undigited = plan("q".into(), &facts("decimal", "decimal"));
        assert_eq!((undigited.kind, undigited.as_text), (Kind::Text, true));
        let doc = plan(
            "d".into(),
            &TypeFacts {
                json: true,
                ..facts("longtext", "longtext")
            },
        );
        assert_eq!(doc.kind, Kind::Json);
        let shape = plan("g".into(), &facts("point", "point"));
        assert_eq!(select_item(&shape), "ST_AsText(\"g\") AS \"g\"");
        let flags = plan(
            "b".into(),
            &TypeFacts {
                precision: Some(10),
                ..facts("bit", "bit(10)")
            },
        );
        assert_eq!(
            (flags.kind.clone(), select_item(&flags)),
            (Kind::I64, "(\"b\" + 0) AS \"b\"".to_owned())
        );
    }
}
