//! Resync: a browser's copy of each instance, from `subscribe` (or a resume) to live, and
//! back through `must-refetch` whenever it cannot follow.
//!
//! # A browser's view of one instance ([`Inst`])
//!
//! ```text
//!  subscribe ──► Waiting ──(link live)──► Snapshot{id, seq?} ──snapshot-end──► Live
//!      │            ▲                        │ entries relayed; effects ≤ S skipped,       │
//!      │            └──── resync ◄───────────┴─ effects > S deferred until the end ◄─────┘
//!      └─resume──► Resume ──(link live, ring reaches back)──► replay ──► Live
//! ```
//! A resync sends `must-refetch` and requests a new snapshot; the id of the old one is
//! forgotten, so its late entries are dropped.

use std::rc::Rc;

use super::queue::Kind;
use super::{Server, SnapOwner};
use crate::feed::{Effect, LinkState, Scope};
use crate::protocol::{self, Resume};

/// Where a browser stands with one instance (see the module doc).
#[derive(Debug)]
pub(super) enum Inst {
    /// Not subscribed yet.
    Idle,
    /// A snapshot is needed; requested when the link is live.
    Waiting,
    /// Reconnected with this position; checked against the ring when the link is live.
    Resume(Resume),
    /// Snapshot `id` requested; `seq` once its header arrived; effects after `seq` that
    /// arrive before its end wait in `deferred`.
    Snapshot {
        id: u64,
        seq: Option<u64>,
        deferred: Vec<Rc<Effect>>,
    },
    /// Every effect is relayed as it comes.
    Live,
}

impl Server {
    /// The browser is not reading fast enough: drop what is queued for it and start over
    /// with a snapshot per instance (this browser alone).
    pub(super) fn overflow(&mut self, idx: usize) {
        let Some(b) = self.browser(idx) else { return };
        log::debug!("fanout: browser {} fell behind: resync", b.serial);
        b.queue.retain(|o| o.kind == Kind::Control);
        b.release_all();
        b.backlogged = true;
        for i in 0..self.links.len() {
            let subscribed = self
                .browser(idx)
                .is_some_and(|b| !matches!(b.inst[i], Inst::Idle));
            if subscribed {
                self.resync(idx, i, "slow-consumer");
            }
        }
    }

    /// Restarts instance `i` for a browser: `must-refetch`, then a snapshot.
    pub(super) fn resync(&mut self, idx: usize, i: usize, reason: &str) {
        let Some(b) = self.browser(idx) else { return };
        if let Inst::Snapshot { id, .. } = b.inst[i] {
            self.snaps.remove(&id);
        }
        let Some(b) = self.browser(idx) else { return };
        b.inst[i] = Inst::Waiting;
        self.push(idx, protocol::must_refetch(i, reason).into(), Kind::Control);
        self.request_snapshot(idx, i);
    }

    /// Asks instance `i` for a snapshot of the browser's prefixes in its database (when its
    /// link is live).
    pub(super) fn request_snapshot(&mut self, idx: usize, i: usize) {
        let live = self.links[i].state == LinkState::Live;
        let (run, seq) = (
            self.links[i].run.clone().unwrap_or_default(),
            self.links[i].seq.unwrap_or(0),
        );
        let id = self.next_snap;
        let retired = self.links[i].retired;
        let Some(b) = self.browser(idx) else { return };
        if retired {
            // It serves nothing (server/cluster.rs): up to date with no keys.
            b.inst[i] = Inst::Live;
            self.push(idx, protocol::up_to_date(i, &run, seq).into(), Kind::Snap);
            return;
        }
        if b.closing.is_some() || !live || b.backlogged {
            // Requested later: at the link's next subscribe or heartbeat, or (backlogged)
            // when `drain` has written everything queued for this browser.
            b.inst[i] = Inst::Waiting;
            return;
        }
        let prefixes = b.prefixes.clone().unwrap_or_default();
        if prefixes.is_empty() {
            // Nothing visible: up to date by definition.
            b.inst[i] = Inst::Live;
            self.push(idx, protocol::up_to_date(i, &run, seq).into(), Kind::Snap);
            return;
        }
        b.inst[i] = Inst::Snapshot {
            id,
            seq: None,
            deferred: Vec::new(),
        };
        let (serial, db) = (b.serial, b.db);
        self.next_snap += 1;
        self.snaps.insert(
            id,
            SnapOwner {
                conn: idx,
                serial,
                instance: i,
            },
        );
        self.pending_snaps[i].push_back(id);
        let id_text = id.to_string();
        let db_text = db.to_string();
        // Database 0 keeps the original request (an engine without SNAPSHOTDB serves it).
        let mut argv: Vec<&[u8]> = if db == 0 {
            vec![b"FEED", b"SNAPSHOT", id_text.as_bytes()]
        } else {
            vec![
                b"FEED",
                b"SNAPSHOTDB",
                db_text.as_bytes(),
                id_text.as_bytes(),
            ]
        };
        argv.extend(prefixes.iter().map(Vec::as_slice));
        self.links[i].send(&argv);
    }

