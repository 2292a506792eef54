//! svc-server: the HTTP API, authentication, the state store, the audit log and the host of
//! source drivers. The binary's entry point is `main.rs`; everything it uses lives here so
//! benchmarks and unit tests reach the same code.

pub mod access;
pub mod admin;
pub mod api;
pub mod audit;
pub mod auth;
pub mod config;
pub mod connections;
pub mod discovery;
pub mod drivers;
pub mod encode;
pub mod query;
pub mod registry;
pub mod schedule;
pub mod scheduler;
pub mod scripts;
pub mod server;
pub mod state;
pub mod store;
pub mod sync;
pub mod warmup;
