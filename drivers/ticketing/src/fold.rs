//! Folding events into current state, whatever order they arrive in.
//!
//! Every issue and comment keeps the [`Version`] of the event that last set it; an event
//! replaces it only with a greater version. Versions are totally ordered — the payload's own
//! time, then the changelog id, then the delivery id as a final tiebreak — so the state after
//! any set of events is the state of its greatest events, the same for every arrival order.
//! A delete is a version with no content (a tombstone), so an older update arriving after it
//! cannot bring the issue back. Changelog rows are a set keyed by (changelog id, item).

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::{Deserialize, Serialize};

use crate::log::{Origin, Record};
use crate::payload::{ChangeItem, Comment, Issue, Kind, Parsed};

/// A payload time this far past its receipt is flagged and ordered by its receipt instead (a
/// clock far ahead must not pin an issue's state for ever).
pub const FUTURE_SLACK_MS: i64 = 24 * 60 * 60 * 1000;

/// Where an event stands in the order of changes; see the module docs.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Version {
    /// The payload's time, ms since the epoch.
    pub at_ms: i64,
    /// The changelog id the event carried (0 without one).
    pub changelog_id: i64,
    /// The delivery that set it.
    pub delivery_id: String,
}

/// An issue's current state, or its tombstone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssueState {
    /// The event that set it.
    pub version: Version,
    /// None once deleted.
    pub issue: Option<Issue>,
}

/// A comment with the issue it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommentRow {
    /// The issue's key.
    pub issue_key: String,
    /// The issue's id.
    pub issue_id: Option<String>,
    /// The comment.
    pub comment: Comment,
}

/// A comment's current state, or its tombstone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommentState {
    /// The event that set it.
    pub version: Version,
    /// None once deleted.
    pub row: Option<CommentRow>,
}

/// One row of the changelog table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangelogRow {
    /// The issue's key.
    pub issue_key: String,
    /// The issue's id.
    pub issue_id: Option<String>,
    /// The changelog entry.
    pub changelog_id: i64,
    /// The item's place in its entry.
    pub item_index: i32,
    /// When, ms since the epoch.
    pub created_ms: Option<i64>,
    /// Who.
    pub author: Option<String>,
    /// What changed.
    pub item: ChangeItem,
}

/// One row of the raw events table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventRow {
    /// The delivery identifier.
    pub delivery_id: String,
    /// When svc received it.
    pub received_at_ms: i64,
    /// The payload's own time.
    pub event_at_ms: Option<i64>,
    /// `webhookEvent`.
    pub event: String,
    /// `webhook` or `backfill`.
    pub origin: &'static str,
    /// The issue it names.
    pub issue_key: Option<String>,
    /// Comma-separated flags (`future_timestamp`, `unreadable`).
    pub flags: Option<String>,
    /// The body as received.
    pub body: String,
}

/// Issues and comments as of the events folded so far.
#[derive(Debug, Default)]
pub struct State {
    /// By issue key.
    pub issues: HashMap<String, IssueState>,
    /// By comment id.
    pub comments: HashMap<String, CommentState>,
    /// Changelog rows already in the table.
    pub changes_seen: HashSet<(i64, i32)>,
    /// Whether the issues table must be rewritten.
    pub issues_dirty: bool,
    /// Whether the comments table must be rewritten.
    pub comments_dirty: bool,
}

/// Tombstones, which the tables cannot hold, kept in the checkpoint.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Tombstones {
    /// Deleted issues by key.
    pub issues: BTreeMap<String, Version>,
    /// Deleted comments by id.
    pub comments: BTreeMap<String, Version>,
}

