//! Blocking commands whose slot moves: a BLPOP (BRPOP, BLMOVE, BLMPOP, BZPOPMIN, BZPOPMAX,
//! BZMPOP, BRPOPLPUSH, XREAD/XREADGROUP … BLOCK) on one engine that the engine answers
//! `-MOVED`, `-ASK` or `-TRYAGAIN` is sent again, so the client only gets the final reply
//! (docs/cluster.md, "Through the proxy"). An engine answers so when the slot had moved
//! before the command came, or while it is parked there: a client parked on a key whose slot
//! moved away is unblocked with `-MOVED` at the engine's next cron tick
//! (`engine_core::blocking`, `redirect_moved`).
//!
//! A blocking command takes the client's dedicated connection to its keys' engine
//! (`crate::dedicated`), which keeps nothing once written, so the request is copied when it
//! is sent ([`BlockMoves::sent`]; blocking commands only, not the forwards of a tracking
//! client, which take the same path) and its waiter marked ([`crate::client::Hops::block`]);
//! the reply of a marked waiter is looked at here ([`delivered`]) — the normal path pays
//! that one flag test.
//!
//! | reply | what the proxy does |
//! |---|---|
//! | `-MOVED <slot> <host>:<port>` | the slot table gives the slot to that node (and a `CLUSTER SLOTS` refresh is asked for); the request goes on the client's dedicated connection to it |
//! | `-ASK <slot> <host>:<port>` | `ASKING` (its `+OK` dropped) then the request, on the client's dedicated connection to that node |
//! | `-TRYAGAIN …` | the request again on the same connection after [`TRYAGAIN_DELAY`] (after `ASKING` again if it had been sent after one) |
//!
//! Bounds: at most [`MAX_REDIRECTS`] `-MOVED`/`-ASK` and [`MAX_TRIES`] `-TRYAGAIN` per
//! request, as on the shared links; past them the last error reaches the client as it came.
//!
//! **Timeout.** The command's timeout starts again on the node it is sent to: a client
//! parked for a while before its slot moved may wait up to one timeout more in all (a
//! timeout of 0 stays 0: it waits for ever, wherever).
//!
//! **Ordering.** While a request is sent again its client's lane becomes
//! [`Lane::Spread`](crate::dedicated::Lane), so the client's next request waits until every
//! earlier reply is in (`crate::dedicated`, "Lanes and ordering").

use std::time::Instant;

use crate::client::{Client, Hops, Waiter};
use crate::event_loop::Proxy;
use crate::exec::{Ctx, Me};
use crate::follow::Follower;
use crate::redirect::{ASKING, MAX_REDIRECTS, MAX_TRIES, Redirect, TRYAGAIN_DELAY, parse};

/// One blocking request of a client whose reply is awaited.
#[derive(Debug)]
pub struct Pending {
    /// Its reply slot.
    seq: u64,
    /// The request, as the client sent it.
    raw: Vec<u8>,
    /// The instance it was last sent to, and whether after `ASKING`.
    instance: usize,
    asking: bool,
    /// `-MOVED`/`-ASK` followed, `-TRYAGAIN` retried.
    redirects: u8,
    tries: u8,
    /// Where it goes next, once [`Pending::due`].
    next: Next,
    pub due: Option<Instant>,
}

/// Where a request met by a redirect goes next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// Nowhere yet (sent, its reply awaited).
    Wait,
    /// `-MOVED`: the slot is that node's.
    Moved { slot: u16, addr: String },
    /// `-ASK`: that node, after `ASKING`.
    Ask { addr: String },
    /// `-TRYAGAIN`: the same node again.
    Same,
}

/// A client's blocking requests as far as slot moves are concerned.
#[derive(Debug, Default)]
pub struct BlockMoves {
    pending: Vec<Pending>,
}

impl BlockMoves {
    /// A blocking request is waiting for its reply.
    pub fn waiting(&self) -> bool {
        !self.pending.is_empty()
    }

    /// The instance the (first) waiting blocking request was sent to.
    pub fn waiting_on(&self) -> Option<usize> {
        self.pending.first().map(|p| p.instance)
    }

    /// Blocking request `raw` was sent to `instance`, answered in slot `seq`.
    pub fn sent(&mut self, seq: u64, raw: &[u8], instance: usize) {
        self.pending.push(Pending {
            seq,
            raw: raw.to_vec(),
            instance,
            asking: false,
            redirects: 0,
            tries: 0,
            next: Next::Wait,
            due: None,
        });
    }

    /// The earliest time a request is due to be sent again.
    pub fn due(&self) -> Option<Instant> {
        self.pending.iter().filter_map(|p| p.due).min()
    }

    /// Takes the requests due at `now` (sent again by the caller).
    pub fn take_due(&mut self, now: Instant) -> Vec<Pending> {
        let mut due = Vec::new();
        let mut k = 0;
        while k < self.pending.len() {
            if self.pending[k].due.is_some_and(|d| d <= now) {
                due.push(self.pending.swap_remove(k));
            } else {
                k += 1;
            }
        }
        due
    }
}

impl Pending {
    /// Where it goes next.
    pub fn next(&self) -> &Next {
        &self.next
    }
}

/// A waiter whose reply is looked at for slot moves.
pub fn waiter(token: usize, client_id: u64, seq: u64) -> Waiter {
    Waiter {
        token,
        client_id,
        seq,
        part: 0,
        hops: Hops {
            block: true,
            ..Hops::NONE
        },
    }
}

