//! svc-host (binary `svc-server`): the top of the layered host.
//!
//! - [`api`]: HTTP only — routes, extractors, the error envelope and its one status mapping.
//! - [`jobs`]: sync passes, scripts and the scheduler loop.
//! - [`state`]: the composition root, assembling the services of the crates below.
//! - [`config`], [`server`], [`connections`]: settings, start-up and the listener.
//!
//! Everything below (`svc-query`, `svc-catalog`, `svc-auth`, `svc-store`, `svc-core`) is
//! free of HTTP; nothing there may import this crate (`.ci/check-layers` enforces it).

pub mod api;
pub mod config;
pub mod connections;
pub mod discovery;
pub mod jobs;
pub mod server;
pub mod state;
