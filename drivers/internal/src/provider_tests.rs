//! The internal provider against real stores: SQLite always, PostgreSQL when
//! `SVC_TEST_DATABASE_URL` is set.

use sqlx::AnyPool;
use svc_plugin_api::arrow::array::{Array, AsArray};
use svc_plugin_api::arrow::datatypes::Int64Type;
use svc_plugin_api::datafusion::logical_expr::{col, lit};
use svc_plugin_api::datafusion::prelude::SessionContext;
use svc_plugin_api::{Caller, SourceDriver, TableRef};

use crate::{can_push, roster_entry, InternalDriver, Param, ScanSql, StoreColumn};

struct Store {
    pool: AnyPool,
    postgres: bool,
    _dir: Option<std::path::PathBuf>,
}

impl Drop for Store {
    fn drop(&mut self) {
        if let Some(d) = &self._dir {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

fn unique() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{}_{nanos}", std::process::id())
}

async fn stores() -> Vec<Store> {
    sqlx::any::install_default_drivers();
    let dir = std::env::temp_dir().join(format!("svc-internal-{}", unique()));
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.join("s.db").display());
    let mut out = vec![Store {
        pool: AnyPool::connect(&url).await.unwrap(),
        postgres: false,
        _dir: Some(dir),
    }];
    match std::env::var("SVC_TEST_DATABASE_URL") {
        Ok(admin) => {
            let name = format!("svc_unit_{}", unique());
            let admin_pool = AnyPool::connect(&admin).await.unwrap();
            sqlx::query(&format!("CREATE DATABASE {name}"))
                .execute(&admin_pool)
                .await
                .unwrap();
            let base = admin.rsplit_once('/').unwrap().0;
            out.push(Store {
                pool: AnyPool::connect(&format!("{base}/{name}")).await.unwrap(),
                postgres: true,
                _dir: None,
            });
        }
        Err(_) => eprintln!("notice: SVC_TEST_DATABASE_URL unset; skipping the PostgreSQL run"),
    }
    for s in &out {
        sqlx::query(
            "CREATE TABLE audit_log (id TEXT NOT NULL, user_id TEXT, action TEXT, \
             timestamp TEXT, duration_ms BIGINT)",
        )
        .execute(&s.pool)
        .await
        .unwrap();
        for (i, (user, action, ts, ms)) in [
            ("u1", "a", "2026-11-01T10:00:00Z", 5),
            ("u1", "b", "2026-11-02T10:00:00Z", 50),
            ("u1", "c", "2026-11-03T10:00:00Z", 500),
            ("u2", "a", "2026-11-01T11:00:00Z", 7),
            ("u2", "z", "2026-11-04T11:00:00Z", 70),
        ]
        .into_iter()
        .enumerate()
        {
            sqlx::query("INSERT INTO audit_log VALUES ($1, $2, $3, $4, $5)")
                .bind(format!("r{i}"))
                .bind(user)
                .bind(action)
                .bind(ts)
                .bind(ms as i64)
                .execute(&s.pool)
                .await
                .unwrap();
        }
    }
    out
}

fn audit_table() -> TableRef {
    TableRef {
        id: "svc_audit".into(),
        source_type: "internal".into(),
        bucket: None,
        source_table: None,
        query_mode: "internal".into(),
        source_query: None,
        ..TableRef::default()
    }
}

fn caller(user_id: &str, is_admin: bool) -> Caller {
    Caller {
        user_id: user_id.into(),
        username: format!("{user_id}@example.com"),
        is_admin,
    }
}

async fn run(store: &Store, who: &Caller, sql: &str) -> Vec<Vec<String>> {
    let driver = InternalDriver::new(
        store.pool.clone(),
        store.postgres,
        std::path::Path::new("/nonexistent"),
    );
    let provider = driver.table_provider(&audit_table(), who).await.unwrap();
    let ctx = SessionContext::new();
    ctx.register_table("svc_audit", provider).unwrap();
    let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
    rows_of(&batches)
}

/// Every cell as text, row by row.
fn rows_of(batches: &[svc_plugin_api::RecordBatch]) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    for b in batches {
        for r in 0..b.num_rows() {
            rows.push(
                b.columns()
                    .iter()
                    .map(|c| {
                        svc_plugin_api::arrow::util::display::array_value_to_string(c, r).unwrap()
                    })
                    .collect(),
            );
        }
    }
    rows
}

