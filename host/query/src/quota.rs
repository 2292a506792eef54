//! Per-process quotas on what one user's scans and queries may take: how many run at once,
//! and how many bytes they read per UTC day.
//!
//! A [`Permit`] is held for as long as a result is being produced and sent; dropping it
//! (the body finished, failed, or the client went away) frees the slot.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use chrono::{NaiveDate, Utc};
use serde_json::json;
use svc_core::{Error, ErrorKind, Result};

#[derive(Debug)]
struct Usage {
    running: usize,
    day: NaiveDate,
    bytes: u64,
    /// Bytes held by running scans and queries for what they may still read.
    reserved: u64,
}

/// The quota tracker.
#[derive(Debug)]
pub struct Quotas {
    max_concurrent: usize,
    max_daily_bytes: u64,
    users: Mutex<HashMap<String, Usage>>,
}

/// One running scan or query of one user.
#[derive(Debug)]
pub struct Permit {
    quotas: Arc<Quotas>,
    user: String,
    /// Bytes of the day's allowance this run holds until it ends.
    reserved: std::sync::atomic::AtomicU64,
}

impl Quotas {
    /// A tracker with these limits.
    pub fn new(max_concurrent: usize, max_daily_bytes: u64) -> Arc<Self> {
        Arc::new(Self {
            max_concurrent,
            max_daily_bytes,
            users: Mutex::new(HashMap::new()),
        })
    }

    /// A slot for one more scan or query: 429 `quota_exceeded` when the user has used up
    /// today's bytes or already runs the most at once.
    pub fn acquire(self: &Arc<Self>, user: &str) -> Result<Permit> {
        self.acquire_on(user, Utc::now().date_naive())
    }

    fn acquire_on(self: &Arc<Self>, user: &str, today: NaiveDate) -> Result<Permit> {
        let mut users = self.users.lock().expect("quota lock");
        let usage = users.entry(user.to_string()).or_insert(Usage {
            running: 0,
            day: today,
            bytes: 0,
            reserved: 0,
        });
        if usage.day != today {
            usage.day = today;
            usage.bytes = 0;
        }
        if usage.bytes >= self.max_daily_bytes {
            let retry = seconds_to_next_utc_midnight();
            return Err(exceeded(
                "daily_bytes",
                format!(
                    "You have read {} bytes today, the daily allowance is {} bytes; it resets at 00:00 UTC",
                    usage.bytes, self.max_daily_bytes
                ),
                usage.bytes,
                self.max_daily_bytes,
                retry,
            ));
        }
        if usage.running >= self.max_concurrent {
            return Err(exceeded(
                "concurrent_scans",
                format!(
                    "You already run {} scans or queries, the most allowed at once; wait for one to finish",
                    usage.running
                ),
                usage.running as u64,
                self.max_concurrent as u64,
                1,
            ));
        }
        usage.running += 1;
        Ok(Permit {
            quotas: self.clone(),
            user: user.to_string(),
            reserved: Default::default(),
        })
    }

    /// Counts bytes read against the user's day (may pass the allowance: the next request is
    /// the one refused).
    pub fn record(&self, user: &str, bytes: u64) {
        if let Some(u) = self.users.lock().expect("quota lock").get_mut(user) {
            u.bytes = u.bytes.saturating_add(bytes);
        }
    }
}

