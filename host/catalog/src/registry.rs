//! Registry changes: validation, the store write, the audit row and the cache flush, in one
//! place for every caller.

use std::sync::Arc;

use serde_json::{json, Value};
use svc_core::table_id::{is_valid_table_id, TABLE_ID_RULE};
use svc_core::Error;
use svc_plugin_api::SeedMode;
use svc_store::audit::{Actor, AuditWriter, Event};
use svc_store::registry::{QueryMode, RegistryRow};
use svc_store::Store;

use crate::caches::CacheHooks;
use crate::data::UPLOADABLE_SOURCE;
use crate::drivers::Drivers;
use crate::schedule::Schedule;
use crate::warmup::MetadataWarmer;

type Result<T> = std::result::Result<T, Error>;

fn snapshot(r: &RegistryRow) -> Value {
    json!({
        "name": r.name, "source_type": r.source_type, "bucket": r.bucket, "source_table": r.source_table,
        "query_mode": r.query_mode.as_str(), "source_query": r.source_query, "sync_schedule": r.sync_schedule,
        "primary_key": r.primary_key, "cursor_column": r.cursor_column,
        "description": r.description,
    })
}

fn refuse_internal(existing: &RegistryRow) -> Result<()> {
    if existing.query_mode.is_internal() {
        return Err(Error::conflict(format!(
            "'{}' is an internal table; internal tables are read-only and cannot be edited or deleted",
            existing.id
        )));
    }
    Ok(())
}

/// Whether [`register`] created the row or replaced an existing one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Registered {
    /// A new row.
    Created,
    /// An existing row was updated (upsert).
    Updated,
}

/// Registry changes over the handles they use: the store, the drivers (which source types
/// exist, which tables they seed), the audit writer, and what a change must flush.
#[derive(Debug, Clone)]
pub struct Registry {
    store: Store,
    drivers: Drivers,
    audit: Arc<AuditWriter>,
    caches: Arc<CacheHooks>,
    warmer: MetadataWarmer,
}

impl Registry {
    /// Registry changes over these handles.
    pub fn new(
        store: Store,
        drivers: Drivers,
        audit: Arc<AuditWriter>,
        caches: Arc<CacheHooks>,
        warmer: MetadataWarmer,
    ) -> Self {
        Self {
            store,
            drivers,
            audit,
            caches,
            warmer,
        }
    }

    pub(crate) fn drivers(&self) -> &Drivers {
        &self.drivers
    }

    pub(crate) fn store(&self) -> &Store {
        &self.store
    }

    pub(crate) fn audit(&self) -> &AuditWriter {
        &self.audit
    }

    /// The per-table caches a change flushes; every such cache registers its hook here.
    pub fn caches(&self) -> &CacheHooks {
        &self.caches
    }

    /// The one flush for a registry change: in-memory caches through their hooks, and the
    /// table's persistent metadata (its source may have changed), then a background re-warm
    /// of that row. A failure to forget the metadata is logged; the registry change itself
    /// has already happened.
    pub async fn changed(&self, table_id: &str) {
        self.caches.forget_table(table_id);
        if let Err(e) = self.store.forget_metadata(table_id).await {
            tracing::warn!(table = %table_id, error = %e, "could not forget cached metadata");
        }
        self.warmer.schedule(table_id);
    }

    /// The one flush for a data change (a sync or a script rewrote the table's data): the
    /// in-memory caches through their hooks. The registry row and its metadata still hold.
    pub fn data_changed(&self, table_id: &str) {
        self.caches.forget_table(table_id);
    }

    /// Validates a complete row as it would be stored.
    fn validate(&self, row: &RegistryRow) -> Result<()> {
        if !is_valid_table_id(&row.id) {
            return Err(Error::invalid(format!(
                "table id '{}' must be {TABLE_ID_RULE}",
                row.id
            )));
        }
        let registrable = self.drivers.registrable();
        if !registrable.contains(&row.source_type.as_str()) {
            return Err(Error::invalid(format!(
                "Unknown source_type '{}'. This server has drivers for: {}",
                row.source_type,
                registrable.join(", ")
            )));
        }
        if row.query_mode.is_internal() {
            return Err(Error::invalid(
                "query_mode 'internal' is reserved for the seeded svc_* tables",
            ));
        }
        if row.source_query.is_some() && !row.query_mode.is_materialized() {
            return Err(Error::invalid(
                "source_query is only allowed with query_mode 'materialized'",
            ));
        }
        if let Some(s) = &row.sync_schedule {
            s.parse::<Schedule>()
                .map_err(|e| Error::invalid(format!("sync_schedule: {e}")))?;
        }
        if row.source_type == UPLOADABLE_SOURCE {
            // A local table's file is named by its id; a source_table would be ignored.
            if row.source_table.as_deref().is_some_and(|t| t != row.id) {
                return Err(Error::invalid(format!(
                    "source_table does not apply to a local table: its data is the file uploaded for id '{}' (svc admin upload {} FILE)",
                    row.id, row.id
                )));
            }
            // A present file must be readable; a missing one is fine (upload it next).
            self.data_facts(row)?;
        }
        Ok(())
    }

