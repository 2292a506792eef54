//! An incremental sync's changes merged into the existing copy, row group by row group.
//!
//! A fetched row whose key is in the copy takes the old row's place; the others are appended
//! in row groups of their own. A row group holding no changed key is copied into the new copy
//! as its bytes stand, and in a row group that holds some, only the columns whose values
//! changed are encoded again: the rest keep their old column chunks. A change to a few
//! columns of 1 % of a large copy's rows then costs a read of the copy and the encoding of
//! those columns, where rewriting the copy cost a full sync's encoding.

use std::collections::HashMap;
use std::fs::File;

use svc_driver_parquet::{AtomicParquet, OldFile};
use svc_plugin_api::arrow::array::{Array, ArrayRef, BooleanArray, UInt32Array};
use svc_plugin_api::arrow::compute::{
    concat_batches, filter, filter_record_batch, interleave, take,
};
use svc_plugin_api::arrow::datatypes::SchemaRef;
use svc_plugin_api::arrow::record_batch::RecordBatchReader as _;
use svc_plugin_api::arrow::row::{RowConverter, Rows, SortField};
use svc_plugin_api::datafusion::parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ParquetRecordBatchReaderBuilder,
};
use svc_plugin_api::datafusion::parquet::arrow::ProjectionMask;
use svc_plugin_api::{DriverError, RecordBatch, Result, SyncReport};

use crate::extract::{corrupt, open, Target, IN_FLIGHT};

/// A new copy: the old one with each changed key's row replaced by its last fetched version
/// (in place), then the fetched rows whose keys are new. Without a key, the old rows and all
/// the fetched ones.
///
/// The old copy is read and each row group planned on a thread of its own while this one
/// writes: on a large copy both take seconds, and they overlap.
pub(crate) fn merge(
    target: &Target,
    schema: SchemaRef,
    changes: &[RecordBatch],
    key_columns: &[usize],
) -> Result<SyncReport> {
    let path = &target.path;
    let old = OldFile::open(path).map_err(|e| corrupt(path, e))?;
    let mut writer = AtomicParquet::with_row_groups(path, schema.clone(), target.row_group_rows)?;
    // A copy written with another parquet schema is encoded again whole.
    let splice = writer.can_splice(&old);
    let mut keys = (!key_columns.is_empty())
        .then(|| ChangedKeys::new(&schema, key_columns, changes))
        .transpose()?;
    let groups = old.metadata().metadata().num_row_groups();
    let mut tally = Tally::default();
    std::thread::scope(|scope| -> Result<()> {
        let (tx, rx) = std::sync::mpsc::sync_channel::<(usize, Vec<Option<ArrayRef>>)>(IN_FLIGHT);
        let (metadata, keys, schema) = (old.metadata(), keys.as_mut(), &schema);
        let planning = scope.spawn(move || -> Result<()> {
            // A file of its own: a shared handle would share the read position with the
            // writer's copying of old chunks.
            let file = open(path)?;
            let mut plan = Planner {
                file: &file,
                metadata,
                schema,
                changes,
                keys,
                splice,
            };
            for group in 0..groups {
                let columns = plan.group(group).map_err(|e| corrupt(path, e))?;
                if tx.send((group, columns)).is_err() {
                    // The writer failed; its error is the one reported.
                    break;
                }
            }
            Ok(())
        });
        let mut written = Ok(());
        for (group, columns) in rx.iter() {
            tally.count(&columns);
            written = writer.splice_row_group(&old, group, &columns);
            if written.is_err() {
                break;
            }
        }
        // A planner still sending stops once the receiver is gone.
        drop(rx);
        let planned = planning
            .join()
            .map_err(|_| DriverError::internal("planning the merge panicked"))?;
        written.and(planned)
    })?;
    let fresh: Vec<RecordBatch> = changes
        .iter()
        .enumerate()
        .map(|(b, batch)| match &keys {
            Some(keys) => filter_record_batch(batch, &keys.fresh(b, batch)?)
                .map_err(|e| DriverError::internal(e.to_string())),
            None => Ok(batch.clone()),
        })
        .collect::<Result<_>>()?;
    let fresh =
        concat_batches(&schema, &fresh).map_err(|e| DriverError::internal(e.to_string()))?;
    tally.added = fresh.num_rows();
    if fresh.num_rows() > 0 {
        writer.write(&fresh)?;
    }
    let mut report = writer.commit()?;
    report.notes.push(tally.note(groups));
    Ok(report)
}

