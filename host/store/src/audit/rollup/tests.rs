//! Rolled-up counts against counts of the log, on every backend.

use super::*;

fn at(s: &str) -> DateTime<Utc> {
    parse_ts(s).unwrap()
}

fn cov(from: &str, until: &str) -> Option<Coverage> {
    Some(Coverage {
        floor: DateTime::<Utc>::UNIX_EPOCH,
        from: at(from),
        until: at(until),
    })
}

fn window(since: &str, until: Option<&str>) -> AuditFilter {
    AuditFilter {
        since: Some(since.to_owned()),
        until: until.map(str::to_owned),
        ..AuditFilter::default()
    }
}

fn period(grain: Grain, from: &str, to: &str) -> (Grain, Range) {
    let ts = |s: &str| Some(format!("2026-{s}:00:00.000000Z"));
    (grain, (ts(from), ts(to)))
}

#[test]
fn a_window_splits_into_the_longest_periods_and_ragged_ends() {
    let c = cov("2026-11-01T05:00:00.000000Z", "2026-11-04T07:00:00.000000Z");
    let s = Split::of(&window("2026-11-01T03:30:00.000000Z", None), c);
    assert_eq!(
        s.periods,
        vec![
            period(Grain::Day, "11-02T00", "11-04T00"),
            period(Grain::Quarter, "11-01T06", "11-02T00"),
            period(Grain::Hour, "11-01T05", "11-01T06"),
            period(Grain::Quarter, "11-04T00", "11-04T06"),
            period(Grain::Hour, "11-04T06", "11-04T07"),
        ]
    );
    // The log gives the rest: from the window's start to the first covered hour, and
    // from the end of coverage on.
    assert_eq!(
        s.raw.binds,
        vec![
            "2026-11-01T03:30:00.000000Z".to_owned(),
            "2026-11-01T05:00:00.000000Z".to_owned(),
            "2026-11-04T07:00:00.000000Z".to_owned(),
        ]
    );
    // Within six hours: hours only, the partial hours at both ends from the log.
    let s = Split::of(
        &window(
            "2026-11-02T10:15:00.000000Z",
            Some("2026-11-02T12:45:00.000000Z"),
        ),
        c,
    );
    assert_eq!(s.periods, vec![period(Grain::Hour, "11-02T11", "11-02T12")]);
    assert_eq!(s.raw.binds.len(), 4);
    // A month: whole weeks from Monday, then days, quarters and hours at each end.
    let c = cov("2026-10-20T00:00:00.000000Z", "2026-11-25T13:00:00.000000Z");
    let s = Split::of(&window("2026-10-29T14:20:00.000000Z", None), c);
    assert_eq!(
        s.periods,
        vec![
            period(Grain::Week, "11-02T00", "11-23T00"),
            period(Grain::Day, "10-30T00", "11-02T00"),
            period(Grain::Quarter, "10-29T18", "10-30T00"),
            period(Grain::Hour, "10-29T15", "10-29T18"),
            period(Grain::Day, "11-23T00", "11-25T00"),
            period(Grain::Quarter, "11-25T00", "11-25T12"),
            period(Grain::Hour, "11-25T12", "11-25T13"),
        ]
    );
}

#[test]
fn weeks_start_on_monday() {
    let monday = at("2026-11-02T00:00:00.000000Z");
    for t in ["2026-11-02T00:00:00.000000Z", "2026-11-08T23:59:59.999999Z"] {
        assert_eq!(Grain::Week.floor(at(t)), monday, "{t}");
    }
    assert_eq!(
        Grain::Week.ceil(at("2026-11-02T00:00:00.000001Z")),
        at("2026-11-09T00:00:00.000000Z")
    );
    assert_eq!(Grain::Week.ceil(monday), monday);
    assert_eq!(
        Grain::Quarter.floor(at("2026-11-02T17:59:00.000000Z")),
        at("2026-11-02T12:00:00.000000Z")
    );
}

#[test]
fn anything_but_a_window_reads_the_log() {
    let c = cov("2026-11-01T00:00:00.000000Z", "2026-11-04T00:00:00.000000Z");
    let mut f = window("2026-11-01T00:00:00.000000Z", None);
    f.user_id = Some("u1".into());
    assert_eq!(Split::of(&f, c), Split::raw(&f));
    // No coverage, a window outside it, or a bound that is not a timestamp.
    let f = window("2026-11-01T00:00:00.000000Z", None);
    assert_eq!(Split::of(&f, None), Split::raw(&f));
    let late = window("2026-11-05T00:00:00.000000Z", None);
    assert_eq!(Split::of(&late, c), Split::raw(&late));
    let odd = window("yesterday", None);
    assert_eq!(Split::of(&odd, c), Split::raw(&odd));
    // Failures alone have a slice; successes, one status, or failures narrowed further
    // do not.
    let errors = errors_only(window("2026-11-01T00:00:00.000000Z", None));
    assert_eq!(Split::of(&errors, c).slice, Slice::Errors);
    assert_ne!(Split::of(&errors, c), Split::raw(&errors));
    for result in [ResultFilter::Success, ResultFilter::Status(500)] {
        let mut f = errors.clone();
        f.result = Some(result);
        assert_eq!(Split::of(&f, c), Split::raw(&f));
    }
    let mut f = errors;
    f.source = Some("cli".into());
    assert_eq!(Split::of(&f, c), Split::raw(&f));
}

