//! The process's `tracing` subscriber: log lines to standard error (text, or one JSON object
//! per line). Trace spans do not pass through it (see [`super::traces`]).
//!
//! Every line logged while a request is handled carries its `request_id`: the request's span
//! (see [`super::traces::request_span`]) holds it, the text format prints the spans' fields
//! before the message and the JSON format lists every open span under `spans` (the request's
//! first), so a line logged deep inside the engine still names its request.

use std::fmt;
use std::io::IsTerminal as _;

use tracing::field::{Field, Visit};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::{DefaultFields, Writer};
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::layer::SubscriberExt as _;
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
    // Colours only on a terminal: escape codes in a log file or a journal are noise, and
    // painting every field name cost each request's span a few thousand instructions.
    let ansi = std::io::stderr().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let lines = match format {
        LogFormat::Text if ansi => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .boxed(),
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .fmt_fields(PlainFields)
            .with_writer(std::io::stderr)
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .with_writer(std::io::stderr)
            .boxed(),
    };
    tracing_subscriber::registry()
        .with(lines.with_filter(filter))
        .init();
}

/// Fields as the default formatter writes them without colour (`name="value" n=5`), with a
/// shortcut for the common case: every request's span is made with its method and request
/// id, and the fmt layer formats a span's fields when the span is made, logged or not. The
/// default goes through `Debug` for each string, a character at a time with escape checks,
/// about two thousand instructions per request span. Here fields that are all plain
/// (printable ASCII strings without quotes or backslashes, whole numbers, flags) are
/// written directly, byte for byte what the default writes; anything else (a message, an
/// error, text that needs escaping) goes to the default formatter whole.
struct PlainFields;

impl<'w> FormatFields<'w> for PlainFields {
    fn format_fields<R: RecordFields>(&self, mut writer: Writer<'w>, fields: R) -> fmt::Result {
        let mut check = AllPlain(true);
        fields.record(&mut check);
        if !check.0 {
            return DefaultFields::new().format_fields(writer, fields);
        }
        let mut plain = WritePlain::new(&mut writer);
        fields.record(&mut plain);
        plain.finish()
    }
}

/// Whether a string's `Debug` form is the string in quotes.
fn is_plain(text: &str) -> bool {
    // One lookup a byte: the comparisons it stands for cost a request id several times as
    // many instructions.
    const PLAIN: [bool; 256] = {
        let mut table = [false; 256];
        let mut b = b' ';
        while b <= b'~' {
            table[b as usize] = b != b'"' && b != b'\\';
            b += 1;
        }
        table
    };
    text.bytes().all(|b| PLAIN[usize::from(b)])
}

/// Whether a field name is written as it is (the default formatter treats these apart).
fn is_plain_name(name: &str) -> bool {
    name != "message" && !name.starts_with("r#") && !name.starts_with("log.")
}

/// Finds whether every field can be written by [`WritePlain`].
struct AllPlain(bool);

impl Visit for AllPlain {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0 &= is_plain_name(field.name()) && is_plain(value);
    }

    fn record_i64(&mut self, field: &Field, _: i64) {
        self.0 &= is_plain_name(field.name());
    }

    fn record_u64(&mut self, field: &Field, _: u64) {
        self.0 &= is_plain_name(field.name());
    }

    fn record_bool(&mut self, field: &Field, _: bool) {
        self.0 &= is_plain_name(field.name());
    }

    fn record_debug(&mut self, _: &Field, _: &dyn fmt::Debug) {
        self.0 = false;
    }
}

/// Writes fields [`AllPlain`] accepted, space-separated, gathered on the stack and handed
/// to the writer at once: written piece by piece, the span's text grew (and moved) several
/// times.
struct WritePlain<'a, 'w> {
    writer: &'a mut Writer<'w>,
    staged: [u8; 256],
    len: usize,
    first: bool,
    result: fmt::Result,
}

impl<'a, 'w> WritePlain<'a, 'w> {
    fn new(writer: &'a mut Writer<'w>) -> Self {
        Self {
            writer,
            staged: [0; 256],
            len: 0,
            first: true,
            result: Ok(()),
        }
    }

