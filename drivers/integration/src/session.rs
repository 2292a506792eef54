//! One connection to a source database, whatever its dialect: the four things a sync or a
//! discovery asks of a source, each answered by the dialect's module.

use svc_plugin_api::{DriverError, ErrorKind, RecordBatch, Result, SourceTableInfo};
use tokio::sync::mpsc::Sender;

use crate::columns::{Adjusted, Batch, Column};
use crate::config::{Connection, Dialect};
use crate::mysql::{self, MySqlSession};
use crate::source::Source;
use crate::{postgres, sqlite};

/// An open, read-only session on a connection's database.
pub(crate) enum Session {
    Postgres(sqlx::PgConnection),
    Mysql(MySqlSession),
    Sqlite(sqlx::SqliteConnection),
}

impl Session {
    /// Opens the connection `name`.
    pub async fn open(name: &str, connection: &Connection) -> Result<Self> {
        let dialect = connection
            .dialect()
            .map_err(|why| misconfigured(name, why))?;
        Ok(match dialect {
            Dialect::Postgres => Self::Postgres(postgres::connect(name, connection).await?),
            Dialect::Mysql => Self::Mysql(mysql::connect(name, connection).await?),
            Dialect::Sqlite => Self::Sqlite(sqlite::connect(name, connection).await?),
        })
    }

    /// The database's kind.
    pub fn dialect(&self) -> Dialect {
        match self {
            Self::Postgres(_) => Dialect::Postgres,
            Self::Mysql(_) => Dialect::Mysql,
            Self::Sqlite(_) => Dialect::Sqlite,
        }
    }

    /// The source's columns, in order, each planned.
    pub async fn columns(&mut self, name: &str, source: &Source) -> Result<Vec<Column>> {
        match self {
            Self::Postgres(c) => postgres::columns(c, name, source).await,
            Self::Mysql(s) => mysql::columns(s, name, source).await,
            Self::Sqlite(c) => sqlite::columns(c, name, source).await,
        }
    }

    /// Streams the source's rows to `out` in batches of `batch_rows`; `filter` is what
    /// follows `WHERE`. Answers what had to change to fit.
    pub async fn rows(
        &mut self,
        name: &str,
        source: &Source,
        columns: &[Column],
        filter: Option<&str>,
        batch_rows: usize,
        out: &Sender<RecordBatch>,
    ) -> Result<Adjusted> {
        match self {
            Self::Postgres(c) => {
                postgres::copy_rows(c, name, source, columns, filter, batch_rows, out).await
            }
            Self::Mysql(s) => mysql::rows(s, name, source, columns, filter, batch_rows, out).await,
            Self::Sqlite(c) => {
                sqlite::rows(c, name, source, columns, filter, batch_rows, out).await
            }
        }
    }

    /// The tables and views the login may read, with each column as it would be extracted.
    pub async fn discover(&mut self, name: &str) -> Result<Vec<SourceTableInfo>> {
        match self {
            Self::Postgres(c) => postgres::discover(c, name).await,
            Self::Mysql(s) => mysql::discover(s, name).await,
            Self::Sqlite(c) => sqlite::discover(c, name).await,
        }
    }

    /// Closes the session politely (a failure to say goodbye is not the caller's failure).
    pub async fn close(self) {
        use sqlx::Connection as _;
        let _ = match self {
            Self::Postgres(c) => c.close().await,
            Self::Mysql(s) => s.close().await,
            Self::Sqlite(c) => c.close().await,
        };
    }
}

/// A connection whose settings cannot work (a bad URL, an unreadable password).
pub(crate) fn misconfigured(name: &str, why: impl std::fmt::Display) -> DriverError {
    DriverError::new(
        ErrorKind::NotConfigured,
        format!("Connection '{name}': {why}"),
    )
}

/// A `source_query` the source will not run (bad SQL, a column it does not have).
pub(crate) fn refused_query(name: &str, e: &sqlx::Error) -> DriverError {
    DriverError::new(
        ErrorKind::BadRequest,
        format!("Connection '{name}' refuses the source_query: {e}"),
    )
}

/// Hands the batch to the writer once it holds at least `min_rows` rows (at the end of the
/// rows, pass 1: whatever is left).
pub(crate) async fn hand_over(
    batch: &mut Batch,
    out: &Sender<RecordBatch>,
    min_rows: usize,
) -> Result<()> {
    if batch.rows == 0 || batch.rows < min_rows {
        return Ok(());
    }
    out.send(batch.finish()?)
        .await
        .map_err(|_| DriverError::internal("the parquet writer stopped"))
}

/// Waits at most 30 s for a connection attempt: a host that never answers would otherwise
/// hold one of the connection's sync slots for good.
pub(crate) async fn within_30s<T>(
    name: &str,
    attempt: impl std::future::Future<Output = std::result::Result<T, sqlx::Error>>,
    upstream: fn(&str, &str, &sqlx::Error) -> DriverError,
) -> Result<T> {
    tokio::time::timeout(std::time::Duration::from_secs(30), attempt)
        .await
        .map_err(|_| {
            DriverError::new(
                ErrorKind::Timeout,
                format!("Connection '{name}': no answer from the database within 30 s"),
            )
        })?
        .map_err(|e| upstream(name, "connecting", &e))
}
