//! One session file → usage events and a session summary (reference §4.3–4.5), streamed:
//! after a first pass collects the file's error flags ([`crate::errors`]), events are handed
//! to the caller in chunks as lines are read. What stays for the whole file is small: a
//! 32-byte identity per event (duplicates are dropped) and a time per line.
//!
//! Departures from the reference, on purpose: an unparseable or missing timestamp takes the
//! file's last good time (then its first, then the file's mtime), never "now"; the summary's
//! `tool_calls` counts every tool invocation (plain, MCP, sub-agent) and `tool_errors` the
//! failed ones among them, so errors never exceed calls; `user_messages` counts prompts,
//! not the tool-result turns that echo tool output back.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sha2::{Digest, Sha256};
use svc_core::clock::{format_ts, parse_ts};
use svc_store::usage::SessionSummary;

use crate::attribution::Attribution;
use crate::errors::Flags;
use crate::events::UsageEvent;
use crate::lines::{Line, LineReader};
use crate::transcript::{Content, NamingInput, Turn};

/// Version of these rules, stored with every row.
pub const PROCESSOR_VERSION: i64 = 5;

/// Gaps longer than this split active time (seconds).
const ACTIVE_GAP_SECONDS: i64 = 600;

/// Problems kept per file (all are counted).
const MAX_PROBLEMS: usize = 20;

/// Events handed on at a time, at most: a few megabytes of them.
const CHUNK_EVENTS: usize = 8192;

/// What kind of usage an event records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    /// A tool call (including `Skill`).
    ToolUse,
    /// An `mcp__*` tool call.
    McpCall,
    /// A `Task`/`Agent` dispatch.
    Subagent,
    /// A `<command-name>` in a user turn.
    SlashCommand,
}

impl EventType {
    /// The stored spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ToolUse => "tool_use",
            Self::McpCall => "mcp_call",
            Self::Subagent => "subagent",
            Self::SlashCommand => "slash_command",
        }
    }
}

/// Whose file it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// The owner's user id (None when no user matches the directory).
    pub user_id: Option<String>,
    /// Their e-mail, or the directory name.
    pub username: String,
}

/// A line that could not be used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// 1-based line number.
    pub line: u64,
    /// What was wrong.
    pub problem: String,
}

/// Everything one file yielded besides its events, which went to the caller's sink.
#[derive(Debug, Clone)]
pub struct Extracted {
    /// Events handed on (after de-duplication by identity).
    pub events: u64,
    /// Its summary.
    pub summary: SessionSummary,
    /// Lines read (blank ones included).
    pub lines: u64,
    /// Lines that could not be used.
    pub malformed: u64,
    /// The first of them, with line numbers.
    pub problems: Vec<Problem>,
    /// Bytes read.
    pub bytes: u64,
    /// Content hash of the bytes read.
    pub hash: String,
}

/// The file being extracted and its context.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    /// `<user dir>/<file name>`.
    pub session_file: &'a str,
    /// Whose it is.
    pub owner: &'a Owner,
    /// The file's modification time (the last fallback for event times).
    pub mtime: DateTime<Utc>,
    /// Attribution maps.
    pub attribution: &'a Attribution,
    /// Extraction time.
    pub extracted_at: &'a str,
}

#[derive(Debug)]
struct Pending {
    kind: EventType,
    uuid: Option<String>,
    parent: Option<String>,
    tool_id: Option<String>,
    tool_name: Option<String>,
    skill: Option<String>,
    subagent: Option<String>,
    command: Option<String>,
    model: Option<String>,
    cwd: Option<String>,
    at: Option<DateTime<Utc>>,
}

/// Why an extraction stopped.
#[derive(Debug)]
pub enum Failure<E> {
    /// The file could not be read.
    Read(std::io::Error),
    /// The sink refused a chunk of events.
    Sink(E),
}

/// The summary's counts over the events handed on so far.
#[derive(Default)]
struct Tally {
    events: u64,
    tool_calls: i64,
    tool_errors: i64,
    skills: i64,
    subagents: i64,
    mcp_calls: i64,
    slash_commands: i64,
    tools: HashSet<String>,
    skill_names: HashSet<String>,
}

