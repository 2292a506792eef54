//! The in-process scheduler: periodic sync, due scripts, warehouse metadata refresh, the
//! telemetry pipeline and its daily prune, audit retention and the audit rollups.
//!
//! Jobs run the same code the operational endpoints run (never HTTP to ourselves) under the
//! scheduler's identity, so every run is audited with `client_kind = scheduler`. With
//! PostgreSQL several replicas may share one store; exactly one of them, the holder of a
//! session-level advisory lock, runs the jobs. If its connection drops, the lock is released
//! and another replica takes over at its next tick. With SQLite the store belongs to one
//! process, which always leads.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::Rng;
use serde::Serialize;
use svc_store::audit::{Actor, Event};
use svc_store::{Backend, Store};

use crate::jobs::sync::Targets;
use crate::state::AppState;

/// The advisory lock key held by the leading replica ("svc sched").
const LEADER_LOCK_KEY: i64 = 0x7376_6320_7363_6864;

/// A periodic job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Job {
    /// A sync pass over materialized tables whose schedule is due.
    Sync,
    /// Scripts whose schedule is due.
    Scripts,
    /// A full refresh of remote tables' metadata (the cache warmup).
    WarehouseMetadataRefresh,
    /// Daily pruning of old telemetry.
    TelemetryPrune,
    /// The telemetry pipeline over new and changed session files.
    UsageProcessor,
    /// Dropping audit rows past `SVC_AUDIT_RETENTION_DAYS` (not scheduled when unset).
    AuditRetention,
    /// Counting closed hours of the audit log into the activity rollups.
    AuditRollup,
    /// Fetching every curated marketplace and re-reading its plugins.
    MarketplaceSync,
}

impl Job {
    /// Its name in audit rows, the status API and metrics (the serde name).
    pub fn name(self) -> &'static str {
        match self {
            Self::Sync => "sync",
            Self::Scripts => "scripts",
            Self::WarehouseMetadataRefresh => "warehouse_metadata_refresh",
            Self::TelemetryPrune => "telemetry_prune",
            Self::UsageProcessor => "usage_processor",
            Self::AuditRetention => "audit_retention",
            Self::AuditRollup => "audit_rollup",
            Self::MarketplaceSync => "marketplace_sync",
        }
    }

    /// The variable that sets its interval, and the default in seconds.
    fn interval_variable(self) -> (&'static str, u64) {
        match self {
            Self::Sync => ("SCHEDULER_DATA_REFRESH_INTERVAL", 900),
            Self::Scripts => ("SCHEDULER_SCRIPT_RUN_INTERVAL", 60),
            Self::WarehouseMetadataRefresh => {
                ("SCHEDULER_WAREHOUSE_METADATA_REFRESH_INTERVAL", 14_400)
            }
            Self::TelemetryPrune => ("SCHEDULER_TELEMETRY_PRUNE_INTERVAL", 86_400),
            Self::UsageProcessor => ("SCHEDULER_USAGE_PROCESSOR_INTERVAL", 600),
            Self::AuditRetention => ("SCHEDULER_AUDIT_RETENTION_INTERVAL", 3_600),
            Self::AuditRollup => ("SCHEDULER_AUDIT_ROLLUP_INTERVAL", 60),
            Self::MarketplaceSync => ("SCHEDULER_MARKETPLACE_SYNC_INTERVAL", 86_400),
        }
    }

    const ALL: [Self; 8] = [
        Self::Sync,
        Self::Scripts,
        Self::WarehouseMetadataRefresh,
        Self::TelemetryPrune,
        Self::UsageProcessor,
        Self::AuditRetention,
        Self::AuditRollup,
        Self::MarketplaceSync,
    ];
}

/// Scheduler settings, read from `SCHEDULER_*` variables at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchedulerConfig {
    /// `SCHEDULER_ENABLED` (default on).
    pub enabled: bool,
    /// `SCHEDULER_TICK_SECONDS` (default 30; at most the shortest interval).
    pub tick: Duration,
    /// `SCHEDULER_STARTUP_GRACE_SECONDS` (default 60): holds the first tick.
    pub grace: Duration,
    /// `SCHEDULER_WAREHOUSE_METADATA_INITIAL_OFFSET_MAX_SECONDS` (default 900).
    pub metadata_offset_max: Duration,
    /// Each job's interval.
    pub intervals: Vec<(Job, Duration)>,
}

