//! **Slot groups**: several slots between the same two recached engines moved in one pass,
//! each step pipelined over the group, instead of slot after slot.
//!
//! A slot's move is about ten round trips (two `SETSLOT`s and a `SLOTHOLD` to open it,
//! `GETKEYSINSLOT`, the relay's three, the `SETSLOT NODE`s of its commit), and with 1,000,000
//! keys a slot holds about 61 of them: the engines' work for one slot is under 100 µs, while
//! its round trips, each a wake-up of the engine and of the mover, took about 1 ms of wall time
//! (SLOWLOG during `recached resize 2` of 200,000 keys: the source ran 676 ms of commands in
//! 7.8 s of moving). A group of [`GROUP`] slots takes the same number of round trips as one
//! slot:
//!
//! 1. destination: `CLUSTER SETSLOT s IMPORTING <src>` for every slot, pipelined;
//! 2. source: `CLUSTER SETSLOT s MIGRATING <dst>` and `SLOTHOLD s` for every slot, pipelined;
//! 3. per database: `GETKEYSINSLOT s 100` for every slot not yet empty, pipelined, and the
//!    keys found relayed (`slotmove_relay.rs`) in batches of at most [`GROUP_BATCH`] keys,
//!    which may span slots (a recached engine runs a request over several local slots);
//! 4. commit: `SETSLOT s NODE <dst>` for every slot on the destination, then on every other
//!    node (each node's requests pipelined, the nodes in parallel).
//!
//! The pace ([`super::Pacer`]) rests after each step: after the opening, after each round of
//! `GETKEYSINSLOT`, after each relayed batch (never between its `TXLOCK` and its `TXUNLOCK`)
//! and after the commit. What a move does to the clients' latency on a busy host depends on
//! how long each stretch of its work lasts more than on its total: with a 2-core host serving
//! an open-loop load through the proxy, a CPU hog busy 5 ms of every 40 ms raised the median
//! of the load's 250 ms windows' p99 from 240 to 4,831 µs, and one busy 0.5 ms of every 4 ms
//! (the same share) only from 578 to 867 µs. A group's steps are each about one round trip
//! chain (under a millisecond), the group as a whole tens. A slot stays held (`SLOTHOLD`) from
//! step 2 to its commit: the group's time with its rests instead of one slot's.
//!
//! Any failure drops both connections (and with them the relay's key locks) and moves the
//! group's slots one by one, each from the state the engines report (`CLUSTER NODES`): the
//! per-slot path with its retries, which finishes a slot whatever step the group reached.
//! Between a redis-server node and anything else, slots move one by one (MIGRATE).

use resp::Value;

use super::{BATCH, HOLD_MS, Mover, Result};

/// Slots moved together (a quarter of the slot map's 64-slot block).
pub const GROUP: usize = 16;

/// Keys of the source's slot index listed per `SLOTKEYSBUILD` step ([`Mover::build_slot_index`]):
/// about 1.5 ms of the engine, at 75 ns a key.
pub const INDEX_STEP: usize = 20_000;

/// Most keys one relayed batch of a group carries: a `TXLOCK … DUMP` of this many 64-byte
/// values is about 0.1 ms of the source's time, during which its other clients wait.
pub const GROUP_BATCH: usize = 128;

impl Mover {
    /// Moves `slots` (each owned by `src` and not by `dst`, as the caller's plan read them)
    /// from `src` to `dst`: as a group (module docs) between two recached engines, else one by
    /// one. Returns the keys moved.
    pub fn move_slots(&mut self, slots: &[u16], src: usize, dst: usize) -> Result<u64> {
        if slots.len() > 1 {
            self.ensure(src)?;
            self.ensure(dst)?;
            if self.can_relay(src, dst) {
                if let Err(e) = self.build_slot_index(src) {
                    // The group's own requests then reconnect, or fail into the fallback.
                    log::warn!("{}: SLOTKEYSBUILD: {e}", self.nodes[src].addr());
                    self.nodes[src].disconnect();
                    self.ensure(src)?;
                }
                let r = self.try_move_group(slots, src, dst);
                self.pacer.rest();
                match r {
                    Ok(n) => {
                        self.totals.slots += slots.len();
                        self.totals.keys += n;
                        self.checkpoint_if_due(dst)?;
                        return Ok(n);
                    }
                    Err(e) => {
                        self.totals.retries += 1;
                        log::warn!(
                            "slots {}–{}: the group's move failed ({e}); moving them one by one",
                            slots[0],
                            slots[slots.len() - 1]
                        );
                        // Unread replies and the relay's locks go with the connections.
                        self.nodes[src].disconnect();
                        self.nodes[dst].disconnect();
                        let mut n = 0;
                        for &s in slots {
                            n += self.move_slot_from(s, src, dst, false)?;
                        }
                        return Ok(n);
                    }
                }
            }
        }
        let mut n = 0;
        for &s in slots {
            n += self.move_slot(s, src, dst)?;
        }
        Ok(n)
    }

