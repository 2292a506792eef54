//! Compaction: loose event segments into packs, the administrators' columnar copy.
//!
//! A pack is one parquet file holding the events of the files whose sessions began on one
//! UTC day, sorted by time, so a window's read opens a few large files whose row groups
//! the time filter prunes, instead of one small segment per session (the store's `packs`
//! module states the invariant; the internal driver reads packs and loose segments).
//!
//! Runs at the end of a pipeline run (or prune), under the pipeline's lease. A day with
//! loose files gets a new pack holding its previous pack's events and theirs, as long as
//! that stays under [`PACK_MAX_EVENTS`] (beyond it the loose files get a pack of their
//! own), so a day that keeps receiving sessions ends with one pack, rewritten in bounded
//! memory. Segments stay: they are the truth a pack is rebuilt from when it is dissolved.

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use serde::Serialize;
use svc_core::clock::new_id;
use svc_core::Error;
use svc_driver_internal::events::schema;
use svc_driver_internal::EventSegments;
use svc_plugin_api::arrow::array::Array;
use svc_plugin_api::arrow::compute::{concat, interleave_record_batch, sort_to_indices};
use svc_plugin_api::RecordBatch;
use svc_store::packs::{EventPack, LooseFile};
use svc_store::Store;
use tokio::task::JoinSet;

/// The most events one pack is built with: the build holds them in memory (about half a
/// kilobyte each), and a larger pack would be rewritten in full for each new file.
pub const PACK_MAX_EVENTS: i64 = 250_000;

/// What a compaction did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CompactReport {
    /// Packs written and committed.
    pub packs: u64,
    /// Loose files now in a pack.
    pub files: u64,
    /// Events in the packs written (previous packs' events included).
    pub events: u64,
    /// Packs built from inputs that changed meanwhile, and so thrown away.
    pub discarded: u64,
    /// Packs that could not be built (their files stay loose until a later run).
    pub failed: u64,
    /// The first such failure.
    pub error: Option<String>,
    /// Wall time.
    pub ms: u64,
    /// Files no longer referenced (merged packs), for the caller to remove later.
    #[serde(skip)]
    pub retired: Vec<String>,
}

/// One pack to build: earlier packs of the day to merge, and loose files.
struct Plan {
    day: String,
    merged: Vec<EventPack>,
    loose: Vec<LooseFile>,
}

impl Plan {
    /// The events the build holds.
    fn events(&self) -> i64 {
        let merged: i64 = self.merged.iter().map(|p| p.events).sum();
        merged + self.loose.iter().map(|f| f.events).sum::<i64>()
    }
}

