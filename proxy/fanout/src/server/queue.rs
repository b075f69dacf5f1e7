//! A browser's outgoing queue and the flush rounds that drain every queue into its socket.
//!
//! # Queues
//!
//! Each browser has a queue of frames with a byte budget per kind: keychanges (and
//! heartbeats) [`FanoutOptions::queue_bytes`](crate::FanoutOptions::queue_bytes), snapshot data
//! [`FanoutOptions::snapshot_bytes`](crate::FanoutOptions::snapshot_bytes). Exceeding the first drops the queued keychanges and
//! snapshot data and resyncs every instance of that browser (it alone); exceeding the second
//! closes it. The queue is moved into tungstenite only while the socket takes it, so
//! tungstenite's own buffer stays around one write buffer. Keychanges and heartbeats skip
//! tungstenite: each effect is framed once ([`crate::feed::Effect::wire`]) and its bytes
//! appended to the browser's pending batch, written whole at the next flush round. (One
//! `memcpy` of ~100 bytes per browser per keychange; sharing the frame and `writev`-ing
//! references would save that copy, but the write syscall costs over a hundred times more.) All
//! browsers' queued bytes together are capped by [`FanoutOptions::total_queue_bytes`](crate::FanoutOptions::total_queue_bytes):
//! past it every browser first writes what its socket takes, then the largest queues left
//! (of stalled browsers first) are dropped and resynced (`check_total`), so memory stays
//! bounded however many slow browsers there are. Outside the budgets each browser holds at
//! most one chunk ([`DRAIN_CHUNK`]) plus one frame in tungstenite (nothing more is moved in
//! while it holds bytes the socket refused) and as much in the batch handed to the socket
//! (batches are cut at [`DRAIN_CHUNK`]). A browser resynced for falling behind gets its
//! snapshots only once it has read everything queued before (`Browser::backlogged`): a
//! browser that does not read would otherwise be sent, and shed from, one snapshot after
//! another (tests/tests/fanout_queue_cap.rs).
//!
//! # Pacing
//!
//! Under a broadcast load the cost is one loopback `write` per browser per round (measured
//! ~3 µs on the 2-core test machine, most of it the kernel's TCP send and the receiver's
//! wakeup; the bytes hardly matter), so the way to serve more browsers is fewer rounds with
//! more keychanges each. A round with at most [`FLUSH_NOW_MAX`] dirty browsers is written at
//! once (an idle fleet keeps its ~100 µs latency), and so is one whose browsers were mostly
//! not written in the previous round (distinct prefixes: waiting would coalesce nothing).
//! A larger round of browsers written last round too (a broadcast) waits until
//! [`FanoutOptions::flush_delay_us`](crate::FanoutOptions::flush_delay_us) (default 2 ms) after the previous round started, and
//! keychanges arriving meanwhile join the same write. The trade-off: up to one delay of
//! added latency for a fan-out CPU bounded by `browsers × 3 µs / delay`; a round that takes
//! longer than the delay (C × 3 µs > 2 ms, i.e. beyond ~700 broadcast browsers) is
//! self-clocked anyway: the next round carries everything that arrived during this one.

use std::cell::Cell;
use std::collections::VecDeque;
use std::io;
use std::rc::Rc;
use std::time::Instant;

use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::{Message, Utf8Bytes, WebSocket};

use super::resync::Inst;
use super::{Conn, Server, Stream};
use crate::protocol;

/// Move this much of a browser's queue into tungstenite before flushing to the socket.
pub(super) const DRAIN_CHUNK: usize = 256 * 1024;

/// A flush round with at most this many dirty browsers goes out at once (it costs at most
/// ~0.2 ms of loopback writes); a larger one is paced by [`FanoutOptions::flush_delay_us`](crate::FanoutOptions::flush_delay_us).
pub(super) const FLUSH_NOW_MAX: usize = 32;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Kind {
    /// Never dropped: hello, subscribed, must-refetch, error, pong.
    Control,
    /// Keychanges and heartbeats: dropped on overflow (a resync follows).
    Live,
    /// Snapshot data and up-to-date markers: dropped on overflow (a resync follows).
    Snap,
}

