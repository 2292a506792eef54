//! Folding the log into the tables.
//!
//! A compaction seals the log's open segment, folds every sealed segment the checkpoint has
//! not applied into the in-memory [`State`], and writes the tables through the shared atomic
//! writer (each table's old file stays readable until its new one is renamed over it). Only
//! then does the checkpoint move past those segments, and only then are they removed.
//!
//! A crash anywhere in between leaves the old checkpoint and the segments, and folding is
//! idempotent: issues and comments keep their greatest version, and the append-only tables
//! (changelog, events) are rebuilt from their first `checkpoint` rows plus the replayed
//! segments, so a half-finished compaction leaves no duplicate rows behind.

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use svc_driver_parquet::AtomicParquet;
use svc_plugin_api::arrow::array::{AsArray, BooleanArray};
use svc_plugin_api::arrow::compute::filter_record_batch;
use svc_plugin_api::arrow::datatypes::TimestampMillisecondType;
use svc_plugin_api::{DriverError, Result};

use crate::fold::{ChangelogRow, EventRow, State, Tombstones};
use crate::log::{read_segment, segments, sync_dir};
use crate::payload::parse;
use crate::tables::{self, TableKind};

/// Rows buffered before they are handed to a table's writer.
const FLUSH_ROWS: usize = 4_096;

/// Totals kept across restarts (the tracker adds what it counted since the last compaction).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Totals {
    /// Deliveries accepted (webhook and backfill).
    pub received: u64,
    /// Deliveries acknowledged as replays.
    pub duplicates: u64,
    /// Deliveries refused for their signature.
    pub rejected_signatures: u64,
    /// Deliveries refused for their body.
    pub bad_payloads: u64,
    /// Deliveries of projects the connection does not keep.
    pub filtered: u64,
    /// Accepted events of kinds svc does not fold (kept raw).
    pub unknown_events: u64,
    /// Events whose own time was far in the future (kept, ordered by receipt).
    pub future_timestamps: u64,
}

impl Totals {
    /// Field-wise sum.
    pub fn plus(self, o: Self) -> Self {
        Self {
            received: self.received + o.received,
            duplicates: self.duplicates + o.duplicates,
            rejected_signatures: self.rejected_signatures + o.rejected_signatures,
            bad_payloads: self.bad_payloads + o.bad_payloads,
            filtered: self.filtered + o.filtered,
            unknown_events: self.unknown_events + o.unknown_events,
            future_timestamps: self.future_timestamps + o.future_timestamps,
        }
    }
}

/// The last compaction.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct LastCompaction {
    /// When it finished, ms since the epoch.
    pub at_ms: i64,
    /// Events it folded in.
    pub events: u64,
    /// How long it took.
    pub seconds: f64,
    /// Why it failed, when it did.
    pub error: Option<String>,
}

/// What survives between compactions besides the tables.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Checkpoint {
    /// Log segments up to this number are in the tables.
    pub applied_through: u64,
    /// Rows of the events table that belong to applied segments.
    pub events_rows: u64,
    /// Rows of the changelog table that belong to applied segments.
    pub changelog_rows: u64,
    /// Deleted issues and comments.
    #[serde(default)]
    pub tombstones: Tombstones,
    /// Counters.
    #[serde(default)]
    pub totals: Totals,
    /// Backfill asks for issues updated since this time, ms since the epoch.
    #[serde(default)]
    pub backfill_since_ms: Option<i64>,
    /// The last compaction.
    #[serde(default)]
    pub last: Option<LastCompaction>,
}

/// Where a connection keeps its files.
#[derive(Debug, Clone)]
pub struct Paths {
    /// `ticketing/<name>/log`.
    pub log: PathBuf,
    /// `ticketing/<name>/checkpoint.json`.
    pub checkpoint: PathBuf,
    /// The tables' parquet files, in [`TableKind::ALL`] order.
    pub tables: [(TableKind, PathBuf); 4],
}

