//! `PUT /api/admin/tables/{id}/data` — a local table's data, uploaded.
//!
//! The body streams to a temporary file beside the table's file (never into memory), under
//! its own size limit and a stall timeout instead of the request-wide body limits (see
//! [`is_upload`]); the catalog then converts and validates it and renames it into place
//! ([`svc_catalog::data`]). A failure at any step leaves the table's old data and no file.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use poem::{Body, Request};
use poem_openapi::param::{Path, Query};
use poem_openapi::payload::{Binary, Json};
use poem_openapi::{Enum, Object, OpenApi};
use svc_catalog::data::UploadFormat;
use svc_core::{Error, ErrorKind};
use tokio::io::AsyncWriteExt;

use super::discovery::Column;
use super::{AdminAuth, ApiResult, Tag};
use crate::state::AppState;

/// How long an upload may send nothing before it is abandoned.
const STALL: Duration = Duration::from_secs(60);

pub struct UploadApi {
    pub state: Arc<AppState>,
}

/// The format of an uploaded file.
#[derive(Enum, Debug, Clone, Copy, PartialEq, Eq)]
#[oai(rename_all = "lowercase")]
enum UploadFormatParam {
    /// A parquet file.
    Parquet,
    /// CSV with a header line; column types are inferred.
    Csv,
    /// Newline-delimited JSON, one object per line; column types are inferred.
    Ndjson,
}

impl From<UploadFormatParam> for UploadFormat {
    fn from(f: UploadFormatParam) -> Self {
        match f {
            UploadFormatParam::Parquet => Self::Parquet,
            UploadFormatParam::Csv => Self::Csv,
            UploadFormatParam::Ndjson => Self::Ndjson,
        }
    }
}

/// What an upload put in place.
#[derive(Object)]
struct UploadResult {
    /// Table id.
    table_id: String,
    /// The format the upload arrived in.
    format: String,
    /// Rows now in the table.
    rows: u64,
    /// Size of the table's parquet file.
    bytes: u64,
    /// Bytes received.
    received_bytes: u64,
    /// SHA-256 of the table's parquet file, hex.
    sha256: String,
    /// The table's columns (inferred for CSV and JSON).
    columns: Vec<Column>,
}

/// Whether a request is an upload (table data or a session file), which is exempt from the
/// request-wide body limit and deadline: it gets its own size limit and a stall timeout.
pub fn is_upload(req: &Request) -> bool {
    let path = req.uri().path();
    match *req.method() {
        poem::http::Method::PUT => path
            .strip_prefix("/api/admin/tables/")
            .is_some_and(|rest| rest.ends_with("/data")),
        poem::http::Method::POST => path == super::sessions::UPLOAD_PATH,
        _ => false,
    }
}

/// The format a request names: `?format=`, else its Content-Type, else parquet.
fn format_of(req: &Request, asked: Option<UploadFormatParam>) -> UploadFormat {
    if let Some(f) = asked {
        return f.into();
    }
    let mime = req
        .content_type()
        .and_then(|c| c.split(';').next())
        .map(|c| c.trim().to_ascii_lowercase())
        .unwrap_or_default();
    match mime.as_str() {
        "text/csv" => UploadFormat::Csv,
        "application/x-ndjson" | "application/jsonl" | "application/json" => UploadFormat::Ndjson,
        _ => UploadFormat::Parquet,
    }
}

/// Streams `chunks` to `path`, refusing more than `limit` bytes (`setting` names the
/// variable that sets it) and a sender that stalls; the one receiver of every upload.
pub(super) async fn receive<S, E>(
    mut chunks: S,
    path: &std::path::Path,
    limit: u64,
    setting: &str,
) -> Result<u64, Error>
where
    S: futures::Stream<Item = Result<bytes::Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    let write_failed = |e| Error::upload_io("write", path, e);
    let mut file = tokio::fs::File::create(path).await.map_err(write_failed)?;
    let mut total: u64 = 0;
    loop {
        let chunk = match tokio::time::timeout(STALL, chunks.next()).await {
            Err(_) => {
                return Err(Error::bad_request(format!(
                    "The upload stalled: nothing arrived for {} seconds",
                    STALL.as_secs()
                )))
            }
            Ok(None) => break,
            Ok(Some(Err(e))) => {
                return Err(Error::bad_request(format!("The upload broke off: {e}")))
            }
            Ok(Some(Ok(chunk))) => chunk,
        };
        total += chunk.len() as u64;
        if total > limit {
            return Err(too_large(limit, setting));
        }
        file.write_all(&chunk).await.map_err(write_failed)?;
    }
    file.flush().await.map_err(write_failed)?;
    Ok(total)
}

/// The 413 for an upload over `limit`.
pub(super) fn too_large(limit: u64, setting: &str) -> Error {
    Error::new(
        ErrorKind::PayloadTooLarge,
        format!("The upload exceeds this server's limit of {limit} bytes ({setting})"),
    )
}

/// Refuses a declared `Content-Length` over `limit` before reading a byte.
pub(super) fn check_declared(req: &Request, limit: u64, setting: &str) -> Result<(), Error> {
    match req
        .header(poem::http::header::CONTENT_LENGTH)
        .and_then(|v| v.parse::<u64>().ok())
    {
        Some(n) if n > limit => Err(Error::new(
            ErrorKind::PayloadTooLarge,
            format!("The upload is {n} bytes; this server's limit is {limit} ({setting})"),
        )),
        _ => Ok(()),
    }
}

#[OpenApi(prefix_path = "/api/admin", tag = "Tag::Registry")]
impl UploadApi {
    /// Replaces a local table's data with the uploaded file: parquet as it is, or CSV or
    /// newline-delimited JSON converted to parquet (column types inferred and reported).
    /// The format is `?format=`, else the Content-Type (`text/csv`, `application/x-ndjson`),
    /// else parquet. The table's old data stays until the new file has been read in full.
    #[oai(
        path = "/tables/:id/data",
        method = "put",
        operation_id = "upload_table_data"
    )]
    async fn upload(
        &self,
        auth: AdminAuth,
        req: &Request,
        /// Table id of a registered `local` table.
        id: Path<String>,
        /// The upload's format (overrides the Content-Type).
        format: Query<Option<UploadFormatParam>>,
        body: Binary<Body>,
    ) -> ApiResult<Json<UploadResult>> {
        let format = format_of(req, format.0);
        let limit = self.state.config.upload_max_bytes;
        let declared = check_declared(req, limit, "SVC_UPLOAD_MAX_BYTES");
        let registry = self.state.registry.clone();
        let actor = auth.0.actor.clone();
        let id = id.0;
        // Spawned so that it runs to the end even if the client goes away: every attempt is
        // audited, and new data is never in place without the flush.
        let task = tokio::spawn(async move {
            let u = registry
                .upload(&actor, &id, format, |path| async move {
                    declared?;
                    receive(
                        body.0.into_bytes_stream(),
                        &path,
                        limit,
                        "SVC_UPLOAD_MAX_BYTES",
                    )
                    .await
                })
                .await;
            u.map(|u| (id, u))
        });
        let (id, u) = task.await.map_err(Error::internal)??;
        Ok(Json(UploadResult {
            table_id: id,
            format: u.format.name().into(),
            rows: u.report.rows,
            bytes: u.report.bytes,
            received_bytes: u.received_bytes,
            sha256: u.report.hash,
            columns: u.schema.columns.into_iter().map(Column::from).collect(),
        }))
    }
}
