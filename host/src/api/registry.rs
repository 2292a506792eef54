//! `/api/admin/register-table` and `/api/admin/registry` — the table registry.

use std::sync::Arc;

use poem_openapi::param::Path;
use poem_openapi::payload::Json;
use poem_openapi::types::MaybeUndefined;
use poem_openapi::{ApiResponse, Object, OpenApi};
use svc_catalog::registry::{Registered, Registry};
use svc_store::registry::RegistryRow;

use super::types::{QueryModeParam, Str};
use super::{AdminAuth, ApiResult, NoContent, Tag};
use crate::state::AppState;

pub struct RegistryApi {
    pub state: Arc<AppState>,
}

/// A table to register. When the id exists the row is updated: a field left out keeps its
/// stored value and `null` clears it, so re-registering never silently resets a field (a
/// remote table stays remote unless `query_mode` says otherwise).
#[derive(Object)]
struct RegisterTable {
    /// Table id: letters, digits, `_`, `.`, `-`; at most 128 characters, not only dots.
    id: Str,
    /// Display name (defaults to the id).
    name: MaybeUndefined<Str>,
    /// Source kind; one of the server's drivers (`local`, `warehouse`, `integration`,
    /// `ticketing`). A new table: `local`; an existing one keeps its kind.
    source_type: Option<Str>,
    /// Grouping label; the dataset for warehouse tables.
    bucket: MaybeUndefined<Str>,
    /// Name at the source (defaults to the id).
    source_table: MaybeUndefined<Str>,
    // Enum-typed: documented by its enum, not here (see `api::openapi_json`).
    query_mode: Option<QueryModeParam>,
    /// SQL run at the source; only with `materialized`.
    source_query: MaybeUndefined<Str>,
    /// Columns identifying a row (comma-separated): an incremental sync replaces the copy's
    /// row with the same key.
    primary_key: MaybeUndefined<Str>,
    /// The column whose growth marks new and changed rows (integer, numeric, date or
    /// timestamp): a sync then fetches only rows past the copy's highest value.
    cursor_column: MaybeUndefined<Str>,
    /// `every Nm`, `every Nh` or `daily HH:MM[,HH:MM...]` (UTC).
    sync_schedule: MaybeUndefined<Str>,
    /// Shown in the catalog.
    description: MaybeUndefined<Str>,
}

/// Partial change; absent fields stay, `null` clears.
#[derive(Object)]
struct UpdateTable {
    /// Display name.
    name: Option<Str>,
    /// Source kind.
    source_type: Option<Str>,
    /// Grouping label.
    bucket: MaybeUndefined<Str>,
    /// Name at the source.
    source_table: MaybeUndefined<Str>,
    // Enum-typed: documented by its enum, not here (see `api::openapi_json`).
    query_mode: Option<QueryModeParam>,
    /// Materialization SQL.
    source_query: MaybeUndefined<Str>,
    /// Primary key columns (comma-separated).
    primary_key: MaybeUndefined<Str>,
    /// Cursor column for incremental syncs.
    cursor_column: MaybeUndefined<Str>,
    /// Sync schedule.
    sync_schedule: MaybeUndefined<Str>,
    /// Description.
    description: MaybeUndefined<Str>,
}

/// A registered table.
#[derive(Object)]
struct TableInfo {
    /// Table id.
    id: String,
    /// Display name.
    name: String,
    /// Source kind.
    source_type: String,
    /// Grouping label.
    bucket: Option<String>,
    /// Name at the source.
    source_table: Option<String>,
    // Enum-typed: documented by its enum, not here (see `api::openapi_json`).
    query_mode: QueryModeParam,
    /// Materialization SQL.
    source_query: Option<String>,
    /// Primary key columns (comma-separated).
    primary_key: Option<String>,
    /// Cursor column for incremental syncs.
    cursor_column: Option<String>,
    /// Sync schedule.
    sync_schedule: Option<String>,
    /// Description.
    description: Option<String>,
    /// First registrant.
    registered_by: Option<String>,
    /// Registration time.
    registered_at: Option<String>,
    /// Last change.
    updated_at: Option<String>,
    /// Whether the table's data file exists on this server (null for a table whose data
    /// stays at its source).
    has_data: Option<bool>,
    /// Rows in the data file, when it exists and is readable.
    rows: Option<u64>,
    /// Size of the data file, when it exists and is readable.
    bytes: Option<u64>,
    /// Why a present data file cannot be read.
    data_error: Option<String>,
}

