//! The integration source against the real MariaDB (or MySQL) server on this machine, in a
//! database created by the test: every type and its edge values through a sync into parquet
//! and back out through SQL; zero dates and out-of-day times nulled and counted; an
//! incremental sync by a `DATETIME(6)` cursor merged by key; a `source_query`; registration
//! refusals; discovery; a wrong password named by connection, never shown.

use serde_json::json;

use crate::discovery::register;
use crate::integration::{column_of, count, description, discovered, sync_now};
use crate::operations::query_rows;
use crate::support::{exec_store, fresh_mysql_url, Backend, Server};

const SOURCE: &[&str] = &[
    "CREATE TABLE orders (id BIGINT PRIMARY KEY, tiny TINYINT, flag TINYINT(1), \
     small SMALLINT UNSIGNED, medium MEDIUMINT, num INT, unum INT UNSIGNED, big BIGINT, \
     ubig BIGINT UNSIGNED, f4 FLOAT, f8 DOUBLE, amount DECIMAL(12,2), widest DECIMAL(65,30), \
     name VARCHAR(100), body LONGTEXT, latin CHAR(3) CHARACTER SET latin1, raw VARBINARY(16), \
     day DATE, at DATETIME(6), at_utc TIMESTAMP(6) NULL, tod TIME(6), yr YEAR, bits BIT(10), \
     one_bit BIT(1), mood ENUM('sad', 'happy'), tags SET('a', 'b', 'c'), doc JSON, \
     shape POINT, updated_at DATETIME(6))",
    "INSERT INTO orders VALUES (1, -128, 1, 65535, -8388608, -2147483648, 4294967295, \
     -9223372036854775808, 18446744073709551615, 1.5, -1.7976931348623157e308, 1234567890.12, \
     12345678901234567890123456789012345.123456789012345678901234567890, 'héllo', \
     REPEAT('x', 1048576), 'é', x'00ff', '1000-01-01', '9999-12-31 23:59:59.999999', \
     '2038-01-19 03:14:07.999999', '23:59:59.999999', 2024, b'1010101010', b'1', 'happy', \
     'a,c', '{\"k\": [1, 2]}', POINT(1, 2), '2024-01-01 00:00:00')",
    "INSERT INTO orders (id, day, at, tod, updated_at) VALUES \
     (2, '0000-00-00', '0000-00-00 00:00:00', '-838:59:59', '2024-01-01 00:00:00')",
];

