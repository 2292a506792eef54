//! A fast reader of transcript lines: the fields [`Turn`] holds, read straight off the line's
//! bytes, with everything else skipped by searching for the next quote or backslash instead
//! of walking it byte by byte.
//!
//! Why not serde alone: a line is mostly tool output the extractor never looks at, and
//! serde_json's generic visitors spent half of the extraction's time getting through it
//! (key by key, with a UTF-8 check per string). This reader handles the lines agents really
//! write; anything unusual — an escaped key, a field of an unexpected type, a duplicate
//! field, a float where a count goes, a control character, invalid UTF-8, bad JSON — makes
//! it step aside, and serde_json reads the line instead. So every line gets exactly
//! serde_json's answer, including its error for a bad line; the tests compare the two.

use std::borrow::Cow;

use memchr::memchr2;

use crate::transcript::{Block, Content, Int, Message, RawJson, Truthy, Turn, Usage};

/// Deeper nesting than this is left to serde_json (which refuses past 128).
const MAX_DEPTH: u32 = 100;

/// Parses one line: the fast reader when it can, serde_json otherwise.
pub fn turn(line: &[u8]) -> Result<Turn<'_>, serde_json::Error> {
    match fast(line) {
        Some(t) => Ok(t),
        None => serde_json::from_slice(line),
    }
}

/// The fast reader alone: `None` when the line is not one it reads.
pub(crate) fn fast(line: &[u8]) -> Option<Turn<'_>> {
    // Control characters are invalid inside strings and rare between tokens: one vectorised
    // test here spares every string skip a byte-by-byte check.
    if line.iter().fold(false, |any, &b| any | (b < 0x20)) {
        return None;
    }
    let text = std::str::from_utf8(line).ok()?;
    let mut c = Cursor { text, i: 0 };
    let turn = c.turn()?;
    c.ws();
    (c.i == text.len()).then_some(turn)
}

/// Each field read at most once: serde refuses a duplicate, so a duplicate goes to serde.
#[derive(Default)]
struct Seen(u16);

impl Seen {
    fn first(&mut self, bit: u16) -> Option<()> {
        let mask = 1 << bit;
        if self.0 & mask != 0 {
            return None;
        }
        self.0 |= mask;
        Some(())
    }
}

struct Cursor<'a> {
    text: &'a str,
    i: usize,
}

impl<'a> Cursor<'a> {
    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    fn ws(&mut self) {
        let b = self.bytes();
        while matches!(b.get(self.i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    /// The next significant byte, not consumed.
    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.bytes().get(self.i).copied()
    }

    /// Consumes the next significant byte, which must be `c`.
    fn eat(&mut self, c: u8) -> Option<()> {
        (self.peek()? == c).then(|| self.i += 1)
    }

    /// Consumes `word` (a literal) at the cursor.
    fn literal(&mut self, word: &str) -> Option<()> {
        let end = self.i + word.len();
        (self.bytes().get(self.i..end)? == word.as_bytes()).then(|| self.i = end)
    }

    /// A string at the cursor: the byte range of its body and whether it holds escapes.
    /// Escapes are checked as serde_json checks them; a `\u` naming half of a surrogate
    /// pair is left to serde_json.
    fn string(&mut self) -> Option<(usize, usize, bool)> {
        let b = self.bytes();
        if b.get(self.i) != Some(&b'"') {
            return None;
        }
        let start = self.i + 1;
        let (mut j, mut escaped) = (start, false);
        loop {
            let k = j + memchr2(b'"', b'\\', &b[j..])?;
            if b[k] == b'"' {
                self.i = k + 1;
                return Some((start, k, escaped));
            }
            escaped = true;
            j = match *b.get(k + 1)? {
                b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => k + 2,
                b'u' => {
                    let hex = std::str::from_utf8(b.get(k + 2..k + 6)?).ok()?;
                    let unit = u16::from_str_radix(hex, 16).ok()?;
                    if hex.starts_with('+') || (0xD800..=0xDFFF).contains(&unit) {
                        return None;
                    }
                    k + 6
                }
                _ => return None,
            };
        }
    }

    /// An object key without escapes, and the colon after it.
    fn key(&mut self) -> Option<&'a str> {
        self.ws();
        let (start, end, escaped) = self.string()?;
        if escaped {
            return None;
        }
        self.eat(b':')?;
        Some(&self.text[start..end])
    }

    /// A string value (borrowed when it holds no escapes) or null.
    fn text_or_null(&mut self) -> Option<Option<Cow<'a, str>>> {
        match self.peek()? {
            b'n' => self.literal("null").map(|()| None),
            b'"' => self.text().map(Some),
            _ => None,
        }
    }

