//! Following slot moves, one implementation for both loops: the RESP loop's shared links
//! (`crate::redirect`) and the memcached port's links (`memcached::event_loop::follow`).
//!
//! ```text
//!  reply '-…' ──intercept──► pending ──decide──► Resend { slot, addr, hop } ─► instance_named,
//!  (or the loop's own          │                                               table (-MOVED),
//!   CLUSTER SLOTS reply)       │                                               resend on a link
//!                              ├──────────────► Delayed (-TRYAGAIN) ─► delayed ─retry_due─► resend
//!                              └──────────────► GiveUp ─► the error reaches the client
//! ```
//!
//! [`Moves`] is the state and every decision, with no I/O: which replies are kept, what a
//! redirect leads to, when a `CLUSTER SLOTS` refresh may go, when the loop must wake.
//! [`Follower`] is what a loop provides (its links, how it learns an instance, how it sends
//! a request again) and, from that, the sequences both loops run in the same order: follow
//! the last delivery's redirects, retry what is due, refresh the table, apply `CLUSTER SLOTS`.
//!
//! Bounds and timings are `crate::redirect`'s: [`MAX_REDIRECTS`], [`MAX_TRIES`],
//! [`TRYAGAIN_DELAY`], [`REFRESH_INTERVAL`], [`PERIODIC_REFRESH`], [`MAX_INSTANCES`].
//!
//! # Refusals to run a request of several slots: a nested gather
//!
//! A loop batches keys per engine, and an engine runs a batch over several of its slots
//! until one of them moves; then it refuses the batch (`-CROSSSLOT`, `-TRYAGAIN`) and no
//! redirect can help: no node has all the keys. [`Follower::split`] lets a loop cut such a
//! request into smaller ones (the RESP loop: one per slot, `crate::split::per_slot`, and a
//! one-slot request refused `-TRYAGAIN` one per key, `crate::split::per_key`; the memcached
//! port: one per key pair), each sent through [`Follower::resend`] as a request of
//! its own, so each follows `-ASK`/`-MOVED`/`-TRYAGAIN` like any other. Their replies meet in
//! a [`Gathers`] entry, not in the client's reply slot: the client's slot (or split part)
//! keeps waiting for the one reply it always expected, so reply order, pipelining and the
//! split-by-engine merge need no change, and nothing is paid until an engine refuses.
//! Bounded: each cut makes requests of one slot, then of one key (or one pair), and an engine
//! never refuses a one-key request that way, so the cutting ends there; a gather may answer
//! another (a slot's request cut per key), at most two deep.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Instant;

use recached_net::Slab;

use crate::backend::{REFRESH_WAITER, is_internal};
use crate::client::{Hops, Waiter};
use crate::redirect::{
    MAX_INSTANCES, MAX_REDIRECTS, MAX_TRIES, PERIODIC_REFRESH, REFRESH_INTERVAL, Redirect,
    TRYAGAIN_DELAY, parse, parse_slots,
};
use crate::slots::Slots;

/// The start of a `-CROSSSLOT` error reply.
pub const CROSSSLOT: &[u8] = b"-CROSSSLOT";

/// A request whose reply was a redirect (or a refusal to split), to be sent again.
pub(crate) struct Retry {
    pub w: Waiter,
    pub request: Vec<u8>,
    /// The reply, given to the client once the bounds are reached.
    pub reply: Vec<u8>,
    /// The link it was answered on.
    pub from: usize,
}

/// How a redirect sends a request on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Hop {
    /// `-MOVED`: the slot has a new owner (the table changes).
    Moved,
    /// `-ASK`: this request only, after `ASKING` (the table stays).
    Ask,
}

/// What to do with a kept reply ([`Moves::decide`]).
pub(crate) enum Next {
    /// `-TRYAGAIN`: queued, sent again on the same link after [`TRYAGAIN_DELAY`].
    Delayed,
    /// Sent to the node at `addr` (learned if new); after [`Hop::Moved`], `slot` is that
    /// node's in the table.
    Resend {
        r: Retry,
        slot: u16,
        addr: String,
        hop: Hop,
    },
    /// A bound is reached, or the reply names nothing to follow: its error stands.
    GiveUp(Retry),
}

/// A loop's redirect state: redirects to follow, retries waiting, the refresh's timing.
pub(crate) struct Moves {
    /// Redirects read in this delivery, followed right after it.
    pending: Vec<Retry>,
    /// `-TRYAGAIN`s waiting for their retry time, in time order.
    delayed: VecDeque<(Instant, Retry)>,
    /// A `CLUSTER SLOTS` reply read (link, reply), applied right after the delivery.
    slots_reply: Option<(usize, Vec<u8>)>,
    /// A `CLUSTER SLOTS` is in flight.
    refreshing: bool,
    /// A refresh is wanted (at start, after a `-MOVED`, periodically, after a lost link).
    wanted: bool,
    last_refresh: Option<Instant>,
    /// A backend answered `CLUSTER SLOTS`: the periodic refresh and the refresh after a
    /// failed link apply (a standalone backend refuses it and is never asked again).
    cluster: bool,
    /// When the periodic refresh is next due.
    next_periodic: Option<Instant>,
    /// `delayed` or `wanted` may be set: the loop's timers look further (one test per
    /// iteration otherwise).
    armed: bool,
}

