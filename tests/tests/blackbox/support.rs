//! Test harness: build and start `svc-server`, talk to it, inspect its store.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use reqwest::blocking::{Client, RequestBuilder};
use serde_json::Value;

/// Longer than the audit writer takes to store a batch on a busy test machine.
const AUDIT_SETTLE: Duration = Duration::from_millis(60);

/// Builds what the tests run — `svc-server`, the example driver library and the `svc`
/// client — once per test run, and returns the target profile directory holding them.
///
/// One cargo invocation for all three: one feature resolution, so dependencies compiled for
/// the server are reused for the driver library and the client.
fn built_artifacts() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let build = |args: &[&str]| {
            let mut command = Command::new(&cargo);
            // Cargo gives this test process the variables it sets for a crate's own build
            // (CARGO_MANIFEST_DIR and the like). Some dependencies' build scripts watch them, so
            // passing them on would make this build and the next `cargo test` rebuild those
            // crates (and everything above them) for each other, every run.
            for (key, _) in std::env::vars_os() {
                let key = key.to_string_lossy();
                if key.starts_with("CARGO_PKG_")
                    || matches!(
                        &*key,
                        "CARGO_MANIFEST_DIR"
                            | "CARGO_MANIFEST_PATH"
                            | "CARGO_CRATE_NAME"
                            | "CARGO_PRIMARY_PACKAGE"
                            | "CARGO_TARGET_TMPDIR"
                            | "CARGO_RUSTC_CURRENT_DIR"
                    )
                {
                    command.env_remove(&*key);
                }
            }
            let status = command
                .args(["build", "--quiet"])
                .args(args)
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .status()
                .expect("run cargo build");
            assert!(status.success(), "cargo build {args:?} failed");
        };
        build(&[
            "-p",
            "svc-host",
            "-p",
            "svc-example-csv-driver",
            "-p",
            "svc-cli",
            "--bin",
            "svc-server",
            "--bin",
            "svc",
            "--lib",
        ]);
        // target/<profile>/deps/<this test> -> target/<profile>
        let exe = std::env::current_exe().unwrap();
        exe.parent().unwrap().parent().unwrap().to_path_buf()
    })
    .clone()
}

/// Path of the `svc-server` binary.
pub fn server_bin() -> PathBuf {
    built_artifacts().join("svc-server")
}

/// Path of the `svc` client binary.
pub fn svc_bin() -> PathBuf {
    built_artifacts().join("svc")
}

