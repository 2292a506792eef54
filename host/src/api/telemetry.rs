//! Telemetry for administrators: facets, KPIs, event pages and the summary; and the
//! pipeline — run it, reprocess, prune, and see its runs.

use std::sync::Arc;
use std::time::Instant;

use poem_openapi::param::Query;
use poem_openapi::payload::Json;
use poem_openapi::{Object, OpenApi};
use serde_json::{json, Value};
use svc_core::Error;
use svc_store::audit::Event;
use svc_store::usage::FileScope;
use svc_telemetry::browse::{Filters, GroupBy, TimeRange, Window, DEFAULT_WINDOW_MINUTES};
use svc_telemetry::{RunReport, Trigger};

use super::activity::filter::with_given;
use super::export::{self, ExportAudit, ExportBody, ExportFormat};
use super::{AdminAuth, ApiResult, Tag};
use crate::state::AppState;

pub struct TelemetryApi {
    pub state: Arc<AppState>,
}

/// Which session files to read again.
#[derive(Object, Default)]
struct ReprocessRequest {
    /// One user's files (their user id); default: everyone's.
    user_id: Option<String>,
    /// One file, `<user id>/<file name>` as `session_file` shows it.
    session_file: Option<String>,
    /// Rebuild every day's rollups, not only the affected days.
    #[oai(default)]
    full_rollup: bool,
}

/// What to prune.
#[derive(Object, Default)]
struct PruneRequest {
    /// Keep this many days (default `SVC_TELEMETRY_RETENTION_DAYS`).
    retention_days: Option<u32>,
}

/// What a prune deleted.
#[derive(Object)]
struct Pruned {
    /// Days kept.
    retention_days: u32,
    /// Events deleted.
    events: u64,
    /// Session summaries deleted.
    sessions: u64,
}

/// A pipeline run, as recorded.
#[derive(Object)]
struct RunView {
    /// Run id.
    id: String,
    /// `schedule`, `upload`, `reprocess` or `manual`.
    trigger: String,
    /// When it started.
    started_at: String,
    /// When it ended (null while running).
    finished_at: Option<String>,
    /// `running`, `ok` or `failed`.
    status: Option<String>,
    /// Files scanned/processed/unchanged/parked/failed, bytes, events, malformed lines,
    /// timings, and each failed file with its error.
    report: Option<Value>,
}

/// A file the pipeline has given up on until it changes.
#[derive(Object)]
struct ParkedFile {
    /// `<user id>/<file name>`.
    session_file: String,
    /// Failures in a row.
    failures: i64,
    /// The latest error.
    last_error: Option<String>,
}

/// The pipeline's state.
#[derive(Object)]
struct PipelineView {
    /// Session files tracked.
    files: u64,
    /// Files whose last attempt failed (retried next run).
    failing: u64,
    /// Files parked after repeated failures (read again when they change or on reprocess).
    parked: Vec<ParkedFile>,
    /// The latest runs, newest first.
    runs: Vec<RunView>,
}

fn report_json(r: &RunReport) -> Value {
    serde_json::to_value(r).unwrap_or_default()
}

impl TelemetryApi {
    /// Runs the pipeline and audits the run as `action`.
    async fn run_audited(
        &self,
        auth: &AdminAuth,
        action: &str,
        scope: Option<FileScope>,
        full_rollup: bool,
    ) -> ApiResult<Json<Value>> {
        let started = Instant::now();
        let pipeline = &self.state.pipeline;
        let result = async {
            let forgotten = match &scope {
                Some(s) => pipeline.forget(s).await?,
                None => 0,
            };
            let trigger = if scope.is_some() {
                Trigger::Reprocess
            } else {
                Trigger::Manual
            };
            let report = pipeline.run(trigger, full_rollup).await?;
            Ok::<_, Error>((forgotten, report))
        }
        .await;
        let resource = match &scope {
            Some(FileScope::User(u)) => format!("user:{u}"),
            Some(FileScope::File(f)) => format!("session:{f}"),
            _ => "telemetry".to_owned(),
        };
        self.state
            .audit
            .write_outcome(
                &auth.0.actor,
                Event::new(action).resource(resource),
                started,
                &result,
                |event, (forgotten, r)| {
                    event
                        .param("files_reset", *forgotten)
                        .param("processed", r.processed)
                        .param("failed", r.failed)
                        .param("events", r.events)
                        .param("malformed_lines", r.malformed_lines)
                },
            )
            .await;
        let (_, report) = result?;
        Ok(Json(report_json(&report)))
    }
}

