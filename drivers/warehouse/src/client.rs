//! A small typed client for the BigQuery REST API v2: `jobs.query` with
//! `getQueryResults` paging, dry runs, and `tables.get`. Errors become typed driver errors.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde::Deserialize;
use serde_json::{json, Value};
use svc_plugin_api::arrow::array::{ArrayRef, StringArray, TimestampMicrosecondArray};
use svc_plugin_api::arrow::compute::{cast, concat_batches};
use svc_plugin_api::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use svc_plugin_api::{DriverError, ErrorKind, RecordBatch, Result};
use svc_trace::Instrument as _;

use crate::auth::Credentials;
use crate::config::WarehouseConfig;

/// Longest wait for one HTTP call.
const HTTP_TIMEOUT: Duration = Duration::from_secs(120);
/// Rows asked for per page.
const PAGE_ROWS: u64 = 50_000;

/// A column as the warehouse describes it.
#[derive(Debug, Clone, Deserialize)]
pub struct FieldSchema {
    /// Column name.
    pub name: String,
    /// `STRING`, `INTEGER`, `FLOAT`, `TIMESTAMP`, `RECORD`, …
    #[serde(rename = "type")]
    pub field_type: String,
    /// `NULLABLE`, `REQUIRED` or `REPEATED`.
    #[serde(default)]
    pub mode: Option<String>,
    /// Column description.
    #[serde(default)]
    pub description: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
struct Fields {
    #[serde(default)]
    fields: Vec<FieldSchema>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct JobReference {
    #[serde(default)]
    job_id: Option<String>,
    #[serde(default)]
    location: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct QueryPage {
    #[serde(default)]
    job_reference: Option<JobReference>,
    #[serde(default)]
    job_complete: Option<bool>,
    #[serde(default)]
    schema: Option<Fields>,
    #[serde(default)]
    rows: Vec<Row>,
    #[serde(default)]
    page_token: Option<String>,
    #[serde(default)]
    total_bytes_processed: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Row {
    f: Vec<Cell>,
}

#[derive(Debug, Deserialize)]
struct Cell {
    v: Value,
}

/// What `tables.get` says about a table.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TableInfo {
    /// `TABLE`, `VIEW`, `MATERIALIZED_VIEW`, `EXTERNAL`, …
    #[serde(rename = "type", default)]
    pub table_type: Option<String>,
    /// Columns.
    #[serde(default)]
    schema: Option<Fields>,
    /// Row count (tables only).
    #[serde(default)]
    pub num_rows: Option<String>,
    /// Active logical bytes.
    #[serde(default)]
    pub num_active_logical_bytes: Option<String>,
    /// Long-term logical bytes.
    #[serde(default)]
    pub num_long_term_logical_bytes: Option<String>,
    /// Partitioning.
    #[serde(default)]
    pub time_partitioning: Option<Value>,
    /// Clustering.
    #[serde(default)]
    pub clustering: Option<Value>,
}

impl TableInfo {
    /// The table's columns.
    pub fn fields(&self) -> &[FieldSchema] {
        self.schema.as_ref().map_or(&[], |s| &s.fields)
    }
}

/// A finished query: its columns and rows.
#[derive(Debug)]
pub struct QueryResult {
    /// Columns.
    pub fields: Vec<FieldSchema>,
    /// Rows as Arrow.
    pub batch: RecordBatch,
}

/// A running query's result, read one page at a time ([`Client::pages`]).
#[derive(Debug)]
pub struct Pages {
    client: Client,
    origin: SqlOrigin,
    fields: Option<Vec<FieldSchema>>,
    /// Job id and location, for `getQueryResults`.
    job: Option<(String, Option<String>)>,
    /// The `jobs.query` answer, not yet handed out.
    pending: Option<QueryPage>,
    page_token: Option<String>,
    done: bool,
    remaining: u64,
}

impl Pages {
    /// The result's columns, once the warehouse has said (after the first batch or the end).
    pub fn fields(&self) -> Option<&[FieldSchema]> {
        self.fields.as_deref()
    }

    /// The next non-empty batch of rows; `None` at the end of the result.
    pub async fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        loop {
            if self.done || self.remaining == 0 {
                return Ok(None);
            }
            let mut page = match self.pending.take() {
                Some(page) => page,
                None => self.fetch().await?,
            };
            if self.fields.is_none() {
                self.fields = page.schema.take().map(|s| s.fields);
            }
            let complete = page.job_complete.unwrap_or(true);
            self.page_token = page.page_token.take();
            // A finished job without a next page, or one we cannot page (no job id), ends here.
            if (complete && self.page_token.is_none()) || self.job.is_none() {
                self.done = true;
            }
            if page.rows.is_empty() {
                continue;
            }
            page.rows
                .truncate(usize::try_from(self.remaining).unwrap_or(usize::MAX));
            self.remaining -= page.rows.len() as u64;
            let fields = self.fields.as_deref().unwrap_or_default();
            return to_batch(fields, &page.rows).map(Some);
        }
    }

    /// `getQueryResults` for the next page (or for completion of a running job).
    async fn fetch(&mut self) -> Result<QueryPage> {
        let (job_id, location) = self
            .job
            .clone()
            .expect("fetch only runs for a job with an id");
        let c = &self.client;
        let mut req = c
            .http()
            .get(format!(
                "{}/projects/{}/queries/{job_id}",
                c.base(),
                c.job_project()
            ))
            .query(&[
                ("maxResults", PAGE_ROWS.min(self.remaining).to_string()),
                ("timeoutMs", "60000".into()),
                ("formatOptions.useInt64Timestamp", "true".into()),
            ]);
        if let Some(token) = &self.page_token {
            req = req.query(&[("pageToken", token)]);
        }
        if let Some(location) = location.as_ref().or(c.config.location.as_ref()) {
            req = req.query(&[("location", location)]);
        }
        parse(c.send(req, self.origin).await?)
    }
}

/// Whose SQL a call runs: it decides whether a 400 from the warehouse is the user's to fix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SqlOrigin {
    /// Built by the server (sample, schema, metadata): a 400 is an upstream failure.
    Server,
    /// Derived from user input (query, scan, estimate): a 400 is the user's to fix.
    User,
}

/// The REST client.
#[derive(Debug, Clone)]
pub struct Client {
    /// Built on the first call: every server makes this driver, most never call a warehouse,
    /// and building an HTTP client sets up TLS, whose code and memory an idle server kept.
    http: Arc<OnceLock<reqwest::Client>>,
    config: Arc<WarehouseConfig>,
    credentials: Arc<Credentials>,
}

impl Client {
    /// A client for a configured warehouse.
    pub fn new(config: Arc<WarehouseConfig>) -> Self {
        let credentials = Arc::new(Credentials::from_config(&config));
        Self {
            http: Arc::default(),
            config,
            credentials,
        }
    }

