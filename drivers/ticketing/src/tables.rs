//! The four tables of a connection as Arrow: their schemas, rows to batches, and the state
//! read back from them at start.

use std::fs::File;
use std::path::Path;
use std::sync::{Arc, LazyLock};

use svc_plugin_api::arrow::array::{
    Array, ArrayRef, AsArray, Int32Array, Int64Array, ListBuilder, StringArray, StringBuilder,
    TimestampMillisecondArray,
};
use svc_plugin_api::arrow::datatypes::{
    DataType, Field, Int32Type, Int64Type, Schema, SchemaRef, TimeUnit, TimestampMillisecondType,
};
use svc_plugin_api::datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use svc_plugin_api::{DriverError, RecordBatch, Result};

use crate::fold::{ChangelogRow, CommentRow, CommentState, EventRow, IssueState, State, Version};
use crate::payload::{Comment, Issue};

/// The tables each connection keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableKind {
    /// One row per issue, current state.
    Issues,
    /// One row per changed field.
    Changelog,
    /// One row per comment, current state.
    Comments,
    /// Every accepted delivery, raw.
    Events,
}

impl TableKind {
    /// All four, in the order a compaction commits them (issues last, so a reader never
    /// sees an issue whose history is not there yet).
    pub const ALL: [Self; 4] = [Self::Events, Self::Changelog, Self::Comments, Self::Issues];

    /// The suffix of its table id (`<connection>_<suffix>`).
    pub fn suffix(self) -> &'static str {
        match self {
            Self::Issues => "issues",
            Self::Changelog => "issue_changelog",
            Self::Comments => "comments",
            Self::Events => "events",
        }
    }

    /// The catalog's description of it.
    pub fn description(self) -> &'static str {
        match self {
            Self::Issues => "Issues, current state: one row per issue (custom fields as JSON)",
            Self::Changelog => "Issue history: one row per changed field",
            Self::Comments => "Comments, current state",
            Self::Events => "Every webhook delivery and backfilled issue, as received",
        }
    }

    /// The table's schema.
    pub fn schema(self) -> SchemaRef {
        match self {
            Self::Issues => ISSUES.clone(),
            Self::Changelog => CHANGELOG.clone(),
            Self::Comments => COMMENTS.clone(),
            Self::Events => EVENTS.clone(),
        }
    }
}

fn text(name: &str) -> Field {
    Field::new(name, DataType::Utf8, true)
}

fn time(name: &str) -> Field {
    Field::new(
        name,
        DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
        true,
    )
}

static ISSUES: LazyLock<SchemaRef> = LazyLock::new(|| {
    Arc::new(Schema::new(vec![
        Field::new("key", DataType::Utf8, false),
        text("id"),
        text("project"),
        text("issue_type"),
        text("status"),
        text("priority"),
        text("summary"),
        text("assignee"),
        text("reporter"),
        time("created"),
        time("updated"),
        text("resolution"),
        Field::new(
            "labels",
            DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))),
            true,
        ),
        text("custom_fields"),
        time("event_at"),
        Field::new("changelog_id", DataType::Int64, false),
        Field::new("delivery_id", DataType::Utf8, false),
    ]))
});

static COMMENTS: LazyLock<SchemaRef> = LazyLock::new(|| {
    Arc::new(Schema::new(vec![
        Field::new("comment_id", DataType::Utf8, false),
        Field::new("issue_key", DataType::Utf8, false),
        text("issue_id"),
        text("author"),
        text("body"),
        time("created"),
        time("updated"),
        time("event_at"),
        Field::new("delivery_id", DataType::Utf8, false),
    ]))
});

static CHANGELOG: LazyLock<SchemaRef> = LazyLock::new(|| {
    Arc::new(Schema::new(vec![
        Field::new("issue_key", DataType::Utf8, false),
        text("issue_id"),
        Field::new("changelog_id", DataType::Int64, false),
        Field::new("item_index", DataType::Int32, false),
        time("created"),
        text("author"),
        text("field"),
        text("field_type"),
        text("from_value"),
        text("from_string"),
        text("to_value"),
        text("to_string"),
    ]))
});

