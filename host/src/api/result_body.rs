//! The streamed result body shared by `POST /api/query` and `POST /api/v2/scan`.
//!
//! Rows are encoded batch by batch as the client reads them, so memory stays bounded by the
//! look-ahead window whatever the result's size. Before any byte is sent the stream reads
//! ahead up to [`LOOK_AHEAD_BYTES`], which settles `X-Svc-Truncated` for every result that
//! fits in it (always `true` or `false` then); a larger result starts streaming with
//! `X-Svc-Truncated: unknown` and settles it at the end: in an HTTP trailer of the same name
//! (announced with `Trailer:`; sent to clients that ask with `TE: trailers`), and in the body
//! where the format has room — the `json` field `truncated`, the `parquet` footer's
//! `svc:truncated`, the `arrow` stream's final zero-row batch.
//!
//! The audit row is written when the body is done: with the rows sent and bytes scanned on
//! success, with the error when encoding or the query fails mid-stream, and as `error.499`
//! when the client goes away first — which drops the query.

use std::sync::Arc;
use std::time::Instant;

use http_body::Frame;
use poem::http::{HeaderMap, HeaderValue};
use poem::{Body, IntoResponse, Response};
use poem_openapi::registry::{
    MetaHeader, MetaMediaType, MetaResponse, MetaResponses, MetaSchema, MetaSchemaRef, Registry,
};
use poem_openapi::types::Type;
use poem_openapi::{ApiResponse, Object};
use serde_json::Value;
use svc_trace::{Instrument as _, LogTag, Tagged};

use super::ApiError;
use crate::state::AppState;
use svc_core::Error;
use svc_query::format::{Encoder, Format};
use svc_query::quota::Permit;
use svc_query::stream::RowStream;
use svc_store::audit::{Actor, Event};

/// Rows held back before the first byte, to settle `X-Svc-Truncated`.
pub const LOOK_AHEAD_BYTES: usize = 16 << 20;

/// Header: whether rows past the limit existed (`true`, `false`, or `unknown` for a result
/// larger than the look-ahead window).
pub const TRUNCATED_HEADER: &str = "X-Svc-Truncated";
/// Header: the server's row cap, present when it lowered the rows a scan returns.
pub const ROW_CAP_HEADER: &str = "X-Svc-Row-Cap";

/// The `json` body of a query or scan (documentation of the streamed object).
#[derive(Object)]
pub struct RowsResponse {
    /// Column names in order.
    columns: Vec<String>,
    /// Arrow type of each column.
    column_types: Vec<String>,
    /// Rows as arrays in column order; dates and timestamps as ISO-8601 text, decimals as
    /// text, NaN and infinities as null.
    rows: Vec<Value>,
    /// Rows returned.
    row_count: usize,
    /// More rows existed than `limit`.
    truncated: bool,
}

/// Who asked, and what to audit once the body is done.
struct Completion {
    state: Arc<AppState>,
    actor: Actor,
    event: Option<Event>,
    started: Instant,
    permit: Option<Permit>,
    /// The request's log tag and trace span: the body is sent after the handler returns,
    /// and its audit row belongs to the same request.
    tag: Option<LogTag>,
    trace: Option<svc_trace::Context>,
}

impl Completion {
    /// Audits a failure during the body.
    async fn fail(mut self, err: &Error) {
        if let Some(event) = self.event.take() {
            let event = event.failed(err.status(), &err.to_string());
            let write = self
                .state
                .audit
                .write(&self.actor, event.timed(self.started));
            Tagged::new(write.in_context(self.trace), self.tag.take()).await;
        }
    }

    async fn succeed(mut self, outcome: Outcome, sent_bytes: u64) {
        let scanned = outcome.bytes_scanned;
        if let Some(permit) = self.permit.take() {
            permit.record(scanned.unwrap_or(sent_bytes));
        }
        if let Some(mut event) = self.event.take() {
            event = event
                .param("rows_returned", outcome.rows)
                .param("truncated", outcome.truncated)
                .param("bytes_sent", sent_bytes);
            if let Some(b) = scanned {
                event = event.param("bytes_scanned", b);
            }
            let write = self
                .state
                .audit
                .write(&self.actor, event.timed(self.started));
            Tagged::new(write.in_context(self.trace), self.tag.take()).await;
        }
    }
}

