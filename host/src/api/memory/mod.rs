//! Corporate memory over HTTP (`/api/memory`): contributions, reading and voting for every
//! user, review decisions and edits for administrators, and the agents' bundle. The rules
//! (visibility, the review graph, revisions, the bundle) live in [`svc_memory::Memory`];
//! this file parses, checks the role and shapes; [`review`] holds the administrators' side.

pub mod review;

use std::sync::Arc;

use poem::http::HeaderMap;
use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;
use poem_openapi::types::MaybeUndefined;
use poem_openapi::{ApiResponse, Object, OpenApi};
use serde_json::{json, Value};
use svc_core::Error;
use svc_memory::{bundle::DEFAULT_BUDGET_TOKENS, Contribution};
use svc_store::memory::tree::{TreeAxis, TreeQuery};
use svc_store::memory::{ItemQuery, ItemSort, KnowledgeItem};

use super::admin_sessions::json as json_body;
use super::{ApiResult, BearerAuth, Tag};
use crate::state::AppState;

pub struct MemoryApi {
    pub state: Arc<AppState>,
}

/// A contribution.
#[derive(Object)]
struct NewItemBody {
    /// Title (1..200 characters).
    title: String,
    /// The knowledge (at most 64 KiB).
    content: Option<String>,
    /// Category.
    category: Option<String>,
    /// Tags (at most 30).
    tags: Option<Vec<String>>,
    /// One of finance, engineering, product, data, operations, infrastructure.
    domain: Option<String>,
    /// Named entities it mentions.
    entities: Option<Value>,
    /// Where it came from (default `api`).
    source_type: Option<String>,
    /// A reference into that source.
    source_ref: Option<String>,
}

#[derive(ApiResponse)]
enum Created {
    /// Stored as `pending`.
    #[oai(status = 201)]
    Created(Json<KnowledgeView>),
}

/// A vote.
#[derive(Object)]
struct VoteBody {
    /// 1 (up), -1 (down) or 0 (withdraw).
    vote: i64,
}

/// The personal flag.
#[derive(Object)]
struct PersonalBody {
    /// Seen only by the contributor (and administrators).
    is_personal: bool,
}

/// `Some(Some(v))` set, `Some(None)` clear, `None` leave.
pub(super) fn field<T>(v: MaybeUndefined<T>) -> Option<Option<T>> {
    match v {
        MaybeUndefined::Undefined => None,
        MaybeUndefined::Null => Some(None),
        MaybeUndefined::Value(v) => Some(Some(v)),
    }
}

/// The revision a change was made on: the body's, else an `If-Match` header (`3` or `"3"`).
pub(super) fn revision_of(body: Option<i64>, headers: &HeaderMap) -> Result<Option<i64>, Error> {
    if body.is_some() {
        return Ok(body);
    }
    match headers.get("if-match") {
        None => Ok(None),
        Some(v) => v
            .to_str()
            .ok()
            .map(|s| s.trim().trim_matches('"'))
            .and_then(|s| s.parse().ok())
            .map(Some)
            .ok_or_else(|| Error::invalid("If-Match: the item's revision, a whole number")),
    }
}

/// The list parameters as a store query; `page`/`per_page` checked.
#[allow(clippy::too_many_arguments)]
pub(super) fn query(
    status_filter: Option<String>,
    category: Option<String>,
    domain: Option<String>,
    source_type: Option<String>,
    search: Option<String>,
    sort: Option<String>,
    page: Option<u64>,
    per_page: Option<u64>,
) -> Result<(ItemQuery, u64, u64), Error> {
    let page = page.unwrap_or(1);
    let per_page = per_page.unwrap_or(50);
    if !(1..=1_000_000).contains(&page) {
        return Err(Error::invalid("page must be between 1 and 1000000"));
    }
    if !(1..=500).contains(&per_page) {
        return Err(Error::invalid("per_page must be between 1 and 500"));
    }
    let statuses = match status_filter.filter(|s| !s.is_empty()) {
        None => vec![],
        Some(list) => list
            .split(',')
            .map(|s| {
                svc_memory::Status::parse(s.trim())
                    .map(|s| s.as_str().to_owned())
                    .ok_or_else(|| {
                        Error::invalid(format!(
                            "status_filter: '{s}' is not one of pending, approved, mandatory, rejected, revoked, expired"
                        ))
                    })
            })
            .collect::<Result<_, _>>()?,
    };
    let sort = match sort.as_deref().unwrap_or("updated") {
        "updated" => ItemSort::Updated,
        "created" => ItemSort::Created,
        "score" => ItemSort::Score,
        "confidence" => ItemSort::Confidence,
        "title" => ItemSort::Title,
        other => {
            return Err(Error::invalid(format!(
                "sort must be updated, created, score, confidence or title, not '{other}'"
            )))
        }
    };
    Ok((
        ItemQuery {
            statuses,
            category,
            domain,
            source_type,
            search,
            sort,
            offset: (page - 1).saturating_mul(per_page),
            limit: per_page,
            ..ItemQuery::default()
        },
        page,
        per_page,
    ))
}