impl Moves {
    pub fn new() -> Self {
        Moves {
            pending: Vec::new(),
            delayed: VecDeque::new(),
            slots_reply: None,
            refreshing: false,
            wanted: true, // once at start, when the first link is up
            last_refresh: None,
            cluster: false,
            next_periodic: None,
            armed: true,
        }
    }

    /// Takes a reply read on link `link` that is not for a client as is: a redirect of a
    /// client's request, or a `-CROSSSLOT` (kept to be followed or split,
    /// [`Follower::split`]), or the reply to the loop's own `CLUSTER SLOTS`. `false`: the
    /// loop delivers it (its other own requests included). Out of line: the loops call it
    /// only for error replies and their own requests.
    #[cold]
    #[inline(never)]
    pub fn intercept(&mut self, w: Waiter, reply: &[u8], request: &[u8], link: usize) -> bool {
        if w.token == usize::MAX {
            if is_internal(&w, &REFRESH_WAITER) {
                self.slots_reply = Some((link, reply.to_vec()));
                return true;
            }
            return false;
        }
        let caught = parse(reply).is_some() || reply.starts_with(CROSSSLOT);
        if request.is_empty() || !caught {
            return false;
        }
        self.pending.push(Retry {
            w,
            request: request.to_vec(),
            reply: reply.to_vec(),
            from: link,
        });
        true
    }

    /// Something was kept in the last delivery: [`Follower::follow_redirects`] has work.
    pub fn kept(&self) -> bool {
        !self.pending.is_empty() || self.slots_reply.is_some()
    }

    /// When the loop must wake for a delayed retry or a rate-limited refresh.
    #[inline]
    pub fn due(&self) -> Option<Instant> {
        if !self.armed {
            return None;
        }
        let retry = self.delayed.front().map(|(t, _)| *t);
        let refresh = match (self.wanted && !self.refreshing, self.last_refresh) {
            (true, Some(t)) => Some(t + REFRESH_INTERVAL),
            _ => None,
        };
        match (retry, refresh) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The backends answered `CLUSTER SLOTS`: periodic refreshes apply.
    pub fn cluster(&self) -> bool {
        self.cluster
    }

    /// What a kept reply leads to. A `-TRYAGAIN` within its bound is queued here.
    pub fn decide(&mut self, mut r: Retry, now: Instant) -> Next {
        let (hop, slot, addr) = match parse(&r.reply) {
            Some(Redirect::Moved { slot, addr }) => (Hop::Moved, slot, addr.to_string()),
            Some(Redirect::Ask { slot, addr }) => (Hop::Ask, slot, addr.to_string()),
            Some(Redirect::TryAgain) => {
                if r.w.hops.tries >= MAX_TRIES {
                    return Next::GiveUp(r);
                }
                r.w.hops.tries += 1;
                self.delayed.push_back((now + TRYAGAIN_DELAY, r));
                self.armed = true;
                return Next::Delayed;
            }
            None => return Next::GiveUp(r),
        };
        if r.w.hops.redirects >= MAX_REDIRECTS {
            return Next::GiveUp(r);
        }
        Next::Resend { r, slot, addr, hop }
    }

    /// `r` goes to instance `j` after a redirect: for `-MOVED` the table gives `slot` to
    /// `j` and a refresh is wanted; the hop is counted.
    pub fn redirected(&mut self, r: &mut Retry, hop: Hop, slot: u16, j: usize, slots: &mut Slots) {
        if hop == Hop::Moved {
            slots.set(slot, j);
            self.wanted = true;
            self.armed = true;
        }
        r.w.hops.redirects += 1;
        r.w.hops.asking = hop == Hop::Ask;
    }

    /// A refresh is wanted (a transaction met a `-MOVED`, `crate::txmove`).
    pub fn want_refresh(&mut self) {
        self.wanted = true;
        self.armed = true;
    }

    /// The next delayed retry whose time has come.
    fn due_retry(&mut self, now: Instant) -> Option<Retry> {
        if self.delayed.front().is_some_and(|(t, _)| *t <= now) {
            return self.delayed.pop_front().map(|(_, r)| r);
        }
        None
    }

    /// Once per loop tick: asks for the periodic refresh when it is due (cluster backends).
    pub fn periodic(&mut self, now: Instant) {
        if !self.cluster || self.next_periodic.is_some_and(|t| now < t) {
            return;
        }
        self.next_periodic = Some(now + PERIODIC_REFRESH);
        self.wanted = true;
        self.armed = true;
    }

    /// A refresh is wanted, none is in flight and the last is old enough.
    fn refresh_due(&self, now: Instant) -> bool {
        self.wanted
            && !self.refreshing
            && self
                .last_refresh
                .is_none_or(|t| now >= t + REFRESH_INTERVAL)
    }

    fn refresh_sent(&mut self, now: Instant) {
        self.refreshing = true;
        self.wanted = false;
        self.last_refresh = Some(now);
    }

    /// After the timers ran: look further only while something waits.
    fn rearm(&mut self) {
        self.armed = !self.delayed.is_empty() || self.wanted;
    }

    /// A link failed with these waiters: a `CLUSTER SLOTS` among them is no longer in
    /// flight, and with cluster backends its slots may have moved (a retired engine), so
    /// the table is refreshed from an instance that is up.
    pub fn link_failed(&mut self, waiters: &VecDeque<Waiter>) {
        if waiters.iter().any(|w| is_internal(w, &REFRESH_WAITER)) {
            self.refreshing = false;
            self.wanted = true;
        }
        if self.cluster {
            self.wanted = true;
        }
        self.armed |= self.wanted;
    }
}

/// The token of a gather's sub-requests ([`Gathers`]): `client_id` is the gather's id,
/// `seq` its key, `part` the sub-request's index. Below the loops' own `usize::MAX`, above
/// any client token.
pub(crate) const GATHER: usize = usize::MAX - 1;

/// A request split after a refusal ([`Follower::split`]): its sub-requests' replies,
/// combined by `how` once all are in.
struct Gather<M> {
    /// The split request's waiter (a client's slot or split part).
    w: Waiter,
    /// Tells a live gather from a reused slab key.
    id: u64,
    replies: Vec<Option<Vec<u8>>>,
    remaining: usize,
    /// How the replies become the split request's reply (the loop's business).
    how: M,
}

/// A loop's gathers in flight (see the module docs, "a nested gather"). One per split
/// request; each ends when its last sub-request is answered (a reply, a followed redirect's
/// reply, or the error of a link that failed), so none is left behind.
pub(crate) struct Gathers<M> {
    slab: Slab<Gather<M>>,
    next_id: u64,
}

impl<M> Gathers<M> {
    pub fn new() -> Self {
        Gathers {
            slab: Slab::new(),
            next_id: 0,
        }
    }

