//! svc-marketplace: the plugin marketplace, ranked by what agents really use.
//!
//! Administrators register curated marketplaces (a git repository or a local directory
//! holding `marketplace.json` and `plugins/<name>/`); a sync fetches each ([`fetch`]),
//! reads its plugins ([`layout`]) and rewrites their rows and the names attributed to them
//! in one transaction, so the telemetry pipeline credits a plugin whichever way its skills,
//! agents and commands are invoked. Users submit "flea" entities (a skill, an agent, or a
//! plugin directory as a tar archive, [`archive`]); administrators approve or archive them.
//! Listings carry each item's 30-day invocations, true distinct users and a trend, from the
//! usage figures the store refreshes with every rollup.
//!
//! Principal type: [`Marketplace`]. Stands on `svc-auth` (the caller), `svc-store` and
//! `svc-core`; must never import poem or any crate above it.

pub mod archive;
pub mod fetch;
pub mod layout;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use serde_json::{json, Value};
use svc_auth::Caller;
use svc_core::clock::new_id;
use svc_core::Error;
use svc_store::audit::{Actor, AuditWriter, Event};
use svc_store::marketplace::{FleaEntity, ItemsPage, ItemsQuery, MarketplaceRow, PluginRow};
use svc_store::Store;

type Result<T> = std::result::Result<T, Error>;

/// Longest name of a marketplace, plugin or entity.
pub const MAX_NAME_CHARS: usize = 64;
/// Largest skill or agent text submitted inline.
pub const MAX_CONTENT_BYTES: usize = 256 * 1024;

/// What one marketplace's sync did.
#[derive(Debug, Clone, Serialize)]
pub struct SyncReport {
    /// The marketplace.
    pub id: String,
    /// The commit read (git), if any.
    pub commit: Option<String>,
    /// Plugins found.
    pub plugins: usize,
    /// Plugins with a problem, and the problem (their readable parts are attributed).
    pub broken: Vec<Value>,
    /// Why the whole sync failed; the previous plugins stay as they were.
    pub error: Option<String>,
}

/// A flea submission's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntityType {
    /// One skill.
    Skill,
    /// One agent.
    Agent,
    /// A plugin directory.
    Plugin,
}

impl EntityType {
    /// Its name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Skill => "skill",
            Self::Agent => "agent",
            Self::Plugin => "plugin",
        }
    }

    /// Reads a name, or says which are accepted.
    pub fn parse(s: &str) -> Result<Self> {
        [Self::Skill, Self::Agent, Self::Plugin]
            .into_iter()
            .find(|t| t.as_str() == s)
            .ok_or_else(|| {
                Error::invalid(format!("type must be skill, agent or plugin, not '{s}'"))
            })
    }
}

/// What a submitter sends.
#[derive(Debug, Clone)]
pub struct Submission {
    /// Name (what agents invoke).
    pub name: String,
    /// Kind.
    pub entity_type: EntityType,
    /// Description.
    pub description: Option<String>,
    /// Category.
    pub category: Option<String>,
    /// The skill's or agent's text (skills and agents).
    pub content: Option<String>,
}

/// An administrator's decision on a flea entity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FleaDecision {
    /// Listed and attributed.
    Approve,
    /// Withdrawn; its attribution is removed.
    Archive,
}

impl FleaDecision {
    /// Its name (and the audit action's suffix).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Approve => "approve",
            Self::Archive => "archive",
        }
    }

    fn status(self) -> &'static str {
        match self {
            Self::Approve => "approved",
            Self::Archive => "archived",
        }
    }
}

/// A plain name. `:` is excluded because agents invoke `plugin:skill`, so a name holding one
/// could be credited to the wrong plugin; `/` and a leading `.` because names become paths.
fn checked_name(field: &str, name: &str) -> Result<String> {
    let n = name.trim();
    let ok = !n.is_empty()
        && n.chars().count() <= MAX_NAME_CHARS
        && n.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !n.starts_with('.');
    if ok {
        Ok(n.to_owned())
    } else {
        Err(Error::invalid(format!(
            "{field}: 1 to {MAX_NAME_CHARS} of letters, digits, '-', '_', '.' (not starting with '.'), not '{name}'"
        )))
    }
}

fn not_found(what: &str) -> Error {
    Error::not_found(format!("{what} not found"))
}

/// The marketplace over the store and the data directory.
#[derive(Debug, Clone)]
pub struct Marketplace {
    store: Store,
    audit: Arc<AuditWriter>,
    /// `<data>/marketplaces`: one checkout per git marketplace.
    checkouts: PathBuf,
    /// `<data>/flea`: one directory per submitted plugin.
    flea: PathBuf,
}

