//! Keys by hash slot, for moving slots between nodes: `CLUSTER GETKEYSINSLOT`,
//! `COUNTKEYSINSLOT` and `SETSLOT … NODE`'s "still holds keys" check (redis keeps
//! `slots_to_keys` for the same commands, `db.c`).
//!
//! # Why it exists only on demand
//!
//! Redis keeps this index on every insert and delete of every deployment. Here it is built
//! by one walk of a database the first time a slot command needs it (or in steps, by
//! `SLOTKEYSBUILD`), then kept current on
//! inserts only (one CRC16 and one copy of the key per new key), and dropped by
//! [`cron`] when no slot is migrating or importing and no slot command used it for
//! [`IDLE_MS`]. A fleet that never moves a slot pays one `Option` test per new key. While it
//! lives it costs a copy of every key of the database (16 bytes plus the key, in one arena).
//!
//! Deletes are not tracked: a bucket may hold keys deleted (or re-added, twice) since; every
//! reader checks that a key is still live and drops the dead ones it meets, so the lists
//! shrink as a migration empties the slot. One walk per database per move of many slots,
//! instead of one walk per `GETKEYSINSLOT` call, is what makes `redis-cli --cluster reshard`
//! of a large keyspace run at Redis's speed.

use std::collections::HashSet;

use crate::slot::{SLOTS, key_slot};

/// Most bytes of key arena a stepped walk allocates before it starts ([`SlotKeys::start`]).
pub const ARENA_RESERVE_MAX: usize = 64 << 20;

/// How long an index no slot uses is kept (ms): a reshard pauses between slots.
pub const IDLE_MS: u64 = 60_000;

/// Per-slot lists of keys of one database.
pub struct SlotKeys {
    /// Positions `0..unwalked` of the key table not yet listed: a walk in steps
    /// ([`SlotKeys::start`], [`SlotKeys::walk`]); 0 once complete. The walk goes downwards:
    /// a key inserted meanwhile lands above it and is listed by [`SlotKeys::added`]; a
    /// removal moves the table's last key (already listed) into its hole, and a hole below
    /// the walk only lists that key twice, which readers drop.
    unwalked: usize,
    /// The bytes of every listed key, back to back: one allocation for all of them rather
    /// than one per key (and none per key listed by GETKEYSINSLOT's duplicate check).
    arena: Vec<u8>,
    /// Per slot, where its keys are in `arena`.
    buckets: Vec<Vec<Entry>>,
    /// Last use by a slot command (ms), for [`cron`].
    pub(crate) last_use_ms: u64,
}

/// A key's place in [`SlotKeys::arena`].
#[derive(Clone, Copy)]
struct Entry {
    at: u64,
    len: u32,
}

impl Entry {
    fn of(self, arena: &[u8]) -> &[u8] {
        &arena[self.at as usize..self.at as usize + self.len as usize]
    }
}

impl SlotKeys {
    /// An index of a database of `len` keys that lists none yet: [`SlotKeys::walk`] lists
    /// them, all at once for the first slot command, or a step at a time (`SLOTKEYSBUILD`, so
    /// that a large database's walk is not one long stall of the engine).
    /// `key_bytes`: about how many bytes its keys have in all (the arena is allocated at
    /// once rather than copied as it doubles during the walk).
    pub fn start(len: usize, key_bytes: usize, now_ms: u64) -> SlotKeys {
        SlotKeys {
            unwalked: len,
            arena: Vec::with_capacity(key_bytes),
            buckets: (0..SLOTS).map(|_| Vec::new()).collect(),
            last_use_ms: now_ms,
        }
    }

