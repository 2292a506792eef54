//! The ticketing source's HTTP side: the webhook receiver (signed, no user token) and the
//! admin operations on a connection (status, compaction, backfill).

use std::sync::Arc;
use std::time::{Duration, Instant};

use poem::Request;
use poem_openapi::param::{Header, Path};
use poem_openapi::payload::Json;
use poem_openapi::{Object, OpenApi};
use svc_auth::ratelimit::LoginLimiter;
use svc_core::{Error, ErrorKind};
use svc_driver_ticketing::{Delivery, Receipt, Refused};
use svc_store::audit::{Actor, Event};

use super::{AdminAuth, ApiResult, RequestMeta, Tag};
use crate::state::AppState;

/// Refused signatures audited per client address (and per connection) a minute; past it
/// they are answered 429 and not audited, so a flood cannot fill the audit log. Valid
/// deliveries are checked before this limit and never refused by it.
const AUDITED_REJECTIONS_PER_MINUTE: u32 = 20;

pub struct TicketingApi {
    pub state: Arc<AppState>,
    pub rejections: Arc<LoginLimiter>,
}

impl TicketingApi {
    /// The API over `state`, with its own rejection limiter.
    pub fn new(state: Arc<AppState>) -> Self {
        Self {
            state,
            rejections: Arc::new(LoginLimiter::new(
                AUDITED_REJECTIONS_PER_MINUTE,
                Duration::from_secs(60),
            )),
        }
    }
}

/// A delivery acknowledged.
#[derive(Object)]
struct WebhookAck {
    /// `accepted` (new, durable), `duplicate` (a replay; nothing changed) or `filtered` (a
    /// project the connection does not keep).
    status: String,
    /// The identifier the delivery is deduplicated by.
    #[oai(skip_serializing_if_is_none)]
    delivery_id: Option<String>,
    /// `webhookEvent`, for accepted deliveries.
    #[oai(skip_serializing_if_is_none)]
    event: Option<String>,
}

/// Rows of one of a connection's tables.
#[derive(Object)]
struct TableRows {
    /// Table id.
    table_id: String,
    /// Rows as of the last compaction.
    rows: u64,
}

/// The last compaction.
#[derive(Object)]
struct CompactionInfo {
    /// When it ended (RFC 3339).
    at: String,
    /// Events it folded in.
    events: u64,
    /// How long it took.
    seconds: f64,
    /// Why it failed, when it did.
    #[oai(skip_serializing_if_is_none)]
    error: Option<String>,
}

/// A connection's counters and backlog.
#[derive(Object)]
struct TicketingStatus {
    /// Connection name.
    connection: String,
    /// Deliveries accepted (webhooks and backfilled issues).
    received: u64,
    /// Replays acknowledged without change.
    duplicates: u64,
    /// Deliveries refused for their signature.
    rejected_signatures: u64,
    /// Deliveries refused for their body (not JSON, no issue key, too large).
    bad_payloads: u64,
    /// Deliveries of projects the connection does not keep.
    filtered: u64,
    /// Accepted events of kinds kept only in the raw table.
    unknown_events: u64,
    /// Events whose own time was far in the future (kept, flagged, ordered by receipt).
    future_timestamps: u64,
    /// Deliveries durable in the log and not yet in the tables.
    pending: u64,
    /// Age of the oldest pending delivery, seconds.
    #[oai(skip_serializing_if_is_none)]
    lag_seconds: Option<f64>,
    /// Rows per table.
    tables: Vec<TableRows>,
    /// The last compaction.
    #[oai(skip_serializing_if_is_none)]
    last_compaction: Option<CompactionInfo>,
    /// Backfill asks for issues updated since this time (RFC 3339), less a day.
    #[oai(skip_serializing_if_is_none)]
    backfill_since: Option<String>,
    /// The log could not be written: deliveries are refused (503) until a restart.
    log_failed: bool,
}

/// What a compaction did.
#[derive(Object)]
struct CompactResult {
    /// Connection name.
    connection: String,
    /// Events folded in.
    events: u64,
    /// Tables rewritten.
    tables: Vec<String>,
    /// Seconds it took.
    seconds: f64,
}

/// What a backfill did.
#[derive(Object)]
struct BackfillResult {
    /// Connection name.
    connection: String,
    /// Pages fetched from the tracker.
    pages: u32,
    /// Issues read.
    issues: u64,
    /// Issues new or changed since svc last saw them.
    new: u64,
    /// Issues of other projects, or unreadable.
    skipped: u64,
    /// The JQL asked.
    jql: String,
    /// Tables rewritten by the compaction that followed.
    tables: Vec<String>,
}

fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// A refused delivery as the envelope's error.
fn refusal(name: &str, refused: &Refused) -> Error {
    match refused {
        Refused::UnknownConnection => Error::not_found(format!("no ticketing connection '{name}'")),
        Refused::TooLarge { limit } => Error::new(
            ErrorKind::PayloadTooLarge,
            format!("Request body exceeds the limit of {limit} bytes"),
        ),
        Refused::Signature(r) => Error::unauthorized(r.message()),
        Refused::BadPayload(message) => Error::bad_request(message.clone()),
        Refused::Unavailable(message) => Error::new(
            ErrorKind::Unavailable,
            format!("the delivery could not be stored, retry later: {message}"),
        ),
    }
}

