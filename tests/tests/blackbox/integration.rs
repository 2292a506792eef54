//! The integration source against a real PostgreSQL database created by the test: every
//! listed type and its edge values through a sync into parquet and back out through SQL; a
//! sync that fails keeps the last good copy; bad connections and names are refused by name.

use serde_json::{json, Value};

use crate::discovery::register;
use crate::operations::{query_rows, wait_synced};
use crate::support::{exec_store, fresh_postgres_url, Backend, Server};

const SOURCE: &[&str] = &[
    "CREATE TYPE mood AS ENUM ('sad', 'happy')",
    "CREATE TABLE public.orders (id int8 PRIMARY KEY, small int2, medium int4, f4 float4, \
     f8 float8, ok bool, name text, code varchar(10), raw bytea, day date, at timestamp, \
     at_tz timestamptz, tod time, amount numeric(12,2), widest numeric(38,0), free numeric, \
     uid uuid, doc jsonb, span interval, m mood, tags int4[])",
    "INSERT INTO orders VALUES (1, 32767, -2147483648, 1.5, 'NaN', true, 'héllo', 'abc', \
     '\\x00ff', '1970-01-02', '2024-03-01 12:34:56.789012', '2024-03-01 12:00:00+02', \
     '23:59:59.999999', 1234567890.12, 99999999999999999999999999999999999999, 3.14159, \
     'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{\"k\": [1, 2]}', '1 day 2 hours', 'happy', \
     '{1,2,3}')",
    "INSERT INTO orders VALUES (2, -32768, NULL, '-Infinity', 'Infinity', false, NULL, NULL, \
     NULL, 'infinity', '0001-01-01 00:00:00', '9999-12-31 23:59:59.999999+00', '00:00:00', \
     -9999999999.99, -99999999999999999999999999999999999999, 'NaN', NULL, 'null', NULL, 'sad', \
     '{}')",
    "INSERT INTO orders (id, name) VALUES (3, repeat('x', 1048576))",
];

