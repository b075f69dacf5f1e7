//! The CLUSTER subcommands that read the slot table (SLOTS, SHARDS, NODES, MYID, INFO,
//! KEYSLOT, COUNTKEYSINSLOT, GETKEYSINSLOT, LINKS, REPLICAS, COUNT-FAILURE-REPORTS, HELP) and
//! READONLY / READWRITE / ASKING, with redis 7.0's reply shapes (`cluster.c`).

use std::fmt::Write as _;

use super::{Cluster, UNASSIGNED, cluster_of};
use crate::Engine;
use crate::call::Call;
use crate::error::CmdError;
use crate::slot::{self, SLOTS};

/// Inclusive slot ranges per node, in slot order: `ranges[i]` for node `i`.
fn ranges_by_instance(c: &Cluster) -> Vec<Vec<(u16, u16)>> {
    let mut by = vec![Vec::new(); c.nodes.len()];
    for (start, end, owner) in c.ranges() {
        by[usize::from(owner)].push((start, end));
    }
    by
}

/// `CLUSTER SLOTS` → `[[start, end, [host, port, id, {}]], …]`: one entry per range, sorted
/// by slot, node metadata an empty map (RESP3) / empty array (RESP2) like redis 7.0.
pub fn slots(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let cl = cluster_of(e)?;
    let ranges = cl.ranges();
    // The writer borrows the call, hosts borrow its client: look them up first.
    let hosts: Vec<String> = (0..cl.nodes.len())
        .map(|i| cl.host(i, c.client).to_string())
        .collect();
    let mut w = c.w();
    w.array(ranges.len());
    for (start, end, owner) in ranges {
        let node = &cl.nodes[usize::from(owner)];
        w.array(3);
        w.integer(i64::from(start));
        w.integer(i64::from(end));
        w.array(4);
        w.bulk(hosts[usize::from(owner)].as_bytes());
        w.integer(i64::from(node.port));
        w.bulk(node.id.as_bytes());
        w.map(0);
    }
    Ok(())
}

/// `CLUSTER SHARDS` → one shard per instance: `{slots: [s, e, …], nodes: [{id, port, ip,
/// endpoint, [hostname,] role, replication-offset, health}]}` (redis 7.0 field order).
pub fn shards(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let cl = cluster_of(e)?;
    let by = ranges_by_instance(cl);
    let hosts: Vec<String> = (0..cl.nodes.len())
        .map(|i| cl.host(i, c.client).to_string())
        .collect();
    let mut w = c.w();
    w.array(cl.nodes.len());
    for (i, node) in cl.nodes.iter().enumerate() {
        let host = hosts[i].as_bytes();
        let is_ip = hosts[i].parse::<std::net::IpAddr>().is_ok();
        w.map(2);
        w.bulk(b"slots");
        w.array(by[i].len() * 2);
        for &(s, e) in &by[i] {
            w.integer(i64::from(s));
            w.integer(i64::from(e));
        }
        w.bulk(b"nodes");
        w.array(1);
        w.map(if is_ip { 7 } else { 8 });
        w.bulk(b"id");
        w.bulk(node.id.as_bytes());
        w.bulk(b"port");
        w.integer(i64::from(node.port));
        w.bulk(b"ip");
        w.bulk(host);
        w.bulk(b"endpoint");
        w.bulk(host);
        if !is_ip {
            w.bulk(b"hostname");
            w.bulk(host);
        }
        w.bulk(b"role");
        w.bulk(b"master");
        w.bulk(b"replication-offset");
        w.integer(0);
        w.bulk(b"health");
        w.bulk(b"online");
    }
    Ok(())
}

/// `CLUSTER NODES` → one line per node: `<id> <host>:<port>@0 <flags> - 0 <pong-ms> <epoch>
/// connected <slot ranges…>`, and on the `myself` line the open slots as
/// `[slot->-<id>]` (migrating) / `[slot-<-<id>]` (importing). The bus port is 0 (there is no
/// cluster bus); `pong-ms` is now for the other nodes (they are considered reachable), 0 for
/// myself, as Redis prints. A bulk string (RESP2) / verbatim `txt` string (RESP3).
pub fn nodes(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let cl = cluster_of(e)?;
    let text = nodes_text(cl, |i| cl.host(i, c.client), c.now_ms);
    c.w().verbatim(text.as_bytes());
    Ok(())
}

