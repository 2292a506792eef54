//! Many rows in one statement.
//!
//! PostgreSQL: the rows travel as one JSON array parameter that `json_to_recordset` unpacks —
//! one round trip and one bound value per chunk, and a statement text that does not depend on
//! the row count.
//!
//! SQLite: a multi-row `VALUES` list with each cell bound on its own. SQLite's `json_each`
//! hands every row object over as text that each `->>` then reads again (twelve reads per
//! audit row); that unpacking cost about 40 % on top of the insert itself, more than binding
//! the cells does. Chunks have power-of-two sizes, so a table needs at most
//! `log2(ROWS_PER_VALUES) + 1` statement texts and each connection prepares them once.
//!
//! Both: a NUL in a text cell is stored as [`NUL_STANDIN`]. These rows are made from what
//! others wrote (a caller's request, an uploaded transcript), PostgreSQL stores no NUL in
//! text, and one such cell made it refuse the whole statement: the audit rows batched with
//! it, or every telemetry run from then on, since the file would be read again each run.

use std::borrow::Cow;

use serde::ser::{self, Impossible, Serialize, SerializeStruct, Serializer};
use sqlx::any::AnyArguments;
use sqlx::{Any, Arguments as _, Transaction};

use crate::{Backend, StoreError};

/// What stands in for a NUL character in stored text (U+2400, SYMBOL FOR NULL), on both
/// backends, so a row reads the same whichever one stored it.
const NUL_STANDIN: char = '\u{2400}';

/// `text` with every NUL replaced by [`NUL_STANDIN`]; allocates only when there is one.
fn storable(text: &str) -> Cow<'_, str> {
    if text.contains('\0') {
        Cow::Owned(text.replace('\0', NUL_STANDIN.encode_utf8(&mut [0; 3])))
    } else {
        Cow::Borrowed(text)
    }
}

/// `json` (as serde_json writes it, a NUL in a string as `\u0000`) with every NUL made
/// [`NUL_STANDIN`]. A `\u0000` preceded by an odd number of backslashes is text (an
/// escaped backslash, then `u0000`) and stays.
pub(crate) fn storable_json_text(json: String) -> String {
    const ESCAPE: &str = "\\u0000";
    if !json.contains(ESCAPE) {
        return json;
    }
    let mut out = String::with_capacity(json.len());
    let mut rest = json.as_str();
    while let Some(at) = rest.find(ESCAPE) {
        let before = &rest[..at];
        out.push_str(before);
        let backslashes = before.bytes().rev().take_while(|b| *b == b'\\').count();
        if backslashes % 2 == 0 {
            out.push(NUL_STANDIN);
        } else {
            out.push_str(ESCAPE);
        }
        rest = &rest[at + ESCAPE.len()..];
    }
    out.push_str(rest);
    out
}

/// How a column travels through the JSON array.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum JsonType {
    /// A string (or null).
    Text,
    /// A 64-bit integer (or null).
    Int,
    /// A boolean (or null).
    Bool,
}

/// Rows per statement on PostgreSQL: bounds the size of the one JSON parameter.
pub(crate) const ROWS_PER_STATEMENT: usize = 1_000;

/// Rows per statement on SQLite, at most (a power of two; 64 rows of 25 columns stay far
/// below SQLite's 32,766 bound parameters).
const ROWS_PER_VALUES: usize = 64;

/// An insert of many rows into one table; see the module docs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BulkInsert<'a> {
    backend: Backend,
    table: &'a str,
    columns: &'a [(&'a str, JsonType)],
}

