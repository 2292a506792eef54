//! The process's `tracing` subscriber: log lines to standard error (text, or one JSON object
//! per line). Trace spans do not pass through it (see [`super::traces`]).
//!
//! Every line logged while a request is handled carries its `request_id`: the request's span
//! (see [`super::traces::request_span`]) holds it, the text format prints the spans' fields
//! before the message and the JSON format lists every open span under `spans` (the request's
//! first), so a line logged deep inside the engine still names its request.

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
    let lines = match format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
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
}
