//! The fan-out's single-threaded mio loop: feed links, HTTP connections, browsers.
//!
//! # One iteration
//!
//! 1. `poll` (timeout: the next feed reconnect, at most [`TICK`]; zero while a feed link has
//!    unread data, see 2).
//! 2. Events: the listener (accept until `WouldBlock`), feed links (read at most
//!    `feed::READ_BUDGET` bytes, relay every complete message, see below; a link that stopped
//!    at the budget is `pending` and is read again after the events, since no new edge may
//!    come for the data left in its socket), connections (HTTP request → response or upgrade;
//!    handshake progress; browser frames).
//! 3. A flush round (`flush_round`): every browser with queued output is drained into its
//!    socket once (one write syscall for everything relayed to it since its last write) —
//!    at once when few browsers are dirty, else paced (see [`queue`], *Pacing*).
//! 4. Timers: feed reconnects, heartbeats, stale HTTP/handshake/closing connections, retries
//!    of snapshots that could not be requested.
//!
//! # Idle feeds
//!
//! The fan-out follows the engines' feeds only while some browser needs them: a feed link
//! connects (`FEED SUBSCRIBE`) when the first browser subscribes, and is closed once no
//! subscribed browser has been connected for `--feed-linger-ms` (default 30 s, so that a
//! reload or a reconnect within that time still resumes from the ring). An engine with no
//! feed subscriber computes no effect at all (docs/feed.md, *Costs when nobody subscribes*),
//! so a fleet whose fan-out serves nobody pays nothing for the feed, in the engines or here.
//!
//! Nothing is lost by this. A browser that subscribes while the links are idle waits
//! (`Waiting`/`Resume`) for its link to be live like after any feed reconnect, then gets a
//! snapshot, or a replay from the ring. The ring, `run` and `seq` outlive the idle time: if the
//! engine's keyspace did not change meanwhile, its `subscribed` repeats the same run and seq
//! and the ring still joins; if it changed, the engine skips one sequence number at the
//! subscribe (docs/feed.md), the position no longer joins, the ring is cleared and resumes
//! get `must-refetch`. INFO on the port reports `browsers` (subscribed browsers),
//! `engines_idle` and `feed_effects` (effects received since start).
//!
//! Connections come from the plain port, the TLS port ([`crate::tls::Sock`]: HTTPS and
//! wss://), or both; past `accept` the two are handled by the same code.
//!
//! # Layout
//!
//! This file holds the loop, the connections (HTTP, handshakes, browsers' reads and
//! messages), the feed links' lifecycle and the timers. Beside it:
//!
//! - [`queue`]: each browser's bounded queue, the flush rounds and their pacing.
//! - [`relay`]: which browsers an effect concerns (the prefix index) and what each gets
//!   ([`relay::Relay`]).
//! - [`resync`]: a browser's state per instance ([`Inst`]): snapshots, `must-refetch`,
//!   resume from the ring.

use std::cell::Cell;
use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mio::net::TcpListener;
use mio::{Events, Interest, Poll, Token};
use recached_net::Slab;
use tungstenite::handshake::server::{NoCallback, ServerHandshake};
use tungstenite::handshake::{HandshakeError, MidHandshake};
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tungstenite::{Message, WebSocket};

use crate::feed::{FeedMsg, Link, LinkState};
use crate::http::{self, Replay};
use crate::protocol::{self, ClientMsg};
use crate::tls::Sock;
use crate::{FanoutOptions, Tokens};

mod cluster;
mod queue;
mod relay;
mod resync;

use queue::{Body, Browser, DRAIN_CHUNK, Kind, Out};
use relay::PrefixIndex;
use resync::Inst;

const LISTENER: Token = Token(usize::MAX - 1);
/// The TLS port's listener (HTTPS + wss://, [`crate::tls`]).
const TLS_LISTENER: Token = Token(usize::MAX - 2);
/// The topology watcher has news (server/cluster.rs).
const WAKER: Token = Token(usize::MAX - 3);
/// Feed link `i` is `LINK_BASE + i`; connections are their slab index.
const LINK_BASE: usize = usize::MAX / 2;
/// Longest poll wait (shutdown flag, timers).
const TICK: Duration = Duration::from_millis(50);
/// An HTTP request or WebSocket handshake must complete within this.
const HTTP_TIMEOUT: Duration = Duration::from_secs(10);
/// A closing browser is dropped after this even if its peer never answers the close.
const CLOSE_GRACE: Duration = Duration::from_secs(2);
type Stream = Replay<Sock>;

