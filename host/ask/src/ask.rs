//! One question, end to end: the LLM proposes SQL, [`crate::sql::check`] accepts or refuses
//! it, and the engine runs an accepted statement as the asking administrator.

use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;
use svc_auth::Caller;
use svc_core::{Error, ErrorKind};
use svc_query::encode::rows_as_objects;
use svc_query::Engine;

use crate::llm::{Llm, LlmConfig};
use crate::sql::{check, ALLOWED_TABLES};

/// Most rows an answer carries; `truncated` says when there were more.
pub const MAX_ROWS: usize = 1_000;
/// Longest question accepted, in characters.
pub const MAX_QUESTION_CHARS: usize = 1_000;
/// How long the generated statement may run.
pub const EXEC_TIMEOUT: Duration = Duration::from_secs(30);

/// A question answered.
#[derive(Debug, Clone, Serialize)]
pub struct Answer {
    /// The question, trimmed.
    pub question: String,
    /// The statement that ran.
    pub sql: String,
    /// The LLM's reason for it.
    pub rationale: String,
    /// Result column names.
    pub columns: Vec<String>,
    /// Rows as objects keyed by column.
    pub rows: Vec<Value>,
    /// Rows returned.
    pub row_count: usize,
    /// More than [`MAX_ROWS`] rows existed.
    pub truncated: bool,
    /// Time spent waiting for the LLM.
    pub llm_ms: u64,
    /// Time spent running the statement.
    pub exec_ms: u64,
}

/// What became of a question whose LLM call succeeded.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// The statement ran.
    Answered(Answer),
    /// The statement was refused before anything ran (`reason` says why).
    Rejected {
        /// The question, trimmed.
        question: String,
        /// The statement as proposed.
        sql: String,
        /// The LLM's reason for it.
        rationale: String,
        /// Why it was refused.
        reason: String,
        /// Time spent waiting for the LLM.
        llm_ms: u64,
    },
    /// The statement was accepted but failed when run.
    Failed {
        /// The question, trimmed.
        question: String,
        /// The statement that failed.
        sql: String,
        /// The LLM's reason for it.
        rationale: String,
        /// The engine's error.
        error: Error,
        /// Time spent waiting for the LLM.
        llm_ms: u64,
    },
}

/// Answers questions with the engine it runs statements on and the LLM it asks.
#[derive(Debug, Clone)]
pub struct Asker {
    engine: Engine,
    llm: LlmConfig,
    /// The system prompt: the allowed tables' columns never change while the process
    /// runs, so they are read once, not on every question.
    system: std::sync::Arc<tokio::sync::OnceCell<String>>,
}

fn ms(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX)
}

impl Asker {
    /// An asker over `engine`, asking the LLM `llm` describes (which may be unconfigured:
    /// then every question answers `not_configured`).
    pub fn new(engine: Engine, llm: LlmConfig) -> Self {
        Self {
            engine,
            llm,
            system: std::sync::Arc::default(),
        }
    }

    /// Whether an LLM is configured (otherwise every question answers `not_configured`).
    pub fn configured(&self) -> bool {
        self.llm.endpoint.is_some()
    }

    /// The question trimmed, or the error for an empty or overlong one.
    pub fn question(text: &str) -> Result<&str, Error> {
        let q = text.trim();
        if q.is_empty() {
            return Err(Error::invalid("question is required"));
        }
        if q.chars().count() > MAX_QUESTION_CHARS {
            return Err(Error::invalid(format!(
                "question is longer than {MAX_QUESTION_CHARS} characters"
            )));
        }
        Ok(q)
    }

    /// Answers `question` as `caller` (an administrator; the engine checks access again).
    /// `Err` is a question or LLM failure, before any SQL existed.
    pub async fn ask(&self, caller: &Caller, question: &str) -> Result<Outcome, Error> {
        let question = Self::question(question)?.to_owned();
        let llm = Llm::new(&self.llm)?;
        let system = self
            .system
            .get_or_try_init(|| self.system_prompt(caller))
            .await?;
        let asked = Instant::now();
        let proposal = llm.propose(system, &question).await?;
        let llm_ms = ms(asked);
        let sql = match check(&proposal.sql) {
            Ok(sql) => sql,
            Err(reason) => {
                return Ok(Outcome::Rejected {
                    question,
                    sql: proposal.sql,
                    rationale: proposal.rationale,
                    reason,
                    llm_ms,
                })
            }
        };
        let started = Instant::now();
        match tokio::time::timeout(EXEC_TIMEOUT, self.run(caller, &sql)).await {
            Ok(Ok((columns, rows, truncated))) => Ok(Outcome::Answered(Answer {
                question,
                sql,
                rationale: proposal.rationale,
                columns,
                row_count: rows.len(),
                rows,
                truncated,
                llm_ms,
                exec_ms: ms(started),
            })),
            Ok(Err(error)) => Ok(Outcome::Failed {
                question,
                sql,
                rationale: proposal.rationale,
                error,
                llm_ms,
            }),
            Err(_) => Ok(Outcome::Failed {
                question,
                sql,
                rationale: proposal.rationale,
                error: Error::new(
                    ErrorKind::Timeout,
                    format!("the statement ran past {} s", EXEC_TIMEOUT.as_secs()),
                ),
                llm_ms,
            }),
        }
    }

    /// Runs an accepted statement: its columns, at most [`MAX_ROWS`] rows, and whether
    /// there were more.
    async fn run(
        &self,
        caller: &Caller,
        sql: &str,
    ) -> Result<(Vec<String>, Vec<Value>, bool), Error> {
        let mut plan = None;
        let mut stream = self
            .engine
            .run(caller, sql, MAX_ROWS, &mut plan, None)
            .await?;
        let columns = stream.column_names();
        let batches = stream.collect().await?;
        Ok((
            columns,
            rows_as_objects(&batches),
            stream.truncated().unwrap_or(false),
        ))
    }

    /// The rules and the allowed tables' columns, read through the engine as `caller` so
    /// the digest is exactly what the statement will see.
    async fn system_prompt(&self, caller: &Caller) -> Result<String, Error> {
        let mut digest = String::new();
        for table in ALLOWED_TABLES {
            let mut plan = None;
            let stream = self
                .engine
                .run(
                    caller,
                    &format!("SELECT * FROM {table}"),
                    1,
                    &mut plan,
                    None,
                )
                .await?;
            let columns: Vec<String> = stream
                .schema()
                .fields()
                .iter()
                .map(|f| format!("{} {}", f.name(), svc_plugin_api::type_name(f.data_type())))
                .collect();
            digest.push_str(&format!("- {table}({})\n", columns.join(", ")));
        }
        Ok(format!(
            "You write one SQL query (Apache DataFusion dialect) that answers an \
             administrator's question about AI agents' tool usage.\n\
             Rules: exactly one SELECT (WITH allowed); read only these tables; no other \
             tables, no table functions, no DDL or DML; timestamps are ISO 8601 text in UTC \
             (compare them as text, or cast them); keep results small (aggregate, LIMIT 100).\n\
             Tables:\n{digest}\
             svc_telemetry has one row per tool call (event_type tool_use, mcp_call, subagent, \
             slash_command; is_error marks failures); svc_sessions has one row per session \
             file.\n\
             Answer with a JSON object {{\"sql\": \"...\", \"rationale\": \"...\"}} and nothing else."
        ))
    }
}
