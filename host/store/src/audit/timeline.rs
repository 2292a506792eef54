//! Reading the audit log back: newest first, a page at a time, by keyset.
//!
//! A keyset cursor (the last row's timestamp and id) instead of an offset, so a page costs
//! the same however deep it is and rows written meanwhile never shift one page's rows onto
//! the next.

use sqlx::Row;

use super::rows::{record, COLUMNS};
use super::AuditRecord;
use crate::clause::{like_literal, Where};
use crate::{Store, StoreError};

/// Where a page starts: after this row, in newest-first order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditCursor {
    /// The last row's timestamp.
    pub timestamp: String,
    /// The last row's id (breaks ties between rows of one timestamp).
    pub id: String,
}

impl AuditCursor {
    /// The cursor as one opaque token (`<timestamp>,<id>`).
    pub fn token(&self) -> String {
        format!("{},{}", self.timestamp, self.id)
    }

    /// Reads a token made by [`AuditCursor::token`]; None when it is not one.
    pub fn parse(token: &str) -> Option<Self> {
        let (timestamp, id) = token.split_once(',')?;
        let ok = |s: &str| !s.is_empty() && s.len() <= 64 && !s.contains(',');
        (ok(timestamp) && ok(id) && svc_core::clock::parse_ts(timestamp).is_some()).then(|| Self {
            timestamp: timestamp.to_owned(),
            id: id.to_owned(),
        })
    }
}

/// Which results a page holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResultFilter {
    /// `success`.
    Success,
    /// Any `error.<status>`.
    Error,
    /// Exactly `error.<status>`.
    Status(u16),
}

impl ResultFilter {
    /// `success`, `error` or `error.<status>` (a three-digit status); None otherwise.
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "success" => Some(Self::Success),
            "error" => Some(Self::Error),
            other => {
                let status = other.strip_prefix("error.")?;
                (status.len() == 3 && status.bytes().all(|b| b.is_ascii_digit()))
                    .then(|| status.parse().ok().map(Self::Status))
                    .flatten()
            }
        }
    }
}

/// Where an audit row came from: its client kind, or `system` for work nobody's request
/// caused (startup, migrations, background jobs without an identity).
pub const SYSTEM_SOURCE: &str = "system";

/// The condition a failed row meets: the errors-only filter's, and the rollups' error slice.
pub(super) const ERROR_ROWS: &str = "a.result LIKE 'error.%'";

/// Which audit rows a page holds; every field narrows it (AND).
#[derive(Debug, Clone, Default)]
pub struct AuditFilter {
    /// Rows at or after this store timestamp.
    pub since: Option<String>,
    /// Rows before this store timestamp.
    pub until: Option<String>,
    /// Rows of this user only.
    pub user_id: Option<String>,
    /// Actions starting with this text, taken literally (`%` and `_` are not wildcards).
    pub action_prefix: Option<String>,
    /// Actions among these (empty: any).
    pub action_in: Vec<String>,
    /// Exactly this resource.
    pub resource: Option<String>,
    /// Successes, failures, or one failure status.
    pub result: Option<ResultFilter>,
    /// Exactly this client kind.
    pub client_kind: Option<String>,
    /// This source: a client kind, or [`SYSTEM_SOURCE`] for rows without one.
    pub source: Option<String>,
    /// Rows of this request.
    pub correlation_id: Option<String>,
    /// Text the row's parameters contain, taken literally (case-sensitive).
    pub q: Option<String>,
}

impl AuditFilter {
    /// Whether it narrows nothing but the time window (`since`, `until`).
    pub fn window_only(&self) -> bool {
        let unset = |v: &Option<String>| v.as_deref().is_none_or(str::is_empty);
        self.user_id.is_none()
            && unset(&self.action_prefix)
            && self.action_in.is_empty()
            && self.resource.is_none()
            && self.result.is_none()
            && self.client_kind.is_none()
            && self.source.is_none()
            && self.correlation_id.is_none()
            && unset(&self.q)
    }
}

/// An audit row with its user's e-mail and name. Both fall back to the user id when the
/// user is gone, and are null only for rows without a user.
#[derive(Debug, Clone, serde::Serialize)]
pub struct AuditRow {
    /// The row.
    #[serde(flatten)]
    pub record: AuditRecord,
    /// Its client kind, or `system`.
    pub source: String,
    /// The acting user's e-mail (their id when the user no longer exists).
    pub user_email: Option<String>,
    /// The acting user's name (their e-mail, else their id, when there is none).
    pub user_name: Option<String>,
}