impl Marketplace {
    /// The marketplace, keeping its files under `data_dir`.
    pub fn new(store: Store, audit: Arc<AuditWriter>, data_dir: &std::path::Path) -> Self {
        Self {
            store,
            audit,
            checkouts: data_dir.join("marketplaces"),
            flea: data_dir.join("flea"),
        }
    }

    /// Registers a curated marketplace (administrators); the first sync is separate.
    pub async fn register(
        &self,
        caller: &Caller,
        id: &str,
        name: Option<String>,
        url: &str,
        branch: Option<String>,
    ) -> Result<MarketplaceRow> {
        let started = Instant::now();
        let id = checked_name("id", id)?;
        fetch::check_url(url).map_err(Error::invalid)?;
        if let Some(b) = &branch {
            checked_name("branch", b)?;
        }
        let row = MarketplaceRow {
            id: id.clone(),
            name: name
                .filter(|n| !n.trim().is_empty())
                .unwrap_or_else(|| id.clone()),
            url: url.to_owned(),
            branch,
            created_by: Some(caller.user.id.clone()),
            created_at: None,
            last_synced_at: None,
            last_commit: None,
            last_error: None,
            plugin_count: 0,
        };
        if !self.store.create_marketplace(&row).await? {
            return Err(Error::conflict(format!(
                "a marketplace '{id}' already exists"
            )));
        }
        let event = Event::new("marketplace.register")
            .resource(id.clone())
            .param("url", url.to_owned());
        self.audit.write(&caller.actor, event.timed(started)).await;
        self.store
            .marketplace(&id)
            .await?
            .ok_or_else(|| not_found("marketplace"))
    }

    /// Every registered marketplace.
    pub async fn marketplaces(&self) -> Result<Vec<MarketplaceRow>> {
        Ok(self.store.marketplaces().await?)
    }

    /// A marketplace's plugins.
    pub async fn plugins_of(&self, id: &str) -> Result<Vec<PluginRow>> {
        self.store
            .marketplace(id)
            .await?
            .ok_or_else(|| not_found("marketplace"))?;
        Ok(self.store.marketplace_plugins(id).await?)
    }

    /// Syncs one marketplace, or every one; each is audited as `marketplace.sync`. One that
    /// fails keeps its previous plugins and records the error.
    pub async fn sync(&self, actor: &Actor, id: Option<&str>) -> Result<Vec<SyncReport>> {
        let targets = match id {
            Some(id) => vec![self
                .store
                .marketplace(id)
                .await?
                .ok_or_else(|| not_found("marketplace"))?],
            None => self.store.marketplaces().await?,
        };
        let mut reports = Vec::with_capacity(targets.len());
        for m in targets {
            let started = Instant::now();
            let report = self.sync_one(&m).await?;
            let mut event = Event::new("marketplace.sync")
                .resource(m.id.clone())
                .param("plugins", report.plugins)
                .param("broken", report.broken.len());
            if let Some(e) = &report.error {
                event = event.param("error", e.clone());
            }
            self.audit.write(actor, event.timed(started)).await;
            reports.push(report);
        }
        Ok(reports)
    }

    async fn sync_one(&self, m: &MarketplaceRow) -> Result<SyncReport> {
        let mut report = SyncReport {
            id: m.id.clone(),
            commit: None,
            plugins: 0,
            broken: Vec::new(),
            error: None,
        };
        let outcome = match fetch::local_dir(&m.url) {
            Some(dir) => {
                let id = m.id.clone();
                tokio::task::spawn_blocking(move || layout::scan_marketplace(&id, &dir))
                    .await
                    .map_err(|e| Error::internal(e.to_string()))?
                    .map(|plugins| (None, plugins, None))
                    .map_err(|e| e.0)
            }
            None => self.fetch_and_scan(m).await,
        };
        match outcome {
            Err(e) => {
                self.store.record_marketplace_failure(&m.id, &e).await?;
                report.error = Some(e);
            }
            Ok((commit, plugins, fresh)) => {
                self.store
                    .replace_marketplace_plugins(&m.id, commit.as_deref(), &plugins)
                    .await?;
                if let Some(fresh) = fresh {
                    self.swap_checkout(&m.id, fresh).await;
                }
                report.commit = commit;
                report.plugins = plugins.len();
                report.broken = plugins
                    .iter()
                    .filter_map(|p| {
                        p.error
                            .as_ref()
                            .map(|e| json!({"name": p.name, "error": e}))
                    })
                    .collect();
            }
        }
        Ok(report)
    }

