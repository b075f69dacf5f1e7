//! Transactions whose slots move: a MULTI/EXEC through the proxy whose queued commands an
//! engine refused with `-MOVED`, `-ASK` or `-TRYAGAIN` (a slot moving, or moved since the
//! proxy last read `CLUSTER SLOTS`) is run again, whole, so the client never sees the move
//! (docs/transactions.md, "Slots that move"; docs/cluster.md, "Through the proxy").
//!
//! A transaction's requests take the client's dedicated connections (`crate::tx`), which
//! the shared links' redirect following (`crate::redirect`) does not cover: an engine
//! refusing a queued command also flags its MULTI, so EXEC would answer `-EXECABORT`.
//! Instead:
//!
//! 1. **Queueing**: each queued command's waiter is marked ([`crate::client::Hops::tx`]); a
//!    redirect among their replies is recorded here ([`TxMoves`]) and the client gets the
//!    `+QUEUED` it expects instead.
//! 2. **EXEC**: the queued requests are kept (the buffer `crate::tx::Tx::unit` already
//!    holds them; it is swapped here, not copied) and the EXEC's outcome — the engine's
//!    reply, or the coordinator's (`crate::coord`) — is looked at before it fills the
//!    client's slot. The engines have already discarded the transaction then (`EXECABORT`,
//!    or the coordinator's `DISCARD` after `TXLOCK`'s flag 2).
//! 3. **Again**: when a queued command was redirected and the outcome is `-EXECABORT` (or a
//!    redirect), the event loop applies each `-MOVED` to the slot table and asks for a
//!    `CLUSTER SLOTS` refresh, then [`rerun`] queues the kept requests afresh through a new
//!    [`Tx`] routed by the table, except that a slot answered `-ASK` goes to the node it
//!    named, after `ASKING` (sent before `MULTI`: it holds for the whole transaction there,
//!    as in Redis). The replies of the re-queued commands are not the client's (it has its
//!    `+QUEUED`s): they are only looked at for redirects ([`RERUN_PART`]). Then EXEC goes
//!    through the same paths as the first time (forwarded, coordinated or gathered), and its
//!    outcome is looked at again.
//! 4. **Bounds**: at most [`MAX_REDIRECTS`] runs again after `-MOVED`/`-ASK`, and
//!    [`MAX_TRIES`] after `-TRYAGAIN` only, each of those [`TRYAGAIN_DELAY`] later (the shared
//!    links' bounds and delay); then the last outcome reaches the client as it came.
//!
//! **WATCH.** A transaction with WATCH in effect is not run again: a queued command's key
//! whose slot moved was deleted at its source by MIGRATE, which counts as touching it, so
//! the client gets the null reply (`*-1`, RESP3 `_`), which every client library reads as
//! "a watched key changed, try again". (When the watched keys themselves stayed put, the
//! null reply is still what it gets: the library retries, which is simplest and safe.)
//!
//! **Ordering.** While an EXEC's outcome is awaited the client's later requests wait
//! (`crate::exec`), so a run again never finds another transaction of the same client
//! queued on its connections. A client that pipelines transactions back to back therefore
//! waits one round trip per EXEC; one that reads EXEC's reply before its next request (as
//! client libraries do) waits for nothing more.

use std::borrow::Cow;
use std::time::Instant;

use crate::client::{Client, Hops, Waiter};
use crate::exec::{Ctx, Me};
use crate::redirect::{ASKING, MAX_REDIRECTS, MAX_TRIES, Redirect, TRYAGAIN_DELAY, parse};
use crate::slots::{SlotMap, Slots};
use crate::tx::{EXECABORT, Step, Tx};

/// The part of a waiter for a re-queued command's reply (only looked at for redirects);
/// below `crate::coord::COORD_PART`.
pub const RERUN_PART: u32 = 1 << 29;

const MULTI: &[u8] = b"*1\r\n$5\r\nMULTI\r\n";
const EXEC: &[u8] = b"*1\r\n$4\r\nEXEC\r\n";
const QUEUED: &[u8] = b"+QUEUED\r\n";

