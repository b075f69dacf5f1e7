//! A hash index of `u32` positions that grows a little at a time (incremental rehashing), for
//! the keyspace's tables ([`crate::keytable`]).
//!
//! # Why
//!
//! A hash table that grows in one call rehashes every entry in that call. For the keyspace's
//! index that is a hash of each key, read from its slot at a random place in memory: about
//! 120 ns per key, so the insert that crosses 917,504 keys stalled the engine 124 ms (SLOWLOG
//! of a `SET`, 1M keys of 64 bytes), and every client waited. Redis avoids this in its dict
//! (`dict.c`, `_dictRehashStep`): while a table grows, both tables live, and each operation
//! moves one bucket of the old to the new, plus a millisecond in the server's cron
//! (`databasesCron` → `incrementallyRehash`).
//!
//! # How
//!
//! The same, with hashbrown's bucket access (`num_buckets`, `get_bucket_entry`):
//! - `table` is where inserts go; `old` is empty unless a growth is under way, and then holds
//!   the entries of buckets `cursor..` not yet moved (hashbrown never moves an entry between
//!   buckets on removal, so a cursor over bucket numbers stays valid).
//! - Growth starts when an insert finds `table` full: `table` becomes `old`, and a new `table`
//!   of twice the capacity is allocated (its buckets are not touched until used).
//! - Each insert first moves [`STEP`] buckets of `old`, each removal one bucket, and
//!   [`PositionIndex::rehash_step`] (the engine's cron) more. `old` has `B` buckets and at
//!   most `7B/8` entries; the new table has room for `7B/8` more; moving at least 2 buckets per
//!   insert empties `old` before the new table can fill (if it ever did, the rest would be
//!   moved at once: [`PositionIndex::finish`]).
//! - A lookup probes `table`, then `old` while a growth is under way: a miss costs two probes
//!   then, as in Redis.
//!
//! Small tables (under [`INCREMENTAL_FROM`] entries) grow in one call: that costs less than
//! the bookkeeping.
//!
//! The hash of an entry is not stored: the caller's `rehash` recomputes it from the position
//! (the key's hash for the keyspace, the position's for its volatile index).

use hashbrown::HashTable;

/// Buckets of the old table moved by each insert while a growth is under way: at least 2
/// (see the module doc); 8 keeps a growth short (it ends after a ninth of the old table's
/// buckets in inserts) and adds about seven moved entries to an insert.
pub const STEP: usize = 8;
/// Buckets moved per database by each engine cron (about 0.7 ms at 100 ns an entry; the cron
/// runs `hz` times a second, 10 by default).
pub const CRON_BUCKETS: usize = 8192;
/// Capacity from which a full table grows incrementally rather than in one call.
pub const INCREMENTAL_FROM: usize = 1 << 12;

/// See the module doc.
#[derive(Clone, Default)]
pub struct PositionIndex {
    table: HashTable<u32>,
    old: HashTable<u32>,
    /// The next bucket of `old` to move.
    cursor: usize,
}

impl PositionIndex {
    pub fn new() -> PositionIndex {
        PositionIndex::default()
    }

