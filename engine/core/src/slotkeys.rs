//! Keys by hash slot, for moving slots between nodes: `CLUSTER GETKEYSINSLOT`,
//! `COUNTKEYSINSLOT` and `SETSLOT … NODE`'s "still holds keys" check (redis keeps
//! `slots_to_keys` for the same commands, `db.c`).
//!
//! # Why it exists only on demand
//!
//! Redis keeps this index on every insert and delete of every deployment. Here it is built
//! by one walk of a database the first time a slot command needs it, then kept current on
//! inserts only (one CRC16 and one copy of the key per new key), and dropped by
//! [`cron`] when no slot is migrating or importing and no slot command used it for
//! [`IDLE_MS`]. A fleet that never moves a slot pays one `Option` test per new key. While it
//! lives it costs a copy of every key of the database (about 32 bytes plus the key).
//!
//! Deletes are not tracked: a bucket may hold keys deleted (or re-added, twice) since; every
//! reader checks that a key is still live and drops the dead ones it meets, so the lists
//! shrink as a migration empties the slot. One walk per database per move of many slots,
//! instead of one walk per `GETKEYSINSLOT` call, is what makes `redis-cli --cluster reshard`
//! of a large keyspace run at Redis's speed.

use std::collections::HashSet;

use crate::slot::{SLOTS, key_slot};

/// How long an index no slot uses is kept (ms): a reshard pauses between slots.
pub const IDLE_MS: u64 = 60_000;

/// Per-slot lists of keys of one database.
pub struct SlotKeys {
    buckets: Vec<Vec<Box<[u8]>>>,
    /// Last use by a slot command (ms), for [`cron`].
    pub(crate) last_use_ms: u64,
}

impl SlotKeys {
    /// The index of `keys` (every key of a database).
    pub fn build<'a>(keys: impl Iterator<Item = &'a [u8]>, now_ms: u64) -> SlotKeys {
        let mut buckets = vec![Vec::new(); usize::from(SLOTS)];
        for k in keys {
            buckets[usize::from(key_slot(k))].push(k.into());
        }
        SlotKeys {
            buckets,
            last_use_ms: now_ms,
        }
    }

    /// A key was inserted.
    #[inline]
    pub fn added(&mut self, key: &[u8]) {
        self.buckets[usize::from(key_slot(key))].push(key.into());
    }

    /// Up to `max` distinct keys of `slot` for which `live` holds; dead entries met on the
    /// way are dropped (and so are duplicates).
    pub fn keys(&mut self, slot: u16, max: usize, live: impl Fn(&[u8]) -> bool) -> Vec<Box<[u8]>> {
        let b = &mut self.buckets[usize::from(slot)];
        let mut seen: HashSet<Box<[u8]>> = HashSet::new();
        let mut out = Vec::new();
        let mut i = 0;
        while i < b.len() && out.len() < max {
            if !live(&b[i]) || seen.contains(&b[i]) {
                b.swap_remove(i);
                continue;
            }
            seen.insert(b[i].clone());
            out.push(b[i].clone());
            i += 1;
        }
        out
    }

    /// The number of distinct live keys of `slot` (the bucket is compacted to them).
    pub fn count(&mut self, slot: u16, live: impl Fn(&[u8]) -> bool) -> usize {
        let b = &mut self.buckets[usize::from(slot)];
        let mut seen: HashSet<Box<[u8]>> = HashSet::with_capacity(b.len());
        b.retain(|k| live(k) && seen.insert(k.clone()));
        b.len()
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
    fn lists_live_distinct_keys_and_drops_dead_ones() {
        let keys: Vec<Vec<u8>> = (0..50).map(|i| format!("{{a}}{i}").into_bytes()).collect();
        let s = key_slot(b"{a}");
        let mut idx = SlotKeys::build(keys.iter().map(|k| &k[..]), 0);
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
