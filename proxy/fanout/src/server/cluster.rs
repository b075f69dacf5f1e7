//! Slots that move and engines that come and go while the fan-out runs (issue 21).
//!
//! The watcher thread (`crate::topology`) reads `CLUSTER NODES`; each changed topology wakes
//! the loop ([`Server::topology_event`]):
//!
//! - **Engines.** Nodes are matched to feed links by node id, else by address (the
//!   `--engines` list names the first ones). A new node gets a new link at the next instance
//!   number and every subscribed browser a snapshot of it (`must-refetch` `initial`); a node
//!   no longer listed (`CLUSTER FORGET`) has its link closed for good (`Link::retired`).
//!   Instance numbers are never reused, so browsers' positions stay meaningful: a retired
//!   instance serves no slot, is reported up to date at once and has no keys.
//! - **Slots.** The table, by instance number, goes to every browser as a `slots` message
//!   (also right after `subscribed`): replicas drop an instance's keys by it (`must-refetch`,
//!   `flush`), not by the jump hash of N.
//!
//! # Keys that move
//!
//! MIGRATE deletes a key on the source once the target restored it: the source's feed says
//! `MIGRATED k` (not relayed: the browser keeps its copy, the target's feed brings the new
//! one as `DEL k` + entries), the target's feed carries the RESTORE. The two feeds are
//! independent streams, so a browser may see the target's copy and then an older change of
//! the key from the source; and a `must-refetch` of one instance during a move drops by a
//! table that does not say where a moving key is. So keys that move are made right by a
//! resync rather than by ordering two feeds: a move — a `MIGRATED` effect on any feed, or
//! a change of owners or epochs in the table — makes every browser refetch every instance
//! (`slots-moved`) once the moves have been quiet for [`SETTLE`], and at least every
//! [`MAX_WAIT`] while they go on (a long reshard). All the `must-refetch`es come before any
//! snapshot entry, so together they drop every key whatever the table says, and each
//! snapshot is taken after the move (the owner changes only after its keys were migrated;
//! a `MIGRATED` is emitted after the target took the key). Until then a browser may show a
//! moving key's older value; it never keeps a wrong one. The rings get a barrier (`Ring::
//! barrier`): a browser that was away during the move cannot resume across it, it refetches.
//!
//! Cost: one snapshot per instance per browser per move burst — the price of keeping the
//! feeds independent. Ordering the two feeds per key (holding the target's effects on a key
//! until the source's `MIGRATED`) would avoid it and is the next step if reshards under
//! many browsers become common.

use std::sync::mpsc::TryRecvError;
use std::time::{Duration, Instant};

use mio::Token;

use super::Server;
use super::queue::Kind;
use super::resync::Inst;
use crate::feed::Link;
use crate::protocol;
use crate::topology::Topology;

/// Moves quiet for this long: resync.
pub(super) const SETTLE: Duration = Duration::from_millis(300);
/// Moves going on for this long: resync anyway.
pub(super) const MAX_WAIT: Duration = Duration::from_secs(3);

/// What the fan-out knows of the cluster.
#[derive(Default)]
pub(super) struct ClusterState {
    /// Per link, the node id once known.
    ids: Vec<Option<String>>,
    /// Slot → instance; `None` until the first topology (standalone engines: never).
    pub(super) table: Option<Vec<Option<u16>>>,
    /// Per link, its node's config epoch in the last topology.
    epochs: Vec<u64>,
    /// First and latest move signal not yet followed by a resync.
    moving: Option<(Instant, Instant)>,
    /// Resyncs done for moves (INFO `slot_moves`).
    pub(super) resyncs: u64,
}

