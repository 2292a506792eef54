//! `POST /api/admin/telemetry/ask`: a question about the telemetry, answered by SQL an LLM
//! proposes and svc's engine runs (see `svc-ask`).

use std::sync::Arc;
use std::time::Instant;

use poem_openapi::payload::Json;
use poem_openapi::{Enum, Object, OpenApi};
use serde_json::Value;
use svc_ask::Outcome;
use svc_store::audit::Event;

use super::{AdminAuth, ApiResult, Tag};
use crate::state::AppState;

pub struct AskApi {
    pub state: Arc<AppState>,
}

/// A question.
#[derive(Object)]
struct AskRequest {
    /// 1 to 1,000 characters.
    question: String,
}

/// What became of the LLM's SQL.
#[derive(Enum, Debug, Clone, Copy, PartialEq, Eq)]
#[oai(rename_all = "lowercase")]
enum AskOutcome {
    /// It ran; `columns` and `rows` hold the result.
    Answered,
    /// It was refused before anything ran; `error` says why.
    Rejected,
    /// It ran and failed; `error` holds the engine's message.
    Failed,
}

/// The answer to a question.
#[derive(Object)]
struct AskResponse {
    outcome: AskOutcome,
    /// The question, trimmed.
    question: String,
    /// The SQL (as run when answered or failed; as proposed when rejected).
    sql: String,
    /// The LLM's reason for the SQL.
    rationale: String,
    /// Why the SQL was rejected or how it failed.
    error: Option<String>,
    /// Result column names (empty unless answered).
    columns: Vec<String>,
    /// Rows as objects keyed by column, at most 1,000.
    rows: Vec<Value>,
    /// Rows returned.
    row_count: usize,
    /// More rows existed than were returned.
    truncated: bool,
    /// Milliseconds waiting for the LLM.
    llm_ms: u64,
    /// Milliseconds running the SQL (0 unless answered).
    exec_ms: u64,
}

#[OpenApi(prefix_path = "/api/admin/telemetry", tag = "Tag::Telemetry")]
impl AskApi {
    /// Turns a question into one SELECT over `svc_telemetry` and `svc_sessions` with the
    /// configured LLM (`[llm]`; `not_configured` otherwise) and runs it as the asking
    /// administrator: at most 1,000 rows, 30 seconds. SQL that writes, reads any other
    /// table or file, or holds more than one statement is rejected and never runs. 200 with
    /// `outcome` whenever the LLM answered; LLM failures are error envelopes. Audited as
    /// `usage.ask`.
    #[oai(path = "/ask", method = "post", operation_id = "ask_telemetry")]
    async fn ask(&self, auth: AdminAuth, body: Json<AskRequest>) -> ApiResult<Json<AskResponse>> {
        let started = Instant::now();
        let result = self.state.ask.ask(&auth.0, &body.0.question).await;
        let event = Event::new("usage.ask")
            .resource("telemetry")
            .param("question", body.0.question.trim());
        let (event, response) = match result {
            Err(e) => (event.failed(e.status(), &e.to_string()), Err(e)),
            Ok(Outcome::Answered(a)) => (
                event
                    .param("sql", a.sql.as_str())
                    .param("row_count", a.row_count)
                    .param("llm_ms", a.llm_ms)
                    .param("exec_ms", a.exec_ms),
                Ok(AskResponse {
                    outcome: AskOutcome::Answered,
                    question: a.question,
                    sql: a.sql,
                    rationale: a.rationale,
                    error: None,
                    columns: a.columns,
                    rows: a.rows,
                    row_count: a.row_count,
                    truncated: a.truncated,
                    llm_ms: a.llm_ms,
                    exec_ms: a.exec_ms,
                }),
            ),
            Ok(Outcome::Rejected {
                question,
                sql,
                rationale,
                reason,
                llm_ms,
            }) => (
                event
                    .param("sql", sql.as_str())
                    .param("llm_ms", llm_ms)
                    .failed(422, &format!("SQL rejected: {reason}")),
                Ok(unanswered(
                    AskOutcome::Rejected,
                    question,
                    sql,
                    rationale,
                    reason,
                    llm_ms,
                )),
            ),
            Ok(Outcome::Failed {
                question,
                sql,
                rationale,
                error,
                llm_ms,
            }) => (
                event
                    .param("sql", sql.as_str())
                    .param("llm_ms", llm_ms)
                    .failed(error.status(), &format!("SQL failed: {error}")),
                Ok(unanswered(
                    AskOutcome::Failed,
                    question,
                    sql,
                    rationale,
                    error.to_string(),
                    llm_ms,
                )),
            ),
        };
        self.state
            .audit
            .write(&auth.0.actor, event.timed(started))
            .await;
        Ok(Json(response?))
    }
}

fn unanswered(
    outcome: AskOutcome,
    question: String,
    sql: String,
    rationale: String,
    error: String,
    llm_ms: u64,
) -> AskResponse {
    AskResponse {
        outcome,
        question,
        sql,
        rationale,
        error: Some(error),
        columns: Vec::new(),
        rows: Vec::new(),
        row_count: 0,
        truncated: false,
        llm_ms,
        exec_ms: 0,
    }
}
