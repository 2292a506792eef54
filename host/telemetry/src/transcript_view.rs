//! A session transcript as a viewer reads it: chronological, normalised events (text,
//! tool calls with their input, tool results with flattened output), paged, with the
//! positions of every failed call so a viewer can jump from error to error
//! (reference §6.1, `_render_transcript`).
//!
//! A huge session is not rendered whole. One pass over the file builds a [`TranscriptIndex`]
//! — where each event-bearing line starts, how many events it holds, which events failed,
//! and every tool call's position and name — borrowing from the line instead of decoding
//! text or inputs. A page then reads and renders only its own lines. The index is small
//! (a few dozen bytes a line) and is cached by the caller, keyed by the file's size and
//! modification time, so the next page or the next error costs only its lines.
//!
//! Both passes classify a line with the same function ([`blocks_of`]), so the counts the
//! index holds are the events a page renders. Departures from the reference, on purpose:
//! a tool result carries the name and position of the call it answers.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fs::File;
use std::io::BufReader;
use std::os::unix::fs::FileExt;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;
use svc_core::Error;

use crate::lines::{Line, LineReader};
use crate::transcript::Truthy;

/// Events per page by default.
pub const DEFAULT_PAGE_EVENTS: usize = 200;
/// The most events one page holds.
pub const MAX_PAGE_EVENTS: usize = 2_000;

/// What an event is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// A prompt or an assistant's text.
    Text,
    /// A tool call and its input.
    ToolUse,
    /// A tool's answer.
    ToolResult,
}

/// One normalised event.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TranscriptEvent {
    /// Its position among the transcript's events (0-based).
    pub ordinal: u32,
    /// What it is.
    pub kind: EventKind,
    /// `user` or `assistant` (the message's role, else the line's type).
    pub role: String,
    /// Text, or a tool result's output flattened to text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The tool called, or (for a result) the tool that answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_name: Option<String>,
    /// A tool call's input.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
    /// The call id linking a call and its result.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_use_id: Option<String>,
    /// A result's error flag.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub is_error: Option<bool>,
    /// A result's call: its ordinal, when the call is in the transcript.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_use_ordinal: Option<u32>,
    /// The line's timestamp, as written.
    pub ts: Option<String>,
    /// The line's uuid.
    pub uuid: Option<String>,
    /// The 1-based line number in the file.
    pub line: u64,
}

/// A line holding events: where it is and which events it holds.
#[derive(Debug, Clone, Copy)]
struct LineSpan {
    number: u64,
    offset: u64,
    len: u32,
    first_event: u32,
    events: u32,
}

/// Where a transcript's events are (see the module doc).
#[derive(Debug, Default)]
pub struct TranscriptIndex {
    lines: Vec<LineSpan>,
    total: u32,
    errors: Vec<u32>,
    tool_uses: HashMap<String, (u32, String)>,
    malformed_lines: u64,
}

/// One page of a transcript.
#[derive(Debug, Clone, Serialize)]
pub struct TranscriptPage {
    /// The page's events, in order.
    pub events: Vec<TranscriptEvent>,
    /// Events in the whole transcript.
    pub total_events: u32,
    /// Ordinals of every failed tool result in the transcript, in order.
    pub error_ordinals: Vec<u32>,
    /// Lines that were not JSON, were cut short or were too long (skipped).
    pub malformed_lines: u64,
    /// Page size.
    pub limit: usize,
    /// Events skipped.
    pub offset: usize,
    /// The next page's offset, if there is one.
    pub next_offset: Option<usize>,
}

#[derive(Deserialize)]
struct ViewTurn<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    uuid: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    timestamp: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    message: Option<ViewMessage<'a>>,
}

#[derive(Deserialize)]
struct ViewMessage<'a> {
    #[serde(borrow, default)]
    role: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct ViewBlock<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    text: Option<&'a RawValue>,
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    input: Option<&'a RawValue>,
    #[serde(borrow, default)]
    tool_use_id: Option<Cow<'a, str>>,
    #[serde(default)]
    is_error: Truthy,
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
}

