//! `POST /api/upload/sessions` — an agent session transcript, uploaded by its owner.
//!
//! The body (raw with `?name=`, or the multipart field `file`) streams into a hidden
//! temporary file in the caller's own directory and is renamed into place whole
//! ([`svc_telemetry::files`]); the pipeline reads it shortly after.

use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use poem::{Body, Request};
use poem_openapi::param::{Path, Query};
use poem_openapi::payload::{Binary, Json};
use poem_openapi::{Object, OpenApi};
use serde_json::Value;
use svc_core::clock::format_ts;
use svc_core::{Error, ErrorKind};
use svc_store::audit::Event;
use svc_telemetry::files::{Encoding, StoredFile, StoredOutcome};
use svc_telemetry::names::{SessionName, UserDir};

use super::admin_sessions::{download, json, SessionDownload};
use super::upload::{check_declared, receive};
use super::{ApiResult, BearerAuth, Tag};
use crate::state::AppState;

/// The upload route (exempt from the request-wide body limit; see `upload::is_upload`).
pub const UPLOAD_PATH: &str = "/api/upload/sessions";
const SETTING: &str = "SVC_SESSION_UPLOAD_MAX_BYTES";

pub struct SessionsApi {
    pub state: Arc<AppState>,
}

/// What an upload stored.
#[derive(Object)]
struct SessionUploaded {
    /// `<user dir>/<file name>`: the key of the file in telemetry.
    session_file: String,
    /// The stored (sanitized) file name.
    name: String,
    /// Bytes stored (after gzip decoding).
    bytes: u64,
    /// Content hash (xxh3-128, hex).
    content_hash: String,
    /// `new`, `changed` (replaced a different file) or `unchanged` (identical content; the
    /// stored file was left as it was).
    outcome: String,
    /// Whether the telemetry pipeline will read it (false when unchanged).
    queued: bool,
}

fn outcome_name(o: StoredOutcome) -> &'static str {
    match o {
        StoredOutcome::New => "new",
        StoredOutcome::Changed => "changed",
        StoredOutcome::Unchanged => "unchanged",
    }
}

fn is_gzip(value: Option<&str>) -> bool {
    value.is_some_and(|v| v.trim().eq_ignore_ascii_case("gzip"))
}

/// Receives the body: raw (named by `?name=`) or the multipart field `file` (named by its
/// filename, or `?name=`). Returns the sanitized name and whether the bytes are gzip.
async fn receive_body(
    content_type: String,
    encoded_gzip: bool,
    body: Body,
    query_name: Option<String>,
    path: &std::path::Path,
    limit: u64,
) -> Result<(SessionName, bool), Error> {
    if !content_type
        .to_ascii_lowercase()
        .starts_with("multipart/form-data")
    {
        let raw = query_name.ok_or_else(|| {
            Error::invalid("Name the session file: ?name=<session-id>.jsonl (or upload multipart with a `file` field)")
        })?;
        let name = SessionName::sanitize(&raw)?;
        receive(body.into_bytes_stream(), path, limit, SETTING).await?;
        return Ok((name, encoded_gzip));
    }
    let boundary = multer::parse_boundary(&content_type)
        .map_err(|e| Error::bad_request(format!("Bad multipart Content-Type: {e}")))?;
    let mut form = multer::Multipart::new(body.into_bytes_stream(), boundary);
    while let Some(field) = form
        .next_field()
        .await
        .map_err(|e| Error::bad_request(format!("Bad multipart body: {e}")))?
    {
        if field.name() != Some("file") {
            continue;
        }
        let filename = field.file_name().map(str::to_owned);
        let part_gzip = field
            .content_type()
            .is_some_and(|m| m.essence_str() == "application/gzip");
        let raw = query_name.clone().or(filename).ok_or_else(|| {
            Error::invalid("The `file` part has no filename; add ?name=<session-id>.jsonl")
        })?;
        let (raw, gz_name) = match raw.strip_suffix(".gz") {
            Some(stem) => (stem.to_owned(), true),
            None => (raw, false),
        };
        let name = SessionName::sanitize(&raw)?;
        receive(field.boxed(), path, limit, SETTING).await?;
        return Ok((name, encoded_gzip || part_gzip || gz_name));
    }
    Err(Error::invalid(
        "The multipart body has no `file` field holding the session file",
    ))
}