impl Paths {
    /// The file of one table.
    pub fn table(&self, kind: TableKind) -> &Path {
        &self
            .tables
            .iter()
            .find(|(k, _)| *k == kind)
            .expect("every kind")
            .1
    }
}

/// What one compaction did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Compacted {
    /// Events folded in.
    pub events: u64,
    /// Tables rewritten.
    pub tables: Vec<TableKind>,
    /// Rows per table after it, in [`TableKind::ALL`] order.
    pub rows: Vec<(TableKind, u64)>,
    /// Flagged events among them.
    pub future_timestamps: u64,
}

/// The fold state and checkpoint of one connection; owned by its compaction lock.
#[derive(Debug)]
pub struct Compactor {
    /// Files.
    pub paths: Paths,
    /// Current state.
    pub state: State,
    /// The last checkpoint written.
    pub checkpoint: Checkpoint,
    /// Days of raw events kept; 0 keeps all.
    pub retention_days: u32,
    /// A failed compaction left memory ahead of disk: read it back before the next.
    pub stale: bool,
}

impl Compactor {
    /// Reads the checkpoint and the tables.
    pub fn open(paths: Paths, retention_days: u32) -> Result<Self> {
        let mut this = Self {
            paths,
            state: State::default(),
            checkpoint: Checkpoint::default(),
            retention_days,
            stale: true,
        };
        this.reload()?;
        Ok(this)
    }

