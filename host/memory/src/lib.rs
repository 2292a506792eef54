//! svc-memory: corporate memory, the governed knowledge that agents read.
//!
//! Anyone with a token contributes items (always `pending`); administrators review them
//! along an enforced graph of states ([`states`]); readers see only what their groups and
//! grants allow, never another's personal items; agents fetch a bundle of what is mandatory
//! and the best of what is approved, within a token budget ([`bundle`]). Every review
//! decision and edit is audited with the item as it was before.
//!
//! Principal type: [`Memory`]. Stands on `svc-auth` (the caller), `svc-store` and `svc-core`;
//! must never import poem or any crate above it.

pub mod bundle;
pub mod relations;
pub mod review;
pub mod states;

use std::sync::Arc;
use std::time::Instant;

use serde_json::{json, Value};
use svc_auth::Caller;
use svc_core::Error;
use svc_store::audit::{AuditWriter, Event};
use svc_store::memory::{ItemChange, ItemPage, ItemQuery, KnowledgeItem, NewItem, Visibility};
use svc_store::Store;

pub use bundle::Bundle;
pub use states::{Decision, Move, Status};
pub use svc_store::memory::MEMORY_DOMAINS;

pub(crate) type Result<T> = std::result::Result<T, Error>;

/// Longest title, in characters.
pub const MAX_TITLE_CHARS: usize = 200;
/// Largest content, in bytes.
pub const MAX_CONTENT_BYTES: usize = 64 * 1024;
/// Most tags per item.
pub const MAX_TAGS: usize = 30;
/// Longest tag or category, in characters.
pub const MAX_LABEL_CHARS: usize = 64;

/// What a contributor sends.
#[derive(Debug, Clone, Default)]
pub struct Contribution {
    /// Title (1..=200 characters).
    pub title: String,
    /// The knowledge.
    pub content: Option<String>,
    /// Category.
    pub category: Option<String>,
    /// Tags.
    pub tags: Vec<String>,
    /// One of [`MEMORY_DOMAINS`].
    pub domain: Option<String>,
    /// Named entities (JSON).
    pub entities: Option<Value>,
    /// Where it came from (default `api`).
    pub source_type: Option<String>,
    /// A reference into that source.
    pub source_ref: Option<String>,
}

/// Corporate memory over the store, auditing through the one writer.
#[derive(Debug, Clone)]
pub struct Memory {
    store: Store,
    audit: Arc<AuditWriter>,
    bundles: Arc<bundle::BundleCache>,
}

fn checked_title(title: &str) -> Result<String> {
    let t = title.trim();
    if t.is_empty() || t.chars().count() > MAX_TITLE_CHARS {
        return Err(Error::invalid(format!(
            "title: 1 to {MAX_TITLE_CHARS} characters"
        )));
    }
    Ok(t.to_owned())
}

fn checked_content(content: Option<String>) -> Result<Option<String>> {
    match content {
        Some(c) if c.len() > MAX_CONTENT_BYTES => Err(Error::invalid(format!(
            "content: at most {MAX_CONTENT_BYTES} bytes"
        ))),
        c => Ok(c),
    }
}

fn checked_label(field: &str, v: Option<String>) -> Result<Option<String>> {
    match v.map(|v| v.trim().to_owned()).filter(|v| !v.is_empty()) {
        Some(v) if v.chars().count() > MAX_LABEL_CHARS => Err(Error::invalid(format!(
            "{field}: at most {MAX_LABEL_CHARS} characters"
        ))),
        v => Ok(v),
    }
}

fn checked_domain(domain: Option<String>) -> Result<Option<String>> {
    match domain.filter(|d| !d.is_empty()) {
        Some(d) if !MEMORY_DOMAINS.contains(&d.as_str()) => Err(Error::invalid(format!(
            "domain must be one of: {}",
            MEMORY_DOMAINS.join(", ")
        ))),
        d => Ok(d),
    }
}

fn checked_tags(tags: Vec<String>) -> Result<Vec<String>> {
    if tags.len() > MAX_TAGS {
        return Err(Error::invalid(format!("tags: at most {MAX_TAGS}")));
    }
    let mut out: Vec<String> = Vec::with_capacity(tags.len());
    for t in tags {
        if let Some(t) = checked_label("tags", Some(t))? {
            if !out.contains(&t) {
                out.push(t);
            }
        }
    }
    Ok(out)
}

/// An item as the audit row's `params_before` keeps it.
fn snapshot(item: &KnowledgeItem) -> Value {
    json!({
        "status": item.status,
        "title": item.title,
        "category": item.category,
        "domain": item.domain,
        "tags": item.tags,
        "audience": item.audience,
        "is_personal": item.is_personal,
        "revision": item.revision,
    })
}

pub(crate) fn not_found() -> Error {
    Error::not_found("knowledge item not found")
}

