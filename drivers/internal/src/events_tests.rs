//! Segment names, the hidden key columns, and where the scan finds its files.

use super::*;
use svc_plugin_api::arrow::array::StringArray;
use svc_plugin_api::datafusion::prelude::{col, SessionContext};
#[test]
fn only_names_this_module_makes_are_paths() {
    let s = EventSegments::new(Path::new("/data"));
    assert!(s.path("0190a-b2.parquet").is_ok());
    for bad in [
        "../x.parquet",
        "a/b.parquet",
        ".parquet",
        "x.csv",
        "a b.parquet",
        "",
    ] {
        assert!(s.path(bad).is_err(), "{bad:?}");
    }
}

/// A batch of events as files held them before the keys: one row per (owner, session).
fn unkeyed(rows: &[(&str, &str)]) -> RecordBatch {
    use svc_plugin_api::arrow::array::{BooleanArray, Int64Array};
    let schema = schema();
    let columns = schema
        .fields()
        .iter()
        .map(|f| -> ArrayRef {
            match f.data_type() {
                DataType::Boolean => Arc::new(BooleanArray::from(vec![false; rows.len()])),
                DataType::Int64 => Arc::new(Int64Array::from(vec![1; rows.len()])),
                _ => Arc::new(StringArray::from_iter_values(rows.iter().map(
                    |(owner, session)| match f.name().as_str() {
                        "username" => *owner,
                        "session_id" => *session,
                        _ => "2026-01-02T00:00:00Z",
                    },
                ))),
            }
        })
        .collect();
    RecordBatch::try_new(schema, columns).unwrap()
}

fn listed(names: &[&str]) -> Vec<EventFile> {
    names
        .iter()
        .map(|n| EventFile {
            name: (*n).to_owned(),
            first_at: None,
            last_at: None,
        })
        .collect()
}

#[test]
fn an_unkeyed_batch_gets_the_keys_of_its_owners_and_sessions() {
    use svc_plugin_api::arrow::datatypes::UInt64Type;
    let keyed = with_keys(unkeyed(&[("a@x", "s1"), ("b@x", "s1")])).unwrap();
    assert_eq!(keyed.schema(), keyed_schema());
    let column = |name| {
        keyed
            .column_by_name(name)
            .unwrap()
            .as_primitive::<UInt64Type>()
            .values()
            .to_vec()
    };
    assert_eq!(column("username_hash"), [key("a@x"), key("b@x")]);
    assert_eq!(column("session_id_hash"), [key("s1"), key("s1")]);
    assert_ne!(key("a@x"), key("b@x"));
    // A keyed batch is kept as it is.
    assert_eq!(with_keys(keyed.clone()).unwrap(), keyed);
}

#[tokio::test]
async fn an_unkeyed_file_reads_with_keys_and_turns_the_keyed_provider_off() {
    use svc_plugin_api::datafusion::functions_aggregate::expr_fn::count_distinct;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let dir = std::env::temp_dir().join(format!("svc-events-{}-{nanos}", std::process::id()));
    let segments = EventSegments::new(&dir);
    let mut old = AtomicParquet::create(&segments.path("old.parquet").unwrap(), schema()).unwrap();
    old.write(&unkeyed(&[("a@x", "s1")])).unwrap();
    old.commit().unwrap();
    let new = with_keys(unkeyed(&[("b@x", "s2"), ("b@x", "s3")])).unwrap();
    segments.write("new.parquet", &new).unwrap();

    let read = segments.read("old.parquet").unwrap();
    assert_eq!(
        read[0].schema(),
        keyed_schema(),
        "read whole, an old file is keyed"
    );
    let both = listed(&["old.parquet", "new.parquet"]);
    assert!(segments.keyed_provider(&both).unwrap().is_none());
    let keyed = segments
        .keyed_provider(&listed(&["new.parquet"]))
        .unwrap()
        .expect("every listed file has keys");
    let context = SessionContext::new();
    let counts = context
        .read_table(keyed)
        .unwrap()
        .aggregate(
            vec![],
            vec![
                count_distinct(col("username_hash")),
                count_distinct(col("session_id_hash")),
            ],
        )
        .unwrap()
        .collect()
        .await
        .unwrap();
    let count = |i: usize| {
        counts[0]
            .column(i)
            .as_primitive::<svc_plugin_api::arrow::datatypes::Int64Type>()
            .value(0)
    };
    assert_eq!((count(0), count(1)), (1, 2));

    // The table everyone reads shows the event columns only, over old and new files alike.
    let public = segments.provider(&both).unwrap();
    assert_eq!(public.schema(), schema());
    let rows = context.read_table(public).unwrap().collect().await.unwrap();
    assert_eq!(rows.iter().map(RecordBatch::num_rows).sum::<usize>(), 3);
    assert!(rows
        .iter()
        .all(|b| b.schema().fields() == schema().fields()));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A data directory's name may hold any character a file name can: the scan finds its files
/// by their path, not by a URL made of it.
#[tokio::test]
async fn files_are_found_under_a_directory_named_with_any_character() {
    for (i, name) in ["a b", "a:b", "a{b}", "a[b]", "a%b", "a%7Bb", "a#b", "josé"]
        .into_iter()
        .enumerate()
    {
        let dir = std::env::temp_dir()
            .join(format!("svc-events-{}-{i}", std::process::id()))
            .join(name);
        let segments = EventSegments::new(&dir);
        segments
            .write(
                "new.parquet",
                &with_keys(unkeyed(&[("b@x", "s2")])).unwrap(),
            )
            .unwrap();
        let provider = segments.provider(&listed(&["new.parquet"])).unwrap();
        let rows = SessionContext::new()
            .read_table(provider)
            .unwrap()
            .collect()
            .await
            .unwrap_or_else(|e| panic!("{name:?}: {e}"));
        assert_eq!(rows.iter().map(RecordBatch::num_rows).sum::<usize>(), 1);
        let _ = std::fs::remove_dir_all(dir.parent().unwrap());
    }
}