fn seconds(
    get: &dyn Fn(&str) -> Option<String>,
    name: &str,
    default: u64,
    zero_ok: bool,
) -> Result<u64, String> {
    let Some(raw) = get(name) else {
        return Ok(default);
    };
    match raw.trim().parse::<i64>() {
        Ok(n) if n > 0 || (zero_ok && n == 0) => Ok(n as u64),
        _ => Err(format!(
            "{name} must be a {} whole number of seconds, not '{raw}'",
            if zero_ok { "non-negative" } else { "positive" }
        )),
    }
}

impl SchedulerConfig {
    /// Reads the settings; an invalid value is an error naming its variable.
    pub fn from_env(get: &dyn Fn(&str) -> Option<String>) -> Result<Self, String> {
        let enabled = match get("SCHEDULER_ENABLED").map(|v| v.trim().to_ascii_lowercase()) {
            None => true,
            Some(v) if matches!(v.as_str(), "1" | "true" | "yes" | "on") => true,
            Some(v) if matches!(v.as_str(), "0" | "false" | "no" | "off") => false,
            Some(v) => {
                return Err(format!(
                    "SCHEDULER_ENABLED must be true or false, not '{v}'"
                ))
            }
        };
        let intervals = Job::ALL
            .iter()
            .map(|&job| {
                let (name, default) = job.interval_variable();
                Ok((
                    job,
                    Duration::from_secs(seconds(get, name, default, false)?),
                ))
            })
            .collect::<Result<Vec<_>, String>>()?;
        let tick = Duration::from_secs(seconds(get, "SCHEDULER_TICK_SECONDS", 30, false)?);
        let shortest = intervals.iter().map(|(_, d)| *d).min().unwrap_or(tick);
        if tick > shortest {
            return Err(format!(
                "SCHEDULER_TICK_SECONDS ({}) must not exceed the shortest job interval ({} s)",
                tick.as_secs(),
                shortest.as_secs()
            ));
        }
        // Unlike the intervals, a non-positive offset means "no offset", as documented.
        let offset = match get("SCHEDULER_WAREHOUSE_METADATA_INITIAL_OFFSET_MAX_SECONDS") {
            None => 900,
            Some(raw) => raw.trim().parse::<i64>().map(|n| n.max(0) as u64).map_err(|_| {
                format!("SCHEDULER_WAREHOUSE_METADATA_INITIAL_OFFSET_MAX_SECONDS must be a whole number of seconds, not '{raw}'")
            })?,
        };
        Ok(Self {
            enabled,
            tick,
            grace: Duration::from_secs(seconds(get, "SCHEDULER_STARTUP_GRACE_SECONDS", 60, true)?),
            metadata_offset_max: Duration::from_secs(offset),
            intervals,
        })
    }
}

/// One job's last run, as the status endpoint shows it.
#[derive(Debug, Clone, Serialize)]
pub struct JobStatus {
    /// Which job.
    pub job: Job,
    /// Seconds between runs.
    pub interval_seconds: u64,
    /// When it last ran (UTC).
    pub last_run_at: Option<String>,
    /// What happened.
    pub last_outcome: Option<String>,
    /// Runs since start.
    pub runs: u64,
}

/// What the scheduler is doing, shared with the status endpoint.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SchedulerStatus {
    /// Whether the scheduler runs on this server.
    pub enabled: bool,
    /// Whether this replica runs the jobs now.
    pub leader: bool,
    /// Ticks so far.
    pub ticks: u64,
    /// Per job.
    pub jobs: Vec<JobStatus>,
}

/// The shared status cell.
pub type SharedStatus = Arc<Mutex<SchedulerStatus>>;

/// Who runs the jobs among replicas of one store.
enum Leadership {
    /// SQLite: one process owns the store.
    Sole,
    /// PostgreSQL: the connection that holds the advisory lock, once taken.
    Postgres(Option<sqlx::AnyConnection>),
}

impl Leadership {
    fn new(store: &Store) -> Self {
        match store.backend() {
            Backend::Sqlite => Self::Sole,
            Backend::Postgres => Self::Postgres(None),
        }
    }

    /// Whether this replica leads now: keeps the lock while its connection lives, tries to
    /// take it otherwise.
    async fn check(&mut self, store: &Store) -> bool {
        let Self::Postgres(held) = self else {
            return true;
        };
        if let Some(conn) = held.as_mut() {
            if sqlx::query("SELECT 1").execute(&mut *conn).await.is_ok() {
                return true;
            }
            tracing::warn!("scheduler lost its leader connection; the lock is released");
            *held = None;
        }
        let Ok(conn) = store.pool().acquire().await else {
            return false;
        };
        let mut conn = conn.detach();
        let locked: Result<bool, _> = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
            .bind(LEADER_LOCK_KEY)
            .fetch_one(&mut conn)
            .await;
        if matches!(locked, Ok(true)) {
            tracing::info!("this replica now runs the scheduled jobs");
            *held = Some(conn);
            true
        } else {
            false
        }
    }
}

