//! The library side: wraps a [`SourceDriver`] into an [`FfiDriver`].

use std::ffi::c_void;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use async_ffi::{FfiFuture, FutureExt};
use datafusion::arrow::datatypes::Schema;
use datafusion::arrow::ffi_stream::FFI_ArrowArrayStream;
use datafusion::arrow::record_batch::RecordBatchIterator;
use datafusion_ffi::proto::logical_extension_codec::FFI_LogicalExtensionCodec;
use datafusion_ffi::table_provider::FFI_TableProvider;
use tokio::runtime::Runtime;

use super::{Description, FfiBytes, FfiDriver, FfiOutcome};
use crate::{Caller, DriverError, SourceDriver, TableRef};

/// What the host tells a driver library when it builds the driver.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct DriverConfig {
    /// The server's data directory (drivers keep their files under `extracts/<source_type>`).
    pub data_dir: PathBuf,
}

/// Declares a shared library's driver: `export_driver!(MyDriver::new)` where the constructor
/// is `fn(&DriverConfig) -> svc_plugin_api::Result<MyDriver>`.
///
/// The library must be built with `crate-type = ["cdylib"]`.
#[macro_export]
macro_rules! export_driver {
    ($constructor:path) => {
        /// The entry point `svc-server` looks up (see `svc_plugin_api::ffi`).
        #[allow(unsafe_code)]
        #[no_mangle]
        pub extern "C" fn svc_driver_entry() -> *const $crate::ffi::DriverDecl {
            #[allow(unsafe_code)]
            unsafe extern "C" fn create(
                config: $crate::ffi::FfiBytes,
            ) -> $crate::ffi::FfiOutcome<$crate::ffi::FfiDriver> {
                $crate::ffi::create_exported(config, $constructor)
            }
            static DECL: $crate::ffi::DriverDecl = $crate::ffi::DriverDecl {
                api_version: $crate::PLUGIN_API_VERSION,
                datafusion_ffi_version: $crate::ffi::datafusion_ffi_version,
                create,
            };
            &DECL
        }
    };
}

struct Exported {
    driver: Arc<dyn SourceDriver>,
    runtime: Runtime,
}

/// Builds the driver with `constructor`; used by [`export_driver!`](crate::export_driver).
///
/// A panicking constructor is reported as an error rather than unwinding into the host.
pub fn create_exported<D, F>(config: FfiBytes, constructor: F) -> FfiOutcome<FfiDriver>
where
    D: SourceDriver + 'static,
    F: FnOnce(&DriverConfig) -> crate::Result<D>,
{
    let build = || -> crate::Result<FfiDriver> {
        let config: DriverConfig = config.parse()?;
        let driver = constructor(&config)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name(format!("svc-driver-{}", driver.source_type()))
            .enable_all()
            .build()
            .map_err(|e| DriverError::internal(format!("cannot start the driver runtime: {e}")))?;
        let private = Box::new(Exported {
            driver: Arc::new(driver),
            runtime,
        });
        Ok(FfiDriver {
            private_data: Box::into_raw(private) as *mut c_void,
            describe,
            schema,
            sample,
            table_provider,
            refresh_metadata,
            local_file,
            release,
        })
    };
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(build))
        .unwrap_or_else(|_| Err(DriverError::internal("the driver constructor panicked")));
    FfiOutcome::from_result(result)
}

fn exported(driver: &FfiDriver) -> &Exported {
    // SAFETY: `private_data` is the Box<Exported> made in `create_exported`, alive until release.
    unsafe { &*(driver.private_data as *const Exported) }
}

/// Runs `call` on the library's runtime and hands the host an FFI future of its outcome.
fn spawn<T, Fut>(
    driver: &FfiDriver,
    inputs: crate::Result<(TableRef, Caller)>,
    call: impl FnOnce(Arc<dyn SourceDriver>, TableRef, Caller) -> Fut,
) -> FfiFuture<FfiOutcome<T>>
where
    T: Send + 'static,
    Fut: Future<Output = crate::Result<T>> + Send + 'static,
{
    let me = exported(driver);
    let task =
        inputs.map(|(table, caller)| me.runtime.spawn(call(me.driver.clone(), table, caller)));
    async move {
        let result = match task {
            Ok(handle) => handle
                .await
                .unwrap_or_else(|e| Err(DriverError::internal(format!("the driver failed: {e}")))),
            Err(e) => Err(e),
        };
        FfiOutcome::from_result(result)
    }
    .into_ffi()
}

