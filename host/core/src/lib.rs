//! svc-core: what every layer of the host shares and nothing else.
//!
//! - Owns the one domain error, [`Error`], whose [`ErrorKind`] says *when* a failure happens
//!   and carries the one table from kind to HTTP status number ([`ErrorKind::status`]), so an
//!   audit row written in any layer records the status the client saw.
//! - Owns the store's timestamp format ([`clock`]), the table-id rules ([`table_id`]), and
//!   the in-memory cache of the request path ([`cache`]) with its hasher ([`hash`]).
//! - Must never import poem, sqlx or any other svc crate except `svc-plugin-api` (whose
//!   driver errors it translates, and counts as they pass) and `svc-metrics`. It is the leaf
//!   every host crate stands on.

pub mod cache;
pub mod clock;
mod error;
pub mod hash;
pub mod table_id;

pub use error::{Error, ErrorKind, Result};
