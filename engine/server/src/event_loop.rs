//! The single-threaded mio loop: accept, read → parse → execute → write, the `hz` timer and
//! the shutdown signals.
//!
//! # One iteration
//!
//! ```text
//! poll(timeout = 0 if work is queued, else time to the next timer tick)
//! now = clock (once)
//! for each event:  listener → accept up to ACCEPT_BATCH (per listener)
//!                  signals  → return (graceful shutdown)
//!                  conn k   → serve(k)
//! serve every connection queued last time (read budget spent, or accept backlog)
//! timer due?       → engine.cron(now), RSS, shrink idle buffers
//! ```
//!
//! `serve` follows mio's rules (STYLE.md guideline 10; mio `examples/tcp_server.rs`): errors
//! first (a failed read or write closes the connection), then read, then write. It runs every
//! complete request already buffered, reads (one `read` per batch in the usual case, at most
//! `READ_BUDGET_PER_TURN` bytes per turn), runs the new requests, and writes the replies once
//! at the end, like Redis's `beforeSleep` writing pending replies before the next poll. WRITABLE
//! interest is registered only while output is left over, and dropped once it drains.
//!
//! Backpressure: while a connection's unwritten output is at `OUTPUT_HIGH_WATER`, its requests
//! are neither read nor executed; the kernel buffers fill and the client's writes block, so a
//! pipelining client that never reads costs bounded memory.
//!
//! Tokens: a connection's token is its slab key; the listeners (`crate::listeners`, one per
//! `bind` address and kind), the bus peers and the signals take tokens at the top of the
//! range, which the slab never reaches (it holds at most `maxclients` entries).
//!
//! Limits (Redis names, `engine.config`, CONFIG SET applies them at once): `maxclients`
//! (accept, then `-ERR max number of clients reached` and close), `client-query-buffer-limit`
//! (read), `client-output-buffer-limit` (checked after each batch, each routed delivery and
//! each tick: over the hard limit, or over the soft one for its seconds, the client is closed
//! and its output dropped — pub/sub class for subscribed clients, normal class otherwise),
//! `timeout` (each tick: a client with no command for that many seconds is closed, except
//! subscribers, blocked clients and keychange feed connections, as Redis spares pub/sub,
//! blocked and replica clients). Connections from the TLS listener are the same `Conn` with a
//! [`crate::tls::TlsConn`] inside.

use std::cell::RefCell;
use std::collections::HashMap;
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::time::Duration;

use engine_core::cmd::connection::KillFilter;
use engine_core::cmd::pubsub::BUS_CLIENT_ID;
use engine_core::{Client, Delivery, Engine};
use log::{debug, info, warn};
use mio::event::Event;
use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook_mio::v1_0::Signals;

use crate::budget::{ACCEPT_BATCH, EVENTS_CAPACITY, READ_BUDGET_PER_TURN};
use crate::bus::Bus;
use crate::conn::{Batch, CloseReason, Conn, ReadOutcome};
use crate::conns::Conns;
use crate::host::{self, RssReader};
use crate::listeners::{self as listen_set, ListenSet};
use crate::tls::{self, TlsConn};

const SIGNALS: Token = Token(usize::MAX - 2);

/// The highest `hz` honoured (Redis `CONFIG_MAX_HZ`).
const MAX_HZ: u32 = 500;

fn would_block(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock
}

fn interrupted(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::Interrupted
}

/// Why a connection is dropped without (further) replies.
#[derive(Debug)]
enum Disconnect {
    Io(io::Error),
    QueryBufLimit,
    Done(CloseReason),
    /// A TLS handshake or record error (garbage, a refused client certificate).
    Tls(rustls::Error),
    /// Over its `client-output-buffer-limit`.
    OutputLimit,
    /// Idle for longer than `timeout`.
    Timeout,
}

/// The loop: the engine, and everything else (`Net`), kept apart so that a script running past
/// `busy-reply-threshold` can lend `Net` to the engine as its [`BusyPoll`] and have other
/// connections served from inside the script (see [`Net::serve`] in `BusyPoll`).
pub struct EventLoop {
    pub engine: Engine,
    net: Net,
}