/// The shared filters from their query parameters (reference §5.1).
#[allow(clippy::too_many_arguments)]
pub(crate) fn filters(
    since_minutes: Option<u32>,
    username: Option<String>,
    tool_name: Option<String>,
    source: Option<String>,
    event_type: Option<String>,
    only_errors: Option<bool>,
    q: Option<String>,
) -> Filters {
    Filters {
        since_minutes: since_minutes.unwrap_or(DEFAULT_WINDOW_MINUTES),
        username,
        tool_name,
        source,
        event_type,
        only_errors: only_errors.unwrap_or(false),
        q,
        ..Filters::default()
    }
}

/// The `usage.read` row of a telemetry read: the endpoint and the filters as given, paging
/// left out (paging through one result is one read; the writer suppresses repeats).
pub(crate) fn read_event(endpoint: &str, f: &Filters, extra: &[(&str, Option<String>)]) -> Event {
    let pairs = [
        ("since_minutes", json!(f.since_minutes)),
        ("username", json!(f.username)),
        ("tool_name", json!(f.tool_name)),
        ("source", json!(f.source)),
        ("event_type", json!(f.event_type)),
        ("only_errors", json!(f.only_errors)),
        ("q", json!(f.q)),
    ]
    .into_iter()
    .chain(extra.iter().map(|(k, v)| (*k, json!(v))))
    .map(|(k, v)| (k.to_owned(), v));
    with_given(
        Event::new("usage.read")
            .resource("telemetry")
            .param("endpoint", endpoint),
        pairs,
    )
}

fn json(v: impl serde::Serialize) -> ApiResult<Json<Value>> {
    Ok(Json(serde_json::to_value(v).map_err(Error::internal)?))
}

