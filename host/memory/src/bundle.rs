//! The agents' bundle: every mandatory item the reader sees, then approved items ranked by
//! confidence × recency (ranked by the store, `svc_store::memory::bundle`) until a token
//! budget is spent. Personal items never enter it.
//!
//! Tokens are estimated as characters ÷ 4 (title and content), as the reference does; the
//! order is deterministic (rank, then id), so two agents with the same view get the same
//! bundle — which is why bundles are kept ([`BundleCache`]): every agent session loads one,
//! and readers in the same groups share it until an item changes.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Serialize;
use svc_store::memory::bundle::RankedCandidate;
use svc_store::memory::{KnowledgeItem, Visibility};

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

/// Estimated tokens of `chars` characters.
pub fn tokens(chars: usize) -> usize {
    chars.div_ceil(4)
}

/// Estimated tokens of an item's title and content.
fn item_tokens(i: &KnowledgeItem) -> usize {
    tokens(i.title.chars().count() + i.content.as_deref().map_or(0, |c| c.chars().count()))
}

/// Fills a budget: every mandatory item first (never cut, even past the budget), then
/// approved candidates in the order offered (best rank first) while they fit — a smaller
/// one further down may still fit after a larger one did not.
#[derive(Debug)]
pub struct Picker {
    budget: usize,
    used: usize,
    chosen: Vec<String>,
}

impl Picker {
    /// A picker whose budget already holds `mandatory`.
    pub fn new(budget: usize, mandatory: &[KnowledgeItem]) -> Self {
        Self {
            budget,
            used: mandatory.iter().map(item_tokens).sum(),
            chosen: Vec::new(),
        }
    }

    /// Takes the candidate if it fits what is left.
    pub fn offer(&mut self, c: &RankedCandidate) {
        let t = tokens(c.chars);
        if self.used + t <= self.budget {
            self.used += t;
            self.chosen.push(c.id.clone());
        }
    }

    /// Tokens left in the budget.
    pub fn left(&self) -> usize {
        self.budget.saturating_sub(self.used)
    }

    /// The approved ids taken, best first, and the tokens of everything included.
    pub fn finish(self) -> (Vec<String>, usize) {
        (self.chosen, self.used)
    }
}

/// The bundle of `mandatory` and the approved `chosen` ids (best first), their items taken
/// from `items` (any order).
pub fn assemble(
    mandatory: Vec<KnowledgeItem>,
    chosen: Vec<String>,
    items: Vec<KnowledgeItem>,
    token_estimate: usize,
    budget: usize,
) -> Bundle {
    let mut by_id: HashMap<String, KnowledgeItem> =
        items.into_iter().map(|i| (i.id.clone(), i)).collect();
    Bundle {
        mandatory,
        approved: chosen
            .into_iter()
            .filter_map(|id| by_id.remove(&id))
            .collect(),
        token_estimate,
        token_budget: budget,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(id: &str, chars: usize) -> RankedCandidate {
        RankedCandidate {
            id: id.into(),
            chars,
        }
    }

    fn mandatory(chars: usize) -> KnowledgeItem {
        KnowledgeItem {
            id: "m1".into(),
            title: "m".repeat(chars),
            content: None,
            category: None,
            tags: Vec::new(),
            status: "mandatory".into(),
            source_user: None,
            created_by: None,
            audience: None,
            confidence: 0.5,
            domain: None,
            entities: None,
            source_type: "api".into(),
            source_ref: None,
            is_personal: false,
            revision: 1,
            upvotes: 0,
            downvotes: 0,
            score: 0,
            created_at: None,
            updated_at: None,
        }
    }

    #[test]
    fn mandatory_always_then_approved_in_rank_order_while_they_fit() {
        // m1 = 101 tokens; each small approved = 10; a-big = 2,501.
        let mut p = Picker::new(140, &[mandatory(404)]);
        for c in [
            candidate("a-new", 40),
            candidate("a-big", 10_004),
            candidate("a-low", 40),
            candidate("a-old", 40),
            candidate("a-last", 40),
        ] {
            p.offer(&c);
        }
        assert_eq!(p.left(), 9);
        let (chosen, used) = p.finish();
        assert_eq!(
            chosen,
            ["a-new", "a-low", "a-old"],
            "a-big does not fit, the smaller ones after it do, a-last no longer does"
        );
        assert_eq!(used, 131);
        // Mandatory items are never cut, even past the budget.
        let p = Picker::new(10, &[mandatory(4_000)]);
        assert_eq!((p.left(), p.finish().1), (0, 1_000));
    }
}
