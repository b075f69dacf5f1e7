//! Slot holds: a slot moved by `recached resize` without any `-ASK` reaching a smart client.
//!
//! While a slot migrates, Redis Cluster answers a request for a key already moved with
//! `-ASK <slot> <host>:<port>`. A client that does not know that node cannot follow it:
//! redis-py 8.1's `RedisCluster` (the newest release) fails with `AttributeError: 'NoneType'
//! object has no attribute 'redis_connection'` when the node of an `-ASK` is not in its map,
//! and its map lists only nodes that own slots (CLUSTER SLOTS), so every slot moved to a new,
//! empty node can fail its calls — against redis-server 7.0.15 too (docs/cluster.md,
//! *Slot holds*). Valkey 9 moves slots atomically for the same reason.
//!
//! | command | does | reply |
//! |---|---|---|
//! | `SLOTHOLD slot timeout-ms` | holds `slot`, which this node has MIGRATING, for this connection: another connection's request that would get `-ASK` or `-TRYAGAIN` for it is postponed instead (as under CLIENT PAUSE) until the hold ends, then runs again — normally to `-MOVED` to the new owner, which every cluster client follows | `+OK`; `-ERR` when the slot is not migrating here or another connection holds it |
//! | `SLOTHOLD slot 0` | ends this connection's hold of `slot` | `+OK` |
//! | `SLOTHOLD BYPASS` | this connection is never postponed by a hold: it gets Redis's `-ASK` (the proxy's links, which follow `-ASK` themselves) | `+OK` |
//!
//! A hold ends when the slot stops migrating here (`CLUSTER SETSLOT slot NODE|STABLE`), when
//! its holder's connection closes, or at its timeout (at most [`MAX_TIMEOUT_MS`]); then the
//! postponed connections run their requests again, and Redis's `-ASK` rules apply to whatever
//! still finds the slot migrating. Requests for keys still on this node run as usual, and so
//! do commands run by EXEC or a script (checked when queued or called). The mover holds a
//! slot only while it works on it, and rests between slots (`recached resize --pace`), so a
//! client waits at most about one slot's move.

use std::collections::{HashMap, HashSet};

use crate::call::Call;
use crate::error::CmdError;
use crate::{Client, Delivery, Engine};

/// Longest hold a `SLOTHOLD` may ask for, in milliseconds.
pub const MAX_TIMEOUT_MS: i64 = 10_000;

#[derive(Debug, Default)]
pub struct Holds {
    /// Held slot → (holder connection, deadline in Unix µs).
    by_slot: HashMap<u16, (u64, u64)>,
    /// Connections postponed by a hold, in the order they were postponed.
    postponed: Vec<u64>,
    /// Connections that said `SLOTHOLD BYPASS`.
    bypass: HashSet<u64>,
}

impl Holds {
    /// Whether any slot is held: the cluster check's one test on its slow path.
    #[inline]
    pub fn active(&self) -> bool {
        !self.by_slot.is_empty()
    }

    /// Whether `slot` is held.
    pub fn holds(&self, slot: u16) -> bool {
        self.by_slot.contains_key(&slot)
    }
}

/// Whether `client`'s request, which would get `-ASK`/`-TRYAGAIN` for migrating `slot`, waits
/// instead (and is then recorded as postponed). A hold past its deadline ends first.
pub(crate) fn postpones(e: &mut Engine, client: &Client, slot: u16, now_us: u64) -> bool {
    let Some(&(holder, deadline)) = e.cluster_holds.by_slot.get(&slot) else {
        return false;
    };
    if now_us >= deadline {
        release(e, slot);
        return false;
    }
    if holder == client.id
        || e.cluster_holds.bypass.contains(&client.id)
        || client.addr == crate::script::SCRIPT_CLIENT_ADDR
    {
        return false;
    }
    if !e.cluster_holds.postponed.contains(&client.id) {
        e.cluster_holds.postponed.push(client.id);
    }
    true
}

/// The hold of `slot` ends: postponed connections run again.
pub(crate) fn release(e: &mut Engine, slot: u16) {
    if e.cluster_holds.by_slot.remove(&slot).is_none() {
        return;
    }
    for id in std::mem::take(&mut e.cluster_holds.postponed) {
        e.deliveries.push(Delivery {
            client_id: id,
            bytes: Vec::new(),
            unblock: true,
        });
    }
}

/// After `CLUSTER SETSLOT`: a slot no longer migrating here is no longer held.
pub(crate) fn slot_changed(e: &mut Engine, slot: u16) {
    if e.cluster_holds.active() && !e.cluster.migrating.contains_key(&slot) {
        release(e, slot);
    }
}

/// Each cron tick: holds past their deadline end.
pub fn cron(e: &mut Engine, now_us: u64) {
    if !e.cluster_holds.active() {
        return;
    }
    let late: Vec<u16> = e
        .cluster_holds
        .by_slot
        .iter()
        .filter(|(_, (_, deadline))| now_us >= *deadline)
        .map(|(&s, _)| s)
        .collect();
    for s in late {
        release(e, s);
    }
}

/// The connection is gone: its holds end.
pub fn client_closed(e: &mut Engine, client_id: u64) {
    e.cluster_holds.bypass.remove(&client_id);
    e.cluster_holds.postponed.retain(|&id| id != client_id);
    let mine: Vec<u16> = e
        .cluster_holds
        .by_slot
        .iter()
        .filter(|(_, (holder, _))| *holder == client_id)
        .map(|(&s, _)| s)
        .collect();
    for s in mine {
        release(e, s);
    }
}

/// `SLOTHOLD slot timeout-ms` | `SLOTHOLD BYPASS` (module docs).
pub fn slothold(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    if !e.cluster.enabled() {
        return Err(CmdError::Static(super::DISABLED));
    }
    let me = c.client.id;
    match c.argv.len() {
        2 if c.argv[1].eq_ignore_ascii_case(b"bypass") => {
            e.cluster_holds.bypass.insert(me);
        }
        3 => {
            let slot = super::admin::slot_of(c.argv[1])?;
            let ms = resp::parse_i64(c.argv[2])
                .filter(|t| (0..=MAX_TIMEOUT_MS).contains(t))
                .ok_or(CmdError::Static(
                    "ERR SLOTHOLD timeout must be an integer of milliseconds from 0 to 10000",
                ))?;
            let held_by = e.cluster_holds.by_slot.get(&slot).map(|&(h, _)| h);
            if held_by.is_some_and(|h| h != me) {
                return Err(CmdError::Other(format!(
                    "ERR hash slot {slot} is held by another connection"
                )));
            }
            if ms == 0 {
                if held_by.is_some() {
                    release(e, slot);
                }
            } else {
                if !e.cluster.migrating.contains_key(&slot) {
                    return Err(CmdError::Other(format!(
                        "ERR hash slot {slot} is not migrating from this node"
                    )));
                }
                let deadline = c.now_ms.saturating_add(ms as u64).saturating_mul(1000);
                e.cluster_holds.by_slot.insert(slot, (me, deadline));
            }
        }
        _ => return Err(CmdError::Syntax),
    }
    c.w().ok();
    Ok(())
}
