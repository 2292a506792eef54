//! Scheduled scripts: one read-only SQL statement, registered by an admin, run through the
//! query engine with its owner's access (their grants, their row filters on internal tables).
//! A script with a `target_table` writes its result as that local table's parquet file,
//! atomically, and registers the table on its first run.

use std::sync::Arc;
use std::time::Instant;

use chrono::Utc;
use svc_auth::jwt::TokenType;
use svc_catalog::schedule::{parse_ts, Schedule};
use svc_core::table_id::is_valid_table_id;
use svc_core::Error;
use svc_store::audit::{Actor, Event};
use svc_store::registry::{QueryMode, RegistryRow};
use svc_store::scripts::{Lease, ScriptRow};

use crate::state::AppState;

type Result<T> = std::result::Result<T, Error>;

/// What an admin asks to store.
#[derive(Debug, Clone)]
pub struct NewScript {
    /// Unique name (the table id pattern).
    pub name: String,
    /// One read-only statement.
    pub sql: String,
    /// Optional schedule.
    pub schedule: Option<String>,
    /// Optional local table the result replaces.
    pub target_table: Option<String>,
}

/// Validates and stores a script owned by the actor.
pub async fn create(state: &AppState, actor: &Actor, new: NewScript) -> Result<ScriptRow> {
    if !is_valid_table_id(&new.name) {
        return Err(Error::invalid(format!(
            "script name '{}' must be {}",
            new.name,
            svc_core::table_id::TABLE_ID_RULE
        )));
    }
    svc_query::statement::parse_read_only(&new.sql)
        .map_err(|e| Error::bad_request(format!("script SQL refused: {}", e.0)))?;
    if let Some(s) = &new.schedule {
        s.parse::<Schedule>()
            .map_err(|e| Error::invalid(format!("schedule: {e}")))?;
    }
    if let Some(t) = &new.target_table {
        check_target(state, t).await?;
    }
    if state
        .store
        .list_scripts()
        .await?
        .iter()
        .any(|s| s.name == new.name)
    {
        return Err(Error::conflict(format!(
            "a script named '{}' already exists",
            new.name
        )));
    }
    let owner_id = actor
        .user_id
        .clone()
        .ok_or_else(|| Error::forbidden("scripts are owned by a user"))?;
    let row = ScriptRow {
        id: svc_core::clock::new_id(),
        name: new.name,
        sql: new.sql,
        schedule: new.schedule,
        owner_id,
        target_table: new.target_table,
        created_at: Some(svc_core::clock::now()),
        last_run: None,
        last_status: None,
        last_error: None,
        last_rows: None,
    };
    state.store.create_script(&row).await?;
    state
        .audit
        .write(
            actor,
            Event::new("script.create")
                .resource(format!("script:{}", row.name))
                .param("target_table", row.target_table.clone())
                .param("schedule", row.schedule.clone()),
        )
        .await;
    Ok(row)
}

/// The bucket of tables that scripts write.
const SCRIPTS_BUCKET: &str = "scripts";

/// The source kind of the tables scripts write: plain local tables, whose driver says where
/// their data lives ([`svc_plugin_api::SourceDriver::local_file`]).
const SCRIPT_TARGET_SOURCE: &str = "local";

/// A target must be a valid id and either free or a table a script wrote: a script never
/// overwrites data that came from anywhere else.
async fn check_target(state: &AppState, id: &str) -> Result<()> {
    if !is_valid_table_id(id) {
        return Err(Error::invalid(format!(
            "target_table '{id}' must be {}",
            svc_core::table_id::TABLE_ID_RULE
        )));
    }
    match state.store.table_by_id(id).await? {
        Some(t)
            if t.source_type != SCRIPT_TARGET_SOURCE
                || t.query_mode != QueryMode::Local
                || t.bucket.as_deref() != Some(SCRIPTS_BUCKET) =>
        {
            Err(Error::conflict(format!(
                "target_table '{id}' is already registered ({} table, bucket {}); a script may only write a new table or one a script wrote",
                t.source_type,
                t.bucket.as_deref().unwrap_or("none")
            )))
        }
        _ => Ok(()),
    }
}

/// How a run ended.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RunOutcome {
    /// The script.
    pub id: String,
    /// Rows the statement returned (and wrote, with a target).
    pub rows: u64,
    /// Whether the row cap cut the result.
    pub truncated: bool,
    /// The table written, if any.
    pub target_table: Option<String>,
}