/// The CLUSTER NODES text with `host(i)` for each node's host and `pong_ms` for the others'
/// last pong (0 in the nodes file).
pub(crate) fn nodes_text<'a>(
    cl: &'a Cluster,
    host: impl Fn(usize) -> &'a str,
    pong_ms: u64,
) -> String {
    let by = ranges_by_instance(cl);
    let mut text = String::new();
    for (i, node) in cl.nodes.iter().enumerate() {
        let me = i == cl.me;
        let _ = write!(
            text,
            "{} {}:{}@0 {} - 0 {} {} connected",
            node.id,
            host(i),
            node.port,
            if me { "myself,master" } else { "master" },
            if me { 0 } else { pong_ms },
            node.epoch
        );
        for &(s, e) in &by[i] {
            if s == e {
                let _ = write!(text, " {s}");
            } else {
                let _ = write!(text, " {s}-{e}");
            }
        }
        if me {
            for (s, &to) in &cl.migrating {
                let _ = write!(text, " [{s}->-{}]", cl.nodes[to].id);
            }
            for (s, &from) in &cl.importing {
                let _ = write!(text, " [{s}-<-{}]", cl.nodes[from].id);
            }
        }
        text.push('\n');
    }
    text
}

/// `CLUSTER MYID` → this node's id.
pub fn myid(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let cl = cluster_of(e)?;
    c.w().bulk(cl.nodes[cl.me].id.as_bytes());
    Ok(())
}

/// `CLUSTER INFO` → Redis's fields, as a bulk (RESP2) / verbatim `txt` (RESP3) string.
pub fn info(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let cl = cluster_of(e)?;
    let n = cl.nodes.len();
    // Masters serving at least one slot (with many instances some may own none).
    let size = ranges_by_instance(cl)
        .iter()
        .filter(|r| !r.is_empty())
        .count();
    let assigned = cl.owner.iter().filter(|&&o| o != UNASSIGNED).count();
    // Redis's state is `fail` while a slot has no owner; here only that slot's keys fail
    // (`-CLUSTERDOWN Hash slot not served`), the others keep serving (docs/cluster.md).
    let state = if assigned == usize::from(SLOTS) {
        "ok"
    } else {
        "fail"
    };
    let mut text = String::new();
    for (k, v) in [
        ("cluster_state", state.to_string()),
        ("cluster_slots_assigned", assigned.to_string()),
        ("cluster_slots_ok", assigned.to_string()),
        ("cluster_slots_pfail", "0".into()),
        ("cluster_slots_fail", "0".into()),
        ("cluster_known_nodes", n.to_string()),
        ("cluster_size", size.to_string()),
        ("cluster_current_epoch", cl.current_epoch.to_string()),
        ("cluster_my_epoch", cl.nodes[cl.me].epoch.to_string()),
        ("cluster_stats_messages_sent", "0".into()),
        ("cluster_stats_messages_received", "0".into()),
        ("total_cluster_links_buffer_limit_exceeded", "0".into()),
    ] {
        let _ = write!(text, "{k}:{v}\r\n");
    }
    c.w().verbatim(text.as_bytes());
    Ok(())
}

/// `CLUSTER KEYSLOT key` → the key's hash slot.
pub fn keyslot(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    cluster_of(e)?;
    let s = slot::key_slot(c.argv[2]);
    c.w().integer(i64::from(s));
    Ok(())
}

/// A slot argument: an integer (else `ERR value is not an integer or out of range`).
fn slot_arg(arg: &[u8]) -> Result<i64, CmdError> {
    crate::args::int_arg(arg)
}

/// `CLUSTER COUNTKEYSINSLOT slot` → live keys held here in `slot` (selected database), from
/// the slot index (`crate::slotkeys`, built by one walk at first use).
pub fn countkeysinslot(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    cluster_of(e)?;
    let s = slot_arg(c.argv[2])?;
    if !(0..i64::from(SLOTS)).contains(&s) {
        return Err(CmdError::Static("ERR Invalid slot"));
    }
    let db = e.current_db();
    let n = super::with_slot_keys(e, db, c.now_ms, |sk, live| sk.count(s as u16, live));
    c.w().integer(n as i64);
    Ok(())
}

/// `SLOTKEYSBUILD count` (recached, sent by `recached resize` before it moves slots from
/// here): lists up to `count` more keys in the slot indexes of this node's databases, each
/// started if absent (`crate::slotkeys`), and replies the keys still to list in all of them
/// (0: complete). A large database's index is then built in steps of the mover's choosing
/// instead of in the first `GETKEYSINSLOT`, one walk of every key (110 ms at 1M keys).
pub fn slotkeysbuild(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    cluster_of(e)?;
    let mut budget = resp::parse_i64(c.argv[1])
        .filter(|n| *n > 0)
        .and_then(|n| usize::try_from(n).ok())
        .ok_or(CmdError::Static(
            "ERR SLOTKEYSBUILD count must be a positive integer",
        ))?;
    let mut left = 0;
    for db in 0..e.databases() {
        let d = e.db_mut(db);
        if d.is_empty() && d.slot_keys.is_none() {
            continue;
        }
        let (listed, unwalked) = d.walk_slot_keys(budget, c.now_ms);
        budget -= listed;
        left += unwalked;
    }
    c.w().integer(left as i64);
    Ok(())
}

