//! The browse reads counted over the event index ([`Snapshot`]): the figures the DataFusion
//! plans in [`crate::browse`] compute, in one pass over codes each. `browse` chooses which
//! path answers; the differential tests in `tally_tests.rs` hold the two to the same
//! answers.

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashMap};

use chrono::{Duration, NaiveDate};
use serde_json::{json, Value};

use crate::browse::{Count, Filters, GroupBy};
use crate::event_index::{Bits, Cell, Kind, Snapshot, Window, DAY};

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

    /// The window's start, in microseconds.
    pub fn since(&self) -> i64 {
        self.since
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

    /// Whether no event can be admitted.
    fn admits_none(&self) -> bool {
        matches!(self.user, UserSel::Nobody) || !self.kinds.contains(&true)
    }

    /// Calls `f` with the admitted events ([`Snapshot::each`]).
    fn each(&self, snap: &Snapshot, mut f: impl FnMut(Cell)) {
        if self.admits_none() {
            return;
        }
        snap.each(self.since, |c| {
            if self.admits(c.user, c.kind) {
                f(c);
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
    fn empty(snap: &Snapshot) -> Self {
        Self {
            users: vec![0; snap.users.len()],
            kinds: vec![0; snap.kinds.len()],
        }
    }

    #[inline]
    fn add(&mut self, c: Cell) {
        self.users[c.user as usize] += i64::from(c.events);
        self.kinds[c.kind as usize] += i64::from(c.events);
    }

    /// Events counted.
    pub fn events(&self) -> i64 {
        self.kinds.iter().sum()
    }

    fn merge(&mut self, other: &Counts) {
        for (a, b) in self.users.iter_mut().zip(&other.users) {
            *a += b;
        }
        for (a, b) in self.kinds.iter_mut().zip(&other.kinds) {
            *a += b;
        }
    }

    /// Counts the events `sel` admits.
    pub fn of(snap: &Snapshot, sel: &Selector) -> Self {
        let mut c = Self::empty(snap);
        sel.each(snap, |cell| c.add(cell));
        c
    }

    /// (events, distinct owners, distinct tools, failed events).
    pub fn kpis(&self, snap: &Snapshot) -> (i64, i64, i64, i64) {
        let events = self.events();
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

/// How a [`Grouper`] finds an event's bucket.
enum Keying {
    /// Days from the window's first, up to a thousand; later ones (a clock gone wrong)
    /// are kept apart and counted at the end.
    Day { first: i64, far: Vec<Cell> },
    /// The owner's code.
    User,
    /// A code per kind, into `texts`.
    Kind(Vec<usize>),
}

/// Grouped rows being counted, one event at a time.
pub struct Grouper {
    keying: Keying,
    /// Bucket texts by code, for kind keyings.
    texts: Vec<Option<String>>,
    errors: Vec<bool>,
    buckets: Vec<Option<Bucket>>,
}

impl Grouper {
    /// Buckets by `group_by` for a window starting at `since` (microseconds).
    pub fn new(snap: &Snapshot, group_by: GroupBy, since: i64) -> Self {
        let mut texts = Vec::new();
        let keying = match group_by {
            GroupBy::Day => Keying::Day {
                first: since.div_euclid(DAY),
                far: Vec::new(),
            },
            GroupBy::Username => Keying::User,
            GroupBy::ToolName | GroupBy::Source | GroupBy::RefId => {
                let value = |k: &Kind| -> Option<String> {
                    match group_by {
                        GroupBy::ToolName => k.tool_name.clone(),
                        GroupBy::Source => Some(k.source.clone()),
                        _ => k.ref_id.clone(),
                    }
                };
                let mut codes: HashMap<Option<String>, usize> = HashMap::new();
                let of_kind = snap
                    .kinds
                    .iter()
                    .map(|k| {
                        *codes.entry(value(k)).or_insert_with_key(|v| {
                            texts.push(v.clone());
                            texts.len() - 1
                        })
                    })
                    .collect();
                Keying::Kind(of_kind)
            }
        };
        Self {
            keying,
            texts,
            errors: snap.kinds.iter().map(|k| k.is_error).collect(),
            buckets: Vec::new(),
        }
    }

    fn count(&mut self, code: usize, c: Cell) {
        if code >= self.buckets.len() {
            self.buckets.resize_with(code + 1, || None);
        }
        let b = self.buckets[code].get_or_insert_with(Bucket::default);
        let n = i64::from(c.events);
        b.invocations += n;
        b.errors += n * i64::from(self.errors[c.kind as usize]);
        b.users.insert(c.user);
        b.sessions.insert(c.session);
    }

    /// Adds the counts of another grouper made for the same snapshot and grouping.
    fn merge(&mut self, other: Grouper) {
        if let (Keying::Day { far, .. }, Keying::Day { far: theirs, .. }) =
            (&mut self.keying, other.keying)
        {
            far.extend(theirs);
        }
        if other.buckets.len() > self.buckets.len() {
            self.buckets.resize_with(other.buckets.len(), || None);
        }
        for (mine, theirs) in self.buckets.iter_mut().zip(other.buckets) {
            let Some(theirs) = theirs else { continue };
            match mine {
                None => *mine = Some(theirs),
                Some(b) => {
                    b.invocations += theirs.invocations;
                    b.errors += theirs.errors;
                    b.users.union(&theirs.users);
                    b.sessions.union(&theirs.sessions);
                }
            }
        }
    }

    /// Counts admitted events.
    #[inline]
    pub fn add(&mut self, c: Cell) {
        let code = match &mut self.keying {
            Keying::Day { first, far } => match usize::try_from(c.at.div_euclid(DAY) - *first) {
                Ok(d) if d <= 1_000 => d,
                _ => {
                    far.push(c);
                    return;
                }
            },
            Keying::User => c.user as usize,
            Keying::Kind(of_kind) => of_kind[c.kind as usize],
        };
        self.count(code, c);
    }

    /// The page of rows, sorted by `column` (`bucket` or a count; anything else means
    /// `invocations`) then by bucket, buckets without a value last; with the number of
    /// buckets in all.
    pub fn finish(
        mut self,
        snap: &Snapshot,
        (column, ascending): (&str, bool),
        offset: usize,
        limit: usize,
    ) -> (Vec<Value>, usize) {
        let names: Vec<Option<String>> = match std::mem::replace(&mut self.keying, Keying::User) {
            Keying::Day { first, far } => {
                let epoch = NaiveDate::from_ymd_opt(1970, 1, 1).expect("a date");
                let text = |day: i64| (epoch + Duration::days(day)).format("%Y-%m-%d").to_string();
                let mut texts: Vec<Option<String>> = (0..self.buckets.len())
                    .map(|d| Some(text(first + d as i64)))
                    .collect();
                let mut codes: HashMap<i64, usize> = HashMap::new();
                for c in far {
                    let day = c.at.div_euclid(DAY);
                    let code = *codes.entry(day).or_insert_with(|| {
                        texts.push(Some(text(day)));
                        texts.len() - 1
                    });
                    self.count(code, c);
                }
                texts
            }
            Keying::User => snap.users.iter().cloned().map(Some).collect(),
            Keying::Kind(_) => std::mem::take(&mut self.texts),
        };
        let buckets = self.buckets;
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
}

/// Grouped rows under `sel` ([`Grouper::finish`] says how they are sorted and paged).
pub fn grouped(
    snap: &Snapshot,
    sel: &Selector,
    group_by: GroupBy,
    order: (&str, bool),
    offset: usize,
    limit: usize,
) -> (Vec<Value>, usize) {
    let mut g = Grouper::new(snap, group_by, sel.since);
    sel.each(snap, |c| g.add(c));
    g.finish(snap, order, offset, limit)
}

/// The time a page of raw events ending at the `through`-th admitted event (newest first
/// when `newest`) can be read from: every event of that page is at or after it (at or
/// before it, oldest first). Each file is walked from the page's side (newest events first,
/// for newest first) and left at the first admitted event that cannot be on the page, so a
/// page costs about its length a file, not the window.
pub struct RawBound {
    through: usize,
    /// 1 when the newest come first, -1 when the oldest do: keys `sign × time`, so one
    /// heap keeps the page's side either way.
    sign: i64,
    /// The `through` largest keys seen, the smallest of them on top.
    keys: BinaryHeap<Reverse<i64>>,
}

impl RawBound {
    /// A bound for pages ending at the `through`-th event.
    pub fn new(through: usize, newest: bool) -> Self {
        Self {
            through,
            sign: if newest { 1 } else { -1 },
            keys: BinaryHeap::new(),
        }
    }

    /// Sees the admitted events of one file's window, from the page's end.
    fn add(&mut self, sel: &Selector, w: &Window) {
        let newest = self.sign == 1;
        let mut visit = |i: usize| {
            if !sel.admits(w.user[i], w.kind[i]) {
                return true;
            }
            // Keys only fall from here on in this file: once one is not kept, none is.
            self.keep(self.sign * w.at[i])
        };
        if newest {
            (0..w.at.len()).rev().all(&mut visit);
        } else {
            (0..w.at.len()).all(&mut visit);
        }
    }

    /// Whether `key` was kept.
    fn keep(&mut self, key: i64) -> bool {
        if self.keys.len() < self.through {
            self.keys.push(Reverse(key));
        } else if self.keys.peek().is_some_and(|Reverse(min)| key > *min) {
            self.keys.pop();
            self.keys.push(Reverse(key));
        } else {
            return false;
        }
        true
    }

    /// Adds what another bound for the same page has seen.
    fn merge(&mut self, other: RawBound) {
        for Reverse(key) in other.keys {
            self.keep(key);
        }
    }

    /// (`total`, the bound), for `total` admitted events; no bound when all of them fit.
    pub fn finish(self, total: i64) -> (usize, Option<i64>) {
        let total = total as usize;
        if total <= self.through || self.through == 0 {
            return (total, None);
        }
        let bound = self.keys.peek().map(|Reverse(key)| self.sign * key);
        (total, bound)
    }
}

/// The number of events `sel` admits and their [`RawBound`].
pub fn raw_bound(
    snap: &Snapshot,
    sel: &Selector,
    through: usize,
    newest: bool,
) -> (usize, Option<i64>) {
    let total = Counts::of(snap, sel).events();
    let mut bound = RawBound::new(through, newest);
    if !sel.admits_none() {
        for w in snap.windows_of_part(0, 1, sel.since) {
            bound.add(sel, &w);
        }
    }
    bound.finish(total)
}

/// The rows a page shows, being counted.
pub enum Rows {
    /// Grouped.
    Grouped(Grouper),
    /// Raw: their bound (their number is the admitted events').
    Raw(RawBound),
}

/// What the telemetry page reads, counted in one walk over the window: every event's
/// counts (the facets'), the admitted events' counts (the KPIs') and their rows (`rows`
/// makes an empty tally). The files are shared among the cores and the tallies merged.
pub fn page(
    snap: &Snapshot,
    sel: &Selector,
    rows: impl Fn() -> Rows + Sync,
) -> (Counts, Counts, Rows) {
    let parts = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(snap.file_count())
        .max(1);
    let walk = |part: usize| {
        let (mut all, mut picked, mut rows) = (Counts::empty(snap), Counts::empty(snap), rows());
        snap.each_of_part(part, parts, sel.since, |c| {
            all.add(c);
            if sel.admits(c.user, c.kind) {
                picked.add(c);
                if let Rows::Grouped(g) = &mut rows {
                    g.add(c);
                }
            }
        });
        if let (Rows::Raw(r), false) = (&mut rows, sel.admits_none()) {
            for w in snap.windows_of_part(part, parts, sel.since) {
                r.add(sel, &w);
            }
        }
        (all, picked, rows)
    };
    let mut tallies = std::thread::scope(|scope| {
        let walks: Vec<_> = (1..parts).map(|p| scope.spawn(move || walk(p))).collect();
        let mut tallies = vec![walk(0)];
        tallies.extend(walks.into_iter().map(|w| w.join().expect("a walk")));
        tallies
    });
    let (mut all, mut picked, mut rows) = tallies.remove(0);
    for (a, p, r) in tallies {
        all.merge(&a);
        picked.merge(&p);
        match (&mut rows, r) {
            (Rows::Grouped(g), Rows::Grouped(other)) => g.merge(other),
            (Rows::Raw(b), Rows::Raw(other)) => b.merge(other),
            _ => unreachable!("every walk makes its rows with the same function"),
        }
    }
    (all, picked, rows)
}

#[cfg(test)]
#[path = "tally_tests.rs"]
mod tests;
