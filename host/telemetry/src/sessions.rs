//! Sessions for administrators and their owners: the browser's list, KPIs and facets (from
//! the stored summaries), a transcript page, one user's files (processed or not), a file
//! to download and a user's files as one ZIP stream (reference §6).
//!
//! Every path from a request goes through [`SessionFiles::open`] or [`UserDir`], so the
//! guards live in one place. Transcript indexes are cached by file key, size and mtime.

use std::collections::HashMap;
use std::io::Write;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;
use svc_core::clock::format_ts;
use svc_core::Error;
use svc_store::sessions::{SessionFacets, SessionFilter, SessionKpis, SessionOrder};
use svc_store::usage::SessionSummary;
use svc_store::Store;

use crate::archive::ZipStream;
use crate::files::{OpenFile, SessionFiles};
use crate::names::UserDir;
use crate::transcript_view::{TranscriptIndex, TranscriptPage, MAX_PAGE_EVENTS};

pub use crate::browse::{DEFAULT_WINDOW_MINUTES, MAX_WINDOW_MINUTES};
/// The most rows a list page holds.
pub const MAX_PAGE_ROWS: usize = 200;
/// The deepest offset a list accepts.
pub const MAX_OFFSET: usize = 50_000;
/// Transcript indexes kept in memory.
const CACHED_INDEXES: usize = 16;

/// A page of rows: the one list envelope of this crate's reads.
#[derive(Debug, Clone, Serialize)]
pub struct Page<T> {
    /// The rows.
    pub rows: Vec<T>,
    /// Rows in all.
    pub total: i64,
    /// Page size.
    pub limit: usize,
    /// Rows skipped.
    pub offset: usize,
    /// The next page's offset, if there is one.
    pub next_offset: Option<usize>,
}

impl<T> Page<T> {
    fn new(rows: Vec<T>, total: i64, limit: usize, offset: usize) -> Self {
        let next = offset + rows.len();
        Self {
            next_offset: ((next as i64) < total && !rows.is_empty()).then_some(next),
            rows,
            total,
            limit,
            offset,
        }
    }
}

/// A transcript page with the session it belongs to.
#[derive(Debug, Clone, Serialize)]
pub struct Transcript {
    /// The owner's directory (the `{username}` of the path).
    pub username: String,
    /// The file name.
    pub session_file: String,
    /// The stored summary (None until the pipeline has read the file).
    pub summary: Option<SessionSummary>,
    /// The page.
    #[serde(flatten)]
    pub page: TranscriptPage,
}

/// One of a user's session files: its summary when processed, else what the disk says.
#[derive(Debug, Clone, Serialize)]
pub struct UserSession {
    /// `<user dir>/<file name>`.
    pub session_file: String,
    /// The file name (what the download path takes).
    pub name: String,
    /// Whether the pipeline has read this version of the file.
    pub processed: bool,
    /// Whether the file is still on disk (a summary can outlive its file).
    pub on_disk: bool,
    /// Bytes on disk.
    pub bytes: Option<u64>,
    /// Last modified (UTC).
    pub modified_at: Option<String>,
    /// The summary, when processed.
    pub summary: Option<SessionSummary>,
}

/// What a ZIP stream wrote.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct ZipReport {
    /// Files in the archive.
    pub file_count: u64,
    /// Their bytes (uncompressed).
    pub total_bytes: u64,
}

/// Reads sessions; holds the store, the session root and the transcript index cache.
#[derive(Debug, Clone)]
pub struct SessionBrowser {
    store: Store,
    files: SessionFiles,
    indexes: Arc<Mutex<IndexCache>>,
}

#[derive(Debug, Default)]
struct IndexCache {
    /// Key → (size, mtime, index, last use).
    entries: HashMap<String, (u64, i64, Arc<TranscriptIndex>, u64)>,
    clock: u64,
}

impl IndexCache {
    fn get(&mut self, f: &OpenFile) -> Option<Arc<TranscriptIndex>> {
        self.clock += 1;
        let clock = self.clock;
        let e = self.entries.get_mut(&f.key)?;
        if e.0 != f.size || e.1 != f.mtime_ns {
            return None;
        }
        e.3 = clock;
        Some(e.2.clone())
    }

