//! Tool-usage telemetry: events and session summaries per session file, the pipeline's
//! per-file state, daily rollups, runs, and the attribution tables' lookup.
//!
//! The telemetry crate decides what a file means; this module only stores what it decided,
//! one transaction per batch of files so a crash never leaves half a file's events.

use serde::Serialize;
use sqlx::Row;

use crate::bulk::{self, JsonType};
use crate::{flag, Store, StoreError};

/// One tool invocation, slash command, sub-agent dispatch or MCP call.
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

/// One session file's summary.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SessionSummary {
    /// `<user dir>/<file name>`.
    pub session_file: String,
    /// The agent's session id.
    pub session_id: String,
    /// The owner's e-mail (or directory name).
    pub username: String,
    /// The owner's user id, when resolved.
    pub user_id: Option<String>,
    /// Earliest turn time.
    pub started_at: Option<String>,
    /// Latest turn time.
    pub ended_at: Option<String>,
    /// Time with no gap over ten minutes between turns.
    pub active_seconds: i64,
    /// Latest minus earliest.
    pub wall_seconds: i64,
    /// Prompts typed by the user (turns that are not only tool results).
    pub user_messages: i64,
    /// Assistant turns.
    pub assistant_messages: i64,
    /// Tool invocations of any kind (plain, MCP, sub-agent).
    pub tool_calls: i64,
    /// Those whose result was an error (never more than `tool_calls`).
    pub tool_errors: i64,
    /// Events naming a skill.
    pub skill_invocations: i64,
    /// Sub-agent dispatches.
    pub subagent_dispatches: i64,
    /// MCP calls.
    pub mcp_calls: i64,
    /// Slash commands.
    pub slash_commands: i64,
    /// Distinct tool names.
    pub distinct_tools: i64,
    /// Distinct skill names.
    pub distinct_skills: i64,
    /// Summed input tokens.
    pub input_tokens: i64,
    /// Summed output tokens.
    pub output_tokens: i64,
    /// Summed cache-read tokens.
    pub cache_read_tokens: i64,
    /// Summed cache-creation tokens.
    pub cache_creation_tokens: i64,
    /// The most common assistant model.
    pub primary_model: Option<String>,
    /// The extraction rules' version.
    pub processor_version: i64,
    /// When it was extracted.
    pub extracted_at: String,
}

/// What the pipeline remembers about one session file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct FileState {
    /// `<user dir>/<file name>`.
    pub session_file: String,
    /// The owner's directory.
    pub user_dir: String,
    /// Size when last seen.
    pub size: i64,
    /// Modification time when last seen (ns since the epoch).
    pub mtime_ns: i64,
    /// Content hash when last processed.
    pub content_hash: Option<String>,
    /// When it was last processed successfully.
    pub processed_at: Option<String>,
    /// Events it yielded.
    pub events: i64,
    /// Lines read.
    pub lines: i64,
    /// Lines that were not a JSON object, were cut short or too long.
    pub malformed_lines: i64,
    /// The first problems as JSON (`[{line, problem}]`).
    pub problems: Option<String>,
    /// Failures in a row.
    pub failures: i64,
    /// The latest failure.
    pub last_error: Option<String>,
    /// Whether the file is left alone until it changes or is reprocessed.
    pub parked: bool,
}

/// One file's processing outcome, stored as a unit.
#[derive(Debug, Clone)]
pub struct ProcessedFile {
    /// Its new state.
    pub state: FileState,
    /// Its summary.
    pub summary: SessionSummary,
    /// Its events (they replace the file's previous ones).
    pub events: Vec<UsageEvent>,
}

/// Which days changed, as a closed range of `YYYY-MM-DD`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DayRange {
    /// First day.
    pub first: String,
    /// Last day.
    pub last: String,
}

impl DayRange {
    /// The smallest range holding both.
    pub fn union(a: Option<Self>, b: Option<Self>) -> Option<Self> {
        match (a, b) {
            (Some(a), Some(b)) => Some(Self {
                first: a.first.min(b.first),
                last: a.last.max(b.last),
            }),
            (a, b) => a.or(b),
        }
    }
}

/// Which files a reprocess covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileScope {
    /// Every file.
    All,
    /// One user's directory.
    User(String),
    /// One file (`<user dir>/<file name>`).
    File(String),
}

