//! Background work the server runs on its own: sync passes over materialized tables, scheduled
//! scripts, and the scheduler loop that starts both.

pub mod scheduler;
pub mod scripts;
pub mod sync;