    fn put(&mut self, f: &OpenFile, index: Arc<TranscriptIndex>) {
        self.clock += 1;
        if self.entries.len() >= CACHED_INDEXES && !self.entries.contains_key(&f.key) {
            if let Some(oldest) = self
                .entries
                .iter()
                .min_by_key(|(_, e)| e.3)
                .map(|(k, _)| k.clone())
            {
                self.entries.remove(&oldest);
            }
        }
        self.entries
            .insert(f.key.clone(), (f.size, f.mtime_ns, index, self.clock));
    }
}

/// The start of a window of `minutes` ending now, refusing a window out of range.
pub fn window_start(minutes: u32) -> Result<String, Error> {
    if !(1..=MAX_WINDOW_MINUTES).contains(&minutes) {
        return Err(Error::invalid(format!(
            "since_minutes must be between 1 and {MAX_WINDOW_MINUTES}"
        )));
    }
    Ok(format_ts(
        Utc::now() - Duration::minutes(i64::from(minutes)),
    ))
}

/// Refuses a page size or offset out of range, naming the field.
pub fn check_page(limit: usize, offset: usize) -> Result<(), Error> {
    if !(1..=MAX_PAGE_ROWS).contains(&limit) {
        return Err(Error::invalid(format!(
            "limit must be between 1 and {MAX_PAGE_ROWS}"
        )));
    }
    if offset > MAX_OFFSET {
        return Err(Error::invalid(format!(
            "offset must be between 0 and {MAX_OFFSET}"
        )));
    }
    Ok(())
}

fn io_error(e: impl std::fmt::Display) -> Error {
    Error::internal(format!("session files: {e}"))
}

fn ns_to_ts(ns: i64) -> String {
    format_ts(DateTime::<Utc>::from_timestamp_nanos(ns))
}

impl SessionBrowser {
    /// A browser over the store's summaries and the session files.
    pub fn new(store: Store, files: SessionFiles) -> Self {
        Self {
            store,
            files,
            indexes: Arc::default(),
        }
    }

    /// A page of sessions under the filter.
    pub async fn list(
        &self,
        filter: &SessionFilter,
        order: SessionOrder,
        limit: usize,
        offset: usize,
    ) -> Result<Page<SessionSummary>, Error> {
        check_page(limit, offset)?;
        let (rows, total) = self
            .store
            .list_sessions(filter, order, limit, offset)
            .await?;
        Ok(Page::new(rows, total, limit, offset))
    }

    /// Headline numbers under the filter.
    pub async fn kpis(&self, filter: &SessionFilter) -> Result<SessionKpis, Error> {
        Ok(self.store.session_kpis(filter).await?)
    }

    /// Owners and models of the sessions of a window.
    pub async fn facets(&self, since_minutes: u32) -> Result<SessionFacets, Error> {
        let since = window_start(since_minutes)?;
        Ok(self.store.session_facets(&since).await?)
    }

    /// Opens a session file through the path guards (blocking work on a blocking thread).
    pub async fn open(&self, dir: &str, name: &str) -> Result<OpenFile, Error> {
        let files = self.files.clone();
        let (dir, name) = (dir.to_owned(), name.to_owned());
        tokio::task::spawn_blocking(move || files.open(&dir, &name))
            .await
            .map_err(io_error)?
    }

