//! WHERE examples for the catalog: filters an agent can copy, generated from what is known
//! about a table's columns — a time range on the partition (or first date) column, an
//! equality on a low-cardinality column, a numeric bound — and only over columns the table
//! has. Local tables' examples use real values from their parquet footer (cached per file
//! version); remote tables' use their cached metadata (names and types; values relative to
//! today, since the catalog never calls a remote source).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use chrono::{Days, Utc};
use svc_plugin_api::TableMetadata;

/// What a column is, as far as filtering goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnKind {
    /// A calendar date.
    Date,
    /// A point in time.
    Timestamp,
    /// Integers and decimals.
    Number,
    /// Text.
    Text,
    /// True or false.
    Bool,
    /// Anything else (nested, binary): never used in an example.
    Other,
}

impl ColumnKind {
    /// The kind of a type as Arrow or BigQuery names it.
    pub fn of_type(name: &str) -> Self {
        let upper = name.to_ascii_uppercase();
        match upper.as_str() {
            "DATE" | "DATE32" | "DATE64" => Self::Date,
            "DATETIME" | "TIMESTAMP" => Self::Timestamp,
            t if t.starts_with("TIMESTAMP(") => Self::Timestamp,
            "STRING" | "UTF8" | "LARGEUTF8" | "UTF8VIEW" => Self::Text,
            "BOOL" | "BOOLEAN" => Self::Bool,
            "INTEGER" | "INT64" | "FLOAT" | "FLOAT64" | "NUMERIC" | "BIGNUMERIC" => Self::Number,
            t if (t.starts_with("INT") && !t.starts_with("INTERVAL"))
                || t.starts_with("UINT")
                || t.starts_with("FLOAT") =>
            {
                Self::Number
            }
            t if t.starts_with("DECIMAL") => Self::Number,
            _ => Self::Other,
        }
    }
}

/// One column an example may use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnFact {
    /// Column name.
    pub name: String,
    /// What it holds.
    pub kind: ColumnKind,
    /// Smallest value, when known (SQL literal text).
    pub min: Option<String>,
    /// Largest value, when known.
    pub max: Option<String>,
    /// Few distinct values: worth an equality.
    pub low_cardinality: bool,
    /// The table is partitioned on it.
    pub partition: bool,
}

/// How identifiers are quoted in the table's SQL dialect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// BigQuery: backticks.
    BigQuery,
    /// DataFusion (every local table): double quotes.
    DataFusion,
}

fn ident(name: &str, dialect: Dialect) -> String {
    let plain = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    match (plain, dialect) {
        (true, _) => name.to_owned(),
        (false, Dialect::BigQuery) => format!("`{}`", name.replace('`', "\\`")),
        (false, Dialect::DataFusion) => format!("\"{}\"", name.replace('"', "\"\"")),
    }
}

fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// The examples for these columns (at most three, each naming only columns in `columns`).
pub fn generate(columns: &[ColumnFact], dialect: Dialect) -> Vec<String> {
    let mut out = Vec::new();
    let week_ago = Utc::now()
        .date_naive()
        .checked_sub_days(Days::new(7))
        .map(|d| d.to_string())
        .unwrap_or_default();
    // A time range: the partition column when it is a date or time, else the first one.
    let time = columns
        .iter()
        .filter(|c| matches!(c.kind, ColumnKind::Date | ColumnKind::Timestamp))
        .min_by_key(|c| !c.partition);
    if let Some(c) = time {
        // The last week of data when the largest value is known, else the last week.
        let from = c
            .max
            .as_deref()
            .and_then(|m| m.get(..10))
            .and_then(|d| d.parse::<chrono::NaiveDate>().ok())
            .and_then(|d| d.checked_sub_days(Days::new(7)))
            .map(|d| d.to_string())
            .unwrap_or(week_ago);
        let literal = match c.kind {
            ColumnKind::Date => format!("DATE {}", quoted(&from)),
            _ => format!("TIMESTAMP {}", quoted(&format!("{from} 00:00:00"))),
        };
        out.push(format!("{} >= {literal}", ident(&c.name, dialect)));
    }
    // An equality on a column with few values, with a value it holds.
    let equality = columns.iter().find_map(|c| match c.kind {
        ColumnKind::Bool => Some(format!("{} = TRUE", ident(&c.name, dialect))),
        ColumnKind::Text if c.low_cardinality => c
            .min
            .as_deref()
            .map(|v| format!("{} = {}", ident(&c.name, dialect), quoted(v))),
        _ => None,
    });
    out.extend(equality);
    // A numeric bound: the middle of the known range, else above zero.
    let number = columns
        .iter()
        .find(|c| c.kind == ColumnKind::Number && !c.name.eq_ignore_ascii_case("id"));
    if let Some(c) = number {
        let bound = match (&c.min, &c.max) {
            (Some(lo), Some(hi)) => match (lo.parse::<f64>(), hi.parse::<f64>()) {
                (Ok(lo), Ok(hi)) if lo.is_finite() && hi.is_finite() => midpoint(lo, hi),
                _ => "0".to_owned(),
            },
            _ => "0".to_owned(),
        };
        out.push(format!("{} > {bound}", ident(&c.name, dialect)));
    }
    out
}

