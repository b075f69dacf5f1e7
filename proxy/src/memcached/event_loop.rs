//! The memcached port's single-threaded mio loop: accept, read and parse client input, send
//! each request's parts to the engines over this loop's own links, write replies in request
//! order.
//!
//! # One iteration
//!
//! 1. `poll` (at most 100 ms, 10 ms while a client is paused, so the shutdown flag and a
//!    delayed `flush_all` are seen promptly).
//! 2. Events: the listener (accept until `WouldBlock`), links (finish a connect, read,
//!    deliver replies to their client slots, or fail), clients (read until `WouldBlock`,
//!    then parse and plan every complete request).
//! 3. Paused clients are parsed again; a due `flush_all <delay>` is sent.
//! 4. Every link with new output is written once, then every client with new output.
//!
//! # Tokens
//!
//! Clients: slab index. Link `i`: `LINK_TOKEN_BASE + i`. Listener: `usize::MAX - 1`; TLS
//! listener: `usize::MAX - 2`.
//!
//! # TLS
//!
//! A client of the TLS listener is the same [`Conn`] with a [`TlsConn`] inside, driven like
//! the RESP side's (recached-net's driver): one socket read per readiness into the loop's
//! scratch buffer, decrypted into `tls_plain`, then the same swallow/append path as plain
//! bytes; replies go through `TlsConn::write`, WRITABLE interest stays on. A TLS error
//! (garbage, a plaintext client, a refused certificate) sends rustls' alert best effort and
//! closes that connection only. `quit` sends close_notify.
//!
//! # ACL
//!
//! With a `memcached_user` ([`super::acl::Gate`]), each parsed request is checked before it
//! is planned; a refused one is answered `CLIENT_ERROR NOPERM …` without reaching an engine.
//!
//! # Bounds
//!
//! A client's unparsed input holds at most one request: a value is at most `item_size_max`
//! (larger ones are refused from their command line and their bytes dropped as they arrive),
//! and a line without a newline is closed past 2048 bytes (1 MB for a multiget line). A
//! client is not parsed while it has more than `MAX_PENDING` replies outstanding or
//! `OUTPUT_HIGH_WATER` bytes unsent, and then not read either: its socket buffer fills and
//! TCP pushes back on it.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use recached_net::Slab;
use recached_net::tls::{PlainSink, SCRATCH_LEN, TlsConn, TlsRead};

use super::exec::{self, Ctx, Job, Render};
use super::parse::{self, Parsed, Request};
use super::scripts::{self, Shas};
use super::stats::{self, Counters, Shared, Totals};
use crate::backend::{Backend, CONNECT_TIMEOUT, Link};
use crate::client::Waiter;
use crate::follow::Follower;

mod follow;

const LISTENER: Token = Token(usize::MAX - 1);
const TLS_LISTENER: Token = Token(usize::MAX - 2);
const LINK_TOKEN_BASE: usize = usize::MAX / 2;
/// Stop parsing a client's requests while this many replies are outstanding.
const MAX_PENDING: usize = 4096;
/// Stop parsing a client's requests while this much output is unsent.
const OUTPUT_HIGH_WATER: usize = 16 << 20;
const MAX_POLL_WAIT: Duration = Duration::from_millis(100);
const READ_CHUNK: usize = 16 * 1024;
/// Unparsed input beyond a largest item at which reading stops until it is parsed (the
/// client is then read again on the next iteration).
const INPUT_SLACK: usize = 64 * 1024;
/// The waiter of requests the loop sends for nobody (a delayed `flush_all`).
const NOBODY: usize = usize::MAX;
const NOBODY_WAITER: Waiter = Waiter {
    token: NOBODY,
    client_id: 0,
    seq: 0,
    part: 0,
    hops: crate::client::Hops::NONE,
};

/// What the memcached port needs.
#[derive(Clone, Debug)]
pub struct Options {
    /// The plain listener; `None` = TLS only (`memcached_port 0` with a TLS port).
    pub listen: Option<SocketAddr>,
    /// The TLS listener (`[tls] memcached_port`, `--memcached-tls-port`) and its rustls
    /// configuration (the proxy's certificate settings).
    pub tls: Option<(SocketAddr, Arc<rustls::ServerConfig>)>,
    /// `memcached_user`: the ACL user every request runs as; `None` = no check (the
    /// default, for trusted networks).
    pub gate: Option<super::acl::Gate>,
    /// Where the loop publishes its [`Totals`] (the proxy's INFO `# Memcached`).
    pub totals: Shared,
    /// Instances as (`host:port`, address), in instance order.
    pub backends: Vec<(String, SocketAddr)>,
    /// `AUTH` with the internal credential, first on every engine connection.
    pub login: Option<Vec<u8>>,
    /// memcached's `item_size_max` (1 MB).
    pub item_max: usize,
    pub maxclients: usize,
}

