//! Many rows in one statement: the rows travel as one JSON array parameter that the
//! database unpacks (`json_each` on SQLite, `json_to_recordset` on PostgreSQL).
//!
//! One round trip and one bound value per chunk, instead of a round trip or a dozen bound
//! values per row, is what makes bulk writes fast through sqlx's `Any` driver; the statement
//! text does not depend on the row count, so each connection prepares it once.

use sqlx::{Any, Transaction};

use crate::{Backend, StoreError};

/// How a column travels through the JSON array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum JsonType {
    /// A string (or null).
    Text,
    /// A 64-bit integer (or null).
    Int,
    /// A boolean (or null).
    Bool,
}

/// Rows per statement: bounds the size of the one JSON parameter.
pub(crate) const ROWS_PER_STATEMENT: usize = 1_000;

/// `INSERT INTO table (columns) SELECT … FROM <unpacked $1> [suffix]`.
pub(crate) fn insert_sql(
    backend: Backend,
    table: &str,
    columns: &[(&str, JsonType)],
    suffix: &str,
) -> String {
    let names: Vec<&str> = columns.iter().map(|(c, _)| *c).collect();
    let names = names.join(", ");
    match backend {
        Backend::Sqlite => {
            // `json_each` hands each row object over as JSON text that every `->>` parses
            // again (twelve parses per audit row). `jsonb_each`, which would parse each row
            // once, arrived in SQLite 3.51; the bundled SQLite is 3.46.
            let fields: Vec<String> = columns
                .iter()
                .map(|(c, _)| format!("value ->> '{c}'"))
                .collect();
            format!(
                "INSERT INTO {table} ({names}) SELECT {} FROM json_each($1) {suffix}",
                fields.join(", ")
            )
        }
        Backend::Postgres => {
            let types: Vec<String> = columns
                .iter()
                .map(|(c, t)| {
                    let ty = match t {
                        JsonType::Text => "text",
                        JsonType::Int => "bigint",
                        JsonType::Bool => "boolean",
                    };
                    format!("{c} {ty}")
                })
                .collect();
            format!(
                "INSERT INTO {table} ({names}) SELECT {names} FROM json_to_recordset($1::json) AS x({}) {suffix}",
                types.join(", ")
            )
        }
    }
}

/// Inserts `rows` (each serializing to a JSON object keyed by column) with `sql` from
/// [`insert_sql`], in chunks. Rows are serialized straight into each chunk's text, never
/// into `serde_json::Value` trees, which cost several times the rows' own size.
pub(crate) async fn insert<T: serde::Serialize>(
    tx: &mut Transaction<'_, Any>,
    sql: &str,
    rows: &[T],
) -> Result<(), StoreError> {
    for chunk in rows.chunks(ROWS_PER_STATEMENT) {
        sqlx::query(sql)
            .bind(serde_json::to_string(chunk).unwrap_or_else(|_| "[]".into()))
            .execute(&mut **tx)
            .await?;
    }
    Ok(())
}
