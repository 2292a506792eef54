//! The index's answers against the scans', over the pipeline's own files on both backends.

use std::io::Write as _;

use chrono::Utc;
use svc_store::testing::{self, TempDir};
use svc_store::Store;

use crate::browse::{Browser, Filters, GroupBy};
use crate::corpus::{self, Rng};
use crate::files::SessionFiles;
use crate::{EventSegments, Pipeline, Trigger};

/// Three owners' generated sessions over the last ten days, one starting two days ahead
/// (a clock gone wrong), processed by the pipeline.
async fn corpus(store: &Store) -> (TempDir, Vec<String>) {
    let data = TempDir::new();
    let root = data.0.join("user_sessions");
    let mut rng = Rng::new(7);
    let now = Utc::now().timestamp();
    let mut names = Vec::new();
    for u in 0..3 {
        let user = store
            .create_user(&format!("owner{u}@example.com"), None, None)
            .await
            .unwrap();
        names.push(user.email.clone());
        std::fs::create_dir_all(root.join(&user.id)).unwrap();
        for s in 0..8_u64 {
            let index = u * 100 + s;
            let start = if index == 207 {
                now + 2 * 86_400
            } else {
                now - rng.below(10 * 86_400) as i64 - 600
            };
            let path = root.join(&user.id).join(format!("s{s}.jsonl"));
            let mut out = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
            corpus::session_at(&mut out, &mut rng, index, 60, start).unwrap();
            out.flush().unwrap();
        }
    }
    let pipeline = Pipeline::new(
        store.clone(),
        SessionFiles::new(&data.0),
        EventSegments::new(&data.0),
    );
    let report = pipeline.run(Trigger::Manual, false).await.unwrap();
    assert_eq!((report.processed, report.failed), (24, 0), "{report:?}");
    (data, names)
}

fn filters(since_minutes: u32) -> Filters {
    Filters {
        since_minutes,
        ..Filters::default()
    }
}

/// Every filter the page offers, alone and combined.
fn cases(owners: &[String]) -> Vec<Filters> {
    let mut out = Vec::new();
    for window in [60, 1_440, 10_080, 43_200] {
        out.push(filters(window));
    }
    let week = || filters(10_080);
    out.push(Filters {
        username: Some(owners[1].clone()),
        ..week()
    });
    out.push(Filters {
        username: Some("nobody@example.com".into()),
        ..week()
    });
    for tool in ["Read", "Skill", "mcp__db__query", "NoSuchTool"] {
        out.push(Filters {
            tool_name: Some(tool.into()),
            ..week()
        });
    }
    out.push(Filters {
        source: Some("builtin".into()),
        ..week()
    });
    out.push(Filters {
        event_type: Some("tool_use".into()),
        ..week()
    });
    out.push(Filters {
        only_errors: true,
        ..week()
    });
    for q in ["Read", "review", "compound:", "%", "_", "zz"] {
        out.push(Filters {
            q: Some(q.into()),
            ..week()
        });
    }
    out.push(Filters {
        username: Some(owners[0].clone()),
        tool_name: Some("Bash".into()),
        only_errors: true,
        ..filters(43_200)
    });
    out
}

