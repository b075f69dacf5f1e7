//! The proxy's single-threaded mio loop.
//!
//! # One iteration
//!
//! 1. `poll` (timeout: the next backend retry / connect deadline, at most 100 ms so a
//!    SIGTERM/SIGINT flag is seen promptly).
//! 2. Events, in order: the listener (accept until `WouldBlock`), backends (finish a connect,
//!    read and deliver replies to client slots, or fail the link), clients (read, parse every
//!    complete request, route it, append it to backend output buffers).
//! 3. Clients paused by a bound that has cleared are resumed.
//! 4. Every backend with new output is written once; then every client with new output is
//!    written once (so a batch of pipelined requests costs one write per backend and one per
//!    client).
//! 5. Timers: due reconnects, connect timeouts. Finished clients are closed.
//!
//! Sockets are registered once for READABLE | WRITABLE (edge-triggered): a write that does
//! not finish simply waits for the next WRITABLE edge, with no re-registration. Reads go on
//! until `WouldBlock` or a short read (see `Backend::read`).
//!
//! # Tokens
//!
//! Clients: slab index (`< BACKEND_TOKEN_BASE`). Backend `i`: `BACKEND_TOKEN_BASE + i`.
//! Listener: `usize::MAX - 1`.

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mio::net::TcpListener;
use mio::{Events, Interest, Poll, Token};
use resp::{Limits, RequestParser};

use crate::backend::{Backend, CONNECT_TIMEOUT, Link};
use crate::client::{Client, Replies, Waiter};
use crate::route::{self, Args, Fleet, Plan};

const LISTENER: Token = Token(usize::MAX - 1);
const BACKEND_TOKEN_BASE: usize = usize::MAX / 2;

/// Most clients served at once; more are told so and closed (Redis `maxclients` default).
const MAX_CLIENTS: usize = 10_000;
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

/// Clients by token; a vacant entry's index is reused.
struct Slab<T> {
    entries: Vec<Option<T>>,
    free: Vec<usize>,
    len: usize,
}

impl<T> Slab<T> {
    fn new() -> Self {
        Slab {
            entries: Vec::new(),
            free: Vec::new(),
            len: 0,
        }
    }
    fn insert(&mut self, v: T) -> usize {
        self.len += 1;
        match self.free.pop() {
            Some(i) => {
                self.entries[i] = Some(v);
                i
            }
            None => {
                self.entries.push(Some(v));
                self.entries.len() - 1
            }
        }
    }
    fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        self.entries.get_mut(i).and_then(|e| e.as_mut())
    }
    fn remove(&mut self, i: usize) -> Option<T> {
        let v = self.entries.get_mut(i)?.take()?;
        self.free.push(i);
        self.len -= 1;
        Some(v)
    }
}

pub struct Proxy {
    poll: Poll,
    listener: TcpListener,
    clients: Slab<Client>,
    backends: Vec<Backend>,
    fleet: Fleet,
    next_client_id: u64,
    /// Clients / backends with output to write at the end of this iteration.
    dirty_clients: Vec<usize>,
    dirty_backends: Vec<usize>,
    /// Clients whose input is parked behind a bound.
    paused: Vec<usize>,
    /// Clients to close at the end of this iteration.
    to_close: Vec<usize>,
    shutdown: Arc<AtomicBool>,
}

