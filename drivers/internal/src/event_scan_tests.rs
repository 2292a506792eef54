//! The time window a scan keeps, and that settling time filters per file changes no answer.

use super::*;
use crate::events::{schema, with_keys, EventFile, EventSegments};
use svc_plugin_api::arrow::array::{ArrayRef, BooleanArray, Int64Array, StringArray};
use svc_plugin_api::arrow::datatypes::DataType;
use svc_plugin_api::arrow::util::pretty::pretty_format_batches;
use svc_plugin_api::datafusion::datasource::MemTable;
use svc_plugin_api::datafusion::physical_plan::displayable;
use svc_plugin_api::datafusion::prelude::{col, lit, SessionContext};
use svc_plugin_api::RecordBatch;

fn spanned(first: &str, last: &str) -> Spanned {
    Spanned {
        file: PartitionedFile::new("/x.parquet", 1),
        first_at: Some(first.into()),
        last_at: Some(last.into()),
    }
}

/// The narrowest closed range of `occurred_at` the (conjunctive) filters allow.
fn time_bounds(filters: &[Expr]) -> (Option<String>, Option<String>) {
    bounds(&all_time_tests(filters))
}

#[test]
fn the_time_range_comes_from_plain_comparisons_only() {
    let t = || col("occurred_at");
    let both = time_bounds(&[
        t().gt_eq(lit("2026-01-02")).and(lit("2026-01-05").gt(t())),
        t().gt(lit("2026-01-01")),
        col("username").lt(lit("a")),
    ]);
    assert_eq!(both, (Some("2026-01-02".into()), Some("2026-01-05".into())));
    let between = time_bounds(&[t().between(lit("2026-01-03"), lit("2026-01-04"))]);
    assert_eq!(
        between,
        (Some("2026-01-03".into()), Some("2026-01-04".into()))
    );
    // An OR, a negation or a non-text literal says nothing about the range.
    let none = time_bounds(&[
        t().gt(lit("2026-01-02")).or(col("is_error")),
        t().not_between(lit("a"), lit("b")),
        t().gt(lit(5_i64)),
    ]);
    assert_eq!(none, (None, None));
}

#[test]
fn a_file_is_skipped_only_when_it_cannot_hold_a_row_of_the_range() {
    let f = spanned("2026-01-02T10:00:00Z", "2026-01-03T10:00:00Z");
    let range = |lo: Option<&str>, hi: Option<&str>| (lo.map(Into::into), hi.map(Into::into));
    assert!(f.overlaps(&range(None, None)));
    assert!(f.overlaps(&range(Some("2026-01-03"), None)));
    assert!(!f.overlaps(&range(Some("2026-01-04"), None)));
    assert!(f.overlaps(&range(None, Some("2026-01-02T10:00:00Z"))));
    assert!(!f.overlaps(&range(None, Some("2026-01-02"))));
    let unknown = Spanned {
        first_at: None,
        last_at: None,
        ..f
    };
    assert!(unknown.overlaps(&range(Some("2027"), Some("2028"))));
}

#[test]
fn a_file_is_read_without_a_row_filter_only_when_its_whole_span_passes() {
    let f = spanned("2026-01-02T10:00:00Z", "2026-01-03T10:00:00Z");
    let tests = |filters: &[Expr]| all_time_tests(filters);
    let t = || col("occurred_at");
    assert!(f.within(&[]));
    assert!(f.within(&tests(&[t().gt_eq(lit("2026-01-02T10:00:00Z"))])));
    assert!(!f.within(&tests(&[t().gt(lit("2026-01-02T10:00:00Z"))])));
    assert!(f.within(&tests(&[t().lt_eq(lit("2026-01-03T10:00:00Z"))])));
    assert!(!f.within(&tests(&[t().lt(lit("2026-01-03T10:00:00Z"))])));
    assert!(f.within(&tests(&[t().between(lit("2026-01-02"), lit("2026-01-04"))])));
    assert!(!f.within(&tests(&[t().eq(lit("2026-01-02T10:00:00Z"))])));
    assert!(!f.within(&tests(&[
        t().gt_eq(lit("2026-01-01")),
        t().lt(lit("2026-01-03"))
    ])));
    let unknown = Spanned {
        first_at: None,
        ..f
    };
    assert!(!unknown.within(&tests(&[t().gt_eq(lit("2000"))])));
    // Only plain comparisons are settled here; the rest stay DataFusion's.
    for other in [
        t().not_eq(lit("2026")),
        t().gt(lit("a")).or(t().lt(lit("b"))),
        t().not_between(lit("a"), lit("b")),
        col("username").gt(lit("a")),
    ] {
        assert!(time_tests(&other).is_none(), "{other}");
    }
}

