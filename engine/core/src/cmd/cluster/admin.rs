//! The CLUSTER subcommands that change the slot table, with redis 7.0's semantics and error
//! texts (`cluster.c` `clusterCommand`): SETSLOT (MIGRATING / IMPORTING / STABLE / NODE),
//! ADDSLOTS[RANGE], DELSLOTS[RANGE], FLUSHSLOTS, MEET, FORGET, BUMPEPOCH, SET-CONFIG-EPOCH and
//! SAVECONFIG. These are what `redis-cli --cluster reshard/rebalance/check` and
//! `recached resize` send.
//!
//! There is no cluster bus: a change reaches only the node it is sent to, so tools send it to
//! every node (redis-cli does: SETSLOT NODE to the target, the source, then every master).
//! Each change bumps [`Cluster::generation`]; the engine server then rewrites the nodes file
//! before the reply leaves (redis saves `nodes.conf` in `beforeSleep` likewise), see
//! [`super::conf`].

use super::{Cluster, Node, UNASSIGNED, cluster_mut, cluster_of, with_slot_keys};
use crate::Engine;
use crate::call::Call;
use crate::error::CmdError;
use crate::slot::SLOTS;

/// redis `getSlotOrReply`.
pub(super) fn slot_of(arg: &[u8]) -> Result<u16, CmdError> {
    match resp::parse_i64(arg) {
        Some(s) if (0..i64::from(SLOTS)).contains(&s) => Ok(s as u16),
        _ => Err(CmdError::Static("ERR Invalid or out of range slot")),
    }
}

/// Live keys of `slot` held here, in every database (redis counts its one database: a key
/// left in any database must stop a slot from changing owner).
fn keys_in_slot(e: &mut Engine, slot: u16, now_ms: u64) -> usize {
    (0..e.databases())
        .map(|db| {
            if e.db(db).is_empty() {
                0
            } else {
                with_slot_keys(e, db, now_ms, |sk, live| sk.count(slot, live))
            }
        })
        .sum()
}

/// The node named by a SETSLOT argument (redis `clusterLookupNode`).
fn node_named(cl: &Cluster, id: &[u8], unknown: &str) -> Result<usize, CmdError> {
    cl.nodes
        .iter()
        .position(|n| n.id.as_bytes() == id)
        .ok_or_else(|| {
            CmdError::Other(format!(
                "ERR {unknown} {}",
                crate::error::c_str_lossy(id, 128)
            ))
        })
}

/// `CLUSTER SETSLOT <slot> IMPORTING <id> | MIGRATING <id> | STABLE | NODE <id>`.
pub fn setslot(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    cluster_of(e)?;
    let slot = slot_of(c.argv[2])?;
    let action = c.argv[3].to_ascii_lowercase();
    let argc = c.argv.len();
    let cl = &e.cluster;
    match (&action[..], argc) {
        (b"migrating", 5) => {
            if usize::from(cl.owner_of(slot)) != cl.me {
                return Err(CmdError::Other(format!(
                    "ERR I'm not the owner of hash slot {slot}"
                )));
            }
            let n = node_named(cl, c.argv[4], "I don't know about node")?;
            let cl = cluster_mut(e)?;
            cl.migrating.insert(slot, n);
        }
        (b"importing", 5) => {
            if usize::from(cl.owner_of(slot)) == cl.me {
                return Err(CmdError::Other(format!(
                    "ERR I'm already the owner of hash slot {slot}"
                )));
            }
            let n = node_named(cl, c.argv[4], "I don't know about node")?;
            let cl = cluster_mut(e)?;
            cl.importing.insert(slot, n);
        }
        (b"stable", 4) => {
            let cl = cluster_mut(e)?;
            cl.migrating.remove(&slot);
            cl.importing.remove(&slot);
        }
        (b"node", 5) => {
            let n = node_named(cl, c.argv[4], "Unknown node")?;
            let mine = usize::from(cl.owner_of(slot)) == cl.me;
            let me = cl.me;
            let migrating = cl.migrating.contains_key(&slot);
            // Counted only when it can matter: the slot leaves this node, or is migrating.
            let held = if (mine && n != me) || migrating {
                keys_in_slot(e, slot, c.now_ms)
            } else {
                0
            };
            if mine && n != me && held != 0 {
                return Err(CmdError::Other(format!(
                    "ERR Can't assign hashslot {slot} to a different node while I still hold \
                     keys for this hash slot."
                )));
            }
            let cl = cluster_mut(e)?;
            if held == 0 {
                cl.migrating.remove(&slot);
            }
            cl.owner[usize::from(slot)] = n as u16;
            // A slot imported by hand: a new config epoch for this node (redis
            // `clusterBumpConfigEpochWithoutConsensus`), and the import is over.
            if n == me && cl.importing.remove(&slot).is_some() {
                bump_epoch(cl);
            }
        }
        _ => {
            return Err(CmdError::Static(
                "ERR Invalid CLUSTER SETSLOT action or number of arguments. Try CLUSTER HELP",
            ));
        }
    }
    cluster_mut(e)?.changed();
    super::hold::slot_changed(e, slot);
    c.w().ok();
    Ok(())
}

