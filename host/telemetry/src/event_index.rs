//! The administrators' event index: every event file's rows as small integer codes, kept in
//! memory, so the telemetry page's counts (KPIs, facets, grouped pages, a raw page's total)
//! are one pass over four arrays instead of a DataFusion scan that decodes a dozen string
//! columns per request.
//!
//! Why: at ten million events the scans took 350–600 ms for a week's page (three reads of
//! about 150 ns an event each), against a 50 ms target; a pass over codes takes a few
//! nanoseconds an event. The counts are exact, as the scans' are: owners and sessions are
//! told apart by their strings, interned once.
//!
//! Why it needs no invalidation: event files (segments and packs) are never rewritten
//! under their name. A file decoded once stays right for as long as the store's listing
//! names it, and the index forgets the files the listing no longer names. A read uses the
//! listing of its own request, so it counts each event once, as the scans do.
//!
//! Why day counts: a month's page visited every event of the month (70–90 ms at ten million
//! events). Each file also holds its events counted per (day, owner, session, kind); a
//! window's whole days are read from those rows and only its first, partial day event by
//! event. Raw pages need event times, and only the newest (or oldest) few: each file is
//! held sorted by time and walked from that end.
//!
//! What it costs: 20 bytes an event (time, owner, session, kind), 20 bytes a day row, plus
//! the dictionaries; decoding a file costs what a scan of it does, once, plus a sort of
//! its day's keys. Past its limit (`SVC_TELEMETRY_INDEX_MAX_EVENTS`,
//! [`DEFAULT_MAX_EVENTS`]), and for a file whose times are not in the store's own format,
//! reads go back to DataFusion ([`Snapshot`] is then None) with the same figures.
//!
//! Must not import HTTP or page code; the principal type is [`EventIndex`].

use std::collections::HashMap;
use std::fs::File;
use std::hash::Hash;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use chrono::NaiveDate;
use svc_core::clock::format_ts;
use svc_core::Error;
use svc_driver_internal::events::EventFile;
use svc_plugin_api::arrow::array::{Array, AsArray, StringArray};
use svc_plugin_api::datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use svc_plugin_api::datafusion::parquet::arrow::ProjectionMask;

/// The most events an index holds unless told otherwise (about 800 MB); beyond, reads
/// scan the files.
pub const DEFAULT_MAX_EVENTS: usize = 40_000_000;

/// The columns a kind is made of, then the owner, session and time.
const COLUMNS: [&str; 11] = [
    "tool_name",
    "skill_name",
    "subagent_type",
    "command_name",
    "source",
    "event_type",
    "ref_id",
    "is_error",
    "username",
    "session_id",
    "occurred_at",
];

/// What an event is, apart from who, when and in which session: the fields the page filters
/// and groups on. A file has a few dozen of them, so each event holds a code.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Kind {
    /// The tool's name.
    pub tool_name: Option<String>,
    /// The skill's name.
    pub skill_name: Option<String>,
    /// The sub-agent's type.
    pub subagent_type: Option<String>,
    /// The slash command's name.
    pub command_name: Option<String>,
    /// `curated`, `flea` or `builtin`.
    pub source: String,
    /// The event's type.
    pub event_type: String,
    /// The plugin it is attributed to.
    pub ref_id: Option<String>,
    /// Whether the call failed.
    pub is_error: bool,
}

/// Values to codes, and back.
#[derive(Debug)]
struct Interner<T> {
    codes: HashMap<T, u32>,
    values: Vec<T>,
}

impl<T> Default for Interner<T> {
    fn default() -> Self {
        Self {
            codes: HashMap::new(),
            values: Vec::new(),
        }
    }
}

impl Interner<String> {
    /// The code of `value`, `last`'s when it is the same text (no lookup); `last` becomes it.
    fn code_repeated(&mut self, last: &mut Option<(String, u32)>, value: &str) -> u32 {
        match last {
            Some((text, code)) if text == value => *code,
            _ => {
                let code = self.code(&value.to_owned());
                *last = Some((value.to_owned(), code));
                code
            }
        }
    }
}

