//! Clients nobody here wrote, generated from the checked-in `openapi/openapi.json`: a Python
//! SDK by `openapi-python-client` and TypeScript types by `openapi-typescript` driving
//! `openapi-fetch`. Each language's `examples/sdk/*/smoke.*` calls catalog, sample, query
//! (JSON and Arrow bytes), scan and register through the generated code against a real
//! server. The tools come from `$SVC_TEST_VENV` (default `~/.cache/svc-venv`) and
//! `$SVC_TEST_NPM` (default `~/.cache/svc-npm`), which `.ci/run` fills; without them a test
//! says so and skips.

use std::path::PathBuf;
use std::process::Command;

use serde_json::{json, Value};

use crate::discovery::{register, write_parquet};
use crate::support::{Server, TempDir};

/// A tool directory from `var`, else `~/.cache/<default>`.
pub(crate) fn tools(var: &str, default: &str) -> PathBuf {
    std::env::var_os(var).map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(std::env::var_os("HOME").unwrap())
            .join(".cache")
            .join(default)
    })
}

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Runs a generated-client smoke script (`command` gets base URL, token and table id)
/// against a fresh server with one local table, and checks what it says each call returned.
fn smoke(command: &mut Command) {
    let s = Server::start();
    let admin = s.admin_token();
    write_parquet(&s.dir.0, "local", "orders", 20, "o");
    register(&s, &admin, json!({"id": "orders", "source_type": "local"}));
    let run = command.args([&s.base, &admin, "orders"]).output().unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let got: Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(got["health"], "ok");
    assert!(
        got["catalog_ids"]
            .as_array()
            .unwrap()
            .contains(&json!("orders")),
        "{got}"
    );
    assert_eq!(got["sample_rows"], 3);
    assert_eq!(got["query_count"], 20);
    assert_eq!(got["arrow_marker"], "ffffffff", "{got}");
    assert!(got["arrow_bytes"].as_u64().unwrap() > 100, "{got}");
    assert_eq!(got["scan_csv_lines"], 5, "a header and four rows: {got}");
    assert_eq!(
        (&got["registered"], &got["registered_has_data"]),
        (&json!("orders"), &json!(true))
    );
}

/// Runs a generator step and fails with its output.
fn generate(command: &mut Command) -> String {
    let out = command.output().unwrap();
    let log =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{log}");
    log
}

#[test]
fn a_generated_python_client_calls_every_data_path() {
    let venv = tools("SVC_TEST_VENV", "svc-venv");
    let generator = venv.join("bin/openapi-python-client");
    if !generator.exists() {
        eprintln!(
            "notice: SDK test skipped: no {} (run .ci/run once to install it)",
            generator.display()
        );
        return;
    }
    let root = repo_root();
    let out = TempDir::new();
    let log = generate(
        Command::new(&generator)
            .args(["generate", "--meta", "none", "--output-path"])
            .arg(out.0.join("svc_client"))
            .arg("--path")
            .arg(root.join("openapi/openapi.json")),
    );
    // Every operation is generated: nothing was dropped for a schema the generator refused.
    assert!(!log.contains("will not be generated"), "{log}");
    assert!(!log.contains("Unable to process schema"), "{log}");
    smoke(
        Command::new(venv.join("bin/python"))
            .arg(root.join("examples/sdk/python/smoke.py"))
            .env("PYTHONPATH", &out.0),
    );
}

#[test]
fn a_generated_typescript_client_calls_every_data_path() {
    let npm = tools("SVC_TEST_NPM", "svc-npm");
    let bin = npm.join("node_modules/.bin");
    if !bin.join("openapi-typescript").exists() || !bin.join("tsc").exists() {
        eprintln!(
            "notice: SDK test skipped: no openapi-typescript or tsc under {} (run .ci/run once to install them)",
            bin.display()
        );
        return;
    }
    let root = repo_root();
    let example = root.join("examples/sdk/typescript");
    let work = TempDir::new();
    for file in ["smoke.ts", "tsconfig.json"] {
        std::fs::copy(example.join(file), work.0.join(file)).unwrap();
    }
    std::os::unix::fs::symlink(npm.join("node_modules"), work.0.join("node_modules")).unwrap();
    generate(
        Command::new(bin.join("openapi-typescript"))
            .arg(root.join("openapi/openapi.json"))
            .arg("-o")
            .arg(work.0.join("schema.d.ts")),
    );
    // Type-checking is the point: a path, parameter or field the document lost fails here.
    generate(Command::new(bin.join("tsc")).arg("-p").arg(&work.0));
    smoke(Command::new("node").arg(work.0.join("out/smoke.js")));
}
