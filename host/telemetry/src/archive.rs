//! A ZIP archive written front to back, for streaming a user's session files without
//! holding the archive: each entry's local header goes out before its data (sizes and CRC
//! follow in a data descriptor, general-purpose bit 3), and the central directory is
//! written at the end from what was remembered of each entry (a few dozen bytes each).
//!
//! Entries are DEFLATE-compressed. ZIP64 records are written when an entry or the archive
//! passes 4 GiB or 65,535 entries, so any size streams.

use std::io::{self, Read, Write};

use flate2::write::DeflateEncoder;
use flate2::Compression;

const LOCAL_HEADER: u32 = 0x0403_4b50;
const DATA_DESCRIPTOR: u32 = 0x0807_4b50;
const CENTRAL_HEADER: u32 = 0x0201_4b50;
const END_OF_CENTRAL: u32 = 0x0605_4b50;
const ZIP64_END: u32 = 0x0606_4b50;
const ZIP64_LOCATOR: u32 = 0x0706_4b50;
const FLAG_DESCRIPTOR_UTF8: u16 = (1 << 3) | (1 << 11);
const DEFLATE: u16 = 8;
const VERSION_ZIP64: u16 = 45;

struct Entry {
    name: String,
    crc: u32,
    compressed: u64,
    size: u64,
    offset: u64,
    dos_time: u16,
    dos_date: u16,
}

/// Counts the bytes passed to the inner writer.
struct Counting<W> {
    inner: W,
    written: u64,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Writes a ZIP archive to `W` one entry at a time.
pub struct ZipStream<W: Write> {
    out: Counting<W>,
    entries: Vec<Entry>,
}

/// An MS-DOS time and date for a UTC time (the format ZIP headers use).
fn dos_time(t: chrono::DateTime<chrono::Utc>) -> (u16, u16) {
    use chrono::{Datelike, Timelike};
    let year = t.year().clamp(1980, 2107) as u16;
    let time = (t.hour() as u16) << 11 | (t.minute() as u16) << 5 | (t.second() as u16 / 2);
    let date = (year - 1980) << 9 | (t.month() as u16) << 5 | t.day() as u16;
    (time, date)
}

impl<W: Write> ZipStream<W> {
    /// An empty archive over `out`.
    pub fn new(out: W) -> Self {
        Self {
            out: Counting {
                inner: out,
                written: 0,
            },
            entries: Vec::new(),
        }
    }

    /// Adds one entry, compressing `data` as it is read. Returns its uncompressed size.
    pub fn add(
        &mut self,
        name: &str,
        modified: chrono::DateTime<chrono::Utc>,
        data: &mut impl Read,
    ) -> io::Result<u64> {
        let (time, date) = dos_time(modified);
        let offset = self.out.written;
        let o = &mut self.out;
        put32(o, LOCAL_HEADER)?;
        put16(o, VERSION_ZIP64)?;
        put16(o, FLAG_DESCRIPTOR_UTF8)?;
        put16(o, DEFLATE)?;
        put16(o, time)?;
        put16(o, date)?;
        put32(o, 0)?; // CRC, in the descriptor
        put32(o, u32::MAX)?; // sizes, in the (ZIP64) descriptor
        put32(o, u32::MAX)?;
        put16(o, name.len() as u16)?;
        put16(o, 20)?; // a ZIP64 extra field, so readers expect 8-byte descriptor sizes
        o.write_all(name.as_bytes())?;
        put16(o, 0x0001)?;
        put16(o, 16)?;
        put64(o, 0)?;
        put64(o, 0)?;

        let before = o.written;
        let mut crc = crc32fast::Hasher::new();
        let mut size = 0u64;
        let mut encoder = DeflateEncoder::new(&mut *o, Compression::fast());
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = data.read(&mut buf)?;
            if n == 0 {
                break;
            }
            crc.update(&buf[..n]);
            size += n as u64;
            encoder.write_all(&buf[..n])?;
        }
        encoder.finish()?;
        let compressed = o.written - before;
        let crc = crc.finalize();
        put32(o, DATA_DESCRIPTOR)?;
        put32(o, crc)?;
        put64(o, compressed)?;
        put64(o, size)?;
        self.entries.push(Entry {
            name: name.to_owned(),
            crc,
            compressed,
            size,
            offset,
            dos_time: time,
            dos_date: date,
        });
        Ok(size)
    }

