//! What a table extracts: its `source_table`, validated before it goes into any SQL.

use svc_plugin_api::{DriverError, ErrorKind, Result, TableRef};

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
        if table
            .source_query
            .as_deref()
            .is_some_and(|q| !q.trim().is_empty())
        {
            return Err(refuse(
                "is set with a source_query, which integration tables do not support yet",
            ));
        }
        let parts: Vec<&str> = text.split('.').collect();
        let plain = |p: &str| {
            !p.is_empty()
                && p.len() <= 63
                && !p.as_bytes()[0].is_ascii_digit()
                && p.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'$')
        };
        if !parts.iter().all(|p| plain(p)) {
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
            Some(s) => format!("\"{s}\".\"{}\"", self.table),
            None => format!("\"{}\"", self.table),
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
            query_mode: "local".into(),
            source_query: None,
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
