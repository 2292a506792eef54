//! Sync and script schedules: `every <N>m`, `every <N>h`, or `daily HH:MM[,HH:MM…]` (UTC).

use chrono::{DateTime, NaiveTime, Utc};

/// The schedule of a table sync or a script when its row has none.
pub const DEFAULT_SCHEDULE: Schedule = Schedule::Every { minutes: 60 };

/// When something recurring is due.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Schedule {
    /// At least this many minutes after the last run.
    Every {
        /// Minutes between runs (never 0).
        minutes: u32,
    },
    /// Once a day at each of these UTC times.
    Daily(Vec<NaiveTime>),
}

impl std::str::FromStr for Schedule {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || {
            format!("invalid schedule '{s}': expected 'every <N>m', 'every <N>h' or 'daily HH:MM[,HH:MM...]'")
        };
        if let Some(rest) = s.strip_prefix("every ") {
            let (n, unit) = rest.split_at(rest.len().saturating_sub(1));
            let n: u32 = n.parse().map_err(|_| bad())?;
            let minutes = match unit {
                "m" => n,
                "h" => n.checked_mul(60).ok_or_else(bad)?,
                _ => return Err(bad()),
            };
            return if minutes > 0 {
                Ok(Self::Every { minutes })
            } else {
                Err(bad())
            };
        }
        if let Some(times) = s.strip_prefix("daily ") {
            let times = times
                .split(',')
                .map(|t| {
                    let (h, m) = t.trim().split_once(':').ok_or_else(bad)?;
                    let (h, m): (u32, u32) =
                        (h.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?);
                    NaiveTime::from_hms_opt(h, m, 0).ok_or_else(bad)
                })
                .collect::<Result<Vec<_>, _>>()?;
            return Ok(Self::Daily(times));
        }
        Err(bad())
    }
}

impl Schedule {
    /// Whether a run is due at `now`, given the last one. Never run → due. A last run in the
    /// future (clock skew) → not due. Daily: due once `now` has passed a target time today
    /// that the last run had not reached.
    pub fn is_due(&self, last: Option<DateTime<Utc>>, now: DateTime<Utc>) -> bool {
        let Some(last) = last else { return true };
        if last > now {
            return false;
        }
        match self {
            Self::Every { minutes } => now - last >= chrono::Duration::minutes(i64::from(*minutes)),
            Self::Daily(times) => times.iter().any(|t| {
                let target = now.date_naive().and_time(*t).and_utc();
                now >= target && last < target
            }),
        }
    }
}

/// A stored timestamp, if it parses.
pub fn parse_ts(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        parse_ts(s).unwrap()
    }

    #[test]
    fn parses_the_three_forms_and_refuses_the_rest() {
        assert_eq!("every 15m".parse(), Ok(Schedule::Every { minutes: 15 }));
        assert_eq!("every 2h".parse(), Ok(Schedule::Every { minutes: 120 }));
        assert!(matches!("daily 03:00,15:30".parse(), Ok(Schedule::Daily(t)) if t.len() == 2));
        for bad in [
            "every 0m",
            "every m",
            "every 5d",
            "daily 24:00",
            "daily 3",
            "hourly",
            "",
            "every -1m",
        ] {
            assert!(bad.parse::<Schedule>().is_err(), "{bad}");
        }
    }

    #[test]
    fn due_rules() {
        let every = Schedule::Every { minutes: 60 };
        let now = at("2026-11-22T12:00:00Z");
        assert!(every.is_due(None, now));
        assert!(every.is_due(Some(at("2026-11-22T11:00:00Z")), now));
        assert!(!every.is_due(Some(at("2026-11-22T11:00:01Z")), now));
        assert!(
            !every.is_due(Some(at("2026-11-22T13:00:00Z")), now),
            "future last run"
        );

        let daily: Schedule = "daily 03:00,15:30".parse().unwrap();
        assert!(
            daily.is_due(Some(at("2026-11-22T02:59:00Z")), now),
            "03:00 passed since"
        );
        assert!(
            !daily.is_due(Some(at("2026-11-22T03:00:00Z")), now),
            "03:00 done, 15:30 ahead"
        );
        assert!(daily.is_due(None, at("2026-11-22T01:00:00Z")), "never run");
        assert!(!daily.is_due(Some(at("2026-11-21T16:00:00Z")), at("2026-11-22T02:00:00Z")));
    }
}