pub(super) struct Out {
    pub(super) body: Body,
    pub(super) kind: Kind,
}

pub(super) enum Body {
    /// One message, written through tungstenite.
    Text(Utf8Bytes),
    /// Consecutive keychanges and heartbeats already framed as unmasked WebSocket text frames
    /// (RFC 6455 §5.2), handed to the stream whole ([`Replay::send_raw`]): one `memcpy` per
    /// browser per effect instead of a queue entry, and one write for all of them.
    Wire(Vec<u8>),
}

pub(super) struct Browser {
    pub(super) ws: WebSocket<Stream>,
    pub(super) serial: u64,
    /// Prefixes in effect (requested ∩ allowed); `None` until `subscribe`.
    pub(super) prefixes: Option<Vec<Vec<u8>>>,
    /// The engine database it follows (`subscribe`'s `db`, default 0).
    pub(super) db: usize,
    pub(super) inst: Vec<Inst>,
    pub(super) queue: VecDeque<Out>,
    pub(super) live_bytes: usize,
    pub(super) snap_bytes: usize,
    /// The fan-out's total of `live_bytes + snap_bytes` over all browsers (shared counter,
    /// kept exact by [`Browser::charge`], [`Browser::release`], [`Browser::release_all`] and
    /// `Drop`).
    pub(super) total: Rc<Cell<usize>>,
    pub(super) last_recv: Instant,
    /// Set when a close was started (or the peer is gone); dropped after [`CLOSE_GRACE`].
    pub(super) closing: Option<Instant>,
    pub(super) dirty: bool,
    /// The flush round ([`Stats::rounds`]) that last drained it.
    pub(super) drained_round: u64,
    /// Resynced for falling behind (`slow-consumer`): its snapshots are requested only once
    /// everything queued for it (the `must-refetch` included) has reached the socket, so a
    /// browser that does not read costs neither a snapshot per shed nor queue churn.
    pub(super) backlogged: bool,
    /// Its socket refused bytes at the last drain (something stayed queued): the total cap
    /// sheds such browsers first, so one that reads is not resynced for frames queued to it in
    /// the same loop iteration.
    pub(super) stalled: bool,
}

impl Browser {
    /// Counts `n` queued bytes of `kind` against this browser's and the fan-out's budgets.
    pub(super) fn charge(&mut self, kind: Kind, n: usize) {
        match kind {
            Kind::Live => self.live_bytes += n,
            Kind::Snap => self.snap_bytes += n,
            Kind::Control => return,
        }
        self.total.set(self.total.get() + n);
    }

    /// `n` bytes of `kind` left the queue.
    pub(super) fn release(&mut self, kind: Kind, n: usize) {
        match kind {
            Kind::Live => self.live_bytes -= n,
            Kind::Snap => self.snap_bytes -= n,
            Kind::Control => return,
        }
        self.total.set(self.total.get() - n);
    }

    /// Every budgeted byte left the queue (dropped on overflow or close).
    pub(super) fn release_all(&mut self) {
        self.total
            .set(self.total.get() - self.live_bytes - self.snap_bytes);
        self.live_bytes = 0;
        self.snap_bytes = 0;
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        self.release_all();
    }
}

impl Server {
    pub(super) fn mark_dirty(&mut self, idx: usize) {
        let round = self.stats.rounds;
        if let Some(Conn::Ws(b)) = self.conns.get_mut(idx)
            && !b.dirty
        {
            b.dirty = true;
            if b.drained_round == round {
                self.dirty_again += 1;
            }
            self.dirty.push(idx);
        }
    }

