//! The proxy's single-threaded mio loop.
//!
//! # One iteration
//!
//! 1. `poll` (timeout: the next backend retry / connect deadline, at most 100 ms so a
//!    SIGTERM/SIGINT flag is seen promptly).
//! 2. Events, in order: the listener (accept until `WouldBlock`), backends (finish a connect,
//!    read and deliver replies to client slots, or fail the link), dedicated connections
//!    (the same, plus pub/sub messages relayed to their client), clients (read, parse every
//!    complete request, route it, append it to backend output buffers).
//! 3. Clients paused by a bound that has cleared are resumed.
//! 4. Every backend with new output is written once; then every client with new output is
//!    written once (so a batch of pipelined requests costs one write per backend and one per
//!    client).
//! 5. Timers: due reconnects, connect timeouts (dedicated connections too). Finished
//!    clients are closed, with their dedicated connections.
//!
//! Sockets are registered once for READABLE | WRITABLE (edge-triggered): a write that does
//! not finish simply waits for the next WRITABLE edge, with no re-registration. Reads go on
//! until `WouldBlock` or a short read (see `Backend::read`).
//!
//! # Tokens
//!
//! Clients: slab index (`< DEDICATED_TOKEN_BASE`). Dedicated connections
//! (`crate::dedicated`): `DEDICATED_TOKEN_BASE + slab index`. Backend `i`:
//! `BACKEND_TOKEN_BASE + i`, `i` the link's index in the link table
//! (`crate::backend::link_index`: instance-major, so links of instances learned at run time
//! are appended). Listener: `usize::MAX - 1`; TLS listener: `usize::MAX - 2`.
//!
//! # Limits and TLS
//!
//! [`ProxyLimits`] (Redis names): `maxclients` at accept, `client-query-buffer-limit` and
//! `proto-max-bulk-len` on input, `client-output-buffer-limit` (pubsub class for subscribed
//! clients as messages arrive, normal class otherwise, hard and soft with seconds) and
//! `timeout` checked about once a second. Clients of the TLS port are the same [`Client`]
//! with a TLS state inside (`crate::tls`).
//!
//! # Executing requests
//!
//! Each complete request goes to [`exec::handle`] (`crate::exec`), which routes and carries it
//! out; its [`Flow`] says whether to keep parsing, stop, or pause the client (`wait_lane`).

use std::io::{self, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use recached_net::Slab;
use resp::{Limits, RequestParser};

use crate::backend::{Backend, CONNECT_TIMEOUT, Link};
use crate::client::Input;
use crate::client::{Client, Waiter};
use crate::clients;
use crate::dedicated::{Dedicated, Incoming};
use crate::exec::{Ctx, Flow, Me, handle};
use crate::follow::{Follower, GATHER, Gathers};
use crate::route::{Args, Fleet};
use crate::split::Merge;
use crate::spread::UNBLOCK_PART;
use crate::tls::{ProxyLimits, TlsConn};
use std::os::fd::AsRawFd;

const LISTENER: Token = Token(usize::MAX - 1);
const TLS_LISTENER: Token = Token(usize::MAX - 2);
const BACKEND_TOKEN_BASE: usize = usize::MAX / 2;

/// The token of backend link `i` (its index in the backends vector).
pub(crate) fn backend_token(i: usize) -> Token {
    Token(BACKEND_TOKEN_BASE + i)
}
const DEDICATED_TOKEN_BASE: usize = usize::MAX / 4;

/// The token of dedicated connection `id` (its slab index).
pub(crate) fn dedicated_token(id: usize) -> Token {
    Token(DEDICATED_TOKEN_BASE + id)
}

/// Stop parsing a client's requests while this many replies are outstanding.
const MAX_PENDING: usize = 16 * 1024;
/// Stop parsing a client's requests while this much output is unsent (it is not reading).
const OUTPUT_HIGH_WATER: usize = 16 << 20;
/// Stop parsing every client's requests while a backend has this much unsent input
/// (the instance is slower than the clients).
const BACKEND_HIGH_WATER: usize = 64 << 20;
/// Longest poll wait, so the shutdown flag is seen promptly.
const MAX_POLL_WAIT: Duration = Duration::from_millis(100);

/// The parsed request as [`Args`]: ranges into the client's read buffer.
struct ParsedArgs<'a> {
    parser: &'a RequestParser,
    buf: &'a [u8],
}

impl Args for ParsedArgs<'_> {
    fn argc(&self) -> usize {
        self.parser.argc()
    }
    fn arg(&self, i: usize) -> &[u8] {
        self.parser.arg(self.buf, i)
    }
}

pub struct Proxy {
    pub(crate) poll: Poll,
    /// The plain listener; `None` when only TLS is served.
    listener: Option<TcpListener>,
    /// The TLS listener and its rustls configuration.
    tls_listener: Option<(TcpListener, Arc<rustls::ServerConfig>)>,
    /// Ciphertext of one TLS socket read, shared by every client (emptied before reuse).
    tls_scratch: Vec<u8>,
    limits: ProxyLimits,
    /// The loop's clock origin (µs since it are the output limits' soft-limit times).
    started: Instant,
    /// When idle clients (`timeout`) and soft output limits are next checked.
    next_sweep: Instant,
    /// The loop's clock, read once per iteration when `poll` returns: every timestamp of
    /// the iteration (a client's last request, backend retries and timeouts, the next poll
    /// timeout) uses it. A clock read costs ~26 instructions, and reading it wherever a time
    /// was needed made eight reads per proxied request.
    now: Instant,
    pub(crate) clients: Slab<Client>,
    pub(crate) backends: Vec<Backend>,
    /// Indices of the links that are not dormant, the only ones the loop's per-iteration
    /// checks (congestion, poll timeout, retries) visit: the link table has a link per
    /// (database, protocol, instance), 32 per instance with 16 databases, and walking all
    /// of them several times an iteration cost more than proxying the request. A link
    /// leaves dormancy only in `crate::exec` (its first request), which marks it dirty, so
    /// `flush_all` lists it in the iteration it woke; `listed[i]`: link i is in `live`.
    live: Vec<usize>,
    pub(crate) listed: Vec<bool>,
    /// Clients' dedicated instance connections (`crate::dedicated`).
    dedicated: Slab<Dedicated>,
    pub(crate) fleet: Fleet,
    /// Redirects being followed, the slot table's refresh (`crate::follow`).
    pub(crate) redirects: crate::follow::Moves,
    /// Requests refused for spanning a moving slot, split per slot (`crate::split::per_slot`):
    /// their sub-requests' replies, merged when all are in.
    pub(crate) resplits: Gathers<Merge>,
    next_client_id: u64,
    /// Clients / backends with output to write at the end of this iteration.
    dirty_clients: Vec<usize>,
    dirty_backends: Vec<usize>,
    dirty_dedicated: Vec<usize>,
    /// MONITOR lines of commands the proxy answered itself, for every monitoring client at
    /// the end of the iteration (`crate::exec::feed_local_end`).
    monitor_feed: Vec<Vec<u8>>,
    /// Clients whose input is parked behind a bound.
    paused: Vec<usize>,
    /// Clients to close at the end of this iteration.
    to_close: Vec<usize>,
    /// Clients gone while a run spanning instances was under way for them: closed once it
    /// is over, so its locks are released and its writes all made (`crate::coord`).
    close_after_coord: Vec<usize>,
    /// Clients with requests to send on their behalf (`Replies::followups`).
    followups: Vec<usize>,
    /// Clients whose transaction runs again later, after a `-TRYAGAIN` (`crate::txmove`).
    tx_reruns: Vec<usize>,
    /// Clients with blocking commands to send again after slot moves (`crate::blockmove`).
    pub(crate) block_resends: Vec<usize>,
    shutdown: Arc<AtomicBool>,
}