/// A client's transaction as far as slot moves are concerned.
#[derive(Debug, Default)]
pub struct TxMoves {
    /// The reply slot of the EXEC whose outcome is awaited (the client's later requests
    /// wait meanwhile).
    pub exec: Option<u64>,
    /// The last slot a DISCARD answered: queued replies up to it are of an ended
    /// transaction.
    floor: u64,
    /// The transaction may run again: not aborted by the proxy, its requests kept, no
    /// WATCH.
    kept: bool,
    watching: bool,
    /// The queued requests, back to back, and where each ends (`Tx::unit`).
    unit: Vec<u8>,
    unit_ends: Vec<usize>,
    /// Redirects met by this run's queued commands.
    redirected: bool,
    tryagain: bool,
    pub moved: Vec<(u16, String)>,
    /// `-ASK`s: (queued request's index, slot, node). Only that request's keys of that slot
    /// go to the node: the others of the slot may still be at the source.
    pub asks: Vec<(usize, u16, String)>,
    /// The reply slot of each queued request (its index in `unit`).
    seqs: Vec<u64>,
    /// Runs again so far: after -MOVED/-ASK, after -TRYAGAIN only.
    redirects: u8,
    tries: u8,
    /// A run again is due at this time (the event loop starts it).
    pub due: Option<Instant>,
}

/// Whether `name` is EXEC (any case).
pub fn is_exec(name: &[u8]) -> bool {
    name.len() == 4 && name.eq_ignore_ascii_case(b"exec")
}

/// Whether `name` is DISCARD (any case).
pub fn is_discard(name: &[u8]) -> bool {
    name.len() == 7 && name.eq_ignore_ascii_case(b"discard")
}

/// What [`delivered`] did with a reply.
#[derive(Debug, PartialEq, Eq)]
pub enum Handled {
    /// Not a matter of moves: fill the slot with it as usual.
    No,
    /// Dealt with (slot filled, or the reply swallowed).
    Yes,
    /// The transaction runs again: the event loop starts it when [`TxMoves::due`].
    Again,
}

impl TxMoves {
    /// EXEC of `tx` (inside MULTI) is about to be decided: keeps its queued requests.
    pub fn at_exec(&mut self, tx: &mut Tx) {
        self.kept = !tx.aborted && !tx.unit_dropped && !tx.watching;
        self.watching = tx.watching;
        if tx.gather {
            // The gathered run reads them from the transaction: copied.
            self.unit.clear();
            self.unit.extend_from_slice(&tx.unit);
            self.unit_ends.clear();
            self.unit_ends.extend_from_slice(&tx.unit_ends);
        } else {
            std::mem::swap(&mut self.unit, &mut tx.unit);
            std::mem::swap(&mut self.unit_ends, &mut tx.unit_ends);
        }
        self.redirects = 0;
        self.tries = 0;
    }

    /// Slot `seq` is answered without its outcome being looked at (a connection could not
    /// be had): no EXEC is awaited any more.
    pub fn answered_elsewhere(&mut self, seq: u64) {
        if self.exec == Some(seq) {
            self.exec = None;
            self.clear_seen();
        }
    }

    /// A DISCARD answered in slot `seq`: later queued replies up to it are of the
    /// discarded transaction.
    pub fn discarded(&mut self, seq: u64) {
        self.floor = seq;
        self.clear_seen();
    }

    fn clear_seen(&mut self) {
        self.redirected = false;
        self.tryagain = false;
        self.moved.clear();
        self.asks.clear();
    }

    /// A request of the transaction was queued (kept in its `unit`), answered in slot `seq`.
    pub fn queued(&mut self, seq: u64, first: bool) {
        if first {
            self.seqs.clear();
        }
        self.seqs.push(seq);
    }

