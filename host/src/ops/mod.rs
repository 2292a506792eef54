//! What operators watch: Prometheus metrics (`/metrics`), OpenTelemetry traces (OTLP when
//! `OTEL_EXPORTER_OTLP_ENDPOINT` is set) and the logs (text, or JSON with
//! `SVC_LOG_FORMAT=json`). The series themselves are defined in `svc-metrics`; this module
//! serves them and sets up the subscriber every span and log line goes through.

pub mod logs;
pub mod metrics;
pub mod traces;
