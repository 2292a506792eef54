//! The BigQuery-compatible emulator (`bqemulator` from PyPI) on loopback ports.
//!
//! Python comes from `$SVC_TEST_VENV` (default `~/.cache/svc-venv`, which `.ci/run` creates).
//! DuckDB's `spatial` extension cannot be downloaded here, so a launcher replaces its loader
//! with a no-op before starting the emulator (GEOGRAPHY is not needed). When the emulator
//! cannot start, [`Emulator::start`] prints a notice and returns None, and the caller skips.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const LAUNCHER: &str = "\
import sys
import bqemulator.storage.engine as engine
engine.DuckDBEngine._load_spatial = lambda self, *a, **k: None
from bqemulator.cli import main
sys.exit(main())
";

/// The emulator's project.
pub const PROJECT: &str = "demo-proj";

/// A running emulator, stopped on drop.
pub struct Emulator {
    child: Child,
    /// The API root to configure as the warehouse endpoint.
    pub endpoint: String,
    http: reqwest::blocking::Client,
    _dir: crate::support::TempDir,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Emulator {
    /// Starts an emulator, or says why not and returns None.
    pub fn start() -> Option<Self> {
        let venv = std::env::var_os("SVC_TEST_VENV")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/svc-venv")
            });
        let python = venv.join("bin/python");
        if !python.exists() {
            eprintln!(
                "notice: bqemulator tests skipped: no {} (run .ci/run once to create it)",
                python.display()
            );
            return None;
        }
        let dir = crate::support::TempDir::new();
        let launcher = dir.0.join("launch.py");
        std::fs::write(&launcher, LAUNCHER).unwrap();
        let (rest, grpc) = (free_port(), free_port());
        let child = Command::new(&python)
            .arg(&launcher)
            .args([
                "start",
                "--rest-port",
                &rest.to_string(),
                "--grpc-port",
                &grpc.to_string(),
                "--project",
                PROJECT,
            ])
            .current_dir(&dir.0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let child = match child {
            Ok(c) => c,
            Err(e) => {
                eprintln!(
                    "notice: bqemulator tests skipped: cannot run {}: {e}",
                    python.display()
                );
                return None;
            }
        };
        let emulator = Self {
            child,
            endpoint: format!("http://127.0.0.1:{rest}"),
            http: reqwest::blocking::Client::new(),
            _dir: dir,
        };
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(60) {
            let ready = emulator
                .http
                .get(format!(
                    "{}/bigquery/v2/projects/{PROJECT}/datasets",
                    emulator.endpoint
                ))
                .send()
                .is_ok_and(|r| r.status().is_success());
            if ready {
                return Some(emulator);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        eprintln!("notice: bqemulator tests skipped: the emulator did not answer within 60 s");
        None
    }

    fn base(&self) -> String {
        format!("{}/bigquery/v2/projects/{PROJECT}", self.endpoint)
    }

    /// Creates a dataset.
    pub fn dataset(&self, name: &str) {
        let r = self
            .http
            .post(format!("{}/datasets", self.base()))
            .json(&json!({"datasetReference": {"projectId": PROJECT, "datasetId": name}}))
            .send()
            .unwrap();
        assert!(r.status().is_success(), "{}", r.text().unwrap());
    }

    /// Runs SQL (DDL, DML or a query) and returns the response.
    pub fn sql(&self, sql: &str) -> Value {
        let r = self
            .http
            .post(format!("{}/queries", self.base()))
            .json(&json!({"query": sql, "useLegacySql": false}))
            .send()
            .unwrap();
        let status = r.status();
        let body: Value = r.json().unwrap();
        assert!(status.is_success(), "{sql}: {body}");
        body
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