#[test]
fn a_mysql_table_syncs_with_exact_types_and_incrementally() {
    let Some(source) = fresh_mysql_url() else {
        return;
    };
    exec_store(&source, SOURCE);
    let database = source.rsplit_once('/').unwrap().1.to_owned();
    let locked = source.replacen("mysql://root@", "mysql://root:hunter2@", 1);
    let s = Server::start_with(
        Backend::Sqlite,
        &[
            ("SVC_INTEGRATION_SHOP_URL", source.as_str()),
            ("SVC_INTEGRATION_LOCKED_URL", locked.as_str()),
        ],
    );
    let admin = s.admin_token();
    register(
        &s,
        &admin,
        json!({"id": "shop_orders", "source_type": "integration", "bucket": "shop",
               "source_table": "orders", "query_mode": "materialized",
               "primary_key": "id", "cursor_column": "updated_at"}),
    );
    let (state, notes) = sync_now(&s, &admin, "shop_orders", false);
    assert_eq!(
        (&state["status"], &state["rows"]),
        (&json!("ok"), &json!(2)),
        "{state}"
    );
    // The zero date, the zero datetime and the time outside a day have no Arrow form.
    assert!(
        notes
            .iter()
            .any(|n| n.starts_with("3 values have no exact form")),
        "{notes:?}"
    );

    let types = &query_rows(
        &s,
        &admin,
        "SELECT arrow_typeof(tiny) tiny, arrow_typeof(flag) flag, arrow_typeof(small) small, \
         arrow_typeof(medium) medium, arrow_typeof(num) num, arrow_typeof(unum) unum, \
         arrow_typeof(big) big, arrow_typeof(ubig) ubig, arrow_typeof(f4) f4, \
         arrow_typeof(f8) f8, arrow_typeof(amount) amount, arrow_typeof(widest) widest, \
         arrow_typeof(name) name, arrow_typeof(raw) raw, arrow_typeof(day) day, \
         arrow_typeof(at) at, arrow_typeof(at_utc) at_utc, arrow_typeof(tod) tod, \
         arrow_typeof(yr) yr, arrow_typeof(bits) bits, arrow_typeof(one_bit) one_bit, \
         arrow_typeof(mood) mood, arrow_typeof(tags) tags, arrow_typeof(doc) doc, \
         arrow_typeof(shape) shape FROM shop_orders LIMIT 1",
    )[0];
    for (column, expected) in [
        ("tiny", "Int16"),
        ("flag", "Int16"),
        ("small", "Int32"),
        ("medium", "Int32"),
        ("num", "Int32"),
        ("unum", "Int64"),
        ("big", "Int64"),
        ("ubig", "Decimal128(20, 0)"),
        ("f4", "Float32"),
        ("f8", "Float64"),
        ("amount", "Decimal128(12, 2)"),
        ("widest", "Decimal256(65, 30)"),
        ("name", "Utf8View"),
        ("raw", "BinaryView"),
        ("day", "Date32"),
        ("at", "Timestamp(µs)"),
        ("at_utc", "Timestamp(µs, \"UTC\")"),
        ("tod", "Time64(µs)"),
        ("yr", "Int16"),
        ("bits", "Int64"),
        ("one_bit", "Boolean"),
        ("mood", "Dictionary(Int32, Utf8)"),
        ("tags", "Utf8View"),
        ("doc", "Utf8View"),
        ("shape", "Utf8View"),
    ] {
        assert_eq!(types[column], expected, "{column}: {types}");
    }
    let rows = query_rows(
        &s,
        &admin,
        "SELECT id, tiny, flag, small, medium, num, unum, big, CAST(ubig AS VARCHAR) ubig, \
         CAST(f4 AS VARCHAR) f4, CAST(f8 AS VARCHAR) f8, CAST(amount AS VARCHAR) amount, \
         CAST(widest AS VARCHAR) widest, name, length(body) body, latin, \
         encode(raw, 'hex') raw, CAST(day AS VARCHAR) day, CAST(at AS VARCHAR) at, \
         CAST(at_utc AS VARCHAR) at_utc, CAST(tod AS VARCHAR) tod, yr, bits, one_bit, \
         CAST(mood AS VARCHAR) mood, tags, doc, shape FROM shop_orders ORDER BY id",
    );
    for (column, expected) in [
        ("tiny", json!(-128)),
        ("flag", json!(1)),
        ("small", json!(65535)),
        ("medium", json!(-8388608)),
        ("num", json!(-2147483648i64)),
        ("unum", json!(4294967295u64)),
        ("big", json!(i64::MIN)),
        ("ubig", json!("18446744073709551615")),
        ("f4", json!("1.5")),
        ("f8", json!("-1.7976931348623157e308")),
        ("amount", json!("1234567890.12")),
        (
            "widest",
            json!("12345678901234567890123456789012345.123456789012345678901234567890"),
        ),
        ("name", json!("héllo")),
        ("body", json!(1048576)),
        ("latin", json!("é")),
        ("raw", json!("00ff")),
        ("day", json!("1000-01-01")),
        ("at", json!("9999-12-31T23:59:59.999999")),
        ("at_utc", json!("2038-01-19T03:14:07.999999Z")),
        ("tod", json!("23:59:59.999999")),
        ("yr", json!(2024)),
        ("bits", json!(682)),
        ("one_bit", json!(true)),
        ("mood", json!("happy")),
        ("tags", json!("a,c")),
        ("doc", json!("{\"k\": [1, 2]}")),
        ("shape", json!("POINT(1 2)")),
    ] {
        assert_eq!(rows[0][column], expected, "{column}: {}", rows[0]);
    }
    for column in ["day", "at", "tod", "tiny", "mood", "doc"] {
        assert_eq!(rows[1][column], json!(null), "{column}: {}", rows[1]);
    }
    let (_, schema) = s.get_json("/api/v2/schema/shop_orders", &admin);
    let described = |name: &str| description(&schema, name);
    assert!(described("doc").contains("JSON"), "{schema}");
    assert!(described("tags").contains("set("), "{schema}");

    // Incremental: rows past the copy's highest updated_at, merged by id.
    exec_store(
        &source,
        &[
            "UPDATE orders SET name = 'changed', updated_at = '2024-02-01 00:00:00.5' WHERE id = 1",
            "INSERT INTO orders (id, name, updated_at) VALUES (3, 'new', '2024-02-02 00:00:00')",
        ],
    );
    let (state, notes) = sync_now(&s, &admin, "shop_orders", false);
    assert_eq!(state["rows"], 3, "{state}");
    assert!(
        notes.iter().any(|n| n.contains("2 new or changed rows")),
        "{notes:?}"
    );
    let rows = query_rows(&s, &admin, "SELECT id, name FROM shop_orders ORDER BY id");
    assert_eq!(
        (rows.len(), &rows[0]["name"], &rows[2]["name"]),
        (3, &json!("changed"), &json!("new"))
    );
    // Nothing past the cursor: nothing fetched, the copy as it was.
    let (state, notes) = sync_now(&s, &admin, "shop_orders", false);
    assert_eq!(state["rows"], 3, "{state}");
    assert!(
        notes.iter().any(|n| n.contains(" 0 new or changed rows")),
        "{notes:?}"
    );

    // A source_query runs read-only; its decimals arrive without digits, so as exact text.
    register(
        &s,
        &admin,
        json!({"id": "shop_doubled", "source_type": "integration", "bucket": "shop",
               "source_query": format!("SELECT id, amount * 2 AS doubled FROM {database}.orders \
                                        WHERE id = 1"),
               "query_mode": "materialized"}),
    );
    let (state, _) = sync_now(&s, &admin, "shop_doubled", false);
    assert_eq!(state["status"], "ok", "{state}");
    let doubled = &query_rows(&s, &admin, "SELECT doubled FROM shop_doubled")[0];
    assert_eq!(doubled["doubled"], "2469135780.24");

    for (body, why) in [
        (
            json!({"source_table": "orders", "cursor_column": "name"}),
            "cannot mark changes",
        ),
        (json!({"source_table": "missing"}), "no table missing"),
        (
            json!({"source_query": "DELETE FROM orders"}),
            "single SELECT",
        ),
    ] {
        let mut request = json!({"id": "refused", "source_type": "integration",
                                 "bucket": "shop", "query_mode": "materialized"});
        for (k, v) in body.as_object().unwrap() {
            request[k] = v.clone();
        }
        let (status, resp) = s.post_json("/api/admin/register-table", &admin, &request);
        assert_eq!(status, 422, "{body}: {resp}");
        assert!(
            resp["detail"].as_str().unwrap_or_default().contains(why),
            "{body}: {resp}"
        );
    }

    // Discovery lists the table with each column's type in the copy.
    let (status, doc) = s.get_json("/api/admin/integration/shop/tables", &admin);
    assert_eq!(status, 200, "{doc}");
    let orders = discovered(&doc, &database, "orders");
    let column = |name: &str| column_of(&orders, name);
    assert_eq!(column("amount")["type"], "Decimal128(12, 2)");
    assert_eq!(column("amount")["description"], "decimal(12,2)");
    assert_eq!(column("id")["nullable"], false);

    // A wrong password: the sync fails naming the connection, never the password, and the
    // copy of another table is untouched.
    register(
        &s,
        &admin,
        json!({"id": "locked_orders", "source_type": "integration", "bucket": "locked",
               "source_table": "orders", "query_mode": "materialized"}),
    );
    let (state, _) = sync_now(&s, &admin, "locked_orders", false);
    let error = state["last_error"].as_str().unwrap_or_default();
    assert_eq!(state["status"], "error", "{state}");
    assert!(
        error.contains("Connection 'locked'") && error.contains("Access denied"),
        "{state}"
    );
    assert!(!error.contains("hunter2"), "{state}");
    let (status, body) = s.get_json("/api/admin/integration/locked/tables", &admin);
    assert_ne!(status, 200, "{body}");
    assert!(!body.to_string().contains("hunter2"), "{body}");
    assert_eq!(
        count(&s, &admin, "SELECT count(*) AS n FROM shop_orders"),
        3
    );
}
