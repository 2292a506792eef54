//! The three read-only `svc_*` tables, served from the state store (and, for events, the
//! segments it lists) and filtered per caller.
//!
//! Registered with the host under `source_type = "internal"`. An administrator sees every
//! row; anyone else sees only rows whose filter column equals their own identity. The
//! identity is bound as a query parameter (never interpolated) and must also match
//! [`is_safe_identity`], so an odd value is refused outright rather than merely escaped.
//!
//! `svc_sessions` and `svc_audit` are store tables; `svc_telemetry`'s events are parquet
//! segments, one per session file ([`events`]), whose list the store keeps.

mod aggregate;
mod event_scan;
pub mod events;
mod provider;
#[cfg(test)]
mod provider_tests;
mod rows;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::future::BoxFuture;
use sqlx::{AnyPool, Row};
use svc_plugin_api::datafusion::optimizer::OptimizerRule;
use svc_plugin_api::datafusion::prelude::SessionContext;

pub use aggregate::AggregatePushdown;
pub use events::EventSegments;
pub use provider::{can_push, InternalProvider, Param, ScanSql};
pub use rows::StoreColumn;
use svc_plugin_api::{
    Caller, ColumnInfo, DriverError, ErrorKind, RecordBatch, Result, SeedMode, SeededTable,
    SourceDriver, TableProvider, TableRef, TableSchema,
};

/// One of the service's own tables exposed through the ordinary query path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InternalTable {
    /// Registry id.
    pub id: &'static str,
    /// The store table behind it.
    pub backing_table: &'static str,
    /// Catalog display name.
    pub display_name: &'static str,
    /// Column compared with the caller's identity for non-admins.
    pub filter_column: &'static str,
    /// Where its rows are kept.
    pub rows: RowHome,
}

/// Where an internal table's rows are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowHome {
    /// In the store table `backing_table`.
    Store,
    /// In event segments listed by the store's `session_file_state` ([`events`]).
    EventSegments,
}

/// Bucket of every internal registry row.
pub const INTERNAL_BUCKET: &str = "Internal";

/// The internal tables; the host seeds exactly these at every start and removes others.
///
/// Every table filters on `user_id`. The spec names `username` for sessions and telemetry;
/// their rows carry it (the owner's e-mail), but an e-mail can change and need not fit the
/// identity pattern, while the user id is fixed and always does — so a user's rows stay
/// theirs whatever their e-mail, and nobody else's can match.
pub const ROSTER: &[InternalTable] = &[
    InternalTable {
        id: "svc_sessions",
        backing_table: "usage_session_summary",
        display_name: "Service sessions",
        filter_column: "user_id",
        rows: RowHome::Store,
    },
    InternalTable {
        id: "svc_telemetry",
        backing_table: "usage_events",
        display_name: "Service telemetry events",
        filter_column: "user_id",
        rows: RowHome::EventSegments,
    },
    InternalTable {
        id: "svc_audit",
        backing_table: "audit_log",
        display_name: "Service audit log",
        filter_column: "user_id",
        rows: RowHome::Store,
    },
];

/// The roster entry for a table id.
pub fn roster_entry(id: &str) -> Option<&'static InternalTable> {
    ROSTER.iter().find(|t| t.id == id)
}

/// Whether an identity may be used in a row filter: letters, digits and `._+-@:`, 1–200 chars.
pub fn is_safe_identity(v: &str) -> bool {
    (1..=200).contains(&v.len())
        && v.bytes().all(|b| {
            b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'+' | b'-' | b'@' | b':')
        })
}

/// The row filter for a caller: None for administrators, else `(column, value)`.
pub fn row_filter(
    table: &InternalTable,
    caller: &Caller,
) -> Result<Option<(&'static str, String)>> {
    if caller.is_admin {
        return Ok(None);
    }
    let value = match table.filter_column {
        "user_id" => &caller.user_id,
        _ => &caller.username,
    };
    if !is_safe_identity(value) {
        return Err(DriverError::new(
            ErrorKind::UnsafeIdentity,
            format!(
                "Your identity cannot be used to filter {} (allowed: letters, digits and ._+-@:); ask an administrator",
                table.id
            ),
        ));
    }
    Ok(Some((table.filter_column, value.clone())))
}

/// Waits until the rows queued for a store table before the call are stored: the host's
/// hook for a table written behind a queue (the audit log, by its writer's flush).
pub type PendingWrites = Arc<dyn Fn() -> BoxFuture<'static, ()> + Send + Sync>;

