//! The slot table: which instance owns each of the 16384 hash slots. Every routing decision
//! of the proxy reads it (single keys, split parts, transactions, shard channels, gathers),
//! so they all agree.
//!
//! It starts as the pure map of the `--backends` list (`engine_core::slot::instance_for_slot`,
//! jump hash over slot blocks), so a fleet whose slots never move routes exactly as before;
//! a key costs one CRC16 and one array read. It changes when slots move (docs/cluster.md,
//! "Through the proxy"): a `-MOVED <slot> <host>:<port>` reply sets that slot's owner, and
//! a `CLUSTER SLOTS` reply (asked at start and after a MOVED, `crate::redirect`) replaces
//! the ranges it lists. Instances the table names but `--backends` did not are appended
//! (`crate::redirect`), so indices only grow.
//!
//! Routing code takes any [`SlotMap`]: the table, or a plain instance count `n` standing for
//! the initial map of `n` instances (what the pure modules' tests use).

use engine_core::slot::{SLOTS, instance_for_slot, key_slot};

/// Who owns a key: the table, or `usize` n = the initial jump-hash map of n instances.
pub trait SlotMap {
    /// The instance that owns `key`.
    fn of(&self, key: &[u8]) -> usize;
    /// Instances the map knows (indices `0..instances()`).
    fn instances(&self) -> usize;
    /// Whether `instance` owns a slot (a retired instance does not).
    fn serves(&self, instance: usize) -> bool {
        instance < self.instances()
    }
}

/// Tests of the pure modules route with the initial map of n instances; production code
/// always passes the fleet's table (so this is not compiled there, and cannot be mistaken
/// for it).
#[cfg(test)]
impl SlotMap for usize {
    fn of(&self, key: &[u8]) -> usize {
        crate::route::instance_of(key, *self)
    }
    fn instances(&self) -> usize {
        *self
    }
}

impl<T: SlotMap + ?Sized> SlotMap for &T {
    #[inline]
    fn of(&self, key: &[u8]) -> usize {
        (**self).of(key)
    }
    fn instances(&self) -> usize {
        (**self).instances()
    }
    fn serves(&self, instance: usize) -> bool {
        (**self).serves(instance)
    }
}

/// Slot → instance, plus how many slots each instance owns.
#[derive(Debug, Clone)]
pub struct Slots {
    /// `owner[slot]`: an index into the fleet's instances.
    owner: Box<[u16]>,
    /// `owned[i]`: slots instance `i` owns (0: a retired or not yet used instance, left out
    /// of fan-outs).
    owned: Vec<u32>,
    /// Instances that owned no slot and got one since [`Slots::take_started`] (a grow, or a
    /// retired port re-added): what clients hold on every instance goes there too. Each at
    /// most once, so the list stays small for a table nobody drains.
    started: Vec<usize>,
    /// Instances that gave their last slot away since [`Slots::take_stopped`] (retired by a
    /// shrink): the channels clients subscribed there move to the new owners.
    stopped: Vec<usize>,
}

impl Slots {
    /// The initial map of `n` instances (`n` ≥ 1).
    pub fn jump(n: usize) -> Self {
        let n = n.max(1);
        let owner: Box<[u16]> = (0..SLOTS)
            .map(|s| match n {
                1 => 0,
                _ => instance_for_slot(s, n as u32) as u16,
            })
            .collect();
        let mut owned = vec![0u32; n];
        for &o in owner.iter() {
            owned[usize::from(o)] += 1;
        }
        Slots {
            owner,
            owned,
            started: Vec::new(),
            stopped: Vec::new(),
        }
    }

    /// The owner of `slot` (reduced mod 16384).
    pub fn owner(&self, slot: u16) -> usize {
        usize::from(self.owner[usize::from(slot % SLOTS)])
    }

