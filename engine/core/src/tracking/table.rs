//! The tracking table (redis `TrackingTable`): key → ids of the clients that may cache it.
//!
//! Every read of a tracking client passes through [`Table::remember`], so the table is shaped
//! for that path (callgrind: ~140 instructions per tracked GET, no allocation once a key is
//! known):
//!
//! - One open-addressing hash table whose buckets hold the key and its ids ([`Slot`], 48
//!   bytes in a 64-byte cache line), not an index into a second vector: a lookup touches the
//!   control bytes and one line.
//! - Keys up to [`INLINE_KEY`] bytes live in the bucket ([`Key`]): comparing one touches no
//!   other memory, and remembering a new one allocates nothing.
//! - A key's ids live in the bucket ([`Ids`]) when there are one or two, or when they lie
//!   within 64 of each other (a bitmap: clients connected about the same time have close
//!   ids); only ids further apart go to a sorted vector (binary search). "Already tracked by
//!   this client" never scans the clients.
//! - The hasher is the keyspace's (foldhash seeded with the engine's `hash_seed`).
//!
//! The limit (`tracking-table-max-keys`) needs random keys: [`Table::remove_random`] picks a
//! random bucket and takes the first occupied one from there (Redis's `dictGetRandomKey` is
//! as biased), after shrinking the table if removals left it sparse, so the walk stays short.

use std::hash::BuildHasher;

use foldhash::fast::FixedState;
use hashbrown::HashTable;

/// Keys up to this length are stored in the bucket (a [`Key`] is 24 bytes either way).
pub const INLINE_KEY: usize = 22;

/// A tracked key: in the bucket when short, else on the heap.
#[derive(Clone, Debug)]
pub enum Key {
    Inline(u8, [u8; INLINE_KEY]),
    Heap(Box<[u8]>),
}

impl Key {
    fn new(key: &[u8]) -> Key {
        if key.len() <= INLINE_KEY {
            let mut b = [0; INLINE_KEY];
            b[..key.len()].copy_from_slice(key);
            Key::Inline(key.len() as u8, b)
        } else {
            Key::Heap(key.into())
        }
    }

    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Key::Inline(n, b) => &b[..*n as usize],
            Key::Heap(b) => b,
        }
    }

    /// Whether this is `key`: a short key compared in machine words (the probe of every
    /// tracked read ends here; a call to `memcmp` cost about a tenth of the tracked read).
    #[inline]
    fn is(&self, key: &[u8]) -> bool {
        match self {
            Key::Inline(n, b) => *n as usize == key.len() && short_eq(&b[..key.len()], key),
            Key::Heap(b) => **b == *key,
        }
    }
}

/// `a == b` for slices of equal length up to [`INLINE_KEY`], by overlapping word loads.
#[inline]
fn short_eq(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    debug_assert!(n == b.len() && n <= INLINE_KEY);
    let w8 = |s: &[u8], i: usize| u64::from_le_bytes(s[i..i + 8].try_into().expect("8 bytes"));
    let w4 = |s: &[u8], i: usize| u32::from_le_bytes(s[i..i + 4].try_into().expect("4 bytes"));
    if n >= 8 {
        w8(a, 0) == w8(b, 0) && w8(a, n - 8) == w8(b, n - 8) && (n <= 16 || w8(a, 8) == w8(b, 8))
    } else if n >= 4 {
        w4(a, 0) == w4(b, 0) && w4(a, n - 4) == w4(b, n - 4)
    } else {
        a == b
    }
}

/// The ids of the clients that may cache one key, each once, iterated ascending (the order
/// Redis's rax gives small ids). 24 bytes; only `Many` allocates.
///
/// Clients connected about the same time have close ids (they are given in order), so a
/// key read by many of them is usually a `Window`: a bit per id over 64 ids, in the bucket,
/// where "already tracked by this client" is one bit test. Ids further apart than that go to
/// a sorted vector (binary search).
#[derive(Clone, Debug)]
pub enum Ids {
    One(u64),
    /// Ascending, 64 or more apart.
    Two([u64; 2]),
    /// Ids `base + i` for each bit `i`; bit 0 is set.
    Window {
        base: u64,
        bits: u64,
    },
    /// Ascending; three or more that no window holds.
    Many(Vec<u64>),
}

