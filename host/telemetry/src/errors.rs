//! The failed tool calls of a session file, found in a first, cheap pass over it.
//!
//! Why a separate pass: a call's `is_error` is decided by a flag that may come on any later
//! line (a `tool_result` block or a legacy `tool_use_result` turn), and even before the
//! call. Knowing every flag up front lets the extractor hand events on as it reads instead
//! of holding a whole file's events until its last line, so its memory stays flat in the
//! file's size. The pass parses only lines holding an `"is_error"` key whose value is not
//! plainly `false` or `null` (a few per file); every other line costs one substring search.
//! A key spelled with JSON escapes (`"is\u005ferror"`) is not seen as a flag.

use std::collections::HashSet;
use std::io::BufRead;

use memchr::memmem;

use crate::extract::owned;
use crate::lines::{Line, LineReader};
use crate::transcript::{Content, Turn};

const KEY: &[u8] = b"\"is_error\"";

/// What the first pass found.
#[derive(Debug, Default)]
pub struct Flags {
    /// The ids of the tool calls some line marks as failed.
    pub errored: HashSet<String>,
    /// Bytes the pass covered: the second pass reads exactly these, so a file still being
    /// written cannot show it lines whose flags the first pass never saw.
    pub bytes: u64,
    /// The content hash of those bytes.
    pub hash: String,
}

/// Reads `reader` to its end, collecting every error flag.
pub fn scan(reader: impl BufRead) -> std::io::Result<Flags> {
    let finder = memmem::Finder::new(KEY);
    let mut lines = LineReader::new(reader);
    let mut flags = Flags::default();
    while let Some((_, line)) = lines.next_line()? {
        let Line::Text { bytes, .. } = line else {
            continue;
        };
        if !finder
            .find_iter(bytes)
            .any(|at| may_be_true(&bytes[at + KEY.len()..]))
        {
            continue;
        }
        if let Ok(turn) = crate::reader::turn(bytes) {
            collect(&turn, &mut flags.errored);
        }
    }
    flags.bytes = lines.bytes();
    flags.hash = lines.hash().unwrap_or_default();
    Ok(flags)
}

/// [`scan`] over a file already in memory: the key is searched for in the whole of it at
/// once, and only the lines it is found on are looked at.
pub fn scan_slice(bytes: &[u8]) -> Flags {
    let mut flags = Flags {
        bytes: bytes.len() as u64,
        hash: format!("{:032x}", xxhash_rust::xxh3::xxh3_128(bytes)),
        ..Flags::default()
    };
    let mut parsed_up_to = 0;
    for at in memmem::find_iter(bytes, KEY) {
        if at < parsed_up_to || !may_be_true(&bytes[at + KEY.len()..]) {
            continue;
        }
        let start = memchr::memrchr(b'\n', &bytes[..at]).map_or(0, |i| i + 1);
        let end = memchr::memchr(b'\n', &bytes[at..]).map_or(bytes.len(), |i| at + i);
        parsed_up_to = end;
        let line = &bytes[start..end];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if let Ok(turn) = crate::reader::turn(line) {
            collect(&turn, &mut flags.errored);
        }
    }
    flags
}

/// Whether the value after a key (`rest` starts just past its closing quote) might be
/// truthy: anything but `false` or `null` after the colon.
fn may_be_true(rest: &[u8]) -> bool {
    let mut rest = rest.trim_ascii_start();
    match rest.split_first() {
        Some((b':', after)) => rest = after.trim_ascii_start(),
        // Not a key (a value that happens to read "is_error"): nothing to decide.
        _ => return false,
    }
    !(rest.starts_with(b"false") || rest.starts_with(b"null"))
}

/// The error flags one turn carries.
fn collect(turn: &Turn<'_>, errored: &mut HashSet<String>) {
    if turn.kind.as_deref() == Some("tool_use_result") && turn.is_error.0 {
        errored.extend(owned(&turn.tool_use_id));
    }
    if let Some(Content::Blocks(blocks)) = turn.message.as_ref().map(|m| &m.content) {
        for b in blocks {
            if b.kind.as_deref() == Some("tool_result") && b.is_error.0 {
                errored.extend(owned(&b.tool_use_id));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_truthy_flags_are_collected_and_plain_false_lines_are_not_parsed() {
        let text = br#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"a","is_error":false}]}}
{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"b","is_error" : true}]}}
{"type":"tool_use_result","toolUseId":"c","is_error":1}
{"type":"tool_use_result","tool_use_id":"d","is_error":null}
{"type":"user","message":{"content":[{"type":"text","text":"\"is_error\": true is only text"}]}}
{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"e","is_error":"yes"}]}}
not json "is_error": true
"#;
        let flags = scan(&text[..]).unwrap();
        let in_memory = scan_slice(text);
        assert_eq!(
            (&in_memory.errored, in_memory.bytes, &in_memory.hash),
            (&flags.errored, flags.bytes, &flags.hash)
        );
        let mut got: Vec<&str> = flags.errored.iter().map(String::as_str).collect();
        got.sort_unstable();
        assert_eq!(got, ["b", "c", "e"]);
        assert_eq!(flags.bytes, text.len() as u64);
        assert!(!may_be_true(b": false}"));
        assert!(!may_be_true(b"\n:\tnull"));
        assert!(!may_be_true(b" , 1"));
        assert!(may_be_true(b":true"));
        assert!(
            may_be_true(b": \"\""),
            "an empty string is parsed to be decided"
        );
    }
}
