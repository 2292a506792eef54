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

/// A line reader over any `BufRead`, hashing every byte it passes (xxh3-128), so one read
/// of the file yields both its lines and its content hash.
pub struct LineReader<R> {
    inner: R,
    buf: Vec<u8>,
    max: usize,
    line_no: u64,
    bytes: u64,
    hasher: xxhash_rust::xxh3::Xxh3,
}

impl<R: BufRead> LineReader<R> {
    /// A reader with the default cap.
    pub fn new(inner: R) -> Self {
        Self::with_cap(inner, MAX_LINE_BYTES)
    }

    /// A reader with a given cap (tests use small ones).
    pub fn with_cap(inner: R, max: usize) -> Self {
        Self {
            inner,
            buf: Vec::new(),
            max,
            line_no: 0,
            bytes: 0,
            hasher: xxhash_rust::xxh3::Xxh3::new(),
        }
    }

    /// The next line and its 1-based number, or None at the end.
    pub fn next_line(&mut self) -> std::io::Result<Option<(u64, Line<'_>)>> {
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
            self.hasher.update(&available[..used]);
            match skipped.as_mut() {
                Some(n) => *n += chunk.len() as u64,
                None if self.buf.len() + chunk.len() > self.max => {
                    skipped = Some((self.buf.len() + chunk.len()) as u64);
                    self.buf = Vec::new();
                }
                None => self.buf.extend_from_slice(chunk),
            }
            self.inner.consume(used);
            self.bytes += used as u64;
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
            None => {
                let mut bytes = self.buf.as_slice();
                if bytes.last() == Some(&b'\r') {
                    bytes = &bytes[..bytes.len() - 1];
                }
                Line::Text { bytes, terminated }
            }
        };
        Ok(Some((self.line_no, line)))
    }

    /// Bytes read so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The content hash of everything read (call at the end).
    pub fn hash(&self) -> String {
        format!("{:032x}", self.hasher.digest128())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_split_capped_and_hashed() {
        let data = b"a\r\n\nbbbbbbbbbb\ncc";
        let mut r = LineReader::with_cap(std::io::BufReader::with_capacity(3, &data[..]), 4);
        let mut got = Vec::new();
        while let Some((n, line)) = r.next_line().unwrap() {
            got.push(match line {
                Line::Text { bytes, terminated } => {
                    format!("{n}:{}:{terminated}", String::from_utf8_lossy(bytes))
                }
                Line::TooLong(len) => format!("{n}:too long {len}"),
            });
        }
        assert_eq!(got, ["1:a:true", "2::true", "3:too long 10", "4:cc:false"]);
        assert_eq!(r.bytes(), data.len() as u64);
        let (whole, _) = crate::files::hash_reader(&data[..]).unwrap();
        assert_eq!(r.hash(), whole);
    }
}
