//! Dynamic drivers: the C ABI between `svc-server` and a driver built as a shared library.
//!
//! A driver library exports one symbol, [`ENTRY_SYMBOL`], a function returning a pointer to a
//! static [`DriverDecl`]. The declaration's first field is the plugin-api version the library
//! was built against; the host reads it before anything else, so a library built against
//! another version is refused without trusting the rest of its layout.
//!
//! Past the version, only FFI-stable values cross:
//! - JSON bytes ([`FfiBytes`]) for tables, callers, schemas, metadata and errors;
//! - the Arrow C stream interface for sample batches;
//! - datafusion-ffi's `FFI_TableProvider` for the query and scan paths;
//! - async-ffi futures, so a slow source never blocks a host thread.
//!
//! Each side frees what it allocated: every value carries its creator's release function.
//! A library's calls run on a tokio runtime of its own, because the library links its own copy
//! of tokio whose thread-locals the host's runtime does not set.
//!
//! Driver authors use [`export_driver!`](crate::export_driver); the host uses [`load`].

// This module is the one place where the workspace's `unsafe_code = deny` is lifted: it is
// the FFI boundary, and every unsafe block below is about a value that crossed it.
#![allow(unsafe_code)]

mod export;
mod import;

use std::ffi::c_void;

use async_ffi::FfiFuture;
use datafusion::arrow::ffi_stream::FFI_ArrowArrayStream;
use datafusion_ffi::proto::logical_extension_codec::FFI_LogicalExtensionCodec;
use datafusion_ffi::table_provider::FFI_TableProvider;
use serde_json::{json, Value};

use crate::{DriverError, ErrorKind};

pub use export::{create_exported, DriverConfig};
pub use import::{load, LoadError};

/// Name of the function every driver library exports.
pub const ENTRY_SYMBOL: &str = "svc_driver_entry";

/// The datafusion-ffi major version this side was built with (both sides must agree).
pub extern "C" fn datafusion_ffi_version() -> u64 {
    datafusion_ffi::version()
}

/// What a library's entry function points at.
#[repr(C)]
pub struct DriverDecl {
    /// [`crate::PLUGIN_API_VERSION`] as the library saw it. Must stay the first field.
    pub api_version: u32,
    /// The library's datafusion-ffi major version.
    pub datafusion_ffi_version: extern "C" fn() -> u64,
    /// Builds the driver from a JSON [`DriverConfig`].
    pub create: unsafe extern "C" fn(config: FfiBytes) -> FfiOutcome<FfiDriver>,
}

/// Owned bytes that free themselves with their creator's allocator.
#[repr(C)]
pub struct FfiBytes {
    ptr: *mut u8,
    len: usize,
    cap: usize,
    release: unsafe extern "C" fn(ptr: *mut u8, len: usize, cap: usize),
}

// SAFETY: FfiBytes owns its buffer exclusively, like the Vec it was made from.
unsafe impl Send for FfiBytes {}
// SAFETY: shared access is read-only.
unsafe impl Sync for FfiBytes {}

unsafe extern "C" fn release_vec(ptr: *mut u8, len: usize, cap: usize) {
    // SAFETY: ptr/len/cap come from a Vec<u8> this library leaked in `FfiBytes::from_vec`.
    drop(unsafe { Vec::from_raw_parts(ptr, len, cap) });
}

impl FfiBytes {
    /// Takes ownership of a byte vector.
    pub fn from_vec(bytes: Vec<u8>) -> Self {
        let mut bytes = std::mem::ManuallyDrop::new(bytes);
        Self {
            ptr: bytes.as_mut_ptr(),
            len: bytes.len(),
            cap: bytes.capacity(),
            release: release_vec,
        }
    }

    /// A value serialized as JSON.
    pub fn json<T: serde::Serialize>(value: &T) -> Self {
        Self::from_vec(serde_json::to_vec(value).expect("plain data serializes"))
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr/len describe the live buffer this value owns.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// Decodes the bytes as JSON.
    pub fn parse<T: serde::de::DeserializeOwned>(&self) -> Result<T, DriverError> {
        serde_json::from_slice(self.as_slice()).map_err(|e| {
            DriverError::internal(format!("malformed value across the driver ABI: {e}"))
        })
    }
}

impl Drop for FfiBytes {
    fn drop(&mut self) {
        // SAFETY: `release` belongs to the library that allocated the buffer.
        unsafe { (self.release)(self.ptr, self.len, self.cap) }
    }
}

/// A result across the boundary; errors are a JSON [`DriverError`].
#[repr(C, u8)]
pub enum FfiOutcome<T> {
    /// Success.
    Ok(T),
    /// `{"kind", "message", "details", "code"}`.
    Err(FfiBytes),
}

impl<T> FfiOutcome<T> {
    /// Wraps a driver result.
    pub fn from_result(result: Result<T, DriverError>) -> Self {
        match result {
            Ok(v) => Self::Ok(v),
            Err(e) => Self::Err(FfiBytes::json(&json!({
                "kind": e.kind.as_str(),
                "message": e.message,
                "details": e.details,
                "code": e.code,
            }))),
        }
    }

    /// Back to a driver result.
    pub fn into_result(self) -> Result<T, DriverError> {
        match self {
            Self::Ok(v) => Ok(v),
            Self::Err(bytes) => {
                let v: Value = bytes.parse()?;
                let kind = v["kind"]
                    .as_str()
                    .and_then(ErrorKind::from_name)
                    .unwrap_or(ErrorKind::Internal);
                let message = v["message"].as_str().unwrap_or("driver failed").to_owned();
                let mut err = DriverError::new(kind, message).with_details(v["details"].clone());
                err.code = v["code"].as_str().map(str::to_owned);
                Err(err)
            }
        }
    }
}

/// A driver instance living in a library: its private state and its functions.
#[repr(C)]
pub struct FfiDriver {
    private_data: *mut c_void,
    /// JSON [`Description`].
    describe: unsafe extern "C" fn(&FfiDriver) -> FfiBytes,
    schema: unsafe extern "C" fn(
        &FfiDriver,
        table: FfiBytes,
        caller: FfiBytes,
    ) -> FfiFuture<FfiOutcome<FfiBytes>>,
    sample: unsafe extern "C" fn(
        &FfiDriver,
        table: FfiBytes,
        n: usize,
        caller: FfiBytes,
    ) -> FfiFuture<FfiOutcome<FFI_ArrowArrayStream>>,
    table_provider: unsafe extern "C" fn(
        &FfiDriver,
        table: FfiBytes,
        caller: FfiBytes,
        codec: FFI_LogicalExtensionCodec,
    ) -> FfiFuture<FfiOutcome<FFI_TableProvider>>,
    refresh_metadata:
        unsafe extern "C" fn(&FfiDriver, table: FfiBytes) -> FfiFuture<FfiOutcome<FfiBytes>>,
    /// UTF-8 path of the table's file; empty when it has none.
    local_file: unsafe extern "C" fn(&FfiDriver, table: FfiBytes) -> FfiBytes,
    release: unsafe extern "C" fn(&mut FfiDriver),
}

// SAFETY: the exporting side only builds FfiDrivers over `SourceDriver`s, which are Send + Sync.
unsafe impl Send for FfiDriver {}
// SAFETY: as above.
unsafe impl Sync for FfiDriver {}

impl Drop for FfiDriver {
    fn drop(&mut self) {
        // SAFETY: `release` belongs to the library that built this driver.
        unsafe { (self.release)(self) }
    }
}

/// The constant facts about a driver, read once at load.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Description {
    source_type: String,
    registrable: bool,
    sql_flavor: String,
}
