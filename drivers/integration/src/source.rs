//! What a table extracts — a `source_table` or a `source_query` — and the columns it keys
//! and pages by, all validated before any of it goes into SQL.

use svc_plugin_api::datafusion::sql::sqlparser::ast::{SetExpr, Statement};
use svc_plugin_api::datafusion::sql::sqlparser::dialect::GenericDialect;
use svc_plugin_api::datafusion::sql::sqlparser::parser::Parser;
use svc_plugin_api::{DriverError, ErrorKind, Result, TableRef};

/// Where a table's rows come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Source {
    /// A table (or view) at the source.
    Table(SourceTable),
    /// One SELECT run at the source.
    Query(String),
}

impl Source {
    /// The table's source: `source_query` when set, else `source_table`.
    pub fn parse(table: &TableRef) -> Result<Self> {
        match table
            .source_query
            .as_deref()
            .map(str::trim)
            .filter(|q| !q.is_empty())
        {
            Some(query) => {
                if table
                    .source_table
                    .as_deref()
                    .is_some_and(|t| !t.trim().is_empty() && t != table.id)
                {
                    return Err(bad(
                        table,
                        "names both a source_table and a source_query; keep one",
                    ));
                }
                single_select(query).map_err(|why| bad(table, &format!("source_query {why}")))?;
                Ok(Self::Query(query.trim_end_matches(';').trim().to_owned()))
            }
            None => SourceTable::parse(table).map(Self::Table),
        }
    }

    /// The rows as a FROM item: the quoted table, or the query as a subquery.
    pub fn relation(&self) -> String {
        match self {
            Self::Table(t) => t.quoted(),
            Self::Query(q) => format!("({q}) AS svc_source"),
        }
    }

    /// How messages name it.
    pub fn display(&self) -> String {
        match self {
            Self::Table(t) => t.display(),
            Self::Query(_) => "its source_query".to_owned(),
        }
    }
}

