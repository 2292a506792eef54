//! svc-query: the query engine — which statements may run, which tables they name, the
//! remote size guard, push-down, the query runtime and its memory watchdog — and the result
//! encoders (JSON, Arrow IPC, CSV, parquet).
//!
//! Principal type: [`engine::Engine`], which holds only the handles it reads through (store,
//! drivers, the access check) and its limits.
//!
//! Must never import poem or the host; it stands on `svc-catalog`, `svc-auth`, `svc-store`
//! and `svc-core`.

pub mod bounded;
pub mod encode;
pub mod engine;
pub mod format;
pub mod predicate;
pub mod quota;
pub mod runtime;
pub mod scan;
pub mod statement;
pub mod stream;
pub mod string_key;
pub mod watchdog;

pub use engine::{Engine, QueryLimits, Route};
