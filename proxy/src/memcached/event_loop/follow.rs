//! The memcached port following slot moves (docs/memcached.md, "Slots that move"): its own
//! slot table, `-MOVED` / `-ASK` / `-TRYAGAIN` followed for the engine requests its commands
//! become, nodes learned at run time, and the table refreshed from `CLUSTER SLOTS`, with
//! the RESP side's rules and bounds: the decisions and the refresh's timing are
//! `crate::follow`'s, shared with the RESP loop; this file holds what only the port does
//! (its links, how it learns a node, the split and gather below).
//!
//! # Why a table of its own
//!
//! The port's loop is another thread with its own links, numbered its own way (a node
//! learned at run time gets the next index of *this* loop's link table). Sharing the RESP
//! loop's table would mean translating indices and reading across threads on every key; a
//! second table costs one `CLUSTER SLOTS` per second per proxy and keeps the hot path a
//! CRC16 and an array read, as before.
//!
//! # What is followed
//!
//! | reply | what the port does |
//! |---|---|
//! | `-MOVED <slot> <addr>` | the table gives the slot to `addr` (learned if new), the request is sent there, a refresh is asked for |
//! | `-ASK <slot> <addr>` | `ASKING` then the request on `addr`'s link; the table is unchanged |
//! | `-TRYAGAIN …` | the same request on the same link after `TRYAGAIN_DELAY` |
//! | `-CROSSSLOT …`, or `-TRYAGAIN` for a request of several key pairs | the request is split into one request per (item, companion) pair, each followed alone; their replies are joined into the array the whole would have had (a *gather*), so `get k1 k2 …` still answers in key order |
//!
//! A multi-key `get` is one `MGET` (or gat script) per instance over keys of several slots;
//! an engine runs it while it owns them all, and refuses it (`-CROSSSLOT`, `-TRYAGAIN`) once
//! one of the slots moved or is moving, hence the split. Pairs cannot be split further: the
//! item and its companion share a slot.
//!
//! Bounds: `MAX_REDIRECTS` `-MOVED`/`-ASK` and `MAX_TRIES` `-TRYAGAIN` per request; past
//! them the engine's error reaches the client as `SERVER_ERROR <error>`. Replies stay in
//! request order: the client's slot does not move.

use std::net::SocketAddr;
use std::time::Instant;

use mio::Token;
use resp::value::Value;

use super::{LINK_TOKEN_BASE, Loop, NOBODY, deliver};
use crate::backend::{ASKING_WAITER, Backend, Link, REFRESH_WAITER};
use crate::client::Waiter;
use crate::follow::{CROSSSLOT, Follower, GATHER, Gathers, Moves, Retry};
use crate::redirect::{ASKING, CLUSTER_SLOTS, Redirect, parse};
use crate::slots::{SlotMap, Slots};

/// The port's slot table and redirect state.
pub(super) struct Follow {
    pub slots: Slots,
    /// Redirects being followed, the table's refresh (`crate::follow`).
    pub moves: Moves,
    /// Requests split per key pair, their replies joined ([`join`]) when all are in.
    gathers: Gathers<()>,
}

impl Follow {
    pub fn new(instances: usize) -> Self {
        Follow {
            slots: Slots::jump(instances),
            moves: Moves::new(),
            gathers: Gathers::new(),
        }
    }

    /// A sub-request's reply: `Some` (the split request's waiter, the joined reply) once
    /// every pair answered.
    pub fn gathered(&mut self, w: Waiter, reply: &[u8]) -> Option<(Waiter, Vec<u8>)> {
        let (whole, (), replies) = self.gathers.answered(w, reply)?;
        Some((whole, join(&replies)))
    }

    /// Whether link `i` should be kept connected: its instance owns slots.
    pub fn serves(&self, i: usize) -> bool {
        !self.moves.cluster() || self.slots.serves(i)
    }
}

impl Loop {
    /// Delivers the replies read on link `i`; redirects among them are followed after.
    pub(super) fn deliver_from(&mut self, i: usize, now: Instant) {
        let Loop {
            conns,
            links,
            follow,
            counters,
            totals,
            dirty_conns,
            ..
        } = self;
        let mut noscript = false;
        let mut redirected = false;
        let result = links[i].deliver_replies(|w, reply, sent| {
            // One test on the common path: only errors and the loop's own replies go further.
            if (w.token == NOBODY || reply.first() == Some(&b'-'))
                && follow.moves.intercept(w, reply, sent.request(&w), i)
            {
                redirected = true;
                return;
            }
            noscript |= reply.starts_with(b"-NOSCRIPT");
            if w.token == GATHER {
                if let Some((whole, joined)) = follow.gathered(w, reply) {
                    deliver(conns, counters, totals, dirty_conns, whole, &joined);
                }
                return;
            }
            deliver(conns, counters, totals, dirty_conns, w, reply);
        });
        if redirected {
            self.follow_redirects(now);
        }
        if let Err(e) = result {
            self.fail_link(i, &format!("bad reply: {e}"), now);
            return;
        }
        if noscript {
            // The engine's script cache was emptied (SCRIPT FLUSH over RESP): the request
            // that met it answered SERVER_ERROR; the scripts are loaded again for the next.
            log::warn!("memcached: instance {i} lost the scripts; loading them again");
            for request in super::scripts::load_requests() {
                self.links[i].send(&request, super::NOBODY_WAITER);
            }
            self.mark_link(i);
        }
    }

