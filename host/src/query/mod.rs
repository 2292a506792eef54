//! The query engine's front half (issue 4, in progress): which statements may run and which
//! tables they name. Planning and execution with DataFusion come next.

pub mod statement;
