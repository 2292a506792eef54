//! The durable per-connection event log: every accepted delivery is appended here and
//! fsynced before the sender gets its 2xx, so a crash after the acknowledgement loses nothing.
//!
//! One writer thread owns the open segment and commits in groups: it takes every append
//! queued while the previous `fdatasync` ran, writes them in one go and syncs once, so the
//! cost of a sync is shared by all deliveries waiting on it (the only way to acknowledge
//! thousands of events a second on a disk that syncs a few hundred times a second).
//!
//! Segments are `log/<n>.log`, never reopened for appending: a process that restarts writes
//! a new segment, so a torn tail (a write cut short by a crash, never acknowledged) stays at
//! the end of a sealed segment, where reading stops. The compactor asks the writer to
//! [`rotate`](EventLog::rotate), folds every sealed segment into the tables, then removes them.
//!
//! A record: `0xA7`, payload length (u32 LE), CRC-32 of the payload (u32 LE), payload:
//! received-at ms (i64 LE), origin (u8), id length (u16 LE), delivery id, body.

use std::fs::{File, OpenOptions};
use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::Mutex;

use tokio::sync::{oneshot, watch};

const MAGIC: u8 = 0xA7;
const HEADER: usize = 9;
/// A segment past this size is sealed and a new one started.
const SEGMENT_BYTES: u64 = 64 << 20;
/// Most appends written under one sync.
const MAX_GROUP: usize = 8_192;

/// Where a record came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// A signed webhook delivery.
    Webhook,
    /// An issue fetched by backfill over the tracker's REST search.
    Backfill,
}

/// One logged delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The delivery identifier (the sender's, or a hash of the body).
    pub delivery_id: String,
    /// When svc received it, ms since the epoch.
    pub received_at_ms: i64,
    /// Webhook or backfill.
    pub origin: Origin,
    /// The raw body.
    pub body: Vec<u8>,
}

impl Record {
    fn encode(&self, out: &mut Vec<u8>) {
        let id = self.delivery_id.as_bytes();
        let id_len = id.len().min(u16::MAX as usize);
        let payload_len = 8 + 1 + 2 + id_len + self.body.len();
        out.reserve(HEADER + payload_len);
        out.push(MAGIC);
        out.extend_from_slice(&(payload_len as u32).to_le_bytes());
        let crc_at = out.len();
        out.extend_from_slice(&[0; 4]);
        let start = out.len();
        out.extend_from_slice(&self.received_at_ms.to_le_bytes());
        out.push(match self.origin {
            Origin::Webhook => 0,
            Origin::Backfill => 1,
        });
        out.extend_from_slice(&(id_len as u16).to_le_bytes());
        out.extend_from_slice(&id[..id_len]);
        out.extend_from_slice(&self.body);
        let crc = crc32fast::hash(&out[start..]);
        out[crc_at..crc_at + 4].copy_from_slice(&crc.to_le_bytes());
    }

    fn decode(payload: &[u8]) -> Option<Self> {
        let received_at_ms = i64::from_le_bytes(payload.get(..8)?.try_into().ok()?);
        let origin = match *payload.get(8)? {
            0 => Origin::Webhook,
            1 => Origin::Backfill,
            _ => return None,
        };
        let id_len = u16::from_le_bytes(payload.get(9..11)?.try_into().ok()?) as usize;
        let id = payload.get(11..11 + id_len)?;
        Some(Self {
            delivery_id: String::from_utf8(id.to_vec()).ok()?,
            received_at_ms,
            origin,
            body: payload[11 + id_len..].to_vec(),
        })
    }
}

/// The records of one segment, up to a torn or corrupt tail.
#[derive(Debug, Default)]
pub struct SegmentRead {
    /// The whole records, in order.
    pub records: Vec<Record>,
    /// Bytes after the last whole record (a write a crash cut short).
    pub torn_bytes: u64,
}

/// Reads a segment; a record cut short or failing its checksum ends it.
pub fn read_segment(path: &Path) -> std::io::Result<SegmentRead> {
    let mut bytes = Vec::new();
    BufReader::new(File::open(path)?).read_to_end(&mut bytes)?;
    let mut out = SegmentRead::default();
    let mut at = 0usize;
    while at < bytes.len() {
        let whole = (|| {
            let header = bytes.get(at..at + HEADER)?;
            if header[0] != MAGIC {
                return None;
            }
            let len = u32::from_le_bytes(header[1..5].try_into().ok()?) as usize;
            let crc = u32::from_le_bytes(header[5..9].try_into().ok()?);
            let payload = bytes.get(at + HEADER..at + HEADER + len)?;
            (crc32fast::hash(payload) == crc)
                .then(|| Record::decode(payload))
                .flatten()
                .map(|r| (r, HEADER + len))
        })();
        match whole {
            Some((record, used)) => {
                out.records.push(record);
                at += used;
            }
            None => {
                out.torn_bytes = (bytes.len() - at) as u64;
                break;
            }
        }
    }
    Ok(out)
}

