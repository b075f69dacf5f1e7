//! The keyspace's table: key → value, with each key's access word and optional expiry, packed
//! for a small footprint per key (issue 16: 1M keys of 64-byte strings in ≤ 0.8× redis-server's
//! RSS).
//!
//! # Shape
//! - `slots`: a dense vector of [`Slot`]s (key + value), positions `0..len`. Random sampling is
//!   O(1) (RANDOMKEY, eviction) and SCAN's cursor counts positions (see `keyspace.rs`).
//!   Deletion is `swap_remove`: the last slot moves into the hole.
//! - `index`: a [`HashTable`] of `u32` positions (4 bytes + 1 control byte per bucket), probed
//!   with the key's seeded foldhash. The hash is not stored: growing the index hashes every key
//!   again, as Redis's incremental rehash does (`dictRehash` calls the hash function per entry).
//! - `expires`: the absolute expiry of each position (Unix ms), a vector parallel to `slots`,
//!   allocated when the table's first TTL is set (a keyspace without TTLs pays nothing). A slot
//!   carries a flag bit saying it has a TTL, so a lookup of a persistent key never reads
//!   `expires`, and a lookup of a volatile one reads one 8-byte word (one cache miss, as
//!   Redis's `expires` dict costs at least one).
//! - `volatile`: the positions of the keys with a TTL, dense (in chunks, as `slots`, so that
//!   1,000,000 TTLs do not copy 4 MB in one insert), for the active expiry sampler
//!   (Redis's separate `expires` dict serves it the same way); `vindex` finds a position's
//!   volatile entry, needed only when a TTL is removed or its key moves.
//!
//! # A slot (48 bytes)
//! The key is stored in the slot when it is at most [`INLINE`] bytes (no allocation, and a
//! lookup compares it without following a pointer), else in a boxed slice. Either way the key's
//! 24 bytes also hold the 32-bit access word (LRU clock or LFU counter, `crate::evict`) and the
//! volatile flag, in bytes the enum's layout leaves free; the value is a [`Value`] (24 bytes).
//! Per key that is 48 bytes and ~5–10 bytes of index (8 more of `expires` once any key has a
//! TTL, and ~12 of `volatile`/`vindex` for a key with one), against IndexMap's 64 and 9–18 with
//! a stored hash, a separate key allocation, an 8-byte expiry and a 4-byte volatile position.

use std::hash::BuildHasher;

use foldhash::fast::FixedState;

use crate::chunked::Chunked;
use crate::position_index::PositionIndex;
use crate::types::Value;

/// Longest key stored inside its slot.
pub const INLINE: usize = 18;

/// [`Stored`]'s flag bit: the key has an entry in `volatile`.
const VOLATILE: u8 = 0x80;
/// Inline length bits of `Stored::Inline::len_flags`.
const LEN_MASK: u8 = 0x1f;

/// A key with its access word and flags (24 bytes: the fields are byte arrays so the compiler
/// packs both variants behind a one-byte tag).
#[derive(Clone, Debug)]
enum Stored {
    Inline {
        len_flags: u8,
        meta: [u8; 4],
        bytes: [u8; INLINE],
    },
    Heap {
        flags: u8,
        meta: [u8; 4],
        bytes: Box<[u8]>,
    },
}

// The footprint per key depends on these (64-bit servers; wasm32's pointers are smaller).
#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<Stored>() == 24);
#[cfg(target_pointer_width = "64")]
const _: () = assert!(std::mem::size_of::<Slot>() == 48);

impl Stored {
    fn new(key: &[u8], access: u32) -> Stored {
        let meta = access.to_le_bytes();
        if key.len() <= INLINE {
            let mut bytes = [0u8; INLINE];
            bytes[..key.len()].copy_from_slice(key);
            Stored::Inline {
                len_flags: key.len() as u8,
                meta,
                bytes,
            }
        } else {
            Stored::Heap {
                flags: 0,
                meta,
                bytes: key.into(),
            }
        }
    }

    #[inline]
    fn key(&self) -> &[u8] {
        match self {
            Stored::Inline {
                len_flags, bytes, ..
            } => &bytes[..(len_flags & LEN_MASK) as usize],
            Stored::Heap { bytes, .. } => bytes,
        }
    }