impl<T: Hash + Eq + Clone> Interner<T> {
    fn code(&mut self, value: &T) -> u32 {
        if let Some(&c) = self.codes.get(value) {
            return c;
        }
        let c = self.values.len() as u32;
        self.codes.insert(value.clone(), c);
        self.values.push(value.clone());
        c
    }
}

/// Microseconds in a day.
pub const DAY: i64 = 86_400_000_000;

/// One file's events as codes: parallel arrays sorted by time (a window's start is a binary
/// search), with their counts per day.
#[derive(Debug, Default)]
pub struct FileCodes {
    /// Microseconds since the Unix epoch.
    at: Vec<i64>,
    user: Vec<u32>,
    session: Vec<u32>,
    kind: Vec<u32>,
    /// The events counted per (day, owner, session, kind): a window's whole days are read
    /// from here. A session's events of one kind on one day are one row, so counting a
    /// month visits a fraction of the rows it would event by event.
    days: DayCounts,
}

/// Counts of events per (UTC day, owner, session, kind), ascending by day.
#[derive(Debug, Default)]
struct DayCounts {
    day: Vec<i32>,
    user: Vec<u32>,
    session: Vec<u32>,
    kind: Vec<u32>,
    events: Vec<u32>,
}

impl DayCounts {
    /// Counts events sorted by time.
    fn of(at: &[i64], user: &[u32], session: &[u32], kind: &[u32]) -> Self {
        let mut out = Self::default();
        let mut keys: Vec<(u32, u32, u32)> = Vec::new();
        let mut from = 0;
        while from < at.len() {
            let day = at[from].div_euclid(DAY);
            let to = from + at[from..].partition_point(|&t| t < (day + 1) * DAY);
            keys.clear();
            keys.extend((from..to).map(|i| (session[i], kind[i], user[i])));
            keys.sort_unstable();
            for run in keys.chunk_by(|a, b| a == b) {
                let (s, k, u) = run[0];
                out.day.push(day as i32);
                out.user.push(u);
                out.session.push(s);
                out.kind.push(k);
                out.events.push(run.len() as u32);
            }
            from = to;
        }
        out
    }

    fn len(&self) -> usize {
        self.day.len()
    }
}

impl FileCodes {
    /// A file's events in any order.
    fn new(at: Vec<i64>, user: Vec<u32>, session: Vec<u32>, kind: Vec<u32>) -> Self {
        let (at, user, session, kind) = if at.windows(2).all(|w| w[0] <= w[1]) {
            (at, user, session, kind)
        } else {
            let mut order: Vec<usize> = (0..at.len()).collect();
            order.sort_by_key(|&i| at[i]);
            let pick = |v: &[u32]| order.iter().map(|&i| v[i]).collect::<Vec<u32>>();
            (
                order.iter().map(|&i| at[i]).collect(),
                pick(&user),
                pick(&session),
                pick(&kind),
            )
        };
        let days = DayCounts::of(&at, &user, &session, &kind);
        Self {
            at,
            user,
            session,
            kind,
            days,
        }
    }

    fn len(&self) -> usize {
        self.at.len()
    }

    /// Replaces the file's own codes by the index's: `users[c]` for owner code `c`, and
    /// so on.
    fn recode(&mut self, users: &[u32], sessions: &[u32], kinds: &[u32]) {
        let map = |codes: &mut Vec<u32>, to: &[u32]| {
            for c in codes.iter_mut() {
                *c = to[*c as usize];
            }
        };
        map(&mut self.user, users);
        map(&mut self.session, sessions);
        map(&mut self.kind, kinds);
        map(&mut self.days.user, users);
        map(&mut self.days.session, sessions);
        map(&mut self.days.kind, kinds);
    }
}

