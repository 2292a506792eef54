//! The plugin marketplace over HTTP: usage-ranked listings and details for everyone,
//! submissions of skills, agents and plugins, and for administrators the curated
//! marketplaces, their syncs and the submissions queue. The rules live in
//! [`svc_marketplace::Marketplace`]; this file parses, checks the role and shapes.

use std::sync::Arc;

use poem_openapi::param::{Path, Query};
use poem_openapi::payload::{Binary, Json};
use poem_openapi::{ApiResponse, Object, OpenApi};
use serde_json::{json, Value};
use svc_core::Error;
use svc_marketplace::{EntityType, FleaDecision, Submission};
use svc_store::marketplace::{ItemsQuery, MarketSort, MarketTab};

use super::admin_sessions::json as json_body;
use super::{AdminAuth, ApiResult, BearerAuth, Tag};
use crate::state::AppState;

pub struct MarketplaceApi {
    pub state: Arc<AppState>,
}

/// A curated marketplace to register.
#[derive(Object)]
struct RegisterBody {
    /// Its id: letters, digits, `-`, `_`, `.` (the first half of its plugins' ids).
    id: String,
    /// Display name (default: the id).
    name: Option<String>,
    /// A git URL (https://, ssh://, git://, file://, user@host:path) or an absolute local
    /// directory holding `marketplace.json`.
    url: String,
    /// The branch to fetch (default: the remote's).
    branch: Option<String>,
}

/// A skill or agent submitted with its text.
#[derive(Object)]
struct SubmitBody {
    name: String,
    /// `skill` or `agent` (a plugin is uploaded as an archive).
    #[oai(rename = "type")]
    entity_type: String,
    description: Option<String>,
    category: Option<String>,
    /// The skill's or agent's text.
    content: String,
}

#[derive(ApiResponse)]
enum Submitted {
    /// Stored as `pending` until an administrator approves it.
    #[oai(status = 201)]
    Created(Json<Value>),
}

#[derive(ApiResponse)]
enum Registered {
    /// Registered; sync it to read its plugins.
    #[oai(status = 201)]
    Created(Json<Value>),
}

pub(crate) fn sort_of(s: Option<&str>) -> Result<MarketSort, Error> {
    match s.unwrap_or("recent") {
        "recent" => Ok(MarketSort::Recent),
        "most_used" => Ok(MarketSort::MostUsed),
        "trending" => Ok(MarketSort::Trending),
        other => Err(Error::invalid(format!(
            "sort must be recent, most_used or trending, not '{other}'"
        ))),
    }
}