impl Proxy {
    /// A proxy listening on `listen` (plain; `None` = TLS only) and `tls` (address and
    /// rustls configuration), in front of `backends`.
    pub fn new(
        listen: Option<SocketAddr>,
        tls: Option<(SocketAddr, Arc<rustls::ServerConfig>)>,
        backends: Vec<(String, SocketAddr)>,
        limits: ProxyLimits,
        shutdown: Arc<AtomicBool>,
    ) -> io::Result<Self> {
        let poll = Poll::new()?;
        let (listener, tls_listener) = recached_net::listen::bind_role(
            poll.registry(),
            listen,
            tls,
            (LISTENER, TLS_LISTENER),
        )?;
        let (port, listen_ip) = match (&listener, &tls_listener) {
            (Some(l), _) | (None, Some((l, _))) => {
                let addr = l.local_addr()?;
                (addr.port(), addr.ip())
            }
            (None, None) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "the proxy needs a port or a TLS port",
                ));
            }
        };
        let mut fleet = Fleet::new(backends.iter().map(|(n, _)| n.clone()).collect(), port);
        fleet.listen_ip = listen_ip;
        fleet.cluster_publish = limits.cluster_publish;
        fleet.databases = limits.databases.max(1);
        // The link table (`crate::backend::link_index`): per instance, per database,
        // protocol and kind (ordinary or script), one link; database 0's ordinary RESP2
        // links connect at start, the others are dormant until the first client on them
        // (`crate::exec`, "RESP3 clients", "Databases", "Scripts").
        let n = backends.len();
        let per = crate::backend::links_per_instance(fleet.databases);
        fleet.per_instance = per;
        let backends: Vec<Backend> = backends
            .iter()
            .enumerate()
            .flat_map(|(i, (name, addr))| {
                crate::backend::instance_links(i, name, *addr, per, &None, n > 1)
            })
            .collect();
        let tls_scratch = if tls_listener.is_some() {
            vec![0; crate::tls::SCRATCH_LEN]
        } else {
            Vec::new()
        };
        let listed: Vec<bool> = backends.iter().map(|b| !b.dormant).collect();
        let live = (0..listed.len()).filter(|&i| listed[i]).collect();
        let now = Instant::now();
        Ok(Proxy {
            poll,
            listener,
            tls_listener,
            tls_scratch,
            limits,
            started: now,
            next_sweep: now,
            now,
            clients: Slab::new(),
            backends,
            live,
            listed,
            dedicated: Slab::new(),
            fleet,
            redirects: crate::follow::Moves::new(),
            resplits: Gathers::new(),
            next_client_id: 1,
            dirty_clients: Vec::new(),
            dirty_backends: Vec::new(),
            dirty_dedicated: Vec::new(),
            monitor_feed: Vec::new(),
            paused: Vec::new(),
            to_close: Vec::new(),
            close_after_coord: Vec::new(),
            followups: Vec::new(),
            tx_reruns: Vec::new(),
            block_resends: Vec::new(),
            shutdown,
        })
    }

    /// The plain listener's address (the TLS one's when there is no plain port).
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .as_ref()
            .or(self.tls_listener.as_ref().map(|(l, _)| l))
            .and_then(|l| l.local_addr().ok())
            .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)))
    }

    /// The TLS listener's address, if there is one.
    pub fn tls_addr(&self) -> Option<SocketAddr> {
        self.tls_listener
            .as_ref()
            .and_then(|(l, _)| l.local_addr().ok())
    }

    /// Client authentication and the instances' credential ([`crate::auth`]); before
    /// [`run`](Self::run). Errors: an invalid user rule.
    pub fn set_auth(&mut self, auth: &crate::auth::ProxyAuth) -> io::Result<()> {
        self.fleet.acl = engine_core::acl::Acl::from_config(&auth.acl)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        self.fleet.login = auth.login_request();
        for b in &mut self.backends {
            b.login = self.fleet.login.clone();
        }
        Ok(())
    }

    /// The memcached port's figures, for INFO `# Memcached` ([`crate::memcached`]).
    pub fn set_memcached_totals(&mut self, totals: crate::memcached::stats::Shared) {
        self.fleet.memcached = Some(totals);
    }

    /// Runs until the shutdown flag is set.
    pub fn run(&mut self) -> io::Result<()> {
        let now = Instant::now();
        for i in 0..self.fleet.instances() {
            let link = self.fleet.primary(i);
            self.backends[link].connect(self.poll.registry(), backend_token(link), now, true);
        }
        let mut events = Events::with_capacity(1024);
        while !self.shutdown.load(Ordering::Relaxed) {
            // From the clock of the iteration before: late by that iteration's work (µs),
            // so a retry or connect timeout fires that much later at most.
            let timeout = self.poll_timeout(self.now);
            let polled = self.poll.poll(&mut events, Some(timeout));
            self.now = Instant::now();
            match polled {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            for event in events.iter() {
                match event.token() {
                    LISTENER => self.accept(false),
                    TLS_LISTENER => self.accept(true),
                    Token(t) if t >= BACKEND_TOKEN_BASE => {
                        let i = t - BACKEND_TOKEN_BASE;
                        if i < self.backends.len() {
                            self.backend_event(i, event.is_writable());
                        }
                    }
                    Token(t) if t >= DEDICATED_TOKEN_BASE => {
                        self.dedicated_event(t - DEDICATED_TOKEN_BASE, event.is_writable());
                    }
                    Token(t) => {
                        if (event.is_read_closed() || event.is_error()) && self.awaits_dedicated(t)
                        {
                            // Like Redis, a client that hangs up is gone at once: a BLPOP
                            // it left behind must not hold its connection open.
                            self.to_close.push(t);
                            continue;
                        }
                        if event.is_read_closed()
                            && let Some(c) = self.clients.get_mut(t)
                        {
                            c.hup = true;
                        }
                        if event.is_readable() || event.is_read_closed() || event.is_error() {
                            self.client_readable(t);
                        }
                        if event.is_writable() {
                            self.flush_client(t);
                        }
                    }
                }
            }
            self.resume_paused();
            self.send_followups();
            // Timers before the flush: a `-TRYAGAIN` retry or a refresh they send goes out in
            // this iteration, not after the next poll (up to MAX_POLL_WAIT later).
            self.timers(self.now);
            if self.fleet.slots.any_started() {
                self.extend_clients();
            }
            if self.fleet.slots.any_stopped() {
                self.move_retired_channels();
            }
            self.flush_all();
            self.close_finished();
        }
        log::info!("proxy: shutting down");
        Ok(())
    }

    fn poll_timeout(&self, now: Instant) -> Duration {
        let mut wait = MAX_POLL_WAIT;
        for b in self.live.iter().map(|&i| &self.backends[i]) {
            let due = match b.link {
                Link::Down { retry_at } => retry_at,
                Link::Connecting { since, .. } => since + CONNECT_TIMEOUT,
                Link::Up => continue,
            };
            wait = wait.min(due.saturating_duration_since(now));
        }
        if let Some(due) = self.redirects.due() {
            wait = wait.min(due.saturating_duration_since(now));
        }
        for &token in &self.tx_reruns {
            if let Some(due) = self.clients.get(token).and_then(|c| c.txm.due) {
                wait = wait.min(due.saturating_duration_since(now));
            }
        }
        for &token in &self.block_resends {
            if let Some(due) = self.clients.get(token).and_then(|c| c.bmove.due()) {
                wait = wait.min(due.saturating_duration_since(now));
            }
        }
        // Clients paused by a bound are retried soon; those waiting to switch lanes are
        // resumed by the reply they wait for.
        if self
            .paused
            .iter()
            .any(|&t| self.clients.get(t).is_some_and(|c| !c.wait_lane))
        {
            wait = wait.min(Duration::from_millis(10));
        }
        wait
    }

    /// One `accept` on the plain or the TLS listener; `None` if that listener does not exist.
    fn accept_one(&self, tls: bool) -> Option<io::Result<(TcpStream, SocketAddr)>> {
        let listener = if tls {
            &self.tls_listener.as_ref()?.0
        } else {
            self.listener.as_ref()?
        };
        Some(listener.accept())
    }

    fn accept(&mut self, tls: bool) {
        while let Some(result) = self.accept_one(tls) {
            match result {
                Ok((mut stream, peer)) => {
                    self.fleet.connections_received += 1;
                    if self.clients.len() >= self.limits.maxclients {
                        // A TLS client cannot be told in plaintext; it is just closed.
                        if !tls {
                            let _ = stream.write(b"-ERR max number of clients reached\r\n");
                        }
                        continue;
                    }
                    // Protected mode, as on the engines (engine_core::acl).
                    if !peer.ip().to_canonical().is_loopback()
                        && self.fleet.acl.protected_mode_refuses_remote()
                    {
                        if !tls {
                            let _ = stream.write(engine_core::acl::PROTECTED_MODE_DENIED);
                        }
                        continue;
                    }
                    let tls_conn = match &self.tls_listener {
                        Some((_, cfg)) if tls => match TlsConn::new(cfg) {
                            Ok(t) => Some(Box::new(t)),
                            Err(e) => {
                                log::warn!("proxy: TLS connection setup: {e}");
                                continue;
                            }
                        },
                        _ => None,
                    };
                    let _ = stream.set_nodelay(true);
                    let id = self.next_client_id;
                    self.next_client_id += 1;
                    let limits = Limits {
                        max_bulk_len: self.limits.proto_max_bulk_len,
                        ..Limits::default()
                    };
                    let mut client = Client::new(stream, id, RequestParser::new(limits));
                    client.tls = tls_conn;
                    client.session.addr = peer.to_string();
                    if let Ok(local) = client.stream.local_addr() {
                        client.session.laddr = local.to_string();
                    }
                    self.fleet.client_ids.insert(id);
                    let token = self.clients.insert(client);
                    let c = self.clients.get_mut(token).expect("just inserted");
                    if let Err(e) = self.poll.registry().register(
                        &mut c.stream,
                        Token(token),
                        Interest::READABLE | Interest::WRITABLE,
                    ) {
                        log::warn!("proxy: register client: {e}");
                        self.clients.try_remove(token);
                        self.fleet.client_ids.remove(&id);
                        continue;
                    }
                    self.fleet.clients = self.clients.len();
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // EMFILE and friends: log and try again on the next event.
                    log::warn!("proxy: accept: {e}");
                    break;
                }
            }
        }
    }

    // ----- backends -----

    fn backend_event(&mut self, i: usize, writable: bool) {
        let now = self.now;
        if let Link::Connecting { .. } = self.backends[i].link {
            match self.backends[i].finish_connect() {
                Ok(true) => {
                    let b = &self.backends[i];
                    let link = if b.resp3 { " (RESP3 link)" } else { "" };
                    log::info!("instance {} ({}){link} is up", b.index, b.name);
                    // Primary links only: they decide "instance up".
                    if let Some(j) = self.fleet.primary_of(i) {
                        self.fleet.up[j] = true;
                        // The start-up refresh may go.
                        self.refresh_if_wanted(now);
                    }
                    self.mark_backend(i);
                }
                Ok(false) => return,
                Err(e) => {
                    self.fail_backend(i, &format!("connect: {e}"), now);
                    return;
                }
            }
        }
        if self.backends[i].link != Link::Up {
            return;
        }
        match self.backends[i].read() {
            Ok(true) => {}
            Ok(false) => {
                self.deliver_from(i, now);
                self.fail_backend(i, "connection closed by the instance", now);
                return;
            }
            Err(e) => {
                self.fail_backend(i, &format!("read: {e}"), now);
                return;
            }
        }
        self.deliver_from(i, now);
        if writable && self.backends[i].unsent() > 0 {
            self.mark_backend(i);
        }
    }

    /// Hands every complete reply read from backend `i` to its client slot.
    fn deliver_from(&mut self, i: usize, now: Instant) {
        let Proxy {
            clients,
            backends,
            dirty_clients,
            followups,
            redirects,
            resplits,
            ..
        } = self;
        let result = backends[i].deliver_replies(|w, reply, sent| {
            // Only an error reply can be a redirect, and only the loop's own requests
            // (`usize::MAX`) and the sub-requests of a part split per slot (`GATHER`) have no
            // client token: one byte and one word looked at for the others.
            if w.token >= GATHER {
                if w.token == usize::MAX {
                    // Nobody else waits on the loop's own requests (a refresh's reply is kept).
                    redirects.intercept(w, reply, sent.request(&w), i);
                    return;
                }
                if reply.first() == Some(&b'-')
                    && redirects.intercept(w, reply, sent.request(&w), i)
                {
                    return;
                }
                // A gather may answer another (a slot's request split per key).
                let mut done = resplit_answered(resplits, w, reply);
                while let Some((whole, merged)) = done {
                    if whole.token != GATHER {
                        deliver(clients, dirty_clients, followups, whole, &merged);
                        break;
                    }
                    done = resplit_answered(resplits, whole, &merged);
                }
                return;
            }
            if reply.first() == Some(&b'-') && redirects.intercept(w, reply, sent.request(&w), i) {
                return;
            }
            deliver(clients, dirty_clients, followups, w, reply);
        });
        if self.redirects.kept() {
            self.follow_redirects(now);
        }
        if let Err(e) = result {
            self.fail_backend(i, &format!("bad reply: {e}"), now);
        }
    }

    fn fail_backend(&mut self, i: usize, why: &str, now: Instant) {
        let b = &mut self.backends[i];
        let instance = self.fleet.primary_of(i);
        let up = instance.is_some_and(|j| self.fleet.up[j]);
        if b.link == Link::Up || up {
            log::warn!("instance {} ({}) is unavailable: {why}", b.index, b.name);
        } else {
            log::debug!("instance {} ({}): {why}", b.index, b.name);
        }
        if let Some(j) = instance {
            self.fleet.up[j] = false;
        }
        let waiters = b.fail(self.poll.registry(), now);
        let error = b.unavailable.clone();
        self.redirects.link_failed(&waiters);
        self.fleet.backend_errors += waiters.len() as u64;
        for w in waiters {
            self.deliver_to_client(w, &error);
        }
    }

    pub(crate) fn mark_backend(&mut self, i: usize) {
        if !self.backends[i].dirty {
            self.backends[i].dirty = true;
            self.dirty_backends.push(i);
        }
    }

    /// About once a second: clients idle for longer than `timeout` (not subscribed, nothing
    /// in flight), and clients over a soft output limit for its seconds, are closed.
    fn sweep_clients(&mut self, now: Instant) {
        if now < self.next_sweep {
            return;
        }
        self.next_sweep = now + Duration::from_secs(1);
        let timeout = Duration::from_secs(self.limits.timeout);
        let limits = self.limits.client_output_buffer_limit;
        let now_us = now.duration_since(self.started).as_micros() as u64;
        for (token, c) in self.clients.iter_mut() {
            let idle = !timeout.is_zero()
                && now.duration_since(c.last_request) > timeout
                && c.replies.pending_len() == 0
                && !c.session.subs.active()
                && !c.session.monitor;
            let class = if c.session.subs.active() || c.session.monitor {
                limits.pubsub
            } else {
                limits.normal
            };
            let over = class.exceeded(c.replies.unsent() as u64, &mut c.obuf_soft_since, now_us);
            if idle || over {
                log::debug!(
                    "client {}: closed ({})",
                    c.id,
                    if idle {
                        "timeout"
                    } else {
                        "output buffer limit"
                    }
                );
                self.to_close.push(token);
            }
        }
    }

    fn timers(&mut self, now: Instant) {
        self.sweep_clients(now);
        self.follow_tick(now);
        if !self.tx_reruns.is_empty() {
            self.tx_reruns_due(now);
        }
        for k in 0..self.live.len() {
            let i = self.live[k];
            match self.backends[i].link {
                Link::Down { retry_at } if retry_at <= now => {
                    // Retries never queue: while an instance is down its requests fail fast.
                    let token = Token(BACKEND_TOKEN_BASE + i);
                    self.backends[i].connect(self.poll.registry(), token, now, false);
                }
                Link::Connecting { since, .. } if now.duration_since(since) >= CONNECT_TIMEOUT => {
                    self.fail_backend(i, "connect timed out", now);
                }
                _ => {}
            }
        }
        if !self.dedicated.is_empty() {
            // Every key is below the capacity; vacant ones are skipped by `get`.
            for id in 0..self.dedicated.capacity() {
                let late = self.dedicated.get(id).is_some_and(|d| {
                    d.connecting
                        .is_some_and(|since| now.duration_since(since) >= CONNECT_TIMEOUT)
                });
                if late {
                    self.fail_dedicated(id, "connect timed out");
                }
            }
        }
    }

    // ----- dedicated connections -----

    fn dedicated_event(&mut self, id: usize, writable: bool) {
        let Some(d) = self.dedicated.get_mut(id) else {
            return;
        };
        if d.connecting.is_some() {
            match d.wire.finish_connect() {
                Ok(true) => {
                    d.connecting = None;
                    mark(&mut d.dirty, &mut self.dirty_dedicated, id);
                }
                Ok(false) => return,
                Err(e) => {
                    self.fail_dedicated(id, &format!("connect: {e}"));
                    return;
                }
            }
        }
        let read = d.wire.read();
        let delivered = self.deliver_dedicated(id);
        match (read, delivered) {
            (Ok(true), Ok(())) => {}
            (Ok(false), _) => self.fail_dedicated(id, "connection closed by the instance"),
            (Err(e), _) => self.fail_dedicated(id, &format!("read: {e}")),
            (_, Err(e)) => self.fail_dedicated(id, &format!("bad reply: {e}")),
        }
        if let Some(d) = self.dedicated.get_mut(id)
            && writable
            && d.wire.unsent() > 0
        {
            mark(&mut d.dirty, &mut self.dirty_dedicated, id);
        }
    }

    /// Hands replies read on dedicated connection `id` to their slots and relays messages.
    fn deliver_dedicated(&mut self, id: usize) -> Result<(), String> {
        let Proxy {
            clients,
            dedicated,
            backends,
            dirty_clients,
            to_close,
            followups,
            fleet,
            ..
        } = self;
        // A monitor relays only its own clients' lines (`crate::dedicated::monitor_line_shown`):
        // the proxy's connections' local addresses, gathered for a monitor's delivery only
        // (MONITOR is a debugging aid; the other deliveries pay nothing).
        let own: Option<std::collections::HashSet<std::net::SocketAddr>> = match dedicated.get(id) {
            Some(d) if d.monitor => Some(
                backends
                    .iter()
                    .map(|b| &b.wire)
                    .chain(dedicated.iter().map(|(_, d)| &d.wire))
                    .filter_map(|w| w.local)
                    .collect(),
            ),
            _ => None,
        };
        let Some(d) = dedicated.get_mut(id) else {
            return Ok(());
        };
        let (owner_token, owner_id, instance) = (d.owner_token, d.owner_id, d.instance);
        let mut txid = None;
        let pubsub_limit = self.limits.client_output_buffer_limit.pubsub;
        let now_us = self.started.elapsed().as_micros() as u64;
        let result = d.incoming(&fleet.slots, |incoming| match incoming {
            Incoming::Reply(w, reply) => deliver(clients, dirty_clients, followups, w, reply),
            Incoming::IdRefused => txid = Some(false),
            Incoming::EngineId(engine_id, via_txid) => {
                if via_txid {
                    txid = Some(true);
                }
                // A parked part of a released spread read is unblocked once its id is known.
                if let Some(c) = clients.get_mut(owner_token)
                    && c.id == owner_id
                    && let Some(unblock) = c.spread.as_mut().and_then(|s| s.id_known(id, engine_id))
                {
                    c.replies.followups.push(unblock);
                    followups.push(owner_token);
                }
            }
            Incoming::Message(frame) => {
                if own
                    .as_ref()
                    .is_some_and(|own| !crate::dedicated::monitor_line_shown(frame, own))
                {
                    return;
                }
                let Some(c) = clients.get_mut(owner_token) else {
                    return;
                };
                if c.id != owner_id {
                    return;
                }
                c.replies.push_local(frame, false);
                let used = c.replies.unsent() as u64;
                if pubsub_limit.exceeded(used, &mut c.obuf_soft_since, now_us)
                    || c.replies.pending_len() > MAX_PENDING
                {
                    log::warn!(
                        "client {owner_id}: subscribed client is not reading its messages; \
                         disconnecting it ({used} bytes unsent, client-output-buffer-limit \
                         pubsub {} {} {})",
                        pubsub_limit.hard,
                        pubsub_limit.soft,
                        pubsub_limit.soft_seconds
                    );
                    // Its messages are dropped now; the socket closes at the end of the
                    // iteration.
                    c.replies.out = Vec::new();
                    c.replies.out_pos = 0;
                    to_close.push(owner_token);
                    return;
                }
                mark(&mut c.dirty, dirty_clients, owner_token);
            }
        });
        if let Some(ok) = txid {
            fleet.learned_txid(instance, ok);
        }
        result
    }

    /// Drops dedicated connection `id`: its in-flight requests get the instance's
    /// unavailable error, and a client whose transaction or subscriptions lived on it is
    /// disconnected after its pending replies (see `crate::dedicated`).
    fn fail_dedicated(&mut self, id: usize, why: &str) {
        let Some(mut d) = self.dedicated.try_remove(id) else {
            return;
        };
        if let Some(slot) = self.fleet.spares.get_mut(d.instance)
            && *slot == Some(id)
        {
            *slot = None; // a spare nobody took; another is opened on next need
        }
        d.wire.close(self.poll.registry());
        log::debug!(
            "client {}: dedicated connection to instance {}: {why}",
            d.owner_id,
            d.instance
        );
        let error = self.backends[self.fleet.primary(d.instance)]
            .unavailable
            .clone();
        for e in d.inflight.drain(..) {
            if let Some(w) = e.waiter {
                deliver(
                    &mut self.clients,
                    &mut self.dirty_clients,
                    &mut self.followups,
                    w,
                    &error,
                );
            }
        }
        let Some(c) = self.clients.get_mut(d.owner_token) else {
            return;
        };
        if c.id != d.owner_id {
            return;
        }
        c.conns.retain(|&(_, cid)| cid != id);
        if !c.session.subs.active() && !c.session.monitor && c.session.tx.involves(d.instance) {
            // Only the transaction fails: its EXEC answers EXECABORT (docs/transactions.md).
            log::warn!(
                "client {}: lost its dedicated connection to instance {} ({why}); its \
                 transaction will answer EXECABORT",
                d.owner_id,
                d.instance
            );
            c.session.tx.instance_lost(d.instance);
            return;
        }
        if (c.session.subs.active() || c.session.monitor) && !self.fleet.slots.serves(d.instance) {
            // An instance retired by `recached resize` (it owns no slot, and its keys moved):
            // the client's subscriptions and MONITOR go on through the other instances, which
            // every PUBLISH reaches and which run every command now; its channels there are
            // subscribed again on their owners.
            log::info!(
                "client {}: dedicated connection to retired instance {} closed ({why})",
                d.owner_id,
                d.instance
            );
            let channels = std::mem::take(&mut d.channels);
            if !channels.is_empty() {
                let (token, owner) = (d.owner_token, d.owner_id);
                self.with_client(token, |me, ctx| {
                    crate::exec::resubscribe(owner, channels, me, ctx);
                });
            }
            return;
        }
        if c.session.subs.active() || c.session.monitor {
            log::warn!(
                "client {}: lost its dedicated connection to instance {} ({why}); \
                 closing it (its transaction or subscriptions are gone)",
                d.owner_id,
                d.instance
            );
            c.replies.push_local(b"", true);
            c.rstart = c.rend;
            c.read_closed = true;
            mark(&mut c.dirty, &mut self.dirty_clients, d.owner_token);
        }
    }

    /// Whether client `token` waits in a blocking command or is subscribed, so a hang-up
    /// closes it now: Redis frees a blocked client whose peer hung up. Anything else it sent
    /// (a transaction's EXEC on its dedicated connections too) is answered first, as Redis
    /// runs and answers what it read before it reads the end of file.
    fn awaits_dedicated(&self, token: usize) -> bool {
        self.clients
            .get(token)
            .is_some_and(|c| !c.conns.is_empty() && (c.session.subs.active() || c.blocked()))
    }

    // ----- clients -----

    /// Reads and handles a client's input until the socket is drained or a bound is hit.
    fn client_readable(&mut self, token: usize) {
        if self.clients.get(token).is_none_or(|c| c.killed) {
            return;
        }
        loop {
            self.process_client(token);
            let Some(c) = self.clients.get_mut(token) else {
                return;
            };
            if c.paused || c.replies.closing || c.read_closed {
                break;
            }
            let input = c.read_input(&mut self.tls_scratch, self.limits.client_query_buffer_limit);
            if c.tls_wants_write() {
                // The TLS handshake (or an alert) has bytes for the peer.
                mark(&mut c.dirty, &mut self.dirty_clients, token);
            }
            if let Input::Data { bytes, .. } = input {
                self.fleet.net_input_bytes += bytes as u64;
                self.fleet.reads_processed += 1;
            }
            match input {
                Input::Eof => c.read_closed = true,
                Input::Data { more: false, .. } if !c.hup => {
                    // Short read: the socket is drained (see Backend::read). Not after a
                    // hang-up: data and the end of file came in one event, and no other
                    // event will say the end of file is there to read.
                    self.process_client(token);
                    break;
                }
                Input::Data { .. } => {}
                Input::Drained => break,
                Input::Fail(why) => {
                    log::debug!("client {token}: {why}");
                    self.to_close.push(token);
                    return;
                }
            }
        }
        if let Some(c) = self.clients.get_mut(token)
            && c.read_closed
            && (c.idle() || c.blocked())
        {
            // Answered, or blocked: as Redis frees a blocked client whose peer hung up (its
            // BLPOP must not pop an element for nobody), the connection goes now.
            self.to_close.push(token);
        }
    }

    /// Parses and routes every complete request in the client's read buffer, within bounds;
    /// CLIENT LIST/INFO/KILL are answered here, between the requests around them.
    fn process_client(&mut self, token: usize) {
        while let Some((op, len)) = self.process_client_once(token) {
            self.clients_op(token, op, len);
        }
    }

    /// Gives every monitoring client the lines of commands answered here
    /// (`crate::exec::feed_local_end`), after what it was sent before.
    fn feed_monitors(&mut self) {
        if self.monitor_feed.is_empty() {
            return;
        }
        let lines = std::mem::take(&mut self.monitor_feed);
        for (token, c) in self.clients.iter_mut() {
            if c.session.monitor && !c.killed {
                for line in &lines {
                    c.replies.push_local(line, false);
                }
                mark(&mut c.dirty, &mut self.dirty_clients, token);
            }
        }
    }

    /// `CLIENT UNBLOCK id [TIMEOUT|ERROR]` from client `token`: `:1` if the proxy client
    /// `id` is blocked, and its blocking command is ended the way Redis ends it (a null, or
    /// `-UNBLOCKED client unblocked via CLIENT UNBLOCK`): on one instance by `CLIENT UNBLOCK`
    /// of its dedicated connection there (the instance's answer is the reply); spread over
    /// several, every part; gathered, at the end of its wait slice. Else `:0`.
    fn client_unblock(&mut self, token: usize, id: u64, error: bool) {
        let target = self
            .clients
            .iter()
            .find(|(_, c)| c.id == id && !c.killed)
            .map(|(t, _)| t);
        let mut reply: &[u8] = b":0\r\n";
        let mut forward = None;
        if let Some(t) = target
            && let Some(c) = self.clients.get_mut(t)
        {
            if let Some(instance) = c.bmove.waiting_on() {
                let engine_id = c
                    .conns
                    .iter()
                    .find(|(i, _)| *i == instance)
                    .and_then(|&(_, conn)| self.dedicated.get(conn))
                    .and_then(|d| d.engine_id);
                if let Some(engine_id) = engine_id {
                    let id = itoa::Buffer::new().format(engine_id).to_owned();
                    let mut request = Vec::new();
                    let mut args: Vec<&[u8]> = vec![b"CLIENT", b"UNBLOCK", id.as_bytes()];
                    if error {
                        args.push(b"ERROR");
                    }
                    resp::encode_request(&mut request, &args);
                    forward = Some((instance, request));
                }
            } else if let Some(s) = c.spread.as_mut() {
                if let Some(unblocks) = s.client_unblock(error) {
                    c.replies.followups.extend(unblocks);
                    self.followups.push(t);
                    reply = b":1\r\n";
                }
            } else if let Some(w) = c.coord.as_mut().and_then(|co| co.wait_mut()) {
                w.client_unblock(error);
                reply = b":1\r\n";
            }
        }
        let Some(me) = self.clients.get_mut(token) else {
            return;
        };
        match forward {
            Some((instance, request)) => {
                let seq = me.replies.push_plain();
                me.replies.followups.push(crate::client::Followup {
                    instance,
                    request,
                    seq,
                    part: 0,
                });
                self.followups.push(token);
            }
            None => me.replies.push_local(reply, false),
        }
        mark(&mut me.dirty, &mut self.dirty_clients, token);
    }

    /// CLIENT LIST / INFO / KILL of client `token` ([`crate::clients`]).
    /// `len`: the request's bytes, in the caller's `qbuf` as Redis counts the command it runs.
    fn clients_op(&mut self, token: usize, op: clients::Op, len: usize) {
        if let clients::Op::Unblock { id, error } = op {
            self.client_unblock(token, id, error);
            return;
        }
        let Some(me) = self.clients.get(token) else {
            return;
        };
        let (me_id, proto) = (me.id, me.session.proto);
        let mut text = String::new();
        let mut victims = Vec::new();
        // Slab order is not connection order; Redis lists clients oldest first.
        let mut all: Vec<(usize, &Client)> = self.clients.iter().collect();
        all.sort_by_key(|(_, c)| c.id);
        for (t, c) in all {
            if c.killed {
                continue;
            }
            let s = &c.session;
            let v = clients::View {
                id: c.id,
                qbuf: c.rend - c.rstart + if c.id == me_id { len } else { 0 },
                addr: &s.addr,
                laddr: &s.laddr,
                fd: c.stream.as_raw_fd() as i64,
                name: s.name.as_deref(),
                age: c.created.elapsed().as_secs(),
                idle: c.last_request.elapsed().as_secs(),
                db: s.db,
                sub: s.subs.channels(),
                psub: s.subs.patterns(),
                in_multi: s.tx.multi,
                monitor: s.monitor,
                cmd: if s.last_cmd.is_empty() {
                    "NULL"
                } else {
                    s.last_cmd
                },
                user: s.auth.name(),
                resp: s.proto.version(),
            };
            match &op {
                clients::Op::Info if c.id == me_id => clients::line(&v, &mut text),
                clients::Op::List { kind, ids } if clients::listed(*kind, ids, &v) => {
                    clients::line(&v, &mut text)
                }
                clients::Op::Kill(k) if k.matches(&v, me_id) => victims.push(t),
                _ => {}
            }
        }
        let reply = match &op {
            clients::Op::Kill(k) => k.reply(victims.len()),
            _ => {
                let mut out = Vec::new();
                resp::ReplyWriter::new(&mut out, proto).verbatim(text.as_bytes());
                out
            }
        };
        let killed_self = victims.contains(&token);
        if let Some(c) = self.clients.get_mut(token) {
            // Redis answers the killer first, then closes it if it killed itself.
            c.replies.push_local(&reply, killed_self);
            mark(&mut c.dirty, &mut self.dirty_clients, token);
        }
        for t in victims {
            if t == token {
                let c = self.clients.get_mut(t).expect("the caller");
                c.rstart = c.rend;
                c.read_closed = true;
                continue;
            }
            if let Some(c) = self.clients.get_mut(t) {
                c.killed = true;
                self.to_close.push(t);
            }
        }
    }

    /// `Some((op, len))`: a CLIENT LIST/INFO/KILL/UNBLOCK of `len` bytes to answer now.
    fn process_client_once(&mut self, token: usize) -> Option<(clients::Op, usize)> {
        let congested = self.congested();
        let Proxy {
            poll,
            clients,
            backends,
            dedicated,
            fleet,
            dirty_backends,
            dirty_dedicated,
            dirty_clients,
            paused,
            followups,
            now,
            monitor_feed,
            ..
        } = self;
        let c = clients.get_mut(token)?;
        let Client {
            id,
            parser,
            rbuf,
            rstart,
            rend,
            replies,
            session,
            paused: is_paused,
            dirty,
            read_closed,
            conns,
            lane,
            spread,
            coord,
            scripts,
            txm,
            bmove,
            wait_lane,
            last_request,
            ..
        } = c;
        let mut ctx = Ctx {
            registry: poll.registry(),
            backends,
            dedicated,
            fleet,
            dirty_backends,
            dirty_dedicated,
            monitor_feed,
        };
        let mut me = Me {
            token,
            id: *id,
            replies,
            session,
            conns,
            lane,
            spread,
            coord,
            scripts,
            txm,
            bmove,
        };
        let out_before = me.replies.unsent();
        let mut parsed = false;
        let mut clients_op = None;
        loop {
            if *rstart == *rend {
                break;
            }
            if me.replies.pending_len() >= MAX_PENDING
                || me.replies.unsent() >= OUTPUT_HIGH_WATER
                || congested
            {
                if !*is_paused {
                    *is_paused = true;
                    paused.push(token);
                }
                break;
            }
            let buf = &rbuf[*rstart..*rend];
            let consumed = match parser.parse(buf) {
                Ok(Some(n)) => n,
                Ok(None) => break,
                Err(e) => {
                    let mut reply = Vec::new();
                    e.write_reply(&mut reply);
                    me.replies.push_local(&reply, true);
                    *rstart = *rend;
                    *read_closed = true;
                    break;
                }
            };
            if parser.argc() > 0 {
                parsed = true;
                let raw = &buf[..consumed];
                let args = ParsedArgs {
                    parser: &*parser,
                    buf,
                };
                // Inline requests are re-encoded: backends always get multibulk.
                let encoded;
                let raw: &[u8] = if raw.first() == Some(&b'*') {
                    raw
                } else {
                    encoded = encode_args(&args);
                    &encoded
                };
                match handle(&args, raw, &mut me, &mut ctx) {
                    Flow::Continue => {}
                    Flow::StopReading => {
                        *rstart = *rend;
                        *read_closed = true;
                        break;
                    }
                    Flow::Clients(op) => {
                        *rstart += consumed;
                        clients_op = Some((*op, consumed));
                        break;
                    }
                    Flow::Wait => {
                        // Parsed again once the earlier replies are in (resume_paused).
                        *wait_lane = true;
                        if !*is_paused {
                            *is_paused = true;
                            paused.push(token);
                        }
                        break;
                    }
                }
            }
            *rstart += consumed;
        }
        if !me.replies.followups.is_empty() {
            followups.push(token);
        }
        if me.replies.unsent() != out_before && !*dirty {
            *dirty = true;
            dirty_clients.push(token);
        }
        if parsed {
            // `timeout` counts from the last complete request, so a client trickling bytes
            // (slowloris) is not kept alive by them.
            *last_request = *now;
        }
        clients_op
    }

    /// Whether a link holds more than `BACKEND_HIGH_WATER` unsent bytes: a live one, or one
    /// woken this iteration (dirty, listed at `flush_all`). Dormant links hold nothing.
    fn congested(&self) -> bool {
        let over = |&i: &usize| self.backends[i].unsent() > BACKEND_HIGH_WATER;
        self.live.iter().any(over) || self.dirty_backends.iter().any(over)
    }

    #[inline]
    fn resume_paused(&mut self) {
        if !self.paused.is_empty() {
            self.resume_some_paused();
        }
    }

    #[inline(never)]
    fn resume_some_paused(&mut self) {
        if self.congested() {
            return;
        }
        let list = std::mem::take(&mut self.paused);
        for token in list {
            let Some(c) = self.clients.get_mut(token) else {
                continue;
            };
            if c.replies.pending_len() >= MAX_PENDING
                || c.replies.unsent() >= OUTPUT_HIGH_WATER
                || (c.wait_lane && c.replies.pending_len() > 0)
            {
                self.paused.push(token);
                continue;
            }
            c.paused = false;
            c.wait_lane = false;
            self.client_readable(token);
        }
    }

    /// Writes a client's output. Returns with the client queued for closing if it is done.
    fn flush_client(&mut self, token: usize) {
        let Some(c) = self.clients.get_mut(token) else {
            return;
        };
        c.dirty = false;
        if c.killed {
            return; // CLIENT KILL: nothing more is written; closed this iteration
        }
        if c.holds_output() {
            return; // written with the rest of its batch (`Client::holds_output`)
        }
        match c.write_output() {
            Ok(n) => {
                self.fleet.net_output_bytes += n as u64;
                self.fleet.writes_processed += u64::from(n > 0);
            }
            Err(e) => {
                log::debug!("client {token}: write: {e}");
                self.to_close.push(token);
                return;
            }
        }
        if c.idle() && (c.replies.closing || c.read_closed) {
            self.to_close.push(token);
        }
    }

    /// Sends the requests merges asked for on clients' behalf (CONFIG SET's restores) on
    /// the instances' RESP2 links; their replies fill the clients' slots as usual.
    #[inline]
    fn send_followups(&mut self) {
        // Most iterations have nothing to send or run again: three tests.
        if self.followups.is_empty() && self.tx_reruns.is_empty() && self.block_resends.is_empty() {
            return;
        }
        self.send_some_followups();
    }

    #[inline(never)]
    fn send_some_followups(&mut self) {
        let mut retry = Vec::new();
        for token in std::mem::take(&mut self.followups) {
            let Some(c) = self.clients.get_mut(token) else {
                continue;
            };
            if let Some(co) = c.coord.as_mut()
                && !co.outbox().is_empty()
                && let Some(done) = crate::exec::send_outbox(
                    co,
                    token,
                    c.id,
                    &mut self.dedicated,
                    &mut self.dirty_dedicated,
                    crate::exec::Links {
                        backends: &mut self.backends,
                        dirty: &mut self.dirty_backends,
                        registry: self.poll.registry(),
                    },
                )
            {
                let seq = co.seq();
                c.coord = None;
                coord_done(c, seq, &done, &mut self.followups, token);
            }
            if c.coord.is_none() && c.scripts.retries.front().is_some_and(|r| !r.started) {
                retry.push(token);
            }
            if c.coord.is_none() && c.txm.due.is_some() && !self.tx_reruns.contains(&token) {
                self.tx_reruns.push(token);
            }
            if c.bmove.due().is_some() && !self.block_resends.contains(&token) {
                self.block_resends.push(token);
            }
            for f in std::mem::take(&mut c.replies.followups) {
                let link = self.fleet.primary(f.instance);
                let b = &mut self.backends[link];
                if b.accepts() {
                    let w = Waiter {
                        token,
                        client_id: c.id,
                        seq: f.seq,
                        part: f.part,
                        hops: crate::client::Hops::NONE,
                    };
                    b.send(&f.request, w);
                    if !b.dirty {
                        b.dirty = true;
                        self.dirty_backends.push(link);
                    }
                } else {
                    c.replies.fill(f.seq, f.part, &b.unavailable.clone());
                }
            }
            mark(&mut c.dirty, &mut self.dirty_clients, token);
        }
        for token in retry {
            self.retry_script(token);
        }
        if !self.tx_reruns.is_empty() {
            self.tx_reruns_due(Instant::now());
        }
        if !self.block_resends.is_empty() {
            self.block_resends_due(Instant::now());
        }
    }

    /// Runs again the transactions whose time has come (`crate::txmove`).
    fn tx_reruns_due(&mut self, now: Instant) {
        let mut k = 0;
        while k < self.tx_reruns.len() {
            let token = self.tx_reruns[k];
            match self.clients.get(token).and_then(|c| c.txm.due) {
                Some(due) if due > now => k += 1,
                Some(_) => {
                    self.tx_reruns.swap_remove(k);
                    self.rerun_tx(token, now);
                }
                None => {
                    self.tx_reruns.swap_remove(k);
                }
            }
        }
    }

    /// Client `token`'s transaction met moving slots: each `-MOVED` is applied to the table
    /// (and a refresh asked for), each `-ASK`'s node found, and the transaction runs again
    /// (`crate::txmove::rerun`).
    fn rerun_tx(&mut self, token: usize, now: Instant) {
        let Some(c) = self.clients.get_mut(token) else {
            return;
        };
        if c.coord.is_some() {
            return;
        }
        let moved = std::mem::take(&mut c.txm.moved);
        let asked = std::mem::take(&mut c.txm.asks);
        c.txm.due = None;
        let again = c.txm.exec.is_some(); // else only the table learns (WATCH: a null reply)
        for (slot, addr) in &moved {
            if let Some(j) = self.instance_named(addr, now) {
                self.fleet.slots.set(*slot, j);
            }
        }
        if !moved.is_empty() {
            self.redirects.want_refresh();
            self.refresh_if_wanted(now);
        }
        if !again {
            return;
        }
        let asks: Vec<(usize, u16, usize)> = asked
            .iter()
            .filter_map(|(i, slot, addr)| self.instance_named(addr, now).map(|j| (*i, *slot, j)))
            .collect();
        self.with_client(token, |me, ctx| crate::txmove::rerun(&asks, me, ctx));
    }

    /// Runs `f` on client `token` as the request loop sees it (its [`Me`] and the shared
    /// [`Ctx`]), then marks the client to be flushed. Nothing when the client is gone.
    pub(crate) fn with_client(&mut self, token: usize, f: impl FnOnce(&mut Me, &mut Ctx)) {
        let Proxy {
            clients,
            poll,
            backends,
            dedicated,
            fleet,
            dirty_backends,
            dirty_dedicated,
            dirty_clients,
            monitor_feed,
            ..
        } = self;
        let Some(c) = clients.get_mut(token) else {
            return;
        };
        {
            let Client {
                id,
                replies,
                session,
                conns,
                lane,
                spread,
                coord,
                scripts,
                txm,
                bmove,
                ..
            } = &mut *c;
            let mut ctx = Ctx {
                registry: poll.registry(),
                backends,
                dedicated,
                fleet,
                dirty_backends,
                dirty_dedicated,
                monitor_feed,
            };
            let mut me = Me {
                token,
                id: *id,
                replies,
                session,
                conns,
                lane,
                spread,
                coord,
                scripts,
                txm,
                bmove,
            };
            f(&mut me, &mut ctx);
        }
        mark(&mut c.dirty, dirty_clients, token);
    }

    /// Instances started serving slots: every client's patterns, MONITOR and tracking reach
    /// them too (`crate::exec::extend_to`).
    #[inline(never)]
    fn extend_clients(&mut self) {
        for instance in self.fleet.slots.take_started() {
            let tokens: Vec<usize> = self
                .clients
                .iter()
                .filter(|(_, c)| {
                    c.session.subs.patterns() > 0 || c.session.monitor || c.session.tracking
                })
                .map(|(t, _)| t)
                .collect();
            log::info!(
                "instance {instance} serves slots now: {} client(s) with patterns, MONITOR or \
                 tracking follow",
                tokens.len()
            );
            for token in tokens {
                self.with_client(token, |me, ctx| crate::exec::extend_to(instance, me, ctx));
            }
        }
    }

    /// Instances gave their last slot away (a shrink): the channels clients subscribed there
    /// are subscribed on their new owners and unsubscribed there, before the instance stops
    /// (`crate::exec::resubscribe`).
    #[inline(never)]
    fn move_retired_channels(&mut self) {
        for instance in self.fleet.slots.take_stopped() {
            type Move = (usize, usize, u64, Vec<Vec<u8>>);
            let moves: Vec<Move> = self
                .dedicated
                .iter_mut()
                .filter(|(_, d)| d.instance == instance && !d.channels.is_empty())
                .map(|(id, d)| {
                    let channels = std::mem::take(&mut d.channels);
                    (id, d.owner_token, d.owner_id, channels)
                })
                .collect();
            for (id, token, owner, channels) in moves {
                if let Some(d) = self.dedicated.get_mut(id) {
                    let request = crate::exec::names_request(b"UNSUBSCRIBE", &channels);
                    d.send(&request, None, channels.len() as u32);
                    mark(&mut d.dirty, &mut self.dirty_dedicated, id);
                }
                self.with_client(token, |me, ctx| {
                    crate::exec::resubscribe(owner, channels, me, ctx);
                });
            }
        }
    }

    /// Runs client `token`'s script again, gathered with the undeclared keys it touched
    /// (`crate::coord::Scripts`); its reply fills the script's slot.
    fn retry_script(&mut self, token: usize) {
        let Some(c) = self.clients.get_mut(token) else {
            return;
        };
        if c.coord.is_some() {
            return;
        }
        let Some(r) = c.scripts.next_retry() else {
            return;
        };
        r.started = true;
        let (seq, request, keys) = (r.seq, r.request.clone(), r.keys.clone());
        self.with_client(token, |me, ctx| {
            crate::exec::gather(Some(seq), vec![request], keys, Vec::new(), false, me, ctx);
        });
    }

    fn flush_all(&mut self) {
        // Before the clients' output is written: lines of the iteration's requests.
        self.feed_monitors();
        let now = self.now;
        // The lists are taken and given back with their capacity: iterating them by value
        // freed them, and every iteration with a request allocated them again.
        // Dedicated connections first: a blocking command read in this iteration reaches
        // its instance before the shared-link requests of other clients read after it (the
        // order one Redis would have run them in).
        let mut dedicated = std::mem::take(&mut self.dirty_dedicated);
        for &id in &dedicated {
            let Some(d) = self.dedicated.get_mut(id) else {
                continue;
            };
            d.dirty = false;
            if d.connecting.is_some() {
                continue; // written once the connect completes
            }
            if let Err(e) = d.wire.flush() {
                self.fail_dedicated(id, &format!("write: {e}"));
            }
        }
        dedicated.clear();
        dedicated.append(&mut self.dirty_dedicated);
        self.dirty_dedicated = dedicated;
        let mut backends = std::mem::take(&mut self.dirty_backends);
        for &i in &backends {
            if !self.listed[i] {
                self.listed[i] = true; // woken this iteration (`crate::exec`)
                self.live.push(i);
            }
            self.backends[i].dirty = false;
            if self.backends[i].link != Link::Up {
                continue; // written once the connect completes
            }
            if let Err(e) = self.backends[i].flush() {
                self.fail_backend(i, &format!("write: {e}"), now);
            }
        }
        backends.clear();
        backends.append(&mut self.dirty_backends); // marked meanwhile: stay marked
        self.dirty_backends = backends;
        let clients = std::mem::take(&mut self.dirty_clients);
        for token in &clients {
            self.flush_client(*token);
        }
        self.dirty_clients = clients;
        self.dirty_clients.clear();
    }

    fn close_finished(&mut self) {
        if self.to_close.is_empty() && self.close_after_coord.is_empty() {
            return; // every iteration: one test when nothing closes
        }
        let mut tokens = std::mem::take(&mut self.to_close);
        tokens.append(&mut self.close_after_coord);
        tokens.sort_unstable();
        tokens.dedup();
        for token in tokens {
            // A run spanning instances finishes first: closing its connections now could
            // leave it done on some instances and not on others.
            if let Some(c) = self.clients.get_mut(token)
                && c.coord.as_ref().is_some_and(|co| !co.closable())
            {
                c.read_closed = true;
                self.close_after_coord.push(token);
                continue;
            }
            if let Some(mut c) = self.clients.try_remove(token) {
                self.fleet.client_ids.remove(&c.id);
                let _ = self.poll.registry().deregister(&mut c.stream);
                // In-flight waiters for this client are dropped on delivery (id check).
                // Its dedicated connections close with it: an instance unblocks a BLPOP
                // and drops the subscriptions of a connection that is gone.
                for (_, id) in c.conns {
                    if let Some(mut d) = self.dedicated.try_remove(id) {
                        d.wire.close(self.poll.registry());
                    }
                }
            }
        }
        self.fleet.clients = self.clients.len();
    }
}