/// Path of the example CSV driver built as a shared library.
pub fn csv_driver_lib() -> PathBuf {
    built_artifacts().join(format!(
        "{}svc_example_csv_driver{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    ))
}

/// A temporary directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new() -> Self {
        let p = std::env::temp_dir().join(format!("svc-bb-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&p).unwrap();
        Self(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A small tmpfs mounted over a directory, standing for a full disk; unmounted when the
/// test ends, however it ends.
pub struct SmallDisk(PathBuf);

impl SmallDisk {
    /// Mounts `size` (a tmpfs size such as `256k`) over `dir`; None without the right to
    /// mount (not root), and the caller skips its full-disk checks with a notice.
    pub fn mount(dir: &Path, size: &str) -> Option<Self> {
        std::fs::create_dir_all(dir).unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            eprintln!(
                "notice: cannot mount a small tmpfs (needs root); a full-disk check is skipped"
            );
        }
        mounted.then(|| Self(dir.to_path_buf()))
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// Which store backend a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// A fresh, empty PostgreSQL database URL, or None (with a notice) when not configured.
pub fn fresh_postgres_url() -> Option<String> {
    let Ok(admin) = std::env::var("SVC_TEST_DATABASE_URL") else {
        eprintln!("notice: SVC_TEST_DATABASE_URL unset; skipping the PostgreSQL run");
        return None;
    };
    let name = format!("svc_bb_{}", uuid::Uuid::new_v4().simple());
    exec_store(&admin, &[&format!("CREATE DATABASE {name}")]);
    let base = admin.rsplit_once('/').map(|(b, _)| b).unwrap();
    Some(format!("{base}/{name}"))
}

/// A new, empty MySQL/MariaDB database on the server at `SVC_TEST_MYSQL_URL` (which `.ci/run`
/// sets when one answers); `None`, with a notice, when unset.
pub fn fresh_mysql_url() -> Option<String> {
    let Ok(admin) = std::env::var("SVC_TEST_MYSQL_URL") else {
        eprintln!("notice: SVC_TEST_MYSQL_URL unset; skipping the MySQL/MariaDB run");
        return None;
    };
    let name = format!("svc_bb_{}", uuid::Uuid::new_v4().simple());
    exec_store(&admin, &[&format!("CREATE DATABASE {name}")]);
    let base = admin.rsplit_once('/').map(|(b, _)| b).unwrap();
    Some(format!("{base}/{name}"))
}

/// The backends to run a test on: SQLite always, PostgreSQL when configured.
pub fn backends() -> Vec<Backend> {
    let mut v = vec![Backend::Sqlite];
    if std::env::var("SVC_TEST_DATABASE_URL").is_ok() {
        v.push(Backend::Postgres);
    } else {
        eprintln!("notice: SVC_TEST_DATABASE_URL unset; skipping the PostgreSQL run");
    }
    v
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A running server with its own data directory.
pub struct Server {
    child: Option<Child>,
    pub base: String,
    pub dir: TempDir,
    pub database_url: Option<String>,
    env: Vec<(String, String)>,
    pub http: Client,
}

impl Server {
    /// A server on SQLite with default settings.
    pub fn start() -> Self {
        Self::start_with(Backend::Sqlite, &[])
    }

    /// A server on the given backend with extra environment variables.
    pub fn start_with(backend: Backend, env: &[(&str, &str)]) -> Self {
        Self::start_prepared(backend, env, |_| {})
    }

    /// Like [`Server::start_with`], letting `prepare` fill the data directory before start.
    pub fn start_prepared(
        backend: Backend,
        env: &[(&str, &str)],
        prepare: impl FnOnce(&Path),
    ) -> Self {
        let database_url = match backend {
            Backend::Sqlite => None,
            Backend::Postgres => Some(fresh_postgres_url().expect("postgres configured")),
        };
        Self::start_on(database_url, env, prepare)
    }

    /// A second replica: its own data directory, the same store as `other` (on SQLite, the
    /// file in `other`'s data directory).
    pub fn start_beside(other: &Server, env: &[(&str, &str)]) -> Self {
        Self::start_on(Some(other.store_url()), env, |_| {})
    }

    fn start_on(
        database_url: Option<String>,
        env: &[(&str, &str)],
        prepare: impl FnOnce(&Path),
    ) -> Self {
        let mut s = Server {
            child: None,
            base: String::new(),
            dir: TempDir::new(),
            database_url,
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            http: Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .unwrap(),
        };
        prepare(&s.dir.0);
        s.spawn();
        s
    }

    fn command(&self) -> Command {
        let mut c = Command::new(server_bin());
        c.env_remove("SVC_DATABASE_URL")
            .env_remove("SVC_JWT_SECRET")
            .env_remove("SVC_LISTEN")
            // Tests that exercise the scheduler turn it on; elsewhere its runs would only
            // add audit rows at unpredictable moments.
            .env("SCHEDULER_ENABLED", "false");
        c.arg("--data-dir").arg(&self.dir.0);
        if let Some(url) = &self.database_url {
            c.arg("--database-url").arg(url);
        }
        for (k, v) in &self.env {
            c.env(k, v);
        }
        c
    }

    fn spawn(&mut self) {
        let port = free_port();
        self.base = format!("http://127.0.0.1:{port}");
        let log = std::fs::File::create(self.dir.0.join("server.log")).unwrap();
        let child = self
            .command()
            .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start svc-server");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(r) = self.http.get(self.url("/api/health")).send() {
                if r.status().is_success() {
                    return;
                }
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("svc-server exited with {status}: {}", self.log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("svc-server did not become healthy: {}", self.log());
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.0.join("server.log")).unwrap_or_default()
    }

    /// Stops the server with SIGTERM and waits for it; returns its exit status success.
    pub fn stop(&mut self) -> bool {
        let Some(mut child) = self.child.take() else {
            return true;
        };
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Some(status) = child.try_wait().unwrap() {
                return status.success();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        false
    }

    /// Peak resident memory of the server process so far, in bytes (Linux `VmHWM`).
    pub fn peak_rss(&self) -> Option<u64> {
        self.proc_status_kib("VmHWM:")
    }

    /// Resident memory of the server process now, in bytes (Linux `VmRSS`).
    pub fn rss(&self) -> Option<u64> {
        self.proc_status_kib("VmRSS:")
    }

    fn proc_status_kib(&self, field: &str) -> Option<u64> {
        let pid = self.child.as_ref()?.id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let line = status.lines().find(|l| l.starts_with(field))?;
        line.split_whitespace()
            .nth(1)?
            .parse::<u64>()
            .ok()
            .map(|kib| kib << 10)
    }

    /// CPU time the server process has used so far (user + system), in seconds.
    pub fn cpu_seconds(&self) -> Option<f64> {
        let pid = self.child.as_ref()?.id();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // Fields after the command name (which may hold spaces) start at field 3.
        let rest = &stat[stat.rfind(')')? + 2..];
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks: u64 =
            fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
        // Linux reports in clock ticks of 1/100 s (USER_HZ) on every supported platform.
        Some(ticks as f64 / 100.0)
    }

    /// Kills the server with SIGKILL (no shutdown work at all) and waits for it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts a stopped server again on the same data directory and store.
    pub fn start_again(&mut self) {
        self.start_again_with(&[]);
    }

    /// Like [`Server::start_again`], with these environment variables changed.
    pub fn start_again_with(&mut self, env: &[(&str, &str)]) {
        assert!(self.child.is_none(), "the server is running");
        for (k, v) in env {
            self.env.retain(|(name, _)| name != k);
            self.env.push((k.to_string(), v.to_string()));
        }
        self.spawn();
    }

    /// Restarts the server on the same data directory and store.
    pub fn restart(&mut self) {
        assert!(self.stop(), "clean shutdown: {}", self.log());
        self.spawn();
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Runs an `svc-server` shell command against this server's store.
    pub fn cli(&self, args: &[&str], stdin: Option<&str>) -> Output {
        let mut c = self.command();
        c.args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().unwrap();
        {
            use std::io::Write;
            let mut pipe = child.stdin.take().unwrap();
            if let Some(s) = stdin {
                pipe.write_all(s.as_bytes()).unwrap();
            }
        }
        child.wait_with_output().unwrap()
    }

    /// Like [`Server::cli`], asserting success and returning trimmed stdout.
    pub fn cli_ok(&self, args: &[&str]) -> String {
        let out = self.cli(args, None);
        assert!(
            out.status.success(),
            "{args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }

    /// A fresh PAT for the seeded administrator.
    pub fn admin_token(&self) -> String {
        self.cli_ok(&["tokens", "create", "--email", "admin@localhost"])
    }

    /// Creates a user (optionally admin, optionally with a password) and returns a PAT for them.
    pub fn user_token(&self, email: &str, admin: bool) -> String {
        let mut args = vec!["users", "create", "--email", email];
        if admin {
            args.push("--admin");
        }
        self.cli_ok(&args);
        self.cli_ok(&["tokens", "create", "--email", email])
    }

    pub fn send(&self, rb: RequestBuilder) -> (u16, Value) {
        let r = rb.send().unwrap();
        let status = r.status().as_u16();
        let text = r.text().unwrap();
        let body = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        (status, body)
    }

    /// Sends only a POST's head, announcing `content_length` body bytes that never come, and
    /// returns the raw answer. For limits that must refuse before reading the body: a client
    /// that really sent an oversized body could see its write fail (the server closes early)
    /// before it reads the 413.
    pub fn post_head_only(
        &self,
        path: &str,
        headers: &[(&str, &str)],
        content_length: u64,
    ) -> String {
        use std::io::{Read, Write};
        let addr = self.base.trim_start_matches("http://");
        let mut tcp = std::net::TcpStream::connect(addr).unwrap();
        let mut head = format!("POST {path} HTTP/1.1\r\nHost: {addr}\r\n");
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str(&format!(
            "Content-Length: {content_length}\r\nConnection: close\r\n\r\n"
        ));
        tcp.write_all(head.as_bytes()).unwrap();
        let mut answer = String::new();
        let _ = tcp.read_to_string(&mut answer);
        answer
    }

    pub fn get_json(&self, path: &str, token: &str) -> (u16, Value) {
        self.send(self.http.get(self.url(path)).bearer_auth(token))
    }

    pub fn post_json(&self, path: &str, token: &str, body: &Value) -> (u16, Value) {
        self.send(self.http.post(self.url(path)).bearer_auth(token).json(body))
    }

    pub fn put_json(&self, path: &str, token: &str, body: &Value) -> (u16, Value) {
        self.send(self.http.put(self.url(path)).bearer_auth(token).json(body))
    }

    pub fn patch_json(&self, path: &str, token: &str, body: &Value) -> (u16, Value) {
        self.send(
            self.http
                .patch(self.url(path))
                .bearer_auth(token)
                .json(body),
        )
    }

    pub fn delete(&self, path: &str, token: &str) -> (u16, Value) {
        self.send(self.http.delete(self.url(path)).bearer_auth(token))
    }

    /// The catalog row for `id` as `token` sees it, if listed.
    pub fn catalog_row(&self, token: &str, id: &str) -> Option<Value> {
        let (status, cat) = self.get_json("/api/v2/catalog", token);
        assert_eq!(status, 200, "{cat}");
        cat["tables"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["id"] == id)
            .cloned()
    }

    /// The store URL the server uses.
    pub fn store_url(&self) -> String {
        self.database_url
            .clone()
            .unwrap_or_else(|| format!("sqlite://{}", self.dir.0.join("state/svc.db").display()))
    }

    /// Runs a query against the server's store and returns the rows as JSON objects.
    pub fn query(&self, sql: &str) -> Vec<Value> {
        query_store(&self.store_url(), sql)
    }

    /// Audit rows for an action, polling until at least `min` exist, then once more a
    /// moment later. The writer stores rows in batches shortly after a request answers, so
    /// "at least `min`" can be met by older rows of the action while the newest is still
    /// queued: the second read is the one that has it.
    pub fn audit_rows(&self, action: &str, min: usize) -> Vec<Value> {
        let sql = format!(
            "SELECT id, user_id, action, resource, params, params_before, client_ip, client_kind, \
             correlation_id, result FROM audit_log WHERE action = '{action}' ORDER BY timestamp"
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let rows = self.query(&sql);
            if rows.len() >= min {
                std::thread::sleep(AUDIT_SETTLE);
                return self.query(&sql);
            }
            if Instant::now() > deadline {
                return rows;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Runs SQL against a store URL (SQLite or PostgreSQL) and returns rows as JSON objects with
/// every value read as text.
pub fn query_store(url: &str, sql: &str) -> Vec<Value> {
    run_async(async {
        use sqlx::{Column, Row};
        sqlx::any::install_default_drivers();
        let pool = sqlx::AnyPool::connect(url).await.unwrap();
        let rows = sqlx::query(sql)
            .fetch_all(&pool)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        let out = rows
            .iter()
            .map(|r| {
                let mut m = serde_json::Map::new();
                for (i, c) in r.columns().iter().enumerate() {
                    let v = r
                        .try_get::<Option<String>, _>(i)
                        .map(|s| s.map(Value::String).unwrap_or(Value::Null))
                        .or_else(|_| {
                            r.try_get::<Option<i64>, _>(i)
                                .map(|n| n.map(Value::from).unwrap_or(Value::Null))
                        })
                        .or_else(|_| {
                            r.try_get::<Option<bool>, _>(i)
                                .map(|b| b.map(Value::from).unwrap_or(Value::Null))
                        })
                        .unwrap_or(Value::Null);
                    m.insert(c.name().to_string(), v);
                }
                Value::Object(m)
            })
            .collect();
        pool.close().await;
        out
    })
}

/// Executes statements against a store URL.
pub fn exec_store(url: &str, statements: &[&str]) {
    run_async(async {
        sqlx::any::install_default_drivers();
        let pool = sqlx::AnyPool::connect(url).await.unwrap();
        for s in statements {
            sqlx::query(s)
                .execute(&pool)
                .await
                .unwrap_or_else(|e| panic!("{s}: {e}"));
        }
        pool.close().await;
    })
}

pub fn run_async<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

/// Ensures a SQLite URL's file can be created (`mode=rwc`).
pub fn sqlite_url(path: &Path) -> String {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    format!("sqlite://{}?mode=rwc", path.display())
}