/// A round number between `lo` and `hi`.
fn midpoint(lo: f64, hi: f64) -> String {
    let mid = lo + (hi - lo) / 2.0;
    if mid.abs() >= 10.0 {
        format!("{}", mid.round() as i64)
    } else {
        format!("{:.2}", mid)
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_owned()
    }
}

/// Column facts of a remote table from its cached metadata (no values: the catalog never
/// asks the source).
pub fn remote_facts(m: &TableMetadata) -> Vec<ColumnFact> {
    m.known_columns
        .iter()
        .zip(m.column_types.iter())
        .map(|(name, ty)| ColumnFact {
            name: name.clone(),
            kind: ColumnKind::of_type(ty),
            min: None,
            max: None,
            low_cardinality: false,
            partition: m.partition_by.as_deref() == Some(name),
        })
        .collect()
}

/// Local tables' examples, computed from the parquet footer once per file version.
#[derive(Debug, Clone, Default)]
pub struct LocalExamples {
    seen: Arc<Mutex<HashMap<PathBuf, Versioned>>>,
}

/// A file's size and modification time, and the examples made from that version.
type Versioned = ((u64, Option<SystemTime>), Vec<String>);

impl LocalExamples {
    /// The examples for the parquet file at `path` (none when it is missing or unreadable).
    pub fn for_file(&self, path: &Path) -> Vec<String> {
        let Ok(meta) = std::fs::metadata(path) else {
            return Vec::new();
        };
        let version = (meta.len(), meta.modified().ok());
        let seen = || self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((v, examples)) = seen().get(path) {
            if *v == version {
                return examples.clone();
            }
        }
        // The footer is read without the lock, so one new file does not hold up the catalog.
        let facts: Vec<ColumnFact> = svc_driver_parquet::column_stats(path)
            .unwrap_or_default()
            .into_iter()
            .map(|s| ColumnFact {
                kind: ColumnKind::of_type(&s.data_type),
                name: s.name,
                min: s.min,
                max: s.max,
                low_cardinality: s.few_values,
                partition: false,
            })
            .collect();
        let examples = generate(&facts, Dialect::DataFusion);
        seen().insert(path.to_owned(), (version, examples.clone()));
        examples
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fact(name: &str, kind: ColumnKind) -> ColumnFact {
        ColumnFact {
            name: name.into(),
            kind,
            min: None,
            max: None,
            low_cardinality: false,
            partition: false,
        }
    }

    #[test]
    fn examples_use_only_known_columns_and_real_values() {
        assert!(generate(&[], Dialect::BigQuery).is_empty());
        let mut day = fact("day", ColumnKind::Date);
        day.max = Some("2026-03-10".into());
        let mut country = fact("Country Code", ColumnKind::Text);
        country.low_cardinality = true;
        country.min = Some("O'Hare".into());
        let mut amount = fact("amount", ColumnKind::Number);
        amount.min = Some("0".into());
        amount.max = Some("1000".into());
        let ex = generate(
            &[fact("id", ColumnKind::Number), day, country, amount],
            Dialect::DataFusion,
        );
        assert_eq!(
            ex,
            [
                "day >= DATE '2026-03-03'",
                "\"Country Code\" = 'O''Hare'",
                "amount > 500"
            ]
        );
        // Without values: relative to today, above zero; a high-cardinality text column
        // gets no equality; BigQuery quoting.
        let mut ts = fact("Created At", ColumnKind::Timestamp);
        ts.partition = true;
        let ex = generate(
            &[
                fact("name", ColumnKind::Text),
                ts,
                fact("n", ColumnKind::Number),
            ],
            Dialect::BigQuery,
        );
        assert_eq!(ex.len(), 2, "{ex:?}");
        assert!(ex[0].starts_with("`Created At` >= TIMESTAMP '"), "{ex:?}");
        assert_eq!(ex[1], "n > 0");
    }

    #[test]
    fn type_names_from_both_worlds() {
        for (t, k) in [
            ("DATE", ColumnKind::Date),
            ("Date32", ColumnKind::Date),
            ("TIMESTAMP", ColumnKind::Timestamp),
            ("Timestamp(Microsecond, None)", ColumnKind::Timestamp),
            ("INT64", ColumnKind::Number),
            ("Int32", ColumnKind::Number),
            ("Decimal128(10, 2)", ColumnKind::Number),
            ("STRING", ColumnKind::Text),
            ("Utf8", ColumnKind::Text),
            ("BOOL", ColumnKind::Bool),
            ("RECORD", ColumnKind::Other),
        ] {
            assert_eq!(ColumnKind::of_type(t), k, "{t}");
        }
    }
}