fn parse_inputs(table: &FfiBytes, caller: &FfiBytes) -> crate::Result<(TableRef, Caller)> {
    Ok((table.parse()?, caller.parse()?))
}

unsafe extern "C" fn describe(driver: &FfiDriver) -> FfiBytes {
    let d = &exported(driver).driver;
    let probe = TableRef {
        id: String::new(),
        source_type: d.source_type().to_owned(),
        bucket: None,
        source_table: None,
        query_mode: "local".to_owned(),
        source_query: None,
        ..TableRef::default()
    };
    FfiBytes::json(&Description {
        source_type: d.source_type().to_owned(),
        registrable: d.registrable(),
        sql_flavor: d.sql_flavor(&probe).to_owned(),
    })
}

unsafe extern "C" fn schema(
    driver: &FfiDriver,
    table: FfiBytes,
    caller: FfiBytes,
) -> FfiFuture<FfiOutcome<FfiBytes>> {
    spawn(
        driver,
        parse_inputs(&table, &caller),
        |d, t, c| async move { d.schema(&t, &c).await.map(|s| FfiBytes::json(&s)) },
    )
}

unsafe extern "C" fn sample(
    driver: &FfiDriver,
    table: FfiBytes,
    n: usize,
    caller: FfiBytes,
) -> FfiFuture<FfiOutcome<FFI_ArrowArrayStream>> {
    spawn(
        driver,
        parse_inputs(&table, &caller),
        move |d, t, c| async move {
            let batches = d.sample(&t, n, &c).await?;
            let schema = match batches.first() {
                Some(b) => b.schema(),
                None => Arc::new(Schema::empty()),
            };
            let reader = RecordBatchIterator::new(batches.into_iter().map(Ok), schema);
            Ok(FFI_ArrowArrayStream::new(Box::new(reader)))
        },
    )
}

unsafe extern "C" fn table_provider(
    driver: &FfiDriver,
    table: FfiBytes,
    caller: FfiBytes,
    codec: FFI_LogicalExtensionCodec,
) -> FfiFuture<FfiOutcome<FFI_TableProvider>> {
    let handle = exported(driver).runtime.handle().clone();
    spawn(
        driver,
        parse_inputs(&table, &caller),
        move |d, t, c| async move {
            let provider = d.table_provider(&t, &c).await?;
            Ok(FFI_TableProvider::new_with_ffi_codec(
                provider,
                true,
                Some(handle),
                codec,
            ))
        },
    )
}

unsafe extern "C" fn refresh_metadata(
    driver: &FfiDriver,
    table: FfiBytes,
) -> FfiFuture<FfiOutcome<FfiBytes>> {
    let inputs = table.parse::<TableRef>().map(|t| {
        let nobody = Caller {
            user_id: String::new(),
            username: String::new(),
            is_admin: true,
        };
        (t, nobody)
    });
    spawn(driver, inputs, |d, t, _| async move {
        d.refresh_metadata(&t).await.map(|m| FfiBytes::json(&m))
    })
}

unsafe extern "C" fn local_file(driver: &FfiDriver, table: FfiBytes) -> FfiBytes {
    let path = table
        .parse::<TableRef>()
        .ok()
        .and_then(|t| exported(driver).driver.local_file(&t))
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    FfiBytes::from_vec(path.into_bytes())
}

unsafe extern "C" fn release(driver: &mut FfiDriver) {
    // SAFETY: made by Box::into_raw in `create_exported`; the host releases each driver once.
    let me = unsafe { Box::from_raw(driver.private_data as *mut Exported) };
    // Never block the releasing thread on in-flight driver tasks.
    me.runtime.shutdown_background();
}
