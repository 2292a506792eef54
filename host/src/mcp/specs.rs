//! The tools as `tools/list` shows them: names, JSON schemas and descriptions written for a
//! model, each with an example.

use std::sync::Arc;

use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde_json::{json, Value};

use super::tools::MAX_BUNDLE_TOKENS;

/// The tools by name: what the dispatcher matches and metrics label calls with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ToolName {
    ListTables,
    DescribeTable,
    Query,
    ScanEstimate,
    Scan,
    MemoryBundle,
}

impl ToolName {
    /// Every tool, in the order the catalog lists them.
    pub(super) const ALL: [Self; 6] = [
        Self::ListTables,
        Self::DescribeTable,
        Self::Query,
        Self::ScanEstimate,
        Self::Scan,
        Self::MemoryBundle,
    ];

    /// The tool a call names, if there is one.
    pub(super) fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == name)
    }

    /// The name the catalog gives it.
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Self::ListTables => "list_tables",
            Self::DescribeTable => "describe_table",
            Self::Query => "query",
            Self::ScanEstimate => "scan_estimate",
            Self::Scan => "scan",
            Self::MemoryBundle => "memory_bundle",
        }
    }

    /// The arguments its schema declares (anything else is refused by name).
    pub(super) fn arguments(self) -> &'static [&'static str] {
        match self {
            Self::ListTables => &["q", "bucket"],
            Self::DescribeTable => &["table_id"],
            Self::Query => &["sql", "format", "max_rows", "cursor"],
            Self::ScanEstimate => &["table_id", "select", "where", "order_by", "limit"],
            Self::Scan => &[
                "table_id", "select", "where", "order_by", "limit", "format", "max_rows", "cursor",
            ],
            Self::MemoryBundle => &["budget_tokens"],
        }
    }
}

fn schema(properties: Value, required: &[&str]) -> Arc<JsonObject> {
    let Value::Object(object) = json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    }) else {
        unreachable!("a JSON object literal")
    };
    Arc::new(object)
}

fn read_only(tool: Tool) -> Tool {
    tool.with_annotations(ToolAnnotations::new().read_only(true).open_world(false))
}

/// Every tool, as `tools/list` answers.
pub(super) fn catalog() -> Vec<Tool> {
    let format = json!({
        "type": "string", "enum": ["csv", "json"], "default": "csv",
        "description": "csv: a header line then one line per row (most rows per byte). json: {\"columns\": [...], \"rows\": [[...]]}."
    });
    let cursor = json!({
        "type": "string",
        "description": "The next_cursor of the previous result, to continue the same request. Omit to start from the first row."
    });
    let max_rows = json!({
        "type": "integer", "minimum": 1,
        "description": "Rows wanted; the server's cap (default 100) applies whatever is asked."
    });
    vec![
        read_only(Tool::new(
            ToolName::ListTables.as_str(),
            "List the tables you may read: one line per table with its id, mode (local: stored on \
             the server; remote: queried in the warehouse, mind the size; materialized: a refreshed \
             local copy; internal: svc's own records, filtered to what you may see), size hint, \
             freshness and description. Use `q` to find tables by words in their id or \
             description, `bucket` to list one group. Example: {\"q\": \"orders\"}.",
            schema(
                json!({
                    "q": {"type": "string", "description": "Words that must appear in the table id or description (case does not matter)."},
                    "bucket": {"type": "string", "description": "Only tables in this bucket."}
                }),
                &[],
            ),
        )),
        read_only(Tool::new(
            ToolName::DescribeTable.as_str(),
            "Describe one table before querying it: its columns with types, a few sample rows, \
             and example WHERE clauses that work on it. Example: {\"table_id\": \"orders\"}.",
            schema(
                json!({"table_id": {"type": "string", "description": "The table id from list_tables."}}),
                &["table_id"],
            ),
        )),
        read_only(Tool::new(
            ToolName::Query.as_str(),
            "Run one read-only SQL SELECT over the tables you may read (table ids are the table \
             names; DataFusion SQL). The result is bounded: at most 100 rows and 64 KiB unless \
             the server says otherwise; it states `truncated` and gives `next_cursor` when more \
             rows exist — call again with the same sql and that cursor to read on, or better, \
             aggregate or filter in SQL. Example: {\"sql\": \"SELECT status, count(*) AS n \
             FROM orders GROUP BY status ORDER BY n DESC\"}.",
            schema(
                json!({
                    "sql": {"type": "string", "description": "One SELECT (or EXPLAIN) statement."},
                    "format": format.clone(),
                    "max_rows": max_rows.clone(),
                    "cursor": cursor.clone()
                }),
                &["sql"],
            ),
        )),
        read_only(Tool::new(
            ToolName::ScanEstimate.as_str(),
            "Say what a scan of one table would read (bytes and rows, exact or bounds) and \
             whether a remote table's size guard would refuse it — without reading it. Takes \
             the same arguments as `scan`. Example: {\"table_id\": \"events\", \"where\": \
             \"day >= '2026-01-01'\"}.",
            scan_schema(&format, &max_rows, &cursor, false),
        )),
        read_only(Tool::new(
            ToolName::Scan.as_str(),
            "Read rows of one table chosen by columns, a WHERE predicate and an order, without \
             writing SQL: the parts are validated against the table's columns. Bounded like \
             `query`, with `truncated` and `next_cursor`. Example: {\"table_id\": \"orders\", \
             \"select\": [\"id\", \"total\"], \"where\": \"total > 100\", \"order_by\": \
             [\"total DESC\"]}.",
            scan_schema(&format, &max_rows, &cursor, true),
        )),
        read_only(Tool::new(
            ToolName::MemoryBundle.as_str(),
            "Load the corporate memory for your work: every mandatory item you can see, then the \
             best approved items (confidence × recency) within a token budget. Read it before \
             answering questions about the business's data and rules. Example: \
             {\"budget_tokens\": 4000}.",
            schema(
                json!({"budget_tokens": {"type": "integer", "minimum": 1, "maximum": MAX_BUNDLE_TOKENS, "default": 6000,
                    "description": "Tokens the bundle may use (estimated as characters / 4)."}}),
                &[],
            ),
        )),
    ]
}

fn scan_schema(format: &Value, max_rows: &Value, cursor: &Value, rows: bool) -> Arc<JsonObject> {
    let mut properties = json!({
        "table_id": {"type": "string", "description": "The table id from list_tables."},
        "select": {"type": "array", "items": {"type": "string"}, "description": "Columns to return (default: all)."},
        "where": {"type": "string", "description": "A predicate over the table's columns: comparisons, AND/OR/NOT, IN, BETWEEN, LIKE, IS NULL."},
        "order_by": {"type": "array", "items": {"type": "string"}, "description": "`column` or `column DESC` entries."},
        "limit": {"type": "integer", "minimum": 1, "description": "Rows the scan selects in all (pages of it are returned)."}
    });
    if rows {
        properties["format"] = format.clone();
        properties["max_rows"] = max_rows.clone();
        properties["cursor"] = cursor.clone();
    }
    schema(properties, &["table_id"])
}
