//! The integration source against a real PostgreSQL database created by the test: every
//! listed type and its edge values through a sync into parquet and back out through SQL;
//! incremental syncs merged by key, full syncs reconciling deletes, a changed source schema;
//! a sync killed mid-way and a source that goes away keep the last good copy; registration
//! checks what it names at the source; discovery; bad connections and names refused by name.

use serde_json::{json, Value};

use crate::discovery::register;
use crate::operations::{query_rows, wait_synced};
use crate::support::{exec_store, fresh_postgres_url, Backend, Server};

const SOURCE: &[&str] = &[
    "CREATE TYPE mood AS ENUM ('sad', 'happy')",
    "CREATE TABLE public.orders (id int8 PRIMARY KEY, small int2, medium int4, f4 float4, \
     f8 float8, ok bool, name text, code varchar(10), raw bytea, day date, at timestamp, \
     at_tz timestamptz, tod time, amount numeric(12,2), widest numeric(38,0), free numeric, \
     uid uuid, doc jsonb, span interval, m mood, tags int4[], huge numeric(60,10), \
     labels text[], grid int4[][], shape point)",
    "INSERT INTO orders VALUES (1, 32767, -2147483648, 1.5, 'NaN', true, 'héllo', 'abc', \
     '\\x00ff', '1970-01-02', '2024-03-01 12:34:56.789012', '2024-03-01 12:00:00+02', \
     '23:59:59.999999', 1234567890.12, 99999999999999999999999999999999999999, 3.14159, \
     'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{\"k\": [1, 2]}', '1 day 2 hours', 'happy', \
     '{1,2,3}', 12345678901234567890123456789012345678901234567890.0123456789, \
     '{a,NULL,\"b c\"}', '{{1,2},{3,4}}', '(1,2)')",
    "INSERT INTO orders VALUES (2, -32768, NULL, '-Infinity', 'Infinity', false, NULL, NULL, \
     NULL, 'infinity', '0001-01-01 00:00:00', '9999-12-31 23:59:59.999999+00', '00:00:00', \
     -9999999999.99, -99999999999999999999999999999999999999, 'NaN', NULL, 'null', NULL, 'sad', \
     '{}', -0.0000000001, NULL, NULL, NULL)",
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
         arrow_typeof(widest) widest, arrow_typeof(free) free, arrow_typeof(doc) doc, \
         arrow_typeof(uid) uid, arrow_typeof(m) m, arrow_typeof(tags) tags, \
         arrow_typeof(huge) huge, arrow_typeof(labels) labels, arrow_typeof(shape) shape \
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
        ("uid", "Utf8View"),
        ("m", "Dictionary(Int32, Utf8)"),
        ("huge", "Decimal256(60, 10)"),
        ("shape", "Utf8View"),
    ] {
        assert_eq!(types[column], expected, "{column}: {types}");
    }
    for column in ["tags", "labels"] {
        let t = types[column].as_str().unwrap_or_default();
        assert!(t.starts_with("List("), "{column}: {types}");
    }
    // The schema says what a text column really is.
    let (status, schema) = s.get_json("/api/v2/schema/crm_orders", &admin);
    assert_eq!(status, 200, "{schema}");
    let describe = |name: &str| description(&schema, name);
    assert!(describe("doc").contains("JSON"), "{schema}");
    assert!(describe("shape").contains("point"), "{schema}");

    let rows = query_rows(
        &s,
        &admin,
        "SELECT id, small, medium, CAST(f4 AS VARCHAR) f4, CAST(f8 AS VARCHAR) f8, ok, \
         CASE WHEN id = 3 THEN CAST(length(name) AS VARCHAR) ELSE name END name, code, \
         encode(raw, 'hex') raw, CAST(day AS VARCHAR) day, CAST(at AS VARCHAR) at, \
         CAST(at_tz AS VARCHAR) at_tz, CAST(tod AS VARCHAR) tod, CAST(amount AS VARCHAR) amount, \
         CAST(widest AS VARCHAR) widest, free, uid, doc, span, CAST(m AS VARCHAR) m, \
         array_to_string(tags, ',') tags, CAST(huge AS VARCHAR) huge, \
         array_to_string(labels, '|', 'NULL') labels, array_to_string(grid, ',') grid, shape \
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
        ("span", json!("P1DT2H")),
        ("m", json!("happy")),
        ("tags", json!("1,2,3")),
        (
            "huge",
            json!("12345678901234567890123456789012345678901234567890.0123456789"),
        ),
        ("labels", json!("a|NULL|b c")),
        ("grid", json!("1,2,3,4")),
        ("shape", json!("(1,2)")),
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
        ("m", json!("sad")),
        ("tags", json!("")),
        ("huge", json!("-0.0000000001")),
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
        let (status, body) = s.post_json(
            "/api/admin/register-table",
            &admin,
            &json!({"id": "odd", "source_type": "integration", "bucket": "crm",
                    "source_table": source_table, "query_mode": "materialized"}),
        );
        assert_eq!(status, 422, "{source_table}: {body}");
        assert!(
            body["detail"].as_str().unwrap_or("").contains(why),
            "{body}"
        );
    }
    // A connection nobody configured is named, with the ones that are.
    let (status, body) = s.post_json(
        "/api/admin/register-table",
        &admin,
        &json!({"id": "odd", "source_type": "integration", "bucket": "nowhere",
                "source_table": "public.orders", "query_mode": "materialized"}),
    );
    assert_eq!(status, 422, "{body}");
    assert!(
        body["detail"].as_str().unwrap_or("").contains("'nowhere'"),
        "{body}"
    );
}