impl Proxy {
    pub fn new(
        listen: SocketAddr,
        backends: Vec<(String, SocketAddr)>,
        shutdown: Arc<AtomicBool>,
    ) -> io::Result<Self> {
        let poll = Poll::new()?;
        let mut listener = TcpListener::bind(listen)?;
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)?;
        let port = listener.local_addr()?.port();
        let fleet = Fleet::new(backends.iter().map(|(n, _)| n.clone()).collect(), port);
        let backends = backends
            .into_iter()
            .enumerate()
            .map(|(i, (name, addr))| Backend::new(i, name, addr))
            .collect();
        Ok(Proxy {
            poll,
            listener,
            clients: Slab::new(),
            backends,
            fleet,
            next_client_id: 1,
            dirty_clients: Vec::new(),
            dirty_backends: Vec::new(),
            paused: Vec::new(),
            to_close: Vec::new(),
            shutdown,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)))
    }

    /// Runs until the shutdown flag is set.
    pub fn run(&mut self) -> io::Result<()> {
        let now = Instant::now();
        for i in 0..self.backends.len() {
            self.backends[i].connect(
                self.poll.registry(),
                Token(BACKEND_TOKEN_BASE + i),
                now,
                true,
            );
        }
        let mut events = Events::with_capacity(1024);
        while !self.shutdown.load(Ordering::Relaxed) {
            let timeout = self.poll_timeout(Instant::now());
            match self.poll.poll(&mut events, Some(timeout)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            for event in events.iter() {
                match event.token() {
                    LISTENER => self.accept(),
                    Token(t) if t >= BACKEND_TOKEN_BASE => {
                        let i = t - BACKEND_TOKEN_BASE;
                        if i < self.backends.len() {
                            self.backend_event(i, event.is_writable());
                        }
                    }
                    Token(t) => {
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
            self.flush_all();
            self.timers(Instant::now());
            self.close_finished();
        }
        log::info!("proxy: shutting down");
        Ok(())
    }

    fn poll_timeout(&self, now: Instant) -> Duration {
        let mut wait = MAX_POLL_WAIT;
        for b in &self.backends {
            let due = match b.link {
                Link::Down { retry_at } => retry_at,
                Link::Connecting { since, .. } => since + CONNECT_TIMEOUT,
                Link::Up => continue,
            };
            wait = wait.min(due.saturating_duration_since(now));
        }
        if !self.paused.is_empty() {
            wait = wait.min(Duration::from_millis(10));
        }
        wait
    }

    fn accept(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((mut stream, _peer)) => {
                    if self.clients.len >= MAX_CLIENTS {
                        let _ = stream.write(b"-ERR max number of clients reached\r\n");
                        continue;
                    }
                    let _ = stream.set_nodelay(true);
                    let id = self.next_client_id;
                    self.next_client_id += 1;
                    let client = Client::new(stream, id, RequestParser::new(Limits::default()));
                    let token = self.clients.insert(client);
                    let c = self.clients.get_mut(token).expect("just inserted");
                    if let Err(e) = self.poll.registry().register(
                        &mut c.stream,
                        Token(token),
                        Interest::READABLE | Interest::WRITABLE,
                    ) {
                        log::warn!("proxy: register client: {e}");
                        self.clients.remove(token);
                        continue;
                    }
                    self.fleet.clients = self.clients.len;
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
        let now = Instant::now();
        if let Link::Connecting { .. } = self.backends[i].link {
            match self.backends[i].finish_connect() {
                Ok(true) => {
                    log::info!("instance {i} ({}) is up", self.backends[i].name);
                    self.fleet.up[i] = true;
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
            ..
        } = self;
        let result = backends[i].deliver_replies(|w, reply| {
            deliver(clients, dirty_clients, w, reply);
        });
        if let Err(e) = result {
            self.fail_backend(i, &format!("bad reply: {e}"), now);
        }
    }

    fn fail_backend(&mut self, i: usize, why: &str, now: Instant) {
        let b = &mut self.backends[i];
        if b.link == Link::Up || self.fleet.up[i] {
            log::warn!("instance {i} ({}) is unavailable: {why}", b.name);
        } else {
            log::debug!("instance {i} ({}): {why}", b.name);
        }
        self.fleet.up[i] = false;
        let waiters = b.fail(self.poll.registry(), now);
        let error = b.unavailable.clone();
        for w in waiters {
            deliver(&mut self.clients, &mut self.dirty_clients, w, &error);
        }
    }

    fn mark_backend(&mut self, i: usize) {
        if !self.backends[i].dirty {
            self.backends[i].dirty = true;
            self.dirty_backends.push(i);
        }
    }

    fn timers(&mut self, now: Instant) {
        for i in 0..self.backends.len() {
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
    }

    // ----- clients -----

    /// Reads and handles a client's input until the socket is drained or a bound is hit.
    fn client_readable(&mut self, token: usize) {
        loop {
            self.process_client(token);
            let Some(c) = self.clients.get_mut(token) else {
                return;
            };
            if c.paused || c.replies.closing || c.read_closed {
                break;
            }
            c.reserve_read();
            let room = c.rbuf.len() - c.rend;
            match c.stream.read(&mut c.rbuf[c.rend..]) {
                Ok(0) => {
                    c.read_closed = true;
                }
                Ok(n) => {
                    c.rend += n;
                    if n < room {
                        // Short read: the socket is drained (see Backend::read).
                        self.process_client(token);
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    log::debug!("client {token}: read: {e}");
                    self.to_close.push(token);
                    return;
                }
            }
        }
        if let Some(c) = self.clients.get_mut(token)
            && c.read_closed
            && c.idle()
        {
            self.to_close.push(token);
        }
    }

    /// Parses and routes every complete request in the client's read buffer, within bounds.
    fn process_client(&mut self, token: usize) {
        let congested = self
            .backends
            .iter()
            .any(|b| b.unsent() > BACKEND_HIGH_WATER);
        let Proxy {
            clients,
            backends,
            fleet,
            dirty_backends,
            dirty_clients,
            paused,
            ..
        } = self;
        let Some(c) = clients.get_mut(token) else {
            return;
        };
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
            ..
        } = c;
        let out_before = replies.unsent();
        loop {
            if *rstart == *rend {
                break;
            }
            if replies.pending_len() >= MAX_PENDING
                || replies.unsent() >= OUTPUT_HIGH_WATER
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
                    replies.push_local(&reply, true);
                    *rstart = *rend;
                    *read_closed = true;
                    break;
                }
            };
            if parser.argc() > 0 {
                let raw = &buf[..consumed];
                let args = ParsedArgs {
                    parser: &*parser,
                    buf,
                };
                let plan = route::plan(&args, session, fleet);
                // Inline requests are re-encoded: backends always get multibulk.
                let encoded;
                let raw: &[u8] = if raw.first() == Some(&b'*') {
                    raw
                } else {
                    encoded = encode_args(&args);
                    &encoded
                };
                let flow = execute(
                    plan,
                    raw,
                    *id,
                    token,
                    replies,
                    backends,
                    fleet,
                    dirty_backends,
                );
                if flow == Flow::StopReading {
                    *rstart = *rend;
                    *read_closed = true;
                    break;
                }
            }
            *rstart += consumed;
        }
        if replies.unsent() != out_before && !*dirty {
            *dirty = true;
            dirty_clients.push(token);
        }
    }

    fn resume_paused(&mut self) {
        if self.paused.is_empty() {
            return;
        }
        let congested = self
            .backends
            .iter()
            .any(|b| b.unsent() > BACKEND_HIGH_WATER);
        if congested {
            return;
        }
        let list = std::mem::take(&mut self.paused);
        for token in list {
            let Some(c) = self.clients.get_mut(token) else {
                continue;
            };
            if c.replies.pending_len() >= MAX_PENDING || c.replies.unsent() >= OUTPUT_HIGH_WATER {
                self.paused.push(token);
                continue;
            }
            c.paused = false;
            self.client_readable(token);
        }
    }

    /// Writes a client's output. Returns with the client queued for closing if it is done.
    fn flush_client(&mut self, token: usize) {
        let Some(c) = self.clients.get_mut(token) else {
            return;
        };
        c.dirty = false;
        while c.replies.unsent() > 0 {
            let r = &c.replies;
            match c.stream.write(&r.out[r.out_pos..]) {
                Ok(0) => {
                    self.to_close.push(token);
                    return;
                }
                Ok(n) => c.replies.consumed(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    log::debug!("client {token}: write: {e}");
                    self.to_close.push(token);
                    return;
                }
            }
        }
        if c.idle() && (c.replies.closing || c.read_closed) {
            self.to_close.push(token);
        }
    }

    fn flush_all(&mut self) {
        let now = Instant::now();
        let backends = std::mem::take(&mut self.dirty_backends);
        for i in backends {
            self.backends[i].dirty = false;
            if self.backends[i].link != Link::Up {
                continue; // written once the connect completes
            }
            if let Err(e) = self.backends[i].flush() {
                self.fail_backend(i, &format!("write: {e}"), now);
            }
        }
        let clients = std::mem::take(&mut self.dirty_clients);
        for token in &clients {
            self.flush_client(*token);
        }
        self.dirty_clients = clients;
        self.dirty_clients.clear();
    }

    fn close_finished(&mut self) {
        for token in std::mem::take(&mut self.to_close) {
            if let Some(mut c) = self.clients.remove(token) {
                let _ = self.poll.registry().deregister(&mut c.stream);
                // In-flight waiters for this client are dropped on delivery (id check).
            }
        }
        self.fleet.clients = self.clients.len;
    }
}

/// Puts a backend reply into its client's slot (if the client is still there).
fn deliver(clients: &mut Slab<Client>, dirty_clients: &mut Vec<usize>, w: Waiter, reply: &[u8]) {
    let Some(c) = clients.get_mut(w.token) else {
        return;
    };
    if c.id != w.client_id {
        return;
    }
    c.replies.fill(w.seq, w.part, reply);
    if !c.dirty {
        c.dirty = true;
        dirty_clients.push(w.token);
    }
}

/// Carries out a routing plan for one request of client `token`.
#[allow(clippy::too_many_arguments)]
fn execute(
    plan: Plan,
    raw: &[u8],
    client_id: u64,
    token: usize,
    replies: &mut Replies,
    backends: &mut [Backend],
    fleet: &Fleet,
    dirty_backends: &mut Vec<usize>,
) -> Flow {
    let n = backends.len();
    let mut send = |i: usize, request: &[u8], seq: u64, part: u32, replies: &mut Replies| {
        send_to(
            backends,
            dirty_backends,
            i,
            request,
            Waiter {
                token,
                client_id,
                seq,
                part,
            },
            replies,
        );
    };
    match plan {
        Plan::Forward(i) => {
            let seq = replies.push_plain();
            send(i, raw, seq, 0, replies);
        }
        Plan::ForwardAny => {
            let i = fleet.up.iter().position(|&up| up).unwrap_or(0);
            let seq = replies.push_plain();
            send(i, raw, seq, 0, replies);
        }
        Plan::Split { parts, merge } => {
            let seq = replies.push_parts(parts.len(), merge);
            for (p, part) in parts.iter().enumerate() {
                send(part.instance, &part.request, seq, p as u32, replies);
            }
        }
        Plan::FanOut { request, merge } => {
            let seq = replies.push_parts(n, merge);
            let request = request.as_deref().unwrap_or(raw);
            for i in 0..n {
                send(i, request, seq, i as u32, replies);
            }
        }
        Plan::Rewrite {
            instance,
            request,
            merge,
        } => {
            let seq = replies.push_parts(1, merge);
            send(instance, &request, seq, 0, replies);
        }
        Plan::Reply(bytes) => replies.push_local(&bytes, false),
        Plan::ReplyThenClose(bytes) => {
            replies.push_local(&bytes, true);
            return Flow::StopReading;
        }
    }
    Flow::Continue
}

/// Whether to keep parsing a client's input after a request.
#[derive(PartialEq, Eq)]
enum Flow {
    Continue,
    /// QUIT (or a protocol error): answer what is pending, then close.
    StopReading,
}

/// Queues `request` on backend `i`, or answers the slot at once if the instance is down.
fn send_to(
    backends: &mut [Backend],
    dirty_backends: &mut Vec<usize>,
    i: usize,
    request: &[u8],
    w: Waiter,
    replies: &mut Replies,
) {
    let b = &mut backends[i];
    if b.accepts() {
        b.send(request, w);
        if !b.dirty {
            b.dirty = true;
            dirty_backends.push(i);
        }
    } else {
        replies.fill(w.seq, w.part, &b.unavailable);
    }
}

/// A request as multibulk (`*N\r\n$len\r\narg\r\n…`).
fn encode_args(args: &impl Args) -> Vec<u8> {
    let mut out = Vec::new();
    crate::split::push_array_header(&mut out, args.argc());
    for i in 0..args.argc() {
        crate::split::push_bulk(&mut out, args.arg(i));
    }
    out
}
