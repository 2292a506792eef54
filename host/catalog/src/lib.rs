//! svc-catalog: what sources this server can read and what it knows about their tables.
//!
//! - The driver registry ([`drivers::Drivers`]): the built-in drivers, then dynamic driver
//!   libraries, keyed by `source_type`. This is the one place that names driver crates.
//! - Drivers' settings ([`settings::DriverSettings`]): `[data_source.<source_type>]` with
//!   `SVC_<TYPE>_<KEY>` overrides, through one path.
//! - Registry changes ([`registry::Registry`]): validation, the store write, the audit row and
//!   the flush of every per-table cache ([`caches::CacheHooks`]), in one place; the seeding of
//!   the tables drivers declare.
//! - A table's data on this server's disk ([`data`]): what it holds, and uploads replacing it.
//! - WHERE examples for the catalog ([`examples`]), from what is known of a table's columns.
//! - Sync schedules ([`schedule::Schedule`]).
//! - The persistent metadata warmup of remote tables ([`warmup::MetadataWarmer`]).
//!
//! Must never import poem or any svc crate above it (query, the host); it stands on
//! `svc-store`, `svc-core` and the driver contract.

pub mod caches;
pub mod data;
pub mod drivers;
pub mod examples;
pub mod registry;
pub mod schedule;
pub mod settings;
pub mod warmup;