    /// Records the reply of queued request `index` if it is a redirect.
    fn record(&mut self, reply: &[u8], index: Option<usize>) -> bool {
        match parse(reply) {
            Some(Redirect::Moved { slot, addr }) => {
                if !self.moved.iter().any(|(s, _)| *s == slot) {
                    self.moved.push((slot, addr.to_string()));
                }
            }
            Some(Redirect::Ask { slot, addr }) => match index {
                Some(i) => self.asks.push((i, slot, addr.to_string())),
                None => self.tryagain = true, // not placed: asked again at the source
            },
            Some(Redirect::TryAgain) => self.tryagain = true,
            None => return false,
        }
        self.redirected = true;
        true
    }

    /// The queued requests kept at EXEC.
    fn requests(&self) -> Vec<&[u8]> {
        let mut start = 0;
        self.unit_ends
            .iter()
            .map(|&end| {
                let r = &self.unit[start..end];
                start = end;
                r
            })
            .collect()
    }
}

/// A reply for a waiter marked [`Hops::tx`] (a queued command, a re-queued one, or the
/// EXEC of a transaction on one instance).
#[inline]
pub fn delivered(c: &mut Client, w: Waiter, reply: &[u8]) -> Handled {
    // The usual reply (`+QUEUED`, or a queued command's own error's first byte aside): a few
    // tests inline, on every reply of every transaction.
    if w.part < RERUN_PART && c.txm.exec != Some(w.seq) && reply.first() != Some(&b'-') {
        return Handled::No;
    }
    looked_at(c, w, reply)
}

/// [`delivered`] past its usual case.
#[inline(never)]
fn looked_at(c: &mut Client, w: Waiter, reply: &[u8]) -> Handled {
    if (RERUN_PART..crate::coord::COORD_PART).contains(&w.part) {
        c.txm.record(reply, Some((w.part - RERUN_PART) as usize));
        return Handled::Yes;
    }
    if c.txm.exec == Some(w.seq) {
        return finished(c, w.seq, reply);
    }
    if reply.first() == Some(&b'-')
        && w.seq > c.txm.floor
        && c.txm.exec.is_none_or(|e| w.seq < e)
        && parse(reply).is_some()
    {
        let index = c.txm.seqs.iter().position(|&s| s == w.seq);
        c.txm.record(reply, index);
        c.replies.fill(w.seq, w.part, QUEUED);
        return Handled::Yes;
    }
    Handled::No
}

/// The outcome of the EXEC in slot `seq` (the engine's, or the coordinator's): the client's
/// reply, or a run again.
#[inline]
pub fn finished(c: &mut Client, seq: u64, reply: &[u8]) -> Handled {
    // No queued command met a move and EXEC answered an array: the client's reply.
    if !c.txm.redirected && reply.first() != Some(&b'-') {
        c.txm.exec = None;
        c.replies.fill(seq, 0, reply);
        return Handled::Yes;
    }
    finished_moved(c, seq, reply)
}

/// [`finished`] past its usual case.
#[inline(never)]
fn finished_moved(c: &mut Client, seq: u64, reply: &[u8]) -> Handled {
    let t = &mut c.txm;
    // EXEC itself refused with a redirect: a queued command's slot moved after it was queued
    // (the engine checks them again at EXEC, as Redis does, and ran none of them).
    let exec_redirected = !t.redirected && reply.first() == Some(&b'-') && t.record(reply, None);
    if !(t.redirected || exec_redirected) {
        t.exec = None;
        c.replies.fill(seq, 0, reply);
        return Handled::Yes;
    }
    let again = reply == EXECABORT || parse(reply).is_some();
    if t.watching && again {
        t.exec = None;
        let null: &[u8] = if c.session.proto == resp::Proto::Resp3 {
            b"_\r\n"
        } else {
            b"*-1\r\n"
        };
        c.replies.fill(seq, 0, null);
        // The table still learns the moves, so the client's retry finds the new owners.
        if t.moved.is_empty() {
            t.clear_seen();
            return Handled::Yes;
        }
        t.due = Some(Instant::now());
        return Handled::Again;
    }
    let redirect = !t.moved.is_empty() || !t.asks.is_empty();
    let within = if redirect {
        t.redirects < MAX_REDIRECTS
    } else {
        t.tries < MAX_TRIES
    };
    if !(t.kept && again && within) {
        t.exec = None;
        t.clear_seen();
        c.replies.fill(seq, 0, reply);
        return Handled::Yes;
    }
    let now = Instant::now();
    if redirect {
        t.redirects += 1;
        t.due = Some(now);
    } else {
        t.tries += 1;
        t.due = Some(now + TRYAGAIN_DELAY);
    }
    log::debug!(
        "client {}: a transaction met a moving slot ({} moved, {} asked, tryagain {}); run again",
        c.id,
        t.moved.len(),
        t.asks.len(),
        t.tryagain
    );
    Handled::Again
}