#[test]
fn a_result_whose_match_differs_by_backend_has_no_slice() {
    assert_eq!(Slice::of_result("success"), Some(&Slice::ALL[..1]));
    assert_eq!(Slice::of_result("error.500"), Some(&Slice::ALL[..]));
    // SQLite's LIKE would call it a failure, PostgreSQL's would not.
    assert_eq!(Slice::of_result("Error.500"), None);
}

fn errors_only(f: AuditFilter) -> AuditFilter {
    AuditFilter {
        result: Some(ResultFilter::Error),
        ..f
    }
}

/// `n` rows spread over the `hours` before `end`, every dimension varied (rows without
/// a user, a client kind or a duration included).
fn rows(n: usize, end: DateTime<Utc>, hours: i64, tag: &str) -> Vec<AuditRecord> {
    (0..n)
        .map(|i| {
            let mut r = crate::audit::record_for_bench(
                &crate::audit::Actor::scheduler(),
                crate::audit::Event::new(["catalog.sample", "query.local", "scan"][i % 3]),
            );
            r.id = format!("{tag}-{i}");
            let back = Duration::seconds((i as i64 * 7_919) % (hours * 3_600));
            r.timestamp = format_ts(end - back);
            r.user_id = (i % 5 != 0).then(|| format!("user-{}", i % 7));
            r.client_kind = [None, Some("cli"), Some("web")][i % 3].map(str::to_owned);
            r.result = ["success", "success", "error.500", "error.403"][i % 4].to_owned();
            r.resource = (i % 9 != 0).then(|| format!("table:t{}", i % 11));
            r.duration_ms = (i % 6 != 0).then_some((i as i64 * 37) % 400);
            r
        })
        .collect()
}

/// The windows compared: ragged, day-long, several days, open-ended, and one the
/// rollups do not reach.
fn windows(now: DateTime<Utc>) -> Vec<AuditFilter> {
    let ts = |t: DateTime<Utc>| format_ts(t);
    vec![
        window(&ts(now - Duration::minutes(60)), None),
        window(&ts(now - Duration::minutes(1_440)), None),
        window(&ts(now - Duration::minutes(4 * 1_440)), None),
        window(
            &ts(now - Duration::minutes(3_011)),
            Some(&ts(now - Duration::minutes(1_207))),
        ),
        window(
            &ts(now - Duration::days(30)),
            Some(&ts(now - Duration::days(20))),
        ),
        window(&ts(now - Duration::minutes(10 * 1_440 + 13)), None),
        window(&ts(now - Duration::days(16)), None),
    ]
}

/// The cards and facets of every window and of its failures, counted over the log alone
/// and as the store counts them now; they must agree exactly.
async fn assert_counts_agree(store: &Store, now: DateTime<Utc>, when: &str) {
    let cov = store.rollup_coverage().await.unwrap();
    let windows = windows(now);
    let failures = windows.iter().cloned().map(errors_only).collect::<Vec<_>>();
    for f in windows.into_iter().chain(failures) {
        let rolled = Split::of(&f, cov);
        let log = Split::raw(&f);
        assert_eq!(
            store.kpis_of(&rolled).await.unwrap(),
            store.kpis_of(&log).await.unwrap(),
            "{when}: cards of {:?}..{:?}",
            f.since,
            f.until
        );
        assert_eq!(
            store.facets_of(&rolled).await.unwrap(),
            store.facets_of(&log).await.unwrap(),
            "{when}: facets of {:?}..{:?}",
            f.since,
            f.until
        );
    }
}

#[tokio::test]
async fn coverage_starts_at_the_last_hour_that_ended_a_grace_ago() {
    // Ten minutes into an hour its predecessor may still get rows, so neither the job
    // nor the writer (which creates the state on a late row) may start coverage there.
    for (store, _dir) in crate::testing::all_backends().await {
        let mut tx = store.pool().begin().await.unwrap();
        let cov = lock_coverage(&mut tx, at("2026-11-29T02:05:00.000000Z"))
            .await
            .unwrap();
        tx.commit().await.unwrap();
        assert_eq!(
            (cov.from, cov.until),
            (at("2026-11-29T01:00:00.000000Z"), cov.from)
        );
    }
}

