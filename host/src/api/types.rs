//! Request field types stricter than poem-openapi's defaults.

use std::borrow::Cow;

use poem_openapi::registry::{MetaSchema, MetaSchemaRef};
use poem_openapi::types::{ParseError, ParseFromJSON, ParseResult, ToJSON, Type};
use serde_json::Value;
use svc_store::registry::QueryMode;

/// A JSON string and nothing else: poem-openapi's `String` also accepts numbers and booleans
/// (`{"id": 5}` would become `"5"`), which hides client bugs. Wrong types are a 422 here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Str(pub String);

impl std::ops::Deref for Str {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Str {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl From<Str> for String {
    fn from(s: Str) -> Self {
        s.0
    }
}

impl Type for Str {
    const IS_REQUIRED: bool = true;
    type RawValueType = Self;
    type RawElementValueType = Self;

    fn name() -> Cow<'static, str> {
        "string".into()
    }

    fn schema_ref() -> MetaSchemaRef {
        MetaSchemaRef::Inline(Box::new(MetaSchema::new("string")))
    }

    fn as_raw_value(&self) -> Option<&Self> {
        Some(self)
    }

    fn raw_element_iter<'a>(&'a self) -> Box<dyn Iterator<Item = &'a Self> + 'a> {
        Box::new(self.as_raw_value().into_iter())
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl ParseFromJSON for Str {
    fn parse_from_json(value: Option<Value>) -> ParseResult<Self> {
        match value.unwrap_or_default() {
            Value::String(s) => Ok(Str(s)),
            other => Err(ParseError::expected_type(other)),
        }
    }
}

impl ToJSON for Str {
    fn to_json(&self) -> Option<Value> {
        Some(Value::String(self.0.clone()))
    }
}

impl std::fmt::Display for Str {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A result format (a query's default: `json`; a scan's: `arrow`).
#[derive(poem_openapi::Enum, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[oai(rename = "Format", rename_all = "lowercase")]
pub enum FormatParam {
    /// `{"columns", "column_types", "rows", "row_count", "truncated"}`.
    #[default]
    Json,
    /// Arrow IPC stream (`application/vnd.apache.arrow.stream`).
    Arrow,
    /// CSV with a header line.
    Csv,
    /// A parquet file.
    Parquet,
}

impl From<FormatParam> for svc_query::format::Format {
    fn from(f: FormatParam) -> Self {
        match f {
            FormatParam::Json => Self::Json,
            FormatParam::Arrow => Self::Arrow,
            FormatParam::Csv => Self::Csv,
            FormatParam::Parquet => Self::Parquet,
        }
    }
}

/// How a table's data is reached (a new table: `local`; an existing one keeps its mode
/// unless a change names one).
#[derive(poem_openapi::Enum, Debug, Clone, Copy, PartialEq, Eq)]
#[oai(rename = "QueryMode", rename_all = "lowercase")]
pub enum QueryModeParam {
    /// Parquet on this server's disk.
    Local,
    /// Read at the source on every request.
    Remote,
    /// Copied from the source to parquet on a schedule.
    Materialized,
    /// The service's own tables; seeded, never registered by hand.
    Internal,
}

impl From<QueryModeParam> for QueryMode {
    fn from(m: QueryModeParam) -> Self {
        match m {
            QueryModeParam::Local => Self::Local,
            QueryModeParam::Remote => Self::Remote,
            QueryModeParam::Materialized => Self::Materialized,
            QueryModeParam::Internal => Self::Internal,
        }
    }
}

impl From<QueryMode> for QueryModeParam {
    fn from(m: QueryMode) -> Self {
        match m {
            QueryMode::Local => Self::Local,
            QueryMode::Remote => Self::Remote,
            QueryMode::Materialized => Self::Materialized,
            QueryMode::Internal => Self::Internal,
        }
    }
}