/// The loop's sockets, connections and scratch state (all but the engine).
struct Net {
    poll: Poll,
    /// The plain and TLS listeners, shared with the engine, which re-binds them (CONFIG SET
    /// `port`, `bind`; `crate::listeners`).
    listeners: Rc<RefCell<ListenSet>>,
    /// Ciphertext of one TLS socket read (`tls::SCRATCH_LEN`), shared by all connections.
    tls_scratch: Vec<u8>,
    signals: Signals,
    /// The connections; a connection whose requests are executing is taken out (`None`) so
    /// that a busy script's poller can serve the others.
    conns: Conns,
    /// CLIENT ID of the next connection.
    next_client_id: u64,
    /// The argv vector reused by every command (see `conn::recycle`).
    argv: Vec<&'static [u8]>,
    /// Connections with work left for the next iteration (their read budget ran out).
    queued: Vec<usize>,
    /// The last accept stopped at `ACCEPT_BATCH`: more connections may be waiting.
    /// (Index 0: plain listener, 1: TLS listener.)
    accept_backlog: [bool; 2],
    /// Accept failed (e.g. out of descriptors): retry on the next timer tick, not in a spin.
    accept_retry: bool,
    rss: RssReader,
    /// When the next timer tick is due, Unix µs.
    next_cron_us: u64,
    /// CLIENT ID → slab key, to route deliveries (pub/sub, woken blocked clients).
    ids: HashMap<u64, usize>,
    /// Scratch vector for draining the engine's deliveries.
    deliveries: Vec<Delivery>,
    /// Links to the other engines of the cluster, for PUBLISH (`crate::bus`).
    bus: Bus,
    /// Where the slot table is saved (`crate::nodes_file`), the generation saved last, and
    /// the password the bus links are rebuilt with when the nodes change.
    nodes_file: Option<crate::nodes_file::NodesFile>,
    cluster_generation: u64,
    /// The peers the bus was built for (rebuilt only when they change).
    bus_peers: Vec<(Option<String>, u16)>,
    bus_password: Vec<u8>,
    /// Set when the loop must return: a SHUTDOWN ran (its save made), or a signal arrived
    /// while a script was busy.
    stop: Option<Stop>,
    /// The events buffer of [`BusyPoll::serve`] (allocated on a first busy script).
    busy_events: Option<Events>,
    /// Events for the connection whose script is busy (taken out of `conns`), applied when it
    /// is back: `(key, readable, hangup)`.
    busy_missed: Vec<(usize, bool, bool)>,
    /// The first [`BusyPoll::serve`] of a busy script has visited every connection.
    busy_swept: bool,
}

impl EventLoop {
    /// A loop on `poll` serving RESP on `listeners` (bound by [`ListenSet::bind_at_start`]
    /// with `poll`'s registry); the engine gets them to re-bind (CONFIG SET `port`, `bind`).
    pub fn new(poll: Poll, listeners: ListenSet, mut engine: Engine) -> io::Result<EventLoop> {
        let tls_scratch = match listeners.tls_config {
            Some(_) => vec![0; tls::SCRATCH_LEN],
            None => Vec::new(),
        };
        let listeners = Rc::new(RefCell::new(listeners));
        engine.listeners = Some(Box::new(listen_set::Shared(listeners.clone())));
        let mut signals = Signals::new([SIGTERM, SIGINT])?;
        poll.registry()
            .register(&mut signals, SIGNALS, Interest::READABLE)?;
        let net = Net {
            poll,
            listeners,
            tls_scratch,
            signals,
            conns: Conns::new(),
            next_client_id: 1,
            argv: Vec::new(),
            queued: Vec::new(),
            accept_backlog: [false; 2],
            accept_retry: false,
            rss: RssReader::new(),
            next_cron_us: 0,
            ids: HashMap::new(),
            deliveries: Vec::new(),
            bus: Bus::default(),
            nodes_file: None,
            cluster_generation: 0,
            bus_peers: Vec::new(),
            bus_password: Vec::new(),
            stop: None,
            busy_events: None,
            busy_missed: Vec::new(),
            busy_swept: false,
        };
        Ok(EventLoop { engine, net })
    }

    /// Forwards clients' PUBLISH to the other engines through `bus` (cluster mode).
    pub fn set_bus(&mut self, bus: Bus) {
        self.net.bus = bus;
    }

    /// Saves the slot table to `path` whenever a command changes it (`crate::nodes_file`);
    /// `password` rebuilds the bus when the nodes change.
    pub fn set_nodes_file(&mut self, path: Option<std::path::PathBuf>, password: Vec<u8>) {
        self.net.nodes_file = path.map(crate::nodes_file::NodesFile::new);
        self.net.cluster_generation = self.engine.cluster().generation();
        self.net.bus_peers = peer_list(self.engine.cluster());
        self.net.bus_password = password;
    }