#[tokio::test]
async fn rolled_up_counts_equal_counts_of_the_log_through_late_rows_and_pruning() {
    for (store, _dir) in crate::testing::all_backends().await {
        let now = Utc::now();
        store
            .insert_audit_batch(&rows(4_000, now, 400, "a"))
            .await
            .unwrap();
        // Nothing rolled up yet: every read is a count of the log.
        assert_eq!(
            store
                .rollup_coverage()
                .await
                .unwrap()
                .map(|c| c.from < c.until),
            Some(false)
        );

        let mut run = store.roll_up_audit(now).await.unwrap();
        while !run.complete {
            run = store.roll_up_audit(now).await.unwrap();
        }
        let cov = store.rollup_coverage().await.unwrap().unwrap();
        assert_eq!(cov.until, floor(now - GRACE, HOUR));
        assert!(cov.from <= now - Duration::hours(99), "{cov:?}");
        let day_rows: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM audit_rollup WHERE grain = 'd'")
                .fetch_one(store.pool())
                .await
                .unwrap();
        assert!(day_rows > 0, "whole days inside coverage have day rows");
        // The rolled-up path is taken: four days read day rows, sixteen a week's.
        let reads = |f: &AuditFilter, grain: Grain| {
            Split::of(f, Some(cov))
                .periods
                .iter()
                .any(|(g, _)| *g == grain)
        };
        let [four_days, sixteen_days] = [2, 6].map(|i| windows(now)[i].clone());
        assert!(reads(&four_days, Grain::Day) && reads(&sixteen_days, Grain::Week));
        assert!(reads(&errors_only(sixteen_days), Grain::Week));
        assert_eq!(
            Split::of(&errors_only(four_days), Some(cov)).slice,
            Slice::Errors
        );
        assert_counts_agree(&store, now, "after the first runs").await;

        // Rows for covered hours, days and weeks arrive late (a skewed clock, an import).
        store
            .insert_audit_batch(&rows(400, now - Duration::hours(30), 200, "late"))
            .await
            .unwrap();
        assert_counts_agree(&store, now, "after late rows").await;

        // Retention cuts into the middle of an hour.
        let cutoff = format_ts(now - Duration::minutes(80 * 60 + 17));
        assert!(store.prune_audit(&cutoff).await.unwrap() > 0);
        assert_counts_agree(&store, now, "after pruning").await;
        let cov = store.rollup_coverage().await.unwrap().unwrap();
        assert!(format_ts(cov.from) >= cutoff, "{cov:?}");
        // The job never rolls up below retention's cut again.
        while !store.roll_up_audit(now).await.unwrap().complete {}
        assert_eq!(
            store.rollup_coverage().await.unwrap().unwrap().from,
            cov.from
        );
        assert_counts_agree(&store, now, "after rolling up again").await;

        // A late row stamped in another format drops the rollups; the counts stay right
        // and the job counts everything again.
        let mut odd = rows(1, now - Duration::hours(20), 1, "odd");
        odd[0].timestamp = (now - Duration::hours(20))
            .format("%Y-%m-%dT%H:%M:%SZ")
            .to_string();
        store.insert_audit_batch(&odd).await.unwrap();
        let cov = store.rollup_coverage().await.unwrap().unwrap();
        assert_eq!(cov.from, cov.until, "nothing covered after an odd late row");
        assert_counts_agree(&store, now, "after an odd late row").await;
        while !store.roll_up_audit(now).await.unwrap().complete {}
        assert_counts_agree(&store, now, "after counting again").await;

        // So does a late failure whose result's case the backends' LIKE reads apart.
        let mut shouting = rows(1, now - Duration::hours(20), 1, "case");
        shouting[0].result = "Error.500".into();
        store.insert_audit_batch(&shouting).await.unwrap();
        let cov = store.rollup_coverage().await.unwrap().unwrap();
        assert_eq!(
            cov.from, cov.until,
            "nothing covered after a late odd result"
        );
        assert_counts_agree(&store, now, "after a late odd result").await;
        while !store.roll_up_audit(now).await.unwrap().complete {}
        assert_counts_agree(&store, now, "after counting again, twice").await;
    }
}

#[test]
fn only_the_stores_own_format_is_placed_by_parsing() {
    assert!(canonical("2026-11-01T05:00:00.000000Z").is_some());
    assert!(canonical("2026-11-01T05:00:00Z").is_none());
    assert!(canonical("2026-11-01 05:00:00").is_none());
}
