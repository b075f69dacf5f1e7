//! Following `-MOVED`, `-ASK` and `-TRYAGAIN` for requests on the shared links, so that
//! applications never see slots move (docs/cluster.md, "Through the proxy").
//!
//! A shared link keeps each written request until its reply is read (`crate::backend::Wire`,
//! `retain`), so nothing is copied for requests whose reply is not a redirect; a reply is
//! only looked at when its first byte is `-`.
//!
//! | reply | what the proxy does |
//! |---|---|
//! | `-MOVED <slot> <host>:<port>` | the slot table gives the slot to that node, the request is sent again there (same database, protocol and link kind), and a `CLUSTER SLOTS` refresh is asked for |
//! | `-ASK <slot> <host>:<port>` | `ASKING` then the request, on that node's link (`ASKING`'s `+OK` is consumed); the table is unchanged |
//! | `-TRYAGAIN …` | the same request on the same link after [`TRYAGAIN_DELAY`] (after `ASKING` again if it had been redirected by `-ASK`) |
//! | `-CROSSSLOT …` or `-TRYAGAIN …` to MGET, MSET, DEL, UNLINK, EXISTS or TOUCH over keys of several slots (a split part, or a request forwarded whole to one engine) | split per slot (`crate::split::per_slot`): each slot's request sent to the slot's owner in the table and followed like any request; their replies merged into the one the request would have had (`crate::follow`, "a nested gather") |
//! | `-TRYAGAIN …` to such a command over several keys of one slot (keys on both sides of the move, or missing on the importing node: retrying would repeat it until the slot closes) | split per key (`crate::split::per_key`), the same way |
//!
//! Bounds: at most [`MAX_REDIRECTS`] `-MOVED`/`-ASK` and [`MAX_TRIES`] `-TRYAGAIN` per
//! request (so about a second at most); past them the last error reaches the client as it
//! came. The reply slot of the client does not move, so its replies stay in request order
//! whatever the detours.
//!
//! The decisions, bounds and refresh timing are `crate::follow`'s, shared with the memcached
//! port; this file holds the parsers and the RESP loop's side (`impl Follower for Proxy`).
//!
//! A `host:port` the proxy does not know becomes a new instance (`add_instance`):
//! its links are appended to the link table with the same login, protocol and database
//! settings, and its database-0 link connects at once. At most [`MAX_INSTANCES`].
//!
//! The table is refreshed from `CLUSTER SLOTS` on an instance that is up: once at start
//! (when the first link is up), and after each `-MOVED`, at most one in flight and one per
//! [`REFRESH_INTERVAL`]. An instance that answers `CLUSTER SLOTS` with an error (a
//! standalone server) leaves the table as it is.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::backend::{ASKING_WAITER, Link, REFRESH_WAITER, links_per_instance};
use crate::event_loop::{Proxy, backend_token};
use crate::follow::{CROSSSLOT, Follower, GATHER, Moves, Retry};
use crate::slots::Slots;
use crate::split::{Merge, SlotPart};

/// `-MOVED` and `-ASK` followed per request at most.
pub const MAX_REDIRECTS: u8 = 5;
/// `-TRYAGAIN` retries per request at most.
pub const MAX_TRIES: u8 = 100;
/// Wait before retrying a `-TRYAGAIN` (the slot's keys are being moved).
pub const TRYAGAIN_DELAY: Duration = Duration::from_millis(10);
/// At most one `CLUSTER SLOTS` per this interval.
pub const REFRESH_INTERVAL: Duration = Duration::from_millis(100);
/// With cluster backends, the table is refreshed this often even when no `-MOVED` says a
/// slot moved: an engine retired after its slots moved away (`recached resize`) is then
/// never routed to, though no request of this proxy ever met its `-MOVED`.
pub const PERIODIC_REFRESH: Duration = Duration::from_secs(1);
/// Instances the proxy learns at most (a bound against a misbehaving node).
pub const MAX_INSTANCES: usize = 1024;

/// `ASKING` as a request.
pub const ASKING: &[u8] = b"*1\r\n$6\r\nASKING\r\n";
/// `CLUSTER SLOTS` as a request.
pub const CLUSTER_SLOTS: &[u8] = b"*2\r\n$7\r\nCLUSTER\r\n$5\r\nSLOTS\r\n";