    /// Runs until SIGTERM or SIGINT, or a SHUTDOWN command; says which.
    pub fn run(&mut self) -> io::Result<Stop> {
        self.net.run(&mut self.engine)
    }
}

/// Why [`EventLoop::run`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// SIGTERM or SIGINT: the caller makes the final save.
    Signal,
    /// SHUTDOWN: its save (if any) is made; exit now.
    Command,
}

impl Net {
    /// A pending SIGTERM or SIGINT, logged (Redis's words).
    fn take_signal(&mut self) -> bool {
        match self.signals.pending().next() {
            Some(sig) => {
                let name = if sig == SIGINT { "SIGINT" } else { "SIGTERM" };
                info!("Received {name} scheduling shutdown...");
                true
            }
            None => false,
        }
    }

    fn cron_period_us(&self, engine: &Engine) -> u64 {
        1_000_000 / u64::from(engine.config.hz.clamp(1, MAX_HZ))
    }

    /// Runs until SIGTERM or SIGINT, or a SHUTDOWN.
    fn run(&mut self, engine: &mut Engine) -> io::Result<Stop> {
        let mut events = Events::with_capacity(EVENTS_CAPACITY);
        let mut now = host::now_us();
        self.next_cron_us = now + self.cron_period_us(engine);
        loop {
            let timeout = if !self.queued.is_empty() || self.accept_backlog.contains(&true) {
                Duration::ZERO
            } else {
                // Wake for the next tick, or earlier for a blocked client's timeout.
                let due = match engine.next_deadline_us() {
                    Some(d) => d.min(self.next_cron_us),
                    None => self.next_cron_us,
                };
                Duration::from_micros(due.saturating_sub(now))
            };
            if let Err(e) = self.poll.poll(&mut events, Some(timeout)) {
                if interrupted(&e) {
                    continue;
                }
                return Err(e);
            }
            now = host::now_us();

            for event in events.iter() {
                if let Some(tls) = listen_set::kind_of(event.token()) {
                    self.accept(engine, now, tls);
                    continue;
                }
                match event.token() {
                    SIGNALS => {
                        if self.take_signal() {
                            return Ok(Stop::Signal);
                        }
                    }
                    Token(key) => match self.bus.peer_of(Token(key)) {
                        Some(i) => self.bus.on_event(self.poll.registry(), i, event, now),
                        None => self.on_conn_event(engine, key, event, now),
                    },
                }
            }
            if let Some(stop) = self.stop.take() {
                return Ok(stop);
            }

            for tls in [false, true] {
                if self.accept_backlog[usize::from(tls)] {
                    self.accept(engine, now, tls);
                }
            }
            let queued = std::mem::take(&mut self.queued);
            for &key in &queued {
                if let Some(conn) = self.conns.get_mut(key)
                    && conn.queued
                {
                    conn.queued = false;
                    self.serve(engine, key, now);
                }
            }
            // Give the allocation back for the next iteration.
            if self.queued.is_empty() {
                self.queued = queued;
                self.queued.clear();
            }
            if let Some(stop) = self.stop.take() {
                return Ok(stop);
            }

            if engine.next_deadline_us().is_some_and(|d| now >= d) {
                engine.timeouts(now);
                self.route_deliveries(engine);
            }
            if now >= self.next_cron_us {
                self.cron(engine, now);
                // Skip missed ticks after a stall instead of running them back to back.
                self.next_cron_us = (self.next_cron_us + self.cron_period_us(engine)).max(now);
            }
        }
    }

    /// One timer tick: engine background work, host figures, buffer housekeeping.
    fn cron(&mut self, engine: &mut Engine, now: u64) {
        engine.cron(now);
        if engine.has_security_events() {
            // Failed AUTH attempts (user and address; never the password).
            let mut lines = Vec::new();
            engine.take_security_events(&mut lines);
            lines.iter().for_each(|l| warn!("{l}"));
        }
        crate::snapshot::cron(engine, now);
        self.route_deliveries(engine);
        if let Some(rss) = self.rss.rss_bytes() {
            engine.host.rss_bytes = rss;
        }
        for (_, conn) in self.conns.iter_mut() {
            conn.shrink_idle_buffers(now);
        }
        self.enforce_limits(engine, now);
        if self.accept_retry {
            self.accept_retry = false;
            self.accept(engine, now, false);
            self.accept(engine, now, true);
        }
    }

