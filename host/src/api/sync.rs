//! Sync trigger and status.

use std::sync::Arc;
use std::time::Instant;

use poem_openapi::payload::Json;
use poem_openapi::{Object, OpenApi};
use serde_json::{json, Value};

use super::{ApiError, ApiResult, BearerAuth, Tag};
use crate::access;
use crate::audit::Event;
use crate::state::AppState;
use crate::store::registry::QueryMode;
use crate::sync::Targets;

pub struct SyncApi {
    pub state: Arc<AppState>,
}

/// A sync pass was started.
#[derive(Object)]
struct Triggered {
    /// Always `triggered`.
    status: String,
    /// The named tables, or `all`.
    tables: Value,
    /// Where to watch it.
    message: String,
}

/// Reads the trigger body: none/null (every due table), a list of ids, or `{"tables": [...]}`.
fn targets(body: Option<&Value>) -> ApiResult<Targets> {
    let list = match body {
        None | Some(Value::Null) => return Ok(Targets::Due),
        Some(Value::Array(items)) => items,
        Some(Value::Object(o)) => match o.get("tables") {
            None | Some(Value::Null) => return Ok(Targets::Due),
            Some(Value::Array(items)) => items,
            Some(_) => {
                return Err(ApiError::unprocessable(
                    "`tables` must be a list of strings",
                ))
            }
        },
        Some(_) => {
            return Err(ApiError::unprocessable(
                "body must be a list of table ids, an object with a `tables` list, or null",
            ))
        }
    };
    list.iter()
        .map(|v| v.as_str().map(str::to_owned))
        .collect::<Option<Vec<_>>>()
        .map(Targets::Named)
        .ok_or_else(|| ApiError::unprocessable("all entries in `tables` must be strings"))
}

#[OpenApi(tag = "Tag::Operations")]
impl SyncApi {
    /// Starts a sync pass in the background (admin). No body (or null) syncs every
    /// materialized table whose schedule is due; a list of ids or names, or
    /// `{"tables": [...]}`, syncs those now. 409 while a pass runs.
    #[oai(path = "/api/sync/trigger", method = "post")]
    async fn trigger(&self, auth: BearerAuth, body: Vec<u8>) -> ApiResult<Json<Triggered>> {
        let started = Instant::now();
        let result = async {
            auth.admin()?;
            // Read by hand: poem-openapi has no optional JSON body, and "no body" is a request.
            let body: Option<Value> = if body.iter().all(u8::is_ascii_whitespace) {
                None
            } else {
                Some(serde_json::from_slice(&body).map_err(|e| {
                    ApiError::bad_request(format!("the body is not JSON: {e}"))
                })?)
            };
            let targets = targets(body.as_ref())?;
            let tables = match &targets {
                Targets::Due => json!("all"),
                Targets::Named(names) => json!(names),
            };
            if !self
                .state
                .sync
                .trigger(self.state.clone(), targets, auth.0.actor.clone())
            {
                return Err(ApiError::kind(
                    poem::http::StatusCode::CONFLICT,
                    "sync_already_in_progress",
                    "A sync is already running; try again when GET /api/sync/status says it is done",
                    json!({}),
                ));
            }
            Ok(tables)
        }
        .await;
        let mut event = Event::new("sync.trigger");
        event = match &result {
            Ok(tables) => event
                .resource(match tables {
                    Value::Array(t) if t.len() == 1 => t[0].as_str().unwrap_or_default().to_owned(),
                    Value::Array(t) => format!("{} tables", t.len()),
                    _ => "all_tables".to_owned(),
                })
                .param("tables", tables.clone()),
            Err(e) => event.failed(e.status().as_u16(), &e.to_string()),
        };
        self.state
            .audit
            .write(&auth.0.actor, event.timed(started))
            .await;
        result.map(|tables| {
            Json(Triggered {
                status: "triggered".into(),
                tables,
                message: "Sync started in the background; GET /api/sync/status shows its progress"
                    .into(),
            })
        })
    }

    /// Whether a sync pass runs, the last pass's summary, and the sync state of every
    /// materialized table the caller can see.
    #[oai(path = "/api/sync/status", method = "get")]
    async fn status(&self, auth: BearerAuth) -> ApiResult<Json<Value>> {
        // Read before the states: a pass records each table before it clears the flag, so
        // "not locked" then guarantees the states below include the finished pass.
        let locked = self.state.sync.running();
        let registry = access::registry(&self.state).await?;
        let readable = access::readable_ids(&self.state, &auth.0).await?;
        let states = self.state.store.sync_states().await?;
        let tables: Vec<Value> = registry
            .rows()
            .iter()
            .filter(|r| r.query_mode == QueryMode::Materialized)
            .filter(|r| access::is_visible(r, readable.as_deref()))
            .map(|r| {
                let mut v = json!(states.get(&r.id).cloned().unwrap_or_default());
                v["table_id"] = json!(r.id);
                v["sync_schedule"] = json!(r.sync_schedule);
                v
            })
            .collect();
        let last = if auth.0.is_admin {
            json!(self.state.sync.last())
        } else {
            Value::Null
        };
        Ok(Json(json!({
            "locked": locked,
            "last_pass": last,
            "tables": tables,
        })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trigger_bodies() {
        assert_eq!(targets(None).unwrap(), Targets::Due);
        assert_eq!(
            targets(Some(&json!({"tables": null}))).unwrap(),
            Targets::Due
        );
        assert_eq!(
            targets(Some(&json!(["a", "b"]))).unwrap(),
            Targets::Named(vec!["a".into(), "b".into()])
        );
        assert_eq!(
            targets(Some(&json!({"tables": ["a"], "extra": 1}))).unwrap(),
            Targets::Named(vec!["a".into()])
        );
        for bad in [json!(5), json!({"tables": "a"}), json!([1])] {
            assert_eq!(
                targets(Some(&bad)).unwrap_err().status().as_u16(),
                422,
                "{bad}"
            );
        }
    }
}