struct HttpConn {
    stream: Sock,
    peer: SocketAddr,
    buf: Vec<u8>,
    /// A response being written (then the connection closes).
    out: Vec<u8>,
    /// Speaking RESP (a probe): stay open after replies.
    resp: bool,
    /// The whole response was handed to the stream; close once it is flushed (TLS holds
    /// ciphertext until the socket takes it).
    done: bool,
    born: Instant,
}

/// A connection on the fan-out's port. (Handshake is the largest variant; it lives only for
/// the few ms of an upgrade, so it is not boxed.)
#[allow(clippy::large_enum_variant)]
enum Conn {
    Http(HttpConn),
    Handshake {
        mid: Option<MidHandshake<ServerHandshake<Stream, NoCallback>>>,
        born: Instant,
    },
    Ws(Box<Browser>),
}

/// Who asked for a snapshot.
#[derive(Clone, Copy)]
struct SnapOwner {
    conn: usize,
    serial: u64,
    instance: usize,
}

pub struct Server {
    poll: Poll,
    /// The plain port; `None` when only TLS is served (`--port 0` with a TLS port).
    listener: Option<TcpListener>,
    /// The TLS port and its rustls configuration.
    tls: Option<(TcpListener, Arc<rustls::ServerConfig>)>,
    shutdown: Arc<AtomicBool>,
    tokens: Option<Tokens>,
    wasm: http::WasmModule,
    heartbeat: Duration,
    max_message: usize,
    queue_bytes: usize,
    snapshot_bytes: usize,
    max_connections: usize,
    ws_config: WebSocketConfig,
    links: Vec<Link>,
    /// HTTP connections, handshakes and browsers; the slot is the mio token.
    conns: Slab<Conn>,
    snaps: HashMap<u64, SnapOwner>,
    /// Per link, snapshot ids requested whose header has not arrived (an error reply is
    /// charged to the oldest).
    pending_snaps: Vec<VecDeque<u64>>,
    next_snap: u64,
    next_serial: u64,
    dirty: Vec<usize>,
    /// How many of `dirty` were drained in the latest flush round.
    dirty_again: usize,
    /// Browsers to relay an effect to (reused buffer).
    candidates: Vec<usize>,
    /// Per database, the browsers following it by prefix.
    index: HashMap<usize, PrefixIndex>,
    /// Σ queued bytes of all browsers ([`Browser::total`]) and its cap.
    queued: Rc<Cell<usize>>,
    total_queue_bytes: usize,
    /// Inside `check_total`.
    shedding: bool,
    /// A flush round with more dirty browsers than [`FLUSH_NOW_MAX`] waits until this
    /// (the previous round's start + `flush_delay`), see the module doc.
    next_flush: Instant,
    flush_delay: Duration,
    stats: Stats,
    next_heartbeat: Instant,
    feed_msgs: Vec<FeedMsg>,
    /// Browsers that sent `subscribe` and are not closed yet: the feed links are needed
    /// while this is not zero (module doc, *Idle feeds*).
    subscribed: usize,
    /// When `subscribed` last fell to zero (`None` while it is not zero).
    unneeded_since: Option<Instant>,
    /// How long the links stay subscribed after the last browser left.
    feed_linger: Duration,
    /// Topologies from the watcher thread (`crate::topology`), and what was learnt of them.
    topo_rx: Option<std::sync::mpsc::Receiver<crate::topology::Topology>>,
    cluster: cluster::ClusterState,
}

/// Counters for the RESP `INFO` probe (and benchmarks: µs per write = CPU time / `writes`).
#[derive(Default)]
struct Stats {
    /// Flush rounds (drains of the dirty browsers at the end of a loop iteration).
    rounds: u64,
    /// Socket writes of framed keychange batches.
    writes: u64,
    /// Bytes in those writes.
    bytes: u64,
    /// Browsers resynced because the total queued bytes passed the cap.
    shed: u64,
    /// Effects received from the engines' feeds.
    effects: u64,
}