/// What a merge did, for the sync's notes.
#[derive(Debug, Default)]
struct Tally {
    copied_groups: usize,
    encoded_chunks: usize,
    chunks: usize,
    added: usize,
}

impl Tally {
    fn count(&mut self, columns: &[Option<ArrayRef>]) {
        let encoded = columns.iter().filter(|c| c.is_some()).count();
        self.copied_groups += usize::from(encoded == 0);
        self.encoded_chunks += encoded;
        self.chunks += columns.len();
    }

    fn note(&self, groups: usize) -> String {
        format!(
            "merge: {} of {groups} row groups copied as they were, {} of {} column chunks \
             encoded again, {} rows added",
            self.copied_groups, self.encoded_chunks, self.chunks, self.added
        )
    }
}

/// Works out each old row group's columns in the new copy.
struct Planner<'a> {
    file: &'a File,
    metadata: &'a ArrowReaderMetadata,
    schema: &'a SchemaRef,
    changes: &'a [RecordBatch],
    keys: Option<&'a mut ChangedKeys>,
    splice: bool,
}

/// Where a changed key's row lands in a row group.
struct Hit {
    /// The old row it replaces.
    row: usize,
    /// Its fetched version: batch and row in the changes.
    at: (usize, usize),
}

impl Planner<'_> {
    /// Row group `group`'s columns: `None` where the old column chunk stays as it is.
    fn group(&mut self, group: usize) -> std::result::Result<Vec<Option<ArrayRef>>, String> {
        let width = self.schema.fields().len();
        let (mut hits, mut removed) = (Vec::new(), Vec::new());
        if let Some(columns) = self.keys.as_ref().map(|k| k.columns.clone()) {
            let projection = ProjectionMask::roots(
                self.metadata.metadata().file_metadata().schema_descr(),
                columns.iter().copied(),
            );
            let read = self.read(group, projection)?;
            // The projection keeps the file's column order: the keys are found by name.
            let arrays = columns
                .iter()
                .map(|&i| {
                    read.column_by_name(self.schema.field(i).name())
                        .cloned()
                        .ok_or_else(|| format!("no key column {}", self.schema.field(i).name()))
                })
                .collect::<std::result::Result<Vec<_>, _>>()?;
            let keys = self.keys.as_deref_mut().expect("checked above");
            let rows = keys
                .converter
                .convert_columns(&arrays)
                .map_err(|e| e.to_string())?;
            keys.place(&rows, &mut hits, &mut removed);
        }
        if hits.is_empty() && removed.is_empty() && self.splice {
            return Ok(vec![None; width]);
        }
        let old = self.read(group, ProjectionMask::all())?;
        let keep = (!removed.is_empty()).then(|| {
            let mut keep = vec![true; old.num_rows()];
            for &row in &removed {
                keep[row] = false;
            }
            BooleanArray::from(keep)
        });
        let hit_rows = UInt32Array::from_iter_values(hits.iter().map(|h| h.row as u32));
        let hit_at: Vec<(usize, usize)> = hits.iter().map(|h| h.at).collect();
        // Each row's source for a rebuilt column: the old column (0) or a fetched batch.
        let mut from: Vec<(usize, usize)> = (0..old.num_rows()).map(|r| (0, r)).collect();
        for hit in &hits {
            from[hit.row] = (1 + hit.at.0, hit.at.1);
        }
        (0..width)
            .map(|c| {
                let column = old.column(c);
                let fetched: Vec<&dyn Array> =
                    self.changes.iter().map(|b| b.column(c).as_ref()).collect();
                if keep.is_none() && self.splice {
                    let before =
                        take(column.as_ref(), &hit_rows, None).map_err(|e| e.to_string())?;
                    let after = interleave(&fetched, &hit_at).map_err(|e| e.to_string())?;
                    if before.to_data() == after.to_data() {
                        return Ok(None);
                    }
                }
                let sources: Vec<&dyn Array> =
                    std::iter::once(column.as_ref()).chain(fetched).collect();
                let rebuilt = interleave(&sources, &from).map_err(|e| e.to_string())?;
                Ok(Some(match &keep {
                    Some(keep) => filter(rebuilt.as_ref(), keep).map_err(|e| e.to_string())?,
                    None => rebuilt,
                }))
            })
            .collect()
    }

    /// Row group `group`'s `projection`, as one batch.
    fn read(
        &self,
        group: usize,
        projection: ProjectionMask,
    ) -> std::result::Result<RecordBatch, String> {
        let rows = self.metadata.metadata().row_group(group).num_rows();
        let file = self.file.try_clone().map_err(|e| e.to_string())?;
        let reader =
            ParquetRecordBatchReaderBuilder::new_with_metadata(file, self.metadata.clone())
                .with_row_groups(vec![group])
                .with_projection(projection)
                .with_batch_size(usize::try_from(rows).unwrap_or(0).max(1))
                .build()
                .map_err(|e| e.to_string())?;
        let schema = reader.schema();
        let batches = reader
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| e.to_string())?;
        concat_batches(&schema, &batches).map_err(|e| e.to_string())
    }
}