    /// Clones into a fresh directory and reads it; the live checkout is untouched until the
    /// store holds the result.
    async fn fetch_and_scan(
        &self,
        m: &MarketplaceRow,
    ) -> std::result::Result<(Option<String>, Vec<PluginRow>, Option<PathBuf>), String> {
        tokio::fs::create_dir_all(&self.checkouts)
            .await
            .map_err(|e| format!("{}: {e}", self.checkouts.display()))?;
        let fresh = self.checkouts.join(format!(".{}.{}", m.id, new_id()));
        let result = async {
            let commit = fetch::clone(&m.url, m.branch.as_deref(), &fresh).await?;
            let (id, dir) = (m.id.clone(), fresh.clone());
            let plugins = tokio::task::spawn_blocking(move || layout::scan_marketplace(&id, &dir))
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| e.0)?;
            Ok::<_, String>((Some(commit), plugins, Some(fresh.clone())))
        }
        .await;
        if result.is_err() {
            let _ = tokio::fs::remove_dir_all(&fresh).await;
        }
        result
    }

    /// Puts a fresh checkout in place of the live one.
    async fn swap_checkout(&self, id: &str, fresh: PathBuf) {
        let live = self.checkouts.join(id);
        let old = self.checkouts.join(format!(".{id}.old.{}", new_id()));
        let _ = tokio::fs::rename(&live, &old).await;
        if let Err(e) = tokio::fs::rename(&fresh, &live).await {
            tracing::warn!(marketplace = id, error = %e, "could not move the fresh checkout in place");
        }
        let _ = tokio::fs::remove_dir_all(&old).await;
    }

    /// A page of items, with usage figures recomputed first if they are from another day.
    pub async fn items(&self, q: &ItemsQuery) -> Result<ItemsPage> {
        let today = chrono::Utc::now().date_naive();
        let as_of = self.store.marketplace_stats_as_of().await?;
        if as_of.as_deref() != Some(today.format("%Y-%m-%d").to_string().as_str()) {
            self.store.refresh_marketplace_stats(today).await?;
        }
        Ok(self.store.marketplace_items(q).await?)
    }

    /// An item's usage: `{invocations_30d, unique_users_30d, trend_pct, daily_series}` with
    /// 30 zero-filled days, oldest first.
    async fn usage(&self, source: &str, ref_id: &str) -> Result<Value> {
        let today = chrono::Utc::now().date_naive();
        let ((inv, users, trend), series) = self
            .store
            .marketplace_item_usage(source, ref_id, today)
            .await?;
        Ok(json!({
            "invocations_30d": inv,
            "unique_users_30d": users,
            "trend_pct": trend,
            "daily_series": series
                .into_iter()
                .map(|(day, n)| json!({"day": day, "invocations": n}))
                .collect::<Vec<_>>(),
        }))
    }

    /// A curated plugin with its usage.
    pub async fn plugin(&self, ref_id: &str) -> Result<Value> {
        let p = self
            .store
            .marketplace_plugin(ref_id)
            .await?
            .ok_or_else(|| not_found("plugin"))?;
        Ok(json!({"plugin": p, "telemetry": self.usage("curated", ref_id).await?}))
    }

    /// A flea entity with its usage; one not approved only for its submitter and
    /// administrators (404 for anyone else).
    pub async fn flea_entity(&self, caller: &Caller, id: &str) -> Result<Value> {
        let e = self
            .store
            .flea_entity(id)
            .await?
            .filter(|e| {
                e.status == "approved"
                    || caller.is_admin
                    || e.submitted_by.as_deref() == Some(caller.user.id.as_str())
            })
            .ok_or_else(|| not_found("entity"))?;
        Ok(json!({"entity": e, "telemetry": self.usage("flea", id).await?}))
    }

    /// Submits a skill or an agent (its text inline), pending review.
    pub async fn submit(&self, caller: &Caller, s: Submission) -> Result<FleaEntity> {
        if s.entity_type == EntityType::Plugin {
            return Err(Error::invalid(
                "a plugin is submitted as an archive of its directory (the upload endpoint)",
            ));
        }
        let content = s.content.clone().unwrap_or_default();
        if content.trim().is_empty() || content.len() > MAX_CONTENT_BYTES {
            return Err(Error::invalid(format!(
                "content: the {}'s text, 1 to {MAX_CONTENT_BYTES} bytes",
                s.entity_type.as_str()
            )));
        }
        let name = checked_name("name", &s.name)?;
        let (skills, agents) = match s.entity_type {
            EntityType::Skill => (vec![name.clone()], vec![]),
            _ => (vec![], vec![name.clone()]),
        };
        self.store_submission(caller, new_id(), s, name, skills, agents, vec![])
            .await
    }

    /// Submits a plugin directory as a tar (or tar.gz) archive, pending review: refused
    /// before anything is written when it is hostile (paths out, links, a bomb).
    pub async fn submit_plugin(
        &self,
        caller: &Caller,
        mut s: Submission,
        archive_bytes: Vec<u8>,
    ) -> Result<FleaEntity> {
        s.entity_type = EntityType::Plugin;
        s.content = None;
        let name = checked_name("name", &s.name)?;
        archive::inspect(&archive_bytes).map_err(|e| Error::invalid(format!("archive: {e}")))?;
        let id = new_id();
        let dir = self.flea.join(&id).join("plugin");
        let unpack_dir = dir.clone();
        let scanned = tokio::task::spawn_blocking(move || {
            archive::unpack(&archive_bytes, &unpack_dir)?;
            layout::scan_plugin(&unpack_dir)
        })
        .await
        .map_err(|e| Error::internal(e.to_string()))?;
        let found = match scanned {
            Ok(found) if found.problems.is_empty() => found,
            refused => {
                let _ = tokio::fs::remove_dir_all(self.flea.join(&id)).await;
                return Err(Error::invalid(match refused {
                    Ok(found) => format!("plugin: {}", found.problems.join("; ")),
                    Err(e) => format!("archive: {e}"),
                }));
            }
        };
        // A plugin that names nothing is credited under its own name, as a skill.
        let skills =
            if found.skills.is_empty() && found.agents.is_empty() && found.commands.is_empty() {
                vec![name.clone()]
            } else {
                found.skills
            };
        self.store_submission(caller, id, s, name, skills, found.agents, found.commands)
            .await
    }

    #[allow(clippy::too_many_arguments)]
    async fn store_submission(
        &self,
        caller: &Caller,
        id: String,
        s: Submission,
        name: String,
        skills: Vec<String>,
        agents: Vec<String>,
        commands: Vec<String>,
    ) -> Result<FleaEntity> {
        let started = Instant::now();
        let e = FleaEntity {
            id: id.clone(),
            name,
            entity_type: s.entity_type.as_str().to_owned(),
            description: s.description,
            category: s.category.filter(|c| !c.trim().is_empty()),
            content: s.content,
            skills,
            agents,
            commands,
            status: "pending".into(),
            submitted_by: Some(caller.user.id.clone()),
            submitter_email: Some(caller.user.email.clone()),
            ..FleaEntity::default()
        };
        self.store.create_flea_entity(&e).await?;
        let event = Event::new("marketplace.flea_submit")
            .resource(id.clone())
            .param("name", e.name.clone())
            .param("type", e.entity_type.clone());
        self.audit.write(&caller.actor, event.timed(started)).await;
        self.store
            .flea_entity(&id)
            .await?
            .ok_or_else(|| not_found("entity"))
    }

    /// Flea entities in a status (administrators' queue).
    pub async fn flea_queue(&self, status: Option<&str>) -> Result<Vec<FleaEntity>> {
        if let Some(s) = status {
            if !["pending", "approved", "archived"].contains(&s) {
                return Err(Error::invalid(format!(
                    "status must be pending, approved or archived, not '{s}'"
                )));
            }
        }
        Ok(self.store.flea_entities(status).await?)
    }

    /// Approves or archives a flea entity (administrators), audited with its status before.
    pub async fn decide_flea(
        &self,
        caller: &Caller,
        id: &str,
        decision: FleaDecision,
    ) -> Result<FleaEntity> {
        let started = Instant::now();
        let e = self
            .store
            .flea_entity(id)
            .await?
            .ok_or_else(|| not_found("entity"))?;
        if e.status == decision.status() {
            return Ok(e);
        }
        self.store
            .set_flea_status(&e, decision.status(), &caller.user.id)
            .await?;
        let event = Event::new(format!("marketplace.flea_{}", decision.as_str()))
            .resource(id.to_owned())
            .before(json!({"status": e.status}));
        self.audit.write(&caller.actor, event.timed(started)).await;
        self.store
            .flea_entity(id)
            .await?
            .ok_or_else(|| not_found("entity"))
    }
}
