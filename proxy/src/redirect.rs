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
//!
//! Bounds: at most [`MAX_REDIRECTS`] `-MOVED`/`-ASK` and [`MAX_TRIES`] `-TRYAGAIN` per
//! request (so about a second at most); past them the last error reaches the client as it
//! came. The reply slot of the client does not move, so its replies stay in request order
//! whatever the detours.
//!
//! A `host:port` the proxy does not know becomes a new instance (`Proxy::add_instance`):
//! its links are appended to the link table with the same login, protocol and database
//! settings, and its database-0 link connects at once. At most [`MAX_INSTANCES`].
//!
//! The table is refreshed from `CLUSTER SLOTS` on an instance that is up: once at start
//! (when the first link is up), and after each `-MOVED`, at most one in flight and one per
//! [`REFRESH_INTERVAL`]. An instance that answers `CLUSTER SLOTS` with an error (a
//! standalone server) leaves the table as it is.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::backend::{ASKING_WAITER, REFRESH_WAITER, is_internal, links_per_instance};
use crate::client::Waiter;
use crate::event_loop::{Proxy, backend_token};

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

/// A request whose reply was a redirect, to be sent again.
pub(crate) struct Retry {
    pub w: Waiter,
    pub request: Vec<u8>,
    /// The redirect reply, given to the client once the bounds are reached.
    pub reply: Vec<u8>,
    /// The link it was answered on.
    pub from: usize,
}

/// The loop's redirect state.
#[derive(Default)]
pub(crate) struct Redirects {
    /// Redirects read in this delivery, followed right after it.
    pub pending: Vec<Retry>,
    /// `-TRYAGAIN`s waiting for their retry time, in time order.
    pub delayed: VecDeque<(Instant, Retry)>,
    /// A `CLUSTER SLOTS` reply read, applied right after the delivery.
    pub slots_reply: Option<(usize, Vec<u8>)>,
    /// A `CLUSTER SLOTS` is in flight.
    refreshing: bool,
    /// A refresh is wanted (at start, after a `-MOVED`).
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

impl Redirects {
    pub fn new() -> Self {
        Redirects {
            wanted: true, // once at start, when the first link is up
            armed: true,
            ..Default::default()
        }
    }

