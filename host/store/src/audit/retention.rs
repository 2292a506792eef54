//! Dropping audit rows past their retention, in small batches so the writer's group commits
//! never wait long behind one huge delete.

use std::time::Duration;

use crate::{Store, StoreError};

/// Rows deleted per statement.
pub const PRUNE_BATCH: i64 = 5_000;
/// The pause between batches, giving writers the store.
const PAUSE: Duration = Duration::from_millis(5);

impl Store {
    /// Deletes audit rows older than `before` (a store timestamp), oldest first, a batch per
    /// statement, and returns how many went. Rows written meanwhile are newer and untouched.
    /// The rollups stop covering the hours it reaches into first.
    pub async fn prune_audit(&self, before: &str) -> Result<u64, StoreError> {
        self.raise_rollup_floor(before).await?;
        let mut deleted = 0;
        loop {
            let n = sqlx::query(
                "DELETE FROM audit_log WHERE id IN (SELECT id FROM audit_log \
                 WHERE timestamp < $1 ORDER BY timestamp LIMIT $2)",
            )
            .bind(before)
            .bind(PRUNE_BATCH)
            .execute(self.pool())
            .await?
            .rows_affected();
            deleted += n;
            if n < PRUNE_BATCH as u64 {
                return Ok(deleted);
            }
            tokio::time::sleep(PAUSE).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::audit::{Actor, AuditWriter, Event};
    use crate::testing;

    #[tokio::test]
    async fn prune_removes_only_rows_before_the_cutoff_across_batches() {
        for (store, _dir) in testing::all_backends().await {
            let old = svc_core::clock::format_ts(chrono::Utc::now() - chrono::Duration::days(40));
            let rows: Vec<_> = (0..super::PRUNE_BATCH as usize * 2 + 7)
                .map(|i| {
                    let mut r = crate::audit::record_for_bench(
                        &Actor::scheduler(),
                        Event::new("old.event").param("i", i),
                    );
                    r.timestamp = old.clone();
                    r
                })
                .collect();
            for chunk in rows.chunks(4_000) {
                store.insert_audit_batch(chunk).await.unwrap();
            }
            let writer = AuditWriter::start(store.clone());
            writer
                .write(&Actor::scheduler(), Event::new("new.event"))
                .await;
            writer.flush().await;
            let cutoff =
                svc_core::clock::format_ts(chrono::Utc::now() - chrono::Duration::days(30));
            assert_eq!(store.prune_audit(&cutoff).await.unwrap(), rows.len() as u64);
            assert!(store
                .audit_by_action("old.event", 1)
                .await
                .unwrap()
                .is_empty());
            assert_eq!(
                store.audit_by_action("new.event", 5).await.unwrap().len(),
                1
            );
            assert_eq!(store.prune_audit(&cutoff).await.unwrap(), 0);
        }
    }
}