impl Tally {
    fn add(&mut self, e: &UsageEvent) {
        self.events += 1;
        if let Some(tool) = &e.tool_name {
            self.tool_calls += 1;
            self.tool_errors += i64::from(e.is_error);
            if !self.tools.contains(tool) {
                self.tools.insert(tool.clone());
            }
        }
        if let Some(skill) = &e.skill_name {
            self.skills += 1;
            if !self.skill_names.contains(skill) {
                self.skill_names.insert(skill.clone());
            }
        }
        match e.event_type.as_str() {
            "subagent" => self.subagents += 1,
            "mcp_call" => self.mcp_calls += 1,
            "slash_command" => self.slash_commands += 1,
            _ => {}
        }
    }
}

#[derive(Default)]
struct State {
    session_id: Option<String>,
    times: Vec<i64>,
    first_good: Option<DateTime<Utc>>,
    last_good: Option<DateTime<Utc>>,
    pending: Vec<Pending>,
    /// From the first pass: every call some line marks as failed.
    errored: HashSet<String>,
    /// Identities handed on (digests: a file's duplicates are dropped).
    seen: HashSet<[u8; 32]>,
    tally: Tally,
    models: HashMap<String, u64>,
    user_messages: i64,
    assistant_messages: i64,
    tokens: [i64; 4],
    malformed: u64,
    problems: Vec<Problem>,
}

impl State {
    fn problem(&mut self, line: u64, problem: String) {
        self.malformed += 1;
        if self.problems.len() < MAX_PROBLEMS {
            self.problems.push(Problem { line, problem });
        }
    }
}

/// A non-empty borrowed text, owned.
pub(crate) fn owned(s: &Option<std::borrow::Cow<'_, str>>) -> Option<String> {
    s.as_deref().filter(|s| !s.is_empty()).map(str::to_owned)
}

/// Every `<command-name>/name</command-name>` in `text`: the name starts with a letter and
/// continues with word characters, `:` or `-`.
fn slash_commands(text: &str, mut found: impl FnMut(&str)) {
    const OPEN: &str = "<command-name>/";
    const CLOSE: &str = "</command-name>";
    let mut rest = text;
    while let Some(i) = rest.find(OPEN) {
        rest = &rest[i + OPEN.len()..];
        let end = rest
            .char_indices()
            .find(|(_, c)| !(c.is_alphanumeric() || matches!(c, '_' | ':' | '-')))
            .map_or(rest.len(), |(i, _)| i);
        let name = &rest[..end];
        if name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
            && rest[end..].starts_with(CLOSE)
        {
            found(name);
        }
    }
}

fn turn(state: &mut State, t: Turn<'_>) {
    if state.session_id.is_none() {
        state.session_id = owned(&t.session_id);
    }
    let at = t.timestamp.as_deref().and_then(parse_ts);
    if let Some(at) = at {
        state.times.push(at.timestamp_micros());
        state.first_good.get_or_insert(at);
        state.last_good = Some(at);
    }
    let at = at.or(state.last_good);
    let kind = t.kind.as_deref().unwrap_or_default();
    // Error flags were collected by the first pass (crate::errors).
    let message = t.message.unwrap_or_default();
    let base = |state: &State| Pending {
        kind: EventType::ToolUse,
        uuid: owned(&t.uuid),
        parent: owned(&t.parent_uuid),
        tool_id: None,
        tool_name: None,
        skill: None,
        subagent: None,
        command: None,
        model: None,
        cwd: owned(&t.cwd),
        at: at.or(state.last_good),
    };
    match kind {
        "assistant" => {
            state.assistant_messages += 1;
            let model = owned(&message.model);
            if let Some(m) = &model {
                *state.models.entry(m.clone()).or_default() += 1;
            }
            if let Some(u) = &message.usage {
                for (sum, v) in state.tokens.iter_mut().zip([
                    u.input_tokens,
                    u.output_tokens,
                    u.cache_read_input_tokens,
                    u.cache_creation_input_tokens,
                ]) {
                    *sum = sum.saturating_add(v.0);
                }
            }
            let Content::Blocks(blocks) = &message.content else {
                return;
            };
            for b in blocks
                .iter()
                .filter(|b| b.kind.as_deref() == Some("tool_use"))
            {
                let name = owned(&b.name);
                let input = || -> NamingInput<'_> {
                    b.input
                        .and_then(|raw| serde_json::from_str(raw.0).ok())
                        .unwrap_or_default()
                };
                let mut e = base(state);
                e.tool_id = owned(&b.id);
                e.model = model.clone();
                match name.as_deref() {
                    Some("Skill") => {
                        let i = input();
                        e.skill = owned(&i.skill).or_else(|| owned(&i.name));
                    }
                    Some(n @ ("Task" | "Agent")) => {
                        e.kind = EventType::Subagent;
                        e.subagent = owned(&input().subagent_type).or_else(|| Some(n.to_owned()));
                    }
                    Some(n) if n.starts_with("mcp__") => e.kind = EventType::McpCall,
                    _ => {}
                }
                e.tool_name = name;
                state.pending.push(e);
            }
        }
        "user" => {
            let mut prompt = false;
            let scan = |text: &str, state: &mut State| {
                slash_commands(text, |name| {
                    let mut e = base(state);
                    e.kind = EventType::SlashCommand;
                    e.command = Some(name.to_owned());
                    state.pending.push(e);
                });
            };
            match &message.content {
                Content::Text(text) => {
                    prompt = true;
                    scan(text, state);
                }
                Content::Blocks(blocks) => {
                    for b in blocks {
                        match b.kind.as_deref() {
                            Some("tool_result") => {}
                            Some("text") => {
                                prompt = true;
                                if let Some(text) = &b.text {
                                    scan(text, state);
                                }
                            }
                            _ => prompt = true,
                        }
                    }
                }
                Content::None => {}
            }
            if prompt {
                state.user_messages += 1;
            }
        }
        _ => {}
    }
}

