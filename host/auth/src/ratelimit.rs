//! Login limiting per client address and per account (fixed one-minute windows, in memory).
//!
//! An attempt is counted *before* its password is checked, under one lock for both keys, so
//! concurrent guesses cannot all pass the check before any of them is recorded. A successful
//! login gives back only its own slot: it never clears the address's other attempts (else an
//! attacker could reset the counter by logging into an account of their own between guesses)
//! nor any other account's.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Counts attempts per address and per account and refuses once either window is used up.
#[derive(Debug)]
pub struct LoginLimiter {
    max_attempts: u32,
    window: Duration,
    state: Mutex<Windows>,
}

#[derive(Debug, Default)]
struct Windows {
    by_ip: HashMap<IpAddr, Window>,
    by_account: HashMap<String, Window>,
}

#[derive(Debug, Clone, Copy)]
struct Window {
    start: Instant,
    used: u32,
}

/// Which limit refused an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitedBy {
    /// Too many attempts from this client address.
    Address,
    /// Too many attempts on this account, from anywhere.
    Account,
}

/// An attempt refused before its password was checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    /// The limit that was reached.
    pub by: LimitedBy,
    /// Seconds until the window ends.
    pub retry_after: u64,
}

/// One counted attempt; [`LoginLimiter::succeeded`] gives its slots back.
#[derive(Debug)]
#[must_use = "a successful login must hand its attempt back"]
pub struct Attempt {
    ip: IpAddr,
    account: String,
}

/// Entries kept before expired windows are swept (bounds the maps under a spray of keys).
const SWEEP_ABOVE: usize = 100_000;

impl LoginLimiter {
    /// `max_attempts` attempts per `window`, per address and per account.
    pub fn new(max_attempts: u32, window: Duration) -> Self {
        Self {
            max_attempts,
            window,
            state: Mutex::new(Windows::default()),
        }
    }

    /// Counts one attempt on `account` (an e-mail, compared case-insensitively) from `ip`,
    /// or refuses it when either window is used up; nothing is counted when refused.
    pub fn attempt(&self, ip: IpAddr, account: &str) -> Result<Attempt, Refused> {
        let account = account.trim().to_lowercase();
        let now = Instant::now();
        let mut state = self.state.lock().expect("limiter lock");
        let Windows { by_ip, by_account } = &mut *state;
        sweep(by_ip, now, self.window);
        sweep(by_account, now, self.window);
        let ip_window = current(by_ip, ip, now, self.window);
        if ip_window.used >= self.max_attempts {
            return Err(self.refused(LimitedBy::Address, ip_window, now));
        }
        let account_window = current(by_account, account.clone(), now, self.window);
        if account_window.used >= self.max_attempts {
            return Err(self.refused(LimitedBy::Account, account_window, now));
        }
        bump(by_ip, ip, 1);
        bump(by_account, account.clone(), 1);
        Ok(Attempt { ip, account })
    }

    /// Gives a successful attempt's slots back; other attempts stay counted.
    pub fn succeeded(&self, attempt: Attempt) {
        let mut state = self.state.lock().expect("limiter lock");
        bump(&mut state.by_ip, attempt.ip, -1);
        bump(&mut state.by_account, attempt.account, -1);
    }

    fn refused(&self, by: LimitedBy, window: Window, now: Instant) -> Refused {
        let left = self.window.saturating_sub(now - window.start);
        Refused {
            by,
            retry_after: left.as_secs().max(1),
        }
    }
}

/// The key's window, restarted when the old one is over.
fn current<K: Hash + Eq>(
    map: &mut HashMap<K, Window>,
    key: K,
    now: Instant,
    len: Duration,
) -> Window {
    let w = map.entry(key).or_insert(Window {
        start: now,
        used: 0,
    });
    if now - w.start >= len {
        *w = Window {
            start: now,
            used: 0,
        };
    }
    *w
}

fn bump<K: Hash + Eq>(map: &mut HashMap<K, Window>, key: K, by: i32) {
    if let Some(w) = map.get_mut(&key) {
        w.used = w.used.saturating_add_signed(by);
    }
}

fn sweep<K>(map: &mut HashMap<K, Window>, now: Instant, len: Duration) {
    if map.len() > SWEEP_ABOVE {
        map.retain(|_, w| now - w.start < len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn attempts_count_before_the_check_per_address_and_per_account() {
        let l = LoginLimiter::new(2, Duration::from_secs(60));
        let _a1 = l.attempt(ip("10.0.0.1"), "victim@x").unwrap();
        let _a2 = l.attempt(ip("10.0.0.1"), "Victim@X").unwrap();
        let refused = l.attempt(ip("10.0.0.1"), "other@x").unwrap_err();
        assert_eq!(refused.by, LimitedBy::Address);
        // Another address, same account: the account's window is used up too.
        let refused = l.attempt(ip("10.0.0.2"), "victim@x").unwrap_err();
        assert_eq!(refused.by, LimitedBy::Account);
        assert!(refused.retry_after >= 1);
        // Another address, another account: free.
        assert!(l.attempt(ip("10.0.0.2"), "someone@x").is_ok());
    }

    #[test]
    fn a_success_returns_only_its_own_slot() {
        let l = LoginLimiter::new(3, Duration::from_secs(60));
        let attacker = ip("10.0.0.9");
        let _g1 = l.attempt(attacker, "victim@x").unwrap();
        let _g2 = l.attempt(attacker, "victim@x").unwrap();
        // A correct login to the attacker's own account...
        let own = l.attempt(attacker, "me@x").unwrap();
        l.succeeded(own);
        // ...frees its own slot only: one more guess, then refused.
        let _g3 = l.attempt(attacker, "victim@x").unwrap();
        assert!(l.attempt(attacker, "victim@x").is_err());
        assert!(l.attempt(attacker, "me@x").is_err());
    }
}
