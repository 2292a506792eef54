//! Pairs of knowledge items that need an administrator's judgement: contradictions (filed by
//! hand or by a detector) and likely duplicates (found on contribution). Each is resolved
//! once; resolving again is refused, so a resolution is never silently overwritten.
//! Duplicate pairs are stored canonically, the smaller id first.

use serde::Serialize;
use sqlx::any::AnyRow;
use sqlx::Row;
use svc_core::clock::{new_id, now};

use crate::{flag, Store, StoreError};

/// A contradiction between two items.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Contradiction {
    /// Its id.
    pub id: String,
    /// One side.
    pub item_a_id: String,
    /// The other.
    pub item_b_id: String,
    /// Why they contradict.
    pub explanation: Option<String>,
    /// `low`, `medium` or `high`.
    pub severity: String,
    /// What the filer suggests.
    pub suggested_resolution: Option<String>,
    /// Whether it is settled.
    pub resolved: bool,
    /// Who settled it (user id).
    pub resolved_by: Option<String>,
    /// When.
    pub resolved_at: Option<String>,
    /// `kept_a`, `kept_b`, `merged` or `both_valid`.
    pub resolution: Option<String>,
    /// Who filed it (user id).
    pub created_by: Option<String>,
    /// When it was filed.
    pub detected_at: Option<String>,
}

/// A pair of items that look like the same knowledge.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DuplicateCandidate {
    /// The smaller id.
    pub item_a_id: String,
    /// The larger id.
    pub item_b_id: String,
    /// How alike they are, 0..=1.
    pub score: f64,
    /// Whether it is settled.
    pub resolved: bool,
    /// Who settled it (user id).
    pub resolved_by: Option<String>,
    /// When.
    pub resolved_at: Option<String>,
    /// `duplicate`, `different` or `dismissed`.
    pub resolution: Option<String>,
    /// When it was found.
    pub created_at: Option<String>,
}

/// A new contradiction.
#[derive(Debug, Clone, Default)]
pub struct NewContradiction {
    /// One side.
    pub item_a_id: String,
    /// The other.
    pub item_b_id: String,
    /// Why.
    pub explanation: Option<String>,
    /// `low`, `medium` or `high`.
    pub severity: String,
    /// A suggestion.
    pub suggested_resolution: Option<String>,
    /// Who files it.
    pub created_by: String,
}

/// How resolving a pair went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolved {
    /// Resolved now.
    Done,
    /// It was already resolved: nothing changed.
    Already,
    /// No such pair.
    Missing,
}

fn contradiction(r: &AnyRow) -> Result<Contradiction, StoreError> {
    Ok(Contradiction {
        id: r.try_get("id")?,
        item_a_id: r.try_get("item_a_id")?,
        item_b_id: r.try_get("item_b_id")?,
        explanation: r.try_get("explanation")?,
        severity: r.try_get("severity")?,
        suggested_resolution: r.try_get("suggested_resolution")?,
        resolved: flag(r, "resolved")?,
        resolved_by: r.try_get("resolved_by")?,
        resolved_at: r.try_get("resolved_at")?,
        resolution: r.try_get("resolution")?,
        created_by: r.try_get("created_by")?,
        detected_at: r.try_get("detected_at")?,
    })
}

fn candidate(r: &AnyRow) -> Result<DuplicateCandidate, StoreError> {
    let milli: i64 = r.try_get("score_milli")?;
    Ok(DuplicateCandidate {
        item_a_id: r.try_get("item_a_id")?,
        item_b_id: r.try_get("item_b_id")?,
        score: milli as f64 / 1000.0,
        resolved: flag(r, "resolved")?,
        resolved_by: r.try_get("resolved_by")?,
        resolved_at: r.try_get("resolved_at")?,
        resolution: r.try_get("resolution")?,
        created_at: r.try_get("created_at")?,
    })
}

/// `(a, b)` with the smaller first.
fn canonical<'a>(a: &'a str, b: &'a str) -> (&'a str, &'a str) {
    if a <= b {
        (a, b)
    } else {
        (b, a)
    }
}

const CONTRADICTION_COLUMNS: &str = "id, item_a_id, item_b_id, explanation, severity, \
    suggested_resolution, resolved, resolved_by, resolved_at, resolution, created_by, detected_at";
const CANDIDATE_COLUMNS: &str =
    "item_a_id, item_b_id, score_milli, resolved, resolved_by, resolved_at, resolution, created_at";

/// The WHERE clause keeping open (false) or resolved (true) pairs, or every pair (None).
fn resolved_filter(resolved: Option<bool>) -> &'static str {
    match resolved {
        Some(true) => " WHERE resolved = TRUE",
        Some(false) => " WHERE resolved = FALSE",
        None => "",
    }
}

