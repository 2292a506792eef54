//! Registry changes: validation, the store write, the audit row and the cache flush, in one
//! place for every caller.

use serde_json::{json, Value};
use svc_driver_internal::{INTERNAL_BUCKET, ROSTER};

use crate::api::ApiError;
use crate::audit::{Actor, Event};
use crate::schedule::Schedule;
use crate::state::AppState;
use crate::store::registry::{QueryMode, RegistryRow};

type Result<T> = std::result::Result<T, ApiError>;

/// Pattern every table id must match.
pub const TABLE_ID_PATTERN: &str = r"^[A-Za-z0-9_.\-]{1,128}$";

/// Whether a string is a valid table id (the API validates with [`TABLE_ID_PATTERN`] too).
pub fn is_valid_table_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

fn snapshot(r: &RegistryRow) -> Value {
    json!({
        "name": r.name, "source_type": r.source_type, "bucket": r.bucket, "source_table": r.source_table,
        "query_mode": r.query_mode.as_str(), "source_query": r.source_query, "sync_schedule": r.sync_schedule,
        "description": r.description,
    })
}

/// Validates a complete row as it would be stored.
fn validate(state: &AppState, row: &RegistryRow) -> Result<()> {
    if !is_valid_table_id(&row.id) {
        return Err(ApiError::unprocessable(format!(
            "table id '{}' must match {TABLE_ID_PATTERN}",
            row.id
        )));
    }
    let registrable = state.drivers.registrable();
    if !registrable.contains(&row.source_type.as_str()) {
        return Err(ApiError::unprocessable(format!(
            "Unknown source_type '{}'. This server has drivers for: {}",
            row.source_type,
            registrable.join(", ")
        )));
    }
    if row.query_mode == QueryMode::Internal {
        return Err(ApiError::unprocessable(
            "query_mode 'internal' is reserved for the seeded svc_* tables",
        ));
    }
    if row.source_query.is_some() && row.query_mode != QueryMode::Materialized {
        return Err(ApiError::unprocessable(
            "source_query is only allowed with query_mode 'materialized'",
        ));
    }
    if let Some(s) = &row.sync_schedule {
        s.parse::<Schedule>()
            .map_err(|e| ApiError::unprocessable(format!("sync_schedule: {e}")))?;
    }
    Ok(())
}

fn refuse_internal(existing: &RegistryRow) -> Result<()> {
    if existing.query_mode == QueryMode::Internal || existing.source_type == "internal" {
        return Err(ApiError::conflict(format!(
            "'{}' is an internal table; internal tables are read-only and cannot be edited or deleted",
            existing.id
        )));
    }
    Ok(())
}

/// The registered, non-internal row with this id (404 / 409 otherwise).
async fn editable(state: &AppState, id: &str) -> Result<RegistryRow> {
    let existing = state
        .store
        .table_by_id(id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("Table '{id}' is not registered")))?;
    refuse_internal(&existing)?;
    Ok(existing)
}

/// Whether [`register`] created the row or replaced an existing one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Registered {
    /// A new row.
    Created,
    /// An existing row was updated (upsert).
    Updated,
}

/// Registers a table, or updates it when the id exists (upsert).
pub async fn register(state: &AppState, actor: &Actor, mut row: RegistryRow) -> Result<Registered> {
    validate(state, &row)?;
    let existing = state.store.table_by_id(&row.id).await?;
    if let Some(e) = &existing {
        refuse_internal(e)?;
    }
    row.registered_by = existing
        .as_ref()
        .and_then(|e| e.registered_by.clone())
        .or(actor.user_id.clone());
    state.store.upsert_table(&row).await?;
    let mut event = Event::new("registry.register")
        .resource(format!("table:{}", row.id))
        .param("row", snapshot(&row));
    if let Some(e) = &existing {
        event = event.before(snapshot(e));
    }
    state.audit.write(actor, event).await;
    state.flush_table(&row.id).await;
    Ok(if existing.is_some() {
        Registered::Updated
    } else {
        Registered::Created
    })
}

