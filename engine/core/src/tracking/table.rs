//! The tracking table (redis `TrackingTable`): key → ids of the clients that may cache it.
//!
//! Every read of a tracking client passes through [`Table::remember`], so the table is shaped
//! for that path (callgrind: ~140 instructions per tracked GET, no allocation once a key is
//! known):
//!
//! - One array of buckets, each a cache line holding the key's hash, the key and its ids
//!   ([`Bucket`]), probed linearly from the hash's home bucket. A lookup reads the home
//!   line and, now and then, the next one; a hash table with separate control bytes
//!   (hashbrown) reads a control line and a bucket line, two cache misses per tracked read of
//!   a cold key where the table is larger than the caches (`scripts/bench-tracking.sh`, cold).
//!   The load stays at most one half, so a successful lookup reads ~1.3 buckets on average
//!   (Knuth's ½(1 + 1/(1 − α)) at α ≤ ½), at the price of 2–4 buckets (128–256 bytes) per
//!   tracked key; the keys are bounded by `tracking-table-max-keys`.
//! - [`Table::touch`] reads a key's home bucket before the command runs, so that its cache
//!   miss overlaps the keyspace's own lookup instead of following it.
//! - Keys up to [`INLINE_KEY`] bytes live in the bucket ([`Key`]): comparing one touches no
//!   other memory, and remembering a new one allocates nothing.
//! - A key's ids live in the bucket ([`Ids`]) when there are one or two, or when they lie
//!   within 64 of each other (a bitmap: clients connected about the same time have close
//!   ids); only ids further apart go to a sorted vector (binary search). "Already tracked by
//!   this client" never scans the clients.
//! - The hasher is the keyspace's (foldhash seeded with the engine's `hash_seed`); hash 0
//!   marks an empty bucket (a key hashing to 0 is stored as 1).
//! - Removal shifts the following entries back (no tombstones), so lookups of absent keys
//!   stop at the first empty bucket whatever the history.
//!
//! The limit (`tracking-table-max-keys`) needs random keys: [`Table::remove_random`] picks a
//! random bucket and takes the first occupied one from there (Redis's `dictGetRandomKey` is
//! as biased), after shrinking the table if removals left it sparse, so the walk stays short.

use std::hash::BuildHasher;

use foldhash::fast::FixedState;

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

/// One bucket: a key's hash (0: empty), the key and its clients. Aligned to a cache line, so
/// a probe reads one line, not two.
#[derive(Debug)]
#[repr(align(64))]
struct Bucket {
    hash: u64,
    key: Key,
    ids: Ids,
}

impl Bucket {
    fn empty() -> Bucket {
        Bucket {
            hash: 0,
            key: Key::Inline(0, [0; INLINE_KEY]),
            ids: Ids::One(0),
        }
    }
}

/// Fewest buckets of a table that holds anything.
const MIN_BUCKETS: usize = 16;

/// See the module docs.
#[derive(Debug)]
pub struct Table {
    /// A power of two long (or empty).
    buckets: Vec<Bucket>,
    /// Occupied buckets.
    len: usize,
    hasher: FixedState,
    /// Ids over all keys (redis `TrackingTableTotalItems`).
    items: u64,
}

impl Table {
    /// Empty; `seed` keys the hasher (the engine's `hash_seed`).
    pub fn new(seed: u64) -> Table {
        Table {
            buckets: Vec::new(),
            len: 0,
            hasher: FixedState::with_seed(seed),
            items: 0,
        }
    }

    /// Keys.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Client ids over all keys.
    #[inline]
    pub fn items(&self) -> u64 {
        self.items
    }

