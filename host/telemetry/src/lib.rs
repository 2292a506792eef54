//! svc-telemetry: agent session files in, tool-usage telemetry out.
//!
//! - Owns the session file root and its path rules ([`files`], [`names`]), the JSONL
//!   extractor ([`extract`], over [`transcript`] shapes read by [`lines`]), plugin
//!   attribution ([`attribution`]) and the pipeline runs ([`runner`]).
//! - Principal type: [`Pipeline`], holding only the store and the session root.
//! - Must never import poem or any svc crate above it (catalog, query, the host); it stands
//!   on `svc-store` and `svc-core`. HTTP, auth and audit stay in the host.
//!
//! Extraction follows reference/observability.md §4 with its quirks fixed (see
//! [`extract`]); the store keeps what it yields in the usage tables that the internal tables
//! `svc_sessions` and `svc_telemetry` expose.

pub mod attribution;
pub mod corpus;
pub mod extract;
pub mod files;
pub mod lines;
pub mod names;
pub mod runner;
pub mod transcript;

pub use runner::{Pipeline, RunReport, Trigger};
