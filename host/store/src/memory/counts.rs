//! The tree's group counts, kept by the database itself (v56): `knowledge_tree_counts` holds,
//! per axis, how many items (tag rows on the tag axis) share one group key and one
//! combination of the columns readers' filters read — status, personal, audience, domain,
//! source type. Triggers on `knowledge_items` and `knowledge_item_tags` move an item's counts
//! as it changes, in the transaction that changes it, whichever statement did it (a review
//! decision, a batch, a migration's backfill, a test's raw SQL). A reader's tree then sums a
//! few thousand count rows under the same filter as the items, instead of counting a hundred
//! thousand items or two hundred thousand tag rows on every request.
//!
//! Rows are keyed by `combo`, the key and filter columns written out with each value
//! length-prefixed and a null as `-`, so distinct tuples never share a string and an upsert
//! finds its row on both backends (whose unique indexes would treat nulls as distinct).
//! Counts that fall to zero stay as rows of zero; the tree skips them.

use crate::Backend;

/// The PostgreSQL advisory lock a transaction takes before it moves counts, held to its
/// end. Two transactions moving items the opposite ways between the same two count rows
/// would otherwise each lock one row and wait for the other's (a deadlock PostgreSQL ends by
/// failing one); item changes are an administrator's pace, so taking them one at a time
/// costs nothing. SQLite has one writer at a time already.
const COUNTS_LOCK: i64 = 734_002;

/// The axes counted from item rows, each keyed by the column of the same name.
const ITEM_AXES: [&str; 3] = ["domain", "category", "audience"];

/// The columns a reader's filters read, copied into each count row.
const FILTER_COLUMNS: [&str; 5] = ["status", "is_personal", "audience", "domain", "source_type"];

/// The item columns whose change moves an item between count rows.
const ITEM_COUNTED: [&str; 6] = [
    "category",
    "status",
    "is_personal",
    "audience",
    "domain",
    "source_type",
];

/// The tag-row columns whose change moves a tag row between count rows.
const TAG_COUNTED: [&str; 6] = [
    "tag",
    "status",
    "is_personal",
    "audience",
    "domain",
    "source_type",
];

/// A value of `row` (`NEW` or `OLD`) written so that no two tuples concatenate alike.
fn field(row: &str, column: &str) -> String {
    if column == "is_personal" {
        return format!("CASE WHEN {row}.is_personal THEN '1' ELSE '0' END");
    }
    format!("COALESCE(LENGTH({row}.{column}) || ':' || {row}.{column}, '-')")
}

/// Adds `delta` to the count row of `row`'s group `key` on `axis`.
fn add(axis: &str, key: &str, row: &str, delta: i64) -> String {
    let combo = std::iter::once(field(row, key))
        .chain(FILTER_COLUMNS.iter().map(|c| field(row, c)))
        .collect::<Vec<_>>()
        .join(" || '|' || ");
    let values = FILTER_COLUMNS
        .iter()
        .map(|c| format!("{row}.{c}"))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "INSERT INTO knowledge_tree_counts (axis, combo, k, {cols}, n) \
         VALUES ('{axis}', {combo}, {row}.{key}, {values}, {delta}) \
         ON CONFLICT (axis, combo) DO UPDATE SET n = knowledge_tree_counts.n + excluded.n",
        cols = FILTER_COLUMNS.join(", "),
    )
}

/// The statements that move an item row's counts: out of `OLD`'s groups, into `NEW`'s.
fn item_moves(row: &str, delta: i64) -> Vec<String> {
    ITEM_AXES
        .iter()
        .map(|axis| add(axis, axis, row, delta))
        .collect()
}

/// The statements that move a tag row's count.
fn tag_moves(row: &str, delta: i64) -> Vec<String> {
    vec![add("tag", "tag", row, delta)]
}

/// Whether any of `columns` differs between `OLD` and `NEW` (both backends read
/// `IS DISTINCT FROM`; SQLite since 3.39).
fn changed(columns: &[&str]) -> String {
    columns
        .iter()
        .map(|c| format!("OLD.{c} IS DISTINCT FROM NEW.{c}"))
        .collect::<Vec<_>>()
        .join(" OR ")
}