impl Ids {
    /// Adds `id`; false when it was there.
    #[inline]
    fn insert(&mut self, id: u64) -> bool {
        match self {
            Ids::Window { base, bits } if id >= *base && id - *base < 64 => {
                let bit = 1u64 << (id - *base);
                if *bits & bit != 0 {
                    return false;
                }
                *bits |= bit;
                return true;
            }
            Ids::One(a) if *a == id => return false,
            Ids::Two(two) if two.contains(&id) => return false,
            Ids::Many(v) => return insert_many(v, id),
            _ => {}
        }
        self.insert_slow(id);
        true
    }

    /// Adds an `id` not there that the current shape cannot take.
    #[inline(never)]
    fn insert_slow(&mut self, id: u64) {
        let (lo, hi) = match self {
            Ids::One(a) => ((*a).min(id), (*a).max(id)),
            Ids::Two([a, b]) => (id.min(*a), id.max(*b)),
            Ids::Window { base, bits } => (
                id.min(*base),
                id.max(*base + 63 - u64::from(bits.leading_zeros())),
            ),
            Ids::Many(_) => unreachable!("Many takes every id"),
        };
        if hi - lo < 64 {
            let mut bits = 1u64 << (id - lo);
            for old in self.iter() {
                bits |= 1 << (old - lo);
            }
            *self = Ids::Window { base: lo, bits };
        } else if let Ids::One(a) = *self {
            *self = Ids::Two([lo, hi]);
            debug_assert!(a == lo || a == hi);
        } else {
            let mut v: Vec<u64> = Vec::with_capacity(self.len() + 4);
            v.extend(self.iter());
            v.insert(v.partition_point(|&x| x < id), id);
            *self = Ids::Many(v);
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Ids::One(_) => 1,
            Ids::Two(_) => 2,
            Ids::Window { bits, .. } => bits.count_ones() as usize,
            Ids::Many(v) => v.len(),
        }
    }

    /// The ids, ascending.
    pub fn iter(&self) -> IdsIter<'_> {
        let (list, base, bits): (&[u64], u64, u64) = match self {
            Ids::One(a) => (std::slice::from_ref(a), 0, 0),
            Ids::Two(two) => (two, 0, 0),
            Ids::Window { base, bits } => (&[], *base, *bits),
            Ids::Many(v) => (v, 0, 0),
        };
        IdsIter {
            list: list.iter(),
            base,
            bits,
        }
    }
}

/// [`Ids::insert`] into a vector (out of line: the tracked read's code stays small enough for
/// the instruction cache, see [`Table::remember`]).
#[inline(never)]
fn insert_many(v: &mut Vec<u64>, id: u64) -> bool {
    match v.binary_search(&id) {
        Ok(_) => false,
        Err(at) => {
            v.insert(at, id);
            true
        }
    }
}

/// [`Ids::iter`].
pub struct IdsIter<'a> {
    list: std::slice::Iter<'a, u64>,
    base: u64,
    bits: u64,
}

impl Iterator for IdsIter<'_> {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        if self.bits != 0 {
            let i = self.bits.trailing_zeros();
            self.bits &= self.bits - 1;
            return Some(self.base + u64::from(i));
        }
        self.list.next().copied()
    }
}

/// One bucket: a key and its clients. Aligned to a cache line, so a probe reads one line, not
/// two (48-byte buckets straddle lines half the time: callgrind's cache simulation of a tracked
/// GET over 100,000 keys, 7.9 → 7.5 D1 read misses per GET; 16 more bytes per tracked key).
#[derive(Debug)]
#[repr(align(64))]
struct Slot {
    key: Key,
    ids: Ids,
}