fn stale(current: i64) -> Error {
    Error::conflict(format!(
        "the item changed meanwhile: it is at revision {current}; read it again and retry"
    ))
}

impl Memory {
    /// Corporate memory over `store`, auditing through `audit`.
    pub fn new(store: Store, audit: Arc<AuditWriter>) -> Self {
        Self {
            store,
            audit,
            bundles: Default::default(),
        }
    }

    /// What `caller` may see: everything for administrators; otherwise shared items for
    /// everyone, their groups, or the memory domains granted to their groups.
    async fn visibility(&self, caller: &Caller) -> Result<Visibility> {
        if caller.is_admin {
            return Ok(Visibility::All);
        }
        let groups = self
            .store
            .groups_of_user(&caller.user.id)
            .await?
            .into_iter()
            .map(|g| g.name)
            .collect();
        let domains = self.store.memory_domains_of(&caller.user.id).await?;
        Ok(Visibility::Reader { groups, domains })
    }

    /// Stores a contribution as a pending item of `caller`'s and audits it.
    pub async fn contribute(&self, caller: &Caller, c: Contribution) -> Result<KnowledgeItem> {
        let started = Instant::now();
        let new = NewItem {
            title: checked_title(&c.title)?,
            content: checked_content(c.content)?,
            category: checked_label("category", c.category)?,
            tags: checked_tags(c.tags)?,
            domain: checked_domain(c.domain)?,
            entities: c.entities,
            source_type: checked_label("source_type", c.source_type)?
                .unwrap_or_else(|| "api".into()),
            source_ref: checked_label("source_ref", c.source_ref)?,
            source_user: caller.user.email.clone(),
            created_by: caller.user.id.clone(),
        };
        let item = self.store.create_knowledge_item(&new).await?;
        self.find_duplicates(&item).await?;
        self.audit
            .write(
                &caller.actor,
                Event::new("corporate_memory.create")
                    .resource(item.id.clone())
                    .param("title", item.title.clone())
                    .param("domain", json!(item.domain))
                    .timed(started),
            )
            .await;
        Ok(item)
    }

    /// A page of the items `caller` sees; other readers' personal items never appear, and
    /// a non-administrator's own personal items only in [`Memory::my_contributions`].
    pub async fn list(&self, caller: &Caller, mut q: ItemQuery) -> Result<ItemPage> {
        let v = self.visibility(caller).await?;
        if !caller.is_admin {
            q.exclude_personal = true;
        }
        Ok(self.store.knowledge_items(&v, &q).await?)
    }

    /// `caller`'s own contributions, personal ones included.
    pub async fn my_contributions(&self, caller: &Caller, mut q: ItemQuery) -> Result<ItemPage> {
        q.created_by = Some(caller.user.id.clone());
        q.exclude_personal = false;
        Ok(self.store.knowledge_items(&Visibility::All, &q).await?)
    }

    /// One item `caller` may see (their own always), else 404 — an item hidden from them is
    /// indistinguishable from one that does not exist.
    pub async fn item(&self, caller: &Caller, id: &str) -> Result<KnowledgeItem> {
        let item = self.store.knowledge_item(id).await?.ok_or_else(not_found)?;
        if caller.is_admin || item.created_by.as_deref() == Some(caller.user.id.as_str()) {
            return Ok(item);
        }
        let v = self.visibility(caller).await?;
        let seen = match &v {
            Visibility::All => true,
            Visibility::Reader { groups, domains } => {
                !item.is_personal
                    && (match item.audience.as_deref() {
                        None | Some("all") => true,
                        Some(a) => a
                            .strip_prefix("group:")
                            .is_some_and(|g| groups.iter().any(|n| n == g)),
                    } || item.domain.as_ref().is_some_and(|d| domains.contains(d)))
            }
        };
        if seen {
            Ok(item)
        } else {
            Err(not_found())
        }
    }

    /// Records `caller`'s vote (1 up, -1 down, 0 withdraws) on an item they can see.
    pub async fn vote(&self, caller: &Caller, id: &str, vote: i64) -> Result<(i64, i64)> {
        if !matches!(vote, -1..=1) {
            return Err(Error::invalid("vote must be 1, -1 or 0 (withdraw)"));
        }
        self.item(caller, id).await?;
        Ok(self
            .store
            .vote_knowledge_item(id, &caller.user.id, vote)
            .await?)
    }

    /// `caller`'s votes, item id → vote.
    pub async fn my_votes(&self, caller: &Caller) -> Result<Vec<(String, i64)>> {
        Ok(self.store.my_knowledge_votes(&caller.user.id).await?)
    }

