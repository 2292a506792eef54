//! Bounded, honest results: at most the admin's rows and bytes per result, always saying
//! whether more exist, and an opaque cursor to continue the same statement.
//!
//! A model's context is the scarce resource here, so the cap is in bytes as well as rows:
//! rows are added while the text stays within the budget, and the cursor resumes at the first
//! row left out. The cursor is sealed by the server ([`svc_auth::Authenticator::seal`]) over
//! the caller, the statement and the offset, so it cannot be forged, moved to another
//! statement, or used by another user.

use serde_json::{json, Value};
use sha2::{Digest as _, Sha256};
use svc_auth::{Authenticator, Caller};
use svc_core::Error;

/// How much one MCP result may hold (`[mcp]` settings; a model may ask for less).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct McpLimits {
    /// Rows per result at most.
    pub max_rows: usize,
    /// Bytes of result text at most.
    pub max_bytes: usize,
}

impl Default for McpLimits {
    fn default() -> Self {
        Self {
            max_rows: 100,
            max_bytes: 64 << 10,
        }
    }
}

/// How rows are written for the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowFormat {
    /// A header line, then one comma-separated line per row (the most rows per byte).
    Csv,
    /// `{"columns": [...], "rows": [[...], ...]}`.
    Json,
}

impl RowFormat {
    /// Reads the `format` argument.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "csv" => Some(Self::Csv),
            "json" => Some(Self::Json),
            _ => None,
        }
    }
}

/// One CSV field: quoted when it holds a separator, a quote or a line break.
pub fn csv_cell(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_owned()
    }
}

fn csv_field(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => csv_cell(s),
        other => csv_cell(&other.to_string()),
    }
}

/// Rows rendered within a byte budget.
#[derive(Debug)]
pub struct Rendered {
    /// The text for the model.
    pub text: String,
    /// Rows in `text`.
    pub rows: usize,
    /// Whether rows were left out for the byte budget.
    pub cut_for_bytes: bool,
}

/// Renders `rows` under `columns` in `format`, adding rows while the text stays within
/// `max_bytes` (the header always fits; a single row larger than the budget is left out).
pub fn render(
    columns: &[String],
    rows: &[Vec<Value>],
    format: RowFormat,
    max_bytes: usize,
) -> Rendered {
    let mut text = String::new();
    let mut shown = 0;
    match format {
        RowFormat::Csv => {
            let header: Vec<String> = columns.iter().map(|c| csv_cell(c)).collect();
            text.push_str(&header.join(","));
            text.push('\n');
            for row in rows {
                let line: Vec<String> = row.iter().map(csv_field).collect();
                let line = line.join(",");
                if text.len() + line.len() + 1 > max_bytes {
                    break;
                }
                text.push_str(&line);
                text.push('\n');
                shown += 1;
            }
        }
        RowFormat::Json => {
            let head = json!({ "columns": columns }).to_string();
            // `{"columns":[...],"rows":[` … `]}`
            text.push_str(&head[..head.len() - 1]);
            text.push_str(",\"rows\":[");
            for row in rows {
                let cell = Value::Array(row.clone()).to_string();
                let sep = usize::from(shown > 0);
                if text.len() + sep + cell.len() + 2 > max_bytes {
                    break;
                }
                if shown > 0 {
                    text.push(',');
                }
                text.push_str(&cell);
                shown += 1;
            }
            text.push_str("]}");
        }
    }
    Rendered {
        text,
        rows: shown,
        cut_for_bytes: shown < rows.len(),
    }
}

const CURSOR_PURPOSE: &str = "mcp-query-cursor";

fn statement_key(caller: &Caller, sql: &str) -> String {
    let digest = Sha256::digest(sql.as_bytes());
    format!("{}\n{}", caller.user.id, hex::encode(digest))
}

/// The cursor that resumes `sql` for `caller` at row `offset`.
pub fn cursor(auth: &Authenticator, caller: &Caller, sql: &str, offset: usize) -> String {
    let seal = auth.seal(
        CURSOR_PURPOSE,
        &format!("{}\n{offset}", statement_key(caller, sql)),
    );
    format!("{offset}.{seal}")
}

/// The offset a cursor resumes at, when it was made for this caller and statement.
pub fn resume_at(
    auth: &Authenticator,
    caller: &Caller,
    sql: &str,
    cursor: &str,
) -> Result<usize, Error> {
    let refused = || {
        Error::invalid(
            "cursor: not a cursor this server gave for this statement and user; \
             send the same sql with the next_cursor of its last result, or no cursor to start over",
        )
    };
    let (offset, seal) = cursor.split_once('.').ok_or_else(refused)?;
    let offset: usize = offset.parse().map_err(|_| refused())?;
    let message = format!("{}\n{offset}", statement_key(caller, sql));
    if auth.sealed(CURSOR_PURPOSE, &message, seal) {
        Ok(offset)
    } else {
        Err(refused())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(n: usize) -> Vec<Vec<Value>> {
        (0..n)
            .map(|i| vec![json!(i), json!(format!("name, {i}")), Value::Null])
            .collect()
    }

    #[test]
    fn csv_quotes_what_needs_it_and_stops_at_the_byte_budget() {
        let cols = ["id".to_owned(), "name".to_owned(), "note".to_owned()];
        let all = render(&cols, &rows(3), RowFormat::Csv, 10_000);
        assert_eq!(
            all.text,
            "id,name,note\n0,\"name, 0\",\n1,\"name, 1\",\n2,\"name, 2\",\n"
        );
        assert_eq!((all.rows, all.cut_for_bytes), (3, false));
        let cut = render(&cols, &rows(3), RowFormat::Csv, 30);
        assert_eq!(cut.text, "id,name,note\n0,\"name, 0\",\n");
        assert_eq!((cut.rows, cut.cut_for_bytes), (1, true));
        assert!(cut.text.len() <= 30);
    }

    #[test]
    fn json_stays_valid_within_the_budget() {
        let cols = ["id".to_owned(), "name".to_owned(), "note".to_owned()];
        for budget in [10, 40, 60, 10_000] {
            let r = render(&cols, &rows(5), RowFormat::Json, budget);
            let v: Value = serde_json::from_str(&r.text).unwrap();
            assert_eq!(v["rows"].as_array().unwrap().len(), r.rows, "{budget}");
            assert!(
                r.rows == 0 || r.text.len() <= budget,
                "{budget}: {}",
                r.text
            );
        }
    }
}
