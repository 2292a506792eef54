//! Black-box tests: each test starts a real `svc-server` process on a loopback port with its
//! own data directory (and, when `SVC_TEST_DATABASE_URL` is set, its own PostgreSQL
//! database), then speaks HTTP to it like a client would.

mod access;
mod activity;
mod audit_sweep;
mod auth;
mod browser;
mod cli;
mod discovery;
mod drivers;
mod emulator;
mod hostile;
mod integration;
mod integration_mysql;
mod integration_sqlite;
mod integration_tls;
mod marketplace;
mod mcp;
mod memory;
mod memory_review;
mod observability;
mod openapi;
mod operations;
mod ops;
mod pages;
mod query;
mod registry;
mod scan;
mod sdk;
mod sessions;
mod store;
mod support;
mod svc_cli;
mod telemetry;
mod telemetry_export_ask;
mod telemetry_reads;
mod ticketing;
mod upload;
mod warehouse;