/// One event of a line, still borrowing from it.
enum Piece<'a> {
    Text(Option<&'a RawValue>),
    Use(ViewBlock<'a>),
    Result(ViewBlock<'a>),
}

/// A line's turn and its events, or None when it holds none (not JSON, not a user or
/// assistant turn, no content of a known shape). The one classifier both passes use.
fn blocks_of(bytes: &[u8]) -> Option<(ViewTurn<'_>, Vec<Piece<'_>>)> {
    let turn: ViewTurn<'_> = serde_json::from_slice(bytes).ok()?;
    if !matches!(turn.kind.as_deref(), Some("user" | "assistant")) {
        return None;
    }
    let content = turn.message.as_ref()?.content?;
    let raw = content.get();
    let mut pieces = Vec::new();
    if raw.starts_with('"') {
        pieces.push(Piece::Text(Some(content)));
    } else if raw.starts_with('[') {
        let items: Vec<&RawValue> = serde_json::from_str(raw).ok()?;
        for item in items {
            let Ok(block) = serde_json::from_str::<ViewBlock<'_>>(item.get()) else {
                continue; // a bare string, a number, a block of the wrong shape
            };
            match block.kind.as_deref() {
                Some("text") => pieces.push(Piece::Text(block.text)),
                Some("tool_use") => pieces.push(Piece::Use(block)),
                Some("tool_result") => pieces.push(Piece::Result(block)),
                _ => {} // thinking, images, …
            }
        }
    }
    (!pieces.is_empty()).then_some((turn, pieces))
}

/// Text as a viewer shows it: a JSON string as it is, a list as the text of its `text`
/// blocks and bare strings joined by newlines, anything else empty.
fn flatten(raw: Option<&RawValue>) -> String {
    let Some(raw) = raw else {
        return String::new();
    };
    match serde_json::from_str::<Value>(raw.get()) {
        Ok(Value::String(s)) => s,
        Ok(Value::Array(items)) => items
            .iter()
            .filter_map(|item| match item {
                Value::String(s) => Some(s.as_str()),
                Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("text") => {
                    o.get("text").and_then(Value::as_str)
                }
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

impl TranscriptIndex {
    /// Reads a transcript once and records where its events are.
    pub fn build(path: &Path) -> Result<Self, Error> {
        let file =
            File::open(path).map_err(|e| Error::internal(format!("open transcript: {e}")))?;
        let mut reader = LineReader::new(BufReader::with_capacity(256 * 1024, file));
        let mut index = Self::default();
        loop {
            let start = reader.bytes();
            let Some((number, line)) = reader
                .next_line()
                .map_err(|e| Error::internal(format!("read transcript: {e}")))?
            else {
                break;
            };
            let Line::Text { bytes, terminated } = line else {
                index.malformed_lines += 1;
                continue;
            };
            if bytes.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let Some((_, pieces)) = blocks_of(bytes) else {
                if serde_json::from_slice::<serde::de::IgnoredAny>(bytes).is_err() || !terminated {
                    index.malformed_lines += 1;
                }
                continue;
            };
            let first = index.total;
            for (i, piece) in pieces.iter().enumerate() {
                let ordinal = first + i as u32;
                match piece {
                    Piece::Use(b) => {
                        if let Some(id) = &b.id {
                            let name = b.name.as_deref().unwrap_or_default().to_owned();
                            index.tool_uses.insert(id.to_string(), (ordinal, name));
                        }
                    }
                    Piece::Result(b) if b.is_error.0 => index.errors.push(ordinal),
                    _ => {}
                }
            }
            index.total += pieces.len() as u32;
            index.lines.push(LineSpan {
                number,
                offset: start,
                len: bytes.len() as u32,
                first_event: first,
                events: pieces.len() as u32,
            });
        }
        Ok(index)
    }

    /// Events in the transcript.
    pub fn total(&self) -> u32 {
        self.total
    }

    /// Renders events `offset .. offset + limit`, reading only their lines from `path`.
    pub fn page(&self, path: &Path, offset: usize, limit: usize) -> Result<TranscriptPage, Error> {
        let file =
            File::open(path).map_err(|e| Error::internal(format!("open transcript: {e}")))?;
        let end = (offset + limit).min(self.total as usize);
        let mut events = Vec::with_capacity(end.saturating_sub(offset));
        // The first line whose events reach past `offset`.
        let from = self
            .lines
            .partition_point(|l| (l.first_event + l.events) as usize <= offset);
        let mut buf = Vec::new();
        for span in self.lines[from..]
            .iter()
            .take_while(|l| (l.first_event as usize) < end)
        {
            buf.resize(span.len as usize, 0);
            file.read_exact_at(&mut buf, span.offset)
                .map_err(|e| Error::internal(format!("read transcript: {e}")))?;
            let Some((turn, pieces)) = blocks_of(&buf) else {
                // The file changed under the index; the caller's cache key (size, mtime)
                // makes the next read rebuild it.
                return Err(Error::conflict(
                    "The session file changed while it was being read; load it again",
                ));
            };
            let role = turn
                .message
                .as_ref()
                .and_then(|m| m.role.as_deref())
                .or(turn.kind.as_deref())
                .unwrap_or_default()
                .to_owned();
            for (i, piece) in pieces.into_iter().enumerate() {
                let ordinal = span.first_event + i as u32;
                if (ordinal as usize) < offset || (ordinal as usize) >= end {
                    continue;
                }
                events.push(self.render(ordinal, piece, &role, &turn, span.number));
            }
        }
        Ok(TranscriptPage {
            events,
            total_events: self.total,
            error_ordinals: self.errors.clone(),
            malformed_lines: self.malformed_lines,
            limit,
            offset,
            next_offset: (end < self.total as usize).then_some(end),
        })
    }

    fn render(
        &self,
        ordinal: u32,
        piece: Piece<'_>,
        role: &str,
        turn: &ViewTurn<'_>,
        line: u64,
    ) -> TranscriptEvent {
        let mut event = TranscriptEvent {
            ordinal,
            kind: EventKind::Text,
            role: role.to_owned(),
            text: None,
            tool_name: None,
            input: None,
            tool_use_id: None,
            is_error: None,
            tool_use_ordinal: None,
            ts: turn.timestamp.as_deref().map(str::to_owned),
            uuid: turn.uuid.as_deref().map(str::to_owned),
            line,
        };
        match piece {
            Piece::Text(raw) => event.text = Some(flatten(raw)),
            Piece::Use(b) => {
                event.kind = EventKind::ToolUse;
                event.tool_name = b.name.as_deref().map(str::to_owned);
                event.input = b.input.and_then(|r| serde_json::from_str(r.get()).ok());
                event.tool_use_id = b.id.as_deref().map(str::to_owned);
            }
            Piece::Result(b) => {
                event.kind = EventKind::ToolResult;
                event.text = Some(flatten(b.content));
                event.is_error = Some(b.is_error.0);
                if let Some((at, name)) = b
                    .tool_use_id
                    .as_deref()
                    .and_then(|id| self.tool_uses.get(id))
                {
                    event.tool_use_ordinal = Some(*at);
                    event.tool_name = Some(name.clone());
                }
                event.tool_use_id = b.tool_use_id.as_deref().map(str::to_owned);
            }
        }
        event
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use svc_store::testing::TempDir;

    fn write(lines: &[&str]) -> (TempDir, std::path::PathBuf) {
        let dir = TempDir::new();
        let path = dir.0.join("t.jsonl");
        std::fs::write(&path, lines.join("\n")).unwrap();
        (dir, path)
    }

    #[test]
    fn events_are_normalised_linked_and_paged() {
        let (_dir, path) = write(&[
            r#"{"type":"user","uuid":"u1","timestamp":"t1","message":{"role":"user","content":"hi \"there\""}}"#,
            r#"{"type":"assistant","uuid":"a1","message":{"content":[{"type":"thinking","thinking":"x"},{"type":"text","text":"ok"},{"type":"tool_use","id":"c1","name":"Bash","input":{"command":"ls"}}]}}"#,
            r#"not json"#,
            r#"{"type":"system","message":{"content":"skipped"}}"#,
            r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"c1","is_error":true,"content":[{"type":"text","text":"boom"},"tail",{"type":"image"}]}]}}"#,
            r#"{"type":"assistant","message":{"content":[{"type":"tool_use","id":"c2","name":"Read","input":{}}, 7]}}"#,
            r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"c2","content":"fine"}]}}"#,
        ]);
        let index = TranscriptIndex::build(&path).unwrap();
        assert_eq!(index.total(), 6);
        let page = index.page(&path, 0, 100).unwrap();
        assert_eq!(page.error_ordinals, vec![3]);
        assert_eq!(page.malformed_lines, 1);
        assert_eq!(page.next_offset, None);
        let kinds: Vec<_> = page.events.iter().map(|e| e.kind).collect();
        use EventKind::*;
        assert_eq!(
            kinds,
            [Text, Text, ToolUse, ToolResult, ToolUse, ToolResult]
        );
        assert_eq!(page.events[0].text.as_deref(), Some("hi \"there\""));
        assert_eq!(page.events[0].ts.as_deref(), Some("t1"));
        assert_eq!(page.events[1].role, "assistant");
        assert_eq!(
            page.events[2].input,
            Some(serde_json::json!({"command": "ls"}))
        );
        let failed = &page.events[3];
        assert_eq!(failed.text.as_deref(), Some("boom\ntail"));
        assert_eq!(failed.is_error, Some(true));
        assert_eq!(failed.tool_name.as_deref(), Some("Bash"));
        assert_eq!(failed.tool_use_ordinal, Some(2));
        assert_eq!(failed.line, 5);
        assert_eq!(page.events[5].is_error, Some(false));
        assert_eq!(page.events[5].tool_name.as_deref(), Some("Read"));

        // A page in the middle of a line's events starts and ends where asked.
        let mid = index.page(&path, 2, 2).unwrap();
        let ordinals: Vec<_> = mid.events.iter().map(|e| e.ordinal).collect();
        assert_eq!(ordinals, [2, 3]);
        assert_eq!(mid.next_offset, Some(4));
        assert!(index.page(&path, 6, 10).unwrap().events.is_empty());
    }
}
