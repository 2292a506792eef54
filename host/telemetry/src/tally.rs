//! The browse reads counted over the event index ([`Snapshot`]): the figures the DataFusion
//! plans in [`crate::browse`] compute, in one pass over codes each. `browse` chooses which
//! path answers; the differential tests in `tally_tests.rs` hold the two to the same
//! answers.

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashMap};

use chrono::{Duration, NaiveDate};
use serde_json::{json, Value};

use crate::browse::{Count, Filters, GroupBy};
use crate::event_index::{Bits, Kind, Snapshot};

/// Which events a read admits, as codes.
pub struct Selector {
    since: i64,
    user: UserSel,
    kinds: Vec<bool>,
}

enum UserSel {
    Any,
    Only(u32),
    Nobody,
}

impl Selector {
    /// The events at or after `since` (microseconds) that `filters` admit. The caller
    /// answers filters the index does not hold (`user_id`, an absolute range) by a scan.
    pub fn new(snap: &Snapshot, filters: &Filters, since: i64) -> Self {
        let user = match &filters.username {
            None => UserSel::Any,
            Some(name) => match snap.users.iter().position(|u| u == name) {
                Some(code) => UserSel::Only(code as u32),
                None => UserSel::Nobody,
            },
        };
        let q = filters.q.as_deref().filter(|q| !q.is_empty());
        let kinds = snap
            .kinds
            .iter()
            .map(|k| {
                let eq = |want: &Option<String>, have: Option<&str>| {
                    want.as_deref().is_none_or(|w| have == Some(w))
                };
                eq(&filters.tool_name, k.tool_name.as_deref())
                    && eq(&filters.source, Some(&k.source))
                    && eq(&filters.event_type, Some(&k.event_type))
                    && (!filters.only_errors || k.is_error)
                    && q.is_none_or(|q| {
                        [
                            &k.tool_name,
                            &k.skill_name,
                            &k.subagent_type,
                            &k.command_name,
                        ]
                        .into_iter()
                        .flatten()
                        .any(|name| name.contains(q))
                    })
            })
            .collect();
        Self { since, user, kinds }
    }

    /// A window with no other filter (the facets').
    pub fn window(snap: &Snapshot, since: i64) -> Self {
        Self {
            since,
            user: UserSel::Any,
            kinds: vec![true; snap.kinds.len()],
        }
    }

    #[inline]
    fn admits(&self, user: u32, kind: u32) -> bool {
        self.kinds[kind as usize]
            && match self.user {
                UserSel::Any => true,
                UserSel::Only(u) => u == user,
                UserSel::Nobody => false,
            }
    }

    /// Calls `f(at, user, session, kind)` for each admitted event.
    fn each(&self, snap: &Snapshot, mut f: impl FnMut(i64, u32, u32, u32)) {
        if matches!(self.user, UserSel::Nobody) || !self.kinds.contains(&true) {
            return;
        }
        snap.each(self.since, |t, u, s, k| {
            if self.admits(u, k) {
                f(t, u, s, k);
            }
        });
    }
}

/// Events per owner and per kind among those admitted: what KPIs and facets are made of.
pub struct Counts {
    users: Vec<i64>,
    kinds: Vec<i64>,
}

impl Counts {
    /// Counts the events `sel` admits.
    pub fn of(snap: &Snapshot, sel: &Selector) -> Self {
        let mut c = Self {
            users: vec![0; snap.users.len()],
            kinds: vec![0; snap.kinds.len()],
        };
        sel.each(snap, |_, u, _, k| {
            c.users[u as usize] += 1;
            c.kinds[k as usize] += 1;
        });
        c
    }

    /// (events, distinct owners, distinct tools, failed events).
    pub fn kpis(&self, snap: &Snapshot) -> (i64, i64, i64, i64) {
        let events = self.users.iter().sum();
        let users = self.users.iter().filter(|&&n| n > 0).count() as i64;
        let errors = self
            .kinds
            .iter()
            .zip(&snap.kinds)
            .filter(|(_, k)| k.is_error)
            .map(|(n, _)| n)
            .sum();
        let tools = self.by(snap, |k| k.tool_name.as_deref()).len() as i64;
        (events, users, tools, errors)
    }