/// What a finished stream read and returned.
struct Outcome {
    rows: usize,
    truncated: bool,
    bytes_scanned: Option<u64>,
}

impl Drop for Completion {
    fn drop(&mut self) {
        let Some(event) = self.event.take() else {
            return;
        };
        let event = event
            .failed(
                499,
                "The client closed the connection before the result was sent",
            )
            .timed(self.started);
        let (state, actor) = (self.state.clone(), self.actor.clone());
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let (tag, trace) = (self.tag.take(), self.trace);
            rt.spawn(Tagged::new(
                async move { state.audit.write(&actor, event).in_context(trace).await },
                tag,
            ));
        }
    }
}

/// Answers a started query or scan: checks the format can hold its columns, reads ahead,
/// and streams the body under the caller's quota slot; a failure up to the first byte is an
/// error response. Either way the event is audited (see [`Completion`]).
pub async fn serve_rows(
    state: &Arc<AppState>,
    actor: &Actor,
    started: Instant,
    event: Event,
    format: Format,
    row_cap: Option<usize>,
    rows: Result<(RowStream, Permit), ApiError>,
) -> Result<ResultBody, ApiError> {
    let ready = match rows {
        Ok((mut rows, permit)) => {
            let checked = match format.check(rows.schema()) {
                Ok(()) => rows.look_ahead(LOOK_AHEAD_BYTES).await,
                Err(e) => Err(e),
            };
            checked
                .and_then(|()| format.encoder(rows.schema()).map_err(Error::internal))
                .map(|encoder| (rows, encoder, permit))
                .map_err(ApiError::from)
        }
        Err(e) => Err(e),
    };
    let (rows, encoder, permit) = match ready {
        Ok(ready) => ready,
        Err(e) => {
            let event = event.failed(e.status().as_u16(), &e.to_string());
            state.audit.write(actor, event.timed(started)).await;
            return Err(e);
        }
    };
    let done = Completion {
        state: state.clone(),
        actor: actor.clone(),
        event: Some(event),
        started,
        permit: Some(permit),
        tag: LogTag::current(),
        trace: svc_trace::current(),
    };
    Ok(ResultBody::stream(rows, encoder, format, row_cap, done))
}

/// A result on its way to the client.
pub struct ResultBody {
    format: Format,
    truncated: Option<bool>,
    row_cap: Option<usize>,
    body: Body,
}

impl ResultBody {
    /// Streams `rows` (already looked ahead) in `format`. `row_cap` is announced in
    /// [`ROW_CAP_HEADER`] when the server lowered the caller's limit.
    fn stream(
        rows: RowStream,
        encoder: Encoder,
        format: Format,
        row_cap: Option<usize>,
        completion: Completion,
    ) -> Self {
        let truncated = rows.truncated();
        let state = Streaming {
            rows,
            encoder,
            phase: Phase::Begin,
            completion: Some(completion),
            sent: 0,
            trailer: truncated.is_none(),
        };
        // The encoders are Send but not Sync; the body type wants both, and the stream is
        // only ever polled by one task.
        let frames = http_body_util::StreamBody::new(sync_wrapper::SyncStream::new(
            futures::stream::unfold(state, Streaming::step),
        ));
        let body = Body::from(http_body_util::BodyExt::boxed(frames));
        Self {
            format,
            truncated,
            row_cap,
            body,
        }
    }
}

enum Phase {
    Begin,
    Rows,
    Done,
}

struct Streaming {
    rows: RowStream,
    encoder: Encoder,
    phase: Phase,
    completion: Option<Completion>,
    sent: u64,
    /// The truncation header said `unknown`: settle it in a trailer after the last byte.
    trailer: bool,
}

type Chunk = Result<Frame<bytes::Bytes>, std::io::Error>;

