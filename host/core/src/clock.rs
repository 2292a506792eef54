//! Timestamps as the store keeps them, and fresh ids.

use std::str::FromStr;

use chrono::{DateTime, SecondsFormat, Utc};

/// The current time, formatted the way the store keeps it.
pub fn now() -> String {
    format_ts(Utc::now())
}

/// Formats a timestamp the way the store keeps it (fixed width, so text order is time order).
pub fn format_ts(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// Parses a stored timestamp; legacy rows may use other RFC 3339 or SQL spellings.
pub fn parse_ts(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .ok()
        .or_else(|| {
            chrono::NaiveDateTime::from_str(&s.replace(' ', "T"))
                .ok()
                .map(|n| n.and_utc())
        })
}

/// A new time-ordered id (UUID v7).
pub fn new_id() -> String {
    uuid::Uuid::now_v7().to_string()
}
