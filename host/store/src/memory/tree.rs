//! Knowledge items grouped along one axis (domain, category, tag or audience): the groups
//! counted, paginated, each with its most recently changed items. Counts come from the ones
//! the database keeps (`memory::counts`), or from the items themselves for filters those
//! cannot answer (text, duplicate relations). The tag axis puts an item in every tag's
//! group; items without a value form one group whose key is null.

use serde::Serialize;
use sqlx::Row;

use super::{item, item_filter, KnowledgeItem, Visibility, COLUMNS, UNTAGGED};
use crate::clause::{bound, Where};
use crate::{Backend, Store, StoreError};

/// What the items are grouped by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TreeAxis {
    /// The item's memory domain.
    Domain,
    /// Its category.
    Category,
    /// Each of its tags.
    Tag,
    /// Who it is for.
    Audience,
}

impl TreeAxis {
    /// Every axis.
    pub const ALL: [Self; 4] = [Self::Domain, Self::Category, Self::Tag, Self::Audience];

    /// Its name in a request.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Domain => "domain",
            Self::Category => "category",
            Self::Tag => "tag",
            Self::Audience => "audience",
        }
    }

    /// Reads an axis name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.as_str() == s)
    }

    /// The grouped item column (the tag axis reads tag rows instead).
    fn column(self) -> &'static str {
        match self {
            Self::Domain => "domain",
            Self::Category => "category",
            Self::Tag => "tag",
            Self::Audience => "audience",
        }
    }
}

/// A tree request.
#[derive(Debug, Clone)]
pub struct TreeQuery {
    /// The axis.
    pub axis: TreeAxis,
    /// Only these statuses (empty: any).
    pub statuses: Vec<String>,
    /// Exact source type.
    pub source_type: Option<String>,
    /// Exact audience (`all` also matches items with no audience).
    pub audience: Option<String>,
    /// Literal text in the title or content.
    pub search: Option<String>,
    /// Only items with (true) or without (false) an open duplicate candidate.
    pub has_duplicate: Option<bool>,
    /// Leave personal items out.
    pub exclude_personal: bool,
    /// Groups to skip.
    pub offset: u64,
    /// Groups at most.
    pub limit: u64,
    /// Items listed per group at most (the group's count covers all).
    pub items_per_group: u64,
}

/// One group of the tree.
#[derive(Debug, Clone, Serialize)]
pub struct TreeGroup {
    /// The axis value (null: items without one).
    pub key: Option<String>,
    /// Items in the group.
    pub count: i64,
    /// Its most recently changed items.
    pub items: Vec<KnowledgeItem>,
}

/// One page of groups.
#[derive(Debug, Clone, Serialize)]
pub struct TreePage {
    /// The groups, largest first (ties by key, the null group last).
    pub groups: Vec<TreeGroup>,
    /// Groups in all.
    pub total_groups: i64,
    /// Distinct items in all groups.
    pub total_items: i64,
}

fn filtered(visibility: &Visibility, q: &TreeQuery) -> Where {
    let mut w = item_filter(
        visibility,
        q.exclude_personal,
        &q.statuses,
        q.search.as_deref(),
    );
    if let Some(s) = &q.source_type {
        w.push("source_type = $?", s.clone());
    }
    match q.audience.as_deref() {
        Some("all") => w.push_fixed("(audience IS NULL OR audience = 'all')"),
        Some(a) => w.push("audience = $?", a.to_owned()),
        None => {}
    }
    if let Some(has) = q.has_duplicate {
        let open = "EXISTS (SELECT 1 FROM knowledge_item_relations r WHERE r.resolved = FALSE \
                    AND (r.item_a_id = knowledge_items.id OR r.item_b_id = knowledge_items.id))";
        if has {
            w.push_fixed(open);
        } else {
            w.push_fixed(&format!("NOT {open}"));
        }
    }
    w
}

/// Whether `q` filters only on columns that tag rows and the kept counts carry: every
/// filter but the text (`search`) and the duplicate relations.
fn plain_filters(q: &TreeQuery) -> bool {
    q.search.as_deref().is_none_or(str::is_empty) && q.has_duplicate.is_none()
}

/// Groups as (key, count) from rows of `k` and `n`; untagged items have the one row tagged
/// `UNTAGGED`, so theirs is the null group.
fn group_rows(rows: Vec<sqlx::any::AnyRow>) -> Result<Vec<(Option<String>, i64)>, StoreError> {
    rows.iter()
        .map(|r| {
            let key: Option<String> = r.try_get("k")?;
            Ok((key.filter(|k| k != UNTAGGED), r.try_get("n")?))
        })
        .collect()
}

