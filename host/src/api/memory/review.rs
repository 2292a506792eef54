//! The administrators' side of corporate memory over HTTP: the review queue, decisions one
//! at a time or in a batch, edits one at a time or in bulk, and the contradictions and
//! duplicate candidates to settle. Every change goes through [`svc_memory::Memory`], which
//! enforces the graph and revisions and writes the audit rows.

use std::sync::Arc;

use poem::http::HeaderMap;
use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;
use poem_openapi::types::MaybeUndefined;
use poem_openapi::{Object, OpenApi};
use serde_json::Value;
use svc_core::Error;
use svc_memory::relations::{ContradictionResolution, DuplicateResolution};
use svc_memory::review::BulkChange;
use svc_memory::Decision;
use svc_store::memory::relations::NewContradiction;
use svc_store::memory::{ItemChange, ItemSort};

use super::{field, page_body, query, revision_of, KnowledgeView};
use crate::api::admin_sessions::json as json_body;
use crate::api::{AdminAuth, ApiResult, Tag};
use crate::state::AppState;

pub struct MemoryReviewApi {
    pub state: Arc<AppState>,
}

/// A review decision's details.
#[derive(Object, Default)]
struct DecisionBody {
    /// Why (kept in the audit row).
    reason: Option<String>,
    /// `mandate` only: `all` or `group:<name>`.
    audience: Option<String>,
    /// The revision the decision was taken on; another is a 409 (also `If-Match`).
    expected_revision: Option<i64>,
}

/// Fields to change; an explicit null clears a field (not the title).
#[derive(Object)]
struct EditBody {
    title: MaybeUndefined<String>,
    content: MaybeUndefined<String>,
    category: MaybeUndefined<String>,
    domain: MaybeUndefined<String>,
    tags: MaybeUndefined<Vec<String>>,
    audience: MaybeUndefined<String>,
    /// The revision the edit was made on; another is a 409 (also `If-Match`).
    expected_revision: Option<i64>,
}

/// One decision over many items.
#[derive(Object)]
struct BatchBody {
    /// The items (at most 500).
    item_ids: Vec<String>,
    /// `approve`, `mandate`, `reject` or `revoke`.
    action: String,
    /// Why (kept in each audit row).
    reason: Option<String>,
    /// `mandate` only: `all` or `group:<name>`.
    audience: Option<String>,
}

/// Field changes for a bulk update; an explicit null clears a field (not the title).
#[derive(Object)]
#[oai(deny_unknown_fields)]
struct BulkChanges {
    title: MaybeUndefined<String>,
    content: MaybeUndefined<String>,
    category: MaybeUndefined<String>,
    domain: MaybeUndefined<String>,
    audience: MaybeUndefined<String>,
    /// Replaces each item's tags.
    tags: Option<Vec<String>>,
    /// Added to each item's tags.
    tags_add: Option<Vec<String>>,
    /// Removed from each item's tags.
    tags_remove: Option<Vec<String>>,
}

/// One set of changes over many items.
#[derive(Object)]
struct BulkBody {
    /// The items (at most 500).
    item_ids: Vec<String>,
    /// Only `title, content, category, domain, audience, tags, tags_add, tags_remove`.
    updates: BulkChanges,
}

/// A contradiction to file.
#[derive(Object)]
struct ContradictionBody {
    item_a_id: String,
    item_b_id: String,
    /// Why they contradict.
    explanation: Option<String>,
    /// `low`, `medium` (default) or `high`.
    severity: Option<String>,
    /// What the filer suggests.
    suggested_resolution: Option<String>,
}

/// How a contradiction is settled.
#[derive(Object)]
struct ResolveContradictionBody {
    /// `kept_a` or `kept_b` (the other side is retired), `merged` or `both_valid`.
    resolution: String,
    /// Why (kept in the audit row).
    reason: Option<String>,
}

/// How a duplicate candidate is settled.
#[derive(Object)]
struct ResolveDuplicateBody {
    /// `duplicate`, `different` or `dismissed`.
    resolution: String,
    /// With `duplicate`: the id of the item to keep; the other is retired.
    keep: Option<String>,
}

/// Which pairs a list shows: open ones by default, resolved ones with `resolved=true`,
/// both with `all=true`.
fn resolved_param(v: Option<bool>, include_all: Option<bool>) -> Option<bool> {
    if include_all == Some(true) {
        None
    } else {
        Some(v.unwrap_or(false))
    }
}

fn checked_limit(limit: Option<u64>) -> Result<u64, Error> {
    let limit = limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(Error::invalid("limit must be between 1 and 1000"));
    }
    Ok(limit)
}

