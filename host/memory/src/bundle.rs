//! The agents' bundle: every mandatory item the reader sees, then approved items ranked by
//! confidence × recency until a token budget is spent. Personal items never enter it.
//!
//! Tokens are estimated as characters ÷ 4 (title and content), as the reference does; the
//! order is deterministic (rank, then id), so two agents with the same view get the same
//! bundle — which is why bundles are kept ([`BundleCache`]): every agent session loads one,
//! and readers in the same groups share it until an item changes.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::Serialize;
use svc_core::clock::parse_ts;
use svc_store::memory::{BundleCandidate, KnowledgeItem, Visibility};

/// How long a kept bundle is served while no item changes: ranks drift with time (recency),
/// by at most a minute's worth.
pub const BUNDLE_TTL: Duration = Duration::from_secs(60);

/// Most bundles kept (one per view and budget); past it the oldest half is dropped.
const KEPT: usize = 512;

/// What makes two readers' bundles the same: what they see (their groups and granted
/// domains, or everything) and the budget.
pub type BundleKey = (Option<(Vec<String>, Vec<String>)>, usize);

/// Bundles recently assembled, each with the last item change it saw. One is served only
/// while the store's last change is the same (so a decision on any replica shows at once)
/// and it is younger than [`BUNDLE_TTL`].
#[derive(Debug, Default)]
pub struct BundleCache {
    kept: Mutex<HashMap<BundleKey, Kept>>,
}

/// A kept bundle: the last item change it saw, when it was assembled, the bundle.
type Kept = (Option<String>, Instant, Bundle);

impl BundleCache {
    /// The key of a view and a budget.
    pub fn key(v: &Visibility, budget: usize) -> BundleKey {
        let view = match v {
            Visibility::All => None,
            Visibility::Reader { groups, domains } => {
                let (mut g, mut d) = (groups.clone(), domains.clone());
                g.sort();
                d.sort();
                Some((g, d))
            }
        };
        (view, budget)
    }

    /// The kept bundle, if it saw `stamp` and is fresh.
    pub fn get(&self, key: &BundleKey, stamp: &Option<String>) -> Option<Bundle> {
        let kept = self.kept.lock().expect("bundle cache lock");
        kept.get(key)
            .filter(|(s, at, _)| s == stamp && at.elapsed() < BUNDLE_TTL)
            .map(|(_, _, b)| b.clone())
    }

    /// Keeps a bundle assembled after `stamp`.
    pub fn put(&self, key: BundleKey, stamp: Option<String>, bundle: Bundle) {
        let mut kept = self.kept.lock().expect("bundle cache lock");
        if kept.len() >= KEPT {
            let mut ages: Vec<(Instant, BundleKey)> = kept
                .iter()
                .map(|(k, (_, at, _))| (*at, k.clone()))
                .collect();
            ages.sort_by_key(|(at, _)| *at);
            for (_, k) in ages.into_iter().take(KEPT / 2) {
                kept.remove(&k);
            }
        }
        kept.insert(key, (stamp, Instant::now(), bundle));
    }
}

/// The default budget, in estimated tokens.
pub const DEFAULT_BUDGET_TOKENS: usize = 6_000;

/// What an agent loads.
#[derive(Debug, Clone, Serialize)]
pub struct Bundle {
    /// Every mandatory item, newest change first (never cut by the budget).
    pub mandatory: Vec<KnowledgeItem>,
    /// The best approved items that fit the budget left.
    pub approved: Vec<KnowledgeItem>,
    /// Estimated tokens of everything included.
    pub token_estimate: usize,
    /// The budget asked for.
    pub token_budget: usize,
}

fn tokens(c: &BundleCandidate) -> usize {
    c.chars.div_ceil(4)
}

/// confidence × recency, recency falling linearly from 1 (changed now) to 0 (a year old).
fn rank(c: &BundleCandidate, now: DateTime<Utc>) -> f64 {
    let age_days = c
        .updated_at
        .as_deref()
        .and_then(parse_ts)
        .map_or(365.0, |t| (now - t).num_seconds().max(0) as f64 / 86_400.0);
    c.confidence * (1.0 - age_days / 365.0).max(0.0)
}

