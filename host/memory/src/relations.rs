//! Pairs of items an administrator settles: likely duplicates, found when an item is
//! contributed, and contradictions, filed by hand. A resolution that keeps one side retires
//! the other through the review graph (rejected if it was pending or approved, revoked if
//! it was mandatory), so the bundle never carries both sides of a settled pair.

use std::collections::{BTreeSet, HashMap};
use std::time::Instant;

use serde::Serialize;
use serde_json::{json, Value};
use svc_auth::Caller;
use svc_core::Error;
use svc_store::audit::Event;
use svc_store::memory::relations::{Contradiction, DuplicateCandidate, NewContradiction, Resolved};
use svc_store::memory::{content_key, title_key, words, KnowledgeItem};

use crate::{not_found, Decision, Memory, Result, Status};

/// How alike two items must be (word-set Jaccard of title and content) to be recorded as
/// likely duplicates once their titles or contents already match after normalisation.
pub const DUPLICATE_THRESHOLD: f64 = 0.5;

/// How many same-key items are scored for one contribution.
const SUSPECTS: u64 = 50;

/// How a contradiction is settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContradictionResolution {
    /// Item A stands; B is retired.
    KeptA,
    /// Item B stands; A is retired.
    KeptB,
    /// Merged by hand into one of them (or a new item); neither is changed here.
    Merged,
    /// Both hold (different contexts); neither is changed.
    BothValid,
}

impl ContradictionResolution {
    const ALL: [Self; 4] = [Self::KeptA, Self::KeptB, Self::Merged, Self::BothValid];

    /// Its name in a request.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::KeptA => "kept_a",
            Self::KeptB => "kept_b",
            Self::Merged => "merged",
            Self::BothValid => "both_valid",
        }
    }

    /// Reads a name, or says which are accepted.
    pub fn parse(s: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| {
                Error::invalid(format!(
                    "resolution must be one of kept_a, kept_b, merged, both_valid (got '{s}')"
                ))
            })
    }
}

/// How a duplicate candidate is settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DuplicateResolution {
    /// They are the same knowledge (`keep` names the survivor, if any is to be retired).
    Duplicate,
    /// They are different.
    Different,
    /// Not worth deciding.
    Dismissed,
}

impl DuplicateResolution {
    const ALL: [Self; 3] = [Self::Duplicate, Self::Different, Self::Dismissed];

    /// Its name in a request.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Duplicate => "duplicate",
            Self::Different => "different",
            Self::Dismissed => "dismissed",
        }
    }

    /// Reads a name, or says which are accepted.
    pub fn parse(s: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| {
                Error::invalid(format!(
                    "resolution must be one of duplicate, different, dismissed (got '{s}')"
                ))
            })
    }
}

/// One side of a pair as an administrator sees it: the item, or only its id when it is
/// personal and personal items are hidden.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum Side {
    /// The item.
    Shown(Box<KnowledgeItem>),
    /// A personal item, withheld.
    Hidden {
        /// Its id.
        id: String,
        /// Always true.
        hidden: bool,
    },
    /// The item no longer exists.
    Gone {
        /// Its id.
        id: String,
        /// Always true.
        missing: bool,
    },
}

/// A contradiction with both sides.
#[derive(Debug, Clone, Serialize)]
pub struct ContradictionView {
    /// The contradiction.
    #[serde(flatten)]
    pub contradiction: Contradiction,
    /// Side A.
    pub item_a: Side,
    /// Side B.
    pub item_b: Side,
}

/// A duplicate candidate with both sides.
#[derive(Debug, Clone, Serialize)]
pub struct CandidateView {
    /// The pair.
    #[serde(flatten)]
    pub candidate: DuplicateCandidate,
    /// Side A.
    pub item_a: Side,
    /// Side B.
    pub item_b: Side,
}

/// Word-set Jaccard similarity of two items' title and content.
pub fn similarity(a: (&str, Option<&str>), b: (&str, Option<&str>)) -> f64 {
    let set = |(t, c): (&str, Option<&str>)| -> BTreeSet<String> {
        words(t).chain(words(c.unwrap_or(""))).collect()
    };
    let (x, y) = (set(a), set(b));
    let union = x.union(&y).count();
    if union == 0 {
        return 0.0;
    }
    x.intersection(&y).count() as f64 / union as f64
}

/// The retiring move for an item that lost a resolution, if it is still in force.
fn retirement(status: &str) -> Option<Decision> {
    match Status::parse(status)? {
        Status::Pending | Status::Approved => Some(Decision::Reject),
        Status::Mandatory => Some(Decision::Revoke),
        Status::Rejected | Status::Revoked | Status::Expired => None,
    }
}

