//! The BigQuery-compatible emulator (`bqemulator` from PyPI) on loopback ports.
//!
//! Python comes from `$SVC_TEST_VENV` (default `~/.cache/svc-venv`, which `.ci/run` creates).
//! DuckDB's `spatial` extension cannot be downloaded here, so a launcher replaces its loader
//! with a no-op before starting the emulator (GEOGRAPHY is not needed). When the emulator
//! cannot start, [`Emulator::start`] prints a notice and returns None, and the caller skips.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
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
        let (rest, grpc) = (crate::support::free_port(), crate::support::free_port());
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

/// What the fault-injecting proxy does instead of forwarding.
#[derive(Debug, Clone)]
pub enum Fault {
    /// Everything is forwarded (the proxy only records requests).
    None,
    /// Dry runs report this many bytes; everything else is forwarded.
    DryRunBytes(u64),
    /// Every request gets this status and error message.
    Status(u16, &'static str),
    /// Result pages (`getQueryResults`, a GET) are forwarded after this delay.
    SlowPages(Duration),
}

/// A small HTTP proxy between the server and the emulator that injects faults the emulator
/// cannot produce (dry-run byte counts, 403s, 5xx, slow pages) and records request bodies.
pub struct FaultProxy {
    /// The address to configure as the warehouse endpoint.
    pub endpoint: String,
    fault: Arc<Mutex<Fault>>,
    requests: Arc<Mutex<Vec<String>>>,
}

impl FaultProxy {
    /// Proxies to `upstream`, applying `fault`.
    pub fn start(upstream: &str, fault: Fault) -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let upstream = upstream.to_owned();
        let fault = Arc::new(Mutex::new(fault));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let (f, r) = (fault.clone(), requests.clone());
        std::thread::spawn(move || {
            let http = reqwest::blocking::Client::new();
            for stream in listener.incoming().flatten() {
                let (http, upstream, fault, requests) =
                    (http.clone(), upstream.clone(), f.clone(), r.clone());
                std::thread::spawn(move || serve(stream, &http, &upstream, &fault, &requests));
            }
        });
        Self {
            endpoint,
            fault,
            requests,
        }
    }

    /// Changes what the proxy does from the next request on.
    pub fn set(&self, fault: Fault) {
        *self.fault.lock().unwrap() = fault;
    }

    /// `METHOD path [authorization] body` of every request so far.
    pub fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

fn serve(
    mut stream: std::net::TcpStream,
    http: &reqwest::blocking::Client,
    upstream: &str,
    fault: &Mutex<Fault>,
    requests: &Mutex<Vec<String>>,
) {
    use std::io::{BufRead, BufReader, Read, Write};
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = request_line.split_whitespace();
        let (method, path) = (
            parts.next().unwrap_or("GET").to_owned(),
            parts.next().unwrap_or("/").to_owned(),
        );
        let mut length = 0usize;
        let mut authorization = String::new();
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            if line.trim().is_empty() {
                break;
            }
            if let Some((k, v)) = line.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    length = v.trim().parse().unwrap_or(0);
                }
                if k.eq_ignore_ascii_case("authorization") {
                    authorization = v.trim().to_owned();
                }
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        requests.lock().unwrap().push(format!(
            "{method} {path} [{authorization}] {}",
            String::from_utf8_lossy(&body)
        ));
        let fault = fault.lock().unwrap().clone();
        let forward = |body: Vec<u8>| {
            let url = format!("{upstream}{path}");
            let req = match method.as_str() {
                "POST" => http
                    .post(url)
                    .header("content-type", "application/json")
                    .body(body),
                _ => http.get(url),
            };
            let r = req.send().unwrap();
            (r.status().as_u16(), r.text().unwrap())
        };
        let (status, reply) = match fault {
            Fault::Status(code, message) => (
                code,
                json!({"error": {"code": code, "message": message}}).to_string(),
            ),
            Fault::DryRunBytes(bytes) if String::from_utf8_lossy(&body).contains("\"dryRun\":true") => (
                200,
                json!({"kind": "bigquery#queryResponse", "jobReference": {"projectId": PROJECT},
                       "totalBytesProcessed": bytes.to_string(), "jobComplete": true})
                .to_string(),
            ),
            Fault::SlowPages(delay) if method == "GET" => {
                std::thread::sleep(delay);
                forward(body)
            }
            Fault::None | Fault::DryRunBytes(_) | Fault::SlowPages(_) => forward(body),
        };
        let head = format!(
            "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
            reply.len()
        );
        if stream.write_all(head.as_bytes()).is_err() || stream.write_all(reply.as_bytes()).is_err()
        {
            return;
        }
    }
}