    pub(super) fn push(&mut self, idx: usize, frame: Utf8Bytes, kind: Kind) {
        if kind == Kind::Live {
            return self.push_wire(idx, &protocol::text_frame(frame.as_bytes()));
        }
        let (queue_bytes, snapshot_bytes) = (self.queue_bytes, self.snapshot_bytes);
        let Some(b) = self.browser(idx) else { return };
        if b.closing.is_some() {
            return;
        }
        let n = frame.len();
        match kind {
            Kind::Control => {}
            Kind::Live => {
                if b.live_bytes + n > queue_bytes {
                    return self.overflow(idx);
                }
            }
            Kind::Snap => {
                if b.snap_bytes + n > snapshot_bytes {
                    return self.refuse(
                        idx,
                        CloseCode::Size,
                        "snapshot larger than the fan-out's limit for one browser",
                    );
                }
            }
        }
        b.charge(kind, n);
        b.queue.push_back(Out {
            body: Body::Text(frame),
            kind,
        });
        self.mark_dirty(idx);
        self.check_total();
    }

    /// Past the cap on all browsers' queued bytes: the largest queues of stalled browsers, then
    /// of the others, are dropped and their browsers resynced (as for one browser's overflow)
    /// until the total is under ¾ of the
    /// cap, so a burst costs one O(browsers) scan per quarter of the cap, not per frame.
    pub(super) fn check_total(&mut self) {
        if self.queued.get() <= self.total_queue_bytes || self.shedding {
            return;
        }
        // The drains and resyncs below push again; they must not start a nested scan.
        self.shedding = true;
        // Only what the sockets refuse is shed: first every browser with output writes what
        // its socket takes now (a flush round outside the pacing), so a browser that reads is
        // not resynced for frames queued to it within this loop iteration.
        self.drain_dirty();
        if self.queued.get() <= self.total_queue_bytes {
            self.shedding = false;
            return;
        }
        // Browsers whose socket refused bytes go first (largest first), then the others.
        let mut sizes: Vec<(bool, usize, usize)> = self
            .conns
            .iter()
            .filter_map(|(idx, conn)| match conn {
                Conn::Ws(b) if b.live_bytes + b.snap_bytes > 0 => {
                    Some((b.stalled, b.live_bytes + b.snap_bytes, idx))
                }
                _ => None,
            })
            .collect();
        sizes.sort_unstable_by(|a, b| b.cmp(a));
        let target = self.total_queue_bytes / 4 * 3;
        log::warn!(
            "fanout: {} bytes queued for browsers (cap {}): resyncing the largest queues",
            self.queued.get(),
            self.total_queue_bytes
        );
        for (_, _, idx) in sizes {
            if self.queued.get() <= target {
                break;
            }
            self.stats.shed += 1;
            self.overflow(idx);
        }
        self.shedding = false;
    }

    /// Queues an already framed keychange or heartbeat ([`protocol::text_frame`]), appended to the
    /// browser's pending wire bytes when they are last in its queue. Same budget as `push`.
    pub(super) fn push_wire(&mut self, idx: usize, wire: &[u8]) {
        let queue_bytes = self.queue_bytes;
        let Some(b) = self.browser(idx) else { return };
        if b.closing.is_some() {
            return;
        }
        if b.live_bytes + wire.len() > queue_bytes {
            return self.overflow(idx);
        }
        b.charge(Kind::Live, wire.len());
        match b.queue.back_mut() {
            // A batch leaves the budgets when it is handed to the socket and is held until
            // written: at most one chunk (+ one frame) each, so what the caps do not see
            // stays small per browser.
            Some(Out {
                body: Body::Wire(buf),
                ..
            }) if buf.len() < DRAIN_CHUNK => buf.extend_from_slice(wire),
            _ => b.queue.push_back(Out {
                body: Body::Wire(wire.to_vec()),
                kind: Kind::Live,
            }),
        }
        self.mark_dirty(idx);
        self.check_total();
    }

    /// Moves queued frames into the socket until it would block: messages through
    /// tungstenite, framed batches ([`Body::Wire`]) straight to the socket once tungstenite
    /// has nothing buffered (so the byte stream stays in queue order).
    pub(super) fn drain(&mut self, idx: usize) {
        self.drain_queue(idx);
        if let Some(Conn::Ws(b)) = self.conns.get_mut(idx) {
            b.stalled = !b.queue.is_empty();
        }
    }

