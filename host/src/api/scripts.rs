//! Scheduled scripts (admin): list, create, delete, run now, run what is due.

use std::sync::Arc;

use poem_openapi::param::Path;
use poem_openapi::payload::Json;
use poem_openapi::{ApiResponse, Object, OpenApi};
use serde_json::{json, Value};
use svc_core::Error;
use svc_store::audit::Event;

use super::types::Str;
use super::{AdminAuth, ApiResult, NoContent, Tag};
use crate::jobs::scripts::{self, NewScript};
use crate::state::AppState;

pub struct ScriptsApi {
    pub state: Arc<AppState>,
}

/// A script to store.
#[derive(Object)]
struct ScriptRequest {
    /// Unique name (letters, digits, `_`, `.`, `-`).
    name: Str,
    /// One read-only SQL statement over registered tables, run with the creator's access.
    sql: Str,
    /// `every <N>m`, `every <N>h` or `daily HH:MM[,HH:MM...]` (UTC); none: only on demand.
    schedule: Option<Str>,
    /// A local table the result replaces on every run (registered on the first).
    target_table: Option<Str>,
}

#[derive(ApiResponse)]
enum CreateResponse {
    /// Stored.
    #[oai(status = 201)]
    Created(Json<Value>),
}

/// Scripts claimed by one run-due call.
#[derive(Object)]
struct Claimed {
    /// Their ids; they run in the background.
    claimed: Vec<String>,
    /// How many.
    count: usize,
}

#[OpenApi(tag = "Tag::Operations")]
impl ScriptsApi {
    /// Every stored script with its last run (admin).
    #[oai(path = "/api/scripts", method = "get", operation_id = "list_scripts")]
    async fn list(&self, _auth: AdminAuth) -> ApiResult<Json<Value>> {
        let scripts = self.state.store.list_scripts().await?;
        Ok(Json(json!({ "scripts": scripts })))
    }

    /// Stores a script owned by the caller (admin).
    #[oai(path = "/api/scripts", method = "post", operation_id = "create_script")]
    async fn create(
        &self,
        auth: AdminAuth,
        body: Json<ScriptRequest>,
    ) -> ApiResult<CreateResponse> {
        let body = body.0;
        let new = NewScript {
            name: body.name.0,
            sql: body.sql.0,
            schedule: body.schedule.map(|s| s.0),
            target_table: body.target_table.map(|s| s.0),
        };
        let row = scripts::create(&self.state, &auth.0.actor, new).await?;
        Ok(CreateResponse::Created(Json(json!(row))))
    }

    /// Deletes a script (admin).
    #[oai(
        path = "/api/scripts/:id",
        method = "delete",
        operation_id = "delete_script"
    )]
    async fn delete(&self, auth: AdminAuth, id: Path<String>) -> ApiResult<NoContent> {
        let Some(script) = self.state.store.script(&id).await? else {
            return Err(Error::not_found("Script not found").into());
        };
        self.state.store.delete_script(&id).await?;
        self.state
            .audit
            .write(
                &auth.0.actor,
                Event::new("script.delete").resource(format!("script:{}", script.name)),
            )
            .await;
        Ok(NoContent::Done)
    }

    /// Runs a script now and waits for it (admin); 409 while it already runs.
    #[oai(
        path = "/api/scripts/:id/run",
        method = "post",
        operation_id = "run_script"
    )]
    async fn run(&self, auth: AdminAuth, id: Path<String>) -> ApiResult<Json<Value>> {
        let Some(script) = self.state.store.script(&id).await? else {
            return Err(Error::not_found("Script not found").into());
        };
        if !scripts::claim(&self.state, &script.id).await? {
            return Err(
                Error::conflict(format!("script '{}' is already running", script.name)).into(),
            );
        }
        let outcome = scripts::run(&self.state, &script, &auth.0.actor).await?;
        Ok(Json(json!(outcome)))
    }

    /// Claims every due script and runs it in the background (admin; the scheduler does
    /// this every minute).
    #[oai(
        path = "/api/scripts/run-due",
        method = "post",
        operation_id = "run_due_scripts"
    )]
    async fn run_due(&self, auth: AdminAuth) -> ApiResult<Json<Claimed>> {
        let claimed = scripts::run_due(&self.state, &auth.0.actor).await?;
        Ok(Json(Claimed {
            count: claimed.len(),
            claimed,
        }))
    }
}
