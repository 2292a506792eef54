//! Dynamic drivers: the example CSV driver loaded from a shared library, and libraries the
//! server must refuse without failing to start.

use std::path::Path;
use std::process::Command;

use serde_json::json;

use crate::support::{csv_driver_lib, Backend, Server, TempDir};

/// Compiles a C shared library (standing in for a foreign or outdated driver build).
fn c_library(dir: &Path, name: &str, source: &str) {
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).unwrap();
    let status = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(dir.join(format!("{name}.so")))
        .arg(&src)
        .status()
        .expect("run cc");
    assert!(status.success(), "compiling {name}.c failed");
    std::fs::remove_file(src).unwrap();
}

fn driver_dir() -> TempDir {
    let dir = TempDir::new();
    std::fs::copy(csv_driver_lib(), dir.0.join("libcsv.so")).unwrap();
    dir
}

#[test]
fn a_driver_library_serves_catalog_schema_and_sample() {
    let drivers = driver_dir();
    let s = Server::start_with(
        Backend::Sqlite,
        &[("SVC_DRIVER_DIR", drivers.0.to_str().unwrap())],
    );
    assert!(s.log().contains("driver library loaded"), "{}", s.log());
    let admin = s.admin_token();
    let data = s.dir.0.join("extracts/csv/data");
    std::fs::write(
        data.join("cities.csv"),
        "city,country,population\nLisbon,PT,545000\nPorto,PT,232000\nOslo,NO,709000\n",
    )
    .unwrap();

    let (status, body) = s.post_json(
        "/api/admin/register-table",
        &admin,
        &json!({"id": "cities", "source_type": "csv", "description": "From a CSV file"}),
    );
    assert_eq!(status, 201, "{body}");

    let row = s.catalog_row(&admin, "cities").unwrap();
    assert_eq!(row["source_type"], "csv");
    assert_eq!(row["description"], "From a CSV file");

    let (status, schema) = s.get_json("/api/v2/schema/cities", &admin);
    assert_eq!(status, 200, "{schema}");
    let names: Vec<&str> = schema["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["city", "country", "population"]);
    assert_eq!(schema["columns"][0]["type"], "Utf8");

    let (status, sample) = s.get_json("/api/v2/sample/cities?n=2", &admin);
    assert_eq!(status, 200, "{sample}");
    assert_eq!(
        sample["rows"],
        json!([
            {"city": "Lisbon", "country": "PT", "population": "545000"},
            {"city": "Porto", "country": "PT", "population": "232000"}
        ])
    );

    // A driver error crosses the boundary with its kind: no file → 404 naming the table.
    s.post_json(
        "/api/admin/register-table",
        &admin,
        &json!({"id": "towns", "source_type": "csv"}),
    );
    let (status, body) = s.get_json("/api/v2/sample/towns", &admin);
    assert_eq!(status, 404, "{body}");
    assert!(body.to_string().contains("towns"), "{body}");
}

#[test]
fn unusable_libraries_are_refused_with_one_line_each_and_the_server_starts() {
    let drivers = driver_dir();
    c_library(
        &drivers.0,
        "old_version",
        "struct decl { unsigned int api_version; };\n\
         static const struct decl D = { 999 };\n\
         const struct decl *svc_driver_entry(void) { return &D; }\n",
    );
    c_library(
        &drivers.0,
        "no_entry",
        "int something(void) { return 1; }\n",
    );
    std::fs::write(drivers.0.join("garbage.so"), "not a library").unwrap();
    std::fs::write(drivers.0.join("README.txt"), "ignored: not a library name").unwrap();

    // The CSV driver's constructor fails when it cannot create its data directory.
    let s = Server::start_prepared(
        Backend::Sqlite,
        &[("SVC_DRIVER_DIR", drivers.0.to_str().unwrap())],
        |data| {
            std::fs::create_dir_all(data.join("extracts")).unwrap();
            std::fs::write(
                data.join("extracts/csv"),
                "a file where a directory should be",
            )
            .unwrap();
        },
    );
    let log = s.log();
    let refusals: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("driver library refused"))
        .collect();
    assert_eq!(refusals.len(), 4, "{log}");
    let line_for = |file: &str| {
        refusals
            .iter()
            .find(|l| l.contains(file))
            .unwrap_or_else(|| panic!("no refusal for {file}: {log}"))
            .to_string()
    };
    assert!(line_for("old_version.so").contains("plugin-api version 999"));
    assert!(line_for("no_entry.so").contains("svc_driver_entry"));
    assert!(line_for("garbage.so").contains("not a loadable shared library"));
    assert!(line_for("libcsv.so").contains("constructor failed"));
    assert!(!log.contains("README.txt"));

    // Still serving, and `csv` is not a source type it knows.
    let admin = s.admin_token();
    let (status, body) = s.post_json(
        "/api/admin/register-table",
        &admin,
        &json!({"id": "cities", "source_type": "csv"}),
    );
    assert_eq!(status, 422, "{body}");
    let (status, _) = s.get_json("/api/v2/catalog", &admin);
    assert_eq!(status, 200);
}

