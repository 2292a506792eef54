//! Session files on disk: `<data dir>/user_sessions/<user dir>/<name>.jsonl`, the one root.
//!
//! An upload streams into a hidden temporary file in the owner's directory, is fsynced and
//! renamed over the old file, so a reader sees the whole old file or the whole new one and
//! an interrupted upload leaves nothing visible. The scanner lists only names that pass
//! [`SessionName::existing`], which temporary files never do.

use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use serde::Serialize;
use svc_core::{Error, ErrorKind};

use crate::names::{session_key, truncate, SessionName, UserDir};

/// Name of the directory under the data directory.
pub const ROOT_DIR: &str = "user_sessions";

/// The session file root.
#[derive(Debug, Clone)]
pub struct SessionFiles {
    root: PathBuf,
}

/// How a stored upload compares with what was there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StoredOutcome {
    /// No file of that name existed.
    New,
    /// It replaced a file with different content.
    Changed,
    /// The content was identical; the old file was left as it was.
    Unchanged,
}

/// What an upload stored.
#[derive(Debug, Clone, Serialize)]
pub struct StoredFile {
    /// `<user dir>/<file name>`.
    pub session_file: String,
    /// The sanitized file name.
    pub name: String,
    /// Bytes stored (after gzip decoding).
    pub bytes: u64,
    /// Content hash (xxh3-128, hex).
    pub content_hash: String,
    /// New, changed or unchanged.
    pub outcome: StoredOutcome,
}

/// A session file found by a scan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundFile {
    /// Owner directory.
    pub dir: UserDir,
    /// File name.
    pub name: SessionName,
    /// Full path.
    pub path: PathBuf,
    /// Size in bytes.
    pub size: u64,
    /// Modification time, ns since the epoch.
    pub mtime_ns: i64,
}

impl FoundFile {
    /// `<user dir>/<file name>`.
    pub fn key(&self) -> String {
        session_key(&self.dir, &self.name)
    }
}

/// A temporary upload file, removed on drop unless committed.
#[derive(Debug)]
pub struct PendingUpload {
    dir: PathBuf,
    path: PathBuf,
}

impl PendingUpload {
    /// Where the body is to be written.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for PendingUpload {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Hashes a reader's bytes (xxh3-128, hex).
pub fn hash_reader(mut r: impl Read) -> std::io::Result<(String, u64)> {
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut total = 0u64;
    loop {
        let n = r.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        total += n as u64;
    }
    Ok((format!("{:032x}", hasher.digest128()), total))
}

/// How an upload's bytes are encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// As stored.
    Identity,
    /// gzip, decoded before storing; more than `max_decoded_bytes` once decoded is refused.
    Gzip {
        /// The decoded size allowed (the upload limit, so compression cannot get around it).
        max_decoded_bytes: u64,
    },
}

