//! The plugin marketplace's rows: registered curated marketplaces, the plugins their last
//! sync found (with the names attributed to each, rewritten in the same transaction),
//! user-submitted ("flea") entities, and each item's 30-day usage figures. What a sync
//! fetches and how a plugin directory is read live above (`svc-marketplace`).

use std::collections::HashMap;

use chrono::{Duration, NaiveDate};
use serde::Serialize;
use sqlx::any::AnyRow;
use sqlx::Row;
use svc_core::clock::now;

use crate::clause::{bound, like_literal, Where};
use crate::{Store, StoreError};

/// Days in the usage window (today and the 29 before).
pub const WINDOW_DAYS: i64 = 30;
/// A trend needs at least this many invocations in the prior 7 days…
pub const TREND_MIN_PRIOR: i64 = 5;
/// …and this many distinct users in the recent 7, so one heavy user cannot top the list.
pub const TREND_MIN_USERS: i64 = 3;

/// A registered curated marketplace.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MarketplaceRow {
    /// Its slug (the first half of its plugins' ref ids).
    pub id: String,
    /// Display name.
    pub name: String,
    /// A git URL or a local directory.
    pub url: String,
    /// The branch to fetch (default: the remote's).
    pub branch: Option<String>,
    /// Who registered it.
    pub created_by: Option<String>,
    /// When.
    pub created_at: Option<String>,
    /// When a sync last succeeded.
    pub last_synced_at: Option<String>,
    /// The commit it read.
    pub last_commit: Option<String>,
    /// Why the last sync failed (the previous data stays).
    pub last_error: Option<String>,
    /// Plugins found.
    pub plugin_count: i64,
}

/// One plugin a sync found.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct PluginRow {
    /// Its marketplace.
    pub marketplace_id: String,
    /// Its name.
    pub name: String,
    /// `<marketplace>/<name>`.
    pub ref_id: String,
    /// Description.
    pub description: Option<String>,
    /// Version.
    pub version: Option<String>,
    /// Category.
    pub category: Option<String>,
    /// Author.
    pub author: Option<String>,
    /// Skill names.
    pub skills: Vec<String>,
    /// Agent names.
    pub agents: Vec<String>,
    /// Command names (without `/`).
    pub commands: Vec<String>,
    /// What was wrong with it (its readable parts are still attributed).
    pub error: Option<String>,
    /// When it first appeared.
    pub created_at: Option<String>,
    /// When it was last read.
    pub synced_at: Option<String>,
}

/// A user-submitted skill, agent or plugin.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct FleaEntity {
    /// Its id (its ref id).
    pub id: String,
    /// Name.
    pub name: String,
    /// `skill`, `agent` or `plugin`.
    pub entity_type: String,
    /// Description.
    pub description: Option<String>,
    /// Category.
    pub category: Option<String>,
    /// The skill's or agent's text.
    pub content: Option<String>,
    /// Skill names it provides.
    pub skills: Vec<String>,
    /// Agent names.
    pub agents: Vec<String>,
    /// Command names.
    pub commands: Vec<String>,
    /// `pending`, `approved` or `archived`.
    pub status: String,
    /// Submitter's user id.
    pub submitted_by: Option<String>,
    /// Submitter's e-mail.
    pub submitter_email: Option<String>,
    /// Who approved or archived it.
    pub decided_by: Option<String>,
    /// When submitted.
    pub created_at: Option<String>,
    /// When last changed.
    pub updated_at: Option<String>,
}

/// Which items a listing shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MarketTab {
    /// Plugins of curated marketplaces.
    Curated,
    /// Approved flea entities.
    Flea,
    /// The caller's own flea submissions, any status (their user id).
    Mine(String),
}

/// How a listing is ordered; each ends in the id, so pages are stable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarketSort {
    /// Newest first.
    Recent,
    /// Most invocations in 30 days first, then name.
    MostUsed,
    /// Largest trend first; items without a trend are left out.
    Trending,
}

/// A listing request.
#[derive(Debug, Clone)]
pub struct ItemsQuery {
    /// The tab.
    pub tab: MarketTab,
    /// Literal text in the name or description.
    pub q: Option<String>,
    /// Exact category.
    pub category: Option<String>,
    /// `plugin`, `skill` or `agent`.
    pub item_type: Option<String>,
    /// Order.
    pub sort: MarketSort,
    /// Rows to skip.
    pub offset: u64,
    /// Rows at most.
    pub limit: u64,
}

