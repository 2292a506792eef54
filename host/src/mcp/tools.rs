//! The tools and resources an agent sees, each a thin call into the code path the HTTP API
//! uses for the same operation (so the same audit action: `catalog.list`, `catalog.schema`,
//! `catalog.sample`, `query.*`, `scan`, `scan.estimate`; plus `memory.bundle`), written with
//! `client_kind = mcp`. A call refused before it reaches an operation (an unknown tool, a bad
//! argument) is audited as `mcp.call`.
//!
//! A user's mistake is a tool result with `isError: true` and svc's error kind, message and
//! a hint for the model — never a protocol error, which clients hide from the model.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use poem_openapi::types::ToJSON as _;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, Implementation, JsonObject,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams,
    ReadResourceResponse, ReadResourceResult, Resource, ResourceContents, ServerCapabilities,
    ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{json, Value};
use svc_auth::Caller;
use svc_core::{Error, ErrorKind};
use svc_query::encode::rows_as_arrays;
use svc_query::engine::QueryPlan;
use svc_query::scan::ScanAsk;
use svc_store::audit::Event;
use svc_trace::Instrument as _;

use super::args::{text_result, tool_error, Args, BAD_ARGUMENT};
use super::results::{self, RowFormat};
use super::specs::{catalog, ToolName};
use crate::api::discovery::DiscoveryApi;
use crate::api::{query, scan, ApiError};
use crate::state::AppState;

/// Rows `describe_table` shows of a table.
const DESCRIBE_SAMPLE_ROWS: usize = 5;
/// The widest token budget `memory_bundle` accepts (as `GET /api/memory/bundle`).
pub(super) const MAX_BUNDLE_TOKENS: u64 = 200_000;

/// The MCP server of one request: the tools over the shared state.
#[derive(Clone)]
pub struct Tools {
    state: Arc<AppState>,
}

impl Tools {
    pub(super) fn new(state: Arc<AppState>) -> Self {
        Self { state }
    }

    fn discovery(&self) -> DiscoveryApi {
        DiscoveryApi {
            state: self.state.clone(),
        }
    }
}

/// The caller the endpoint authenticated, from the HTTP request rmcp hands the tool.
fn caller_of(context: &RequestContext<RoleServer>) -> Result<Caller, ErrorData> {
    context
        .extensions
        .get::<poem::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Caller>())
        .cloned()
        .ok_or_else(|| ErrorData::internal_error("the request carries no caller", None))
}

/// The trace span current where the endpoint forwarded the call: rmcp may run the tool on
/// another task, so the context travels with the request rather than with the thread.
fn trace_of(context: &RequestContext<RoleServer>) -> Option<svc_trace::Context> {
    context
        .extensions
        .get::<poem::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<svc_trace::Context>())
        .copied()
}

/// Which rows of a statement one result holds.
struct Window<'a> {
    /// The statement.
    sql: &'a str,
    /// Where a previous result stopped (none: from the first row).
    cursor: Option<&'a str>,
    /// Rows wanted at most.
    rows: usize,
    /// The row the request stops at: a scan's own limit; `usize::MAX` for a query.
    end: usize,
    /// How the rows are written.
    format: RowFormat,
}

/// A page of rows read from a stream, ready for the model.
struct Page {
    result: CallToolResult,
    offset: usize,
    rows: usize,
    truncated: bool,
}