/// Applies a partial change to a registered table; returns the stored row.
pub async fn update(
    state: &AppState,
    actor: &Actor,
    id: &str,
    change: impl FnOnce(&mut RegistryRow),
) -> Result<RegistryRow> {
    let existing = editable(state, id).await?;
    let mut row = existing.clone();
    change(&mut row);
    validate(state, &row)?;
    state.store.upsert_table(&row).await?;
    state
        .audit
        .write(
            actor,
            Event::new("registry.update")
                .resource(format!("table:{id}"))
                .param("row", snapshot(&row))
                .before(snapshot(&existing)),
        )
        .await;
    state.flush_table(id).await;
    Ok(state.store.table_by_id(id).await?.unwrap_or(row))
}

/// Removes a table from the registry.
pub async fn unregister(state: &AppState, actor: &Actor, id: &str) -> Result<()> {
    let existing = editable(state, id).await?;
    state.store.delete_table(id).await?;
    state
        .audit
        .write(
            actor,
            Event::new("registry.unregister")
                .resource(format!("table:{id}"))
                .before(snapshot(&existing)),
        )
        .await;
    state.flush_table(id).await;
    Ok(())
}

/// Seeds the internal tables idempotently and removes stale internal rows.
pub async fn seed_internal_tables(state: &AppState) -> anyhow::Result<()> {
    let keep: Vec<&str> = ROSTER.iter().map(|t| t.id).collect();
    for removed in state.store.prune_internal_tables(&keep).await? {
        tracing::info!(table = %removed, "removed stale internal table");
        state.flush_table(&removed).await;
    }
    for t in ROSTER {
        let row = RegistryRow {
            id: t.id.into(),
            name: t.display_name.into(),
            source_type: "internal".into(),
            bucket: Some(INTERNAL_BUCKET.into()),
            source_table: Some(t.backing_table.into()),
            query_mode: QueryMode::Internal,
            source_query: None,
            sync_schedule: None,
            description: None,
            registered_by: Some("system_seed".into()),
            registered_at: None,
            updated_at: None,
        };
        let current = state.store.table_by_id(t.id).await?;
        let unchanged = current.as_ref().is_some_and(|c| {
            c.name == row.name
                && c.source_type == row.source_type
                && c.bucket == row.bucket
                && c.source_table == row.source_table
                && c.query_mode == row.query_mode
        });
        if !unchanged {
            state.store.upsert_table(&row).await?;
            state.flush_table(t.id).await;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn table_ids() {
        assert!(is_valid_table_id("orders.v2-final_x"));
        for bad in ["", "a/b", "../x", "a b", &"x".repeat(129)] {
            assert!(!is_valid_table_id(bad), "{bad}");
        }
    }

    #[tokio::test]
    async fn every_change_flushes_the_table_once_and_internal_rows_are_protected() {
        let (store, dir) = crate::store::testing::sqlite().await;
        let state = AppState::new(store, b"k", crate::server::console_config(dir.0.clone()));
        let flushed = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let count = Arc::new(AtomicUsize::new(0));
        {
            let (flushed, count) = (flushed.clone(), count.clone());
            state.caches.register(Arc::new(move |id: &str| {
                flushed.lock().unwrap().push(id.to_string());
                count.fetch_add(1, Ordering::SeqCst);
            }));
        }
        seed_internal_tables(&state).await.unwrap();
        let seeded = count.load(Ordering::SeqCst);
        seed_internal_tables(&state).await.unwrap();
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
            sync_schedule: Some("every 15m".into()),
            description: None,
            registered_by: None,
            registered_at: None,
            updated_at: None,
        };
        flushed.lock().unwrap().clear();
        assert_eq!(
            register(&state, &actor, row.clone()).await.unwrap(),
            Registered::Created
        );
        assert_eq!(
            register(&state, &actor, row).await.unwrap(),
            Registered::Updated
        );
        update(&state, &actor, "orders", |r| {
            r.description = Some("d".into())
        })
        .await
        .unwrap();
        unregister(&state, &actor, "orders").await.unwrap();
        assert_eq!(*flushed.lock().unwrap(), vec!["orders"; 4]);

        let err = unregister(&state, &actor, "svc_audit").await.unwrap_err();
        assert_eq!(err.status().as_u16(), 409);
        let err = update(&state, &actor, "svc_audit", |r| r.description = None)
            .await
            .unwrap_err();
        assert_eq!(err.status().as_u16(), 409);
    }
}
