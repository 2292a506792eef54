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

fn bold(s: &str) -> String {
    if color() {
        format!("\x1b[1m{s}\x1b[0m")
    } else {
        s.to_owned()
    }
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

/// Rows under headers, in columns when they fit the terminal, else one record per block.
pub fn table(headers: &[String], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let total: usize = widths.iter().sum::<usize>() + 2 * widths.len();
    if total > width() && headers.len() > 1 {
        let label = headers.iter().map(|h| h.chars().count()).max().unwrap_or(0);
        for (i, row) in rows.iter().enumerate() {
            println!("{}", bold(&format!("-[ record {} ]-", i + 1)));
            for (h, c) in headers.iter().zip(row) {
                println!("{h:<label$} | {c}");
            }
        }
        return;
    }
    let line = |cells: &[String]| {
        cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_owned()
    };
    println!("{}", bold(&line(headers)));
    for row in rows {
        println!("{}", line(row));
    }
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
}
