//! The query engine: which statements may run, which tables they name, and running them with
//! DataFusion over the drivers' table providers.

pub mod engine;
pub mod statement;

pub use engine::{QueryLimits, Route};