/// The event id: SHA-256 of the reference's pipe-joined fields, prefixed with the session
/// file's key. The prefix is ours: without it two files naming the same session id (one
/// user's copy, or another user's forgery) would share ids, and the first stored would
/// silently win the other's events.
///
/// `file` is the hash state after `session_file|session_id`, the same for every event of a
/// file, so each event hashes only its own fields.
fn identity(file: &Sha256, e: &Pending) -> [u8; 32] {
    let mut h = file.clone();
    for part in [
        e.uuid.as_deref(),
        e.tool_id.as_deref(),
        Some(e.kind.as_str()),
        e.tool_name.as_deref(),
        e.command.as_deref(),
    ] {
        h.update(b"|");
        h.update(part.unwrap_or_default().as_bytes());
    }
    h.finalize().into()
}

/// The hash state [`identity`] starts from for one file.
fn identity_prefix(session_file: &str, session_id: &str) -> Sha256 {
    let mut h = Sha256::new();
    h.update(session_file.as_bytes());
    h.update(b"|");
    h.update(session_id.as_bytes());
    h
}

/// Lower-case hex of an id, through a stack buffer rather than a char iterator.
fn hex_id(id: &[u8; 32]) -> String {
    let mut buf = [0u8; 64];
    // Neither step can fail (64 bytes hold 32 in hex, which is ASCII); the fallback is the
    // same text the slow way.
    match hex::encode_to_slice(id, &mut buf)
        .ok()
        .and_then(|()| std::str::from_utf8(&buf).ok())
    {
        Some(hex) => hex.to_owned(),
        None => hex::encode(id),
    }
}

fn active_seconds(times: &mut [i64]) -> i64 {
    times.sort_unstable();
    let (Some(&first), Some(_)) = (times.first(), times.last()) else {
        return 0;
    };
    let gap = ACTIVE_GAP_SECONDS * 1_000_000;
    let (mut start, mut prev, mut total) = (first, first, 0i64);
    for &t in &times[1..] {
        if t - prev > gap {
            total += prev - start;
            start = t;
        }
        prev = t;
    }
    (total + prev - start) / 1_000_000
}