/// Puts a backend reply into its client's slot (if the client is still there).
impl Proxy {
    /// Hands `reply` to the client slot `w` waits on (`crate::redirect`), through the
    /// gather of a split refused part for its sub-requests.
    pub(crate) fn deliver_to_client(&mut self, w: Waiter, reply: &[u8]) {
        if w.token == GATHER {
            if let Some((whole, merged)) = resplit_answered(&mut self.resplits, w, reply) {
                self.deliver_to_client(whole, &merged);
            }
            return;
        }
        deliver(
            &mut self.clients,
            &mut self.dirty_clients,
            &mut self.followups,
            w,
            reply,
        );
    }
}

/// A sub-request's reply of a part split per slot (`crate::split::per_slot`): once all are
/// in, the part's waiter and its reply, merged by the split's rules.
fn resplit_answered(
    resplits: &mut Gathers<Merge>,
    w: Waiter,
    reply: &[u8],
) -> Option<(Waiter, Vec<u8>)> {
    let (whole, merge, replies) = resplits.answered(w, reply)?;
    let replies: Vec<&[u8]> = replies.iter().map(Vec::as_slice).collect();
    let mut merged = Vec::new();
    crate::split::merge(&merge, &replies, &mut merged);
    Some((whole, merged))
}

fn deliver(
    clients: &mut Slab<Client>,
    dirty_clients: &mut Vec<usize>,
    followups: &mut Vec<usize>,
    w: Waiter,
    reply: &[u8],
) {
    let Some(c) = clients.get_mut(w.token) else {
        return;
    };
    if c.id != w.client_id {
        return;
    }
    // A transaction's queued command or EXEC: a slot move is followed (`crate::txmove`).
    if w.hops.tx {
        match crate::txmove::delivered(c, w, reply) {
            crate::txmove::Handled::No => {}
            crate::txmove::Handled::Yes => {
                mark(&mut c.dirty, dirty_clients, w.token);
                return;
            }
            crate::txmove::Handled::Again => {
                followups.push(w.token);
                return;
            }
        }
    }
    // A blocking command on one instance: a slot move is followed (`crate::blockmove`).
    if w.hops.block && crate::blockmove::delivered(c, w, reply) {
        followups.push(w.token);
        return;
    }
    // A step of an EXEC spanning instances (`crate::coord`): the slot is filled once the
    // coordinator has the reply.
    if let Some(co) = c.coord.as_mut()
        && co.seq() == w.seq
        && (crate::coord::COORD_PART..UNBLOCK_PART).contains(&w.part)
    {
        match co.answered(w.part, reply) {
            Some(done) => {
                c.coord = None;
                coord_done(c, w.seq, &done, followups, w.token);
                mark(&mut c.dirty, dirty_clients, w.token);
            }
            None if !co.outbox().is_empty() => followups.push(w.token),
            None => {}
        }
        return;
    }
    // A script that touched an undeclared key of another instance: run again gathered.
    if !c.scripts.inflight.is_empty() && c.scripts.answered(w.seq, reply) {
        followups.push(w.token);
        return;
    }
    // A part (or a `CLIENT UNBLOCK`) of a blocking read over several instances.
    if let Some(s) = c.spread.as_mut()
        && s.seq == w.seq
    {
        if w.part >= UNBLOCK_PART {
            if let Some(again) = s.unblock_answered(w.part - UNBLOCK_PART, reply) {
                c.replies.followups.push(again);
                followups.push(w.token);
            }
            return;
        }
        c.replies.followups.extend(s.answered(w.part));
        if s.done() {
            c.spread = None;
        }
    } else if w.part >= UNBLOCK_PART {
        return; // a late CLIENT UNBLOCK reply: the read is over
    }
    c.replies.fill(w.seq, w.part, reply);
    if !c.replies.followups.is_empty() {
        followups.push(w.token);
    }
    if !c.dirty {
        c.dirty = true;
        dirty_clients.push(w.token);
    }
}

