//! Review at scale: one decision or one set of field changes over many items, and the tree
//! readers browse. Each item goes through the same single-item path (graph, revision,
//! audit row), so a batch is never a way around them; what fails for one item is reported
//! with its id while the rest are applied.

use serde::Serialize;
use svc_auth::Caller;
use svc_core::Error;
use svc_store::memory::tree::{TreePage, TreeQuery};
use svc_store::memory::ItemChange;

use crate::{Decision, Memory, Result};

/// Most items one batch or bulk update names.
pub const MAX_BATCH: usize = 500;

/// The fields a bulk update changes on every item it names (`fields`, as in a single edit;
/// its status and personal flag are never set here), then tags added and removed on what
/// each item holds.
#[derive(Debug, Clone, Default)]
pub struct BulkChange {
    /// Field changes, tags included (replacing).
    pub fields: ItemChange,
    /// Tags to add.
    pub tags_add: Vec<String>,
    /// Tags to remove.
    pub tags_remove: Vec<String>,
}

/// One item a batch could not change, and why.
#[derive(Debug, Clone, Serialize)]
pub struct ItemError {
    /// The item.
    pub id: String,
    /// The HTTP status the single-item call would have answered.
    pub status: u16,
    /// Why.
    pub error: String,
}

/// One item a batch moved.
#[derive(Debug, Clone, Serialize)]
pub struct Decided {
    /// The item.
    pub id: String,
    /// Its state now.
    pub status: String,
}

/// What a batch decision did.
#[derive(Debug, Clone, Serialize, Default)]
pub struct BatchOutcome {
    /// Items now in the decided state (already there counts: deciding again is a no-op).
    pub success: Vec<Decided>,
    /// Ids that name no item.
    pub not_found: Vec<String>,
    /// Items the decision could not apply to (an illegal move, a stale revision).
    pub errors: Vec<ItemError>,
}

/// What a bulk update did.
#[derive(Debug, Clone, Serialize, Default)]
pub struct BulkOutcome {
    /// Items changed.
    pub updated: Vec<String>,
    /// Ids that name no item.
    pub not_found: Vec<String>,
    /// Items the change could not apply to.
    pub errors: Vec<ItemError>,
}

fn checked_ids(ids: &[String]) -> Result<Vec<String>> {
    if ids.is_empty() {
        return Err(Error::invalid("item_ids: name at least one item"));
    }
    if ids.len() > MAX_BATCH {
        return Err(Error::invalid(format!(
            "item_ids: at most {MAX_BATCH} per request"
        )));
    }
    let mut out: Vec<String> = Vec::with_capacity(ids.len());
    for id in ids {
        if !out.contains(id) {
            out.push(id.clone());
        }
    }
    Ok(out)
}

impl Memory {
    /// Takes one decision on many items (administrators).
    pub async fn batch(
        &self,
        caller: &Caller,
        ids: &[String],
        decision: Decision,
        reason: Option<String>,
        audience: Option<String>,
    ) -> Result<BatchOutcome> {
        let mut out = BatchOutcome::default();
        for id in checked_ids(ids)? {
            match self
                .decide(
                    caller,
                    &id,
                    decision,
                    reason.clone(),
                    audience.clone(),
                    None,
                )
                .await
            {
                Ok(item) => out.success.push(Decided {
                    id,
                    status: item.status,
                }),
                Err(e) if e.status() == 404 => out.not_found.push(id),
                // An audience naming no group fails every item alike: say it once.
                Err(e) if e.status() == 422 => return Err(e),
                Err(e) => out.errors.push(ItemError {
                    id,
                    status: e.status(),
                    error: e.to_string(),
                }),
            }
        }
        Ok(out)
    }

    /// Applies one set of field changes to many items (administrators).
    pub async fn bulk_update(
        &self,
        caller: &Caller,
        ids: &[String],
        change: BulkChange,
    ) -> Result<BulkOutcome> {
        let ids = checked_ids(ids)?;
        let touches_tags = change.fields.tags.is_some()
            || !change.tags_add.is_empty()
            || !change.tags_remove.is_empty();
        let mut out = BulkOutcome::default();
        for id in ids {
            let Some(item) = self.store.knowledge_item(&id).await? else {
                out.not_found.push(id);
                continue;
            };
            let mut item_change = ItemChange {
                status: None,
                is_personal: None,
                ..change.fields.clone()
            };
            if touches_tags {
                let mut tags = item_change.tags.take().unwrap_or_else(|| item.tags.clone());
                for t in &change.tags_add {
                    if !tags.contains(t) {
                        tags.push(t.clone());
                    }
                }
                tags.retain(|t| !change.tags_remove.contains(t));
                item_change.tags = Some(tags);
            }
            match self
                .edit_as(caller, item, item_change, None, "bulk_update")
                .await
            {
                Ok(_) => out.updated.push(id),
                // Invalid values fail every item alike: say it once, before any is changed.
                Err(e) if e.status() == 422 && out.updated.is_empty() => return Err(e),
                Err(e) => out.errors.push(ItemError {
                    id,
                    status: e.status(),
                    error: e.to_string(),
                }),
            }
        }
        Ok(out)
    }

    /// The items `caller` sees, grouped along an axis; non-administrators never see
    /// personal items here.
    pub async fn tree(&self, caller: &Caller, mut q: TreeQuery) -> Result<TreePage> {
        let v = self.visibility(caller).await?;
        if !caller.is_admin {
            q.exclude_personal = true;
        }
        Ok(self.store.knowledge_tree(&v, &q).await?)
    }
}
