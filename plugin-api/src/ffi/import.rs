//! The host side: loads a driver library and presents it as a [`SourceDriver`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::arrow::ffi_stream::ArrowArrayStreamReader;
use datafusion::execution::context::SessionContext;
use datafusion::execution::TaskContextProvider;
use datafusion_ffi::proto::logical_extension_codec::FFI_LogicalExtensionCodec;

use super::{Description, DriverConfig, DriverDecl, FfiBytes, FfiDriver, ENTRY_SYMBOL};
use crate::{
    Caller, DriverError, RecordBatch, Result, SourceDriver, TableMetadata, TableProvider, TableRef,
    TableSchema, PLUGIN_API_VERSION,
};

/// Why a library was refused (one line, for the start-up log).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct LoadError(String);

/// Loads the driver in the shared library at `path`.
///
/// The library stays mapped for the life of the process: table providers and batches it
/// produced may outlive any handle the host keeps, so unloading it is never safe.
pub fn load(
    path: &Path,
    config: &DriverConfig,
) -> std::result::Result<Arc<dyn SourceDriver>, LoadError> {
    // SAFETY: loading runs the library's initialisers; the operator chose this directory.
    let library = unsafe { libloading::Library::new(path) }
        .map_err(|e| LoadError(format!("not a loadable shared library: {e}")))?;
    // SAFETY: the symbol's type is the documented entry signature.
    let entry = unsafe { library.get::<unsafe extern "C" fn() -> *const DriverDecl>(ENTRY_SYMBOL) }
        .map_err(|_| {
            LoadError(format!(
                "no `{ENTRY_SYMBOL}` symbol (is it an svc driver built with export_driver!?)"
            ))
        })?;
    // SAFETY: the entry function takes no arguments and returns a pointer to a static.
    let decl = unsafe { entry() };
    if decl.is_null() {
        return Err(LoadError(format!(
            "`{ENTRY_SYMBOL}` returned no declaration"
        )));
    }
    // SAFETY: the version is the first field of every declaration layout, so reading it is
    // sound whatever version the library was built against.
    let api_version = unsafe { std::ptr::read(decl as *const u32) };
    if api_version != PLUGIN_API_VERSION {
        return Err(LoadError(format!(
            "built against plugin-api version {api_version}, this server speaks version {PLUGIN_API_VERSION}"
        )));
    }
    // SAFETY: same version, so the layout is ours.
    let decl = unsafe { &*decl };
    let (theirs, ours) = ((decl.datafusion_ffi_version)(), datafusion_ffi::version());
    if theirs != ours {
        return Err(LoadError(format!(
            "built against datafusion-ffi {theirs}, this server uses {ours}"
        )));
    }
    // SAFETY: `create` follows the declared ABI.
    let ffi = unsafe { (decl.create)(FfiBytes::json(config)) }
        .into_result()
        .map_err(|e| LoadError(format!("the driver constructor failed: {}", e.message)))?;
    // SAFETY: `describe` follows the declared ABI.
    let description: Description = unsafe { (ffi.describe)(&ffi) }
        .parse()
        .map_err(|e| LoadError(format!("unreadable driver description: {}", e.message)))?;
    std::mem::forget(library);
    Ok(Arc::new(DynamicDriver::new(
        ffi,
        description,
        path.to_owned(),
    )))
}

/// A driver living in a shared library.
struct DynamicDriver {
    ffi: FfiDriver,
    source_type: &'static str,
    registrable: bool,
    sql_flavor: &'static str,
    /// Serializes push-down filters for the library; decodes against `_task_ctx`.
    codec: FFI_LogicalExtensionCodec,
    /// The codec holds a weak reference; this keeps it alive.
    _task_ctx: Arc<SessionContext>,
    path: PathBuf,
}

impl DynamicDriver {
    fn new(ffi: FfiDriver, d: Description, path: PathBuf) -> Self {
        let task_ctx = Arc::new(SessionContext::new());
        let provider: Arc<dyn TaskContextProvider> = task_ctx.clone();
        // One driver per source type, loaded once: leaking two short strings is the price of
        // answering the trait's `&'static str` methods.
        Self {
            ffi,
            source_type: Box::leak(d.source_type.into_boxed_str()),
            registrable: d.registrable,
            sql_flavor: Box::leak(d.sql_flavor.into_boxed_str()),
            codec: FFI_LogicalExtensionCodec::new_default(&provider),
            _task_ctx: task_ctx,
            path,
        }
    }
}

impl std::fmt::Debug for DynamicDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DynamicDriver")
            .field("source_type", &self.source_type)
            .field("path", &self.path)
            .finish()
    }
}

#[async_trait::async_trait]
impl SourceDriver for DynamicDriver {
    fn source_type(&self) -> &'static str {
        self.source_type
    }

    fn registrable(&self) -> bool {
        self.registrable
    }

    fn sql_flavor(&self, _table: &TableRef) -> &'static str {
        self.sql_flavor
    }

    async fn schema(&self, table: &TableRef, caller: &Caller) -> Result<TableSchema> {
        // SAFETY: `schema` follows the declared ABI; the future owns its inputs.
        let future =
            unsafe { (self.ffi.schema)(&self.ffi, FfiBytes::json(table), FfiBytes::json(caller)) };
        future.await.into_result()?.parse()
    }

    async fn sample(
        &self,
        table: &TableRef,
        n: usize,
        caller: &Caller,
    ) -> Result<Vec<RecordBatch>> {
        // SAFETY: as above.
        let future = unsafe {
            (self.ffi.sample)(&self.ffi, FfiBytes::json(table), n, FfiBytes::json(caller))
        };
        let stream = future.await.into_result()?;
        let reader = ArrowArrayStreamReader::try_new(stream).map_err(arrow_error)?;
        reader
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(arrow_error)
    }

    async fn table_provider(
        &self,
        table: &TableRef,
        caller: &Caller,
    ) -> Result<Arc<dyn TableProvider>> {
        // SAFETY: as above.
        let future = unsafe {
            (self.ffi.table_provider)(
                &self.ffi,
                FfiBytes::json(table),
                FfiBytes::json(caller),
                self.codec.clone(),
            )
        };
        let provider = future.await.into_result()?;
        Ok((&provider).into())
    }

    async fn refresh_metadata(&self, table: &TableRef) -> Result<TableMetadata> {
        // SAFETY: as above.
        let future = unsafe { (self.ffi.refresh_metadata)(&self.ffi, FfiBytes::json(table)) };
        future.await.into_result()?.parse()
    }

    fn local_file(&self, table: &TableRef) -> Option<PathBuf> {
        // SAFETY: as above.
        let path = unsafe { (self.ffi.local_file)(&self.ffi, FfiBytes::json(table)) };
        let path = std::str::from_utf8(path.as_slice()).ok()?;
        (!path.is_empty()).then(|| PathBuf::from(path))
    }
}

fn arrow_error(e: datafusion::arrow::error::ArrowError) -> DriverError {
    DriverError::internal(format!("reading batches from the driver library: {e}"))
}