impl State {
    /// Folds one logged event in; returns its raw row and appends new changelog rows.
    /// `parsed` is None for a record that no longer reads (kept raw, flagged).
    pub fn apply(
        &mut self,
        record: &Record,
        parsed: Option<&Parsed>,
        changelog: &mut Vec<ChangelogRow>,
    ) -> EventRow {
        let mut flags = Vec::new();
        let body = String::from_utf8_lossy(&record.body).into_owned();
        let origin = match record.origin {
            Origin::Webhook => "webhook",
            Origin::Backfill => "backfill",
        };
        let Some(p) = parsed else {
            return EventRow {
                delivery_id: record.delivery_id.clone(),
                received_at_ms: record.received_at_ms,
                event_at_ms: None,
                event: String::new(),
                origin,
                issue_key: None,
                flags: Some("unreadable".into()),
                body,
            };
        };
        let mut at = p.timestamp_ms.unwrap_or(record.received_at_ms);
        if at > record.received_at_ms + FUTURE_SLACK_MS {
            flags.push("future_timestamp");
            at = record.received_at_ms;
        }
        let version = |changelog_id: i64, at_ms: i64| Version {
            at_ms,
            changelog_id,
            delivery_id: record.delivery_id.clone(),
        };
        let last_change = p.changes.iter().map(|c| c.id).max().unwrap_or(0);
        if let Some(issue) = &p.issue {
            match p.kind {
                Kind::IssueCreated | Kind::IssueUpdated | Kind::Backfill => {
                    self.set_issue(&issue.key, version(last_change, at), Some(issue.clone()));
                }
                Kind::IssueDeleted => self.set_issue(&issue.key, version(last_change, at), None),
                _ => {}
            }
            for c in &p.comments {
                let row = CommentRow {
                    issue_key: issue.key.clone(),
                    issue_id: issue.id.clone(),
                    comment: c.clone(),
                };
                match p.kind {
                    Kind::CommentCreated | Kind::CommentUpdated => {
                        self.set_comment(&c.id, version(0, at), Some(row))
                    }
                    Kind::CommentDeleted => self.set_comment(&c.id, version(0, at), None),
                    Kind::Backfill => {
                        let when = c.updated_ms.or(c.created_ms).unwrap_or(at);
                        self.set_comment(&c.id, version(0, when), Some(row))
                    }
                    _ => {}
                }
            }
            for change in &p.changes {
                for (index, item) in change.items.iter().enumerate() {
                    let index = i32::try_from(index).unwrap_or(i32::MAX);
                    if self.changes_seen.insert((change.id, index)) {
                        changelog.push(ChangelogRow {
                            issue_key: issue.key.clone(),
                            issue_id: issue.id.clone(),
                            changelog_id: change.id,
                            item_index: index,
                            created_ms: change.created_ms.or(Some(at)),
                            author: change.author.clone(),
                            item: item.clone(),
                        });
                    }
                }
            }
        }
        EventRow {
            delivery_id: record.delivery_id.clone(),
            received_at_ms: record.received_at_ms,
            event_at_ms: p.timestamp_ms,
            event: p.event.clone(),
            origin,
            issue_key: p.issue_key().map(str::to_owned),
            flags: (!flags.is_empty()).then(|| flags.join(",")),
            body,
        }
    }

    fn set_issue(&mut self, key: &str, version: Version, issue: Option<Issue>) {
        if self
            .issues
            .get(key)
            .is_some_and(|current| current.version >= version)
        {
            return;
        }
        self.issues
            .insert(key.to_owned(), IssueState { version, issue });
        self.issues_dirty = true;
    }

    fn set_comment(&mut self, id: &str, version: Version, row: Option<CommentRow>) {
        if self
            .comments
            .get(id)
            .is_some_and(|current| current.version >= version)
        {
            return;
        }
        self.comments
            .insert(id.to_owned(), CommentState { version, row });
        self.comments_dirty = true;
    }

    /// The tombstones to keep in the checkpoint.
    pub fn tombstones(&self) -> Tombstones {
        Tombstones {
            issues: self
                .issues
                .iter()
                .filter(|(_, s)| s.issue.is_none())
                .map(|(k, s)| (k.clone(), s.version.clone()))
                .collect(),
            comments: self
                .comments
                .iter()
                .filter(|(_, s)| s.row.is_none())
                .map(|(k, s)| (k.clone(), s.version.clone()))
                .collect(),
        }
    }

    /// Puts tombstones read from a checkpoint back.
    pub fn restore(&mut self, tombstones: Tombstones) {
        for (key, version) in tombstones.issues {
            self.set_issue(&key, version, None);
        }
        for (id, version) in tombstones.comments {
            self.set_comment(&id, version, None);
        }
    }

    /// Current issues, by key.
    pub fn live_issues(&self) -> Vec<(&Version, &Issue)> {
        let mut live: Vec<_> = self
            .issues
            .values()
            .filter_map(|s| Some((&s.version, s.issue.as_ref()?)))
            .collect();
        live.sort_by(|a, b| a.1.key.cmp(&b.1.key));
        live
    }

