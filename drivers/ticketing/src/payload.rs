//! What a delivery says, read from its raw body: the Jira Cloud webhook shape, and the issue
//! shape of the REST search that backfill pages through.
//!
//! Custom fields are kept as the sender wrote them: their values are cut out of the raw body
//! by [`rawjson`] rather than parsed and re-printed, so nested objects survive byte for byte
//! (key order, number spelling, escapes).

use chrono::DateTime;
use serde_json::{Map, Value};

use crate::log::Origin;
use crate::rawjson;

/// The kinds of event svc folds into tables; every other kind is kept in the raw table only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `jira:issue_created`.
    IssueCreated,
    /// `jira:issue_updated`.
    IssueUpdated,
    /// `jira:issue_deleted`.
    IssueDeleted,
    /// `comment_created`.
    CommentCreated,
    /// `comment_updated`.
    CommentUpdated,
    /// `comment_deleted`.
    CommentDeleted,
    /// `worklog_*`: kept in the raw table.
    Worklog,
    /// `issuelink_*`: kept in the raw table.
    IssueLink,
    /// An issue fetched by backfill.
    Backfill,
    /// Anything else: kept in the raw table and counted.
    Unknown,
}

impl Kind {
    fn of(event: &str) -> Self {
        match event {
            "jira:issue_created" => Self::IssueCreated,
            "jira:issue_updated" => Self::IssueUpdated,
            "jira:issue_deleted" => Self::IssueDeleted,
            "comment_created" => Self::CommentCreated,
            "comment_updated" => Self::CommentUpdated,
            "comment_deleted" => Self::CommentDeleted,
            e if e.starts_with("worklog_") => Self::Worklog,
            e if e.starts_with("issuelink_") => Self::IssueLink,
            _ => Self::Unknown,
        }
    }

    /// Whether events of this kind must name an issue.
    fn needs_issue(self) -> bool {
        matches!(
            self,
            Self::IssueCreated
                | Self::IssueUpdated
                | Self::IssueDeleted
                | Self::CommentCreated
                | Self::CommentUpdated
                | Self::CommentDeleted
                | Self::Backfill
        )
    }
}

/// An issue's fields, as the tables keep them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Issue {
    /// `PROJ-12`.
    pub key: String,
    /// The tracker's numeric id, as text.
    pub id: Option<String>,
    /// Project key.
    pub project: Option<String>,
    /// Issue type name.
    pub issue_type: Option<String>,
    /// Status name.
    pub status: Option<String>,
    /// Priority name.
    pub priority: Option<String>,
    /// One-line summary.
    pub summary: Option<String>,
    /// Assignee's display name.
    pub assignee: Option<String>,
    /// Reporter's display name.
    pub reporter: Option<String>,
    /// Created, ms since the epoch.
    pub created_ms: Option<i64>,
    /// Last updated, ms since the epoch.
    pub updated_ms: Option<i64>,
    /// Resolution name.
    pub resolution: Option<String>,
    /// Labels.
    pub labels: Vec<String>,
    /// `{"customfield_…": <value as sent>, …}`, in the sender's order.
    pub custom_fields: String,
}

/// One changed field of one changelog entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangeItem {
    /// Field name.
    pub field: Option<String>,
    /// `jira` or `custom`.
    pub field_type: Option<String>,
    /// Old value (id).
    pub from: Option<String>,
    /// Old value, as shown.
    pub from_string: Option<String>,
    /// New value (id).
    pub to: Option<String>,
    /// New value, as shown.
    pub to_string: Option<String>,
}

/// One changelog entry (a webhook's `changelog`, or one of backfill's histories).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The entry's id (the tracker's order of changes).
    pub id: i64,
    /// When, ms since the epoch.
    pub created_ms: Option<i64>,
    /// Who, by display name.
    pub author: Option<String>,
    /// What changed.
    pub items: Vec<ChangeItem>,
}

/// A comment's current content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Comment {
    /// The tracker's comment id.
    pub id: String,
    /// Text (a rich-text document is kept as its JSON).
    pub body: Option<String>,
    /// Author's display name.
    pub author: Option<String>,
    /// Created, ms since the epoch.
    pub created_ms: Option<i64>,
    /// Updated, ms since the epoch.
    pub updated_ms: Option<i64>,
}

/// What one delivery says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    /// Its kind.
    pub kind: Kind,
    /// `webhookEvent` as sent (`svc:backfill` for backfill).
    pub event: String,
    /// The payload's own time (`timestamp`, or the issue's `updated` for backfill).
    pub timestamp_ms: Option<i64>,
    /// The issue, for issue and comment events.
    pub issue: Option<Issue>,
    /// Changelog entries.
    pub changes: Vec<Change>,
    /// The comment, for comment events (and backfill's comments).
    pub comments: Vec<Comment>,
}

