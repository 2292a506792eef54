//! Failed-login limiting per client address (fixed one-minute windows, in memory).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Counts failures per address and refuses further attempts once a window is exhausted.
#[derive(Debug)]
pub struct LoginLimiter {
    max_failures: u32,
    window: Duration,
    state: Mutex<HashMap<IpAddr, (Instant, u32)>>,
}

impl LoginLimiter {
    /// `max_failures` failed attempts per `window` per address.
    pub fn new(max_failures: u32, window: Duration) -> Self {
        Self {
            max_failures,
            window,
            state: Mutex::new(HashMap::new()),
        }
    }

    /// `Err(seconds to wait)` when the address has used up its window.
    pub fn check(&self, ip: IpAddr) -> Result<(), u64> {
        let state = self.state.lock().expect("limiter lock");
        match state.get(&ip) {
            Some((start, n)) if *n >= self.max_failures && start.elapsed() < self.window => {
                Err((self.window - start.elapsed()).as_secs().max(1))
            }
            _ => Ok(()),
        }
    }

    /// Records one failed attempt.
    pub fn failed(&self, ip: IpAddr) {
        let mut state = self.state.lock().expect("limiter lock");
        if state.len() > 100_000 {
            let window = self.window;
            state.retain(|_, (start, _)| start.elapsed() < window);
        }
        let entry = state.entry(ip).or_insert((Instant::now(), 0));
        if entry.0.elapsed() >= self.window {
            *entry = (Instant::now(), 0);
        }
        entry.1 += 1;
    }

    /// Forgets an address's failures after a successful login.
    pub fn succeeded(&self, ip: IpAddr) {
        self.state.lock().expect("limiter lock").remove(&ip);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_after_the_limit_and_only_that_address() {
        let l = LoginLimiter::new(2, Duration::from_secs(60));
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        l.failed(a);
        assert!(l.check(a).is_ok());
        l.failed(a);
        assert!(l.check(a).is_err());
        assert!(l.check(b).is_ok());
        l.succeeded(a);
        assert!(l.check(a).is_ok());
    }
}