impl<'a> BulkInsert<'a> {
    /// The insert of `columns` into `table`.
    pub(crate) fn new(
        backend: Backend,
        table: &'a str,
        columns: &'a [(&'a str, JsonType)],
    ) -> Self {
        Self {
            backend,
            table,
            columns,
        }
    }

    fn names(&self) -> String {
        let names: Vec<&str> = self.columns.iter().map(|(c, _)| *c).collect();
        names.join(", ")
    }

    /// The statement for `rows` rows (SQLite) or for any number of rows (PostgreSQL).
    fn sql(&self, rows: usize) -> String {
        let (table, names) = (self.table, self.names());
        match self.backend {
            Backend::Sqlite => {
                let row = format!("({})", vec!["?"; self.columns.len()].join(", "));
                let rows = vec![row.as_str(); rows].join(", ");
                format!("INSERT INTO {table} ({names}) VALUES {rows}")
            }
            Backend::Postgres => {
                let types: Vec<String> = self
                    .columns
                    .iter()
                    .map(|(c, t)| {
                        let ty = match t {
                            JsonType::Text => "text",
                            JsonType::Int => "bigint",
                            JsonType::Bool => "boolean",
                        };
                        format!("{c} {ty}")
                    })
                    .collect();
                format!(
                    "INSERT INTO {table} ({names}) SELECT {names} FROM json_to_recordset($1::json) AS x({})",
                    types.join(", ")
                )
            }
        }
    }

    /// Inserts `rows`: structs whose fields named like the columns hold strings, integers,
    /// booleans or options of them (other fields are ignored).
    pub(crate) async fn run<T: Serialize>(
        &self,
        tx: &mut Transaction<'_, Any>,
        rows: &[T],
    ) -> Result<(), StoreError> {
        match self.backend {
            // Rows are serialized straight into each chunk's JSON text, never into
            // `serde_json::Value` trees, which cost several times the rows' own size.
            Backend::Postgres => {
                let sql = self.sql(0);
                for chunk in rows.chunks(ROWS_PER_STATEMENT) {
                    let json = serde_json::to_string(chunk).unwrap_or_else(|_| "[]".into());
                    sqlx::query(&sql)
                        .bind(storable_json_text(json))
                        .execute(&mut **tx)
                        .await?;
                }
            }
            Backend::Sqlite => {
                let mut rest = rows;
                // The statement for the last chunk's size: every chunk of a big batch has the
                // same size, and the text is rebuilt only when the size changes.
                let mut sql = (0, String::new());
                let mut fields = Fields::new(self.columns);
                while !rest.is_empty() {
                    let n = ROWS_PER_VALUES.min(1 << rest.len().ilog2());
                    let (chunk, after) = rest.split_at(n);
                    if sql.0 != n {
                        sql = (n, self.sql(n));
                    }
                    // Sized up front: grown a value at a time, a chunk's arguments were
                    // reallocated and copied about ten times.
                    let mut args = AnyArguments::default();
                    args.reserve(n * self.columns.len(), 0);
                    for row in chunk {
                        self.cells(row, &mut fields)?;
                        for cell in fields.cells.drain(..) {
                            match cell {
                                Cell::Null => args.add(None::<String>),
                                Cell::Text(s) => args.add(s),
                                Cell::Int(i) => args.add(i),
                                Cell::Bool(b) => args.add(b),
                                Cell::Float(f) => args.add(f),
                            }
                            .map_err(sqlx::Error::Encode)?;
                        }
                    }
                    sqlx::query_with(&sql.1, args).execute(&mut **tx).await?;
                    rest = after;
                }
            }
        }
        Ok(())
    }

    /// One row's cells in column order (null where the row has no such field), into
    /// `fields` (emptied of the last row's cells first).
    fn cells<T: Serialize>(&self, row: &T, fields: &mut Fields<'_>) -> Result<(), StoreError> {
        fields.start_row();
        // Only a row type svc defines can fail here (a field that is not a column value).
        row.serialize(&mut *fields).map_err(|e| {
            let e = NotFlat(format!("a {} row: {e}", self.table));
            StoreError::from(sqlx::Error::Encode(Box::new(e)))
        })
    }
}

/// A value as it is bound.
#[derive(Debug, PartialEq)]
enum Cell {
    Null,
    Text(String),
    Int(i64),
    Bool(bool),
    Float(f64),
}

/// Why a row could not be turned into cells.
#[derive(Debug)]
struct NotFlat(String);

impl std::fmt::Display for NotFlat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NotFlat {}

impl ser::Error for NotFlat {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        Self(msg.to_string())
    }
}

fn not_flat<T>(what: &str) -> Result<T, NotFlat> {
    Err(NotFlat(format!("{what} is not a column value")))
}

