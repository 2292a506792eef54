//! Corporate memory's rows: knowledge items and their votes ([`relations`]: contradictions
//! and duplicate candidates; [`tree`]: items grouped along an axis; [`bundle`]: what the
//! agents' bundle chooses from). Which items a caller may see and which status moves are
//! legal are decided above (`svc-memory`); this module stores, filters and counts, and
//! refuses a change made against a stale revision.

pub mod bundle;
pub(crate) mod counts;
pub mod relations;
pub mod tree;

use serde::Serialize;
use sqlx::any::AnyRow;
use sqlx::Row;
use svc_core::clock::{format_ts, new_id, now};

use crate::clause::{bound, like_literal, Where};
use crate::{flag, Store, StoreError};

/// The memory domains an item may belong to (and a `memory_domain` grant may name).
pub const MEMORY_DOMAINS: &[&str] = &[
    "finance",
    "engineering",
    "product",
    "data",
    "operations",
    "infrastructure",
];

/// One knowledge item as stored, with its vote counts.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KnowledgeItem {
    /// Item id.
    pub id: String,
    /// Title (never empty).
    pub title: String,
    /// The knowledge itself.
    pub content: Option<String>,
    /// Free-form category.
    pub category: Option<String>,
    /// Tags, in the order given.
    pub tags: Vec<String>,
    /// `pending`, `approved`, `mandatory`, `rejected`, `revoked` or `expired`.
    pub status: String,
    /// The contributor's e-mail.
    pub source_user: Option<String>,
    /// The contributor's user id.
    pub created_by: Option<String>,
    /// Who sees it: null or `all` (everyone), or `group:<name>`.
    pub audience: Option<String>,
    /// 0..=1.
    pub confidence: f64,
    /// One of the memory domains, or null.
    pub domain: Option<String>,
    /// Named entities it mentions (JSON).
    pub entities: Option<serde_json::Value>,
    /// Where it came from (`api`, `cli`, `agent`…).
    pub source_type: String,
    /// A reference into that source.
    pub source_ref: Option<String>,
    /// Seen only by its contributor (and administrators).
    pub is_personal: bool,
    /// Bumped by every change; a change naming an older revision is refused.
    pub revision: i64,
    /// Votes up.
    pub upvotes: i64,
    /// Votes down.
    pub downvotes: i64,
    /// `upvotes - downvotes`.
    pub score: i64,
    /// When it was contributed.
    pub created_at: Option<String>,
    /// When it last changed.
    pub updated_at: Option<String>,
}

pub(crate) const COLUMNS: &str =
    "id, title, content, category, tags, status, source_user, created_by, \
    audience, confidence_milli, domain, entities, source_type, source_ref, is_personal, \
    revision, upvotes, downvotes, created_at, updated_at";

pub(crate) fn item(r: &AnyRow) -> Result<KnowledgeItem, StoreError> {
    let tags: Option<String> = r.try_get("tags")?;
    let entities: Option<String> = r.try_get("entities")?;
    let up: i64 = r.try_get("upvotes")?;
    let down: i64 = r.try_get("downvotes")?;
    let milli: i64 = r.try_get("confidence_milli")?;
    Ok(KnowledgeItem {
        id: r.try_get("id")?,
        title: r.try_get("title")?,
        content: r.try_get("content")?,
        category: r.try_get("category")?,
        tags: tags
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default(),
        status: r.try_get("status")?,
        source_user: r.try_get("source_user")?,
        created_by: r.try_get("created_by")?,
        audience: r.try_get("audience")?,
        confidence: milli as f64 / 1000.0,
        domain: r.try_get("domain")?,
        entities: entities.and_then(|e| serde_json::from_str(&e).ok()),
        source_type: r.try_get("source_type")?,
        source_ref: r.try_get("source_ref")?,
        is_personal: flag(r, "is_personal")?,
        revision: r.try_get("revision")?,
        upvotes: up,
        downvotes: down,
        score: up - down,
        created_at: r.try_get("created_at")?,
        updated_at: r.try_get("updated_at")?,
    })
}

/// A new item, always stored `pending`.
#[derive(Debug, Clone, Default)]
pub struct NewItem {
    /// Title.
    pub title: String,
    /// Content.
    pub content: Option<String>,
    /// Category.
    pub category: Option<String>,
    /// Tags.
    pub tags: Vec<String>,
    /// Domain.
    pub domain: Option<String>,
    /// Entities (JSON).
    pub entities: Option<serde_json::Value>,
    /// Source kind.
    pub source_type: String,
    /// Source reference.
    pub source_ref: Option<String>,
    /// Contributor e-mail.
    pub source_user: String,
    /// Contributor id.
    pub created_by: String,
}