impl Memory {
    /// Records the items that look like `item` (same normalised title or content, and
    /// similar enough words) as duplicate candidates.
    pub(crate) async fn find_duplicates(&self, item: &KnowledgeItem) -> Result<()> {
        let key = title_key(&item.title);
        let ckey = item.content.as_deref().and_then(content_key);
        let suspects = self
            .store
            .knowledge_duplicate_suspects(&item.id, &key, ckey.as_deref(), SUSPECTS)
            .await?;
        for (id, title, content) in suspects {
            let score = similarity(
                (&item.title, item.content.as_deref()),
                (&title, content.as_deref()),
            );
            if score >= DUPLICATE_THRESHOLD {
                self.store
                    .add_duplicate_candidate(&item.id, &id, score)
                    .await?;
            }
        }
        Ok(())
    }

    /// Each row with both of its sides: the items its pair names (one deleted since shown as
    /// missing; a personal one withheld when `hide_personal`).
    async fn with_sides<T, V>(
        &self,
        rows: Vec<T>,
        hide_personal: bool,
        pair: impl Fn(&T) -> (&str, &str),
        view: impl Fn(T, Side, Side) -> V,
    ) -> Result<Vec<V>> {
        let ids: BTreeSet<String> = rows
            .iter()
            .flat_map(|r| {
                let (a, b) = pair(r);
                [a.to_owned(), b.to_owned()]
            })
            .collect();
        let ids: Vec<String> = ids.into_iter().collect();
        let found: HashMap<String, KnowledgeItem> = self
            .store
            .knowledge_items_by_id(&ids)
            .await?
            .into_iter()
            .map(|i| (i.id.clone(), i))
            .collect();
        let side = |id: &str| match found.get(id) {
            Some(i) if hide_personal && i.is_personal => Side::Hidden {
                id: id.to_owned(),
                hidden: true,
            },
            Some(i) => Side::Shown(Box::new(i.clone())),
            None => Side::Gone {
                id: id.to_owned(),
                missing: true,
            },
        };
        Ok(rows
            .into_iter()
            .map(|r| {
                let (a, b) = pair(&r);
                let (a, b) = (side(a), side(b));
                view(r, a, b)
            })
            .collect())
    }

    /// Duplicate candidates (administrators).
    pub async fn duplicate_candidates(
        &self,
        resolved: Option<bool>,
        hide_personal: bool,
        limit: u64,
    ) -> Result<Vec<CandidateView>> {
        let rows = self.store.duplicate_candidates(resolved, limit).await?;
        self.with_sides(
            rows,
            hide_personal,
            |c| (c.item_a_id.as_str(), c.item_b_id.as_str()),
            |candidate, item_a, item_b| CandidateView {
                candidate,
                item_a,
                item_b,
            },
        )
        .await
    }

    /// Contradictions (administrators).
    pub async fn contradictions(
        &self,
        resolved: Option<bool>,
        hide_personal: bool,
        limit: u64,
    ) -> Result<Vec<ContradictionView>> {
        let rows = self.store.contradictions(resolved, limit).await?;
        self.with_sides(
            rows,
            hide_personal,
            |c| (c.item_a_id.as_str(), c.item_b_id.as_str()),
            |contradiction, item_a, item_b| ContradictionView {
                contradiction,
                item_a,
                item_b,
            },
        )
        .await
    }

    /// Files a contradiction between two existing, distinct items (administrators).
    pub async fn file_contradiction(
        &self,
        caller: &Caller,
        mut new: NewContradiction,
    ) -> Result<Contradiction> {
        let started = Instant::now();
        if new.item_a_id == new.item_b_id {
            return Err(Error::invalid("a contradiction needs two different items"));
        }
        for id in [&new.item_a_id, &new.item_b_id] {
            self.store.knowledge_item(id).await?.ok_or_else(not_found)?;
        }
        if new.severity.is_empty() {
            new.severity = "medium".into();
        }
        if !["low", "medium", "high"].contains(&new.severity.as_str()) {
            return Err(Error::invalid(format!(
                "severity must be low, medium or high (got '{}')",
                new.severity
            )));
        }
        new.created_by = caller.user.id.clone();
        let c = self.store.create_contradiction(&new).await?;
        let event = Event::new("corporate_memory.create_contradiction")
            .resource(c.item_a_id.clone())
            .param("contradiction_id", c.id.clone())
            .param("item_b_id", c.item_b_id.clone())
            .param("severity", c.severity.clone());
        self.audit.write(&caller.actor, event.timed(started)).await;
        Ok(c)
    }

