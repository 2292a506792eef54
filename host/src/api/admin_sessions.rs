//! Sessions for administrators (`/api/admin/sessions/*`: list, KPIs, facets, a transcript
//! page, a download) and per user (`/api/admin/users/{id}/sessions…`: the list, one file,
//! all files as one ZIP stream). Reads go through [`svc_telemetry::sessions`]; this file
//! adds auth, audit and HTTP shapes.

use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use poem::Body;
use poem_openapi::param::{Path, Query};
use poem_openapi::payload::{Binary, Json};
use poem_openapi::{ApiResponse, OpenApi};
use serde_json::{json, Value};
use svc_core::Error;
use svc_store::audit::{Actor, AuditFilter, AuditWriter, Event};
use svc_store::sessions::{SessionFilter, SessionOrder};
use svc_telemetry::files::OpenFile;
use svc_telemetry::names::UserDir;
use svc_telemetry::sessions::{window_start, SessionBrowser, DEFAULT_WINDOW_MINUTES};
use svc_telemetry::transcript_view::DEFAULT_PAGE_EVENTS;

use super::activity::filter::with_given;
use super::activity::{page_limit, parse_cursor};
use super::{AdminAuth, ApiResult, Tag};
use crate::state::AppState;

pub struct AdminSessionsApi {
    pub state: Arc<AppState>,
}

/// A session file as a download.
#[derive(ApiResponse)]
pub(super) enum SessionDownload {
    /// The raw JSONL, streamed.
    #[oai(status = 200, content_type = "application/x-ndjson")]
    File(
        Binary<Body>,
        #[oai(header = "Content-Disposition")] String,
        #[oai(header = "Content-Length")] u64,
    ),
}

/// A user's session files as one archive.
#[derive(ApiResponse)]
enum SessionArchive {
    /// A ZIP archive, streamed as it is written.
    #[oai(status = 200, content_type = "application/zip")]
    Zip(Binary<Body>, #[oai(header = "Content-Disposition")] String),
}

pub(super) fn json(v: impl serde::Serialize) -> ApiResult<Json<Value>> {
    Ok(Json(serde_json::to_value(v).map_err(Error::internal)?))
}

/// Streams an opened session file and audits the download (before the first byte, so a
/// download is on record even if the client stops reading).
pub(super) async fn download(
    audit: &AuditWriter,
    actor: &Actor,
    resource: String,
    started: Instant,
    opened: Result<OpenFile, Error>,
) -> ApiResult<SessionDownload> {
    audit
        .write_outcome(
            actor,
            Event::new("session.download").resource(resource),
            started,
            &opened,
            |e, f| {
                e.param("bytes", f.size)
                    .param("session_file", f.key.as_str())
            },
        )
        .await;
    let f = opened?;
    let disposition = format!("attachment; filename=\"{}\"", f.name);
    // Reads see the file that was opened even if an upload replaces it meanwhile; the
    // length is that file's.
    let body = Body::from_async_read(tokio::fs::File::from_std(f.file));
    Ok(SessionDownload::File(Binary(body), disposition, f.size))
}

/// A `Write` that hands 64 KiB chunks to an HTTP body; fails once the client is gone.
struct ChannelWriter {
    tx: tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>,
    buf: Vec<u8>,
}

const CHUNK: usize = 64 * 1024;

impl ChannelWriter {
    fn send(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK)));
        self.tx.blocking_send(Ok(chunk)).map_err(|_| {
            std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the client went away")
        })
    }
}

impl Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= CHUNK {
            self.send()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.send()
    }
}

pub(crate) fn filter(
    since_minutes: Option<u32>,
    username: Option<String>,
    model: Option<String>,
    only_errors: Option<bool>,
    q: Option<String>,
) -> Result<SessionFilter, Error> {
    Ok(SessionFilter {
        since: Some(window_start(
            since_minutes.unwrap_or(DEFAULT_WINDOW_MINUTES),
        )?),
        username,
        user_id: None,
        model,
        only_errors: only_errors.unwrap_or(false),
        q,
    })
}