/// redis `clusterBumpConfigEpochWithoutConsensus`: a new epoch unless this node already has
/// the greatest one. Returns whether it bumped.
fn bump_epoch(cl: &mut Cluster) -> bool {
    let max = cl.nodes.iter().map(|n| n.epoch).max().unwrap_or(0);
    let mine = cl.nodes[cl.me].epoch;
    let unique_max = cl.nodes.iter().filter(|n| n.epoch == max).count() == 1;
    if mine == 0 || mine != max || !unique_max {
        cl.current_epoch = cl.current_epoch.max(max) + 1;
        cl.nodes[cl.me].epoch = cl.current_epoch;
        cl.changed();
        true
    } else {
        false
    }
}

/// The slots a (DEL|ADD)SLOTS[RANGE] request names, checked as redis
/// `checkSlotAssignmentsOrReply` does, in argument order.
fn slot_list(cl: &Cluster, argv: &[&[u8]], ranges: bool, del: bool) -> Result<Vec<u16>, CmdError> {
    let args = &argv[2..];
    let mut pairs = Vec::new();
    if ranges {
        for p in args.chunks(2) {
            let (a, b) = (slot_of(p[0])?, slot_of(p[1])?);
            pairs.push((a, b));
        }
    } else {
        // Every argument is parsed before any is checked.
        for a in args {
            slot_of(a)?;
        }
        for a in args {
            let s = slot_of(a)?;
            pairs.push((s, s));
        }
    }
    let mut seen = vec![false; usize::from(SLOTS)];
    let mut out = Vec::new();
    for (a, b) in pairs {
        if a > b {
            return Err(CmdError::Other(format!(
                "ERR start slot number {a} is greater than end slot number {b}"
            )));
        }
        for s in a..=b {
            let owned = cl.owner_of(s) != UNASSIGNED;
            if del && !owned {
                return Err(CmdError::Other(format!(
                    "ERR Slot {s} is already unassigned"
                )));
            }
            if !del && owned {
                return Err(CmdError::Other(format!("ERR Slot {s} is already busy")));
            }
            if std::mem::replace(&mut seen[usize::from(s)], true) {
                return Err(CmdError::Other(format!(
                    "ERR Slot {s} specified multiple times"
                )));
            }
            out.push(s);
        }
    }
    Ok(out)
}

fn update_slots(e: &mut Engine, c: &mut Call, ranges: bool, del: bool) -> Result<(), CmdError> {
    if ranges && c.argv.len() % 2 == 1 {
        return Err(CmdError::Other(format!(
            "ERR wrong number of arguments for '{}' command",
            c.spec.name
        )));
    }
    let slots = slot_list(cluster_of(e)?, c.argv, ranges, del)?;
    let cl = cluster_mut(e)?;
    for s in slots {
        // redis `clusterUpdateSlots`: an added slot this node was importing is no longer.
        if del {
            cl.owner[usize::from(s)] = UNASSIGNED;
        } else {
            cl.importing.remove(&s);
            cl.owner[usize::from(s)] = cl.me as u16;
        }
    }
    cl.changed();
    c.w().ok();
    Ok(())
}

/// `CLUSTER ADDSLOTS slot…`: assign unassigned slots to this node.
pub fn addslots(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    update_slots(e, c, false, false)
}

/// `CLUSTER ADDSLOTSRANGE start end …`.
pub fn addslotsrange(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    update_slots(e, c, true, false)
}

/// `CLUSTER DELSLOTS slot…`: the slots become unassigned in this node's table.
pub fn delslots(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    update_slots(e, c, false, true)
}

/// `CLUSTER DELSLOTSRANGE start end …`.
pub fn delslotsrange(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    update_slots(e, c, true, true)
}

/// `CLUSTER FLUSHSLOTS`: unassign this node's slots (database 0 must be empty).
pub fn flushslots(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    cluster_of(e)?;
    if !e.db(0).is_empty() {
        return Err(CmdError::Static(
            "ERR DB must be empty to perform CLUSTER FLUSHSLOTS.",
        ));
    }
    let cl = cluster_mut(e)?;
    let me = cl.me as u16;
    for o in cl.owner.iter_mut().filter(|o| **o == me) {
        *o = UNASSIGNED;
    }
    cl.changed();
    c.w().ok();
    Ok(())
}

