//! Numbered, idempotent migrations recorded in `schema_version`.
//!
//! Every step tolerates older or hand-made layouts: tables may already exist, columns may be
//! present or missing, legacy columns may linger. Steps add what is missing and never assume
//! a clean slate. Each step runs in its own transaction with its version row, so a failed
//! step leaves the recorded version where it was and the next start retries it.

use anyhow::Context as _;
use sqlx::{Any, Row, Transaction};

use super::schema::{self, Index, Table};
use super::{Backend, Store};

/// The schema version this binary migrates to.
pub const CURRENT_SCHEMA_VERSION: i64 = 60;

type Tx<'a> = Transaction<'a, Any>;

/// One rung of the ladder.
struct Step {
    version: i64,
    name: &'static str,
}

const STEPS: &[Step] = &[
    Step {
        version: 1,
        name: "base schema: users, groups, grants, tokens, registry, audit",
    },
    Step {
        version: 19,
        name: "drop legacy per-user data permissions and the public flag",
    },
    Step {
        version: 40,
        name: "audit_log request context columns and indices",
    },
    Step {
        version: 41,
        name: "the seven usage tables",
    },
    Step {
        version: 43,
        name: "user_observability_views",
    },
    Step {
        version: 44,
        name: "persistent metadata cache for remote tables",
    },
    Step {
        version: 45,
        name: "sync state and scheduled scripts",
    },
    Step {
        version: 46,
        name: "script run leases",
    },
    Step {
        version: 47,
        name: "column types in the metadata cache",
    },
    Step {
        version: 48,
        name: "telemetry pipeline: session file state, runs, job leases",
    },
    Step {
        version: 49,
        name: "usage events move to per-file parquet segments; per-file daily counts",
    },
    Step {
        version: 50,
        name: "event packs; the session list's errors-first index",
    },
    Step {
        version: 51,
        name: "corporate memory: knowledge items and votes",
    },
    Step {
        version: 52,
        name: "corporate memory tags, contradictions, duplicates; the plugin marketplace",
    },
    Step {
        version: 53,
        name: "corporate memory: tag rows carry their item's visibility and change time",
    },
    Step {
        version: 54,
        name: "registry: primary key and cursor column for incremental syncs",
    },
    Step {
        version: 55,
        name: "corporate memory: tag rows mark the one that counts their item; change times in seconds",
    },
    Step {
        version: 56,
        name: "corporate memory: the tree's group counts kept by triggers; bundle candidates by change time",
    },
    Step {
        version: 57,
        name: "corporate memory: bundle candidates by confidence, then change time",
    },
    Step {
        version: 58,
        name: "audit log: hourly and daily rollups for the activity cards and facets",
    },
    Step {
        version: 59,
        name: "audit log rollups: resources, and an errors-only slice",
    },
    Step {
        version: 60,
        name: "audit log rollups: six-hour and weekly periods",
    },
];