    pub fn len(&self) -> usize {
        self.table.len() + self.old.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether a growth is under way (tests, INFO).
    pub fn is_rehashing(&self) -> bool {
        !self.old.is_empty()
    }

    #[inline]
    pub fn find(&self, hash: u64, mut eq: impl FnMut(&u32) -> bool) -> Option<&u32> {
        match self.table.find(hash, &mut eq) {
            Some(v) => Some(v),
            None if !self.old.is_empty() => self.old.find(hash, eq),
            None => None,
        }
    }

    #[inline]
    pub fn find_mut(&mut self, hash: u64, mut eq: impl FnMut(&u32) -> bool) -> Option<&mut u32> {
        if self.old.is_empty() {
            return self.table.find_mut(hash, eq);
        }
        match self.table.find_mut(hash, &mut eq) {
            Some(v) => Some(v),
            None => self.old.find_mut(hash, eq),
        }
    }

    /// Removes the entry `eq` names; returns it.
    pub fn remove(
        &mut self,
        hash: u64,
        mut eq: impl FnMut(&u32) -> bool,
        rehash: impl Fn(&u32) -> u64,
    ) -> Option<u32> {
        let found = match self.table.find_entry(hash, &mut eq) {
            Ok(e) => Some(e.remove().0),
            Err(_) => match self.old.find_entry(hash, eq) {
                Ok(e) => Some(e.remove().0),
                Err(_) => None,
            },
        };
        if !self.old.is_empty() {
            self.step(1, &rehash);
        }
        found
    }

    /// Inserts `value`, which must be absent from both tables (the caller looked it up).
    pub fn insert_unique(&mut self, hash: u64, value: u32, rehash: impl Fn(&u32) -> u64) {
        self.make_room(&rehash);
        self.table.insert_unique(hash, value, rehash);
    }

    /// Inserts `value` unless `eq` finds an entry (then `false`), with one probe of `table`
    /// when no growth is under way and it has room (snapshot loads, which reserve first, are
    /// bound by these probes' cache misses).
    pub fn insert_if_absent(
        &mut self,
        hash: u64,
        value: u32,
        mut eq: impl FnMut(&u32) -> bool,
        rehash: impl Fn(&u32) -> u64,
    ) -> bool {
        if self.old.is_empty() && self.table.len() < self.table.capacity() {
            return match self.table.entry(hash, eq, rehash) {
                hashbrown::hash_table::Entry::Occupied(_) => false,
                hashbrown::hash_table::Entry::Vacant(v) => {
                    v.insert(value);
                    true
                }
            };
        }
        if self.find(hash, &mut eq).is_some() {
            return false;
        }
        self.insert_unique(hash, value, rehash);
        true
    }

    /// Makes room for one insert: a step of a growth under way, or the start of one.
    fn make_room(&mut self, rehash: &impl Fn(&u32) -> u64) {
        if !self.old.is_empty() {
            self.step(STEP, rehash);
        }
        if self.table.len() < self.table.capacity() {
            return;
        }
        // Full before a growth under way ended (module doc: never, with STEP ≥ 2): it ends
        // now, so `old` never holds entries of two generations.
        self.finish(rehash);
        if self.table.capacity() < INCREMENTAL_FROM {
            // Small: hashbrown grows it in the insert itself.
            return;
        }
        let bigger = HashTable::with_capacity(self.table.capacity() * 2);
        self.old = std::mem::replace(&mut self.table, bigger);
        self.cursor = 0;
        self.step(STEP, rehash);
    }

    /// Moves up to `buckets` buckets of a growth under way; returns how many were visited
    /// (0: none under way).
    pub fn rehash_step(&mut self, buckets: usize, rehash: impl Fn(&u32) -> u64) -> usize {
        if self.old.is_empty() {
            return 0;
        }
        self.step(buckets, &rehash)
    }

    fn step(&mut self, buckets: usize, rehash: &impl Fn(&u32) -> u64) -> usize {
        let end = (self.cursor + buckets).min(self.old.num_buckets());
        let start = self.cursor;
        for b in start..end {
            if let Ok(e) = self.old.get_bucket_entry(b) {
                let (v, _) = e.remove();
                // `table` has room: it was allocated at twice `old`'s capacity and inserts
                // keep moving buckets (module doc), and `finish` runs before it could fill.
                self.table.insert_unique(rehash(&v), v, rehash);
            }
        }
        self.cursor = end;
        if self.old.is_empty() || self.cursor >= self.old.num_buckets() {
            debug_assert!(self.old.is_empty(), "every bucket moved");
            self.old = HashTable::new();
            self.cursor = 0;
        }
        end - start
    }

    /// Moves whatever a growth under way still has (before a reserve, or if the new table
    /// filled first).
    pub fn finish(&mut self, rehash: &impl Fn(&u32) -> u64) {
        while !self.old.is_empty() {
            self.step(usize::MAX / 2, rehash);
        }
    }

    /// Makes room for `n` more entries (finishing a growth under way first).
    pub fn reserve(&mut self, n: usize, rehash: impl Fn(&u32) -> u64) {
        self.finish(&rehash);
        self.table.reserve(n, rehash);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(v: &u32) -> u64 {
        // A poor but deterministic hash spreads enough for the test.
        u64::from(*v).wrapping_mul(0x9e37_79b9_7f4a_7c15)
    }

    #[test]
    fn a_growth_moves_a_few_buckets_per_insert_and_loses_nothing() {
        let mut ix = PositionIndex::new();
        let mut saw_rehashing = false;
        let mut longest_insert_moves = 0;
        for v in 0..200_000u32 {
            let old_before = ix.old.len();
            ix.insert_unique(h(&v), v, h);
            if old_before > 0 {
                saw_rehashing = true;
                // Entries this insert moved out of `old`.
                longest_insert_moves = longest_insert_moves.max(old_before - ix.old.len());
            }
            if v % 997 == 0 {
                for w in (0..=v).step_by(131) {
                    assert_eq!(ix.find(h(&w), |&x| x == w), Some(&w), "{w} after {v}");
                }
                assert_eq!(ix.find(h(&(v + 1)), |&x| x == v + 1), None);
            }
        }
        assert!(saw_rehashing, "200,000 inserts grow past INCREMENTAL_FROM");
        assert!(
            longest_insert_moves <= STEP,
            "an insert moved {longest_insert_moves} entries"
        );
        assert_eq!(ix.len(), 200_000);
    }

    #[test]
    fn removals_and_updates_find_entries_in_either_table() {
        let mut ix = PositionIndex::new();
        let n = (INCREMENTAL_FROM * 4) as u32;
        for v in 0..n {
            ix.insert_unique(h(&v), v, h);
        }
        // Grow once more and stop half way: entries are in both tables.
        let mut v = n;
        while !ix.is_rehashing() {
            ix.insert_unique(h(&v), v, h);
            v += 1;
        }
        assert!(!ix.old.is_empty() && !ix.table.is_empty());
        for w in (0..v).step_by(3) {
            assert_eq!(ix.remove(h(&w), |&x| x == w, h), Some(w));
        }
        for w in (1..v).step_by(3) {
            *ix.find_mut(h(&w), |&x| x == w).expect("present") = w;
        }
        for w in 0..v {
            let want = (w % 3 != 0).then_some(w);
            assert_eq!(ix.find(h(&w), |&x| x == w).copied(), want);
        }
        assert!(!ix.insert_if_absent(h(&1), 1, |&x| x == 1, h));
        assert!(ix.insert_if_absent(h(&0), 0, |&x| x == 0, h));
        while ix.rehash_step(64, h) > 0 {}
        assert!(!ix.is_rehashing());
        assert_eq!(ix.len(), (v - v.div_ceil(3) + 1) as usize);
        ix.reserve(1000, h);
        assert_eq!(ix.find(h(&0), |&x| x == 0), Some(&0));
    }
}