/// Packs every loose file, and rebuilds alone each pack written before files had keys
/// (the internal driver's `events` module): until none is left, administrators' distinct
/// counts run over the strings.
pub async fn compact(store: &Store, segments: &EventSegments) -> Result<CompactReport, Error> {
    let clock = Instant::now();
    let mut report = CompactReport::default();
    let loose = store.loose_event_files().await?;
    let mut by_day: HashMap<String, Vec<EventPack>> = HashMap::new();
    let mut rekey = Vec::new();
    for pack in store.event_packs().await? {
        // An unreadable footer is not this step's to report: the pack's readers say so.
        if segments.has_keys(&pack.name).unwrap_or(true) {
            by_day.entry(pack.day.clone()).or_default().push(pack);
        } else {
            rekey.push(Plan {
                day: pack.day.clone(),
                merged: vec![pack],
                loose: Vec::new(),
            });
        }
    }
    if loose.is_empty() && rekey.is_empty() {
        return Ok(report);
    }
    // Packs are built on the blocking pool, several at once while the events they hold
    // together stay under one pack's cap (so memory is bounded as for one build), and
    // committed one by one as they finish: plans are disjoint, so the order is free.
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    let mut waiting = plans(loose, by_day).into_iter().chain(rekey).peekable();
    let mut building: JoinSet<(Result<EventPack, Error>, Plan, i64)> = JoinSet::new();
    let mut in_flight = 0;
    loop {
        while let Some(next) = waiting.peek() {
            let events = next.events();
            if building.len() >= workers
                || (!building.is_empty() && in_flight + events > PACK_MAX_EVENTS)
            {
                break;
            }
            let plan = waiting.next().expect("peeked");
            let (name, reader) = (new_pack_name(&plan.day), segments.clone());
            in_flight += events;
            building.spawn_blocking(move || (build(&reader, &name, &plan), plan, events));
        }
        let Some(done) = building.join_next().await else {
            break;
        };
        let (built, plan, events) = done.map_err(Error::internal)?;
        in_flight -= events;
        let built = match built {
            Ok(built) => built,
            // One unreadable input leaves its day loose (read from segments), not the rest.
            Err(e) => {
                tracing::warn!(error = %e, "could not build an event pack; its files stay loose");
                report.failed += 1;
                report.error.get_or_insert_with(|| e.to_string());
                continue;
            }
        };
        let merged: Vec<String> = plan.merged.iter().map(|p| p.name.clone()).collect();
        if store
            .commit_event_pack(&built, &merged, &plan.loose)
            .await?
        {
            report.packs += 1;
            report.files += plan.loose.len() as u64;
            report.events += built.events as u64;
            report.retired.extend(merged);
        } else {
            report.discarded += 1;
            if let Ok(path) = segments.path(&built.name) {
                let _ = std::fs::remove_file(path);
            }
        }
    }
    report.ms = clock.elapsed().as_millis() as u64;
    Ok(report)
}

fn new_pack_name(day: &str) -> String {
    let digits: String = day.chars().filter(char::is_ascii_digit).collect();
    format!("pack-{digits}-{}.parquet", new_id())
}

/// Groups the loose files by the day their sessions began, each day's with its packs when
/// the sum stays under the cap, in chunks under the cap otherwise.
fn plans(loose: Vec<LooseFile>, mut packs: HashMap<String, Vec<EventPack>>) -> Vec<Plan> {
    let mut days: BTreeMap<String, Vec<LooseFile>> = BTreeMap::new();
    for file in loose {
        let day = file.first_at.get(..10).unwrap_or(&file.first_at).to_owned();
        days.entry(day).or_default().push(file);
    }
    let mut out = Vec::new();
    for (day, files) in days {
        let mut merged = packs.remove(&day).unwrap_or_default();
        // The smallest packs first, as many as fit beside the loose files.
        merged.sort_by_key(|p| p.events);
        let mut total: i64 = files.iter().map(|f| f.events).sum();
        merged.retain(|p| {
            let fits = total + p.events <= PACK_MAX_EVENTS;
            if fits {
                total += p.events;
            }
            fits
        });
        let mut chunk = Plan {
            day: day.clone(),
            merged,
            loose: Vec::new(),
        };
        let mut events: i64 = chunk.merged.iter().map(|p| p.events).sum();
        for file in files {
            if !chunk.loose.is_empty() && events + file.events > PACK_MAX_EVENTS {
                out.push(std::mem::replace(
                    &mut chunk,
                    Plan {
                        day: day.clone(),
                        merged: Vec::new(),
                        loose: Vec::new(),
                    },
                ));
                events = 0;
            }
            events += file.events;
            chunk.loose.push(file);
        }
        out.push(chunk);
    }
    out
}

/// Rows per batch written to a pack: the sort's output is built this many rows at a time.
const WRITE_ROWS: usize = 8192;

