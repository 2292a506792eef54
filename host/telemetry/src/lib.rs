//! svc-telemetry: agent session files in, tool-usage telemetry out.
//!
//! - Owns the session file root and its path rules ([`files`], [`names`]), the JSONL
//!   extractor ([`extract`], over [`transcript`] shapes that [`reader`] reads from the
//!   lines of [`lines`], after the error-flag pass [`errors`]), plugin attribution
//!   ([`attribution`]) and the pipeline runs ([`runner`]).
//! - Reads for people: the telemetry browser ([`browse`]), sessions and their transcripts
//!   ([`sessions`], [`transcript_view`]) and ZIP streams of a user's files ([`archive`]).
//! - Principal type: [`Pipeline`], holding only the store and the session root.
//! - Must never import poem or any svc crate above it (catalog, query, the host); it stands
//!   on `svc-store` and `svc-core`, and writes event segments in the format the internal
//!   driver reads (`svc_driver_internal::events`). HTTP, auth and audit stay in the host.
//!
//! Extraction follows reference/observability.md §4 with its quirks fixed (see
//! [`extract`]). Each file's events become one parquet segment (`svc_telemetry`'s rows);
//! the store keeps its summary (`svc_sessions`), daily counts and the rollups. After each
//! run the loose segments are packed ([`compact`]) for administrators' reads.

pub mod archive;
pub mod attribution;
pub mod browse;
pub mod compact;
pub mod corpus;
pub mod errors;
pub mod event_index;
pub mod events;
pub mod extract;
pub mod files;
pub mod lines;
pub mod names;
pub mod reader;
pub mod runner;
pub mod sessions;
pub mod tally;
pub mod transcript;
pub mod transcript_view;

pub use runner::{Pipeline, RunReport, Trigger};
pub use svc_driver_internal::EventSegments;