impl Source {
    /// Ok when no two of the source's columns share a name: the copy could not hold both.
    pub fn check_unique<'a>(&self, names: impl IntoIterator<Item = &'a str>) -> Result<()> {
        let mut seen = std::collections::HashSet::new();
        for name in names {
            if !seen.insert(name) {
                return Err(DriverError::new(
                    ErrorKind::BadRequest,
                    format!(
                        "{} has two columns named '{name}'; give each column its own name",
                        self.display()
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// `name` as a quoted SQL identifier (both dialects quote with `"`).
pub(crate) fn quoted(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

fn bad(table: &TableRef, why: &str) -> DriverError {
    DriverError::new(ErrorKind::BadRequest, format!("Table '{}' {why}", table.id))
}

/// Ok when `sql` is exactly one query statement (SELECT, VALUES, WITH … SELECT) with no
/// data-changing part; the source connection is also read-only, so this is the first of two
/// locks, and the one that gives a clear message at registration.
fn single_select(sql: &str) -> std::result::Result<(), String> {
    let statements =
        Parser::parse_sql(&GenericDialect {}, sql).map_err(|e| format!("is not valid SQL: {e}"))?;
    let [Statement::Query(query)] = statements.as_slice() else {
        return Err(format!(
            "must be a single SELECT (found {} statements{})",
            statements.len(),
            if statements.len() == 1 {
                ", not a query"
            } else {
                ""
            }
        ));
    };
    let writes = query.with.as_ref().is_some_and(|with| {
        with.cte_tables.iter().any(|cte| {
            !matches!(
                *cte.query.body,
                SetExpr::Select(_)
                    | SetExpr::SetOperation { .. }
                    | SetExpr::Values(_)
                    | SetExpr::Query(_)
            )
        })
    });
    if writes
        || !matches!(
            *query.body,
            SetExpr::Select(_)
                | SetExpr::SetOperation { .. }
                | SetExpr::Values(_)
                | SetExpr::Query(_)
        )
    {
        return Err("must only read (no INSERT, UPDATE or DELETE inside it)".into());
    }
    Ok(())
}

/// A plain column name (the primary key's parts and the cursor column), checked like table
/// names so it can be quoted into SQL.
pub(crate) fn plain_column(table: &TableRef, what: &str, name: &str) -> Result<String> {
    if is_plain(name) {
        Ok(name.to_owned())
    } else {
        Err(bad(
            table,
            &format!(
                "{what} '{}' is not a plain column name (letters, digits, _ and $ only)",
                name.escape_debug()
            ),
        ))
    }
}

fn is_plain(p: &str) -> bool {
    !p.is_empty()
        && p.len() <= 63
        && !p.as_bytes()[0].is_ascii_digit()
        && p.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'$')
}

/// A `schema.table` (or bare `table`) whose parts are plain identifiers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SourceTable {
    /// The schema, when named.
    pub schema: Option<String>,
    /// The table.
    pub table: String,
}

impl SourceTable {
    /// The table's `source_table`, or an error naming what is wrong with it. Only letters,
    /// digits, `_` and `$` in each part (no quotes, no semicolons, no empty part), so the
    /// quoted name built from it cannot be anything but a name.
    pub fn parse(table: &TableRef) -> Result<Self> {
        let refuse = |why: &str| {
            DriverError::new(
                ErrorKind::BadRequest,
                format!(
                    "Table '{}': source_table {why}; write it as schema.table",
                    table.id
                ),
            )
        };
        let text = table
            .source_table
            .as_deref()
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| refuse("is missing"))?;
        let parts: Vec<&str> = text.split('.').collect();
        if !parts.iter().all(|p| is_plain(p)) {
            return Err(refuse(&format!(
                "'{}' is not a plain name (letters, digits, _ and $ only)",
                text.escape_debug()
            )));
        }
        match parts.as_slice() {
            [t] => Ok(Self {
                schema: None,
                table: (*t).to_owned(),
            }),
            [s, t] => Ok(Self {
                schema: Some((*s).to_owned()),
                table: (*t).to_owned(),
            }),
            _ => Err(refuse(&format!("'{text}' has more than two parts"))),
        }
    }

    /// The name for the source's SQL, quoted.
    pub fn quoted(&self) -> String {
        match &self.schema {
            Some(s) => format!("{}.{}", quoted(s), quoted(&self.table)),
            None => quoted(&self.table),
        }
    }

    /// How messages name it.
    pub fn display(&self) -> String {
        match &self.schema {
            Some(s) => format!("{s}.{}", self.table),
            None => self.table.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(source_table: &str) -> TableRef {
        TableRef {
            id: "t".into(),
            source_type: "integration".into(),
            bucket: Some("crm".into()),
            source_table: Some(source_table.into()),
            query_mode: "materialized".into(),
            source_query: None,
            ..TableRef::default()
        }
    }

    #[test]
    fn a_source_query_is_one_statement_that_only_reads() {
        let with_query = |q: &str| TableRef {
            source_table: None,
            source_query: Some(q.into()),
            ..table("x")
        };
        for ok in [
            "SELECT id, name FROM orders WHERE active",
            "WITH recent AS (SELECT * FROM orders) SELECT * FROM recent;",
            "SELECT 1 UNION ALL SELECT 2",
        ] {
            assert!(
                matches!(Source::parse(&with_query(ok)), Ok(Source::Query(_))),
                "{ok}"
            );
        }
        for bad in [
            "SELECT 1; DROP TABLE orders",
            "DELETE FROM orders",
            "WITH gone AS (DELETE FROM orders RETURNING *) SELECT * FROM gone",
            "SELEKT 1",
        ] {
            let err = Source::parse(&with_query(bad)).unwrap_err();
            assert!(err.message.contains("source_query"), "{bad}: {err}");
        }
    }

    #[test]
    fn only_plain_names_pass() {
        let ok = SourceTable::parse(&table("public.orders")).unwrap();
        assert_eq!(ok.quoted(), "\"public\".\"orders\"");
        assert_eq!(
            SourceTable::parse(&table("Orders_2")).unwrap().quoted(),
            "\"Orders_2\""
        );
        for bad in [
            "public.\"orders\"",
            "orders; DROP TABLE x",
            "public..orders",
            "a.b.c",
            "",
            "1table",
            "or'ders",
        ] {
            assert!(SourceTable::parse(&table(bad)).is_err(), "{bad}");
        }
    }
}