#[OpenApi(prefix_path = "/api/admin/telemetry", tag = "Tag::Telemetry")]
impl TelemetryApi {
    /// The most frequent users (top 50), tools (50), sources (20) and event types (20) of
    /// a window, each `{value, count}`, most first (ties by value).
    #[oai(
        path = "/facets",
        method = "get",
        operation_id = "get_telemetry_facets"
    )]
    async fn facets(
        &self,
        auth: AdminAuth,
        /// Window in minutes, 1..525600 (default 10080, a week).
        since_minutes: Query<Option<u32>>,
    ) -> ApiResult<Json<Value>> {
        let started = Instant::now();
        let window = since_minutes.0.unwrap_or(DEFAULT_WINDOW_MINUTES);
        let result = self.state.telemetry.facets(window).await;
        let f = Filters {
            since_minutes: window,
            ..Filters::default()
        };
        let event = read_event("facets", &f, &[]);
        self.state
            .audit
            .write_read_outcome(&auth.0.actor, event, started, &result)
            .await;
        json(result?)
    }

    /// Events, distinct users and tools, errors and the error rate under the filters.
    #[allow(clippy::too_many_arguments)]
    #[oai(path = "/kpis", method = "get", operation_id = "get_telemetry_kpis")]
    async fn kpis(
        &self,
        auth: AdminAuth,
        /// Window in minutes, 1..525600 (default 10080, a week).
        since_minutes: Query<Option<u32>>,
        /// Exact owner (e-mail, or directory name when no user matched).
        username: Query<Option<String>>,
        /// Exact tool name.
        tool_name: Query<Option<String>>,
        /// Exact source: `curated`, `flea` or `builtin`.
        source: Query<Option<String>>,
        /// Exact event type: `tool_use`, `mcp_call`, `subagent`, `slash_command`.
        event_type: Query<Option<String>>,
        /// Only failed calls.
        only_errors: Query<Option<bool>>,
        /// Text in the tool, skill, sub-agent or command name (case-sensitive, literal).
        q: Query<Option<String>>,
    ) -> ApiResult<Json<Value>> {
        let f = filters(
            since_minutes.0,
            username.0,
            tool_name.0,
            source.0,
            event_type.0,
            only_errors.0,
            q.0,
        );
        let started = Instant::now();
        let result = self.state.telemetry.kpis(&f).await;
        let event = read_event("kpis", &f, &[]);
        self.state
            .audit
            .write_read_outcome(&auth.0.actor, event, started, &result)
            .await;
        json(result?)
    }

    /// A page of events under the filters, grouped (`group_by` = `day`, `username`,
    /// `tool_name`, `source` or `ref_id`: `{bucket, invocations, distinct_users,
    /// distinct_sessions, errors}`) or raw (any other `group_by`, or none). `sort` is
    /// `<column>:<asc|desc>` (default `invocations:desc`; raw rows sort by time only); an
    /// unknown column falls back to the default. `next_offset` is null on the last page.
    #[allow(clippy::too_many_arguments)]
    #[oai(path = "/query", method = "get", operation_id = "query_telemetry")]
    async fn query(
        &self,
        auth: AdminAuth,
        /// Window in minutes, 1..525600 (default 10080, a week).
        since_minutes: Query<Option<u32>>,
        /// Exact owner (e-mail, or directory name when no user matched).
        username: Query<Option<String>>,
        /// Exact tool name.
        tool_name: Query<Option<String>>,
        /// Exact source: `curated`, `flea` or `builtin`.
        source: Query<Option<String>>,
        /// Exact event type: `tool_use`, `mcp_call`, `subagent`, `slash_command`.
        event_type: Query<Option<String>>,
        /// Only failed calls.
        only_errors: Query<Option<bool>>,
        /// Text in the tool, skill, sub-agent or command name (case-sensitive, literal).
        q: Query<Option<String>>,
        /// `day`, `username`, `tool_name`, `source` or `ref_id`; anything else: raw rows.
        group_by: Query<Option<String>>,
        /// `<column>:<asc|desc>`.
        sort: Query<Option<String>>,
        /// Rows per page, 1..500 (default 100).
        limit: Query<Option<usize>>,
        /// Rows to skip, 0..50000.
        offset: Query<Option<usize>>,
    ) -> ApiResult<Json<Value>> {
        let f = filters(
            since_minutes.0,
            username.0,
            tool_name.0,
            source.0,
            event_type.0,
            only_errors.0,
            q.0,
        );
        let started = Instant::now();
        let group = group_by.0.as_deref().and_then(GroupBy::parse);
        let result = self
            .state
            .telemetry
            .query(
                &f,
                group,
                sort.0.as_deref(),
                limit.0.unwrap_or(100),
                offset.0.unwrap_or(0),
            )
            .await;
        let event = read_event("query", &f, &[("group_by", group_by.0), ("sort", sort.0)]);
        self.state
            .audit
            .write_read_outcome(&auth.0.actor, event, started, &result)
            .await;
        json(result?)
    }

    /// The window's top tools and users, the busiest tools' error rates, daily active
    /// users for the 30 days ending today, and the slowest audited actions (p50/p95/p99).
    /// Audited as `usage.summary` (once a minute per admin and window).
    #[oai(
        path = "/summary",
        method = "get",
        operation_id = "get_telemetry_summary"
    )]
    async fn summary(
        &self,
        auth: AdminAuth,
        /// `7d` (default), `30d` or `all`.
        window: Query<Option<String>>,
    ) -> ApiResult<Json<Value>> {
        let started = Instant::now();
        let name = window.0.unwrap_or_else(|| "7d".into());
        let result = async {
            let w = Window::parse(&name)?;
            self.state.telemetry.summary(w).await
        }
        .await;
        let event = Event::new("usage.summary")
            .resource("telemetry")
            .param("window", name.as_str())
            .outcome(&result, |event, _| event)
            .timed(started);
        self.state.audit.write_read(&auth.0.actor, event).await;
        json(result?)
    }

    /// Every event under the filters as a file, streamed in constant memory: `csv`
    /// (default), `ndjson` or `parquet`. The time range is `since`/`until` (a date or ISO
    /// 8601 date-time; `until` exclusive) or `since_minutes`, not both; without either, all
    /// events. Rows come session file by session file, unsorted. Audited as `usage.export`
    /// with the filters, `row_count` and `bytes` when the stream ends.
    #[allow(clippy::too_many_arguments)]
    #[oai(path = "/export", method = "get", operation_id = "export_telemetry")]
    async fn export(
        &self,
        auth: AdminAuth,
        /// `csv` (default), `ndjson` or `parquet`.
        format: Query<Option<ExportFormat>>,
        /// Events at or after this date or date-time.
        since: Query<Option<String>>,
        /// Events before this date or date-time.
        until: Query<Option<String>>,
        /// Instead of `since`/`until`: events of the last this many minutes, 1..525600.
        since_minutes: Query<Option<u32>>,
        /// Exact owner id.
        user_id: Query<Option<String>>,
        /// Exact owner (e-mail, or directory name when no user matched).
        username: Query<Option<String>>,
        /// Exact tool name.
        tool_name: Query<Option<String>>,
        /// Exact source: `curated`, `flea` or `builtin`.
        source: Query<Option<String>>,
        /// Exact event type: `tool_use`, `mcp_call`, `subagent`, `slash_command`.
        event_type: Query<Option<String>>,
        /// Only failed calls.
        only_errors: Query<Option<bool>>,
        /// Text in the tool, skill, sub-agent or command name (case-sensitive, literal).
        q: Query<Option<String>>,
    ) -> ApiResult<ExportBody> {
        let started = Instant::now();
        let format = format.0.unwrap_or_default();
        let range = match since_minutes.0 {
            Some(_) if since.0.is_some() || until.0.is_some() => {
                return Err(Error::invalid("Give since/until or since_minutes, not both").into())
            }
            Some(_) => None,
            None => Some(TimeRange::parse(since.0.as_deref(), until.0.as_deref())?),
        };
        let mut f = filters(
            since_minutes.0,
            username.0,
            tool_name.0,
            source.0,
            event_type.0,
            only_errors.0,
            q.0,
        );
        f.user_id = user_id.0;
        f.range = range;
        let mut event = Event::new("usage.export")
            .resource("telemetry")
            .param("format", format!("{format:?}").to_lowercase());
        for (key, value) in [
            ("since", f.range.as_ref().and_then(|r| r.since.as_deref())),
            ("until", f.range.as_ref().and_then(|r| r.until.as_deref())),
            ("user_id", f.user_id.as_deref()),
            ("username", f.username.as_deref()),
            ("tool_name", f.tool_name.as_deref()),
            ("source", f.source.as_deref()),
            ("event_type", f.event_type.as_deref()),
            ("q", f.q.as_deref()),
        ] {
            if let Some(v) = value {
                event = event.param(key, v);
            }
        }
        if let Some(m) = since_minutes.0 {
            event = event.param("since_minutes", m);
        }
        if f.only_errors {
            event = event.param("only_errors", true);
        }
        let planned = self.state.telemetry.export_plan(&f).await;
        let (plan, context) = match planned {
            Ok(p) => p,
            Err(e) => {
                let failed = event.failed(e.status(), &e.to_string()).timed(started);
                self.state.audit.write(&auth.0.actor, failed).await;
                return Err(e.into());
            }
        };
        Ok(export::stream(
            plan,
            context,
            format,
            "telemetry-events",
            ExportAudit {
                writer: self.state.audit.clone(),
                actor: auth.0.actor.clone(),
                event,
                started,
            },
        )?)
    }

    /// Reads new and changed session files now (the scheduler and uploads do it too) and
    /// returns the run's report. 409 while another run is under way, on any replica.
    #[oai(path = "/run", method = "post", operation_id = "run_telemetry")]
    async fn run(&self, auth: AdminAuth) -> ApiResult<Json<Value>> {
        self.run_audited(&auth, "usage.run", None, false).await
    }

    /// Reads session files again — all, one user's, or one file — re-extracting and
    /// re-attributing their events, then returns the run's report. `full_rollup` rebuilds
    /// every day's rollups. Parked files are read again too. 409 while a run is under way.
    #[oai(
        path = "/reprocess",
        method = "post",
        operation_id = "reprocess_telemetry"
    )]
    async fn reprocess(
        &self,
        auth: AdminAuth,
        body: Json<ReprocessRequest>,
    ) -> ApiResult<Json<Value>> {
        let scope = match (body.0.user_id, body.0.session_file) {
            (Some(_), Some(_)) => {
                return Err(Error::invalid("Give user_id or session_file, not both").into())
            }
            (Some(u), None) => FileScope::User(u),
            (None, Some(f)) => FileScope::File(f),
            (None, None) => FileScope::All,
        };
        self.run_audited(&auth, "usage.reprocess", Some(scope), body.0.full_rollup)
            .await
    }

    /// Deletes telemetry (events, session summaries, rollup days) older than the retention
    /// (`SVC_TELEMETRY_RETENTION_DAYS` unless given). Session files stay.
    #[oai(path = "/prune", method = "post", operation_id = "prune_telemetry")]
    async fn prune(&self, auth: AdminAuth, body: Json<PruneRequest>) -> ApiResult<Json<Pruned>> {
        let started = Instant::now();
        let days = body
            .0
            .retention_days
            .unwrap_or(self.state.config.telemetry_retention_days);
        let result = async {
            if days == 0 {
                return Err(Error::invalid("retention_days must be at least 1"));
            }
            self.state.pipeline.prune(days).await
        }
        .await;
        self.state
            .audit
            .write_outcome(
                &auth.0.actor,
                Event::new("usage.prune").resource("telemetry"),
                started,
                &result,
                |event, (events, sessions)| {
                    event
                        .param("retention_days", days)
                        .param("events", *events)
                        .param("sessions", *sessions)
                },
            )
            .await;
        let (events, sessions) = result?;
        Ok(Json(Pruned {
            retention_days: days,
            events,
            sessions,
        }))
    }

    /// The pipeline's latest runs and the files it is failing on or has parked.
    #[oai(
        path = "/pipeline",
        method = "get",
        operation_id = "get_telemetry_pipeline"
    )]
    async fn pipeline(&self, _auth: AdminAuth) -> ApiResult<Json<PipelineView>> {
        let store = &self.state.store;
        let states = store.session_file_states().await.map_err(Error::from)?;
        let runs = store.telemetry_runs(20).await.map_err(Error::from)?;
        Ok(Json(PipelineView {
            files: states.len() as u64,
            failing: states
                .iter()
                .filter(|s| s.failures > 0 && !s.parked)
                .count() as u64,
            parked: states
                .into_iter()
                .filter(|s| s.parked)
                .map(|s| ParkedFile {
                    session_file: s.session_file,
                    failures: s.failures,
                    last_error: s.last_error,
                })
                .collect(),
            runs: runs
                .into_iter()
                .map(|r| RunView {
                    id: r.id,
                    trigger: r.trigger,
                    started_at: r.started_at,
                    finished_at: r.finished_at,
                    status: r.status,
                    report: r.report,
                })
                .collect(),
        }))
    }
}