    /// Opens a gather of `parts` sub-requests answering `w` in the end; returns the waiter
    /// of each sub-request, in order.
    pub fn open(&mut self, w: Waiter, parts: usize, how: M) -> Vec<Waiter> {
        self.next_id += 1;
        let id = self.next_id;
        let key = self.slab.insert(Gather {
            w,
            id,
            replies: vec![None; parts],
            remaining: parts,
            how,
        });
        (0..parts)
            .map(|part| Waiter {
                token: GATHER,
                client_id: id,
                seq: key as u64,
                part: part as u32,
                hops: Hops::NONE,
            })
            .collect()
    }

    /// A sub-request's reply: once every sub-request answered, the split request's waiter,
    /// how to combine, and the replies in sub-request order.
    pub fn answered(&mut self, w: Waiter, reply: &[u8]) -> Option<(Waiter, M, Vec<Vec<u8>>)> {
        let key = w.seq as usize;
        let g = self.slab.get_mut(key).filter(|g| g.id == w.client_id)?;
        if let Some(r @ None) = g.replies.get_mut(w.part as usize) {
            *r = Some(reply.to_vec());
            g.remaining -= 1;
        }
        if g.remaining > 0 {
            return None;
        }
        let g = self.slab.remove(key);
        let replies = g
            .replies
            .into_iter()
            .map(Option::unwrap_or_default)
            .collect();
        Some((g.w, g.how, replies))
    }

    /// Gathers in flight.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.slab.len()
    }
}

/// A loop that follows slot moves: what differs per loop, and the shared sequences.
pub(crate) trait Follower {
    /// The log prefix ("proxy", "memcached").
    const NAME: &'static str;