#[OpenApi(tag = "Tag::Telemetry")]
impl SessionsApi {
    /// Uploads one agent session transcript (JSONL) for the caller. Send the file as the
    /// raw body with `?name=<session-id>.jsonl`, or as the multipart field `file`;
    /// `Content-Encoding: gzip` (or a `.jsonl.gz` name) is decoded. The name is sanitized
    /// to one path component ending in `.jsonl`. A re-upload of the same name replaces the
    /// file whole (identical content is left alone); the telemetry pipeline reads new and
    /// changed files shortly after. Limit: `SVC_SESSION_UPLOAD_MAX_BYTES` (413 beyond).
    #[oai(
        path = "/api/upload/sessions",
        method = "post",
        operation_id = "upload_session"
    )]
    async fn upload(
        &self,
        auth: BearerAuth,
        req: &Request,
        /// The file name (required for a raw body; overrides a multipart filename).
        name: Query<Option<String>>,
        body: Binary<Body>,
    ) -> ApiResult<Json<SessionUploaded>> {
        let started = Instant::now();
        let limit = self.state.config.session_upload_max_bytes;
        let declared = check_declared(req, limit, SETTING);
        let files = self.state.pipeline.files().clone();
        let user_id = auth.0.user.id.clone();
        let content_type = req.content_type().unwrap_or_default().to_owned();
        let gzip = is_gzip(req.header("content-encoding"));
        // Spawned so that it runs to the end even if the client goes away: a broken-off
        // body removes its temporary file, and every attempt is audited.
        let task = tokio::spawn(async move {
            declared?;
            let dir = UserDir::for_user(&user_id)?;
            let pending = files.begin_upload(&dir)?;
            let (name, gzip) =
                receive_body(content_type, gzip, body.0, name.0, pending.path(), limit).await?;
            let encoding = if gzip {
                Encoding::Gzip {
                    max_decoded_bytes: limit,
                }
            } else {
                Encoding::Identity
            };
            tokio::task::spawn_blocking(move || files.commit(pending, &dir, &name, encoding))
                .await
                .map_err(Error::internal)?
        });
        let result: Result<StoredFile, Error> = task.await.map_err(Error::internal).and_then(|r| r);
        if result
            .as_ref()
            .is_ok_and(|s| s.outcome != StoredOutcome::Unchanged)
        {
            self.state.pipeline.uploaded();
        }
        self.state
            .audit
            .write_outcome(
                &auth.0.actor,
                Event::new("session.upload"),
                started,
                &result,
                |event, s| {
                    event
                        .resource(s.session_file.clone())
                        .param("name", s.name.clone())
                        .param("bytes", s.bytes)
                        .param("outcome", outcome_name(s.outcome))
                },
            )
            .await;
        let s = result?;
        Ok(Json(SessionUploaded {
            queued: s.outcome != StoredOutcome::Unchanged,
            outcome: outcome_name(s.outcome).into(),
            session_file: s.session_file,
            name: s.name,
            bytes: s.bytes,
            content_hash: s.content_hash,
        }))
    }

    /// The caller's own session files, processed or not, newest first (the same rows as
    /// the admin per-user list).
    #[oai(
        path = "/api/me/sessions",
        method = "get",
        operation_id = "list_my_sessions"
    )]
    async fn my_sessions(
        &self,
        auth: BearerAuth,
        /// Rows per page, 1..200 (default 50).
        limit: Query<Option<usize>>,
        /// Rows to skip, 0..50000.
        offset: Query<Option<usize>>,
    ) -> ApiResult<Json<Value>> {
        json(
            self.state
                .sessions
                .user_sessions(
                    &auth.0.user.id,
                    limit.0.unwrap_or(50),
                    offset.0.unwrap_or(0),
                )
                .await?,
        )
    }

    /// One of the caller's own session files (JSONL), streamed. Any name that is not one of
    /// the caller's files is 404, never 403. Audited as `session.download`.
    #[oai(
        path = "/api/me/sessions/:file",
        method = "get",
        operation_id = "download_my_session"
    )]
    async fn my_download(
        &self,
        auth: BearerAuth,
        file: Path<String>,
    ) -> ApiResult<SessionDownload> {
        let started = Instant::now();
        let opened = self
            .state
            .sessions
            .open(&auth.0.user.id, &file.0)
            .await
            .map_err(|e| match e.kind() {
                ErrorKind::Internal => e,
                _ => Error::not_found(format!("no session file of yours is named {:?}", file.0)),
            });
        download(
            &self.state.audit,
            &auth.0.actor,
            format!("{}/{}", auth.0.user.id, file.0),
            started,
            opened,
        )
        .await
    }

    /// The caller's token use over the last `days` days (sessions by start day): per day,
    /// per primary model, the ten largest sessions and the totals.
    #[oai(
        path = "/api/me/stats/tokens",
        method = "get",
        operation_id = "get_my_token_stats"
    )]
    async fn my_tokens(
        &self,
        auth: BearerAuth,
        /// Days, 1..365 (default 30).
        days: Query<Option<u32>>,
    ) -> ApiResult<Json<Value>> {
        let days = days.0.unwrap_or(30);
        if !(1..=365).contains(&days) {
            return Err(Error::invalid("days must be between 1 and 365").into());
        }
        let since = format_ts(chrono::Utc::now() - chrono::Duration::days(i64::from(days)));
        json(
            self.state
                .store
                .token_stats(&auth.0.user.id, &since, days)
                .await
                .map_err(Error::from)?,
        )
    }
}
