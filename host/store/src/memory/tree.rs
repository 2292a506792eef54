//! Knowledge items grouped along one axis (domain, category, tag or audience): the groups
//! counted in SQL, paginated, each with its most recently changed items. The tag axis puts
//! an item in every tag's group; items without a value form one group whose key is null.

use serde::Serialize;
use sqlx::Row;

use super::{item, item_filter, KnowledgeItem, Visibility, COLUMNS, UNTAGGED};
use crate::clause::{bound, Where};
use crate::{Store, StoreError};

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
        // counted from their covering index, and filtered items' tags through `IN`, whose
        // inner scope resolves the filter's columns to the items.
        let groups_sql = match q.axis {
            TreeAxis::Tag if on_tag_rows(q) => format!(
                "SELECT tag AS k, COUNT(*) AS n FROM knowledge_item_tags{} GROUP BY tag",
                w.sql
            ),
            TreeAxis::Tag => format!(
                "SELECT tag AS k, COUNT(*) AS n FROM knowledge_item_tags \
                 WHERE item_id IN (SELECT id FROM knowledge_items{}) GROUP BY tag",
                w.sql
            ),
            axis => format!(
                "SELECT {c} || '' AS k, COUNT(*) AS n FROM knowledge_items{} GROUP BY {c} || ''",
                w.sql,
                c = axis.column()
            ),
        };
        let rows = bound(&groups_sql, &w.binds).fetch_all(self.pool()).await?;
        let mut all = Vec::with_capacity(rows.len());
        for r in rows {
            let key: Option<String> = r.try_get("k")?;
            let count: i64 = r.try_get("n")?;
            // Untagged items have the one row tagged `UNTAGGED`: theirs is the null group.
            all.push((key.filter(|k| k != UNTAGGED), count));
        }
        // An item is in exactly one group on every axis but tags, where it is counted once
        // per tag; its count is then read from the items' covering index.
        let total_items = match q.axis {
            TreeAxis::Tag => bound(
                &format!("SELECT COUNT(*) AS n FROM knowledge_items{}", w.sql),
                &w.binds,
            )
            .fetch_one(self.pool())
            .await?
            .try_get("n")?,
            _ => all.iter().map(|(_, n)| n).sum(),
        };
        // Largest first, ties by key in byte order, the null group last: the same order on
        // both backends, whatever their collations.
        all.sort_by(|(ka, na), (kb, nb)| {
            nb.cmp(na)
                .then(ka.is_none().cmp(&kb.is_none()))
                .then(ka.cmp(kb))
        });
        let total_groups = all.len() as i64;
        let mut groups = Vec::new();
        for (key, count) in all
            .into_iter()
            .skip(q.offset as usize)
            .take(q.limit as usize)
        {
            let items = self.tree_group_items(&w, q, key.as_deref()).await?;
            groups.push(TreeGroup { key, count, items });
        }
        Ok(TreePage {
            groups,
            total_groups,
            total_items,
        })
    }

    /// The first items of one group, most recently changed first.
    async fn tree_group_items(
        &self,
        w: &Where,
        q: &TreeQuery,
        key: Option<&str>,
    ) -> Result<Vec<KnowledgeItem>, StoreError> {
        let newest = format!(
            "ORDER BY updated_at DESC, id DESC LIMIT {}",
            q.items_per_group
        );
        let mut w = w.clone();
        let sql = match (q.axis, key.unwrap_or(UNTAGGED)) {
            // The tag's rows walked newest first on their index, then those items read.
            (TreeAxis::Tag, tag) if on_tag_rows(q) => {
                w.push("tag = $?", tag.to_owned());
                format!(
                    "SELECT {COLUMNS} FROM knowledge_items WHERE id IN (SELECT item_id FROM \
                     knowledge_item_tags{} ORDER BY item_updated_at DESC, item_id DESC LIMIT {}) {newest}",
                    w.sql, q.items_per_group
                )
            }
            (TreeAxis::Tag, tag) => {
                w.push(
                    "id IN (SELECT item_id FROM knowledge_item_tags WHERE tag = $?)",
                    tag.to_owned(),
                );
                format!("SELECT {COLUMNS} FROM knowledge_items{} {newest}", w.sql)
            }
            (axis, _) => {
                match key {
                    Some(k) => w.push(&format!("{} = $?", axis.column()), k.to_owned()),
                    None => w.push_fixed(&format!("{} IS NULL", axis.column())),
                }
                format!("SELECT {COLUMNS} FROM knowledge_items{} {newest}", w.sql)
            }
        };
        let rows = bound(&sql, &w.binds).fetch_all(self.pool()).await?;
        rows.iter().map(item).collect()
    }
}
