//! The process's `tracing` subscriber: log lines to standard error (text, or one JSON object
//! per line). Trace spans do not pass through it (see [`super::traces`]).
//!
//! Every line logged while a request is handled carries its `request_id`: the request's
//! [`LogTag`] is current wherever its work is polled, and both formats write it as the
//! outermost span, as the `tracing` span it replaces was written — the text format as
//! `request{http.request.method="GET" request_id="..."}:` before the message, the JSON format
//! first under `spans` — so a line logged deep inside the engine still names its request.

use std::fmt;
use std::io::IsTerminal as _;

use serde_json::{json, Map, Value};
use svc_trace::LogTag;
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::{Format, Json, JsonFields, Writer};
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer as _};

/// How log lines are written (`SVC_LOG_FORMAT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines (the default).
    Text,
    /// One JSON object per line, for a log pipeline.
    Json,
}

impl LogFormat {
    /// `SVC_LOG_FORMAT`: `text` (or unset) or `json`; anything else is an error naming both.
    pub fn from_env(value: Option<&str>) -> Result<Self, String> {
        match value.map(str::trim).map(str::to_ascii_lowercase).as_deref() {
            None | Some("") | Some("text") => Ok(Self::Text),
            Some("json") => Ok(Self::Json),
            Some(other) => Err(format!(
                "SVC_LOG_FORMAT is '{other}'; it may be 'text' or 'json'"
            )),
        }
    }
}

/// Installs the subscriber for the whole process.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_env("SVC_LOG").unwrap_or_else(|_| "info,sqlx=warn".into());
    // Colours only on a terminal: escape codes in a log file or a journal are noise.
    let ansi = std::io::stderr().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let lines = match format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_ansi(ansi)
            .event_format(TextLine {
                timer: SystemTime,
                ansi,
            })
            .with_writer(std::io::stderr)
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .event_format(JsonLine::default())
            .fmt_fields(JsonFields::new())
            .with_writer(std::io::stderr)
            .boxed(),
    };
    tracing_subscriber::registry()
        .with(lines.with_filter(filter))
        .init();
}

/// A text line as `tracing_subscriber`'s full format writes it (time, level, the spans with
/// their fields, target, fields), with the request's tag as the outermost span. Colour, on a
/// terminal, is the level's only.
struct TextLine<T> {
    timer: T,
    ansi: bool,
}

impl<S, N, T> FormatEvent<S, N> for TextLine<T>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    T: FormatTime,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        if self.timer.format_time(&mut writer).is_err() {
            writer.write_str("<unknown time>")?;
        }
        let level = meta.level();
        if self.ansi {
            write!(writer, " {}{level:>5}\x1b[0m ", colour(*level))?;
        } else {
            write!(writer, " {level:>5} ")?;
        }
        let mut spans = LogTag::with_current(|tag| match tag {
            // The id is sanitized and the method a label: neither needs escaping.
            Some(tag) => write!(
                writer,
                "request{{http.request.method=\"{}\" request_id=\"{}\"}}:",
                tag.method(),
                tag.id()
            )
            .map(|()| true),
            None => Ok(false),
        })?;
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                spans = true;
                writer.write_str(span.name())?;
                let extensions = span.extensions();
                if let Some(fields) = extensions.get::<FormattedFields<N>>() {
                    if !fields.is_empty() {
                        write!(writer, "{{{fields}}}")?;
                    }
                }
                writer.write_char(':')?;
            }
        }
        if spans {
            writer.write_char(' ')?;
        }
        write!(writer, "{}: ", meta.target())?;
        ctx.format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

/// The escape that colours a level as `tracing_subscriber` does.
fn colour(level: Level) -> &'static str {
    match level {
        Level::TRACE => "\x1b[35m",
        Level::DEBUG => "\x1b[34m",
        Level::INFO => "\x1b[32m",
        Level::WARN => "\x1b[33m",
        Level::ERROR => "\x1b[31m",
    }
}

/// A JSON line as `tracing_subscriber`'s JSON format writes it (with the current span and
/// the list of spans), with the request's tag first under `spans` (and as `span` when no
/// other span is open). A line with a tag is written by the JSON format, read back and
/// written again: lines are rare next to requests, and this keeps every other key exactly
/// the JSON format's.
struct JsonLine(Format<Json, SystemTime>);

impl Default for JsonLine {
    fn default() -> Self {
        Self(
            tracing_subscriber::fmt::format()
                .json()
                .with_current_span(true)
                .with_span_list(true),
        )
    }
}

