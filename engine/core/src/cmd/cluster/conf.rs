//! The nodes file: what a cluster engine keeps of the slot table across restarts
//! (`<dir>/nodes-<port>.conf`, like redis `cluster-config-file`, whose format it follows).
//!
//! ```text
//! <id> <host>:<port>@0 <flags> - 0 0 <epoch> connected <slot or range>… [<slot>->-<id>]… [<slot>-<-<id>]…
//! …one line per node, `myself` among the flags of this engine's line…
//! vars currentEpoch <n> lastVoteEpoch 0
//! ```
//!
//! Hosts are written as in the topology (a wildcard stays a wildcard). The server rewrites
//! the file (temp file, fsync, rename) whenever [`Cluster::generation`] moves, before the
//! reply of the command that changed it is sent. At start, [`Cluster::load_conf`] adopts a
//! file whose `myself` address is this engine's own topology entry; its nodes and owners
//! then replace the ones computed from the topology. docs/cluster.md, "Moving slots".

use std::collections::BTreeMap;

use super::{Cluster, Node, UNASSIGNED, nodes_text, parse_node};
use crate::slot::SLOTS;

impl Cluster {
    /// The nodes file text.
    pub fn to_conf(&self) -> String {
        let mut text = nodes_text(
            self,
            |i| {
                let a = &self.nodes[i].addr;
                a.rsplit_once(':').map_or(a.as_str(), |(h, _)| h)
            },
            0,
        );
        text.push_str(&format!(
            "vars currentEpoch {} lastVoteEpoch 0\n",
            self.current_epoch
        ));
        text
    }

    /// Adopts a nodes file (see the module docs). Errors: the text is malformed, or its
    /// `myself` line is not this engine's address (a file of another layout); nothing
    /// changes then.
    pub fn load_conf(&mut self, text: &str) -> Result<(), String> {
        let parsed = parse(text)?;
        let me = self
            .my_addr()
            .ok_or("standalone engines keep no nodes file")?;
        let mine = &parsed.nodes[parsed.me];
        if mine.addr != me {
            return Err(format!(
                "the nodes file is for {} but this engine is {me}",
                mine.addr
            ));
        }
        self.nodes = parsed.nodes;
        self.me = parsed.me;
        self.owner = parsed.owner;
        self.migrating = parsed.migrating;
        self.importing = parsed.importing;
        self.current_epoch = parsed.current_epoch;
        Ok(())
    }
}

struct Parsed {
    nodes: Vec<Node>,
    me: usize,
    owner: Vec<u16>,
    migrating: BTreeMap<u16, usize>,
    importing: BTreeMap<u16, usize>,
    current_epoch: u64,
}

/// Parses CLUSTER NODES lines (a nodes file, or a CLUSTER NODES reply).
fn parse(text: &str) -> Result<Parsed, String> {
    let mut nodes = Vec::new();
    let mut me = None;
    let mut current_epoch = 0;
    // (node, slot fields) until every id is known.
    let mut fields: Vec<Vec<&str>> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let bad = |what: &str| format!("line {}: {what}: {line:?}", n + 1);
        let f: Vec<&str> = line.split_ascii_whitespace().collect();
        if f.is_empty() {
            continue;
        }
        if f[0] == "vars" {
            for pair in f[1..].chunks(2) {
                if let [k, v] = pair
                    && *k == "currentEpoch"
                {
                    current_epoch = v.parse().map_err(|_| bad("bad currentEpoch"))?;
                }
            }
            continue;
        }
        if f.len() < 8 {
            return Err(bad("expected at least 8 fields"));
        }
        let addr = f[1].split(['@', ',']).next().unwrap_or_default();
        let (host, port) = parse_node(addr).map_err(|e| bad(&e))?;
        let epoch: u64 = f[6].parse().map_err(|_| bad("bad config epoch"))?;
        let mut node = Node::new(&host, port, epoch);
        if f[0].len() != 40 || !f[0].bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad("bad node id"));
        }
        node.id = f[0].to_string();
        if nodes.iter().any(|m: &Node| m.id == node.id) {
            return Err(bad("node listed twice"));
        }
        if f[2].split(',').any(|flag| flag == "myself") {
            if me.is_some() {
                return Err(bad("two myself lines"));
            }
            me = Some(nodes.len());
        }
        nodes.push(node);
        fields.push(f[8..].to_vec());
    }
    let me = me.ok_or("no myself line")?;
    let index = |id: &str| {
        nodes
            .iter()
            .position(|n| n.id == id)
            .ok_or_else(|| format!("unknown node {id}"))
    };
    let mut owner = vec![UNASSIGNED; usize::from(SLOTS)];
    let mut migrating = BTreeMap::new();
    let mut importing = BTreeMap::new();
    let slot = |s: &str| {
        s.parse::<u16>()
            .ok()
            .filter(|&s| s < SLOTS)
            .ok_or_else(|| format!("bad slot {s:?}"))
    };
    for (i, f) in fields.iter().enumerate() {
        for field in f {
            if let Some(open) = field.strip_prefix('[').and_then(|o| o.strip_suffix(']')) {
                if let Some((s, id)) = open.split_once("->-") {
                    migrating.insert(slot(s)?, index(id)?);
                } else if let Some((s, id)) = open.split_once("-<-") {
                    importing.insert(slot(s)?, index(id)?);
                } else {
                    return Err(format!("bad open slot {field:?}"));
                }
                continue;
            }
            let (a, b) = match field.split_once('-') {
                Some((a, b)) => (slot(a)?, slot(b)?),
                None => (slot(field)?, slot(field)?),
            };
            if a > b {
                return Err(format!("bad slot range {field:?}"));
            }
            for s in a..=b {
                owner[usize::from(s)] = i as u16;
            }
        }
    }
    let current_epoch = current_epoch.max(nodes.iter().map(|n| n.epoch).max().unwrap_or(0));
    Ok(Parsed {
        nodes,
        me,
        owner,
        migrating,
        importing,
        current_epoch,
    })
}

/// The nodes file of a new engine at `new_addr` (`host:port` as in its topology entry) that
/// joins the fleet whose `CLUSTER NODES` reply is `cluster_nodes`: it knows every node and
/// slot owner, owns no slot and has config epoch 0 (what `recached resize` writes before it
/// starts an engine, then `CLUSTER MEET`s it on the others).
pub fn conf_for_new_node(cluster_nodes: &str, new_addr: &str) -> Result<String, String> {
    let mut p = parse(cluster_nodes)?;
    let (host, port) = parse_node(new_addr)?;
    let node = Node::new(&host, port, 0);
    if p.nodes.iter().any(|n| n.id == node.id) {
        return Err(format!("{new_addr} is already a node of the fleet"));
    }
    // The open slots were the replying node's own.
    p.migrating.clear();
    p.importing.clear();
    p.nodes.push(node);
    let cl = Cluster {
        me: p.nodes.len() - 1,
        nodes: p.nodes,
        owner: p.owner,
        current_epoch: p.current_epoch,
        ..Cluster::default()
    };
    Ok(cl.to_conf())
}
