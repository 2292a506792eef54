//! Usage events as they leave the extractor: Arrow batches for the file's segment (the
//! internal driver's `events` module owns the format and the directory), and the file's
//! per-day counts and time span, kept as the chunks go by.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;
use svc_driver_internal::events::{keyed_schema, keys};
use svc_plugin_api::arrow::array::{ArrayRef, BooleanArray, Int64Array, StringArray};
use svc_plugin_api::RecordBatch;
use svc_store::usage::DailyUsage;

/// One tool invocation, slash command, sub-agent dispatch or MCP call (a `svc_telemetry`
/// row; the columns are the segment schema's, in order).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UsageEvent {
    /// SHA-256 identity (session file, session, turn, tool id, type, names).
    pub id: String,
    /// The agent's session id (or the session file's key when the file names none).
    pub session_id: String,
    /// `<user dir>/<file name>`.
    pub session_file: String,
    /// The owner's e-mail (or their directory name when no user matches it).
    pub username: String,
    /// The owner's user id, when resolved; the internal tables' row filter.
    pub user_id: Option<String>,
    /// The turn's `uuid`.
    pub event_uuid: Option<String>,
    /// The turn's `parentUuid`.
    pub parent_uuid: Option<String>,
    /// `tool_use`, `mcp_call`, `subagent` or `slash_command`.
    pub event_type: String,
    /// The tool's name.
    pub tool_name: Option<String>,
    /// The skill a `Skill` call ran.
    pub skill_name: Option<String>,
    /// The agent a `Task`/`Agent` call dispatched.
    pub subagent_type: Option<String>,
    /// The slash command, without its `/`.
    pub command_name: Option<String>,
    /// Whether the tool's result was an error.
    pub is_error: bool,
    /// `curated`, `flea` or `builtin`.
    pub source: String,
    /// The plugin or store entity it is attributed to.
    pub ref_id: Option<String>,
    /// The assistant's model.
    pub model: Option<String>,
    /// The turn's working directory.
    pub cwd: Option<String>,
    /// When it happened (store timestamp format).
    pub occurred_at: String,
    /// The extraction rules' version.
    pub processor_version: i64,
    /// When it was extracted.
    pub extracted_at: String,
}

/// The events as one batch of the segment schema, keys included.
pub fn to_batch(events: &[UsageEvent]) -> RecordBatch {
    fn text<'a>(events: &'a [UsageEvent], f: impl Fn(&'a UsageEvent) -> &'a str) -> ArrayRef {
        Arc::new(events.iter().map(|e| Some(f(e))).collect::<StringArray>())
    }
    fn opt<'a>(
        events: &'a [UsageEvent],
        f: impl Fn(&'a UsageEvent) -> &'a Option<String>,
    ) -> ArrayRef {
        Arc::new(
            events
                .iter()
                .map(|e| f(e).as_deref())
                .collect::<StringArray>(),
        )
    }
    let columns: Vec<ArrayRef> = vec![
        text(events, |e| &e.id),
        text(events, |e| &e.session_id),
        text(events, |e| &e.session_file),
        text(events, |e| &e.username),
        opt(events, |e| &e.user_id),
        opt(events, |e| &e.event_uuid),
        opt(events, |e| &e.parent_uuid),
        text(events, |e| &e.event_type),
        opt(events, |e| &e.tool_name),
        opt(events, |e| &e.skill_name),
        opt(events, |e| &e.subagent_type),
        opt(events, |e| &e.command_name),
        Arc::new(
            events
                .iter()
                .map(|e| Some(e.is_error))
                .collect::<BooleanArray>(),
        ),
        text(events, |e| &e.source),
        opt(events, |e| &e.ref_id),
        opt(events, |e| &e.model),
        opt(events, |e| &e.cwd),
        text(events, |e| &e.occurred_at),
        Arc::new(Int64Array::from_iter_values(
            events.iter().map(|e| e.processor_version),
        )),
        text(events, |e| &e.extracted_at),
        keys(events.iter().map(|e| e.username.as_str())),
        keys(events.iter().map(|e| e.session_id.as_str())),
    ];
    RecordBatch::try_new(keyed_schema(), columns).expect("events match the segment schema")
}

/// A file's events counted per (day, session, tool, source, plugin), and their time span,
/// accumulated chunk by chunk: its size is the number of distinct keys, not of events.
#[derive(Debug, Default)]
pub struct FileCounts {
    counts: BTreeMap<DailyKey, (i64, i64)>,
    first_at: Option<String>,
    last_at: Option<String>,
}

/// (day, session, tool, source, plugin).
type DailyKey = (String, String, Option<String>, String, Option<String>);

impl FileCounts {
    /// Counts a chunk of one file's events.
    pub fn add(&mut self, events: &[UsageEvent]) {
        // Counted under borrowed keys first, so a key is copied once a chunk, not per event.
        type Borrowed<'a> = (&'a str, &'a str, Option<&'a str>, &'a str, Option<&'a str>);
        let mut chunk: BTreeMap<Borrowed<'_>, (i64, i64)> = BTreeMap::new();
        for e in events {
            let day = e.occurred_at.get(..10).unwrap_or(&e.occurred_at);
            let key = (
                day,
                e.session_id.as_str(),
                e.tool_name.as_deref(),
                e.source.as_str(),
                e.ref_id.as_deref(),
            );
            let c = chunk.entry(key).or_default();
            c.0 += 1;
            c.1 += i64::from(e.is_error);
        }
        for ((day, session, tool, source, ref_id), (n, errors)) in chunk {
            let key = (
                day.to_owned(),
                session.to_owned(),
                tool.map(str::to_owned),
                source.to_owned(),
                ref_id.map(str::to_owned),
            );
            let c = self.counts.entry(key).or_default();
            c.0 += n;
            c.1 += errors;
        }
        let times = events.iter().map(|e| &e.occurred_at);
        if let Some(first) = times.clone().min() {
            if self.first_at.as_ref().is_none_or(|f| first < f) {
                self.first_at = Some(first.clone());
            }
        }
        if let Some(last) = times.max() {
            if self.last_at.as_ref().is_none_or(|l| last > l) {
                self.last_at = Some(last.clone());
            }
        }
    }

    /// The earliest and latest event times.
    pub fn span(&self) -> (Option<String>, Option<String>) {
        (self.first_at.clone(), self.last_at.clone())
    }

    /// The per-day rows of the file `session_file`; `user_key` names the owner for
    /// distinct-user counts.
    pub fn daily(self, session_file: &str, user_key: &str) -> Vec<DailyUsage> {
        self.counts
            .into_iter()
            .map(
                |((day, session_id, tool_name, source, ref_id), (invocations, error_count))| {
                    DailyUsage {
                        session_file: session_file.to_owned(),
                        day,
                        session_id,
                        user_key: user_key.to_owned(),
                        tool_name,
                        source,
                        ref_id,
                        invocations,
                        error_count,
                    }
                },
            )
            .collect()
    }
}