    /// A reconnecting browser's position for instance `i`: replay from the ring, or resync.
    pub(super) fn try_resume(&mut self, idx: usize, i: usize, r: Resume) {
        let link = &self.links[i];
        if link.retired {
            return self.request_snapshot(idx, i);
        }
        if link.state != LinkState::Live {
            if let Some(b) = self.browser(idx) {
                b.inst[i] = Inst::Resume(r);
            }
            return;
        }
        let replay: Option<Vec<Rc<Effect>>> = match (&link.run, link.seq) {
            (Some(run), Some(seq)) if *run == r.run => {
                link.ring.since(r.seq, seq).map(|it| it.cloned().collect())
            }
            _ => None,
        };
        let Some(replay) = replay else {
            return self.resync(idx, i, "cannot-resume");
        };
        if let Some(b) = self.browser(idx) {
            b.inst[i] = Inst::Live;
        }
        for e in &replay {
            self.deliver(idx, i, e);
        }
        let link = &self.links[i];
        let up = protocol::up_to_date(i, link.run.as_deref().unwrap_or(""), link.seq.unwrap_or(0));
        if self
            .browser(idx)
            .is_some_and(|b| matches!(b.inst[i], Inst::Live))
        {
            self.push(idx, up.into(), Kind::Snap);
        }
    }

    /// The live browser that asked for snapshot `id` of instance `i`, if still there.
    pub(super) fn snap_owner(&mut self, id: u64, i: usize) -> Option<usize> {
        let owner = *self.snaps.get(&id)?;
        let ok = owner.instance == i
            && self.browser(owner.conn).is_some_and(|b| {
                b.serial == owner.serial
                    && matches!(b.inst[i], Inst::Snapshot { id: x, .. } if x == id)
            });
        if ok {
            Some(owner.conn)
        } else {
            self.snaps.remove(&id);
            None
        }
    }

    /// The header of snapshot `id` from instance `i`: valid at `seq`, `keys` entries follow.
    pub(super) fn snapshot_header(&mut self, i: usize, id: u64, seq: u64, keys: u64) {
        self.pending_snaps[i].retain(|&p| p != id);
        let Some(idx) = self.snap_owner(id, i) else {
            return;
        };
        let run = self.links[i].run.clone().unwrap_or_default();
        if let Some(b) = self.browser(idx)
            && let Inst::Snapshot { seq: s, .. } = &mut b.inst[i]
        {
            *s = Some(seq);
        }
        self.push(
            idx,
            protocol::snapshot(i, &run, seq, keys).into(),
            Kind::Snap,
        );
    }

    /// One entry of snapshot `id` from instance `i` (a command that recreates one key).
    pub(super) fn snapshot_entry(&mut self, i: usize, id: u64, args: Vec<Vec<u8>>) {
        let Some(idx) = self.snap_owner(id, i) else {
            return;
        };
        let Some(b) = self.browser(idx) else { return };
        let prefixes = b.prefixes.as_deref().unwrap_or(&[]);
        // The engine selected by prefix already; checking again costs little and
        // keeps a key outside the browser's prefixes from ever reaching it.
        let ok = match crate::feed::scope_of(&args) {
            Scope::Keys(pos) => pos.iter().all(|&p| protocol::matches(prefixes, &args[p])),
            _ => false,
        };
        if ok {
            let argv: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
            self.push(idx, protocol::entry(i, &argv).into(), Kind::Snap);
        } else {
            log::warn!("fanout: instance {i}: snapshot entry outside the prefixes dropped");
        }
    }

    /// The end of snapshot `id` from instance `i`: the deferred effects, then `up-to-date`.
    pub(super) fn snapshot_end(&mut self, i: usize, id: u64, seq: u64) {
        let Some(idx) = self.snap_owner(id, i) else {
            return;
        };
        self.snaps.remove(&id);
        let Some(b) = self.browser(idx) else { return };
        let deferred = match std::mem::replace(&mut b.inst[i], Inst::Live) {
            Inst::Snapshot { deferred, .. } => deferred,
            _ => Vec::new(),
        };
        self.push(idx, protocol::snapshot_end(i, seq).into(), Kind::Snap);
        for e in &deferred {
            self.deliver(idx, i, e);
        }
        let link = &self.links[i];
        let at = link.seq.unwrap_or(seq).max(seq);
        let up = protocol::up_to_date(i, link.run.as_deref().unwrap_or(""), at);
        if self
            .browser(idx)
            .is_some_and(|b| matches!(b.inst[i], Inst::Live))
        {
            self.push(idx, up.into(), Kind::Snap);
        }
    }

    /// An error reply from instance `i` outside the subscribe step.
    pub(super) fn snapshot_error(&mut self, i: usize, e: &str) {
        // During the subscribe step `Link::event` handles it; here it answers a
        // FEED SNAPSHOT: charge it to the oldest snapshot without a header, whose
        // browser retries at the next tick.
        log::warn!("fanout: instance {i}: engine error: {e}");
        if let Some(id) = self.pending_snaps[i].pop_front()
            && let Some(idx) = self.snap_owner(id, i)
        {
            self.snaps.remove(&id);
            if let Some(b) = self.browser(idx) {
                b.inst[i] = Inst::Waiting;
            }
            self.push(
                idx,
                protocol::error("snapshot-failed", e).into(),
                Kind::Control,
            );
        }
    }
}