#[test]
fn a_postgres_table_round_trips_with_exact_types_and_a_failed_sync_keeps_its_copy() {
    let Some(source) = fresh_postgres_url() else {
        return;
    };
    exec_store(&source, SOURCE);
    let s = Server::start_with(
        Backend::Sqlite,
        &[("SVC_INTEGRATION_CRM_URL", source.as_str())],
    );
    let admin = s.admin_token();
    register(
        &s,
        &admin,
        json!({"id": "crm_orders", "source_type": "integration", "bucket": "crm",
               "source_table": "public.orders", "query_mode": "materialized"}),
    );
    let (status, body) = s.post_json("/api/sync/trigger", &admin, &json!(["crm_orders"]));
    assert_eq!(status, 200, "{body}");
    let state = wait_synced(&s, &admin, "crm_orders");
    assert_eq!(
        (&state["status"], &state["rows"]),
        (&json!("ok"), &json!(3)),
        "{state}"
    );

    let types = &query_rows(
        &s,
        &admin,
        "SELECT arrow_typeof(id) id, arrow_typeof(small) small, arrow_typeof(medium) medium, \
         arrow_typeof(f4) f4, arrow_typeof(f8) f8, arrow_typeof(ok) ok, arrow_typeof(name) name, \
         arrow_typeof(raw) raw, arrow_typeof(day) day, arrow_typeof(at) at, \
         arrow_typeof(at_tz) at_tz, arrow_typeof(tod) tod, arrow_typeof(amount) amount, \
         arrow_typeof(widest) widest, arrow_typeof(free) free, arrow_typeof(doc) doc \
         FROM crm_orders LIMIT 1",
    )[0];
    // Text and bytes are read by the engine as view types (its parquet reader's choice).
    for (column, expected) in [
        ("id", "Int64"),
        ("small", "Int16"),
        ("medium", "Int32"),
        ("f4", "Float32"),
        ("f8", "Float64"),
        ("ok", "Boolean"),
        ("name", "Utf8View"),
        ("raw", "BinaryView"),
        ("day", "Date32"),
        ("at", "Timestamp(µs)"),
        ("at_tz", "Timestamp(µs, \"UTC\")"),
        ("tod", "Time64(µs)"),
        ("amount", "Decimal128(12, 2)"),
        ("widest", "Decimal128(38, 0)"),
        ("free", "Utf8View"),
        ("doc", "Utf8View"),
    ] {
        assert_eq!(types[column], expected, "{column}: {types}");
    }

    let rows = query_rows(
        &s,
        &admin,
        "SELECT id, small, medium, CAST(f4 AS VARCHAR) f4, CAST(f8 AS VARCHAR) f8, ok, \
         CASE WHEN id = 3 THEN CAST(length(name) AS VARCHAR) ELSE name END name, code, \
         encode(raw, 'hex') raw, CAST(day AS VARCHAR) day, CAST(at AS VARCHAR) at, \
         CAST(at_tz AS VARCHAR) at_tz, CAST(tod AS VARCHAR) tod, CAST(amount AS VARCHAR) amount, \
         CAST(widest AS VARCHAR) widest, free, uid, doc, span, m, tags \
         FROM crm_orders ORDER BY id",
    );
    let one = &rows[0];
    for (column, expected) in [
        ("small", json!(32767)),
        ("medium", json!(-2147483648i64)),
        ("f4", json!("1.5")),
        ("f8", json!("NaN")),
        ("ok", json!(true)),
        ("name", json!("héllo")),
        ("code", json!("abc")),
        ("raw", json!("00ff")),
        ("day", json!("1970-01-02")),
        ("at", json!("2024-03-01T12:34:56.789012")),
        ("at_tz", json!("2024-03-01T10:00:00Z")),
        ("tod", json!("23:59:59.999999")),
        ("amount", json!("1234567890.12")),
        ("widest", json!("99999999999999999999999999999999999999")),
        ("free", json!("3.14159")),
        ("uid", json!("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")),
        ("doc", json!("{\"k\": [1, 2]}")),
        ("span", json!("1 day 02:00:00")),
        ("m", json!("happy")),
        ("tags", json!("{1,2,3}")),
    ] {
        assert_eq!(one[column], expected, "{column}: {one}");
    }
    let two = &rows[1];
    for (column, expected) in [
        ("small", json!(-32768)),
        ("medium", Value::Null),
        ("f4", json!("-inf")),
        ("f8", json!("inf")),
        ("day", Value::Null),
        ("at", json!("0001-01-01T00:00:00")),
        ("at_tz", json!("9999-12-31T23:59:59.999999Z")),
        ("amount", json!("-9999999999.99")),
        ("widest", json!("-99999999999999999999999999999999999999")),
        ("free", json!("NaN")),
        ("doc", json!("null")),
    ] {
        assert_eq!(two[column], expected, "{column}: {two}");
    }
    assert_eq!(rows[2]["name"], "1048576", "a 1 MiB text survives");

    // The source table goes away: the sync fails with its reason, the copy stays.
    exec_store(&source, &["ALTER TABLE orders RENAME TO orders_old"]);
    let (status, body) = s.post_json("/api/sync/trigger", &admin, &json!(["crm_orders"]));
    assert_eq!(status, 200, "{body}");
    let state = wait_synced(&s, &admin, "crm_orders");
    assert_eq!(state["status"], "error", "{state}");
    assert!(
        state["last_error"]
            .as_str()
            .unwrap_or("")
            .contains("public.orders"),
        "{state}"
    );
    let count = query_rows(&s, &admin, "SELECT count(*) AS n FROM crm_orders");
    assert_eq!(count[0]["n"], 3, "the last good copy is still read");
}

#[test]
fn bad_connections_and_source_names_are_refused_by_name() {
    // A URL with an unknown scheme stops the start and names the connection, not the secret.
    let s = Server::start();
    let mut bad = std::process::Command::new(crate::support::server_bin())
        .env(
            "SVC_INTEGRATION_LEGACY_URL",
            "oracle://scott:tiger-secret@db/orcl",
        )
        .args([
            "--data-dir",
            s.dir.0.to_str().unwrap(),
            "serve",
            "--listen",
            "127.0.0.1:0",
        ])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let exited = loop {
        if let Some(status) = bad.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = bad.kill();
            panic!("a server with a bad connection URL started");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let mut said = String::new();
    std::io::Read::read_to_string(&mut bad.stderr.take().unwrap(), &mut said).unwrap();
    assert!(!exited.success(), "{said}");
    assert!(said.contains("connection 'legacy'"), "{said}");
    assert!(
        !said.contains("tiger-secret"),
        "the password is never shown: {said}"
    );

    let admin = s.admin_token();
    for (source_table, why) in [
        ("public.\"orders\"", "not a plain name"),
        ("orders; DROP TABLE users", "not a plain name"),
        ("public..orders", "not a plain name"),
    ] {
        register(
            &s,
            &admin,
            json!({"id": "odd", "source_type": "integration", "bucket": "crm",
                   "source_table": source_table, "query_mode": "materialized"}),
        );
        let (status, _) = s.post_json("/api/sync/trigger", &admin, &json!(["odd"]));
        assert_eq!(status, 200);
        let state = wait_synced(&s, &admin, "odd");
        assert_eq!(state["status"], "error", "{state}");
        let error = state["last_error"].as_str().unwrap_or("");
        assert!(error.contains(why), "{source_table}: {state}");
    }
}