impl Server {
    /// `listen`: the plain port, if any; `tls`: the TLS port and its configuration, if any.
    pub fn new(
        listen: Option<SocketAddr>,
        tls: Option<(SocketAddr, Arc<rustls::ServerConfig>)>,
        engines: Vec<SocketAddr>,
        tokens: Option<Tokens>,
        wasm: http::WasmModule,
        opts: &FanoutOptions,
        shutdown: Arc<AtomicBool>,
    ) -> io::Result<Server> {
        let poll = Poll::new()?;
        let (listener, tls) = recached_net::listen::bind_role(
            poll.registry(),
            listen,
            tls,
            (LISTENER, TLS_LISTENER),
        )?;
        let waker = Arc::new(mio::Waker::new(poll.registry(), WAKER)?);
        let topo_rx = crate::topology::spawn(engines.clone(), waker, Arc::clone(&shutdown))?;
        let heartbeat = Duration::from_millis(opts.heartbeat_ms.max(10));
        let ws_config = WebSocketConfig::default()
            .max_message_size(Some(opts.max_message))
            .max_frame_size(Some(opts.max_message))
            .write_buffer_size(DRAIN_CHUNK)
            .max_write_buffer_size(usize::MAX);
        Ok(Server {
            poll,
            listener,
            tls,
            shutdown,
            tokens,
            wasm,
            heartbeat,
            max_message: opts.max_message,
            queue_bytes: opts.queue_bytes,
            snapshot_bytes: opts.snapshot_bytes,
            max_connections: opts.max_connections,
            ws_config,
            pending_snaps: vec![VecDeque::new(); engines.len()],
            links: engines.into_iter().map(Link::new).collect(),
            conns: Slab::new(),
            snaps: HashMap::new(),
            next_snap: 1,
            next_serial: 1,
            dirty: Vec::new(),
            dirty_again: 0,
            candidates: Vec::new(),
            index: HashMap::new(),
            queued: Rc::new(Cell::new(0)),
            total_queue_bytes: opts.total_queue_bytes,
            shedding: false,
            next_flush: Instant::now(),
            flush_delay: Duration::from_micros(opts.flush_delay_us),
            stats: Stats::default(),
            next_heartbeat: Instant::now() + heartbeat,
            feed_msgs: Vec::new(),
            subscribed: 0,
            // No browser yet: the links stay idle (they start so) until one subscribes.
            unneeded_since: Some(Instant::now()),
            feed_linger: Duration::from_millis(opts.feed_linger_ms),
            topo_rx: Some(topo_rx),
            cluster: cluster::ClusterState::default(),
        })
    }