/// A reply for a waiter marked [`Hops::block`]: `true` when it is to be sent again (the
/// event loop does it when due), `false` when it fills its slot as usual.
pub fn delivered(c: &mut Client, w: Waiter, reply: &[u8]) -> bool {
    let Some(k) = c.bmove.pending.iter().position(|p| p.seq == w.seq) else {
        return false;
    };
    if !redirected(&mut c.bmove.pending[k], reply, Instant::now()) {
        c.bmove.pending.swap_remove(k);
        return false;
    }
    log::debug!(
        "client {}: a blocking command met a moving slot ({:?}); sent again",
        c.id,
        c.bmove.pending[k].next
    );
    true
}

/// Records `reply` to `p` if it is a redirect to follow (within the bounds): `true`.
fn redirected(p: &mut Pending, reply: &[u8], now: Instant) -> bool {
    let redirect = match reply.first() {
        Some(b'-') => parse(reply),
        _ => None,
    };
    match redirect {
        Some(Redirect::Moved { slot, addr }) if p.redirects < MAX_REDIRECTS => {
            p.redirects += 1;
            p.next = Next::Moved {
                slot,
                addr: addr.to_string(),
            };
            p.due = Some(now);
        }
        Some(Redirect::Ask { addr, .. }) if p.redirects < MAX_REDIRECTS => {
            p.redirects += 1;
            p.next = Next::Ask {
                addr: addr.to_string(),
            };
            p.due = Some(now);
        }
        Some(Redirect::TryAgain) if p.tries < MAX_TRIES => {
            p.tries += 1;
            p.next = Next::Same;
            p.due = Some(now + TRYAGAIN_DELAY);
        }
        _ => return false,
    }
    true
}

/// Sends `p` again to `instance` (after `ASKING` when `asking`) on the client's dedicated
/// connection there; an error reply fills its slot when none can be had.
pub(crate) fn resend(
    mut p: Pending,
    instance: usize,
    asking: bool,
    me: &mut Me<'_>,
    ctx: &mut Ctx<'_>,
) {
    let id = match crate::exec::ready_conn(instance, me, ctx) {
        Ok(id) => id,
        Err(error) => {
            me.replies.fill(p.seq, 0, &error);
            return;
        }
    };
    // The client's next request waits for this one's reply, wherever it comes from.
    *me.lane = crate::dedicated::Lane::Spread;
    let d = ctx.dedicated.get_mut(id).expect("just looked up");
    if asking {
        d.send(ASKING, None, 1);
    }
    d.send(&p.raw, Some(waiter(me.token, me.id, p.seq)), 1);
    crate::event_loop::mark(&mut d.dirty, ctx.dirty_dedicated, id);
    p.instance = instance;
    p.asking = asking;
    p.next = Next::Wait;
    p.due = None;
    me.bmove.pending.push(p);
}

/// The instance `p` was last sent to, and whether after `ASKING`.
pub fn last(p: &Pending) -> (usize, bool) {
    (p.instance, p.asking)
}

impl Proxy {
    /// Sends again the blocking commands whose time has come (`crate::blockmove`): each
    /// `-MOVED` applied to the table first (and a refresh asked for).
    pub(crate) fn block_resends_due(&mut self, now: Instant) {
        let mut k = 0;
        while k < self.block_resends.len() {
            let token = self.block_resends[k];
            let Some(c) = self.clients.get_mut(token) else {
                self.block_resends.swap_remove(k);
                continue;
            };
            let due = c.bmove.take_due(now);
            if c.bmove.due().is_some() {
                k += 1;
            } else {
                self.block_resends.swap_remove(k);
            }
            for p in due {
                let (last, asking) = last(&p);
                let to = match p.next() {
                    Next::Moved { slot, addr } => {
                        let j = self.instance_named(addr, now);
                        if let Some(j) = j {
                            self.fleet.slots.set(*slot, j);
                        }
                        self.redirects.want_refresh();
                        self.refresh_if_wanted(now);
                        j.map(|j| (j, false))
                    }
                    Next::Ask { addr } => self.instance_named(addr, now).map(|j| (j, true)),
                    Next::Same | Next::Wait => Some((last, asking)),
                };
                let (to, asking) = to.unwrap_or((last, asking));
                self.with_client(token, |me, ctx| {
                    resend(p, to, asking, me, ctx);
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirects_are_bounded_and_others_pass() {
        let mut b = BlockMoves::default();
        b.sent(3, b"*3\r\n$5\r\nBLPOP\r\n$1\r\nk\r\n$1\r\n0\r\n", 0);
        assert!(b.due().is_none());
        let now = Instant::now();
        assert!(b.take_due(now).is_empty());
        b.pending[0].due = Some(now);
        let due = b.take_due(now);
        assert_eq!(due.len(), 1);
        assert!(b.pending.is_empty());
        assert_eq!(last(&due[0]), (0, false));
        let mut p = due.into_iter().next().expect("one");
        assert!(!redirected(&mut p, b"*-1\r\n", now));
        assert!(!redirected(&mut p, b"-ERR no\r\n", now));
        assert!(redirected(&mut p, b"-MOVED 12 127.0.0.1:7001\r\n", now));
        assert_eq!(
            p.next(),
            &Next::Moved {
                slot: 12,
                addr: "127.0.0.1:7001".into()
            }
        );
        assert!(redirected(&mut p, b"-ASK 12 127.0.0.1:7002\r\n", now));
        assert_eq!(
            p.next(),
            &Next::Ask {
                addr: "127.0.0.1:7002".into()
            }
        );
        assert!(redirected(&mut p, b"-TRYAGAIN slot moving\r\n", now));
        assert_eq!(p.next(), &Next::Same);
        assert_eq!(p.due, Some(now + TRYAGAIN_DELAY));
        for _ in 2..MAX_REDIRECTS {
            assert!(redirected(&mut p, b"-MOVED 12 127.0.0.1:7001\r\n", now));
        }
        assert!(!redirected(&mut p, b"-MOVED 12 127.0.0.1:7001\r\n", now));
    }
}