/// `CLUSTER MEET ip port [bus-port]`: adds the node (owning no slot) to this node's table.
/// No handshake happens (there is no bus); the id derives from `ip:port` as written, the
/// same id the node computes for itself from its topology entry. Meeting a known node is a
/// no-op.
pub fn meet(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    cluster_of(e)?;
    let lossy = |a: &[u8]| String::from_utf8_lossy(a).into_owned();
    let port = resp::parse_i64(c.argv[3]).ok_or_else(|| {
        CmdError::Other(format!(
            "ERR Invalid TCP base port specified: {}",
            lossy(c.argv[3])
        ))
    })?;
    if c.argv.len() == 5 && resp::parse_i64(c.argv[4]).is_none() {
        return Err(CmdError::Other(format!(
            "ERR Invalid TCP bus port specified: {}",
            lossy(c.argv[4])
        )));
    }
    let host = std::str::from_utf8(c.argv[2])
        .ok()
        .filter(|h| h.parse::<std::net::IpAddr>().is_ok());
    let (Some(host), Ok(port @ 1..=65535)) = (host, u16::try_from(port)) else {
        return Err(CmdError::Other(format!(
            "ERR Invalid node address specified: {}:{}",
            lossy(c.argv[2]),
            lossy(c.argv[3])
        )));
    };
    let node = Node::new(host, port, 0);
    let cl = cluster_mut(e)?;
    if !cl.nodes.iter().any(|n| n.id == node.id) {
        cl.nodes.push(node);
        cl.changed();
    }
    c.w().ok();
    Ok(())
}

/// `CLUSTER FORGET id`: removes a node from this node's table; its slots become unassigned.
pub fn forget(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let cl = cluster_of(e)?;
    let n = node_named(cl, c.argv[2], "Unknown node")?;
    if n == cl.me {
        return Err(CmdError::Static(
            "ERR I tried hard but I can't forget myself...",
        ));
    }
    let cl = cluster_mut(e)?;
    cl.remove_node(n);
    c.w().ok();
    Ok(())
}

impl Cluster {
    /// Removes node `n` (not this one): its slots become unassigned, open slots naming it
    /// close, and the indexes above it shift down.
    pub(crate) fn remove_node(&mut self, n: usize) {
        let shift = |i: usize| if i > n { i - 1 } else { i };
        for o in self.owner.iter_mut() {
            if usize::from(*o) == n {
                *o = UNASSIGNED;
            } else if *o != UNASSIGNED {
                *o = shift(usize::from(*o)) as u16;
            }
        }
        for m in [&mut self.migrating, &mut self.importing] {
            m.retain(|_, i| *i != n);
            for i in m.values_mut() {
                *i = shift(*i);
            }
        }
        self.nodes.remove(n);
        self.me = shift(self.me);
        self.changed();
    }
}

/// `CLUSTER BUMPEPOCH` → `+BUMPED <epoch>` or `+STILL <epoch>`.
pub fn bumpepoch(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let cl = cluster_mut(e)?;
    let word = if bump_epoch(cl) { "BUMPED" } else { "STILL" };
    let line = format!("{word} {}", cl.nodes[cl.me].epoch);
    c.w().simple(line.as_bytes());
    Ok(())
}

/// `CLUSTER SET-CONFIG-EPOCH epoch`: only on a node that knows no other node and has epoch 0.
pub fn set_config_epoch(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    cluster_of(e)?;
    let epoch = crate::args::int_arg(c.argv[2])?;
    let cl = cluster_mut(e)?;
    if epoch < 0 {
        return Err(CmdError::Other(format!(
            "ERR Invalid config epoch specified: {epoch}"
        )));
    }
    if cl.nodes.len() > 1 {
        return Err(CmdError::Static(
            "ERR The user can assign a config epoch only when the node does not know any \
             other node.",
        ));
    }
    if cl.nodes[cl.me].epoch != 0 {
        return Err(CmdError::Static(
            "ERR Node config epoch is already non-zero",
        ));
    }
    let me = cl.me;
    cl.nodes[me].epoch = epoch as u64;
    cl.current_epoch = cl.current_epoch.max(epoch as u64);
    cl.changed();
    c.w().ok();
    Ok(())
}

/// `CLUSTER SAVECONFIG` → OK; the server writes the nodes file before the reply leaves.
pub fn saveconfig(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    cluster_mut(e)?.changed();
    c.w().ok();
    Ok(())
}

/// FAILOVER, REPLICATE, RESET: there are no replicas.
pub fn not_supported(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    cluster_of(e)?;
    Err(CmdError::Other(format!(
        "ERR CLUSTER {} is not supported: recached runs no replicas (see docs/cluster.md)",
        c.spec.short_name().to_uppercase()
    )))
}
