//! Timestamps as the store keeps them, and fresh ids.

use std::str::FromStr;

use chrono::{DateTime, SecondsFormat, Utc};

/// The current time, formatted the way the store keeps it.
pub fn now() -> String {
    format_ts(Utc::now())
}

/// Formats a timestamp the way the store keeps it (fixed width, so text order is time order):
/// `2026-12-05T18:45:12.123456Z`.
///
/// Written digit by digit: every audit row takes one, and chrono's general RFC 3339 writer
/// cost 735 instructions a cached sample (callgrind). A leap second or a year past 9999,
/// which the fixed layout cannot hold the same way, goes to chrono.
pub fn format_ts(t: DateTime<Utc>) -> String {
    use chrono::{Datelike as _, Timelike as _};
    // The stored UTC parts: the zoned accessors each add the (zero) offset afresh.
    let utc = t.naive_utc();
    let (date, time) = (utc.date(), utc.time());
    let year = date.year();
    if !(0..=9999).contains(&year) || time.nanosecond() >= 1_000_000_000 {
        return t.to_rfc3339_opts(SecondsFormat::Micros, true);
    }
    let mut out = *b"0000-00-00T00:00:00.000000Z";
    let mut put = |at: usize, width: usize, mut value: u32| {
        for i in (at..at + width).rev() {
            out[i] = b'0' + (value % 10) as u8;
            value /= 10;
        }
    };
    put(0, 4, year.unsigned_abs());
    put(5, 2, date.month());
    put(8, 2, date.day());
    put(11, 2, time.hour());
    put(14, 2, time.minute());
    put(17, 2, time.second());
    put(20, 6, time.nanosecond() / 1_000);
    String::from(std::str::from_utf8(&out).expect("ASCII digits"))
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
    // Encoded into a stack buffer, then one allocation: `to_string` goes through `fmt` and
    // grows its string as it writes. Every audit row takes an id.
    let mut buffer = uuid::Uuid::encode_buffer();
    String::from(&*uuid::Uuid::now_v7().hyphenated().encode_lower(&mut buffer))
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

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone as _;

    #[test]
    fn ids_are_hyphenated_lower_case_version_7_uuids_in_time_order() {
        let (first, second) = (new_id(), new_id());
        for id in [&first, &second] {
            let parsed = uuid::Uuid::parse_str(id).unwrap();
            assert_eq!(parsed.get_version_num(), 7);
            assert_eq!(*id, parsed.hyphenated().to_string());
        }
        assert!(first < second, "{first} then {second}");
    }

    #[test]
    fn timestamps_are_written_exactly_as_chrono_writes_them() {
        let chrono_form = |t: DateTime<Utc>| t.to_rfc3339_opts(SecondsFormat::Micros, true);
        let mut seen = 0;
        // Every day of four years around a leap day, at times that move every field.
        let start = Utc.with_ymd_and_hms(2023, 1, 1, 0, 0, 0).unwrap();
        for day in 0..(4 * 366) {
            for (s, micros) in [(0, 0), (1, 1), (45_296, 123_456), (86_399, 999_999)] {
                let t = start
                    + chrono::Duration::days(day)
                    + chrono::Duration::seconds(s)
                    + chrono::Duration::microseconds(micros);
                assert_eq!(format_ts(t), chrono_form(t));
                seen += 1;
            }
        }
        // Sub-microsecond digits are dropped, not rounded, as chrono does.
        let t = Utc.timestamp_opt(1_700_000_000, 999_999_999).unwrap();
        assert_eq!(format_ts(t), chrono_form(t));
        // The ends of the fixed layout, and past them (chrono's own forms).
        for t in [
            Utc.with_ymd_and_hms(0, 1, 1, 0, 0, 0).unwrap(),
            Utc.with_ymd_and_hms(9999, 12, 31, 23, 59, 59).unwrap(),
            Utc.with_ymd_and_hms(10_000, 1, 1, 0, 0, 0).unwrap(),
            Utc.with_ymd_and_hms(-1, 1, 1, 0, 0, 0).unwrap(),
            // A leap second.
            Utc.timestamp_opt(1_483_228_799, 1_500_000_000).unwrap(),
        ] {
            assert_eq!(format_ts(t), chrono_form(t));
        }
        assert!(seen > 5_000);
        assert_eq!(
            format_ts(Utc.with_ymd_and_hms(2026, 12, 5, 18, 45, 12).unwrap()),
            "2026-12-05T18:45:12.000000Z"
        );
    }
}