/// The three attribution maps, name to `(source, ref_id)` rows, curated first.
#[derive(Debug, Clone, Default)]
pub struct AttributionRows {
    /// `(name, source, ref_id)` of skills.
    pub skills: Vec<(String, String, String)>,
    /// `(name, source, ref_id)` of agents.
    pub agents: Vec<(String, String, String)>,
    /// `(name, source, ref_id)` of commands.
    pub commands: Vec<(String, String, String)>,
}

/// A stored pipeline run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunRecord {
    /// Run id.
    pub id: String,
    /// What started it.
    pub trigger: String,
    /// When it started.
    pub started_at: String,
    /// When it ended (None while running).
    pub finished_at: Option<String>,
    /// `running`, `ok`, `failed`.
    pub status: Option<String>,
    /// The run's report (JSON).
    pub report: Option<serde_json::Value>,
}

const EVENT_COLUMNS: &[(&str, JsonType)] = &[
    ("id", JsonType::Text),
    ("session_id", JsonType::Text),
    ("session_file", JsonType::Text),
    ("username", JsonType::Text),
    ("user_id", JsonType::Text),
    ("event_uuid", JsonType::Text),
    ("parent_uuid", JsonType::Text),
    ("event_type", JsonType::Text),
    ("tool_name", JsonType::Text),
    ("skill_name", JsonType::Text),
    ("subagent_type", JsonType::Text),
    ("command_name", JsonType::Text),
    ("is_error", JsonType::Bool),
    ("source", JsonType::Text),
    ("ref_id", JsonType::Text),
    ("model", JsonType::Text),
    ("cwd", JsonType::Text),
    ("occurred_at", JsonType::Text),
    ("processor_version", JsonType::Int),
    ("extracted_at", JsonType::Text),
];

const SUMMARY_COLUMNS: &[(&str, JsonType)] = &[
    ("session_file", JsonType::Text),
    ("session_id", JsonType::Text),
    ("username", JsonType::Text),
    ("user_id", JsonType::Text),
    ("started_at", JsonType::Text),
    ("ended_at", JsonType::Text),
    ("active_seconds", JsonType::Int),
    ("wall_seconds", JsonType::Int),
    ("user_messages", JsonType::Int),
    ("assistant_messages", JsonType::Int),
    ("tool_calls", JsonType::Int),
    ("tool_errors", JsonType::Int),
    ("skill_invocations", JsonType::Int),
    ("subagent_dispatches", JsonType::Int),
    ("mcp_calls", JsonType::Int),
    ("slash_commands", JsonType::Int),
    ("distinct_tools", JsonType::Int),
    ("distinct_skills", JsonType::Int),
    ("input_tokens", JsonType::Int),
    ("output_tokens", JsonType::Int),
    ("cache_read_tokens", JsonType::Int),
    ("cache_creation_tokens", JsonType::Int),
    ("primary_model", JsonType::Text),
    ("processor_version", JsonType::Int),
    ("extracted_at", JsonType::Text),
];

const STATE_COLUMNS: &[(&str, JsonType)] = &[
    ("session_file", JsonType::Text),
    ("user_dir", JsonType::Text),
    ("size", JsonType::Int),
    ("mtime_ns", JsonType::Int),
    ("content_hash", JsonType::Text),
    ("processed_at", JsonType::Text),
    ("events", JsonType::Int),
    ("lines", JsonType::Int),
    ("malformed_lines", JsonType::Int),
    ("problems", JsonType::Text),
    ("failures", JsonType::Int),
    ("last_error", JsonType::Text),
    ("parked", JsonType::Bool),
];