    /// Writes the central directory and returns the inner writer.
    pub fn finish(mut self) -> io::Result<W> {
        let start = self.out.written;
        let o = &mut self.out;
        for e in &self.entries {
            put32(o, CENTRAL_HEADER)?;
            put16(o, VERSION_ZIP64 | (3 << 8))?; // made by: Unix
            put16(o, VERSION_ZIP64)?;
            put16(o, FLAG_DESCRIPTOR_UTF8)?;
            put16(o, DEFLATE)?;
            put16(o, e.dos_time)?;
            put16(o, e.dos_date)?;
            put32(o, e.crc)?;
            put32(o, u32::MAX)?;
            put32(o, u32::MAX)?;
            put16(o, e.name.len() as u16)?;
            put16(o, 28)?; // ZIP64 extra: sizes and offset
            put16(o, 0)?; // comment
            put16(o, 0)?; // disk
            put16(o, 0)?; // internal attributes
            put32(o, 0o100644 << 16)?; // external: a regular file, rw-r--r--
            put32(o, u32::MAX)?;
            o.write_all(e.name.as_bytes())?;
            put16(o, 0x0001)?;
            put16(o, 24)?;
            put64(o, e.size)?;
            put64(o, e.compressed)?;
            put64(o, e.offset)?;
        }
        let end = o.written;
        let count = self.entries.len() as u64;
        // ZIP64 end record and locator, then the classic end record pointing at them.
        put32(o, ZIP64_END)?;
        put64(o, 44)?;
        put16(o, VERSION_ZIP64)?;
        put16(o, VERSION_ZIP64)?;
        put32(o, 0)?;
        put32(o, 0)?;
        put64(o, count)?;
        put64(o, count)?;
        put64(o, end - start)?;
        put64(o, start)?;
        put32(o, ZIP64_LOCATOR)?;
        put32(o, 0)?;
        put64(o, end)?;
        put32(o, 1)?;
        put32(o, END_OF_CENTRAL)?;
        put16(o, 0)?;
        put16(o, 0)?;
        put16(o, count.min(0xFFFF) as u16)?;
        put16(o, count.min(0xFFFF) as u16)?;
        put32(o, (end - start).min(u64::from(u32::MAX)) as u32)?;
        put32(o, u32::MAX)?;
        put16(o, 0)?;
        o.flush()?;
        Ok(self.out.inner)
    }
}

fn put16(o: &mut impl Write, v: u16) -> io::Result<()> {
    o.write_all(&v.to_le_bytes())
}

fn put32(o: &mut impl Write, v: u32) -> io::Result<()> {
    o.write_all(&v.to_le_bytes())
}

fn put64(o: &mut impl Write, v: u64) -> io::Result<()> {
    o.write_all(&v.to_le_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_archive_has_its_entries_and_the_central_directory() {
        let mut zip = ZipStream::new(Vec::new());
        let when = chrono::DateTime::parse_from_rfc3339("2026-11-25T10:20:30Z")
            .unwrap()
            .to_utc();
        assert_eq!(
            zip.add("a.jsonl", when, &mut &b"{\"x\":1}\n"[..]).unwrap(),
            8
        );
        zip.add("b.jsonl", when, &mut &b""[..]).unwrap();
        let bytes = zip.finish().unwrap();
        assert_eq!(&bytes[..4], &LOCAL_HEADER.to_le_bytes());
        // The classic end record is the last 22 bytes and counts two entries.
        let tail = &bytes[bytes.len() - 22..];
        assert_eq!(&tail[..4], &END_OF_CENTRAL.to_le_bytes());
        assert_eq!(u16::from_le_bytes([tail[10], tail[11]]), 2);
        assert_eq!(
            dos_time(when),
            ((10 << 11) | (20 << 5) | 15, (46 << 9) | (11 << 5) | 25)
        );
    }
}
