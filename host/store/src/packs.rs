//! Event packs: the administrators' columnar copy of the usage events.
//!
//! Every session file's events live in its own parquet segment (see [`crate::usage`]). That
//! is the right shape for writing, for reprocessing one file and for a user's own rows, and
//! the wrong one for reading ten million events: an administrator's read opened one small
//! file per session. A pack holds many files' events in one file sorted by time; the
//! pipeline builds packs from segments after each run ("compaction").
//!
//! The invariant readers rely on: a file whose `pack` is set has its current events in that
//! pack, and a pack holds only its members' current events. So "every pack, plus every
//! segment of a file without a pack" is every event exactly once; the internal driver's
//! reader lists both in one statement (one snapshot). Anything that replaces a packed file's
//! segment dissolves its pack in the same transaction: the pack's row goes and its members
//! become loose again (their segments still hold their events), until the next compaction.

use sqlx::{Any, Row, Transaction};

use crate::{Store, StoreError};

/// One pack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventPack {
    /// File name under the segment directory (`pack-….parquet`).
    pub name: String,
    /// The UTC day (`YYYY-MM-DD`) its members' sessions began on.
    pub day: String,
    /// Its earliest event time.
    pub first_at: String,
    /// Its latest event time.
    pub last_at: String,
    /// Events in it.
    pub events: i64,
    /// Its size.
    pub bytes: i64,
}

/// A file whose events are only in its own segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LooseFile {
    /// `<user dir>/<file name>`.
    pub session_file: String,
    /// Its segment.
    pub segment: String,
    /// Its earliest event time.
    pub first_at: String,
    /// Its latest event time.
    pub last_at: String,
    /// Events in its segment.
    pub events: i64,
}

type Tx<'a> = Transaction<'a, Any>;

/// Dissolves `packs` within `tx`: their members become loose and their rows go. Returns the
/// names of the packs that existed, whose files are then unreferenced.
pub(crate) async fn dissolve(tx: &mut Tx<'_>, packs: &[String]) -> Result<Vec<String>, StoreError> {
    let mut gone = Vec::new();
    for pack in packs {
        sqlx::query("UPDATE session_file_state SET pack = NULL WHERE pack = $1")
            .bind(pack)
            .execute(&mut **tx)
            .await?;
        let deleted = sqlx::query("DELETE FROM usage_event_packs WHERE name = $1")
            .bind(pack)
            .execute(&mut **tx)
            .await?
            .rows_affected();
        if deleted > 0 {
            gone.push(pack.clone());
        }
    }
    Ok(gone)
}

/// The pack holding `session_file`'s events, if it is packed.
pub(crate) async fn pack_of(
    tx: &mut Tx<'_>,
    session_file: &str,
) -> Result<Option<String>, StoreError> {
    Ok(
        sqlx::query("SELECT pack FROM session_file_state WHERE session_file = $1")
            .bind(session_file)
            .fetch_optional(&mut **tx)
            .await?
            .map(|r| r.try_get::<Option<String>, _>("pack"))
            .transpose()?
            .flatten(),
    )
}

fn pack_row(r: &sqlx::any::AnyRow) -> Result<EventPack, StoreError> {
    Ok(EventPack {
        name: r.try_get("name")?,
        day: r.try_get("day")?,
        first_at: r.try_get("first_at")?,
        last_at: r.try_get("last_at")?,
        events: r.try_get("events")?,
        bytes: r.try_get("bytes")?,
    })
}

impl Store {
    /// Every pack, by day.
    pub async fn event_packs(&self) -> Result<Vec<EventPack>, StoreError> {
        crate::fetch_vec(
            self,
            sqlx::query("SELECT * FROM usage_event_packs ORDER BY day, name"),
            pack_row,
        )
        .await
    }

    /// The files with events that are in no pack, by session file.
    pub async fn loose_event_files(&self) -> Result<Vec<LooseFile>, StoreError> {
        crate::fetch_vec(
            self,
            sqlx::query(
                "SELECT session_file, segment, first_at, last_at, events FROM session_file_state \
                 WHERE segment IS NOT NULL AND pack IS NULL AND first_at IS NOT NULL \
                   AND last_at IS NOT NULL \
                 ORDER BY session_file",
            ),
            |r| {
                Ok(LooseFile {
                    session_file: r.try_get("session_file")?,
                    segment: r.try_get("segment")?,
                    first_at: r.try_get("first_at")?,
                    last_at: r.try_get("last_at")?,
                    events: r.try_get("events")?,
                })
            },
        )
        .await
    }