#[tokio::test]
async fn the_index_counts_what_the_scans_count_on_both_backends() {
    for (store, _dir) in testing::all_backends().await {
        let (data, owners) = corpus(&store).await;
        let indexed = Browser::new(store.clone(), &data.0);
        let scanned = Browser::new(store.clone(), &data.0).index_at_most(0);
        let scanned_clone = scanned.clone();
        assert!(
            !scanned.has_context(),
            "the DataFusion context is made on the first read, not with the browser"
        );
        // An index too small for the corpus answers nothing and the scans answer instead.
        let small = Browser::new(store.clone(), &data.0).index_at_most(10);

        for window in [60, 1_440, 43_200] {
            let (a, b) = (
                indexed.facets(window).await.unwrap(),
                scanned.facets(window).await.unwrap(),
            );
            assert_eq!(
                (a.users, a.tools, a.sources, a.event_types),
                (b.users, b.tools, b.sources, b.event_types),
                "facets of {window} minutes"
            );
        }
        assert!(
            scanned_clone.has_context(),
            "a clone shares the context its original made"
        );
        let week = indexed.kpis(&filters(10_080)).await.unwrap();
        assert!(week.events_total > 500 && week.errors > 0, "{week:?}");
        let overflowing = small.kpis(&filters(10_080)).await.unwrap();
        assert_eq!(overflowing.events_total, week.events_total);
        assert_eq!(overflowing.distinct_users, week.distinct_users);

        for f in cases(&owners) {
            let (a, b) = (
                indexed.kpis(&f).await.unwrap(),
                scanned.kpis(&f).await.unwrap(),
            );
            assert_eq!(
                (a.events_total, a.distinct_users, a.distinct_tools, a.errors),
                (b.events_total, b.distinct_users, b.distinct_tools, b.errors),
                "kpis of {f:?}"
            );
            for g in [
                GroupBy::Day,
                GroupBy::Username,
                GroupBy::ToolName,
                GroupBy::Source,
                GroupBy::RefId,
            ] {
                for sort in [
                    None,
                    Some("bucket:asc"),
                    Some("bucket:desc"),
                    Some("invocations:asc"),
                    Some("distinct_sessions:desc"),
                    Some("errors:desc"),
                    Some("no_such_column:asc"),
                ] {
                    for (limit, offset) in [(500, 0), (3, 2)] {
                        let (a, b) = (
                            indexed
                                .query(&f, Some(g), sort, limit, offset)
                                .await
                                .unwrap(),
                            scanned
                                .query(&f, Some(g), sort, limit, offset)
                                .await
                                .unwrap(),
                        );
                        assert_eq!(
                            (a.rows, a.total, a.next_offset),
                            (b.rows, b.total, b.next_offset),
                            "{g:?} by {sort:?} ({limit} from {offset}) of {f:?}"
                        );
                    }
                }
            }
            // The page's one walk: the three reads' answers.
            for g in [Some(GroupBy::Day), Some(GroupBy::ToolName), None] {
                let (kpis, facets, page) = indexed.overview(&f, g, None, 100, 0).await.unwrap();
                let (k, fa, p) = (
                    scanned.kpis(&f).await.unwrap(),
                    scanned.facets(f.since_minutes).await.unwrap(),
                    scanned.query(&f, g, None, 100, 0).await.unwrap(),
                );
                assert_eq!(
                    (
                        kpis.events_total,
                        kpis.distinct_users,
                        kpis.distinct_tools,
                        kpis.errors
                    ),
                    (k.events_total, k.distinct_users, k.distinct_tools, k.errors),
                    "overview kpis of {f:?}"
                );
                assert_eq!(
                    (
                        facets.users,
                        facets.tools,
                        facets.sources,
                        facets.event_types
                    ),
                    (fa.users, fa.tools, fa.sources, fa.event_types),
                    "overview facets of {f:?}"
                );
                assert_eq!(
                    (page.rows, page.total, page.next_offset),
                    (p.rows, p.total, p.next_offset),
                    "overview {g:?} of {f:?}"
                );
            }
            for sort in [None, Some("occurred_at:asc")] {
                for (limit, offset) in [(100, 0), (7, 40), (500, 0)] {
                    let (a, b) = (
                        indexed.query(&f, None, sort, limit, offset).await.unwrap(),
                        scanned.query(&f, None, sort, limit, offset).await.unwrap(),
                    );
                    assert_eq!(
                        (a.rows, a.total, a.next_offset),
                        (b.rows, b.total, b.next_offset),
                        "raw by {sort:?} ({limit} from {offset}) of {f:?}"
                    );
                }
            }
        }
    }
}
