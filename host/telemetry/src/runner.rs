//! A pipeline run: scan the session root, read new and changed files in parallel on
//! blocking threads — each worker writes its file's events as a parquet segment — then
//! commit the files' states, summaries and daily counts through one writer in batched
//! transactions, rebuild the affected days' rollups, and record what happened.
//!
//! One run at a time: a local lock for this process and a store lease across replicas, so
//! a second caller gets a conflict instead of a duplicate pass.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::Serialize;
use svc_core::clock::{format_ts, new_id, now};
use svc_core::Error;
use svc_driver_internal::events::SegmentWriter;
use svc_driver_internal::EventSegments;
use svc_store::packs::EventPack;
use svc_store::usage::{DayRange, FileScope, FileState, ProcessedFile};
use svc_store::Store;
use tokio::sync::{mpsc, Notify};

use crate::attribution::Attribution;
use crate::compact::{self, CompactReport};
use crate::events::{self, FileCounts, UsageEvent};
use crate::extract::{extract_path, Context, Extracted, Failure, Owner, Problem};
use crate::files::{FoundFile, SessionFiles};

/// Failures in a row after which a file is parked until it changes or is reprocessed.
pub const PARK_AFTER_FAILURES: i64 = 3;
/// The store lease that keeps runs to one replica.
const LEASE: &str = "telemetry-pipeline";
/// How long a lease holds without being given back (a crashed holder's lease expires).
const LEASE_HOLD: Duration = Duration::from_secs(3600);
/// Files committed per transaction, at most (their events are already in segments; the
/// store gets their states, summaries and daily counts).
const BATCH_FILES: usize = 64;
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
    /// Time spent writing event segments, summed over the worker threads.
    pub segment_ms: u64,
    /// Time spent committing states, summaries and daily counts to the store.
    pub store_ms: u64,
    /// Time spent rebuilding rollups.
    pub rollup_ms: u64,
    /// The rollup days rebuilt (`all` for a full rebuild).
    pub rollup_days: Option<String>,
    /// The loose segments packed at the end of the run.
    pub compaction: CompactReport,
    /// Why packing failed, if it did (the run's events are stored either way; reads are
    /// slower until a later run packs them).
    pub compaction_error: Option<String>,
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
    segments: EventSegments,
    /// Segments and packs no longer named by the store, removed at the next run (not at
    /// once: a query that listed them a moment ago may still be reading them).
    retired: Mutex<Vec<String>>,
    /// Whether this process has swept segments no state names (a crash's leftovers).
    swept: AtomicBool,
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

/// What a worker made of one file.
struct Read {
    file: ProcessedFile,
    extracted: Extracted,
    parse: Duration,
    segment: Duration,
}

enum Outcome {
    Done(Box<Job>, Box<Read>),
    Failed(Box<Job>, String),
}

fn conflict() -> Error {
    Error::conflict("A telemetry pipeline run is already in progress; try again when it ends")
}