    #[inline]
    fn meta(&self) -> u32 {
        match self {
            Stored::Inline { meta, .. } | Stored::Heap { meta, .. } => u32::from_le_bytes(*meta),
        }
    }

    #[inline]
    fn set_meta(&mut self, word: u32) {
        match self {
            Stored::Inline { meta, .. } | Stored::Heap { meta, .. } => *meta = word.to_le_bytes(),
        }
    }

    #[inline]
    fn flags(&self) -> u8 {
        match self {
            Stored::Inline { len_flags, .. } => *len_flags & !LEN_MASK,
            Stored::Heap { flags, .. } => *flags,
        }
    }

    #[inline]
    fn set_volatile(&mut self, on: bool) {
        let f = match self {
            Stored::Inline { len_flags, .. } => len_flags,
            Stored::Heap { flags, .. } => flags,
        };
        if on {
            *f |= VOLATILE;
        } else {
            *f &= !VOLATILE;
        }
    }
}

/// A key and its value (see the module doc, *A slot*).
#[derive(Clone, Debug)]
pub struct Slot {
    key: Stored,
    value: Value,
}

impl Slot {
    pub fn key(&self) -> &[u8] {
        self.key.key()
    }

    pub fn value(&self) -> &Value {
        &self.value
    }
}

/// A removed key, as it was stored (no copy: a short key stays in these 24 bytes).
#[derive(Clone, Debug)]
pub struct Key(Stored);

impl std::ops::Deref for Key {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.0.key()
    }
}

/// What a removed slot held.
pub struct Removed {
    pub key: Key,
    pub value: Value,
    pub expire_at: Option<u64>,
    pub access: u32,
}

/// See the module doc.
#[derive(Clone)]
pub struct KeyTable {
    slots: Chunked<Slot>,
    index: PositionIndex,
    /// Empty, or one entry per slot (see the module doc).
    expires: Chunked<u64>,
    volatile: Chunked<u32>,
    vindex: PositionIndex,
    hasher: FixedState,
}