/// A redirect reply.
#[derive(Debug, PartialEq, Eq)]
pub enum Redirect<'a> {
    Moved { slot: u16, addr: &'a str },
    Ask { slot: u16, addr: &'a str },
    TryAgain,
}

/// The redirect `reply` is, if it is one (`-MOVED 3999 127.0.0.1:6381\r\n`, `-ASK …`,
/// `-TRYAGAIN …`); anything malformed is not.
pub fn parse(reply: &[u8]) -> Option<Redirect<'_>> {
    let rest = reply.strip_prefix(b"-")?;
    if rest.starts_with(b"TRYAGAIN") {
        return Some(Redirect::TryAgain);
    }
    let (moved, rest) = if let Some(r) = rest.strip_prefix(b"MOVED ") {
        (true, r)
    } else {
        (false, rest.strip_prefix(b"ASK ")?)
    };
    let line = std::str::from_utf8(rest.strip_suffix(b"\r\n")?).ok()?;
    let (slot, addr) = line.split_once(' ')?;
    let slot: u16 = slot
        .parse()
        .ok()
        .filter(|&s| s < engine_core::slot::SLOTS)?;
    let (host, port) = addr.rsplit_once(':')?;
    if host.is_empty() || port.parse::<u16>().is_err() || addr.contains(' ') {
        return None;
    }
    Some(match moved {
        true => Redirect::Moved { slot, addr },
        false => Redirect::Ask { slot, addr },
    })
}

/// The ranges of a `CLUSTER SLOTS` reply: `(first, last, "host:port")` of each master. An
/// empty host means the node that answered (`asked_host`); `?` (unknown endpoint) and
/// malformed entries are skipped. `None`: not a `CLUSTER SLOTS` array (an error reply).
pub fn parse_slots(reply: &[u8], asked_host: &str) -> Option<Vec<(u16, u16, String)>> {
    use resp::value::Value;
    let Ok(Some((Value::Array(entries), _))) = resp::value::decode(reply) else {
        return None;
    };
    let mut ranges = Vec::with_capacity(entries.len());
    for entry in entries {
        let Value::Array(fields) = entry else {
            continue;
        };
        let (Some(Value::Integer(first)), Some(Value::Integer(last)), Some(Value::Array(node))) =
            (fields.first(), fields.get(1), fields.get(2))
        else {
            continue;
        };
        let (Some(host), Some(Value::Integer(port))) = (node.first(), node.get(1)) else {
            continue;
        };
        let host = match host {
            Value::Bulk(h) | Value::Simple(h) => String::from_utf8_lossy(h).into_owned(),
            _ => continue,
        };
        let host = match host.as_str() {
            "?" => continue,
            "" => asked_host.to_string(),
            _ => host,
        };
        let slots = 0..i64::from(engine_core::slot::SLOTS);
        if !slots.contains(first) || !slots.contains(last) || first > last {
            continue;
        }
        let Ok(port) = u16::try_from(*port) else {
            continue;
        };
        let addr = match host.contains(':') {
            true => format!("[{host}]:{port}"),
            false => format!("{host}:{port}"),
        };
        ranges.push((*first as u16, *last as u16, addr));
    }
    Some(ranges)
}

/// The smaller requests `r` becomes when an engine refused it while a slot moves, for a
/// key-list request of several keys: per slot ([`crate::split::per_slot`]) when it spans slots
/// (`-CROSSSLOT`, `-TRYAGAIN`); per key ([`crate::split::per_key`]) when it is one slot and
/// the refusal is `-TRYAGAIN` (its keys on both sides of the move, or missing on the importing
/// side), which retrying would only repeat until the slot closes. A one-key request is never
/// refused so, so the cutting ends there. `None` for anything else.
pub(crate) fn per_slot(r: &Retry) -> Option<(Vec<SlotPart>, Merge)> {
    let tryagain = parse(&r.reply) == Some(Redirect::TryAgain);
    if !(r.reply.starts_with(CROSSSLOT) || tryagain) {
        return None;
    }
    match crate::split::per_slot(&r.request) {
        // A part of a per-slot split holds one slot: it never gets here.
        Some(cut) if r.w.token != GATHER => Some(cut),
        Some(_) => None,
        None if tryagain => crate::split::per_key(&r.request),
        None => None,
    }
}

impl Follower for Proxy {
    const NAME: &'static str = "proxy";

    fn state(&mut self) -> (&mut Moves, &mut Slots) {
        (&mut self.redirects, &mut self.fleet.slots)
    }

    fn slots(&self) -> &Slots {
        &self.fleet.slots
    }

    fn instances(&self) -> usize {
        self.fleet.instances()
    }