impl Tools {
    /// Runs a window of a statement (under the caller's quota), renders what fits the byte
    /// budget, and says whether more exist, with the cursor that resumes after the last row
    /// shown.
    async fn run_page(
        &self,
        caller: &Caller,
        window: Window<'_>,
        plan: &mut Option<QueryPlan>,
    ) -> svc_core::Result<Page> {
        let Window {
            sql,
            cursor,
            rows,
            end,
            format,
        } = window;
        let offset = match cursor {
            Some(c) => results::resume_at(&self.state.auth, caller, sql, c)?,
            None => 0,
        };
        // A page never reads past the request's own end.
        let rows = rows.min(end.saturating_sub(offset));
        let permit = self.state.quotas.acquire(&caller.user.id)?;
        let mut stream = self
            .state
            .engine
            .run_window(caller, sql, offset, rows, plan, Some(&permit))
            .await?;
        let columns = stream.column_names();
        let batches = stream.collect().await?;
        let rows = rows_as_arrays(&batches);
        let limits = self.state.config.mcp;
        let shown = results::render(&columns, &rows, format, limits.max_bytes);
        let more_rows = stream.truncated() == Some(true);
        let truncated = (more_rows || shown.cut_for_bytes) && offset + shown.rows < end;
        // A first row larger than the whole budget cannot be paged past: say so instead.
        let stuck = truncated && shown.rows == 0;
        let next_cursor = (truncated && !stuck)
            .then(|| results::cursor(&self.state.auth, caller, sql, offset + shown.rows));
        let mut text = shown.text;
        let note = match (&next_cursor, stuck) {
            (_, true) => format!(
                "[one row is larger than this server's {} byte result budget: select fewer or narrower columns]",
                limits.max_bytes
            ),
            (Some(c), _) => format!(
                "[{} rows shown from row {offset}; more exist — call again with cursor \"{c}\", or aggregate/filter in SQL]",
                shown.rows
            ),
            (None, _) => format!("[{} rows; complete]", shown.rows),
        };
        if !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&note);
        let mut result = text_result(text);
        result.structured_content = Some(json!({
            "columns": columns,
            "returned_rows": shown.rows,
            "offset": offset,
            "truncated": truncated,
            "next_cursor": next_cursor,
        }));
        Ok(Page {
            result,
            offset,
            rows: shown.rows,
            truncated,
        })
    }

    async fn list_tables(
        &self,
        caller: &Caller,
        args: Args<'_>,
    ) -> svc_core::Result<CallToolResult> {
        let needle = args.text("q")?.unwrap_or_default().to_lowercase();
        let bucket = args.text("bucket")?;
        let rows = self
            .discovery()
            .catalog_for(caller)
            .await
            .map_err(|e| e.0)?;
        let registry = self.state.access.registry().await?;
        let buckets: BTreeMap<&str, Option<&str>> = registry
            .rows()
            .iter()
            .map(|r| (r.id.as_str(), r.bucket.as_deref()))
            .collect();
        let mut lines = vec!["id,bucket,mode,size,freshness,description".to_owned()];
        let mut count = 0;
        for row in &rows.rows {
            let row_bucket = buckets.get(row.id.as_str()).copied().flatten();
            if bucket.as_deref().is_some_and(|b| Some(b) != row_bucket) {
                continue;
            }
            let haystack = format!("{} {}", row.id, row.description).to_lowercase();
            if !needle.split_whitespace().all(|w| haystack.contains(w)) {
                continue;
            }
            let size = match (row.rows, row.rough_size_hint.as_deref()) {
                (Some(n), _) => format!("{n} rows"),
                (None, Some(h)) => h.to_owned(),
                (None, None) => String::new(),
            };
            let cells = [
                row.id.as_str(),
                row_bucket.unwrap_or(""),
                row.query_mode.as_str(),
                size.as_str(),
                row.metadata_freshness.as_str(),
                row.description.as_str(),
            ];
            let line: Vec<String> = cells.iter().map(|c| results::csv_cell(c)).collect();
            lines.push(line.join(","));
            count += 1;
        }
        lines.push(format!("[{count} tables]"));
        Ok(text_result(lines.join("\n")))
    }

    async fn describe_table(
        &self,
        caller: &Caller,
        args: Args<'_>,
    ) -> svc_core::Result<CallToolResult> {
        let table_id = args.required_text("table_id")?;
        let discovery = self.discovery();
        // The audited read first: a missing or forbidden table is audited there.
        let schema = discovery
            .schema_for(caller, &table_id)
            .await
            .map_err(|e| e.0)?;
        let entry = discovery.catalog_entry(caller, &table_id).await?;
        let sample = discovery
            .sample_for(caller, &table_id, DESCRIBE_SAMPLE_ROWS)
            .await
            .map_err(|e| e.0)?;
        let sample: Value = serde_json::from_slice(sample.body.bytes()).unwrap_or_default();
        let body = json!({
            "table_id": entry.id,
            "description": entry.description,
            "mode": entry.query_mode,
            "sql_flavor": entry.sql_flavor,
            "size_hint": entry.rough_size_hint,
            "rows": entry.rows,
            "freshness": entry.metadata_freshness,
            "columns": schema.columns.to_json(),
            "partition_by": schema.partition_by,
            "where_examples": entry.where_examples,
            "sample_rows": sample["rows"],
        });
        let mut result = text_result(serde_json::to_string_pretty(&body).unwrap_or_default());
        result.structured_content = Some(body);
        Ok(result)
    }

    async fn query(&self, caller: &Caller, args: Args<'_>) -> svc_core::Result<CallToolResult> {
        let sql = args.required_text("sql")?;
        query::check_sql_size(&sql)?;
        let format = args.format()?;
        let rows = self.rows_wanted(&args)?;
        let cursor = args.text("cursor")?;
        let started = Instant::now();
        let mut plan = None;
        let window = Window {
            sql: &sql,
            cursor: cursor.as_deref(),
            rows,
            end: usize::MAX,
            format,
        };
        let page = self.run_page(caller, window, &mut plan).await;
        let event = query::query_event(&sql, plan.as_ref(), caller.is_admin)
            .param("format", "mcp")
            .param("offset", page.as_ref().map_or(0, |p| p.offset));
        self.audit_page(caller, event, started, &page).await;
        page.map(|p| p.result)
    }

    /// Rows one page may hold: what the model asked, within the server's cap.
    fn rows_wanted(&self, args: &Args<'_>) -> svc_core::Result<usize> {
        let cap = self.state.config.mcp.max_rows;
        Ok(args
            .count("max_rows")?
            .map_or(cap, |n| usize::try_from(n).unwrap_or(usize::MAX).min(cap)))
    }

    async fn audit_page(
        &self,
        caller: &Caller,
        event: Event,
        started: Instant,
        page: &svc_core::Result<Page>,
    ) {
        let page = page.as_ref().map_err(|e| ApiError(e.clone()));
        self.state
            .audit
            .write_outcome(&caller.actor, event, started, &page, |e, p| {
                e.param("rows_returned", p.rows)
                    .param("truncated", p.truncated)
            })
            .await;
    }

    async fn scan(
        &self,
        caller: &Caller,
        args: Args<'_>,
        rows_wanted: bool,
    ) -> svc_core::Result<CallToolResult> {
        let table_id = args.required_text("table_id")?;
        let select = args.texts("select")?;
        let predicate = args.text("where")?;
        let order_by = args.texts("order_by")?;
        let limit = args.count("limit")?;
        let ask = ScanAsk {
            table_id: &table_id,
            select: select.as_deref(),
            predicate: predicate.as_deref(),
            order_by: order_by.as_deref(),
            limit,
        };
        let started = Instant::now();
        let event = Event::new(if rows_wanted { "scan" } else { "scan.estimate" })
            .resource(format!("table:{table_id}"))
            .param("select", select.clone())
            .param("where_present", predicate.is_some())
            .param("limit", limit);
        let max_rows = self.state.config.query.scan_max_rows;
        if !rows_wanted {
            let estimate = async {
                let p = scan::prepare(&self.state, caller, ask, max_rows).await?;
                scan::estimate(&self.state, &p).await
            }
            .await;
            self.state
                .audit
                .write_outcome(&caller.actor, event, started, &estimate, |e, r| {
                    e.param("bytes_estimated", r.estimated_bytes)
                })
                .await;
            let body = estimate.map_err(|e| e.0)?.to_json().unwrap_or_default();
            let mut result = text_result(body.to_string());
            result.structured_content = Some(body);
            return Ok(result);
        }
        let format = args.format()?;
        let page_rows = self.rows_wanted(&args)?;
        let cursor = args.text("cursor")?;
        let page = async {
            let p = scan::prepare(&self.state, caller, ask, max_rows)
                .await
                .map_err(|e| e.0)?;
            scan::guard(&self.state, &p).await?;
            let window = Window {
                sql: &p.scan.sql(),
                cursor: cursor.as_deref(),
                rows: page_rows,
                end: p.scan.limit,
                format,
            };
            self.run_page(caller, window, &mut None).await
        }
        .await;
        self.audit_page(caller, event.param("format", "mcp"), started, &page)
            .await;
        page.map(|p| p.result)
    }

    async fn memory_bundle(
        &self,
        caller: &Caller,
        args: Args<'_>,
    ) -> svc_core::Result<CallToolResult> {
        let budget = args
            .count("budget_tokens")?
            .unwrap_or(svc_memory::bundle::DEFAULT_BUDGET_TOKENS as u64);
        if budget > MAX_BUNDLE_TOKENS {
            return Err(args.wrong("budget_tokens", &format!("at most {MAX_BUNDLE_TOKENS}")));
        }
        let started = Instant::now();
        let bundle = self.state.memory.bundle(caller, budget as usize).await;
        let event = Event::new("memory.bundle")
            .resource("memory")
            .param("budget_tokens", budget);
        let audited = bundle.as_ref().map_err(|e| ApiError(e.clone()));
        self.state
            .audit
            .write_outcome(&caller.actor, event, started, &audited, |e, b| {
                e.param("items", b.mandatory.len() + b.approved.len())
            })
            .await;
        let body = serde_json::to_value(bundle?).unwrap_or_default();
        let mut result = text_result(serde_json::to_string_pretty(&body).unwrap_or_default());
        result.structured_content = Some(body);
        Ok(result)
    }

    /// Runs one tool call and counts it (an `isError` result counts as a tool error).
    async fn call(&self, caller: &Caller, request: CallToolRequestParams) -> CallToolResult {
        let tool = ToolName::parse(&request.name);
        let result = match tool {
            Some(tool) => self.dispatch(caller, tool, request.arguments).await,
            None => {
                let e = Error::not_found(format!(
                    "There is no tool '{}'; the tools are {}",
                    request.name,
                    ToolName::ALL.map(ToolName::as_str).join(", ")
                ));
                self.refused(caller, &request.name, &e).await
            }
        };
        svc_metrics::mcp::tool_call(
            tool.map_or("unknown", ToolName::as_str),
            result.is_error == Some(true),
        );
        result
    }

    async fn dispatch(
        &self,
        caller: &Caller,
        tool: ToolName,
        arguments: Option<JsonObject>,
    ) -> CallToolResult {
        let name = tool.as_str();
        let args = match Args::new(name, arguments, tool.arguments()) {
            Ok(args) => args,
            Err(e) => return self.refused(caller, name, &e).await,
        };
        let result = match tool {
            ToolName::ListTables => self.list_tables(caller, args).await,
            ToolName::DescribeTable => self.describe_table(caller, args).await,
            ToolName::Query => self.query(caller, args).await,
            ToolName::ScanEstimate => self.scan(caller, args, false).await,
            ToolName::Scan => self.scan(caller, args, true).await,
            ToolName::MemoryBundle => self.memory_bundle(caller, args).await,
        };
        match result {
            Ok(r) => r,
            // Argument errors surface before an operation, which audits everything else.
            Err(e) if e.code() == Some(BAD_ARGUMENT) => self.refused(caller, name, &e).await,
            Err(e) => tool_error(&e),
        }
    }

    /// Audits a call refused before it reached an operation, and reports it.
    async fn refused(&self, caller: &Caller, tool: &str, e: &Error) -> CallToolResult {
        let event = Event::new("mcp.call")
            .resource(format!("tool:{tool}"))
            .failed(e.status(), &e.to_string());
        self.state.audit.write(&caller.actor, event).await;
        tool_error(e)
    }
}