impl Permit {
    /// Holds `bytes` (what the run may read at most) of today's allowance until the run
    /// ends, so one request cannot overshoot it by any amount: refused (429) when what was
    /// read today plus what running requests hold plus `bytes` would pass the allowance.
    pub fn reserve(&self, bytes: u64) -> Result<()> {
        let max = self.quotas.max_daily_bytes;
        let mut users = self.quotas.users.lock().expect("quota lock");
        let Some(usage) = users.get_mut(&self.user) else {
            return Ok(());
        };
        let committed = usage.bytes.saturating_add(usage.reserved);
        if committed.saturating_add(bytes) > max {
            return Err(exceeded(
                "daily_bytes",
                format!(
                    "This request may read up to {bytes} bytes; with {} read today and {} held by \
                     your running requests that passes the daily allowance of {max} bytes \
                     (it resets at 00:00 UTC). Filter or LIMIT it, or query a smaller table",
                    usage.bytes, usage.reserved
                ),
                committed,
                max,
                seconds_to_next_utc_midnight(),
            ));
        }
        usage.reserved += bytes;
        self.reserved
            .fetch_add(bytes, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }

    /// Counts bytes this scan or query read.
    pub fn record(&self, bytes: u64) {
        self.quotas.record(&self.user, bytes);
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(u) = self
            .quotas
            .users
            .lock()
            .expect("quota lock")
            .get_mut(&self.user)
        {
            u.running = u.running.saturating_sub(1);
            u.reserved = u
                .reserved
                .saturating_sub(self.reserved.load(std::sync::atomic::Ordering::Relaxed));
        }
    }
}

fn exceeded(kind: &str, message: String, current: u64, limit: u64, retry: u64) -> Error {
    Error::coded(
        ErrorKind::TooMany,
        "quota_exceeded",
        message,
        json!({"kind": kind, "current": current, "limit": limit, "retry_after_seconds": retry}),
    )
    .retry_after(retry)
}

fn seconds_to_next_utc_midnight() -> u64 {
    let now = Utc::now();
    let midnight = (now.date_naive() + chrono::Days::new(1))
        .and_hms_opt(0, 0, 0)
        .expect("midnight exists")
        .and_utc();
    u64::try_from((midnight - now).num_seconds())
        .unwrap_or(0)
        .max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn detail(e: &Error) -> serde_json::Value {
        e.body()["detail"].clone()
    }

    #[test]
    fn concurrency_is_per_user_and_freed_on_drop() {
        let q = Quotas::new(2, u64::MAX);
        let a = q.acquire("ana").unwrap();
        let _b = q.acquire("ana").unwrap();
        let err = q.acquire("ana").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::TooMany);
        assert_eq!(detail(&err)["details"]["kind"], "concurrent_scans");
        assert!(q.acquire("bob").is_ok(), "another user is not affected");
        drop(a);
        assert!(q.acquire("ana").is_ok());
    }

    #[test]
    fn reservations_refuse_a_run_that_would_overshoot_and_settle_when_it_ends() {
        let q = Quotas::new(5, 100);
        let a = q.acquire("ana").unwrap();
        a.reserve(70).unwrap();
        let b = q.acquire("ana").unwrap();
        // 70 held: 40 more would pass 100.
        let err = b.reserve(40).unwrap_err();
        assert_eq!(detail(&err)["details"]["kind"], "daily_bytes");
        b.reserve(30).unwrap();
        // The first run read only 10 of its 70: the rest is freed when it ends.
        a.record(10);
        drop(a);
        let c = q.acquire("ana").unwrap();
        c.reserve(60).unwrap();
        assert!(c.reserve(1).is_err(), "10 read + 30 and 60 held = 100");
    }

    #[test]
    fn daily_bytes_refuse_at_the_cap_and_reset_the_next_day() {
        let q = Quotas::new(5, 100);
        let day = NaiveDate::from_ymd_opt(2026, 11, 22).unwrap();
        let p = q.acquire_on("ana", day).unwrap();
        p.record(60);
        drop(p);
        let p = q.acquire_on("ana", day).unwrap();
        p.record(60);
        drop(p);
        let err = q.acquire_on("ana", day).unwrap_err();
        let d = detail(&err);
        assert_eq!(
            (d["error"].as_str(), d["details"]["kind"].as_str()),
            (Some("quota_exceeded"), Some("daily_bytes"))
        );
        assert_eq!(
            (
                d["details"]["current"].as_u64(),
                d["details"]["limit"].as_u64()
            ),
            (Some(120), Some(100))
        );
        assert!(d["details"]["retry_after_seconds"].as_u64().unwrap() >= 1);
        assert!(q.acquire_on("ana", day.succ_opt().unwrap()).is_ok());
    }
}
