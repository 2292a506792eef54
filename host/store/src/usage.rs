//! Tool-usage telemetry in the store: per session file its state (which names the parquet
//! segment holding its events), summary and daily counts; the daily rollups; runs; and the
//! attribution tables' lookup.
//!
//! The telemetry crate decides what a file means and writes its events' segment; this
//! module stores the rest, one transaction per batch of files. The transaction is what
//! makes a segment visible (readers list segments from the state rows), so a crash never
//! leaves half a file's events.

use serde::Serialize;
use sqlx::Row;

use crate::bulk::{BulkInsert, JsonType};
use crate::{flag, Store, StoreError};

/// One file's usage on one day, for one (session, tool, source, plugin): the rollups'
/// source. A file's rows are replaced with its events, in the same transaction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DailyUsage {
    /// `<user dir>/<file name>`.
    pub session_file: String,
    /// `YYYY-MM-DD` (UTC).
    pub day: String,
    /// The agent's session id.
    pub session_id: String,
    /// Who, for distinct-user counts: the owner's id, else their directory name.
    pub user_key: String,
    /// The tool's name (None for slash commands).
    pub tool_name: Option<String>,
    /// `curated`, `flea` or `builtin`.
    pub source: String,
    /// The plugin or store entity the events are attributed to.
    pub ref_id: Option<String>,
    /// Events.
    pub invocations: i64,
    /// Those whose result was an error.
    pub error_count: i64,
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
    /// The owner's user id, when resolved: whose `svc_telemetry` rows the segment holds.
    pub user_id: Option<String>,
    /// The parquet segment holding its events (None when it has none).
    pub segment: Option<String>,
    /// Its earliest event time.
    pub first_at: Option<String>,
    /// Its latest event time.
    pub last_at: Option<String>,
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

