//! Figures about a run that need nothing but the standard library, so that benches of
//! other crates can include this file too (`#[path]`): the machine's steal and the spread
//! of repeated measurements, and a process's memory.

/// A field of a process's `/proc/<process>/status` (`VmRSS:`, `VmHWM:`…), in MiB; 0 when
/// unreadable. `process` is a pid or `self`.
pub fn status_mib(process: &str, field: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{process}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

/// The machine's CPU time counters (`/proc/stat`): (steal, total) in ticks.
pub fn cpu_ticks() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let fields: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    (fields.get(7).copied().unwrap_or(0), fields.iter().sum())
}

/// Steal since `since` (an earlier [`cpu_ticks`]), in percent of all CPU time.
pub fn steal_since(since: (u64, u64)) -> f64 {
    let now = cpu_ticks();
    let total = now.1.saturating_sub(since.1).max(1);
    100.0 * now.0.saturating_sub(since.0) as f64 / total as f64
}

/// Median (the mean of the middle two of an even count), min and max of samples.
pub fn spread(samples: &[f64]) -> (f64, f64, f64) {
    let mut s = samples.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let n = s.len();
    let median = if n.is_multiple_of(2) {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    } else {
        s[n / 2]
    };
    (median, s[0], s[n - 1])
}
