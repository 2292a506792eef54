//! The query engine: which statements may run, which tables they name, and running them with
//! DataFusion over the drivers' table providers.

pub mod bounded;
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

pub use engine::{QueryLimits, Route};