    /// Sends each pair of a split request to the owner of its slot, under one gather.
    fn gather(&mut self, w: Waiter, pairs: Vec<(Vec<u8>, Vec<u8>)>, now: Instant) {
        let subs = self.follow.gathers.open(w, pairs.len(), ());
        for (sub, (item, request)) in subs.into_iter().zip(pairs) {
            let link = self.follow.slots.of(&item);
            let r = Retry {
                w: sub,
                request,
                reply: Vec::new(),
                from: link,
            };
            self.resend(link, r, now);
        }
    }

    /// Hands a reply to its waiter: a client's slot, or a gather (then the joined reply to
    /// the client once complete).
    pub(super) fn answer(&mut self, w: Waiter, reply: &[u8]) {
        if w.token == GATHER {
            if let Some((whole, joined)) = self.follow.gathered(w, reply) {
                self.answer(whole, &joined);
            }
            return;
        }
        deliver(
            &mut self.conns,
            &mut self.counters,
            &mut self.totals,
            &mut self.dirty_conns,
            w,
            reply,
        );
    }
}

impl Follower for Loop {
    const NAME: &'static str = "memcached";

    fn state(&mut self) -> (&mut Moves, &mut Slots) {
        (&mut self.follow.moves, &mut self.follow.slots)
    }

    fn slots(&self) -> &Slots {
        &self.follow.slots
    }

    fn instances(&self) -> usize {
        self.links.len()
    }

    fn is_up(&self, j: usize) -> bool {
        self.links[j].link == Link::Up
    }

    fn link_name(&self, link: usize) -> &str {
        &self.links[link].name
    }

    fn instance_by_name(&self, addr: &str) -> Option<usize> {
        self.links.iter().position(|b| b.name == addr)
    }

    fn instance_by_addr(&self, sock: SocketAddr) -> Option<usize> {
        self.links.iter().position(|b| b.addr == sock)
    }

    /// One link per instance, logged in like the configured ones.
    fn add_instance(&mut self, name: &str, sock: SocketAddr, now: Instant) -> usize {
        let j = self.links.len();
        let mut b = Backend::new(j, name.to_string(), sock);
        b.login = self.opts.login.clone();
        // The scripts are loaded first on every connection, as on the configured nodes.
        b.preamble = super::scripts::load_requests();
        b.connect(self.poll.registry(), Token(LINK_TOKEN_BASE + j), now, true);
        self.links.push(b);
        self.follow.slots.grow(j + 1);
        self.mark_link(j);
        log::info!("memcached: instance {j} ({name}) learned from the cluster");
        j
    }

    /// Link `j` is instance `j`'s only link.
    fn link_on(&self, j: usize, _from: usize) -> usize {
        j
    }

    /// Connects the link if it is down; an instance that cannot be reached answers its
    /// error.
    fn resend(&mut self, link: usize, r: Retry, now: Instant) {
        let b = &mut self.links[link];
        if matches!(b.link, Link::Down { .. }) {
            b.connect(
                self.poll.registry(),
                Token(LINK_TOKEN_BASE + link),
                now,
                true,
            );
        }
        if !b.accepts() {
            let error = b.unavailable.clone();
            self.totals.backend_errors += 1;
            return self.answer(r.w, &error);
        }
        if r.w.hops.asking {
            b.send(ASKING, ASKING_WAITER);
        }
        b.send(&r.request, r.w);
        self.mark_link(link);
    }

    fn give_up(&mut self, r: Retry) {
        self.answer(r.w, &r.reply);
    }

    fn send_refresh(&mut self, j: usize) -> bool {
        self.links[j].send(CLUSTER_SLOTS, REFRESH_WAITER);
        self.mark_link(j);
        true
    }

    /// A refusal to run a request of several key pairs (`-CROSSSLOT`, `-TRYAGAIN`): one
    /// request per pair, under one gather.
    fn split(&mut self, r: Retry, now: Instant) -> Option<Retry> {
        if r.w.token != GATHER
            && (r.reply.starts_with(CROSSSLOT) || parse(&r.reply) == Some(Redirect::TryAgain))
            && let Some(pairs) = split_pairs(&r.request)
        {
            self.gather(r.w, pairs, now);
            return None;
        }
        Some(r)
    }
}

