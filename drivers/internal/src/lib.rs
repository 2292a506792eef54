//! The three read-only `svc_*` tables, served from the state store and filtered per caller.
//!
//! Registered with the host under `source_type = "internal"`. The data side of the driver
//! (schema, sample, table provider, …) is filled in by the discovery and later issues; today
//! it lets the host accept registrations of this source kind.

use svc_plugin_api::SourceDriver;

/// The `internal` source driver.
#[derive(Debug, Default)]
pub struct InternalDriver;

impl SourceDriver for InternalDriver {
    fn source_type(&self) -> &'static str {
        "internal"
    }

    fn registrable(&self) -> bool {
        false
    }
}

/// One of the service's own tables exposed through the ordinary query path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InternalTable {
    /// Registry id.
    pub id: &'static str,
    /// The store table behind it.
    pub backing_table: &'static str,
    /// Catalog display name.
    pub display_name: &'static str,
    /// Column compared with the caller's identity for non-admins.
    pub filter_column: &'static str,
}

/// Bucket of every internal registry row.
pub const INTERNAL_BUCKET: &str = "Internal";

/// The internal tables; the host seeds exactly these at every start and removes others.
pub const ROSTER: &[InternalTable] = &[
    InternalTable {
        id: "svc_sessions",
        backing_table: "usage_session_summary",
        display_name: "Service sessions",
        filter_column: "username",
    },
    InternalTable {
        id: "svc_telemetry",
        backing_table: "usage_events",
        display_name: "Service telemetry events",
        filter_column: "username",
    },
    InternalTable {
        id: "svc_audit",
        backing_table: "audit_log",
        display_name: "Service audit log",
        filter_column: "user_id",
    },
];