/// A marketplace item with its usage.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MarketItem {
    /// `curated` or `flea`.
    pub source: String,
    /// Its ref id: `<marketplace>/<plugin>` or the entity id.
    pub id: String,
    /// Name.
    pub name: String,
    /// `plugin`, `skill` or `agent`.
    pub item_type: String,
    /// Description.
    pub description: Option<String>,
    /// Category.
    pub category: Option<String>,
    /// The marketplace (curated) or null.
    pub marketplace_id: Option<String>,
    /// The flea status, or null for curated plugins.
    pub status: Option<String>,
    /// When it appeared.
    pub created_at: Option<String>,
    /// Invocations, today and the 29 days before.
    pub invocations_30d: i64,
    /// Distinct users over the same 30 days (not a sum of daily counts).
    pub unique_users_30d: i64,
    /// Change of the last 7 days over the 7 before, in percent; null below the minimum
    /// sample ([`TREND_MIN_PRIOR`], [`TREND_MIN_USERS`]).
    pub trend_pct: Option<f64>,
}

/// One page of items.
#[derive(Debug, Clone, Serialize)]
pub struct ItemsPage {
    /// The page.
    pub items: Vec<MarketItem>,
    /// Items matching, all pages.
    pub total: i64,
}

fn list(r: &AnyRow, column: &str) -> Result<Vec<String>, StoreError> {
    let raw: Option<String> = r.try_get(column)?;
    Ok(raw
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default())
}

fn as_json(v: &[String]) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "[]".into())
}

fn marketplace(r: &AnyRow) -> Result<MarketplaceRow, StoreError> {
    Ok(MarketplaceRow {
        id: r.try_get("id")?,
        name: r.try_get("name")?,
        url: r.try_get("url")?,
        branch: r.try_get("branch")?,
        created_by: r.try_get("created_by")?,
        created_at: r.try_get("created_at")?,
        last_synced_at: r.try_get("last_synced_at")?,
        last_commit: r.try_get("last_commit")?,
        last_error: r.try_get("last_error")?,
        plugin_count: r.try_get("plugin_count")?,
    })
}

fn plugin(r: &AnyRow) -> Result<PluginRow, StoreError> {
    Ok(PluginRow {
        marketplace_id: r.try_get("marketplace_id")?,
        name: r.try_get("name")?,
        ref_id: r.try_get("ref_id")?,
        description: r.try_get("description")?,
        version: r.try_get("version")?,
        category: r.try_get("category")?,
        author: r.try_get("author")?,
        skills: list(r, "skills")?,
        agents: list(r, "agents")?,
        commands: list(r, "commands")?,
        error: r.try_get("error")?,
        created_at: r.try_get("created_at")?,
        synced_at: r.try_get("synced_at")?,
    })
}

fn flea(r: &AnyRow) -> Result<FleaEntity, StoreError> {
    Ok(FleaEntity {
        id: r.try_get("id")?,
        name: r.try_get("name")?,
        entity_type: r.try_get("entity_type")?,
        description: r.try_get("description")?,
        category: r.try_get("category")?,
        content: r.try_get("content")?,
        skills: list(r, "skills")?,
        agents: list(r, "agents")?,
        commands: list(r, "commands")?,
        status: r.try_get("status")?,
        submitted_by: r.try_get("submitted_by")?,
        submitter_email: r.try_get("submitter_email")?,
        decided_by: r.try_get("decided_by")?,
        created_at: r.try_get("created_at")?,
        updated_at: r.try_get("updated_at")?,
    })
}

const MARKETPLACE_COLUMNS: &str = "id, name, url, branch, created_by, created_at, last_synced_at, \
    last_commit, last_error, plugin_count";
const PLUGIN_COLUMNS: &str = "marketplace_id, name, ref_id, description, version, category, \
    author, skills, agents, commands, error, created_at, synced_at";
const FLEA_COLUMNS: &str = "id, name, entity_type, description, category, content, skills, \
    agents, commands, status, submitted_by, submitter_email, decided_by, created_at, updated_at";

/// The usage columns of a listing row, from the stats table aliased `s`.
fn usage_columns() -> String {
    format!(
        "COALESCE(s.invocations_30d, 0) AS invocations_30d, \
         COALESCE(s.unique_users_30d, 0) AS unique_users_30d, \
         CASE WHEN s.prior_7d >= {TREND_MIN_PRIOR} AND s.recent_users_7d >= {TREND_MIN_USERS} \
              THEN CAST(s.recent_7d - s.prior_7d AS DOUBLE PRECISION) * 100 / s.prior_7d END AS trend_pct"
    )
}