impl KeyTable {
    /// An empty table whose key hashes are keyed by `seed`.
    pub fn with_seed(seed: u64) -> KeyTable {
        KeyTable {
            slots: Chunked::new(),
            index: PositionIndex::new(),
            expires: Chunked::new(),
            volatile: Chunked::new(),
            vindex: PositionIndex::new(),
            hasher: FixedState::with_seed(seed),
        }
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The key's seeded hash (also its identity for the eviction pool).
    #[inline]
    pub fn hash_key(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    #[inline]
    fn hash_pos(&self, pos: u32) -> u64 {
        self.hasher.hash_one(pos)
    }

    /// Position of `key`.
    #[inline]
    pub fn find(&self, key: &[u8]) -> Option<usize> {
        let h = self.hash_key(key);
        let slots = &self.slots;
        self.index
            .find(h, |&i| slots[i as usize].key.key() == key)
            .map(|&i| i as usize)
    }

    pub fn slot(&self, i: usize) -> &Slot {
        &self.slots[i]
    }

    #[inline]
    pub fn key(&self, i: usize) -> &[u8] {
        self.slots[i].key.key()
    }

    #[inline]
    pub fn value(&self, i: usize) -> &Value {
        &self.slots[i].value
    }

    #[inline]
    pub fn value_mut(&mut self, i: usize) -> &mut Value {
        &mut self.slots[i].value
    }

    #[inline]
    pub fn access(&self, i: usize) -> u32 {
        self.slots[i].key.meta()
    }

    #[inline]
    pub fn set_access(&mut self, i: usize, word: u32) {
        self.slots[i].key.set_meta(word)
    }

    #[inline]
    pub fn has_expire(&self, i: usize) -> bool {
        self.slots[i].key.flags() & VOLATILE != 0
    }

    /// The `volatile` index of position `i`, which has a TTL.
    fn vpos(&self, i: usize) -> usize {
        let volatile = &self.volatile;
        *self
            .vindex
            .find(self.hash_pos(i as u32), |&v| {
                volatile[v as usize] == i as u32
            })
            .expect("a volatile slot has a volatile entry") as usize
    }

    /// Absolute expiry (Unix ms) of the key at `i`.
    #[inline]
    pub fn expire_at(&self, i: usize) -> Option<u64> {
        if self.has_expire(i) {
            Some(self.expires[i])
        } else {
            None
        }
    }

    /// Inserts `key`, which must be absent (a lookup just said so), with no TTL. Returns its
    /// position.
    pub fn insert_new(&mut self, key: &[u8], value: Value, access: u32) -> usize {
        let h = self.hash_key(key);
        let i = self.next_position();
        let (slots, hasher) = (&self.slots, &self.hasher);
        self.index.insert_unique(h, i as u32, |&j| {
            hasher.hash_one(slots[j as usize].key.key())
        });
        self.push_slot(key, value, access)
    }

    /// Inserts `key` with no TTL unless it is present, with one hash and one probe (snapshot
    /// loads are bound by these cache misses). Returns its position, or `None` if present.
    pub fn insert_if_absent(&mut self, key: &[u8], value: Value, access: u32) -> Option<usize> {
        let h = self.hash_key(key);
        let i = self.next_position();
        let (slots, hasher) = (&self.slots, &self.hasher);
        let inserted = self.index.insert_if_absent(
            h,
            i as u32,
            |&j| slots[j as usize].key.key() == key,
            |&j| hasher.hash_one(slots[j as usize].key.key()),
        );
        inserted.then(|| self.push_slot(key, value, access))
    }

    fn next_position(&self) -> usize {
        let i = self.slots.len();
        assert!(
            i < u32::MAX as usize,
            "a keyspace holds fewer than 2^32 keys"
        );
        i
    }

    /// Appends the slot an index bucket already names.
    fn push_slot(&mut self, key: &[u8], value: Value, access: u32) -> usize {
        self.slots.push(Slot {
            key: Stored::new(key, access),
            value,
        });
        if !self.expires.is_empty() {
            self.expires.push(0);
        }
        self.slots.len() - 1
    }

    /// Sets the expiry of position `i`; returns whether it had none before.
    pub fn set_expire(&mut self, i: usize, at: u64) -> bool {
        if self.expires.is_empty() {
            // The first TTL: from now on `expires` runs parallel to `slots`.
            self.expires = Chunked::from_elem(0, self.slots.len());
        }
        self.expires[i] = at;
        if self.has_expire(i) {
            return false;
        }
        let v = self.volatile.len() as u32;
        self.volatile.push(i as u32);
        let (volatile, hasher) = (&self.volatile, &self.hasher);
        self.vindex
            .insert_unique(hasher.hash_one(i as u32), v, |&w| {
                hasher.hash_one(volatile[w as usize])
            });
        self.slots[i].key.set_volatile(true);
        true
    }

    /// Removes the expiry of position `i`; returns it if there was one.
    pub fn clear_expire(&mut self, i: usize) -> Option<u64> {
        if !self.has_expire(i) {
            return None;
        }
        self.slots[i].key.set_volatile(false);
        let v = self.vpos(i);
        self.volatile_remove(v);
        Some(self.expires[i])
    }

    /// Removes volatile entry `v` (its slot's flag is the caller's business).
    fn volatile_remove(&mut self, v: usize) {
        let h = self.hash_pos(self.volatile[v]);
        let (volatile, hasher) = (&self.volatile, &self.hasher);
        let removed = self.vindex.remove(
            h,
            |&w| w as usize == v,
            |&w| hasher.hash_one(volatile[w as usize]),
        );
        assert!(removed.is_some(), "a volatile entry is indexed");
        let last = self.volatile.len() - 1;
        self.volatile.swap_remove(v);
        if v < last {
            // The last entry moved to `v`: repoint its index bucket.
            let h = self.hash_pos(self.volatile[v]);
            let w = self
                .vindex
                .find_mut(h, |&w| w as usize == last)
                .expect("a volatile entry is indexed");
            *w = v as u32;
        }
    }

    /// Deletes position `i`; the last slot moves into it.
    pub fn swap_remove(&mut self, i: usize) -> Removed {
        let expire_at = self.clear_expire(i);
        let h = self.hash_key(self.slots[i].key.key());
        let (slots, hasher) = (&self.slots, &self.hasher);
        let removed = self.index.remove(
            h,
            |&j| j as usize == i,
            |&j| hasher.hash_one(slots[j as usize].key.key()),
        );
        assert!(removed.is_some(), "a slot is indexed");
        let last = self.slots.len() - 1;
        let slot = self.slots.swap_remove(i);
        if !self.expires.is_empty() {
            self.expires.swap_remove(i);
        }
        if i < last {
            // The former last slot now sits at `i`: repoint its index bucket, and its volatile
            // entry (re-indexed: `vindex` hashes positions).
            let h = self.hash_key(self.slots[i].key.key());
            let j = self
                .index
                .find_mut(h, |&j| j as usize == last)
                .expect("a slot is indexed");
            *j = i as u32;
            if self.has_expire(i) {
                let hl = self.hash_pos(last as u32);
                let (volatile, hasher) = (&self.volatile, &self.hasher);
                let v = self
                    .vindex
                    .remove(
                        hl,
                        |&v| volatile[v as usize] == last as u32,
                        |&w| hasher.hash_one(volatile[w as usize]),
                    )
                    .expect("a volatile slot has a volatile entry");
                self.volatile[v as usize] = i as u32;
                let (volatile, hasher) = (&self.volatile, &self.hasher);
                self.vindex
                    .insert_unique(hasher.hash_one(i as u32), v, |&w| {
                        hasher.hash_one(volatile[w as usize])
                    });
            }
        }
        Removed {
            access: slot.key.meta(),
            key: Key(slot.key),
            value: slot.value,
            expire_at,
        }
    }

    /// Number of keys with a TTL.
    pub fn volatile_len(&self) -> usize {
        self.volatile.len()
    }

    /// The position of the `v`-th key with a TTL.
    pub fn volatile_position(&self, v: usize) -> usize {
        self.volatile[v] as usize
    }

    /// The expiry of the `v`-th key with a TTL.
    pub fn volatile_expire_at(&self, v: usize) -> u64 {
        self.expires[self.volatile[v] as usize]
    }

    /// Every slot, in position order.
    pub fn slots(&self) -> impl Iterator<Item = &Slot> + '_ {
        self.slots.iter()
    }

    /// Every slot, owned, emptying the table (FLUSHALL ASYNC hands them to the graveyard).
    pub fn take_slots(&mut self) -> Chunked<Slot> {
        self.index = PositionIndex::new();
        self.expires = Chunked::new();
        self.volatile = Chunked::new();
        self.vindex = PositionIndex::new();
        std::mem::take(&mut self.slots)
    }

    /// Whether an index's growth is under way (`crate::position_index`).
    pub fn is_rehashing(&self) -> bool {
        self.index.is_rehashing() || self.vindex.is_rehashing()
    }

    /// Moves up to `buckets` buckets of each index's growth under way (the engine's cron, as
    /// Redis's `incrementallyRehash`); returns the buckets visited (0: no growth under way).
    pub fn rehash_step(&mut self, buckets: usize) -> usize {
        let (slots, volatile, hasher) = (&self.slots, &self.volatile, &self.hasher);
        self.index
            .rehash_step(buckets, |&j| hasher.hash_one(slots[j as usize].key.key()))
            + self
                .vindex
                .rehash_step(buckets, |&w| hasher.hash_one(volatile[w as usize]))
    }

    /// Makes room for `n` more keys.
    pub fn reserve(&mut self, n: usize) {
        self.slots.reserve(n);
        if !self.expires.is_empty() {
            self.expires.reserve(n);
        }
        let (slots, hasher) = (&self.slots, &self.hasher);
        self.index
            .reserve(n, |&j| hasher.hash_one(slots[j as usize].key.key()));
    }

    /// Checks the index and the volatile entries against the slots (tests).
    #[cfg(test)]
    pub fn check(&self) {
        assert_eq!(self.index.len(), self.slots.len());
        assert!(self.expires.is_empty() || self.expires.len() == self.slots.len());
        for (i, s) in self.slots.iter().enumerate() {
            assert_eq!(self.find(s.key()), Some(i));
            if self.has_expire(i) {
                assert_eq!(self.volatile[self.vpos(i)] as usize, i);
            }
        }
        assert_eq!(self.vindex.len(), self.volatile.len());
        for (v, &pos) in self.volatile.iter().enumerate() {
            assert!(self.has_expire(pos as usize));
            assert_eq!(self.vpos(pos as usize), v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::StrValue;

    fn sv(s: &str) -> Value {
        Value::Str(StrValue::from_slice(s.as_bytes()))
    }

    #[test]
    fn inline_and_heap_keys_keep_meta_and_flags() {
        for key in [
            &b""[..],
            b"k",
            &[7u8; INLINE],
            &[9u8; INLINE + 1],
            &[1u8; 300],
        ] {
            let mut t = KeyTable::with_seed(1);
            let i = t.insert_new(key, sv("v"), 0xdead_beef);
            assert_eq!(t.key(i), key);
            assert_eq!(t.access(i), 0xdead_beef);
            assert_eq!(t.expire_at(i), None);
            assert!(t.set_expire(i, 42));
            assert_eq!(t.key(i), key, "the flag leaves the key alone");
            assert_eq!(t.access(i), 0xdead_beef);
            assert_eq!(t.expire_at(i), Some(42));
            t.set_access(i, 7);
            assert_eq!(t.expire_at(i), Some(42));
            assert_eq!(t.clear_expire(i), Some(42));
            assert_eq!(t.key(i), key);
            t.check();
            let r = t.swap_remove(i);
            assert_eq!(&r.key[..], key);
            assert_eq!(r.access, 7);
            assert!(t.is_empty());
        }
    }

    #[test]
    fn a_growing_table_keeps_every_key_and_ttl_while_its_indexes_move() {
        // Past INCREMENTAL_FROM both indexes grow a few buckets per insert: removals, TTLs
        // and lookups meet keys in either table of a growth (and slots past a chunk's edge).
        let mut t = KeyTable::with_seed(3);
        let mut grew = (false, false);
        let mut removed = 0;
        // Where the first chunk of the slots and of `volatile` sit once it is full: growth
        // must never copy them (a doubling Vec would).
        let mut first_chunks: Option<(*const Slot, *const u32)> = None;
        for n in 0..60_000u32 {
            let key = format!("key:{n}");
            let i = t.insert_new(key.as_bytes(), sv("v"), n);
            if n % 2 == 0 {
                t.set_expire(i, u64::from(n) + 1);
            }
            grew.0 |= t.index.is_rehashing();
            grew.1 |= t.vindex.is_rehashing();
            if n % 7 == 3 {
                let victim = format!("key:{}", n / 2);
                if let Some(j) = t.find(victim.as_bytes()) {
                    let r = t.swap_remove(j);
                    assert_eq!(&r.key[..], victim.as_bytes());
                    assert_eq!(
                        r.expire_at,
                        ((n / 2) % 2 == 0).then_some(u64::from(n / 2) + 1)
                    );
                    removed += 1;
                }
            }
            if n % 4999 == 0 || t.index.is_rehashing() && n % 97 == 0 {
                t.check();
            }
            if first_chunks.is_none() && t.volatile_len() >= crate::chunked::CHUNK {
                first_chunks = Some((&t.slots[0], &t.volatile[0]));
            }
        }
        assert_eq!(grew, (true, true), "both indexes grew incrementally");
        assert!(t.volatile_len() > crate::chunked::CHUNK);
        assert_eq!(
            first_chunks,
            Some((&t.slots[0] as *const Slot, &t.volatile[0] as *const u32)),
            "a full chunk is never copied"
        );
        t.check();
        assert_eq!(t.len(), 60_000 - removed);
        while t.rehash_step(1 << 20) > 0 {}
        assert!(!t.index.is_rehashing() && !t.vindex.is_rehashing());
        t.check();
    }

    #[test]
    fn removals_repoint_the_moved_slot_and_its_ttl() {
        let mut t = KeyTable::with_seed(5);
        let mut next = crate::test_rng::below(99);
        for step in 0..20_000u64 {
            let key = format!("key-{}-{}", next(300), "x".repeat(next(30) as usize));
            match (t.find(key.as_bytes()), next(4)) {
                (None, _) => {
                    let i = t.insert_new(key.as_bytes(), sv("v"), step as u32);
                    if next(2) == 0 {
                        t.set_expire(i, step);
                    }
                }
                (Some(i), 0) => {
                    let had = t.expire_at(i);
                    let r = t.swap_remove(i);
                    assert_eq!(&r.key[..], key.as_bytes());
                    assert_eq!(r.expire_at, had);
                }
                (Some(i), 1) => {
                    t.set_expire(i, step);
                }
                (Some(i), _) => {
                    t.clear_expire(i);
                }
            }
            if step % 211 == 0 {
                t.check();
            }
        }
        t.check();
    }
}