impl TableInfo {
    /// The row with what its data file holds.
    fn of(registry: &Registry, r: RegistryRow) -> Self {
        let facts = registry.data_facts(&r);
        let mut info = Self::from(r);
        match facts {
            Ok(None) => {}
            Ok(Some(None)) => info.has_data = Some(false),
            Ok(Some(Some(f))) => {
                info.has_data = Some(true);
                info.rows = Some(f.rows);
                info.bytes = Some(f.bytes);
            }
            Err(e) => {
                info.has_data = Some(true);
                info.data_error = Some(e.to_string());
            }
        }
        info
    }
}

impl From<RegistryRow> for TableInfo {
    fn from(r: RegistryRow) -> Self {
        Self {
            id: r.id,
            name: r.name,
            source_type: r.source_type,
            bucket: r.bucket,
            source_table: r.source_table,
            query_mode: r.query_mode.into(),
            source_query: r.source_query,
            primary_key: r.primary_key,
            cursor_column: r.cursor_column,
            sync_schedule: r.sync_schedule,
            description: r.description,
            registered_by: r.registered_by,
            registered_at: r.registered_at,
            updated_at: r.updated_at,
            has_data: None,
            rows: None,
            bytes: None,
            data_error: None,
        }
    }
}

/// The registry.
#[derive(Object)]
struct TableList {
    /// Every registered table, internal ones included.
    tables: Vec<TableInfo>,
    /// Number of tables.
    count: usize,
}

#[derive(ApiResponse)]
enum RegisterResponse {
    /// Registered a new table.
    #[oai(status = 201)]
    Created(Json<TableInfo>),
    /// Updated the existing table with this id.
    #[oai(status = 200)]
    Updated(Json<TableInfo>),
}

fn clear(v: MaybeUndefined<Str>, field: &mut Option<String>) {
    match v {
        MaybeUndefined::Undefined => {}
        MaybeUndefined::Null => *field = None,
        MaybeUndefined::Value(s) => *field = Some(s.into()),
    }
}

/// What a source connection offers.
#[derive(Object)]
struct SourceTables {
    /// The connection's name.
    connection: String,
    /// How many tables.
    count: usize,
    /// The tables, by schema and name.
    tables: Vec<SourceTable>,
}

/// A table or view at a source.
#[derive(Object)]
struct SourceTable {
    /// Its schema at the source.
    schema: String,
    /// Its name.
    name: String,
    /// `table`, `view`, `materialized view` or `foreign table`.
    kind: String,
    /// The source's own row estimate, when it keeps one.
    estimated_rows: Option<u64>,
    /// Its columns.
    columns: Vec<SourceColumn>,
}

/// A column at a source.
#[derive(Object)]
struct SourceColumn {
    /// Its name.
    name: String,
    /// The Arrow type its copy would hold.
    #[oai(rename = "type")]
    data_type: String,
    /// Whether it may be NULL.
    nullable: bool,
    /// The source's type name, and how svc keeps it when not exactly.
    description: String,
}

impl From<svc_plugin_api::SourceTableInfo> for SourceTable {
    fn from(t: svc_plugin_api::SourceTableInfo) -> Self {
        Self {
            schema: t.schema,
            name: t.name,
            kind: t.kind,
            estimated_rows: t.estimated_rows,
            columns: t
                .columns
                .into_iter()
                .map(|c| SourceColumn {
                    name: c.name,
                    data_type: c.data_type,
                    nullable: c.nullable,
                    description: c.description,
                })
                .collect(),
        }
    }
}