async fn apply(store: &Store, tx: &mut Tx<'_>, version: i64) -> anyhow::Result<()> {
    let b = store.backend;
    match version {
        1 => {
            for t in [
                &schema::USERS,
                &schema::USER_GROUPS,
                &schema::USER_GROUP_MEMBERS,
                &schema::RESOURCE_GRANTS,
                &schema::PERSONAL_ACCESS_TOKENS,
                &schema::TABLE_REGISTRY,
                &schema::AUDIT_LOG_BASE,
            ] {
                ensure_table(tx, b, t).await?;
            }
        }
        19 => {
            exec(tx, "DROP TABLE IF EXISTS dataset_permissions").await?;
            exec(tx, "DROP TABLE IF EXISTS access_requests").await?;
            drop_column(tx, b, "users", "role").await?;
            drop_column(tx, b, "table_registry", "is_public").await?;
        }
        40 => {
            ensure_table(tx, b, &schema::AUDIT_LOG_BASE).await?;
            ensure_columns(tx, b, "audit_log", schema::AUDIT_LOG_V40_COLUMNS).await?;
            ensure_indices(tx, schema::AUDIT_LOG_V40_INDICES).await?;
        }
        41 => {
            for t in schema::USAGE_TABLES {
                ensure_table(tx, b, t).await?;
            }
            ensure_indices(tx, schema::USAGE_INDICES).await?;
        }
        43 => {
            ensure_table(tx, b, &schema::USER_OBSERVABILITY_VIEWS).await?;
            ensure_indices(tx, schema::OBSERVABILITY_VIEW_INDICES).await?;
        }
        44 => ensure_table(tx, b, &schema::TABLE_METADATA_CACHE).await?,
        45 => {
            ensure_table(tx, b, &schema::SYNC_STATE).await?;
            ensure_table(tx, b, &schema::SCRIPTS).await?;
        }
        46 => {
            ensure_table(tx, b, &schema::SCRIPTS).await?;
            ensure_columns(tx, b, "scripts", schema::SCRIPTS_V46_COLUMNS).await?;
        }
        47 => {
            ensure_table(tx, b, &schema::TABLE_METADATA_CACHE).await?;
            ensure_columns(
                tx,
                b,
                "table_metadata_cache",
                schema::TABLE_METADATA_CACHE_V47_COLUMNS,
            )
            .await?;
        }
        48 => {
            for t in schema::USAGE_TABLES {
                ensure_table(tx, b, t).await?;
            }
            for t in [
                &schema::SESSION_FILE_STATE,
                &schema::TELEMETRY_RUNS,
                &schema::JOB_LEASES,
            ] {
                ensure_table(tx, b, t).await?;
            }
            ensure_indices(tx, schema::TELEMETRY_V48_INDICES).await?;
        }
        49 => {
            ensure_table(tx, b, &schema::SESSION_FILE_STATE).await?;
            ensure_columns(
                tx,
                b,
                "session_file_state",
                schema::SESSION_FILE_STATE_V49_COLUMNS,
            )
            .await?;
            ensure_table(tx, b, &schema::USAGE_FILE_DAILY).await?;
            ensure_indices(tx, schema::USAGE_V49_INDICES).await?;
            // The events are derived from the session files, which stay: forgetting what
            // was processed makes the next run write every file's segment and daily counts.
            exec(tx, "DROP TABLE IF EXISTS usage_events").await?;
            for table in [
                "session_file_state",
                "usage_session_summary",
                "usage_tool_daily",
                "usage_plugin_daily",
            ] {
                exec(tx, &format!("DELETE FROM {table}")).await?;
            }
        }
        50 => {
            ensure_table(tx, b, &schema::USAGE_EVENT_PACKS).await?;
            ensure_columns(
                tx,
                b,
                "session_file_state",
                schema::SESSION_FILE_STATE_V50_COLUMNS,
            )
            .await?;
            ensure_indices(tx, schema::USAGE_V50_INDICES).await?;
        }
        51 => {
            ensure_table(tx, b, &schema::KNOWLEDGE_ITEMS).await?;
            ensure_table(tx, b, &schema::KNOWLEDGE_VOTES).await?;
            ensure_indices(tx, schema::KNOWLEDGE_INDICES).await?;
        }
        52 => {
            ensure_columns(tx, b, "knowledge_items", schema::KNOWLEDGE_V52_COLUMNS).await?;
            for t in schema::KNOWLEDGE_V52_TABLES
                .iter()
                .chain(schema::MARKETPLACE_TABLES)
            {
                ensure_table(tx, b, t).await?;
            }
            ensure_indices(tx, schema::KNOWLEDGE_V52_INDICES).await?;
            ensure_indices(tx, schema::MARKETPLACE_INDICES).await?;
            // Items stored before v52 get their tag rows and duplicate keys from what they hold.
            crate::memory::backfill_v52(tx).await?;
        }
        53 => {
            ensure_columns(
                tx,
                b,
                "knowledge_item_tags",
                schema::KNOWLEDGE_V53_TAG_COLUMNS,
            )
            .await?;
            ensure_indices(tx, schema::KNOWLEDGE_V53_INDICES).await?;
            crate::memory::backfill_v53(tx).await?;
        }
        54 => ensure_table(tx, b, &schema::TABLE_REGISTRY).await?,
        55 => {
            ensure_columns(
                tx,
                b,
                "knowledge_item_tags",
                schema::KNOWLEDGE_V55_TAG_COLUMNS,
            )
            .await?;
            ensure_columns(tx, b, "knowledge_items", schema::KNOWLEDGE_V55_ITEM_COLUMNS).await?;
            crate::memory::backfill_v55(tx, b).await?;
            ensure_indices(tx, schema::KNOWLEDGE_V55_INDICES).await?;
            // Their successors cover everything they did.
            exec(tx, "DROP INDEX IF EXISTS idx_knowledge_tags_recent").await?;
            exec(tx, "DROP INDEX IF EXISTS idx_knowledge_bundle").await?;
        }
        56 => {
            ensure_table(tx, b, &schema::KNOWLEDGE_TREE_COUNTS).await?;
            for sql in crate::memory::counts::v56_statements(b) {
                exec(tx, &sql).await?;
            }
            ensure_indices(tx, schema::KNOWLEDGE_V56_INDICES).await?;
            exec(tx, "DROP INDEX IF EXISTS idx_knowledge_bundle_rank").await?;
        }
        57 => {
            ensure_indices(tx, schema::KNOWLEDGE_V57_INDICES).await?;
            exec(tx, "DROP INDEX IF EXISTS idx_knowledge_bundle_recent").await?;
        }
        58 => {
            for t in [
                &schema::AUDIT_ROLLUP,
                &schema::AUDIT_ROLLUP_MS,
                &schema::AUDIT_ROLLUP_STATE,
            ] {
                ensure_table(tx, b, t).await?;
            }
        }
        59 => {
            // The rollups are derived: rebuilt in the new shape, counted again by the job.
            for t in [&schema::AUDIT_ROLLUP, &schema::AUDIT_ROLLUP_MS] {
                exec(tx, &format!("DROP TABLE IF EXISTS {}", t.name)).await?;
                ensure_table(tx, b, t).await?;
            }
            exec(tx, "DELETE FROM audit_rollup_state").await?;
        }
        60 => {
            // Reads now expect six-hour and week rows wherever coverage holds such a period:
            // the derived rows are dropped and counted again by the job.
            for t in ["audit_rollup", "audit_rollup_ms", "audit_rollup_state"] {
                exec(tx, &format!("DELETE FROM {t}")).await?;
            }
        }
        other => anyhow::bail!("no migration step {other}"),
    }
    Ok(())
}