impl ServerHandler for Tools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_resources()
                .build(),
        )
        .with_server_info(Implementation::new("svc", env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "svc serves the organisation's data tables. Start with list_tables, then \
             describe_table for columns and examples, then query with SQL (results are bounded; \
             aggregate in SQL rather than paging through rows). memory_bundle holds the \
             organisation's rules and definitions: read it before interpreting figures.",
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(catalog()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let caller = caller_of(&context)?;
        Ok(self
            .call(&caller, request)
            .in_context(trace_of(&context))
            .await
            .into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let caller = caller_of(&context)?;
        let rows = self
            .discovery()
            .catalog_for(&caller)
            .await
            .map_err(|e| ErrorData::internal_error(e.0.to_string(), None))?;
        let resources = rows
            .rows
            .iter()
            .map(|row| {
                let mut r = Resource::new(format!("svc://table/{}", row.id), row.id.clone())
                    .with_mime_type("application/json");
                if !row.description.is_empty() {
                    r = r.with_description(row.description.clone());
                }
                r
            })
            .collect();
        Ok(ListResourcesResult::with_all_items(resources))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let caller = caller_of(&context)?;
        let Some(table_id) = request.uri.strip_prefix("svc://table/") else {
            return Err(ErrorData::resource_not_found(
                format!(
                    "no resource '{}': svc's resources are svc://table/<id>",
                    request.uri
                ),
                None,
            ));
        };
        let schema = self
            .discovery()
            .schema_for(&caller, table_id)
            .await
            .map_err(|e| match e.0.kind() {
                ErrorKind::NotFound | ErrorKind::Forbidden => {
                    ErrorData::resource_not_found(e.0.to_string(), None)
                }
                _ => ErrorData::internal_error(e.0.to_string(), None),
            })?;
        let text = schema.to_json().unwrap_or_default().to_string();
        Ok(ReadResourceResult::new(vec![
            ResourceContents::text(text, request.uri).with_mime_type("application/json")
        ])
        .into())
    }
}