    /// [`Server::drain`]'s work: returns when the queue is empty or the socket would block.
    pub(super) fn drain_queue(&mut self, idx: usize) {
        let Some(Conn::Ws(b)) = self.conns.get_mut(idx) else {
            return;
        };
        b.dirty = false;
        b.drained_round = self.stats.rounds;
        loop {
            // Nothing more goes into tungstenite while it holds bytes the socket refused, so
            // its buffer (outside the queue budgets) stays within one chunk and one frame
            // however often a browser that does not read is drained.
            match b.ws.flush() {
                Ok(()) => {}
                Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(_) => return self.close(idx),
            }
            let mut moved = 0;
            while moved < DRAIN_CHUNK {
                if matches!(
                    b.queue.front(),
                    None | Some(Out {
                        body: Body::Wire(..),
                        ..
                    })
                ) {
                    break;
                }
                let Some(Out {
                    body: Body::Text(frame),
                    kind,
                }) = b.queue.pop_front()
                else {
                    unreachable!("checked above")
                };
                let n = frame.len();
                b.release(kind, n);
                moved += n;
                match b.ws.write(Message::Text(frame)) {
                    Ok(()) => {}
                    // The frame is buffered inside tungstenite; go on at the next WRITABLE.
                    Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => {
                        return;
                    }
                    Err(_) => {
                        if b.closing.is_none() {
                            return self.close(idx);
                        }
                        return;
                    }
                }
            }
            match b.ws.flush() {
                Ok(()) => {}
                Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(_) => return self.close(idx),
            }
            // tungstenite's buffer and the stream's raw bytes are empty (flush succeeded):
            // a framed batch may go out directly.
            if matches!(
                b.queue.front(),
                Some(Out {
                    body: Body::Wire(..),
                    ..
                })
            ) {
                let Some(Out {
                    body: Body::Wire(buf),
                    ..
                }) = b.queue.pop_front()
                else {
                    unreachable!("checked above")
                };
                b.release(Kind::Live, buf.len());
                self.stats.writes += 1;
                self.stats.bytes += buf.len() as u64;
                match b.ws.get_mut().send_raw(buf) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                    Err(_) => return self.close(idx),
                }
            }
            if b.queue.is_empty() {
                break;
            }
        }
        // Everything queued reached the socket: a browser resynced for falling behind gets
        // its snapshots now (see `Browser::backlogged`).
        if std::mem::take(&mut b.backlogged) {
            for i in 0..self.links.len() {
                if self
                    .browser(idx)
                    .is_some_and(|b| matches!(b.inst[i], Inst::Waiting))
                {
                    self.request_snapshot(idx, i);
                }
            }
        }
    }

    /// The end of a loop iteration: drains the dirty browsers now when they are few (an
    /// idle fleet's latency stays one loop iteration) or when `flush_delay` has passed since
    /// the previous round; otherwise they wait, and effects arriving meanwhile join the same
    /// write (see the module doc, *Pacing*).
    pub(super) fn flush_round(&mut self) {
        if self.dirty.is_empty() {
            return;
        }
        let now = Instant::now();
        // Waiting pays only when most dirty browsers were written in the previous round too
        // (a broadcast): their next keychanges can share a write. Browsers of different
        // prefixes (one keychange each) would only wait for nothing.
        let repeated = self.dirty_again * 2 > self.dirty.len();
        if self.dirty.len() > FLUSH_NOW_MAX && repeated && now < self.next_flush {
            return;
        }
        self.next_flush = now + self.flush_delay;
        self.stats.rounds += 1;
        self.dirty_again = 0;
        self.drain_dirty();
    }

    pub(super) fn drain_dirty(&mut self) {
        let dirty = std::mem::take(&mut self.dirty);
        for &idx in &dirty {
            self.drain(idx);
        }
        let mut dirty = dirty;
        dirty.clear();
        if self.dirty.is_empty() {
            self.dirty = dirty;
        }
    }
}
