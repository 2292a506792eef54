//! What the in-process scheduler is doing.

use std::sync::Arc;

use poem_openapi::payload::Json;
use poem_openapi::OpenApi;
use serde_json::{json, Value};

use super::{AdminAuth, ApiResult, Tag};
use crate::state::AppState;

pub struct SchedulerApi {
    pub state: Arc<AppState>,
}

#[OpenApi(tag = "Tag::Operations")]
impl SchedulerApi {
    /// Whether the scheduler runs here, whether this replica leads, and each job's last run
    /// (admin).
    #[oai(
        path = "/api/admin/scheduler",
        method = "get",
        operation_id = "scheduler_status"
    )]
    async fn status(&self, _auth: AdminAuth) -> ApiResult<Json<Value>> {
        let status = self.state.scheduler.lock().expect("scheduler lock").clone();
        Ok(Json(json!(status)))
    }
}
