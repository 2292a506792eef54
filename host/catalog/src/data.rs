//! A table's data on this server's disk: what is there, and replacing it with an upload.
//!
//! Only `local` tables take uploads; every other kind gets its data from its source (a sync,
//! a materialization, a script). An upload replaces the whole file in one rename, is audited
//! as `table.upload`, and flushes the table like any registry change (its columns may have
//! changed).

use std::path::PathBuf;

use serde_json::json;

use svc_core::{Error, ErrorKind};
use svc_driver_parquet::IngestError;
pub use svc_driver_parquet::{DataFacts, UploadFormat};
use svc_plugin_api::{SyncReport, TableSchema};
use svc_store::audit::{Actor, Event};
use svc_store::registry::RegistryRow;

use crate::registry::Registry;

/// The source type whose data arrives by upload.
pub const UPLOADABLE_SOURCE: &str = "local";

/// What an upload left in place.
#[derive(Debug, Clone)]
pub struct Uploaded {
    /// The new file's rows, size and hash.
    pub report: SyncReport,
    /// Its columns as inferred or read.
    pub schema: TableSchema,
    /// The format it arrived in.
    pub format: UploadFormat,
    /// Bytes received.
    pub received_bytes: u64,
}

/// A file removed when dropped (an upload that failed, or was converted).
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

impl Registry {
    /// Where a registered table's data lives on this server, when it lives here at all.
    pub fn data_path(&self, row: &RegistryRow) -> Option<PathBuf> {
        self.drivers()
            .get(&row.source_type)
            .and_then(|d| d.local_file(&row.table_ref()))
    }

    /// What the table's data file holds: `None` for a table whose data is not on this
    /// server's disk, `Some(None)` for one whose file does not exist yet; 422 for a file that
    /// is present but unreadable.
    pub fn data_facts(&self, row: &RegistryRow) -> Result<Option<Option<DataFacts>>, Error> {
        let Some(path) = self.data_path(row) else {
            return Ok(None);
        };
        svc_driver_parquet::inspect(&path)
            .map(Some)
            .map_err(|why| unreadable_file(&row.id, &why))
    }

    /// Replaces a local table's data with an upload: `receive` writes the upload to the
    /// temporary path it is given and returns the bytes received; the file is then
    /// converted and validated in full and renamed over the table's file. Every attempt is
    /// audited as `table.upload`, and a success flushes the table. The temporary file is
    /// gone afterwards whatever happened. Run it to the end (spawn it): dropped half way, the
    /// new data may be in place without the flush.
    pub async fn upload<F, Fut>(
        &self,
        actor: &Actor,
        id: &str,
        format: UploadFormat,
        receive: F,
    ) -> Result<Uploaded, Error>
    where
        F: FnOnce(PathBuf) -> Fut,
        Fut: std::future::Future<Output = Result<u64, Error>>,
    {
        let result = self.upload_inner(id, format, receive).await;
        let event = Event::new("table.upload")
            .resource(format!("table:{id}"))
            .param("format", format.name())
            .outcome(&result, |e, u| {
                e.param("received_bytes", u.received_bytes)
                    .param("rows", u.report.rows)
                    .param("bytes", u.report.bytes)
                    .param("sha256", u.report.hash.clone())
            });
        self.audit().write(actor, event).await;
        if result.is_ok() {
            self.changed(id).await;
        }
        result
    }

    async fn upload_inner<F, Fut>(
        &self,
        id: &str,
        format: UploadFormat,
        receive: F,
    ) -> Result<Uploaded, Error>
    where
        F: FnOnce(PathBuf) -> Fut,
        Fut: std::future::Future<Output = Result<u64, Error>>,
    {
        let target = self.upload_target(id).await?;
        if let Some(dir) = target.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| Error::internal(format!("cannot create {}: {e}", dir.display())))?;
        }
        let temp = TempFile(svc_driver_parquet::temp_path(&target));
        let received_bytes = receive(temp.0.clone()).await?;
        if received_bytes == 0 {
            return Err(Error::invalid("The upload is empty"));
        }
        let source = temp.0.clone();
        let (report, schema) = tokio::task::spawn_blocking(move || {
            svc_driver_parquet::ingest(&source, format, &target)
        })
        .await
        .map_err(Error::internal)?
        .map_err(|e| match e {
            IngestError::Unreadable(why) => Error::coded(
                ErrorKind::Invalid,
                "invalid_data",
                format!("Table '{id}' was not changed: {why}"),
                json!({"table": id, "format": format.name()}),
            ),
            IngestError::Local(e) => (*e).into(),
        })?;
        drop(temp);
        Ok(Uploaded {
            report,
            schema,
            format,
            received_bytes,
        })
    }

    /// The data file of a registered local table.
    async fn upload_target(&self, id: &str) -> Result<PathBuf, Error> {
        let Some(row) = self.store().table_by_id(id).await? else {
            return Err(Error::coded(
                ErrorKind::NotFound,
                "not_found",
                format!("Table '{id}' is not registered"),
                json!({"table": id, "hint": format!("register it first: svc admin register {id} --source-type local")}),
            ));
        };
        if row.source_type != UPLOADABLE_SOURCE || row.query_mode.is_internal() {
            return Err(Error::coded(
                ErrorKind::Conflict,
                "not_uploadable",
                format!(
                    "Table '{id}' is a '{}' table and gets its data from its source; only '{UPLOADABLE_SOURCE}' tables take uploads",
                    row.source_type
                ),
                json!({"table": id, "source_type": row.source_type}),
            ));
        }
        self.data_path(&row)
            .ok_or_else(|| Error::internal(format!("Table '{id}' has no data path")))
    }
}

/// 422 for a present data file that cannot be read.
pub(crate) fn unreadable_file(id: &str, why: &str) -> Error {
    Error::coded(
        ErrorKind::Invalid,
        "unreadable_data",
        format!("Table '{id}' has a data file, but {why}"),
        json!({"table": id, "hint": format!("replace it with an upload: svc admin upload {id} FILE")}),
    )
}