/// A coordinated run of client `c` is over with `done`: its slot is filled, unless it is a
/// script to run again with one more key (`crate::coord::Scripts`).
fn coord_done(c: &mut Client, seq: u64, done: &[u8], followups: &mut Vec<usize>, token: usize) {
    if done == crate::txshared::FALLBACK {
        // A transaction over the shared links that could not be prepared everywhere: it runs
        // on the dedicated path (`crate::txmove::rerun`, started by `send_followups`).
        c.txm.due = Some(Instant::now());
        followups.push(token);
        return;
    }
    if c.txm.exec == Some(seq) {
        // A transaction's EXEC: a slot move is followed (`crate::txmove`).
        if crate::txmove::finished(c, seq, done) == crate::txmove::Handled::Again {
            followups.push(token);
        }
        return;
    }
    match c.scripts.retried(seq, done) {
        Ok(true) => {}
        Ok(false) => c.replies.fill(seq, 0, done),
        Err(instead) => c.replies.fill(seq, 0, &instead),
    }
    // This script again, or the next one waiting.
    if !c.scripts.retries.is_empty() {
        followups.push(token);
    }
}

/// Adds `idx` to a to-flush list once per iteration.
pub(crate) fn mark(dirty: &mut bool, list: &mut Vec<usize>, idx: usize) {
    if !*dirty {
        *dirty = true;
        list.push(idx);
    }
}

/// A request as multibulk (`*N\r\n$len\r\narg\r\n…`).
fn encode_args(args: &impl Args) -> Vec<u8> {
    let argv: Vec<&[u8]> = (0..args.argc()).map(|i| args.arg(i)).collect();
    let mut out = Vec::new();
    resp::encode_request(&mut out, &argv);
    out
}