    /// Takes a reply read on shared link `link` that is not for a client as is: a
    /// redirect of a client's request (kept to be followed), or the reply to the loop's own
    /// `CLUSTER SLOTS`. `false`: deliver it to its client. Out of line: the loop calls it
    /// only for error replies and its own requests.
    #[cold]
    #[inline(never)]
    pub fn intercept(&mut self, w: Waiter, reply: &[u8], request: &[u8], link: usize) -> bool {
        if w.token == usize::MAX {
            if is_internal(&w, &REFRESH_WAITER) {
                self.slots_reply = Some((link, reply.to_vec()));
            }
            return true; // nobody else waits on the loop's own requests
        }
        if request.is_empty() || parse(reply).is_none() {
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
}

impl Proxy {
    /// Follows the redirects read in the last delivery and applies a `CLUSTER SLOTS` reply.
    pub(crate) fn follow_redirects(&mut self, now: Instant) {
        if let Some((link, reply)) = self.redirects.slots_reply.take() {
            self.redirects.refreshing = false;
            self.apply_slots(link, &reply, now);
        }
        let mut pending = std::mem::take(&mut self.redirects.pending);
        for r in pending.drain(..) {
            self.follow(r, now);
        }
        self.redirects.pending = pending;
        self.refresh_if_wanted(now);
    }

    fn follow(&mut self, mut r: Retry, now: Instant) {
        let (moved, slot, addr) = match parse(&r.reply) {
            Some(Redirect::Moved { slot, addr }) => (true, slot, addr.to_string()),
            Some(Redirect::Ask { slot, addr }) => (false, slot, addr.to_string()),
            Some(Redirect::TryAgain) => {
                if r.w.hops.tries >= MAX_TRIES {
                    return self.give_up(r);
                }
                r.w.hops.tries += 1;
                self.redirects.delayed.push_back((now + TRYAGAIN_DELAY, r));
                self.redirects.armed = true;
                return;
            }
            None => return self.give_up(r),
        };
        if r.w.hops.redirects >= MAX_REDIRECTS {
            return self.give_up(r);
        }
        let Some(j) = self.instance_named(&addr, now) else {
            return self.give_up(r);
        };
        if moved {
            self.fleet.slots.set(slot, j);
            self.redirects.wanted = true;
            self.redirects.armed = true;
        }
        r.w.hops.redirects += 1;
        r.w.hops.asking = !moved;
        // The same kind of link (database, protocol, script or not) on the new owner.
        let link = self.fleet.primary(j) + r.from % self.fleet.per_instance;
        self.resend(link, r, now);
    }

    /// `-TRYAGAIN` retries whose time has come, on the link that answered them, and a
    /// refresh that waited for its turn. Every loop iteration: one test when idle.
    #[inline]
    pub(crate) fn retry_due(&mut self, now: Instant) {
        if self.redirects.armed {
            self.retry_due_slow(now);
        }
    }

    fn retry_due_slow(&mut self, now: Instant) {
        while self
            .redirects
            .delayed
            .front()
            .is_some_and(|(t, _)| *t <= now)
        {
            let Some((_, r)) = self.redirects.delayed.pop_front() else {
                break;
            };
            let link = r.from;
            self.resend(link, r, now);
        }
        self.refresh_if_wanted(now);
        let r = &mut self.redirects;
        r.armed = !r.delayed.is_empty() || r.wanted;
    }

    /// Sends `r.request` on link `link` (after `ASKING` if it follows an `-ASK`), waking
    /// the link if it is dormant; an instance that is down answers its unavailable error.
    fn resend(&mut self, link: usize, r: Retry, now: Instant) {
        let b = &mut self.backends[link];
        if b.dormant {
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

    /// The bounds are reached (or the redirect names no usable node): the client gets the
    /// last error as it came.
    fn give_up(&mut self, r: Retry) {
        self.deliver_to_client(r.w, &r.reply);
    }

    /// The instance at `addr` (`host:port`), learned now if the proxy did not know it.
    fn instance_named(&mut self, addr: &str, now: Instant) -> Option<usize> {
        if let Some(j) = self.fleet.addrs.iter().position(|a| a == addr) {
            return Some(j);
        }
        let sock = match recached_net::listen::resolve(addr) {
            Ok(sock) => sock,
            Err(e) => {
                log::warn!("proxy: cannot follow a redirect to {addr}: {e}");
                return None;
            }
        };
        if let Some(j) =
            (0..self.fleet.instances()).find(|&j| self.backends[self.fleet.primary(j)].addr == sock)
        {
            return Some(j);
        }
        if self.fleet.instances() >= MAX_INSTANCES {
            log::warn!("proxy: not adding {addr}: already {MAX_INSTANCES} instances");
            return None;
        }
        Some(self.add_instance(addr, sock, now))
    }

    /// Appends instance `addr` to the fleet: its links (the configured ones' login and
    /// settings), its place in the slot table (no slots yet), its database-0 link connecting.
    pub(crate) fn add_instance(
        &mut self,
        name: &str,
        addr: std::net::SocketAddr,
        now: Instant,
    ) -> usize {
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

    /// Sends `CLUSTER SLOTS` if one is wanted, none is in flight and the last is old enough.
    fn refresh_if_wanted(&mut self, now: Instant) {
        let r = &self.redirects;
        if !r.wanted || r.refreshing || r.last_refresh.is_some_and(|t| now < t + REFRESH_INTERVAL) {
            return;
        }
        // An instance that is up, preferring one that owns slots.
        let n = self.fleet.instances();
        let Some(j) = (0..n)
            .filter(|&j| self.fleet.up[j])
            .max_by_key(|&j| self.fleet.slots.owned(j))
        else {
            return; // asked again when a link comes up
        };
        let link = self.fleet.primary(j);
        if !self.backends[link].accepts() {
            return;
        }
        self.backends[link].send(CLUSTER_SLOTS, REFRESH_WAITER);
        self.mark_backend(link);
        let r = &mut self.redirects;
        r.refreshing = true;
        r.wanted = false;
        r.last_refresh = Some(now);
    }

    /// Once per loop tick: asks for the periodic refresh when it is due (cluster backends).
    pub(crate) fn periodic_refresh(&mut self, now: Instant) {
        let r = &mut self.redirects;
        if !r.cluster || r.next_periodic.is_some_and(|t| now < t) {
            return;
        }
        r.next_periodic = Some(now + PERIODIC_REFRESH);
        r.wanted = true;
        r.armed = true;
    }

    /// A backend link failed: with cluster backends its slots may have moved (a retired
    /// engine), so the table is refreshed from an instance that is up.
    pub(crate) fn backend_lost(&mut self) {
        if self.redirects.cluster {
            self.redirects.wanted = true;
            self.redirects.armed = true;
        }
    }

    /// A link that was up came up: the start-up refresh may go.
    pub(crate) fn link_up(&mut self, now: Instant) {
        self.refresh_if_wanted(now);
    }

    /// A link failed with these waiters: a `CLUSTER SLOTS` among them is no longer in flight.
    pub(crate) fn link_failed(&mut self, waiters: &VecDeque<Waiter>) {
        if waiters.iter().any(|w| is_internal(w, &REFRESH_WAITER)) {
            self.redirects.refreshing = false;
            self.redirects.wanted = true;
            self.redirects.armed = true;
        }
    }

    /// Applies a `CLUSTER SLOTS` reply read on link `link`.
    fn apply_slots(&mut self, link: usize, reply: &[u8], now: Instant) {
        let host = self.backends[link]
            .name
            .rsplit_once(':')
            .map(|(h, _)| h.trim_start_matches('[').trim_end_matches(']').to_string())
            .unwrap_or_default();
        let Some(ranges) = parse_slots(reply, &host) else {
            self.redirects.cluster = false;
            log::debug!(
                "proxy: CLUSTER SLOTS refused ({}); the slot table stays as it is",
                String::from_utf8_lossy(reply).trim_end()
            );
            return;
        };
        self.redirects.cluster = true;
        let mut changed = 0usize;
        for (first, last, addr) in ranges {
            let Some(j) = self.instance_named(&addr, now) else {
                continue;
            };
            for slot in first..=last {
                changed += usize::from(self.fleet.slots.set(slot, j));
            }
        }
        if changed > 0 {
            log::info!("proxy: slot table refreshed from CLUSTER SLOTS: {changed} slot(s) moved");
        }
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