/// Adds the columns of `wanted` that `table` lacks.
async fn ensure_columns(
    tx: &mut Tx<'_>,
    b: Backend,
    table: &str,
    wanted: &[schema::Column],
) -> anyhow::Result<()> {
    let existing = columns(tx, b, table).await?;
    for c in wanted {
        if !existing.iter().any(|e| e.eq_ignore_ascii_case(c.name)) {
            exec(
                tx,
                &format!("ALTER TABLE {table} ADD COLUMN {}", c.render(b, true)),
            )
            .await?;
        }
    }
    Ok(())
}

/// Brings the store to [`CURRENT_SCHEMA_VERSION`].
pub(super) async fn run(store: &Store) -> anyhow::Result<()> {
    ensure_version_table(store).await?;
    let recorded = recorded_version(store).await?;
    if recorded > CURRENT_SCHEMA_VERSION {
        anyhow::bail!(
            "the state store is at schema v{recorded}, newer than this svc-server (v{CURRENT_SCHEMA_VERSION}); \
             upgrade svc-server instead of downgrading the store"
        );
    }
    for step in STEPS {
        let mut tx = store.begin_write().await?;
        if store.backend == Backend::Postgres {
            // Replicas starting together must not run the same step twice at once.
            exec(
                &mut tx,
                "SELECT 1 AS locked FROM pg_advisory_xact_lock(734001)",
            )
            .await?;
        }
        // Re-read inside the transaction: another process may have just applied it.
        let current: i64 = sqlx::query("SELECT COALESCE(MAX(version), 0) AS v FROM schema_version")
            .fetch_one(&mut *tx)
            .await?
            .try_get("v")?;
        if current >= step.version {
            continue;
        }
        apply(store, &mut tx, step.version)
            .await
            .with_context(|| format!("migration v{} ({}) failed", step.version, step.name))?;
        sqlx::query("INSERT INTO schema_version (version, applied_at) VALUES ($1, $2)")
            .bind(step.version)
            .bind(svc_core::clock::now())
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        tracing::info!(
            version = step.version,
            step = step.name,
            "applied migration"
        );
    }
    Ok(())
}

