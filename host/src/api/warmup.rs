//! The warmup log as server-sent events, shared by `/api/admin/cache-warmup/stream` and the
//! tables page. Every line carries its number as the event id; a client that reconnects
//! with `Last-Event-ID` gets exactly the lines after it (none lost, none repeated), even if
//! it fell behind the live channel meanwhile.

use std::collections::VecDeque;
use std::time::Duration;

use futures::stream::BoxStream;
use futures::StreamExt;
use serde_json::{json, Value};
use svc_catalog::warmup::{LogLine, MetadataWarmer, WarmupEvent};
use tokio::sync::broadcast::error::RecvError;

/// A stream with no line for this long ends (the browser reconnects by itself).
const STREAM_IDLE: Duration = Duration::from_secs(30);

fn line_json(line: &LogLine) -> Value {
    let mut v = match &line.event {
        WarmupEvent::Start(tables) => json!({"type": "start", "tables": tables}),
        WarmupEvent::Row(row) => json!({"type": "row", "row": row}),
        WarmupEvent::Complete { fresh, failed } => {
            json!({"type": "complete", "fresh": fresh, "failed": failed})
        }
    };
    v["id"] = line.id.into();
    v["at"] = line.at.clone().into();
    v
}

struct Reader {
    warmer: MetadataWarmer,
    backlog: VecDeque<LogLine>,
    live: tokio::sync::broadcast::Receiver<LogLine>,
    last: u64,
    open: bool,
    follow: bool,
}

/// `snapshot` first, then the log lines (each with its `id` and the time it was written,
/// `at`) after `after` (the current run's when None) and
/// those still to come. Without `follow` (the API's contract) it ends after `complete`, or
/// at once when no run is going; with it (the page) it waits for the next run. Either way
/// it ends after 30 s without a line.
pub(crate) fn warmup_events(
    warmer: &MetadataWarmer,
    after: Option<u64>,
    follow: bool,
) -> BoxStream<'static, Value> {
    let sub = warmer.subscribe(after);
    let replay = follow || after.is_some() || sub.snapshot.running;
    let backlog: VecDeque<LogLine> = if replay {
        sub.backlog.into()
    } else {
        VecDeque::new()
    };
    let first = json!({"type": "snapshot", "snapshot": sub.snapshot});
    let reader = Reader {
        open: follow || sub.snapshot.running || !backlog.is_empty(),
        warmer: warmer.clone(),
        backlog,
        live: sub.live,
        last: after.unwrap_or(0),
        follow,
    };
    let rest = futures::stream::unfold(reader, |mut r| async move {
        if !r.open {
            return None;
        }
        loop {
            let line = match r.backlog.pop_front() {
                Some(line) => line,
                None => match tokio::time::timeout(STREAM_IDLE, r.live.recv()).await {
                    Ok(Ok(line)) => line,
                    Ok(Err(RecvError::Lagged(_))) => {
                        // Fell behind the channel: read the missed lines from the log.
                        let sub = r.warmer.subscribe(Some(r.last));
                        r.backlog = sub.backlog.into();
                        r.live = sub.live;
                        continue;
                    }
                    Ok(Err(RecvError::Closed)) | Err(_) => return None,
                },
            };
            if line.id <= r.last {
                continue;
            }
            r.last = line.id;
            if !r.follow && matches!(line.event, WarmupEvent::Complete { .. }) {
                r.open = false;
            }
            return Some((line_json(&line), r));
        }
    });
    futures::stream::once(async move { first })
        .chain(rest)
        .boxed()
}

/// A stream value as a server-sent event: its `type` as the event name, its `id` as the id.
pub(crate) fn sse_event(v: Value) -> poem::web::sse::Event {
    let kind = v["type"].as_str().unwrap_or("message").to_owned();
    let id = v["id"].as_u64();
    let event = poem::web::sse::Event::message(v.to_string()).event_type(kind);
    match id {
        Some(id) => event.id(id.to_string()),
        None => event,
    }
}

/// The `Last-Event-ID` a reconnecting client sent.
pub(crate) fn last_event_id(v: Option<&str>) -> Option<u64> {
    v.and_then(|v| v.trim().parse().ok())
}
