//! A pipeline run: scan the session root, read new and changed files in parallel on
//! blocking threads, store them through one writer in batched transactions, rebuild the
//! affected days' rollups, and record what happened.
//!
//! One run at a time: a local lock for this process and a store lease across replicas, so
//! a second caller gets a conflict instead of a duplicate pass.

use std::collections::HashMap;
use std::io::BufReader;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::Serialize;
use svc_core::clock::{format_ts, new_id, now};
use svc_core::Error;
use svc_store::usage::{DayRange, FileScope, FileState, ProcessedFile};
use svc_store::Store;
use tokio::sync::{mpsc, Notify};

use crate::attribution::Attribution;
use crate::extract::{extract, Context, Extracted, Owner, Problem};
use crate::files::{FoundFile, SessionFiles};

/// Failures in a row after which a file is parked until it changes or is reprocessed.
pub const PARK_AFTER_FAILURES: i64 = 3;
/// The store lease that keeps runs to one replica.
const LEASE: &str = "telemetry-pipeline";
/// How long a lease holds without being given back (a crashed holder's lease expires).
const LEASE_HOLD: Duration = Duration::from_secs(3600);
/// Files stored per transaction, at most.
const BATCH_FILES: usize = 64;
/// Events stored per transaction, about.
const BATCH_EVENTS: usize = 50_000;
/// Failed and problem files listed in a run's report.
const REPORT_FILES: usize = 50;

/// What started a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    /// The scheduler's interval.
    Schedule,
    /// An upload, after the debounce.
    Upload,
    /// An administrator's reprocess.
    Reprocess,
    /// A command or test.
    Manual,
}

impl Trigger {
    fn as_str(self) -> &'static str {
        match self {
            Self::Schedule => "schedule",
            Self::Upload => "upload",
            Self::Reprocess => "reprocess",
            Self::Manual => "manual",
        }
    }
}

/// A file that could not be read.
#[derive(Debug, Clone, Serialize)]
pub struct FileFailure {
    /// `<user dir>/<file name>`.
    pub session_file: String,
    /// Why.
    pub error: String,
    /// Failures in a row.
    pub failures: i64,
    /// Whether it is now parked.
    pub parked: bool,
}

/// A file that had lines it could not use.
#[derive(Debug, Clone, Serialize)]
pub struct ProblemFile {
    /// `<user dir>/<file name>`.
    pub session_file: String,
    /// How many.
    pub malformed_lines: u64,
    /// The first of them.
    pub problems: Vec<Problem>,
}

/// What a run did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RunReport {
    /// Run id.
    pub id: String,
    /// What started it.
    pub trigger: String,
    /// When it started.
    pub started_at: String,
    /// Files found.
    pub scanned: u64,
    /// Files read and stored.
    pub processed: u64,
    /// Files unchanged since their last run.
    pub unchanged: u64,
    /// Parked files left alone.
    pub parked: u64,
    /// Files that failed this run.
    pub failed: u64,
    /// Bytes read.
    pub bytes: u64,
    /// Events stored.
    pub events: u64,
    /// Lines read.
    pub lines: u64,
    /// Lines that could not be used.
    pub malformed_lines: u64,
    /// Wall time of the run.
    pub duration_ms: u64,
    /// Time spent reading and extracting, summed over the worker threads.
    pub parse_ms: u64,
    /// Time spent storing events and summaries.
    pub store_ms: u64,
    /// Time spent rebuilding rollups.
    pub rollup_ms: u64,
    /// The rollup days rebuilt (`all` for a full rebuild).
    pub rollup_days: Option<String>,
    /// Files that failed, with their errors.
    pub failures: Vec<FileFailure>,
    /// Files with unusable lines.
    pub problem_files: Vec<ProblemFile>,
}

/// The telemetry pipeline: session files in, events, summaries and rollups out.
#[derive(Debug)]
pub struct Pipeline {
    store: Store,
    files: SessionFiles,
    workers: usize,
    holder: String,
    running: tokio::sync::Mutex<()>,
    wake: Notify,
}

struct Job {
    file: FoundFile,
    owner: Owner,
    previous: Option<FileState>,
}

enum Outcome {
    Done(Box<Job>, Box<Extracted>, Duration),
    Failed(Box<Job>, String),
}

fn conflict() -> Error {
    Error::conflict("A telemetry pipeline run is already in progress; try again when it ends")
}

impl Pipeline {
    /// A pipeline over the store and the session root in `data_dir`.
    pub fn new(store: Store, files: SessionFiles) -> Arc<Self> {
        Arc::new(Self {
            store,
            files,
            workers: std::thread::available_parallelism().map_or(2, |n| n.get()),
            holder: format!("{}-{}", std::process::id(), new_id()),
            running: tokio::sync::Mutex::new(()),
            wake: Notify::new(),
        })
    }

    /// The session file root.
    pub fn files(&self) -> &SessionFiles {
        &self.files
    }

    /// Says a file arrived: a run follows after `debounce` of quiet (see [`Self::start`]).
    pub fn uploaded(&self) {
        self.wake.notify_one();
    }