static EVENTS: LazyLock<SchemaRef> = LazyLock::new(|| {
    Arc::new(Schema::new(vec![
        Field::new("delivery_id", DataType::Utf8, false),
        time("received_at"),
        time("event_at"),
        text("webhook_event"),
        text("origin"),
        text("issue_key"),
        text("flags"),
        text("body"),
    ]))
});

fn strings<'a>(values: impl Iterator<Item = Option<&'a str>>) -> ArrayRef {
    Arc::new(StringArray::from_iter(values))
}

fn times(values: impl Iterator<Item = Option<i64>>) -> ArrayRef {
    Arc::new(TimestampMillisecondArray::from_iter(values).with_timezone("UTC"))
}

fn batch(kind: TableKind, columns: Vec<ArrayRef>) -> Result<RecordBatch> {
    RecordBatch::try_new(kind.schema(), columns)
        .map_err(|e| DriverError::internal(format!("{} rows: {e}", kind.suffix())))
}

/// The issues table's rows.
pub fn issues_batch(rows: &[(&Version, &Issue)]) -> Result<RecordBatch> {
    let s = |f: fn(&Issue) -> Option<&str>| strings(rows.iter().map(|(_, i)| f(i)));
    let mut labels = ListBuilder::new(StringBuilder::new());
    for (_, issue) in rows {
        for l in &issue.labels {
            labels.values().append_value(l);
        }
        labels.append(true);
    }
    batch(
        TableKind::Issues,
        vec![
            s(|i| Some(&i.key)),
            s(|i| i.id.as_deref()),
            s(|i| i.project.as_deref()),
            s(|i| i.issue_type.as_deref()),
            s(|i| i.status.as_deref()),
            s(|i| i.priority.as_deref()),
            s(|i| i.summary.as_deref()),
            s(|i| i.assignee.as_deref()),
            s(|i| i.reporter.as_deref()),
            times(rows.iter().map(|(_, i)| i.created_ms)),
            times(rows.iter().map(|(_, i)| i.updated_ms)),
            s(|i| i.resolution.as_deref()),
            Arc::new(labels.finish()),
            s(|i| Some(&i.custom_fields)),
            times(rows.iter().map(|(v, _)| Some(v.at_ms))),
            Arc::new(Int64Array::from_iter_values(
                rows.iter().map(|(v, _)| v.changelog_id),
            )),
            strings(rows.iter().map(|(v, _)| Some(v.delivery_id.as_str()))),
        ],
    )
}

/// The comments table's rows.
pub fn comments_batch(rows: &[(&Version, &CommentRow)]) -> Result<RecordBatch> {
    let s = |f: fn(&CommentRow) -> Option<&str>| strings(rows.iter().map(|(_, c)| f(c)));
    batch(
        TableKind::Comments,
        vec![
            s(|c| Some(&c.comment.id)),
            s(|c| Some(&c.issue_key)),
            s(|c| c.issue_id.as_deref()),
            s(|c| c.comment.author.as_deref()),
            s(|c| c.comment.body.as_deref()),
            times(rows.iter().map(|(_, c)| c.comment.created_ms)),
            times(rows.iter().map(|(_, c)| c.comment.updated_ms)),
            times(rows.iter().map(|(v, _)| Some(v.at_ms))),
            strings(rows.iter().map(|(v, _)| Some(v.delivery_id.as_str()))),
        ],
    )
}

/// Changelog rows.
pub fn changelog_batch(rows: &[ChangelogRow]) -> Result<RecordBatch> {
    let s = |f: fn(&ChangelogRow) -> Option<&str>| strings(rows.iter().map(f));
    batch(
        TableKind::Changelog,
        vec![
            s(|r| Some(&r.issue_key)),
            s(|r| r.issue_id.as_deref()),
            Arc::new(Int64Array::from_iter_values(
                rows.iter().map(|r| r.changelog_id),
            )),
            Arc::new(Int32Array::from_iter_values(
                rows.iter().map(|r| r.item_index),
            )),
            times(rows.iter().map(|r| r.created_ms)),
            s(|r| r.author.as_deref()),
            s(|r| r.item.field.as_deref()),
            s(|r| r.item.field_type.as_deref()),
            s(|r| r.item.from.as_deref()),
            s(|r| r.item.from_string.as_deref()),
            s(|r| r.item.to.as_deref()),
            s(|r| r.item.to_string.as_deref()),
        ],
    )
}

