//! The contract between the svc host and the drivers that read each kind of source.
//!
//! The host dispatches every data request on a table's `source_type` to exactly one
//! [`SourceDriver`]. Drivers never reach into the host; the host never special-cases a
//! source kind outside its driver (ARCHITECTURE §3).
//!
//! This crate starts with the identity part of the contract — enough for the host to know
//! which source kinds it can serve and refuse registrations of any other. The data methods
//! (schema, sample, table provider, estimate, metadata refresh, sync) arrive with the
//! discovery issue.

/// Version of this contract. Dynamically loaded drivers state the version they were built
/// against; the host refuses a library whose version differs.
pub const PLUGIN_API_VERSION: u32 = 1;

/// One source kind (`local`, `warehouse`, `internal`, …).
pub trait SourceDriver: Send + Sync {
    /// The `source_type` value of registry rows this driver serves.
    fn source_type(&self) -> &'static str;

    /// Whether admins may register tables of this kind through the API.
    ///
    /// `internal` rows are seeded by the host and never registered by hand.
    fn registrable(&self) -> bool {
        true
    }
}