/// Events of one owner, session and kind: one event at its time, or a day's count of them
/// at the day's start.
#[derive(Debug, Clone, Copy)]
pub struct Cell {
    /// Microseconds since the epoch.
    pub at: i64,
    /// The owner's code.
    pub user: u32,
    /// The session's code.
    pub session: u32,
    /// The kind's code.
    pub kind: u32,
    /// How many events.
    pub events: u32,
}

/// The events of one file from a window's start on, one by one, oldest first.
pub struct Window<'a> {
    /// Times, ascending.
    pub at: &'a [i64],
    /// Owner codes.
    pub user: &'a [u32],
    /// Kind codes.
    pub kind: &'a [u32],
}

/// A file decoded with its own dictionaries, before they are merged into the index's.
struct Decoded {
    codes: FileCodes,
    users: Interner<String>,
    sessions: Interner<String>,
    kinds: Interner<Kind>,
}

#[derive(Debug)]
struct Inner {
    max_events: usize,
    /// By file name; None for a file the index cannot hold (a time in another format).
    files: HashMap<String, Option<Arc<FileCodes>>>,
    events: usize,
    users: Interner<String>,
    sessions: Interner<String>,
    kinds: Interner<Kind>,
}

/// The index, shared by every read of one browser.
#[derive(Debug, Clone)]
pub struct EventIndex {
    inner: Arc<Mutex<Inner>>,
    loading: Arc<Mutex<()>>,
}

/// What a read counts over: the listed files' codes and the dictionaries they use.
#[derive(Debug)]
pub struct Snapshot {
    /// Each listed file with its latest event time (files ending before a window are
    /// skipped without a look).
    files: Vec<(Arc<FileCodes>, Option<i64>)>,
    /// Owner names by code.
    pub users: Vec<String>,
    /// Sessions known (codes are below this).
    pub sessions: usize,
    /// Kinds by code.
    pub kinds: Vec<Kind>,
}

/// Microseconds since the epoch of a time in the store's own format
/// (`YYYY-MM-DDTHH:MM:SS.ffffffZ`, what `format_ts` writes), or None for any other spelling:
/// only for that format does the order of the numbers equal the order of the strings, which
/// is what the scans compare.
pub fn micros(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() != 27
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
        || b[19] != b'.'
        || b[26] != b'Z'
    {
        return None;
    }
    let num = |from: usize, to: usize| -> Option<i64> {
        b[from..to].iter().try_fold(0_i64, |n, c| {
            c.is_ascii_digit().then(|| n * 10 + i64::from(c - b'0'))
        })
    };
    let (h, m, sec) = (num(11, 13)?, num(14, 16)?, num(17, 19)?);
    if h > 23 || m > 59 || sec > 59 {
        return None;
    }
    let date = NaiveDate::from_ymd_opt(num(0, 4)? as i32, num(5, 7)? as u32, num(8, 10)? as u32)?;
    let days = date
        .signed_duration_since(NaiveDate::from_ymd_opt(1970, 1, 1)?)
        .num_days();
    Some(((days * 86_400 + h * 3_600 + m * 60 + sec) * 1_000_000) + num(20, 26)?)
}

/// The store's spelling of a time given in microseconds since the epoch ([`micros`]'s
/// inverse).
pub fn text(micros: i64) -> String {
    format_ts(chrono::DateTime::from_timestamp_micros(micros).unwrap_or_default())
}