async fn ensure_version_table(store: &Store) -> anyhow::Result<()> {
    let int = match store.backend {
        Backend::Sqlite => "INTEGER",
        Backend::Postgres => "BIGINT",
    };
    sqlx::query(&format!(
        "CREATE TABLE IF NOT EXISTS schema_version (version {int} NOT NULL, applied_at TEXT)"
    ))
    .execute(&store.pool)
    .await?;
    Ok(())
}

/// The highest recorded step; 0 when the table is missing or empty.
pub(super) async fn recorded_version(store: &Store) -> anyhow::Result<i64> {
    let mut conn = store.pool.acquire().await?;
    let mut tx: Tx<'_> = sqlx::Acquire::begin(&mut *conn).await?;
    if !table_exists(&mut tx, store.backend, "schema_version").await? {
        return Ok(0);
    }
    let v: i64 = sqlx::query("SELECT COALESCE(MAX(version), 0) AS v FROM schema_version")
        .fetch_one(&mut *tx)
        .await?
        .try_get("v")?;
    Ok(v)
}

async fn exec(tx: &mut Tx<'_>, sql: &str) -> anyhow::Result<()> {
    sqlx::query(sql)
        .execute(&mut **tx)
        .await
        .with_context(|| format!("while running: {sql}"))?;
    Ok(())
}

/// Creates the table, or adds whichever of its columns an existing table lacks.
async fn ensure_table(tx: &mut Tx<'_>, b: Backend, t: &Table) -> anyhow::Result<()> {
    if !table_exists(tx, b, t.name).await? {
        return exec(tx, &t.create_sql(b)).await;
    }
    let existing = columns(tx, b, t.name).await?;
    for c in t.columns {
        if !existing.iter().any(|e| e.eq_ignore_ascii_case(c.name)) {
            exec(
                tx,
                &format!("ALTER TABLE {} ADD COLUMN {}", t.name, c.render(b, true)),
            )
            .await?;
        }
    }
    Ok(())
}

async fn ensure_indices(tx: &mut Tx<'_>, indices: &[Index]) -> anyhow::Result<()> {
    for i in indices {
        exec(tx, &i.create_sql()).await?;
    }
    Ok(())
}

async fn drop_column(tx: &mut Tx<'_>, b: Backend, table: &str, column: &str) -> anyhow::Result<()> {
    if columns(tx, b, table)
        .await?
        .iter()
        .any(|c| c.eq_ignore_ascii_case(column))
    {
        exec(tx, &format!("ALTER TABLE {table} DROP COLUMN {column}")).await?;
    }
    Ok(())
}

async fn table_exists(tx: &mut Tx<'_>, b: Backend, table: &str) -> anyhow::Result<bool> {
    let sql = match b {
        Backend::Sqlite => "SELECT name FROM sqlite_master WHERE type = 'table' AND name = $1",
        Backend::Postgres => {
            "SELECT table_name::text AS name FROM information_schema.tables \
             WHERE table_schema = current_schema() AND table_name = $1"
        }
    };
    Ok(sqlx::query(sql)
        .bind(table)
        .fetch_optional(&mut **tx)
        .await?
        .is_some())
}

/// Column names of a table (empty when the table does not exist).
pub(super) async fn columns(
    tx: &mut Tx<'_>,
    b: Backend,
    table: &str,
) -> anyhow::Result<Vec<String>> {
    let sql = match b {
        Backend::Sqlite => "SELECT name FROM pragma_table_info($1)",
        Backend::Postgres => {
            "SELECT column_name::text AS name FROM information_schema.columns \
             WHERE table_schema = current_schema() AND table_name = $1"
        }
    };
    let rows = sqlx::query(sql).bind(table).fetch_all(&mut **tx).await?;
    rows.iter()
        .map(|r| Ok(r.try_get::<String, _>("name")?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ladder_is_ordered_and_ends_at_the_current_version() {
        assert!(STEPS.windows(2).all(|w| w[0].version < w[1].version));
        assert_eq!(
            STEPS.last().map(|s| s.version),
            Some(CURRENT_SCHEMA_VERSION)
        );
    }
}