    /// The plain port's address (the TLS port's when only TLS is served).
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .as_ref()
            .or(self.tls.as_ref().map(|(l, _)| l))
            .and_then(|l| l.local_addr().ok())
            .expect("a bound listener has an address")
    }

    /// The TLS port's address, if one is served.
    pub fn tls_local_addr(&self) -> Option<SocketAddr> {
        self.tls.as_ref().and_then(|(l, _)| l.local_addr().ok())
    }

    pub fn run(&mut self) -> io::Result<()> {
        let mut events = Events::with_capacity(1024);
        self.tick(Instant::now());
        while !self.shutdown.load(Ordering::Relaxed) {
            let now = Instant::now();
            let mut timeout = TICK;
            // A link that stopped at its read budget still has data and no edge to come:
            // only look at readiness, do not wait.
            if self.links.iter().any(Link::pending) {
                timeout = Duration::ZERO;
            }
            for l in &self.links {
                if let Some(at) = l.deadline() {
                    timeout = timeout.min(at.saturating_duration_since(now));
                }
            }
            if !self.dirty.is_empty() {
                timeout = timeout.min(self.next_flush.saturating_duration_since(now));
            }
            if let Some(at) = self.cluster_deadline() {
                timeout = timeout.min(at.saturating_duration_since(now));
            }
            match self.poll.poll(&mut events, Some(timeout)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            for event in events.iter() {
                match event.token() {
                    LISTENER => self.accept(false),
                    TLS_LISTENER => self.accept(true),
                    WAKER => self.topology_event(),
                    Token(t) if t >= LINK_BASE => self.link_event(t - LINK_BASE),
                    Token(t) => self.conn_event(t),
                }
            }
            // One more budget for each link with data left, after the messages already read
            // were handed out (and before this round's flush drains them to the browsers).
            for i in 0..self.links.len() {
                if self.links[i].pending() {
                    self.link_event(i);
                }
            }
            self.flush_round();
            self.tick(Instant::now());
        }
        log::info!("fanout: shutting down");
        Ok(())
    }

    // -----------------------------------------------------------------------------------
    // Connections

    fn accept(&mut self, tls: bool) {
        loop {
            let listener = if tls {
                self.tls.as_ref().map(|(l, _)| l)
            } else {
                self.listener.as_ref()
            };
            let Some(listener) = listener else { return };
            match listener.accept() {
                Ok((tcp, peer)) => {
                    if self.conns.len() >= self.max_connections {
                        log::warn!("fanout: {} connections: refusing {peer}", self.conns.len());
                        continue;
                    }
                    let _ = tcp.set_nodelay(true);
                    let mut stream = match &self.tls {
                        Some((_, cfg)) if tls => match Sock::tls(tcp, cfg) {
                            Ok(s) => s,
                            Err(e) => {
                                log::warn!("fanout: {peer}: {e}");
                                continue;
                            }
                        },
                        _ => Sock::Plain(tcp),
                    };
                    // The slot is the token, so it is known before registering.
                    let idx = self.conns.vacant_key();
                    if self
                        .poll
                        .registry()
                        .register(
                            &mut stream,
                            Token(idx),
                            Interest::READABLE | Interest::WRITABLE,
                        )
                        .is_err()
                    {
                        continue;
                    }
                    self.conns.insert(Conn::Http(HttpConn {
                        stream,
                        peer,
                        buf: Vec::new(),
                        out: Vec::new(),
                        resp: false,
                        done: false,
                        born: Instant::now(),
                    }));
                    // Data may already be there (edge-triggered: no event would tell us).
                    self.conn_event(idx);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // EMFILE and friends: log and retry on the next event.
                    log::warn!("fanout: accept: {e}");
                    return;
                }
            }
        }
    }

    fn close(&mut self, idx: usize) {
        let Some(conn) = self.conns.try_remove(idx) else {
            return;
        };
        match conn {
            Conn::Http(mut h) => {
                let _ = self.poll.registry().deregister(&mut h.stream);
            }
            Conn::Handshake { mut mid, .. } => {
                if let Some(m) = mid.as_mut() {
                    let _ = self
                        .poll
                        .registry()
                        .deregister(&mut m.get_mut().get_mut().inner);
                }
            }
            Conn::Ws(mut b) => {
                let _ = self.poll.registry().deregister(&mut b.ws.get_mut().inner);
                if b.prefixes.is_some() {
                    self.subscribed -= 1;
                    if self.subscribed == 0 {
                        self.unneeded_since = Some(Instant::now());
                    }
                }
                if let Some(p) = &b.prefixes
                    && let Some(index) = self.index.get_mut(&b.db)
                {
                    index.remove(p, idx);
                    if index.is_empty() {
                        self.index.remove(&b.db);
                    }
                }
                for inst in &b.inst {
                    if let Inst::Snapshot { id, .. } = inst {
                        self.snaps.remove(id);
                    }
                }
            }
        }
    }

    fn conn_event(&mut self, idx: usize) {
        match self.conns.get(idx) {
            Some(Conn::Http(_)) => self.http_event(idx),
            Some(Conn::Handshake { .. }) => self.handshake_event(idx),
            Some(Conn::Ws(_)) => {
                self.browser_read(idx);
                self.mark_dirty(idx);
            }
            _ => {}
        }
    }

    fn http_event(&mut self, idx: usize) {
        use std::io::{Read, Write};
        let Some(Conn::Http(h)) = self.conns.get_mut(idx) else {
            return;
        };
        if !h.out.is_empty() || h.done {
            // Writing the response.
            while !h.out.is_empty() {
                match h.stream.write(&h.out) {
                    Ok(0) => return self.close(idx),
                    Ok(n) => {
                        h.out.drain(..n);
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => return self.close(idx),
                }
            }
            // On the TLS port the last ciphertext may still wait for the socket.
            h.done = !h.resp;
            match h.stream.flush() {
                Ok(()) if h.done => return self.close(idx),
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(_) => return self.close(idx),
            }
        }
        let mut chunk = [0u8; 4096];
        loop {
            match h.stream.read(&mut chunk) {
                Ok(0) => return self.close(idx),
                Ok(n) => {
                    h.buf.extend_from_slice(&chunk[..n]);
                    if h.buf.len() > http::MAX_HEAD {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return self.close(idx),
            }
        }
        if http::is_resp(&h.buf) {
            // A supervisor health check or `recached status` probe: answer in RESP.
            let info = format!(
                "# Fanout\r\nconnections:{}\r\nbrowsers:{}\r\nengines:{}\r\nengines_live:{}\r\n\
                 engines_idle:{}\r\nfeed_effects:{}\r\n\
                 flush_rounds:{}\r\nwire_writes:{}\r\nwire_bytes:{}\r\nqueued_bytes:{}\r\n\
                 queue_shed:{}\r\n",
                self.conns.len(),
                self.subscribed,
                self.links.len(),
                self.links
                    .iter()
                    .filter(|l| l.state == LinkState::Live)
                    .count(),
                self.links
                    .iter()
                    .filter(|l| l.state == LinkState::Idle)
                    .count(),
                self.stats.effects,
                self.stats.rounds,
                self.stats.writes,
                self.stats.bytes,
                self.queued.get(),
                self.stats.shed,
            );
            let Some(Conn::Http(h)) = self.conns.get_mut(idx) else {
                return;
            };
            let (used, replies) = http::resp_replies(&h.buf, &info);
            h.buf.drain(..used);
            if replies.is_empty() {
                return;
            }
            h.out = replies;
            h.resp = true;
            return self.http_event(idx);
        }
        let head = match http::parse_head(&h.buf) {
            Ok(None) => return,
            Ok(Some(head)) => head,
            Err(code) => {
                let reason = if code == 431 {
                    "Request Header Fields Too Large"
                } else {
                    "Bad Request"
                };
                h.out = http::status(code, reason);
                return self.http_event(idx);
            }
        };
        if !head.upgrade_ws {
            h.out = http::respond(&head, &self.wasm);
            return self.http_event(idx);
        }
        if head.path != "/ws" {
            h.out = http::status(404, "Not Found");
            return self.http_event(idx);
        }
        if !head.ws_complete {
            h.out = http::status(400, "Bad Request (incomplete WebSocket upgrade)");
            return self.http_event(idx);
        }
        if self.tokens.is_none() {
            let origin_ok = head.origin.as_deref().is_none_or(http::origin_is_loopback);
            if !h.peer.ip().is_loopback() || !origin_ok {
                log::info!(
                    "fanout: refused WebSocket from {} (origin {:?}): without tokens only loopback origins are served",
                    h.peer,
                    head.origin
                );
                h.out = http::status(403, "Forbidden (no tokens configured: loopback only)");
                return self.http_event(idx);
            }
        }
        // Hand the socket, with the bytes read so far, to tungstenite.
        let born = h.born;
        let Conn::Http(h) =
            std::mem::replace(&mut self.conns[idx], Conn::Handshake { mid: None, born })
        else {
            unreachable!("checked above")
        };
        let stream = Replay::new(h.buf, h.stream);
        let result = tungstenite::accept_with_config(stream, Some(self.ws_config));
        self.handshake_result(idx, result);
    }

    fn handshake_event(&mut self, idx: usize) {
        let Some(Conn::Handshake { mid, .. }) = self.conns.get_mut(idx) else {
            return;
        };
        let Some(m) = mid.take() else {
            return self.close(idx);
        };
        let result = m.handshake();
        self.handshake_result(idx, result);
    }

    fn handshake_result(
        &mut self,
        idx: usize,
        result: Result<WebSocket<Stream>, HandshakeError<ServerHandshake<Stream, NoCallback>>>,
    ) {
        match result {
            Ok(ws) => {
                let serial = self.next_serial;
                self.next_serial += 1;
                let mut b = Box::new(Browser {
                    ws,
                    serial,
                    prefixes: None,
                    db: 0,
                    inst: (0..self.links.len()).map(|_| Inst::Idle).collect(),
                    queue: VecDeque::new(),
                    live_bytes: 0,
                    snap_bytes: 0,
                    total: Rc::clone(&self.queued),
                    last_recv: Instant::now(),
                    closing: None,
                    dirty: false,
                    drained_round: 0,
                    backlogged: false,
                    stalled: false,
                });
                let hello = protocol::hello(
                    self.links.len(),
                    self.heartbeat.as_millis() as u64,
                    self.max_message,
                    self.tokens.is_some(),
                );
                b.queue.push_back(Out {
                    body: Body::Text(hello.into()),
                    kind: Kind::Control,
                });
                self.conns[idx] = Conn::Ws(b);
                self.mark_dirty(idx);
                // The subscribe may have arrived with the upgrade request.
                self.browser_read(idx);
            }
            Err(HandshakeError::Interrupted(mid)) => {
                if let Some(Conn::Handshake { mid: slot, .. }) = self.conns.get_mut(idx) {
                    *slot = Some(mid);
                }
            }
            Err(HandshakeError::Failure(e)) => {
                log::debug!("fanout: WebSocket handshake failed: {e}");
                self.close(idx);
            }
        }
    }

    // -----------------------------------------------------------------------------------
    // Browsers

    /// Every slot that may hold a connection, for loops whose body needs `&mut self`: keys
    /// are indices into the slab's storage, so all of them are below its capacity; vacant
    /// ones read as `None`.
    fn slots(&self) -> std::ops::Range<usize> {
        0..self.conns.capacity()
    }

    fn browser(&mut self, idx: usize) -> Option<&mut Browser> {
        match self.conns.get_mut(idx) {
            Some(Conn::Ws(b)) => Some(b),
            _ => None,
        }
    }

    fn browser_read(&mut self, idx: usize) {
        loop {
            let Some(b) = self.browser(idx) else { return };
            if b.closing.is_some() {
                // Only the peer's close reply (or EOF) matters now.
                match b.ws.read() {
                    Ok(_) => continue,
                    Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => {
                        return;
                    }
                    Err(_) => return self.close(idx),
                }
            }
            match b.ws.read() {
                Ok(Message::Text(t)) => {
                    b.last_recv = Instant::now();
                    self.browser_text(idx, t.as_str());
                }
                Ok(Message::Binary(_)) => {
                    b.last_recv = Instant::now();
                    self.refuse(
                        idx,
                        CloseCode::Unsupported,
                        "binary frames are not accepted",
                    );
                }
                Ok(Message::Close(_)) => {
                    // tungstenite queued the close reply; the flush sends it.
                    b.closing = Some(Instant::now());
                }
                Ok(_) => b.last_recv = Instant::now(), // ping, pong
                Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(tungstenite::Error::Capacity(e)) => {
                    let msg = format!("message too large: {e}");
                    return self.refuse(idx, CloseCode::Size, &msg);
                }
                Err(tungstenite::Error::Utf8(_)) => {
                    return self.refuse(idx, CloseCode::Invalid, "invalid UTF-8 in a text frame");
                }
                Err(tungstenite::Error::Protocol(e)) => {
                    // An orphan continuation, a fragmented or over-long control frame, a data
                    // frame inside a fragmented message…: close with 1002 (RFC 6455 §7.1.7:
                    // "Fail the WebSocket Connection" sends a Close frame first).
                    log::debug!("fanout: browser protocol error: {e}");
                    let msg = format!("protocol error: {e}");
                    return self.refuse(idx, CloseCode::Protocol, &msg);
                }
                Err(_) => return self.close(idx),
            }
        }
    }

    /// Sends an error message and closes the WebSocket with `code`.
    fn refuse(&mut self, idx: usize, code: CloseCode, reason: &str) {
        let Some(b) = self.browser(idx) else { return };
        b.queue.clear();
        b.release_all();
        let err = protocol::error("closing", reason);
        let _ = b.ws.write(Message::text(err));
        let frame = CloseFrame {
            code,
            reason: reason.chars().take(100).collect::<String>().into(),
        };
        let _ = b.ws.close(Some(frame));
        let _ = b.ws.flush();
        b.closing = Some(Instant::now());
    }

    fn browser_text(&mut self, idx: usize, text: &str) {
        let msg = match protocol::parse_client(text) {
            Ok(m) => m,
            Err(e) => {
                return self.push(
                    idx,
                    protocol::error(e.code, &e.message).into(),
                    Kind::Control,
                );
            }
        };
        match msg {
            ClientMsg::Ping => self.push(idx, protocol::pong().into(), Kind::Control),
            ClientMsg::Subscribe {
                prefixes,
                token,
                db,
                resume,
            } => {
                let allowed = match (&self.tokens, token) {
                    (None, _) => vec![Vec::new()],
                    (Some(tokens), Some(t)) => match find_token(tokens, &t) {
                        Some(p) => p.clone(),
                        None => {
                            return self.refuse(idx, CloseCode::Policy, "unknown token");
                        }
                    },
                    (Some(_), None) => {
                        return self.refuse(idx, CloseCode::Policy, "a token is required");
                    }
                };
                let effective = protocol::intersect(&prefixes, &allowed);
                let Some(b) = self.browser(idx) else { return };
                if b.prefixes.is_some() {
                    return self.push(
                        idx,
                        protocol::error("already-subscribed", "one subscribe per connection")
                            .into(),
                        Kind::Control,
                    );
                }
                b.prefixes = Some(effective.clone());
                b.db = db;
                self.index.entry(db).or_default().insert(&effective, idx);
                self.subscribed += 1;
                if self.subscribed == 1 {
                    self.wake_links();
                }
                self.push(
                    idx,
                    protocol::subscribed(&effective, db).into(),
                    Kind::Control,
                );
                self.send_slots(idx);
                for i in 0..self.links.len() {
                    match resume.iter().find(|r| r.instance == i) {
                        Some(r) => self.try_resume(idx, i, r.clone()),
                        None => self.resync(idx, i, "initial"),
                    }
                }
            }
        }
    }

    // -----------------------------------------------------------------------------------
    // Feed links

    fn link_event(&mut self, i: usize) {
        let mut msgs = std::mem::take(&mut self.feed_msgs);
        let result = self.links[i].event(&mut msgs);
        for m in msgs.drain(..) {
            self.feed_message(i, m);
        }
        self.feed_msgs = msgs;
        if let Err(e) = result {
            log::warn!("fanout: feed {} (instance {i}): {e}", self.links[i].addr);
            self.link_down(i);
        }
    }

    fn link_down(&mut self, i: usize) {
        let now = Instant::now();
        if self.subscribed == 0 {
            // Nobody to reconnect for (module doc, *Idle feeds*).
            self.links[i].sleep(self.poll.registry());
        } else {
            self.links[i].down(self.poll.registry(), now);
        }
        self.pending_snaps[i].clear();
        // Snapshots in flight died with the connection; partial entries may have been
        // relayed, so those browsers refetch once the link is back.
        for idx in self.slots() {
            let in_snapshot = self
                .browser(idx)
                .is_some_and(|b| matches!(b.inst[i], Inst::Snapshot { .. }));
            if in_snapshot {
                self.resync(idx, i, "feed-reconnect");
            }
        }
    }

    fn feed_message(&mut self, i: usize, m: FeedMsg) {
        match m {
            FeedMsg::Subscribed { run, seq } => {
                let link = &mut self.links[i];
                let continuous = link.run.as_deref() == Some(run.as_str()) && link.seq == Some(seq);
                if !continuous {
                    link.ring.clear();
                    if link.run.is_some() {
                        log::info!(
                            "fanout: instance {i}: feed resumed at a different point (run {run}, seq {seq}): browsers refetch"
                        );
                    }
                }
                link.run = Some(run);
                link.seq = Some(seq);
                log::info!(
                    "fanout: instance {i}: subscribed to {} at seq {seq}",
                    link.addr
                );
                for idx in self.slots() {
                    let Some(b) = self.browser(idx) else { continue };
                    match std::mem::replace(&mut b.inst[i], Inst::Idle) {
                        Inst::Idle => {}
                        Inst::Live if continuous => b.inst[i] = Inst::Live,
                        Inst::Live | Inst::Snapshot { .. } => {
                            b.inst[i] = Inst::Live;
                            self.resync(idx, i, "feed-gap");
                        }
                        Inst::Waiting => self.request_snapshot(idx, i),
                        Inst::Resume(r) => self.try_resume(idx, i, r),
                    }
                }
            }
            FeedMsg::Effect { seq, db, args } => {
                self.stats.effects += 1;
                self.relay_effect(i, seq, db, args);
            }
            FeedMsg::Overflow { seq } => {
                log::warn!(
                    "fanout: instance {i}: the engine dropped effects for us (overflow at {seq}): browsers refetch"
                );
                let link = &mut self.links[i];
                link.ring.clear();
                link.seq = None;
                for idx in self.slots() {
                    let affected = self
                        .browser(idx)
                        .is_some_and(|b| matches!(b.inst[i], Inst::Live | Inst::Snapshot { .. }));
                    if affected {
                        self.resync(idx, i, "feed-overflow");
                    }
                }
            }
            FeedMsg::Snapshot { id, seq, keys } => self.snapshot_header(i, id, seq, keys),
            FeedMsg::Entry { id, args } => self.snapshot_entry(i, id, args),
            FeedMsg::SnapshotEnd { id, seq } => self.snapshot_end(i, id, seq),
            FeedMsg::Error(e) => self.snapshot_error(i, &e),
        }
    }

    /// The first browser subscribed: every idle link connects and subscribes (module doc,
    /// *Idle feeds*). Browsers wait for their links as after a feed reconnect.
    fn wake_links(&mut self) {
        self.unneeded_since = None;
        let now = Instant::now();
        for (i, l) in self.links.iter_mut().enumerate() {
            if l.state == LinkState::Idle {
                log::info!(
                    "fanout: instance {i}: a browser subscribed: following {}",
                    l.addr
                );
            }
            l.wake(self.poll.registry(), Token(LINK_BASE + i), now);
        }
    }

    /// No browser for `feed_linger`: every link unsubscribes (closes), so the engines stop
    /// computing effects.
    fn sleep_links(&mut self) {
        debug_assert_eq!(self.subscribed, 0);
        for i in 0..self.links.len() {
            if self.links[i].state == LinkState::Idle {
                continue;
            }
            log::info!(
                "fanout: instance {i}: no browser subscribed: leaving the feed of {}",
                self.links[i].addr
            );
            self.links[i].sleep(self.poll.registry());
            // Nothing waits on this link's replies any more (no browser is left to own them).
            self.pending_snaps[i].clear();
        }
    }

    // -----------------------------------------------------------------------------------
    // Timers

    fn tick(&mut self, now: Instant) {
        self.cluster_tick(now);
        if let Some(since) = self.unneeded_since
            && now.saturating_duration_since(since) >= self.feed_linger
        {
            self.sleep_links();
        }
        for i in 0..self.links.len() {
            self.links[i].tick(self.poll.registry(), now);
            self.links[i].maybe_connect(self.poll.registry(), Token(LINK_BASE + i), now);
        }
        if now < self.next_heartbeat {
            return;
        }
        self.next_heartbeat = now + self.heartbeat;
        let silent = self.heartbeat * 5 / 2;
        let mut to_close = Vec::new();
        for (idx, conn) in &self.conns {
            match conn {
                Conn::Http(h) if now.duration_since(h.born) > HTTP_TIMEOUT => to_close.push(idx),
                Conn::Handshake { born, .. } if now.duration_since(*born) > HTTP_TIMEOUT => {
                    to_close.push(idx)
                }
                _ => {}
            }
        }
        for idx in to_close {
            self.close(idx);
        }
        for idx in self.slots() {
            let seqs: Vec<Option<u64>> = {
                let Some(b) = self.browser(idx) else { continue };
                if let Some(since) = b.closing {
                    if now.duration_since(since) > CLOSE_GRACE {
                        self.close(idx);
                    }
                    continue;
                }
                if now.duration_since(b.last_recv) > silent {
                    log::debug!("fanout: browser {} silent: closing", b.serial);
                    self.close(idx);
                    continue;
                }
                let _ = b.ws.write(Message::Ping(Default::default()));
                let inst: Vec<bool> = b.inst.iter().map(|s| matches!(s, Inst::Live)).collect();
                inst.iter()
                    .zip(&self.links)
                    .map(|(&live, l)| if live { l.seq } else { None })
                    .collect()
            };
            self.push(idx, protocol::heartbeat(&seqs).into(), Kind::Live);
            // Retry snapshots that could not be requested (link was down, engine refused).
            for i in 0..self.links.len() {
                if self.links[i].state == LinkState::Live
                    && self
                        .browser(idx)
                        .is_some_and(|b| matches!(b.inst[i], Inst::Waiting))
                {
                    self.request_snapshot(idx, i);
                }
            }
        }
        self.drain_dirty();
    }
}

/// Looks a token up without an early exit on the first differing byte of a candidate.
fn find_token<'a>(tokens: &'a Tokens, t: &str) -> Option<&'a Vec<Vec<u8>>> {
    let mut found = None;
    for (k, v) in tokens {
        let (a, b) = (k.as_bytes(), t.as_bytes());
        let mut diff = a.len() ^ b.len();
        for j in 0..a.len().max(b.len()) {
            diff |= usize::from(a.get(j).unwrap_or(&0) ^ b.get(j).unwrap_or(&0));
        }
        if diff == 0 {
            found = Some(v);
        }
    }
    found
}