impl Store {
    /// A page of groups of the items `visibility` allows under `q`.
    pub async fn knowledge_tree(
        &self,
        visibility: &Visibility,
        q: &TreeQuery,
    ) -> Result<TreePage, StoreError> {
        let w = filtered(visibility, q);
        let (mut all, total_items) = if plain_filters(q) {
            self.kept_counts(&w, q.axis).await?
        } else {
            self.counted_groups(&w, q).await?
        };
        // Largest first, ties by key in byte order, the null group last: the same order on
        // both backends, whatever their collations.
        all.sort_by(|(ka, na), (kb, nb)| {
            nb.cmp(na)
                .then(ka.is_none().cmp(&kb.is_none()))
                .then(ka.cmp(kb))
        });
        let total_groups = all.len() as i64;
        let page: Vec<(Option<String>, i64)> = all
            .into_iter()
            .skip(q.offset as usize)
            .take(q.limit as usize)
            .collect();
        let keys: Vec<Option<&str>> = page.iter().map(|(k, _)| k.as_deref()).collect();
        let items = self.tree_groups_items(&w, q, &keys).await?;
        let groups = page
            .into_iter()
            .zip(items)
            .map(|((key, count), items)| TreeGroup { key, count, items })
            .collect();
        Ok(TreePage {
            groups,
            total_groups,
            total_items,
        })
    }

    /// Every group's count and the distinct items in all, summed from the counts the
    /// triggers keep (`memory::counts`) under the same filter as the items: a few thousand
    /// rows, whatever the number of items.
    async fn kept_counts(
        &self,
        w: &Where,
        axis: TreeAxis,
    ) -> Result<(Vec<(Option<String>, i64)>, i64), StoreError> {
        let sum = "CAST(SUM(n) AS BIGINT)";
        let groups_sql = format!(
            "SELECT k, {sum} AS n FROM knowledge_tree_counts{} AND axis = '{}' \
             GROUP BY k HAVING SUM(n) > 0",
            w.sql,
            axis.as_str()
        );
        let groups = group_rows(bound(&groups_sql, &w.binds).fetch_all(self.pool()).await?)?;
        // Each item is in exactly one group of an item axis; a tag's groups overlap, so the
        // distinct items come from the domain axis.
        let total_items = match axis {
            TreeAxis::Tag => {
                let total_sql = format!(
                    "SELECT COALESCE({sum}, 0) AS n FROM knowledge_tree_counts{} \
                     AND axis = 'domain'",
                    w.sql
                );
                bound(&total_sql, &w.binds)
                    .fetch_one(self.pool())
                    .await?
                    .try_get("n")?
            }
            _ => groups.iter().map(|(_, n)| n).sum(),
        };
        Ok((groups, total_items))
    }

    /// Every group's count and the distinct items in all, counted from the items (or tag
    /// rows) themselves: for filters the kept counts cannot answer.
    async fn counted_groups(
        &self,
        w: &Where,
        q: &TreeQuery,
    ) -> Result<(Vec<(Option<String>, i64)>, i64), StoreError> {
        // Grouping by `column || ''` keeps SQLite from walking the column's index (a random
        // row read per item) instead of the table. Filtered items' tags are counted through
        // `IN`, whose inner scope resolves the filter's columns to the items; each item's one
        // `counts_item` row counts it once for the total in the same pass.
        let groups_sql = match q.axis {
            TreeAxis::Tag => format!(
                "SELECT tag AS k, COUNT(*) AS n, COUNT(CASE WHEN counts_item = TRUE THEN 1 END) AS items \
                 FROM knowledge_item_tags WHERE item_id IN (SELECT id FROM knowledge_items{}) GROUP BY tag",
                w.sql
            ),
            axis => format!(
                "SELECT {c} || '' AS k, COUNT(*) AS n, COUNT(*) AS items FROM knowledge_items{} \
                 GROUP BY {c} || ''",
                w.sql,
                c = axis.column()
            ),
        };
        let rows = bound(&groups_sql, &w.binds).fetch_all(self.pool()).await?;
        let mut total_items = 0;
        for r in &rows {
            total_items += r.try_get::<i64, _>("items")?;
        }
        Ok((group_rows(rows)?, total_items))
    }