    /// Starts the background task that runs the pipeline after uploads, `debounce` after
    /// the first one (uploads meanwhile join the same run).
    pub fn start(self: &Arc<Self>, debounce: Duration) {
        let me = Arc::clone(self);
        tokio::spawn(async move {
            loop {
                me.wake.notified().await;
                tokio::time::sleep(debounce).await;
                loop {
                    match me.run(Trigger::Upload, false).await {
                        Err(e) if e.status() == 409 => tokio::time::sleep(debounce).await,
                        Err(e) => {
                            tracing::warn!(error = %e, "telemetry run after upload failed");
                            break;
                        }
                        Ok(_) => break,
                    }
                }
            }
        });
    }

    /// Forgets the files in `scope` so the next run reads them again (new attribution and
    /// all); returns how many were forgotten.
    pub async fn forget(&self, scope: &FileScope) -> Result<u64, Error> {
        Ok(self.store.forget_session_files(scope).await?)
    }

    /// Deletes telemetry older than `days` days; returns (events, summaries) deleted.
    pub async fn prune(&self, days: u32) -> Result<(u64, u64), Error> {
        let _local = self.running.try_lock().map_err(|_| conflict())?;
        let before = format_ts(Utc::now() - chrono::Duration::days(i64::from(days)));
        Ok(self.store.prune_usage(&before).await?)
    }

    /// One run; `full_rollup` rebuilds every day's rollups instead of the affected ones.
    /// A run already under way here or on another replica is a conflict (409).
    pub async fn run(&self, trigger: Trigger, full_rollup: bool) -> Result<RunReport, Error> {
        let _local = self.running.try_lock().map_err(|_| conflict())?;
        let until = format_ts(Utc::now() + LEASE_HOLD);
        if !self
            .store
            .claim_lease(LEASE, &self.holder, &until, &now())
            .await?
        {
            return Err(conflict());
        }
        let result = self.run_locked(trigger, full_rollup).await;
        if let Err(e) = self.store.release_lease(LEASE, &self.holder).await {
            tracing::warn!(error = %e, "could not release the telemetry lease; it expires");
        }
        result
    }

    async fn run_locked(&self, trigger: Trigger, full_rollup: bool) -> Result<RunReport, Error> {
        let clock = Instant::now();
        let mut report = RunReport {
            id: new_id(),
            trigger: trigger.as_str().into(),
            started_at: now(),
            ..RunReport::default()
        };
        self.store
            .start_telemetry_run(&report.id, &report.trigger, &report.started_at)
            .await?;
        let outcome = self.pass(&mut report, full_rollup).await;
        report.duration_ms = clock.elapsed().as_millis() as u64;
        let status = if outcome.is_ok() { "ok" } else { "failed" };
        let mut stored = serde_json::to_value(&report).unwrap_or_default();
        if let Err(e) = &outcome {
            stored["error"] = e.to_string().into();
        }
        if let Err(e) = self
            .store
            .finish_telemetry_run(&report.id, status, &stored)
            .await
        {
            tracing::warn!(error = %e, "could not record the telemetry run");
        }
        outcome.map(|()| report)
    }

    async fn pass(&self, report: &mut RunReport, full_rollup: bool) -> Result<(), Error> {
        let files = self.files.clone();
        let found = tokio::task::spawn_blocking(move || files.scan())
            .await
            .map_err(Error::internal)?
            .map_err(|e| Error::internal(format!("cannot list session files: {e}")))?;
        report.scanned = found.len() as u64;
        let mut states: HashMap<String, FileState> = self
            .store
            .session_file_states()
            .await?
            .into_iter()
            .map(|s| (s.session_file.clone(), s))
            .collect();
        let mut owners: HashMap<String, Owner> = HashMap::new();
        let mut jobs = Vec::new();
        for file in found {
            let previous = states.remove(&file.key());
            let same = previous
                .as_ref()
                .is_some_and(|s| s.size == file.size as i64 && s.mtime_ns == file.mtime_ns);
            match &previous {
                Some(s) if same && s.failures == 0 => {
                    report.unchanged += 1;
                    continue;
                }
                Some(s) if same && s.parked => {
                    report.parked += 1;
                    continue;
                }
                _ => {}
            }
            let dir = file.dir.as_str().to_owned();
            if !owners.contains_key(&dir) {
                let owner = match self.store.user_by_id(&dir).await? {
                    Some(u) => Owner {
                        user_id: Some(u.id),
                        username: u.email,
                    },
                    None => Owner {
                        user_id: None,
                        username: dir.clone(),
                    },
                };
                owners.insert(dir.clone(), owner);
            }
            jobs.push(Job {
                owner: owners[&dir].clone(),
                file,
                previous,
            });
        }
        let attribution = Arc::new(Attribution::new(self.store.attribution_rows().await?));
        let days = self.process(jobs, attribution, report).await?;
        let clock = Instant::now();
        if full_rollup {
            self.store.rebuild_usage_rollups(None).await?;
            report.rollup_days = Some("all".into());
        } else if let Some(d) = &days {
            self.store.rebuild_usage_rollups(Some(d)).await?;
            report.rollup_days = Some(format!("{}..{}", d.first, d.last));
        }
        report.rollup_ms = clock.elapsed().as_millis() as u64;
        Ok(())
    }