/// Some arguments of a request.
type Args<'a> = &'a [&'a [u8]];

/// A request over several key pairs (`MGET k1 m1 k2 m2 …`, `EVALSHA sha 2N k1 m1 … args`)
/// as one request per pair: (the pair's item key, the request). `None`: one pair only, or
/// not such a request.
fn split_pairs(request: &[u8]) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
    let Ok(Some((Value::Array(argv), _))) = resp::value::decode(request) else {
        return None;
    };
    let argv: Vec<&[u8]> = argv
        .iter()
        .map(|a| match a {
            Value::Bulk(b) => Some(b.as_slice()),
            _ => None,
        })
        .collect::<Option<_>>()?;
    let name = argv.first()?.to_ascii_uppercase();
    let (head, keys, tail): (Args<'_>, Args<'_>, Args<'_>) = match name.as_slice() {
        b"MGET" => (&argv[..1], &argv[1..], &[]),
        b"EVALSHA" => {
            let n: usize = std::str::from_utf8(argv.get(2)?).ok()?.parse().ok()?;
            let keys = argv.get(3..3 + n)?;
            (&argv[..2], keys, &argv[3 + n..])
        }
        _ => return None,
    };
    if keys.len() < 4 || keys.len() % 2 != 0 {
        return None;
    }
    let pairs = keys
        .chunks(2)
        .map(|pair| {
            let mut args: Vec<&[u8]> = head.to_vec();
            if name == b"EVALSHA" {
                args.push(b"2");
            }
            args.extend_from_slice(pair);
            args.extend_from_slice(tail);
            let mut out = Vec::new();
            resp::request::encode_request(&mut out, &args);
            (pair[0].to_vec(), out)
        })
        .collect();
    Some(pairs)
}

/// The replies of a split request's pairs joined into the array the whole would have
/// answered (their elements in pair order); the first error (or non-array) if any.
fn join(replies: &[Vec<u8>]) -> Vec<u8> {
    let mut total = 0usize;
    let mut bodies = Vec::with_capacity(replies.len());
    for r in replies {
        let header = r.strip_prefix(b"*").and_then(|rest| {
            let end = rest.windows(2).position(|w| w == b"\r\n")?;
            let n: usize = std::str::from_utf8(&rest[..end]).ok()?.parse().ok()?;
            Some((n, &rest[end + 2..]))
        });
        match header {
            Some((n, body)) => {
                total += n;
                bodies.push(body);
            }
            None if r.starts_with(b"-") => return r.clone(),
            None => return b"-ERR unexpected reply from the engine\r\n".to_vec(),
        }
    }
    let mut out = format!("*{total}\r\n").into_bytes();
    for b in bodies {
        out.extend_from_slice(b);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(args: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        resp::request::encode_request(&mut out, args);
        out
    }

    #[test]
    fn splits_a_multi_pair_request_per_pair() {
        let mget = req(&[b"MGET", b"a", b"ma", b"b", b"mb"]);
        assert_eq!(
            split_pairs(&mget),
            Some(vec![
                (b"a".to_vec(), req(&[b"MGET", b"a", b"ma"])),
                (b"b".to_vec(), req(&[b"MGET", b"b", b"mb"])),
            ])
        );
        let gat = req(&[b"EVALSHA", b"sha", b"4", b"a", b"ma", b"b", b"mb", b"99"]);
        assert_eq!(
            split_pairs(&gat),
            Some(vec![
                (
                    b"a".to_vec(),
                    req(&[b"EVALSHA", b"sha", b"2", b"a", b"ma", b"99"])
                ),
                (
                    b"b".to_vec(),
                    req(&[b"EVALSHA", b"sha", b"2", b"b", b"mb", b"99"])
                ),
            ])
        );
        // One pair, or not a pair request: nothing to split.
        assert_eq!(split_pairs(&req(&[b"MGET", b"a", b"ma"])), None);
        assert_eq!(split_pairs(&req(&[b"SET", b"a", b"1", b"b", b"2"])), None);
        assert_eq!(split_pairs(&req(&[b"EVALSHA", b"s", b"9", b"a"])), None);
        assert_eq!(split_pairs(b"garbage"), None);
    }

    #[test]
    fn joins_pair_replies_in_order_or_passes_the_first_error() {
        let a = b"*2\r\n$1\r\nx\r\n$3\r\n0 1\r\n".to_vec();
        let b = b"*2\r\n$-1\r\n$-1\r\n".to_vec();
        assert_eq!(
            join(&[a.clone(), b.clone()]),
            b"*4\r\n$1\r\nx\r\n$3\r\n0 1\r\n$-1\r\n$-1\r\n".to_vec()
        );
        let err = b"-MOVED 1 127.0.0.1:1\r\n".to_vec();
        assert_eq!(join(&[a.clone(), err.clone(), b.clone()]), err);
        assert!(join(&[a, b":1\r\n".to_vec()]).starts_with(b"-ERR"));
    }

    #[test]
    fn gathers_complete_once_every_pair_answered() {
        let mut f = Follow::new(2);
        let client = Waiter {
            token: 7,
            client_id: 1,
            seq: 3,
            part: 0,
            hops: crate::client::Hops::NONE,
        };
        let subs = f.gathers.open(client, 2, ());
        assert_eq!(f.gathered(subs[1], b"*1\r\n:2\r\n"), None);
        let (w, joined) = f.gathered(subs[0], b"*1\r\n:1\r\n").expect("complete");
        assert_eq!(w, client);
        assert_eq!(joined, b"*2\r\n:1\r\n:2\r\n");
        assert_eq!(f.gathers.len(), 0);
    }
}