#[OpenApi(tag = "Tag::Marketplace")]
impl MarketplaceApi {
    /// Marketplace items, a page at a time: `{items, total, page, page_size}`. Every item
    /// carries `invocations_30d`, `unique_users_30d` (distinct users over the 30 days) and
    /// `trend_pct` (the last 7 days against the 7 before; null below 5 prior invocations or
    /// 3 recent users). `trending` lists only items with a trend.
    #[allow(clippy::too_many_arguments)]
    #[oai(
        path = "/api/marketplace/items",
        method = "get",
        operation_id = "list_marketplace_items"
    )]
    async fn items(
        &self,
        auth: BearerAuth,
        /// `curated` (default), `flea` or `my` (your submissions, any status).
        tab: Query<Option<String>>,
        /// Literal text in the name or description.
        q: Query<Option<String>>,
        /// Exact category.
        category: Query<Option<String>>,
        /// `plugin`, `skill` or `agent`.
        #[oai(name = "type")]
        item_type: Query<Option<String>>,
        /// `recent` (default), `most_used` or `trending`.
        sort: Query<Option<String>>,
        /// Page, from 1.
        page: Query<Option<u64>>,
        /// Items per page, 1..100 (default 24).
        page_size: Query<Option<u64>>,
    ) -> ApiResult<Json<Value>> {
        let tab = match tab.0.as_deref().unwrap_or("curated") {
            "curated" => MarketTab::Curated,
            "flea" => MarketTab::Flea,
            "my" => MarketTab::Mine(auth.0.user.id.clone()),
            other => {
                return Err(Error::invalid(format!(
                    "tab must be curated, flea or my, not '{other}'"
                ))
                .into())
            }
        };
        if let Some(t) = item_type.0.as_deref() {
            if !["plugin", "skill", "agent"].contains(&t) {
                return Err(Error::invalid(format!(
                    "type must be plugin, skill or agent, not '{t}'"
                ))
                .into());
            }
        }
        let page = page.0.unwrap_or(1);
        let size = page_size.0.unwrap_or(24);
        if !(1..=100_000).contains(&page) || !(1..=100).contains(&size) {
            return Err(Error::invalid("page must be 1..100000 and page_size 1..100").into());
        }
        let out = self
            .state
            .marketplace
            .items(&ItemsQuery {
                tab,
                q: q.0,
                category: category.0,
                item_type: item_type.0,
                sort: sort_of(sort.0.as_deref())?,
                offset: (page - 1) * size,
                limit: size,
            })
            .await?;
        json_body(json!({"items": out.items, "total": out.total, "page": page, "page_size": size}))
    }

    /// A curated plugin with `telemetry: {invocations_30d, unique_users_30d, trend_pct,
    /// daily_series}` (30 zero-filled days, oldest first).
    #[oai(
        path = "/api/marketplace/plugins/:marketplace/:plugin",
        method = "get",
        operation_id = "get_marketplace_plugin"
    )]
    async fn plugin(
        &self,
        _auth: BearerAuth,
        marketplace: Path<String>,
        plugin: Path<String>,
    ) -> ApiResult<Json<Value>> {
        let ref_id = format!("{}/{}", marketplace.0, plugin.0);
        Ok(Json(self.state.marketplace.plugin(&ref_id).await?))
    }

    /// A submitted entity with its usage (one not approved: only its submitter and
    /// administrators).
    #[oai(
        path = "/api/marketplace/flea/:id",
        method = "get",
        operation_id = "get_flea_entity"
    )]
    async fn flea(&self, auth: BearerAuth, id: Path<String>) -> ApiResult<Json<Value>> {
        Ok(Json(
            self.state.marketplace.flea_entity(&auth.0, &id.0).await?,
        ))
    }

    /// Submits a skill or an agent with its text; it waits for an administrator.
    #[oai(
        path = "/api/marketplace/flea",
        method = "post",
        operation_id = "submit_flea_entity"
    )]
    async fn submit(&self, auth: BearerAuth, body: Json<SubmitBody>) -> ApiResult<Submitted> {
        let b = body.0;
        let e = self
            .state
            .marketplace
            .submit(
                &auth.0,
                Submission {
                    name: b.name,
                    entity_type: EntityType::parse(&b.entity_type)?,
                    description: b.description,
                    category: b.category,
                    content: Some(b.content),
                },
            )
            .await?;
        Ok(Submitted::Created(Json(
            serde_json::to_value(e).map_err(Error::internal)?,
        )))
    }

    /// Submits a plugin directory as a tar or tar.gz archive (the body); refused before
    /// anything is written when it is too large, unpacks too large, or holds a path out of
    /// the directory, a link or a device.
    #[oai(
        path = "/api/marketplace/flea/upload",
        method = "post",
        operation_id = "upload_flea_plugin"
    )]
    async fn upload(
        &self,
        auth: BearerAuth,
        /// The plugin's name.
        name: Query<String>,
        description: Query<Option<String>>,
        category: Query<Option<String>>,
        body: Binary<Vec<u8>>,
    ) -> ApiResult<Submitted> {
        let limit = self.state.config.marketplace_upload_max_bytes;
        if body.0.len() as u64 > limit {
            return Err(Error::new(
                svc_core::ErrorKind::PayloadTooLarge,
                format!("The archive exceeds this server's limit of {limit} bytes (SVC_MARKETPLACE_UPLOAD_MAX_BYTES)"),
            )
            .into());
        }
        let e = self
            .state
            .marketplace
            .submit_plugin(
                &auth.0,
                Submission {
                    name: name.0,
                    entity_type: EntityType::Plugin,
                    description: description.0,
                    category: category.0,
                    content: None,
                },
                body.0,
            )
            .await?;
        Ok(Submitted::Created(Json(
            serde_json::to_value(e).map_err(Error::internal)?,
        )))
    }

    /// Registers a curated marketplace (admin); `POST /api/marketplace/sync` reads it.
    #[oai(
        path = "/api/admin/marketplaces",
        method = "post",
        operation_id = "register_marketplace"
    )]
    async fn register(&self, auth: AdminAuth, body: Json<RegisterBody>) -> ApiResult<Registered> {
        let b = body.0;
        let m = self
            .state
            .marketplace
            .register(&auth.0, &b.id, b.name, &b.url, b.branch)
            .await?;
        Ok(Registered::Created(Json(
            serde_json::to_value(m).map_err(Error::internal)?,
        )))
    }

    /// The curated marketplaces with their last sync (admin).
    #[oai(
        path = "/api/admin/marketplaces",
        method = "get",
        operation_id = "list_marketplaces"
    )]
    async fn marketplaces(&self, _auth: AdminAuth) -> ApiResult<Json<Value>> {
        let list = self.state.marketplace.marketplaces().await?;
        json_body(json!({"count": list.len(), "marketplaces": list}))
    }

    /// A curated marketplace's plugins, each with what it provides and any problem (admin).
    #[oai(
        path = "/api/admin/marketplaces/:id/plugins",
        method = "get",
        operation_id = "list_marketplace_plugins"
    )]
    async fn plugins(&self, _auth: AdminAuth, id: Path<String>) -> ApiResult<Json<Value>> {
        let list = self.state.marketplace.plugins_of(&id.0).await?;
        json_body(json!({"count": list.len(), "plugins": list}))
    }

    /// Fetches one curated marketplace (`?id=`) or every one and re-reads its plugins
    /// (admin): `{reports: [{id, commit, plugins, broken, error}]}`. A marketplace that fails
    /// keeps its previous plugins and records the error. Audited as `marketplace.sync`.
    #[oai(
        path = "/api/marketplace/sync",
        method = "post",
        operation_id = "sync_marketplaces"
    )]
    async fn sync(&self, auth: AdminAuth, id: Query<Option<String>>) -> ApiResult<Json<Value>> {
        let reports = self
            .state
            .marketplace
            .sync(&auth.0.actor, id.0.as_deref())
            .await?;
        json_body(json!({ "reports": reports }))
    }

    /// Submitted entities in a status (admin; default `pending`), oldest first.
    #[oai(
        path = "/api/admin/marketplace/flea",
        method = "get",
        operation_id = "list_flea_submissions"
    )]
    async fn queue(
        &self,
        _auth: AdminAuth,
        status: Query<Option<String>>,
    ) -> ApiResult<Json<Value>> {
        let status = status.0.unwrap_or_else(|| "pending".into());
        let filter = (status != "all").then_some(status.as_str());
        let list = self.state.marketplace.flea_queue(filter).await?;
        json_body(json!({"count": list.len(), "entities": list}))
    }

    /// Approves (listed and attributed) or archives (withdrawn, attribution removed) a
    /// submitted entity (admin). Audited as `marketplace.flea_<decision>`.
    #[oai(
        path = "/api/admin/marketplace/flea/:id/:decision",
        method = "post",
        operation_id = "decide_flea_entity"
    )]
    async fn decide(
        &self,
        auth: AdminAuth,
        id: Path<String>,
        /// `approve` or `archive`.
        decision: Path<String>,
    ) -> ApiResult<Json<Value>> {
        let decision = match decision.0.as_str() {
            "approve" => FleaDecision::Approve,
            "archive" => FleaDecision::Archive,
            other => {
                return Err(
                    Error::not_found(format!("no decision '{other}': approve or archive")).into(),
                )
            }
        };
        let e = self
            .state
            .marketplace
            .decide_flea(&auth.0, &id.0, decision)
            .await?;
        json_body(e)
    }
}