    /// Each tick: idle clients over `timeout`, and clients over a soft output limit for its
    /// seconds (a client that stopped reading gets no new output to trigger the check).
    fn enforce_limits(&mut self, engine: &mut Engine, now: u64) {
        let timeout_us = engine.config.timeout.saturating_mul(1_000_000);
        let mut doomed = Vec::new();
        for (key, conn) in self.conns.iter_mut() {
            let c = &conn.client;
            if timeout_us > 0
                && now.saturating_sub(c.last_cmd_us) > timeout_us
                && !conn.blocked
                && c.subs.count() == 0
                && !engine.is_feed_subscriber(c.id)
            {
                doomed.push((key, Disconnect::Timeout));
            } else if output_limit_exceeded(engine, conn, now) {
                doomed.push((key, Disconnect::OutputLimit));
            }
        }
        for (key, why) in doomed {
            self.close(engine, key, why);
        }
    }

    /// One `accept` on listener `i` of the plain or the TLS set; `None` if there is no such
    /// listener.
    fn accept_one(
        &self,
        tls: bool,
        i: usize,
    ) -> Option<io::Result<(TcpStream, std::net::SocketAddr)>> {
        Some(self.listeners.borrow().of(tls).get(i)?.accept())
    }

    /// Accepts up to ACCEPT_BATCH connections on each listener of a set (redis
    /// `MAX_ACCEPTS_PER_CALL` per listening socket).
    fn accept(&mut self, engine: &mut Engine, now: u64, tls: bool) {
        let n = self.listeners.borrow().of(tls).len();
        self.accept_backlog[usize::from(tls)] = false;
        for i in 0..n {
            if !self.accept_from(engine, now, tls, i) {
                self.accept_backlog[usize::from(tls)] = true;
            }
        }
    }