/// Events of one owner per file (`owner`), one row per time.
fn events_at(owner: &str, times: &[&str]) -> RecordBatch {
    let columns = schema()
        .fields()
        .iter()
        .map(|f| -> ArrayRef {
            match (f.name().as_str(), f.data_type()) {
                (_, DataType::Boolean) => Arc::new(BooleanArray::from(vec![false; times.len()])),
                (_, DataType::Int64) => Arc::new(Int64Array::from(vec![1; times.len()])),
                ("occurred_at", _) => Arc::new(StringArray::from(times.to_vec())),
                ("username", _) => Arc::new(StringArray::from(vec![owner; times.len()])),
                (name, _) => Arc::new(StringArray::from_iter_values(
                    times.iter().map(|t| format!("{name}-{t}")),
                )),
            }
        })
        .collect();
    with_keys(RecordBatch::try_new(schema(), columns).unwrap()).unwrap()
}

/// Answers of the same statements over the scan and over the same rows in memory agree,
/// whatever the window does to each file: skips it, keeps it whole, cuts through it.
#[tokio::test]
async fn settling_time_filters_per_file_changes_no_answer() {
    let dir = std::env::temp_dir().join(format!("svc-event-scan-{}", std::process::id()));
    let segments = EventSegments::new(&dir);
    let files: [(&str, &str, &[&str], bool); 3] = [
        (
            "a.parquet",
            "a",
            &["2026-01-01T00", "2026-01-01T12", "2026-01-01T23"],
            true,
        ),
        (
            "b.parquet",
            "b",
            &["2026-01-02T00", "2026-01-02T06", "2026-01-02T18"],
            true,
        ),
        // A file whose span the store does not know: always filtered.
        ("c.parquet", "c", &["2026-01-03T01", "2026-01-03T05"], false),
    ];
    let mut listed = Vec::new();
    let mut all = Vec::new();
    for (name, owner, times, known) in files {
        let batch = events_at(owner, times);
        segments.write(name, &batch).unwrap();
        all.push(batch);
        listed.push(EventFile {
            name: name.into(),
            first_at: known.then(|| times[0].to_owned()),
            last_at: known.then(|| times[times.len() - 1].to_owned()),
        });
    }
    let context = SessionContext::new();
    context
        .register_table("e", segments.keyed_provider(&listed).unwrap().unwrap())
        .unwrap();
    let memory = MemTable::try_new(all[0].schema(), vec![all]).unwrap();
    context.register_table("m", Arc::new(memory)).unwrap();
    let answer = |sql: String| {
        let context = context.clone();
        async move {
            let batches = context.sql(&sql).await.unwrap().collect().await.unwrap();
            pretty_format_batches(&batches).unwrap().to_string()
        }
    };
    for predicate in [
        "occurred_at >= '2026-01-01'",
        "occurred_at >= '2026-01-01T12'",
        "occurred_at > '2026-01-01T12'",
        "occurred_at < '2026-01-02T06'",
        "occurred_at <= '2026-01-02T06'",
        "occurred_at = '2026-01-02T06'",
        "'2026-01-02' < occurred_at",
        "occurred_at BETWEEN '2026-01-01T06' AND '2026-01-02T06'",
        "occurred_at NOT BETWEEN '2026-01-01T06' AND '2026-01-02T06'",
        "occurred_at >= '2026-01-01T12' AND occurred_at < '2026-01-03T02'",
        "occurred_at >= '2026-01-02' AND username = 'b'",
        "occurred_at >= '2026-01-02T06' OR username = 'a'",
        "occurred_at <> '2026-01-02T06'",
        "occurred_at > '2027'",
    ] {
        for select in [
            "SELECT username, occurred_at, is_error, username_hash",
            "SELECT username, is_error",
        ] {
            let ours = answer(format!("{select} FROM e WHERE {predicate} ORDER BY 1, 2")).await;
            let truth = answer(format!("{select} FROM m WHERE {predicate} ORDER BY 1, 2")).await;
            assert_eq!(ours, truth, "{select} WHERE {predicate}");
        }
        let count = |t: &str| format!("SELECT count(*) AS n FROM {t} WHERE {predicate}");
        assert_eq!(
            answer(count("e")).await,
            answer(count("m")).await,
            "{predicate}"
        );
        let limited = |t: &str| {
            format!(
                "SELECT count(*) AS n FROM (SELECT username FROM {t} WHERE {predicate} LIMIT 2)"
            )
        };
        assert_eq!(
            answer(limited("e")).await,
            answer(limited("m")).await,
            "{predicate}"
        );
    }

    // Files wholly inside the window are read with no row filter; a cut file is filtered.
    let known = segments.provider(&listed[..2]).unwrap();
    let plan = |predicate: &str| {
        let context = SessionContext::new();
        context.register_table("k", known.clone()).unwrap();
        let sql = format!("SELECT count(username) FROM k WHERE {predicate}");
        async move {
            let plan = context
                .sql(&sql)
                .await
                .unwrap()
                .create_physical_plan()
                .await
                .unwrap();
            let shown = displayable(plan.as_ref()).indent(false).to_string();
            shown
        }
    };
    let whole = plan("occurred_at >= '2026-01-01'").await;
    assert!(!whole.contains("FilterExec"), "{whole}");
    let cut = plan("occurred_at >= '2026-01-01T12'").await;
    assert_eq!(cut.matches("FilterExec").count(), 1, "{cut}");
    let _ = std::fs::remove_dir_all(&dir);
}
