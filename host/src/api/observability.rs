//! Saved views of the observability pages (`/api/admin/observability/views`): each
//! administrator's named filter payloads, owner only. The store keeps them
//! ([`svc_store::views`]); this file checks the limits and shapes the answers.

use std::sync::Arc;

use poem_openapi::param::Path;
use poem_openapi::payload::Json;
use poem_openapi::{Object, OpenApi};
use serde_json::{json, Value};
use svc_core::Error;
use svc_store::views::SaveOutcome;

use super::admin_sessions::json as json_body;
use super::{AdminAuth, ApiResult, Tag};
use crate::state::AppState;

/// The longest view name, in characters.
pub const MAX_VIEW_NAME_CHARS: usize = 80;
/// The largest payload, serialized, in bytes (64 KiB).
pub const MAX_VIEW_BYTES: usize = 65_536;
/// The most views one administrator keeps.
pub const MAX_VIEWS_PER_USER: i64 = 100;

pub struct ObservabilityApi {
    pub state: Arc<AppState>,
}

/// A view to save.
#[derive(Object)]
struct ViewBody {
    /// Its name (1..80 characters, trimmed); saving under an existing name replaces that
    /// view's payload and keeps its id.
    name: String,
    /// The payload: any JSON object up to 64 KiB serialized (filters, window, sort…).
    query: Value,
}

impl ViewBody {
    /// The trimmed name and the payload, or a 422 naming the field at fault.
    fn checked(&self) -> Result<(&str, &Value), Error> {
        let name = self.name.trim();
        if name.is_empty() {
            return Err(Error::invalid("name is required"));
        }
        if name.chars().count() > MAX_VIEW_NAME_CHARS {
            return Err(Error::invalid(format!(
                "name: at most {MAX_VIEW_NAME_CHARS} characters"
            )));
        }
        if !self.query.is_object() {
            return Err(Error::invalid("query must be a JSON object"));
        }
        if self.query.to_string().len() > MAX_VIEW_BYTES {
            return Err(Error::invalid(format!(
                "query: at most {MAX_VIEW_BYTES} bytes (64 KiB) serialized"
            )));
        }
        Ok((name, &self.query))
    }
}

fn full() -> Error {
    Error::conflict(format!(
        "saved views: at most {MAX_VIEWS_PER_USER} per user; delete one before adding another"
    ))
}

fn missing() -> Error {
    Error::not_found("view not found")
}

#[OpenApi(tag = "Tag::Activity")]
impl ObservabilityApi {
    /// The caller's saved views, newest first: `{views: [{id, name, query, created_at}]}`.
    #[oai(
        path = "/api/admin/observability/views",
        method = "get",
        operation_id = "list_observability_views"
    )]
    async fn list(&self, auth: AdminAuth) -> ApiResult<Json<Value>> {
        let views = self.state.store.saved_views(&auth.0.user.id).await?;
        json_body(json!({ "views": views }))
    }

    /// Saves a view under its name: a new name creates one (at most 100 per user: 409), an
    /// existing one replaces its payload and keeps its id.
    #[oai(
        path = "/api/admin/observability/views",
        method = "post",
        operation_id = "save_observability_view"
    )]
    async fn save(&self, auth: AdminAuth, body: Json<ViewBody>) -> ApiResult<Json<Value>> {
        let (name, query) = body.0.checked()?;
        match self
            .state
            .store
            .save_view(&auth.0.user.id, name, query, MAX_VIEWS_PER_USER)
            .await?
        {
            SaveOutcome::Saved(view) => json_body(view),
            SaveOutcome::Full => Err(full().into()),
            SaveOutcome::Missing => Err(missing().into()),
        }
    }

    /// Renames a view of the caller's and replaces its payload (404 for a view that is not
    /// theirs; 409 when another of their views has the name).
    #[oai(
        path = "/api/admin/observability/views/:id",
        method = "put",
        operation_id = "update_observability_view"
    )]
    async fn update(
        &self,
        auth: AdminAuth,
        id: Path<String>,
        body: Json<ViewBody>,
    ) -> ApiResult<Json<Value>> {
        let (name, query) = body.0.checked()?;
        let outcome = self
            .state
            .store
            .update_view(&auth.0.user.id, &id.0, name, query)
            .await
            .map_err(|e| {
                e.conflict_on_duplicate(format!("you already have a view named '{name}'"))
            })?;
        match outcome {
            SaveOutcome::Saved(view) => json_body(view),
            SaveOutcome::Full => Err(full().into()),
            SaveOutcome::Missing => Err(missing().into()),
        }
    }

    /// Deletes a view of the caller's: `{deleted: id}` (404 for a view that is not theirs).
    #[oai(
        path = "/api/admin/observability/views/:id",
        method = "delete",
        operation_id = "delete_observability_view"
    )]
    async fn delete(&self, auth: AdminAuth, id: Path<String>) -> ApiResult<Json<Value>> {
        if self.state.store.delete_view(&auth.0.user.id, &id.0).await? {
            json_body(json!({ "deleted": id.0 }))
        } else {
            Err(missing().into())
        }
    }
}
