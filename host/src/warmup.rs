//! Re-warming the persistent metadata cache of remote tables.
//!
//! The catalog never calls a remote source; it reads what this module stored. A registry
//! change flushes a table and schedules a re-warm of that one row here, off the request path.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use futures::StreamExt;
use svc_plugin_api::ErrorKind;

use crate::drivers::Drivers;
use crate::store::registry::QueryMode;
use crate::store::Store;

/// What a re-warm did, for logs and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rewarm {
    /// Fresh metadata was stored.
    Refreshed,
    /// Nothing to do: gone, not remote, or its driver keeps no remote metadata.
    Skipped,
    /// The source failed; the error was recorded on the row and earlier metadata kept.
    Failed(String),
}

/// Tables refreshed at once by a full refresh.
const REFRESH_CONCURRENCY: usize = 4;

/// Refreshes remote tables' metadata into the store.
#[derive(Debug, Clone)]
pub struct MetadataWarmer {
    store: Store,
    drivers: Drivers,
    running: Arc<AtomicBool>,
}

impl MetadataWarmer {
    /// A warmer over the store and drivers the server uses.
    pub fn new(store: Store, drivers: Drivers) -> Self {
        Self {
            store,
            drivers,
            running: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Starts refreshing every remote table in the background, a few at a time; returns how
    /// many, or None while a full refresh is already running.
    pub async fn refresh_all(&self) -> Result<Option<usize>, sqlx::Error> {
        if self.running.swap(true, Ordering::AcqRel) {
            return Ok(None);
        }
        let ids: Vec<String> = match self.store.list_tables().await {
            Ok(rows) => rows
                .into_iter()
                .filter(|r| r.query_mode == QueryMode::Remote)
                .map(|r| r.id)
                .collect(),
            Err(e) => {
                self.running.store(false, Ordering::Release);
                return Err(e);
            }
        };
        let count = ids.len();
        let me = self.clone();
        tokio::spawn(async move {
            let outcomes: Vec<Rewarm> = futures::stream::iter(ids)
                .map(|id| {
                    let me = me.clone();
                    async move { me.rewarm(&id).await }
                })
                .buffer_unordered(REFRESH_CONCURRENCY)
                .collect()
                .await;
            let failed = outcomes
                .iter()
                .filter(|o| matches!(o, Rewarm::Failed(_)))
                .count();
            tracing::info!(tables = outcomes.len(), failed, "metadata refresh finished");
            me.running.store(false, Ordering::Release);
        });
        Ok(Some(count))
    }

    /// Re-warms one table in the background.
    pub fn schedule(&self, table_id: &str) {
        let (me, id) = (self.clone(), table_id.to_owned());
        tokio::spawn(async move {
            let outcome = me.rewarm(&id).await;
            tracing::debug!(table = %id, ?outcome, "metadata re-warm");
        });
    }

    /// Re-warms one table now.
    pub async fn rewarm(&self, table_id: &str) -> Rewarm {
        let row = match self.store.table_by_id(table_id).await {
            Ok(Some(row)) if row.query_mode == QueryMode::Remote => row,
            Ok(_) => return Rewarm::Skipped,
            Err(e) => return Rewarm::Failed(format!("state store: {e}")),
        };
        let Some(driver) = self.drivers.get(&row.source_type) else {
            return Rewarm::Skipped;
        };
        match driver.refresh_metadata(&row.table_ref()).await {
            Ok(metadata) => match self.store.save_metadata(table_id, &metadata).await {
                Ok(()) => Rewarm::Refreshed,
                Err(e) => Rewarm::Failed(format!("state store: {e}")),
            },
            Err(e) if matches!(e.kind, ErrorKind::Unsupported | ErrorKind::NotConfigured) => {
                Rewarm::Skipped
            }
            Err(e) => {
                tracing::warn!(table = %table_id, error = %e, "metadata refresh failed");
                if let Err(se) = self.store.record_metadata_error(table_id, &e.message).await {
                    tracing::warn!(table = %table_id, error = %se, "could not record the refresh failure");
                }
                Rewarm::Failed(e.message)
            }
        }
    }
}