impl Parsed {
    /// The issue's key, if any.
    pub fn issue_key(&self) -> Option<&str> {
        self.issue.as_ref().map(|i| i.key.as_str())
    }

    /// The issue's project, if any.
    pub fn project(&self) -> Option<&str> {
        self.issue.as_ref().and_then(|i| i.project.as_deref())
    }
}

/// Reads a delivery; the error says what is wrong with it.
pub fn parse(body: &[u8], origin: Origin) -> Result<Parsed, String> {
    let text = std::str::from_utf8(body).map_err(|_| "the body is not UTF-8 text".to_owned())?;
    let value: Value =
        serde_json::from_str(text).map_err(|e| format!("the body is not JSON: {e}"))?;
    let Value::Object(top) = &value else {
        return Err("the body must be a JSON object".into());
    };
    match origin {
        Origin::Webhook => parse_webhook(text, top),
        Origin::Backfill => parse_backfill(text, top),
    }
}

fn parse_webhook(text: &str, top: &Map<String, Value>) -> Result<Parsed, String> {
    let event = str_at(top, "webhookEvent").unwrap_or_default();
    let kind = Kind::of(&event);
    let issue = match top.get("issue") {
        Some(Value::Object(issue)) => {
            let raw_fields =
                rawjson::member(text, "issue").and_then(|i| rawjson::member(i, "fields"));
            Some(read_issue(issue, raw_fields)?)
        }
        _ => None,
    };
    if kind.needs_issue() && issue.is_none() {
        return Err(format!("a {event} event must carry issue.key"));
    }
    let timestamp_ms = top.get("timestamp").and_then(Value::as_i64);
    let author = top
        .get("user")
        .and_then(|u| str_at(u.as_object()?, "displayName"));
    let changes = match top.get("changelog") {
        Some(Value::Object(c)) => read_change(c, timestamp_ms, author).into_iter().collect(),
        _ => Vec::new(),
    };
    let comments = match top.get("comment") {
        Some(Value::Object(c)) => read_comment(c).into_iter().collect(),
        _ => Vec::new(),
    };
    if matches!(
        kind,
        Kind::CommentCreated | Kind::CommentUpdated | Kind::CommentDeleted
    ) && comments.is_empty()
    {
        return Err(format!("a {event} event must carry comment.id"));
    }
    Ok(Parsed {
        kind,
        event,
        timestamp_ms,
        issue,
        changes,
        comments,
    })
}

fn parse_backfill(text: &str, issue: &Map<String, Value>) -> Result<Parsed, String> {
    let raw_fields = rawjson::member(text, "fields");
    let read = read_issue(issue, raw_fields)?;
    let histories = issue
        .get("changelog")
        .and_then(|c| c.get("histories"))
        .and_then(Value::as_array);
    let changes = histories
        .into_iter()
        .flatten()
        .filter_map(|h| {
            let h = h.as_object()?;
            let created = str_at(h, "created").and_then(|t| parse_time(&t));
            let author = h
                .get("author")
                .and_then(|a| str_at(a.as_object()?, "displayName"));
            read_change(h, created, author)
        })
        .collect();
    let comments = issue
        .get("fields")
        .and_then(|f| f.get("comment"))
        .and_then(|c| c.get("comments"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| read_comment(c.as_object()?))
        .collect();
    Ok(Parsed {
        kind: Kind::Backfill,
        event: "svc:backfill".into(),
        timestamp_ms: read.updated_ms,
        issue: Some(read),
        changes,
        comments,
    })
}

/// A text member; numbers are taken as their text (ids arrive either way).
fn str_at(o: &Map<String, Value>, key: &str) -> Option<String> {
    match o.get(key)? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// `name` (or `displayName`, `key`) of a nested object, as Jira names things.
fn name_of(fields: &Map<String, Value>, key: &str, member: &str) -> Option<String> {
    str_at(fields.get(key)?.as_object()?, member)
}

/// Jira's `2024-01-31T10:00:00.000+0000`, or RFC 3339.
pub fn parse_time(text: &str) -> Option<i64> {
    DateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f%z")
        .or_else(|_| DateTime::parse_from_rfc3339(text))
        .ok()
        .map(|t| t.timestamp_millis())
}

fn read_issue(issue: &Map<String, Value>, raw_fields: Option<&str>) -> Result<Issue, String> {
    let key = str_at(issue, "key")
        .filter(|k| !k.trim().is_empty())
        .ok_or("the payload is missing issue.key")?;
    let empty = Map::new();
    let fields = issue
        .get("fields")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let time = |k: &str| str_at(fields, k).and_then(|t| parse_time(&t));
    let mut custom = String::from("{");
    for (name, raw) in raw_fields.map(rawjson::members).unwrap_or_default() {
        if name.starts_with("customfield_") {
            if custom.len() > 1 {
                custom.push(',');
            }
            custom.push_str(&serde_json::to_string(&name).unwrap_or_default());
            custom.push(':');
            custom.push_str(raw);
        }
    }
    custom.push('}');
    Ok(Issue {
        project: name_of(fields, "project", "key")
            .or_else(|| key.rsplit_once('-').map(|(p, _)| p.to_owned())),
        key,
        id: str_at(issue, "id"),
        issue_type: name_of(fields, "issuetype", "name"),
        status: name_of(fields, "status", "name"),
        priority: name_of(fields, "priority", "name"),
        summary: str_at(fields, "summary"),
        assignee: name_of(fields, "assignee", "displayName"),
        reporter: name_of(fields, "reporter", "displayName"),
        created_ms: time("created"),
        updated_ms: time("updated"),
        resolution: name_of(fields, "resolution", "name"),
        labels: fields
            .get("labels")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|l| l.as_str().map(str::to_owned))
            .collect(),
        custom_fields: custom,
    })
}

fn read_change(
    c: &Map<String, Value>,
    created_ms: Option<i64>,
    author: Option<String>,
) -> Option<Change> {
    let id = match c.get("id")? {
        Value::String(s) => s.parse().ok()?,
        Value::Number(n) => n.as_i64()?,
        _ => return None,
    };
    let items = c
        .get("items")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|i| {
            let i = i.as_object()?;
            Some(ChangeItem {
                field: str_at(i, "field"),
                field_type: str_at(i, "fieldtype"),
                from: str_at(i, "from"),
                from_string: str_at(i, "fromString"),
                to: str_at(i, "to"),
                to_string: str_at(i, "toString"),
            })
        })
        .collect();
    Some(Change {
        id,
        created_ms,
        author,
        items,
    })
}

