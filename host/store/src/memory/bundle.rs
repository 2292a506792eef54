//! What the agents' bundle chooses from: the mandatory items a reader sees, and the approved
//! ones ranked in SQL a page at a time — a bundle holds a few hundred of tens of thousands,
//! so only the best page or two leaves the store.
//!
//! The rank is confidence × recency, recency falling linearly from 1 (changed now) to 0 (a
//! year old). It is computed over `updated_epoch`, the change time in whole seconds, as
//! `confidence_milli × max(0, updated_epoch − (now − a year))`: integer arithmetic that orders
//! exactly as the rank does on both backends, without parsing a timestamp per row.

use sqlx::Row;

use super::{item, item_filter, KnowledgeItem, Visibility, COLUMNS};
use crate::clause::{bound, Where};
use crate::{Backend, Store, StoreError};

/// Seconds over which an item's recency falls from 1 to 0.
pub const RECENCY_SPAN_SECONDS: i64 = 365 * 86_400;

/// An approved item in rank order, without its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankedCandidate {
    /// Item id.
    pub id: String,
    /// Characters of its title and content.
    pub chars: usize,
}

/// An item's rank at `now` (unix seconds) in SQL. A change stamped after `now` (another
/// replica's clock) counts as changed now. `now` is the server's own integer, never a
/// request's value: safe to write into the SQL.
fn rank_sql(now: i64) -> String {
    let floor = now - RECENCY_SPAN_SECONDS;
    format!(
        "confidence_milli * (CASE WHEN updated_epoch >= {now} THEN {RECENCY_SPAN_SECONDS} \
         WHEN updated_epoch > {floor} THEN updated_epoch - {floor} ELSE 0 END)"
    )
}

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
        let w = item_filter(visibility, true, &["approved".to_owned()], None);
        let floor = now - RECENCY_SPAN_SECONDS;
        let id_order = match self.backend() {
            Backend::Sqlite => "id",
            Backend::Postgres => "id COLLATE \"C\"",
        };
        let rank = rank_sql(now);
        let since = self
            .bundle_change_floor(&w, &rank, floor, offset + limit)
            .await?
            .map(|at| format!(" AND updated_epoch >= {at}"))
            .unwrap_or_default();
        let sql = format!(
            "SELECT id, chars FROM knowledge_items{}{since} ORDER BY {rank} DESC, {id_order} \
             LIMIT {limit} OFFSET {offset}",
            w.sql
        );
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

    /// The earliest change time (unix seconds) an item needs to rank among the best
    /// `wanted`, or None when every candidate must be ranked: what lets the ranking read
    /// the most recent few thousand candidates of tens of thousands.
    ///
    /// The `wanted`-th best rank among the most recently changed candidates is at most the
    /// `wanted`-th best of all. An item's rank is at most 1000 × (its change − `floor`)
    /// (confidence is at most 1, stored as 1000 milli), so an item changed before
    /// `floor` + that rank ÷ 1000 can rank no better, and leaving it out changes neither the
    /// page nor its ties.
    async fn bundle_change_floor(
        &self,
        w: &Where,
        rank: &str,
        floor: i64,
        wanted: u64,
    ) -> Result<Option<i64>, StoreError> {
        /// Recent candidates read per candidate wanted.
        const PROBE: u64 = 4;
        let sql = format!(
            "SELECT {rank} AS r FROM knowledge_items{} AND updated_epoch > {floor} \
             ORDER BY updated_epoch DESC LIMIT {}",
            w.sql,
            wanted * PROBE
        );
        let mut ranks = bound(&sql, &w.binds)
            .fetch_all(self.pool())
            .await?
            .iter()
            .map(|r| r.try_get::<i64, _>("r"))
            .collect::<Result<Vec<_>, _>>()?;
        let Some(nth) = (wanted as usize)
            .checked_sub(1)
            .filter(|&n| n < ranks.len())
        else {
            return Ok(None);
        };
        ranks.select_nth_unstable_by(nth, |a, b| b.cmp(a));
        Ok((ranks[nth] > 0).then(|| floor + ranks[nth] / 1000))
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

    /// With many candidates the ranking reads only the recently changed ones (the floor
    /// from the most recent few): every page still equals ranking all of them, ties by id
    /// included.
    #[tokio::test]
    async fn pages_ranked_from_recent_candidates_equal_ranking_all_on_both_backends() {
        for (store, _dir) in testing::all_backends().await {
            let mut expected = Vec::new();
            for i in 0..300_i64 {
                // Confidence in five steps (ties), ages from a day ahead to over a year.
                let milli = 200 + (i * 37 % 5) * 200;
                let age = (i * 7919 % 420) - 1;
                let id = format!("r{:03}", (i * 131) % 300);
                put(
                    &store,
                    (
                        Box::leak(id.clone().into_boxed_str()),
                        "approved",
                        milli,
                        Some(age),
                        10,
                        false,
                        None,
                    ),
                )
                .await;
                let epoch = NOW - age * DAY;
                let floor = NOW - RECENCY_SPAN_SECONDS;
                let recency = if epoch >= NOW {
                    RECENCY_SPAN_SECONDS
                } else {
                    (epoch - floor).max(0)
                };
                expected.push((milli * recency, id));
            }
            expected.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
            let reader = Visibility::Reader {
                groups: vec![],
                domains: vec![],
            };
            for (offset, limit) in [(0, 5), (5, 5), (0, 40), (120, 30), (290, 20)] {
                let page = store
                    .knowledge_bundle_ranked(&reader, NOW, offset, limit)
                    .await
                    .unwrap();
                let want: Vec<&str> = expected
                    .iter()
                    .skip(offset as usize)
                    .take(limit as usize)
                    .map(|(_, id)| id.as_str())
                    .collect();
                assert_eq!(ids(&page), want, "{:?} {offset}+{limit}", store.backend());
            }
            let floor = store
                .bundle_change_floor(
                    &item_filter(&reader, true, &["approved".to_owned()], None),
                    &rank_sql(NOW),
                    NOW - RECENCY_SPAN_SECONDS,
                    5,
                )
                .await
                .unwrap();
            assert!(floor.is_some(), "a small page reads only recent candidates");
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