/// See the module docs.
#[derive(Debug)]
pub struct Table {
    map: HashTable<Slot>,
    hasher: FixedState,
    /// Ids over all keys (redis `TrackingTableTotalItems`).
    items: u64,
}

impl Table {
    /// Empty; `seed` keys the hasher (the engine's `hash_seed`).
    pub fn new(seed: u64) -> Table {
        Table {
            map: HashTable::new(),
            hasher: FixedState::with_seed(seed),
            items: 0,
        }
    }

    /// Keys.
    #[inline]
    pub fn len(&self) -> usize {
        self.map.len()
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Client ids over all keys.
    #[inline]
    pub fn items(&self) -> u64 {
        self.items
    }

    /// `id` may cache `key` from now on (redis `trackingRememberKeys`, one key).
    ///
    /// Every tracked read runs this, so only the probe and the bit test are inline: a new key
    /// and an id outside the key's window go out of line. The code of a request's whole path
    /// is close to what the instruction cache holds (callgrind's cache simulation of this
    /// host's 32 KiB L1i: 0 misses per untracked GET, 9–13 per tracked GET before this split).
    #[inline]
    pub fn remember(&mut self, key: &[u8], id: u64) {
        let hash = self.hasher.hash_one(key);
        // A probe, then an insert only for a new key: leaner than `entry` for the usual hit.
        match self.map.find_mut(hash, |s| s.key.is(key)) {
            Some(s) => {
                if !s.ids.insert(id) {
                    return;
                }
            }
            None => self.insert_new(hash, key, id),
        }
        self.items += 1;
    }

    /// [`Self::remember`] of a key not in the table.
    #[cold]
    #[inline(never)]
    fn insert_new(&mut self, hash: u64, key: &[u8], id: u64) {
        let hasher = &self.hasher;
        let slot = Slot {
            key: Key::new(key),
            ids: Ids::One(id),
        };
        self.map
            .insert_unique(hash, slot, |s| hasher.hash_one(s.key.as_bytes()));
    }

    /// Forgets `key`, returning its ids.
    pub fn remove(&mut self, key: &[u8]) -> Option<Ids> {
        if self.map.is_empty() {
            return None;
        }
        let hash = self.hasher.hash_one(key);
        let slot = self
            .map
            .find_entry(hash, |s| s.key.as_bytes() == key)
            .ok()?
            .remove()
            .0;
        self.items -= slot.ids.len() as u64;
        Some(slot.ids)
    }

    /// Forgets a random key (`r`: a random number), returning it and its ids.
    pub fn remove_random(&mut self, r: u64) -> Option<(Key, Ids)> {
        if self.map.is_empty() {
            return None;
        }
        // Removals never shrink a hash table; a sparse one would make the walk below long.
        if self.map.len() * 8 < self.map.num_buckets() && self.map.num_buckets() > 64 {
            let hasher = &self.hasher;
            self.map
                .shrink_to(self.map.len(), |s| hasher.hash_one(s.key.as_bytes()));
        }
        let n = self.map.num_buckets();
        let start = (r % n as u64) as usize;
        let at = (start..n)
            .chain(0..start)
            .find(|&i| self.map.get_bucket(i).is_some())?;
        let slot = self.map.get_bucket_entry(at).ok()?.remove().0;
        self.items -= slot.ids.len() as u64;
        Some((slot.key, slot.ids))
    }

    /// Forgets every key and frees the memory.
    pub fn clear(&mut self) {
        self.map = HashTable::new();
        self.items = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_keys_compare_by_content() {
        let keys: Vec<Vec<u8>> = (0..=INLINE_KEY + 2)
            .map(|n| (0..n).map(|i| b'a' + (i % 26) as u8).collect())
            .collect();
        for a in &keys {
            let stored = Key::new(a);
            for b in &keys {
                assert_eq!(stored.is(b), a == b, "{a:?} {b:?}");
            }
            // One byte changed anywhere makes it another key.
            for i in 0..a.len() {
                let mut c = a.clone();
                c[i] ^= 1;
                assert!(!stored.is(&c), "{a:?} byte {i}");
            }
        }
    }

    #[test]
    fn shapes_stay_small() {
        assert_eq!(std::mem::size_of::<Key>(), 24);
        assert_eq!(std::mem::size_of::<Ids>(), 24);
        assert_eq!(std::mem::size_of::<Slot>(), 64);
        assert_eq!(std::mem::align_of::<Slot>(), 64);
    }

    fn ids(ids: Option<Ids>) -> Vec<u64> {
        ids.expect("tracked").iter().collect()
    }

    /// Every shape and move between them: windows grow either way, far ids leave them.
    #[test]
    fn ids_take_every_shape() {
        let mut t = Table::new(7);
        for id in [100, 100, 150, 90, 153, 90, 100] {
            t.remember(b"w", id);
        }
        assert_eq!(t.items(), 4);
        let got = t.remove(b"w").unwrap();
        assert!(matches!(got, Ids::Window { base: 90, .. }));
        assert_eq!(got.iter().collect::<Vec<_>>(), [90, 100, 150, 153]);
        let mut seq = vec![];
        for id in [500, 1, 400, 2, 3, 400, 1000, 1] {
            t.remember(b"m", id);
            if !seq.contains(&id) {
                seq.push(id);
            }
        }
        seq.sort();
        assert_eq!(t.items(), seq.len() as u64);
        assert_eq!(ids(t.remove(b"m")), seq);
        // Two far apart, then a third near one of them: a vector.
        for id in [7, 7000, 8] {
            t.remember(b"f", id);
        }
        assert!(matches!(t.remove(b"f"), Some(Ids::Many(v)) if v == [7, 8, 7000]));
        // A window shifts down as far as its top allows, then gives way.
        for id in [200, 263, 137] {
            t.remember(b"s", id);
        }
        assert_eq!(ids(t.remove(b"s")), [137, 200, 263]);
        for id in [u64::MAX, u64::MAX - 63, 0] {
            t.remember(b"e", id);
        }
        assert_eq!(ids(t.remove(b"e")), [0, u64::MAX - 63, u64::MAX]);
        assert_eq!(t.items(), 0);
    }

    #[test]
    fn ids_stay_sorted_and_unique() {
        let mut t = Table::new(7);
        for id in [5, 3, 5, 9, 1, 3, 7] {
            t.remember(b"k", id);
        }
        assert_eq!((t.len(), t.items()), (1, 5));
        let long = [b'x'; 40];
        t.remember(&long, 2);
        t.remember(&long, 2);
        assert_eq!((t.len(), t.items()), (2, 6));
        assert_eq!(ids(t.remove(b"k")), [1, 3, 5, 7, 9]);
        assert!(t.remove(b"k").is_none());
        assert_eq!(ids(t.remove(&long)), [2]);
        assert_eq!((t.len(), t.items()), (0, 0));
        t.remember(b"a", 4);
        t.remember(b"a", 2);
        assert_eq!(ids(t.remove(b"a")), [2, 4]);
    }

    #[test]
    fn random_removal_empties_a_sparse_table() {
        let mut t = Table::new(7);
        for i in 0..10_000u32 {
            t.remember(&i.to_le_bytes(), 1);
        }
        let mut seen = std::collections::HashSet::new();
        let mut r = 12345u64;
        while let Some((k, ids)) = t.remove_random(r) {
            r = r
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            assert_eq!(ids.iter().collect::<Vec<_>>(), [1]);
            assert!(seen.insert(k.as_bytes().to_vec()));
        }
        assert_eq!((seen.len(), t.items()), (10_000, 0));
        assert!(t.map.num_buckets() <= 64);
    }
}
