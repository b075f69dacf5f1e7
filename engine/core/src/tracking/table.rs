//! The tracking table (redis `TrackingTable`): key → ids of the clients that may cache it.
//!
//! Every read of a tracking client passes through [`Table::remember`], so the table is shaped
//! for that path (callgrind: ~100 instructions per tracked GET, no allocation once a key is
//! known):
//!
//! - One open-addressing hash table whose buckets hold the key and its ids ([`Slot`], 48
//!   bytes), not an index into a second vector: a lookup touches the control bytes and one
//!   bucket.
//! - Keys up to [`INLINE_KEY`] bytes live in the bucket ([`Key`]): comparing one touches no
//!   other memory, and remembering a new one allocates nothing.
//! - Most keys are cached by one or two clients: up to two ids live in the bucket ([`Ids`]);
//!   more go to a sorted vector, searched in O(log n), so "already tracked by this client"
//!   never scans the clients.
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
}

/// The ids of the clients that may cache one key, each once, ascending (the order Redis's
/// rax gives small ids). 24 bytes; only `Many` allocates.
#[derive(Clone, Debug)]
pub enum Ids {
    One(u64),
    Two([u64; 2]),
    /// Three or more.
    Many(Vec<u64>),
}

impl Ids {
    /// Adds `id`; false when it was there.
    #[inline]
    fn insert(&mut self, id: u64) -> bool {
        match self {
            Ids::One(a) => {
                let a = *a;
                if a == id {
                    return false;
                }
                *self = Ids::Two([a.min(id), a.max(id)]);
            }
            Ids::Two(two) => {
                if two.contains(&id) {
                    return false;
                }
                let mut v = Vec::with_capacity(4);
                v.extend_from_slice(two);
                v.insert(v.partition_point(|&x| x < id), id);
                *self = Ids::Many(v);
            }
            Ids::Many(v) => match v.binary_search(&id) {
                Ok(_) => return false,
                Err(at) => v.insert(at, id),
            },
        }
        true
    }

    pub fn as_slice(&self) -> &[u64] {
        match self {
            Ids::One(a) => std::slice::from_ref(a),
            Ids::Two(two) => two,
            Ids::Many(v) => v,
        }
    }
}

/// One bucket: a key and its clients.
#[derive(Debug)]
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
    #[inline]
    pub fn remember(&mut self, key: &[u8], id: u64) {
        let hash = self.hasher.hash_one(key);
        // A probe, then an insert only for a new key: leaner than `entry` for the usual hit.
        match self.map.find_mut(hash, |s| s.key.as_bytes() == key) {
            Some(s) => {
                if !s.ids.insert(id) {
                    return;
                }
            }
            None => {
                let hasher = &self.hasher;
                let slot = Slot {
                    key: Key::new(key),
                    ids: Ids::One(id),
                };
                self.map
                    .insert_unique(hash, slot, |s| hasher.hash_one(s.key.as_bytes()));
            }
        }
        self.items += 1;
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
        self.items -= slot.ids.as_slice().len() as u64;
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
        self.items -= slot.ids.as_slice().len() as u64;
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
    fn shapes_stay_small() {
        assert_eq!(std::mem::size_of::<Key>(), 24);
        assert_eq!(std::mem::size_of::<Ids>(), 24);
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
        assert_eq!(t.remove(b"k").unwrap().as_slice(), &[1, 3, 5, 7, 9]);
        assert!(t.remove(b"k").is_none());
        assert_eq!(t.remove(&long).unwrap().as_slice(), &[2]);
        assert_eq!((t.len(), t.items()), (0, 0));
        t.remember(b"a", 4);
        t.remember(b"a", 2);
        assert_eq!(t.remove(b"a").unwrap().as_slice(), &[2, 4]);
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
            assert_eq!(ids.as_slice(), &[1]);
            assert!(seen.insert(k.as_bytes().to_vec()));
        }
        assert_eq!((seen.len(), t.items()), (10_000, 0));
        assert!(t.map.num_buckets() <= 64);
    }
}