/// Turns the pending events into finished ones and hands them to `sink`. Before the end of
/// the file this waits until nothing about them can change: the session id and a good time
/// (the fallback of events seen before any) must be known; error flags already are.
fn hand_on<E>(
    s: &mut State,
    cx: &Context<'_>,
    at_end: bool,
    sink: &mut impl FnMut(&[UsageEvent]) -> Result<(), E>,
) -> Result<(), E> {
    let settled = s.session_id.is_some() && s.first_good.is_some();
    if s.pending.is_empty() || !(at_end || settled) {
        return Ok(());
    }
    let session_id = s
        .session_id
        .clone()
        .unwrap_or_else(|| cx.session_file.to_owned());
    let fallback = s.first_good.unwrap_or(cx.mtime);
    let prefix = identity_prefix(cx.session_file, &session_id);
    let mut events = Vec::with_capacity(s.pending.len());
    for p in s.pending.drain(..) {
        let id = identity(&prefix, &p);
        if !s.seen.insert(id) {
            continue;
        }
        let (source, ref_id) = cx.attribution.attribute(
            p.skill.as_deref(),
            p.subagent.as_deref(),
            p.command.as_deref(),
        );
        let event = UsageEvent {
            id: hex_id(&id),
            session_id: session_id.clone(),
            session_file: cx.session_file.to_owned(),
            username: cx.owner.username.clone(),
            user_id: cx.owner.user_id.clone(),
            is_error: p.tool_id.as_ref().is_some_and(|t| s.errored.contains(t)),
            event_uuid: p.uuid,
            parent_uuid: p.parent,
            event_type: p.kind.as_str().to_owned(),
            tool_name: p.tool_name,
            skill_name: p.skill,
            subagent_type: p.subagent,
            command_name: p.command,
            source,
            ref_id,
            model: p.model,
            cwd: p.cwd,
            occurred_at: format_ts(p.at.unwrap_or(fallback)),
            processor_version: PROCESSOR_VERSION,
            extracted_at: cx.extracted_at.to_owned(),
        };
        s.tally.add(&event);
        events.push(event);
    }
    if events.is_empty() {
        return Ok(());
    }
    sink(&events)
}

fn finish(mut s: State, cx: &Context<'_>, lines: u64, bytes: u64, hash: String) -> Extracted {
    let session_id = s
        .session_id
        .clone()
        .unwrap_or_else(|| cx.session_file.to_owned());
    let started = s.times.iter().min().copied();
    let ended = s.times.iter().max().copied();
    let ts = |micros: Option<i64>| {
        micros
            .and_then(DateTime::from_timestamp_micros)
            .map(format_ts)
    };
    let primary_model = s
        .models
        .iter()
        .max_by(|a, b| a.1.cmp(b.1).then_with(|| b.0.cmp(a.0)))
        .map(|(m, _)| m.clone());
    let t = &s.tally;
    let summary = SessionSummary {
        session_file: cx.session_file.to_owned(),
        session_id,
        username: cx.owner.username.clone(),
        user_id: cx.owner.user_id.clone(),
        started_at: ts(started),
        ended_at: ts(ended),
        active_seconds: active_seconds(&mut s.times),
        wall_seconds: started.zip(ended).map_or(0, |(a, b)| (b - a) / 1_000_000),
        user_messages: s.user_messages,
        assistant_messages: s.assistant_messages,
        tool_calls: t.tool_calls,
        tool_errors: t.tool_errors,
        skill_invocations: t.skills,
        subagent_dispatches: t.subagents,
        mcp_calls: t.mcp_calls,
        slash_commands: t.slash_commands,
        distinct_tools: t.tools.len() as i64,
        distinct_skills: t.skill_names.len() as i64,
        input_tokens: s.tokens[0],
        output_tokens: s.tokens[1],
        cache_read_tokens: s.tokens[2],
        cache_creation_tokens: s.tokens[3],
        primary_model,
        processor_version: PROCESSOR_VERSION,
        extracted_at: cx.extracted_at.to_owned(),
    };
    Extracted {
        events: t.events,
        summary,
        lines,
        malformed: s.malformed,
        problems: s.problems,
        bytes,
        hash,
    }
}

/// Extracts a whole file, handing its events to `sink` a chunk at a time; a bad line is
/// counted and reported, never fatal. Only a read error or the sink's error fails.
pub fn extract<R: BufRead + Seek, E>(
    reader: R,
    cx: &Context<'_>,
    sink: impl FnMut(&[UsageEvent]) -> Result<(), E>,
) -> Result<Extracted, Failure<E>> {
    extract_in_chunks(reader, cx, CHUNK_EVENTS, sink)
}

