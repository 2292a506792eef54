//! What the agents' bundle chooses from: the mandatory items a reader sees, and the approved
//! ones ranked in SQL a page at a time — a bundle holds a few hundred of tens of thousands,
//! so only the best page or two leaves the store.
//!
//! The rank is confidence × recency, recency falling linearly from 1 (changed now) to 0 (a
//! year old). It is computed over `updated_epoch`, the change time in whole seconds, as
//! `confidence_milli × max(0, updated_epoch − (now − a year))`: integer arithmetic that orders
//! exactly as the rank does on both backends, without parsing a timestamp per row.
//!
//! Ranking every candidate reads tens of thousands of index entries per page. Within one
//! confidence the rank follows the change time, so the index by (confidence, change time)
//! holds each confidence's candidates best first; a page is found from a few of them:
//! 1. each confidence's best candidate: one index seek per confidence;
//! 2. the newest few of the confidences whose best ranks highest: with the heads, at least
//!    the page's worth of real candidates, whose worst rank bounds the page's from below;
//! 3. per confidence, only the candidates at or above that bound: a range of the index.
//!
//! The page is exact (every tie included) whatever the data's shape; when the confidences
//! are too many to walk, or too few candidates rank above zero, every candidate is ranked.

use sqlx::Row;

use super::{item, item_filter, KnowledgeItem, Visibility, COLUMNS};
use crate::clause::{bound, Where};
use crate::{Backend, Store, StoreError};

/// Seconds over which an item's recency falls from 1 to 0.
pub const RECENCY_SPAN_SECONDS: i64 = 365 * 86_400;

/// Most confidences walked for their best candidate (there are at most 1,001): past it
/// every candidate is ranked, unless the confidences left could not reach the page.
const CONFIDENCES_WALKED: i64 = 512;

/// An approved item in rank order, without its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankedCandidate {
    /// Item id.
    pub id: String,
    /// Characters of its title and content.
    pub chars: usize,
}

/// Ranks at one moment. `now` is the server's own integer, never a request's value: safe
/// to write into the SQL.
#[derive(Debug, Clone, Copy)]
struct Ranks {
    now: i64,
    /// Changes at or before it rank zero.
    floor: i64,
}

impl Ranks {
    fn at(now: i64) -> Self {
        Self {
            now,
            floor: now - RECENCY_SPAN_SECONDS,
        }
    }

    /// A candidate's rank. A change stamped after `now` (another replica's clock) counts as
    /// changed now.
    fn of(&self, confidence_milli: i64, epoch: i64) -> i64 {
        let recency = if epoch >= self.now {
            RECENCY_SPAN_SECONDS
        } else {
            (epoch - self.floor).max(0)
        };
        confidence_milli * recency
    }

    /// [`Ranks::of`] in SQL.
    fn sql(&self) -> String {
        let (now, floor) = (self.now, self.floor);
        format!(
            "confidence_milli * (CASE WHEN updated_epoch >= {now} THEN {RECENCY_SPAN_SECONDS} \
             WHEN updated_epoch > {floor} THEN updated_epoch - {floor} ELSE 0 END)"
        )
    }

    /// The earliest change at which a candidate of `confidence_milli` ranks at least `rank`
    /// (None: none does, even changed now).
    fn earliest(&self, confidence_milli: i64, rank: i64) -> Option<i64> {
        (confidence_milli > 0 && confidence_milli * RECENCY_SPAN_SECONDS >= rank)
            .then(|| self.floor + (rank + confidence_milli - 1) / confidence_milli)
    }
}

/// Per confidence, the earliest change a candidate needs to reach the page: what step 3
/// of the module's plan reads.
#[derive(Debug)]
struct PageBound(Vec<(i64, i64)>);

impl Store {
    /// Every mandatory item `visibility` allows (never personal ones), newest change first,
    /// ties by id in byte order.
    pub async fn knowledge_bundle_mandatory(
        &self,
        visibility: &Visibility,
    ) -> Result<Vec<KnowledgeItem>, StoreError> {
        let w = item_filter(visibility, true, &["mandatory".to_owned()], None);
        let sql = format!("SELECT {COLUMNS} FROM knowledge_items{}", w.sql);
        let rows = bound(&sql, &w.binds).fetch_all(self.pool()).await?;
        let mut items = rows.iter().map(item).collect::<Result<Vec<_>, _>>()?;
        // Sorted here: the same order whatever the backend's collation.
        items.sort_by(|a, b| b.updated_at.cmp(&a.updated_at).then(a.id.cmp(&b.id)));
        Ok(items)
    }