/// Takes a row struct apart into its columns' cells.
struct Fields<'a> {
    columns: &'a [(&'a str, JsonType)],
    cells: Vec<Cell>,
    /// The column after the last field taken: row structs list their fields in column
    /// order, so this is where the next field's name is looked for first (a search through
    /// every column name for each field was a tenth of storing an audit row, callgrind).
    next: usize,
}

impl<'a> Fields<'a> {
    fn new(columns: &'a [(&'a str, JsonType)]) -> Self {
        Self {
            columns,
            cells: Vec::with_capacity(columns.len()),
            next: 0,
        }
    }

    /// Every cell null, ready for a row's fields.
    fn start_row(&mut self) {
        self.cells.clear();
        self.cells.resize_with(self.columns.len(), || Cell::Null);
        self.next = 0;
    }
}

impl SerializeStruct for &mut Fields<'_> {
    type Ok = ();
    type Error = NotFlat;

    fn serialize_field<V: ?Sized + Serialize>(
        &mut self,
        key: &'static str,
        value: &V,
    ) -> Result<(), NotFlat> {
        let at = match self.columns.get(self.next) {
            Some((column, _)) if *column == key => Some(self.next),
            _ => self.columns.iter().position(|(c, _)| *c == key),
        };
        if let Some(i) = at {
            self.cells[i] = value.serialize(CellOf)?;
            self.next = i + 1;
        }
        Ok(())
    }

    fn end(self) -> Result<(), NotFlat> {
        Ok(())
    }
}

/// The compound values neither a row nor a cell can be.
macro_rules! refuse_compound {
    () => {
        fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, NotFlat> {
            not_flat("a sequence")
        }
        fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, NotFlat> {
            not_flat("a tuple")
        }
        fn serialize_tuple_struct(
            self,
            _: &'static str,
            _: usize,
        ) -> Result<Self::SerializeTupleStruct, NotFlat> {
            not_flat("a tuple")
        }
        fn serialize_tuple_variant(
            self,
            _: &'static str,
            _: u32,
            _: &'static str,
            _: usize,
        ) -> Result<Self::SerializeTupleVariant, NotFlat> {
            not_flat("an enum with data")
        }
        fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, NotFlat> {
            not_flat("a map")
        }
        fn serialize_struct_variant(
            self,
            _: &'static str,
            _: u32,
            _: &'static str,
            _: usize,
        ) -> Result<Self::SerializeStructVariant, NotFlat> {
            not_flat("an enum with data")
        }
    };
}

/// Only `serialize_struct` is a row; everything else is refused.
macro_rules! refuse {
    ($($method:ident($($arg:ty),*)),* $(,)?) => {
        $(fn $method(self, $(_: $arg),*) -> Result<Self::Ok, NotFlat> {
            not_flat(stringify!($method))
        })*
    };
}

impl Serializer for &mut Fields<'_> {
    type Ok = ();
    type Error = NotFlat;
    type SerializeSeq = Impossible<(), NotFlat>;
    type SerializeTuple = Impossible<(), NotFlat>;
    type SerializeTupleStruct = Impossible<(), NotFlat>;
    type SerializeTupleVariant = Impossible<(), NotFlat>;
    type SerializeMap = Impossible<(), NotFlat>;
    type SerializeStruct = Self;
    type SerializeStructVariant = Impossible<(), NotFlat>;

    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self, NotFlat> {
        Ok(self)
    }

    refuse!(
        serialize_bool(bool),
        serialize_i8(i8),
        serialize_i16(i16),
        serialize_i32(i32),
        serialize_i64(i64),
        serialize_u8(u8),
        serialize_u16(u16),
        serialize_u32(u32),
        serialize_u64(u64),
        serialize_f32(f32),
        serialize_f64(f64),
        serialize_char(char),
        serialize_str(&str),
        serialize_bytes(&[u8]),
        serialize_none(),
        serialize_unit(),
        serialize_unit_struct(&'static str),
        serialize_unit_variant(&'static str, u32, &'static str),
    );

    fn serialize_some<V: ?Sized + Serialize>(self, _: &V) -> Result<(), NotFlat> {
        not_flat("an option")
    }
    fn serialize_newtype_struct<V: ?Sized + Serialize>(
        self,
        _: &'static str,
        _: &V,
    ) -> Result<(), NotFlat> {
        not_flat("a newtype")
    }
    fn serialize_newtype_variant<V: ?Sized + Serialize>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &V,
    ) -> Result<(), NotFlat> {
        not_flat("an enum")
    }
    refuse_compound!();
}