    /// Marks one of `caller`'s own items personal or shared (403 for anyone else's).
    pub async fn set_personal(
        &self,
        caller: &Caller,
        id: &str,
        personal: bool,
    ) -> Result<KnowledgeItem> {
        let item = self.item(caller, id).await?;
        if item.created_by.as_deref() != Some(caller.user.id.as_str()) {
            return Err(Error::forbidden(
                "only the contributor may make an item personal or shared",
            ));
        }
        let change = ItemChange {
            is_personal: Some(personal),
            ..ItemChange::default()
        };
        self.apply(
            caller,
            item,
            None,
            change,
            "personal",
            json!({"is_personal": personal}),
        )
        .await
    }

    /// Takes a review decision (administrators). Deciding what the item already is changes
    /// nothing and writes nothing; a move the graph does not hold is a 409 naming the item's
    /// state and its legal moves; `expected_revision` older than the item's is a 409.
    pub async fn decide(
        &self,
        caller: &Caller,
        id: &str,
        decision: Decision,
        reason: Option<String>,
        audience: Option<String>,
        expected_revision: Option<i64>,
    ) -> Result<KnowledgeItem> {
        let item = self.store.knowledge_item(id).await?.ok_or_else(not_found)?;
        if expected_revision.is_some_and(|r| r != item.revision) {
            return Err(stale(item.revision));
        }
        let from = Status::parse(&item.status).unwrap_or(Status::Pending);
        let audience = match audience.filter(|a| !a.is_empty()) {
            Some(a) if decision != Decision::Mandate => {
                return Err(Error::invalid(format!(
                    "audience is set by mandate, not by {} (got '{a}')",
                    decision.name()
                )))
            }
            Some(a) => Some(self.checked_audience(&a).await?),
            None => None,
        };
        let to = match states::plan(from, decision)? {
            Move::Stay if audience.is_none() || audience == item.audience => return Ok(item),
            Move::Stay => from,
            Move::To(to) => to,
        };
        let change = ItemChange {
            status: Some(to.as_str().to_owned()),
            audience: audience.clone().map(Some),
            ..ItemChange::default()
        };
        let params = json!({
            "from": from.as_str(),
            "to": to.as_str(),
            "reason": reason,
            "audience": audience,
        });
        self.apply(
            caller,
            item,
            expected_revision,
            change,
            decision.name(),
            params,
        )
        .await
    }

    /// Edits an item's fields (administrators); `expected_revision` guards against a stale
    /// edit.
    pub async fn edit(
        &self,
        caller: &Caller,
        id: &str,
        change: ItemChange,
        expected_revision: Option<i64>,
    ) -> Result<KnowledgeItem> {
        let item = self.store.knowledge_item(id).await?.ok_or_else(not_found)?;
        self.edit_as(caller, item, change, expected_revision, "edit")
            .await
    }

    /// Edits `item`, audited as `corporate_memory.<action>`.
    pub(crate) async fn edit_as(
        &self,
        caller: &Caller,
        item: KnowledgeItem,
        mut change: ItemChange,
        expected_revision: Option<i64>,
        action: &str,
    ) -> Result<KnowledgeItem> {
        if expected_revision.is_some_and(|r| r != item.revision) {
            return Err(stale(item.revision));
        }
        if let Some(t) = &change.title {
            change.title = Some(checked_title(t)?);
        }
        if let Some(c) = change.content.take() {
            change.content = Some(checked_content(c)?);
        }
        if let Some(c) = change.category.take() {
            change.category = Some(checked_label("category", c)?);
        }
        if let Some(d) = change.domain.take() {
            change.domain = Some(checked_domain(d)?);
        }
        if let Some(t) = change.tags.take() {
            change.tags = Some(checked_tags(t)?);
        }
        if let Some(a) = change.audience.take() {
            change.audience = Some(match a.filter(|a| !a.is_empty()) {
                Some(a) => Some(self.checked_audience(&a).await?),
                None => None,
            });
        }
        if change.status.is_some() {
            return Err(Error::invalid(
                "status changes by a review decision (approve, mandate, reject, revoke), not by an edit",
            ));
        }
        let fields: Vec<&str> = [
            ("title", change.title.is_some()),
            ("content", change.content.is_some()),
            ("category", change.category.is_some()),
            ("domain", change.domain.is_some()),
            ("tags", change.tags.is_some()),
            ("audience", change.audience.is_some()),
        ]
        .into_iter()
        .filter(|(_, set)| *set)
        .map(|(f, _)| f)
        .collect();
        if fields.is_empty() {
            return Err(Error::invalid("nothing to change"));
        }
        self.apply(
            caller,
            item,
            expected_revision,
            change,
            action,
            json!({ "updated": fields }),
        )
        .await
    }

    /// `all`, or `group:<name>` of an existing group.
    async fn checked_audience(&self, audience: &str) -> Result<String> {
        if audience == "all" {
            return Ok(audience.to_owned());
        }
        let group = audience.strip_prefix("group:").ok_or_else(|| {
            Error::invalid(format!(
                "audience must be 'all' or 'group:<name>', not '{audience}'"
            ))
        })?;
        if self.store.group_by_name(group).await?.is_none() {
            return Err(Error::invalid(format!(
                "audience: no group named '{group}'"
            )));
        }
        Ok(audience.to_owned())
    }