impl SessionFiles {
    /// The root inside a data directory.
    pub fn new(data_dir: &Path) -> Self {
        Self {
            root: data_dir.join(ROOT_DIR),
        }
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// A file's path.
    pub fn path(&self, dir: &UserDir, name: &SessionName) -> PathBuf {
        self.root.join(dir.as_str()).join(name.as_str())
    }

    /// Starts an upload into `dir`: a hidden temporary file the caller writes the body to.
    pub fn begin_upload(&self, dir: &UserDir) -> Result<PendingUpload, Error> {
        let folder = self.root.join(dir.as_str());
        std::fs::create_dir_all(&folder).map_err(|e| Error::upload_io("create", &folder, e))?;
        let path = folder.join(format!(".upload-{}.tmp", uuid::Uuid::new_v4().simple()));
        Ok(PendingUpload { dir: folder, path })
    }

    /// Puts an upload in place under `name` (blocking: call from a blocking thread). A
    /// gzip body is decoded first; content identical to the existing file leaves that file
    /// untouched, so the pipeline does not read it again.
    pub fn commit(
        &self,
        upload: PendingUpload,
        dir: &UserDir,
        name: &SessionName,
        encoding: Encoding,
    ) -> Result<StoredFile, Error> {
        let upload = if let Encoding::Gzip { max_decoded_bytes } = encoding {
            let decoded = PendingUpload {
                dir: upload.dir.clone(),
                path: upload.path.with_extension("gunzip.tmp"),
            };
            let src =
                File::open(&upload.path).map_err(|e| Error::upload_io("read", &upload.path, e))?;
            let mut out = File::create(&decoded.path)
                .map_err(|e| Error::upload_io("create", &decoded.path, e))?;
            // One byte past the limit is enough to know a body decodes to too much: a small
            // gzip bomb must not fill the disk.
            let mut gz =
                flate2::read::MultiGzDecoder::new(BufReader::new(src)).take(max_decoded_bytes + 1);
            let decoded_bytes = std::io::copy(&mut gz, &mut out).map_err(|e| {
                if e.kind() == std::io::ErrorKind::InvalidInput
                    || e.kind() == std::io::ErrorKind::InvalidData
                    || e.kind() == std::io::ErrorKind::UnexpectedEof
                {
                    Error::bad_request(format!(
                        "The body is declared gzip (Content-Encoding) but is not: {e}"
                    ))
                } else {
                    Error::upload_io("write", &decoded.path, e)
                }
            })?;
            if decoded_bytes > max_decoded_bytes {
                return Err(Error::new(
                    ErrorKind::PayloadTooLarge,
                    format!(
                        "The gzip body decodes to more than this server's limit of \
                         {max_decoded_bytes} bytes"
                    ),
                ));
            }
            out.flush()
                .map_err(|e| Error::upload_io("write", &decoded.path, e))?;
            drop(upload);
            decoded
        } else {
            upload
        };
        let (hash, bytes) = File::open(&upload.path)
            .and_then(|f| hash_reader(BufReader::new(f)))
            .map_err(|e| Error::upload_io("read", &upload.path, e))?;
        let target = self.path(dir, name);
        let outcome = match std::fs::metadata(&target) {
            Err(_) => StoredOutcome::New,
            Ok(m) if m.len() != bytes => StoredOutcome::Changed,
            Ok(_) => {
                let same = File::open(&target)
                    .and_then(|f| hash_reader(BufReader::new(f)))
                    .is_ok_and(|(h, _)| h == hash);
                if same {
                    StoredOutcome::Unchanged
                } else {
                    StoredOutcome::Changed
                }
            }
        };
        if outcome != StoredOutcome::Unchanged {
            File::open(&upload.path)
                .and_then(|f| f.sync_all())
                .map_err(|e| Error::upload_io("sync", &upload.path, e))?;
            std::fs::rename(&upload.path, &target)
                .map_err(|e| Error::upload_io("rename", &target, e))?;
            // The rename itself must survive a crash: sync the directory entry.
            if let Ok(d) = File::open(&upload.dir) {
                let _ = d.sync_all();
            }
        }
        Ok(StoredFile {
            session_file: session_key(dir, name),
            name: name.to_string(),
            bytes,
            content_hash: hash,
            outcome,
        })
    }

    /// Every session file under the root (blocking), sorted by key. Directories and names
    /// that fail the path rules are skipped: nothing put there by hand can steer a path.
    pub fn scan(&self) -> std::io::Result<Vec<FoundFile>> {
        let mut found = Vec::new();
        let users = match std::fs::read_dir(&self.root) {
            Ok(r) => r,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(found),
            Err(e) => return Err(e),
        };
        for user in users {
            let user = user?;
            let Some(dir) = user.file_name().to_str().and_then(UserDir::existing) else {
                continue;
            };
            if !user.file_type()?.is_dir() {
                continue;
            }
            found.extend(self.scan_dir(&dir)?);
        }
        found.sort_by(|a, b| (&a.dir, &a.name).cmp(&(&b.dir, &b.name)));
        Ok(found)
    }

    /// One user's session files (blocking), in no order; none when the directory does not
    /// exist. Only regular files whose names pass the rules are listed: a symlink is never
    /// followed, so nothing placed there can point a reader outside the root.
    pub fn scan_dir(&self, dir: &UserDir) -> std::io::Result<Vec<FoundFile>> {
        let entries = match std::fs::read_dir(self.root.join(dir.as_str())) {
            Ok(r) => r,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut found = Vec::new();
        for entry in entries {
            let entry = entry?;
            let Some(name) = entry.file_name().to_str().and_then(SessionName::existing) else {
                continue;
            };
            let meta = entry.metadata()?;
            if !meta.is_file() {
                continue;
            }
            found.push(FoundFile {
                path: entry.path(),
                dir: dir.clone(),
                name,
                size: meta.len(),
                mtime_ns: mtime_ns(&meta),
            });
        }
        Ok(found)
    }

    /// A stored session file, opened for reading after the path guards (reference §6.1,
    /// with symlinks refused rather than resolved): `dir` and `name` must pass the path
    /// rules (400 naming which failed), the file must exist (404) and be a regular file,
    /// not a link (400), whose real path lies under the root (400).
    pub fn open(&self, dir: &str, name: &str) -> Result<OpenFile, Error> {
        let dir = UserDir::existing(dir).ok_or_else(|| {
            Error::bad_request(format!(
                "invalid username (session directory): {:?}",
                truncate(dir, 80)
            ))
        })?;
        let name = SessionName::existing(name).ok_or_else(|| {
            Error::bad_request(format!(
                "invalid session file name: {:?}",
                truncate(name, 80)
            ))
        })?;
        let path = self.path(&dir, &name);
        let not_found = || Error::not_found(format!("session not found: {dir}/{name}"));
        let meta = match std::fs::symlink_metadata(&path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(not_found()),
            Err(e) => return Err(Error::internal(format!("stat {}: {e}", path.display()))),
        };
        if meta.file_type().is_symlink() {
            return Err(Error::bad_request(
                "path escape rejected: the session file is a link",
            ));
        }
        if !meta.is_file() {
            return Err(not_found());
        }
        let real = std::fs::canonicalize(&path).map_err(|_| not_found())?;
        let root = std::fs::canonicalize(&self.root).map_err(|_| not_found())?;
        if !real.starts_with(&root) {
            return Err(Error::bad_request("path escape rejected"));
        }
        let file = File::open(&real).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => not_found(),
            _ => Error::internal(format!("open {}: {e}", real.display())),
        })?;
        let meta = file
            .metadata()
            .map_err(|e| Error::internal(format!("stat {}: {e}", real.display())))?;
        Ok(OpenFile {
            key: session_key(&dir, &name),
            dir,
            name,
            path: real,
            size: meta.len(),
            mtime_ns: mtime_ns(&meta),
            file,
        })
    }
}