/// `$1, $2, … $n` from `from`.
fn placeholders(from: usize, n: usize) -> String {
    (from..from + n)
        .map(|i| format!("${i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn state_of(r: &sqlx::any::AnyRow) -> Result<FileState, StoreError> {
    Ok(FileState {
        session_file: r.try_get("session_file")?,
        user_dir: r.try_get("user_dir")?,
        size: r.try_get("size")?,
        mtime_ns: r.try_get("mtime_ns")?,
        content_hash: r.try_get("content_hash")?,
        processed_at: r.try_get("processed_at")?,
        events: r.try_get("events")?,
        lines: r.try_get("lines")?,
        malformed_lines: r.try_get("malformed_lines")?,
        problems: r.try_get("problems")?,
        failures: r.try_get("failures")?,
        last_error: r.try_get("last_error")?,
        parked: flag(r, "parked")?,
    })
}

impl Store {
    /// Every session file the pipeline has seen.
    pub async fn session_file_states(&self) -> Result<Vec<FileState>, StoreError> {
        crate::fetch_vec(
            self,
            sqlx::query("SELECT * FROM session_file_state ORDER BY session_file"),
            state_of,
        )
        .await
    }

    /// Stores processed files in one transaction: each file's events and summary replace
    /// its previous ones, and its state records what was read. Returns the days whose
    /// events changed (before or after), for the rollups.
    pub async fn store_processed_files(
        &self,
        files: &[ProcessedFile],
    ) -> Result<Option<DayRange>, StoreError> {
        if files.is_empty() {
            return Ok(None);
        }
        let keys: Vec<&str> = files
            .iter()
            .map(|f| f.state.session_file.as_str())
            .collect();
        let mut tx = self.pool().begin().await?;
        let mut days = None;
        // Bound parameters per statement stay well under both backends' limits.
        for chunk in keys.chunks(500) {
            let list = placeholders(1, chunk.len());
            let sql = format!(
                "SELECT MIN(occurred_at) AS lo, MAX(occurred_at) AS hi FROM usage_events WHERE session_file IN ({list})"
            );
            let mut q = sqlx::query(&sql);
            for k in chunk {
                q = q.bind(*k);
            }
            let row = q.fetch_one(&mut *tx).await?;
            days = DayRange::union(days, day_range(row.try_get("lo")?, row.try_get("hi")?));
            for table in [
                "usage_events",
                "usage_session_summary",
                "session_file_state",
            ] {
                let sql = format!("DELETE FROM {table} WHERE session_file IN ({list})");
                let mut q = sqlx::query(&sql);
                for k in chunk {
                    q = q.bind(*k);
                }
                q.execute(&mut *tx).await?;
            }
        }
        let b = self.backend();
        let events: Vec<&UsageEvent> = files.iter().flat_map(|f| &f.events).collect();
        for f in files {
            let lo = f.events.iter().map(|e| e.occurred_at.as_str()).min();
            let hi = f.events.iter().map(|e| e.occurred_at.as_str()).max();
            days = DayRange::union(days, day_range(lo.map(Into::into), hi.map(Into::into)));
        }
        // Ids include the session file, so only a file's own duplicates could collide.
        let insert_events = bulk::insert_sql(
            b,
            "usage_events",
            EVENT_COLUMNS,
            "WHERE true ON CONFLICT (id) DO NOTHING",
        );
        bulk::insert(&mut tx, &insert_events, &events).await?;
        let summaries: Vec<&SessionSummary> = files.iter().map(|f| &f.summary).collect();
        bulk::insert(
            &mut tx,
            &bulk::insert_sql(b, "usage_session_summary", SUMMARY_COLUMNS, ""),
            &summaries,
        )
        .await?;
        let states: Vec<&FileState> = files.iter().map(|f| &f.state).collect();
        bulk::insert(
            &mut tx,
            &bulk::insert_sql(b, "session_file_state", STATE_COLUMNS, ""),
            &states,
        )
        .await?;
        tx.commit().await?;
        Ok(days)
    }

    /// Records a file that could not be processed, keeping its events and summary as they
    /// were. `state.failures` and `state.parked` are the caller's decision.
    pub async fn record_file_failure(&self, state: &FileState) -> Result<(), StoreError> {
        let mut tx = self.pool().begin().await?;
        sqlx::query("DELETE FROM session_file_state WHERE session_file = $1")
            .bind(&state.session_file)
            .execute(&mut *tx)
            .await?;
        bulk::insert(
            &mut tx,
            &bulk::insert_sql(self.backend(), "session_file_state", STATE_COLUMNS, ""),
            &[state],
        )
        .await?;
        Ok(tx.commit().await?)
    }

    /// Forgets what the pipeline knew of the files in `scope`, so its next run reads them
    /// again (and re-attributes their events). Returns how many files it forgot.
    pub async fn forget_session_files(&self, scope: &FileScope) -> Result<u64, StoreError> {
        let q = match scope {
            FileScope::All => sqlx::query("DELETE FROM session_file_state"),
            FileScope::User(dir) => {
                sqlx::query("DELETE FROM session_file_state WHERE user_dir = $1").bind(dir)
            }
            FileScope::File(key) => {
                sqlx::query("DELETE FROM session_file_state WHERE session_file = $1").bind(key)
            }
        };
        Ok(q.execute(self.pool()).await?.rows_affected())
    }

    /// Rebuilds the daily rollups for `days` (every day when None) in one transaction.
    pub async fn rebuild_usage_rollups(&self, days: Option<&DayRange>) -> Result<(), StoreError> {
        // Events store RFC 3339 UTC text, so a day is its first ten characters and a day
        // range is a text range: `[first, day after last)`.
        let (lo, hi) = match days {
            Some(d) => (d.first.clone(), format!("{}~", d.last)),
            None => (String::new(), "~".to_owned()),
        };
        let mut tx = self.pool().begin().await?;
        for table in ["usage_tool_daily", "usage_plugin_daily"] {
            sqlx::query(&format!("DELETE FROM {table} WHERE day >= $1 AND day < $2"))
                .bind(&lo)
                .bind(&hi)
                .execute(&mut *tx)
                .await?;
        }
        sqlx::query(
            "INSERT INTO usage_tool_daily (day, tool_name, source, invocations, error_count, distinct_users, distinct_sessions) \
             SELECT substr(occurred_at, 1, 10), tool_name, source, COUNT(*), \
                    SUM(CASE WHEN is_error THEN 1 ELSE 0 END), \
                    COUNT(DISTINCT COALESCE(user_id, username)), COUNT(DISTINCT session_id) \
             FROM usage_events WHERE tool_name IS NOT NULL AND occurred_at >= $1 AND occurred_at < $2 \
             GROUP BY substr(occurred_at, 1, 10), tool_name, source",
        )
        .bind(&lo)
        .bind(&hi)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "INSERT INTO usage_plugin_daily (day, source, ref_id, invocations, distinct_users, distinct_sessions) \
             SELECT substr(occurred_at, 1, 10), source, ref_id, COUNT(*), \
                    COUNT(DISTINCT COALESCE(user_id, username)), COUNT(DISTINCT session_id) \
             FROM usage_events WHERE ref_id IS NOT NULL AND source IN ('curated', 'flea') \
               AND occurred_at >= $1 AND occurred_at < $2 \
             GROUP BY substr(occurred_at, 1, 10), source, ref_id",
        )
        .bind(&lo)
        .bind(&hi)
        .execute(&mut *tx)
        .await?;
        Ok(tx.commit().await?)
    }

    /// Deletes events and summaries older than `before` and the rollup days before it.
    /// Returns (events, summaries) deleted.
    pub async fn prune_usage(&self, before: &str) -> Result<(u64, u64), StoreError> {
        let mut tx = self.pool().begin().await?;
        let events = sqlx::query("DELETE FROM usage_events WHERE occurred_at < $1")
            .bind(before)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        let summaries = sqlx::query(
            "DELETE FROM usage_session_summary WHERE COALESCE(ended_at, started_at, extracted_at) < $1",
        )
        .bind(before)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        let day = before.get(..10).unwrap_or(before);
        for table in ["usage_tool_daily", "usage_plugin_daily"] {
            sqlx::query(&format!("DELETE FROM {table} WHERE day < $1"))
                .bind(day)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok((events, summaries))
    }

    /// The attribution tables, curated before flea, each name's rows in a stable order.
    pub async fn attribution_rows(&self) -> Result<AttributionRows, StoreError> {
        let mut out = AttributionRows::default();
        for (table, column, into) in [
            ("usage_attribution_skills", "skill_name", &mut out.skills),
            ("usage_attribution_agents", "agent_name", &mut out.agents),
            (
                "usage_attribution_commands",
                "command_name",
                &mut out.commands,
            ),
        ] {
            let rows = sqlx::query(&format!(
                "SELECT {column} AS name, source, ref_id FROM {table} ORDER BY source, ref_id, {column}"
            ))
            .fetch_all(self.pool())
            .await?;
            for r in rows {
                into.push((
                    r.try_get("name")?,
                    r.try_get("source")?,
                    r.try_get("ref_id")?,
                ));
            }
        }
        Ok(out)
    }

    /// Replaces the names attributed to one plugin or store entity (an empty list clears).
    pub async fn replace_attribution(
        &self,
        source: &str,
        ref_id: &str,
        skills: &[String],
        agents: &[String],
        commands: &[String],
    ) -> Result<(), StoreError> {
        let mut tx = self.pool().begin().await?;
        for (table, column, names) in [
            ("usage_attribution_skills", "skill_name", skills),
            ("usage_attribution_agents", "agent_name", agents),
            ("usage_attribution_commands", "command_name", commands),
        ] {
            sqlx::query(&format!(
                "DELETE FROM {table} WHERE source = $1 AND ref_id = $2"
            ))
            .bind(source)
            .bind(ref_id)
            .execute(&mut *tx)
            .await?;
            let mut names: Vec<&String> = names.iter().filter(|n| !n.is_empty()).collect();
            names.sort();
            names.dedup();
            for name in names {
                sqlx::query(&format!(
                    "INSERT INTO {table} (source, ref_id, {column}) VALUES ($1, $2, $3)"
                ))
                .bind(source)
                .bind(ref_id)
                .bind(name)
                .execute(&mut *tx)
                .await?;
            }
        }
        Ok(tx.commit().await?)
    }

    /// Takes the named lease for `owner` until `until` unless another owner holds an
    /// unexpired one; true when taken. Replicas sharing a store use it to run a job once.
    pub async fn claim_lease(
        &self,
        name: &str,
        owner: &str,
        until: &str,
        now: &str,
    ) -> Result<bool, StoreError> {
        let taken = sqlx::query(
            "INSERT INTO job_leases (name, owner, until) VALUES ($1, $2, $3) \
             ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, until = excluded.until \
             WHERE job_leases.until < $4 OR job_leases.owner = excluded.owner",
        )
        .bind(name)
        .bind(owner)
        .bind(until)
        .bind(now)
        .execute(self.pool())
        .await?
        .rows_affected();
        Ok(taken == 1)
    }

    /// Gives the lease back (only its owner can).
    pub async fn release_lease(&self, name: &str, owner: &str) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM job_leases WHERE name = $1 AND owner = $2")
            .bind(name)
            .bind(owner)
            .execute(self.pool())
            .await?;
        Ok(())
    }

    /// Records a run's start.
    pub async fn start_telemetry_run(
        &self,
        id: &str,
        trigger: &str,
        started_at: &str,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO telemetry_runs (id, trigger, started_at, status) VALUES ($1, $2, $3, 'running')",
        )
        .bind(id)
        .bind(trigger)
        .bind(started_at)
        .execute(self.pool())
        .await?;
        Ok(())
    }

    /// Records a run's end and report, and keeps only the latest 200 runs.
    pub async fn finish_telemetry_run(
        &self,
        id: &str,
        status: &str,
        report: &serde_json::Value,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE telemetry_runs SET finished_at = $1, status = $2, report = $3 WHERE id = $4",
        )
        .bind(svc_core::clock::now())
        .bind(status)
        .bind(report.to_string())
        .bind(id)
        .execute(self.pool())
        .await?;
        sqlx::query(
            "DELETE FROM telemetry_runs WHERE id NOT IN \
             (SELECT id FROM telemetry_runs ORDER BY started_at DESC LIMIT 200)",
        )
        .execute(self.pool())
        .await?;
        Ok(())
    }

    /// The latest runs, newest first.
    pub async fn telemetry_runs(&self, limit: i64) -> Result<Vec<RunRecord>, StoreError> {
        crate::fetch_vec(
            self,
            sqlx::query("SELECT * FROM telemetry_runs ORDER BY started_at DESC, id DESC LIMIT $1")
                .bind(limit),
            |r| {
                Ok(RunRecord {
                    id: r.try_get("id")?,
                    trigger: r.try_get("trigger")?,
                    started_at: r.try_get("started_at")?,
                    finished_at: r.try_get("finished_at")?,
                    status: r.try_get("status")?,
                    report: r
                        .try_get::<Option<String>, _>("report")?
                        .and_then(|s| serde_json::from_str(&s).ok()),
                })
            },
        )
        .await
    }
}