    fn reload(&mut self) -> Result<()> {
        let checkpoint = match std::fs::read(&self.paths.checkpoint) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                DriverError::internal(format!("{}: {e}", self.paths.checkpoint.display()))
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Checkpoint::default(),
            Err(e) => {
                return Err(DriverError::internal(format!(
                    "{}: {e}",
                    self.paths.checkpoint.display()
                )))
            }
        };
        let mut state = State::default();
        tables::load_issues(self.paths.table(TableKind::Issues), &mut state)?;
        tables::load_comments(self.paths.table(TableKind::Comments), &mut state)?;
        state.restore(checkpoint.tombstones.clone());
        tables::load_changes_seen(
            self.paths.table(TableKind::Changelog),
            checkpoint.changelog_rows,
            &mut state,
        )?;
        state.issues_dirty = false;
        state.comments_dirty = false;
        self.state = state;
        self.checkpoint = checkpoint;
        self.stale = false;
        Ok(())
    }

    /// Folds the sealed segments up to `sealed` into the tables; `totals` are the counters
    /// to record. On failure the old tables and checkpoint stay, and the next run starts
    /// from them.
    pub fn run(&mut self, sealed: u64, totals: Totals, now_ms: i64) -> Result<Compacted> {
        if self.stale {
            self.reload()?;
        }
        let began = Instant::now();
        let result = self.fold_and_write(sealed, totals, now_ms);
        match &result {
            Ok(_) => {}
            Err(e) => {
                self.stale = true;
                self.checkpoint.last = Some(LastCompaction {
                    at_ms: now_ms,
                    events: 0,
                    seconds: began.elapsed().as_secs_f64(),
                    error: Some(e.message.clone()),
                });
            }
        }
        result
    }

    fn fold_and_write(&mut self, sealed: u64, totals: Totals, now_ms: i64) -> Result<Compacted> {
        let began = Instant::now();
        let io = |what: &str, e: std::io::Error| DriverError::internal(format!("{what}: {e}"));
        let all = segments(&self.paths.log).map_err(|e| io("listing the log", e))?;
        let pending: Vec<_> = all
            .iter()
            .filter(|(n, _)| *n <= sealed && *n > self.checkpoint.applied_through)
            .collect();
        let missing = TableKind::ALL
            .iter()
            .any(|k| !self.paths.table(*k).exists());
        let mut done = Compacted::default();
        if pending.is_empty() && !missing {
            self.remove_segments(&all, sealed)?;
            return Ok(done);
        }

        let mut events = Appender::new(
            TableKind::Events,
            self.paths.table(TableKind::Events),
            self.checkpoint.events_rows,
            self.retention_cutoff(now_ms),
        );
        let mut changelog = Appender::new(
            TableKind::Changelog,
            self.paths.table(TableKind::Changelog),
            self.checkpoint.changelog_rows,
            None,
        );
        let mut event_rows: Vec<EventRow> = Vec::new();
        let mut change_rows: Vec<ChangelogRow> = Vec::new();
        for (_, path) in &pending {
            let read = read_segment(path).map_err(|e| io("reading the log", e))?;
            if read.torn_bytes > 0 {
                tracing::warn!(
                    segment = %path.display(),
                    bytes = read.torn_bytes,
                    "event log segment ends in a partial record (never acknowledged); skipped"
                );
            }
            for record in &read.records {
                let parsed = parse(&record.body, record.origin).ok();
                let row = self.state.apply(record, parsed.as_ref(), &mut change_rows);
                if row.flags.as_deref() == Some("future_timestamp") {
                    done.future_timestamps += 1;
                }
                event_rows.push(row);
                done.events += 1;
                if event_rows.len() >= FLUSH_ROWS {
                    events.write(&tables::events_batch(&event_rows)?)?;
                    event_rows.clear();
                }
                if change_rows.len() >= FLUSH_ROWS {
                    changelog.write(&tables::changelog_batch(&change_rows)?)?;
                    change_rows.clear();
                }
            }
        }
        if !event_rows.is_empty() || missing {
            events.write(&tables::events_batch(&event_rows)?)?;
        }
        if !change_rows.is_empty() || !self.paths.table(TableKind::Changelog).exists() {
            changelog.write(&tables::changelog_batch(&change_rows)?)?;
        }

        let mut commits: Vec<(TableKind, AtomicParquet)> = Vec::new();
        if let Some((w, _)) = events.finish() {
            commits.push((TableKind::Events, w));
        }
        if let Some((w, _)) = changelog.finish() {
            commits.push((TableKind::Changelog, w));
        }
        let comments_path = self.paths.table(TableKind::Comments);
        if self.state.comments_dirty || !comments_path.exists() {
            let batch = tables::comments_batch(&self.state.live_comments())?;
            commits.push((TableKind::Comments, whole(comments_path, &batch)?));
        }
        let issues_path = self.paths.table(TableKind::Issues);
        if self.state.issues_dirty || !issues_path.exists() {
            let batch = tables::issues_batch(&self.state.live_issues())?;
            commits.push((TableKind::Issues, whole(issues_path, &batch)?));
        }
        let mut next = self.checkpoint.clone();
        for (kind, writer) in commits {
            let rows = writer.rows();
            writer.commit()?;
            match kind {
                TableKind::Events => next.events_rows = rows,
                TableKind::Changelog => next.changelog_rows = rows,
                _ => {}
            }
            done.tables.push(kind);
        }
        next.applied_through = sealed.max(next.applied_through);
        next.tombstones = self.state.tombstones();
        next.totals = totals;
        next.totals.future_timestamps += done.future_timestamps;
        next.last = Some(LastCompaction {
            at_ms: now_ms,
            events: done.events,
            seconds: began.elapsed().as_secs_f64(),
            error: None,
        });
        write_checkpoint(&self.paths.checkpoint, &next)?;
        self.checkpoint = next;
        self.state.issues_dirty = false;
        self.state.comments_dirty = false;
        done.rows = self.rows();
        self.remove_segments(&all, sealed)?;
        Ok(done)
    }

    /// Rows per table as of the last compaction.
    pub fn rows(&self) -> Vec<(TableKind, u64)> {
        let live = |n: usize| n as u64;
        vec![
            (
                TableKind::Issues,
                live(
                    self.state
                        .issues
                        .values()
                        .filter(|s| s.issue.is_some())
                        .count(),
                ),
            ),
            (
                TableKind::Comments,
                live(
                    self.state
                        .comments
                        .values()
                        .filter(|s| s.row.is_some())
                        .count(),
                ),
            ),
            (TableKind::Changelog, self.checkpoint.changelog_rows),
            (TableKind::Events, self.checkpoint.events_rows),
        ]
    }

    fn retention_cutoff(&self, now_ms: i64) -> Option<i64> {
        (self.retention_days > 0).then(|| now_ms - i64::from(self.retention_days) * 86_400_000)
    }

    /// Removes segments the checkpoint covers.
    fn remove_segments(&self, all: &[(u64, PathBuf)], sealed: u64) -> Result<()> {
        let through = sealed.min(self.checkpoint.applied_through);
        let mut removed = false;
        for (n, path) in all {
            if *n <= through {
                std::fs::remove_file(path).map_err(|e| {
                    DriverError::internal(format!("removing {}: {e}", path.display()))
                })?;
                removed = true;
            }
        }
        if removed {
            sync_dir(&self.paths.log)
                .map_err(|e| DriverError::internal(format!("syncing the log directory: {e}")))?;
        }
        Ok(())
    }
}