#[OpenApi(tag = "Tag::Memory")]
impl MemoryReviewApi {
    /// The items waiting for review, oldest first (admin).
    #[oai(
        path = "/api/memory/admin/pending",
        method = "get",
        operation_id = "list_pending_memory_items"
    )]
    async fn pending(
        &self,
        auth: AdminAuth,
        /// Exact category.
        category: Query<Option<String>>,
        /// Page, from 1.
        page: Query<Option<u64>>,
        /// Items per page, 1..500 (default 50).
        per_page: Query<Option<u64>>,
    ) -> ApiResult<Json<Value>> {
        let (mut q, n, per) = query(
            Some("pending".into()),
            category.0,
            None,
            None,
            None,
            Some("created".into()),
            page.0,
            per_page.0,
        )?;
        q.sort = ItemSort::Created;
        page_body(self.state.memory.list(&auth.0, q).await?, n, per)
    }

    /// Takes a review decision on an item (admin): `approve`, `mandate` (optionally for an
    /// `audience`), `reject` or `revoke`. The review graph is enforced (an illegal move is a
    /// 409 naming the item's state and its legal moves); deciding what the item already is
    /// changes nothing. Audited as `corporate_memory.<decision>` with the item as it was.
    #[oai(
        path = "/api/memory/admin/:decision",
        method = "post",
        operation_id = "decide_memory_item"
    )]
    async fn decide(
        &self,
        auth: AdminAuth,
        headers: &HeaderMap,
        /// `approve`, `mandate`, `reject` or `revoke`.
        decision: Path<String>,
        /// The item.
        item_id: Query<String>,
        /// `{}` or any of `reason`, `audience`, `expected_revision`.
        body: Json<DecisionBody>,
    ) -> ApiResult<Json<KnowledgeView>> {
        let decision = Decision::parse(&decision.0).ok_or_else(|| {
            Error::not_found(format!(
                "no decision '{}': approve, mandate, reject or revoke",
                decision.0
            ))
        })?;
        let b = body.0;
        let revision = revision_of(b.expected_revision, headers)?;
        let item = self
            .state
            .memory
            .decide(
                &auth.0, &item_id.0, decision, b.reason, b.audience, revision,
            )
            .await?;
        Ok(Json(item.into()))
    }

    /// Edits an item's fields (admin). An explicit null clears a field; the title cannot be
    /// cleared. Audited as `corporate_memory.edit` with the item as it was.
    #[oai(
        path = "/api/memory/admin/items/:id",
        method = "patch",
        operation_id = "edit_memory_item"
    )]
    async fn edit(
        &self,
        auth: AdminAuth,
        headers: &HeaderMap,
        id: Path<String>,
        body: Json<EditBody>,
    ) -> ApiResult<Json<KnowledgeView>> {
        let b = body.0;
        let revision = revision_of(b.expected_revision, headers)?;
        let title = match field(b.title) {
            Some(None) => return Err(Error::invalid("title cannot be cleared").into()),
            t => t.flatten(),
        };
        let change = ItemChange {
            title,
            content: field(b.content),
            category: field(b.category),
            domain: field(b.domain),
            tags: field(b.tags).map(Option::unwrap_or_default),
            audience: field(b.audience),
            ..ItemChange::default()
        };
        let item = self
            .state
            .memory
            .edit(&auth.0, &id.0, change, revision)
            .await?;
        Ok(Json(item.into()))
    }

    /// Takes one decision on many items (admin): `{success: [{id, status}], not_found,
    /// errors: [{id, status, error}]}`. Each item goes through the single-item path (graph,
    /// audit row); one that cannot move is reported and the rest are applied.
    #[oai(
        path = "/api/memory/admin/batch",
        method = "post",
        operation_id = "batch_decide_memory_items"
    )]
    async fn batch(&self, auth: AdminAuth, body: Json<BatchBody>) -> ApiResult<Json<Value>> {
        let b = body.0;
        let decision = Decision::parse(&b.action).ok_or_else(|| {
            Error::invalid(format!(
                "action must be approve, mandate, reject or revoke, not '{}'",
                b.action
            ))
        })?;
        let out = self
            .state
            .memory
            .batch(&auth.0, &b.item_ids, decision, b.reason, b.audience)
            .await?;
        json_body(out)
    }

    /// Applies one set of field changes to many items (admin): `{updated, not_found,
    /// errors}`. Audited per item as `corporate_memory.bulk_update`.
    #[oai(
        path = "/api/memory/admin/bulk-update",
        method = "post",
        operation_id = "bulk_update_memory_items"
    )]
    async fn bulk_update(&self, auth: AdminAuth, body: Json<BulkBody>) -> ApiResult<Json<Value>> {
        let b = body.0;
        let u = b.updates;
        let title = match field(u.title) {
            Some(None) => return Err(Error::invalid("title cannot be cleared").into()),
            t => t.flatten(),
        };
        let change = BulkChange {
            fields: ItemChange {
                title,
                content: field(u.content),
                category: field(u.category),
                domain: field(u.domain),
                audience: field(u.audience),
                tags: u.tags,
                ..ItemChange::default()
            },
            tags_add: u.tags_add.unwrap_or_default(),
            tags_remove: u.tags_remove.unwrap_or_default(),
        };
        let out = self
            .state
            .memory
            .bulk_update(&auth.0, &b.item_ids, change)
            .await?;
        json_body(out)
    }

    /// Contradictions (admin), open ones by default, newest first; a personal side is shown
    /// as `{id, hidden: true}` unless `exclude_personal=false`.
    #[oai(
        path = "/api/memory/admin/contradictions",
        method = "get",
        operation_id = "list_memory_contradictions"
    )]
    async fn contradictions(
        &self,
        _auth: AdminAuth,
        /// `true`: resolved ones; `false` (default): open ones.
        resolved: Query<Option<bool>>,
        /// `true`: both.
        all: Query<Option<bool>>,
        /// Hide personal sides (default true).
        exclude_personal: Query<Option<bool>>,
        /// 1..1000 (default 100).
        limit: Query<Option<u64>>,
    ) -> ApiResult<Json<Value>> {
        let list = self
            .state
            .memory
            .contradictions(
                resolved_param(resolved.0, all.0),
                exclude_personal.0.unwrap_or(true),
                checked_limit(limit.0)?,
            )
            .await?;
        json_body(serde_json::json!({ "count": list.len(), "contradictions": list }))
    }

    /// Files a contradiction between two items (admin).
    #[oai(
        path = "/api/memory/admin/contradictions",
        method = "post",
        operation_id = "create_memory_contradiction"
    )]
    async fn file_contradiction(
        &self,
        auth: AdminAuth,
        body: Json<ContradictionBody>,
    ) -> ApiResult<Json<Value>> {
        let b = body.0;
        let c = self
            .state
            .memory
            .file_contradiction(
                &auth.0,
                NewContradiction {
                    item_a_id: b.item_a_id,
                    item_b_id: b.item_b_id,
                    explanation: b.explanation,
                    severity: b.severity.unwrap_or_default(),
                    suggested_resolution: b.suggested_resolution,
                    created_by: String::new(),
                },
            )
            .await?;
        json_body(c)
    }

    /// Settles a contradiction once (admin; again → 400). `kept_a`/`kept_b` retire the other
    /// side through the review graph. Audited as `corporate_memory.resolve_contradiction`.
    #[oai(
        path = "/api/memory/admin/contradictions/:id/resolve",
        method = "post",
        operation_id = "resolve_memory_contradiction"
    )]
    async fn resolve_contradiction(
        &self,
        auth: AdminAuth,
        id: Path<String>,
        body: Json<ResolveContradictionBody>,
    ) -> ApiResult<Json<Value>> {
        let resolution = ContradictionResolution::parse(&body.0.resolution)?;
        let out = self
            .state
            .memory
            .resolve_contradiction(&auth.0, &id.0, resolution, body.0.reason)
            .await?;
        Ok(Json(out))
    }

    /// Likely duplicates found on contribution (admin), open ones by default, most alike
    /// first; a personal side is shown as `{id, hidden: true}` unless
    /// `exclude_personal=false`.
    #[oai(
        path = "/api/memory/admin/duplicate-candidates",
        method = "get",
        operation_id = "list_memory_duplicate_candidates"
    )]
    async fn duplicates(
        &self,
        _auth: AdminAuth,
        /// `true`: resolved ones; `false` (default): open ones.
        resolved: Query<Option<bool>>,
        /// `true`: both.
        all: Query<Option<bool>>,
        /// Hide personal sides (default true).
        exclude_personal: Query<Option<bool>>,
        /// 1..1000 (default 100).
        limit: Query<Option<u64>>,
    ) -> ApiResult<Json<Value>> {
        let list = self
            .state
            .memory
            .duplicate_candidates(
                resolved_param(resolved.0, all.0),
                exclude_personal.0.unwrap_or(true),
                checked_limit(limit.0)?,
            )
            .await?;
        json_body(serde_json::json!({ "count": list.len(), "candidates": list }))
    }

    /// Settles a duplicate candidate once (admin; again → 400). `duplicate` with `keep`
    /// retires the other item. Audited as `corporate_memory.resolve_duplicate`.
    #[oai(
        path = "/api/memory/admin/duplicate-candidates/resolve",
        method = "post",
        operation_id = "resolve_memory_duplicate"
    )]
    async fn resolve_duplicate(
        &self,
        auth: AdminAuth,
        /// One item of the pair.
        item_a_id: Query<String>,
        /// The other.
        item_b_id: Query<String>,
        body: Json<ResolveDuplicateBody>,
    ) -> ApiResult<Json<Value>> {
        let resolution = DuplicateResolution::parse(&body.0.resolution)?;
        let out = self
            .state
            .memory
            .resolve_duplicate(
                &auth.0,
                &item_a_id.0,
                &item_b_id.0,
                resolution,
                body.0.keep.as_deref(),
            )
            .await?;
        Ok(Json(out))
    }
}