#[tokio::test]
async fn a_non_admin_query_only_ever_sees_their_rows() {
    for s in stores().await {
        let u1 = caller("u1", false);
        // A predicate that would match other users' rows cannot widen the row filter.
        let rows = run(
            &s,
            &u1,
            "SELECT action FROM svc_audit WHERE action <> 'b' OR user_id = 'u2' ORDER BY action",
        )
        .await;
        assert_eq!(rows, [["a"], ["c"]], "postgres={}", s.postgres);
        let rows = run(&s, &u1, "SELECT count(*) FROM svc_audit").await;
        assert_eq!(rows, [["3"]]);
        let rows = run(&s, &caller("admin", true), "SELECT count(*) FROM svc_audit").await;
        assert_eq!(rows, [["5"]]);
        // Pushed predicates agree with DataFusion's semantics, including text ranges.
        let rows = run(
            &s,
            &caller("admin", true),
            "SELECT id FROM svc_audit WHERE timestamp >= '2026-11-02' AND duration_ms BETWEEN 10 AND 100 \
             AND action IN ('b', 'z') ORDER BY id",
        )
        .await;
        assert_eq!(rows, [["r1"], ["r4"]]);
        // Not pushed (a function), still correct because DataFusion applies it.
        let rows = run(
            &s,
            &u1,
            "SELECT action FROM svc_audit WHERE upper(action) = 'C' LIMIT 5",
        )
        .await;
        assert_eq!(rows, [["c"]]);
    }
}

#[tokio::test]
async fn samples_and_scans_share_one_statement_builder() {
    for s in stores().await {
        let driver = InternalDriver::new(
            s.pool.clone(),
            s.postgres,
            std::path::Path::new("/nonexistent"),
        );
        let batches = driver
            .sample(&audit_table(), 2, &caller("u2", false))
            .await
            .unwrap();
        let b = &batches[0];
        assert_eq!(b.num_rows(), 2);
        let users = b.column_by_name("user_id").unwrap().as_string::<i32>();
        assert!(users.iter().all(|u| u == Some("u2")));
        let ms = b
            .column_by_name("duration_ms")
            .unwrap()
            .as_primitive::<Int64Type>();
        assert_eq!(ms.null_count(), 0);
    }
}

fn columns() -> Vec<StoreColumn> {
    [
        ("id", "TEXT"),
        ("action", "TEXT"),
        ("duration_ms", "BIGINT"),
    ]
    .into_iter()
    .map(|(n, t)| StoreColumn {
        name: n.into(),
        store_type: t.into(),
        nullable: true,
    })
    .collect()
}

#[test]
fn predicates_are_pushed_only_when_the_store_agrees_and_literals_are_bound() {
    let cols = columns();
    let table = roster_entry("svc_audit").unwrap();
    let filter = ("user_id", "u1".to_string());
    let preds = [
        col("duration_ms").gt(lit(10_i64)),
        col("action").gt_eq(lit("x'; DROP TABLE audit_log; --")),
    ];
    assert!(preds.iter().all(|p| can_push(p, &cols, true)));
    // Not pushable: a function call, and a column the store does not have; building a
    // statement with one is an error, never a silently dropped condition.
    let upper = svc_plugin_api::datafusion::functions::expr_fn::upper(col("action")).eq(lit("A"));
    let missing = col("missing").eq(lit(1_i64));
    for bad in [&upper, &missing] {
        assert!(!can_push(bad, &cols, true));
        assert!(ScanSql::build(
            table,
            &cols,
            &cols,
            None,
            std::slice::from_ref(bad),
            None,
            true
        )
        .is_err());
    }
    // The filtered column need not be selected.
    let scan = ScanSql::build(
        table,
        &cols,
        &cols[..2],
        Some(&filter),
        &preds,
        Some(7),
        true,
    )
    .unwrap();
    assert_eq!(
        scan.sql,
        "SELECT \"id\", \"action\" FROM audit_log WHERE \"user_id\" = $1 AND \"duration_ms\" > $2 \
         AND \"action\" COLLATE \"C\" >= $3 LIMIT 7"
    );
    assert_eq!(
        scan.params,
        [
            Param::Text("u1".into()),
            Param::Int(10),
            Param::Text("x'; DROP TABLE audit_log; --".into())
        ]
    );
    // SQLite compares text bytewise already; a count needs no columns at all.
    let scan = ScanSql::build(table, &cols, &[], None, &preds[1..2], None, false).unwrap();
    assert_eq!(
        scan.sql,
        "SELECT 1 AS one FROM audit_log WHERE \"action\" >= $1"
    );
}

/// Rows of `sql` for `who`, and whether the store answered an aggregate (`pushdown` adds the
/// driver's optimizer rule, as the engine does).
async fn run_aggregate(
    store: &Store,
    who: &Caller,
    sql: &str,
    pushdown: bool,
) -> (Vec<Vec<String>>, bool) {
    let driver = InternalDriver::new(
        store.pool.clone(),
        store.postgres,
        std::path::Path::new("/nonexistent"),
    );
    let provider = driver.table_provider(&audit_table(), who).await.unwrap();
    let mut state =
        svc_plugin_api::datafusion::execution::SessionStateBuilder::new().with_default_features();
    if pushdown {
        for rule in driver.optimizer_rules() {
            state = state.with_optimizer_rule(rule);
        }
    }
    let ctx = SessionContext::new_with_state(state.build());
    ctx.register_table("svc_audit", provider).unwrap();
    let df = ctx.sql(sql).await.unwrap();
    let plan = df.clone().into_optimized_plan().unwrap();
    let pushed = plan
        .display_indent()
        .to_string()
        .contains("store_aggregate");
    let batches = df.collect().await.unwrap();
    (rows_of(&batches), pushed)
}