    /// The HTTP client, shared by every clone.
    fn http(&self) -> &reqwest::Client {
        self.http.get_or_init(|| {
            reqwest::Client::builder()
                .timeout(HTTP_TIMEOUT)
                .build()
                .expect("a TLS-less reqwest client builds")
        })
    }

    fn base(&self) -> String {
        format!("{}/bigquery/v2", self.config.endpoint.trim_end_matches('/'))
    }

    fn job_project(&self) -> &str {
        self.config.job_project().unwrap_or_default()
    }

    // One span per call to the warehouse: in a trace, the time the source took.
    async fn send(&self, rb: reqwest::RequestBuilder, origin: SqlOrigin) -> Result<Value> {
        async {
            let rb = match self.credentials.bearer(self.http()).await? {
                Some(token) => rb.bearer_auth(token),
                None => rb,
            };
            let resp = rb.send().await.map_err(|e| {
                let kind = if e.is_timeout() {
                    ErrorKind::Timeout
                } else {
                    ErrorKind::Upstream
                };
                DriverError::new(kind, format!("The warehouse could not be reached: {e}"))
                    .with_code("warehouse_upstream_error")
            })?;
            let status = resp.status();
            let body: Value = resp.json().await.unwrap_or(Value::Null);
            if status.is_success() {
                return Ok(body);
            }
            Err(self.classify(status.as_u16(), &body, origin))
        }
        .in_span(svc_trace::Span::child_of_kind(
            "driver.warehouse.call",
            svc_trace::Kind::Client,
        ))
        .await
    }

