//! Helpers shared by the benchmarks: a release `svc-server` on a loopback port.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use reqwest::blocking::Client;

mod stats;
// Each bench uses some of the helpers (as with `dead_code` above).
#[allow(unused_imports)]
pub use stats::{
    children_cpu_seconds, cpu_ns_by_thread, cpu_ticks, median_interval, named_cpu_seconds,
    process_cpu_seconds, process_usage, spread, status_mib, steal_since, Usage,
};

/// The server binary Cargo built for this bench.
pub const SERVER: &str = env!("CARGO_BIN_EXE_svc-server");

/// A running server over a data directory.
pub struct Server {
    child: Child,
    pub base: String,
    dir: PathBuf,
}

impl Server {
    pub fn start(dir: &Path) -> Self {
        Self::start_with(dir, &[])
    }

    /// Starts with extra environment variables.
    pub fn start_with(dir: &Path, env: &[(&str, &str)]) -> Self {
        Self::start_on(dir, env, None)
    }

    /// Starts with extra environment variables, on the CPUs `cpus` names (a `taskset` list
    /// such as `0` or `0,1`) when given. The server sizes its runtime to the CPUs it may use.
    pub fn start_on(dir: &Path, env: &[(&str, &str)], cpus: Option<&str>) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = command_on(SERVER, cpus)
            .args([
                "--data-dir",
                dir.to_str().unwrap(),
                "serve",
                "--listen",
                &format!("127.0.0.1:{port}"),
            ])
            .env("SVC_LOG", "warn")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let base = format!("http://127.0.0.1:{port}");
        let http = Client::new();
        for _ in 0..200 {
            if http
                .get(format!("{base}/api/health"))
                .send()
                .is_ok_and(|r| r.status().is_success())
            {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Self {
            child,
            base,
            dir: dir.to_path_buf(),
        }
    }

    /// The server process's resident memory, in MiB.
    pub fn rss_mib(&self) -> f64 {
        status_mib(&self.child.id().to_string(), "VmRSS:")
    }

    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new(SERVER)
            .arg("--data-dir")
            .arg(&self.dir)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }

    /// CPU time the server has used so far (user + system), in seconds.
    pub fn cpu_seconds(&self) -> f64 {
        process_cpu_seconds(&self.child.id().to_string())
    }

    /// Its CPU split and context switches so far.
    pub fn usage(&self) -> Usage {
        process_usage(&self.child.id().to_string())
    }

    /// CPU nanoseconds its live threads have run, by thread name ([`cpu_ns_by_thread`]).
    pub fn cpu_ns_by_thread(&self) -> std::collections::BTreeMap<String, u64> {
        cpu_ns_by_thread(&self.child.id().to_string())
    }

    pub fn peak_rss_kib(&self) -> u64 {
        self.status_kib("VmHWM:")
    }

    /// Resident memory now.
    pub fn rss_kib(&self) -> u64 {
        self.status_kib("VmRSS:")
    }

    /// A `/proc/<pid>/status` field, in KiB.
    pub fn status_kib(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find(|l| l.starts_with(field))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A command running `program`, on the CPUs `cpus` names (a `taskset` list) when given.
/// taskset execs the program, so a child's pid is the program's.
pub fn command_on(program: &str, cpus: Option<&str>) -> Command {
    match cpus {
        Some(cpus) => {
            let mut c = Command::new("taskset");
            c.args(["-c", cpus, program]);
            c
        }
        None => Command::new(program),
    }
}

/// The value at fraction `p` (0–1) of ascending samples.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// What `wrk` measured.
#[derive(Debug, Clone, Copy)]
pub struct Load {
    /// Requests per second.
    pub rps: f64,
    /// 99th percentile latency, milliseconds.
    pub p99_ms: f64,
    /// Non-2xx answers and socket errors.
    pub errors: u64,
}

/// Runs `wrk -t2 -c<connections>` against `url` for `seconds` (after `warmup` seconds of the
/// same load, not measured); None when wrk is not installed.
pub fn wrk(
    url: &str,
    token: Option<&str>,
    connections: u32,
    warmup: u32,
    seconds: u32,
) -> Option<Load> {
    let run = |secs: u32| {
        let mut cmd = Command::new("wrk");
        cmd.args([
            "-t2",
            &format!("-c{connections}"),
            &format!("-d{secs}s"),
            "--latency",
        ]);
        if let Some(t) = token {
            cmd.args(["-H", &format!("Authorization: Bearer {t}")]);
        }
        cmd.arg(url).output().ok()
    };
    if warmup > 0 {
        run(warmup)?;
    }
    let out = run(seconds)?;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let field = |prefix: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(prefix))
            .and_then(|l| l.split_whitespace().nth(1).map(str::to_owned))
    };
    let rps = field("Requests/sec")?.parse().ok()?;
    let p99 = field("99%")?;
    let p99_ms = if let Some(us) = p99.strip_suffix("us") {
        us.parse::<f64>().ok()? / 1e3
    } else if let Some(ms) = p99.strip_suffix("ms") {
        ms.parse().ok()?
    } else {
        p99.strip_suffix('s')?.parse::<f64>().ok()? * 1e3
    };
    let errors = text
        .lines()
        .filter(|l| l.contains("Non-2xx") || l.contains("Socket errors"))
        .flat_map(|l| l.split(|c: char| !c.is_ascii_digit()))
        .filter_map(|n| n.parse::<u64>().ok())
        .sum();
    Some(Load {
        rps,
        p99_ms,
        errors,
    })
}

/// A new SQLite store in `dir` with its system groups and the user `analyst@example.com`,
/// with the runtime to go on using it on.
pub fn store_with_analyst(
    dir: &Path,
) -> (
    tokio::runtime::Runtime,
    svc_store::Store,
    svc_store::users::User,
) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (store, user) = rt.block_on(async {
        let store = svc_store::Store::open(&svc_store::default_sqlite_url(dir))
            .await
            .unwrap();
        store.seed_system_groups().await.unwrap();
        let user = store
            .create_user("analyst@example.com", None, None)
            .await
            .unwrap();
        (store, user)
    });
    (rt, store, user)
}