/// The WHERE clause of an audit filter.
pub(super) fn where_of(f: &AuditFilter) -> Where {
    let mut w = Where::new();
    for (clause, value) in [
        ("a.timestamp >= $?", &f.since),
        ("a.timestamp < $?", &f.until),
        ("a.user_id = $?", &f.user_id),
        ("a.resource = $?", &f.resource),
        ("a.client_kind = $?", &f.client_kind),
        ("a.correlation_id = $?", &f.correlation_id),
    ] {
        if let Some(v) = value {
            w.push(clause, v.clone());
        }
    }
    if let Some(prefix) = f.action_prefix.as_deref().filter(|p| !p.is_empty()) {
        w.push(
            "a.action LIKE $? ESCAPE '\\'",
            format!("{}%", like_literal(prefix)),
        );
    }
    if !f.action_in.is_empty() {
        w.push_in("a.action", &f.action_in);
    }
    match f.result {
        Some(ResultFilter::Success) => w.push_fixed("a.result = 'success'"),
        Some(ResultFilter::Error) => w.push_fixed(ERROR_ROWS),
        Some(ResultFilter::Status(s)) => w.push("a.result = $?", format!("error.{s}")),
        None => {}
    }
    match f.source.as_deref() {
        Some(SYSTEM_SOURCE) => w.push_fixed("a.client_kind IS NULL"),
        Some(kind) => w.push("a.client_kind = $?", kind.to_owned()),
        None => {}
    }
    if let Some(q) = f.q.as_deref().filter(|q| !q.is_empty()) {
        // Parameters are stored as JSON text: text as typed (`say "hi"`) is also looked
        // for as JSON writes it (`say \"hi\"`).
        let encoded = serde_json::to_string(q).unwrap_or_default();
        let encoded = &encoded[1..encoded.len() - 1];
        let mut texts = vec![q];
        if encoded != q {
            texts.push(encoded);
        }
        w.push_any(
            "a.params LIKE $? ESCAPE '\\'",
            texts.into_iter().map(|t| format!("%{}%", like_literal(t))),
        );
    }
    w
}

/// One page of the audit log.
#[derive(Debug, Clone, serde::Serialize)]
pub struct AuditPage {
    /// Newest first.
    pub rows: Vec<AuditRow>,
    /// The token for the next page; None on the last.
    pub next_cursor: Option<String>,
}

impl Store {
    /// Up to `limit` audit rows under `filter`, newest first, after `cursor`.
    pub async fn audit_page(
        &self,
        filter: &AuditFilter,
        cursor: Option<&AuditCursor>,
        limit: u32,
    ) -> Result<AuditPage, StoreError> {
        let columns: String = COLUMNS
            .split(", ")
            .map(|c| format!("a.{c}"))
            .collect::<Vec<_>>()
            .join(", ");
        let Where { mut sql, mut binds } = where_of(filter);
        sql.insert_str(
            0,
            &format!(
                "SELECT {columns}, u.email AS user_email, u.name AS user_name \
                 FROM audit_log a LEFT JOIN users u ON u.id = a.user_id"
            ),
        );
        if let Some(c) = cursor {
            binds.push(c.timestamp.clone());
            let ts = binds.len();
            binds.push(c.id.clone());
            let id = binds.len();
            // A range on the timestamp (which the indexes serve), then the tie on the id.
            sql.push_str(&format!(
                " AND a.timestamp <= ${ts} AND (a.timestamp < ${ts} OR a.id < ${id})"
            ));
        }
        sql.push_str(&format!(
            " ORDER BY a.timestamp DESC, a.id DESC LIMIT {}",
            u64::from(limit) + 1
        ));
        let mut query = sqlx::query(&sql);
        for b in &binds {
            query = query.bind(b);
        }
        let fetched = query.fetch_all(self.pool()).await?;
        let mut rows = fetched
            .iter()
            .map(|r| {
                let record = record(r)?;
                let email: Option<String> = r.try_get("user_email")?;
                let name: Option<String> = r.try_get("user_name")?;
                let user_email = email.or_else(|| record.user_id.clone());
                Ok(AuditRow {
                    source: record
                        .client_kind
                        .clone()
                        .unwrap_or_else(|| SYSTEM_SOURCE.to_owned()),
                    user_name: name.or_else(|| user_email.clone()),
                    user_email,
                    record,
                })
            })
            .collect::<Result<Vec<_>, sqlx::Error>>()?;
        let more = rows.len() > limit as usize;
        rows.truncate(limit as usize);
        let next_cursor = more.then(|| rows.last()).flatten().map(|r| {
            AuditCursor {
                timestamp: r.record.timestamp.clone(),
                id: r.record.id.clone(),
            }
            .token()
        });
        Ok(AuditPage { rows, next_cursor })
    }
}