impl Server {
    /// The watcher sent topologies: adopt the latest.
    pub(super) fn topology_event(&mut self) {
        let Some(rx) = &self.topo_rx else { return };
        let mut latest = None;
        loop {
            match rx.try_recv() {
                Ok(t) => latest = Some(t),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    self.topo_rx = None;
                    break;
                }
            }
        }
        if let Some(t) = latest {
            self.adopt(t);
        }
    }

    fn adopt(&mut self, t: Topology) {
        let cl = &mut self.cluster;
        cl.ids.resize(self.links.len(), None);
        // Node index → link.
        let mut link_of = Vec::with_capacity(t.nodes.len());
        let mut added = Vec::new();
        for n in &t.nodes {
            let by_id = cl.ids.iter().position(|id| id.as_deref() == Some(&n.id));
            let by_addr = || {
                let a = recached_net::listen::resolve(&n.addr).ok()?;
                (0..self.links.len()).find(|&j| cl.ids[j].is_none() && self.links[j].addr == a)
            };
            let j = match by_id.or_else(by_addr) {
                Some(j) => j,
                None => {
                    let Ok(a) = recached_net::listen::resolve(&n.addr) else {
                        log::warn!("fanout: cannot resolve node {}", n.addr);
                        link_of.push(None);
                        continue;
                    };
                    self.links.push(Link::new(a));
                    self.pending_snaps.push(Default::default());
                    cl.ids.push(None);
                    added.push(self.links.len() - 1);
                    log::info!(
                        "fanout: node {} ({}) joined: instance {}",
                        n.id,
                        n.addr,
                        self.links.len() - 1
                    );
                    self.links.len() - 1
                }
            };
            cl.ids[j] = Some(n.id.clone());
            if self.links[j].retired {
                log::info!("fanout: node {} is back: instance {j}", n.id);
                self.links[j].retired = false;
                added.push(j);
            }
            link_of.push(Some(j));
        }
        let listed: Vec<bool> = (0..self.links.len())
            .map(|j| link_of.contains(&Some(j)))
            .collect();
        let mut retired = Vec::new();
        for (j, listed) in listed.into_iter().enumerate() {
            if !listed && cl.ids[j].is_some() && !self.links[j].retired {
                log::info!(
                    "fanout: instance {j} ({}) left the cluster",
                    self.links[j].addr
                );
                retired.push(j);
            }
        }
        let table: Vec<Option<u16>> = t
            .owners
            .iter()
            .map(|o| o.and_then(|ni| link_of[usize::from(ni)]).map(|j| j as u16))
            .collect();
        let mut epochs = vec![0; self.links.len()];
        for (ni, n) in t.nodes.iter().enumerate() {
            if let Some(j) = link_of[ni] {
                epochs[j] = n.epoch;
            }
        }
        let moved = cl.table.as_ref().is_some_and(|old| *old != table)
            || (cl.table.is_some() && cl.epochs != epochs);
        cl.table = Some(table);
        cl.epochs = epochs;
        // Browsers: the table first (their refetches below drop by it), then the changes.
        let frame = self.slots_frame();
        let n = self.links.len();
        for idx in self.slots() {
            let Some(b) = self.browser(idx) else { continue };
            b.inst.resize_with(n, || Inst::Idle);
            if b.prefixes.is_some() {
                self.push(idx, frame.clone().into(), Kind::Control);
            }
        }
        for &j in &retired {
            self.links[j].sleep(self.poll.registry());
            self.links[j].retired = true;
            self.pending_snaps[j].clear();
            for idx in self.slots() {
                let subscribed = self
                    .browser(idx)
                    .is_some_and(|b| !matches!(b.inst[j], Inst::Idle));
                if subscribed {
                    self.resync(idx, j, "node-left");
                }
            }
        }
        for &j in &added {
            if self.subscribed > 0 {
                self.links[j].wake(
                    self.poll.registry(),
                    Token(super::LINK_BASE + j),
                    Instant::now(),
                );
            }
            for idx in self.slots() {
                let subscribed = self.browser(idx).is_some_and(|b| b.prefixes.is_some());
                if subscribed {
                    self.resync(idx, j, "initial");
                }
            }
        }
        if moved {
            self.slots_moving();
        }
    }

    /// The `slots` message for the current table (`None` before the first topology).
    pub(super) fn slots_frame(&self) -> String {
        let table = self.cluster.table.as_deref().unwrap_or(&[]);
        protocol::slots(self.links.len(), table)
    }

    /// Right after `subscribed`: the table, if the engines have one.
    pub(super) fn send_slots(&mut self, idx: usize) {
        if self.cluster.table.is_some() {
            let frame = self.slots_frame();
            self.push(idx, frame.into(), Kind::Control);
        }
    }

    /// A key or slot moved (a `MIGRATED` effect, a new owner in the table): browsers resync
    /// once the moves settle (module doc).
    pub(super) fn slots_moving(&mut self) {
        let now = Instant::now();
        let first = self.cluster.moving.map_or(now, |(first, _)| first);
        self.cluster.moving = Some((first, now));
    }

    /// From the loop's timers: the resync after moves, when due.
    pub(super) fn cluster_tick(&mut self, now: Instant) {
        let Some((first, last)) = self.cluster.moving else {
            return;
        };
        if now.saturating_duration_since(last) < SETTLE
            && now.saturating_duration_since(first) < MAX_WAIT
        {
            return;
        }
        self.cluster.moving = None;
        self.cluster.resyncs += 1;
        log::info!("fanout: slots moved: every browser refetches");
        for l in &mut self.links {
            if let Some(seq) = l.seq {
                l.ring.barrier(seq);
            }
        }
        for idx in self.slots() {
            for i in 0..self.links.len() {
                let follows = self
                    .browser(idx)
                    .is_some_and(|b| b.prefixes.is_some() && !matches!(b.inst[i], Inst::Idle));
                if follows && !self.links[i].retired {
                    self.resync(idx, i, "slots-moved");
                }
            }
        }
    }

    /// When `cluster_tick` has something to do next.
    pub(super) fn cluster_deadline(&self) -> Option<Instant> {
        self.cluster
            .moving
            .map(|(first, last)| (last + SETTLE).min(first + MAX_WAIT))
    }
}