impl Store {
    /// Items other than `id` sharing its title key or content key (at most `limit`), with
    /// their title and content, for the caller to score.
    pub async fn knowledge_duplicate_suspects(
        &self,
        id: &str,
        title_key: &str,
        content_key: Option<&str>,
        limit: u64,
    ) -> Result<Vec<(String, String, Option<String>)>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT id, title, content FROM knowledge_items \
             WHERE id <> $1 AND (title_key = $2 OR content_key = $3) ORDER BY id LIMIT {limit}"
        ))
        .bind(id)
        .bind(title_key)
        .bind(content_key)
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("id")?, r.try_get("title")?, r.try_get("content")?)))
            .collect()
    }

    /// Records a likely duplicate pair (kept as it is if already known).
    pub async fn add_duplicate_candidate(
        &self,
        a: &str,
        b: &str,
        score: f64,
    ) -> Result<(), StoreError> {
        let (a, b) = canonical(a, b);
        sqlx::query(
            "INSERT INTO knowledge_item_relations (item_a_id, item_b_id, relation_type, score_milli, resolved, created_at) \
             VALUES ($1, $2, 'likely_duplicate', $3, FALSE, $4) \
             ON CONFLICT (item_a_id, item_b_id, relation_type) DO NOTHING",
        )
        .bind(a)
        .bind(b)
        .bind((score.clamp(0.0, 1.0) * 1000.0).round() as i64)
        .bind(now())
        .execute(self.pool())
        .await?;
        Ok(())
    }

    /// Duplicate candidates, open or resolved or both, most alike first (then newest).
    pub async fn duplicate_candidates(
        &self,
        resolved: Option<bool>,
        limit: u64,
    ) -> Result<Vec<DuplicateCandidate>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {CANDIDATE_COLUMNS} FROM knowledge_item_relations{} \
             ORDER BY score_milli DESC, created_at DESC, item_a_id, item_b_id LIMIT {limit}",
            resolved_filter(resolved)
        ))
        .fetch_all(self.pool())
        .await?;
        rows.iter().map(candidate).collect()
    }

    /// Settles a duplicate pair once.
    pub async fn resolve_duplicate_candidate(
        &self,
        a: &str,
        b: &str,
        resolution: &str,
        by: &str,
    ) -> Result<Resolved, StoreError> {
        let (a, b) = canonical(a, b);
        let n = sqlx::query(
            "UPDATE knowledge_item_relations SET resolved = TRUE, resolution = $1, resolved_by = $2, resolved_at = $3 \
             WHERE item_a_id = $4 AND item_b_id = $5 AND resolved = FALSE",
        )
        .bind(resolution)
        .bind(by)
        .bind(now())
        .bind(a)
        .bind(b)
        .execute(self.pool())
        .await?
        .rows_affected();
        if n > 0 {
            return Ok(Resolved::Done);
        }
        let exists = sqlx::query(
            "SELECT 1 AS one FROM knowledge_item_relations WHERE item_a_id = $1 AND item_b_id = $2",
        )
        .bind(a)
        .bind(b)
        .fetch_optional(self.pool())
        .await?;
        Ok(if exists.is_some() {
            Resolved::Already
        } else {
            Resolved::Missing
        })
    }

    /// Files a contradiction and returns it.
    pub async fn create_contradiction(
        &self,
        new: &NewContradiction,
    ) -> Result<Contradiction, StoreError> {
        let id = new_id();
        sqlx::query(
            "INSERT INTO knowledge_contradictions (id, item_a_id, item_b_id, explanation, severity, \
             suggested_resolution, resolved, created_by, detected_at) \
             VALUES ($1, $2, $3, $4, $5, $6, FALSE, $7, $8)",
        )
        .bind(&id)
        .bind(&new.item_a_id)
        .bind(&new.item_b_id)
        .bind(&new.explanation)
        .bind(&new.severity)
        .bind(&new.suggested_resolution)
        .bind(&new.created_by)
        .bind(now())
        .execute(self.pool())
        .await?;
        self.contradiction(&id)
            .await?
            .ok_or_else(|| sqlx::Error::RowNotFound.into())
    }

    /// One contradiction.
    pub async fn contradiction(&self, id: &str) -> Result<Option<Contradiction>, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT {CONTRADICTION_COLUMNS} FROM knowledge_contradictions WHERE id = $1"
        ))
        .bind(id)
        .fetch_optional(self.pool())
        .await?;
        row.as_ref().map(contradiction).transpose()
    }

    /// Contradictions, open or resolved or both, newest first.
    pub async fn contradictions(
        &self,
        resolved: Option<bool>,
        limit: u64,
    ) -> Result<Vec<Contradiction>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {CONTRADICTION_COLUMNS} FROM knowledge_contradictions{} \
             ORDER BY detected_at DESC, id DESC LIMIT {limit}",
            resolved_filter(resolved)
        ))
        .fetch_all(self.pool())
        .await?;
        rows.iter().map(contradiction).collect()
    }

    /// Settles a contradiction once.
    pub async fn resolve_contradiction(
        &self,
        id: &str,
        resolution: &str,
        by: &str,
    ) -> Result<Resolved, StoreError> {
        let n = sqlx::query(
            "UPDATE knowledge_contradictions SET resolved = TRUE, resolution = $1, resolved_by = $2, resolved_at = $3 \
             WHERE id = $4 AND resolved = FALSE",
        )
        .bind(resolution)
        .bind(by)
        .bind(now())
        .bind(id)
        .execute(self.pool())
        .await?
        .rows_affected();
        Ok(if n > 0 {
            Resolved::Done
        } else if self.contradiction(id).await?.is_some() {
            Resolved::Already
        } else {
            Resolved::Missing
        })
    }
}