    /// Accepts on listener `i`; false if ACCEPT_BATCH ran out (more may be waiting).
    fn accept_from(&mut self, engine: &mut Engine, now: u64, tls: bool, i: usize) -> bool {
        for _ in 0..ACCEPT_BATCH {
            let Some(result) = self.accept_one(tls, i) else {
                return true;
            };
            match result {
                Ok((stream, _peer)) => self.add_conn(engine, stream, now, tls),
                Err(e) if would_block(&e) => return true,
                Err(e) if interrupted(&e) => {}
                // The peer gave up before we accepted: nothing to do.
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset
                    ) => {}
                Err(e) => {
                    // EMFILE/ENFILE/ENOBUFS: retrying at once would spin; wait for a tick.
                    warn!("Error accepting a client connection: {e}");
                    self.accept_retry = true;
                    return true;
                }
            }
        }
        false
    }

    fn add_conn(&mut self, engine: &mut Engine, mut stream: TcpStream, now: u64, tls: bool) {
        engine.net.total_connections_received += 1;
        if self.conns.len() as u64 >= engine.config.maxclients {
            engine.net.rejected_connections += 1;
            // Best effort, as Redis does (`acceptCommonHandler`); the socket is new and empty.
            // A TLS client is closed without it: plaintext cannot be sent before a handshake
            // (Redis's write fails the same way there).
            if !tls {
                let _ = stream.write(b"-ERR max number of clients reached\r\n");
            }
            return;
        }
        // Protected mode (engine_core::acl): no password for the default user and a peer off
        // the loopback interface: Redis's -DENIED text (plaintext only), then close.
        let loopback = stream
            .peer_addr()
            .is_ok_and(|a| a.ip().to_canonical().is_loopback());
        if engine.protected_mode_refuses(loopback) {
            engine.net.rejected_connections += 1;
            if !tls {
                let _ = stream.write(engine_core::acl::PROTECTED_MODE_DENIED);
            }
            return;
        }
        let tls_cfg = if tls {
            self.listeners.borrow().tls_config.clone()
        } else {
            None
        };
        let tls_conn = match &tls_cfg {
            Some(cfg) => match TlsConn::new(cfg) {
                Ok(t) => Some(Box::new(t)),
                Err(e) => {
                    warn!("TLS connection setup: {e}");
                    return;
                }
            },
            _ => None,
        };
        // Replies go out as soon as they are written; Nagle would add up to 40 ms.
        if let Err(e) = stream.set_nodelay(true) {
            debug!("TCP_NODELAY: {e}");
        }
        let addr = stream
            .peer_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        let laddr = stream
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        let key = self.conns.vacant_key();
        if let Err(e) = self
            .poll
            .registry()
            .register(&mut stream, Token(key), Interest::READABLE)
        {
            warn!("Error registering a client connection: {e}");
            return;
        }
        let mut client = Client {
            id: self.next_client_id,
            addr,
            laddr,
            fd: i64::from(stream.as_raw_fd()),
            created_us: now,
            last_cmd_us: now,
            ..Client::default()
        };
        engine.init_client(&mut client);
        self.next_client_id += 1;
        self.ids.insert(client.id, key);
        debug!("Accepted {} (id={})", client.addr, client.id);
        let mut conn = Conn::new(stream, client, engine);
        conn.tls = tls_conn;
        let inserted = self.conns.insert(conn);
        debug_assert_eq!(inserted, key);
        engine.host.connected_clients = self.conns.len() as u64;
    }

    fn on_conn_event(&mut self, engine: &mut Engine, key: usize, event: &Event, now: u64) {
        // Unknown tokens (a connection closed earlier in this batch) are ignored.
        let Some(conn) = self.conns.get_mut(key) else {
            return;
        };
        if event.is_readable() || event.is_read_closed() || event.is_error() {
            conn.readable = true;
        }
        if event.is_read_closed() || event.is_error() {
            // The FIN or error may sit behind data in the same edge: read until the read that
            // reports it, since a short read would otherwise end the batch and no edge follows.
            conn.hangup = true;
        }
        self.serve(engine, key, now);
    }

    /// Runs `key`'s buffered requests ([`Conn::execute`]) with the connection taken out of
    /// `conns`, so that this `Net` can be lent to a script that runs past
    /// `busy-reply-threshold` as its [`BusyPoll`]; then applies the events that came for the
    /// connection meanwhile.
    fn execute(&mut self, engine: &mut Engine, key: usize, now: u64) -> Batch {
        if let Some(batch) = self.conns[key].no_batch() {
            return batch; // nothing to run: no need to take the connection out
        }
        let mut conn = self.conns.take(key);
        let mut argv = std::mem::take(&mut self.argv);
        let batch = conn.execute(engine, now, &mut argv, self);
        self.argv = argv;
        self.conns.put(key, conn);
        self.busy_swept = false;
        if !self.busy_missed.is_empty() {
            for (k, readable, hangup) in std::mem::take(&mut self.busy_missed) {
                if let Some(c) = self.conns.get_mut(k) {
                    c.readable |= readable;
                    c.hangup |= hangup;
                    if !c.queued {
                        c.queued = true;
                        self.queued.push(k);
                    }
                }
            }
        }
        batch
    }

    /// SHUTDOWN from connection `key`: the save it asks for (the BGSAVE child, if any, is
    /// stopped first), then the loop stops; a failed save without FORCE is answered with
    /// Redis's error and the engine goes on (redis `prepareForShutdown`). From inside a busy
    /// script (NOSAVE only) the script is being stopped by the host; nothing is saved.
    fn shutdown(
        &mut self,
        engine: &mut Engine,
        key: usize,
        s: engine_core::cmd::server::Shutdown,
        now: u64,
    ) {
        warn!("User requested shutdown...");
        let save = if engine.busy.is_some() {
            Some(false)
        } else {
            s.save
        };
        match crate::snapshot::shutdown_with(engine, now, save) {
            Err(e) if !s.force => {
                warn!(
                    "Errors trying to shut down the server: {e}. Check the logs for more information."
                );
                self.conns[key].reply_error(engine_core::cmd::server::SHUTDOWN_FAILED);
            }
            _ => self.stop = Some(Stop::Command),
        }
    }

    /// Runs buffered requests, reads and runs more, then writes the replies once.
    fn serve(&mut self, engine: &mut Engine, key: usize, now: u64) {
        let result = self.serve_inner(engine, key, now);
        if let Some(conn) = self.conns.get_mut(key) {
            let net = &mut engine.net;
            net.total_net_input_bytes += std::mem::take(&mut conn.bytes_in);
            net.total_net_output_bytes += std::mem::take(&mut conn.bytes_out);
        }
        if let Err(why) = result {
            self.close(engine, key, why);
        }
    }

    /// A CLUSTER command changed the slot table: save it before the reply leaves, and
    /// re-create the PUBLISH links for the current nodes (MEET, FORGET).
    fn cluster_changed(&mut self, engine: &Engine) {
        let cluster = engine.cluster();
        self.cluster_generation = cluster.generation();
        if let Some(file) = &mut self.nodes_file
            && let Err(e) = file.save(&cluster.to_conf())
        {
            log::error!("cluster: cannot save {}: {e}", file.path().display());
        }
        let peers = peer_list(cluster);
        if peers != self.bus_peers {
            self.bus = Bus::new(cluster, &self.bus_password);
            self.bus_peers = peers;
        }
    }

    fn serve_inner(&mut self, engine: &mut Engine, key: usize, now: u64) -> Result<(), Disconnect> {
        let mut budget = READ_BUDGET_PER_TURN;
        // The last write attempt found the send buffer full: writing again now would only
        // return WouldBlock.
        let mut socket_full = false;
        loop {
            if self.stop.is_some() {
                return Ok(()); // SHUTDOWN: nothing more runs
            }
            let batch = self.execute(engine, key, now);
            if engine.cluster().generation() != self.cluster_generation {
                self.cluster_changed(engine);
            }
            let conn = &mut self.conns[key];
            match batch {
                Batch::Shutdown(s) => {
                    self.shutdown(engine, key, s, now);
                    continue;
                }
                Batch::ClientList => {
                    self.reply_client_list(engine, key, now);
                    continue;
                }
                Batch::ClientKill(filter) => {
                    self.client_kill(engine, key, &filter);
                    continue;
                }
                Batch::Throttled => {
                    conn.flush().map_err(Disconnect::Io)?;
                    if conn.throttled() {
                        socket_full = true;
                        break; // resume on WRITABLE
                    }
                    continue;
                }
                Batch::Closing => break,
                Batch::Deliveries => {
                    self.route_deliveries(engine);
                    continue;
                }
                // A parked client is still read (into its query buffer, bounded), so a peer
                // that disconnects while blocked is noticed and its state freed.
                Batch::NeedInput | Batch::Blocked => {}
            }
            if conn.peer_closed {
                conn.closing = Some(CloseReason::PeerClosed);
                break;
            }
            if !conn.readable {
                break;
            }
            if budget == 0 {
                if !conn.queued {
                    conn.queued = true;
                    self.queued.push(key);
                }
                break;
            }
            let query_limit =
                usize::try_from(engine.config.client_query_buffer_limit).unwrap_or(usize::MAX);
            match conn.read(&mut self.tls_scratch, query_limit) {
                ReadOutcome::Data { n, more } => {
                    budget = budget.saturating_sub(n);
                    conn.readable = more || conn.hangup;
                }
                ReadOutcome::Drained => conn.readable = false,
                ReadOutcome::Eof => {
                    conn.readable = false;
                    conn.peer_closed = true;
                }
                ReadOutcome::QueryBufLimit => return Err(Disconnect::QueryBufLimit),
                ReadOutcome::Error(e) => return Err(Disconnect::Io(e)),
                ReadOutcome::Tls(e) => return Err(Disconnect::Tls(e)),
            }
        }

        if self.stop.is_some() {
            // Exiting (SHUTDOWN): Redis exits without sending what is left, as here.
            return Ok(());
        }
        let conn = &mut self.conns[key];
        if !socket_full {
            conn.flush().map_err(Disconnect::Io)?;
        }
        // The keychange feed bounds each subscriber's unsent output (a no-op for others).
        engine.set_pending_output(conn.client.id, conn.out_pending());
        if output_limit_exceeded(engine, conn, now) {
            return Err(Disconnect::OutputLimit);
        }
        let pending = conn.wants_write();
        if let Some(reason) = conn.closing
            && !pending
        {
            return Err(Disconnect::Done(reason));
        }
        if pending != conn.write_interest {
            let interest = if pending {
                Interest::READABLE | Interest::WRITABLE
            } else {
                Interest::READABLE
            };
            self.poll
                .registry()
                .reregister(&mut conn.stream, Token(key), interest)
                .map_err(Disconnect::Io)?;
            conn.write_interest = pending;
        }
        Ok(())
    }

    /// CLIENT LIST: one `client_info_line` per connection, ascending client id, each ending
    /// in "\n", as one verbatim string (Redis `clientsCommand` → `getAllClientsInfoString`).
    fn reply_client_list(&mut self, engine: &mut Engine, key: usize, now: u64) {
        let mut lines: Vec<(u64, String)> = self
            .conns
            .iter_mut()
            .map(|(k, c)| {
                // The caller's query buffer as its command found it (Redis trims it after the
                // command): `qbuf` counts the CLIENT LIST request itself.
                c.refresh_buffers(k == key);
                (c.client.id, engine.client_info_line(&c.client, now))
            })
            .collect();
        lines.sort_unstable_by_key(|&(id, _)| id);
        let mut text = String::with_capacity(lines.iter().map(|(_, l)| l.len() + 1).sum());
        for (_, line) in &lines {
            text.push_str(line);
            text.push('\n');
        }
        self.conns[key].reply_verbatim(text.as_bytes());
    }

    /// CLIENT KILL: closes every other connection the filter matches at once (their unsent
    /// output is dropped, as Redis `freeClient` does) and this one after its reply, then
    /// appends the reply (redis `clientCommand` "kill").
    fn client_kill(&mut self, engine: &mut Engine, key: usize, filter: &KillFilter) {
        let me = self.conns[key].client.id;
        let victims: Vec<usize> = self
            .conns
            .iter()
            .filter(|(_, c)| filter.matches(&c.client, me))
            // The fan-out's keychange feed links play the part of Redis's replica links:
            // `TYPE normal` spares them.
            .filter(|(_, c)| {
                filter.pubsub != Some(false) || !engine.is_feed_subscriber(c.client.id)
            })
            .map(|(k, _)| k)
            .collect();
        let mut close_me = false;
        for &k in &victims {
            if k == key {
                close_me = true;
            } else {
                self.close(engine, k, Disconnect::Done(CloseReason::Killed));
            }
        }
        let conn = &mut self.conns[key];
        conn.reply_client_kill(filter, victims.len());
        if close_me {
            conn.closing = Some(CloseReason::Killed);
        }
    }

    /// Appends the engine's queued deliveries to their connections' output, in order, and
    /// queues those connections so the next pass flushes them (and, for a client just
    /// unblocked, runs the requests it sent while parked). Deliveries for closed
    /// connections are dropped.
    fn route_deliveries(&mut self, engine: &mut Engine) {
        // While a script is busy its connection is out of `conns`: deliveries wait for it.
        if !engine.has_deliveries() || engine.busy.is_some() {
            return;
        }
        let mut deliveries = std::mem::take(&mut self.deliveries);
        engine.take_deliveries(&mut deliveries);
        for d in deliveries.drain(..) {
            if d.client_id == BUS_CLIENT_ID {
                // A PUBLISH for the other engines (engine-core `cmd::pubsub`, "Cluster-wide").
                self.bus
                    .send(self.poll.registry(), &d.bytes, host::now_us());
                continue;
            }
            let Some(&key) = self.ids.get(&d.client_id) else {
                continue;
            };
            let conn = &mut self.conns[key];
            if conn.closing == Some(CloseReason::OutputLimit) {
                continue;
            }
            conn.push_output(&d.bytes);
            if d.unblock {
                conn.blocked = false;
            }
            // The hard limit is checked as messages arrive, so a subscriber that never reads
            // costs at most its limit plus one message; its output is dropped now and the
            // connection closes on its next turn (never here: this may be the publisher's
            // own connection, being served by the caller).
            if hard_limit_exceeded(engine, conn) {
                conn.discard_output();
                conn.closing = Some(CloseReason::OutputLimit);
            }
            if !conn.queued {
                conn.queued = true;
                self.queued.push(key);
            }
        }
        self.deliveries = deliveries;
    }

    fn close(&mut self, engine: &mut Engine, key: usize, why: Disconnect) {
        let mut conn = self.conns.remove(key);
        self.ids.remove(&conn.client.id);
        engine.client_closed(conn.client.id);
        if let Some(tls) = &mut conn.tls
            && matches!(why, Disconnect::Done(_))
        {
            // A clean close: tell the peer (best effort, the socket is not waited for).
            tls.send_close_notify();
            tls.flush_alert(&mut conn.stream);
        }
        let _ = self.poll.registry().deregister(&mut conn.stream);
        match &why {
            Disconnect::Done(CloseReason::OutputLimit) | Disconnect::OutputLimit => warn!(
                "Client id={} addr={} closed for overcoming of output buffer limits.",
                conn.client.id, conn.client.addr
            ),
            Disconnect::Timeout => debug!(
                "Closing idle client id={} addr={} (timeout)",
                conn.client.id, conn.client.addr
            ),
            Disconnect::Tls(e) => debug!(
                "Client id={} addr={}: TLS error: {e}",
                conn.client.id, conn.client.addr
            ),
            Disconnect::QueryBufLimit => warn!(
                "Closing client id={} addr={} that reached max query buffer length ({} bytes)",
                conn.client.id,
                conn.client.addr,
                conn.in_pending()
            ),
            Disconnect::Io(e) => debug!("Client id={} closed: {e}", conn.client.id),
            Disconnect::Done(reason) => debug!("Client id={} closed: {reason:?}", conn.client.id),
        }
        engine.host.connected_clients = self.conns.len() as u64;
    }
}

