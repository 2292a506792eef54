//! Knowledge items grouped along one axis (domain, category, tag or audience): the groups
//! counted in SQL, paginated, each with its most recently changed items. The tag axis puts
//! an item in every tag's group; items without a value form one group whose key is null.

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

/// Whether `q`'s filters can be applied to tag rows alone: they carry every column the
/// filters read except the text (`search`) and the duplicate relations.
fn on_tag_rows(q: &TreeQuery) -> bool {
    q.search.as_deref().is_none_or(str::is_empty) && q.has_duplicate.is_none()
}

impl Store {
    /// A page of groups of the items `visibility` allows under `q`.
    pub async fn knowledge_tree(
        &self,
        visibility: &Visibility,
        q: &TreeQuery,
    ) -> Result<TreePage, StoreError> {
        let w = filtered(visibility, q);
        // Every group's count in one pass (the axes have tens to hundreds of values); the
        // page is cut here. Grouping by `column || ''` keeps SQLite from walking the
        // column's index (a random row read per item) instead of the table. Tag rows are
        // counted from their covering index — each item's one `counts_item` row counts it
        // once for the total in the same pass — and filtered items' tags through `IN`, whose
        // inner scope resolves the filter's columns to the items.
        let groups_sql = match q.axis {
            TreeAxis::Tag if on_tag_rows(q) => format!(
                "SELECT tag AS k, COUNT(*) AS n, COUNT(CASE WHEN counts_item = TRUE THEN 1 END) AS items \
                 FROM knowledge_item_tags{} GROUP BY tag",
                w.sql
            ),
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
        let mut all = Vec::with_capacity(rows.len());
        let mut total_items = 0;
        for r in rows {
            let key: Option<String> = r.try_get("k")?;
            let count: i64 = r.try_get("n")?;
            total_items += r.try_get::<i64, _>("items")?;
            // Untagged items have the one row tagged `UNTAGGED`: theirs is the null group.
            all.push((key.filter(|k| k != UNTAGGED), count));
        }
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
        TreeAxis::Tag if on_tag_rows(q) => format!(
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