    /// Up to `limit` approved items `visibility` allows (never personal ones), after
    /// `offset`, best rank at `now` (unix seconds) first, ties by id in byte order.
    pub async fn knowledge_bundle_ranked(
        &self,
        visibility: &Visibility,
        now: i64,
        offset: u64,
        limit: u64,
    ) -> Result<Vec<RankedCandidate>, StoreError> {
        self.bundle_page(visibility, now, offset, limit, CONFIDENCES_WALKED)
            .await
    }

    /// [`Store::knowledge_bundle_ranked`], walking at most `walked` confidences.
    async fn bundle_page(
        &self,
        visibility: &Visibility,
        now: i64,
        offset: u64,
        limit: u64,
        walked: i64,
    ) -> Result<Vec<RankedCandidate>, StoreError> {
        let w = item_filter(visibility, true, &["approved".to_owned()], None);
        let ranks = Ranks::at(now);
        let page = self
            .bundle_page_bound(&w, ranks, offset + limit, walked)
            .await?;
        let id_order = match self.backend() {
            Backend::Sqlite => "id",
            Backend::Postgres => "id COLLATE \"C\"",
        };
        let order = format!(
            "ORDER BY {} DESC, {id_order} LIMIT {limit} OFFSET {offset}",
            ranks.sql()
        );
        // Server integers only, so written into the SQL. `CROSS JOIN` keeps SQLite from
        // reordering the loops: one index range per confidence.
        let sql = match page {
            Some(PageBound(groups)) => {
                let values: Vec<String> =
                    groups.iter().map(|(c, e)| format!("({c}, {e})")).collect();
                format!(
                    "WITH g(c, b) AS (VALUES {}) SELECT id, chars FROM g CROSS JOIN knowledge_items{} \
                     AND confidence_milli = g.c AND updated_epoch >= g.b {order}",
                    values.join(", "),
                    w.sql
                )
            }
            None => format!("SELECT id, chars FROM knowledge_items{} {order}", w.sql),
        };
        let rows = bound(&sql, &w.binds).fetch_all(self.pool()).await?;
        rows.iter()
            .map(|r| {
                Ok(RankedCandidate {
                    id: r.try_get("id")?,
                    chars: r.try_get::<i64, _>("chars")?.max(0) as usize,
                })
            })
            .collect()
    }

