//! Helpers shared by the benchmarks: a release `svc-server` on a loopback port.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use reqwest::blocking::Client;

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
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(SERVER)
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
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap_or_default();
        // Fields after the command name (which may hold spaces) start at its closing paren.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.split_whitespace().collect())
            .unwrap_or_default();
        let ticks = |i: usize| {
            fields
                .get(i)
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        // utime and stime are fields 14 and 15 of the line, 12 and 13 after the paren.
        (ticks(11) + ticks(12)) / 100.0
    }

    pub fn peak_rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find(|l| l.starts_with("VmHWM:"))
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

/// The value at fraction `p` (0–1) of ascending samples.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}