    /// Has `src` list its keys by slot in steps of [`INDEX_STEP`] (`SLOTKEYSBUILD`), resting
    /// between them, once per connection: otherwise the first `GETKEYSINSLOT` lists them all
    /// in one call, 110 ms of the engine at 1,000,000 keys during which its clients wait
    /// (SLOWLOG during `recached resize 2`). The index is kept current from then on while
    /// slots move (`engine/core/src/slotkeys.rs`).
    fn build_slot_index(&mut self, src: usize) -> Result<()> {
        if self.nodes[src].slot_keys_ready {
            return Ok(());
        }
        let step = INDEX_STEP.to_string();
        // Each step lists `INDEX_STEP` keys or finishes (keys inserted meanwhile are listed
        // as they arrive), so a table of N keys takes N / INDEX_STEP + 1 steps.
        for _ in 0..1_000_000 {
            let left = match self.nodes[src].call(&["SLOTKEYSBUILD", &step])? {
                Value::Integer(n) => n,
                // An engine without it: GETKEYSINSLOT builds the index in one walk.
                Value::Error(_) => 0,
                other => return Err(format!("SLOTKEYSBUILD: {other:?}")),
            };
            self.pacer.rest();
            if left == 0 {
                break;
            }
        }
        self.nodes[src].slot_keys_ready = true;
        Ok(())
    }

    fn try_move_group(&mut self, slots: &[u16], src: usize, dst: usize) -> Result<u64> {
        let names: Vec<String> = slots.iter().map(u16::to_string).collect();
        let (src_id, dst_id) = (self.nodes[src].id.clone(), self.nodes[dst].id.clone());
        // Each step's requests encoded into one buffer, as `assign_slots` and the relay do.
        let mut out = Vec::new();
        for s in &names {
            resp::encode_request(&mut out, &["CLUSTER", "SETSLOT", s, "IMPORTING", &src_id]);
        }
        let replies = self.nodes[dst].raw(&out, names.len())?;
        self.check(dst, &replies, |_| true)?;
        out.clear();
        for s in &names {
            resp::encode_request(&mut out, &["CLUSTER", "SETSLOT", s, "MIGRATING", &dst_id]);
            resp::encode_request(&mut out, &["SLOTHOLD", s, HOLD_MS]);
        }
        let replies = self.nodes[src].raw(&out, 2 * names.len())?;
        // An engine that refuses SLOTHOLD only leaves Redis's -ASK in place (`Mover::hold`).
        self.check(src, &replies, |i| i % 2 == 0)?;
        self.pacer.rest();

        let mut moved = 0;
        for db in self.nodes[src].nonempty_dbs_reused()? {
            self.nodes[src].select(db)?;
            let mut pending: Vec<&String> = names.iter().collect();
            let mut rounds = 0usize;
            let batch = BATCH.to_string();
            while !pending.is_empty() {
                rounds += 1;
                if rounds > 1_000_000 {
                    return Err(format!(
                        "slots {}…: keys keep arriving on the source",
                        names[0]
                    ));
                }
                out.clear();
                for s in &pending {
                    resp::encode_request(&mut out, &["CLUSTER", "GETKEYSINSLOT", s, &batch]);
                }
                let replies = self.nodes[src].raw(&out, pending.len())?;
                let mut keys = Vec::new();
                let mut more = Vec::new();
                for (s, reply) in pending.iter().zip(replies) {
                    let Value::Array(found) = reply else {
                        return Err(format!("GETKEYSINSLOT {s}: {reply:?}"));
                    };
                    // Fewer keys than asked for: the slot is empty after this round (no key
                    // of a migrating slot can appear on the source: `Mover::drain`).
                    if found.len() >= BATCH {
                        more.push(*s);
                    }
                    keys.extend(found.into_iter().filter_map(|k| match k {
                        Value::Bulk(b) => Some(b),
                        _ => None,
                    }));
                }
                self.pacer.rest();
                for chunk in keys.chunks(GROUP_BATCH) {
                    moved += self.relay(src, dst, db, chunk)?;
                    self.pacer.rest();
                }
                pending = more;
            }
        }
        self.assign_slots(slots, dst)?;
        Ok(moved)
    }

    /// Fails with the first error reply among `replies` (of `node`) whose index `checked`.
    fn check(&self, node: usize, replies: &[Value], checked: impl Fn(usize) -> bool) -> Result<()> {
        match replies
            .iter()
            .enumerate()
            .find(|(i, v)| checked(*i) && matches!(v, Value::Error(_)))
        {
            Some((_, Value::Error(e))) => Err(format!(
                "{}: {}",
                self.nodes[node].addr(),
                String::from_utf8_lossy(e)
            )),
            _ => Ok(()),
        }
    }
}