/// The segments in `dir`, oldest first.
pub fn segments(dir: &Path) -> std::io::Result<Vec<(u64, PathBuf)>> {
    let mut found = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(found),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let path = entry?.path();
        let number = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".log"))
            .and_then(|n| n.parse::<u64>().ok());
        if let Some(n) = number {
            found.push((n, path));
        }
    }
    found.sort();
    Ok(found)
}

fn segment_path(dir: &Path, n: u64) -> PathBuf {
    dir.join(format!("{n:020}.log"))
}

/// Makes a directory's entries (a created or removed segment) durable.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

enum Command {
    Append {
        seq: u64,
        record: Record,
        done: oneshot::Sender<std::io::Result<()>>,
    },
    Rotate {
        done: oneshot::Sender<std::io::Result<u64>>,
    },
}

/// How far the log is durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Durable {
    /// Every append up to this sequence number is on disk.
    pub through: u64,
    /// A write or sync failed: nothing more is accepted until a restart.
    pub failed: bool,
}

/// The log's writing side; see the module docs.
#[derive(Debug)]
pub struct EventLog {
    dir: PathBuf,
    /// The next sequence number and the queue, under one lock so queue order is seq order.
    queue: Mutex<(u64, mpsc::Sender<Command>)>,
    durable: watch::Receiver<Durable>,
}

impl EventLog {
    /// Opens `dir` for appending: a new segment after the existing ones, which are left for
    /// the compactor.
    pub fn open(dir: &Path) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let first = segments(dir)?.last().map_or(1, |(n, _)| n + 1);
        let file = create_segment(dir, first)?;
        let (tx, rx) = mpsc::channel();
        let (durable_tx, durable) = watch::channel(Durable {
            through: 0,
            failed: false,
        });
        let writer = Writer {
            dir: dir.to_owned(),
            number: first,
            file,
            written: 0,
            durable: durable_tx,
        };
        std::thread::Builder::new()
            .name("ticketing-log".into())
            .spawn(move || writer.run(rx))?;
        Ok(Self {
            dir: dir.to_owned(),
            queue: Mutex::new((0, tx)),
            durable,
        })
    }

    /// The log's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Queues `record` and returns its sequence number and a receiver that completes once it
    /// is durable. Callers that must order queueing against their own state (dedupe) call
    /// this under their lock and wait outside it.
    pub fn enqueue(&self, record: Record) -> (u64, oneshot::Receiver<std::io::Result<()>>) {
        let (done, wait) = oneshot::channel();
        let mut queue = self.queue.lock().expect("log queue lock");
        queue.0 += 1;
        let seq = queue.0;
        // A send fails only when the writer thread is gone; the dropped `done` says so.
        let _ = queue.1.send(Command::Append { seq, record, done });
        (seq, wait)
    }

    /// Waits until appends up to `seq` are durable.
    pub async fn wait_durable(&self, seq: u64) -> std::io::Result<()> {
        let mut durable = self.durable.clone();
        let state = durable
            .wait_for(|d| d.through >= seq || d.failed)
            .await
            .map_err(|_| std::io::Error::other("the event log's writer stopped"))?;
        if state.through >= seq {
            Ok(())
        } else {
            Err(std::io::Error::other(
                "the event log could not be written; deliveries are refused until a restart",
            ))
        }
    }

    /// Seals the open segment and starts the next; returns the sealed segment's number
    /// (every record queued before this call is in it or an earlier one). An empty open
    /// segment is left open and the number before it returned.
    pub async fn rotate(&self) -> std::io::Result<u64> {
        let (done, wait) = oneshot::channel();
        {
            let queue = self.queue.lock().expect("log queue lock");
            let _ = queue.1.send(Command::Rotate { done });
        }
        wait.await
            .map_err(|_| std::io::Error::other("the event log's writer stopped"))?
    }

    /// Where the log stands.
    pub fn durable(&self) -> Durable {
        *self.durable.borrow()
    }
}

fn create_segment(dir: &Path, n: u64) -> std::io::Result<File> {
    let file = OpenOptions::new()
        .create_new(true)
        .append(true)
        .open(segment_path(dir, n))?;
    sync_dir(dir)?;
    Ok(file)
}

struct Writer {
    dir: PathBuf,
    number: u64,
    file: File,
    written: u64,
    durable: watch::Sender<Durable>,
}