/// A script past `busy-reply-threshold` lends the loop to the engine (redis
/// `processEventsWhileBlocked`): each call accepts, reads and runs what is ready now, without
/// waiting. Dispatch answers every command but the ALLOW_BUSY ones with `-BUSY …`, so only
/// AUTH, HELLO, SCRIPT/FUNCTION KILL, SHUTDOWN NOSAVE, MULTI/EXEC/DISCARD/WATCH/UNWATCH,
/// RESET and QUIT run. The script's own connection is out of `conns` meanwhile: its events
/// are kept for later (`busy_missed`). Timers, deliveries and signals wait for the script.
impl engine_core::script::BusyPoll for Net {
    fn serve(&mut self, engine: &mut Engine) {
        if self.stop.is_some() {
            return;
        }
        if !self.busy_swept {
            // Events this loop iteration already took from the poll but has not handled yet
            // will not come again (edge-triggered): visit every connection once. A read that
            // finds nothing costs one `WouldBlock`.
            self.busy_swept = true;
            let now = host::now_us();
            let keys: Vec<usize> = self.conns.iter().map(|(k, _)| k).collect();
            for key in keys {
                if let Some(conn) = self.conns.get_mut(key) {
                    conn.readable = true;
                    self.serve(engine, key, now);
                }
                if self.stop.is_some() {
                    return;
                }
            }
        }
        let mut events = self
            .busy_events
            .take()
            .unwrap_or_else(|| Events::with_capacity(EVENTS_CAPACITY));
        if self.poll.poll(&mut events, Some(Duration::ZERO)).is_ok() {
            let now = host::now_us();
            for event in events.iter() {
                if let Some(tls) = listen_set::kind_of(event.token()) {
                    self.accept(engine, now, tls);
                    continue;
                }
                match event.token() {
                    SIGNALS => {
                        if self.take_signal() {
                            self.stop = Some(Stop::Signal);
                        }
                    }
                    Token(key) => match self.bus.peer_of(Token(key)) {
                        Some(i) => self.bus.on_event(self.poll.registry(), i, event, now),
                        None if self.conns.is_taken(key) => {
                            let readable =
                                event.is_readable() || event.is_read_closed() || event.is_error();
                            let hangup = event.is_read_closed() || event.is_error();
                            self.busy_missed.push((key, readable, hangup));
                        }
                        None => self.on_conn_event(engine, key, event, now),
                    },
                }
            }
        }
        self.busy_events = Some(events);
    }
}