/// Files up to this size are read into memory once, and both extraction passes run over
/// that copy; larger ones are streamed twice from the file. Memory stays bounded by this
/// (per worker) whatever the files' sizes.
const WHOLE_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// Extracts the file at `path` (see [`extract`]): from one read into `buffer`, which the
/// caller reuses from file to file, when it is small enough, else streamed.
pub fn extract_path<E>(
    path: &Path,
    buffer: &mut Vec<u8>,
    cx: &Context<'_>,
    sink: impl FnMut(&[UsageEvent]) -> Result<(), E>,
) -> Result<Extracted, Failure<E>> {
    extract_path_up_to(path, WHOLE_FILE_BYTES, buffer, cx, sink)
}

/// [`extract_path`] with a given limit for reading a file whole (tests use 0).
fn extract_path_up_to<E>(
    path: &Path,
    whole_up_to: u64,
    buffer: &mut Vec<u8>,
    cx: &Context<'_>,
    sink: impl FnMut(&[UsageEvent]) -> Result<(), E>,
) -> Result<Extracted, Failure<E>> {
    let file = std::fs::File::open(path).map_err(Failure::Read)?;
    let size = file.metadata().map_err(Failure::Read)?.len();
    if size > whole_up_to {
        return extract(BufReader::with_capacity(1 << 20, file), cx, sink);
    }
    buffer.clear();
    // A byte more than the size, so that reading to the end needs no second allocation. A
    // file still growing is read up to twice the limit; what follows waits for the next
    // run, which sees the file changed.
    buffer.reserve(size as usize + 1);
    file.take(2 * whole_up_to)
        .read_to_end(buffer)
        .map_err(Failure::Read)?;
    let flags = crate::errors::scan_slice(buffer);
    read_events(
        std::io::Cursor::new(buffer.as_slice()),
        flags,
        cx,
        CHUNK_EVENTS,
        sink,
    )
}

/// [`extract`] with a given chunk size (tests use tiny ones).
fn extract_in_chunks<R: BufRead + Seek, E>(
    mut reader: R,
    cx: &Context<'_>,
    chunk: usize,
    sink: impl FnMut(&[UsageEvent]) -> Result<(), E>,
) -> Result<Extracted, Failure<E>> {
    let flags = crate::errors::scan(&mut reader).map_err(Failure::Read)?;
    reader.seek(SeekFrom::Start(0)).map_err(Failure::Read)?;
    let take = flags.bytes;
    read_events(reader.take(take), flags, cx, chunk, sink)
}

/// The second pass: the events and summary of the file `reader` holds (exactly the bytes
/// the first pass covered), given its error flags.
fn read_events<R: BufRead, E>(
    reader: R,
    mut flags: Flags,
    cx: &Context<'_>,
    chunk: usize,
    mut sink: impl FnMut(&[UsageEvent]) -> Result<(), E>,
) -> Result<Extracted, Failure<E>> {
    let mut lines = LineReader::unhashed(reader);
    let mut state = State {
        errored: std::mem::take(&mut flags.errored),
        ..State::default()
    };
    let mut count = 0;
    while let Some((n, line)) = lines.next_line().map_err(Failure::Read)? {
        count = n;
        let (bytes, terminated) = match line {
            Line::TooLong(len) => {
                state.problem(
                    n,
                    format!("line of {len} bytes is over the 64 MiB limit; skipped"),
                );
                continue;
            }
            Line::Text { bytes, terminated } => (bytes, terminated),
        };
        let Some(first) = bytes.iter().find(|b| !b.is_ascii_whitespace()) else {
            continue;
        };
        if *first != b'{' {
            state.problem(n, "not a JSON object".into());
            continue;
        }
        match crate::reader::turn(bytes) {
            Ok(t) => turn(&mut state, t),
            Err(e) if !terminated && e.is_eof() => state.problem(
                n,
                "last line is cut short (the file may still be being written)".into(),
            ),
            Err(e) => state.problem(n, format!("not a transcript line: {e}")),
        }
        if state.pending.len() >= chunk {
            hand_on(&mut state, cx, false, &mut sink).map_err(Failure::Sink)?;
        }
    }
    hand_on(&mut state, cx, true, &mut sink).map_err(Failure::Sink)?;
    let (bytes, hash) = (lines.bytes(), flags.hash);
    Ok(finish(state, cx, count, bytes, hash))
}

#[cfg(test)]
#[path = "extract_tests.rs"]
mod tests;
