//! Consumer groups (redis `streamCG`, `streamConsumer`, `streamNACK`).
//!
//! A [`Group`] has a last-delivered ID, an entries-read counter (for lag), a pending entries
//! list (PEL: entry ID → [`Nack`], ordered) and its consumers by name (ordered by name bytes,
//! as Redis's radix tree lists them). Each pending entry belongs to exactly one consumer,
//! which also keeps the set of IDs it owns. Every change goes through a method here so the
//! group's byte count ([`Group::mem`]) stays right in O(1).

use std::collections::{BTreeMap, BTreeSet};

use super::StreamId;

/// redis `SCG_INVALID_ENTRIES_READ`.
pub const INVALID_ENTRIES_READ: i64 = -1;
/// Bytes accounted per group beyond its name (tree slot, header).
pub const GROUP_OVERHEAD: usize = 96;
/// Bytes accounted per pending entry: the group PEL slot and the consumer's.
const NACK_OVERHEAD: usize = 72;
/// Bytes accounted per consumer beyond its name.
const CONSUMER_OVERHEAD: usize = 64;

/// A pending entry: delivered, not yet acknowledged.
#[derive(Clone, Debug, PartialEq)]
pub struct Nack {
    /// Unix ms of the last delivery.
    pub delivery_time: u64,
    /// Times delivered.
    pub delivery_count: u64,
    /// Owner (empty only while XCLAIM FORCE creates it).
    pub consumer: Box<[u8]>,
}

/// A consumer of a group.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Consumer {
    /// Unix ms of its last read or claim (XINFO `idle`, `seen-time`).
    pub seen_time: u64,
    /// IDs it owns in the group's PEL.
    pub pel: BTreeSet<StreamId>,
}

/// A consumer group.
#[derive(Clone, Debug, PartialEq)]
pub struct Group {
    pub last_id: StreamId,
    /// Logical read counter, [`INVALID_ENTRIES_READ`] when unknown.
    pub entries_read: i64,
    pel: BTreeMap<StreamId, Nack>,
    consumers: BTreeMap<Box<[u8]>, Consumer>,
    /// Bytes of consumer names, counted once per consumer and once per pending entry.
    name_bytes: usize,
}

impl Group {
    pub fn new(last_id: StreamId, entries_read: i64) -> Group {
        Group {
            last_id,
            entries_read,
            pel: BTreeMap::new(),
            consumers: BTreeMap::new(),
            name_bytes: 0,
        }
    }

    /// Accounted bytes (O(1)).
    pub fn mem(&self) -> usize {
        self.pel.len() * NACK_OVERHEAD + self.consumers.len() * CONSUMER_OVERHEAD + self.name_bytes
    }

    pub fn pel(&self) -> &BTreeMap<StreamId, Nack> {
        &self.pel
    }

    pub fn consumers(&self) -> &BTreeMap<Box<[u8]>, Consumer> {
        &self.consumers
    }

    pub fn consumer(&self, name: &[u8]) -> Option<&Consumer> {
        self.consumers.get(name)
    }

    /// redis `streamCreateConsumer`: false if it exists.
    pub fn create_consumer(&mut self, name: &[u8], now_ms: u64) -> bool {
        if self.consumers.contains_key(name) {
            return false;
        }
        self.name_bytes += name.len();
        self.consumers.insert(
            name.into(),
            Consumer {
                seen_time: now_ms,
                pel: BTreeSet::new(),
            },
        );
        true
    }

    /// redis `streamLookupConsumer` with refresh: whether it exists; refreshes its seen time.
    pub fn touch_consumer(&mut self, name: &[u8], now_ms: u64) -> bool {
        match self.consumers.get_mut(name) {
            Some(c) => {
                c.seen_time = now_ms;
                true
            }
            None => false,
        }
    }

    /// Looks the consumer up (refreshing it) or creates it; returns true if created.
    pub fn ensure_consumer(&mut self, name: &[u8], now_ms: u64) -> bool {
        !self.touch_consumer(name, now_ms) && self.create_consumer(name, now_ms)
    }