/// Reads a plan's inputs, sorts their events by time and writes them as the pack `name`.
///
/// Only the time column is concatenated and sorted; the pack is then written in batches
/// gathered from the inputs, so the build holds its inputs once (not the two or three
/// copies a concatenate-sort-take would) plus one batch of output.
fn build(segments: &EventSegments, name: &str, plan: &Plan) -> Result<EventPack, Error> {
    let mut batches: Vec<RecordBatch> = Vec::new();
    let inputs = plan
        .merged
        .iter()
        .map(|p| &p.name)
        .chain(plan.loose.iter().map(|f| &f.segment));
    for input in inputs {
        batches.extend(segments.read(input).map_err(driver_error)?);
    }
    let time_column = schema()
        .index_of("occurred_at")
        .expect("events have occurred_at");
    let times: Vec<&dyn Array> = batches
        .iter()
        .map(|b| b.column(time_column).as_ref())
        .collect();
    let order = match times.as_slice() {
        [] => None,
        _ => {
            let all_times = concat(&times).map_err(Error::internal)?;
            Some(sort_to_indices(&all_times, None, None).map_err(Error::internal)?)
        }
    };
    // Where each input batch starts in the concatenated order.
    let starts: Vec<usize> = batches
        .iter()
        .scan(0, |at, b| {
            let start = *at;
            *at += b.num_rows();
            Some(start)
        })
        .collect();
    let locate = |row: u32| {
        let row = row as usize;
        let batch = starts.partition_point(|&s| s <= row) - 1;
        (batch, row - starts[batch])
    };
    let inputs: Vec<&RecordBatch> = batches.iter().collect();
    let mut file = segments.create_pack(name).map_err(driver_error)?;
    let mut events = 0;
    for rows in order.iter().flat_map(|o| o.values().chunks(WRITE_ROWS)) {
        let picks: Vec<(usize, usize)> = rows.iter().map(|&r| locate(r)).collect();
        let sorted = interleave_record_batch(&inputs, &picks).map_err(Error::internal)?;
        file.write(&sorted).map_err(driver_error)?;
        events += sorted.num_rows();
    }
    let bytes = file.commit().map_err(driver_error)?.bytes;
    let times = plan
        .merged
        .iter()
        .map(|p| (&p.first_at, &p.last_at))
        .chain(plan.loose.iter().map(|f| (&f.first_at, &f.last_at)));
    let first_at = times
        .clone()
        .map(|t| t.0)
        .min()
        .cloned()
        .unwrap_or_default();
    let last_at = times.map(|t| t.1).max().cloned().unwrap_or_default();
    Ok(EventPack {
        name: name.to_owned(),
        day: plan.day.clone(),
        first_at,
        last_at,
        events: events as i64,
        bytes: bytes as i64,
    })
}

fn driver_error(e: svc_plugin_api::DriverError) -> Error {
    Error::internal(e.message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loose(key: &str, day: &str, events: i64) -> LooseFile {
        LooseFile {
            session_file: key.into(),
            segment: format!("{key}.parquet"),
            first_at: format!("{day}T10:00:00.000000Z"),
            last_at: format!("{day}T11:00:00.000000Z"),
            events,
        }
    }

    fn pack(name: &str, day: &str, events: i64) -> EventPack {
        EventPack {
            name: name.into(),
            day: day.into(),
            first_at: format!("{day}T00:00:00.000000Z"),
            last_at: format!("{day}T23:00:00.000000Z"),
            events,
            bytes: 1,
        }
    }

    #[test]
    fn a_day_is_one_pack_under_the_cap_and_chunks_over_it() {
        let packs = HashMap::from([(
            "2026-01-01".to_owned(),
            vec![
                pack("big", "2026-01-01", PACK_MAX_EVENTS - 5),
                pack("small", "2026-01-01", 5),
            ],
        )]);
        let files = vec![
            loose("a", "2026-01-01", 3),
            loose("b", "2026-01-02", PACK_MAX_EVENTS - 1),
            loose("c", "2026-01-02", 2),
        ];
        let plans = plans(files, packs);
        let shape: Vec<(&str, Vec<&str>, Vec<&str>)> = plans
            .iter()
            .map(|p| {
                (
                    p.day.as_str(),
                    p.merged.iter().map(|m| m.name.as_str()).collect(),
                    p.loose.iter().map(|f| f.session_file.as_str()).collect(),
                )
            })
            .collect();
        assert_eq!(
            shape,
            vec![
                ("2026-01-01", vec!["small"], vec!["a"]),
                ("2026-01-02", vec![], vec!["b"]),
                ("2026-01-02", vec![], vec!["c"]),
            ]
        );
    }
}
