//! svc-ask: an administrator's question about agents' tool usage, turned into SQL by an
//! OpenAI-compatible chat-completions endpoint, checked, and run by svc's own engine as the
//! asking administrator over the telemetry tables only.
//!
//! Principal type: [`Asker`]. The generated SQL is untrusted input: [`sql::check`] accepts one
//! read-only statement naming only [`sql::ALLOWED_TABLES`] (no users, tokens, audit or
//! registered data; no file functions, which are table names outside the list), and the
//! engine then runs it under its own sandbox, with a row cap and a time limit.
//!
//! Must never import poem or the host; it stands on `svc-query`, `svc-auth` and `svc-core`.

pub mod ask;
pub mod llm;
pub mod sql;

pub use ask::{Answer, Asker, Outcome};
pub use llm::LlmConfig;