/// Runs a claimed script now; records and audits the outcome.
pub async fn run(state: &Arc<AppState>, script: &ScriptRow, actor: &Actor) -> Result<RunOutcome> {
    let started = Instant::now();
    let result = execute(state, script).await;
    let recorded = match &result {
        Ok(o) => {
            state
                .store
                .finish_script(&script.id, Ok(i64::try_from(o.rows).unwrap_or(i64::MAX)))
                .await
        }
        Err(e) => {
            state
                .store
                .finish_script(&script.id, Err(&e.to_string()))
                .await
        }
    };
    if let Err(e) = recorded {
        tracing::warn!(script = %script.name, error = %e, "could not record the script run");
    }
    let event = Event::new("script.run").resource(format!("script:{}", script.name));
    state
        .audit
        .write_outcome(actor, event, started, &result, |e, o| {
            e.param("rows", o.rows)
                .param("truncated", o.truncated)
                .param("target_table", o.target_table.clone())
        })
        .await;
    result
}

/// The statement under the owner's access, its rows counted or written to the target.
async fn execute(state: &Arc<AppState>, script: &ScriptRow) -> Result<RunOutcome> {
    let owner = owner(state, &script.owner_id).await?;
    let mut plan = None;
    // A script's result is written whole or not at all: one row past the maximum fails the
    // run before the target is touched.
    let cap = state.config.query.script_max_rows;
    let mut rows = state
        .engine
        .run(&owner, &script.sql, cap, &mut plan, None)
        .await?;
    let mut count = 0u64;
    let mut writer = None;
    let target_path = match &script.target_table {
        Some(t) => {
            check_target(state, t).await?;
            let target = target_row(script, t).table_ref();
            let file = state
                .drivers
                .get(&target.source_type)
                .and_then(|d| d.local_file(&target))
                .ok_or_else(|| {
                    Error::internal(format!("no driver keeps '{t}' in a file on this server"))
                })?;
            Some(file)
        }
        None => None,
    };
    if let Some(path) = &target_path {
        writer = Some(
            svc_catalog::drivers::AtomicParquet::create(path, rows.schema().clone())
                .map_err(Error::from)?,
        );
    }
    while let Some(batch) = rows.next().await? {
        count += batch.num_rows() as u64;
        if let Some(w) = writer.as_mut() {
            w.write(&batch).map_err(Error::from)?;
        }
    }
    let truncated = rows.truncated().unwrap_or(false);
    if truncated && writer.is_some() {
        // Dropping the writer removes its temporary file; the table keeps its last data.
        return Err(Error::invalid(format!(
            "The script's result has more than {cap} rows, the most a script may write \
             (SVC_SCRIPT_MAX_ROWS); the target table was left unchanged"
        )));
    }
    if let (Some(w), Some(table)) = (writer, &script.target_table) {
        w.commit().map_err(Error::from)?;
        register_target(state, script, table).await?;
        state.data_changed(table);
    }
    Ok(RunOutcome {
        id: script.id.clone(),
        rows: count,
        truncated,
        target_table: script.target_table.clone(),
    })
}

/// The owner as a caller: their grants and admin flag as they are now.
async fn owner(state: &AppState, user_id: &str) -> Result<svc_auth::Caller> {
    let user = state
        .store
        .user_by_id(user_id)
        .await?
        .filter(|u| u.active)
        .ok_or_else(|| Error::forbidden("the script's owner no longer exists or is deactivated"))?;
    let is_admin = state.store.is_admin(&user.id).await?;
    Ok(svc_auth::Caller {
        actor: Actor {
            user_id: Some(user.id.clone()),
            client_kind: svc_store::audit::ClientKind::Scheduler,
            client_ip: None,
            correlation_id: None,
            started: None,
        },
        user: std::sync::Arc::new(user),
        is_admin,
        token_type: TokenType::Session,
        token_id: None,
    })
}

/// The registry row of a table a script writes.
fn target_row(script: &ScriptRow, table: &str) -> RegistryRow {
    RegistryRow {
        source_type: SCRIPT_TARGET_SOURCE.into(),
        bucket: Some(SCRIPTS_BUCKET.into()),
        description: Some(format!("Written by script '{}'", script.name)),
        registered_by: Some(script.owner_id.clone()),
        ..RegistryRow::new_local(table)
    }
}

