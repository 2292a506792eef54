//! Values that cross the driver boundary.

use serde::{Deserialize, Serialize};

/// How the host registers a table a driver declares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeedMode {
    /// The service's own tables: registered at every start, read-only, readable by every
    /// caller through the driver's row filter; a row no driver declares any more is removed.
    Internal,
    /// Tables a driver writes itself (a ticketing connection's): registered once as `local`
    /// tables, read under grants like any other and editable by admins; left in place (with
    /// their data) when the driver stops declaring them.
    Local,
}

/// A table a driver declares itself; see [`SeedMode`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeededTable {
    /// Registry id.
    pub id: String,
    /// Catalog display name.
    pub name: String,
    /// Grouping label.
    pub bucket: String,
    /// What the driver reads behind it (a store table for the internal driver).
    pub source_table: String,
    /// How the host registers it.
    pub mode: SeedMode,
    /// The catalog's description, for a table registered once.
    pub description: Option<String>,
}

/// A registered table as a driver sees it (the registry row, minus bookkeeping).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableRef {
    /// Registry id; names parquet files and grants.
    pub id: String,
    /// The driver's source kind.
    pub source_type: String,
    /// Grouping label (the dataset for warehouse tables).
    pub bucket: Option<String>,
    /// Name at the source; the id when empty.
    pub source_table: Option<String>,
    /// `local`, `remote`, `materialized` or `internal`.
    pub query_mode: String,
    /// SQL run at the source for materialized tables.
    pub source_query: Option<String>,
    /// The columns that identify a row (comma-separated), for sources that merge changes.
    #[serde(default)]
    pub primary_key: Option<String>,
    /// The column whose growth marks new and changed rows, for incremental syncs.
    #[serde(default)]
    pub cursor_column: Option<String>,
}

impl TableRef {
    /// The table's name at its source: `source_table`, or the id when that is empty.
    pub fn source_name(&self) -> &str {
        self.source_table
            .as_deref()
            .filter(|s| !s.is_empty())
            .unwrap_or(&self.id)
    }
}

/// Who is asking, for drivers that filter rows per caller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Caller {
    /// User id.
    pub user_id: String,
    /// The user's name in per-user data (session files, telemetry): their e-mail.
    pub username: String,
    /// Administrators see every row.
    pub is_admin: bool,
}

/// One column.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ColumnInfo {
    /// Column name.
    pub name: String,
    /// Type as the source names it (Arrow type names for parquet).
    #[serde(rename = "type")]
    pub data_type: String,
    /// Whether nulls may occur.
    pub nullable: bool,
    /// Free text; empty when the source has none.
    pub description: String,
}

/// A table's columns and layout hints.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableSchema {
    /// Columns in source order.
    pub columns: Vec<ColumnInfo>,
    /// Partitioning column, if any.
    pub partition_by: Option<String>,
    /// Clustering columns, in order.
    pub clustered_by: Vec<String>,
}

/// The Arrow field metadata key whose value is the column's description (parquet keeps it).
pub const DESCRIPTION_KEY: &str = "description";

impl TableSchema {
    /// Columns of an Arrow schema, with Arrow's type names and no layout hints. A field's
    /// [`DESCRIPTION_KEY`] metadata, when a writer set one, is its description.
    pub fn from_arrow(schema: &datafusion::arrow::datatypes::Schema) -> Self {
        let columns = schema
            .fields()
            .iter()
            .map(|f| ColumnInfo {
                name: f.name().clone(),
                data_type: type_name(f.data_type()),
                nullable: f.is_nullable(),
                description: f
                    .metadata()
                    .get(DESCRIPTION_KEY)
                    .cloned()
                    .unwrap_or_default(),
            })
            .collect();
        Self {
            columns,
            partition_by: None,
            clustered_by: Vec::new(),
        }
    }
}

/// The type name shown to users. Arrow's view layouts are an in-memory detail of how a
/// value is held, not a different type: `Utf8View` is shown as `Utf8` (and so on), so the
/// schema endpoint and query results agree.
pub fn type_name(data_type: &datafusion::arrow::datatypes::DataType) -> String {
    use datafusion::arrow::datatypes::DataType;
    match data_type {
        DataType::Utf8View => DataType::Utf8.to_string(),
        DataType::BinaryView => DataType::Binary.to_string(),
        other => other.to_string(),
    }
}

