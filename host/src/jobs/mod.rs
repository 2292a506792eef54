//! Background work the server runs on its own: sync passes over materialized tables, scheduled
//! scripts, the scheduler loop that starts both, and the ticketing compactor.

pub mod scheduler;
pub mod scripts;
pub mod sync;
pub mod ticketing;
