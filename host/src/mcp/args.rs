//! A tool's arguments, read with errors that name them, and the tool results that report an
//! error to the model.

use rmcp::model::{CallToolResult, ContentBlock, JsonObject};
use serde_json::{json, Value};
use svc_core::{Error, ErrorKind};

use super::results::RowFormat;

/// The code of a refused argument: the call never reached an operation.
pub(super) const BAD_ARGUMENT: &str = "invalid_argument";

fn bad_argument(tool: &str, name: &str, message: String) -> Error {
    Error::coded(
        ErrorKind::Invalid,
        BAD_ARGUMENT,
        format!("{tool}: {message}"),
        json!({ "argument": name }),
    )
}

/// A tool's arguments, read with errors that name the argument.
pub(super) struct Args<'a> {
    tool: &'a str,
    map: JsonObject,
}

impl<'a> Args<'a> {
    /// The arguments, refusing any the tool does not take.
    pub(super) fn new(
        tool: &'a str,
        map: Option<JsonObject>,
        known: &[&str],
    ) -> Result<Self, Error> {
        let map = map.unwrap_or_default();
        if let Some(unknown) = map.keys().find(|k| !known.contains(&k.as_str())) {
            return Err(bad_argument(
                tool,
                unknown,
                format!(
                    "unknown argument '{unknown}'; it takes {}",
                    known.join(", ")
                ),
            ));
        }
        Ok(Self { tool, map })
    }

    pub(super) fn wrong(&self, name: &str, what: &str) -> Error {
        bad_argument(self.tool, name, format!("argument '{name}' must be {what}"))
    }

    pub(super) fn text(&self, name: &str) -> Result<Option<String>, Error> {
        match self.map.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(self.wrong(name, "a string")),
        }
    }

    pub(super) fn required_text(&self, name: &str) -> Result<String, Error> {
        self.text(name)?
            .filter(|s| !s.trim().is_empty())
            .ok_or_else(|| self.wrong(name, "given (a non-empty string)"))
    }

    pub(super) fn count(&self, name: &str) -> Result<Option<u64>, Error> {
        match self.map.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_u64()
                .filter(|n| *n >= 1)
                .map(Some)
                .ok_or_else(|| self.wrong(name, "a whole number of at least 1")),
        }
    }

    pub(super) fn texts(&self, name: &str) -> Result<Option<Vec<String>>, Error> {
        match self.map.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Array(items)) => items
                .iter()
                .map(|i| i.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
                .map(Some)
                .ok_or_else(|| self.wrong(name, "a list of strings")),
            Some(_) => Err(self.wrong(name, "a list of strings")),
        }
    }

    pub(super) fn format(&self) -> Result<RowFormat, Error> {
        match self.text("format")? {
            None => Ok(RowFormat::Csv),
            Some(f) => RowFormat::parse(&f).ok_or_else(|| self.wrong("format", "csv or json")),
        }
    }
}

/// What the model is told to do next after an error of this kind.
fn hint(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::NotFound => "Call list_tables to see the table ids you can read.",
        ErrorKind::Forbidden => {
            "You have no grant on this table; pick another from list_tables or ask an administrator."
        }
        ErrorKind::BadRequest | ErrorKind::Invalid => {
            "Fix the request: describe_table shows the columns; only one SELECT per query."
        }
        ErrorKind::PayloadTooLarge => "Ask for less: fewer columns, a WHERE clause, or an aggregate.",
        ErrorKind::TooMany => "Your query quota is spent for now; wait and retry later.",
        ErrorKind::Timeout => "Narrow the query: filter earlier, select fewer columns, aggregate.",
        ErrorKind::Unauthorized => "The token was refused; the user must provide a valid one.",
        _ => "The server could not do this now; retry later or tell the user.",
    }
}

/// A tool result that reports `e` to the model.
pub(super) fn tool_error(e: &Error) -> CallToolResult {
    let body = json!({
        "error": e.code().unwrap_or(e.kind().name()),
        "status": e.status(),
        "message": e.to_string(),
        "hint": hint(e.kind()),
    });
    let mut result = CallToolResult::error(vec![ContentBlock::text(body.to_string())]);
    result.structured_content = Some(body);
    result
}

/// A successful tool result of one text block.
pub(super) fn text_result(text: String) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(text)])
}