    /// Current comments, by issue then comment id.
    pub fn live_comments(&self) -> Vec<(&Version, &CommentRow)> {
        let mut live: Vec<_> = self
            .comments
            .values()
            .filter_map(|s| Some((&s.version, s.row.as_ref()?)))
            .collect();
        live.sort_by(|a, b| {
            (&a.1.issue_key, &a.1.comment.id).cmp(&(&b.1.issue_key, &b.1.comment.id))
        });
        live
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::payload::parse;

    /// A generator of plausible event streams for a few issues.
    struct Gen(u64);

    impl Gen {
        fn next(&mut self) -> u64 {
            // xorshift64*: deterministic per seed, no dependency.
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    fn events(seed: u64, n: usize) -> Vec<Record> {
        let mut g = Gen(seed);
        let statuses = ["Open", "In Progress", "Review", "Done"];
        (0..n)
            .map(|i| {
                // The last three events delete three issues for good.
                let (issue, kind) = if i + 3 >= n {
                    ((n - i) as u64, 0)
                } else {
                    (g.below(40), g.below(10))
                };
                let t = 1_700_000_000_000 + i as i64 * 1000;
                let body = match kind {
                    0 => format!(
                        r#"{{"timestamp":{t},"webhookEvent":"jira:issue_deleted","issue":{{"id":"{issue}","key":"P-{issue}","fields":{{}}}}}}"#
                    ),
                    1..=2 => format!(
                        r#"{{"timestamp":{t},"webhookEvent":"comment_{}","issue":{{"id":"{issue}","key":"P-{issue}","fields":{{}}}},"comment":{{"id":"{}","body":"c{i}"}}}}"#,
                        ["created", "updated", "deleted"][g.below(3) as usize],
                        g.below(60)
                    ),
                    _ => format!(
                        r#"{{"timestamp":{t},"webhookEvent":"jira:issue_updated","issue":{{"id":"{issue}","key":"P-{issue}","fields":{{"summary":"s{i}","status":{{"name":"{}"}},"customfield_1":{{"n":{i}}}}}}},"changelog":{{"id":"{}","items":[{{"field":"status"}},{{"field":"summary"}}]}}}}"#,
                        statuses[g.below(4) as usize],
                        i + 1
                    ),
                };
                Record {
                    delivery_id: format!("d{i}"),
                    received_at_ms: t + 5,
                    origin: Origin::Webhook,
                    body: body.into_bytes(),
                }
            })
            .collect()
    }

    type Snapshot = (
        Vec<(Version, Issue)>,
        Vec<(Version, CommentRow)>,
        Vec<(i64, i32, String)>,
    );

    fn fold(records: &[Record]) -> Snapshot {
        let mut state = State::default();
        let mut changelog = Vec::new();
        for r in records {
            let parsed = parse(&r.body, r.origin).unwrap();
            state.apply(r, Some(&parsed), &mut changelog);
        }
        let mut log: Vec<_> = changelog
            .into_iter()
            .map(|c| (c.changelog_id, c.item_index, c.issue_key))
            .collect();
        log.sort();
        (
            state
                .live_issues()
                .into_iter()
                .map(|(v, i)| (v.clone(), i.clone()))
                .collect(),
            state
                .live_comments()
                .into_iter()
                .map(|(v, c)| (v.clone(), c.clone()))
                .collect(),
            log,
        )
    }

    #[test]
    fn ten_thousand_events_in_any_order_fold_to_the_in_order_state() {
        let records = events(7, 10_000);
        let in_order = fold(&records);
        assert!(!in_order.0.is_empty() && !in_order.1.is_empty() && !in_order.2.is_empty());
        // Three issues were deleted last and are absent.
        assert!(in_order.0.len() <= 37, "{}", in_order.0.len());
        for seed in 1..=12u64 {
            let mut shuffled = records.clone();
            let mut g = Gen(seed * 0x9E37_79B9);
            for i in (1..shuffled.len()).rev() {
                shuffled.swap(i, g.below(i as u64 + 1) as usize);
            }
            // Replays too: every delivery may come twice.
            let replayed: Vec<Record> = shuffled
                .iter()
                .chain(shuffled.iter().step_by(3))
                .cloned()
                .collect();
            assert_eq!(fold(&replayed), in_order, "order seed {seed}");
        }
    }

    #[test]
    fn a_delete_holds_against_older_updates_and_future_times_are_flagged() {
        let rec = |id: &str, t: i64, event: &str| {
            Record {
            delivery_id: id.into(),
            received_at_ms: 1_700_000_000_000,
            origin: Origin::Webhook,
            body: format!(
                r#"{{"timestamp":{t},"webhookEvent":"{event}","issue":{{"key":"A-1","fields":{{}}}}}}"#
            )
            .into_bytes(),
        }
        };
        let mut state = State::default();
        let mut log = Vec::new();
        for r in [
            rec("b", 200, "jira:issue_deleted"),
            rec("a", 100, "jira:issue_updated"),
        ] {
            let p = parse(&r.body, r.origin).unwrap();
            state.apply(&r, Some(&p), &mut log);
        }
        assert!(state.live_issues().is_empty());
        assert_eq!(state.tombstones().issues.len(), 1);

        let future = rec(
            "c",
            1_700_000_000_000 + 2 * FUTURE_SLACK_MS,
            "jira:issue_updated",
        );
        let p = parse(&future.body, future.origin).unwrap();
        let row = state.apply(&future, Some(&p), &mut log);
        assert_eq!(row.flags.as_deref(), Some("future_timestamp"));
        // Ordered by its receipt, which is after the delete: the issue is back.
        assert_eq!(state.live_issues().len(), 1);
    }
}
