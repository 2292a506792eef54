//! The driver end to end on a temporary directory: deliveries, compaction, a compaction that
//! fails after some tables were replaced, and reopening.

use super::*;
use crate::config::Connection;
use crate::signature::sign;

fn driver(dir: &Path) -> TicketingDriver {
    std::env::set_var("SVC_TEST_TICKETING_UNIT_SECRET", "k");
    let mut config = TicketingConfig::default();
    config.connections.insert(
        "jira".into(),
        Connection {
            secret_env: Some("SVC_TEST_TICKETING_UNIT_SECRET".into()),
            ..Connection::default()
        },
    );
    TicketingDriver::new(dir, config)
}

fn delivery(id: &str, key: &str, t: i64, change: i64) -> Delivery {
    let body = format!(
        r#"{{"timestamp":{t},"webhookEvent":"jira:issue_updated","issue":{{"key":"{key}","fields":{{"summary":"at {t}"}}}},"changelog":{{"id":"{change}","items":[{{"field":"summary"}}]}}}}"#
    );
    Delivery {
        signature: Some(sign(b"k", body.as_bytes())),
        body: body.into_bytes(),
        delivery_id: Some(id.into()),
    }
}

fn rows(dir: &Path, kind: TableKind) -> u64 {
    let path = dir
        .join("extracts/ticketing/data")
        .join(format!("{}.parquet", table_id("jira", kind)));
    let mut n = 0;
    tables::read_rows(&path, None, |b| {
        n += b.num_rows() as u64;
        Ok(())
    })
    .unwrap();
    n
}

#[tokio::test]
async fn a_failed_compaction_leaves_whole_tables_and_the_next_one_has_no_duplicates() {
    let dir = TestDir::new();
    let d = driver(dir.path());
    d.compact("jira").await.unwrap();
    assert_eq!(
        rows(dir.path(), TableKind::Events),
        0,
        "empty tables at first"
    );
    for i in 0..5 {
        let r = d
            .receive("jira", delivery(&format!("a{i}"), "A-1", 1000 + i, 10 + i))
            .await;
        assert!(matches!(r, Ok(Receipt::Accepted { .. })), "{r:?}");
    }
    d.compact("jira").await.unwrap();
    assert_eq!(rows(dir.path(), TableKind::Events), 5);
    assert_eq!(rows(dir.path(), TableKind::Changelog), 5);

    // The checkpoint cannot be written: the tables are replaced, the checkpoint is not.
    for i in 5..8 {
        d.receive("jira", delivery(&format!("a{i}"), "A-2", 1000 + i, 10 + i))
            .await
            .unwrap();
    }
    let blocker = dir.path().join("ticketing/jira/.checkpoint.json.tmp");
    std::fs::create_dir_all(blocker.join("x")).unwrap();
    assert!(d.compact("jira").await.is_err());
    // Every table is whole and readable (old or new), never half-written.
    assert_eq!(rows(dir.path(), TableKind::Events), 8);
    std::fs::remove_dir_all(&blocker).unwrap();
    let status = d.tracker("jira").unwrap().status();
    assert!(status.checkpoint.last.unwrap().error.is_some());

    // The next compaction replays the same segments: no row twice.
    d.compact("jira").await.unwrap();
    assert_eq!(rows(dir.path(), TableKind::Events), 8);
    assert_eq!(rows(dir.path(), TableKind::Changelog), 8);
    assert_eq!(rows(dir.path(), TableKind::Issues), 2);

    // Reopened (a restart): replays are still recognised, the tables unchanged.
    drop(d);
    let d = driver(dir.path());
    let r = d.receive("jira", delivery("a3", "A-1", 1003, 13)).await;
    assert!(matches!(r, Ok(Receipt::Duplicate { .. })), "{r:?}");
    d.compact("jira").await.unwrap();
    assert_eq!(rows(dir.path(), TableKind::Events), 8);
    assert_eq!(d.tracker("jira").unwrap().status().totals.received, 8);
}

#[tokio::test]
async fn unknown_connections_and_oversized_bodies_are_refused() {
    let dir = TestDir::new();
    let d = driver(dir.path());
    let r = d.receive("other", delivery("x", "A-1", 1, 1)).await;
    assert_eq!(r, Err(Refused::UnknownConnection));
    let mut big = delivery("y", "A-1", 1, 1);
    big.body = vec![b' '; (10 << 20) + 1];
    let r = d.receive("jira", big).await;
    assert!(matches!(r, Err(Refused::TooLarge { .. })), "{r:?}");
    assert_eq!(d.seeded_tables().len(), 4);
}