type Tx<'a> = sqlx::Transaction<'a, sqlx::Any>;

/// Makes the attribution rows of `(source, ref_id)` exactly these names (skills, agents,
/// commands), inside the caller's transaction: the one place attribution rows are written.
pub(crate) async fn attribute(
    tx: &mut Tx<'_>,
    source: &str,
    ref_id: &str,
    names: [&[String]; 3],
) -> Result<(), StoreError> {
    let tables = [
        ("usage_attribution_skills", "skill_name"),
        ("usage_attribution_agents", "agent_name"),
        ("usage_attribution_commands", "command_name"),
    ];
    for ((table, column), names) in tables.into_iter().zip(names) {
        sqlx::query(&format!(
            "DELETE FROM {table} WHERE source = $1 AND ref_id = $2"
        ))
        .bind(source)
        .bind(ref_id)
        .execute(&mut **tx)
        .await?;
        let mut names: Vec<&String> = names.iter().filter(|n| !n.is_empty()).collect();
        names.sort();
        names.dedup();
        for name in names {
            sqlx::query(&format!(
                "INSERT INTO {table} (source, ref_id, {column}) VALUES ($1, $2, $3)"
            ))
            .bind(source)
            .bind(ref_id)
            .bind(name)
            .execute(&mut **tx)
            .await?;
        }
    }
    Ok(())
}

fn day(d: NaiveDate) -> String {
    d.format("%Y-%m-%d").to_string()
}

impl Store {
    /// Registers a marketplace; false if the id is taken.
    pub async fn create_marketplace(&self, m: &MarketplaceRow) -> Result<bool, StoreError> {
        let n = sqlx::query(
            "INSERT INTO marketplaces (id, name, url, branch, created_by, created_at, plugin_count) \
             VALUES ($1, $2, $3, $4, $5, $6, 0) ON CONFLICT (id) DO NOTHING",
        )
        .bind(&m.id)
        .bind(&m.name)
        .bind(&m.url)
        .bind(&m.branch)
        .bind(&m.created_by)
        .bind(now())
        .execute(self.pool())
        .await?
        .rows_affected();
        Ok(n == 1)
    }

