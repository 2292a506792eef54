//! What the CLI prints: server errors from their `detail`, tables that fit the terminal,
//! JSON for agents.

use std::io::IsTerminal;

use serde_json::Value;

use crate::exit::{CliError, Exit};

/// Keys shown first in an error's detail, in this order.
const PRIORITY: [&str; 12] = [
    "kind",
    "reason",
    "path",
    "table",
    "billing_project",
    "data_project",
    "scan_bytes",
    "limit_bytes",
    "tables",
    "current",
    "limit",
    "retry_after_seconds",
];

fn scalar(v: &Value) -> String {
    match v {
        Value::String(s) if s.is_empty() => "(empty)".into(),
        Value::String(s) => s.clone(),
        Value::Array(items) if items.is_empty() => "(empty)".into(),
        Value::Array(items) => items.iter().map(scalar).collect::<Vec<_>>().join(", "),
        Value::Null => "(empty)".into(),
        other => other.to_string(),
    }
}

/// An error response as lines: `detail` as a string, or `{error, message, details}` with the
/// kind first, then key fields, then the hint.
pub fn server_error(status: u16, body: &str) -> CliError {
    let parsed: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    let detail = &parsed["detail"];
    let code = detail["error"].as_str().map(str::to_owned);
    // A table that does not exist is "not found" whichever command named it: `describe`
    // gets a 404, a query naming it a 400 `unknown_table`; both exit 8.
    let exit = match code.as_deref() {
        Some("unknown_table") => Exit::Denied,
        _ => Exit::of_status(status),
    };
    let (message, hint) = match detail {
        Value::String(s) => (format!("Error: {s} (HTTP {status})"), None),
        Value::Object(o) => {
            let kind = o
                .get("error")
                .or_else(|| o.get("kind"))
                .or_else(|| o.get("reason"))
                .map(scalar)
                .unwrap_or_else(|| "error".into());
            let mut lines = vec![format!("Error: {kind} (HTTP {status})")];
            if let Some(m) = o.get("message").and_then(Value::as_str) {
                lines.push(format!("  {m}"));
            }
            let details = o.get("details").and_then(Value::as_object);
            let mut hint = None;
            if let Some(d) = details {
                let mut keys: Vec<&String> = d.keys().collect();
                keys.sort_by_key(|k| {
                    PRIORITY
                        .iter()
                        .position(|p| p == k)
                        .unwrap_or(PRIORITY.len())
                });
                for k in keys {
                    if matches!(k.as_str(), "hint" | "suggestion") {
                        hint = d.get(k).map(scalar);
                        continue;
                    }
                    lines.push(format!("  {k}: {}", scalar(&d[k])));
                }
            }
            (lines.join("\n"), hint)
        }
        _ => {
            let text: String = body.chars().take(500).collect();
            (format!("Error: HTTP {status}: {text}"), None)
        }
    };
    let mut e = CliError::new(exit, message);
    e.code = code;
    if let Some(h) = hint {
        e = e.hint(h);
    } else if status == 401 {
        e = e.hint("log in again: svc auth login (or set SVC_TOKEN)");
    }
    e
}

/// Pretty JSON on stdout (the `--json` form of every read command).
pub fn print_json(v: &Value) {
    println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
}

/// Whether to color output: a terminal, and no `NO_COLOR`.
pub fn color() -> bool {
    std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()) && std::io::stdout().is_terminal()
}

fn width() -> usize {
    terminal_size::terminal_size()
        .map(|(w, _)| w.0 as usize)
        .or_else(|| std::env::var("COLUMNS").ok().and_then(|c| c.parse().ok()))
        .unwrap_or(120)
}

/// A query result document (`columns`, `rows` as arrays, `truncated`): as JSON, or as a table
/// with the row count and any truncation on stderr.
pub fn result(doc: &Value, as_json: bool, limit: u64) {
    if as_json {
        print_json(doc);
    } else {
        let headers: Vec<String> = doc["columns"]
            .as_array()
            .into_iter()
            .flatten()
            .map(cell)
            .collect();
        let rows: Vec<Vec<String>> = doc["rows"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| r.as_array().into_iter().flatten().map(cell).collect())
            .collect();
        table(&headers, &rows);
        eprintln!("({} rows)", rows.len());
    }
    if doc["truncated"] == true {
        truncated(limit);
    }
}

/// Says on stderr that the row limit cut a result.
pub fn truncated(limit: u64) {
    eprintln!("(truncated at {limit} rows; raise --limit to see more)");
}

/// A cell as text on one line.
pub fn cell(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.replace('\n', "\\n"),
        other => other.to_string(),
    }
}