/// Registers the target as a local table the first time a script writes it.
async fn register_target(state: &AppState, script: &ScriptRow, table: &str) -> Result<()> {
    if state.store.table_by_id(table).await?.is_some() {
        return Ok(());
    }
    let actor = Actor {
        user_id: Some(script.owner_id.clone()),
        client_kind: svc_store::audit::ClientKind::Scheduler,
        client_ip: None,
        correlation_id: None,
        started: None,
    };
    state
        .registry
        .register(&actor, table, |row| *row = target_row(script, table))
        .await
        .map(|_| ())
}

/// This process's lease owner: `<replica>/<boot id>`. The replica id is kept in
/// `DATA_DIR/state/replica_id`, so a restarted server knows which leases its earlier process
/// held; the boot id tells that process from this one.
fn lease_owner(data_dir: &std::path::Path) -> &'static (String, String) {
    static OWNER: std::sync::OnceLock<(String, String)> = std::sync::OnceLock::new();
    OWNER.get_or_init(|| {
        let path = data_dir.join("state").join("replica_id");
        let replica = match std::fs::read_to_string(&path) {
            Ok(id) if uuid::Uuid::parse_str(id.trim()).is_ok() => id.trim().to_owned(),
            _ => {
                let id = uuid::Uuid::new_v4().to_string();
                if let Err(e) = std::fs::create_dir_all(data_dir.join("state"))
                    .and_then(|()| std::fs::write(&path, &id))
                {
                    tracing::warn!(path = %path.display(), error = %e, "cannot keep the replica id; a restart will not free this process's script leases early");
                }
                id
            }
        };
        let owner = format!("{replica}/{}", uuid::Uuid::new_v4());
        (replica, owner)
    })
}

/// Marks a script running under this process's lease; false when it already runs. The
/// lease lasts twice the query timeout (a run cannot outlive its query's deadline by more);
/// a run whose lease expired is taken to have died with its process.
pub async fn claim(state: &AppState, id: &str) -> Result<bool> {
    let now = Utc::now();
    let lease = chrono::Duration::from_std(state.config.query.timeout * 2)
        .unwrap_or(chrono::Duration::hours(1));
    let (_, owner) = lease_owner(&state.config.data_dir);
    let (at, until, stale) = (
        svc_core::clock::format_ts(now),
        svc_core::clock::format_ts(now + lease),
        svc_core::clock::format_ts(now - lease),
    );
    Ok(state
        .store
        .claim_script(
            id,
            &Lease {
                owner,
                now: &at,
                until: &until,
                stale_before: &stale,
            },
        )
        .await?)
}

/// At start: ends the runs this replica's previous process claimed and never finished (it
/// was killed), so they can run again at once instead of when their lease expires.
pub async fn release_dead_leases(state: &AppState) -> Result<u64> {
    let (replica, owner) = lease_owner(&state.config.data_dir);
    let freed = state.store.release_dead_leases(replica, owner).await?;
    if freed > 0 {
        tracing::warn!(
            freed,
            "script runs left unfinished by the previous process were marked failed"
        );
    }
    Ok(freed)
}

/// Claims every script whose schedule is due and runs each in the background; returns the
/// claimed ids. The claim is one conditional update, so two replicas never run one script
/// twice.
pub async fn run_due(state: &Arc<AppState>, actor: &Actor) -> Result<Vec<String>> {
    let started = Instant::now();
    let now = Utc::now();
    let mut claimed = Vec::new();
    for script in state.store.list_scripts().await? {
        let Some(schedule) = script
            .schedule
            .as_deref()
            .and_then(|s| s.parse::<Schedule>().ok())
        else {
            continue;
        };
        let last = script.last_run.as_deref().and_then(parse_ts);
        if !schedule.is_due(last, now) {
            continue;
        }
        if !claim(state, &script.id).await? {
            continue;
        }
        claimed.push(script.id.clone());
        let (state, actor) = (state.clone(), actor.clone());
        tokio::spawn(async move {
            let _ = run(&state, &script, &actor).await;
        });
    }
    state
        .audit
        .write(
            actor,
            Event::new("scripts.run_due")
                .param("claimed", claimed.clone())
                .timed(started),
        )
        .await;
    Ok(claimed)
}