    /// The redirect state and the slot table it changes.
    fn state(&mut self) -> (&mut Moves, &mut Slots);
    fn slots(&self) -> &Slots;
    /// Instances known (configured, then learned).
    fn instances(&self) -> usize;
    /// Instance `j` is up (a refresh may be sent there).
    fn is_up(&self, j: usize) -> bool;
    /// The name (`host:port`) of link `link`.
    fn link_name(&self, link: usize) -> &str;
    fn instance_by_name(&self, addr: &str) -> Option<usize>;
    fn instance_by_addr(&self, sock: SocketAddr) -> Option<usize>;
    /// Appends a new instance and starts connecting it; returns its index.
    fn add_instance(&mut self, name: &str, sock: SocketAddr, now: Instant) -> usize;
    /// The link on instance `j` of the same kind as link `from`.
    fn link_on(&self, j: usize, from: usize) -> usize;
    /// Sends `r.request` on link `link` (after `ASKING` if `r` follows an `-ASK`); a link
    /// that cannot take it answers its error.
    fn resend(&mut self, link: usize, r: Retry, now: Instant);
    /// The client gets the last error as it came.
    fn give_up(&mut self, r: Retry);
    /// Sends `CLUSTER SLOTS` to instance `j`; `false` if its link does not take it.
    fn send_refresh(&mut self, j: usize) -> bool;
    /// Instance `j` was just given slots: a loop may reconnect its link at once instead of
    /// waiting out a reconnect backoff (an engine re-added on a port retired earlier).
    fn gained_slots(&mut self, _j: usize, _now: Instant) {}

    /// A loop's own handling before the shared decision: a refusal to run a request of
    /// several slots (`-CROSSSLOT`, `-TRYAGAIN`) may be split into sub-requests under one
    /// gather ([`Gathers`]). `None`: done with `r`.
    fn split(&mut self, r: Retry, _now: Instant) -> Option<Retry> {
        Some(r)
    }

    /// Follows the redirects read in the last delivery and applies a `CLUSTER SLOTS` reply.
    fn follow_redirects(&mut self, now: Instant) {
        let moves = self.state().0;
        if let Some((link, reply)) = moves.slots_reply.take() {
            moves.refreshing = false;
            self.apply_slots(link, &reply, now);
        }
        // Taken and put back: the buffer is reused (following never delivers to `pending`).
        let mut pending = std::mem::take(&mut self.state().0.pending);
        for r in pending.drain(..) {
            self.follow(r, now);
        }
        self.state().0.pending = pending;
        self.refresh_if_wanted(now);
    }

    fn follow(&mut self, r: Retry, now: Instant) {
        let Some(r) = self.split(r, now) else {
            return;
        };
        match self.state().0.decide(r, now) {
            Next::Delayed => {}
            Next::GiveUp(r) => self.give_up(r),
            Next::Resend {
                mut r,
                slot,
                addr,
                hop,
            } => {
                let Some(j) = self.instance_named(&addr, now) else {
                    return self.give_up(r);
                };
                let (moves, slots) = self.state();
                moves.redirected(&mut r, hop, slot, j, slots);
                let link = self.link_on(j, r.from);
                self.resend(link, r, now);
            }
        }
    }

    /// Once per loop tick: the periodic refresh, then [`Follower::retry_due`].
    #[inline]
    fn follow_tick(&mut self, now: Instant) {
        self.state().0.periodic(now);
        self.retry_due(now);
    }

    /// `-TRYAGAIN` retries whose time has come, on the link that answered them, and a
    /// refresh that waited for its turn. One test when idle.
    #[inline]
    fn retry_due(&mut self, now: Instant) {
        if self.state().0.armed {
            self.retry_due_slow(now);
        }
    }

    fn retry_due_slow(&mut self, now: Instant) {
        while let Some(r) = self.state().0.due_retry(now) {
            let link = r.from;
            self.resend(link, r, now);
        }
        self.refresh_if_wanted(now);
        self.state().0.rearm();
    }

    /// Sends `CLUSTER SLOTS` if one is wanted, none is in flight and the last is old enough,
    /// to an instance that is up, preferring one that owns slots.
    fn refresh_if_wanted(&mut self, now: Instant) {
        if !self.state().0.refresh_due(now) {
            return;
        }
        let slots = self.slots();
        let Some(j) = (0..self.instances())
            .filter(|&j| self.is_up(j))
            .max_by_key(|&j| slots.owned(j))
        else {
            return; // asked again when a link comes up
        };
        if self.send_refresh(j) {
            self.state().0.refresh_sent(now);
        }
    }

    /// The instance at `addr` (`host:port`), learned now if the loop did not know it (at
    /// most [`MAX_INSTANCES`]).
    fn instance_named(&mut self, addr: &str, now: Instant) -> Option<usize> {
        if let Some(j) = self.instance_by_name(addr) {
            return Some(j);
        }
        let sock = match recached_net::listen::resolve(addr) {
            Ok(sock) => sock,
            Err(e) => {
                log::warn!("{}: cannot follow a redirect to {addr}: {e}", Self::NAME);
                return None;
            }
        };
        if let Some(j) = self.instance_by_addr(sock) {
            return Some(j);
        }
        if self.instances() >= MAX_INSTANCES {
            let name = Self::NAME;
            log::warn!("{name}: not adding {addr}: already {MAX_INSTANCES} instances");
            return None;
        }
        Some(self.add_instance(addr, sock, now))
    }