/// A table written whole from one batch.
fn whole(path: &Path, batch: &svc_plugin_api::RecordBatch) -> Result<AtomicParquet> {
    let mut w = AtomicParquet::create(path, batch.schema())?;
    w.write(batch)?;
    Ok(w)
}

/// An append-only table: its first `keep` rows (less those past retention), then new rows.
/// The copy happens on the first write, so a table with nothing new is left alone.
struct Appender<'a> {
    kind: TableKind,
    path: &'a Path,
    keep: u64,
    cutoff_ms: Option<i64>,
    writer: Option<AtomicParquet>,
}

impl<'a> Appender<'a> {
    fn new(kind: TableKind, path: &'a Path, keep: u64, cutoff_ms: Option<i64>) -> Self {
        Self {
            kind,
            path,
            keep,
            cutoff_ms,
            writer: None,
        }
    }

    fn write(&mut self, batch: &svc_plugin_api::RecordBatch) -> Result<()> {
        if self.writer.is_none() {
            let mut w = AtomicParquet::create(self.path, self.kind.schema())?;
            let cutoff = self.cutoff_ms;
            tables::read_rows(self.path, Some(self.keep), |b| {
                let b = match cutoff {
                    None => b,
                    Some(cutoff) => {
                        let received = b
                            .column_by_name("received_at")
                            .and_then(|c| c.as_primitive_opt::<TimestampMillisecondType>())
                            .ok_or_else(|| {
                                DriverError::internal("events lack received_at".to_owned())
                            })?;
                        let keep: BooleanArray = received
                            .iter()
                            .map(|t| Some(t.unwrap_or(0) >= cutoff))
                            .collect();
                        filter_record_batch(&b, &keep)
                            .map_err(|e| DriverError::internal(e.to_string()))?
                    }
                };
                w.write(&b)
            })?;
            self.writer = Some(w);
        }
        let w = self.writer.as_mut().expect("opened above");
        if batch.num_rows() > 0 {
            w.write(batch)?;
        }
        Ok(())
    }

    fn finish(self) -> Option<(AtomicParquet, TableKind)> {
        self.writer.map(|w| (w, self.kind))
    }
}

/// Writes the checkpoint durably: a temporary file, synced, renamed, directory synced.
fn write_checkpoint(path: &Path, checkpoint: &Checkpoint) -> Result<()> {
    let io = |e: std::io::Error| DriverError::internal(format!("{}: {e}", path.display()));
    let dir = path
        .parent()
        .expect("the checkpoint lives in the connection's directory");
    let temp = dir.join(".checkpoint.json.tmp");
    let bytes = serde_json::to_vec(checkpoint).map_err(|e| DriverError::internal(e.to_string()))?;
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&temp).map_err(io)?;
        f.write_all(&bytes).map_err(io)?;
        f.sync_all().map_err(io)?;
    }
    std::fs::rename(&temp, path).map_err(io)?;
    sync_dir(dir).map_err(io)
}