/// The `internal` source driver, reading the state store.
#[derive(Clone)]
pub struct InternalDriver {
    pool: AnyPool,
    postgres: bool,
    segments: EventSegments,
    /// Backing tables written behind a queue, with the wait for what is queued.
    pending: Vec<(&'static str, PendingWrites)>,
}

impl std::fmt::Debug for InternalDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InternalDriver")
            .field("postgres", &self.postgres)
            .field(
                "queued_tables",
                &self.pending.iter().map(|(t, _)| t).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl InternalDriver {
    /// A driver over the state store's pool and the event segments in `data_dir`.
    pub fn new(pool: AnyPool, postgres: bool, data_dir: &Path) -> Self {
        Self {
            pool,
            postgres,
            segments: EventSegments::new(data_dir),
            pending: Vec::new(),
        }
    }

    /// Marks `backing_table` as written behind a queue: every read of it first awaits
    /// `wait`, so a caller reading it sees the rows of its own earlier requests (its audit
    /// rows, say), which the writer stores off the request path.
    pub fn with_pending_writes(mut self, backing_table: &'static str, wait: PendingWrites) -> Self {
        self.pending.push((backing_table, wait));
        self
    }

    /// Awaits the rows queued for `entry`'s backing table, if it is written behind a queue.
    async fn settle(&self, entry: &InternalTable) {
        for (table, wait) in &self.pending {
            if *table == entry.backing_table {
                wait().await;
            }
        }
    }

    /// Usage events over DataFusion. With `owner` (a user id): only the segments whose owner
    /// that user is (see [`events`]) — the row filter of `svc_telemetry`. Without: every
    /// event once, for administrators — each pack, plus the segment of each file in no pack,
    /// listed in one statement so a compaction or a commit cannot fall between the two.
    pub async fn event_provider(&self, owner: Option<&str>) -> Result<Arc<dyn TableProvider>> {
        self.segments.provider(&self.event_files(owner).await?)
    }

    /// Every event once, as [`event_provider`](Self::event_provider) without an owner, with
    /// the hidden key columns for counting owners and sessions; None while some file
    /// predates them ([`events`]).
    pub async fn keyed_event_provider(&self) -> Result<Option<Arc<dyn TableProvider>>> {
        self.segments.keyed_provider(&self.event_files(None).await?)
    }

    /// Every event file an administrator reads (as [`keyed_event_provider`]
    /// (Self::keyed_event_provider) lists them), with its path: for readers that keep
    /// what they decode of a file, which is never rewritten under its name.
    pub async fn admin_event_files(&self) -> Result<Vec<(events::EventFile, PathBuf)>> {
        self.event_files(None)
            .await?
            .into_iter()
            .map(|f| {
                let path = self.segments.path(&f.name)?;
                Ok((f, path))
            })
            .collect()
    }

    async fn event_files(&self, owner: Option<&str>) -> Result<Vec<events::EventFile>> {
        let query = match owner {
            Some(owner) => sqlx::query(
                "SELECT segment AS name, first_at, last_at FROM session_file_state \
                 WHERE segment IS NOT NULL AND user_id = $1 ORDER BY session_file",
            )
            .bind(owner.to_owned()),
            None => sqlx::query(
                "SELECT name, first_at, last_at FROM usage_event_packs \
                 UNION ALL \
                 SELECT segment AS name, first_at, last_at FROM session_file_state \
                 WHERE segment IS NOT NULL AND pack IS NULL",
            ),
        };
        query
            .fetch_all(&self.pool)
            .await
            .map_err(store_error)?
            .iter()
            .map(|r| {
                Ok(events::EventFile {
                    name: r.try_get("name")?,
                    first_at: r.try_get("first_at")?,
                    last_at: r.try_get("last_at")?,
                })
            })
            .collect::<std::result::Result<Vec<_>, sqlx::Error>>()
            .map_err(store_error)
    }

    fn entry(table: &TableRef) -> Result<&'static InternalTable> {
        roster_entry(&table.id).ok_or_else(|| {
            DriverError::not_found(format!("'{}' is not an internal table", table.id))
        })
    }

    /// The backing table's columns, in order.
    async fn store_columns(&self, backing: &str) -> Result<Vec<StoreColumn>> {
        let sql = if self.postgres {
            "SELECT column_name::text AS name, data_type::text AS type, is_nullable::text AS nullable \
             FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = $1 \
             ORDER BY ordinal_position"
        } else {
            "SELECT name, type, CASE WHEN \"notnull\" = 0 THEN 'YES' ELSE 'NO' END AS nullable \
             FROM pragma_table_info($1) ORDER BY cid"
        };
        let rows = sqlx::query(sql)
            .bind(backing)
            .fetch_all(&self.pool)
            .await
            .map_err(store_error)?;
        rows.iter()
            .map(|r| {
                let get = |c: &str| r.try_get::<String, _>(c).map_err(store_error);
                Ok(StoreColumn {
                    name: get("name")?,
                    store_type: get("type")?,
                    nullable: get("nullable")? == "YES",
                })
            })
            .collect()
    }
}

/// The user id a `user_id` row filter admits (every internal table filters on it).
fn owner<'a>(filter: Option<&'a (&'static str, String)>) -> Option<&'a str> {
    filter.map(|(column, value)| {
        debug_assert_eq!(*column, "user_id");
        value.as_str()
    })
}

pub(crate) fn store_error(e: sqlx::Error) -> DriverError {
    DriverError::internal(format!("state store: {e}"))
}

#[async_trait::async_trait]
impl SourceDriver for InternalDriver {
    fn source_type(&self) -> &'static str {
        "internal"
    }

    fn registrable(&self) -> bool {
        false
    }

    fn seeded_tables(&self) -> Vec<SeededTable> {
        ROSTER
            .iter()
            .map(|t| SeededTable {
                id: t.id.into(),
                name: t.display_name.into(),
                bucket: INTERNAL_BUCKET.into(),
                source_table: t.backing_table.into(),
                mode: SeedMode::Internal,
                description: None,
            })
            .collect()
    }

    async fn schema(&self, table: &TableRef, _caller: &Caller) -> Result<TableSchema> {
        let entry = Self::entry(table)?;
        let columns = match entry.rows {
            RowHome::Store => self
                .store_columns(entry.backing_table)
                .await?
                .into_iter()
                .map(|c| ColumnInfo {
                    data_type: c.data_type().to_string(),
                    name: c.name,
                    nullable: c.nullable,
                    description: String::new(),
                })
                .collect(),
            RowHome::EventSegments => events::schema()
                .fields()
                .iter()
                .map(|f| ColumnInfo {
                    name: f.name().clone(),
                    data_type: f.data_type().to_string(),
                    nullable: f.is_nullable(),
                    description: String::new(),
                })
                .collect(),
        };
        Ok(TableSchema {
            columns,
            partition_by: None,
            clustered_by: Vec::new(),
        })
    }

    async fn sample(
        &self,
        table: &TableRef,
        n: usize,
        caller: &Caller,
    ) -> Result<Vec<RecordBatch>> {
        let entry = Self::entry(table)?;
        let filter = row_filter(entry, caller)?;
        if entry.rows == RowHome::EventSegments {
            let provider = self.event_provider(owner(filter.as_ref())).await?;
            let df = |e: svc_plugin_api::datafusion::error::DataFusionError| {
                DriverError::internal(format!("{}: {e}", entry.id))
            };
            return SessionContext::new()
                .read_table(provider)
                .and_then(|t| t.limit(0, Some(n)))
                .map_err(df)?
                .collect()
                .await
                .map_err(df);
        }
        self.settle(entry).await;
        let columns = self.store_columns(entry.backing_table).await?;
        let scan = ScanSql::build(
            entry,
            &columns,
            &columns,
            filter.as_ref(),
            &[],
            Some(n),
            self.postgres,
        )
        .map_err(DriverError::internal)?;
        Ok(vec![scan.fetch_batch(&self.pool, &columns).await?])
    }

    fn optimizer_rules(&self) -> Vec<Arc<dyn OptimizerRule + Send + Sync>> {
        vec![Arc::new(AggregatePushdown)]
    }

    async fn table_provider(
        &self,
        table: &TableRef,
        caller: &Caller,
    ) -> Result<Arc<dyn TableProvider>> {
        let entry = Self::entry(table)?;
        let filter = row_filter(entry, caller)?;
        if entry.rows == RowHome::EventSegments {
            return self.event_provider(owner(filter.as_ref())).await;
        }
        // Settled when the plan is made: the provider's scans and the aggregates pushed
        // into the store all run after this.
        self.settle(entry).await;
        let columns = self.store_columns(entry.backing_table).await?;
        Ok(Arc::new(InternalProvider::new(
            self.pool.clone(),
            self.postgres,
            entry,
            columns,
            filter,
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(admin: bool, user_id: &str, username: &str) -> Caller {
        Caller {
            user_id: user_id.into(),
            username: username.into(),
            is_admin: admin,
        }
    }

    #[test]
    fn filters_follow_the_roster_and_refuse_unsafe_identities() {
        let audit = roster_entry("svc_audit").unwrap();
        let sessions = roster_entry("svc_sessions").unwrap();
        assert_eq!(row_filter(audit, &caller(true, "u1", "a@b")).unwrap(), None);
        assert_eq!(
            row_filter(audit, &caller(false, "u-1", "a@b")).unwrap(),
            Some(("user_id", "u-1".into()))
        );
        // Sessions and telemetry follow the user id too: an e-mail no row filter pattern
        // admits (or one that changed since) does not cost a user their own rows.
        assert_eq!(
            row_filter(sessions, &caller(false, "u-1", "o'neil x@ex.com")).unwrap(),
            Some(("user_id", "u-1".into()))
        );
        for bad in ["a'b", "a b", "x;--", "", "a\"b"] {
            let e = row_filter(sessions, &caller(false, bad, "a@b")).unwrap_err();
            assert_eq!(e.kind, ErrorKind::UnsafeIdentity, "{bad:?}");
            assert!(e.message.contains("svc_sessions"));
        }
        assert!(roster_entry("agnes_usage").is_none());
    }
}
