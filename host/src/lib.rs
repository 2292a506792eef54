//! svc-host (binary `svc-server`): the top of the layered host.
//!
//! - [`api`]: HTTP only — routes, extractors, the error envelope and its one status mapping.
//! - [`pages`]: the web pages over HTTP — browser sessions, CSRF, assets, redirects; what
//!   they show is read through the same services as the API and rendered by `svc-pages`.
//! - [`mcp`]: the Model Context Protocol for agents (rmcp over streamable HTTP), its tools
//!   calling the same code paths as the API.
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
pub mod mcp;
pub mod ops;
pub mod pages;
pub mod server;
pub mod state;