/// Which items a reader sees.
#[derive(Debug, Clone)]
pub enum Visibility {
    /// Everything, personal items included (administrators).
    All,
    /// Shared items whose audience is everyone or one of `groups` (names), or whose domain
    /// is one of `domains`; never personal items.
    Reader {
        /// The reader's group names.
        groups: Vec<String>,
        /// Memory domains granted to the reader's groups.
        domains: Vec<String>,
    },
}

/// How a list is ordered; every order ends with the id, so pages are stable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ItemSort {
    /// Most recently changed first.
    #[default]
    Updated,
    /// Most recently contributed first.
    Created,
    /// Highest score (up − down) first.
    Score,
    /// Highest confidence first.
    Confidence,
    /// By title, A to Z.
    Title,
}

impl ItemSort {
    fn order_by(self) -> &'static str {
        match self {
            Self::Updated => "updated_at DESC, id DESC",
            Self::Created => "created_at DESC, id DESC",
            Self::Score => "score DESC, updated_at DESC, id DESC",
            Self::Confidence => "confidence_milli DESC, updated_at DESC, id DESC",
            Self::Title => "title ASC, id ASC",
        }
    }
}

/// A list request.
#[derive(Debug, Clone, Default)]
pub struct ItemQuery {
    /// Exactly these statuses (empty: any).
    pub statuses: Vec<String>,
    /// Exact category.
    pub category: Option<String>,
    /// Exact domain.
    pub domain: Option<String>,
    /// Exact source type.
    pub source_type: Option<String>,
    /// Literal text in the title or content.
    pub search: Option<String>,
    /// Only this contributor's items (their user id).
    pub created_by: Option<String>,
    /// Leave personal items out even when the reader could see them.
    pub exclude_personal: bool,
    /// Order.
    pub sort: ItemSort,
    /// Rows to skip.
    pub offset: u64,
    /// Rows at most.
    pub limit: u64,
}

/// One page of items and how many match in all.
#[derive(Debug, Clone, Serialize)]
pub struct ItemPage {
    /// The page.
    pub items: Vec<KnowledgeItem>,
    /// Items matching, all pages.
    pub total_count: i64,
}

fn visible(w: &mut Where, v: &Visibility) {
    if let Visibility::Reader { groups, domains } = v {
        w.push_fixed("is_personal = FALSE");
        let mut any = vec!["audience IS NULL".to_owned(), "audience = 'all'".to_owned()];
        for g in groups {
            w.binds.push(format!("group:{g}"));
            any.push(format!("audience = ${}", w.binds.len()));
        }
        for d in domains {
            w.binds.push(d.clone());
            any.push(format!("domain = ${}", w.binds.len()));
        }
        w.sql.push_str(&format!(" AND ({})", any.join(" OR ")));
    }
}

/// The conditions every read of items shares: what the reader may see, personal items left
/// out, statuses, and literal text in the title or content.
pub(crate) fn item_filter(
    visibility: &Visibility,
    exclude_personal: bool,
    statuses: &[String],
    search: Option<&str>,
) -> Where {
    let mut w = Where::new();
    visible(&mut w, visibility);
    if exclude_personal {
        w.push_fixed("is_personal = FALSE");
    }
    if !statuses.is_empty() {
        w.push_in("status", statuses);
    }
    if let Some(text) = search.filter(|t| !t.is_empty()) {
        w.push(
            "(title LIKE $? ESCAPE '\\' OR content LIKE $? ESCAPE '\\')",
            format!("%{}%", like_literal(text)),
        );
    }
    w
}

/// The time of a change: as stored in `updated_at`, and in whole unix seconds for
/// `updated_epoch` (the bundle's rank arithmetic).
fn change_time() -> (String, i64) {
    let at = chrono::Utc::now();
    (format_ts(at), at.timestamp())
}