fn decode(path: &PathBuf) -> Result<Option<Decoded>, Error> {
    let read_error = |e: &dyn std::fmt::Display| {
        Error::internal(format!("cannot read events in {}: {e}", path.display()))
    };
    let file = File::open(path).map_err(|e| read_error(&e))?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| read_error(&e))?;
    let schema = builder.schema().clone();
    let mut roots = Vec::with_capacity(COLUMNS.len());
    for c in COLUMNS {
        roots.push(schema.index_of(c).map_err(|e| read_error(&e))?);
    }
    let mask = ProjectionMask::roots(builder.parquet_schema(), roots);
    let reader = builder
        .with_projection(mask)
        .with_batch_size(8_192)
        .build()
        .map_err(|e| read_error(&e))?;
    let (mut at_codes, mut user_codes, mut session_codes, mut kind_codes) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut owners, mut session_ids, mut kinds) = (
        Interner::default(),
        Interner::default(),
        Interner::<Kind>::default(),
    );
    for batch in reader {
        let batch = batch.map_err(|e| read_error(&e))?;
        let text = |name: &str| -> Result<&StringArray, Error> {
            batch
                .column_by_name(name)
                .and_then(|c| c.as_string_opt::<i32>())
                .ok_or_else(|| read_error(&format!("column {name} is not text")))
        };
        let opt = |a: &StringArray, i: usize| a.is_valid(i).then(|| a.value(i).to_owned());
        let [tool, skill, agent, command, source, event_type, ref_id] = [
            text("tool_name")?,
            text("skill_name")?,
            text("subagent_type")?,
            text("command_name")?,
            text("source")?,
            text("event_type")?,
            text("ref_id")?,
        ];
        let (users, sessions, at) = (text("username")?, text("session_id")?, text("occurred_at")?);
        let errors = batch
            .column_by_name("is_error")
            .and_then(|c| c.as_boolean_opt())
            .ok_or_else(|| read_error(&"column is_error is not a flag"))?;
        // Consecutive rows often share an owner, session or kind (a segment is one
        // session); the last code is reused before a dictionary lookup.
        let mut last_user: Option<(String, u32)> = None;
        let mut last_session: Option<(String, u32)> = None;
        for i in 0..batch.num_rows() {
            let Some(t) = at.is_valid(i).then(|| micros(at.value(i))).flatten() else {
                return Ok(None);
            };
            at_codes.push(t);
            user_codes.push(owners.code_repeated(&mut last_user, users.value(i)));
            session_codes.push(session_ids.code_repeated(&mut last_session, sessions.value(i)));
            let kind = Kind {
                tool_name: opt(tool, i),
                skill_name: opt(skill, i),
                subagent_type: opt(agent, i),
                command_name: opt(command, i),
                source: source.value(i).to_owned(),
                event_type: event_type.value(i).to_owned(),
                ref_id: opt(ref_id, i),
                is_error: errors.is_valid(i) && errors.value(i),
            };
            kind_codes.push(kinds.code(&kind));
        }
    }
    Ok(Some(Decoded {
        codes: FileCodes::new(at_codes, user_codes, session_codes, kind_codes),
        users: owners,
        sessions: session_ids,
        kinds,
    }))
}

impl EventIndex {
    /// An empty index that holds at most `max_events` events.
    pub fn new(max_events: usize) -> Self {
        Self {
            inner: Arc::new(Mutex::new(Inner {
                max_events,
                files: HashMap::new(),
                events: 0,
                users: Interner::default(),
                sessions: Interner::default(),
                kinds: Interner::default(),
            })),
            loading: Arc::default(),
        }
    }

