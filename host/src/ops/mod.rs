//! What operators watch: Prometheus metrics (`/metrics`), OpenTelemetry traces (OTLP when
//! `OTEL_EXPORTER_OTLP_ENDPOINT` is set) and the logs (text, or JSON with
//! `SVC_LOG_FORMAT=json`). The series themselves are defined in `svc-metrics`; this module
//! serves them and sets up the subscriber every span and log line goes through. It also lets go
//! of the code start-up ran once the server is ready (`code_pages`), so the resident set an
//! operator watches is what the running server uses.

pub mod code_pages;
pub mod logs;
pub mod metrics;
pub mod traces;