impl Store {
    /// Stores a new pending item and returns it.
    pub async fn create_knowledge_item(&self, new: &NewItem) -> Result<KnowledgeItem, StoreError> {
        let id = new_id();
        let (at, epoch) = change_time();
        let mut tx = self.begin_write().await?;
        sqlx::query(
            "INSERT INTO knowledge_items (id, title, content, category, tags, status, source_user, \
             created_by, confidence_milli, domain, entities, source_type, source_ref, is_personal, \
             revision, upvotes, downvotes, created_at, updated_at, title_key, content_key, updated_epoch) \
             VALUES ($1, $2, $3, $4, $5, 'pending', $6, $7, 500, $8, $9, $10, $11, FALSE, 1, 0, 0, $12, $12, $13, $14, $15)",
        )
        .bind(&id)
        .bind(&new.title)
        .bind(&new.content)
        .bind(&new.category)
        .bind(serde_json::to_string(&new.tags).unwrap_or_default())
        .bind(&new.source_user)
        .bind(&new.created_by)
        .bind(&new.domain)
        .bind(new.entities.as_ref().map(|e| e.to_string()))
        .bind(&new.source_type)
        .bind(&new.source_ref)
        .bind(&at)
        .bind(title_key(&new.title))
        .bind(new.content.as_deref().and_then(content_key))
        .bind(epoch)
        .execute(&mut *tx)
        .await?;
        replace_tags(&mut tx, &id, &new.tags).await?;
        mark_counting_rows(&mut tx, Some(&id)).await?;
        sync_tag_rows(&mut tx, Some(&id)).await?;
        count_chars(&mut tx, Some(&id)).await?;
        tx.commit().await?;
        self.knowledge_item(&id)
            .await?
            .ok_or_else(|| sqlx::Error::RowNotFound.into())
    }

