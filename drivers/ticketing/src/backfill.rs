//! Backfill: paging through the tracker's REST search (Jira Cloud's `/rest/api/3/search`
//! shape) for issues updated since the last backfill, each logged like a delivery so it is
//! folded by the same rules as webhooks (a backfilled issue is ordered by its `updated` time
//! and latest changelog id, and never overrides a newer webhook).

use std::time::Duration;

use svc_plugin_api::{DriverError, ErrorKind, Result};

use crate::log::{Origin, Record};
use crate::payload;
use crate::rawjson;
use crate::tracker::{now_ms, Refused, Tracker};

/// Issues asked for per page (the tracker may send fewer).
const PAGE: u32 = 100;
/// How far before the last mark a backfill looks again. JQL times are in the account's
/// time zone and to the minute; re-reading a day is harmless (replays are deduplicated) and
/// covers every zone.
const OVERLAP_MS: i64 = 24 * 60 * 60 * 1000;

/// What a backfill did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Backfilled {
    /// Pages fetched.
    pub pages: u32,
    /// Issues read.
    pub issues: u64,
    /// Issues that were new or changed (the rest were already known).
    pub new: u64,
    /// Issues of other projects, or that did not read as issues.
    pub skipped: u64,
    /// The JQL asked.
    pub jql: String,
}

fn upstream(message: String) -> DriverError {
    DriverError::new(ErrorKind::Upstream, message)
}

/// The search's JQL: the kept projects, issues updated since `since_ms` (less the overlap).
pub fn jql(project_keys: &[String], since_ms: Option<i64>) -> String {
    let mut clauses = Vec::new();
    if !project_keys.is_empty() {
        let keys: Vec<String> = project_keys.iter().map(|k| format!("\"{k}\"")).collect();
        clauses.push(format!("project in ({})", keys.join(", ")));
    }
    if let Some(since) = since_ms {
        if let Some(t) = chrono::DateTime::from_timestamp_millis(since - OVERLAP_MS) {
            clauses.push(format!("updated >= \"{}\"", t.format("%Y/%m/%d %H:%M")));
        }
    }
    let filter = clauses.join(" AND ");
    format!("{filter} ORDER BY updated ASC").trim().to_owned()
}

/// Runs one backfill for `tracker`.
pub async fn run(tracker: &Tracker) -> Result<Backfilled> {
    let name = &tracker.name;
    let config = &tracker.config;
    let (Some(base), Some(user)) = (&config.base_url, &config.user) else {
        return Err(DriverError::new(
            ErrorKind::NotConfigured,
            format!(
            "connection '{name}' cannot backfill: set base_url, user and token_env (or token_file)"
        ),
        ));
    };
    let token = config
        .token()
        .map_err(|e| {
            DriverError::new(
                ErrorKind::NotConfigured,
                format!("connection '{name}': {e}"),
            )
        })?
        .ok_or_else(|| {
            DriverError::new(
                ErrorKind::NotConfigured,
                format!("connection '{name}' cannot backfill: set token_env or token_file"),
            )
        })?;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .map_err(|e| DriverError::internal(e.to_string()))?;
    let url = format!("{}/rest/api/3/search", base.trim_end_matches('/'));
    let mut done = Backfilled {
        jql: jql(&config.project_keys, tracker.backfill_since().await),
        ..Backfilled::default()
    };
    let mut start_at = 0u64;
    let mut newest: Option<i64> = None;
    loop {
        let response = client
            .get(&url)
            .basic_auth(user, Some(&token))
            .query(&[
                ("jql", done.jql.as_str()),
                ("startAt", &start_at.to_string()),
                ("maxResults", &PAGE.to_string()),
                ("expand", "changelog"),
                ("fields", "*all"),
            ])
            .send()
            .await
            .map_err(|e| upstream(format!("backfill of '{name}': {url}: {e}")))?;
        let status = response.status();
        let text = response
            .text()
            .await
            .map_err(|e| upstream(format!("backfill of '{name}': reading the page: {e}")))?;
        if !status.is_success() {
            let said: String = text.chars().take(200).collect();
            return Err(upstream(format!(
                "backfill of '{name}': the tracker answered {status}: {said}"
            )));
        }
        let page: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| upstream(format!("backfill of '{name}': the page is not JSON: {e}")))?;
        let total = page.get("total").and_then(serde_json::Value::as_u64);
        let issues = rawjson::member(&text, "issues")
            .map(rawjson::elements)
            .unwrap_or_default();
        done.pages += 1;
        let n = issues.len() as u64;
        for raw in issues {
            done.issues += 1;
            let Ok(parsed) = payload::parse(raw.as_bytes(), Origin::Backfill) else {
                done.skipped += 1;
                continue;
            };
            let (Some(key), true) = (parsed.issue_key(), config.keeps_project(parsed.project()))
            else {
                done.skipped += 1;
                continue;
            };
            let updated = parsed.timestamp_ms.unwrap_or(0);
            let record = Record {
                delivery_id: format!("backfill:{key}:{updated}"),
                received_at_ms: now_ms(),
                origin: Origin::Backfill,
                body: raw.as_bytes().to_vec(),
            };
            match tracker.log_once(record).await {
                Ok(true) => done.new += 1,
                Ok(false) => {}
                Err(Refused::Unavailable(e)) => return Err(DriverError::internal(e)),
                Err(other) => return Err(DriverError::internal(format!("{other:?}"))),
            }
            newest = Some(newest.map_or(updated, |n| n.max(updated)));
        }
        start_at += n;
        if n == 0 || total.is_none_or(|t| start_at >= t) {
            break;
        }
    }
    if let Some(newest) = newest {
        tracker.set_backfill_since(newest).await;
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_search_asks_for_kept_projects_since_the_mark_less_a_day() {
        assert_eq!(jql(&[], None), "ORDER BY updated ASC");
        assert_eq!(
            jql(&["OPS".into(), "DATA".into()], Some(1_700_000_000_000)),
            "project in (\"OPS\", \"DATA\") AND updated >= \"2023/11/13 22:13\" ORDER BY updated ASC"
        );
    }
}