/// The sync state of `id` after a sync of it (full or not), and the pass's notes for it.
pub(crate) fn sync_now(s: &Server, admin: &str, id: &str, full: bool) -> (Value, Vec<String>) {
    let (status, body) = s.post_json(
        "/api/sync/trigger",
        admin,
        &json!({"tables": [id], "full": full}),
    );
    assert_eq!(status, 200, "{body}");
    let state = wait_synced(s, admin, id);
    let (_, status) = s.get_json("/api/sync/status", admin);
    let notes = status["last_pass"]["notes"][id]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| n.as_str().map(str::to_owned))
        .collect();
    (state, notes)
}

pub(crate) fn count(s: &Server, admin: &str, sql: &str) -> i64 {
    query_rows(s, admin, sql)[0]["n"].as_i64().unwrap()
}

/// The table `schema.name` of a discovery answer (`GET /api/admin/integration/<name>/tables`).
pub(crate) fn discovered(doc: &Value, schema: &str, name: &str) -> Value {
    doc["tables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["schema"] == schema && t["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no {schema}.{name} in {doc}"))
}

/// The column `name` of a discovered table.
pub(crate) fn column_of(table: &Value, name: &str) -> Value {
    table["columns"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no column {name} in {table}"))
}

/// The description of column `name` in a `GET /api/v2/schema/<id>` answer.
pub(crate) fn description(schema: &Value, name: &str) -> String {
    schema["columns"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .map(|c| c["description"].as_str().unwrap_or_default().to_owned())
        .unwrap_or_default()
}

#[test]
fn incremental_syncs_merge_by_key_and_full_syncs_reconcile_deletes() {
    let Some(source) = fresh_postgres_url() else {
        return;
    };
    exec_store(
        &source,
        &[
            "CREATE TABLE items (id int8 PRIMARY KEY, name text, \
             updated_at timestamptz NOT NULL)",
            "INSERT INTO items SELECT g, 'item ' || g, \
             TIMESTAMPTZ '2024-01-01 00:00:00+00' + g * INTERVAL '1 second' \
             FROM generate_series(1, 1000) g",
        ],
    );
    // Row groups of 100 rows: the copy has ten, so a merge can leave most as they are.
    let s = Server::start_with(
        Backend::Sqlite,
        &[
            ("SVC_INTEGRATION_SHOP_URL", source.as_str()),
            ("SVC_INTEGRATION_SHOP_ROW_GROUP_ROWS", "100"),
        ],
    );
    let admin = s.admin_token();
    register(
        &s,
        &admin,
        json!({"id": "shop_items", "source_type": "integration", "bucket": "shop",
               "source_table": "public.items", "query_mode": "materialized",
               "primary_key": "id", "cursor_column": "updated_at"}),
    );
    let (state, _) = sync_now(&s, &admin, "shop_items", false);
    assert_eq!(
        (&state["status"], &state["rows"]),
        (&json!("ok"), &json!(1000))
    );

    // 10 updates, 5 inserts, 3 deletes at the source.
    exec_store(
        &source,
        &[
            "UPDATE items SET name = 'changed', updated_at = now() WHERE id BETWEEN 500 AND 509",
            "INSERT INTO items SELECT g, 'new ' || g, now() FROM generate_series(1001, 1005) g",
            "DELETE FROM items WHERE id <= 3",
        ],
    );
    let (state, notes) = sync_now(&s, &admin, "shop_items", false);
    assert_eq!(state["rows"], 1005, "deletes wait for a full sync: {state}");
    assert!(
        notes.iter().any(|n| n.contains("15 new or changed rows")),
        "{notes:?}"
    );
    // Ids 500–509 sit in the 5th and 6th row groups: only there are `name` and `updated_at`
    // encoded again; the other eight groups, and `id` everywhere, keep their bytes.
    assert!(
        notes.iter().any(|n| n.contains(
            "merge: 8 of 10 row groups copied as they were, 4 of 30 column chunks encoded \
             again, 5 rows added"
        )),
        "{notes:?}"
    );
    assert_eq!(
        count(&s, &admin, "SELECT count(DISTINCT id) AS n FROM shop_items"),
        1005,
        "no key twice"
    );
    assert_eq!(
        count(
            &s,
            &admin,
            "SELECT count(*) AS n FROM shop_items WHERE name = 'changed'"
        ),
        10
    );

    // Nothing changed: nothing fetched, the copy stays as it is.
    let (again, notes) = sync_now(&s, &admin, "shop_items", false);
    assert_eq!(
        (&again["rows"], &again["hash"]),
        (&state["rows"], &state["hash"])
    );
    assert!(notes.iter().any(|n| n.contains(": 0 new")), "{notes:?}");

    // A full sync sees the deletes.
    let (state, _) = sync_now(&s, &admin, "shop_items", true);
    assert_eq!(state["rows"], 1002, "{state}");

    // The source's columns change: the next sync rebuilds the copy and says so.
    exec_store(
        &source,
        &["ALTER TABLE items ADD COLUMN stock int4 DEFAULT 7"],
    );
    let (state, notes) = sync_now(&s, &admin, "shop_items", false);
    assert_eq!(state["rows"], 1002, "{state}");
    assert!(
        notes.iter().any(|n| n.contains("columns changed")),
        "{notes:?}"
    );
    assert_eq!(
        count(
            &s,
            &admin,
            "SELECT count(*) AS n FROM shop_items WHERE stock = 7"
        ),
        1002
    );
}

#[test]
fn registration_checks_the_source_and_discovery_lists_it() {
    let Some(source) = fresh_postgres_url() else {
        return;
    };
    exec_store(
        &source,
        &[
            "CREATE SCHEMA sales",
            "CREATE TABLE sales.deals (id int4 PRIMARY KEY, title text, amount numeric(10,2), \
             closed date, meta jsonb)",
            "INSERT INTO sales.deals SELECT g, 'deal ' || g, g * 1.5, DATE '2024-01-01' + g, \
             '{}' FROM generate_series(1, 50) g",
            "CREATE VIEW sales.big_deals AS SELECT * FROM sales.deals WHERE amount > 30",
        ],
    );
    let s = Server::start_with(
        Backend::Sqlite,
        &[("SVC_INTEGRATION_CRM_URL", source.as_str())],
    );
    let admin = s.admin_token();
    let base = json!({"source_type": "integration", "bucket": "crm",
                      "query_mode": "materialized"});
    let with = |extra: Value| {
        let mut b = base.clone();
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    };
    for (body, why) in [
        (
            json!({"id": "x", "source_query": "SELECT 1; DROP TABLE sales.deals"}),
            "single SELECT",
        ),
        (
            json!({"id": "x", "source_query": "DELETE FROM sales.deals"}),
            "single SELECT",
        ),
        (
            json!({"id": "x", "source_query": "SELECT nope FROM sales.deals"}),
            "nope",
        ),
        (
            json!({"id": "x", "source_table": "sales.missing"}),
            "no table sales.missing",
        ),
        (
            json!({"id": "x", "source_table": "sales.deals", "cursor_column": "nope"}),
            "not a column",
        ),
        (
            json!({"id": "x", "source_table": "sales.deals", "cursor_column": "title"}),
            "cannot mark changes",
        ),
        (
            json!({"id": "x", "source_table": "sales.deals", "primary_key": "id, nope"}),
            "not a column",
        ),
    ] {
        let (status, resp) = s.post_json("/api/admin/register-table", &admin, &with(body.clone()));
        assert_eq!(status, 422, "{body}: {resp}");
        let detail = resp["detail"].as_str().unwrap_or_default();
        assert!(detail.contains(why), "{body}: {resp}");
    }
    let (_, registry) = s.get_json("/api/admin/registry", &admin);
    assert!(
        !registry["tables"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["id"] == "x"),
        "nothing refused was stored: {registry}"
    );

    // A source_query is one SELECT run read-only at the source.
    register(
        &s,
        &admin,
        with(json!({"id": "crm_totals",
                    "source_query": "SELECT closed, sum(amount) AS total FROM sales.deals \
                                     GROUP BY closed",
                    "cursor_column": "closed"})),
    );
    let (state, _) = sync_now(&s, &admin, "crm_totals", false);
    assert_eq!(
        (&state["status"], &state["rows"]),
        (&json!("ok"), &json!(50)),
        "{state}"
    );
    let types = &query_rows(
        &s,
        &admin,
        "SELECT arrow_typeof(total) t, arrow_typeof(closed) c FROM crm_totals LIMIT 1",
    )[0];
    // sum(numeric(10,2)) is an unconstrained numeric: kept exactly, as text.
    assert_eq!(
        (&types["t"], &types["c"]),
        (&json!("Utf8View"), &json!("Date32"))
    );

    // Discovery: tables and views with the type each column would get.
    let (status, doc) = s.get_json("/api/admin/integration/crm/tables", &admin);
    assert_eq!(status, 200, "{doc}");
    let deals = discovered(&doc, "sales", "deals");
    assert_eq!(deals["kind"], "table");
    let column = |name: &str| column_of(&deals, name);
    assert_eq!(column("amount")["type"], "Decimal128(10, 2)");
    assert_eq!(column("amount")["description"], "numeric(10,2)");
    assert_eq!(column("id")["nullable"], false);
    assert!(doc["tables"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["name"] == "big_deals" && t["kind"] == "view"));
    let (status, body) = s.get_json("/api/admin/integration/nowhere/tables", &admin);
    assert_eq!(status, 404, "{body}");
    let analyst = s.user_token("analyst@example.com", false);
    let (status, _) = s.get_json("/api/admin/integration/crm/tables", &analyst);
    assert_eq!(status, 403);
}

#[test]
fn a_sync_killed_midway_keeps_the_old_copy_and_the_next_one_completes() {
    let Some(source) = fresh_postgres_url() else {
        return;
    };
    exec_store(
        &source,
        &[
            "CREATE TABLE events (id int8, payload text)",
            "INSERT INTO events SELECT g, 'first' FROM generate_series(1, 100) g",
        ],
    );
    let mut s = Server::start_with(
        Backend::Sqlite,
        &[("SVC_INTEGRATION_LOG_URL", source.as_str())],
    );
    let admin = s.admin_token();
    register(
        &s,
        &admin,
        json!({"id": "log_events", "source_type": "integration", "bucket": "log",
               "source_table": "public.events", "query_mode": "materialized"}),
    );
    let (state, _) = sync_now(&s, &admin, "log_events", false);
    assert_eq!(state["rows"], 100);

    // A source slow enough to kill mid-sync: each row waits a little.
    exec_store(
        &source,
        &[
            "INSERT INTO events SELECT g, repeat('x', 100) FROM generate_series(101, 400000) g",
            "CREATE FUNCTION slow(i int8) RETURNS int8 LANGUAGE sql AS \
             'SELECT CASE WHEN i % 10000 = 0 THEN i + 0 * length(pg_sleep(0.05)::text) ELSE i END'",
            "ALTER TABLE events RENAME TO events_raw",
            "CREATE VIEW events AS SELECT slow(id) AS id, payload FROM events_raw",
        ],
    );
    let (status, body) = s.post_json("/api/sync/trigger", &admin, &json!(["log_events"]));
    assert_eq!(status, 200, "{body}");
    let data = s.dir.0.join("extracts/integration/data");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !std::fs::read_dir(&data)
        .unwrap()
        .flatten()
        .any(|f| f.file_name().to_string_lossy().starts_with('.'))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "no sync started writing"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // While it runs, the status shows how far it has got.
    let current = loop {
        let (_, status) = s.get_json("/api/sync/status", &admin);
        let current = status["current"].clone();
        if current["rows"].as_u64().unwrap_or(0) > 0 {
            break current;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no progress shown: {status}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert_eq!(current["table_id"], "log_events", "{current}");
    assert!(current["rows"].as_u64().unwrap() < 400_000, "{current}");
    s.kill();
    s.start_again();
    let admin = s.admin_token();
    assert_eq!(
        count(&s, &admin, "SELECT count(*) AS n FROM log_events"),
        100,
        "the last good copy survives the kill"
    );
    let (state, _) = sync_now(&s, &admin, "log_events", false);
    assert_eq!(
        (&state["status"], &state["rows"]),
        (&json!("ok"), &json!(400000)),
        "{state}"
    );
    assert_eq!(
        count(&s, &admin, "SELECT count(DISTINCT id) AS n FROM log_events"),
        400000
    );
    let leftovers: Vec<String> = std::fs::read_dir(&data)
        .unwrap()
        .flatten()
        .map(|f| f.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn text_that_is_not_utf8_is_replaced_counted_and_the_sync_completes() {
    let Some(admin_url) = std::env::var("SVC_TEST_DATABASE_URL").ok() else {
        return;
    };
    let name = format!("svc_bb_ascii_{}", uuid::Uuid::new_v4().simple());
    exec_store(
        &admin_url,
        &[&format!(
            "CREATE DATABASE {name} ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' \
             TEMPLATE template0"
        )],
    );
    let source = format!("{}/{name}", admin_url.rsplit_once('/').unwrap().0);
    exec_store(
        &source,
        &[
            "CREATE TABLE notes (id int4, body text)",
            "INSERT INTO notes VALUES (1, 'plain'), (2, convert_from('\\x6869ff'::bytea, 'SQL_ASCII'))",
        ],
    );
    let s = Server::start_with(
        Backend::Sqlite,
        &[("SVC_INTEGRATION_OLD_URL", source.as_str())],
    );
    let admin = s.admin_token();
    register(
        &s,
        &admin,
        json!({"id": "old_notes", "source_type": "integration", "bucket": "old",
               "source_table": "notes", "query_mode": "materialized"}),
    );
    let (state, notes) = sync_now(&s, &admin, "old_notes", false);
    assert_eq!(
        (&state["status"], &state["rows"]),
        (&json!("ok"), &json!(2)),
        "{state}"
    );
    assert!(
        notes.iter().any(|n| n.starts_with("1 text values")),
        "{notes:?}"
    );
    let rows = query_rows(&s, &admin, "SELECT body FROM old_notes ORDER BY id");
    assert_eq!(rows[1]["body"], "hi\u{fffd}");
}