/// Starts the scheduler in the background (a no-op when disabled).
pub fn start(state: Arc<AppState>, config: SchedulerConfig, warmed_at_start: bool) {
    {
        let mut status = state.scheduler.lock().expect("scheduler lock");
        status.enabled = config.enabled;
        status.jobs = config
            .intervals
            .iter()
            .map(|(job, every)| JobStatus {
                job: *job,
                interval_seconds: every.as_secs(),
                last_run_at: None,
                last_outcome: None,
                runs: 0,
            })
            .collect();
    }
    if !config.enabled {
        tracing::info!("scheduler disabled (SCHEDULER_ENABLED)");
        return;
    }
    tokio::spawn(run(state, config, warmed_at_start));
}

async fn run(state: Arc<AppState>, config: SchedulerConfig, warmed_at_start: bool) {
    tokio::time::sleep(config.grace).await;
    let start = Instant::now();
    // Every job is due at the first tick, except the metadata refresh: a random offset up to
    // the maximum spreads replicas and restarts apart, and when the start-up warmup has just
    // filled the cache the offset counts back from a full interval instead, so the cache is
    // not refreshed twice in a row.
    let mut next: HashMap<Job, Instant> =
        config.intervals.iter().map(|(j, _)| (*j, start)).collect();
    let jitter = config
        .metadata_offset_max
        .mul_f64(rand::thread_rng().gen_range(0.0..=1.0));
    if let Some((_, every)) = config
        .intervals
        .iter()
        .find(|(j, _)| *j == Job::WarehouseMetadataRefresh)
    {
        let first = if warmed_at_start {
            every.saturating_sub(jitter)
        } else {
            jitter
        };
        next.insert(Job::WarehouseMetadataRefresh, start + first);
    }
    let mut leadership = Leadership::new(&state.store);
    let mut ticker = tokio::time::interval(config.tick);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let leader = leadership.check(&state.store).await;
        {
            let mut status = state.scheduler.lock().expect("scheduler lock");
            status.leader = leader;
            status.ticks += 1;
        }
        if !leader {
            continue;
        }
        let now = Instant::now();
        for &(job, every) in &config.intervals {
            if next.get(&job).is_some_and(|due| now < *due) {
                continue;
            }
            if job == Job::AuditRetention && state.config.audit_retention_days.is_none() {
                continue;
            }
            // Set before the run, success or not: a failing job retries on its cadence.
            next.insert(job, now + every);
            let started = Instant::now();
            let outcome = run_job(&state, job).await;
            record(&state, job, outcome, started).await;
        }
    }
}

/// Runs one job and says what happened. Long work (sync, refresh) continues in the
/// background; the job only starts it.
async fn run_job(state: &Arc<AppState>, job: Job) -> Result<String, String> {
    match job {
        Job::Sync => {
            if state.sync.trigger(
                state.clone(),
                Targets::Due,
                svc_plugin_api::SyncMode::Auto,
                Actor::scheduler(),
            ) {
                Ok("sync pass started".into())
            } else {
                Err("a sync pass is already running".into())
            }
        }
        Job::Scripts => crate::jobs::scripts::run_due(state, &Actor::scheduler())
            .await
            .map(|ids| format!("{} scripts claimed", ids.len()))
            .map_err(|e| e.to_string()),
        Job::WarehouseMetadataRefresh => match state.warmer.refresh_all().await {
            Ok(Some(n)) => Ok(format!("refreshing {n} remote tables")),
            Ok(None) => Err("a metadata refresh is already running".into()),
            Err(e) => Err(format!("state store: {e}")),
        },
        Job::TelemetryPrune => {
            let days = state.config.telemetry_retention_days;
            state
                .pipeline
                .prune(days)
                .await
                .map(|(events, sessions)| {
                    format!("pruned {events} events and {sessions} sessions older than {days} days")
                })
                .map_err(|e| e.to_string())
        }
        Job::UsageProcessor => state
            .pipeline
            .run(svc_telemetry::Trigger::Schedule, false)
            .await
            .map(|r| {
                format!(
                    "{} files processed, {} unchanged, {} failed; {} events",
                    r.processed, r.unchanged, r.failed, r.events
                )
            })
            .map_err(|e| e.to_string()),
        Job::AuditRetention => {
            let Some(days) = state.config.audit_retention_days else {
                return Ok("audit retention is off".into());
            };
            let cutoff = chrono::Utc::now() - chrono::Duration::days(i64::from(days));
            state
                .store
                .prune_audit(&svc_core::clock::format_ts(cutoff))
                .await
                .map(|n| format!("pruned {n} audit rows older than {days} days"))
                .map_err(|e| e.to_string())
        }
        Job::AuditRollup => state
            .store
            .roll_up_audit(chrono::Utc::now())
            .await
            .map(|run| {
                let rest = if run.complete { "" } else { "; more next run" };
                format!("{} audit hours rolled up{rest}", run.hours)
            })
            .map_err(|e| e.to_string()),
        Job::MarketplaceSync => {
            let reports = state
                .marketplace
                .sync(&Actor::scheduler(), None)
                .await
                .map_err(|e| e.to_string())?;
            let failed = reports.iter().filter(|r| r.error.is_some()).count();
            let line = format!("{} marketplaces synced, {failed} failed", reports.len());
            if failed == 0 {
                Ok(line)
            } else {
                Err(line)
            }
        }
    }
}

