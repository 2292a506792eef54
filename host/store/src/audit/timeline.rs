//! Reading the audit log back: newest first, a page at a time, by keyset.
//!
//! A keyset cursor (the last row's timestamp and id) instead of an offset, so a page costs
//! the same however deep it is and rows written meanwhile never shift one page's rows onto
//! the next.

use sqlx::Row;

use super::rows::{record, COLUMNS};
use super::AuditRecord;
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

/// Which audit rows a page holds.
#[derive(Debug, Clone, Default)]
pub struct AuditFilter {
    /// Rows of this user only.
    pub user_id: Option<String>,
}

/// An audit row with its user's e-mail and name (None when the user is gone).
#[derive(Debug, Clone, serde::Serialize)]
pub struct AuditRow {
    /// The row.
    #[serde(flatten)]
    pub record: AuditRecord,
    /// The acting user's e-mail.
    pub user_email: Option<String>,
    /// The acting user's name.
    pub user_name: Option<String>,
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
        let mut sql = format!(
            "SELECT {columns}, u.email AS user_email, u.name AS user_name \
             FROM audit_log a LEFT JOIN users u ON u.id = a.user_id WHERE 1 = 1"
        );
        let mut binds: Vec<String> = Vec::new();
        if let Some(user) = &filter.user_id {
            binds.push(user.clone());
            sql.push_str(&format!(" AND a.user_id = ${}", binds.len()));
        }
        if let Some(c) = cursor {
            binds.push(c.timestamp.clone());
            let ts = binds.len();
            binds.push(c.id.clone());
            let id = binds.len();
            sql.push_str(&format!(
                " AND (a.timestamp < ${ts} OR (a.timestamp = ${ts} AND a.id < ${id}))"
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
                Ok(AuditRow {
                    record: record(r)?,
                    user_email: r.try_get("user_email")?,
                    user_name: r.try_get("user_name")?,
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
