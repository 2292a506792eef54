//! The integration source over a real SQLite file written by the test: declared types planned
//! by affinity into exact Arrow types, values that do not fit their column nulled and counted,
//! an incremental sync by an integer cursor merged by key, a time cursor refused, discovery,
//! and a file that goes away keeping the last good copy.

use serde_json::json;

use crate::discovery::register;
use crate::integration::{column_of, count, description, discovered, sync_now};
use crate::operations::query_rows;
use crate::support::{exec_store, sqlite_url, Backend, Server, TempDir};

#[test]
fn a_sqlite_file_syncs_with_exact_types_incrementally_and_keeps_its_copy_when_it_goes() {
    let source_dir = TempDir::new();
    let file = source_dir.0.join("app.db");
    exec_store(
        &sqlite_url(&file),
        &[
            "CREATE TABLE orders (id INTEGER PRIMARY KEY, qty BIGINT, price REAL, ok BOOLEAN, \
             name TEXT, code VARCHAR(10), raw BLOB, day DATE, at DATETIME, tod TIME, \
             amount DECIMAL(12,2), doc JSON, anything, free NUMERIC, version INTEGER)",
            "INSERT INTO orders VALUES (1, 9223372036854775807, 1.5, 1, 'héllo', 'abc', \
             x'00ff', '2024-03-01', '2024-03-01 12:34:56.789012', '23:59:59.5', 1234567890.12, \
             '{\"k\": [1, 2]}', 42, 3.14159, 1)",
            "INSERT INTO orders VALUES (2, -5, -1e308, 0, CAST(x'6869ff' AS TEXT), NULL, NULL, \
             'not a day', 1700000000, NULL, 'n/a', NULL, x'0102', NULL, 1)",
            "INSERT INTO orders (id, qty, name, version) VALUES (3, 'many', \
             replace(hex(zeroblob(524288)), '0', 'x'), 1)",
        ],
    );
    let s = Server::start_with(
        Backend::Sqlite,
        &[(
            "SVC_INTEGRATION_APP_URL",
            format!("sqlite://{}", file.display()).as_str(),
        )],
    );
    let admin = s.admin_token();
    register(
        &s,
        &admin,
        json!({"id": "app_orders", "source_type": "integration", "bucket": "app",
               "source_table": "orders", "query_mode": "materialized",
               "primary_key": "id", "cursor_column": "version"}),
    );
    let (state, notes) = sync_now(&s, &admin, "app_orders", false);
    assert_eq!(
        (&state["status"], &state["rows"]),
        (&json!("ok"), &json!(3)),
        "{state}"
    );
    // 'not a day' in DATE, 'n/a' in DECIMAL(12,2) and 'many' in BIGINT have no exact form.
    assert!(
        notes
            .iter()
            .any(|n| n.starts_with("3 values have no exact form")),
        "{notes:?}"
    );
    assert!(
        notes.iter().any(|n| n.starts_with("1 text values")),
        "{notes:?}"
    );

    let types = &query_rows(
        &s,
        &admin,
        "SELECT arrow_typeof(id) id, arrow_typeof(qty) qty, arrow_typeof(price) price, \
         arrow_typeof(ok) ok, arrow_typeof(name) name, arrow_typeof(raw) raw, \
         arrow_typeof(day) day, arrow_typeof(at) at, arrow_typeof(tod) tod, \
         arrow_typeof(amount) amount, arrow_typeof(doc) doc, arrow_typeof(anything) anything, \
         arrow_typeof(free) free FROM app_orders LIMIT 1",
    )[0];
    for (column, expected) in [
        ("id", "Int64"),
        ("qty", "Int64"),
        ("price", "Float64"),
        ("ok", "Boolean"),
        ("name", "Utf8View"),
        ("raw", "BinaryView"),
        ("day", "Date32"),
        ("at", "Timestamp(µs)"),
        ("tod", "Time64(µs)"),
        ("amount", "Decimal128(12, 2)"),
        ("doc", "Utf8View"),
        ("anything", "Utf8View"),
        ("free", "Utf8View"),
    ] {
        assert_eq!(types[column], expected, "{column}: {types}");
    }
    let rows = query_rows(
        &s,
        &admin,
        "SELECT id, qty, CAST(price AS VARCHAR) price, ok, \
         CASE WHEN id = 3 THEN CAST(length(name) AS VARCHAR) ELSE name END name, \
         encode(raw, 'hex') raw, CAST(day AS VARCHAR) day, CAST(at AS VARCHAR) at, \
         CAST(tod AS VARCHAR) tod, CAST(amount AS VARCHAR) amount, doc, anything, free \
         FROM app_orders ORDER BY id",
    );
    let expect = |row: usize, pairs: &[(&str, serde_json::Value)]| {
        for (column, value) in pairs {
            assert_eq!(
                &rows[row][*column], value,
                "row {row} {column}: {}",
                rows[row]
            );
        }
    };
    expect(
        0,
        &[
            ("qty", json!(9223372036854775807i64)),
            ("price", json!("1.5")),
            ("ok", json!(true)),
            ("name", json!("héllo")),
            ("raw", json!("00ff")),
            ("day", json!("2024-03-01")),
            ("at", json!("2024-03-01T12:34:56.789012")),
            ("tod", json!("23:59:59.500")),
            ("amount", json!("1234567890.12")),
            ("doc", json!("{\"k\": [1, 2]}")),
            ("anything", json!("42")),
            ("free", json!("3.14159")),
        ],
    );
    expect(
        1,
        &[
            ("qty", json!(-5)),
            ("price", json!("-1e308")),
            ("ok", json!(false)),
            ("name", json!("hi\u{fffd}")),
            ("day", json!(null)),
            ("at", json!("2023-11-14T22:13:20")),
            ("amount", json!(null)),
            ("anything", json!("\u{1}\u{2}")),
        ],
    );
    expect(2, &[("qty", json!(null)), ("name", json!("1048576"))]);
    let (_, schema) = s.get_json("/api/v2/schema/app_orders", &admin);
    let described = |name: &str| description(&schema, name);
    assert!(described("doc").contains("JSON"), "{schema}");
    assert!(
        described("anything").contains("no declared type"),
        "{schema}"
    );

    // Incremental: only rows past the copy's highest version, merged by id.
    exec_store(
        &sqlite_url(&file),
        &[
            "UPDATE orders SET name = 'changed', version = 2 WHERE id = 1",
            "INSERT INTO orders (id, name, version) VALUES (4, 'new', 2)",
        ],
    );
    let (state, notes) = sync_now(&s, &admin, "app_orders", false);
    assert_eq!(state["rows"], 4, "{state}");
    assert!(
        notes.iter().any(|n| n.contains("2 new or changed rows")),
        "{notes:?}"
    );
    let rows = query_rows(&s, &admin, "SELECT id, name FROM app_orders ORDER BY id");
    assert_eq!(
        (rows.len(), &rows[0]["name"], &rows[3]["name"]),
        (4, &json!("changed"), &json!("new"))
    );

    // A time cursor cannot mark changes on SQLite: times are text in the writer's form.
    let (status, resp) = s.post_json(
        "/api/admin/register-table",
        &admin,
        &json!({"id": "by_time", "source_type": "integration", "bucket": "app",
                "source_table": "orders", "query_mode": "materialized",
                "cursor_column": "at"}),
    );
    assert_eq!(status, 422, "{resp}");
    assert!(
        resp["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("integer or DECIMAL"),
        "{resp}"
    );
    let (status, resp) = s.post_json(
        "/api/admin/register-table",
        &admin,
        &json!({"id": "nothing", "source_type": "integration", "bucket": "app",
                "source_table": "main.missing", "query_mode": "materialized"}),
    );
    assert_eq!(status, 422, "{resp}");

    // Discovery lists the table with each column's type in the copy.
    let (status, doc) = s.get_json("/api/admin/integration/app/tables", &admin);
    assert_eq!(status, 200, "{doc}");
    let orders = discovered(&doc, "main", "orders");
    let column = |name: &str| column_of(&orders, name);
    assert_eq!(column("amount")["type"], "Decimal128(12, 2)");
    assert_eq!(column("amount")["description"], "DECIMAL(12,2)");

    // The file goes away: the sync fails, says why, and the copy stays readable.
    std::fs::remove_file(&file).unwrap();
    let (status, body) = s.post_json(
        "/api/sync/trigger",
        &admin,
        &json!({"tables": ["app_orders"], "full": true}),
    );
    assert_eq!(status, 200, "{body}");
    let state = crate::operations::wait_synced(&s, &admin, "app_orders");
    assert_eq!(state["status"], "error", "{state}");
    assert!(
        state["last_error"]
            .as_str()
            .unwrap_or_default()
            .contains("Connection 'app'"),
        "{state}"
    );
    assert_eq!(count(&s, &admin, "SELECT count(*) AS n FROM app_orders"), 4);
    assert!(!file.exists(), "a read-only source is never created");
}