    /// Events `offset .. offset + limit` of a transcript, with its summary and the
    /// ordinals of every failed call.
    pub async fn transcript(
        &self,
        dir: &str,
        name: &str,
        offset: usize,
        limit: usize,
    ) -> Result<Transcript, Error> {
        if !(1..=MAX_PAGE_EVENTS).contains(&limit) {
            return Err(Error::invalid(format!(
                "limit must be between 1 and {MAX_PAGE_EVENTS}"
            )));
        }
        let file = self.open(dir, name).await?;
        let cached = self.indexes.lock().expect("index cache").get(&file);
        let indexes = self.indexes.clone();
        let (file, page) = tokio::task::spawn_blocking(move || {
            let index = match cached {
                Some(i) => i,
                None => {
                    let i = Arc::new(TranscriptIndex::build(&file.path)?);
                    indexes.lock().expect("index cache").put(&file, i.clone());
                    i
                }
            };
            let page = index.page(&file.path, offset, limit)?;
            Ok::<_, Error>((file, page))
        })
        .await
        .map_err(io_error)??;
        let summary = self.store.session_summary(&file.key).await?;
        Ok(Transcript {
            username: file.dir.as_str().to_owned(),
            session_file: file.name.as_str().to_owned(),
            summary,
            page,
        })
    }

    /// One user's session files, processed or not, newest first (ties by name), paged.
    pub async fn user_sessions(
        &self,
        user_id: &str,
        limit: usize,
        offset: usize,
    ) -> Result<Page<UserSession>, Error> {
        check_page(limit, offset)?;
        let dir = UserDir::for_user(user_id)?;
        let files = self.files.clone();
        let scan_dir = dir.clone();
        let found = tokio::task::spawn_blocking(move || files.scan_dir(&scan_dir))
            .await
            .map_err(io_error)?
            .map_err(io_error)?;
        let states: HashMap<String, (i64, i64)> = self
            .store
            .session_file_states_of(dir.as_str())
            .await?
            .into_iter()
            .filter(|s| s.processed_at.is_some())
            .map(|s| (s.session_file, (s.size, s.mtime_ns)))
            .collect();
        let mut summaries: HashMap<String, SessionSummary> = self
            .store
            .sessions_of_dir(dir.as_str())
            .await?
            .into_iter()
            .map(|s| (s.session_file.clone(), s))
            .collect();
        let mut rows: Vec<UserSession> = found
            .into_iter()
            .map(|f| {
                let key = f.key();
                let processed = states.get(&key) == Some(&(f.size as i64, f.mtime_ns));
                UserSession {
                    name: f.name.as_str().to_owned(),
                    processed,
                    on_disk: true,
                    bytes: Some(f.size),
                    modified_at: Some(ns_to_ts(f.mtime_ns)),
                    summary: summaries.remove(&key),
                    session_file: key,
                }
            })
            .collect();
        rows.extend(summaries.into_values().map(|s| {
            UserSession {
                name: s
                    .session_file
                    .rsplit('/')
                    .next()
                    .unwrap_or_default()
                    .to_owned(),
                session_file: s.session_file.clone(),
                processed: true,
                on_disk: false,
                bytes: None,
                modified_at: None,
                summary: Some(s),
            }
        }));
        let newest = |r: &UserSession| {
            r.summary
                .as_ref()
                .and_then(|s| s.started_at.clone())
                .or_else(|| r.modified_at.clone())
        };
        rows.sort_by(|a, b| newest(b).cmp(&newest(a)).then_with(|| a.name.cmp(&b.name)));
        let total = rows.len() as i64;
        let rows = rows.into_iter().skip(offset).take(limit).collect();
        Ok(Page::new(rows, total, limit, offset))
    }

    /// Writes one user's session files, by name, as a ZIP archive to `out` (blocking: call
    /// from a blocking thread). A file that vanishes between the listing and its read is
    /// left out. An error is the writer's or the disk's (a client that went away shows as
    /// the writer's `BrokenPipe`).
    pub fn zip_user_sessions(&self, dir: &UserDir, out: impl Write) -> std::io::Result<ZipReport> {
        let mut found = self.files.scan_dir(dir)?;
        found.sort_by(|a, b| a.name.cmp(&b.name));
        let mut zip = ZipStream::new(out);
        let mut report = ZipReport::default();
        for f in found {
            let Ok(mut open) = self.files.open(dir.as_str(), f.name.as_str()) else {
                continue;
            };
            let modified = DateTime::<Utc>::from_timestamp_nanos(open.mtime_ns);
            report.total_bytes += zip.add(f.name.as_str(), modified, &mut open.file)?;
            report.file_count += 1;
        }
        zip.finish()?;
        Ok(report)
    }
}