/// The triggers of one table, for `backend`: dropped and created again, so the step can run
/// over a store where an earlier attempt left some.
fn triggers(
    backend: Backend,
    table: &str,
    counted: &[&str],
    moves: fn(&str, i64) -> Vec<String>,
) -> Vec<String> {
    let name = format!("{table}_tree_counts");
    let body = |row: &str, delta| moves(row, delta).join("; ");
    match backend {
        Backend::Sqlite => vec![
            format!("DROP TRIGGER IF EXISTS {name}_insert"),
            format!("DROP TRIGGER IF EXISTS {name}_delete"),
            format!("DROP TRIGGER IF EXISTS {name}_update"),
            format!(
                "CREATE TRIGGER {name}_insert AFTER INSERT ON {table} BEGIN {}; END",
                body("NEW", 1)
            ),
            format!(
                "CREATE TRIGGER {name}_delete AFTER DELETE ON {table} BEGIN {}; END",
                body("OLD", -1)
            ),
            format!(
                "CREATE TRIGGER {name}_update AFTER UPDATE OF {} ON {table} WHEN {} \
                 BEGIN {}; {}; END",
                counted.join(", "),
                changed(counted),
                body("OLD", -1),
                body("NEW", 1)
            ),
        ],
        Backend::Postgres => vec![
            format!(
                "CREATE OR REPLACE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$ \
                 BEGIN \
                 PERFORM pg_advisory_xact_lock({COUNTS_LOCK}); \
                 IF TG_OP <> 'INSERT' THEN {}; END IF; \
                 IF TG_OP <> 'DELETE' THEN {}; END IF; \
                 RETURN NULL; \
                 END $$",
                body("OLD", -1),
                body("NEW", 1)
            ),
            format!("DROP TRIGGER IF EXISTS {name}_insert_delete ON {table}"),
            format!("DROP TRIGGER IF EXISTS {name}_update ON {table}"),
            format!(
                "CREATE TRIGGER {name}_insert_delete AFTER INSERT OR DELETE ON {table} \
                 FOR EACH ROW EXECUTE FUNCTION {name}()"
            ),
            format!(
                "CREATE TRIGGER {name}_update AFTER UPDATE OF {} ON {table} FOR EACH ROW \
                 WHEN ({}) EXECUTE FUNCTION {name}()",
                counted.join(", "),
                changed(counted)
            ),
        ],
    }
}

/// Migration v56's statements after the table exists: the triggers of both tables, then
/// every count computed afresh from the rows (so a retried step starts clean).
pub(crate) fn v56_statements(backend: Backend) -> Vec<String> {
    let mut out = triggers(backend, "knowledge_items", &ITEM_COUNTED, item_moves);
    out.extend(triggers(
        backend,
        "knowledge_item_tags",
        &TAG_COUNTED,
        tag_moves,
    ));
    out.push("DELETE FROM knowledge_tree_counts".to_owned());
    for (axis, table, key) in ITEM_AXES
        .iter()
        .map(|a| (*a, "knowledge_items", *a))
        .chain([("tag", "knowledge_item_tags", "tag")])
    {
        out.push(backfill(axis, table, key));
    }
    out
}

/// Counts every row of `table` into `axis`, grouped as the triggers group them.
fn backfill(axis: &str, table: &str, key: &str) -> String {
    // The same `combo` as the triggers build, over the row itself.
    let unqualified = |c: &str| field(table, c);
    let combo = std::iter::once(unqualified(key))
        .chain(FILTER_COLUMNS.iter().map(|c| unqualified(c)))
        .collect::<Vec<_>>()
        .join(" || '|' || ");
    let cols = FILTER_COLUMNS.join(", ");
    format!(
        "INSERT INTO knowledge_tree_counts (axis, combo, k, {cols}, n) \
         SELECT '{axis}', combo, k, {cols}, COUNT(*) FROM \
         (SELECT {combo} AS combo, {key} AS k, {cols} FROM {table}) AS rows \
         GROUP BY combo, k, {cols}"
    )
}