    /// Makes `pack` (already written in full) hold the events of the packs `merged` and of
    /// the files `loose`, in one transaction: the merged packs' rows go and every member
    /// names the new pack. Nothing is committed — and Ok(false) says so — when any input
    /// changed since it was read (a merged pack dissolved, a loose file's segment replaced
    /// or packed), because the new file would then hold events that are no longer current.
    pub async fn commit_event_pack(
        &self,
        pack: &EventPack,
        merged: &[String],
        loose: &[LooseFile],
    ) -> Result<bool, StoreError> {
        let mut tx = self.begin_write().await?;
        for old in merged {
            let moved = sqlx::query("DELETE FROM usage_event_packs WHERE name = $1")
                .bind(old)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            if moved == 0 {
                return Ok(false);
            }
            sqlx::query("UPDATE session_file_state SET pack = $1 WHERE pack = $2")
                .bind(&pack.name)
                .bind(old)
                .execute(&mut *tx)
                .await?;
        }
        for file in loose {
            let claimed = sqlx::query(
                "UPDATE session_file_state SET pack = $1 \
                 WHERE session_file = $2 AND segment = $3 AND pack IS NULL",
            )
            .bind(&pack.name)
            .bind(&file.session_file)
            .bind(&file.segment)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if claimed != 1 {
                return Ok(false);
            }
        }
        sqlx::query(
            "INSERT INTO usage_event_packs (name, day, first_at, last_at, events, bytes, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(&pack.name)
        .bind(&pack.day)
        .bind(&pack.first_at)
        .bind(&pack.last_at)
        .bind(pack.events)
        .bind(pack.bytes)
        .bind(svc_core::clock::now())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing;
    use crate::usage::{FileState, ProcessedFile, SessionSummary};

    fn file(key: &str, segment: &str) -> ProcessedFile {
        ProcessedFile {
            state: FileState {
                session_file: key.into(),
                user_dir: "u1".into(),
                segment: Some(segment.into()),
                first_at: Some("2026-01-01T10:00:00.000000Z".into()),
                last_at: Some("2026-01-01T11:00:00.000000Z".into()),
                events: 2,
                ..FileState::default()
            },
            summary: SessionSummary {
                session_file: key.into(),
                session_id: key.into(),
                username: "a@x".into(),
                ..SessionSummary::default()
            },
            daily: Vec::new(),
        }
    }

    fn pack(name: &str) -> EventPack {
        EventPack {
            name: name.into(),
            day: "2026-01-01".into(),
            first_at: "2026-01-01T10:00:00.000000Z".into(),
            last_at: "2026-01-01T11:00:00.000000Z".into(),
            events: 4,
            bytes: 100,
        }
    }

    /// What a reader of every event opens: each pack and each loose segment.
    async fn names(store: &Store) -> Vec<String> {
        let packs = store
            .event_packs()
            .await
            .unwrap()
            .into_iter()
            .map(|p| p.name);
        let loose = store
            .loose_event_files()
            .await
            .unwrap()
            .into_iter()
            .map(|f| f.segment);
        let mut n: Vec<String> = packs.chain(loose).collect();
        n.sort();
        n
    }

    /// Every event is read once whatever happens: loose, packed, dissolved by a reprocess,
    /// kept through a failure; a pack built from inputs that changed is refused.
    #[tokio::test]
    async fn every_event_file_is_listed_once_through_packing_and_reprocessing() {
        for (store, _dir) in testing::all_backends().await {
            store
                .store_processed_files(&[
                    file("u1/a", "seg-a1.parquet"),
                    file("u1/b", "seg-b1.parquet"),
                ])
                .await
                .unwrap();
            assert_eq!(names(&store).await, ["seg-a1.parquet", "seg-b1.parquet"]);

            let loose = store.loose_event_files().await.unwrap();
            assert_eq!(loose.len(), 2);
            assert!(store
                .commit_event_pack(&pack("pack-1.parquet"), &[], &loose)
                .await
                .unwrap());
            assert_eq!(names(&store).await, ["pack-1.parquet"]);
            assert!(store.loose_event_files().await.unwrap().is_empty());

            // A failure keeps the file's events where they are.
            let mut failed = file("u1/a", "seg-a1.parquet").state;
            failed.failures = 1;
            store.record_file_failure(&failed).await.unwrap();
            assert_eq!(names(&store).await, ["pack-1.parquet"]);

            // Reprocessing a member dissolves its pack: the other member is loose again.
            let (_, retired) = store
                .store_processed_files(&[file("u1/a", "seg-a2.parquet")])
                .await
                .unwrap();
            assert!(
                retired.contains(&"pack-1.parquet".to_owned()),
                "{retired:?}"
            );
            assert!(
                retired.contains(&"seg-a1.parquet".to_owned()),
                "{retired:?}"
            );
            assert_eq!(names(&store).await, ["seg-a2.parquet", "seg-b1.parquet"]);

            // A pack built from a loose list that has since changed is not committed.
            let stale = store.loose_event_files().await.unwrap();
            store
                .store_processed_files(&[file("u1/b", "seg-b2.parquet")])
                .await
                .unwrap();
            assert!(!store
                .commit_event_pack(&pack("pack-2.parquet"), &[], &stale)
                .await
                .unwrap());
            assert_eq!(names(&store).await, ["seg-a2.parquet", "seg-b2.parquet"]);

            // Merging: a pack of one file, then a pack replacing it with both.
            let loose = store.loose_event_files().await.unwrap();
            assert!(store
                .commit_event_pack(&pack("pack-3.parquet"), &[], &loose[..1])
                .await
                .unwrap());
            assert_eq!(names(&store).await, ["pack-3.parquet", "seg-b2.parquet"]);
            let rest = store.loose_event_files().await.unwrap();
            assert!(store
                .commit_event_pack(&pack("pack-4.parquet"), &["pack-3.parquet".into()], &rest)
                .await
                .unwrap());
            assert_eq!(names(&store).await, ["pack-4.parquet"]);
            assert_eq!(store.event_packs().await.unwrap().len(), 1);
            // Merging a pack that no longer exists is refused.
            assert!(!store
                .commit_event_pack(&pack("pack-5.parquet"), &["pack-3.parquet".into()], &[])
                .await
                .unwrap());
            assert_eq!(names(&store).await, ["pack-4.parquet"]);
        }
    }
}