/// A session file opened by [`SessionFiles::open`].
#[derive(Debug)]
pub struct OpenFile {
    /// `<user dir>/<file name>`.
    pub key: String,
    /// The owner's directory.
    pub dir: UserDir,
    /// The file name.
    pub name: SessionName,
    /// Its real path.
    pub path: PathBuf,
    /// Size when opened.
    pub size: u64,
    /// Modification time when opened (ns since the epoch).
    pub mtime_ns: i64,
    /// The open file (reads see this file even if it is replaced meanwhile).
    pub file: File,
}

fn mtime_ns(meta: &std::fs::Metadata) -> i64 {
    meta.modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use svc_store::testing::TempDir;

    fn upload(files: &SessionFiles, dir: &UserDir, name: &str, body: &[u8]) -> StoredFile {
        let pending = files.begin_upload(dir).unwrap();
        std::fs::write(pending.path(), body).unwrap();
        files
            .commit(
                pending,
                dir,
                &SessionName::sanitize(name).unwrap(),
                Encoding::Identity,
            )
            .unwrap()
    }

    #[test]
    fn uploads_replace_whole_files_and_notice_identical_content() {
        let tmp = TempDir::new();
        let files = SessionFiles::new(&tmp.0);
        let dir = UserDir::for_user("u1").unwrap();
        assert!(files.scan().unwrap().is_empty(), "no root yet");
        let a = upload(&files, &dir, "s.jsonl", b"{}\n");
        assert_eq!((a.outcome, a.bytes), (StoredOutcome::New, 3));
        let b = upload(&files, &dir, "s.jsonl", b"{}\n");
        assert_eq!(b.outcome, StoredOutcome::Unchanged);
        let c = upload(&files, &dir, "s.jsonl", b"{\"a\":1}\n");
        assert_eq!(c.outcome, StoredOutcome::Changed);
        // An abandoned upload leaves nothing behind.
        let pending = files.begin_upload(&dir).unwrap();
        std::fs::write(pending.path(), b"partial").unwrap();
        drop(pending);
        let names: Vec<String> = std::fs::read_dir(tmp.0.join(ROOT_DIR).join("u1"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, ["s.jsonl"]);
        let found = files.scan().unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(
            (found[0].key(), found[0].size),
            ("u1/s.jsonl".to_string(), 8)
        );
    }

    #[test]
    fn gzip_bodies_are_decoded_and_garbage_refused() {
        let tmp = TempDir::new();
        let files = SessionFiles::new(&tmp.0);
        let dir = UserDir::for_user("u1").unwrap();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(b"{\"type\":\"user\"}\n").unwrap();
        let body = gz.finish().unwrap();
        let name = SessionName::sanitize("z.jsonl").unwrap();
        let pending = files.begin_upload(&dir).unwrap();
        std::fs::write(pending.path(), &body).unwrap();
        let gzip = Encoding::Gzip {
            max_decoded_bytes: 16,
        };
        let stored = files.commit(pending, &dir, &name, gzip).unwrap();
        assert_eq!(stored.bytes, 16);
        assert_eq!(
            std::fs::read(files.path(&dir, &name)).unwrap(),
            b"{\"type\":\"user\"}\n"
        );
        let pending = files.begin_upload(&dir).unwrap();
        std::fs::write(pending.path(), b"not gzip at all").unwrap();
        let e = files.commit(pending, &dir, &name, gzip).unwrap_err();
        assert_eq!(e.status(), 400, "{e}");
        // A body that decodes to more than the limit is refused, however small it was sent.
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(&[b' '; 17]).unwrap();
        let pending = files.begin_upload(&dir).unwrap();
        std::fs::write(pending.path(), gz.finish().unwrap()).unwrap();
        let e = files.commit(pending, &dir, &name, gzip).unwrap_err();
        assert_eq!(e.status(), 413, "{e}");
        assert_eq!(
            files.scan().unwrap().len(),
            1,
            "old file kept, no temp left"
        );
    }
}
