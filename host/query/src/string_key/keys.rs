//! The group table of a string-keyed aggregation: each distinct key gets a dense group
//! index, in order of first appearance.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;

use svc_plugin_api::arrow::array::{
    AnyDictionaryArray, Array, ArrayBuilder, ArrayRef, AsArray, StringViewArray, StringViewBuilder,
    UInt64Array,
};
use svc_plugin_api::arrow::compute::{cast, take};
use svc_plugin_api::arrow::datatypes::DataType;
use svc_plugin_api::arrow::error::ArrowError;

/// Distinct string keys and their group indices.
///
/// A string view of at most 12 bytes holds the whole string in its 128 bits, so such keys are
/// looked up by that integer alone, in an open-addressing [`ViewTable`]: one multiply, one
/// load and one compare per row while the table is small enough to stay in the L1 cache, as
/// a low-cardinality `GROUP BY category`'s is. Longer keys are looked up by their bytes,
/// behind a per-batch table keyed by the view itself: parquet dictionary pages decode to
/// views that share one copy of each value, so within a batch a repeated key repeats its view
/// and its bytes are hashed once per batch.
///
/// Dictionary-encoded keys are cheaper still: the dictionary's values are looked up once, and
/// each row's group is its code's, one load per row. Parquet hands every batch of a column
/// chunk the same values array, so the values' groups are kept until the dictionary changes.
pub(super) struct KeyGroups {
    seed: Seed,
    dictionary: Option<DictionaryGroups>,
    short: ViewTable,
    long: HashMap<Box<[u8]>, usize, Seed>,
    batch_views: ViewTable,
    null: Option<usize>,
    /// Group `i`'s key is entry `i`.
    keys: StringViewBuilder,
    long_bytes: usize,
}

impl KeyGroups {
    pub(super) fn new() -> Self {
        // Seeded per table, so data crafted to collide cannot be prepared in advance.
        let seed = Seed(rand::random());
        Self {
            seed,
            dictionary: None,
            short: ViewTable::new(seed),
            long: HashMap::with_hasher(seed),
            batch_views: ViewTable::new(seed),
            null: None,
            keys: StringViewBuilder::new(),
            long_bytes: 0,
        }
    }

    /// Number of groups.
    pub(super) fn len(&self) -> usize {
        self.keys.len()
    }

    /// Writes the group index of every row of `keys` into `out`, adding new groups.
    pub(super) fn intern(&mut self, keys: &StringViewArray, out: &mut Vec<usize>) {
        out.clear();
        self.batch_views.clear();
        let views = keys.views();
        if keys.null_count() == 0 {
            out.extend(
                views
                    .iter()
                    .enumerate()
                    .map(|(row, &view)| self.group(view, keys, row)),
            );
        } else {
            out.extend(views.iter().enumerate().map(|(row, &view)| {
                if keys.is_null(row) {
                    self.null_group()
                } else {
                    self.group(view, keys, row)
                }
            }));
        }
    }

    /// [`Self::intern`] for dictionary-encoded keys whose values are strings.
    pub(super) fn intern_dictionary(
        &mut self,
        keys: &dyn AnyDictionaryArray,
        out: &mut Vec<usize>,
    ) -> Result<(), ArrowError> {
        out.clear();
        if keys.keys().is_empty() {
            return Ok(());
        }
        let values = keys.values();
        let known = self
            .dictionary
            .as_ref()
            .is_some_and(|d| Arc::ptr_eq(&d.values, values));
        if !known {
            // A dictionary far larger than its batch (a slice of a big one) costs more to
            // look up whole than row by row.
            if values.len() > DICTIONARY_PER_ROW_LIMIT * keys.keys().len() {
                let flat = cast(keys as &dyn Array, &DataType::Utf8View)?;
                self.intern(flat.as_string_view(), out);
                return Ok(());
            }
            self.dictionary = Some(DictionaryGroups {
                values: Arc::clone(values),
                views: cast(values, &DataType::Utf8View)?,
                groups: vec![UNSEEN; values.len()],
            });
        }
        // A null buffer may be present with no nulls in it; only real nulls make a group.
        let nulls = keys.keys().logical_nulls().filter(|n| n.null_count() > 0);
        let null = match nulls {
            Some(_) => self.null_group(),
            None => 0,
        };
        if values.is_empty() {
            // Every key is null: an empty dictionary has nothing else to point at.
            out.resize(keys.keys().len(), null);
            return Ok(());
        }
        let codes = keys.normalized_keys();
        let valid = |row: usize| nulls.as_ref().is_none_or(|n| n.is_valid(row));
        self.group_unseen_values(
            codes
                .iter()
                .enumerate()
                .filter_map(|(row, &code)| valid(row).then_some(code)),
        )?;
        let groups = &self.dictionary.as_ref().expect("set above").groups;
        match &nulls {
            None => out.extend(codes.iter().map(|&code| groups[code])),
            Some(nulls) => out.extend(codes.iter().zip(nulls.iter()).map(|(&code, valid)| {
                if valid {
                    groups[code]
                } else {
                    null
                }
            })),
        }
        Ok(())
    }