    /// Settles a contradiction once (400 if it already is); keeping one side retires the
    /// other.
    pub async fn resolve_contradiction(
        &self,
        caller: &Caller,
        id: &str,
        resolution: ContradictionResolution,
        reason: Option<String>,
    ) -> Result<Value> {
        let started = Instant::now();
        let c = self
            .store
            .contradiction(id)
            .await?
            .ok_or_else(|| Error::not_found("contradiction not found"))?;
        let loser = match resolution {
            ContradictionResolution::KeptA => Some(c.item_b_id.clone()),
            ContradictionResolution::KeptB => Some(c.item_a_id.clone()),
            _ => None,
        };
        match self
            .store
            .resolve_contradiction(id, resolution.as_str(), &caller.user.id)
            .await?
        {
            Resolved::Done => {}
            Resolved::Already => {
                return Err(Error::bad_request("the contradiction is already resolved"))
            }
            Resolved::Missing => return Err(Error::not_found("contradiction not found")),
        }
        let event = Event::new("corporate_memory.resolve_contradiction")
            .resource(c.item_a_id.clone())
            .param("contradiction_id", id.to_owned())
            .param("item_b_id", c.item_b_id.clone())
            .param("resolution", resolution.as_str())
            .param("reason", json!(reason));
        self.audit.write(&caller.actor, event.timed(started)).await;
        let retired = self.retire(caller, loser, reason).await?;
        Ok(json!({"id": id, "resolution": resolution.as_str(), "retired": retired}))
    }

    /// Settles a duplicate pair once (400 if it already is); `duplicate` with `keep`
    /// naming one side retires the other.
    pub async fn resolve_duplicate(
        &self,
        caller: &Caller,
        a: &str,
        b: &str,
        resolution: DuplicateResolution,
        keep: Option<&str>,
    ) -> Result<Value> {
        let started = Instant::now();
        let loser = match (resolution, keep) {
            (_, None) => None,
            (DuplicateResolution::Duplicate, Some(k)) if k == a => Some(b.to_owned()),
            (DuplicateResolution::Duplicate, Some(k)) if k == b => Some(a.to_owned()),
            (DuplicateResolution::Duplicate, Some(k)) => {
                return Err(Error::invalid(format!(
                    "keep must name one of the pair ({a} or {b}), not '{k}'"
                )))
            }
            (_, Some(_)) => {
                return Err(Error::invalid(
                    "keep goes with the resolution 'duplicate' only",
                ))
            }
        };
        match self
            .store
            .resolve_duplicate_candidate(a, b, resolution.as_str(), &caller.user.id)
            .await?
        {
            Resolved::Done => {}
            Resolved::Already => {
                return Err(Error::bad_request(
                    "the duplicate candidate is already resolved",
                ))
            }
            Resolved::Missing => {
                return Err(Error::not_found(
                    "no duplicate candidate for these two items",
                ))
            }
        }
        let event = Event::new("corporate_memory.resolve_duplicate")
            .resource(a.to_owned())
            .param("item_b_id", b.to_owned())
            .param("resolution", resolution.as_str())
            .param("keep", json!(keep));
        self.audit.write(&caller.actor, event.timed(started)).await;
        let retired = self.retire(caller, loser, None).await?;
        Ok(
            json!({"item_a_id": a, "item_b_id": b, "resolution": resolution.as_str(), "retired": retired}),
        )
    }

    /// Moves the losing item of a resolution out of force; returns its new state, if moved.
    async fn retire(
        &self,
        caller: &Caller,
        loser: Option<String>,
        reason: Option<String>,
    ) -> Result<Option<Value>> {
        let Some(id) = loser else { return Ok(None) };
        let Some(item) = self.store.knowledge_item(&id).await? else {
            return Ok(None);
        };
        let Some(decision) = retirement(&item.status) else {
            return Ok(None);
        };
        let reason = reason.or_else(|| Some("lost a contradiction or duplicate resolution".into()));
        let after = self
            .decide(caller, &id, decision, reason, None, None)
            .await?;
        Ok(Some(json!({"id": after.id, "status": after.status})))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn similarity_is_word_set_jaccard() {
        let s = similarity(("Revenue is net", None), ("revenue IS net!", None));
        assert!((s - 1.0).abs() < 1e-9);
        let s = similarity(("a b", Some("c d")), ("a b", Some("e f")));
        assert!((s - 2.0 / 6.0).abs() < 1e-9, "{s}");
        assert_eq!(similarity(("", None), ("", None)), 0.0);
    }

    #[test]
    fn resolutions_parse_or_name_the_choices() {
        assert_eq!(
            ContradictionResolution::parse("kept_b").unwrap(),
            ContradictionResolution::KeptB
        );
        let e = DuplicateResolution::parse("same").unwrap_err();
        assert_eq!(e.status(), 422);
        assert!(e.to_string().contains("dismissed"), "{e}");
    }

    #[test]
    fn only_items_in_force_are_retired() {
        assert_eq!(retirement("approved"), Some(Decision::Reject));
        assert_eq!(retirement("mandatory"), Some(Decision::Revoke));
        assert_eq!(retirement("rejected"), None);
    }
}