fn day_range(lo: Option<String>, hi: Option<String>) -> Option<DayRange> {
    Some(DayRange {
        first: lo?.get(..10)?.to_owned(),
        last: hi?.get(..10)?.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing;

    fn event(file: &str, id: &str, tool: &str, at: &str, error: bool) -> UsageEvent {
        UsageEvent {
            id: id.into(),
            session_id: "S".into(),
            session_file: file.into(),
            username: "a@x".into(),
            user_id: Some("u1".into()),
            event_uuid: None,
            parent_uuid: None,
            event_type: "tool_use".into(),
            tool_name: Some(tool.into()),
            skill_name: None,
            subagent_type: None,
            command_name: None,
            is_error: error,
            source: "curated".into(),
            ref_id: Some("mkt/p".into()),
            model: None,
            cwd: None,
            occurred_at: at.into(),
            processor_version: 5,
            extracted_at: "2026-01-03T00:00:00.000000Z".into(),
        }
    }

    fn file(key: &str, events: Vec<UsageEvent>) -> ProcessedFile {
        ProcessedFile {
            state: FileState {
                session_file: key.into(),
                user_dir: "u1".into(),
                size: 10,
                mtime_ns: 1_700_000_000_000_000_000,
                events: events.len() as i64,
                ..FileState::default()
            },
            summary: SessionSummary {
                session_file: key.into(),
                session_id: "S".into(),
                username: "a@x".into(),
                user_id: Some("u1".into()),
                tool_calls: events.len() as i64,
                ..SessionSummary::default()
            },
            events,
        }
    }

    async fn count(store: &Store, sql: &str) -> i64 {
        sqlx::query_scalar::<_, i64>(sql)
            .fetch_one(store.pool())
            .await
            .unwrap()
    }

    /// Files replace their own rows, rollups follow the affected days, leases exclude.
    #[tokio::test]
    async fn usage_rows_replace_per_file_and_roll_up_on_both_backends() {
        for (store, _dir) in testing::all_backends().await {
            let a = file(
                "u1/a.jsonl",
                vec![
                    event(
                        "u1/a.jsonl",
                        "e1",
                        "Bash",
                        "2026-01-01T10:00:00.000000Z",
                        true,
                    ),
                    event(
                        "u1/a.jsonl",
                        "e2",
                        "Bash",
                        "2026-01-02T10:00:00.000000Z",
                        false,
                    ),
                ],
            );
            let days = store.store_processed_files(&[a]).await.unwrap();
            assert_eq!(
                days,
                Some(DayRange {
                    first: "2026-01-01".into(),
                    last: "2026-01-02".into()
                })
            );
            store.rebuild_usage_rollups(days.as_ref()).await.unwrap();
            assert_eq!(
                count(&store, "SELECT COUNT(*) FROM usage_tool_daily").await,
                2
            );
            assert_eq!(
                count(
                    &store,
                    "SELECT CAST(SUM(error_count) AS BIGINT) FROM usage_tool_daily"
                )
                .await,
                1
            );
            // The file changes: its old days are rebuilt too, and nothing is left over.
            let a2 = file(
                "u1/a.jsonl",
                vec![event(
                    "u1/a.jsonl",
                    "e3",
                    "Read",
                    "2026-01-02T11:00:00.000000Z",
                    false,
                )],
            );
            let days = store.store_processed_files(&[a2]).await.unwrap();
            assert_eq!(days.as_ref().unwrap().first, "2026-01-01");
            store.rebuild_usage_rollups(days.as_ref()).await.unwrap();
            assert_eq!(count(&store, "SELECT COUNT(*) FROM usage_events").await, 1);
            assert_eq!(
                count(&store, "SELECT COUNT(*) FROM usage_tool_daily").await,
                1
            );
            assert_eq!(
                count(&store, "SELECT COUNT(*) FROM usage_plugin_daily").await,
                1
            );
            let states = store.session_file_states().await.unwrap();
            assert_eq!((states.len(), states[0].events), (1, 1));
            assert_eq!(states[0].mtime_ns, 1_700_000_000_000_000_000);

            let mut failing = states[0].clone();
            failing.failures = 3;
            failing.parked = true;
            failing.last_error = Some("cannot read".into());
            store.record_file_failure(&failing).await.unwrap();
            let states = store.session_file_states().await.unwrap();
            assert!(states[0].parked && states[0].failures == 3);
            assert_eq!(
                count(&store, "SELECT COUNT(*) FROM usage_events").await,
                1,
                "kept"
            );
            assert_eq!(
                store
                    .forget_session_files(&FileScope::User("u1".into()))
                    .await
                    .unwrap(),
                1
            );
            let (events, sessions) = store
                .prune_usage("2026-01-03T00:00:00.000000Z")
                .await
                .unwrap();
            assert_eq!((events, sessions), (1, 1));

            let (now, later) = ("2026-01-01T00:00:00.000000Z", "2026-01-01T01:00:00.000000Z");
            assert!(store.claim_lease("job", "me", later, now).await.unwrap());
            assert!(
                store.claim_lease("job", "me", later, now).await.unwrap(),
                "renewed"
            );
            assert!(!store.claim_lease("job", "other", later, now).await.unwrap());
            assert!(
                store
                    .claim_lease(
                        "job",
                        "other",
                        "2026-01-01T03:00:00.000000Z",
                        "2026-01-01T02:00:00.000000Z"
                    )
                    .await
                    .unwrap(),
                "an expired lease is taken over"
            );
            store.release_lease("job", "me").await.unwrap();
            assert!(
                !store.claim_lease("job", "me", later, now).await.unwrap(),
                "not mine to give back"
            );
            store.close().await;
        }
    }
}