    /// Gives groups to the dictionary values first used by `codes`. Values no row uses get
    /// none: a filter keeps a dictionary whole, and a value no row has is not a group.
    fn group_unseen_values(
        &mut self,
        codes: impl Iterator<Item = usize>,
    ) -> Result<(), ArrowError> {
        let dictionary = self.dictionary.as_mut().expect("set by the caller");
        let mut unseen = Vec::new();
        for code in codes {
            if dictionary.groups[code] == UNSEEN {
                dictionary.groups[code] = PENDING;
                unseen.push(code as u64);
            }
        }
        if unseen.is_empty() {
            return Ok(());
        }
        let unseen = UInt64Array::from(unseen);
        let values = take(&dictionary.views, &unseen, None)?;
        let mut groups = Vec::with_capacity(unseen.len());
        self.intern(values.as_string_view(), &mut groups);
        let dictionary = self.dictionary.as_mut().expect("set by the caller");
        for (code, group) in unseen.values().iter().zip(groups) {
            dictionary.groups[*code as usize] = group;
        }
        Ok(())
    }

    #[inline(always)]
    fn group(&mut self, view: u128, keys: &StringViewArray, row: usize) -> usize {
        let len = view as u32;
        if len <= 12 {
            let key = view & INLINE_MASKS[len as usize];
            match self.short.get(key) {
                Some(g) => g,
                None => self.new_short_group(key, keys, row),
            }
        } else {
            match self.batch_views.get(view) {
                Some(g) => g,
                None => self.long_group(view, keys, row),
            }
        }
    }

    fn null_group(&mut self) -> usize {
        if let Some(g) = self.null {
            return g;
        }
        let g = self.len();
        self.keys.append_null();
        self.null = Some(g);
        g
    }

    #[cold]
    #[inline(never)]
    fn new_short_group(&mut self, key: u128, keys: &StringViewArray, row: usize) -> usize {
        let g = self.push(keys.value(row));
        self.short.insert(key, g);
        g
    }

    #[inline(never)]
    fn long_group(&mut self, view: u128, keys: &StringViewArray, row: usize) -> usize {
        let value = keys.value(row);
        let g = match self.long.get(value.as_bytes()) {
            Some(&g) => g,
            None => {
                let g = self.push(value);
                self.long_bytes += value.len();
                self.long.insert(value.as_bytes().into(), g);
                g
            }
        };
        self.batch_views.insert(view, g);
        g
    }

    fn push(&mut self, value: &str) -> usize {
        let g = self.len();
        self.keys.append_value(value);
        g
    }

    /// The keys of all groups, in group order; the table starts empty again, its memory
    /// released.
    pub(super) fn take(&mut self) -> ArrayRef {
        self.dictionary = None;
        self.short = ViewTable::new(self.seed);
        self.long = HashMap::with_hasher(self.seed);
        self.batch_views = ViewTable::new(self.seed);
        self.null = None;
        self.long_bytes = 0;
        Arc::new(self.keys.finish())
    }

    /// Bytes held, for the query's memory pool.
    pub(super) fn size(&self) -> usize {
        let entry = |k: usize| k + std::mem::size_of::<usize>() + 1;
        let dictionary = self.dictionary.as_ref().map_or(0, |d| {
            d.groups.capacity() * std::mem::size_of::<usize>() + d.views.get_array_memory_size()
        });
        dictionary
            + self.short.size()
            + self.long.capacity() * entry(16)
            + self.batch_views.size()
            + self.long_bytes
            + self.keys.allocated_size()
    }
}

/// The groups of one dictionary's values, by code.
struct DictionaryGroups {
    /// Held so the pointer it is recognised by cannot be reused by another array.
    values: ArrayRef,
    /// The values as string views, for [`KeyGroups::intern`].
    views: ArrayRef,
    /// [`UNSEEN`] until a row uses the value.
    groups: Vec<usize>,
}

const UNSEEN: usize = usize::MAX;
const PENDING: usize = usize::MAX - 1;

/// A dictionary more than this many times its batch's length is looked up row by row.
const DICTIONARY_PER_ROW_LIMIT: usize = 16;