/// Raw event rows.
pub fn events_batch(rows: &[EventRow]) -> Result<RecordBatch> {
    let s = |f: fn(&EventRow) -> Option<&str>| strings(rows.iter().map(f));
    batch(
        TableKind::Events,
        vec![
            s(|r| Some(&r.delivery_id)),
            times(rows.iter().map(|r| Some(r.received_at_ms))),
            times(rows.iter().map(|r| r.event_at_ms)),
            s(|r| Some(&r.event)),
            s(|r| Some(r.origin)),
            s(|r| r.issue_key.as_deref()),
            s(|r| r.flags.as_deref()),
            s(|r| Some(&r.body)),
        ],
    )
}

/// Reads at most `limit` rows of a table file in batches (all of them when `limit` is None);
/// a missing file has none.
pub fn read_rows(
    path: &Path,
    limit: Option<u64>,
    mut each: impl FnMut(RecordBatch) -> Result<()>,
) -> Result<()> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(DriverError::internal(format!("{}: {e}", path.display()))),
    };
    let unreadable = |e: &dyn std::fmt::Display| {
        DriverError::internal(format!("{} is not readable parquet: {e}", path.display()))
    };
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(|e| unreadable(&e))?
        .with_batch_size(8_192)
        .build()
        .map_err(|e| unreadable(&e))?;
    let mut left = limit.unwrap_or(u64::MAX);
    for batch in reader {
        if left == 0 {
            break;
        }
        let batch = batch.map_err(|e| unreadable(&e))?;
        let take = (batch.num_rows() as u64).min(left) as usize;
        left -= take as u64;
        each(batch.slice(0, take))?;
    }
    Ok(())
}

fn column<'a>(batch: &'a RecordBatch, name: &str) -> Result<&'a ArrayRef> {
    batch
        .column_by_name(name)
        .ok_or_else(|| DriverError::internal(format!("a ticketing table lacks column {name}")))
}

fn text_at(batch: &RecordBatch, name: &str) -> Result<Vec<Option<String>>> {
    let col = column(batch, name)?
        .as_string_opt::<i32>()
        .ok_or_else(|| DriverError::internal(format!("column {name} is not text")))?;
    Ok(col.iter().map(|v| v.map(str::to_owned)).collect())
}

fn time_at(batch: &RecordBatch, name: &str) -> Result<Vec<Option<i64>>> {
    let col = column(batch, name)?
        .as_primitive_opt::<TimestampMillisecondType>()
        .ok_or_else(|| DriverError::internal(format!("column {name} is not a timestamp")))?;
    Ok(col.iter().collect())
}

fn int_at(batch: &RecordBatch, name: &str) -> Result<Vec<i64>> {
    let col = column(batch, name)?;
    if let Some(c) = col.as_primitive_opt::<Int64Type>() {
        return Ok(c.iter().map(Option::unwrap_or_default).collect());
    }
    let c = col
        .as_primitive_opt::<Int32Type>()
        .ok_or_else(|| DriverError::internal(format!("column {name} is not an integer")))?;
    Ok(c.iter().map(|v| i64::from(v.unwrap_or_default())).collect())
}

