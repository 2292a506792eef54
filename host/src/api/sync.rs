//! Sync trigger and status.

use std::sync::Arc;
use std::time::Instant;

use poem_openapi::payload::Json;
use poem_openapi::{Object, OpenApi};
use serde_json::{json, Value};
use svc_auth::access;
use svc_core::{Error, ErrorKind};
use svc_plugin_api::SyncMode;
use svc_store::audit::Event;

use super::{ApiResult, BearerAuth, Tag};
use crate::jobs::sync::Targets;
use crate::state::AppState;

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

/// Reads the trigger body's mode: `{"full": true}` rewrites every copy from scratch.
fn mode(body: Option<&Value>) -> ApiResult<SyncMode> {
    match body.and_then(|b| b.get("full")) {
        None | Some(Value::Null) | Some(Value::Bool(false)) => Ok(SyncMode::Auto),
        Some(Value::Bool(true)) => Ok(SyncMode::Full),
        Some(_) => Err(Error::invalid("`full` must be true or false").into()),
    }
}

/// Reads the trigger body: none/null (every due table), a list of ids, or `{"tables": [...]}`.
fn targets(body: Option<&Value>) -> ApiResult<Targets> {
    let list = match body {
        None | Some(Value::Null) => return Ok(Targets::Due),
        Some(Value::Array(items)) => items,
        Some(Value::Object(o)) => match o.get("tables") {
            None | Some(Value::Null) => return Ok(Targets::Due),
            Some(Value::Array(items)) => items,
            Some(_) => return Err(Error::invalid("`tables` must be a list of strings").into()),
        },
        Some(_) => {
            return Err(Error::invalid(
                "body must be a list of table ids, an object with a `tables` list, or null",
            )
            .into())
        }
    };
    list.iter()
        .map(|v| v.as_str().map(str::to_owned))
        .collect::<Option<Vec<_>>>()
        .map(Targets::Named)
        .ok_or_else(|| Error::invalid("all entries in `tables` must be strings").into())
}

#[OpenApi(tag = "Tag::Operations")]
impl SyncApi {
    /// Starts a sync pass in the background (admin). No body (or null) syncs every
    /// materialized table whose schedule is due; a list of ids or names, or
    /// `{"tables": [...]}`, syncs those now; `"full": true` in the object rewrites each copy
    /// from scratch instead of incrementally. 409 while a pass runs.
    #[oai(
        path = "/api/sync/trigger",
        method = "post",
        operation_id = "trigger_sync"
    )]
    async fn trigger(&self, auth: BearerAuth, body: Vec<u8>) -> ApiResult<Json<Triggered>> {
        let started = Instant::now();
        let result = async {
            auth.admin()?;
            // Read by hand: poem-openapi has no optional JSON body, and "no body" is a request.
            let body: Option<Value> = if body.iter().all(u8::is_ascii_whitespace) {
                None
            } else {
                Some(serde_json::from_slice(&body).map_err(|e| {
                    Error::bad_request(format!("the body is not JSON: {e}"))
                })?)
            };
            let targets = targets(body.as_ref())?;
            let mode = mode(body.as_ref())?;
            let tables = match &targets {
                Targets::Due => json!("all"),
                Targets::Named(names) => json!(names),
            };
            if !self
                .state
                .sync
                .trigger(self.state.clone(), targets, mode, auth.0.actor.clone())
            {
                return Err(Error::coded(ErrorKind::Conflict,
                    "sync_already_in_progress",
                    "A sync is already running; try again when GET /api/sync/status says it is done",
                    json!({}),
                ).into());
            }
            Ok(tables)
        }
        .await;
        let event = Event::new("sync.trigger");
        self.state
            .audit
            .write_outcome(&auth.0.actor, event, started, &result, |event, tables| {
                event
                    .resource(match tables {
                        Value::Array(t) if t.len() == 1 => {
                            t[0].as_str().unwrap_or_default().to_owned()
                        }
                        Value::Array(t) => format!("{} tables", t.len()),
                        _ => "all_tables".to_owned(),
                    })
                    .param("tables", tables.clone())
            })
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

    /// Whether a sync pass runs, the last pass's summary, the table being synced now with its
    /// rows and bytes so far (`current`, admins; null when idle), and the sync state of every
    /// materialized table the caller can see.
    #[oai(
        path = "/api/sync/status",
        method = "get",
        operation_id = "sync_status"
    )]
    async fn status(&self, auth: BearerAuth) -> ApiResult<Json<Value>> {
        // Read before the states: a pass records each table before it clears the flag, so
        // "not locked" then guarantees the states below include the finished pass.
        let locked = self.state.sync.running();
        let registry = self.state.access.registry().await?;
        let readable = self.state.access.readable_ids(&auth.0).await?;
        let states = self.state.store.sync_states().await?;
        let tables: Vec<Value> = registry
            .rows()
            .iter()
            .filter(|r| r.query_mode.is_materialized())
            .filter(|r| access::is_visible(r, readable.as_deref()))
            .map(|r| {
                let mut v = json!(states.get(&r.id).cloned().unwrap_or_default());
                v["table_id"] = json!(r.id);
                v["sync_schedule"] = json!(r.sync_schedule);
                v
            })
            .collect();
        let (last, current) = if auth.0.is_admin {
            (
                json!(self.state.sync.last()),
                json!(self.state.sync.current()),
            )
        } else {
            (Value::Null, Value::Null)
        };
        Ok(Json(json!({
            "locked": locked,
            "last_pass": last,
            "current": current,
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