    /// The codes of exactly the listed files, decoding the ones not seen before (on the
    /// calling thread: call it from a blocking task). None when one of them cannot be held.
    pub fn snapshot(&self, listed: &[(EventFile, PathBuf)]) -> Result<Option<Snapshot>, Error> {
        let unheld = |inner: &Inner| {
            listed
                .iter()
                .any(|(f, _)| !inner.files.contains_key(&f.name))
        };
        // One caller decodes at a time; the page's three reads arrive together, and the
        // others then find the files held instead of decoding them again.
        let _loading = if unheld(&self.lock()) {
            Some(self.loading.lock().unwrap_or_else(|p| p.into_inner()))
        } else {
            None
        };
        let missing: Vec<&(EventFile, PathBuf)> = {
            let mut inner = self.lock();
            // Forget the files the listing no longer names (merged into packs, pruned)
            // once they outnumber the listed ones.
            if inner.files.len() > 2 * listed.len() + 64 {
                let names: std::collections::HashSet<&str> =
                    listed.iter().map(|(f, _)| f.name.as_str()).collect();
                inner.files.retain(|name, _| names.contains(name.as_str()));
                inner.events = inner.files.values().flatten().map(|f| f.len()).sum();
            }
            listed
                .iter()
                .filter(|(f, _)| !inner.files.contains_key(&f.name))
                .collect()
        };
        // Decoded outside the lock, a file at a time on each core: reads of files already
        // held go on meanwhile. Workers stop when the index is full (reads then scan until
        // a listing drops some files).
        let started = std::time::Instant::now();
        let next = std::sync::atomic::AtomicUsize::new(0);
        let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
        let failed: Mutex<Option<Error>> = Mutex::new(None);
        std::thread::scope(|scope| {
            for _ in 0..workers.min(missing.len()) {
                scope.spawn(|| loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some((file, path)) = missing.get(i) else {
                        return;
                    };
                    if self.lock().is_full() {
                        return;
                    }
                    match decode(path) {
                        Ok(Some(mut d)) => {
                            // Recoded outside the lock: only the dictionaries are shared.
                            let [users, sessions, kinds] = self.lock().intern(&d);
                            d.codes.recode(&users, &sessions, &kinds);
                            self.lock().keep(&file.name, Some(d.codes));
                        }
                        Ok(None) => self.lock().keep(&file.name, None),
                        Err(e) => {
                            *failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                            return;
                        }
                    }
                });
            }
        });
        if let Some(e) = failed.into_inner().unwrap_or_else(|p| p.into_inner()) {
            return Err(e);
        }
        let inner = self.lock();
        if !missing.is_empty() {
            let held = inner.files.values().flatten();
            tracing::info!(
                files = missing.len(),
                events = inner.events,
                day_rows = held.map(|f| f.days.len()).sum::<usize>(),
                seconds = started.elapsed().as_secs_f64(),
                "event index: decoded new event files"
            );
        }
        if inner.events > inner.max_events {
            return Ok(None);
        }
        let mut files = Vec::with_capacity(listed.len());
        for (file, _) in listed {
            match inner.files.get(&file.name) {
                Some(Some(codes)) => {
                    files.push((codes.clone(), file.last_at.as_deref().and_then(micros)))
                }
                // Not held: the index filled up first, the file's times are in another
                // format, or a read with a newer listing forgot it.
                _ => return Ok(None),
            }
        }
        Ok(Some(Snapshot {
            files,
            users: inner.users.values.clone(),
            sessions: inner.sessions.values.len(),
            kinds: inner.kinds.values.clone(),
        }))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Inner {
    /// Whether another file may not be added.
    fn is_full(&self) -> bool {
        self.events >= self.max_events
    }

    /// The index's codes for a decoded file's owners, sessions and kinds, by the file's
    /// own codes.
    fn intern(&mut self, d: &Decoded) -> [Vec<u32>; 3] {
        [
            d.users.values.iter().map(|v| self.users.code(v)).collect(),
            d.sessions
                .values
                .iter()
                .map(|v| self.sessions.code(v))
                .collect(),
            d.kinds.values.iter().map(|v| self.kinds.code(v)).collect(),
        ]
    }

    /// Holds a file's codes (recoded), or remembers that it cannot be held (None).
    fn keep(&mut self, name: &str, codes: Option<FileCodes>) {
        self.events += codes.as_ref().map_or(0, FileCodes::len);
        self.files.insert(name.to_owned(), codes.map(Arc::new));
    }
}

impl Snapshot {
    /// Files listed.
    pub fn file_count(&self) -> usize {
        self.files.len()
    }

    /// Calls `f` with the events at or after `since` (microseconds): the window's first
    /// day event by event, its whole days as day counts ([`Cell`]).
    pub fn each(&self, since: i64, f: impl FnMut(Cell)) {
        self.each_of_part(0, 1, since, f);
    }