    /// The driver's own check of what the row names at its source (422 when it names
    /// something that is not there or cannot work; a source that cannot be reached is the
    /// driver's to tolerate).
    async fn check_at_source(&self, row: &RegistryRow) -> Result<()> {
        let Some(driver) = self.drivers.get(&row.source_type) else {
            return Ok(());
        };
        driver
            .check_registration(&row.table_ref())
            .await
            .map_err(|e| {
                use svc_plugin_api::ErrorKind as K;
                match e.kind {
                    K::BadRequest | K::NotFound | K::NotConfigured | K::UnsafeIdentifier => {
                        Error::invalid(e.message)
                    }
                    _ => Error::from(e),
                }
            })
    }

    /// The registered, non-internal row with this id (404 / 409 otherwise).
    async fn editable(&self, id: &str) -> Result<RegistryRow> {
        let existing = self
            .store
            .table_by_id(id)
            .await?
            .ok_or_else(|| Error::not_found(format!("Table '{id}' is not registered")))?;
        refuse_internal(&existing)?;
        Ok(existing)
    }

    /// Registers a table, or updates it when the id exists (upsert): `change` is applied to
    /// the stored row, or to [`RegistryRow::new_local`] for a new id, so an upsert changes only
    /// what it names. Returns what happened and the row as stored.
    pub async fn register(
        &self,
        actor: &Actor,
        id: &str,
        change: impl FnOnce(&mut RegistryRow),
    ) -> Result<(Registered, RegistryRow)> {
        let existing = self.store.table_by_id(id).await?;
        // An internal row is refused as such (409) whatever the change says.
        if let Some(e) = &existing {
            refuse_internal(e)?;
        }
        let mut row = existing
            .clone()
            .unwrap_or_else(|| RegistryRow::new_local(id));
        change(&mut row);
        // The id names the row; it is not the change's to make.
        row.id = id.to_owned();
        self.validate(&row)?;
        self.check_at_source(&row).await?;
        row.registered_by = existing
            .as_ref()
            .and_then(|e| e.registered_by.clone())
            .or(actor.user_id.clone());
        self.store.upsert_table(&row).await?;
        let mut event = Event::new("registry.register")
            .resource(format!("table:{}", row.id))
            .param("row", snapshot(&row));
        if let Some(e) = &existing {
            event = event.before(snapshot(e));
        }
        self.audit.write(actor, event).await;
        self.changed(id).await;
        let outcome = if existing.is_some() {
            Registered::Updated
        } else {
            Registered::Created
        };
        Ok((outcome, self.store.table_by_id(id).await?.unwrap_or(row)))
    }

    /// Applies a partial change to a registered table; returns the stored row.
    pub async fn update(
        &self,
        actor: &Actor,
        id: &str,
        change: impl FnOnce(&mut RegistryRow),
    ) -> Result<RegistryRow> {
        let existing = self.editable(id).await?;
        let mut row = existing.clone();
        change(&mut row);
        self.validate(&row)?;
        self.check_at_source(&row).await?;
        self.store.upsert_table(&row).await?;
        self.audit
            .write(
                actor,
                Event::new("registry.update")
                    .resource(format!("table:{id}"))
                    .param("row", snapshot(&row))
                    .before(snapshot(&existing)),
            )
            .await;
        self.changed(id).await;
        Ok(self.store.table_by_id(id).await?.unwrap_or(row))
    }

    /// Removes a table from the registry.
    pub async fn unregister(&self, actor: &Actor, id: &str) -> Result<()> {
        let existing = self.editable(id).await?;
        self.store.delete_table(id).await?;
        self.audit
            .write(
                actor,
                Event::new("registry.unregister")
                    .resource(format!("table:{id}"))
                    .before(snapshot(&existing)),
            )
            .await;
        self.changed(id).await;
        Ok(())
    }

