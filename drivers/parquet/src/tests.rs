use std::sync::Arc;

use svc_plugin_api::arrow::array::{Float64Array, Int64Array, StringArray};
use svc_plugin_api::arrow::datatypes::{DataType, Field, Schema};
use svc_plugin_api::datafusion::parquet::arrow::ArrowWriter;
use svc_plugin_api::datafusion::parquet::file::properties::WriterProperties;

use super::*;

fn table(id: &str) -> TableRef {
    TableRef {
        id: id.into(),
        source_type: "local".into(),
        bucket: None,
        source_table: None,
        query_mode: "local".into(),
        source_query: None,
        ..TableRef::default()
    }
}

fn write(dir: &Path, id: &str, rows: i64, row_group: usize) -> PathBuf {
    let path = dir
        .join("extracts/local/data")
        .join(format!("{id}.parquet"));
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
        Field::new("score", DataType::Float64, true),
    ]));
    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(row_group))
        .build();
    let mut w =
        ArrowWriter::try_new(File::create(&path).unwrap(), schema.clone(), Some(props)).unwrap();
    let batch = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from_iter_values(0..rows)),
            Arc::new(StringArray::from_iter(
                (0..rows).map(|i| (i % 3 != 0).then(|| format!("n{i}"))),
            )),
            Arc::new(Float64Array::from_iter_values(
                (0..rows).map(|i| i as f64 / 2.0),
            )),
        ],
    )
    .unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    path
}

fn tmp() -> PathBuf {
    let p = std::env::temp_dir().join(format!(
        "svc-parquet-{}",
        std::process::id() as u128 * 1000 + rand_suffix()
    ));
    std::fs::create_dir_all(&p).unwrap();
    p
}

fn rand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
        % 1_000_000
}

#[tokio::test]
async fn schema_sample_and_size_come_from_the_file() {
    let dir = tmp();
    let path = write(&dir, "orders", 10_000, 1_000);
    let d = ParquetDriver::new(&dir);
    let caller = Caller {
        user_id: "u".into(),
        username: "u@x".into(),
        is_admin: false,
    };
    let s = d.schema(&table("orders"), &caller).await.unwrap();
    let cols: Vec<(&str, &str, bool)> = s
        .columns
        .iter()
        .map(|c| (c.name.as_str(), c.data_type.as_str(), c.nullable))
        .collect();
    assert_eq!(
        cols,
        [
            ("id", "Int64", false),
            ("name", "Utf8", true),
            ("score", "Float64", true)
        ]
    );

    let batches = d.sample(&table("orders"), 7, &caller).await.unwrap();
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 7);
    let ids = batches[0]
        .column(0)
        .as_any()
        .downcast_ref::<Int64Array>()
        .unwrap();
    assert_eq!(ids.value(0), 0);
    assert_eq!(
        d.size_on_disk(&table("orders")),
        Some(std::fs::metadata(&path).unwrap().len())
    );
    assert!(d.table_provider(&table("orders"), &caller).await.is_ok());
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn missing_corrupt_and_unsafe_files_are_typed_errors() {
    let dir = tmp();
    let d = ParquetDriver::new(&dir);
    let caller = Caller {
        user_id: "u".into(),
        username: "u@x".into(),
        is_admin: true,
    };
    let e = d.sample(&table("absent"), 5, &caller).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotFound);
    assert!(
        e.message.contains("'absent'") && e.message.contains("extracts/local/data/absent.parquet"),
        "{e}"
    );

    let path = write(&dir, "broken", 100, 10);
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let e = d.schema(&table("broken"), &caller).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Corrupt);
    assert!(e.message.contains("'broken'"));
    std::fs::write(&path, b"not parquet at all").unwrap();
    assert_eq!(
        d.sample(&table("broken"), 5, &caller)
            .await
            .unwrap_err()
            .kind,
        ErrorKind::Corrupt
    );

    for bad in ["..", ".", "a/b", "../x", "x\0y"] {
        assert!(d.files.path(&table(bad)).is_err(), "{bad:?}");
        assert_eq!(
            d.sample(&table(bad), 5, &caller).await.unwrap_err().kind,
            ErrorKind::NotFound
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_replaced_file_is_planned_with_its_own_schema() {
    let dir = tmp();
    let path = write(&dir, "t", 100, 50);
    let files = ParquetFiles::new(&dir);
    let names = |p: Arc<dyn TableProvider>| -> Vec<String> {
        p.schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect()
    };
    assert_eq!(
        names(files.table_provider(&table("t")).await.unwrap()),
        ["id", "name", "score"]
    );
    // Served from the cache while the file is unchanged.
    assert_eq!(
        names(files.table_provider(&table("t")).await.unwrap()),
        ["id", "name", "score"]
    );

    // A sync renames a new file over the old one.
    let schema = Arc::new(Schema::new(vec![Field::new(
        "total",
        DataType::Int64,
        false,
    )]));
    let next = dir.join("next.parquet");
    let mut w = ArrowWriter::try_new(File::create(&next).unwrap(), schema.clone(), None).unwrap();
    let batch =
        RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(vec![1, 2, 3]))]).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    std::fs::rename(&next, &path).unwrap();
    assert_eq!(
        names(files.table_provider(&table("t")).await.unwrap()),
        ["total"]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