/// Integers that always fit a 64-bit column, as integer cells.
macro_rules! widen_to_int {
    ($($method:ident($ty:ty)),* $(,)?) => {
        $(fn $method(self, v: $ty) -> Result<Cell, NotFlat> {
            Ok(Cell::Int(v.into()))
        })*
    };
}

/// One field's value as a cell.
struct CellOf;

impl Serializer for CellOf {
    type Ok = Cell;
    type Error = NotFlat;
    type SerializeSeq = Impossible<Cell, NotFlat>;
    type SerializeTuple = Impossible<Cell, NotFlat>;
    type SerializeTupleStruct = Impossible<Cell, NotFlat>;
    type SerializeTupleVariant = Impossible<Cell, NotFlat>;
    type SerializeMap = Impossible<Cell, NotFlat>;
    type SerializeStruct = Impossible<Cell, NotFlat>;
    type SerializeStructVariant = Impossible<Cell, NotFlat>;

    fn serialize_bool(self, v: bool) -> Result<Cell, NotFlat> {
        Ok(Cell::Bool(v))
    }
    widen_to_int!(
        serialize_i8(i8),
        serialize_i16(i16),
        serialize_i32(i32),
        serialize_i64(i64),
        serialize_u8(u8),
        serialize_u16(u16),
        serialize_u32(u32),
    );
    fn serialize_u64(self, v: u64) -> Result<Cell, NotFlat> {
        i64::try_from(v)
            .map(Cell::Int)
            .map_err(|_| NotFlat(format!("{v} does not fit a 64-bit column")))
    }
    fn serialize_f32(self, v: f32) -> Result<Cell, NotFlat> {
        Ok(Cell::Float(v.into()))
    }
    fn serialize_f64(self, v: f64) -> Result<Cell, NotFlat> {
        Ok(Cell::Float(v))
    }
    fn serialize_char(self, v: char) -> Result<Cell, NotFlat> {
        self.serialize_str(v.encode_utf8(&mut [0; 4]))
    }
    fn serialize_str(self, v: &str) -> Result<Cell, NotFlat> {
        Ok(Cell::Text(storable(v).into_owned()))
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<Cell, NotFlat> {
        not_flat("bytes")
    }
    fn serialize_none(self) -> Result<Cell, NotFlat> {
        Ok(Cell::Null)
    }
    fn serialize_some<V: ?Sized + Serialize>(self, v: &V) -> Result<Cell, NotFlat> {
        v.serialize(self)
    }
    fn serialize_unit(self) -> Result<Cell, NotFlat> {
        Ok(Cell::Null)
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<Cell, NotFlat> {
        Ok(Cell::Null)
    }
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
    ) -> Result<Cell, NotFlat> {
        Ok(Cell::Text(variant.to_owned()))
    }
    fn serialize_newtype_struct<V: ?Sized + Serialize>(
        self,
        _: &'static str,
        v: &V,
    ) -> Result<Cell, NotFlat> {
        v.serialize(self)
    }
    fn serialize_newtype_variant<V: ?Sized + Serialize>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &V,
    ) -> Result<Cell, NotFlat> {
        not_flat("an enum with data")
    }
    refuse_compound!();
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self::SerializeStruct, NotFlat> {
        not_flat("a struct")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Serialize)]
    struct Row<'a> {
        name: &'a str,
        note: Option<String>,
        n: i64,
        flag: bool,
        ignored: u8,
    }

    #[test]
    fn a_row_becomes_its_columns_cells_in_column_order() {
        let columns = [
            ("flag", JsonType::Bool),
            ("n", JsonType::Int),
            ("missing", JsonType::Text),
            ("note", JsonType::Text),
            ("name", JsonType::Text),
        ];
        let insert = BulkInsert::new(Backend::Sqlite, "t", &columns);
        let row = Row {
            name: "a",
            note: None,
            n: 7,
            flag: true,
            ignored: 1,
        };
        let mut fields = Fields::new(&columns);
        insert.cells(&row, &mut fields).unwrap();
        assert_eq!(
            fields.cells,
            [
                Cell::Bool(true),
                Cell::Int(7),
                Cell::Null,
                Cell::Null,
                Cell::Text("a".into())
            ]
        );
        assert!(
            insert.cells(&vec![1], &mut fields).is_err(),
            "a row must be a struct"
        );
        // Columns in the fields' own order (the quick path), one buffer for two rows: the
        // second row's cells are its own, not left over from the first.
        let in_order = [
            ("name", JsonType::Text),
            ("note", JsonType::Text),
            ("n", JsonType::Int),
            ("flag", JsonType::Bool),
        ];
        let insert = BulkInsert::new(Backend::Sqlite, "t", &in_order);
        let mut fields = Fields::new(&in_order);
        insert.cells(&row, &mut fields).unwrap();
        let second = Row {
            name: "b",
            note: Some("x".into()),
            n: 8,
            flag: false,
            ignored: 2,
        };
        insert.cells(&second, &mut fields).unwrap();
        assert_eq!(
            fields.cells,
            [
                Cell::Text("b".into()),
                Cell::Text("x".into()),
                Cell::Int(8),
                Cell::Bool(false)
            ]
        );
        let insert = BulkInsert::new(Backend::Sqlite, "t", &columns);
        assert_eq!(
            insert.sql(2),
            "INSERT INTO t (flag, n, missing, note, name) VALUES (?, ?, ?, ?, ?), (?, ?, ?, ?, ?)"
        );
    }

    #[test]
    fn a_nul_in_json_text_becomes_the_standin_and_an_escaped_backslash_stays_text() {
        let rows = [
            Row {
                name: "a\0b",
                note: Some("\\u0000".into()),
                n: 0,
                flag: false,
                ignored: 0,
            },
            Row {
                name: "\\\0",
                note: Some("\0\0".into()),
                n: 0,
                flag: false,
                ignored: 0,
            },
        ];
        let json = storable_json_text(serde_json::to_string(&rows).unwrap());
        let back: Vec<serde_json::Value> = serde_json::from_str(&json).unwrap();
        assert_eq!(back[0]["name"], "a\u{2400}b");
        assert_eq!(
            back[0]["note"], "\\u0000",
            "a backslash before u0000 is text"
        );
        assert_eq!(back[1]["name"], "\\\u{2400}");
        assert_eq!(back[1]["note"], "\u{2400}\u{2400}");
        let plain = serde_json::to_string(&rows[..0]).unwrap();
        assert_eq!(storable_json_text(plain.clone()), plain);
    }

    /// Text from others can hold a NUL, which PostgreSQL refused along with every row in
    /// the statement. Both backends store the stand-in, and the rows beside it.
    #[tokio::test]
    async fn a_nul_in_a_text_cell_is_stored_as_the_standin_on_both_backends() {
        use sqlx::Row as _;
        for (store, _dir) in crate::testing::all_backends().await {
            let backend = store.backend();
            let mut tx = store.begin_write().await.unwrap();
            sqlx::query("CREATE TEMPORARY TABLE bulk_nul (name TEXT, note TEXT, n BIGINT)")
                .execute(&mut *tx)
                .await
                .unwrap();
            let columns = [
                ("name", JsonType::Text),
                ("note", JsonType::Text),
                ("n", JsonType::Int),
            ];
            let rows: Vec<Row> = (0..3)
                .map(|n| Row {
                    name: if n == 1 { "tool\0x" } else { "plain" },
                    note: Some("\\u0000".into()),
                    n,
                    flag: false,
                    ignored: 0,
                })
                .collect();
            BulkInsert::new(backend, "bulk_nul", &columns)
                .run(&mut tx, &rows)
                .await
                .unwrap_or_else(|e| panic!("{backend:?}: {e}"));
            let stored = sqlx::query("SELECT name, note FROM bulk_nul ORDER BY n")
                .fetch_all(&mut *tx)
                .await
                .unwrap();
            let names: Vec<String> = stored.iter().map(|r| r.get("name")).collect();
            assert_eq!(names, ["plain", "tool\u{2400}x", "plain"], "{backend:?}");
            let note: String = stored[0].get("note");
            assert_eq!(note, "\\u0000", "{backend:?}");
            tx.rollback().await.unwrap();
        }
    }
}