pub(super) fn page_body(
    page: svc_store::memory::ItemPage,
    n: u64,
    per_page: u64,
) -> ApiResult<Json<Value>> {
    let total = page.total_count.max(0) as u64;
    json_body(json!({
        "items": page.items,
        "count": page.items.len(),
        "page": n,
        "per_page": per_page,
        "total_count": total,
        "total_pages": total.div_ceil(per_page),
    }))
}

#[OpenApi(tag = "Tag::Memory")]
impl MemoryApi {
    /// Contributes an item; it starts `pending` until an administrator reviews it.
    #[oai(
        path = "/api/memory",
        method = "post",
        operation_id = "create_memory_item"
    )]
    async fn create(&self, auth: BearerAuth, body: Json<NewItemBody>) -> ApiResult<Created> {
        let b = body.0;
        let item = self
            .state
            .memory
            .contribute(
                &auth.0,
                Contribution {
                    title: b.title,
                    content: b.content,
                    category: b.category,
                    tags: b.tags.unwrap_or_default(),
                    domain: b.domain,
                    entities: b.entities,
                    source_type: b.source_type,
                    source_ref: b.source_ref,
                },
            )
            .await?;
        Ok(Created::Created(Json(item.into())))
    }

    /// The items the caller sees, a page at a time: `{items, count, page, per_page,
    /// total_count, total_pages}`. Others' personal items never appear.
    #[allow(clippy::too_many_arguments)]
    #[oai(
        path = "/api/memory",
        method = "get",
        operation_id = "list_memory_items"
    )]
    async fn list(
        &self,
        auth: BearerAuth,
        /// Statuses, comma-separated.
        status_filter: Query<Option<String>>,
        /// Exact category.
        category: Query<Option<String>>,
        /// Exact domain.
        domain: Query<Option<String>>,
        /// Exact source type.
        source_type: Query<Option<String>>,
        /// Literal text in the title or content.
        search: Query<Option<String>>,
        /// `updated` (default), `created`, `score`, `confidence` or `title`.
        sort: Query<Option<String>>,
        /// Page, from 1.
        page: Query<Option<u64>>,
        /// Items per page, 1..500 (default 50).
        per_page: Query<Option<u64>>,
    ) -> ApiResult<Json<Value>> {
        let (q, n, per) = query(
            status_filter.0,
            category.0,
            domain.0,
            source_type.0,
            search.0,
            sort.0,
            page.0,
            per_page.0,
        )?;
        page_body(self.state.memory.list(&auth.0, q).await?, n, per)
    }

    /// The caller's own contributions, personal ones included.
    #[oai(
        path = "/api/memory/my-contributions",
        method = "get",
        operation_id = "my_memory_contributions"
    )]
    async fn my_contributions(
        &self,
        auth: BearerAuth,
        /// Page, from 1.
        page: Query<Option<u64>>,
        /// Items per page, 1..500 (default 50).
        per_page: Query<Option<u64>>,
    ) -> ApiResult<Json<Value>> {
        let (q, n, per) = query(None, None, None, None, None, None, page.0, per_page.0)?;
        page_body(
            self.state.memory.my_contributions(&auth.0, q).await?,
            n,
            per,
        )
    }

    /// How the items the caller sees divide: `{total, by_status, categories, by_domain,
    /// by_source_type, by_audience, by_tag}`, each `[{value, count}]`, most first.
    #[oai(
        path = "/api/memory/stats",
        method = "get",
        operation_id = "get_memory_stats"
    )]
    async fn stats(&self, auth: BearerAuth) -> ApiResult<Json<Value>> {
        Ok(Json(self.state.memory.stats(&auth.0).await?))
    }

    /// The items the caller sees grouped along an axis (`domain`, `category`, `tag` or
    /// `audience`): `{axis, groups: [{key, count, items}], page, per_page, total_groups,
    /// total_items}`. Pages are over groups, largest first; the tag axis puts an item in
    /// every tag's group; items without a value share the group whose key is null.
    #[allow(clippy::too_many_arguments)]
    #[oai(
        path = "/api/memory/tree",
        method = "get",
        operation_id = "get_memory_tree"
    )]
    async fn tree(
        &self,
        auth: BearerAuth,
        /// `domain` (default), `category`, `tag` or `audience`.
        axis: Query<Option<String>>,
        /// Statuses, comma-separated.
        status_filter: Query<Option<String>>,
        /// Exact source type.
        source_type: Query<Option<String>>,
        /// Exact audience (`all` also matches items with none).
        audience: Query<Option<String>>,
        /// Literal text in the title or content.
        q: Query<Option<String>>,
        /// Only items with (true) or without (false) an open duplicate candidate.
        has_duplicate: Query<Option<bool>>,
        /// Leave personal items out (always, for non-administrators).
        exclude_personal: Query<Option<bool>>,
        /// Page of groups, from 1.
        page: Query<Option<u64>>,
        /// Groups per page, 1..500 (default 50).
        per_page: Query<Option<u64>>,
        /// Items listed per group, 0..100 (default 20; the count covers all).
        items_per_group: Query<Option<u64>>,
    ) -> ApiResult<Json<Value>> {
        let axis_name = axis.0.unwrap_or_else(|| "domain".into());
        let axis = TreeAxis::parse(&axis_name).ok_or_else(|| {
            Error::invalid(format!(
                "axis must be domain, category, tag or audience, not '{axis_name}'"
            ))
        })?;
        let (list, n, per) = query(
            status_filter.0,
            None,
            None,
            None,
            None,
            None,
            page.0,
            per_page.0,
        )?;
        let items_per_group = items_per_group.0.unwrap_or(20);
        if items_per_group > 100 {
            return Err(Error::invalid("items_per_group must be between 0 and 100").into());
        }
        let tree = self
            .state
            .memory
            .tree(
                &auth.0,
                TreeQuery {
                    axis,
                    statuses: list.statuses,
                    source_type: source_type.0,
                    audience: audience.0,
                    search: q.0,
                    has_duplicate: has_duplicate.0,
                    exclude_personal: exclude_personal.0.unwrap_or(false),
                    offset: list.offset,
                    limit: list.limit,
                    items_per_group,
                },
            )
            .await?;
        json_body(json!({
            "axis": axis.as_str(),
            "groups": tree.groups,
            "page": n,
            "per_page": per,
            "total_groups": tree.total_groups,
            "total_items": tree.total_items,
        }))
    }

    /// The caller's votes: `{<item id>: 1 | -1}`.
    #[oai(
        path = "/api/memory/my-votes",
        method = "get",
        operation_id = "my_memory_votes"
    )]
    async fn my_votes(&self, auth: BearerAuth) -> ApiResult<Json<Value>> {
        let votes: serde_json::Map<String, Value> = self
            .state
            .memory
            .my_votes(&auth.0)
            .await?
            .into_iter()
            .map(|(id, v)| (id, v.into()))
            .collect();
        Ok(Json(Value::Object(votes)))
    }

    /// What an agent loads: every `mandatory` item the caller sees, then `approved` ones
    /// ranked by confidence × recency within `budget_tokens` (default 6000; tokens
    /// estimated as characters ÷ 4). Personal items are never in it.
    #[oai(
        path = "/api/memory/bundle",
        method = "get",
        operation_id = "get_memory_bundle"
    )]
    async fn bundle(
        &self,
        auth: BearerAuth,
        /// Token budget, 1..200000.
        budget_tokens: Query<Option<usize>>,
    ) -> ApiResult<Json<Value>> {
        let budget = budget_tokens.0.unwrap_or(DEFAULT_BUDGET_TOKENS);
        if !(1..=200_000).contains(&budget) {
            return Err(Error::invalid("budget_tokens must be between 1 and 200000").into());
        }
        json_body(self.state.memory.bundle(&auth.0, budget).await?)
    }

    /// One item the caller sees (404 for one they may not see).
    #[oai(
        path = "/api/memory/:id",
        method = "get",
        operation_id = "get_memory_item"
    )]
    async fn get(&self, auth: BearerAuth, id: Path<String>) -> ApiResult<Json<KnowledgeView>> {
        let item = self.state.memory.item(&auth.0, &id.0).await?;
        Ok(Json(item.into()))
    }

    /// Where an item came from: `{id, source_type, source_ref, source_user, confidence,
    /// domain, entities, created_at}`.
    #[oai(
        path = "/api/memory/:id/provenance",
        method = "get",
        operation_id = "get_memory_provenance"
    )]
    async fn provenance(&self, auth: BearerAuth, id: Path<String>) -> ApiResult<Json<Value>> {
        let i = self.state.memory.item(&auth.0, &id.0).await?;
        json_body(json!({
            "id": i.id,
            "source_type": i.source_type,
            "source_ref": i.source_ref,
            "source_user": i.source_user,
            "confidence": i.confidence,
            "domain": i.domain,
            "entities": i.entities,
            "created_at": i.created_at,
        }))
    }

    /// Votes on an item the caller sees: `{upvotes, downvotes}`.
    #[oai(
        path = "/api/memory/:id/vote",
        method = "post",
        operation_id = "vote_memory_item"
    )]
    async fn vote(
        &self,
        auth: BearerAuth,
        id: Path<String>,
        body: Json<VoteBody>,
    ) -> ApiResult<Json<Value>> {
        let (up, down) = self.state.memory.vote(&auth.0, &id.0, body.0.vote).await?;
        json_body(json!({ "upvotes": up, "downvotes": down }))
    }

    /// Makes one of the caller's own items personal or shared (403 for another's).
    #[oai(
        path = "/api/memory/:id/personal",
        method = "post",
        operation_id = "set_memory_personal"
    )]
    async fn personal(
        &self,
        auth: BearerAuth,
        id: Path<String>,
        body: Json<PersonalBody>,
    ) -> ApiResult<Json<KnowledgeView>> {
        let item = self
            .state
            .memory
            .set_personal(&auth.0, &id.0, body.0.is_personal)
            .await?;
        Ok(Json(item.into()))
    }
}