/// For each inline length, the bits of a view that hold the length and the string: equal
/// strings give equal keys whatever a writer left in the padding.
const INLINE_MASKS: [u128; 13] = {
    let mut masks = [u128::MAX; 13];
    let mut len = 0;
    while len < 12 {
        masks[len] = (1u128 << (32 + 8 * len)) - 1;
        len += 1;
    }
    masks
};

/// An open-addressing map from 128-bit keys to group indices, probed linearly and kept at
/// most half full, so a hit is almost always the first slot looked at.
struct ViewTable {
    seed: Seed,
    keys: Vec<u128>,
    /// [`EMPTY`] marks a free slot.
    groups: Vec<usize>,
    len: usize,
}

const EMPTY: usize = usize::MAX;
/// 256 slots: 6 KiB, room for 128 keys before the first growth.
const INITIAL_SLOTS: usize = 256;

impl ViewTable {
    fn new(seed: Seed) -> Self {
        Self {
            seed,
            keys: vec![0; INITIAL_SLOTS],
            groups: vec![EMPTY; INITIAL_SLOTS],
            len: 0,
        }
    }

    #[inline(always)]
    fn slot(&self, key: u128) -> usize {
        // The hash folds its product's halves together, so the low bits used here vary with
        // every bit of the key.
        (self.seed.hash_one(key) as usize) & (self.groups.len() - 1)
    }

    #[inline(always)]
    fn get(&self, key: u128) -> Option<usize> {
        let mask = self.groups.len() - 1;
        let mut slot = self.slot(key);
        loop {
            let g = self.groups[slot];
            if g == EMPTY {
                return None;
            }
            if self.keys[slot] == key {
                return Some(g);
            }
            slot = (slot + 1) & mask;
        }
    }

    /// Adds `key`, which must not be present.
    fn insert(&mut self, key: u128, group: usize) {
        if 2 * (self.len + 1) > self.groups.len() {
            self.grow();
        }
        self.place(key, group);
        self.len += 1;
    }

    fn place(&mut self, key: u128, group: usize) {
        let mask = self.groups.len() - 1;
        let mut slot = self.slot(key);
        while self.groups[slot] != EMPTY {
            slot = (slot + 1) & mask;
        }
        self.keys[slot] = key;
        self.groups[slot] = group;
    }

    fn grow(&mut self) {
        let slots = 2 * self.groups.len();
        let keys = std::mem::replace(&mut self.keys, vec![0; slots]);
        let groups = std::mem::replace(&mut self.groups, vec![EMPTY; slots]);
        for (key, group) in keys.into_iter().zip(groups) {
            if group != EMPTY {
                self.place(key, group);
            }
        }
    }

    fn clear(&mut self) {
        if self.len > 0 {
            self.groups.fill(EMPTY);
            self.len = 0;
        }
    }

    fn size(&self) -> usize {
        self.keys.capacity() * std::mem::size_of::<u128>()
            + self.groups.capacity() * std::mem::size_of::<usize>()
    }
}

/// Builds [`Fold`] hashers from one random seed.
#[derive(Clone, Copy)]
struct Seed(u64);

impl BuildHasher for Seed {
    type Hasher = Fold;

    fn build_hasher(&self) -> Fold {
        Fold(self.0)
    }
}

/// A folded-multiply hash (as in foldhash): a handful of instructions per 8 bytes, and the
/// high and low halves of each product mixed so hashbrown's tag bits and bucket bits both vary.
struct Fold(u64);

const K0: u64 = 0x243f_6a88_85a3_08d3;
const K1: u64 = 0x1319_8a2e_0370_7344;

fn fold_mul(a: u64, b: u64) -> u64 {
    let full = u128::from(a) * u128::from(b);
    (full as u64) ^ ((full >> 64) as u64)
}