    /// Every registered marketplace, by id.
    pub async fn marketplaces(&self) -> Result<Vec<MarketplaceRow>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {MARKETPLACE_COLUMNS} FROM marketplaces ORDER BY id"
        ))
        .fetch_all(self.pool())
        .await?;
        rows.iter().map(marketplace).collect()
    }

    /// One marketplace.
    pub async fn marketplace(&self, id: &str) -> Result<Option<MarketplaceRow>, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT {MARKETPLACE_COLUMNS} FROM marketplaces WHERE id = $1"
        ))
        .bind(id)
        .fetch_optional(self.pool())
        .await?;
        row.as_ref().map(marketplace).transpose()
    }

    /// Records a failed sync; the plugins and attribution from the last good one stay.
    pub async fn record_marketplace_failure(
        &self,
        id: &str,
        error: &str,
    ) -> Result<(), StoreError> {
        sqlx::query("UPDATE marketplaces SET last_error = $1 WHERE id = $2")
            .bind(error)
            .bind(id)
            .execute(self.pool())
            .await?;
        Ok(())
    }

    /// Replaces a marketplace's plugins and their attribution rows with what a sync found,
    /// in one transaction; a plugin seen before keeps its `created_at`.
    pub async fn replace_marketplace_plugins(
        &self,
        id: &str,
        commit: Option<&str>,
        plugins: &[PluginRow],
    ) -> Result<(), StoreError> {
        let at = now();
        let mut tx = self.begin_write().await?;
        let old = sqlx::query(
            "SELECT ref_id, created_at FROM marketplace_plugins WHERE marketplace_id = $1",
        )
        .bind(id)
        .fetch_all(&mut *tx)
        .await?;
        let mut first_seen: HashMap<String, Option<String>> = HashMap::new();
        for r in &old {
            first_seen.insert(r.try_get("ref_id")?, r.try_get("created_at")?);
        }
        for ref_id in first_seen.keys() {
            attribute(&mut tx, "curated", ref_id, [&[], &[], &[]]).await?;
        }
        sqlx::query("DELETE FROM marketplace_plugins WHERE marketplace_id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        for p in plugins {
            let created = first_seen
                .get(&p.ref_id)
                .cloned()
                .flatten()
                .unwrap_or_else(|| at.clone());
            sqlx::query(&format!(
                "INSERT INTO marketplace_plugins ({PLUGIN_COLUMNS}) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)"
            ))
            .bind(id)
            .bind(&p.name)
            .bind(&p.ref_id)
            .bind(&p.description)
            .bind(&p.version)
            .bind(&p.category)
            .bind(&p.author)
            .bind(as_json(&p.skills))
            .bind(as_json(&p.agents))
            .bind(as_json(&p.commands))
            .bind(&p.error)
            .bind(created)
            .bind(&at)
            .execute(&mut *tx)
            .await?;
            attribute(
                &mut tx,
                "curated",
                &p.ref_id,
                [&p.skills, &p.agents, &p.commands],
            )
            .await?;
        }
        sqlx::query(
            "UPDATE marketplaces SET last_synced_at = $1, last_commit = $2, last_error = NULL, \
             plugin_count = $3 WHERE id = $4",
        )
        .bind(&at)
        .bind(commit)
        .bind(plugins.len() as i64)
        .bind(id)
        .execute(&mut *tx)
        .await?;
        Ok(tx.commit().await?)
    }

    /// A marketplace's plugins, by name.
    pub async fn marketplace_plugins(&self, id: &str) -> Result<Vec<PluginRow>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {PLUGIN_COLUMNS} FROM marketplace_plugins WHERE marketplace_id = $1 ORDER BY name"
        ))
        .bind(id)
        .fetch_all(self.pool())
        .await?;
        rows.iter().map(plugin).collect()
    }

    /// One curated plugin by ref id.
    pub async fn marketplace_plugin(&self, ref_id: &str) -> Result<Option<PluginRow>, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT {PLUGIN_COLUMNS} FROM marketplace_plugins WHERE ref_id = $1"
        ))
        .bind(ref_id)
        .fetch_optional(self.pool())
        .await?;
        row.as_ref().map(plugin).transpose()
    }

    /// Stores a new flea submission (`pending`).
    pub async fn create_flea_entity(&self, e: &FleaEntity) -> Result<(), StoreError> {
        let at = now();
        sqlx::query(&format!(
            "INSERT INTO flea_entities ({FLEA_COLUMNS}) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'pending', $10, $11, NULL, $12, $12)"
        ))
        .bind(&e.id)
        .bind(&e.name)
        .bind(&e.entity_type)
        .bind(&e.description)
        .bind(&e.category)
        .bind(&e.content)
        .bind(as_json(&e.skills))
        .bind(as_json(&e.agents))
        .bind(as_json(&e.commands))
        .bind(&e.submitted_by)
        .bind(&e.submitter_email)
        .bind(&at)
        .execute(self.pool())
        .await?;
        Ok(())
    }

    /// One flea entity.
    pub async fn flea_entity(&self, id: &str) -> Result<Option<FleaEntity>, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT {FLEA_COLUMNS} FROM flea_entities WHERE id = $1"
        ))
        .bind(id)
        .fetch_optional(self.pool())
        .await?;
        row.as_ref().map(flea).transpose()
    }

    /// Flea entities in a status (every one when None), oldest first.
    pub async fn flea_entities(&self, status: Option<&str>) -> Result<Vec<FleaEntity>, StoreError> {
        let mut w = Where::new();
        if let Some(s) = status {
            w.push("status = $?", s.to_owned());
        }
        let sql = format!(
            "SELECT {FLEA_COLUMNS} FROM flea_entities{} ORDER BY created_at, id",
            w.sql
        );
        let rows = bound(&sql, &w.binds).fetch_all(self.pool()).await?;
        rows.iter().map(flea).collect()
    }

    /// Moves a flea entity to `status` and makes its attribution rows match in the same
    /// transaction (its names when approved, none otherwise).
    pub async fn set_flea_status(
        &self,
        e: &FleaEntity,
        status: &str,
        by: &str,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin_write().await?;
        sqlx::query(
            "UPDATE flea_entities SET status = $1, decided_by = $2, updated_at = $3 WHERE id = $4",
        )
        .bind(status)
        .bind(by)
        .bind(now())
        .bind(&e.id)
        .execute(&mut *tx)
        .await?;
        let none: [&[String]; 3] = [&[], &[], &[]];
        let names = if status == "approved" {
            [&e.skills[..], &e.agents[..], &e.commands[..]]
        } else {
            none
        };
        attribute(&mut tx, "flea", &e.id, names).await?;
        Ok(tx.commit().await?)
    }

    /// The day the usage figures were computed for, if ever.
    pub async fn marketplace_stats_as_of(&self) -> Result<Option<String>, StoreError> {
        Ok(
            sqlx::query("SELECT MAX(as_of) AS d FROM marketplace_item_stats")
                .fetch_one(self.pool())
                .await?
                .try_get("d")?,
        )
    }

    /// Recomputes every item's usage figures as of `today` from the files' daily counts:
    /// 30-day invocations and true distinct users, and the last 7 days against the 7
    /// before for the trend.
    pub async fn refresh_marketplace_stats(&self, today: NaiveDate) -> Result<(), StoreError> {
        let mut tx = self.begin_write().await?;
        refresh_stats(&mut tx, today).await?;
        Ok(tx.commit().await?)
    }

    /// A page of marketplace items with their usage.
    pub async fn marketplace_items(&self, q: &ItemsQuery) -> Result<ItemsPage, StoreError> {
        let usage = usage_columns();
        let curated = format!(
            "SELECT 'curated' AS source, p.ref_id AS id, p.name AS name, 'plugin' AS item_type, \
             p.description AS description, p.category AS category, p.marketplace_id AS marketplace_id, \
             CAST(NULL AS TEXT) AS status, p.created_at AS created_at, {usage} \
             FROM marketplace_plugins p \
             LEFT JOIN marketplace_item_stats s ON s.source = 'curated' AND s.ref_id = p.ref_id"
        );
        let flea = |filter: &str| {
            format!(
                "SELECT 'flea' AS source, e.id AS id, e.name AS name, e.entity_type AS item_type, \
                 e.description AS description, e.category AS category, CAST(NULL AS TEXT) AS marketplace_id, \
                 e.status AS status, e.created_at AS created_at, {usage} \
                 FROM flea_entities e \
                 LEFT JOIN marketplace_item_stats s ON s.source = 'flea' AND s.ref_id = e.id \
                 WHERE {filter}"
            )
        };
        let mut w = Where::new();
        let inner = match &q.tab {
            MarketTab::Curated => curated,
            MarketTab::Flea => flea("e.status = 'approved'"),
            MarketTab::Mine(user) => {
                w.binds.push(user.clone());
                flea("e.submitted_by = $1")
            }
        };
        if let Some(text) = q.q.as_deref().filter(|t| !t.is_empty()) {
            w.push(
                "(name LIKE $? ESCAPE '\\' OR description LIKE $? ESCAPE '\\')",
                format!("%{}%", like_literal(text)),
            );
        }
        if let Some(c) = &q.category {
            w.push("category = $?", c.clone());
        }
        if let Some(t) = &q.item_type {
            w.push("item_type = $?", t.clone());
        }
        let order = match q.sort {
            MarketSort::Recent => "created_at DESC, id ASC",
            MarketSort::MostUsed => "invocations_30d DESC, LOWER(name) ASC, id ASC",
            MarketSort::Trending => {
                w.push_fixed("trend_pct IS NOT NULL");
                "trend_pct DESC, invocations_30d DESC, LOWER(name) ASC, id ASC"
            }
        };
        let from = format!("FROM ({inner}) items{}", w.sql);
        let total: i64 = bound(&format!("SELECT COUNT(*) AS n {from}"), &w.binds)
            .fetch_one(self.pool())
            .await?
            .try_get("n")?;
        let sql = format!(
            "SELECT * {from} ORDER BY {order} LIMIT {} OFFSET {}",
            q.limit, q.offset
        );
        let rows = bound(&sql, &w.binds).fetch_all(self.pool()).await?;
        let items = rows
            .iter()
            .map(|r| {
                Ok(MarketItem {
                    source: r.try_get("source")?,
                    id: r.try_get("id")?,
                    name: r.try_get("name")?,
                    item_type: r.try_get("item_type")?,
                    description: r.try_get("description")?,
                    category: r.try_get("category")?,
                    marketplace_id: r.try_get("marketplace_id")?,
                    status: r.try_get("status")?,
                    created_at: r.try_get("created_at")?,
                    invocations_30d: r.try_get("invocations_30d")?,
                    unique_users_30d: r.try_get("unique_users_30d")?,
                    trend_pct: r.try_get("trend_pct")?,
                })
            })
            .collect::<Result<_, StoreError>>()?;
        Ok(ItemsPage { items, total })
    }

    /// One item's usage: `(invocations_30d, unique_users_30d, trend_pct)` and its daily
    /// invocations for the 30 days ending `today`, oldest first, zero-filled.
    #[allow(clippy::type_complexity)]
    pub async fn marketplace_item_usage(
        &self,
        source: &str,
        ref_id: &str,
        today: NaiveDate,
    ) -> Result<((i64, i64, Option<f64>), Vec<(String, i64)>), StoreError> {
        let row = sqlx::query(&format!(
            "SELECT {} FROM (SELECT 1 AS one) x \
             LEFT JOIN marketplace_item_stats s ON s.source = $1 AND s.ref_id = $2",
            usage_columns()
        ))
        .bind(source)
        .bind(ref_id)
        .fetch_one(self.pool())
        .await?;
        let totals = (
            row.try_get("invocations_30d")?,
            row.try_get("unique_users_30d")?,
            row.try_get("trend_pct")?,
        );
        let first = today - Duration::days(WINDOW_DAYS - 1);
        let rows = sqlx::query(
            "SELECT day, CAST(SUM(invocations) AS BIGINT) AS n FROM usage_plugin_daily \
             WHERE source = $1 AND ref_id = $2 AND day >= $3 AND day <= $4 GROUP BY day",
        )
        .bind(source)
        .bind(ref_id)
        .bind(day(first))
        .bind(day(today))
        .fetch_all(self.pool())
        .await?;
        let mut by_day: HashMap<String, i64> = HashMap::new();
        for r in rows {
            by_day.insert(r.try_get("day")?, r.try_get("n")?);
        }
        let series = (0..WINDOW_DAYS)
            .map(|i| {
                let d = day(first + Duration::days(i));
                let n = by_day.get(&d).copied().unwrap_or(0);
                (d, n)
            })
            .collect();
        Ok((totals, series))
    }
}