    /// Seeds the tables the drivers declare ([`svc_plugin_api::SourceDriver::seeded_tables`])
    /// idempotently: internal tables are kept exactly as declared and removed when no driver
    /// declares them any more; a driver's local tables are registered once and then left to
    /// the admins.
    pub async fn seed(&self) -> anyhow::Result<()> {
        let seeded = self.drivers.seeded_tables();
        let keep: Vec<&str> = seeded
            .iter()
            .filter(|(_, t)| t.mode == SeedMode::Internal)
            .map(|(_, t)| t.id.as_str())
            .collect();
        for removed in self.store.prune_internal_tables(&keep).await? {
            tracing::info!(table = %removed, "removed stale internal table");
            self.changed(&removed).await;
        }
        for (source_type, t) in &seeded {
            let row = RegistryRow {
                id: t.id.clone(),
                name: t.name.clone(),
                source_type: (*source_type).into(),
                bucket: Some(t.bucket.clone()),
                source_table: Some(t.source_table.clone()),
                query_mode: match t.mode {
                    SeedMode::Internal => QueryMode::Internal,
                    SeedMode::Local => QueryMode::Local,
                },
                source_query: None,
                primary_key: None,
                cursor_column: None,
                sync_schedule: None,
                description: t.description.clone(),
                registered_by: Some("system_seed".into()),
                registered_at: None,
                updated_at: None,
            };
            let current = self.store.table_by_id(&t.id).await?;
            let unchanged = match (t.mode, &current) {
                (_, None) => false,
                (SeedMode::Local, Some(c)) => {
                    if c.source_type != row.source_type {
                        tracing::warn!(
                            table = %t.id,
                            "a {source_type} table is not registered: the id is taken by a {} table",
                            c.source_type
                        );
                    }
                    true
                }
                (SeedMode::Internal, Some(c)) => {
                    c.name == row.name
                        && c.source_type == row.source_type
                        && c.bucket == row.bucket
                        && c.source_table == row.source_table
                        && c.query_mode == row.query_mode
                }
            };
            if !unchanged {
                self.store.upsert_table(&row).await?;
                self.changed(&t.id).await;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn every_change_flushes_the_table_once_and_internal_rows_are_protected() {
        let (store, dir) = svc_store::testing::sqlite().await;
        let audit = AuditWriter::start(store.clone());
        let drivers = Drivers::builtin(&dir.0, &store, &audit, &Default::default());
        let registry = Registry::new(
            store.clone(),
            drivers.clone(),
            audit,
            Arc::default(),
            MetadataWarmer::new(store, drivers, Arc::default(), 1),
        );
        let flushed = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let count = Arc::new(AtomicUsize::new(0));
        {
            let (flushed, count) = (flushed.clone(), count.clone());
            registry.caches().register(Arc::new(move |id: &str| {
                flushed.lock().unwrap().push(id.to_string());
                count.fetch_add(1, Ordering::SeqCst);
            }));
        }
        registry.seed().await.unwrap();
        let seeded = count.load(Ordering::SeqCst);
        registry.seed().await.unwrap();
        assert_eq!(
            count.load(Ordering::SeqCst),
            seeded,
            "a second seed changes nothing"
        );

        let actor = Actor::console();
        let row = RegistryRow {
            id: "orders".into(),
            name: "Orders".into(),
            source_type: "local".into(),
            bucket: None,
            source_table: None,
            query_mode: QueryMode::Local,
            source_query: None,
            primary_key: None,
            cursor_column: None,
            sync_schedule: Some("every 15m".into()),
            description: None,
            registered_by: None,
            registered_at: None,
            updated_at: None,
        };
        flushed.lock().unwrap().clear();
        assert_eq!(
            registry
                .register(&actor, "orders", |r| *r = row.clone())
                .await
                .unwrap()
                .0,
            Registered::Created
        );
        assert_eq!(
            registry
                .register(&actor, "orders", |r| *r = row)
                .await
                .unwrap()
                .0,
            Registered::Updated
        );
        registry
            .update(&actor, "orders", |r| r.description = Some("d".into()))
            .await
            .unwrap();
        registry.unregister(&actor, "orders").await.unwrap();
        assert_eq!(*flushed.lock().unwrap(), vec!["orders"; 4]);

        let err = registry.unregister(&actor, "svc_audit").await.unwrap_err();
        assert_eq!(err.status(), 409);
        let err = registry
            .update(&actor, "svc_audit", |r| r.description = None)
            .await
            .unwrap_err();
        assert_eq!(err.status(), 409);
    }

    /// The tables drivers seed read store tables the migrations create (for `svc_telemetry`,
    /// the table listing its segments), on both backends: the roster and the schema cannot
    /// drift apart unnoticed.
    #[tokio::test]
    async fn seeded_tables_read_tables_the_store_creates() {
        for (store, dir) in svc_store::testing::all_backends().await {
            let data = svc_store::testing::TempDir::new();
            let audit = AuditWriter::start(store.clone());
            let drivers = Drivers::builtin(&data.0, &store, &audit, &Default::default());
            let seeded = drivers.seeded_tables();
            assert!(
                !seeded.is_empty(),
                "the internal driver declares its tables"
            );
            for (_, t) in seeded {
                let entry = svc_driver_internal::roster_entry(&t.id);
                // Events live in parquet segments; the store table that lists them must exist.
                let table = match entry.map(|e| e.rows) {
                    Some(svc_driver_internal::RowHome::EventSegments) => "session_file_state",
                    _ => t.source_table.as_str(),
                };
                assert!(
                    store.has_table(table).await.unwrap(),
                    "'{}' reads '{}', which the migrations do not create",
                    t.id,
                    t.source_table
                );
            }
            assert!(!store.has_table("no_such_table").await.unwrap());
            drop(dir);
        }
    }
}
