//! The agents' bundle: every mandatory item the reader sees, then approved items ranked by
//! confidence × recency until a token budget is spent. Personal items never enter it.
//!
//! Tokens are estimated as characters ÷ 4 (title and content), as the reference does; the
//! order is deterministic (rank, then id), so two agents with the same view get the same
//! bundle.

use chrono::{DateTime, Utc};
use serde::Serialize;
use svc_core::clock::parse_ts;
use svc_store::memory::KnowledgeItem;

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

fn tokens(item: &KnowledgeItem) -> usize {
    (item.title.chars().count() + item.content.as_deref().map_or(0, |c| c.chars().count()))
        .div_ceil(4)
}

/// confidence × recency, recency falling linearly from 1 (changed now) to 0 (a year old).
fn rank(item: &KnowledgeItem, now: DateTime<Utc>) -> f64 {
    let age_days = item
        .updated_at
        .as_deref()
        .and_then(parse_ts)
        .map_or(365.0, |t| (now - t).num_seconds().max(0) as f64 / 86_400.0);
    item.confidence * (1.0 - age_days / 365.0).max(0.0)
}

/// Builds the bundle from the visible mandatory and approved items.
pub fn assemble(items: Vec<KnowledgeItem>, budget: usize, now: DateTime<Utc>) -> Bundle {
    let (mut mandatory, mut approved): (Vec<_>, Vec<_>) = items
        .into_iter()
        .filter(|i| !i.is_personal)
        .partition(|i| i.status == "mandatory");
    approved.retain(|i| i.status == "approved");
    mandatory.sort_by(|a, b| b.updated_at.cmp(&a.updated_at).then(a.id.cmp(&b.id)));
    let mut used: usize = mandatory.iter().map(tokens).sum();
    let mut ranked: Vec<(f64, KnowledgeItem)> =
        approved.into_iter().map(|i| (rank(&i, now), i)).collect();
    ranked.sort_by(|(ra, a), (rb, b)| rb.total_cmp(ra).then(a.id.cmp(&b.id)));
    let mut chosen = Vec::new();
    for (_, item) in ranked {
        let t = tokens(&item);
        if used + t > budget {
            // A smaller item further down may still fit.
            continue;
        }
        used += t;
        chosen.push(item);
    }
    Bundle {
        mandatory,
        approved: chosen,
        token_estimate: used,
        token_budget: budget,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(id: &str, status: &str, confidence: f64, days_old: i64, chars: usize) -> KnowledgeItem {
        let now = Utc::now();
        KnowledgeItem {
            id: id.into(),
            title: "t".repeat(4),
            content: Some("c".repeat(chars)),
            category: None,
            tags: vec![],
            status: status.into(),
            source_user: None,
            created_by: None,
            audience: None,
            confidence,
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
            updated_at: Some(svc_core::clock::format_ts(
                now - chrono::Duration::days(days_old),
            )),
        }
    }

    #[test]
    fn mandatory_always_then_approved_by_rank_within_the_budget() {
        let items = vec![
            item("m1", "mandatory", 0.1, 300, 400),
            item("a-old", "approved", 0.9, 364, 36),
            item("a-new", "approved", 0.9, 1, 36),
            item("a-low", "approved", 0.2, 1, 36),
            item("a-big", "approved", 1.0, 0, 10_000),
            item("a-zero", "approved", 0.0, 0, 36),
            item("p1", "pending", 1.0, 0, 36),
        ];
        // m1 = 101 tokens; each small approved = 10; a-big = 2501.
        let b = assemble(items, 140, Utc::now());
        assert_eq!(
            b.mandatory
                .iter()
                .map(|i| i.id.as_str())
                .collect::<Vec<_>>(),
            ["m1"]
        );
        assert_eq!(
            b.approved.iter().map(|i| i.id.as_str()).collect::<Vec<_>>(),
            ["a-new", "a-low", "a-old"],
            "a-big does not fit; a-zero ranks last and does not fit either"
        );
        assert_eq!(b.token_estimate, 131);
        // Mandatory items are never cut, even past the budget.
        let b = assemble(vec![item("m1", "mandatory", 0.5, 0, 4_000)], 10, Utc::now());
        assert_eq!(b.mandatory.len(), 1);
        assert!(b.token_estimate > b.token_budget);
    }
}