    /// Steps 1 and 2 of the module's plan for the best `wanted` candidates under `w`,
    /// walking at most `walked` confidences: None when every candidate must be ranked.
    async fn bundle_page_bound(
        &self,
        w: &Where,
        ranks: Ranks,
        wanted: u64,
        walked: i64,
    ) -> Result<Option<PageBound>, StoreError> {
        let Some(nth) = (wanted as usize).checked_sub(1) else {
            return Ok(None);
        };
        let floor = ranks.floor;
        // The reader's `n` newest candidates of confidence `c` (an SQL expression) that rank
        // above zero: one index range each.
        let newest = |columns: &str, c: &str, n: u64| {
            format!(
                "SELECT {columns} FROM knowledge_items{} AND confidence_milli = {c} \
                 AND updated_epoch > {floor} ORDER BY updated_epoch DESC LIMIT {n}",
                w.sql
            )
        };
        // Each confidence held by a candidate (visible or not: one seek each, from the
        // highest), with its best candidate the reader sees, if that ranks above zero.
        let candidates = "status = 'approved' AND is_personal = FALSE";
        let sql = format!(
            "WITH RECURSIVE h(c, n) AS (\
               SELECT MAX(confidence_milli), 1 FROM knowledge_items WHERE {candidates} \
               UNION ALL SELECT (SELECT MAX(confidence_milli) FROM knowledge_items \
                 WHERE {candidates} AND confidence_milli < h.c), n + 1 \
               FROM h WHERE h.c IS NOT NULL AND h.n < {walked}) \
             SELECT c, ({}) AS e FROM h WHERE c IS NOT NULL",
            newest("updated_epoch", "h.c", 1)
        );
        let rows = bound(&sql, &w.binds).fetch_all(self.pool()).await?;
        let all_walked = (rows.len() as i64) < walked;
        let mut lowest_walked = i64::MAX;
        let mut heads = Vec::with_capacity(rows.len());
        for r in &rows {
            let c: i64 = r.try_get("c")?;
            lowest_walked = lowest_walked.min(c);
            if let Some(e) = r.try_get::<Option<i64>, _>("e")? {
                heads.push((ranks.of(c, e), c));
            }
        }
        heads.sort_unstable_by(|a, b| b.cmp(a));
        // The newest `wanted`, `wanted` ÷ 2, … of the confidences whose heads rank best: where
        // the page's candidates are when a few confidences hold them all.
        let deep: Vec<(i64, u64)> = heads
            .iter()
            .map(|&(_, c)| c)
            .zip(std::iter::successors(Some(wanted), |n| Some(n / 2)))
            .take_while(|&(_, n)| n >= 2)
            .collect();
        let mut sample: Vec<i64> = heads.iter().skip(deep.len()).map(|&(r, _)| r).collect();
        if !deep.is_empty() {
            let branches: Vec<String> = deep
                .iter()
                .enumerate()
                .map(|(i, (c, n))| {
                    format!(
                        "SELECT * FROM ({}) AS s{i}",
                        newest(
                            "confidence_milli AS c, updated_epoch AS e",
                            &c.to_string(),
                            *n
                        )
                    )
                })
                .collect();
            let sql = branches.join(" UNION ALL ");
            for r in bound(&sql, &w.binds).fetch_all(self.pool()).await? {
                sample.push(ranks.of(r.try_get("c")?, r.try_get("e")?));
            }
        }
        if nth >= sample.len() {
            return Ok(None);
        }
        // At least `wanted` candidates rank this high: the page's worst ranks no lower.
        let (_, &mut threshold, _) = sample.select_nth_unstable_by(nth, |a, b| b.cmp(a));
        // A bound of zero or below would leave out candidates that rank zero; confidences
        // below the walk's lowest might still reach it.
        let unwalked_reach = ranks.of(lowest_walked.saturating_sub(1), ranks.now);
        if threshold <= 0 || (!all_walked && unwalked_reach >= threshold) {
            return Ok(None);
        }
        let groups = heads
            .iter()
            .filter_map(|&(_, c)| ranks.earliest(c, threshold).map(|e| (c, e)))
            .collect();
        Ok(Some(PageBound(groups)))
    }

