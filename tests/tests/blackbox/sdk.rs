//! A client nobody here wrote: `openapi-python-client` generates a Python SDK from the
//! checked-in `openapi/openapi.json`, and `examples/sdk/python/smoke.py` calls catalog,
//! sample, query (JSON and Arrow bytes), scan and register through it against a real server.
//! The generator comes from `$SVC_TEST_VENV` (default `~/.cache/svc-venv`, which `.ci/run`
//! fills); without it the test says so and skips.

use std::path::PathBuf;
use std::process::Command;

use serde_json::{json, Value};

use crate::discovery::{register, write_parquet};
use crate::support::{Server, TempDir};

#[test]
fn a_generated_python_client_calls_every_data_path() {
    let venv = std::env::var_os("SVC_TEST_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/svc-venv")
        });
    let generator = venv.join("bin/openapi-python-client");
    if !generator.exists() {
        eprintln!(
            "notice: SDK test skipped: no {} (run .ci/run once to install it)",
            generator.display()
        );
        return;
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = TempDir::new();
    let generated = Command::new(&generator)
        .args(["generate", "--meta", "none", "--output-path"])
        .arg(out.0.join("svc_client"))
        .arg("--path")
        .arg(root.join("openapi/openapi.json"))
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&generated.stderr).to_string()
        + &String::from_utf8_lossy(&generated.stdout);
    assert!(generated.status.success(), "{log}");
    // Every operation is generated: nothing was dropped for a schema the generator refused.
    assert!(!log.contains("will not be generated"), "{log}");
    assert!(!log.contains("Unable to process schema"), "{log}");

    let s = Server::start();
    let admin = s.admin_token();
    write_parquet(&s.dir.0, "local", "orders", 20, "o");
    register(&s, &admin, json!({"id": "orders", "source_type": "local"}));
    let run = Command::new(venv.join("bin/python"))
        .arg(root.join("examples/sdk/python/smoke.py"))
        .args([&s.base, &admin, "orders"])
        .env("PYTHONPATH", &out.0)
        .output()
        .unwrap();
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