/// A JSON array of objects as a table: each `(header, key)` a column of `cell(object[key])`.
pub fn records(list: &Value, columns: &[(&str, &str)]) {
    let headers: Vec<String> = columns.iter().map(|(h, _)| (*h).to_owned()).collect();
    let rows: Vec<Vec<String>> = list
        .as_array()
        .into_iter()
        .flatten()
        .map(|o| columns.iter().map(|(_, k)| cell(&o[*k])).collect())
        .collect();
    table(&headers, &rows);
}

/// Rows under headers, in columns when they fit the terminal, else one record per block.
pub fn table(headers: &[String], rows: &[Vec<String>]) {
    print!("{}", table_text(headers, rows, width(), color()));
}

/// The text `table` prints for a terminal `width` columns wide. `comfy-table` lays out the
/// grid because it measures display width (CJK and emoji take two columns, combining marks
/// none), which counting chars got wrong; a table wider than the terminal is shown one
/// record per block instead, like `psql \x`, since wrapping every cell reads worse.
fn table_text(headers: &[String], rows: &[Vec<String>], width: usize, bold: bool) -> String {
    use comfy_table::{presets, Attribute, Cell, CellAlignment, ContentArrangement, Table};

    let mut grid = Table::new();
    grid.load_preset(presets::NOTHING)
        .set_content_arrangement(ContentArrangement::Disabled)
        .set_header(headers.iter().map(|h| {
            let c = Cell::new(h).set_alignment(CellAlignment::Left);
            if bold {
                c.add_attribute(Attribute::Bold)
            } else {
                c
            }
        }));
    if bold {
        grid.enforce_styling();
    } else {
        grid.force_no_tty();
    }
    for row in rows {
        grid.add_row(row);
    }
    // Two spaces between columns and none at the edges, as `ls` and `psql` print.
    for column in grid.column_iter_mut() {
        column.set_padding((0, 2));
    }
    let natural: usize = grid
        .column_max_content_widths()
        .iter()
        .map(|w| usize::from(*w) + 2)
        .sum();
    if natural <= width || headers.len() <= 1 {
        let mut out = String::new();
        for line in grid.lines() {
            out.push_str(line.trim_end());
            out.push('\n');
        }
        return out;
    }
    let label = headers.iter().map(|h| display_width(h)).max().unwrap_or(0);
    let mut out = String::new();
    for (i, row) in rows.iter().enumerate() {
        let title = format!("-[ record {} ]-", i + 1);
        if bold {
            out.push_str(&format!("\x1b[1m{title}\x1b[0m\n"));
        } else {
            out.push_str(&title);
            out.push('\n');
        }
        for (h, c) in headers.iter().zip(row) {
            let pad = " ".repeat(label - display_width(h));
            out.push_str(&format!("{h}{pad} | {c}\n"));
        }
    }
    out
}

/// Columns a string takes on a terminal.
fn display_width(s: &str) -> usize {
    unicode_width::UnicodeWidthStr::width(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_render_kind_fields_then_hint() {
        let body = r#"{"detail": {"error": "remote_scan_too_large", "message": "too big",
            "details": {"suggestion": "add a WHERE", "limit_bytes": 5, "scan_bytes": 10, "view_targets": []}}}"#;
        let e = server_error(400, body);
        assert_eq!(e.exit, Exit::Other);
        let lines: Vec<&str> = e.message.lines().collect();
        assert_eq!(lines[0], "Error: remote_scan_too_large (HTTP 400)");
        assert_eq!(lines[2], "  scan_bytes: 10");
        assert_eq!(lines[3], "  limit_bytes: 5");
        assert_eq!(lines[4], "  view_targets: (empty)");
        assert_eq!(e.hint.as_deref(), Some("add a WHERE"));
        let e = server_error(403, r#"{"detail": "Admin access required"}"#);
        assert_eq!(
            (e.exit, e.message.as_str()),
            (Exit::Denied, "Error: Admin access required (HTTP 403)")
        );
        assert_eq!(server_error(502, "<html>").exit, Exit::Server);
    }

    fn strings(cells: &[&str]) -> Vec<String> {
        cells.iter().map(|c| (*c).to_owned()).collect()
    }

    #[test]
    fn tables_align_on_display_width_not_chars() {
        let headers = strings(&["city", "n"]);
        let rows = vec![strings(&["東京", "1"]), strings(&["Oslo", "22"])];
        let text = table_text(&headers, &rows, 80, false);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines, ["city  n", "東京  1", "Oslo  22"]);
    }

    #[test]
    fn tables_wider_than_the_terminal_print_one_record_per_block() {
        let headers = strings(&["id", "description"]);
        let rows = vec![strings(&["1", &"x".repeat(50)])];
        let text = table_text(&headers, &rows, 40, false);
        let expected = format!(
            "-[ record 1 ]-\nid          | 1\ndescription | {}\n",
            "x".repeat(50)
        );
        assert_eq!(text, expected);
        assert!(table_text(&headers, &rows, 80, false).starts_with("id  description\n"));
    }
}