    /// Gives `slot` to `instance`; `false` if it already had it. `instance` must be known
    /// (`grow` first).
    pub fn set(&mut self, slot: u16, instance: usize) -> bool {
        let slot = usize::from(slot % SLOTS);
        let old = usize::from(self.owner[slot]);
        if old == instance || instance >= self.owned.len() {
            return false;
        }
        self.owned[old] -= 1;
        if self.owned[old] == 0 && !self.stopped.contains(&old) {
            self.stopped.push(old);
        }
        if self.owned[instance] == 0 && !self.started.contains(&instance) {
            self.started.push(instance);
        }
        self.owned[instance] += 1;
        self.owner[slot] = instance as u16;
        true
    }

    /// The instances that started serving since the last call ([`Slots::started`]).
    pub fn take_started(&mut self) -> Vec<usize> {
        std::mem::take(&mut self.started)
    }

    /// Whether an instance started serving since [`Slots::take_started`].
    pub fn any_started(&self) -> bool {
        !self.started.is_empty()
    }

    /// The instances that stopped serving since the last call ([`Slots::stopped`]).
    pub fn take_stopped(&mut self) -> Vec<usize> {
        std::mem::take(&mut self.stopped)
    }

    /// Whether an instance stopped serving since [`Slots::take_stopped`].
    pub fn any_stopped(&self) -> bool {
        !self.stopped.is_empty()
    }

    /// Makes room for instances `0..n`.
    pub fn grow(&mut self, n: usize) {
        if n > self.owned.len() {
            self.owned.resize(n, 0);
        }
    }

    /// Whether `instance` owns at least one slot.
    pub fn serves(&self, instance: usize) -> bool {
        self.owned.get(instance).is_some_and(|&c| c > 0)
    }

    /// Slots owned by `instance`.
    pub fn owned(&self, instance: usize) -> u32 {
        self.owned.get(instance).copied().unwrap_or(0)
    }
}

impl SlotMap for Slots {
    fn serves(&self, instance: usize) -> bool {
        Slots::serves(self, instance)
    }
    #[inline]
    fn of(&self, key: &[u8]) -> usize {
        if self.owned.len() <= 1 {
            return 0;
        }
        usize::from(self.owner[usize::from(key_slot(key))])
    }
    fn instances(&self) -> usize {
        self.owned.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_as_the_jump_hash_map_and_counts_owned_slots() {
        for n in 1..6 {
            let t = Slots::jump(n);
            for key in ["a", "b", "{user}1", "counter:77", ""] {
                assert_eq!(
                    t.of(key.as_bytes()),
                    crate::route::instance_of(key.as_bytes(), n)
                );
            }
            let total: u32 = (0..n).map(|i| t.owned(i)).sum();
            assert_eq!(total, u32::from(SLOTS));
            assert_eq!(t.instances(), n);
        }
    }

    #[test]
    fn set_moves_one_slot_and_retires_an_instance_with_none_left() {
        let mut t = Slots::jump(2);
        let key = b"somekey";
        let slot = key_slot(key);
        let from = t.of(key);
        t.grow(3);
        assert!(t.set(slot, 2));
        assert!(!t.set(slot, 2));
        assert_eq!(t.of(key), 2);
        assert_eq!(t.owner(slot), 2);
        assert_eq!(t.owned(2), 1);
        assert!(t.serves(from));
        assert!(!t.set(slot, 7), "unknown instance refused");
    }

    #[test]
    fn an_instance_that_gets_its_first_slot_is_reported_once() {
        let mut t = Slots::jump(2);
        assert!(!t.any_started(), "the initial map starts nobody");
        t.grow(3);
        t.set(5, 2);
        t.set(6, 2);
        assert!(t.any_started());
        assert_eq!(t.take_started(), vec![2]);
        assert!(t.take_started().is_empty());
        // Retired (its last slot given away), then serving again: reported again.
        t.set(5, 0);
        t.set(6, 0);
        assert!(!t.serves(2));
        t.set(7, 2);
        assert_eq!(t.take_started(), vec![2]);
        assert_eq!(t.take_stopped(), vec![2], "it stopped once in between");
        // Slots moving between serving instances report nothing.
        t.set(8, 1);
        assert!(!t.any_started());
        assert!(!t.any_stopped());
    }
}
