//! The group table of a string-keyed aggregation: each distinct key gets a dense group
//! index, in order of first appearance.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};

use svc_plugin_api::arrow::array::{
    Array, ArrayBuilder, ArrayRef, StringViewArray, StringViewBuilder,
};

/// Distinct string keys and their group indices.
///
/// A string view of at most 12 bytes holds the whole string in its 128 bits, so such keys are
/// looked up by that integer alone, first in a direct-mapped cache (one multiply, one load,
/// one compare: low-cardinality `GROUP BY category` rarely gets further), then in a map.
/// Longer keys are looked up by their bytes, behind a per-batch cache keyed by the view itself: parquet dictionary pages decode to views that share one copy of each value, so
/// within a batch a repeated key repeats its view and its bytes are hashed once per batch.
pub(super) struct KeyGroups {
    seed: Seed,
    short: HashMap<u128, usize, Seed>,
    recent: Vec<(u128, usize)>,
    long: HashMap<Box<[u8]>, usize, Seed>,
    batch_views: HashMap<u128, usize, Seed>,
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
            short: HashMap::with_hasher(seed),
            recent: vec![(0, usize::MAX); 1 << RECENT_BITS],
            long: HashMap::with_hasher(seed),
            batch_views: HashMap::with_hasher(seed),
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
        out.reserve(keys.len());
        self.batch_views.clear();
        let views = keys.views();
        for (i, &view) in views.iter().enumerate() {
            let group = if keys.is_null(i) {
                self.null_group()
            } else if view as u32 <= 12 {
                self.short_group(inline_key(view), keys, i)
            } else {
                self.long_group(view, keys, i)
            };
            out.push(group);
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

    fn short_group(&mut self, key: u128, keys: &StringViewArray, row: usize) -> usize {
        let slot = (self.seed.hash_one(key) >> (64 - RECENT_BITS)) as usize;
        let (recent_key, recent_group) = self.recent[slot];
        if recent_key == key && recent_group != usize::MAX {
            return recent_group;
        }
        let g = match self.short.get(&key) {
            Some(&g) => g,
            None => {
                let g = self.push(keys.value(row));
                self.short.insert(key, g);
                g
            }
        };
        self.recent[slot] = (key, g);
        g
    }

    fn long_group(&mut self, view: u128, keys: &StringViewArray, row: usize) -> usize {
        if let Some(&g) = self.batch_views.get(&view) {
            return g;
        }
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
        self.short = HashMap::with_hasher(self.seed);
        self.recent.fill((0, usize::MAX));
        self.long = HashMap::with_hasher(self.seed);
        self.batch_views = HashMap::with_hasher(self.seed);
        self.null = None;
        self.long_bytes = 0;
        std::sync::Arc::new(self.keys.finish())
    }

    /// Bytes held, for the query's memory pool.
    pub(super) fn size(&self) -> usize {
        let entry = |k: usize| k + std::mem::size_of::<usize>() + 1;
        self.short.capacity() * entry(16)
            + self.long.capacity() * entry(16)
            + self.batch_views.capacity() * entry(16)
            + self.recent.len() * std::mem::size_of::<(u128, usize)>()
            + self.long_bytes
            + self.keys.allocated_size()
    }
}

/// Slots of the direct-mapped cache of recent short keys: 32 KiB, and few collisions among a
/// low-cardinality column's keys.
const RECENT_BITS: u32 = 10;

/// An inline view with the bytes past the string's length cleared, so equal strings give
/// equal keys whatever a writer left in the padding.
fn inline_key(view: u128) -> u128 {
    let len = view as u32;
    if len == 12 {
        view
    } else {
        view & ((1u128 << (32 + 8 * len)) - 1)
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
        assert_eq!(inline_key(dirty), clean);
        assert_eq!(inline_key(clean), clean);
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