/// Which items a bundle holds, in order, and their estimated tokens.
#[derive(Debug, Clone, PartialEq)]
pub struct Selection {
    /// Every mandatory item, newest change first.
    pub mandatory: Vec<String>,
    /// The approved items that fit, best first.
    pub approved: Vec<String>,
    /// Estimated tokens of both.
    pub token_estimate: usize,
}

/// Chooses the bundle from the visible mandatory and approved items: every mandatory one,
/// then approved ones by rank (ties by id) while they fit — a smaller one further down may
/// still fit after a larger one did not.
pub fn select(candidates: Vec<BundleCandidate>, budget: usize, now: DateTime<Utc>) -> Selection {
    let (mut mandatory, approved): (Vec<_>, Vec<_>) =
        candidates.into_iter().partition(|c| c.mandatory);
    mandatory.sort_by(|a, b| b.updated_at.cmp(&a.updated_at).then(a.id.cmp(&b.id)));
    let mut used: usize = mandatory.iter().map(tokens).sum();
    let mut ranked: Vec<(f64, BundleCandidate)> =
        approved.into_iter().map(|c| (rank(&c, now), c)).collect();
    ranked.sort_by(|(ra, a), (rb, b)| rb.total_cmp(ra).then(a.id.cmp(&b.id)));
    let mut chosen = Vec::new();
    for (_, c) in ranked {
        let t = tokens(&c);
        if used + t > budget {
            continue;
        }
        used += t;
        chosen.push(c.id);
    }
    Selection {
        mandatory: mandatory.into_iter().map(|c| c.id).collect(),
        approved: chosen,
        token_estimate: used,
    }
}

/// The bundle of `selection`, its items taken from `items` (any order).
pub fn assemble(selection: Selection, items: Vec<KnowledgeItem>, budget: usize) -> Bundle {
    let mut by_id: std::collections::HashMap<String, KnowledgeItem> =
        items.into_iter().map(|i| (i.id.clone(), i)).collect();
    let mut take = |ids: Vec<String>| -> Vec<KnowledgeItem> {
        ids.into_iter().filter_map(|id| by_id.remove(&id)).collect()
    };
    Bundle {
        mandatory: take(selection.mandatory),
        approved: take(selection.approved),
        token_estimate: selection.token_estimate,
        token_budget: budget,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(
        id: &str,
        mandatory: bool,
        confidence: f64,
        days_old: i64,
        chars: usize,
    ) -> BundleCandidate {
        BundleCandidate {
            id: id.into(),
            mandatory,
            chars: chars + 4,
            confidence,
            updated_at: Some(svc_core::clock::format_ts(
                Utc::now() - chrono::Duration::days(days_old),
            )),
        }
    }

    #[test]
    fn mandatory_always_then_approved_by_rank_within_the_budget() {
        let items = vec![
            item("m1", true, 0.1, 300, 400),
            item("a-old", false, 0.9, 364, 36),
            item("a-new", false, 0.9, 1, 36),
            item("a-low", false, 0.2, 1, 36),
            item("a-big", false, 1.0, 0, 10_000),
            item("a-zero", false, 0.0, 0, 36),
        ];
        // m1 = 101 tokens; each small approved = 10; a-big = 2501.
        let s = select(items, 140, Utc::now());
        assert_eq!(s.mandatory, ["m1"]);
        assert_eq!(
            s.approved,
            ["a-new", "a-low", "a-old"],
            "a-big does not fit; a-zero ranks last and does not fit either"
        );
        assert_eq!(s.token_estimate, 131);
        // Mandatory items are never cut, even past the budget.
        let s = select(vec![item("m1", true, 0.5, 0, 4_000)], 10, Utc::now());
        assert_eq!(s.mandatory.len(), 1);
        assert!(s.token_estimate > 10);
    }
}