/// One request's reply slot.
struct Slot {
    replies: Vec<Option<Vec<u8>>>,
    remaining: usize,
    render: Render,
    noreply: bool,
    close: bool,
}

struct Conn {
    stream: TcpStream,
    id: u64,
    /// The peer, for ACL LOG.
    addr: String,
    /// TLS state, for a client of the TLS listener.
    tls: Option<Box<TlsConn>>,
    /// Unparsed input: `input[start..]`.
    input: Vec<u8>,
    start: usize,
    /// Bytes of a refused data block still to drop as they arrive.
    swallow: usize,
    out: Vec<u8>,
    out_pos: usize,
    pending: VecDeque<Slot>,
    /// Sequence number of `pending[0]`.
    base_seq: u64,
    /// No more input is read; closed once `out` is written.
    closing: bool,
    /// The peer closed its side (or an I/O error): closed at the end of the iteration.
    gone: bool,
    /// An event said the peer hung up (EPOLLRDHUP): read on to the end of file, past short
    /// reads, since no further event will come for it.
    hup: bool,
    /// The end of file was read: no more reads; closing once the input is answered.
    eof: bool,
    dirty: bool,
}

impl Conn {
    fn unsent(&self) -> usize {
        self.out.len() - self.out_pos
    }

    /// Moves the finished slots at the front to `out`.
    fn drain_ready(&mut self, counters: &mut Counters, totals: &mut Totals) {
        while let Some(front) = self.pending.front() {
            if front.remaining > 0 {
                break;
            }
            let slot = self.pending.pop_front().expect("front exists");
            self.base_seq += 1;
            let raw: Vec<Vec<u8>> = slot
                .replies
                .into_iter()
                .map(Option::unwrap_or_default)
                .collect();
            if matches!(slot.render, Render::Stats) {
                counters.now = unix_ms() / 1000;
            }
            let (hits, misses) = (counters.get_hits, counters.get_misses);
            let reply = exec::render(&slot.render, &raw, counters);
            totals.get_hits += counters.get_hits.saturating_sub(hits);
            totals.get_misses += counters.get_misses.saturating_sub(misses);
            totals.count_reply(&reply);
            if !slot.noreply {
                self.out.extend_from_slice(&reply);
            }
            if slot.close {
                self.closing = true;
                self.pending.clear();
                break;
            }
        }
    }
}