/// `CLUSTER GETKEYSINSLOT slot count` → up to `count` live keys held here in `slot`.
pub fn getkeysinslot(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    cluster_of(e)?;
    let s = slot_arg(c.argv[2])?;
    let max = slot_arg(c.argv[3])?;
    if !(0..i64::from(SLOTS)).contains(&s) || max < 0 {
        return Err(CmdError::Static("ERR Invalid slot or number of keys"));
    }
    let db = e.current_db();
    let max = usize::try_from(max).unwrap_or(usize::MAX);
    let keys = super::with_slot_keys(e, db, c.now_ms, |sk, live| sk.keys(s as u16, max, live));
    let mut w = c.w();
    w.array(keys.len());
    for k in &keys {
        w.bulk(k);
    }
    Ok(())
}

/// `CLUSTER LINKS` → no links (there is no cluster bus).
pub fn links(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    cluster_of(e)?;
    c.w().array(0);
    Ok(())
}

/// The index of the node named `id`, or redis's `ERR Unknown node <id>`.
pub(super) fn known_node(cl: &Cluster, id: &[u8]) -> Result<usize, CmdError> {
    cl.nodes
        .iter()
        .position(|n| n.id.as_bytes() == id)
        .ok_or_else(|| {
            CmdError::Other(format!(
                "ERR Unknown node {}",
                crate::error::c_str_lossy(id, 128)
            ))
        })
}

/// `CLUSTER REPLICAS|SLAVES node-id` → no replicas.
pub fn replicas(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    known_node(cluster_of(e)?, c.argv[2])?;
    c.w().array(0);
    Ok(())
}

/// `CLUSTER COUNT-FAILURE-REPORTS node-id` → 0.
pub fn count_failure_reports(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    known_node(cluster_of(e)?, c.argv[2])?;
    c.w().integer(0);
    Ok(())
}

/// `READONLY` → OK (sets the flag; there are no replicas).
pub fn readonly(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    cluster_of(e)?;
    c.client.cluster.readonly = true;
    c.w().ok();
    Ok(())
}

/// `READWRITE` → OK.
pub fn readwrite(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    cluster_of(e)?;
    c.client.cluster.readonly = false;
    c.w().ok();
    Ok(())
}

/// `ASKING` → OK.
pub fn asking(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    cluster_of(e)?;
    c.client.cluster.asking = true;
    c.w().ok();
    Ok(())
}

/// `CLUSTER HELP` → redis 7.0's text without FAILOVER, REPLICATE and RESET (no replicas).
pub fn help(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    cluster_of(e)?;
    const LINES: &[&str] = &[
        "CLUSTER <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "ADDSLOTS <slot> [<slot> ...]",
        "    Assign slots to current node.",
        "ADDSLOTSRANGE <start slot> <end slot> [<start slot> <end slot> ...]",
        "    Assign slots which are between <start-slot> and <end-slot> to current node.",
        "BUMPEPOCH",
        "    Advance the cluster config epoch.",
        "COUNT-FAILURE-REPORTS <node-id>",
        "    Return number of failure reports for <node-id>.",
        "COUNTKEYSINSLOT <slot>",
        "    Return the number of keys in <slot>.",
        "DELSLOTS <slot> [<slot> ...]",
        "    Delete slots information from current node.",
        "DELSLOTSRANGE <start slot> <end slot> [<start slot> <end slot> ...]",
        "    Delete slots information which are between <start-slot> and <end-slot> from current node.",
        "FORGET <node-id>",
        "    Remove a node from the cluster.",
        "GETKEYSINSLOT <slot> <count>",
        "    Return key names stored by current node in a slot.",
        "FLUSHSLOTS",
        "    Delete current node own slots information.",
        "INFO",
        "    Return information about the cluster.",
        "KEYSLOT <key>",
        "    Return the hash slot for <key>.",
        "MEET <ip> <port> [<bus-port>]",
        "    Connect nodes into a working cluster.",
        "MYID",
        "    Return the node id.",
        "NODES",
        "    Return cluster configuration seen by node. Output format:",
        "    <id> <ip:port> <flags> <master> <pings> <pongs> <epoch> <link> <slot> ...",
        "SET-CONFIG-EPOCH <epoch>",
        "    Set config epoch of current node.",
        "SETSLOT <slot> (IMPORTING <node-id>|MIGRATING <node-id>|STABLE|NODE <node-id>)",
        "    Set slot state.",
        "REPLICAS <node-id>",
        "    Return <node-id> replicas.",
        "SAVECONFIG",
        "    Force saving cluster configuration on disk.",
        "SLOTS",
        "    Return information about slots range mappings. Each range is made of:",
        "    start, end, master and replicas IP addresses, ports and ids",
        "SHARDS",
        "    Return information about slot range mappings and the nodes associated with them.",
        "LINKS",
        "    Return information about all network links between this node and its peers.",
        "    Output format is an array where each array element is a map containing attributes of a link",
        "HELP",
        "    Prints this help.",
    ];
    let mut w = c.w();
    w.array(LINES.len());
    for l in LINES {
        w.simple(l.as_bytes());
    }
    Ok(())
}