    /// `key`'s hash in this table (the same for the table's whole life: the hasher's seed is
    /// fixed), for [`Self::touch`] and [`Self::remember_hashed`].
    #[inline]
    pub fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key).max(1)
    }

    #[inline]
    fn mask(&self) -> usize {
        self.buckets.len().wrapping_sub(1)
    }

    /// The bucket holding `key` (of `hash`).
    #[inline]
    fn find(&self, hash: u64, key: &[u8]) -> Option<usize> {
        if self.buckets.is_empty() {
            return None;
        }
        let mask = self.mask();
        let mut i = hash as usize & mask;
        loop {
            let b = &self.buckets[i];
            if b.hash == hash && b.key.is(key) {
                return Some(i);
            }
            if b.hash == 0 {
                return None;
            }
            i = (i + 1) & mask;
        }
    }

    /// Reads the home bucket of the key of `hash` and returns a word of it, for
    /// `std::hint::black_box`: a tracking client's read calls this before the command runs,
    /// so that the bucket's cache miss overlaps the keyspace lookup and [`Self::remember`]
    /// finds the line in the cache.
    #[inline]
    pub fn touch(&self, hash: u64) -> u64 {
        if self.buckets.is_empty() {
            return 0;
        }
        self.buckets[hash as usize & self.mask()].hash
    }

    /// `id` may cache `key` from now on (redis `trackingRememberKeys`, one key).
    ///
    /// Every tracked read runs this, so only the probe and the bit test are inline: a new key
    /// and an id outside the key's window go out of line. The code of a request's whole path
    /// is close to what the instruction cache holds (callgrind's cache simulation of this
    /// host's 32 KiB L1i: 0 misses per untracked GET, 9–13 per tracked GET before this split).
    #[inline]
    pub fn remember(&mut self, key: &[u8], id: u64) {
        self.remember_hashed(self.hash(key), key, id);
    }

    /// [`Self::remember`] of a key whose [`Self::hash`] is known.
    #[inline]
    pub fn remember_hashed(&mut self, hash: u64, key: &[u8], id: u64) {
        debug_assert_eq!(hash, self.hash(key));
        match self.find(hash, key) {
            Some(i) => {
                if !self.buckets[i].ids.insert(id) {
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
        // At most half full (see the module docs).
        if (self.len + 1) * 2 > self.buckets.len() {
            self.resize((self.buckets.len() * 2).max(MIN_BUCKETS));
        }
        self.place(Bucket {
            hash,
            key: Key::new(key),
            ids: Ids::One(id),
        });
        self.len += 1;
    }

    /// Puts `b` (a key not in the table) in the first empty bucket from its home.
    fn place(&mut self, b: Bucket) {
        let mask = self.mask();
        let mut i = b.hash as usize & mask;
        while self.buckets[i].hash != 0 {
            i = (i + 1) & mask;
        }
        self.buckets[i] = b;
    }

    /// Moves every entry to a table of `n` buckets (a power of two above twice the keys).
    fn resize(&mut self, n: usize) {
        debug_assert!(n.is_power_of_two() && n >= self.len * 2);
        let old = std::mem::replace(&mut self.buckets, (0..n).map(|_| Bucket::empty()).collect());
        for b in old {
            if b.hash != 0 {
                self.place(b);
            }
        }
    }

    /// Empties bucket `i`, returning its entry; the entries after it that may live closer to
    /// their home move back (backward-shift deletion, so no lookup ever needs a tombstone).
    fn take(&mut self, i: usize) -> Bucket {
        let out = std::mem::replace(&mut self.buckets[i], Bucket::empty());
        self.len -= 1;
        self.items -= out.ids.len() as u64;
        let mask = self.mask();
        let mut hole = i;
        let mut j = (i + 1) & mask;
        while self.buckets[j].hash != 0 {
            let home = self.buckets[j].hash as usize & mask;
            // The entry may fill the hole when the hole lies between its home and it.
            if (j.wrapping_sub(home) & mask) >= (j.wrapping_sub(hole) & mask) {
                self.buckets.swap(hole, j);
                hole = j;
            }
            j = (j + 1) & mask;
        }
        out
    }

    /// Forgets `key`, returning its ids.
    pub fn remove(&mut self, key: &[u8]) -> Option<Ids> {
        if self.len == 0 {
            return None;
        }
        let i = self.find(self.hash(key), key)?;
        Some(self.take(i).ids)
    }

    /// Forgets a random key (`r`: a random number), returning it and its ids.
    pub fn remove_random(&mut self, r: u64) -> Option<(Key, Ids)> {
        if self.len == 0 {
            return None;
        }
        // Removals never shrink the table; a sparse one would make the walk below long.
        if self.len * 8 < self.buckets.len() && self.buckets.len() > 64 {
            self.resize((self.len * 2).next_power_of_two().max(MIN_BUCKETS));
        }
        let n = self.buckets.len();
        let start = (r % n as u64) as usize;
        let at = (start..n)
            .chain(0..start)
            .find(|&i| self.buckets[i].hash != 0)?;
        let b = self.take(at);
        Some((b.key, b.ids))
    }

    /// Forgets every key and frees the memory.
    pub fn clear(&mut self) {
        self.buckets = Vec::new();
        self.len = 0;
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
        assert_eq!(std::mem::size_of::<Bucket>(), 64);
        assert_eq!(std::mem::align_of::<Bucket>(), 64);
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
        assert!(t.buckets.len() <= 64);
    }

    /// Random remembers and removals (plain and random) against a model: backward-shift
    /// deletion keeps every key findable, whatever collides with what.
    #[test]
    fn matches_a_model_under_churn() {
        use std::collections::BTreeMap;
        let mut t = Table::new(99);
        let mut model: BTreeMap<Vec<u8>, Vec<u64>> = BTreeMap::new();
        let mut r = 0x9e3779b97f4a7c15u64;
        let mut next = || {
            r ^= r << 13;
            r ^= r >> 7;
            r ^= r << 17;
            r
        };
        for step in 0..60_000 {
            let n = next();
            // Few distinct keys, so the table grows, empties and collides often.
            let key = format!("k{}", n % 700).into_bytes();
            match n >> 60 {
                0..=9 => {
                    let id = (n >> 20) % 5;
                    t.remember(&key, id);
                    let ids = model.entry(key).or_default();
                    if !ids.contains(&id) {
                        ids.push(id);
                        ids.sort();
                    }
                }
                10..=13 => {
                    let got = t.remove(&key).map(|i| i.iter().collect::<Vec<_>>());
                    assert_eq!(got, model.remove(&key), "step {step}");
                }
                _ => {
                    if let Some((k, ids)) = t.remove_random(next()) {
                        let want = model.remove(k.as_bytes()).expect("a key of the model");
                        assert_eq!(ids.iter().collect::<Vec<_>>(), want, "step {step}");
                    }
                }
            }
            assert_eq!(t.len(), model.len());
            assert_eq!(
                t.items(),
                model.values().map(|v| v.len() as u64).sum::<u64>()
            );
        }
        for (k, ids) in model {
            assert_eq!(
                t.remove(&k).map(|i| i.iter().collect::<Vec<_>>()),
                Some(ids)
            );
        }
        assert!(t.is_empty());
    }
}