    /// Lists up to `budget` more keys of the table (`len` keys now, position `i`'s key
    /// `key_at(i)`); returns how many it listed ([`SlotKeys::unwalked`]: how many are left).
    pub fn walk<'a>(
        &mut self,
        len: usize,
        key_at: impl Fn(usize) -> &'a [u8],
        budget: usize,
    ) -> usize {
        // Removals since the last step shrank the table: what is above it is gone.
        let top = self.unwalked.min(len);
        let end = top.saturating_sub(budget);
        for i in (end..top).rev() {
            self.added(key_at(i));
        }
        self.unwalked = end;
        top - end
    }

    /// Keys still to list before the index is complete.
    pub fn unwalked(&self) -> usize {
        self.unwalked
    }

    /// A key was inserted.
    #[inline]
    pub fn added(&mut self, key: &[u8]) {
        let e = push(&mut self.arena, key);
        self.buckets[usize::from(key_slot(key))].push(e);
    }

    /// Up to `max` distinct keys of `slot` for which `live` holds; dead entries met on the
    /// way are dropped (and so are duplicates).
    pub fn keys(&mut self, slot: u16, max: usize, live: impl Fn(&[u8]) -> bool) -> Vec<Box<[u8]>> {
        let SlotKeys { arena, buckets, .. } = self;
        let b = &mut buckets[usize::from(slot)];
        let mut seen: HashSet<&[u8]> = HashSet::new();
        let mut out = Vec::new();
        let mut i = 0;
        while i < b.len() && out.len() < max {
            let k = b[i].of(arena);
            if !live(k) || !seen.insert(k) {
                b.swap_remove(i);
                continue;
            }
            out.push(k.into());
            i += 1;
        }
        out
    }

    /// The number of distinct live keys of `slot` (the bucket is compacted to them).
    pub fn count(&mut self, slot: u16, live: impl Fn(&[u8]) -> bool) -> usize {
        let SlotKeys { arena, buckets, .. } = self;
        let b = &mut buckets[usize::from(slot)];
        let mut seen: HashSet<&[u8]> = HashSet::with_capacity(b.len());
        b.retain(|e| {
            let k = e.of(arena);
            live(k) && seen.insert(k)
        });
        b.len()
    }
}

/// Appends `key` to `arena`; where it went.
fn push(arena: &mut Vec<u8>, key: &[u8]) -> Entry {
    let at = arena.len() as u64;
    arena.extend_from_slice(key);
    Entry {
        at,
        len: key.len() as u32,
    }
}

/// Drops the indexes no slot command used for [`IDLE_MS`], unless a slot is open.
pub fn cron(e: &mut crate::Engine, now_ms: u64) {
    if e.cluster.open_slots() {
        return;
    }
    for db in 0..e.databases() {
        let d = e.db_mut(db);
        if d.slot_keys
            .as_ref()
            .is_some_and(|s| now_ms.saturating_sub(s.last_use_ms) >= IDLE_MS)
        {
            d.slot_keys = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_walk_in_steps_lists_every_key_despite_inserts_and_removals_between_steps() {
        // The table as a vector with the key table's swap_remove.
        let mut table: Vec<Vec<u8>> = (0..5000).map(|i| format!("k{i}").into_bytes()).collect();
        let mut idx = SlotKeys::start(table.len(), 0, 0);
        let mut step = 0;
        loop {
            idx.walk(table.len(), |i| &table[i], 300);
            if idx.unwalked() == 0 {
                break;
            }
            step += 1;
            // Between steps: an insert (listed by the hook, as the keyspace does), and two
            // removals, one below the walk and one above it.
            let k = format!("new{step}").into_bytes();
            idx.added(&k);
            table.push(k);
            let low = (step * 7) % idx.unwalked().max(1);
            table.swap_remove(low);
            let high = table.len() - 1 - step % 50;
            table.swap_remove(high);
        }
        assert!(step > 10, "walked in steps");
        let live: HashSet<&[u8]> = table.iter().map(|k| &k[..]).collect();
        let mut listed = 0;
        for s in 0..SLOTS {
            listed += idx.count(s, |k| live.contains(k));
        }
        assert_eq!(listed, table.len(), "every key of the table listed once");
    }

    #[test]
    fn lists_live_distinct_keys_and_drops_dead_ones() {
        let keys: Vec<Vec<u8>> = (0..50).map(|i| format!("{{a}}{i}").into_bytes()).collect();
        let s = key_slot(b"{a}");
        let mut idx = SlotKeys::start(keys.len(), 0, 0);
        assert_eq!(idx.walk(keys.len(), |i| &keys[i], usize::MAX), 50);
        idx.added(b"{a}0"); // re-added: a duplicate
        let live = |k: &[u8]| k != b"{a}3";
        assert_eq!(idx.count(s, live), 49);
        let first = idx.keys(s, 10, live);
        assert_eq!(first.len(), 10);
        let distinct: HashSet<_> = first.iter().collect();
        assert_eq!(distinct.len(), 10);
        // Once those are gone, the next call lists others.
        let gone: HashSet<Box<[u8]>> = first.into_iter().collect();
        let live2 = |k: &[u8]| k != b"{a}3" && !gone.contains(k);
        let next = idx.keys(s, 100, live2);
        assert_eq!(next.len(), 39);
        assert!(next.iter().all(|k| !gone.contains(k)));
        assert_eq!(idx.count(s + 1, |_| true), 0);
    }
}