    fn is_up(&self, j: usize) -> bool {
        self.fleet.up[j]
    }

    fn link_name(&self, link: usize) -> &str {
        &self.backends[link].name
    }

    fn instance_by_name(&self, addr: &str) -> Option<usize> {
        self.fleet.addrs.iter().position(|a| a == addr)
    }

    fn instance_by_addr(&self, sock: SocketAddr) -> Option<usize> {
        (0..self.fleet.instances()).find(|&j| self.backends[self.fleet.primary(j)].addr == sock)
    }

    /// Appends instance `name` to the fleet: its links (the configured ones' login and
    /// settings), its place in the slot table (no slots yet), its database-0 link connecting.
    fn add_instance(&mut self, name: &str, addr: SocketAddr, now: Instant) -> usize {
        let j = self.fleet.instances();
        let per = self.fleet.per_instance;
        debug_assert_eq!(per, links_per_instance(self.fleet.databases));
        let base = self.backends.len();
        debug_assert_eq!(base, j * per);
        self.backends.extend(crate::backend::instance_links(
            j,
            name,
            addr,
            per,
            &self.fleet.login,
            true,
        ));
        self.listed.resize(base + per, false);
        self.fleet.addrs.push(name.to_string());
        self.fleet.up.push(false);
        self.fleet.slots.grow(j + 1);
        self.backends[base].connect(self.poll.registry(), backend_token(base), now, true);
        self.mark_backend(base);
        log::info!("proxy: instance {j} ({name}) learned from the cluster");
        j
    }

    /// The same kind of link (database, protocol, script or not) on the new owner.
    fn link_on(&self, j: usize, from: usize) -> usize {
        self.fleet.primary(j) + from % self.fleet.per_instance
    }

    /// Wakes the link if it is dormant; an instance that is down answers its unavailable
    /// error.
    fn resend(&mut self, link: usize, r: Retry, now: Instant) {
        let b = &mut self.backends[link];
        // A node a redirect names is expected up: a link waiting out a reconnect backoff
        // (an engine re-added on a port retired earlier) connects now, queueing the request.
        if b.dormant || matches!(b.link, Link::Down { .. }) {
            b.dormant = false;
            b.connect(self.poll.registry(), backend_token(link), now, true);
        }
        if !b.accepts() {
            let error = b.unavailable.clone();
            self.fleet.backend_errors += 1;
            self.deliver_to_client(r.w, &error);
            return;
        }
        if r.w.hops.asking {
            b.send(ASKING, ASKING_WAITER);
        }
        b.send(&r.request, r.w);
        self.mark_backend(link);
    }

    fn gained_slots(&mut self, j: usize, now: Instant) {
        let link = self.fleet.primary(j);
        let b = &mut self.backends[link];
        if matches!(b.link, Link::Down { .. }) && !b.dormant {
            b.connect(self.poll.registry(), backend_token(link), now, true);
            self.mark_backend(link);
        }
    }

    fn give_up(&mut self, r: Retry) {
        self.deliver_to_client(r.w, &r.reply);
    }

