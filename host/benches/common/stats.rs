//! Figures about a run that need nothing but the standard library, so that benches of
//! other crates can include this file too (`#[path]`): the machine's steal and the spread
//! of repeated measurements, and a process's memory and CPU time.

// Each bench that includes this file uses some of it.
#![allow(dead_code)]

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

/// Fields of `/proc/<process>/stat` after the command name (which may hold spaces), so
/// the first is the state (field 3 of the line).
fn stat_fields(process: &str) -> Vec<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{process}/stat")).unwrap_or_default();
    stat.rsplit_once(')')
        .map(|(_, rest)| {
            rest.split_whitespace()
                .map(|v| v.parse().unwrap_or(0))
                .collect()
        })
        .unwrap_or_default()
}

/// Clock ticks a second of `/proc` CPU times (USER_HZ, 100 on Linux everywhere).
const TICKS: f64 = 100.0;

/// CPU time (user + system) a process has used, in seconds; 0 when it is gone. `process` is
/// a pid, `self`, or `<pid>/task/<tid>` for one of its threads.
pub fn process_cpu_seconds(process: &str) -> f64 {
    let (user, sys) = user_and_sys_seconds(process);
    user + sys
}

/// A process's user and kernel CPU seconds: `utime` and `stime`, fields 14 and 15 of its
/// `stat` line.
fn user_and_sys_seconds(process: &str) -> (f64, f64) {
    user_and_sys_of(&stat_fields(process))
}

/// User and kernel CPU seconds out of a stat line's fields.
fn user_and_sys_of(f: &[u64]) -> (f64, f64) {
    let seconds = |i: usize| *f.get(i).unwrap_or(&0) as f64 / TICKS;
    (seconds(11), seconds(12))
}

/// How a process has run: its CPU time split into user and kernel, and how often its live
/// threads were switched out (each wait on a lock or a socket, each preemption).
#[derive(Debug, Clone, Copy, Default)]
pub struct Usage {
    /// User CPU seconds, every thread's (the ended ones' too).
    pub user: f64,
    /// Kernel CPU seconds, every thread's.
    pub sys: f64,
    /// Context switches of the threads alive now, voluntary and not.
    pub switches: u64,
    /// Minor page faults, every thread's: memory the allocator gave back to the kernel and
    /// took again shows here, not in a profile of user space.
    pub faults: u64,
}

/// How `process` has run so far ([`Usage`]); zeros when it is gone.
pub fn process_usage(process: &str) -> Usage {
    let fields = stat_fields(process);
    let (user, sys) = user_and_sys_of(&fields);
    // minflt is the stat line's tenth field.
    let faults = fields.get(7).copied().unwrap_or(0);
    let switches = threads(process)
        .map(|task| {
            let status = std::fs::read_to_string(format!("/proc/{process}/task/{task}/status"))
                .unwrap_or_default();
            status
                .lines()
                .filter(|l| l.contains("ctxt_switches:"))
                .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .sum::<u64>()
        })
        .sum();
    Usage {
        user,
        sys,
        switches,
        faults,
    }
}

/// CPU nanoseconds the live threads of `process` have run, summed by thread name (`comm`):
/// where a process's CPU goes, from `schedstat`'s nanoseconds (`stat` counts 10 ms ticks,
/// too coarse for a thread that runs a few milliseconds a second). A thread that ends takes
/// its time with it.
pub fn cpu_ns_by_thread(process: &str) -> std::collections::BTreeMap<String, u64> {
    let mut groups = std::collections::BTreeMap::new();
    for task in threads(process) {
        let at = format!("/proc/{process}/task/{task}");
        let (Ok(comm), Ok(schedstat)) = (
            std::fs::read_to_string(format!("{at}/comm")),
            std::fs::read_to_string(format!("{at}/schedstat")),
        ) else {
            continue;
        };
        // schedstat: time on the CPU (ns), time waiting to run (ns), slices.
        let ran: u64 = schedstat
            .split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        *groups.entry(comm.trim_end().to_owned()).or_insert(0) += ran;
    }
    groups
}

/// The ids of a process's live threads.
fn threads(process: &str) -> impl Iterator<Item = String> {
    std::fs::read_dir(format!("/proc/{process}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().into_string().ok())
}

/// CPU time of the children this process has waited for (psql, python…), in seconds.
pub fn children_cpu_seconds() -> f64 {
    let f = stat_fields("self");
    // cutime and cstime are fields 16 and 17.
    (f.get(13).unwrap_or(&0) + f.get(14).unwrap_or(&0)) as f64 / TICKS
}

/// CPU time every process named `name` has used, with what its exited children used (as
/// their parents waited for them), in seconds. For PostgreSQL this counts every backend,
/// the ones that ended too: the postmaster waits for each, so its children's time holds
/// theirs. A difference of two readings is what the server spent in between.
pub fn named_cpu_seconds(name: &str) -> f64 {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0.0;
    };
    let mut ticks = 0;
    for entry in dir.flatten() {
        let pid = entry.file_name();
        let Some(pid) = pid
            .to_str()
            .filter(|p| p.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        if comm.trim_end() != name {
            continue;
        }
        let f = stat_fields(pid);
        ticks += f.iter().skip(11).take(4).sum::<u64>();
    }
    ticks as f64 / TICKS
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

/// A distribution-free 95 % confidence interval for the median of samples: the order
/// statistics the binomial distribution puts outside with at most 2.5 % each side. Needs no
/// assumption about how the samples spread, which for wrk rounds on a shared machine is
/// anything but normal. None under six samples, where no such interval exists.
pub fn median_interval(samples: &[f64]) -> Option<(f64, f64)> {
    let n = samples.len();
    if n < 6 {
        return None;
    }
    let mut s = samples.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    // The largest k with P(Binomial(n, ½) < k) ≤ 2.5 %: [s(k), s(n+1−k)], 1-based.
    let (mut below, mut term, mut k) = (0.0, 0.5f64.powi(n as i32), 0);
    while below + term <= 0.025 {
        below += term;
        term *= (n - k) as f64 / (k + 1) as f64;
        k += 1;
    }
    Some((s[k.max(1) - 1], s[n - k.max(1)]))
}