    /// The non-zero counts per value of `field` (None values not counted).
    fn by<'a>(
        &self,
        snap: &'a Snapshot,
        field: impl Fn(&'a Kind) -> Option<&'a str>,
    ) -> HashMap<&'a str, i64> {
        let mut out = HashMap::new();
        for (n, k) in self.kinds.iter().zip(&snap.kinds) {
            if let (true, Some(v)) = (*n > 0, field(k)) {
                *out.entry(v).or_insert(0) += n;
            }
        }
        out
    }

    /// The facets: (owners, tools, sources, event types), most frequent first, ties by
    /// value, cut to the lengths given.
    pub fn facets(&self, snap: &Snapshot, tops: [usize; 4]) -> [Vec<Count>; 4] {
        let users: HashMap<&str, i64> = self
            .users
            .iter()
            .zip(&snap.users)
            .filter(|(n, _)| **n > 0)
            .map(|(n, u)| (u.as_str(), *n))
            .collect();
        let lists = [
            users,
            self.by(snap, |k| k.tool_name.as_deref()),
            self.by(snap, |k| Some(k.source.as_str())),
            self.by(snap, |k| Some(k.event_type.as_str())),
        ];
        let mut out: [Vec<Count>; 4] = Default::default();
        for ((list, top), slot) in lists.into_iter().zip(tops).zip(&mut out) {
            let mut counts: Vec<Count> = list
                .into_iter()
                .map(|(value, count)| Count {
                    value: value.to_owned(),
                    count,
                })
                .collect();
            counts.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.value.cmp(&b.value)));
            counts.truncate(top);
            *slot = counts;
        }
        out
    }
}

#[derive(Default)]
struct Bucket {
    invocations: i64,
    errors: i64,
    users: Bits,
    sessions: Bits,
}