async fn record(state: &AppState, job: Job, outcome: Result<String, String>, started: Instant) {
    let name = job.name();
    svc_metrics::jobs::run(name, outcome.is_ok(), started.elapsed());
    let mut event = Event::new("scheduler.run").resource(name);
    let text = match &outcome {
        Ok(t) => {
            event = event.param("outcome", t.clone());
            t.clone()
        }
        Err(e) => {
            event = event.failed(409, e);
            format!("error: {e}")
        }
    };
    tracing::info!(job = %name, outcome = %text, "scheduled job ran");
    {
        let mut status = state.scheduler.lock().expect("scheduler lock");
        if let Some(j) = status.jobs.iter_mut().find(|j| j.job == job) {
            j.last_run_at = Some(svc_core::clock::now());
            j.last_outcome = Some(text);
            j.runs += 1;
        }
    }
    state
        .audit
        .write(&Actor::scheduler(), event.timed(started))
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k: &str| map.get(k).cloned()
    }

    #[test]
    fn defaults_and_overrides() {
        let c = SchedulerConfig::from_env(&env(&[])).unwrap();
        assert!(c.enabled);
        assert_eq!(c.grace, Duration::from_secs(60));
        assert_eq!(c.tick, Duration::from_secs(30));
        assert!(c
            .intervals
            .contains(&(Job::WarehouseMetadataRefresh, Duration::from_secs(14_400))));
        let c = SchedulerConfig::from_env(&env(&[
            ("SCHEDULER_STARTUP_GRACE_SECONDS", "0"),
            ("SCHEDULER_TICK_SECONDS", "1"),
            (
                "SCHEDULER_WAREHOUSE_METADATA_INITIAL_OFFSET_MAX_SECONDS",
                "-5",
            ),
        ]))
        .unwrap();
        assert_eq!(c.grace, Duration::ZERO);
        assert_eq!(c.metadata_offset_max, Duration::ZERO);
    }

    #[test]
    fn job_names_are_their_serde_names() {
        for job in [
            Job::Sync,
            Job::Scripts,
            Job::WarehouseMetadataRefresh,
            Job::TelemetryPrune,
            Job::UsageProcessor,
            Job::AuditRetention,
            Job::MarketplaceSync,
        ] {
            assert_eq!(serde_json::to_value(job).unwrap(), job.name());
        }
    }

    #[test]
    fn invalid_values_name_their_variable() {
        for (var, value) in [
            ("SCHEDULER_STARTUP_GRACE_SECONDS", "-1"),
            ("SCHEDULER_STARTUP_GRACE_SECONDS", ""),
            ("SCHEDULER_DATA_REFRESH_INTERVAL", "0"),
            ("SCHEDULER_SCRIPT_RUN_INTERVAL", "soon"),
            ("SCHEDULER_WAREHOUSE_METADATA_REFRESH_INTERVAL", "1.5"),
            ("SCHEDULER_ENABLED", "maybe"),
        ] {
            let err = SchedulerConfig::from_env(&env(&[(var, value)])).unwrap_err();
            assert!(err.contains(var), "{var}={value}: {err}");
        }
        let err =
            SchedulerConfig::from_env(&env(&[("SCHEDULER_TICK_SECONDS", "120")])).unwrap_err();
        assert!(err.contains("SCHEDULER_TICK_SECONDS"), "{err}");
    }
}