#[test]
fn registering_a_remote_table_rewarms_its_catalog_metadata_through_the_library() {
    let drivers = driver_dir();
    let s = Server::start_with(
        Backend::Sqlite,
        &[("SVC_DRIVER_DIR", drivers.0.to_str().unwrap())],
    );
    let admin = s.admin_token();
    std::fs::write(
        s.dir.0.join("extracts/csv/data/people.csv"),
        "event_date,country_code,platform\n2026-01-02,CZ,web\n2026-01-03,PT,ios\n",
    )
    .unwrap();
    let (status, body) = s.post_json(
        "/api/admin/register-table",
        &admin,
        &json!({"id": "people", "source_type": "csv", "query_mode": "remote"}),
    );
    assert_eq!(status, 201, "{body}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let row = loop {
        let row = s.catalog_row(&admin, "people").unwrap();
        if row["metadata_freshness"] == "fresh" || std::time::Instant::now() > deadline {
            break row;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert_eq!(row["metadata_freshness"], "fresh", "{row}");
    assert_eq!(row["rows"], 2);
    assert_eq!(row["entity_type"], "BASE TABLE");
    // The library reports every column as text, with no values in the metadata: no
    // example is made up (column names alone, like event_date, are not a type).
    assert_eq!(row["where_examples"], json!([]), "{row}");
}

#[test]
fn the_library_table_provider_answers_sql_across_the_ffi_boundary() {
    use svc_plugin_api::arrow::array::AsArray;
    use svc_plugin_api::datafusion::prelude::SessionContext;
    use svc_plugin_api::ffi::DriverConfig;
    use svc_plugin_api::{Caller, TableRef};

    let data = TempDir::new();
    std::fs::create_dir_all(data.0.join("extracts/csv/data")).unwrap();
    std::fs::write(
        data.0.join("extracts/csv/data/cities.csv"),
        "city,country\nOslo,NO\nPorto,PT\nLisbon,PT\n",
    )
    .unwrap();
    let config = DriverConfig {
        data_dir: data.0.clone(),
    };
    let driver = svc_plugin_api::ffi::load(&csv_driver_lib(), &config).unwrap();
    let table = TableRef {
        id: "cities".into(),
        source_type: "csv".into(),
        bucket: None,
        source_table: None,
        query_mode: "local".into(),
        source_query: None,
        ..TableRef::default()
    };
    let caller = Caller {
        user_id: "u".into(),
        username: "u@example.com".into(),
        is_admin: false,
    };
    let cities: Vec<String> = crate::support::run_async(async {
        let provider = driver.table_provider(&table, &caller).await.unwrap();
        let ctx = SessionContext::new();
        ctx.register_table("cities", provider).unwrap();
        let batches = ctx
            .sql("SELECT city FROM cities WHERE country = 'PT' ORDER BY city")
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        batches
            .iter()
            .flat_map(|b| {
                b.column(0)
                    .as_string::<i32>()
                    .iter()
                    .map(|v| v.unwrap().to_owned())
                    .collect::<Vec<_>>()
            })
            .collect()
    });
    assert_eq!(cities, ["Lisbon", "Porto"]);
}