    /// A key-list request over several slots that an engine refused (`-CROSSSLOT`,
    /// `-TRYAGAIN`): one request per slot, to the slot's owner on the same kind of link
    /// (database, protocol), under one gather (see [`per_slot`] for when it is cut per key).
    fn split(&mut self, r: Retry, now: Instant) -> Option<Retry> {
        let Some((parts, merge)) = per_slot(&r) else {
            return Some(r);
        };
        log::debug!(
            "proxy: a request over {} slots was refused ({}); sent per slot",
            parts.len(),
            String::from_utf8_lossy(&r.reply).trim_end()
        );
        let subs = self.resplits.open(r.w, parts.len(), merge);
        for (w, part) in subs.into_iter().zip(parts) {
            let link = self.link_on(self.fleet.slots.owner(part.slot), r.from);
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

    /// On the instance's database-0 link.
    fn send_refresh(&mut self, j: usize) -> bool {
        let link = self.fleet.primary(j);
        if !self.backends[link].accepts() {
            return false;
        }
        self.backends[link].send(CLUSTER_SLOTS, REFRESH_WAITER);
        self.mark_backend(link);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_redirects_and_refuses_anything_malformed() {
        assert_eq!(
            parse(b"-MOVED 3999 127.0.0.1:6381\r\n"),
            Some(Redirect::Moved {
                slot: 3999,
                addr: "127.0.0.1:6381"
            })
        );
        assert_eq!(
            parse(b"-ASK 0 [::1]:7000\r\n"),
            Some(Redirect::Ask {
                slot: 0,
                addr: "[::1]:7000"
            })
        );
        assert_eq!(
            parse(b"-TRYAGAIN Multiple keys request during rehashing of slot\r\n"),
            Some(Redirect::TryAgain)
        );
        for bad in [
            &b"-MOVED 16384 127.0.0.1:6381\r\n"[..],
            b"-MOVED x 127.0.0.1:6381\r\n",
            b"-MOVED 1 127.0.0.1\r\n",
            b"-MOVED 1 :6381\r\n",
            b"-MOVED 1 h:99999\r\n",
            b"-MOVED 1 h:1 extra\r\n",
            b"-MOVED 1\r\n",
            b"-ERR MOVED 1 h:1\r\n",
            b"+MOVED 1 h:1\r\n",
            b"-ASK 1 h:1",
            b"-",
            b"",
        ] {
            assert_eq!(parse(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn only_a_refusal_of_a_request_over_several_slots_or_keys_is_split() {
        use crate::client::{Hops, Waiter};
        let mut mget = Vec::new();
        resp::encode_request(&mut mget, &[b"MGET", b"{a}1", b"{b}1"]);
        let retry = |token, reply: &[u8], request: &[u8]| Retry {
            w: Waiter {
                token,
                client_id: 1,
                seq: 0,
                part: 0,
                hops: Hops::NONE,
            },
            request: request.to_vec(),
            reply: reply.to_vec(),
            from: 0,
        };
        let crossslot = b"-CROSSSLOT Keys in request don't hash to the same slot\r\n";
        let tryagain = b"-TRYAGAIN Multiple keys request during rehashing of slot\r\n";
        for reply in [&crossslot[..], tryagain] {
            let (parts, _) = per_slot(&retry(4, reply, &mget)).expect("split");
            assert_eq!(parts.len(), 2);
            assert_eq!(per_slot(&retry(GATHER, reply, &mget)), None, "never again");
        }
        for reply in [&b"-MOVED 1 h:1\r\n"[..], b"-ASK 1 h:1\r\n", b"-ERR x\r\n"] {
            assert_eq!(per_slot(&retry(4, reply, &mget)), None);
        }
        // One slot: split per key on -TRYAGAIN (also as a part of a per-slot split), never
        // on -CROSSSLOT; one key: never.
        let mut one = Vec::new();
        resp::encode_request(&mut one, &[b"MGET", b"{a}1", b"{a}2"]);
        for token in [4, GATHER] {
            let (parts, merge) = per_slot(&retry(token, tryagain, &one)).expect("per key");
            assert_eq!(parts.len(), 2);
            assert_eq!(merge, Merge::Values(vec![(0, 0), (1, 0)]));
        }
        assert_eq!(per_slot(&retry(4, crossslot, &one)), None, "one slot");
        let mut key = Vec::new();
        resp::encode_request(&mut key, &[b"MGET", b"{a}1"]);
        assert_eq!(per_slot(&retry(GATHER, tryagain, &key)), None, "one key");
    }

    #[test]
    fn parses_cluster_slots() {
        let reply = b"*3\r\n\
            *3\r\n:0\r\n:5460\r\n*3\r\n$9\r\n127.0.0.1\r\n:7000\r\n$2\r\nid\r\n\
            *4\r\n:5461\r\n:10922\r\n*3\r\n$0\r\n\r\n:7001\r\n$2\r\nid\r\n*2\r\n$1\r\nr\r\n:9\r\n\
            *3\r\n:10923\r\n:16383\r\n*2\r\n$1\r\n?\r\n:7002\r\n";
        assert_eq!(
            parse_slots(reply, "10.0.0.1"),
            Some(vec![
                (0, 5460, "127.0.0.1:7000".to_string()),
                (5461, 10922, "10.0.0.1:7001".to_string()),
            ])
        );
        assert_eq!(
            parse_slots(b"-ERR This instance has cluster support disabled\r\n", ""),
            None
        );
        assert_eq!(
            parse_slots(b"*1\r\n*3\r\n:9\r\n:1\r\n*2\r\n$1\r\nh\r\n:1\r\n", ""),
            Some(vec![])
        );
        assert_eq!(
            parse_slots(b"*1\r\n*3\r\n:0\r\n:16384\r\n*2\r\n$1\r\nh\r\n:1\r\n", ""),
            Some(vec![])
        );
    }
}