#[OpenApi(tag = "Tag::Operations")]
impl TicketingApi {
    /// Receives an issue tracker's webhook (Jira Cloud shape) for connection `name`. No user
    /// token: the body must be signed (`X-Hub-Signature: sha256=<hex>`, the HMAC-SHA256 of
    /// the raw body under the connection's secret). Deduplicated by
    /// `X-Atlassian-Webhook-Identifier` (else by the body's hash): a replay is acknowledged
    /// and changes nothing. The event is durable on disk before the 200; the connection's
    /// tables show it after the next compaction (every few seconds).
    #[oai(
        path = "/api/webhooks/ticketing/:name",
        method = "post",
        operation_id = "receive_ticketing_webhook"
    )]
    async fn receive(
        &self,
        req: &Request,
        name: Path<String>,
        #[oai(name = "X-Hub-Signature")] signature: Header<Option<String>>,
        #[oai(name = "X-Atlassian-Webhook-Identifier")] delivery_id: Header<Option<String>>,
        body: Vec<u8>,
    ) -> ApiResult<Json<WebhookAck>> {
        let started = Instant::now();
        let bytes = body.len();
        let received = self
            .state
            .drivers
            .ticketing()
            .receive(
                &name,
                Delivery {
                    body,
                    signature: signature.0,
                    delivery_id: delivery_id.0,
                },
            )
            .await;
        let refused = match received {
            Ok(Receipt::Accepted { delivery_id, event }) => {
                return Ok(Json(WebhookAck {
                    status: "accepted".into(),
                    delivery_id: Some(delivery_id),
                    event: Some(event),
                }))
            }
            Ok(Receipt::Duplicate { delivery_id }) => {
                return Ok(Json(WebhookAck {
                    status: "duplicate".into(),
                    delivery_id: Some(delivery_id),
                    event: None,
                }))
            }
            Ok(Receipt::Filtered { .. }) => {
                return Ok(Json(WebhookAck {
                    status: "filtered".into(),
                    delivery_id: None,
                    event: None,
                }))
            }
            Err(refused) => refused,
        };
        let meta = RequestMeta::of(req);
        let error = refusal(&name, &refused);
        if matches!(refused, Refused::UnknownConnection) {
            return Err(error.into());
        }
        if let (Refused::Signature(_), Some(ip)) = (&refused, meta.client_ip) {
            let key = format!("ticketing:{}", name.0);
            if let Err(limited) = self.rejections.attempt(ip, &key) {
                return Err(Error::too_many(
                    "Too many deliveries with bad signatures; try again later",
                    limited.retry_after,
                )
                .into());
            }
        }
        let actor = Actor::anonymous(meta.ip_string(), Some(meta.request_id));
        let event = Event::new("ticketing.webhook_rejected")
            .resource(format!("ticketing:{}", name.0))
            .param("bytes", bytes)
            .failed(error.status(), &error.to_string())
            .timed(started);
        self.state.audit.write(&actor, event).await;
        Err(error.into())
    }

    /// A ticketing connection's counters, backlog and tables (admin).
    #[oai(
        path = "/api/admin/ticketing/:name",
        method = "get",
        operation_id = "ticketing_status"
    )]
    async fn status(
        &self,
        _auth: AdminAuth,
        name: Path<String>,
    ) -> ApiResult<Json<TicketingStatus>> {
        let tracker = self.state.drivers.ticketing().tracker(&name)?;
        let s = tracker.status();
        let t = s.totals;
        Ok(Json(TicketingStatus {
            connection: name.0.clone(),
            received: t.received,
            duplicates: t.duplicates,
            rejected_signatures: t.rejected_signatures,
            bad_payloads: t.bad_payloads,
            filtered: t.filtered,
            unknown_events: t.unknown_events,
            future_timestamps: t.future_timestamps,
            pending: s.pending,
            lag_seconds: s.lag_ms.map(|ms| ms as f64 / 1e3),
            tables: s
                .rows
                .iter()
                .map(|(kind, rows)| TableRows {
                    table_id: svc_driver_ticketing::table_id(&name, *kind),
                    rows: *rows,
                })
                .collect(),
            last_compaction: s.checkpoint.last.map(|l| CompactionInfo {
                at: rfc3339(l.at_ms),
                events: l.events,
                seconds: l.seconds,
                error: l.error,
            }),
            backfill_since: s.checkpoint.backfill_since_ms.map(rfc3339),
            log_failed: s.log_failed,
        }))
    }

    /// Folds the connection's received events into its tables now (admin); the server also
    /// does it every few seconds.
    #[oai(
        path = "/api/admin/ticketing/:name/compact",
        method = "post",
        operation_id = "compact_ticketing"
    )]
    async fn compact(&self, auth: AdminAuth, name: Path<String>) -> ApiResult<Json<CompactResult>> {
        let started = Instant::now();
        let result = crate::jobs::ticketing::compact(&self.state, &name, &auth.0.actor).await;
        let (done, tables) = result?;
        Ok(Json(CompactResult {
            connection: name.0,
            events: done.events,
            tables,
            seconds: started.elapsed().as_secs_f64(),
        }))
    }

    /// Loads or repairs the connection's history over the tracker's REST search (admin):
    /// issues updated since the last backfill (all of them the first time), merged with the
    /// webhook data by the same rules, then compacted. Needs the connection's `base_url`,
    /// `user` and token.
    #[oai(
        path = "/api/admin/ticketing/:name/backfill",
        method = "post",
        operation_id = "backfill_ticketing"
    )]
    async fn backfill(
        &self,
        auth: AdminAuth,
        name: Path<String>,
    ) -> ApiResult<Json<BackfillResult>> {
        let result = crate::jobs::ticketing::backfill(&self.state, &name, &auth.0.actor).await;
        let (done, tables) = result?;
        Ok(Json(BackfillResult {
            connection: name.0,
            pages: done.pages,
            issues: done.issues,
            new: done.new,
            skipped: done.skipped,
            jql: done.jql,
            tables,
        }))
    }
}