    /// Reads `jobs` on the worker threads and stores them as they finish.
    async fn process(
        &self,
        jobs: Vec<Job>,
        attribution: Arc<Attribution>,
        report: &mut RunReport,
    ) -> Result<Option<DayRange>, Error> {
        let queue = Arc::new(Mutex::new(jobs));
        let (tx, mut rx) = mpsc::channel::<Outcome>(self.workers * 2);
        let extracted_at = now();
        for _ in 0..self.workers {
            let (queue, tx, attribution) = (queue.clone(), tx.clone(), attribution.clone());
            let extracted_at = extracted_at.clone();
            tokio::task::spawn_blocking(move || loop {
                let Some(job) = queue.lock().expect("job queue").pop() else {
                    break;
                };
                if tx
                    .blocking_send(read_one(job, &attribution, &extracted_at))
                    .is_err()
                {
                    break;
                }
            });
        }
        drop(tx);
        let mut days = None;
        let mut batch: Vec<ProcessedFile> = Vec::new();
        let mut batch_events = 0;
        while let Some(outcome) = rx.recv().await {
            match outcome {
                Outcome::Done(job, x, took) => {
                    report.parse_ms += took.as_millis() as u64;
                    report.processed += 1;
                    report.bytes += x.bytes;
                    report.lines += x.lines;
                    report.events += x.events.len() as u64;
                    report.malformed_lines += x.malformed;
                    if x.malformed > 0 && report.problem_files.len() < REPORT_FILES {
                        report.problem_files.push(ProblemFile {
                            session_file: job.file.key(),
                            malformed_lines: x.malformed,
                            problems: x.problems.clone(),
                        });
                    }
                    batch_events += x.events.len();
                    batch.push(processed(&job, *x));
                    if batch.len() >= BATCH_FILES || batch_events >= BATCH_EVENTS {
                        days = DayRange::union(days, self.flush(&mut batch, report).await?);
                        batch_events = 0;
                    }
                }
                Outcome::Failed(job, error) => {
                    report.failed += 1;
                    let failure = self.fail(&job, error).await?;
                    if report.failures.len() < REPORT_FILES {
                        report.failures.push(failure);
                    }
                }
            }
        }
        days = DayRange::union(days, self.flush(&mut batch, report).await?);
        Ok(days)
    }

    async fn flush(
        &self,
        batch: &mut Vec<ProcessedFile>,
        report: &mut RunReport,
    ) -> Result<Option<DayRange>, Error> {
        let clock = Instant::now();
        let days = self.store.store_processed_files(batch).await?;
        report.store_ms += clock.elapsed().as_millis() as u64;
        batch.clear();
        Ok(days)
    }

    async fn fail(&self, job: &Job, error: String) -> Result<FileFailure, Error> {
        let mut state = job.previous.clone().unwrap_or_else(|| FileState {
            session_file: job.file.key(),
            user_dir: job.file.dir.to_string(),
            ..FileState::default()
        });
        state.size = job.file.size as i64;
        state.mtime_ns = job.file.mtime_ns;
        state.failures += 1;
        state.parked = state.failures >= PARK_AFTER_FAILURES;
        state.last_error = Some(error.clone());
        tracing::warn!(file = %state.session_file, error = %error, parked = state.parked, "session file failed");
        self.store.record_file_failure(&state).await?;
        Ok(FileFailure {
            session_file: state.session_file,
            error,
            failures: state.failures,
            parked: state.parked,
        })
    }
}

fn read_one(job: Job, attribution: &Attribution, extracted_at: &str) -> Outcome {
    let clock = Instant::now();
    let key = job.file.key();
    let mtime = DateTime::from_timestamp_nanos(job.file.mtime_ns);
    let cx = Context {
        session_file: &key,
        owner: &job.owner,
        mtime,
        attribution,
        extracted_at,
    };
    let result = std::fs::File::open(&job.file.path)
        .and_then(|f| extract(BufReader::with_capacity(1 << 20, f), &cx));
    match result {
        Ok(x) => Outcome::Done(Box::new(job), Box::new(x), clock.elapsed()),
        Err(e) => Outcome::Failed(Box::new(job), format!("cannot read the file: {e}")),
    }
}

fn processed(job: &Job, x: Extracted) -> ProcessedFile {
    let problems =
        (!x.problems.is_empty()).then(|| serde_json::to_string(&x.problems).unwrap_or_default());
    ProcessedFile {
        state: FileState {
            session_file: job.file.key(),
            user_dir: job.file.dir.to_string(),
            size: job.file.size as i64,
            mtime_ns: job.file.mtime_ns,
            content_hash: Some(x.hash),
            processed_at: Some(now()),
            events: x.events.len() as i64,
            lines: x.lines as i64,
            malformed_lines: x.malformed as i64,
            problems,
            failures: 0,
            last_error: None,
            parked: false,
        },
        summary: x.summary,
        events: x.events,
    }
}