/// Changed rows' keys, as bytes that compare equal when the keys do, each with where its
/// last fetched row is (changes arrive in cursor order, so the last one wins) and whether
/// it has taken an old row's place yet.
struct ChangedKeys {
    converter: RowConverter,
    /// The key's columns, as indices into the schema.
    columns: Vec<usize>,
    latest: HashMap<Vec<u8>, Latest>,
}

struct Latest {
    at: (usize, usize),
    placed: bool,
}

impl ChangedKeys {
    fn new(schema: &SchemaRef, columns: &[usize], changes: &[RecordBatch]) -> Result<Self> {
        let converter = RowConverter::new(
            columns
                .iter()
                .map(|&i| SortField::new(schema.field(i).data_type().clone()))
                .collect(),
        )
        .map_err(|e| DriverError::internal(format!("cannot compare keys: {e}")))?;
        let mut keys = Self {
            converter,
            columns: columns.to_vec(),
            latest: HashMap::new(),
        };
        for (b, batch) in changes.iter().enumerate() {
            let rows = keys.rows(batch)?;
            for (r, key) in rows.iter().enumerate() {
                let latest = Latest {
                    at: (b, r),
                    placed: false,
                };
                keys.latest.insert(key.as_ref().to_vec(), latest);
            }
        }
        Ok(keys)
    }

    fn rows(&self, batch: &RecordBatch) -> Result<Rows> {
        let arrays: Vec<ArrayRef> = self
            .columns
            .iter()
            .map(|&i| batch.column(i).clone())
            .collect();
        self.converter
            .convert_columns(&arrays)
            .map_err(|e| DriverError::internal(format!("cannot compare keys: {e}")))
    }

    /// Finds the changed keys among a row group's `rows`: the first old row of a key is
    /// replaced by its last fetched version (a hit), any later one with that key removed.
    /// Looked up in place, without a key's copy per row (a copy of ten million rows is
    /// looked up whole).
    fn place(&mut self, rows: &Rows, hits: &mut Vec<Hit>, removed: &mut Vec<usize>) {
        for (row, key) in rows.iter().enumerate() {
            if let Some(latest) = self.latest.get_mut(key.as_ref()) {
                if latest.placed {
                    removed.push(row);
                } else {
                    latest.placed = true;
                    hits.push(Hit { row, at: latest.at });
                }
            }
        }
    }

