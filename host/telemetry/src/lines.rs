//! Reading a session file line by line with a bounded buffer.
//!
//! A line longer than the cap is skipped to its newline without being held (memory stays
//! flat whatever the file holds), and the last line of a file still being written — one
//! with no newline — is reported as such, so the caller can tell "cut short" from "bad".

use std::io::BufRead;

/// Longest line parsed (longer ones are counted and skipped).
pub const MAX_LINE_BYTES: usize = 64 * 1024 * 1024;

/// One line as read.
#[derive(Debug, PartialEq, Eq)]
pub enum Line<'a> {
    /// A whole line, without its newline; `terminated` is false for a last line with no
    /// newline.
    Text {
        /// The bytes.
        bytes: &'a [u8],
        /// Whether a newline ended it.
        terminated: bool,
    },
    /// A line over the cap, skipped; its length.
    TooLong(u64),
}

/// A line reader over any `BufRead`, hashing every byte it passes (xxh3-128) when asked to,
/// so one read of the file yields both its lines and its content hash.
///
/// A line that lies whole in the inner reader's buffer is lent straight from it; only a line
/// that straddles a refill is copied. The consume of a lent line waits for the next call.
pub struct LineReader<R> {
    inner: R,
    buf: Vec<u8>,
    /// Bytes of the inner buffer lent out by the last call, consumed by the next one.
    lent: usize,
    max: usize,
    line_no: u64,
    bytes: u64,
    hasher: Option<xxhash_rust::xxh3::Xxh3>,
}

impl<R: BufRead> LineReader<R> {
    /// A reader with the default cap that hashes what it reads.
    pub fn new(inner: R) -> Self {
        Self::with_cap(inner, MAX_LINE_BYTES)
    }

    /// A reader with the default cap that does not hash.
    pub fn unhashed(inner: R) -> Self {
        Self {
            hasher: None,
            ..Self::new(inner)
        }
    }

    /// A hashing reader with a given cap (tests use small ones).
    pub fn with_cap(inner: R, max: usize) -> Self {
        Self {
            inner,
            buf: Vec::new(),
            lent: 0,
            max,
            line_no: 0,
            bytes: 0,
            hasher: Some(xxhash_rust::xxh3::Xxh3::new()),
        }
    }

    /// The next line and its 1-based number, or None at the end.
    pub fn next_line(&mut self) -> std::io::Result<Option<(u64, Line<'_>)>> {
        self.inner.consume(std::mem::take(&mut self.lent));
        self.buf.clear();
        let mut skipped: Option<u64> = None;
        let mut terminated = false;
        let mut any = false;
        loop {
            let available = match self.inner.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if available.is_empty() {
                break;
            }
            any = true;
            let (chunk, done) = match memchr::memchr(b'\n', available) {
                Some(i) => (&available[..i], Some(i + 1)),
                None => (available, None),
            };
            let used = done.unwrap_or(available.len());
            if let Some(h) = self.hasher.as_mut() {
                h.update(&available[..used]);
            }
            self.bytes += used as u64;
            if done.is_some() && skipped.is_none() && self.buf.is_empty() && chunk.len() <= self.max
            {
                // The common case: the whole line is in the inner buffer; lend it. The buffer
                // is asked for again (it is unchanged) because a borrow taken inside the loop
                // cannot be returned from it.
                self.line_no += 1;
                self.lent = used;
                let available = self.inner.fill_buf()?;
                return Ok(Some((self.line_no, text(&available[..used - 1], true))));
            }
            match skipped.as_mut() {
                Some(n) => *n += chunk.len() as u64,
                None if self.buf.len() + chunk.len() > self.max => {
                    skipped = Some((self.buf.len() + chunk.len()) as u64);
                    self.buf = Vec::new();
                }
                None => self.buf.extend_from_slice(chunk),
            }
            self.inner.consume(used);
            if done.is_some() {
                terminated = true;
                break;
            }
        }
        if !any {
            return Ok(None);
        }
        self.line_no += 1;
        let line = match skipped {
            Some(n) => Line::TooLong(n),
            None => text(&self.buf, terminated),
        };
        Ok(Some((self.line_no, line)))
    }

    /// Bytes read so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The content hash of everything read (call at the end of a hashing reader).
    pub fn hash(&self) -> Option<String> {
        self.hasher
            .as_ref()
            .map(|h| format!("{:032x}", h.digest128()))
    }
}

/// A line's text without a trailing carriage return.
fn text(bytes: &[u8], terminated: bool) -> Line<'_> {
    let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
    Line::Text { bytes, terminated }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every line as `number:text:terminated`, and the reader after its last line.
    fn read_all<R: BufRead>(mut r: LineReader<R>) -> (Vec<String>, LineReader<R>) {
        let mut got = Vec::new();
        while let Some((n, line)) = r.next_line().unwrap() {
            got.push(match line {
                Line::Text { bytes, terminated } => {
                    format!("{n}:{}:{terminated}", String::from_utf8_lossy(bytes))
                }
                Line::TooLong(len) => format!("{n}:too long {len}"),
            });
        }
        (got, r)
    }

    #[test]
    fn lines_are_split_capped_and_hashed_whether_lent_or_copied() {
        let data = b"a\r\n\nbbbbbbbbbb\ncc";
        let (whole, _) = crate::files::hash_reader(&data[..]).unwrap();
        // A 3-byte buffer copies every line that straddles a refill; a 64-byte one lends
        // whole lines straight from the buffer.
        for capacity in [3, 64] {
            let inner = std::io::BufReader::with_capacity(capacity, &data[..]);
            let (got, r) = read_all(LineReader::with_cap(inner, 4));
            assert_eq!(got, ["1:a:true", "2::true", "3:too long 10", "4:cc:false"]);
            assert_eq!(r.bytes(), data.len() as u64);
            assert_eq!(r.hash(), Some(whole.clone()));
        }
        let (got, r) = read_all(LineReader::unhashed(&data[..]));
        assert_eq!(
            got,
            ["1:a:true", "2::true", "3:bbbbbbbbbb:true", "4:cc:false"]
        );
        assert_eq!((r.bytes(), r.hash()), (data.len() as u64, None));
    }
}
