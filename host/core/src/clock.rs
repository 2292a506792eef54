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

/// `since <= time < until`, either end open; both in the store's timestamp form.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TimeRange {
    /// Inclusive start.
    pub since: Option<String>,
    /// Exclusive end.
    pub until: Option<String>,
}

impl TimeRange {
    /// Parses the ends as given in a request: an RFC 3339 date-time, a date-time without a
    /// zone (UTC), or a date (its midnight, UTC). An error names the end it is about.
    pub fn parse(since: Option<&str>, until: Option<&str>) -> Result<Self, crate::Error> {
        let one = |field: &str, v: Option<&str>| -> Result<Option<String>, crate::Error> {
            let Some(v) = v.map(str::trim).filter(|v| !v.is_empty()) else {
                return Ok(None);
            };
            let at = chrono::NaiveDate::parse_from_str(v, "%Y-%m-%d")
                .ok()
                .and_then(|d| d.and_hms_opt(0, 0, 0))
                .map(|n| n.and_utc())
                .or_else(|| parse_ts(v))
                .ok_or_else(|| {
                    crate::Error::invalid(format!(
                        "{field}: '{v}' is not a date (YYYY-MM-DD) or an ISO 8601 date-time"
                    ))
                })?;
            Ok(Some(format_ts(at)))
        };
        let range = Self {
            since: one("since", since)?,
            until: one("until", until)?,
        };
        if let (Some(a), Some(b)) = (&range.since, &range.until) {
            if a >= b {
                return Err(crate::Error::invalid("until must be later than since"));
            }
        }
        Ok(range)
    }
}