impl Pipeline {
    /// A pipeline over the store, the session root and the event segments.
    pub fn new(store: Store, files: SessionFiles, segments: EventSegments) -> Arc<Self> {
        Arc::new(Self {
            store,
            files,
            segments,
            retired: Mutex::default(),
            swept: AtomicBool::new(false),
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

    /// Deletes telemetry from before the day `days` days ago (UTC): events leave their
    /// segments (rewritten whole, like any segment), summaries and daily counts leave the
    /// store. Returns (events, summaries) deleted.
    pub async fn prune(&self, days: u32) -> Result<(u64, u64), Error> {
        self.exclusive(|| async {
            let cutoff = (Utc::now() - chrono::Duration::days(i64::from(days)))
                .format("%Y-%m-%d")
                .to_string();
            let (mut rewritten, mut old, mut deleted) = (Vec::new(), Vec::new(), 0);
            for state in self.store.session_file_states().await? {
                if state
                    .first_at
                    .as_deref()
                    .is_none_or(|t| t >= cutoff.as_str())
                {
                    continue;
                }
                let segments = self.segments.clone();
                let replaced = state.segment.clone();
                let (state, gone) = tokio::task::spawn_blocking({
                    let cutoff = cutoff.clone();
                    move || prune_segment(&segments, state, &cutoff)
                })
                .await
                .map_err(Error::internal)??;
                deleted += gone;
                old.extend(replaced);
                rewritten.push(state);
            }
            let stored = self.store.prune_usage(&cutoff, &rewritten).await;
            // The old segments and dissolved packs once the new segments are named; the new
            // segments if they never were.
            self.retired
                .lock()
                .expect("retired segments")
                .extend(match &stored {
                    Ok((_, dissolved)) => old.into_iter().chain(dissolved.iter().cloned()).collect(),
                    Err(_) => rewritten.into_iter().filter_map(|s| s.segment).collect::<Vec<_>>(),
                });
            let (summaries, _) = stored?;
            let days = DayRange {
                first: String::new(),
                last: cutoff,
            };
            self.store.rebuild_usage_rollups(Some(&days)).await?;
            if let Err(e) = self.pack().await {
                tracing::warn!(error = %e, "could not pack the pruned events; reads stay slower until a run packs them");
            }
            Ok((deleted, summaries))
        })
        .await
    }

    /// Runs `work` as the only pipeline work here and on every replica sharing the store
    /// (409 otherwise).
    async fn exclusive<T, F: std::future::Future<Output = Result<T, Error>>>(
        &self,
        work: impl FnOnce() -> F,
    ) -> Result<T, Error> {
        let _local = self.running.try_lock().map_err(|_| conflict())?;
        let until = format_ts(Utc::now() + LEASE_HOLD);
        if !self
            .store
            .claim_lease(LEASE, &self.holder, &until, &now())
            .await?
        {
            return Err(conflict());
        }
        let result = work().await;
        if let Err(e) = self.store.release_lease(LEASE, &self.holder).await {
            tracing::warn!(error = %e, "could not release the telemetry lease; it expires");
        }
        result
    }

    /// One run; `full_rollup` rebuilds every day's rollups instead of the affected ones.
    /// A run already under way here or on another replica is a conflict (409).
    pub async fn run(&self, trigger: Trigger, full_rollup: bool) -> Result<RunReport, Error> {
        self.exclusive(|| self.run_locked(trigger, full_rollup))
            .await
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
        let packs = self.store.event_packs().await?;
        self.remove_retired(&states, &packs);
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
        match self.pack().await {
            Ok(packed) => report.compaction = packed,
            Err(e) => {
                tracing::warn!(error = %e, "could not pack event segments");
                report.compaction_error = Some(e.to_string());
            }
        }
        Ok(())
    }

    /// Packs the loose segments; the packs it merged are removed at the next run.
    async fn pack(&self) -> Result<CompactReport, Error> {
        let packed = compact::compact(&self.store, &self.segments).await?;
        self.retired
            .lock()
            .expect("retired segments")
            .extend(packed.retired.iter().cloned());
        Ok(packed)
    }

    /// Removes the segments and packs retired by earlier runs and, once per process, any
    /// file that neither a state nor a pack names (left by a crash between writing a file
    /// and committing the row naming it).
    fn remove_retired(&self, states: &HashMap<String, FileState>, packs: &[EventPack]) {
        let retired = std::mem::take(&mut *self.retired.lock().expect("retired segments"));
        if self.swept.swap(true, Ordering::Relaxed) {
            for name in retired {
                if let Ok(path) = self.segments.path(&name) {
                    let _ = std::fs::remove_file(path);
                }
            }
        } else {
            let keep: HashSet<String> = states
                .values()
                .filter_map(|s| s.segment.clone())
                .chain(packs.iter().map(|p| p.name.clone()))
                .collect();
            let removed = self.segments.remove_unlisted(&keep);
            if removed > 0 {
                tracing::info!(removed, "removed event segments no session file names");
            }
        }
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
            let (extracted_at, segments) = (extracted_at.clone(), self.segments.clone());
            tokio::task::spawn_blocking(move || {
                let mut buffer = Vec::new();
                loop {
                    let Some(job) = queue.lock().expect("job queue").pop() else {
                        break;
                    };
                    let outcome =
                        read_one(job, &attribution, &segments, &extracted_at, &mut buffer);
                    if tx.blocking_send(outcome).is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        let mut days = None;
        let mut batch: Vec<ProcessedFile> = Vec::new();
        while let Some(outcome) = rx.recv().await {
            match outcome {
                Outcome::Done(job, read) => {
                    let Read {
                        file,
                        extracted: x,
                        parse,
                        segment,
                    } = *read;
                    report.parse_ms += parse.as_millis() as u64;
                    report.segment_ms += segment.as_millis() as u64;
                    report.processed += 1;
                    report.bytes += x.bytes;
                    report.lines += x.lines;
                    report.events += file.state.events as u64;
                    report.malformed_lines += x.malformed;
                    if x.malformed > 0 && report.problem_files.len() < REPORT_FILES {
                        report.problem_files.push(ProblemFile {
                            session_file: job.file.key(),
                            malformed_lines: x.malformed,
                            problems: x.problems.clone(),
                        });
                    }
                    batch.push(file);
                    if batch.len() >= BATCH_FILES {
                        days = DayRange::union(days, self.flush(&mut batch, report).await?);
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
        let stored = self.store.store_processed_files(batch).await;
        report.store_ms += clock.elapsed().as_millis() as u64;
        let mut retired = self.retired.lock().expect("retired segments");
        let days = match stored {
            Ok((days, replaced)) => {
                retired.extend(replaced);
                days
            }
            Err(e) => {
                // Nothing names the new segments: they go with the next run.
                retired.extend(batch.iter().filter_map(|f| f.state.segment.clone()));
                return Err(e.into());
            }
        };
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

fn read_one(
    job: Job,
    attribution: &Attribution,
    segments: &EventSegments,
    extracted_at: &str,
    buffer: &mut Vec<u8>,
) -> Outcome {
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
    // Events go to the segment chunk by chunk as the file is read; the segment is started
    // by the first chunk, so a file without events leaves none.
    let mut segment: Option<(String, SegmentWriter)> = None;
    let mut counts = FileCounts::default();
    let mut writing = Duration::ZERO;
    let sink = |chunk: &[UsageEvent]| -> Result<(), svc_plugin_api::DriverError> {
        let clock = Instant::now();
        counts.add(chunk);
        if segment.is_none() {
            let name = format!("{}.parquet", new_id());
            let file = segments.create(&name)?;
            segment = Some((name, file));
        }
        let (_, file) = segment.as_mut().expect("started above");
        file.write(&events::to_batch(chunk))?;
        writing += clock.elapsed();
        Ok(())
    };
    let result = extract_path(&job.file.path, buffer, &cx, sink);
    let x = match result {
        Ok(x) => x,
        Err(Failure::Read(e)) => {
            return Outcome::Failed(Box::new(job), format!("cannot read the file: {e}"))
        }
        Err(Failure::Sink(e)) => {
            return Outcome::Failed(Box::new(job), format!("cannot write its events: {e}"))
        }
    };
    svc_metrics::telemetry::transcript(x.bytes, x.events as usize, x.malformed);
    let parse = clock.elapsed().saturating_sub(writing);
    let clock = Instant::now();
    let segment = match segment {
        None => None,
        Some((name, file)) => match file.commit() {
            Ok(_) => Some(name),
            Err(e) => {
                return Outcome::Failed(Box::new(job), format!("cannot write its events: {e}"))
            }
        },
    };
    let file = processed(&job, &x, counts, segment);
    Outcome::Done(
        Box::new(job),
        Box::new(Read {
            file,
            extracted: x,
            parse,
            segment: writing + clock.elapsed(),
        }),
    )
}

fn processed(
    job: &Job,
    x: &Extracted,
    counts: FileCounts,
    segment: Option<String>,
) -> ProcessedFile {
    let problems =
        (!x.problems.is_empty()).then(|| serde_json::to_string(&x.problems).unwrap_or_default());
    let (first_at, last_at) = counts.span();
    let user_key = job
        .owner
        .user_id
        .as_deref()
        .unwrap_or(job.file.dir.as_str());
    ProcessedFile {
        state: FileState {
            session_file: job.file.key(),
            user_dir: job.file.dir.to_string(),
            user_id: job.owner.user_id.clone(),
            segment,
            first_at,
            last_at,
            size: job.file.size as i64,
            mtime_ns: job.file.mtime_ns,
            content_hash: Some(x.hash.clone()),
            processed_at: Some(now()),
            events: x.events as i64,
            lines: x.lines as i64,
            malformed_lines: x.malformed as i64,
            problems,
            failures: 0,
            last_error: None,
            parked: false,
        },
        summary: x.summary.clone(),
        daily: counts.daily(&job.file.key(), user_key),
    }
}

/// Rewrites a file's segment without the events before `cutoff` (`YYYY-MM-DD`); returns
/// its new state and how many events left.
fn prune_segment(
    segments: &EventSegments,
    mut state: FileState,
    cutoff: &str,
) -> Result<(FileState, u64), Error> {
    use svc_plugin_api::arrow::array::{Array, AsArray, BooleanArray};
    use svc_plugin_api::arrow::compute::filter_record_batch;

    let Some(old) = state.segment.take() else {
        return Ok((state, 0));
    };
    let failed = |e: svc_plugin_api::DriverError| {
        Error::internal(format!("cannot prune {}: {e}", state.session_file))
    };
    let mut kept = Vec::new();
    let (mut first, mut last): (Option<String>, Option<String>) = (None, None);
    for batch in segments.read(&old).map_err(failed)? {
        let at = batch
            .column_by_name("occurred_at")
            .map(|c| c.as_string::<i32>().clone())
            .ok_or_else(|| Error::internal("an event segment without occurred_at"))?;
        let keep: BooleanArray = (0..at.len())
            .map(|i| Some(at.is_valid(i) && at.value(i) >= cutoff))
            .collect();
        for i in (0..at.len()).filter(|&i| keep.value(i)) {
            let t = at.value(i);
            if first.as_deref().is_none_or(|f| t < f) {
                first = Some(t.to_owned());
            }
            if last.as_deref().is_none_or(|l| t > l) {
                last = Some(t.to_owned());
            }
        }
        kept.push(filter_record_batch(&batch, &keep).map_err(Error::internal)?);
    }
    let rows: usize = kept.iter().map(|b| b.num_rows()).sum();
    let gone = (state.events.max(0) as u64).saturating_sub(rows as u64);
    if rows > 0 {
        let name = format!("{}.parquet", new_id());
        let batch = svc_plugin_api::arrow::compute::concat_batches(
            &svc_driver_internal::events::keyed_schema(),
            &kept,
        )
        .map_err(Error::internal)?;
        segments.write(&name, &batch).map_err(failed)?;
        state.segment = Some(name);
    }
    state.events = rows as i64;
    state.first_at = first;
    state.last_at = last;
    Ok((state, gone))
}

#[cfg(test)]
#[path = "runner_tests.rs"]
mod tests;