    /// Hands what is staged to the writer; what the fields came to.
    fn finish(mut self) -> fmt::Result {
        self.flush();
        self.result
    }

    fn flush(&mut self) {
        let text = std::str::from_utf8(&self.staged[..self.len]).expect("whole strings staged");
        self.result = self.result.and_then(|()| self.writer.write_str(text));
        self.len = 0;
    }

    fn put(&mut self, text: &str) {
        if self.len + text.len() > self.staged.len() {
            self.flush();
            if text.len() > self.staged.len() {
                self.result = self.result.and_then(|()| self.writer.write_str(text));
                return;
            }
        }
        self.staged[self.len..self.len + text.len()].copy_from_slice(text.as_bytes());
        self.len += text.len();
    }

    fn name(&mut self, field: &Field) {
        if !std::mem::take(&mut self.first) {
            self.put(" ");
        }
        self.put(field.name());
        self.put("=");
    }

    /// A number or a flag: its `Display` form is its `Debug` form.
    fn shown(&mut self, field: &Field, value: impl fmt::Display) {
        self.name(field);
        self.put(&value.to_string());
    }
}

impl Visit for WritePlain<'_, '_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.name(field);
        self.put("\"");
        self.put(value);
        self.put("\"");
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.shown(field, value);
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.shown(field, value);
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.shown(field, value);
    }

    fn record_debug(&mut self, _: &Field, _: &dyn fmt::Debug) {
        unreachable!("AllPlain refuses fields recorded as Debug")
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

    /// A layer writing into a shared buffer, without times (so two runs compare).
    fn capture<N>(
        fields: N,
    ) -> (
        impl tracing::Subscriber,
        std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    )
    where
        N: for<'w> FormatFields<'w> + Send + Sync + 'static,
    {
        let out = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = out.clone();
        let layer = tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .without_time()
            .fmt_fields(fields)
            .with_writer(move || Shared(sink.clone()));
        (tracing_subscriber::registry().with(layer), out)
    }

    struct Shared(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Spans and lines with plain fields, fields that need escaping, a message, numbers,
    /// flags, a float and an error.
    fn log_everything() {
        let values = [
            "0af7651916cd43dd8448eb211c80319c",
            "GET",
            "a b/c:d-e_f.g{h}",
            "",
            "quote\"inside",
            "back\\slash",
            "new\nline",
            "esc\u{1b}[31mred",
            "tab\there",
            "é unicode",
        ];
        // Longer than what is staged at once.
        let long = "y".repeat(300);
        for value in values.into_iter().chain([long.as_str()]) {
            let span =
                tracing::info_span!("request", http.request.method = "GET", request_id = value);
            let _entered = span.enter();
            tracing::info!(rows = 5_u64, delta = -3_i64, ok = true, "answered {value}");
            tracing::info!(text = value, ratio = 0.5_f64, "mixed");
            let err = std::io::Error::other("disk full");
            tracing::warn!(error = &err as &dyn std::error::Error, "failed");
            let inner = tracing::info_span!("inner", n = 7_u64, flag = false, r#type = "x");
            inner.in_scope(|| tracing::info!(value, "in inner"));
        }
    }

    #[test]
    fn plain_fields_write_exactly_what_the_default_formatter_writes() {
        let (default, default_out) = capture(DefaultFields::new());
        tracing::subscriber::with_default(default, log_everything);
        let (plain, plain_out) = capture(PlainFields);
        tracing::subscriber::with_default(plain, log_everything);
        let default_out = String::from_utf8(default_out.lock().unwrap().clone()).unwrap();
        let plain_out = String::from_utf8(plain_out.lock().unwrap().clone()).unwrap();
        assert!(
            default_out.contains(r#"request_id="0af7651916cd43dd8448eb211c80319c""#),
            "{default_out}"
        );
        assert!(default_out.contains(r#"quote\"inside"#), "{default_out}");
        assert_eq!(plain_out, default_out);
    }
}