#[tokio::test]
async fn aggregates_run_in_the_store_behind_the_row_filter_and_agree_with_datafusion() {
    for s in stores().await {
        // A row of nulls: counts of a column skip it, min/max/sum ignore it, groups keep it.
        sqlx::query(
            "INSERT INTO audit_log VALUES ('r9', 'u2', NULL, NULL, NULL), \
             ('r10', 'u1', 'B', '2026-11-05T10:00:00Z', 1)",
        )
        .execute(&s.pool)
        .await
        .unwrap();
        let admin = caller("admin", true);
        let u1 = caller("u1", false);
        let cases: &[(&Caller, &str, bool)] = &[
            (&admin, "SELECT count(*) FROM svc_audit", true),
            (&u1, "SELECT count(*) FROM svc_audit", true),
            (
                &admin,
                "SELECT user_id, count(*), count(action), min(duration_ms), max(action), \
                 sum(duration_ms), min(timestamp) FROM svc_audit GROUP BY user_id ORDER BY user_id",
                true,
            ),
            // Text order is byte order ('B' < 'a'), whatever the database's locale says.
            (&admin, "SELECT min(action), max(action) FROM svc_audit", true),
            (
                &admin,
                "SELECT action, count(user_id) AS n FROM svc_audit WHERE duration_ms > 6 \
                 GROUP BY action HAVING count(*) >= 1 ORDER BY action NULLS FIRST",
                true,
            ),
            (
                &admin,
                "SELECT action, count(*) FROM svc_audit GROUP BY action ORDER BY action NULLS FIRST",
                true,
            ),
            // A predicate naming other users cannot widen the row filter of a pushed aggregate.
            (
                &u1,
                "SELECT count(*), sum(duration_ms), max(action) FROM svc_audit \
                 WHERE user_id = 'u2' OR action = 'z'",
                true,
            ),
            (
                &u1,
                "SELECT user_id, count(*) FROM svc_audit GROUP BY user_id ORDER BY user_id",
                true,
            ),
            // Not the store's to answer: DataFusion does, and the answers agree.
            (&admin, "SELECT count(*) FROM svc_audit WHERE upper(action) = 'A'", false),
            (&admin, "SELECT avg(duration_ms) FROM svc_audit", false),
            (&admin, "SELECT sum(duration_ms) FILTER (WHERE action = 'a') FROM svc_audit", false),
            (&admin, "SELECT count(*) FROM (SELECT * FROM svc_audit LIMIT 2)", false),
            (
                &admin,
                "SELECT length(action), count(*) FROM svc_audit GROUP BY length(action) \
                 ORDER BY 1 NULLS FIRST",
                false,
            ),
            (&admin, "SELECT count(DISTINCT user_id) FROM svc_audit", true),
        ];
        for (who, sql, expect_pushed) in cases {
            let (plain, pushed_without) = run_aggregate(&s, who, sql, false).await;
            let (got, pushed) = run_aggregate(&s, who, sql, true).await;
            assert!(!pushed_without);
            assert_eq!(got, plain, "postgres={} {sql}", s.postgres);
            assert_eq!(pushed, *expect_pushed, "postgres={} {sql}", s.postgres);
        }
        // The answers themselves, not only their agreement.
        let (rows, _) = run_aggregate(
            &s,
            &u1,
            "SELECT count(*), sum(duration_ms), max(action) FROM svc_audit \
             WHERE user_id = 'u2' OR action = 'z'",
            true,
        )
        .await;
        assert_eq!(rows, [["0", "", ""]]);
        let (rows, _) = run_aggregate(
            &s,
            &admin,
            "SELECT user_id, count(*), count(action), min(duration_ms), max(action), \
             sum(duration_ms) FROM svc_audit GROUP BY user_id ORDER BY user_id",
            true,
        )
        .await;
        assert_eq!(
            rows,
            [
                ["u1", "4", "4", "1", "c", "556"],
                ["u2", "3", "2", "7", "z", "77"]
            ]
        );
        let (rows, _) = run_aggregate(
            &s,
            &admin,
            "SELECT min(action), max(action) FROM svc_audit",
            true,
        )
        .await;
        assert_eq!(rows, [["B", "z"]]);
    }
}