/// Issues read back from the issues table into `state`.
pub fn load_issues(path: &Path, state: &mut State) -> Result<()> {
    read_rows(path, None, |b| {
        let [key, id, project, issue_type, status, priority, summary, assignee, reporter, resolution, custom, delivery] =
            [
                "key",
                "id",
                "project",
                "issue_type",
                "status",
                "priority",
                "summary",
                "assignee",
                "reporter",
                "resolution",
                "custom_fields",
                "delivery_id",
            ]
            .map(|n| text_at(&b, n));
        let (created, updated, event_at) = (
            time_at(&b, "created")?,
            time_at(&b, "updated")?,
            time_at(&b, "event_at")?,
        );
        let changelog_id = int_at(&b, "changelog_id")?;
        let labels = column(&b, "labels")?
            .as_list_opt::<i32>()
            .ok_or_else(|| DriverError::internal("column labels is not a list".to_owned()))?;
        let (key, delivery) = (key?, delivery?);
        let mut fields = [
            id?,
            project?,
            issue_type?,
            status?,
            priority?,
            summary?,
            assignee?,
            reporter?,
            resolution?,
            custom?,
        ]
        .map(Vec::into_iter);
        for row in 0..b.num_rows() {
            let [id, project, issue_type, status, priority, summary, assignee, reporter, resolution, custom] =
                fields.each_mut().map(|f| f.next().flatten());
            let labels = if labels.is_null(row) {
                Vec::new()
            } else {
                let values = labels.value(row);
                values
                    .as_string::<i32>()
                    .iter()
                    .flatten()
                    .map(str::to_owned)
                    .collect()
            };
            let key = key[row].clone().unwrap_or_default();
            let version = Version {
                at_ms: event_at[row].unwrap_or_default(),
                changelog_id: changelog_id[row],
                delivery_id: delivery[row].clone().unwrap_or_default(),
            };
            let issue = Issue {
                key: key.clone(),
                id,
                project,
                issue_type,
                status,
                priority,
                summary,
                assignee,
                reporter,
                created_ms: created[row],
                updated_ms: updated[row],
                resolution,
                labels,
                custom_fields: custom.unwrap_or_else(|| "{}".into()),
            };
            state.issues.insert(
                key,
                IssueState {
                    version,
                    issue: Some(issue),
                },
            );
        }
        Ok(())
    })
}

/// Comments read back from the comments table into `state`.
pub fn load_comments(path: &Path, state: &mut State) -> Result<()> {
    read_rows(path, None, |b| {
        let [id, key, issue_id, author, body, delivery] = [
            "comment_id",
            "issue_key",
            "issue_id",
            "author",
            "body",
            "delivery_id",
        ]
        .map(|n| text_at(&b, n));
        let (id, key, issue_id, author, body, delivery) =
            (id?, key?, issue_id?, author?, body?, delivery?);
        let (created, updated, event_at) = (
            time_at(&b, "created")?,
            time_at(&b, "updated")?,
            time_at(&b, "event_at")?,
        );
        for row in 0..b.num_rows() {
            let comment_id = id[row].clone().unwrap_or_default();
            state.comments.insert(
                comment_id.clone(),
                CommentState {
                    version: Version {
                        at_ms: event_at[row].unwrap_or_default(),
                        changelog_id: 0,
                        delivery_id: delivery[row].clone().unwrap_or_default(),
                    },
                    row: Some(CommentRow {
                        issue_key: key[row].clone().unwrap_or_default(),
                        issue_id: issue_id[row].clone(),
                        comment: Comment {
                            id: comment_id,
                            body: body[row].clone(),
                            author: author[row].clone(),
                            created_ms: created[row],
                            updated_ms: updated[row],
                        },
                    }),
                },
            );
        }
        Ok(())
    })
}

/// The (changelog id, item) pairs of the first `rows` changelog rows.
pub fn load_changes_seen(path: &Path, rows: u64, state: &mut State) -> Result<()> {
    read_rows(path, Some(rows), |b| {
        let ids = int_at(&b, "changelog_id")?;
        let items = int_at(&b, "item_index")?;
        for (id, item) in ids.into_iter().zip(items) {
            state
                .changes_seen
                .insert((id, i32::try_from(item).unwrap_or(i32::MAX)));
        }
        Ok(())
    })
}

/// The delivery ids of the first `rows` events.
pub fn load_delivery_ids(path: &Path, rows: u64, mut each: impl FnMut(&str)) -> Result<()> {
    read_rows(path, Some(rows), |b| {
        let ids = column(&b, "delivery_id")?
            .as_string_opt::<i32>()
            .ok_or_else(|| DriverError::internal("delivery_id is not text".to_owned()))?;
        for id in ids.iter().flatten() {
            each(id);
        }
        Ok(())
    })
}