    /// The fewest characters of any approved item `visibility` allows (None: there is none).
    pub async fn knowledge_bundle_smallest(
        &self,
        visibility: &Visibility,
    ) -> Result<Option<usize>, StoreError> {
        let w = item_filter(visibility, true, &["approved".to_owned()], None);
        // Walks `idx_knowledge_bundle_smallest` up to the first visible row, where `MIN`
        // under the visibility filter would read every candidate.
        let sql = format!(
            "SELECT chars FROM knowledge_items{} ORDER BY chars LIMIT 1",
            w.sql
        );
        let n: Option<i64> = bound(&sql, &w.binds)
            .fetch_optional(self.pool())
            .await?
            .map(|r| r.try_get("chars"))
            .transpose()?;
        Ok(n.map(|n| n.max(0) as usize))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{ItemChange, NewItem};
    use crate::testing;

    const NOW: i64 = 1_800_000_000;
    const DAY: i64 = 86_400;

    /// An item's bundle inputs: id, status, confidence (milli), age in days (None: never
    /// stamped), characters, personal, audience.
    type Seed = (
        &'static str,
        &'static str,
        i64,
        Option<i64>,
        i64,
        bool,
        Option<&'static str>,
    );

    /// Inserts an item with the bundle's inputs set directly.
    async fn put(store: &Store, (id, status, milli, age_days, chars, personal, audience): Seed) {
        sqlx::query(
            "INSERT INTO knowledge_items (id, title, status, confidence_milli, updated_epoch, \
             updated_at, chars, is_personal, audience) VALUES ($1, $1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(id)
        .bind(status)
        .bind(milli)
        .bind(age_days.map(|d| NOW - d * DAY))
        .bind(age_days.map(|d| format!("2027-01-{:02}T00:00:00.000000Z", 30 - d.min(29))))
        .bind(chars)
        .bind(personal)
        .bind(audience)
        .execute(store.pool())
        .await
        .unwrap();
    }

    fn ids(page: &[RankedCandidate]) -> Vec<&str> {
        page.iter().map(|c| c.id.as_str()).collect()
    }

    /// Confidence × recency, best first; a year or more old (or never stamped) ranks zero;
    /// ties by id in byte order; personal, pending and other groups' items never offered;
    /// pages and the smallest candidate — the same on both backends.
    #[tokio::test]
    async fn approved_items_are_ranked_in_sql_on_both_backends() {
        for (store, _dir) in testing::all_backends().await {
            sqlx::query("DELETE FROM knowledge_items")
                .execute(store.pool())
                .await
                .unwrap();
            let rows: [Seed; 10] = [
                ("c-mid", "approved", 1000, Some(200), 40, false, None),
                ("a-recent", "approved", 900, Some(1), 50, false, None),
                ("B-recent", "approved", 900, Some(1), 60, false, Some("all")),
                ("e-older", "approved", 300, Some(500), 70, false, None),
                ("d-old", "approved", 1000, Some(365), 30, false, None),
                ("n-never", "approved", 1000, None, 80, false, None),
                ("p-own", "approved", 1000, Some(0), 5, true, None),
                ("q-pending", "pending", 1000, Some(0), 5, false, None),
                (
                    "g-group",
                    "approved",
                    1000,
                    Some(0),
                    5,
                    false,
                    Some("group:x"),
                ),
                ("m-must", "mandatory", 1000, Some(0), 5, false, None),
            ];
            // Stamped a day ahead of `now` (another clock): counts as changed now, no more.
            let ahead: [Seed; 2] = [
                ("h-ahead", "approved", 500, Some(-1), 40, false, None),
                ("f-now", "approved", 500, Some(0), 40, false, None),
            ];
            for row in rows.into_iter().chain(ahead) {
                put(&store, row).await;
            }
            let reader = Visibility::Reader {
                groups: vec![],
                domains: vec![],
            };
            let all = store
                .knowledge_bundle_ranked(&reader, NOW, 0, 100)
                .await
                .unwrap();
            assert_eq!(
                ids(&all),
                [
                    "B-recent", "a-recent", "f-now", "h-ahead", "c-mid", "d-old", "e-older",
                    "n-never"
                ],
                "{:?}",
                store.backend()
            );
            assert_eq!(all[0].chars, 60);
            let page = store
                .knowledge_bundle_ranked(&reader, NOW, 2, 2)
                .await
                .unwrap();
            assert_eq!(ids(&page), ["f-now", "h-ahead"], "a tie, so by id");
            let admin = store
                .knowledge_bundle_ranked(&Visibility::All, NOW, 0, 1)
                .await
                .unwrap();
            assert_eq!(
                ids(&admin),
                ["g-group"],
                "an administrator sees every group's"
            );
            assert_eq!(
                store.knowledge_bundle_smallest(&reader).await.unwrap(),
                Some(30)
            );
            let mandatory = store.knowledge_bundle_mandatory(&reader).await.unwrap();
            assert_eq!(mandatory.len(), 1);
            assert_eq!(mandatory[0].id, "m-must");
        }
    }

    /// A candidate: id, confidence (milli), age in days.
    type Candidate = (String, i64, i64);

    /// Shapes of candidates: the pages read from a few
    /// candidates per confidence must equal ranking them all, ties by id included.
    fn shapes() -> Vec<(&'static str, Vec<Candidate>)> {
        let id = |i: i64| format!("r{:03}", (i * 131) % 1000);
        let age = |i: i64| (i * 7919 % 420) - 1;
        vec![
            // Five confidences (ties), ages from a day ahead to over a year.
            (
                "five confidences",
                (0..300)
                    .map(|i| (id(i), 200 + (i * 37 % 5) * 200, age(i)))
                    .collect(),
            ),
            // Nearly every candidate a confidence of its own.
            (
                "distinct confidences",
                (0..600)
                    .map(|i| (id(i), (i * 389) % 1001, age(i)))
                    .collect(),
            ),
            // One confidence: the rank is the change time alone.
            (
                "one confidence",
                (0..300).map(|i| (id(i), 500, age(i))).collect(),
            ),
            // The best confidence changed now, the rest lower: walking one confidence is enough.
            (
                "newest at the top",
                (0..300)
                    .map(|i| {
                        if i < 60 {
                            (id(i), 1000, 0)
                        } else {
                            (id(i), 100 + i % 800, age(i))
                        }
                    })
                    .collect(),
            ),
        ]
    }

    #[tokio::test]
    async fn pages_read_per_confidence_equal_ranking_all_on_both_backends() {
        let reader = Visibility::Reader {
            groups: vec![],
            domains: vec![],
        };
        let ranks = Ranks::at(NOW);
        for (store, _dir) in testing::all_backends().await {
            for (shape, rows) in shapes() {
                sqlx::query("DELETE FROM knowledge_items")
                    .execute(store.pool())
                    .await
                    .unwrap();
                let mut expected = Vec::new();
                for (id, milli, age) in rows {
                    let leaked: &'static str = Box::leak(id.clone().into_boxed_str());
                    put(
                        &store,
                        (leaked, "approved", milli, Some(age), 10, false, None),
                    )
                    .await;
                    expected.push((ranks.of(milli, NOW - age * DAY), id));
                }
                expected.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
                let backend = store.backend();
                for walked in [CONFIDENCES_WALKED, 3, 1] {
                    for (offset, limit) in [(0, 1), (0, 5), (5, 5), (0, 40), (120, 30), (290, 20)] {
                        let page = store
                            .bundle_page(&reader, NOW, offset, limit, walked)
                            .await
                            .unwrap();
                        let want: Vec<&str> = expected
                            .iter()
                            .skip(offset as usize)
                            .take(limit as usize)
                            .map(|(_, id)| id.as_str())
                            .collect();
                        assert_eq!(
                            ids(&page),
                            want,
                            "{backend:?} {shape} walking {walked}: {offset}+{limit}"
                        );
                    }
                }
                // The bound is found (a few ranges read, not every candidate) where it can be.
                let w = item_filter(&reader, true, &["approved".to_owned()], None);
                let found = |walked| {
                    let (store, w) = (&store, &w);
                    async move {
                        store
                            .bundle_page_bound(w, ranks, 40, walked)
                            .await
                            .unwrap()
                            .is_some()
                    }
                };
                assert!(found(CONFIDENCES_WALKED).await, "{backend:?} {shape}");
                if shape == "newest at the top" {
                    assert!(found(1).await, "the confidences left cannot reach the page");
                }
                if shape == "distinct confidences" {
                    assert!(
                        !found(3).await,
                        "three candidates cannot bound a page of 40"
                    );
                }
            }
        }
    }

    /// Every write stamps `updated_epoch` with the second of `updated_at`.
    #[tokio::test]
    async fn changes_stamp_their_time_in_seconds_on_both_backends() {
        for (store, _dir) in testing::all_backends().await {
            let item = store
                .create_knowledge_item(&NewItem {
                    title: "stamped".into(),
                    source_type: "api".into(),
                    source_user: "u@example.com".into(),
                    created_by: "u".into(),
                    ..Default::default()
                })
                .await
                .unwrap();
            let stamped = |id: String| {
                let store = store.clone();
                async move {
                    let r = sqlx::query(
                        "SELECT updated_at, updated_epoch FROM knowledge_items WHERE id = $1",
                    )
                    .bind(id)
                    .fetch_one(store.pool())
                    .await
                    .unwrap();
                    let at: String = r.try_get("updated_at").unwrap();
                    let epoch: i64 = r.try_get("updated_epoch").unwrap();
                    (at, epoch)
                }
            };
            let (at, epoch) = stamped(item.id.clone()).await;
            assert_eq!(svc_core::clock::parse_ts(&at).unwrap().timestamp(), epoch);
            let change = ItemChange {
                status: Some("approved".into()),
                ..Default::default()
            };
            assert!(store
                .update_knowledge_item(&item.id, item.revision, &change)
                .await
                .unwrap());
            let (at2, epoch2) = stamped(item.id.clone()).await;
            assert!(at2 >= at);
            assert_eq!(svc_core::clock::parse_ts(&at2).unwrap().timestamp(), epoch2);
        }
    }
}