    /// Maps a warehouse error response to a typed error (first match wins).
    fn classify(&self, status: u16, body: &Value, origin: SqlOrigin) -> DriverError {
        let message = body["error"]["message"]
            .as_str()
            .unwrap_or("no message")
            .to_owned();
        let projects = json!({
            "billing_project": self.config.job_project(),
            "data_project": self.config.data_project(),
        });
        let lower = message.to_ascii_lowercase();
        if status == 401 {
            return DriverError::new(
                ErrorKind::AuthFailed,
                format!("The warehouse refused our credentials: {message}"),
            )
            .with_code("auth_failed")
            .with_details(json!({"hint": "check access_token or credentials_file under [data_source.warehouse]"}));
        }
        if status == 403 {
            if lower.contains("serviceusage") {
                let mut details = projects;
                details["hint"] = json!("Set billing_project under [data_source.warehouse] to a project where the service account has serviceusage.services.use, or grant it that role on the data project.");
                return DriverError::new(
                    ErrorKind::CrossProjectForbidden,
                    format!("The warehouse refused a cross-project job: {message}"),
                )
                .with_code("cross_project_forbidden")
                .with_details(details);
            }
            return DriverError::new(
                ErrorKind::SourceForbidden,
                format!("The warehouse refused access: {message}"),
            )
            .with_code("warehouse_forbidden")
            .with_details(projects);
        }
        if lower.contains("response too large") {
            let mut details = projects;
            details["original"] = json!(message);
            return DriverError::new(
                ErrorKind::ResponseTooLarge,
                "The warehouse refused to return the result inline; the query exceeded its response size limit. Narrow the WHERE clause, aggregate further, select fewer columns, or query a materialized table.",
            )
            .with_code("warehouse_response_too_large")
            .with_details(details);
        }
        if status == 400 && origin == SqlOrigin::User {
            return DriverError::new(
                ErrorKind::BadRequest,
                format!("The warehouse rejected the query: {message}"),
            )
            .with_code("warehouse_bad_request");
        }
        DriverError::new(
            ErrorKind::Upstream,
            format!("The warehouse failed (HTTP {status}): {message}"),
        )
        .with_code("warehouse_upstream_error")
        .with_details(json!({"status": status}))
    }

    /// `jobs.query` with standard SQL in the configured location.
    async fn post_query(&self, mut body: Value, origin: SqlOrigin) -> Result<QueryPage> {
        body["useLegacySql"] = json!(false);
        if let Some(location) = &self.config.location {
            body["location"] = json!(location);
        }
        let url = format!("{}/projects/{}/queries", self.base(), self.job_project());
        parse(self.send(self.http().post(url).json(&body), origin).await?)
    }

    /// Starts `sql` and returns a reader over its result pages, at most `max_rows` rows.
    /// Rows are fetched only as the reader asks, so a large result never sits in memory.
    pub async fn pages(&self, sql: &str, max_rows: u64, origin: SqlOrigin) -> Result<Pages> {
        let first = self
            .post_query(
                json!({
                    "query": sql,
                    "maxResults": PAGE_ROWS.min(max_rows.max(1)),
                    "timeoutMs": 60_000,
                    "formatOptions": {"useInt64Timestamp": true},
                }),
                origin,
            )
            .await?;
        let job = first
            .job_reference
            .as_ref()
            .and_then(|j| Some((j.job_id.clone()?, j.location.clone())));
        Ok(Pages {
            client: self.clone(),
            origin,
            fields: None,
            job,
            pending: Some(first),
            page_token: None,
            done: false,
            remaining: max_rows,
        })
    }

    /// Runs `sql` and reads every page, at most `max_rows` rows, into one batch.
    pub async fn query(&self, sql: &str, max_rows: u64, origin: SqlOrigin) -> Result<QueryResult> {
        let mut pages = self.pages(sql, max_rows, origin).await?;
        let mut batches = Vec::new();
        while let Some(batch) = pages.next_batch().await? {
            batches.push(batch);
        }
        let fields = pages.fields.unwrap_or_default();
        let batch = concat_batches(&arrow_schema(&fields), &batches)
            .map_err(|e| DriverError::internal(format!("joining warehouse pages: {e}")))?;
        Ok(QueryResult { fields, batch })
    }