impl<S, N> FormatEvent<S, N> for JsonLine
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let Some(tag) = LogTag::current() else {
            return self.0.format_event(ctx, writer, event);
        };
        let mut line = String::new();
        self.0.format_event(ctx, Writer::new(&mut line), event)?;
        let Ok(mut object) = serde_json::from_str::<Map<String, Value>>(&line) else {
            // Not an object: what the JSON format wrote goes out as it is.
            return writer.write_str(&line);
        };
        let request = json!({
            "name": "request",
            "http.request.method": tag.method(),
            "request_id": tag.id(),
        });
        match object.get_mut("spans") {
            Some(Value::Array(spans)) => spans.insert(0, request.clone()),
            _ => {
                object.insert("spans".into(), Value::Array(vec![request.clone()]));
            }
        }
        object.entry("span").or_insert(request);
        writeln!(writer, "{}", Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_format_reads_text_json_and_refuses_the_rest() {
        assert_eq!(LogFormat::from_env(None), Ok(LogFormat::Text));
        assert_eq!(LogFormat::from_env(Some("JSON")), Ok(LogFormat::Json));
        assert_eq!(LogFormat::from_env(Some(" text ")), Ok(LogFormat::Text));
        let err = LogFormat::from_env(Some("yaml")).unwrap_err();
        assert!(
            err.contains("SVC_LOG_FORMAT") && err.contains("json"),
            "{err}"
        );
    }

    /// What a subscriber wrote, and the subscriber.
    type Captured = std::sync::Arc<std::sync::Mutex<Vec<u8>>>;

    fn capture<L>(layer: impl FnOnce(Shared) -> L) -> (impl tracing::Subscriber, Captured)
    where
        L: tracing_subscriber::Layer<tracing_subscriber::Registry> + Send + Sync + 'static,
    {
        let out = Captured::default();
        let layer = layer(Shared(out.clone()));
        (tracing_subscriber::registry().with(layer), out)
    }

    #[derive(Clone)]
    struct Shared(Captured);

    impl std::io::Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn text(out: &Captured) -> String {
        String::from_utf8(out.lock().unwrap().clone()).unwrap()
    }

    const IDS: [&str; 3] = ["0af7651916cd43dd8448eb211c80319c", "ops-test-1", "a.b_c-D"];

    /// Lines about a request: a message with numbers and a flag, text that needs escaping,
    /// an error, and a line inside a span of its own. `request` runs each id's lines as
    /// that request's.
    fn log_requests(request: impl Fn(&str, &dyn Fn())) {
        for id in IDS {
            request(id, &|| {
                tracing::info!(rows = 5_u64, delta = -3_i64, ok = true, "answered {id}");
                tracing::info!(text = "quote\"in\nside", ratio = 0.5_f64, "mixed");
                let err = std::io::Error::other("disk full");
                tracing::warn!(error = &err as &dyn std::error::Error, "failed");
                let inner = tracing::info_span!("inner", n = 7_u64, flag = false, r#type = "x");
                inner.in_scope(|| tracing::info!(id, "in inner"));
            });
        }
        tracing::info!("outside any request");
    }

    /// How lines were tagged before: a `tracing` span per request.
    fn in_request_span(id: &str, lines: &dyn Fn()) {
        tracing::info_span!("request", http.request.method = "GET", request_id = id)
            .in_scope(lines);
    }

    /// How they are tagged now.
    fn with_tag(id: &str, lines: &dyn Fn()) {
        LogTag::new("GET", id).in_scope(lines);
    }

    #[test]
    fn text_lines_name_their_request_as_the_request_span_did() {
        let (before, before_out) = capture(|w| {
            tracing_subscriber::fmt::layer()
                .with_ansi(false)
                .with_timer(Fixed)
                .with_writer(move || w.clone())
        });
        tracing::subscriber::with_default(before, || log_requests(in_request_span));
        let (now, now_out) = capture(|w| {
            tracing_subscriber::fmt::layer()
                .with_ansi(false)
                .event_format(TextLine {
                    timer: Fixed,
                    ansi: false,
                })
                .with_writer(move || w.clone())
        });
        tracing::subscriber::with_default(now, || log_requests(with_tag));
        let (before, now) = (text(&before_out), text(&now_out));
        assert!(
            now.contains(
                r#"INFO request{http.request.method="GET" request_id="ops-test-1"}:inner{n=7 flag=false type="x"}: "#
            ),
            "{now}"
        );
        assert_eq!(now.lines().count(), 13, "{now}");
        assert_eq!(now, before);
    }

    /// One time for every line, so two runs compare.
    struct Fixed;

    impl FormatTime for Fixed {
        fn format_time(&self, w: &mut Writer<'_>) -> fmt::Result {
            w.write_str("2026-12-05T00:00:00.000000Z")
        }
    }

    #[test]
    fn json_lines_list_their_request_first_under_spans_as_the_request_span_did() {
        let json_layer = |w: Shared| {
            tracing_subscriber::fmt::layer()
                .event_format(JsonLine::default())
                .fmt_fields(JsonFields::new())
                .with_writer(move || w.clone())
        };
        let (before, before_out) = capture(json_layer);
        tracing::subscriber::with_default(before, || log_requests(in_request_span));
        let (now, now_out) = capture(json_layer);
        tracing::subscriber::with_default(now, || log_requests(with_tag));
        let lines = |out: &Captured| -> Vec<Value> {
            text(out)
                .lines()
                .map(|line| {
                    let mut v: Value = serde_json::from_str(line).expect("a JSON line");
                    v.as_object_mut().unwrap().remove("timestamp");
                    v
                })
                .collect()
        };
        let (before, now) = (lines(&before_out), lines(&now_out));
        assert_eq!(now.len(), 13);
        assert_eq!(
            now[3]["spans"][0]["request_id"],
            "0af7651916cd43dd8448eb211c80319c"
        );
        assert_eq!(now[3]["spans"][1]["name"], "inner");
        assert_eq!(now[4]["span"]["request_id"], "ops-test-1");
        assert!(now[12].get("spans").is_none(), "{}", now[12]);
        assert_eq!(now, before);
    }
}