impl Writer {
    fn run(mut self, rx: mpsc::Receiver<Command>) {
        let mut buf = Vec::with_capacity(1 << 20);
        let mut failed = false;
        while let Ok(first) = rx.recv() {
            let mut group = vec![first];
            while group.len() < MAX_GROUP {
                match rx.try_recv() {
                    Ok(c) => group.push(c),
                    Err(_) => break,
                }
            }
            buf.clear();
            let mut appended = Vec::new();
            let mut rotations = Vec::new();
            let mut last_seq = None;
            for command in group {
                match command {
                    Command::Append { seq, record, done } => {
                        record.encode(&mut buf);
                        appended.push(done);
                        last_seq = Some(seq);
                    }
                    Command::Rotate { done } => rotations.push(done),
                }
            }
            let wrote = if failed {
                Err(std::io::Error::other(
                    "the event log failed earlier; deliveries are refused until a restart",
                ))
            } else if buf.is_empty() {
                Ok(())
            } else {
                self.file
                    .write_all(&buf)
                    .and_then(|()| self.file.sync_data())
            };
            match wrote {
                Ok(()) => {
                    self.written += buf.len() as u64;
                    if let Some(seq) = last_seq {
                        self.durable.send_modify(|d| d.through = seq);
                    }
                    for done in appended {
                        let _ = done.send(Ok(()));
                    }
                }
                Err(e) => {
                    if !failed {
                        tracing::error!(dir = %self.dir.display(), "event log write failed: {e}");
                    }
                    failed = true;
                    self.durable.send_modify(|d| d.failed = true);
                    for done in appended {
                        let _ = done.send(Err(std::io::Error::new(e.kind(), e.to_string())));
                    }
                }
            }
            if self.written == 0 {
                // Nothing to seal: what is sealed already is everything written.
                for done in rotations {
                    let _ = done.send(Ok(self.number - 1));
                }
                continue;
            }
            if !rotations.is_empty() || self.written >= SEGMENT_BYTES {
                let sealed = self.number;
                let next = if failed {
                    Err(std::io::Error::other("the event log failed earlier"))
                } else {
                    create_segment(&self.dir, sealed + 1)
                };
                match next {
                    Ok(file) => {
                        self.file = file;
                        self.number = sealed + 1;
                        self.written = 0;
                        for done in rotations {
                            let _ = done.send(Ok(sealed));
                        }
                    }
                    Err(e) => {
                        for done in rotations {
                            let _ = done.send(Err(std::io::Error::new(e.kind(), e.to_string())));
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str) -> Record {
        Record {
            delivery_id: id.into(),
            received_at_ms: 1_700_000_000_000,
            origin: Origin::Webhook,
            body: format!("{{\"id\":\"{id}\"}}").into_bytes(),
        }
    }

    #[tokio::test]
    async fn appends_are_durable_in_order_rotation_seals_and_a_torn_tail_is_dropped() {
        let dir = crate::TestDir::new();
        let log = EventLog::open(dir.path()).unwrap();
        let mut waits = Vec::new();
        for i in 0..100 {
            waits.push(log.enqueue(record(&format!("d{i}"))));
        }
        for (_, wait) in waits {
            wait.await.unwrap().unwrap();
        }
        assert_eq!(log.durable().through, 100);
        let sealed = log.rotate().await.unwrap();
        assert_eq!(
            log.rotate().await.unwrap(),
            sealed,
            "nothing new: nothing sealed"
        );
        let (_, w) = log.enqueue(record("after"));
        w.await.unwrap().unwrap();
        let segs = segments(dir.path()).unwrap();
        assert_eq!(segs.len(), 2);
        assert_eq!(segs[0].0, sealed);
        let read = read_segment(&segs[0].1).unwrap();
        let ids: Vec<_> = read.records.iter().map(|r| r.delivery_id.clone()).collect();
        assert_eq!(ids.len(), 100);
        assert_eq!((ids[0].as_str(), ids[99].as_str()), ("d0", "d99"));
        assert_eq!(read.records[5], record("d5"));

        // A crash mid-write: half a record at the end is not a record.
        let mut bytes = std::fs::read(&segs[0].1).unwrap();
        let mut half = Vec::new();
        record("torn").encode(&mut half);
        bytes.extend_from_slice(&half[..half.len() / 2]);
        std::fs::write(&segs[0].1, &bytes).unwrap();
        let read = read_segment(&segs[0].1).unwrap();
        assert_eq!(read.records.len(), 100);
        assert_eq!(read.torn_bytes, (half.len() / 2) as u64);

        // Reopening never appends to an old segment.
        drop(log);
        let again = EventLog::open(dir.path()).unwrap();
        let (_, w) = again.enqueue(record("new"));
        w.await.unwrap().unwrap();
        assert_eq!(segments(dir.path()).unwrap().len(), 3);
    }
}