/// Grouped rows, `{bucket, invocations, distinct_users, distinct_sessions, errors}`, sorted
/// by `column` (`bucket` or a count; anything else means `invocations`) then by bucket,
/// buckets without a value last; with the number of buckets in all.
pub fn grouped(
    snap: &Snapshot,
    sel: &Selector,
    group_by: GroupBy,
    (column, ascending): (&str, bool),
    offset: usize,
    limit: usize,
) -> (Vec<Value>, usize) {
    // The bucket of each event as a small code, and each code's text.
    let mut buckets: Vec<Option<Bucket>> = Vec::new();
    let errors: Vec<bool> = snap.kinds.iter().map(|k| k.is_error).collect();
    let add = |buckets: &mut Vec<Option<Bucket>>, code: usize, u: u32, s: u32, k: u32| {
        if code >= buckets.len() {
            buckets.resize_with(code + 1, || None);
        }
        let b = buckets[code].get_or_insert_with(Bucket::default);
        b.invocations += 1;
        b.errors += i64::from(errors[k as usize]);
        b.users.insert(u);
        b.sessions.insert(s);
    };
    let names: Vec<Option<String>> = match group_by {
        GroupBy::Day => {
            const DAY: i64 = 86_400_000_000;
            let first = sel.since.div_euclid(DAY);
            let mut far = Vec::new();
            sel.each(snap, |t, u, s, k| {
                match usize::try_from(t.div_euclid(DAY) - first) {
                    Ok(d) if d <= 1_000 => add(&mut buckets, d, u, s, k),
                    // A time years past the window's start (a clock gone wrong): counted by
                    // its own day, as the scan would, with a code after the window's days.
                    _ => far.push((t.div_euclid(DAY), u, s, k)),
                }
            });
            let epoch = NaiveDate::from_ymd_opt(1970, 1, 1).expect("a date");
            let text = |day: i64| (epoch + Duration::days(day)).format("%Y-%m-%d").to_string();
            let mut texts: Vec<Option<String>> = (0..buckets.len())
                .map(|d| Some(text(first + d as i64)))
                .collect();
            let mut codes: HashMap<i64, usize> = HashMap::new();
            for (day, u, s, k) in far {
                let code = *codes.entry(day).or_insert_with(|| {
                    texts.push(Some(text(day)));
                    texts.len() - 1
                });
                add(&mut buckets, code, u, s, k);
            }
            texts
        }
        GroupBy::Username => {
            sel.each(snap, |_, u, s, k| add(&mut buckets, u as usize, u, s, k));
            snap.users.iter().cloned().map(Some).collect()
        }
        GroupBy::ToolName | GroupBy::Source | GroupBy::RefId => {
            let value = |k: &Kind| -> Option<String> {
                match group_by {
                    GroupBy::ToolName => k.tool_name.clone(),
                    GroupBy::Source => Some(k.source.clone()),
                    _ => k.ref_id.clone(),
                }
            };
            let mut codes: HashMap<Option<String>, usize> = HashMap::new();
            let mut texts = Vec::new();
            let of_kind: Vec<usize> = snap
                .kinds
                .iter()
                .map(|k| {
                    *codes.entry(value(k)).or_insert_with_key(|v| {
                        texts.push(v.clone());
                        texts.len() - 1
                    })
                })
                .collect();
            sel.each(snap, |_, u, s, k| {
                add(&mut buckets, of_kind[k as usize], u, s, k)
            });
            texts
        }
    };
    let mut rows: Vec<(Option<String>, [i64; 4])> = buckets
        .into_iter()
        .enumerate()
        .filter_map(|(code, b)| {
            let b = b?;
            Some((
                names[code].clone(),
                [b.invocations, b.users.len(), b.sessions.len(), b.errors],
            ))
        })
        .collect();
    let total = rows.len();
    let by = [
        "invocations",
        "distinct_users",
        "distinct_sessions",
        "errors",
    ]
    .iter()
    .position(|c| *c == column);
    // Buckets without a value sort last either way, as the scan's `nulls_first = false`.
    let bucket_order = |a: &Option<String>, b: &Option<String>, asc: bool| match (a, b) {
        (Some(a), Some(b)) if asc => a.cmp(b),
        (Some(a), Some(b)) => b.cmp(a),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    };
    rows.sort_by(|(ba, a), (bb, b)| match (column, by) {
        ("bucket", _) => bucket_order(ba, bb, ascending),
        (_, by) => {
            let i = by.unwrap_or(0);
            let first = if ascending {
                a[i].cmp(&b[i])
            } else {
                b[i].cmp(&a[i])
            };
            first.then_with(|| bucket_order(ba, bb, true))
        }
    });
    let page = rows
        .into_iter()
        .skip(offset)
        .take(limit)
        .map(|(bucket, [invocations, users, sessions, errors])| {
            json!({
                "bucket": bucket,
                "invocations": invocations,
                "distinct_users": users,
                "distinct_sessions": sessions,
                "errors": errors,
            })
        })
        .collect();
    (page, total)
}

/// The number of admitted events, and the time a page of raw events ending at the
/// `through`-th (newest first when `newest`) can be read from: every event of that page is
/// at or after it (at or before it, oldest first). None when all events fit.
pub fn raw_bound(
    snap: &Snapshot,
    sel: &Selector,
    through: usize,
    newest: bool,
) -> (usize, Option<i64>) {
    let mut total = 0;
    // The `through` newest (or oldest) times seen, the bound on top.
    let mut newest_times: BinaryHeap<Reverse<i64>> = BinaryHeap::new();
    let mut oldest_times: BinaryHeap<i64> = BinaryHeap::new();
    sel.each(snap, |t, _, _, _| {
        total += 1;
        if newest {
            if newest_times.len() < through {
                newest_times.push(Reverse(t));
            } else if newest_times.peek().is_some_and(|Reverse(min)| t > *min) {
                newest_times.pop();
                newest_times.push(Reverse(t));
            }
        } else if oldest_times.len() < through {
            oldest_times.push(t);
        } else if oldest_times.peek().is_some_and(|max| t < *max) {
            oldest_times.pop();
            oldest_times.push(t);
        }
    });
    if total <= through || through == 0 {
        return (total, None);
    }
    let bound = if newest {
        newest_times.peek().map(|Reverse(t)| *t)
    } else {
        oldest_times.peek().copied()
    };
    (total, bound)
}

#[cfg(test)]
#[path = "tally_tests.rs"]
mod tests;