pub struct Loop {
    poll: Poll,
    listener: Option<TcpListener>,
    tls_listener: Option<(TcpListener, Arc<rustls::ServerConfig>)>,
    /// Ciphertext of one TLS socket read (shared by every TLS client; emptied before reuse).
    tls_scratch: Vec<u8>,
    /// Plaintext of one TLS socket read, before the swallow/append path.
    tls_plain: Vec<u8>,
    totals: Totals,
    /// `totals` changed since it was last published.
    totals_dirty: bool,
    conns: Slab<Conn>,
    /// Link i = instance i: the configured ones, then those learned at run time (`follow`).
    links: Vec<Backend>,
    /// The slot table and the redirects being followed.
    follow: follow::Follow,
    opts: Options,
    shas: Shas,
    counters: Counters,
    next_cas: u64,
    next_id: u64,
    flush_at: Option<u64>,
    dirty_conns: Vec<usize>,
    dirty_links: Vec<usize>,
    paused: Vec<usize>,
    shutdown: Arc<AtomicBool>,
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl Loop {
    /// Binds the port (errors now, not in the thread).
    pub fn new(opts: Options, shutdown: Arc<AtomicBool>) -> io::Result<Loop> {
        let poll = Poll::new()?;
        let (listener, tls_listener) = recached_net::listen::bind_role(
            poll.registry(),
            opts.listen,
            opts.tls.clone(),
            (LISTENER, TLS_LISTENER),
        )?;
        if listener.is_none() && tls_listener.is_none() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the memcached port needs a port or a TLS port",
            ));
        }
        let tls_scratch = if tls_listener.is_some() {
            vec![0; SCRATCH_LEN]
        } else {
            Vec::new()
        };
        let preamble = scripts::load_requests();
        let follow = follow::Follow::new(opts.backends.len());
        let links = opts
            .backends
            .iter()
            .enumerate()
            .map(|(i, (name, addr))| {
                let mut b = Backend::new(i, name.clone(), *addr);
                b.login = opts.login.clone();
                b.preamble = preamble.clone();
                b
            })
            .collect();
        let now = unix_ms();
        let counters = Counters {
            started: now / 1000,
            threads: 1,
            max_connections: opts.maxclients as u64,
            ..Counters::default()
        };
        Ok(Loop {
            poll,
            listener,
            tls_listener,
            tls_scratch,
            tls_plain: Vec::new(),
            totals: Totals::default(),
            totals_dirty: true,
            conns: Slab::new(),
            links,
            follow,
            opts,
            shas: Shas::default(),
            counters,
            // CAS uniques keep growing across restarts: µs since the epoch at start.
            next_cas: now.saturating_mul(1000).max(1),
            next_id: 1,
            flush_at: None,
            dirty_conns: Vec::new(),
            dirty_links: Vec::new(),
            paused: Vec::new(),
            shutdown,
        })
    }

    /// The plain listener's address, if there is one.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// The TLS listener's address, if there is one.
    pub fn tls_addr(&self) -> Option<SocketAddr> {
        self.tls_listener
            .as_ref()
            .and_then(|(l, _)| l.local_addr().ok())
    }

    /// Publishes [`Totals`] if they changed (once per iteration).
    fn publish(&mut self) {
        if self.totals_dirty {
            self.totals_dirty = false;
            self.totals.connected = self.conns.len() as u64;
            if let Ok(mut shared) = self.opts.totals.lock() {
                shared.clone_from(&self.totals);
            }
        }
    }

    /// Runs until the shutdown flag is set.
    pub fn run(&mut self) -> io::Result<()> {
        let now = Instant::now();
        for i in 0..self.links.len() {
            self.links[i].connect(self.poll.registry(), Token(LINK_TOKEN_BASE + i), now, true);
        }
        let mut events = Events::with_capacity(1024);
        while !self.shutdown.load(Ordering::Relaxed) {
            let timeout = self.poll_timeout(Instant::now());
            match self.poll.poll(&mut events, Some(timeout)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            let now = Instant::now();
            for event in events.iter() {
                self.totals_dirty = true;
                match event.token() {
                    LISTENER => self.accept(false),
                    TLS_LISTENER => self.accept(true),
                    Token(t) if t >= LINK_TOKEN_BASE => {
                        let i = t - LINK_TOKEN_BASE;
                        if i < self.links.len() {
                            self.link_event(i, event.is_writable(), now);
                        }
                    }
                    Token(t) => {
                        if event.is_read_closed()
                            && let Some(c) = self.conns.get_mut(t)
                        {
                            c.hup = true;
                        }
                        if event.is_readable() || event.is_read_closed() || event.is_error() {
                            self.client_readable(t);
                        }
                        if event.is_writable() {
                            self.flush_conn(t);
                        }
                    }
                }
            }
            for t in std::mem::take(&mut self.paused) {
                self.client_readable(t);
            }
            self.delayed_flush();
            self.follow_tick(now);
            self.flush_all();
            self.timers(now);
            self.publish();
        }
        Ok(())
    }

    fn poll_timeout(&self, now: Instant) -> Duration {
        let mut wait = MAX_POLL_WAIT;
        for b in &self.links {
            let due = match b.link {
                // A link of an instance that owns no slot (retired) is not retried.
                Link::Down { .. } if !self.follow.serves(b.index) => continue,
                Link::Down { retry_at } => retry_at,
                Link::Connecting { since, .. } => since + CONNECT_TIMEOUT,
                Link::Up => continue,
            };
            wait = wait.min(due.saturating_duration_since(now));
        }
        if !self.paused.is_empty() {
            wait = wait.min(Duration::from_millis(10));
        }
        if let Some(due) = self.follow.moves.due() {
            wait = wait.min(due.saturating_duration_since(now));
        }
        wait
    }

    fn accept(&mut self, tls: bool) {
        loop {
            let listener = if tls {
                self.tls_listener.as_ref().map(|(l, _)| l)
            } else {
                self.listener.as_ref()
            };
            let Some(listener) = listener else {
                return;
            };
            match listener.accept() {
                Ok((mut stream, peer)) => {
                    self.totals.connections += 1;
                    if self.conns.len() >= self.opts.maxclients {
                        // memcached: "ERROR Too many open connections", then close (a TLS
                        // client cannot be told in plaintext: just closed).
                        if !tls {
                            let _ = stream.write(b"ERROR Too many open connections\r\n");
                        }
                        self.counters.rejected_connections += 1;
                        continue;
                    }
                    let tls_conn = match &self.tls_listener {
                        Some((_, cfg)) if tls => match TlsConn::new(cfg) {
                            Ok(t) => Some(Box::new(t)),
                            Err(e) => {
                                log::warn!("memcached: TLS connection setup: {e}");
                                continue;
                            }
                        },
                        _ => None,
                    };
                    let _ = stream.set_nodelay(true);
                    let id = self.next_id;
                    self.next_id += 1;
                    let token = self.conns.insert(Conn {
                        stream,
                        id,
                        addr: peer.to_string(),
                        tls: tls_conn,
                        input: Vec::new(),
                        start: 0,
                        swallow: 0,
                        out: Vec::new(),
                        out_pos: 0,
                        pending: VecDeque::new(),
                        base_seq: 0,
                        closing: false,
                        gone: false,
                        hup: false,
                        eof: false,
                        dirty: false,
                    });
                    let c = self.conns.get_mut(token).expect("just inserted");
                    if let Err(e) = self.poll.registry().register(
                        &mut c.stream,
                        Token(token),
                        Interest::READABLE | Interest::WRITABLE,
                    ) {
                        log::warn!("memcached: register client: {e}");
                        self.conns.try_remove(token);
                        continue;
                    }
                    self.counters.curr_connections += 1;
                    self.counters.total_connections += 1;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    log::warn!("memcached: accept: {e}");
                    break;
                }
            }
        }
    }

    // ----- clients -----

    fn client_readable(&mut self, t: usize) {
        let Some(c) = self.conns.get_mut(t) else {
            return;
        };
        if c.closing || c.gone {
            return;
        }
        if c.eof {
            // Nothing more to read; input left by a pause is still answered.
            self.process(t);
            return;
        }
        if c.pending.len() > MAX_PENDING || c.unsent() > OUTPUT_HIGH_WATER {
            // Not read now: resumed by `process` once it catches up.
            self.paused.push(t);
            return;
        }
        if c.tls.is_some() {
            self.tls_readable(t);
            self.process(t);
            return;
        }
        let mut chunk = [0u8; READ_CHUNK];
        loop {
            match c.stream.read(&mut chunk) {
                Ok(0) => {
                    // The peer's end of file: what it sent is still answered, as memcached
                    // does, then the connection closes (`process`).
                    c.eof = true;
                    break;
                }
                Ok(n) => {
                    self.counters.bytes_read += n as u64;
                    self.totals.bytes_read += n as u64;
                    if append_input(c, &chunk[..n], self.opts.item_max) {
                        // Parse before reading more; read again next iteration.
                        self.paused.push(t);
                        break;
                    }
                    if n < chunk.len() && !c.hup {
                        // A short read drained the socket: edge-triggered epoll reports new
                        // data (or a hang-up) with a new event, so the read that would only
                        // say `WouldBlock` is saved (one system call per request).
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    c.gone = true;
                    break;
                }
            }
        }
        self.process(t);
    }

    /// Reads a TLS client until its socket is drained (or its input is full enough to parse
    /// first): each socket read is decrypted into `tls_plain`, then appended like plain bytes.
    fn tls_readable(&mut self, t: usize) {
        let Loop {
            conns,
            tls_scratch,
            tls_plain,
            counters,
            totals,
            paused,
            dirty_conns,
            opts,
            ..
        } = self;
        let Some(c) = conns.get_mut(t) else {
            return;
        };
        loop {
            let Some(tls) = c.tls.as_mut() else {
                return;
            };
            tls_plain.clear();
            let mut sink = VecSink {
                buf: tls_plain,
                len: 0,
            };
            let r = tls.read(&mut c.stream, tls_scratch, &mut sink);
            let len = sink.len;
            tls_plain.truncate(len);
            let wants_write = tls.wants_write();
            let more = match r {
                TlsRead::Data { more, .. } => more,
                TlsRead::Drained => false,
                TlsRead::Eof => {
                    c.gone = true;
                    false
                }
                // `VecSink` always has room.
                TlsRead::Full => false,
                TlsRead::Tls(e) => {
                    log::debug!("memcached: TLS client {}: {e}", c.addr);
                    tls.flush_alert(&mut c.stream);
                    totals.tls_errors += 1;
                    c.gone = true;
                    false
                }
                TlsRead::Io(_) => {
                    c.gone = true;
                    false
                }
            };
            if wants_write && !c.dirty {
                // The handshake (or an alert) has bytes for the peer.
                c.dirty = true;
                dirty_conns.push(t);
            }
            let n = tls_plain.len() as u64;
            counters.bytes_read += n;
            totals.bytes_read += n;
            if append_input(c, tls_plain, opts.item_max) {
                paused.push(t);
                return;
            }
            if !more || c.gone {
                return;
            }
        }
    }

    /// Parses and plans every complete request of client `t` (within the bounds).
    fn process(&mut self, t: usize) {
        let now_ms = unix_ms();
        let Loop {
            conns,
            links,
            follow,
            opts,
            shas,
            counters,
            next_cas,
            flush_at,
            dirty_links,
            dirty_conns,
            paused,
            totals,
            ..
        } = self;
        let Some(c) = conns.get_mut(t) else {
            return;
        };
        loop {
            if c.closing {
                break;
            }
            if c.pending.len() > MAX_PENDING || c.unsent() > OUTPUT_HIGH_WATER {
                paused.push(t);
                break;
            }
            if c.swallow > 0 {
                let drop = c.swallow.min(c.input.len() - c.start);
                c.swallow -= drop;
                c.start += drop;
            }
            let parsed = parse::parse(&c.input[c.start..], opts.item_max);
            let (req, used) = match parsed {
                Parsed::Incomplete => {
                    if c.eof {
                        c.closing = true;
                    }
                    break;
                }
                Parsed::Close => {
                    c.closing = true;
                    break;
                }
                Parsed::Ready(req, used) => (req, used),
            };
            c.start += used;
            totals.requests += 1;
            if let Some(i) = stats::command_index(&req) {
                totals.commands[i] += 1;
            }
            let mut req = req;
            let mut refused = None;
            if let Some(gate) = opts.gate.as_mut()
                && let Some(line) = gate.refuse(&req, &c.addr, c.id, now_ms)
            {
                totals.acl_denied += 1;
                match &mut req {
                    // The reply stands; only the delete memcached would do is skipped.
                    Request::Reject { delete, .. } => *delete = None,
                    _ => refused = Some(line),
                }
            }
            if let Request::Reject { swallow, reply, .. } = &req {
                c.swallow = *swallow;
                if *reply == parse::TOO_LARGE {
                    counters.store_too_large += 1;
                }
            }
            if matches!(req, Request::Meta(_)) {
                counters.cmd_meta += 1;
            }
            let mut ctx = Ctx {
                slots: &follow.slots,
                now_ms,
                next_cas,
                shas,
                counters,
                flush_at,
            };
            let job = match refused {
                None => exec::plan(req, &mut ctx),
                Some(line) => Job::local(format!("{line}\r\n").as_bytes(), noreply_of(&req)),
            };
            totals.backend_errors += submit(c, t, job, links, dirty_links);
            c.drain_ready(counters, totals);
        }
        // Compact the input buffer.
        if c.start == c.input.len() {
            c.input.clear();
            c.start = 0;
            if c.input.capacity() > (1 << 20) {
                c.input = Vec::new();
            }
        } else if c.start > c.input.len() / 2 {
            c.input.drain(..c.start);
            c.start = 0;
        }
        if !c.dirty && (c.unsent() > 0 || c.closing || c.gone) {
            c.dirty = true;
            dirty_conns.push(t);
        }
    }

    fn flush_conn(&mut self, t: usize) {
        let Some(c) = self.conns.get_mut(t) else {
            return;
        };
        let finished = c.closing && c.unsent() == 0 && c.pending.is_empty() && !c.gone;
        if let Some(tls) = c.tls.as_mut() {
            if finished {
                // `quit` (or input memcached closes on): a clean TLS close.
                tls.send_close_notify();
                c.gone = true;
            }
            match tls.write(&mut c.stream, &c.out[c.out_pos..]) {
                Ok((n, _full)) => {
                    c.out_pos += n;
                    self.counters.bytes_written += n as u64;
                    self.totals.bytes_written += n as u64;
                }
                Err(_) => c.gone = true,
            }
            if c.gone {
                // Whatever rustls still holds (close_notify, an alert) goes best effort.
                tls.flush_alert(&mut c.stream);
            }
        } else {
            while c.out_pos < c.out.len() {
                match c.stream.write(&c.out[c.out_pos..]) {
                    Ok(0) => {
                        c.gone = true;
                        break;
                    }
                    Ok(n) => {
                        c.out_pos += n;
                        self.counters.bytes_written += n as u64;
                        self.totals.bytes_written += n as u64;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => {
                        c.gone = true;
                        break;
                    }
                }
            }
        }
        if c.out_pos == c.out.len() {
            c.out.clear();
            c.out_pos = 0;
            if c.out.capacity() > (1 << 20) {
                c.out = Vec::new();
            }
        }
        let done = c.gone || (c.closing && c.unsent() == 0 && c.pending.is_empty());
        if done {
            self.close(t);
        }
    }

    fn close(&mut self, t: usize) {
        if let Some(mut c) = self.conns.try_remove(t) {
            let _ = self.poll.registry().deregister(&mut c.stream);
            self.counters.curr_connections = self.counters.curr_connections.saturating_sub(1);
        }
    }

    // ----- links -----

    fn link_event(&mut self, i: usize, writable: bool, now: Instant) {
        if let Link::Connecting { .. } = self.links[i].link {
            match self.links[i].finish_connect() {
                Ok(true) => {
                    log::info!("memcached: instance {} ({}) is up", i, self.links[i].name);
                    self.mark_link(i);
                    self.refresh_if_wanted(now);
                }
                Ok(false) => return,
                Err(e) => {
                    self.fail_link(i, &format!("connect: {e}"), now);
                    return;
                }
            }
        }
        if self.links[i].link != Link::Up {
            return;
        }
        match self.links[i].read() {
            Ok(true) => {}
            Ok(false) => {
                self.deliver_from(i, now);
                self.fail_link(i, "connection closed by the instance", now);
                return;
            }
            Err(e) => {
                self.fail_link(i, &format!("read: {e}"), now);
                return;
            }
        }
        self.deliver_from(i, now);
        if writable && self.links[i].unsent() > 0 {
            self.mark_link(i);
        }
    }

    fn fail_link(&mut self, i: usize, why: &str, now: Instant) {
        log::warn!(
            "memcached: instance {i} ({}) is unavailable: {why}",
            self.links[i].name
        );
        let waiters = self.links[i].fail(self.poll.registry(), now);
        self.follow.moves.link_failed(&waiters);
        let error = self.links[i].unavailable.clone();
        for w in waiters {
            if w.token != NOBODY {
                self.totals.backend_errors += 1;
            }
            self.answer(w, &error);
        }
    }

    fn mark_link(&mut self, i: usize) {
        if !self.links[i].dirty {
            self.links[i].dirty = true;
            self.dirty_links.push(i);
        }
    }

    fn delayed_flush(&mut self) {
        if let Some(at) = self.flush_at
            && unix_ms() >= at
        {
            self.flush_at = None;
            for part in exec::flush_parts(&self.follow.slots) {
                let b = &mut self.links[part.instance];
                if b.accepts() {
                    b.send(&part.request, NOBODY_WAITER);
                    if !b.dirty {
                        b.dirty = true;
                        self.dirty_links.push(part.instance);
                    }
                }
            }
        }
    }

    fn flush_all(&mut self) {
        for i in std::mem::take(&mut self.dirty_links) {
            self.links[i].dirty = false;
            if let Err(e) = self.links[i].flush() {
                self.fail_link(i, &format!("write: {e}"), Instant::now());
            }
        }
        for t in std::mem::take(&mut self.dirty_conns) {
            if let Some(c) = self.conns.get_mut(t) {
                c.dirty = false;
            }
            self.flush_conn(t);
        }
    }

    fn timers(&mut self, now: Instant) {
        for i in 0..self.links.len() {
            match self.links[i].link {
                Link::Down { retry_at } if retry_at <= now && self.follow.serves(i) => {
                    let token = Token(LINK_TOKEN_BASE + i);
                    self.links[i].connect(self.poll.registry(), token, now, false);
                }
                Link::Connecting { since, .. } if now.duration_since(since) >= CONNECT_TIMEOUT => {
                    self.fail_link(i, "connect timed out", now);
                }
                _ => {}
            }
        }
    }
}

/// Sends `job`'s parts (an instance that is down answers its error at once) and queues its
/// slot on client `c` (token `t`).
fn submit(
    c: &mut Conn,
    t: usize,
    job: Job,
    links: &mut [Backend],
    dirty_links: &mut Vec<usize>,
) -> u64 {
    let mut unavailable = 0;
    let seq = c.base_seq + c.pending.len() as u64;
    let mut slot = Slot {
        replies: (0..job.parts.len()).map(|_| None).collect(),
        remaining: job.parts.len(),
        render: job.render,
        noreply: job.noreply,
        close: job.close,
    };
    for (part, p) in job.parts.into_iter().enumerate() {
        let b = &mut links[p.instance];
        if b.accepts() {
            b.send(
                &p.request,
                Waiter {
                    token: t,
                    client_id: c.id,
                    seq,
                    part: part as u32,
                    hops: crate::client::Hops::NONE,
                },
            );
            if !b.dirty {
                b.dirty = true;
                dirty_links.push(p.instance);
            }
        } else {
            slot.replies[part] = Some(b.unavailable.clone());
            slot.remaining -= 1;
            unavailable += 1;
        }
    }
    c.pending.push_back(slot);
    unavailable
}

/// Whether `req` asked for no reply (a refusal is then silent too, as memcached's errors).
fn noreply_of(req: &Request) -> bool {
    match req {
        Request::Store { noreply, .. }
        | Request::Touch { noreply, .. }
        | Request::Arith { noreply, .. }
        | Request::Delete { noreply, .. }
        | Request::FlushAll { noreply, .. }
        | Request::Verbosity { noreply }
        | Request::Reject { noreply, .. } => *noreply,
        // Meta quiet mode (`q`) hides results, never errors.
        _ => false,
    }
}

/// Hands one engine reply to its client slot.
fn deliver(
    conns: &mut Slab<Conn>,
    counters: &mut Counters,
    totals: &mut Totals,
    dirty_conns: &mut Vec<usize>,
    w: Waiter,
    reply: &[u8],
) {
    if w.token == NOBODY {
        return;
    }
    let Some(c) = conns.get_mut(w.token) else {
        return;
    };
    if c.id != w.client_id {
        return;
    }
    let Some(idx) = w.seq.checked_sub(c.base_seq) else {
        return;
    };
    let Some(slot) = c.pending.get_mut(idx as usize) else {
        return;
    };
    if let Some(r @ None) = slot.replies.get_mut(w.part as usize) {
        *r = Some(reply.to_vec());
        slot.remaining -= 1;
    }
    if idx == 0 {
        c.drain_ready(counters, totals);
        if !c.dirty {
            c.dirty = true;
            dirty_conns.push(w.token);
        }
    }
}

/// Appends newly read bytes to `c`'s input, dropping what a refused data block still owes
/// (`swallow`) as it arrives. True: the input is full enough to be parsed before more is read.
fn append_input(c: &mut Conn, data: &[u8], item_max: usize) -> bool {
    let mut data = data;
    if c.swallow > 0 {
        let drop = c.swallow.min(data.len());
        c.swallow -= drop;
        data = &data[drop..];
    }
    c.input.extend_from_slice(data);
    c.input.len() - c.start > item_max + INPUT_SLACK
}

/// The plaintext of one TLS read, into a reusable vector (`space` grows it, `len` is what was
/// filled; the caller truncates to it).
struct VecSink<'a> {
    buf: &'a mut Vec<u8>,
    len: usize,
}

impl PlainSink for VecSink<'_> {
    fn space(&mut self) -> Option<&mut [u8]> {
        if self.buf.len() < self.len + READ_CHUNK {
            self.buf.resize(self.len + READ_CHUNK, 0);
        }
        Some(&mut self.buf[self.len..])
    }

    fn filled(&mut self, n: usize) {
        self.len += n;
    }
}