    /// Which of a fetched batch's rows go at the end: their key's last version, with no old
    /// row to replace.
    fn fresh(&self, b: usize, batch: &RecordBatch) -> Result<BooleanArray> {
        let rows = self.rows(batch)?;
        Ok(rows
            .iter()
            .enumerate()
            .map(|(r, key)| {
                let latest = self.latest.get(key.as_ref());
                Some(latest.is_some_and(|l| l.at == (b, r) && !l.placed))
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;

    use svc_plugin_api::arrow::array::{AsArray as _, Float64Array, Int64Array, StringArray};
    use svc_plugin_api::arrow::datatypes::{DataType, Field, Float64Type, Int64Type, Schema};

    use super::*;

    fn batch(schema: &SchemaRef, rows: &[(i64, &str, f64)]) -> RecordBatch {
        RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
                Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.1))),
                Arc::new(Float64Array::from_iter_values(rows.iter().map(|r| r.2))),
            ],
        )
        .unwrap()
    }

    /// Every row of the file at `path`, in order, and its row groups' sizes.
    fn read(path: &Path) -> (Vec<(i64, String, f64)>, Vec<i64>) {
        let builder = ParquetRecordBatchReaderBuilder::try_new(open(path).unwrap()).unwrap();
        let groups = builder
            .metadata()
            .row_groups()
            .iter()
            .map(|g| g.num_rows())
            .collect();
        let mut rows = Vec::new();
        for b in builder.build().unwrap() {
            let b = b.unwrap();
            for r in 0..b.num_rows() {
                rows.push((
                    b.column(0).as_primitive::<Int64Type>().value(r),
                    b.column(1).as_string::<i32>().value(r).to_owned(),
                    b.column(2).as_primitive::<Float64Type>().value(r),
                ));
            }
        }
        (rows, groups)
    }

    /// The bytes of a column chunk of the parquet file at `path`.
    fn chunk(path: &Path, group: usize, column: usize) -> Vec<u8> {
        let builder = ParquetRecordBatchReaderBuilder::try_new(open(path).unwrap()).unwrap();
        let (start, len) = builder
            .metadata()
            .row_group(group)
            .column(column)
            .byte_range();
        std::fs::read(path).unwrap()[start as usize..(start + len) as usize].to_vec()
    }

    #[test]
    fn changes_replace_rows_in_place_and_untouched_chunks_are_copied() {
        let dir = std::env::temp_dir().join(format!("svc-merge-{}", std::process::id()));
        let path = dir.join("copy.parquet");
        let schema: SchemaRef = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, false),
            Field::new("n", DataType::Float64, false),
        ]));
        // Four row groups of three rows; key 8 is in the copy twice (a source key that was
        // not unique).
        let old: Vec<(i64, &str, f64)> = vec![
            (1, "a", 1.0),
            (2, "b", 2.0),
            (3, "c", 3.0),
            (4, "d", 4.0),
            (5, "e", 5.0),
            (6, "f", 6.0),
            (7, "g", 7.0),
            (8, "h", 8.0),
            (9, "i", 9.0),
            (10, "j", 10.0),
            (8, "h2", 8.5),
            (12, "l", 12.0),
        ];
        let mut w = AtomicParquet::with_row_groups(&path, schema.clone(), 3).unwrap();
        w.write(&batch(&schema, &old)).unwrap();
        w.commit().unwrap();
        let before = dir.join("before.parquet");
        std::fs::copy(&path, &before).unwrap();

        let changes = [
            // Group 0: a name changed. Group 1: fetched again with nothing changed.
            batch(&schema, &[(2, "B", 2.0), (5, "e", 5.0), (7, "first", 0.0)]),
            // Group 2: key 7 twice (the last wins), key 8 (its second row goes). New: 100.
            batch(&schema, &[(7, "g", 70.0), (8, "H", 8.0), (100, "new", 1.5)]),
        ];
        let target = Target {
            path: path.clone(),
            row_group_rows: 3,
            batch_rows: 1024,
            hashes: Arc::default(),
        };
        let report = merge(&target, schema.clone(), &changes, &[0]).unwrap();
        let (rows, groups) = read(&path);
        let expected: Vec<(i64, String, f64)> = [
            (1, "a", 1.0),
            (2, "B", 2.0),
            (3, "c", 3.0),
            (4, "d", 4.0),
            (5, "e", 5.0),
            (6, "f", 6.0),
            (7, "g", 70.0),
            (8, "H", 8.0),
            (9, "i", 9.0),
            (10, "j", 10.0),
            (12, "l", 12.0),
            (100, "new", 1.5),
        ]
        .into_iter()
        .map(|(i, s, n)| (i, s.to_owned(), n))
        .collect();
        assert_eq!(rows, expected);
        assert_eq!(
            groups,
            [3, 3, 3, 2, 1],
            "old groups keep their rows, new rows follow"
        );
        assert_eq!(report.rows, 12);
        // Group 0 re-encodes `name` only, group 2 both changed columns, group 3 (a row
        // removed) all three; group 1 is copied whole.
        assert_eq!(
            report.notes,
            [
                "merge: 1 of 4 row groups copied as they were, 6 of 12 column chunks encoded \
              again, 1 rows added"
            ]
        );
        // A copied chunk is the old bytes: group 1's, and group 0's `id` and `n`.
        let after = &path;
        for (group, column) in [(1, 0), (1, 1), (1, 2), (0, 0), (0, 2)] {
            assert_eq!(
                chunk(&before, group, column),
                chunk(after, group, column),
                "group {group} column {column}"
            );
        }
        assert_ne!(chunk(&before, 0, 1), chunk(after, 0, 1));
        let _ = std::fs::remove_dir_all(dir);
    }
}
