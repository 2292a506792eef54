//! The `svc` client against a real server: every command, its `--json`, and its exit code on
//! each error class.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::{json, Value};

use crate::discovery::write_parquet;
use crate::support::{free_port, svc_bin, Server, SmallDisk, TempDir};

/// Runs `svc` with its own config directory and no inherited server or token.
pub(crate) fn svc(config: &Path, args: &[&str]) -> Output {
    svc_input(config, args, "")
}

/// Like [`svc`], with `input` on stdin.
fn svc_input(config: &Path, args: &[&str], input: &str) -> Output {
    let mut child = svc_command(config, args)
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// `svc` with this config directory and no ambient server or token; output captured.
pub(crate) fn svc_command(config: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(svc_bin());
    c.args(args)
        .env("SVC_CONFIG_DIR", config)
        .env("NO_COLOR", "1")
        .env_remove("SVC_SERVER")
        .env_remove("SVC_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Runs `svc` with its standard output already closed by the reader (as `svc … | head` ends).
fn svc_closed_stdout(config: &Path, args: &[&str]) -> Output {
    let mut child = svc_command(config, args)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    // The only reader goes away before svc writes: its first write meets a closed pipe.
    drop(child.stdout.take());
    child.wait_with_output().unwrap()
}

pub(crate) fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

pub(crate) fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub(crate) fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Rows in a parquet file.
pub(crate) fn parquet_rows(path: &Path) -> usize {
    svc_plugin_api::datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
        std::fs::File::open(path).unwrap(),
    )
    .unwrap()
    .build()
    .unwrap()
    .map(|b| b.unwrap().num_rows())
    .sum()
}

/// `svc … --json`, which must succeed and print JSON.
fn json_of(config: &Path, args: &[&str]) -> Value {
    let o = svc(config, args);
    assert_eq!(code(&o), 0, "{args:?}: {}", stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{args:?}: {e}: {}", stdout(&o)))
}

#[test]
fn the_client_logs_in_discovers_queries_and_administers() {
    let s = Server::start();
    write_parquet(&s.dir.0, "local", "orders", 50, "o");
    let admin = s.admin_token();
    let home = TempDir::new();
    let cfg = home.0.as_path();

    // Before any configuration; a server that is down; a refused token.
    let o = svc(cfg, &["catalog"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("no server configured"),
        "{}",
        stderr(&o)
    );
    // A server address without a scheme is a usage error (2) that says what to write.
    let o = svc(
        cfg,
        &["--server", "localhost:8000", "--token", "x", "catalog"],
    );
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("no scheme") && stderr(&o).contains("http://localhost:8000"),
        "{}",
        stderr(&o)
    );
    let down = format!("http://127.0.0.1:{}", free_port());
    let o = svc(cfg, &["--server", &down, "--token", "x", "catalog"]);
    assert_eq!(code(&o), 5, "{}", stderr(&o));
    assert!(stderr(&o).contains("cannot connect"), "{}", stderr(&o));
    let o = svc(
        cfg,
        &["--server", &s.base, "--token", "not-a-token", "catalog"],
    );
    assert_eq!(code(&o), 7, "{}", stderr(&o));

    // Log in with a token: checked, then saved privately.
    let o = svc(
        cfg,
        &["--server", &s.base, "--token", &admin, "auth", "login"],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(cfg.join("config.toml"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let me = json_of(cfg, &["auth", "whoami", "--json"]);
    assert_eq!(
        (&me["email"], &me["is_admin"]),
        (&json!("admin@localhost"), &json!(true))
    );

    // Tables.
    let o = svc(
        cfg,
        &[
            "admin",
            "register-table",
            "orders",
            "--source-type",
            "local",
            "--description",
            "All orders",
        ],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let tables = json_of(cfg, &["admin", "list-tables", "--json"]);
    assert!(tables["tables"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["id"] == "orders"));
    let o = svc(
        cfg,
        &[
            "admin",
            "update-table",
            "orders",
            "--description",
            "Every order",
        ],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = svc(
        cfg,
        &[
            "admin",
            "update-table",
            "orders",
            "--sync-schedule",
            "sometimes",
        ],
    );
    assert_eq!(code(&o), 9, "{}", stderr(&o));

    // Discovery.
    let cat = json_of(cfg, &["catalog", "--json"]);
    let row = cat["tables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == "orders")
        .unwrap()
        .clone();
    assert_eq!(row["description"], "Every order");
    let o = svc(cfg, &["catalog"]);
    assert!(
        stdout(&o).lines().any(|l| l.starts_with("orders ")),
        "{}",
        stdout(&o)
    );
    let schema = json_of(cfg, &["schema", "orders", "--json"]);
    assert_eq!(schema["columns"][0]["name"], "id");
    let sample = json_of(cfg, &["sample", "orders", "-n", "3", "--json"]);
    assert_eq!(sample["rows"].as_array().unwrap().len(), 3);
    let d = json_of(cfg, &["describe", "orders", "--json"]);
    assert!(d["schema"]["columns"].is_array() && d["sample"]["rows"].is_array());
    let o = svc(cfg, &["describe", "orders", "-n", "2"]);
    assert!(
        stdout(&o).contains("Table: orders") && stdout(&o).contains("o1"),
        "{}",
        stdout(&o)
    );
    let o = svc(cfg, &["sample", "nope"]);
    assert_eq!(code(&o), 8, "{}", stderr(&o));
    // An unknown table is "not found" (8) whichever command names it.
    let o = svc(cfg, &["query", "SELECT * FROM nope"]);
    assert_eq!(code(&o), 8, "{}", stderr(&o));
    assert!(stderr(&o).contains("unknown_table"), "{}", stderr(&o));
    let o = svc(cfg, &["sample", "orders", "-n", "0"]);
    assert_eq!(code(&o), 2);

    // Query: json, table, csv, a parquet file, bad SQL, bad flags.
    let q = json_of(
        cfg,
        &[
            "query",
            "SELECT id FROM orders ORDER BY id",
            "--limit",
            "5",
            "--format",
            "json",
        ],
    );
    assert_eq!(
        (q["row_count"].as_u64(), &q["truncated"]),
        (Some(5), &json!(true))
    );
    let o = svc(
        cfg,
        &[
            "query",
            "SELECT id, name FROM orders ORDER BY id",
            "--limit",
            "2",
        ],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stdout(&o).starts_with("id  name"), "{}", stdout(&o));
    assert!(stderr(&o).contains("truncated at 2 rows"), "{}", stderr(&o));
    let o = svc(
        cfg,
        &[
            "query",
            "SELECT id, name FROM orders WHERE id < 3 ORDER BY id",
            "--format",
            "csv",
        ],
    );
    assert_eq!(stdout(&o), "id,name\n0,o0\n1,o1\n2,o2\n");
    let file = home.0.join("out.parquet");
    let o = svc(
        cfg,
        &[
            "query",
            "SELECT * FROM orders",
            "--format",
            "parquet",
            "--output",
            file.to_str().unwrap(),
        ],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(parquet_rows(&file), 50);
    let sql_file = home.0.join("q.sql");
    std::fs::write(&sql_file, "SELECT count(*) AS n FROM orders").unwrap();
    let q = json_of(
        cfg,
        &[
            "query",
            "--file",
            sql_file.to_str().unwrap(),
            "--format",
            "json",
        ],
    );
    assert_eq!(q["rows"], json!([[50]]));
    let o = svc(cfg, &["query", "SELEC nonsense", "--format", "json"]);
    assert_eq!(code(&o), 9, "{}", stderr(&o));
    assert!(stderr(&o).starts_with("Error:"), "{}", stderr(&o));
    let o = svc(cfg, &["query", "SELECT 1", "--limit", "-1"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    let bad_out = home.0.join("missing-dir/x.parquet");
    let o = svc(
        cfg,
        &[
            "query",
            "SELECT 1 AS x",
            "--format",
            "parquet",
            "--output",
            bad_out.to_str().unwrap(),
        ],
    );
    assert_eq!(code(&o), 9, "{}", stderr(&o));
    assert!(!bad_out.exists());

    // Users, groups and grants; a non-admin reads what it was granted and nothing more.
    let o = svc(
        cfg,
        &["admin", "user", "add", "ana@example.com", "--name", "Ana"],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let users = json_of(cfg, &["admin", "user", "list", "--json"]);
    assert!(users
        .as_array()
        .unwrap()
        .iter()
        .any(|u| u["email"] == "ana@example.com"));
    for args in [
        &[
            "admin",
            "group",
            "create",
            "analysts",
            "--description",
            "Readers",
        ][..],
        &[
            "admin",
            "group",
            "add-member",
            "analysts",
            "ana@example.com",
        ],
        &["admin", "grant", "create", "analysts", "orders"],
    ] {
        let o = svc(cfg, args);
        assert_eq!(code(&o), 0, "{args:?}: {}", stderr(&o));
    }
    let members = json_of(cfg, &["admin", "group", "members", "analysts", "--json"]);
    assert_eq!(members[0]["email"], "ana@example.com");
    let grants = json_of(cfg, &["admin", "grant", "list", "--json"]);
    let grant = grants
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["resource_id"] == "orders")
        .unwrap()
        .clone();
    let ana = s.cli_ok(&["tokens", "create", "--email", "ana@example.com"]);
    let o = svc(cfg, &["--token", &ana, "catalog", "--json"]);
    let visible: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(visible["tables"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["id"] == "orders"));
    let o = svc(cfg, &["--token", &ana, "admin", "list-tables"]);
    assert_eq!(code(&o), 8, "{}", stderr(&o));
    let o = svc(
        cfg,
        &["admin", "grant", "delete", grant["id"].as_str().unwrap()],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = svc(
        cfg,
        &[
            "admin",
            "group",
            "remove-member",
            "analysts",
            "ana@example.com",
        ],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = svc(cfg, &["admin", "user", "deactivate", "ana@example.com"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = svc(cfg, &["--token", &ana, "catalog"]);
    assert_eq!(code(&o), 7, "a deactivated user's token: {}", stderr(&o));
    let o = svc(cfg, &["admin", "user", "activate", "ana@example.com"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));

    // Administrators list any user's tokens and revoke one; it stops working at once.
    let page = json_of(
        cfg,
        &[
            "admin",
            "token",
            "list",
            "--user",
            "ana@example.com",
            "--json",
        ],
    );
    assert_eq!(page["total"], 1, "{page}");
    assert_eq!(page["tokens"][0]["user_email"], "ana@example.com");
    let id = page["tokens"][0]["id"].as_str().unwrap().to_owned();
    let o = svc(cfg, &["admin", "token", "list"]);
    assert!(
        stdout(&o).contains(&id) && stdout(&o).contains("ana@example.com"),
        "{}",
        stdout(&o)
    );
    let o = svc(cfg, &["admin", "token", "revoke", &id]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = svc(cfg, &["--token", &ana, "catalog"]);
    assert_eq!(code(&o), 7, "a revoked token: {}", stderr(&o));
    let o = svc(cfg, &["admin", "token", "revoke", "no-such-token"]);
    assert_eq!(code(&o), 8, "{}", stderr(&o));
    assert!(stderr(&o).contains("Token not found"), "{}", stderr(&o));
    let o = svc(cfg, &["admin", "group", "delete", "analysts"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));

    // The removed set-role names its replacement, under admin and at the top level.
    for args in [
        &["admin", "set-role", "ana@example.com", "admin"][..],
        &["set-role", "ana@example.com", "admin"][..],
    ] {
        let o = svc(cfg, args);
        assert_eq!(code(&o), 2);
        assert!(
            stderr(&o).contains("svc admin group add-member Admin ana@example.com"),
            "{}",
            stderr(&o)
        );
    }

    // Password login (the password on stdin), then personal access tokens, which need a
    // session.
    let o = s.cli(
        &[
            "users",
            "create",
            "--email",
            "ops@example.com",
            "--admin",
            "--password-stdin",
        ],
        Some("s3cret-pass\n"),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let ops_home = TempDir::new();
    let cfg = ops_home.0.as_path();
    let login = [
        "--server",
        &s.base,
        "auth",
        "login",
        "--email",
        "ops@example.com",
    ];
    let o = svc_input(cfg, &login, "wrong\n");
    assert_eq!(code(&o), 7, "{}", stderr(&o));
    let o = svc_input(cfg, &login, "s3cret-pass\n");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = svc(
        cfg,
        &["auth", "token", "create", "--name", "ci", "--days", "30"],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let ci = stdout(&o).trim().to_owned();
    let who = json_of(cfg, &["--token", &ci, "auth", "whoami", "--json"]);
    assert_eq!(who["email"], "ops@example.com");
    let o = svc(cfg, &["auth", "token", "revoke", "ci"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let tokens = json_of(cfg, &["auth", "token", "list", "--json"]);
    let listed = tokens
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "ci")
        .unwrap()
        .clone();
    assert!(listed["revoked_at"].is_string(), "{listed}");
    let o = svc(cfg, &["--token", &ci, "catalog"]);
    assert_eq!(code(&o), 7, "a revoked token: {}", stderr(&o));
    let o = svc(
        cfg,
        &["auth", "token", "create", "--name", "x", "--days", "0"],
    );
    assert_eq!(code(&o), 2);

    // A reader that stops early (`| head`) ends the command normally and quietly, whatever
    // the format.
    for format in ["table", "json", "csv"] {
        let o = svc_closed_stdout(cfg, &["query", "SELECT * FROM orders", "-f", format]);
        assert_eq!(
            (code(&o), stderr(&o).as_str()),
            (0, ""),
            "{format} into a closed pipe"
        );
    }

    // Unregister, log out.
    let o = svc(cfg, &["admin", "unregister-table", "orders"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = svc(cfg, &["auth", "logout"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = svc(cfg, &["catalog"]);
    assert_eq!(code(&o), 7, "logged out: {}", stderr(&o));
}

#[test]
fn version_help_completions_and_a_server_that_needs_a_newer_client() {
    let home = TempDir::new();
    let o = svc(&home.0, &["--version"]);
    assert_eq!(
        stdout(&o).trim(),
        format!("svc {}", env!("CARGO_PKG_VERSION"))
    );
    let o = svc(&home.0, &["--help"]);
    assert!(
        stdout(&o).contains("Exit codes:") && stdout(&o).contains("7  not logged in"),
        "{}",
        stdout(&o)
    );
    let o = svc(&home.0, &["completions", "bash"]);
    assert!(
        code(&o) == 0 && stdout(&o).contains("_svc"),
        "{}",
        stderr(&o)
    );
    let o = svc_closed_stdout(&home.0, &["completions", "bash"]);
    assert_eq!(
        (code(&o), stderr(&o).as_str()),
        (0, ""),
        "a closed stdout ends quietly"
    );

    // A server announcing a minimum client version above ours.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            while reader.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
                line.clear();
            }
            let body = r#"{"tables": [], "server_time": "now"}"#;
            let mut stream = stream;
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nx-svc-version: 99.0.0\r\n\
                 x-min-compat-cli-version: 99.0.0\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    let o = svc(
        &home.0,
        &["--server", &url, "--token", "t", "catalog", "--json"],
    );
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("too old"), "{}", stderr(&o));
}

#[test]
fn snapshots_pull_and_offline_queries_match_the_server() {
    let s = Server::start();
    write_parquet(&s.dir.0, "local", "orders", 50, "o");
    write_parquet(&s.dir.0, "local", "customers", 5, "c");
    let admin = s.admin_token();
    let home = TempDir::new();
    let cfg = home.0.as_path();
    let ws = home.0.join("ws");
    let ws = ws.to_str().unwrap();
    let o = svc(
        cfg,
        &["--server", &s.base, "--token", &admin, "auth", "login"],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    for id in ["orders", "customers"] {
        let o = svc(
            cfg,
            &["admin", "register-table", id, "--source-type", "local"],
        );
        assert_eq!(code(&o), 0, "{}", stderr(&o));
    }

    // The estimate alone writes nothing.
    let snap = [
        "--workspace",
        ws,
        "snapshot",
        "create",
        "orders",
        "--select",
        "id,name",
        "--where",
        "id >= 10",
        "--order-by",
        "id",
        "--limit",
        "20",
        "--as",
        "recent",
    ];
    let mut estimate_only = snap.to_vec();
    estimate_only.push("--estimate");
    let e = json_of(cfg, &estimate_only);
    assert_eq!(e["table_id"], "orders");
    let file = Path::new(ws).join("snapshots/recent.parquet");
    assert!(!file.exists());

    // Create, read back as parquet, refuse to overwrite, list, refresh.
    let o = svc(cfg, &snap);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(parquet_rows(&file), 20);
    let before = std::fs::read(&file).unwrap();
    let o = svc(cfg, &snap);
    assert_eq!(code(&o), 6, "{}", stderr(&o));
    assert_eq!(
        std::fs::read(&file).unwrap(),
        before,
        "an existing snapshot is untouched"
    );
    let list = json_of(cfg, &["--workspace", ws, "snapshot", "list", "--json"]);
    assert_eq!(
        (&list[0]["name"], &list[0]["rows"], &list[0]["where"]),
        (&json!("recent"), &json!(20), &json!("id >= 10"))
    );
    let o = svc(cfg, &["--workspace", ws, "snapshot", "refresh", "recent"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    for bad in ["a/b", "../up", "9lives"] {
        let o = svc(
            cfg,
            &[
                "--workspace",
                ws,
                "snapshot",
                "create",
                "orders",
                "--as",
                bad,
            ],
        );
        assert_eq!(code(&o), 2, "{bad}: {}", stderr(&o));
    }
    let o = svc(
        cfg,
        &[
            "--workspace",
            ws,
            "snapshot",
            "create",
            "orders",
            "--where",
            "id >>> 3",
            "--as",
            "bad_pred",
        ],
    );
    assert_eq!(code(&o), 9, "{}", stderr(&o));
    assert!(!Path::new(ws).join("snapshots/bad_pred.parquet").exists());

    // Pull twice: the second transfers nothing.
    let first = json_of(cfg, &["--workspace", ws, "pull", "--json"]);
    assert_eq!(
        first["downloaded"],
        json!(["customers", "orders"]),
        "{first}"
    );
    let second = json_of(cfg, &["--workspace", ws, "pull", "--json"]);
    assert_eq!(
        (&second["downloaded"], &second["unchanged"]),
        (&json!([]), &json!(["customers", "orders"])),
        "{second}"
    );

    // A registered table with no data yet is skipped with a warning, the rest still pulled,
    // and the exit code says "partial" (4), on every run, not "not found".
    let o = svc(
        cfg,
        &[
            "admin",
            "register-table",
            "pending",
            "--source-type",
            "local",
        ],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = svc(cfg, &["--workspace", ws, "pull", "--json"]);
    assert_eq!(code(&o), 4, "{}", stderr(&o));
    let third: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(
        (&third["skipped"], &third["unchanged"], &third["failed"]),
        (
            &json!(["pending"]),
            &json!(["customers", "orders"]),
            &json!([])
        ),
        "{third}"
    );
    let o = svc(cfg, &["--workspace", ws, "pull"]);
    assert_eq!(code(&o), 4, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("pending: skipped, no data on the server yet"),
        "{}",
        stderr(&o)
    );
    assert!(!Path::new(ws).join("tables/pending.parquet").exists());
    let o = svc(cfg, &["admin", "unregister-table", "pending"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));

    // Offline SQL answers like the server.
    let sql = "SELECT o.id, o.name, c.name AS customer FROM orders o LEFT JOIN customers c ON o.id = c.id WHERE o.id < 7 ORDER BY o.id";
    let remote = json_of(cfg, &["query", sql, "--format", "json"]);
    let local = json_of(
        cfg,
        &[
            "--workspace",
            ws,
            "query",
            "--local",
            sql,
            "--format",
            "json",
        ],
    );
    assert_eq!(local["rows"], remote["rows"]);
    assert_eq!(local["columns"], remote["columns"]);
    let n = json_of(
        cfg,
        &[
            "--workspace",
            ws,
            "query",
            "--local",
            "SELECT count(*) AS n FROM recent",
            "--format",
            "json",
        ],
    );
    assert_eq!(n["rows"], json!([[20]]));
    let o = svc(
        cfg,
        &[
            "--workspace",
            ws,
            "query",
            "--local",
            "COPY orders TO '/tmp/x.csv'",
            "--format",
            "json",
        ],
    );
    assert_eq!(code(&o), 9, "statements are refused: {}", stderr(&o));

    // An unwritable workspace: a clear error and no partial file.
    let blocked = home.0.join("blocked");
    std::fs::write(&blocked, b"a file, not a directory").unwrap();
    let o = svc(
        cfg,
        &[
            "--workspace",
            blocked.to_str().unwrap(),
            "snapshot",
            "create",
            "orders",
        ],
    );
    assert_eq!(code(&o), 9, "{}", stderr(&o));
    assert!(stderr(&o).contains("cannot create"), "{}", stderr(&o));

    let o = svc(cfg, &["--workspace", ws, "snapshot", "drop", "recent"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = svc(cfg, &["--workspace", ws, "snapshot", "drop", "recent"]);
    assert_eq!(code(&o), 8, "{}", stderr(&o));
}

/// Every file under `dir`, recursively (names relative to it).
fn files_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = e.path();
        if path.is_dir() {
            out.extend(files_under(&path));
        } else {
            out.push(
                path.strip_prefix(dir)
                    .unwrap_or(&path)
                    .display()
                    .to_string(),
            );
        }
    }
    out
}

/// A workspace on a file system that fills up mid-write (a 256 KiB tmpfs): `pull` and
/// `snapshot create` fail with a clear error and leave neither a partial nor a temp file.
/// Mounting needs root; without it the test prints a notice and stops.
#[cfg(target_os = "linux")]
#[test]
fn a_full_disk_fails_pull_and_snapshot_cleanly() {
    let s = Server::start();
    let table = write_parquet(&s.dir.0, "local", "events", 300_000, "e");
    assert!(std::fs::metadata(&table).unwrap().len() > 1 << 20);
    let admin = s.admin_token();
    let home = TempDir::new();
    let cfg = home.0.as_path();
    let ws = home.0.join("ws");
    let Some(_disk) = SmallDisk::mount(&ws, "256k") else {
        return;
    };
    let ws = ws.to_str().unwrap();
    let o = svc(
        cfg,
        &["--server", &s.base, "--token", &admin, "auth", "login"],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = svc(
        cfg,
        &[
            "admin",
            "register-table",
            "events",
            "--source-type",
            "local",
        ],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));

    let o = svc(cfg, &["--workspace", ws, "pull", "--json"]);
    assert_eq!(code(&o), 9, "{}", stderr(&o));
    let report: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["failed"][0]["table"], "events", "{report}");
    let reason = report["failed"][0]["error"].as_str().unwrap_or_default();
    assert!(reason.contains("No space left"), "{reason}");
    assert_eq!(files_under(Path::new(ws)), Vec::<String>::new());

    let o = svc(
        cfg,
        &[
            "--workspace",
            ws,
            "snapshot",
            "create",
            "events",
            "--as",
            "all_events",
        ],
    );
    assert_eq!(code(&o), 9, "{}", stderr(&o));
    assert!(stderr(&o).contains("No space left"), "{}", stderr(&o));
    assert!(stderr(&o).contains("nothing was kept"), "{}", stderr(&o));
    assert_eq!(files_under(Path::new(ws)), Vec::<String>::new());
}

#[test]
fn an_expired_session_token_is_an_auth_error() {
    let secret = "a-test-secret-that-is-at-least-32-chars";
    let s = Server::start_with(
        crate::support::Backend::Sqlite,
        &[("SVC_JWT_SECRET", secret)],
    );
    let admin = s.admin_token();
    let home = TempDir::new();
    let me = json_of(
        &home.0,
        &[
            "--server", &s.base, "--token", &admin, "auth", "whoami", "--json",
        ],
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let claims = json!({"sub": me["id"], "email": me["email"], "typ": "session",
        "iat": now - 7200, "exp": now - 3600, "jti": "expired-session"});
    let expired = jsonwebtoken::encode(
        &jsonwebtoken::Header::default(),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(secret.as_bytes()),
    )
    .unwrap();
    let o = svc(
        &home.0,
        &["--server", &s.base, "--token", &expired, "catalog"],
    );
    assert_eq!(code(&o), 7, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("svc auth login"),
        "the hint says how to recover: {}",
        stderr(&o)
    );
}

#[cfg(unix)]
#[test]
fn ctrl_c_during_a_pull_or_a_file_query_removes_the_partial_file() {
    // A server whose downloads and results trickle: the catalog and health answer at once,
    // the file never ends.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut request = String::new();
                reader.read_line(&mut request).unwrap();
                let mut line = String::new();
                while reader.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
                    line.clear();
                }
                let mut stream = stream;
                let json = if request.contains("/api/v2/catalog") {
                    Some(
                        r#"{"tables": [{"id": "big", "query_mode": "local"}], "server_time": "now"}"#,
                    )
                } else if request.contains("/api/health") {
                    Some(r#"{"status": "ok", "limits": {"query_max_rows": 1000000}}"#)
                } else {
                    None
                };
                if let Some(body) = json {
                    let _ = write!(
                        stream,
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                } else {
                    let _ = write!(
                        stream,
                        "HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\ncontent-length: 1000000000\r\n\r\n"
                    );
                    for _ in 0..600 {
                        if stream.write_all(&[b'x'; 1024]).is_err() {
                            return;
                        }
                        std::thread::sleep(std::time::Duration::from_millis(100));
                    }
                }
            });
        }
    });
    let home = TempDir::new();
    let ws = home.0.join("ws");
    let out_dir = home.0.join("out");
    std::fs::create_dir_all(&out_dir).unwrap();
    let out_file = out_dir.join("result.csv");
    let runs: [(&[&str], &Path, PathBuf); 2] = [
        (&["pull"], &ws.join("tables"), ws.join("tables/big.parquet")),
        (
            &[
                "query",
                "SELECT * FROM big",
                "-f",
                "csv",
                "-o",
                out_file.to_str().unwrap(),
            ],
            &out_dir,
            out_file.clone(),
        ),
    ];
    for (args, watched, target) in runs {
        let child = Command::new(svc_bin())
            .args([
                "--server",
                &url,
                "--token",
                "t",
                "--workspace",
                ws.to_str().unwrap(),
            ])
            .args(args)
            .env("SVC_CONFIG_DIR", &home.0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let partial = loop {
            let found = std::fs::read_dir(watched)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path())
                .find(|p| p.file_name().unwrap().to_string_lossy().starts_with('.'));
            if let Some(p) = found {
                break p;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{args:?}: no temporary file appeared"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status()
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(130),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!partial.exists(), "{args:?}: the partial file was removed");
        assert!(!target.exists(), "{args:?}");
    }
}

#[test]
fn a_file_output_holds_every_row_or_says_it_was_cut() {
    let s = Server::start_with(
        crate::support::Backend::Sqlite,
        &[("SVC_QUERY_MAX_ROWS", "2000")],
    );
    write_parquet(&s.dir.0, "local", "big", 2500, "b");
    write_parquet(&s.dir.0, "local", "mid", 1500, "m");
    let admin = s.admin_token();
    for id in ["big", "mid"] {
        let (status, _) = s.post_json("/api/admin/register-table", &admin, &json!({"id": id}));
        assert_eq!(status, 201);
    }
    let home = TempDir::new();
    let cfg = home.0.as_path();
    let o = svc(
        cfg,
        &["--server", &s.base, "--token", &admin, "auth", "login"],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let lines = |p: &Path| std::fs::read_to_string(p).unwrap().lines().count();

    // Past the screen default of 1,000 rows: a file gets all 1,500.
    let out = home.0.join("mid.csv");
    let o = svc(
        cfg,
        &[
            "query",
            "SELECT * FROM mid",
            "-f",
            "csv",
            "-o",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(lines(&out), 1501);
    let pq = home.0.join("mid.parquet");
    let o = svc(
        cfg,
        &[
            "query",
            "SELECT * FROM mid",
            "-f",
            "parquet",
            "-o",
            pq.to_str().unwrap(),
        ],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(parquet_rows(&pq), 1500);
    // The screen still shows 1,000 and says so.
    let o = svc(cfg, &["query", "SELECT * FROM mid", "-f", "json"]);
    let doc: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (doc["row_count"].as_u64(), doc["truncated"].as_bool()),
        (Some(1000), Some(true))
    );

    // Past the server's cap: the file holds the first 2,000 and the exit code says partial.
    let out = home.0.join("big.csv");
    let o = svc(
        cfg,
        &[
            "query",
            "SELECT * FROM big",
            "-f",
            "csv",
            "-o",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(code(&o), 4, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("more rows than the server returns at once (2000)"),
        "{}",
        stderr(&o)
    );
    assert_eq!(lines(&out), 2001);
    // Asking for the first rows is not an error.
    let o = svc(
        cfg,
        &[
            "query",
            "SELECT * FROM big",
            "-f",
            "csv",
            "-o",
            out.to_str().unwrap(),
            "--limit",
            "10",
        ],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(lines(&out), 11);
}