/// A knowledge item as the API returns it.
#[derive(Object)]
pub(super) struct KnowledgeView {
    id: String,
    title: String,
    content: Option<String>,
    category: Option<String>,
    tags: Vec<String>,
    /// `pending`, `approved`, `mandatory`, `rejected`, `revoked` or `expired`.
    status: String,
    /// The contributor's e-mail.
    source_user: Option<String>,
    /// The contributor's user id.
    created_by: Option<String>,
    /// Null or `all` (everyone), or `group:<name>`.
    audience: Option<String>,
    /// 0..1.
    confidence: f64,
    domain: Option<String>,
    entities: Option<Value>,
    source_type: String,
    source_ref: Option<String>,
    /// Seen only by the contributor (and administrators).
    is_personal: bool,
    /// Bumped by every change; send it back as `expected_revision` (or `If-Match`).
    revision: i64,
    upvotes: i64,
    downvotes: i64,
    /// `upvotes - downvotes`.
    score: i64,
    created_at: Option<String>,
    updated_at: Option<String>,
}

impl From<KnowledgeItem> for KnowledgeView {
    fn from(i: KnowledgeItem) -> Self {
        Self {
            id: i.id,
            title: i.title,
            content: i.content,
            category: i.category,
            tags: i.tags,
            status: i.status,
            source_user: i.source_user,
            created_by: i.created_by,
            audience: i.audience,
            confidence: i.confidence,
            domain: i.domain,
            entities: i.entities,
            source_type: i.source_type,
            source_ref: i.source_ref,
            is_personal: i.is_personal,
            revision: i.revision,
            upvotes: i.upvotes,
            downvotes: i.downvotes,
            score: i.score,
            created_at: i.created_at,
            updated_at: i.updated_at,
        }
    }
}