impl Hasher for Fold {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let word = u64::from_le_bytes(chunk.try_into().expect("8-byte chunk"));
            self.0 = fold_mul(self.0 ^ word, K0);
        }
        let mut tail = [0u8; 8];
        tail[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
        self.0 = fold_mul(self.0 ^ u64::from_le_bytes(tail), K1 ^ bytes.len() as u64);
    }

    fn write_u128(&mut self, v: u128) {
        self.0 = fold_mul(self.0 ^ (v as u64), K0 ^ ((v >> 64) as u64));
    }

    fn write_usize(&mut self, n: usize) {
        self.0 = fold_mul(self.0 ^ n as u64, K1);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn intern(groups: &mut KeyGroups, values: &[Option<&str>]) -> Vec<usize> {
        let mut out = Vec::new();
        groups.intern(&StringViewArray::from(values.to_vec()), &mut out);
        out
    }

    #[test]
    fn equal_keys_share_a_group_across_batches_and_lengths() {
        let long = "a key longer than twelve bytes";
        let mut groups = KeyGroups::new();
        let first = intern(
            &mut groups,
            &[Some("b"), Some(long), None, Some("b"), Some("")],
        );
        assert_eq!(first, vec![0, 1, 2, 0, 3]);
        let second = intern(
            &mut groups,
            &[Some(""), None, Some(long), Some("c"), Some("b")],
        );
        assert_eq!(second, vec![3, 2, 1, 4, 0]);
        assert_eq!(groups.len(), 5);

        let keys = groups.take();
        let keys = keys.as_any().downcast_ref::<StringViewArray>().unwrap();
        let listed: Vec<_> = keys.iter().collect();
        assert_eq!(
            listed,
            vec![Some("b"), Some(long), None, Some(""), Some("c")]
        );
        assert_eq!(groups.len(), 0);
        assert_eq!(intern(&mut groups, &[Some("c")]), vec![0]);
    }

    #[test]
    fn padding_left_in_an_inline_view_does_not_split_a_group() {
        let clean: u128 = 3 | (u128::from_le_bytes(*b"abc\0\0\0\0\0\0\0\0\0\0\0\0\0") << 32);
        let dirty = clean | (0xff << 100);
        assert_eq!(dirty & INLINE_MASKS[3], clean);
        assert_eq!(clean & INLINE_MASKS[3], clean);
        assert_eq!(dirty & INLINE_MASKS[12], dirty);
    }

    #[test]
    fn thousands_of_keys_grow_the_tables_and_keep_their_groups() {
        // Short and long keys, each seen twice in one batch and again in the next, so both
        // tables grow past their first size while being read.
        let values: Vec<String> = (0..5000)
            .map(|i| match i % 2 {
                0 => format!("k{i}"),
                _ => format!("a long key, number {i:08}"),
            })
            .collect();
        let batch: Vec<Option<&str>> = values
            .iter()
            .chain(&values)
            .map(|v| Some(v.as_str()))
            .collect();
        let mut groups = KeyGroups::new();
        let first = intern(&mut groups, &batch);
        let expected: Vec<usize> = (0..5000).chain(0..5000).collect();
        assert_eq!(first, expected);
        let second = intern(&mut groups, &batch[..5000]);
        assert_eq!(second, (0..5000).collect::<Vec<_>>());
        assert_eq!(groups.len(), 5000);
    }

    #[test]
    fn dictionary_values_become_groups_only_when_a_row_uses_them() {
        use svc_plugin_api::arrow::array::{DictionaryArray, Int32Array, StringArray};
        use svc_plugin_api::arrow::datatypes::Int32Type;

        let values: ArrayRef = Arc::new(StringArray::from(vec!["unused", "b", "a", "later"]));
        let batch = |codes: Vec<Option<i32>>| {
            DictionaryArray::<Int32Type>::try_new(Int32Array::from(codes), Arc::clone(&values))
                .unwrap()
        };
        let mut groups = KeyGroups::new();
        let mut out = Vec::new();
        groups
            .intern_dictionary(&batch(vec![Some(2), None, Some(1), Some(2)]), &mut out)
            .unwrap();
        // The null group comes first: it is made before the batch's values are looked up.
        assert_eq!(out, vec![1, 0, 2, 1]);
        groups
            .intern_dictionary(&batch(vec![Some(3), Some(2)]), &mut out)
            .unwrap();
        assert_eq!(out, vec![3, 1]);
        // An equal dictionary in another array: looked up afresh, same groups.
        let copy = DictionaryArray::<Int32Type>::try_new(
            Int32Array::from(vec![1, 3]),
            Arc::new(StringArray::from(vec!["unused", "b", "a", "later"])),
        )
        .unwrap();
        groups.intern_dictionary(&copy, &mut out).unwrap();
        assert_eq!(out, vec![2, 3]);

        let keys = groups.take();
        let listed: Vec<_> = keys.as_string_view().iter().collect();
        assert_eq!(listed, vec![None, Some("a"), Some("b"), Some("later")]);
    }

    #[test]
    fn long_keys_whose_views_differ_only_by_buffer_are_one_group() {
        // Two arrays holding the same long value in different buffers: the bytes decide.
        let value = "the same long value, twice";
        let mut groups = KeyGroups::new();
        let a = intern(&mut groups, &[Some("x"), Some(value)]);
        let b = intern(&mut groups, &[Some(value)]);
        assert_eq!(a[1], b[0]);
    }
}