/// The `session.browse` row of a read of the session lists: the endpoint and the filters as
/// given, paging left out (paging through one list is one read; the writer suppresses
/// repeats).
pub(crate) fn browse_event(endpoint: &str, pairs: &[(&str, Value)]) -> Event {
    with_given(
        Event::new("session.browse")
            .resource("sessions")
            .param("endpoint", endpoint),
        pairs.iter().map(|(k, v)| ((*k).to_owned(), v.clone())),
    )
}

impl AdminSessionsApi {
    fn browser(&self) -> &SessionBrowser {
        &self.state.sessions
    }

    async fn known_user(&self, id: &str) -> Result<(), Error> {
        match self.state.store.user_by_id(id).await? {
            Some(_) => Ok(()),
            None => Err(Error::not_found(format!("user not found: {id}"))),
        }
    }
}

#[OpenApi(tag = "Tag::Telemetry")]
impl AdminSessionsApi {
    /// A page of sessions under the filters. Default order: sessions with failed tool calls
    /// first, then newest first; `sort` = `<column>:<asc|desc>` over `started_at`,
    /// `ended_at`, `tool_calls`, `tool_errors`, `active_seconds`, `username`,
    /// `primary_model` (anything else: the default). Every order ends with the session
    /// file, so pages are stable. `next_offset` is null on the last page.
    #[allow(clippy::too_many_arguments)]
    #[oai(
        path = "/api/admin/sessions/list",
        method = "get",
        operation_id = "list_sessions"
    )]
    async fn list(
        &self,
        auth: AdminAuth,
        /// Sessions started in the last this many minutes, 1..525600 (default 10080).
        since_minutes: Query<Option<u32>>,
        /// Exact owner (e-mail, or directory name when no user matched).
        username: Query<Option<String>>,
        /// Exact primary model.
        model: Query<Option<String>>,
        /// Only sessions with a failed tool call.
        only_errors: Query<Option<bool>>,
        /// Literal text in the session id or file.
        q: Query<Option<String>>,
        /// `<column>:<asc|desc>`.
        sort: Query<Option<String>>,
        /// Rows per page, 1..200 (default 50).
        limit: Query<Option<usize>>,
        /// Rows to skip, 0..50000.
        offset: Query<Option<usize>>,
    ) -> ApiResult<Json<Value>> {
        let started = Instant::now();
        let asked = [
            ("since_minutes", json!(since_minutes.0)),
            ("username", json!(username.0)),
            ("model", json!(model.0)),
            ("only_errors", json!(only_errors.0)),
            ("q", json!(q.0)),
            ("sort", json!(sort.0)),
        ];
        let result = async {
            let f = filter(since_minutes.0, username.0, model.0, only_errors.0, q.0)?;
            let order = SessionOrder::parse(sort.0.as_deref());
            self.browser()
                .list(&f, order, limit.0.unwrap_or(50), offset.0.unwrap_or(0))
                .await
        }
        .await;
        let event = browse_event("list", &asked);
        self.state
            .audit
            .write_read_outcome(&auth.0.actor, event, started, &result)
            .await;
        json(result?)
    }

    /// Sessions, distinct users, sessions with errors, tool calls, failed calls and the
    /// tool error rate under the filters.
    #[oai(
        path = "/api/admin/sessions/kpis",
        method = "get",
        operation_id = "get_session_kpis"
    )]
    async fn kpis(
        &self,
        auth: AdminAuth,
        /// Sessions started in the last this many minutes, 1..525600 (default 10080).
        since_minutes: Query<Option<u32>>,
        /// Exact owner.
        username: Query<Option<String>>,
        /// Exact primary model.
        model: Query<Option<String>>,
        /// Only sessions with a failed tool call.
        only_errors: Query<Option<bool>>,
        /// Literal text in the session id or file.
        q: Query<Option<String>>,
    ) -> ApiResult<Json<Value>> {
        let started = Instant::now();
        let asked = [
            ("since_minutes", json!(since_minutes.0)),
            ("username", json!(username.0)),
            ("model", json!(model.0)),
            ("only_errors", json!(only_errors.0)),
            ("q", json!(q.0)),
        ];
        let result = async {
            let f = filter(since_minutes.0, username.0, model.0, only_errors.0, q.0)?;
            self.browser().kpis(&f).await
        }
        .await;
        let event = browse_event("kpis", &asked);
        self.state
            .audit
            .write_read_outcome(&auth.0.actor, event, started, &result)
            .await;
        json(result?)
    }

    /// The owners (top 50) and primary models (top 30) of a window's sessions,
    /// `{value, count}`, most first (ties by value).
    #[oai(
        path = "/api/admin/sessions/facets",
        method = "get",
        operation_id = "get_session_facets"
    )]
    async fn facets(
        &self,
        auth: AdminAuth,
        /// Window in minutes, 1..525600 (default 10080).
        since_minutes: Query<Option<u32>>,
    ) -> ApiResult<Json<Value>> {
        let started = Instant::now();
        let result = self
            .browser()
            .facets(since_minutes.0.unwrap_or(DEFAULT_WINDOW_MINUTES))
            .await;
        let event = browse_event("facets", &[("since_minutes", json!(since_minutes.0))]);
        self.state
            .audit
            .write_read_outcome(&auth.0.actor, event, started, &result)
            .await;
        json(result?)
    }

    /// A page of a session's transcript: chronological events (`text`, `tool_use` with its
    /// input, `tool_result` with flattened output, `is_error`, and the tool and ordinal of
    /// the call it answers), the ordinals of every failed call (`error_ordinals`, to jump
    /// from error to error with `offset`), the stored summary, and `next_offset`.
    /// `username` is the owner's directory as `session_file` shows it (`<dir>/<file>`).
    /// Audited as `session.transcript_view` (once a minute per admin and file).
    #[oai(
        path = "/api/admin/sessions/:username/:file/transcript",
        method = "get",
        operation_id = "get_session_transcript"
    )]
    async fn transcript(
        &self,
        auth: AdminAuth,
        username: Path<String>,
        file: Path<String>,
        /// Events to skip (default 0).
        offset: Query<Option<usize>>,
        /// Events per page, 1..2000 (default 200).
        limit: Query<Option<usize>>,
    ) -> ApiResult<Json<Value>> {
        let started = Instant::now();
        let result = self
            .browser()
            .transcript(
                &username.0,
                &file.0,
                offset.0.unwrap_or(0),
                limit.0.unwrap_or(DEFAULT_PAGE_EVENTS),
            )
            .await;
        let event = Event::new("session.transcript_view")
            .resource(format!("{}/{}", username.0, file.0))
            .outcome(&result, |e, t| e.param("events", t.page.total_events))
            .timed(started);
        self.state.audit.write_read(&auth.0.actor, event).await;
        json(result?)
    }

    /// The session file as it was uploaded (JSONL), streamed. Audited as
    /// `session.download` with its size.
    #[oai(
        path = "/api/admin/sessions/:username/:file/download",
        method = "get",
        operation_id = "download_session"
    )]
    async fn download(
        &self,
        auth: AdminAuth,
        username: Path<String>,
        file: Path<String>,
    ) -> ApiResult<SessionDownload> {
        let started = Instant::now();
        let opened = self.browser().open(&username.0, &file.0).await;
        download(
            &self.state.audit,
            &auth.0.actor,
            format!("{}/{}", username.0, file.0),
            started,
            opened,
        )
        .await
    }

    /// One user's audit rows, newest first, a page at a time: each row with the user's
    /// `user_email` and `user_name`; pass `next_cursor` back as `cursor` for the next page
    /// (null on the last). Audited as `admin.user_activity_read` (once a minute per admin
    /// and user, however many pages).
    #[oai(
        path = "/api/admin/users/:id/activity",
        method = "get",
        operation_id = "get_user_activity"
    )]
    async fn user_activity(
        &self,
        auth: AdminAuth,
        id: Path<String>,
        /// Rows per page, 1..200 (default 50).
        limit: Query<Option<u32>>,
        /// The `next_cursor` of the previous page.
        cursor: Query<Option<String>>,
    ) -> ApiResult<Json<Value>> {
        let started = Instant::now();
        let result = async {
            self.known_user(&id.0).await?;
            let limit = page_limit(limit.0, 50, 200)?;
            let cursor = parse_cursor(cursor.0.as_deref())?;
            let filter = AuditFilter {
                user_id: Some(id.0.clone()),
                ..AuditFilter::default()
            };
            Ok::<_, Error>(
                self.state
                    .store
                    .audit_page(&filter, cursor.as_ref(), limit)
                    .await?,
            )
        }
        .await;
        // Paging stays out of the parameters: paging through one user's activity is one read.
        let event = Event::new("admin.user_activity_read")
            .resource(format!("users/{}/activity", id.0))
            .param("target_user_id", id.0.as_str());
        self.state
            .audit
            .write_read_outcome(&auth.0.actor, event, started, &result)
            .await;
        json(result?)
    }

    /// One user's session files, processed or not, newest first: each with `processed`
    /// (the pipeline has read this version), `on_disk`, size, modification time and the
    /// summary when there is one.
    #[oai(
        path = "/api/admin/users/:id/sessions",
        method = "get",
        operation_id = "list_user_sessions"
    )]
    async fn user_sessions(
        &self,
        auth: AdminAuth,
        id: Path<String>,
        /// Rows per page, 1..200 (default 50).
        limit: Query<Option<usize>>,
        /// Rows to skip, 0..50000.
        offset: Query<Option<usize>>,
    ) -> ApiResult<Json<Value>> {
        let started = Instant::now();
        let result = async {
            self.known_user(&id.0).await?;
            self.browser()
                .user_sessions(&id.0, limit.0.unwrap_or(50), offset.0.unwrap_or(0))
                .await
        }
        .await;
        let event = browse_event("user_sessions", &[("user_id", json!(id.0))]);
        self.state
            .audit
            .write_read_outcome(&auth.0.actor, event, started, &result)
            .await;
        json(result?)
    }

    /// Every session file of a user as one ZIP archive, streamed as it is written (the
    /// archive is never held). Audited as `session.bulk_download` when the stream ends,
    /// with the files and bytes sent.
    #[oai(
        path = "/api/admin/users/:id/sessions/download-all",
        method = "get",
        operation_id = "download_user_sessions"
    )]
    async fn download_all(&self, auth: AdminAuth, id: Path<String>) -> ApiResult<SessionArchive> {
        let started = Instant::now();
        self.known_user(&id.0).await?;
        let (tx, mut rx) = tokio::sync::mpsc::channel(4);
        let writer = ChannelWriter {
            tx,
            buf: Vec::with_capacity(CHUNK),
        };
        let browser = self.state.sessions.clone();
        let audit = self.state.audit.clone();
        let actor = auth.0.actor.clone();
        let dir = UserDir::for_user(&id.0)?;
        let event =
            Event::new("session.bulk_download").resource(format!("users/{}/sessions", id.0));
        tokio::spawn(async move {
            let result =
                tokio::task::spawn_blocking(move || browser.zip_user_sessions(&dir, writer)).await;
            let event = match result {
                Ok(Ok(r)) => event
                    .param("file_count", r.file_count)
                    .param("total_bytes", r.total_bytes),
                Ok(Err(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => event.failed(
                    499,
                    "The client closed the connection before the archive was sent",
                ),
                Ok(Err(e)) => event.failed(500, &format!("writing the archive: {e}")),
                Err(e) => event.failed(500, &format!("the archive task failed: {e}")),
            };
            audit.write(&actor, event.timed(started)).await;
        });
        let stream = futures::stream::poll_fn(move |cx| rx.poll_recv(cx));
        let name = format!(
            "attachment; filename=\"{}-sessions-{}.zip\"",
            id.0,
            chrono::Utc::now().format("%Y-%m-%d")
        );
        Ok(SessionArchive::Zip(
            Binary(Body::from_bytes_stream(stream)),
            name,
        ))
    }

    /// One of a user's session files (JSONL), streamed; `file` is the plain file name.
    /// Audited as `session.download`.
    #[oai(
        path = "/api/admin/users/:id/sessions/:file/download",
        method = "get",
        operation_id = "download_user_session"
    )]
    async fn user_download(
        &self,
        auth: AdminAuth,
        id: Path<String>,
        file: Path<String>,
    ) -> ApiResult<SessionDownload> {
        let started = Instant::now();
        self.known_user(&id.0).await?;
        let opened = self.browser().open(&id.0, &file.0).await;
        download(
            &self.state.audit,
            &auth.0.actor,
            format!("users/{}/sessions/{}", id.0, file.0),
            started,
            opened,
        )
        .await
    }
}