    /// The first items of each group of `keys`, most recently changed first, in one
    /// statement per hundred groups: a round trip per group was most of a page's time on
    /// PostgreSQL. There the keyed groups are one `LATERAL` subquery over a `VALUES` list
    /// (planned once; fifty `UNION ALL` branches took longer to plan than to run); SQLite,
    /// which has no `LATERAL` and plans quickly, gets a branch per group (it allows 500).
    async fn tree_groups_items(
        &self,
        w: &Where,
        q: &TreeQuery,
        keys: &[Option<&str>],
    ) -> Result<Vec<Vec<KnowledgeItem>>, StoreError> {
        const GROUPS_PER_STATEMENT: usize = 100;
        let mut groups = vec![Vec::new(); keys.len()];
        for (chunk, chunk_keys) in keys.chunks(GROUPS_PER_STATEMENT).enumerate() {
            // The filter's placeholders are shared by every branch; each key adds its own.
            let mut binds = w.binds.clone();
            let mut branches = Vec::new();
            let mut lateral = Vec::new();
            for (j, key) in chunk_keys.iter().enumerate() {
                let i = chunk * GROUPS_PER_STATEMENT + j;
                // Untagged items are the tag axis's null group; on the others it is `IS NULL`.
                let key = match (q.axis, key) {
                    (TreeAxis::Tag, key) => key.unwrap_or(UNTAGGED),
                    (_, Some(key)) => key,
                    (_, None) => {
                        let group = format!("CAST({i} AS BIGINT) AS tree_group, ");
                        let branch = newest(w, q, &group, "IS NULL");
                        branches.push(format!("SELECT * FROM ({branch}) AS g{i}"));
                        continue;
                    }
                };
                binds.push(key.to_owned());
                let placeholder = format!("${}", binds.len());
                match self.backend() {
                    Backend::Postgres => {
                        lateral.push(format!("(CAST({i} AS BIGINT), {placeholder})"));
                    }
                    Backend::Sqlite => {
                        let group = format!("CAST({i} AS BIGINT) AS tree_group, ");
                        let branch = newest(w, q, &group, &format!("= {placeholder}"));
                        branches.push(format!("SELECT * FROM ({branch}) AS g{i}"));
                    }
                }
            }
            if !lateral.is_empty() {
                branches.push(format!(
                    "SELECT keys.tree_i AS tree_group, newest.tree_item \
                     FROM (VALUES {}) AS keys(tree_i, tree_k) CROSS JOIN LATERAL ({}) AS newest",
                    lateral.join(", "),
                    newest(w, q, "", "= keys.tree_k")
                ));
            }
            let sql = format!(
                "SELECT page.tree_group, {COLUMNS} FROM ({}) AS page \
                 JOIN knowledge_items ON knowledge_items.id = page.tree_item \
                 ORDER BY page.tree_group, updated_at DESC, id DESC",
                branches.join(" UNION ALL ")
            );
            for r in bound(&sql, &binds).fetch_all(self.pool()).await? {
                let group: i64 = r.try_get("tree_group")?;
                if let Some(items) = groups.get_mut(group as usize) {
                    items.push(item(&r)?);
                }
            }
        }
        Ok(groups)
    }
}