impl Streaming {
    async fn step(mut self) -> Option<(Chunk, Self)> {
        loop {
            let piece = match self.phase {
                Phase::Done if self.trailer => {
                    self.trailer = false;
                    let settled = if self.rows.truncated().unwrap_or(false) {
                        "true"
                    } else {
                        "false"
                    };
                    let mut trailers = HeaderMap::new();
                    trailers.insert(TRUNCATED_HEADER, HeaderValue::from_static(settled));
                    return Some((Ok(Frame::trailers(trailers)), self));
                }
                Phase::Done => return None,
                Phase::Begin => {
                    self.phase = Phase::Rows;
                    self.encoder.begin().map_err(Error::internal)
                }
                Phase::Rows => match self.rows.next().await {
                    Ok(Some(batch)) => self.encoder.batch(&batch).map_err(Error::internal),
                    Ok(None) => {
                        self.phase = Phase::Done;
                        let truncated = self.rows.truncated().unwrap_or(false);
                        self.encoder.finish(truncated).map_err(Error::internal)
                    }
                    Err(e) => Err(e),
                },
            };
            match piece {
                Ok(bytes) => {
                    self.sent += bytes.len() as u64;
                    if matches!(self.phase, Phase::Done) {
                        if let Some(c) = self.completion.take() {
                            let outcome = Outcome {
                                rows: self.rows.rows(),
                                truncated: self.rows.truncated().unwrap_or(false),
                                bytes_scanned: self.rows.bytes_scanned(),
                            };
                            c.succeed(outcome, self.sent).await;
                        }
                    }
                    if !bytes.is_empty() {
                        return Some((Ok(Frame::data(bytes)), self));
                    }
                }
                Err(err) => {
                    // Headers are gone; breaking the body is how the client learns.
                    self.phase = Phase::Done;
                    self.trailer = false;
                    tracing::warn!(error = %err, "result stream failed");
                    if let Some(c) = self.completion.take() {
                        c.fail(&err).await;
                    }
                    return Some((Err(std::io::Error::other(err.to_string())), self));
                }
            }
        }
    }
}

impl IntoResponse for ResultBody {
    fn into_response(self) -> Response {
        let mut resp = Response::builder()
            .content_type(self.format.content_type())
            .header(
                TRUNCATED_HEADER,
                match self.truncated {
                    Some(true) => "true",
                    Some(false) => "false",
                    None => "unknown",
                },
            );
        if self.truncated.is_none() {
            resp = resp.header(poem::http::header::TRAILER, TRUNCATED_HEADER);
        }
        if let Some(cap) = self.row_cap {
            resp = resp.header(ROW_CAP_HEADER, cap.to_string());
        }
        if self.format == Format::Parquet {
            resp = resp.header(
                "Content-Disposition",
                "attachment; filename=\"result.parquet\"",
            );
        }
        resp.body(self.body)
    }
}

impl ApiResponse for ResultBody {
    fn meta() -> MetaResponses {
        let binary =
            || MetaSchemaRef::Inline(Box::new(MetaSchema::new_with_format("string", "binary")));
        let header = |name: &str, description: &str, ty: &'static str| MetaHeader {
            name: name.to_string(),
            description: Some(description.to_string()),
            required: false,
            deprecated: false,
            schema: MetaSchemaRef::Inline(Box::new(MetaSchema::new(ty))),
        };
        MetaResponses {
            responses: vec![MetaResponse {
                description: "The rows, streamed in the requested format",
                status: Some(200),
                status_range: None,
                // Raw bytes first: generators that use one media type per response (the
                // Python one takes the first it knows) then hand back the body's bytes for
                // every format, instead of parsing an Arrow stream as JSON. The real media
                // types follow; the Content-Type header says which one came.
                content: vec![
                    MetaMediaType {
                        content_type: "application/octet-stream",
                        schema: binary(),
                    },
                    MetaMediaType {
                        content_type: Format::Arrow.content_type(),
                        schema: binary(),
                    },
                    MetaMediaType {
                        content_type: Format::Csv.content_type(),
                        schema: binary(),
                    },
                    MetaMediaType {
                        content_type: Format::Parquet.content_type(),
                        schema: binary(),
                    },
                    MetaMediaType {
                        content_type: Format::Json.content_type(),
                        schema: RowsResponse::schema_ref(),
                    },
                ],
                headers: vec![
                    header(
                        TRUNCATED_HEADER,
                        "`true` when rows past the limit existed, `false` when not, `unknown` when the result outgrew the look-ahead window: then a trailer of the same name settles it (ask with `TE: trailers`), as do the json body, the parquet footer and the arrow stream's final zero-row batch",
                        "string",
                    ),
                    header(
                        ROW_CAP_HEADER,
                        "The server's row cap, when it lowered the rows returned",
                        "integer",
                    ),
                ],
            }],
        }
    }

    fn register(registry: &mut Registry) {
        RowsResponse::register(registry);
    }
}