    /// Bytes a query would process (a dry run).
    pub async fn dry_run(&self, sql: &str, origin: SqlOrigin) -> Result<u64> {
        let page = self
            .post_query(json!({"query": sql, "dryRun": true}), origin)
            .await?;
        Ok(page
            .total_bytes_processed
            .and_then(|b| b.parse().ok())
            .unwrap_or(0))
    }

    /// `tables.get`.
    pub async fn table(&self, project: &str, dataset: &str, table: &str) -> Result<TableInfo> {
        let url = format!(
            "{}/projects/{project}/datasets/{dataset}/tables/{table}",
            self.base()
        );
        parse(self.send(self.http().get(url), SqlOrigin::Server).await?)
    }
}

fn parse<T: serde::de::DeserializeOwned>(v: Value) -> Result<T> {
    serde_json::from_value(v).map_err(|e| {
        DriverError::new(
            ErrorKind::Upstream,
            format!("The warehouse answered something unexpected: {e}"),
        )
        .with_code("warehouse_upstream_error")
    })
}

/// The Arrow type a warehouse column reads as. Nested and repeated values arrive as JSON text.
pub fn arrow_type(f: &FieldSchema) -> DataType {
    if f.mode.as_deref() == Some("REPEATED") {
        return DataType::Utf8;
    }
    match f.field_type.as_str() {
        "INTEGER" | "INT64" => DataType::Int64,
        "FLOAT" | "FLOAT64" => DataType::Float64,
        "BOOLEAN" | "BOOL" => DataType::Boolean,
        "DATE" => DataType::Date32,
        "TIMESTAMP" => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
        _ => DataType::Utf8,
    }
}

/// The Arrow schema of warehouse columns.
pub fn arrow_schema(fields: &[FieldSchema]) -> SchemaRef {
    Arc::new(Schema::new(
        fields
            .iter()
            .map(|f| {
                Field::new(
                    &f.name,
                    arrow_type(f),
                    f.mode.as_deref() != Some("REQUIRED"),
                )
            })
            .collect::<Vec<_>>(),
    ))
}

fn to_batch(fields: &[FieldSchema], rows: &[Row]) -> Result<RecordBatch> {
    let schema = arrow_schema(fields);
    let columns = fields
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let texts: Vec<Option<String>> = rows
                .iter()
                .map(|r| match r.f.get(i).map(|c| &c.v) {
                    None | Some(Value::Null) => None,
                    Some(Value::String(s)) => Some(s.clone()),
                    Some(other) => Some(other.to_string()),
                })
                .collect();
            column(f, texts)
        })
        .collect::<Result<Vec<_>>>()?;
    RecordBatch::try_new_with_options(
        schema,
        columns,
        &svc_plugin_api::arrow::array::RecordBatchOptions::new().with_row_count(Some(rows.len())),
    )
    .map_err(|e| DriverError::internal(format!("building warehouse rows: {e}")))
}

fn column(f: &FieldSchema, texts: Vec<Option<String>>) -> Result<ArrayRef> {
    let ty = arrow_type(f);
    if let DataType::Timestamp(..) = ty {
        // Microseconds (useInt64Timestamp), or seconds as a float from older answers.
        let micros: TimestampMicrosecondArray = texts
            .iter()
            .map(|t| {
                t.as_deref().and_then(|s| {
                    s.parse::<i64>().ok().or_else(|| {
                        s.parse::<f64>()
                            .ok()
                            .map(|secs| (secs * 1e6).round() as i64)
                    })
                })
            })
            .collect();
        return Ok(Arc::new(micros.with_timezone("UTC")));
    }
    let strings: ArrayRef = Arc::new(StringArray::from(texts));
    if ty == DataType::Utf8 {
        return Ok(strings);
    }
    cast(&strings, &ty).map_err(|e| {
        DriverError::new(
            ErrorKind::Upstream,
            format!(
                "column '{}' holds values that are not {}: {e}",
                f.name, f.field_type
            ),
        )
        .with_code("warehouse_upstream_error")
    })
}