/// One group's newest items as rows of `tree_item` (an item id), after `group` (a select-list
/// prefix naming the group, or empty where the caller names it); `is` completes the key's
/// condition (`= $3`, `IS NULL`, `= keys.tree_k`).
fn newest(w: &Where, q: &TreeQuery, group: &str, is: &str) -> String {
    let n = q.items_per_group;
    match q.axis {
        // The tag's rows walked newest first on their covering index.
        TreeAxis::Tag if plain_filters(q) => format!(
            "SELECT {group}item_id AS tree_item FROM knowledge_item_tags{} AND tag {is} \
             ORDER BY item_updated_at DESC, item_id DESC LIMIT {n}",
            w.sql
        ),
        TreeAxis::Tag => format!(
            "SELECT {group}id AS tree_item FROM knowledge_items{} \
             AND id IN (SELECT item_id FROM knowledge_item_tags WHERE tag {is}) \
             ORDER BY updated_at DESC, id DESC LIMIT {n}",
            w.sql
        ),
        axis => format!(
            "SELECT {group}id AS tree_item FROM knowledge_items{} AND {} {is} \
             ORDER BY updated_at DESC, id DESC LIMIT {n}",
            w.sql,
            axis.column()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{ItemChange, NewItem};
    use crate::testing;

    /// A small deterministic generator (the same items and changes on every run).
    struct Lcg(u64);

    impl Lcg {
        fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            from[(self.0 >> 33) as usize % from.len()]
        }

        fn maybe(&mut self, from: &[&str]) -> Option<String> {
            Some(self.pick(from))
                .filter(|v| !v.is_empty())
                .map(str::to_owned)
        }
    }

    const DOMAINS: &[&str] = &["finance", "sales", "", "ops"];
    const CATEGORIES: &[&str] = &["kpi", "howto", ""];
    const AUDIENCES: &[&str] = &["all", "group:a", "group:b", ""];
    const STATUSES: &[&str] = &["pending", "approved", "mandatory", "rejected"];
    const TAGS: &[&str] = &["x", "y", "z", "w"];

    /// What a page's groups and totals come to, in the tree's order.
    fn sorted(
        mut groups: Vec<(Option<String>, i64)>,
        total: i64,
    ) -> (Vec<(Option<String>, i64)>, i64) {
        groups.sort();
        (groups, total)
    }

    /// After a run of creations, edits, re-tags, personal flags and a raw batch update, the
    /// counts the triggers keep answer every axis and plain filter exactly as counting the
    /// rows does — for an administrator and for readers with groups and granted domains.
    #[tokio::test]
    async fn kept_counts_match_the_rows_on_both_backends() {
        for (store, _dir) in testing::all_backends().await {
            let mut r = Lcg(7);
            let mut ids = Vec::new();
            for i in 0..40 {
                let tags = (0..i % 3).map(|_| r.pick(TAGS).to_owned()).collect();
                let item = store
                    .create_knowledge_item(&NewItem {
                        title: format!("item {i}"),
                        category: r.maybe(CATEGORIES),
                        domain: r.maybe(DOMAINS),
                        tags,
                        source_type: r.pick(&["api", "mcp"]).to_owned(),
                        source_user: "u@example.com".into(),
                        created_by: "u".into(),
                        ..Default::default()
                    })
                    .await
                    .unwrap();
                ids.push(item.id);
            }
            for step in 0..80 {
                let id = ids[step % ids.len()].clone();
                let revision = store.knowledge_item(&id).await.unwrap().unwrap().revision;
                let change = ItemChange {
                    status: Some(r.pick(STATUSES).to_owned()),
                    domain: (step % 2 == 0).then(|| r.maybe(DOMAINS)),
                    category: (step % 3 == 0).then(|| r.maybe(CATEGORIES)),
                    audience: Some(r.maybe(AUDIENCES)),
                    tags: (step % 4 == 0).then(|| vec![r.pick(TAGS).to_owned()]),
                    is_personal: Some(step % 5 == 0),
                    ..Default::default()
                };
                assert!(store
                    .update_knowledge_item(&id, revision, &change)
                    .await
                    .unwrap());
            }
            // A statement that moves many items at once, as a batch decision does.
            sqlx::query("UPDATE knowledge_items SET status = 'approved' WHERE status = 'pending'")
                .execute(store.pool())
                .await
                .unwrap();
            let mut tx = store.pool().begin().await.unwrap();
            crate::memory::sync_tag_rows(&mut tx, None).await.unwrap();
            tx.commit().await.unwrap();
            let views = [
                Visibility::All,
                Visibility::Reader {
                    groups: vec![],
                    domains: vec![],
                },
                Visibility::Reader {
                    groups: vec!["a".into()],
                    domains: vec!["ops".into()],
                },
            ];
            for v in &views {
                for axis in TreeAxis::ALL {
                    for (statuses, audience, source_type) in [
                        (vec![], None, None),
                        (vec!["approved".to_owned()], None, None),
                        (vec![], Some("all".to_owned()), Some("mcp".to_owned())),
                        (vec![], Some("group:a".to_owned()), None),
                    ] {
                        let q = TreeQuery {
                            axis,
                            statuses,
                            source_type,
                            audience,
                            search: None,
                            has_duplicate: None,
                            exclude_personal: matches!(v, Visibility::Reader { .. }),
                            offset: 0,
                            limit: 100,
                            items_per_group: 3,
                        };
                        let w = filtered(v, &q);
                        let (kept, kept_total) = store.kept_counts(&w, axis).await.unwrap();
                        let (rows, rows_total) = store.counted_groups(&w, &q).await.unwrap();
                        let rows: Vec<_> = rows.into_iter().filter(|(_, n)| *n > 0).collect();
                        assert_eq!(
                            sorted(kept, kept_total),
                            sorted(rows, rows_total),
                            "{:?} {v:?} {q:?}",
                            store.backend()
                        );
                    }
                }
            }
        }
    }
}