    /// A string value.
    fn text(&mut self) -> Option<Cow<'a, str>> {
        let (start, end, escaped) = self.string()?;
        if !escaped {
            return Some(Cow::Borrowed(&self.text[start..end]));
        }
        // Unescaping is serde_json's, on just this string.
        serde_json::from_str::<String>(&self.text[start - 1..=end])
            .ok()
            .map(Cow::Owned)
    }

    /// A number by JSON's grammar: its text and whether it is an integer.
    fn number(&mut self) -> Option<(&'a str, bool)> {
        let b = self.bytes();
        let start = self.i;
        let mut j = start + usize::from(b.get(start) == Some(&b'-'));
        let digits = |j: usize| j + b[j..].iter().take_while(|c| c.is_ascii_digit()).count();
        match b.get(j)? {
            b'0' => j += 1,
            b'1'..=b'9' => j = digits(j),
            _ => return None,
        }
        let mut integer = true;
        if b.get(j) == Some(&b'.') {
            let end = digits(j + 1);
            if end == j + 1 {
                return None;
            }
            (j, integer) = (end, false);
        }
        if matches!(b.get(j), Some(b'e' | b'E')) {
            j += 1;
            if matches!(b.get(j), Some(b'+' | b'-')) {
                j += 1;
            }
            let end = digits(j);
            if end == j {
                return None;
            }
            (j, integer) = (end, false);
        }
        self.i = j;
        Some((&self.text[start..j], integer))
    }

    /// Skips any value; returns whether it was non-empty (an array or object with members).
    fn skip(&mut self, depth: u32) -> Option<bool> {
        if depth > MAX_DEPTH {
            return None;
        }
        match self.peek()? {
            b'"' => self.string().map(|_| true),
            b'{' => {
                self.i += 1;
                if self.peek()? == b'}' {
                    self.i += 1;
                    return Some(false);
                }
                loop {
                    self.ws();
                    self.string()?;
                    self.eat(b':')?;
                    self.skip(depth + 1)?;
                    if self.after_member(b'}')? {
                        return Some(true);
                    }
                }
            }
            b'[' => {
                self.i += 1;
                if self.peek()? == b']' {
                    self.i += 1;
                    return Some(false);
                }
                loop {
                    self.skip(depth + 1)?;
                    if self.after_member(b']')? {
                        return Some(true);
                    }
                }
            }
            b't' => self.literal("true").map(|()| true),
            b'f' => self.literal("false").map(|()| true),
            b'n' => self.literal("null").map(|()| true),
            _ => self.number().map(|_| true),
        }
    }

    /// After a member of an object or array: `,` (more follow: false) or `close` (true).
    fn after_member(&mut self, close: u8) -> Option<bool> {
        let c = self.peek()?;
        self.i += 1;
        match c {
            b',' => Some(false),
            c if c == close => Some(true),
            _ => None,
        }
    }

    /// The members of an object at the cursor, each handed to `member` with its key.
    fn object(&mut self, mut member: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        if self.peek()? == b'}' {
            self.i += 1;
            return Some(());
        }
        loop {
            let key = self.key()?;
            member(self, key)?;
            if self.after_member(b'}')? {
                return Some(());
            }
        }
    }

    fn turn(&mut self) -> Option<Turn<'a>> {
        let mut t = Turn::default();
        let mut seen = Seen::default();
        self.object(|c, key| {
            match key {
                "type" => {
                    seen.first(0)?;
                    t.kind = c.text_or_null()?;
                }
                "uuid" => {
                    seen.first(1)?;
                    t.uuid = c.text_or_null()?;
                }
                "parentUuid" => {
                    seen.first(2)?;
                    t.parent_uuid = c.text_or_null()?;
                }
                "sessionId" => {
                    seen.first(3)?;
                    t.session_id = c.text_or_null()?;
                }
                "cwd" => {
                    seen.first(4)?;
                    t.cwd = c.text_or_null()?;
                }
                "timestamp" => {
                    seen.first(5)?;
                    t.timestamp = c.text_or_null()?;
                }
                "message" => {
                    seen.first(6)?;
                    t.message = c.message()?;
                }
                // One field under two names, as serde's alias makes it.
                "tool_use_id" | "toolUseId" => {
                    seen.first(7)?;
                    t.tool_use_id = c.text_or_null()?;
                }
                "is_error" => {
                    seen.first(8)?;
                    t.is_error = c.truthy()?;
                }
                _ => {
                    c.skip(0)?;
                }
            };
            Some(())
        })?;
        Some(t)
    }

    fn message(&mut self) -> Option<Option<Message<'a>>> {
        if self.peek()? == b'n' {
            return self.literal("null").map(|()| None);
        }
        let mut m = Message::default();
        let mut seen = Seen::default();
        self.object(|c, key| {
            match key {
                "model" => {
                    seen.first(0)?;
                    m.model = c.text_or_null()?;
                }
                "usage" => {
                    seen.first(1)?;
                    m.usage = c.usage()?;
                }
                "content" => {
                    seen.first(2)?;
                    m.content = c.content()?;
                }
                _ => {
                    c.skip(1)?;
                }
            };
            Some(())
        })?;
        Some(Some(m))
    }

    fn usage(&mut self) -> Option<Option<Usage>> {
        if self.peek()? == b'n' {
            return self.literal("null").map(|()| None);
        }
        let mut u = Usage::default();
        let mut seen = Seen::default();
        self.object(|c, key| {
            match key {
                "input_tokens" => {
                    seen.first(0)?;
                    u.input_tokens = c.int()?;
                }
                "output_tokens" => {
                    seen.first(1)?;
                    u.output_tokens = c.int()?;
                }
                "cache_read_input_tokens" => {
                    seen.first(2)?;
                    u.cache_read_input_tokens = c.int()?;
                }
                "cache_creation_input_tokens" => {
                    seen.first(3)?;
                    u.cache_creation_input_tokens = c.int()?;
                }
                _ => {
                    c.skip(2)?;
                }
            };
            Some(())
        })?;
        Some(Some(u))
    }

    /// [`Int`]'s rule: an integer is itself (clamped as serde_json clamps it); any other
    /// value is 0.
    fn int(&mut self) -> Option<Int> {
        match self.peek()? {
            b'-' | b'0'..=b'9' => {
                let (n, integer) = self.number()?;
                Some(Int(if !integer {
                    0
                } else if let Ok(v) = n.parse::<i64>() {
                    v
                } else if let Ok(v) = n.parse::<u64>() {
                    i64::try_from(v).unwrap_or(i64::MAX)
                } else {
                    0
                }))
            }
            _ => self.skip(3).map(|_| Int(0)),
        }
    }

    /// [`Truthy`]'s rule. Floats are left to serde_json, whose rounding decides them.
    fn truthy(&mut self) -> Option<Truthy> {
        let b = match self.peek()? {
            b'-' | b'0'..=b'9' => {
                let (n, integer) = self.number()?;
                if !integer {
                    return None;
                }
                n.trim_start_matches('-').bytes().any(|d| d != b'0')
            }
            b'"' => {
                let (start, end, _) = self.string()?;
                end > start
            }
            b't' => self.literal("true").map(|()| true)?,
            b'f' => self.literal("false").map(|()| false)?,
            b'n' => self.literal("null").map(|()| false)?,
            _ => self.skip(3)?,
        };
        Some(Truthy(b))
    }

    fn content(&mut self) -> Option<Content<'a>> {
        match self.peek()? {
            b'"' => self.text().map(Content::Text),
            b'[' => {
                self.i += 1;
                let mut blocks = Vec::new();
                if self.peek()? == b']' {
                    self.i += 1;
                    return Some(Content::Blocks(blocks));
                }
                loop {
                    // Elements that are not objects are skipped, as serde's reader skips them.
                    if self.peek()? == b'{' {
                        blocks.push(self.block()?);
                    } else {
                        self.skip(3)?;
                    }
                    if self.after_member(b']')? {
                        return Some(Content::Blocks(blocks));
                    }
                }
            }
            _ => self.skip(2).map(|_| Content::None),
        }
    }

    fn block(&mut self) -> Option<Block<'a>> {
        let mut b = Block::default();
        let mut seen = Seen::default();
        self.object(|c, key| {
            match key {
                "type" => {
                    seen.first(0)?;
                    b.kind = c.text_or_null()?;
                }
                "text" => {
                    seen.first(1)?;
                    b.text = c.text_or_null()?;
                }
                "id" => {
                    seen.first(2)?;
                    b.id = c.text_or_null()?;
                }
                "name" => {
                    seen.first(3)?;
                    b.name = c.text_or_null()?;
                }
                "input" => {
                    seen.first(4)?;
                    b.input = c.raw()?;
                }
                "tool_use_id" => {
                    seen.first(5)?;
                    b.tool_use_id = c.text_or_null()?;
                }
                "is_error" => {
                    seen.first(6)?;
                    b.is_error = c.truthy()?;
                }
                _ => {
                    c.skip(4)?;
                }
            };
            Some(())
        })?;
        Some(b)
    }

    /// A value's JSON text, or None for null (as `Option<&RawValue>` reads it).
    fn raw(&mut self) -> Option<Option<RawJson<'a>>> {
        if self.peek()? == b'n' {
            return self.literal("null").map(|()| None);
        }
        let start = self.i;
        self.skip(4)?;
        Some(Some(RawJson(&self.text[start..self.i])))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// serde_json's reading of a line, as text (value or error).
    fn by_serde(line: &[u8]) -> String {
        format!("{:?}", serde_json::from_slice::<Turn<'_>>(line))
    }

    /// Asserts that [`turn`] gives serde_json's answer, and returns whether the fast reader
    /// read the line itself.
    fn agrees(line: &[u8]) -> bool {
        assert_eq!(
            format!("{:?}", turn(line)),
            by_serde(line),
            "line: {}",
            String::from_utf8_lossy(line)
        );
        match fast(line) {
            Some(t) => {
                assert_eq!(
                    format!("{:?}", Ok::<_, serde_json::Error>(t)),
                    by_serde(line)
                );
                true
            }
            None => false,
        }
    }

    #[test]
    fn the_fixture_and_a_generated_corpus_read_as_serde_reads_them_and_fast() {
        let mut text = include_bytes!("../fixtures/labelled.jsonl").to_vec();
        let mut rng = crate::corpus::Rng::new(7);
        for index in 0..20 {
            crate::corpus::session(&mut text, &mut rng, index, 40).unwrap();
        }
        let (mut lines, mut fast_lines) = (0, 0);
        for line in text.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            lines += 1;
            fast_lines += usize::from(agrees(line));
        }
        // Only the corpus's deliberately cut lines (and the fixture's bad ones) go to serde.
        assert!(lines > 800, "{lines} lines");
        assert!(
            fast_lines * 100 >= lines * 97,
            "{fast_lines} of {lines} read fast"
        );
    }

    #[test]
    fn cut_and_damaged_lines_get_serde_jsons_answer() {
        let mut text = Vec::new();
        let mut rng = crate::corpus::Rng::new(11);
        for index in 0..3 {
            crate::corpus::session(&mut text, &mut rng, index, 12).unwrap();
        }
        const NOISE: &[u8] = b"{}[]\",:\\ 0123456789.eE+-tfnulrsa\xc3\x80\x7f";
        for line in text.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            for _ in 0..40 {
                let mut damaged = line.to_vec();
                match rng.below(3) {
                    0 => damaged.truncate(rng.below(line.len() as u64) as usize),
                    1 => {
                        let at = rng.below(line.len() as u64) as usize;
                        damaged[at] = NOISE[rng.below(NOISE.len() as u64) as usize];
                    }
                    _ => {
                        let at = rng.below(line.len() as u64) as usize;
                        damaged.remove(at);
                    }
                }
                agrees(&damaged);
            }
        }
    }

    #[test]
    fn unusual_lines_get_serde_jsons_answer() {
        let lines: &[&str] = &[
            // Read fast.
            r#"{}"#,
            r#" { "type" : "user" , "uuid" : null } "#,
            r#"{"type":"user","message":{"content":"tab\tand \"quotes\" \u00e9 \/ \\"}}"#,
            r#"{"type":"assistant","message":{"usage":{"input_tokens":-5,"output_tokens":18446744073709551615,"cache_read_input_tokens":99999999999999999999,"cache_creation_input_tokens":[1]}}}"#,
            r#"{"type":"assistant","message":{"usage":{"input_tokens":1.5,"output_tokens":"7","cache_read_input_tokens":true,"cache_creation_input_tokens":{"a":1}}}}"#,
            r#"{"type":"user","message":{"content":[1,"x",null,[{}],{"type":"tool_result","tool_use_id":"a","is_error":"yes"},{"type":"tool_result","is_error":0},{"is_error":-0},{"is_error":[]},{"is_error":[0]},{"is_error":{}},{"is_error":""}]}}"#,
            r#"{"type":"assistant","message":{"content":[{"type":"tool_use","id":"t","name":"Skill","input":{"skill":"a\u0062"}},{"type":"tool_use","input":null},{"type":"tool_use","input":"s"},{"type":"tool_use","input":[1, 2.5e3, -0.1E-2, true, false, null]}]}}"#,
            r#"{"type":"user","message":{"content":{"a":[1]}}}"#,
            r#"{"type":"user","message":{"content":null,"model":null,"usage":null}}"#,
            r#"{"type":"user","message":null,"toolUseId":"x","is_error":1}"#,
            r#"{"type":"tool_use_result","tool_use_id":"y","is_error":18446744073709551616}"#,
            r#"{"deep":[[[[[[[[[[{"a":[{"b":"c"}]}]]]]]]]]]],"type":"x"}"#,
            "{\"type\":\"user\",\"x\":\"caf\u{e9} \u{1F600}\"}",
            // Left to serde: escaped keys, duplicates, wrong types, floats that decide a
            // flag, structs written as arrays, surrogate escapes, bad JSON.
            r#"{"typ\u0065":"user"}"#,
            r#"{"type":"user","type":"assistant"}"#,
            r#"{"tool_use_id":"a","toolUseId":"b"}"#,
            r#"{"type":5}"#,
            r#"{"uuid":["a"]}"#,
            r#"{"is_error":0.0}"#,
            r#"{"is_error":1e-400}"#,
            r#"{"message":{"usage":[1,2,3,4]}}"#,
            r#"{"message":[null,{"input_tokens":1}]}"#,
            r#"{"message":"text"}"#,
            r#"{"message":{"content":[{"type":"text","text":5}]}}"#,
            r#"{"x":"\ud83d\ude00","type":"user"}"#,
            r#"{"x":"\ud83d","type":"user"}"#,
            r#"{"type":"user","x":"\q"}"#,
            r#"{"type":"user","x":"\u12"}"#,
            r#"{"type":"user","x":01}"#,
            r#"{"type":"user","x":1.}"#,
            r#"{"type":"user","x":-}"#,
            r#"{"type":"user","x":tru}"#,
            r#"{"type":"user"} x"#,
            r#"{"type":"user",}"#,
            r#"{"type":"user""#,
            r#"{"type":"user","message":{"content":[{"type":"tool_result","content":"cut"#,
            r#"{"type":"user"}}"#,
            r#"{"a":[1,]}"#,
            r#"{"a":{"b" 1}}"#,
            "{\"type\":\"user\",\"x\":\"raw\ttab\"}",
            "{\"type\":\"user\",\"x\":\"raw\u{1}control\"}",
            "{\r\n\"type\":\"user\"}",
        ];
        let mut fast_lines = 0;
        for line in lines {
            fast_lines += usize::from(agrees(line.as_bytes()));
        }
        assert_eq!(fast_lines, 13, "the first thirteen lines are read fast");
        // Invalid UTF-8 inside a skipped string, and nesting past serde_json's limit.
        agrees(b"{\"type\":\"user\",\"x\":\"\xff\xfe\"}");
        let deep = format!("{{\"a\":{}{}}}", "[".repeat(200), "]".repeat(200));
        assert!(!agrees(deep.as_bytes()));
    }
}