#[OpenApi(prefix_path = "/api/admin", tag = "Tag::Registry")]
impl RegistryApi {
    /// Registers a table; an existing id is updated (upsert).
    #[oai(
        path = "/register-table",
        method = "post",
        operation_id = "register_table"
    )]
    async fn register(
        &self,
        auth: AdminAuth,
        body: Json<RegisterTable>,
    ) -> ApiResult<RegisterResponse> {
        let c = &auth.0;
        let b = body.0;
        let id: String = b.id.into();
        let (outcome, stored) = self
            .state
            .registry
            .register(&c.actor, &id, |row| {
                if let Some(st) = b.source_type {
                    row.source_type = st.into();
                }
                match b.name {
                    MaybeUndefined::Undefined => {}
                    MaybeUndefined::Value(n) if !n.trim().is_empty() => row.name = n.into(),
                    MaybeUndefined::Null | MaybeUndefined::Value(_) => row.name = row.id.clone(),
                }
                if let Some(mode) = b.query_mode {
                    row.query_mode = mode.into();
                }
                clear(b.bucket, &mut row.bucket);
                clear(b.source_table, &mut row.source_table);
                clear(b.source_query, &mut row.source_query);
                clear(b.primary_key, &mut row.primary_key);
                clear(b.cursor_column, &mut row.cursor_column);
                clear(b.sync_schedule, &mut row.sync_schedule);
                clear(b.description, &mut row.description);
            })
            .await?;
        let stored = TableInfo::of(&self.state.registry, stored);
        Ok(match outcome {
            Registered::Created => RegisterResponse::Created(Json(stored)),
            Registered::Updated => RegisterResponse::Updated(Json(stored)),
        })
    }

    /// Every registered table.
    #[oai(path = "/registry", method = "get", operation_id = "list_registry")]
    async fn list(&self, _auth: AdminAuth) -> ApiResult<Json<TableList>> {
        let tables: Vec<TableInfo> = self
            .state
            .store
            .list_tables()
            .await?
            .into_iter()
            .map(|r| TableInfo::of(&self.state.registry, r))
            .collect();
        Ok(Json(TableList {
            count: tables.len(),
            tables,
        }))
    }

    /// Changes some fields of a registered table.
    #[oai(path = "/registry/:id", method = "put", operation_id = "update_table")]
    async fn update(
        &self,
        auth: AdminAuth,
        id: Path<String>,
        body: Json<UpdateTable>,
    ) -> ApiResult<Json<TableInfo>> {
        let c = &auth.0;
        let b = body.0;
        let row = self
            .state
            .registry
            .update(&c.actor, &id, |r| {
                if let Some(n) = b.name.filter(|n| !n.trim().is_empty()) {
                    r.name = n.into();
                }
                if let Some(st) = b.source_type {
                    r.source_type = st.into();
                }
                if let Some(m) = b.query_mode {
                    r.query_mode = m.into();
                }
                clear(b.bucket, &mut r.bucket);
                clear(b.source_table, &mut r.source_table);
                clear(b.source_query, &mut r.source_query);
                clear(b.primary_key, &mut r.primary_key);
                clear(b.cursor_column, &mut r.cursor_column);
                clear(b.sync_schedule, &mut r.sync_schedule);
                clear(b.description, &mut r.description);
            })
            .await?;
        Ok(Json(TableInfo::of(&self.state.registry, row)))
    }

    /// The tables and views a source connection offers (admin): for each, its columns with
    /// the Arrow type its copy would hold (`type`) and the source's own type name
    /// (`description`). Today the `integration` source's connections
    /// (`[data_source.integration.<name>]`).
    #[oai(
        path = "/integration/:name/tables",
        method = "get",
        operation_id = "discover_integration_tables"
    )]
    async fn discover(
        &self,
        _auth: AdminAuth,
        name: Path<String>,
    ) -> ApiResult<Json<SourceTables>> {
        let driver =
            self.state.drivers.get("integration").ok_or_else(|| {
                svc_core::Error::not_found("this server has no integration driver")
            })?;
        let tables = driver
            .source_tables(&name)
            .await
            .map_err(|e| match e.kind {
                svc_plugin_api::ErrorKind::NotConfigured => svc_core::Error::not_found(e.message),
                _ => svc_core::Error::from(e),
            })?;
        Ok(Json(SourceTables {
            connection: name.0,
            count: tables.len(),
            tables: tables.into_iter().map(Into::into).collect(),
        }))
    }

    /// Removes a table from the registry.
    #[oai(
        path = "/registry/:id",
        method = "delete",
        operation_id = "unregister_table"
    )]
    async fn delete(&self, auth: AdminAuth, id: Path<String>) -> ApiResult<NoContent> {
        let c = &auth.0;
        self.state.registry.unregister(&c.actor, &id).await?;
        Ok(NoContent::Done)
    }
}