    /// Stores `change` against the item's revision and audits it as
    /// `corporate_memory.<action>` with the item as it was.
    async fn apply(
        &self,
        caller: &Caller,
        item: KnowledgeItem,
        expected_revision: Option<i64>,
        change: ItemChange,
        action: &str,
        params: Value,
    ) -> Result<KnowledgeItem> {
        let started = Instant::now();
        let revision = expected_revision.unwrap_or(item.revision);
        if !self
            .store
            .update_knowledge_item(&item.id, revision, &change)
            .await?
        {
            let now = self
                .store
                .knowledge_item(&item.id)
                .await?
                .ok_or_else(not_found)?;
            return Err(stale(now.revision));
        }
        let mut event = Event::new(format!("corporate_memory.{action}"))
            .resource(item.id.clone())
            .before(snapshot(&item));
        if let Value::Object(fields) = params {
            for (k, v) in fields {
                if !v.is_null() {
                    event = event.param(&k, v);
                }
            }
        }
        self.audit.write(&caller.actor, event.timed(started)).await;
        self.store
            .knowledge_item(&item.id)
            .await?
            .ok_or_else(not_found)
    }

    /// How the items `caller` sees divide: `{total, by_status, categories, by_domain,
    /// by_source_type, by_audience, by_tag}`, each a list of `{value, count}`, most first
    /// (ties by value; a missing value counts as `(none)`).
    pub async fn stats(&self, caller: &Caller) -> Result<Value> {
        let v = self.visibility(caller).await?;
        let items = self
            .store
            .knowledge_dimensions(&v, !caller.is_admin)
            .await?;
        let count = |values: &mut dyn Iterator<Item = String>| -> Value {
            let mut m: std::collections::BTreeMap<String, u64> = Default::default();
            for v in values {
                *m.entry(v).or_default() += 1;
            }
            let mut list: Vec<(String, u64)> = m.into_iter().collect();
            list.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            list.into_iter()
                .map(|(value, count)| json!({"value": value, "count": count}))
                .collect()
        };
        let none = |v: &Option<String>| v.clone().unwrap_or_else(|| "(none)".into());
        Ok(json!({
            "total": items.len(),
            "by_status": count(&mut items.iter().map(|i| i.status.clone())),
            "categories": count(&mut items.iter().map(|i| none(&i.category))),
            "by_domain": count(&mut items.iter().map(|i| none(&i.domain))),
            "by_source_type": count(&mut items.iter().map(|i| i.source_type.clone())),
            "by_audience": count(&mut items.iter().map(|i| none(&i.audience))),
            "by_tag": count(&mut items.iter().flat_map(|i| i.tags.clone())),
        }))
    }

    /// The agents' bundle for `caller` (see [`bundle`]).
    pub async fn bundle(&self, caller: &Caller, budget_tokens: usize) -> Result<Bundle> {
        let v = self.visibility(caller).await?;
        let stamp = self.store.knowledge_last_change().await?;
        let key = bundle::BundleCache::key(&v, budget_tokens);
        if let Some(b) = self.bundles.get(&key, &stamp) {
            return Ok(b);
        }
        let b = self.assemble_bundle(&v, budget_tokens).await?;
        self.bundles.put(key, stamp, b.clone());
        Ok(b)
    }

    async fn assemble_bundle(&self, v: &Visibility, budget_tokens: usize) -> Result<Bundle> {
        /// Approved candidates read at a time: a page holds more than a default budget takes.
        const PAGE: u64 = 256;
        let mandatory = self.store.knowledge_bundle_mandatory(v).await?;
        let mut picker = bundle::Picker::new(budget_tokens, &mandatory);
        let now = chrono::Utc::now().timestamp();
        let mut smallest = None;
        let mut offset = 0;
        loop {
            let page = self
                .store
                .knowledge_bundle_ranked(v, now, offset, PAGE)
                .await?;
            for c in &page {
                picker.offer(c);
            }
            if (page.len() as u64) < PAGE {
                break;
            }
            // Another page only while the smallest candidate could still fit.
            let min = match smallest {
                Some(min) => min,
                None => *smallest.insert(self.store.knowledge_bundle_smallest(v).await?),
            };
            if min.is_none_or(|chars| bundle::tokens(chars) > picker.left()) {
                break;
            }
            offset += PAGE;
        }
        let (chosen, used) = picker.finish();
        let items = self.store.knowledge_items_by_id(&chosen).await?;
        Ok(bundle::assemble(
            mandatory,
            chosen,
            items,
            used,
            budget_tokens,
        ))
    }
}
