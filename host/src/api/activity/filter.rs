//! The filter shared by the timeline, the facets and the KPIs: parsed and checked once,
//! so the cards above the observability table count exactly the rows the table lists.

use chrono::{Duration, Utc};
use serde_json::{json, Value};
use svc_core::clock::{format_ts, TimeRange};
use svc_core::Error;
use svc_store::audit::{AuditFilter, Event, ResultFilter, SYSTEM_SOURCE};

/// The longest window by `since_minutes` (30 days).
pub(crate) const MAX_SINCE_MINUTES: u32 = 43_200;
/// The default window (24 hours).
pub(crate) const DEFAULT_SINCE_MINUTES: u32 = 1_440;
/// The longest `q`, in characters.
const MAX_Q_CHARS: usize = 16_384;
/// The most actions `action_in` may name.
const MAX_ACTIONS: usize = 100;
/// What `client_kind` may be; `source` may also be `system` (rows no client caused).
const CLIENT_KINDS: &[&str] = &["cli", "web", "api", "scheduler", "console", "mcp"];

/// The filter a timeline, facets or KPIs request gave, as given.
#[derive(Default)]
pub(crate) struct Params {
    pub since_minutes: Option<u32>,
    pub since: Option<String>,
    pub until: Option<String>,
    pub user_id: Option<String>,
    pub action_prefix: Option<String>,
    pub action_in: Option<String>,
    pub resource: Option<String>,
    pub result: Option<String>,
    pub client_kind: Option<String>,
    pub source: Option<String>,
    pub correlation_id: Option<String>,
    pub q: Option<String>,
}

fn given(v: Option<String>) -> Option<String> {
    v.filter(|v| !v.is_empty())
}

impl Params {
    /// The filter and, for a window relative to now, its minutes; or a 422 naming the field
    /// at fault.
    pub fn filter(self) -> Result<(AuditFilter, Option<u32>), Error> {
        let mut relative = None;
        let (since, until) = match (self.since_minutes, &self.since, &self.until) {
            (Some(_), Some(_), _) | (Some(_), _, Some(_)) => {
                return Err(Error::invalid(
                    "give since_minutes or since/until, not both",
                ))
            }
            (None, None, None) | (Some(_), None, None) => {
                let minutes = self.since_minutes.unwrap_or(DEFAULT_SINCE_MINUTES);
                if !(1..=MAX_SINCE_MINUTES).contains(&minutes) {
                    return Err(Error::invalid(format!(
                        "since_minutes must be between 1 and {MAX_SINCE_MINUTES}"
                    )));
                }
                relative = Some(minutes);
                let since = format_ts(Utc::now() - Duration::minutes(i64::from(minutes)));
                (Some(since), None)
            }
            (None, since, until) => {
                let range = TimeRange::parse(since.as_deref(), until.as_deref())?;
                (range.since, range.until)
            }
        };
        let result = match given(self.result) {
            None => None,
            Some(r) => Some(ResultFilter::parse(&r).ok_or_else(|| {
                Error::invalid(format!(
                    "result must be success, error or error.<status> (e.g. error.403), not '{r}'"
                ))
            })?),
        };
        let kind = |field: &str, v: Option<String>, system: bool| -> Result<_, Error> {
            match given(v) {
                Some(k)
                    if !(CLIENT_KINDS.contains(&k.as_str()) || system && k == SYSTEM_SOURCE) =>
                {
                    let mut allowed = CLIENT_KINDS.join(", ");
                    if system {
                        allowed.push_str(", system");
                    }
                    Err(Error::invalid(format!(
                        "{field} must be one of {allowed}, not '{k}'"
                    )))
                }
                k => Ok(k),
            }
        };
        let action_in: Vec<String> = given(self.action_in)
            .map(|list| {
                list.split(',')
                    .map(str::trim)
                    .filter(|a| !a.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        if action_in.len() > MAX_ACTIONS {
            return Err(Error::invalid(format!(
                "action_in names at most {MAX_ACTIONS} actions"
            )));
        }
        let q = given(self.q);
        if q.as_ref().is_some_and(|q| q.chars().count() > MAX_Q_CHARS) {
            return Err(Error::invalid(format!(
                "q must be at most {MAX_Q_CHARS} characters"
            )));
        }
        let filter = AuditFilter {
            since,
            until,
            user_id: given(self.user_id),
            action_prefix: given(self.action_prefix),
            action_in,
            resource: given(self.resource),
            result,
            client_kind: kind("client_kind", self.client_kind, false)?,
            source: kind("source", self.source, true)?,
            correlation_id: given(self.correlation_id),
            q,
        };
        Ok((filter, relative))
    }
}

/// The filter as the response and the audit row show it.
fn describe(f: &AuditFilter) -> Value {
    json!({
        "since": f.since,
        "until": f.until,
        "user_id": f.user_id,
        "action_prefix": f.action_prefix,
        "action_in": f.action_in,
        "resource": f.resource,
        "result": f.result.map(|r| match r {
            ResultFilter::Success => "success".to_owned(),
            ResultFilter::Error => "error".to_owned(),
            ResultFilter::Status(s) => format!("error.{s}"),
        }),
        "client_kind": f.client_kind,
        "source": f.source,
        "correlation_id": f.correlation_id,
        "q": f.q,
    })
}

/// `event` with each given value of `pairs` as a parameter (null, false and empty lists are
/// "not given" and left out, so the same read always has the same parameters).
pub(crate) fn with_given(
    mut event: Event,
    pairs: impl IntoIterator<Item = (String, Value)>,
) -> Event {
    for (k, v) in pairs {
        if !(v.is_null() || v == json!(false) || v == json!([])) {
            event = event.param(&k, v);
        }
    }
    event
}

/// The `activity.read` row of a read of `endpoint` under `filter`: the filter as asked (a
/// relative window as its minutes, not the instant it resolved to), so repeating a read
/// within the suppression window is one audited read; paging is never part of it.
pub(crate) fn read_event(endpoint: &str, filter: &AuditFilter, window: Option<u32>) -> Event {
    let mut asked = describe(filter);
    if let Some(minutes) = window {
        asked["since"] = Value::Null;
        asked["since_minutes"] = minutes.into();
    }
    let event = Event::new("activity.read")
        .resource("activity")
        .param("endpoint", endpoint);
    match asked {
        Value::Object(fields) => with_given(event, fields),
        _ => event,
    }
}

/// The filter as a response shows it: with `since_minutes` when the window is relative.
pub(crate) fn shown(filter: &AuditFilter, window: Option<u32>) -> Value {
    let mut shown = describe(filter);
    shown["since_minutes"] = window.map_or(Value::Null, Value::from);
    shown
}
