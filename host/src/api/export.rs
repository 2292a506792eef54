//! The streamed body of a telemetry export: the plan runs on the query runtime, each batch
//! is encoded as it arrives and handed to the client through a small channel, so memory
//! stays bounded whatever the export's size. The export is audited when the stream ends —
//! with the rows and bytes sent, as `error.499` when the client went away first, or with
//! the error that cut it.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use futures::StreamExt;
use poem::{Body, IntoResponse, Response};
use poem_openapi::registry::{
    MetaHeader, MetaMediaType, MetaResponse, MetaResponses, MetaSchema, MetaSchemaRef, Registry,
};
use poem_openapi::ApiResponse;
use svc_core::Error;
use svc_plugin_api::datafusion::execution::TaskContext;
use svc_plugin_api::datafusion::physical_plan::ExecutionPlan;
use svc_query::format::Format;
use svc_store::audit::{Actor, AuditWriter, Event};

/// Encoded chunks queued ahead of the client: enough to overlap encoding with sending.
const AHEAD: usize = 4;

/// The format of an export.
#[derive(poem_openapi::Enum, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[oai(rename = "ExportFormat", rename_all = "lowercase")]
pub enum ExportFormat {
    /// CSV with a header line.
    #[default]
    Csv,
    /// One JSON object per line.
    Ndjson,
    /// A parquet file.
    Parquet,
}

impl ExportFormat {
    fn encoding(self) -> Format {
        match self {
            Self::Csv => Format::Csv,
            Self::Ndjson => Format::Ndjson,
            Self::Parquet => Format::Parquet,
        }
    }

    fn file_name(self, stem: &str) -> String {
        let ext = match self {
            Self::Csv => "csv",
            Self::Ndjson => "ndjson",
            Self::Parquet => "parquet",
        };
        format!("attachment; filename=\"{stem}.{ext}\"")
    }
}

/// An export, streamed: one 200 response whose `Content-Type` says which format came.
pub struct ExportBody {
    format: Format,
    disposition: String,
    body: Body,
}

impl IntoResponse for ExportBody {
    fn into_response(self) -> Response {
        Response::builder()
            .content_type(self.format.content_type())
            .header("Content-Disposition", self.disposition)
            .body(self.body)
    }
}

impl ApiResponse for ExportBody {
    fn meta() -> MetaResponses {
        let binary =
            || MetaSchemaRef::Inline(Box::new(MetaSchema::new_with_format("string", "binary")));
        // Raw bytes first, as for query results: generators that take one media type per
        // response then hand back the body's bytes whatever the format.
        let content = [
            "application/octet-stream",
            Format::Csv.content_type(),
            Format::Ndjson.content_type(),
            Format::Parquet.content_type(),
        ]
        .into_iter()
        .map(|content_type| MetaMediaType {
            content_type,
            schema: binary(),
        })
        .collect();
        MetaResponses {
            responses: vec![MetaResponse {
                description: "The events, streamed in the requested format",
                status: Some(200),
                status_range: None,
                content,
                headers: vec![MetaHeader {
                    name: "Content-Disposition".to_string(),
                    description: Some("`attachment` with the file name".to_string()),
                    required: true,
                    deprecated: false,
                    schema: MetaSchemaRef::Inline(Box::new(MetaSchema::new("string"))),
                }],
            }],
        }
    }

    fn register(_registry: &mut Registry) {}
}

/// How an export's stream ended.
enum Ended {
    Done,
    ClientGone,
    Failed(Error),
}

/// The audit row an export writes when its body is done.
pub struct ExportAudit {
    /// The one audit writer.
    pub writer: Arc<AuditWriter>,
    /// Who exported.
    pub actor: Actor,
    /// The event, with the export's filters; `row_count` and `bytes` are added.
    pub event: Event,
    /// When the request started.
    pub started: Instant,
}

/// Starts `plan` and returns its rows in `format` as a body named `<stem>.<ext>`, audited
/// by `audit` when the body is done.
pub fn stream(
    plan: Arc<dyn ExecutionPlan>,
    context: Arc<TaskContext>,
    format: ExportFormat,
    stem: &str,
    audit: ExportAudit,
) -> Result<ExportBody, Error> {
    let encoding = format.encoding();
    let schema = plan.schema();
    encoding.check(&schema)?;
    let mut encoder = encoding.encoder(&schema).map_err(Error::internal)?;
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(AHEAD);
    tokio::spawn(async move {
        let mut rows = 0_u64;
        let mut bytes = 0_u64;
        let mut batches = svc_query::runtime::execute(plan, context);
        let mut send = async |chunk: Bytes| {
            bytes += chunk.len() as u64;
            chunk.is_empty() || tx.send(Ok(chunk)).await.is_ok()
        };
        let ended = async {
            if !send(encoder.begin().map_err(Error::internal)?).await {
                return Ok(Ended::ClientGone);
            }
            while let Some(batch) = batches.next().await {
                let batch = batch.map_err(|e| Error::internal(format!("export: {e}")))?;
                rows += batch.num_rows() as u64;
                if !send(encoder.batch(&batch).map_err(Error::internal)?).await {
                    return Ok(Ended::ClientGone);
                }
            }
            if !send(encoder.finish(false).map_err(Error::internal)?).await {
                return Ok(Ended::ClientGone);
            }
            Ok(Ended::Done)
        }
        .await
        .unwrap_or_else(Ended::Failed);
        let event = audit.event.param("row_count", rows).param("bytes", bytes);
        let event = match ended {
            Ended::Done => event,
            Ended::ClientGone => event.failed(
                499,
                "The client closed the connection before the export was sent",
            ),
            Ended::Failed(e) => {
                // The client sees a cut body, never a short file that looks whole.
                let _ = tx.send(Err(std::io::Error::other(e.to_string()))).await;
                event.failed(e.status(), &e.to_string())
            }
        };
        audit
            .writer
            .write(&audit.actor, event.timed(audit.started))
            .await;
    });
    let body = Body::from_bytes_stream(futures::stream::poll_fn(move |cx| rx.poll_recv(cx)));
    Ok(ExportBody {
        format: encoding,
        disposition: format.file_name(stem),
        body,
    })
}