/// The stats rebuild, inside a caller's transaction (the rollup rebuild runs it too, so
/// the figures are never older than the rollups). Two listings may start it at once on a new
/// day; the upsert lets the second land on the first's rows instead of failing.
pub(crate) async fn refresh_stats(tx: &mut Tx<'_>, today: NaiveDate) -> Result<(), StoreError> {
    let first = day(today - Duration::days(WINDOW_DAYS - 1));
    let recent = day(today - Duration::days(6));
    let prior = day(today - Duration::days(13));
    sqlx::query("DELETE FROM marketplace_item_stats")
        .execute(&mut **tx)
        .await?;
    // A row no listing joins (empty source and ref id) records the day even when nothing
    // was used, so listings do not recompute on every call of a quiet day.
    sqlx::query(
        "INSERT INTO marketplace_item_stats (source, ref_id, as_of) VALUES ('', '', $1) \
         ON CONFLICT (source, ref_id) DO UPDATE SET as_of = excluded.as_of",
    )
    .bind(day(today))
    .execute(&mut **tx)
    .await?;
    sqlx::query(
        "INSERT INTO marketplace_item_stats (source, ref_id, as_of, invocations_30d, unique_users_30d, \
         recent_7d, prior_7d, recent_users_7d) \
         SELECT source, ref_id, $1, SUM(invocations), COUNT(DISTINCT user_key), \
                SUM(CASE WHEN day >= $2 THEN invocations ELSE 0 END), \
                SUM(CASE WHEN day >= $3 AND day < $2 THEN invocations ELSE 0 END), \
                COUNT(DISTINCT CASE WHEN day >= $2 THEN user_key END) \
         FROM usage_file_daily \
         WHERE ref_id IS NOT NULL AND source IN ('curated', 'flea') AND day >= $4 AND day <= $1 \
         GROUP BY source, ref_id \
         ON CONFLICT (source, ref_id) DO UPDATE SET as_of = excluded.as_of, \
           invocations_30d = excluded.invocations_30d, unique_users_30d = excluded.unique_users_30d, \
           recent_7d = excluded.recent_7d, prior_7d = excluded.prior_7d, \
           recent_users_7d = excluded.recent_users_7d",
    )
    .bind(day(today))
    .bind(&recent)
    .bind(&prior)
    .bind(&first)
    .execute(&mut **tx)
    .await?;
    Ok(())
}