    /// As [`each`](Self::each), over the files of one of `parts` shares (every `parts`-th
    /// file from the `part`-th): walks on several threads see each event once.
    pub fn each_of_part(&self, part: usize, parts: usize, since: i64, mut f: impl FnMut(Cell)) {
        // A window starting at midnight is whole days only.
        let first_whole = since.div_euclid(DAY) + i64::from(since.rem_euclid(DAY) != 0);
        for codes in self.files_of_part(part, parts, since) {
            let start = codes.at.partition_point(|&t| t < since);
            let end = codes.at.partition_point(|&t| t < first_whole * DAY);
            for i in start..end {
                f(Cell {
                    at: codes.at[i],
                    user: codes.user[i],
                    session: codes.session[i],
                    kind: codes.kind[i],
                    events: 1,
                });
            }
            let d = &codes.days;
            let from = d.day.partition_point(|&day| i64::from(day) < first_whole);
            for i in from..d.len() {
                f(Cell {
                    at: i64::from(d.day[i]) * DAY,
                    user: d.user[i],
                    session: d.session[i],
                    kind: d.kind[i],
                    events: d.events[i],
                });
            }
        }
    }

    /// The events at or after `since` of each file of one of `parts` shares, one by one.
    pub fn windows_of_part(
        &self,
        part: usize,
        parts: usize,
        since: i64,
    ) -> impl Iterator<Item = Window<'_>> {
        self.files_of_part(part, parts, since).map(move |codes| {
            let start = codes.at.partition_point(|&t| t < since);
            Window {
                at: &codes.at[start..],
                user: &codes.user[start..],
                kind: &codes.kind[start..],
            }
        })
    }

    /// The files of one of `parts` shares that may hold events at or after `since`.
    fn files_of_part(
        &self,
        part: usize,
        parts: usize,
        since: i64,
    ) -> impl Iterator<Item = &FileCodes> {
        self.files
            .iter()
            .skip(part)
            .step_by(parts.max(1))
            .filter(move |(_, last)| last.is_none_or(|l| l >= since))
            .map(|(codes, _)| codes.as_ref())
    }
}

/// A set of small codes that counts its members.
#[derive(Debug, Clone, Default)]
pub struct Bits {
    words: Vec<u64>,
    count: i64,
}

impl Bits {
    /// Adds every member of `other`.
    pub fn union(&mut self, other: &Bits) {
        if other.words.len() > self.words.len() {
            self.words.resize(other.words.len(), 0);
        }
        for (w, o) in self.words.iter_mut().zip(&other.words) {
            let added = o & !*w;
            self.count += i64::from(added.count_ones());
            *w |= o;
        }
    }

    /// Adds `code`.
    #[inline]
    pub fn insert(&mut self, code: u32) {
        let (word, bit) = ((code / 64) as usize, 1_u64 << (code % 64));
        if word >= self.words.len() {
            self.words.resize(word + 1, 0);
        }
        if self.words[word] & bit == 0 {
            self.words[word] |= bit;
            self.count += 1;
        }
    }