/// The table, except for the requests answered `-ASK`: their keys of the slot asked go to
/// the node named (`current`: the index of the request being routed).
struct Routed<'a> {
    slots: &'a Slots,
    asks: &'a [(usize, u16, usize)],
    current: std::cell::Cell<usize>,
}

impl SlotMap for Routed<'_> {
    fn of(&self, key: &[u8]) -> usize {
        let s = engine_core::slot::key_slot(key);
        let i = self.current.get();
        match self.asks.iter().find(|&&(r, a, _)| r == i && a == s) {
            Some(&(_, _, j)) => j,
            None => self.slots.owner(s),
        }
    }
    fn instances(&self) -> usize {
        self.slots.instances()
    }
    fn serves(&self, instance: usize) -> bool {
        self.slots.serves(instance)
    }
}

/// A request's arguments (a multibulk of bulk strings).
fn argv(raw: &[u8]) -> Option<Vec<Vec<u8>>> {
    let Ok(Some((resp::value::Value::Array(items), _))) = resp::value::decode(raw) else {
        return None;
    };
    items
        .into_iter()
        .map(|item| match item {
            resp::value::Value::Bulk(b) => Some(b.to_vec()),
            _ => None,
        })
        .collect()
}

/// Runs the client's transaction again (its EXEC's slot still waiting): its kept requests
/// queued afresh, routed by the table with `asks` (slot → instance, after `ASKING`), then
/// EXEC as the first time. `-MOVED`s were applied to the table by the caller.
pub(crate) fn rerun(asks: &[(usize, u16, usize)], me: &mut Me<'_>, ctx: &mut Ctx<'_>) {
    let Some(seq) = me.txm.exec else {
        return;
    };
    me.txm.clear_seen();
    me.txm.due = None;
    // Decided first (the steps own what they send), sent once every connection is had.
    let map = Routed {
        slots: &ctx.fleet.slots,
        asks,
        current: std::cell::Cell::new(0),
    };
    let mut tx = Tx {
        multi: true,
        ..Tx::default()
    };
    // (instance, request, a queued command: its reply is looked at for redirects).
    let mut sends: Vec<(usize, Vec<u8>, Option<u32>)> = Vec::new();
    let mut ok = true;
    for (index, raw) in me.txm.requests().into_iter().enumerate() {
        map.current.set(index);
        let part = Some(RERUN_PART + index as u32);
        let Some(args) = argv(raw) else {
            ok = false;
            break;
        };
        let args: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        match tx.step(&args[..], raw, &ctx.fleet.up, &map) {
            Step::Send { instance, prelude } => {
                sends.extend(prelude.into_iter().map(|p| (instance, p, None)));
                sends.push((instance, raw.to_vec(), part));
            }
            Step::SendParts { parts, .. } => {
                for p in parts {
                    sends.extend(p.prelude.into_iter().map(|r| (p.instance, r, None)));
                    sends.push((p.instance, p.request, part));
                }
            }
            Step::Reply(r) if &r[..] == QUEUED => {}
            _ => {
                ok = false;
                break;
            }
        }
    }
    let exec = if ok {
        map.current.set(usize::MAX);
        tx.step(&[&b"EXEC"[..]][..], EXEC, &ctx.fleet.up, &map)
    } else {
        Step::Reply(Cow::Borrowed(EXECABORT))
    };
    // Every connection first: nothing is sent when one cannot be had.
    let mut instances: Vec<usize> = sends.iter().map(|s| s.0).collect();
    if let Step::Send { instance, .. } = &exec {
        instances.push(*instance);
    }
    instances.sort_unstable();
    instances.dedup();
    for &i in &instances {
        if let Err(error) = crate::exec::ready_conn(i, me, ctx) {
            me.txm.exec = None;
            me.replies.fill(seq, 0, &error);
            return;
        }
    }
    *me.lane = crate::dedicated::Lane::Spread;
    let (token, client_id) = (me.token, me.id);
    let waiter = |part| Waiter {
        token,
        client_id,
        seq,
        part,
        hops: Hops {
            tx: true,
            ..Hops::NONE
        },
    };
    let send = |instance: usize, request: &[u8], w: Option<Waiter>, ctx: &mut Ctx<'_>| {
        let Some(&(_, id)) = me.conns.iter().find(|(i, _)| *i == instance) else {
            return;
        };
        let Some(d) = ctx.dedicated.get_mut(id) else {
            return;
        };
        // ASKING before MULTI holds for the whole transaction there (the engine, as Redis).
        if request == MULTI && asks.iter().any(|&(_, _, j)| j == instance) {
            d.send(ASKING, None, 1);
        }
        d.send(request, w, 1);
        crate::event_loop::mark(&mut d.dirty, ctx.dirty_dedicated, id);
    };
    for (instance, request, part) in &sends {
        send(*instance, request, part.map(waiter), ctx);
    }
    match exec {
        Step::Send { instance, prelude } => {
            for p in &prelude {
                send(instance, p, None, ctx);
            }
            send(instance, EXEC, Some(waiter(0)), ctx);
        }
        Step::Coordinate { engines, order } => {
            crate::exec::coordinate_at(seq, engines, order, me, ctx);
        }
        Step::Gather {
            unit,
            keys,
            engines,
        } => crate::exec::gather(Some(seq), unit, keys, engines, true, me, ctx),
        Step::Reply(reply) => {
            me.txm.exec = None;
            me.replies.fill(seq, 0, &reply);
        }
        _ => {
            me.txm.exec = None;
            me.replies.fill(seq, 0, EXECABORT);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_redirects_once_per_slot() {
        let mut t = TxMoves::default();
        assert!(!t.record(b"-ERR wrong\r\n", Some(0)));
        assert!(!t.redirected);
        assert!(t.record(b"-MOVED 12 127.0.0.1:7001\r\n", Some(0)));
        assert!(t.record(b"-MOVED 12 127.0.0.1:7001\r\n", Some(1)));
        assert!(t.record(b"-ASK 13 127.0.0.1:7001\r\n", Some(2)));
        assert!(!t.tryagain);
        assert!(t.record(
            b"-TRYAGAIN Multiple keys request during rehashing of slot\r\n",
            None
        ));
        assert_eq!(t.moved, vec![(12, "127.0.0.1:7001".to_string())]);
        assert_eq!(t.asks, vec![(2, 13, "127.0.0.1:7001".to_string())]);
        assert!(t.redirected && t.tryagain);
        t.discarded(7);
        assert!(!t.redirected && t.moved.is_empty() && t.asks.is_empty());
    }

    #[test]
    fn keeps_the_queued_requests_at_exec() {
        let mut tx = Tx {
            multi: true,
            ..Tx::default()
        };
        tx.unit.extend_from_slice(b"ab");
        tx.unit_ends.extend([1, 2]);
        let mut t = TxMoves::default();
        t.at_exec(&mut tx);
        assert_eq!(t.requests(), vec![&b"a"[..], &b"b"[..]]);
        assert!(t.kept);
        let mut tx = Tx {
            multi: true,
            watching: true,
            ..Tx::default()
        };
        t.at_exec(&mut tx);
        assert!(!t.kept && t.watching);
        assert!(is_exec(b"eXeC") && !is_exec(b"exe") && is_discard(b"DISCARD"));
    }
}