    /// The items with these ids (any that do not exist are left out), whoever may see them.
    pub async fn knowledge_items_by_id(
        &self,
        ids: &[String],
    ) -> Result<Vec<KnowledgeItem>, StoreError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut w = Where::new();
        w.push_in("id", ids);
        let sql = format!("SELECT {COLUMNS} FROM knowledge_items{} ORDER BY id", w.sql);
        let rows = bound(&sql, &w.binds).fetch_all(self.pool()).await?;
        rows.iter().map(item).collect()
    }

    /// One item by id, whoever may see it.
    pub async fn knowledge_item(&self, id: &str) -> Result<Option<KnowledgeItem>, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM knowledge_items WHERE id = $1"
        ))
        .bind(id)
        .fetch_optional(self.pool())
        .await?;
        row.as_ref().map(item).transpose()
    }

    /// A page of the items `visibility` allows under `q`.
    pub async fn knowledge_items(
        &self,
        visibility: &Visibility,
        q: &ItemQuery,
    ) -> Result<ItemPage, StoreError> {
        let mut w = item_filter(
            visibility,
            q.exclude_personal,
            &q.statuses,
            q.search.as_deref(),
        );
        for (clause, value) in [
            ("category = $?", &q.category),
            ("domain = $?", &q.domain),
            ("source_type = $?", &q.source_type),
            ("created_by = $?", &q.created_by),
        ] {
            if let Some(v) = value {
                w.push(clause, v.clone());
            }
        }
        let count_sql = format!("SELECT COUNT(*) AS n FROM knowledge_items{}", w.sql);
        let page_sql = format!(
            "SELECT {COLUMNS} FROM knowledge_items{} ORDER BY {} LIMIT {} OFFSET {}",
            w.sql,
            q.sort.order_by(),
            q.limit,
            q.offset
        );
        let total: i64 = bound(&count_sql, &w.binds)
            .fetch_one(self.pool())
            .await?
            .try_get("n")?;
        let rows = bound(&page_sql, &w.binds).fetch_all(self.pool()).await?;
        Ok(ItemPage {
            items: rows.iter().map(item).collect::<Result<_, _>>()?,
            total_count: total,
        })
    }

    /// Applies `change` to the item if it is still at `revision`, bumping the revision and
    /// `updated_at`. False when the item changed meanwhile (or is gone).
    pub async fn update_knowledge_item(
        &self,
        id: &str,
        revision: i64,
        change: &ItemChange,
    ) -> Result<bool, StoreError> {
        let (at, epoch) = change_time();
        let mut sets = vec![
            "revision = revision + 1".to_owned(),
            "updated_at = $1".to_owned(),
            // Our own integer, not a request's value: safe to write into the SQL.
            format!("updated_epoch = {epoch}"),
        ];
        let mut binds: Vec<Option<String>> = vec![Some(at)];
        let mut set = |column: &str, value: Option<String>| {
            binds.push(value);
            sets.push(format!("{column} = ${}", binds.len()));
        };
        if let Some(s) = &change.status {
            set("status", Some(s.clone()));
        }
        if let Some(v) = &change.title {
            set("title", Some(v.clone()));
            set("title_key", Some(title_key(v)));
        }
        if let Some(v) = &change.content {
            set("content", v.clone());
            set("content_key", v.as_deref().and_then(content_key));
        }
        if let Some(v) = &change.category {
            set("category", v.clone());
        }
        if let Some(v) = &change.domain {
            set("domain", v.clone());
        }
        if let Some(v) = &change.audience {
            set("audience", v.clone());
        }
        if let Some(tags) = &change.tags {
            set(
                "tags",
                Some(serde_json::to_string(tags).unwrap_or_default()),
            );
        }
        let personal = change.is_personal.map(|p| {
            if p {
                "is_personal = TRUE"
            } else {
                "is_personal = FALSE"
            }
        });
        if let Some(p) = personal {
            sets.push(p.to_owned());
        }
        let sql = format!(
            "UPDATE knowledge_items SET {} WHERE id = ${} AND revision = ${}",
            sets.join(", "),
            binds.len() + 1,
            binds.len() + 2
        );
        let mut query = sqlx::query(&sql);
        for b in &binds {
            query = query.bind(b.clone());
        }
        let mut tx = self.begin_write().await?;
        let n = query
            .bind(id)
            .bind(revision)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if n != 1 {
            return Ok(false);
        }
        if let Some(tags) = &change.tags {
            replace_tags(&mut tx, id, tags).await?;
            mark_counting_rows(&mut tx, Some(id)).await?;
        }
        sync_tag_rows(&mut tx, Some(id)).await?;
        if change.title.is_some() || change.content.is_some() {
            count_chars(&mut tx, Some(id)).await?;
        }
        tx.commit().await?;
        Ok(true)
    }

    /// Records `user`'s vote on an item (1 up, -1 down, 0 withdraws it) and returns the
    /// item's new (upvotes, downvotes); the counts on the item change in the same
    /// transaction.
    pub async fn vote_knowledge_item(
        &self,
        id: &str,
        user: &str,
        vote: i64,
    ) -> Result<(i64, i64), StoreError> {
        let mut tx = self.begin_write().await?;
        sqlx::query("DELETE FROM knowledge_votes WHERE item_id = $1 AND user_id = $2")
            .bind(id)
            .bind(user)
            .execute(&mut *tx)
            .await?;
        if vote != 0 {
            sqlx::query(
                "INSERT INTO knowledge_votes (item_id, user_id, vote, voted_at) VALUES ($1, $2, $3, $4)",
            )
            .bind(id)
            .bind(user)
            .bind(vote)
            .bind(now())
            .execute(&mut *tx)
            .await?;
        }
        let row = sqlx::query(
            "SELECT COALESCE(SUM(CASE WHEN vote > 0 THEN 1 ELSE 0 END), 0) AS up, \
             COALESCE(SUM(CASE WHEN vote < 0 THEN 1 ELSE 0 END), 0) AS down \
             FROM knowledge_votes WHERE item_id = $1",
        )
        .bind(id)
        .fetch_one(&mut *tx)
        .await?;
        let (up, down): (i64, i64) = (row.try_get("up")?, row.try_get("down")?);
        sqlx::query(
            "UPDATE knowledge_items SET upvotes = $1, downvotes = $2, score = $3 WHERE id = $4",
        )
        .bind(up)
        .bind(down)
        .bind(up - down)
        .bind(id)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok((up, down))
    }

    /// The memory domains granted to any of a user's groups.
    pub async fn memory_domains_of(&self, user: &str) -> Result<Vec<String>, StoreError> {
        let rows = sqlx::query(
            "SELECT DISTINCT r.resource_id FROM resource_grants r \
             JOIN user_group_members m ON m.group_id = r.group_id \
             WHERE m.user_id = $1 AND r.resource_type = 'memory_domain' ORDER BY r.resource_id",
        )
        .bind(user)
        .fetch_all(self.pool())
        .await?;
        rows.iter().map(|r| Ok(r.try_get("resource_id")?)).collect()
    }

    /// A user's votes, item id → vote.
    pub async fn my_knowledge_votes(&self, user: &str) -> Result<Vec<(String, i64)>, StoreError> {
        let rows = sqlx::query("SELECT item_id, vote FROM knowledge_votes WHERE user_id = $1")
            .bind(user)
            .fetch_all(self.pool())
            .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("item_id")?, r.try_get("vote")?)))
            .collect()
    }

    /// The classifying fields (status, category, domain, source type, audience, tags) of
    /// every item `visibility` allows, for counting.
    pub async fn knowledge_dimensions(
        &self,
        visibility: &Visibility,
        exclude_personal: bool,
    ) -> Result<Vec<ItemDimensions>, StoreError> {
        let w = item_filter(visibility, exclude_personal, &[], None);
        let sql = format!(
            "SELECT status, category, domain, source_type, audience, tags FROM knowledge_items{}",
            w.sql
        );
        let rows = bound(&sql, &w.binds).fetch_all(self.pool()).await?;
        rows.iter()
            .map(|r| {
                let tags: Option<String> = r.try_get("tags")?;
                Ok(ItemDimensions {
                    status: r.try_get("status")?,
                    category: r.try_get("category")?,
                    domain: r.try_get("domain")?,
                    source_type: r.try_get("source_type")?,
                    audience: r.try_get("audience")?,
                    tags: tags
                        .and_then(|t| serde_json::from_str(&t).ok())
                        .unwrap_or_default(),
                })
            })
            .collect()
    }

    /// When any item last changed (its review state, fields or personal flag; votes do
    /// not count): an index lookup, so readers can tell cheaply whether what they derived
    /// from the items is still current.
    pub async fn knowledge_last_change(&self) -> Result<Option<String>, StoreError> {
        Ok(
            sqlx::query("SELECT MAX(updated_at) AS at FROM knowledge_items")
                .fetch_one(self.pool())
                .await?
                .try_get("at")?,
        )
    }
}