    /// Members.
    pub fn len(&self) -> i64 {
        self.count
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{Duration, Utc};

    #[test]
    fn times_in_the_stores_format_order_as_their_strings() {
        let base = Utc::now();
        let mut times: Vec<String> = (0..2_000)
            .map(|i| format_ts(base - Duration::microseconds(i * 7_919_993_117)))
            .collect();
        times.push("1970-01-01T00:00:00.000000Z".into());
        times.push("2099-12-31T23:59:59.999999Z".into());
        for pair in times.windows(2) {
            let (a, b) = (micros(&pair[0]).unwrap(), micros(&pair[1]).unwrap());
            assert_eq!(pair[0].cmp(&pair[1]), a.cmp(&b), "{pair:?}");
        }
        let t = base.timestamp_micros();
        assert_eq!(micros(&format_ts(base)), Some(t));
        for odd in [
            "2026-11-01T10:00:00Z",
            "2026-11-01T10:00:00.000Z",
            "2026-11-01 10:00:00.000000Z",
            "2026-13-01T10:00:00.000000Z",
            "2026-02-30T10:00:00.000000Z",
            "2026-11-01T24:00:00.000000Z",
            "2026-11-01T10:00:00.00000aZ",
            "+026-11-01T10:00:00.000000Z",
        ] {
            assert_eq!(micros(odd), None, "{odd}");
        }
    }

    #[test]
    fn a_window_counts_exactly_the_events_at_or_after_its_start() {
        const H: i64 = 3_600_000_000;
        // (hour, owner, session, kind), in no particular order.
        let a = [
            (5, 0, 0, 0),
            (1, 0, 0, 1),
            (30, 1, 2, 0),
            (3, 0, 0, 0),
            (3, 0, 0, 0),
            (50, 1, 2, 1),
            (29, 1, 2, 0),
            (24, 0, 1, 0),
        ];
        let b = [(1, 2, 3, 0), (3, 2, 3, 0), (26, 2, 3, 1), (47, 2, 3, 1)];
        let file = |rows: &[(i64, u32, u32, u32)]| {
            Arc::new(FileCodes::new(
                rows.iter().map(|r| r.0 * H).collect(),
                rows.iter().map(|r| r.1).collect(),
                rows.iter().map(|r| r.2).collect(),
                rows.iter().map(|r| r.3).collect(),
            ))
        };
        let snap = Snapshot {
            files: vec![
                (file(&a), Some(50 * H)),
                (file(&b), Some(47 * H)),
                // Listed as ending before every window below but the first: never opened.
                (file(&[(100, 3, 4, 0)]), Some(H / 2)),
            ],
            users: Vec::new(),
            sessions: 0,
            kinds: Vec::new(),
        };
        let all: Vec<_> = a.iter().chain(&b).copied().collect();
        for since in [0, 2 * H, 3 * H, 24 * H, 25 * H, 29 * H + 1, 48 * H, 51 * H] {
            let mut want: HashMap<(i64, u32, u32, u32), u32> = HashMap::new();
            let mut times: Vec<i64> = Vec::new();
            for &(hour, u, s, k) in all.iter().filter(|r| r.0 * H >= since) {
                *want.entry((hour * H / DAY, u, s, k)).or_default() += 1;
                times.push(hour * H);
            }
            if since == 0 {
                *want.entry((100 * H / DAY, 3, 4, 0)).or_default() += 1;
                times.push(100 * H);
            }
            let (mut seen, mut cells) = (HashMap::new(), 0);
            snap.each(since, |c| {
                assert!(c.at >= since, "{c:?} before {since}");
                *seen
                    .entry((c.at / DAY, c.user, c.session, c.kind))
                    .or_default() += c.events;
                cells += 1;
            });
            assert_eq!(seen, want, "since {since}");
            if since == 0 {
                // Whole days come counted: one cell for each (day, owner, session, kind).
                assert_eq!(cells, want.len());
            }
            let mut walked: Vec<i64> = Vec::new();
            for w in snap.windows_of_part(0, 1, since) {
                assert!(w.at.windows(2).all(|p| p[0] <= p[1]), "sorted");
                walked.extend(w.at);
            }
            walked.sort_unstable();
            times.sort_unstable();
            assert_eq!(walked, times, "since {since}");
        }
    }

    #[test]
    fn bits_count_each_member_once() {
        let mut b = Bits::default();
        for c in [3, 64, 3, 1_000, 64, 0] {
            b.insert(c);
        }
        assert_eq!(b.len(), 4);
        let mut other = Bits::default();
        for c in [3, 5, 2_000] {
            other.insert(c);
        }
        b.union(&other);
        assert_eq!(b.len(), 6);
        other.union(&b);
        assert_eq!(other.len(), 6);
    }
}