/// One file's processing outcome, stored as a unit. Its events are already in the
/// segment `state.segment` names; committing this makes them visible.
#[derive(Debug, Clone)]
pub struct ProcessedFile {
    /// Its new state.
    pub state: FileState,
    /// Its summary.
    pub summary: SessionSummary,
    /// Its per-day counts (they replace the file's previous ones).
    pub daily: Vec<DailyUsage>,
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

const DAILY_COLUMNS: &[(&str, JsonType)] = &[
    ("session_file", JsonType::Text),
    ("day", JsonType::Text),
    ("session_id", JsonType::Text),
    ("user_key", JsonType::Text),
    ("tool_name", JsonType::Text),
    ("source", JsonType::Text),
    ("ref_id", JsonType::Text),
    ("invocations", JsonType::Int),
    ("error_count", JsonType::Int),
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
    ("user_id", JsonType::Text),
    ("segment", JsonType::Text),
    ("first_at", JsonType::Text),
    ("last_at", JsonType::Text),
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
        user_id: r.try_get("user_id")?,
        segment: r.try_get("segment")?,
        first_at: r.try_get("first_at")?,
        last_at: r.try_get("last_at")?,
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

    /// The states of one owner's files (keys under `<user dir>/`; see
    /// [`Store::sessions_of_dir`] for the range).
    pub async fn session_file_states_of(
        &self,
        user_dir: &str,
    ) -> Result<Vec<FileState>, StoreError> {
        crate::fetch_vec(
            self,
            sqlx::query(
                "SELECT * FROM session_file_state WHERE session_file > $1 AND session_file < $2 \
                 ORDER BY session_file",
            )
            .bind(format!("{user_dir}/"))
            .bind(format!("{user_dir}0")),
            state_of,
        )
        .await
    }

    /// Stores processed files in one transaction: each file's state (naming its new
    /// segment), summary and daily counts replace the previous ones, and the packs that held
    /// their old events are dissolved ([`crate::packs`]). Returns the days whose counts
    /// changed (before or after), for the rollups, and the segments and packs no longer
    /// named (for the pipeline to remove once no reader can be using them).
    pub async fn store_processed_files(
        &self,
        files: &[ProcessedFile],
    ) -> Result<(Option<DayRange>, Vec<String>), StoreError> {
        if files.is_empty() {
            return Ok((None, Vec::new()));
        }
        let keys: Vec<&str> = files
            .iter()
            .map(|f| f.state.session_file.as_str())
            .collect();
        let mut tx = self.begin_write().await?;
        let mut days = None;
        let mut replaced = Vec::new();
        let mut packs = std::collections::BTreeSet::new();
        // Bound parameters per statement stay well under both backends' limits.
        for chunk in keys.chunks(500) {
            let list = placeholders(1, chunk.len());
            let sql = format!(
                "SELECT first_at, last_at, segment, pack FROM session_file_state WHERE session_file IN ({list})"
            );
            let mut q = sqlx::query(&sql);
            for k in chunk {
                q = q.bind(*k);
            }
            for row in q.fetch_all(&mut *tx).await? {
                days = DayRange::union(
                    days,
                    day_range(row.try_get("first_at")?, row.try_get("last_at")?),
                );
                replaced.extend(row.try_get::<Option<String>, _>("segment")?);
                packs.extend(row.try_get::<Option<String>, _>("pack")?);
            }
            for table in [
                "usage_file_daily",
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
        let packs: Vec<String> = packs.into_iter().collect();
        let dissolved = crate::packs::dissolve(&mut tx, &packs).await?;
        for f in files {
            days = DayRange::union(
                days,
                day_range(f.state.first_at.clone(), f.state.last_at.clone()),
            );
        }
        let b = self.backend();
        let daily: Vec<&DailyUsage> = files.iter().flat_map(|f| &f.daily).collect();
        BulkInsert::new(b, "usage_file_daily", DAILY_COLUMNS)
            .run(&mut tx, &daily)
            .await?;
        let summaries: Vec<&SessionSummary> = files.iter().map(|f| &f.summary).collect();
        BulkInsert::new(b, "usage_session_summary", SUMMARY_COLUMNS)
            .run(&mut tx, &summaries)
            .await?;
        let states: Vec<&FileState> = files.iter().map(|f| &f.state).collect();
        BulkInsert::new(b, "session_file_state", STATE_COLUMNS)
            .run(&mut tx, &states)
            .await?;
        tx.commit().await?;
        let kept: std::collections::HashSet<&str> = files
            .iter()
            .filter_map(|f| f.state.segment.as_deref())
            .collect();
        replaced.retain(|s| !kept.contains(s.as_str()));
        replaced.extend(dissolved);
        Ok((days, replaced))
    }

    /// Records a file that could not be processed, keeping its events, summary and pack
    /// as they were. `state.failures` and `state.parked` are the caller's decision.
    pub async fn record_file_failure(&self, state: &FileState) -> Result<(), StoreError> {
        let mut tx = self.begin_write().await?;
        let pack = crate::packs::pack_of(&mut tx, &state.session_file).await?;
        sqlx::query("DELETE FROM session_file_state WHERE session_file = $1")
            .bind(&state.session_file)
            .execute(&mut *tx)
            .await?;
        BulkInsert::new(self.backend(), "session_file_state", STATE_COLUMNS)
            .run(&mut tx, &[state])
            .await?;
        if pack.is_some() {
            sqlx::query("UPDATE session_file_state SET pack = $1 WHERE session_file = $2")
                .bind(&pack)
                .bind(&state.session_file)
                .execute(&mut *tx)
                .await?;
        }
        Ok(tx.commit().await?)
    }

    /// Marks the files in `scope` for re-reading, so the pipeline's next run reads them
    /// again (and re-attributes their events) even if they have not changed — parked ones
    /// too. Their current events stay visible until then. Returns how many were marked.
    pub async fn forget_session_files(&self, scope: &FileScope) -> Result<u64, StoreError> {
        const MARK: &str =
            "UPDATE session_file_state SET size = -1, content_hash = NULL, failures = 0, parked = $1";
        let (sql, value) = match scope {
            FileScope::All => (MARK.to_owned(), None),
            FileScope::User(dir) => (format!("{MARK} WHERE user_dir = $2"), Some(dir)),
            FileScope::File(key) => (format!("{MARK} WHERE session_file = $2"), Some(key)),
        };
        let mut q = sqlx::query(&sql).bind(false);
        if let Some(v) = value {
            q = q.bind(v);
        }
        Ok(q.execute(self.pool()).await?.rows_affected())
    }

    /// Rebuilds the daily rollups for `days` (every day when None) in one transaction,
    /// from the files' daily counts.
    pub async fn rebuild_usage_rollups(&self, days: Option<&DayRange>) -> Result<(), StoreError> {
        let (lo, hi) = match days {
            Some(d) => (d.first.clone(), d.last.clone()),
            None => (String::new(), "~".to_owned()),
        };
        let mut tx = self.begin_write().await?;
        for table in ["usage_tool_daily", "usage_plugin_daily"] {
            sqlx::query(&format!(
                "DELETE FROM {table} WHERE day >= $1 AND day <= $2"
            ))
            .bind(&lo)
            .bind(&hi)
            .execute(&mut *tx)
            .await?;
        }
        sqlx::query(
            "INSERT INTO usage_tool_daily (day, tool_name, source, invocations, error_count, distinct_users, distinct_sessions) \
             SELECT day, tool_name, source, SUM(invocations), SUM(error_count), \
                    COUNT(DISTINCT user_key), COUNT(DISTINCT session_id) \
             FROM usage_file_daily WHERE tool_name IS NOT NULL AND day >= $1 AND day <= $2 \
             GROUP BY day, tool_name, source",
        )
        .bind(&lo)
        .bind(&hi)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "INSERT INTO usage_plugin_daily (day, source, ref_id, invocations, distinct_users, distinct_sessions) \
             SELECT day, source, ref_id, SUM(invocations), \
                    COUNT(DISTINCT user_key), COUNT(DISTINCT session_id) \
             FROM usage_file_daily WHERE ref_id IS NOT NULL AND source IN ('curated', 'flea') \
               AND day >= $1 AND day <= $2 \
             GROUP BY day, source, ref_id",
        )
        .bind(&lo)
        .bind(&hi)
        .execute(&mut *tx)
        .await?;
        crate::marketplace::refresh_stats(&mut tx, chrono::Utc::now().date_naive()).await?;
        Ok(tx.commit().await?)
    }

    /// Deletes telemetry before the day `before` (`YYYY-MM-DD`): the summaries of sessions
    /// that ended before it, every file's daily counts and rollups of earlier days, and
    /// records `rewritten` — the states of files whose segments the pipeline has already
    /// rewritten without those days' events — dissolving the packs that held their old
    /// events. Returns the summaries deleted and the packs dissolved.
    pub async fn prune_usage(
        &self,
        before: &str,
        rewritten: &[FileState],
    ) -> Result<(u64, Vec<String>), StoreError> {
        let mut tx = self.begin_write().await?;
        let mut packs = std::collections::BTreeSet::new();
        for state in rewritten {
            packs.extend(crate::packs::pack_of(&mut tx, &state.session_file).await?);
            sqlx::query(
                "UPDATE session_file_state SET segment = $1, events = $2, first_at = $3, last_at = $4 \
                 WHERE session_file = $5",
            )
            .bind(&state.segment)
            .bind(state.events)
            .bind(&state.first_at)
            .bind(&state.last_at)
            .bind(&state.session_file)
            .execute(&mut *tx)
            .await?;
        }
        let summaries = sqlx::query(
            "DELETE FROM usage_session_summary WHERE COALESCE(ended_at, started_at, extracted_at) < $1",
        )
        .bind(before)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        for table in ["usage_file_daily", "usage_tool_daily", "usage_plugin_daily"] {
            sqlx::query(&format!("DELETE FROM {table} WHERE day < $1"))
                .bind(before)
                .execute(&mut *tx)
                .await?;
        }
        let packs: Vec<String> = packs.into_iter().collect();
        let dissolved = crate::packs::dissolve(&mut tx, &packs).await?;
        tx.commit().await?;
        Ok((summaries, dissolved))
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
        let mut tx = self.begin_write().await?;
        crate::marketplace::attribute(&mut tx, source, ref_id, [skills, agents, commands]).await?;
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

    fn daily(file: &str, day: &str, tool: &str, n: i64, errors: i64) -> DailyUsage {
        DailyUsage {
            session_file: file.into(),
            day: day.into(),
            session_id: "S".into(),
            user_key: "u1".into(),
            tool_name: Some(tool.into()),
            source: "curated".into(),
            ref_id: Some("mkt/p".into()),
            invocations: n,
            error_count: errors,
        }
    }

    fn file(key: &str, segment: &str, span: (&str, &str), daily: Vec<DailyUsage>) -> ProcessedFile {
        ProcessedFile {
            state: FileState {
                session_file: key.into(),
                user_dir: "u1".into(),
                user_id: Some("u1".into()),
                segment: Some(segment.into()),
                first_at: Some(span.0.into()),
                last_at: Some(span.1.into()),
                size: 10,
                mtime_ns: 1_700_000_000_000_000_000,
                events: daily.iter().map(|d| d.invocations).sum(),
                ..FileState::default()
            },
            summary: SessionSummary {
                session_file: key.into(),
                session_id: "S".into(),
                username: "a@x".into(),
                user_id: Some("u1".into()),
                ended_at: Some(span.1.into()),
                ..SessionSummary::default()
            },
            daily,
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
                "seg-1.parquet",
                ("2026-01-01T10:00:00.000000Z", "2026-01-02T10:00:00.000000Z"),
                vec![
                    daily("u1/a.jsonl", "2026-01-01", "Bash", 1, 1),
                    daily("u1/a.jsonl", "2026-01-02", "Bash", 1, 0),
                ],
            );
            let (days, replaced) = store.store_processed_files(&[a]).await.unwrap();
            assert_eq!(
                days,
                Some(DayRange {
                    first: "2026-01-01".into(),
                    last: "2026-01-02".into()
                })
            );
            assert!(replaced.is_empty());
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
            // The file changes: its old days are rebuilt too, nothing is left over, and its
            // old segment is handed back for removal.
            let a2 = file(
                "u1/a.jsonl",
                "seg-2.parquet",
                ("2026-01-02T11:00:00.000000Z", "2026-01-02T11:00:00.000000Z"),
                vec![daily("u1/a.jsonl", "2026-01-02", "Read", 1, 0)],
            );
            let (days, replaced) = store.store_processed_files(&[a2]).await.unwrap();
            assert_eq!(days.as_ref().unwrap().first, "2026-01-01");
            assert_eq!(replaced, vec!["seg-1.parquet".to_owned()]);
            store.rebuild_usage_rollups(days.as_ref()).await.unwrap();
            assert_eq!(
                count(&store, "SELECT COUNT(*) FROM usage_file_daily").await,
                1
            );
            assert_eq!(
                count(&store, "SELECT COUNT(*) FROM usage_tool_daily").await,
                1
            );
            assert_eq!(
                count(&store, "SELECT COUNT(*) FROM usage_plugin_daily").await,
                1
            );
            // A full rebuild gives the same rollups.
            store.rebuild_usage_rollups(None).await.unwrap();
            assert_eq!(
                count(&store, "SELECT COUNT(*) FROM usage_tool_daily").await,
                1
            );
            let states = store.session_file_states().await.unwrap();
            assert_eq!((states.len(), states[0].events), (1, 1));
            assert_eq!(states[0].segment.as_deref(), Some("seg-2.parquet"));
            assert_eq!(states[0].mtime_ns, 1_700_000_000_000_000_000);

            let mut failing = states[0].clone();
            failing.failures = 3;
            failing.parked = true;
            failing.last_error = Some("cannot read".into());
            store.record_file_failure(&failing).await.unwrap();
            let states = store.session_file_states().await.unwrap();
            assert!(states[0].parked && states[0].failures == 3);
            assert_eq!(states[0].segment.as_deref(), Some("seg-2.parquet"), "kept");
            // Reprocessing marks the file for re-reading (unparked) but keeps its segment.
            assert_eq!(
                store
                    .forget_session_files(&FileScope::User("u1".into()))
                    .await
                    .unwrap(),
                1
            );
            let states = store.session_file_states().await.unwrap();
            assert!(!states[0].parked && states[0].size == -1);
            assert_eq!(states[0].segment.as_deref(), Some("seg-2.parquet"));

            let mut emptied = states[0].clone();
            emptied.segment = None;
            emptied.events = 0;
            let (sessions, _) = store.prune_usage("2026-01-03", &[emptied]).await.unwrap();
            assert_eq!(sessions, 1);
            assert_eq!(
                count(&store, "SELECT COUNT(*) FROM usage_file_daily").await,
                0
            );
            let states = store.session_file_states().await.unwrap();
            assert_eq!((states[0].segment.as_deref(), states[0].events), (None, 0));

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