/// The words of `text`, lower-cased: runs of letters and digits.
pub fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
}

/// What two titles share when they differ only in case, spacing and punctuation: duplicate
/// detection matches items on it.
pub fn title_key(title: &str) -> String {
    words(title).collect::<Vec<_>>().join(" ")
}

/// A 64-bit FNV-1a digest of the content's words (None for content without words), so
/// contents that differ only in case, spacing and punctuation match on an indexed column.
pub fn content_key(content: &str) -> Option<String> {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut any = false;
    for w in words(content) {
        any = true;
        for b in w.bytes().chain([b' ']) {
            hash ^= u64::from(b);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    any.then(|| format!("{hash:016x}"))
}

/// Runs the UPDATE `set` for one item, with `one` (a condition on `$1`) appended, or for
/// every item when `id` is None: the backfills' and the single writes' shared shape.
async fn one_or_all(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    set: &str,
    one: &str,
    id: Option<&str>,
) -> Result<(), StoreError> {
    let single = format!("{set}{one}");
    match id {
        Some(id) => sqlx::query(&single).bind(id),
        None => sqlx::query(set),
    }
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Stores the characters of an item's title and content (every item's when `id` is None),
/// which the agents' bundle budgets by.
async fn count_chars(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    id: Option<&str>,
) -> Result<(), StoreError> {
    let set = "UPDATE knowledge_items SET chars = LENGTH(title) + COALESCE(LENGTH(content), 0)";
    one_or_all(tx, set, " WHERE id = $1", id).await
}

/// The tag of the one tag row an item without tags has (no real tag is empty): the tree's
/// group of untagged items is then counted and listed from the same index as every other.
pub(crate) const UNTAGGED: &str = "";

/// Makes an item's tag rows exactly `tags` (or the one [`UNTAGGED`] row).
async fn replace_tags(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    id: &str,
    tags: &[String],
) -> Result<(), StoreError> {
    sqlx::query("DELETE FROM knowledge_item_tags WHERE item_id = $1")
        .bind(id)
        .execute(&mut **tx)
        .await?;
    let mut tags: Vec<&str> = tags
        .iter()
        .map(String::as_str)
        .filter(|t| !t.is_empty())
        .collect();
    tags.sort();
    tags.dedup();
    if tags.is_empty() {
        tags.push(UNTAGGED);
    }
    for tag in tags {
        sqlx::query("INSERT INTO knowledge_item_tags (item_id, tag) VALUES ($1, $2)")
            .bind(id)
            .bind(tag)
            .execute(&mut **tx)
            .await?;
    }
    Ok(())
}

/// Marks an item's least tag row (every item's when `id` is None) as the one that counts
/// it in the tag tree's total. Called wherever tag rows are replaced, from v55 on.
async fn mark_counting_rows(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    id: Option<&str>,
) -> Result<(), StoreError> {
    let set = "UPDATE knowledge_item_tags SET counts_item = (tag = (SELECT MIN(t.tag) \
               FROM knowledge_item_tags t WHERE t.item_id = knowledge_item_tags.item_id))";
    one_or_all(tx, set, " WHERE item_id = $1", id).await
}

/// Copies an item's change time and visibility columns onto its tag rows (every item's
/// when `id` is None). Called in the transaction of every change to an item, so the tag
/// tree, which reads only tag rows, sees what the item says.
pub(crate) async fn sync_tag_rows(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    id: Option<&str>,
) -> Result<(), StoreError> {
    let set = "UPDATE knowledge_item_tags SET item_updated_at = k.updated_at, status = k.status, \
               is_personal = k.is_personal, audience = k.audience, domain = k.domain, \
               source_type = k.source_type \
               FROM knowledge_items k WHERE k.id = knowledge_item_tags.item_id";
    one_or_all(tx, set, " AND knowledge_item_tags.item_id = $1", id).await
}

/// Migration v53: the [`UNTAGGED`] row of every item without tags, then every tag row's
/// copy of its item's columns.
pub(crate) async fn backfill_v53(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO knowledge_item_tags (item_id, tag) SELECT id, $1 FROM knowledge_items k \
         WHERE NOT EXISTS (SELECT 1 FROM knowledge_item_tags t WHERE t.item_id = k.id)",
    )
    .bind(UNTAGGED)
    .execute(&mut **tx)
    .await?;
    sync_tag_rows(tx, None).await
}

/// Migration v55: each item's change time in unix seconds, and its least tag row marked
/// as the one that counts it.
pub(crate) async fn backfill_v55(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    backend: crate::Backend,
) -> Result<(), StoreError> {
    let epoch = match backend {
        crate::Backend::Sqlite => "CAST(strftime('%s', updated_at) AS INTEGER)",
        crate::Backend::Postgres => {
            "CAST(EXTRACT(EPOCH FROM CAST(updated_at AS TIMESTAMPTZ)) AS BIGINT)"
        }
    };
    sqlx::query(&format!(
        "UPDATE knowledge_items SET updated_epoch = {epoch} WHERE updated_at IS NOT NULL"
    ))
    .execute(&mut **tx)
    .await?;
    mark_counting_rows(tx, None).await
}

/// Migration v52: gives items stored before it their tag rows, duplicate keys and score.
pub(crate) async fn backfill_v52(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
) -> Result<(), StoreError> {
    sqlx::query("UPDATE knowledge_items SET score = upvotes - downvotes")
        .execute(&mut **tx)
        .await?;
    count_chars(tx, None).await?;
    let rows = sqlx::query("SELECT id, title, content, tags FROM knowledge_items")
        .fetch_all(&mut **tx)
        .await?;
    for r in rows {
        let id: String = r.try_get("id")?;
        let title: String = r.try_get("title")?;
        let content: Option<String> = r.try_get("content")?;
        let tags: Option<String> = r.try_get("tags")?;
        let tags: Vec<String> = tags
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default();
        sqlx::query("UPDATE knowledge_items SET title_key = $1, content_key = $2 WHERE id = $3")
            .bind(title_key(&title))
            .bind(content.as_deref().and_then(content_key))
            .bind(&id)
            .execute(&mut **tx)
            .await?;
        replace_tags(tx, &id, &tags).await?;
    }
    Ok(())
}

/// The fields items are counted by.
#[derive(Debug, Clone, PartialEq)]
pub struct ItemDimensions {
    /// Review state.
    pub status: String,
    /// Category.
    pub category: Option<String>,
    /// Domain.
    pub domain: Option<String>,
    /// Source type.
    pub source_type: String,
    /// Audience.
    pub audience: Option<String>,
    /// Tags.
    pub tags: Vec<String>,
}

/// Fields to change on an item; `None` leaves a field as it is, `Some(None)` clears it.
#[derive(Debug, Clone, Default)]
pub struct ItemChange {
    /// New status.
    pub status: Option<String>,
    /// New title.
    pub title: Option<String>,
    /// New content.
    pub content: Option<Option<String>>,
    /// New category.
    pub category: Option<Option<String>>,
    /// New domain.
    pub domain: Option<Option<String>>,
    /// New audience.
    pub audience: Option<Option<String>>,
    /// New tags.
    pub tags: Option<Vec<String>>,
    /// New personal flag.
    pub is_personal: Option<bool>,
}