/// The `client-output-buffer-limit` class of a connection: pub/sub for a subscribed client
/// (Redis `getClientType`), normal otherwise. Keychange feed connections (the fan-out's
/// links, like Redis's replica links) are bounded by `feed-buffer-limit` instead, which
/// resyncs rather than closes, so no class applies to them.
/// The bus peers of `cluster` (host, port), to tell when MEET or FORGET changed them.
fn peer_list(cluster: &engine_core::cmd::cluster::Cluster) -> Vec<(Option<String>, u16)> {
    cluster
        .peers()
        .map(|(_, h, p)| (h.map(str::to_string), p))
        .collect()
}

fn output_class(engine: &Engine, conn: &Conn) -> engine_core::cmd::server::OutputLimit {
    let limits = &engine.config.client_output_buffer_limit;
    if conn.client.subs.count() > 0 {
        limits.pubsub
    } else if limits.normal == engine_core::cmd::server::OutputLimit::NONE
        || engine.is_feed_subscriber(conn.client.id)
    {
        engine_core::cmd::server::OutputLimit::NONE
    } else {
        limits.normal
    }
}

/// Whether the unsent output is at or over the hard limit of its class.
fn hard_limit_exceeded(engine: &Engine, conn: &Conn) -> bool {
    let limit = output_class(engine, conn);
    limit.hard != 0 && conn.out_pending() as u64 >= limit.hard
}

/// Whether the unsent output breaks its class's hard limit, or has stayed over the soft
/// limit for its seconds (Redis `checkClientOutputBufferLimits`).
fn output_limit_exceeded(engine: &Engine, conn: &mut Conn, now_us: u64) -> bool {
    let limit = output_class(engine, conn);
    let used = conn.out_pending() as u64;
    limit.exceeded(used, &mut conn.obuf_soft_since, now_us)
}