    /// redis `streamDelConsumer`: removes the consumer and its pending entries; returns how
    /// many it had, `None` if there was no such consumer.
    pub fn delete_consumer(&mut self, name: &[u8]) -> Option<usize> {
        let c = self.consumers.remove(name)?;
        self.name_bytes -= name.len();
        for id in &c.pel {
            if let Some(n) = self.pel.remove(id) {
                self.name_bytes -= n.consumer.len();
            }
        }
        Some(c.pel.len())
    }

    /// Delivery by XREADGROUP: `id` becomes pending for `consumer` with count 1 and time
    /// `now_ms`, taken from its previous owner if it was pending already.
    pub fn deliver(&mut self, id: StreamId, consumer: &[u8], now_ms: u64) {
        self.detach(id);
        self.name_bytes += consumer.len();
        self.pel.insert(
            id,
            Nack {
                delivery_time: now_ms,
                delivery_count: 1,
                consumer: consumer.into(),
            },
        );
        if let Some(c) = self.consumers.get_mut(consumer) {
            c.pel.insert(id);
        }
    }

    /// Removes `id` from the PEL and its owner (XACK); returns whether it was pending.
    pub fn ack(&mut self, id: StreamId) -> bool {
        self.detach(id).is_some()
    }

    fn detach(&mut self, id: StreamId) -> Option<Nack> {
        let n = self.pel.remove(&id)?;
        self.name_bytes -= n.consumer.len();
        if let Some(c) = self.consumers.get_mut(&n.consumer) {
            c.pel.remove(&id);
        }
        Some(n)
    }

    /// The pending entry `id`.
    pub fn nack(&self, id: StreamId) -> Option<&Nack> {
        self.pel.get(&id)
    }

    /// Changes delivery time / count of pending entry `id` (no size change).
    pub fn nack_mut(&mut self, id: StreamId) -> Option<&mut Nack> {
        self.pel.get_mut(&id)
    }

    /// XCLAIM FORCE of an ID not pending: a new pending entry with no owner yet, count 1.
    pub fn force_create(&mut self, id: StreamId, now_ms: u64) {
        self.pel.insert(
            id,
            Nack {
                delivery_time: now_ms,
                delivery_count: 1,
                consumer: Box::default(),
            },
        );
    }

    /// Makes `consumer` (which must exist) the owner of pending entry `id`.
    pub fn assign(&mut self, id: StreamId, consumer: &[u8]) {
        let Some(n) = self.pel.get_mut(&id) else {
            return;
        };
        if &*n.consumer == consumer {
            return;
        }
        let old = std::mem::replace(&mut n.consumer, consumer.into());
        self.name_bytes = self.name_bytes + consumer.len() - old.len();
        if let Some(c) = self.consumers.get_mut(&old) {
            c.pel.remove(&id);
        }
        if let Some(c) = self.consumers.get_mut(consumer) {
            c.pel.insert(id);
        }
    }

    /// Restores a pending entry (snapshot load); the consumer must exist.
    pub fn load_nack(&mut self, id: StreamId, nack: Nack) {
        self.name_bytes += nack.consumer.len();
        if let Some(c) = self.consumers.get_mut(&nack.consumer) {
            c.pel.insert(id);
        }
        self.pel.insert(id, nack);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pel_ownership_and_bytes() {
        let mut g = Group::new(StreamId::MIN, 0);
        assert!(g.create_consumer(b"alice", 1));
        assert!(!g.create_consumer(b"alice", 1));
        assert!(g.ensure_consumer(b"bob", 2));
        let id = StreamId::new(1, 0);
        g.deliver(id, b"alice", 5);
        g.deliver(StreamId::new(2, 0), b"alice", 5);
        assert_eq!(g.consumer(b"alice").unwrap().pel.len(), 2);
        g.deliver(id, b"bob", 6);
        assert_eq!(g.consumer(b"alice").unwrap().pel.len(), 1);
        assert_eq!(g.nack(id).unwrap().consumer.as_ref(), b"bob");
        g.assign(id, b"alice");
        assert_eq!(g.consumer(b"bob").unwrap().pel.len(), 0);
        assert!(g.ack(id));
        assert!(!g.ack(id));
        assert_eq!(g.delete_consumer(b"alice"), Some(1));
        assert!(g.pel().is_empty());
        assert_eq!(g.mem(), CONSUMER_OVERHEAD + 3);
    }
}