/// What the persistent metadata cache keeps about a remote table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableMetadata {
    /// `BASE TABLE`, `VIEW` or `MATERIALIZED VIEW`.
    pub entity_type: Option<String>,
    /// Row count (None for views).
    pub rows: Option<i64>,
    /// Active plus long-term logical bytes (None for views).
    pub size_bytes: Option<i64>,
    /// Partitioning column.
    pub partition_by: Option<String>,
    /// Clustering columns.
    pub clustered_by: Vec<String>,
    /// Column names, for validating WHERE examples.
    pub known_columns: Vec<String>,
    /// The type of each of `known_columns`, in the same order, as the source names it
    /// (BigQuery or Arrow type names); empty when the driver does not say. WHERE examples
    /// are generated from these.
    #[serde(default)]
    pub column_types: Vec<String>,
}

/// A scan the host has validated: which columns, which rows, how many.
#[derive(Debug, Clone, Default)]
pub struct ScanSpec {
    /// Columns read; None means all.
    pub columns: Option<Vec<String>>,
    /// Row filter over the table's (unqualified) columns.
    pub filter: Option<datafusion::logical_expr::Expr>,
    /// Most rows wanted.
    pub limit: Option<u64>,
}

/// What a scan would read, from the source's metadata or a dry run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScanEstimate {
    /// Bytes the scan would read from the source.
    pub bytes: u64,
    /// Rows it would return (an upper bound unless `exact`).
    pub rows: Option<u64>,
    /// Whether `bytes` and `rows` are exact rather than bounds.
    pub exact: bool,
    /// The most bytes this source lets one scan read (its size guard), when it has one.
    pub guard_bytes: Option<u64>,
}

/// What one sync wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncReport {
    /// Rows in the new copy.
    pub rows: u64,
    /// Its size on disk.
    pub bytes: u64,
    /// SHA-256 of the file, hex.
    pub hash: String,
    /// What the sync had to adapt and the admin should know (values replaced or nulled,
    /// a changed source schema); empty when nothing.
    #[serde(default)]
    pub notes: Vec<String>,
}

/// A table (or view) a source offers, as the source discovery endpoint lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceTableInfo {
    /// Its schema (namespace) at the source.
    pub schema: String,
    /// Its name.
    pub name: String,
    /// `table`, `view`, `materialized view`, `foreign table`.
    pub kind: String,
    /// The source's own row estimate, when it keeps one.
    pub estimated_rows: Option<u64>,
    /// Its columns: `type` is the Arrow type the copy would hold, `description` the source's
    /// type name.
    pub columns: Vec<ColumnInfo>,
}

/// How far a running sync has got: the driver counts as it goes and the host reports it
/// while the sync runs (`GET /api/sync/status`, the CLI's progress line). A driver that cannot
/// count leaves it at zero. A clone counts into the same numbers (a writer thread can hold
/// one).
#[derive(Debug, Default, Clone)]
pub struct SyncProgress(std::sync::Arc<ProgressCounts>);

#[derive(Debug, Default)]
struct ProgressCounts {
    rows: std::sync::atomic::AtomicU64,
    bytes: std::sync::atomic::AtomicU64,
}

impl SyncProgress {
    /// Records `rows` more rows, and the size of what has been written so far.
    pub fn advance(&self, rows: u64, bytes_written: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        self.0.rows.fetch_add(rows, Relaxed);
        self.0.bytes.fetch_max(bytes_written, Relaxed);
    }

    /// Rows so far.
    pub fn rows(&self) -> u64 {
        self.0.rows.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Bytes written so far.
    pub fn bytes(&self) -> u64 {
        self.0.bytes.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// How much of a table a sync rewrites.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SyncMode {
    /// The driver's choice: incremental where the table allows it, else everything.
    #[default]
    Auto,
    /// Everything, from scratch (also reconciles deletes an incremental sync cannot see).
    Full,
}