    /// Applies a `CLUSTER SLOTS` reply read on link `link`; a refusal (a standalone
    /// backend) leaves the table as it is and stops the periodic refresh.
    fn apply_slots(&mut self, link: usize, reply: &[u8], now: Instant) {
        let host = self
            .link_name(link)
            .rsplit_once(':')
            .map(|(h, _)| h.trim_start_matches('[').trim_end_matches(']').to_string())
            .unwrap_or_default();
        let Some(ranges) = parse_slots(reply, &host) else {
            self.state().0.cluster = false;
            log::debug!(
                "{}: CLUSTER SLOTS refused ({}); the slot table stays as it is",
                Self::NAME,
                String::from_utf8_lossy(reply).trim_end()
            );
            return;
        };
        self.state().0.cluster = true;
        let mut changed = 0usize;
        for (first, last, addr) in ranges {
            let Some(j) = self.instance_named(&addr, now) else {
                continue;
            };
            let slots = self.state().1;
            let mut gained = 0usize;
            for slot in first..=last {
                gained += usize::from(slots.set(slot, j));
            }
            if gained > 0 {
                self.gained_slots(j, now);
            }
            changed += gained;
        }
        if changed > 0 {
            let name = Self::NAME;
            log::info!("{name}: slot table refreshed from CLUSTER SLOTS: {changed} slot(s) moved");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::backend::ASKING_WAITER;
    use crate::client::Hops;

    fn client(tries: u8, redirects: u8) -> Waiter {
        Waiter {
            token: 7,
            client_id: 1,
            seq: 2,
            part: 0,
            hops: Hops {
                tries,
                redirects,
                ..Hops::NONE
            },
        }
    }

    fn retry(w: Waiter, reply: &[u8]) -> Retry {
        Retry {
            w,
            request: b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n".to_vec(),
            reply: reply.to_vec(),
            from: 3,
        }
    }

    /// `m` after its start-up refresh went out at `t0`, with nothing waiting.
    fn settled(t0: Instant) -> Moves {
        let mut m = Moves::new();
        m.refresh_sent(t0);
        m.refreshing = false;
        m.rearm();
        m
    }

    #[test]
    fn decides_moved_and_ask_within_the_redirect_bound() {
        let now = Instant::now();
        let mut m = settled(now);
        let moved = m.decide(retry(client(0, 0), b"-MOVED 12 10.0.0.1:7000\r\n"), now);
        let Next::Resend {
            mut r,
            slot,
            addr,
            hop,
        } = moved
        else {
            panic!("-MOVED within the bound is followed");
        };
        assert_eq!(
            (slot, addr.as_str(), hop),
            (12, "10.0.0.1:7000", Hop::Moved)
        );
        let mut slots = Slots::jump(1);
        slots.grow(2);
        m.redirected(&mut r, hop, slot, 1, &mut slots);
        assert_eq!(slots.owner(12), 1);
        assert_eq!((r.w.hops.redirects, r.w.hops.asking), (1, false));
        assert!(m.wanted && m.armed, "a -MOVED asks for a refresh");

        let mut m = settled(now);
        let Next::Resend { mut r, hop, .. } =
            m.decide(retry(client(0, 4), b"-ASK 12 h:1\r\n"), now)
        else {
            panic!("-ASK within the bound is followed");
        };
        assert_eq!(hop, Hop::Ask);
        let mut slots = Slots::jump(2);
        let before = slots.owner(12);
        m.redirected(&mut r, hop, 12, 1 - before, &mut slots);
        assert_eq!(slots.owner(12), before, "-ASK leaves the table");
        assert_eq!((r.w.hops.redirects, r.w.hops.asking), (5, true));
        assert!(!m.wanted && !m.armed);

        // The sixth redirect is not followed: the error stands.
        let r = retry(client(0, MAX_REDIRECTS), b"-MOVED 12 h:1\r\n");
        assert!(matches!(m.decide(r, now), Next::GiveUp(r) if r.reply == b"-MOVED 12 h:1\r\n"));
    }

    #[test]
    fn decides_tryagain_as_a_delayed_retry_within_its_bound() {
        let now = Instant::now();
        let mut m = settled(now);
        assert_eq!(m.due(), None);
        let r = retry(client(MAX_TRIES - 1, 0), b"-TRYAGAIN slot migrating\r\n");
        assert!(matches!(m.decide(r, now), Next::Delayed));
        assert_eq!(m.due(), Some(now + TRYAGAIN_DELAY));
        assert!(m.due_retry(now).is_none(), "not before its time");
        let r = m.due_retry(now + TRYAGAIN_DELAY).expect("due");
        assert_eq!((r.w.hops.tries, r.from), (MAX_TRIES, 3));
        m.rearm();
        assert_eq!(m.due(), None, "disarmed once nothing waits");
        assert!(matches!(m.decide(r, now), Next::GiveUp(_)));
        // Anything else kept (a -CROSSSLOT the loop did not split) is given up at once.
        let r = retry(client(0, 0), b"-CROSSSLOT Keys in request don't hash\r\n");
        assert!(matches!(m.decide(r, now), Next::GiveUp(_)));
    }

    #[test]
    fn intercepts_redirects_crossslot_and_its_own_refresh_only() {
        let mut m = Moves::new();
        let req = b"*1\r\n$4\r\nPING\r\n";
        assert!(m.intercept(client(0, 0), b"-MOVED 1 h:1\r\n", req, 0));
        assert!(m.intercept(client(0, 0), b"-TRYAGAIN x\r\n", req, 0));
        assert!(!m.intercept(client(0, 0), b"-ERR no\r\n", req, 0));
        assert!(m.intercept(client(0, 0), b"-CROSSSLOT x\r\n", req, 0));
        assert!(
            !m.intercept(client(0, 0), b"-MOVED 1 h:1\r\n", b"", 0),
            "no request kept"
        );
        assert!(
            !m.intercept(ASKING_WAITER, b"+OK\r\n", b"", 0),
            "the loop's other own replies"
        );
        assert_eq!(m.pending.len(), 3);
        assert!(m.slots_reply.is_none());
        assert!(m.intercept(REFRESH_WAITER, b"*0\r\n", b"", 4));
        assert_eq!(m.slots_reply, Some((4, b"*0\r\n".to_vec())));
        assert!(m.kept());

        let mut m = Moves::new();
        assert!(!m.kept());
        assert!(m.intercept(client(0, 0), b"-CROSSSLOT x\r\n", req, 0));
    }

    #[test]
    fn gathers_complete_once_every_sub_request_answered() {
        let mut g: Gathers<&str> = Gathers::new();
        let whole = client(0, 0);
        let subs = g.open(whole, 2, "how");
        assert_eq!(subs.len(), 2);
        assert!(
            subs.iter()
                .all(|s| s.token == GATHER && s.hops == Hops::NONE)
        );
        assert_eq!(g.answered(subs[1], b":2\r\n"), None);
        assert_eq!(g.answered(subs[1], b":9\r\n"), None, "answered once");
        let stale = Waiter {
            client_id: subs[0].client_id + 1,
            ..subs[0]
        };
        assert_eq!(g.answered(stale, b":9\r\n"), None, "another gather's");
        let (w, how, replies) = g.answered(subs[0], b":1\r\n").expect("complete");
        assert_eq!((w, how), (whole, "how"));
        assert_eq!(replies, vec![b":1\r\n".to_vec(), b":2\r\n".to_vec()]);
        assert_eq!(g.len(), 0);
        // A reused key is told apart by the id.
        let again = g.open(whole, 1, "again");
        assert_eq!(again[0].seq, subs[0].seq);
        assert_eq!(g.answered(subs[0], b":1\r\n"), None);
        assert!(g.answered(again[0], b":1\r\n").is_some());
    }

    #[test]
    fn refreshes_at_start_then_rate_limited_periodic_and_after_a_lost_link() {
        let t0 = Instant::now();
        let mut m = Moves::new();
        assert!(m.refresh_due(t0), "once at start");
        assert_eq!(m.due(), None, "at start it waits for a link, not a timer");
        m.refresh_sent(t0);
        assert!(!m.refresh_due(t0));
        // The reply is in: a standalone backend refused it, so no periodic refresh.
        m.refreshing = false;
        m.periodic(t0);
        m.rearm();
        assert!(!m.wanted && !m.armed);
        m.link_failed(&VecDeque::new());
        assert!(
            !m.armed,
            "a lost link of a standalone backend changes nothing"
        );

        // Cluster backends: the periodic refresh, rate-limited by REFRESH_INTERVAL.
        m.cluster = true;
        let t1 = t0 + Duration::from_millis(40);
        m.periodic(t1);
        assert!(m.wanted && m.armed);
        assert_eq!(m.due(), Some(t0 + REFRESH_INTERVAL));
        assert!(!m.refresh_due(t1));
        assert!(m.refresh_due(t0 + REFRESH_INTERVAL));
        m.refresh_sent(t0 + REFRESH_INTERVAL);
        m.rearm();
        assert_eq!(m.due(), None, "one in flight at most");
        m.periodic(t1 + PERIODIC_REFRESH - Duration::from_millis(1));
        assert!(!m.wanted, "not before the period");

        // The link carrying the refresh failed: no longer in flight, wanted again.
        m.link_failed(&VecDeque::from([client(0, 0), REFRESH_WAITER]));
        assert!(!m.refreshing && m.wanted && m.armed);
    }

    /// A loop of `n` single-link instances that records what it sends.
    struct Fake {
        moves: Moves,
        slots: Slots,
        names: Vec<String>,
        up: Vec<bool>,
        sent: Vec<(usize, Vec<u8>, bool)>,
        /// The waiter of each request in `sent`.
        sent_for: Vec<Waiter>,
        given_up: Vec<Vec<u8>>,
        refreshed: Vec<usize>,
        /// Split as the RESP loop splits (`crate::redirect`).
        gathers: Gathers<crate::split::Merge>,
    }

    impl Fake {
        fn new(n: usize) -> Self {
            Fake {
                moves: Moves::new(),
                slots: Slots::jump(n),
                names: (0..n).map(|j| format!("127.0.0.1:{}", 7000 + j)).collect(),
                up: vec![true; n],
                sent: Vec::new(),
                sent_for: Vec::new(),
                given_up: Vec::new(),
                refreshed: Vec::new(),
                gathers: Gathers::new(),
            }
        }
    }

    impl Follower for Fake {
        const NAME: &'static str = "test";
        fn state(&mut self) -> (&mut Moves, &mut Slots) {
            (&mut self.moves, &mut self.slots)
        }
        fn slots(&self) -> &Slots {
            &self.slots
        }
        fn instances(&self) -> usize {
            self.names.len()
        }
        fn is_up(&self, j: usize) -> bool {
            self.up[j]
        }
        fn link_name(&self, link: usize) -> &str {
            &self.names[link]
        }
        fn instance_by_name(&self, addr: &str) -> Option<usize> {
            self.names.iter().position(|a| a == addr)
        }
        fn instance_by_addr(&self, _: SocketAddr) -> Option<usize> {
            None
        }
        fn add_instance(&mut self, name: &str, _: SocketAddr, _: Instant) -> usize {
            self.names.push(name.to_string());
            self.up.push(false);
            self.slots.grow(self.names.len());
            self.names.len() - 1
        }
        fn link_on(&self, j: usize, _: usize) -> usize {
            j
        }
        fn resend(&mut self, link: usize, r: Retry, _: Instant) {
            self.sent.push((link, r.request, r.w.hops.asking));
            self.sent_for.push(r.w);
        }
        fn give_up(&mut self, r: Retry) {
            self.given_up.push(r.reply);
        }
        fn send_refresh(&mut self, j: usize) -> bool {
            self.refreshed.push(j);
            true
        }
        fn split(&mut self, r: Retry, now: Instant) -> Option<Retry> {
            let Some((parts, merge)) = crate::redirect::per_slot(&r) else {
                return Some(r);
            };
            let subs = self.gathers.open(r.w, parts.len(), merge);
            for (w, part) in subs.into_iter().zip(parts) {
                let link = self.slots.owner(part.slot);
                let sub = Retry {
                    w,
                    request: part.request,
                    reply: Vec::new(),
                    from: link,
                };
                self.resend(link, sub, now);
            }
            None
        }
    }

    /// A part over two slots refused with `-CROSSSLOT`: one request per slot to each slot's
    /// owner; a slot's `-TRYAGAIN` is retried (one key: never split again); once both answered, the
    /// part's reply is merged in its key order, and nothing was given up.
    #[test]
    fn a_loop_splits_a_refused_part_per_slot_and_follows_each_slot() {
        use engine_core::slot::key_slot;
        let now = Instant::now();
        let mut f = Fake::new(2);
        f.refresh_if_wanted(now);
        f.moves.refreshing = false;
        let req = |args: &[&[u8]]| {
            let mut out = Vec::new();
            resp::encode_request(&mut out, args);
            out
        };
        let part = req(&[b"MGET", b"{a}1", b"{b}1", b"{a}2"]);
        let whole = client(0, 0);
        assert!(f.moves.intercept(whole, b"-CROSSSLOT Keys\r\n", &part, 0));
        f.follow_redirects(now);
        let (a, b) = (f.slots.owner(key_slot(b"a")), f.slots.owner(key_slot(b"b")));
        let (req_a, req_b) = (req(&[b"MGET", b"{a}1", b"{a}2"]), req(&[b"MGET", b"{b}1"]));
        assert_eq!(
            f.sent,
            vec![(a, req_a.clone(), false), (b, req_b.clone(), false)]
        );
        let (sub_a, sub_b) = (f.sent_for[0], f.sent_for[1]);
        assert_eq!((sub_a.token, sub_b.token), (GATHER, GATHER));

        // Slot b is moving with its keys on both sides: retried on its link, not split.
        assert!(f.moves.intercept(sub_b, b"-TRYAGAIN x\r\n", &req_b, b));
        f.follow_redirects(now);
        assert_eq!(f.sent.len(), 2, "waits for TRYAGAIN_DELAY");
        f.follow_tick(now + TRYAGAIN_DELAY);
        assert_eq!(f.sent[2], (b, req_b, false));
        assert_eq!(f.sent_for[2].part, sub_b.part);

        assert_eq!(
            f.gathers.answered(sub_a, b"*2\r\n$2\r\nA1\r\n$2\r\nA2\r\n"),
            None
        );
        let (w, merge, replies) = f
            .gathers
            .answered(f.sent_for[2], b"*1\r\n$-1\r\n")
            .expect("both slots answered");
        assert_eq!(w, whole);
        let replies: Vec<&[u8]> = replies.iter().map(Vec::as_slice).collect();
        let mut out = Vec::new();
        crate::split::merge(&merge, &replies, &mut out);
        assert_eq!(out, b"*3\r\n$2\r\nA1\r\n$-1\r\n$2\r\nA2\r\n");
        assert!(f.given_up.is_empty());
        assert_eq!(f.gathers.len(), 0);

        // A refusal of a request of one slot is followed as before (given up: not a redirect).
        let one = req(&[b"MGET", b"{a}1", b"{a}2"]);
        assert!(f.moves.intercept(whole, b"-CROSSSLOT Keys\r\n", &one, 0));
        f.follow_redirects(now);
        assert_eq!(f.given_up, vec![b"-CROSSSLOT Keys\r\n".to_vec()]);
    }

    #[test]
    fn a_loop_follows_moved_ask_and_learns_nodes_in_order() {
        let now = Instant::now();
        let mut f = Fake::new(2);
        let req = b"*1\r\n$4\r\nPING\r\n";
        f.moves
            .intercept(client(0, 0), b"-MOVED 5 127.0.0.1:7001\r\n", req, 0);
        f.moves
            .intercept(client(0, 0), b"-ASK 6 127.0.0.1:7100\r\n", req, 1);
        f.moves
            .intercept(client(0, 5), b"-ASK 6 127.0.0.1:7000\r\n", req, 1);
        f.follow_redirects(now);
        assert_eq!(f.slots.owner(5), 1);
        assert_eq!(f.names[2], "127.0.0.1:7100", "learned");
        assert_eq!(
            f.sent,
            vec![(1, req.to_vec(), false), (2, req.to_vec(), true)]
        );
        assert_eq!(f.given_up, vec![b"-ASK 6 127.0.0.1:7000\r\n".to_vec()]);
        // The start-up refresh was still wanted: it went after the redirects, once.
        assert_eq!(f.refreshed.len(), 1);
        assert!(!f.moves.kept());

        // Its reply: the table follows it, and the backends are a cluster from now on.
        f.moves
            .intercept(REFRESH_WAITER, &cluster_slots(0, 16383, 7001), b"", 0);
        f.follow_redirects(now);
        assert_eq!(f.slots.owned(1), 16384);
        assert!(f.moves.cluster());
    }

    #[test]
    fn a_loop_refreshes_from_an_instance_that_is_up_preferring_slot_owners() {
        let now = Instant::now();
        let mut f = Fake::new(3);
        for slot in 0..engine_core::slot::SLOTS {
            f.slots.set(slot, usize::from(slot >= 100));
        }
        f.up[1] = false;
        f.refresh_if_wanted(now);
        assert_eq!(f.refreshed, vec![0], "0 owns slots, 2 none, 1 is down");
        f.refresh_if_wanted(now + REFRESH_INTERVAL);
        assert_eq!(f.refreshed, vec![0], "not wanted again");
        f.moves.refreshing = false;
        f.up[1] = true;
        f.moves.wanted = true;
        f.refresh_if_wanted(now + REFRESH_INTERVAL / 2);
        assert_eq!(f.refreshed, vec![0], "rate-limited");
        f.refresh_if_wanted(now + REFRESH_INTERVAL);
        assert_eq!(f.refreshed, vec![0, 1]);
        f.moves.refreshing = false;
        f.moves.wanted = true;
        f.up = vec![false; 3];
        f.refresh_if_wanted(now + REFRESH_INTERVAL * 3);
        assert_eq!(
            f.refreshed,
            vec![0, 1],
            "none up: asked again when a link comes up"
        );
        assert!(f.moves.refresh_due(now + REFRESH_INTERVAL * 3));
    }

    #[test]
    fn a_loop_retries_tryagain_when_due_on_the_same_link() {
        let now = Instant::now();
        let mut f = Fake::new(1);
        f.refresh_if_wanted(now);
        f.moves.refreshing = false;
        let req = b"*1\r\n$4\r\nPING\r\n";
        f.moves.intercept(client(0, 0), b"-TRYAGAIN x\r\n", req, 0);
        f.follow_redirects(now);
        assert!(f.sent.is_empty());
        f.follow_tick(now);
        assert!(f.sent.is_empty(), "not before TRYAGAIN_DELAY");
        f.follow_tick(now + TRYAGAIN_DELAY);
        assert_eq!(f.sent, vec![(0, req.to_vec(), false)]);
        assert_eq!(f.moves.due(), None);
    }

    fn cluster_slots(first: u16, last: u16, port: u16) -> Vec<u8> {
        format!("*1\r\n*3\r\n:{first}\r\n:{last}\r\n*2\r\n$9\r\n127.0.0.1\r\n:{port}\r\n")
            .into_bytes()
    }
}