fn read_comment(c: &Map<String, Value>) -> Option<Comment> {
    Some(Comment {
        id: str_at(c, "id")?,
        body: match c.get("body") {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Null) | None => None,
            Some(doc) => Some(doc.to_string()),
        },
        author: c
            .get("author")
            .and_then(|a| str_at(a.as_object()?, "displayName")),
        created_ms: str_at(c, "created").and_then(|t| parse_time(&t)),
        updated_ms: str_at(c, "updated").and_then(|t| parse_time(&t)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_webhook_is_read_and_custom_fields_keep_their_bytes() {
        let body = r#"{"timestamp":1700000000123,"webhookEvent":"jira:issue_updated",
            "user":{"displayName":"Ann"},
            "issue":{"id":"10001","key":"OPS-7","fields":{
              "summary":"Disk full","issuetype":{"name":"Bug"},"project":{"key":"OPS"},
              "status":{"name":"Open"},"priority":null,"labels":["a","b"],
              "created":"2023-11-14T22:13:20.000+0000",
              "customfield_10010":{"z":1,"a":[1.50,{"k":"\u00e9"}]},
              "customfield_2":null}},
            "changelog":{"id":"555","items":[{"field":"status","fieldtype":"jira",
              "from":"1","fromString":"Open","to":"3","toString":"In Progress"}]}}"#;
        let p = parse(body.as_bytes(), Origin::Webhook).unwrap();
        assert_eq!(p.kind, Kind::IssueUpdated);
        let issue = p.issue.unwrap();
        assert_eq!(issue.key, "OPS-7");
        assert_eq!(issue.project.as_deref(), Some("OPS"));
        assert_eq!(issue.priority, None);
        assert_eq!(issue.created_ms, Some(1_700_000_000_000));
        assert_eq!(
            issue.custom_fields,
            r#"{"customfield_10010":{"z":1,"a":[1.50,{"k":"\u00e9"}]},"customfield_2":null}"#
        );
        assert_eq!(p.changes[0].id, 555);
        assert_eq!(p.changes[0].author.as_deref(), Some("Ann"));
        assert_eq!(
            p.changes[0].items[0].to_string.as_deref(),
            Some("In Progress")
        );
    }

    #[test]
    fn bad_bodies_are_named() {
        let err = |b: &str| parse(b.as_bytes(), Origin::Webhook).unwrap_err();
        assert!(err("not json").contains("not JSON"));
        assert!(err("[1,2]").contains("JSON object"));
        assert!(
            err(r#"{"webhookEvent":"jira:issue_created","issue":{"id":"1"}}"#)
                .contains("issue.key")
        );
        assert!(
            err(r#"{"webhookEvent":"comment_created","issue":{"key":"A-1"}}"#)
                .contains("comment.id")
        );
        // Unknown kinds and link events need no issue.
        let p = parse(br#"{"webhookEvent":"sprint_started"}"#, Origin::Webhook).unwrap();
        assert_eq!(p.kind, Kind::Unknown);
        let p = parse(
            br#"{"webhookEvent":"issuelink_created","issueLink":{}}"#,
            Origin::Webhook,
        )
        .unwrap();
        assert_eq!(p.kind, Kind::IssueLink);
    }
}
