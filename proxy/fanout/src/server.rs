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
//!    at once when few browsers are dirty, else paced (see *Pacing*).
//! 4. Timers: feed reconnects, heartbeats, stale HTTP/handshake/closing connections, retries
//!    of snapshots that could not be requested.
//!
//! Connections come from the plain port, the TLS port ([`crate::tls::Sock`]: HTTPS and
//! wss://), or both; past `accept` the two are handled by the same code.
//!
//! # A browser's view of one instance ([`Inst`])
//!
//! ```text
//!  subscribe ──► Waiting ──(link live)──► Snapshot{id, seq?} ──snapshot-end──► Live
//!      │            ▲                        │ entries relayed; effects ≤ S skipped,       │
//!      │            └──── resync ◄───────────┴─ effects > S deferred until the end ◄─────┘
//!      └─resume──► Resume ──(link live, ring reaches back)──► replay ──► Live
//! ```
//! A resync sends `must-refetch` and requests a new snapshot; the id of the old one is
//! forgotten, so its late entries are dropped.
//!
//! # Routing an effect
//!
//! An effect whose keys the command table knows goes only to the browsers found in the
//! prefix index (`PrefixIndex`: prefix → browsers; per key one hash lookup per distinct
//! prefix length in use), so its cost is proportional to the browsers concerned, not to all
//! browsers: with one prefix per browser a keychange costs the same for 10 or 10,000
//! browsers. A sequence gap, a `FLUSHALL` or an effect without known keys still visits every
//! browser (all of them resync or see it). Each candidate then goes through the same per
//! browser filter as before (`deliver`), which decides whole / partial (`DEL`) / resync.
//!
//! # Pacing
//!
//! Under a broadcast load the cost is one loopback `write` per browser per round (measured
//! ~3 µs on the 2-core test machine, most of it the kernel's TCP send and the receiver's
//! wakeup; the bytes hardly matter), so the way to serve more browsers is fewer rounds with
//! more keychanges each. A round with at most [`FLUSH_NOW_MAX`] dirty browsers is written at
//! once (an idle fleet keeps its ~100 µs latency), and so is one whose browsers were mostly
//! not written in the previous round (distinct prefixes: waiting would coalesce nothing).
//! A larger round of browsers written last round too (a broadcast) waits until
//! [`FanoutOptions::flush_delay_us`] (default 2 ms) after the previous round started, and
//! keychanges arriving meanwhile join the same write. The trade-off: up to one delay of
//! added latency for a fan-out CPU bounded by `browsers × 3 µs / delay`; a round that takes
//! longer than the delay (C × 3 µs > 2 ms, i.e. beyond ~700 broadcast browsers) is
//! self-clocked anyway: the next round carries everything that arrived during this one.
//!
//! # Queues
//!
//! Each browser has a queue of frames with a byte budget per kind: keychanges (and
//! heartbeats) [`FanoutOptions::queue_bytes`], snapshot data
//! [`FanoutOptions::snapshot_bytes`]. Exceeding the first drops the queued keychanges and
//! snapshot data and resyncs every instance of that browser (it alone); exceeding the second
//! closes it. The queue is moved into tungstenite only while the socket takes it, so
//! tungstenite's own buffer stays around one write buffer. Keychanges and heartbeats skip
//! tungstenite: each effect is framed once ([`crate::feed::Effect::wire`]) and its bytes
//! appended to the browser's pending batch, written whole at the next flush round. (One
//! `memcpy` of ~100 bytes per browser per keychange; sharing the frame and `writev`-ing
//! references would save that copy, but the write syscall costs over a hundred times more.) All
//! browsers' queued bytes together are capped by [`FanoutOptions::total_queue_bytes`]:
//! past it every browser first writes what its socket takes, then the largest queues left
//! (of stalled browsers first) are dropped and resynced (`check_total`), so memory stays
//! bounded however many slow browsers there are. Outside the budgets each browser holds at
//! most one chunk ([`DRAIN_CHUNK`]) plus one frame in tungstenite (nothing more is moved in
//! while it holds bytes the socket refused) and as much in the batch handed to the socket
//! (batches are cut at [`DRAIN_CHUNK`]). A browser resynced for falling behind gets its
//! snapshots only once it has read everything queued before (`Browser::backlogged`): a
//! browser that does not read would otherwise be sent, and shed from, one snapshot after
//! another (tests/tests/fanout_queue_cap.rs).

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
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
use tungstenite::{Message, Utf8Bytes, WebSocket};

use crate::feed::{Effect, FeedMsg, Link, LinkState, Scope};
use crate::http::{self, Replay};
use crate::protocol::{self, ClientMsg, Resume};
use crate::tls::Sock;
use crate::{FanoutOptions, Tokens};

const LISTENER: Token = Token(usize::MAX - 1);
/// The TLS port's listener (HTTPS + wss://, [`crate::tls`]).
const TLS_LISTENER: Token = Token(usize::MAX - 2);
/// Feed link `i` is `LINK_BASE + i`; connections are their slab index.
const LINK_BASE: usize = usize::MAX / 2;
/// Longest poll wait (shutdown flag, timers).
const TICK: Duration = Duration::from_millis(50);
/// An HTTP request or WebSocket handshake must complete within this.
const HTTP_TIMEOUT: Duration = Duration::from_secs(10);
/// A closing browser is dropped after this even if its peer never answers the close.
const CLOSE_GRACE: Duration = Duration::from_secs(2);
/// Move this much of a browser's queue into tungstenite before flushing to the socket.
const DRAIN_CHUNK: usize = 256 * 1024;
/// A flush round with at most this many dirty browsers goes out at once (it costs at most
/// ~0.2 ms of loopback writes); a larger one is paced by [`FanoutOptions::flush_delay_us`].
const FLUSH_NOW_MAX: usize = 32;

type Stream = Replay<Sock>;

/// Where a browser stands with one instance (see the module doc).
#[derive(Debug)]
enum Inst {
    /// Not subscribed yet.
    Idle,
    /// A snapshot is needed; requested when the link is live.
    Waiting,
    /// Reconnected with this position; checked against the ring when the link is live.
    Resume(Resume),
    /// Snapshot `id` requested; `seq` once its header arrived; effects after `seq` that
    /// arrive before its end wait in `deferred`.
    Snapshot {
        id: u64,
        seq: Option<u64>,
        deferred: Vec<Rc<Effect>>,
    },
    /// Every effect is relayed as it comes.
    Live,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    /// Never dropped: hello, subscribed, must-refetch, error, pong.
    Control,
    /// Keychanges and heartbeats: dropped on overflow (a resync follows).
    Live,
    /// Snapshot data and up-to-date markers: dropped on overflow (a resync follows).
    Snap,
}

struct Out {
    body: Body,
    kind: Kind,
}

enum Body {
    /// One message, written through tungstenite.
    Text(Utf8Bytes),
    /// Consecutive keychanges and heartbeats already framed as unmasked WebSocket text frames
    /// (RFC 6455 §5.2), handed to the stream whole ([`Replay::send_raw`]): one `memcpy` per
    /// browser per effect instead of a queue entry, and one write for all of them.
    Wire(Vec<u8>),
}

struct Browser {
    ws: WebSocket<Stream>,
    serial: u64,
    /// Prefixes in effect (requested ∩ allowed); `None` until `subscribe`.
    prefixes: Option<Vec<Vec<u8>>>,
    inst: Vec<Inst>,
    queue: VecDeque<Out>,
    live_bytes: usize,
    snap_bytes: usize,
    /// The fan-out's total of `live_bytes + snap_bytes` over all browsers (shared counter,
    /// kept exact by [`Browser::charge`], [`Browser::release`], [`Browser::release_all`] and
    /// `Drop`).
    total: Rc<Cell<usize>>,
    last_recv: Instant,
    /// Set when a close was started (or the peer is gone); dropped after [`CLOSE_GRACE`].
    closing: Option<Instant>,
    dirty: bool,
    /// The flush round ([`Stats::rounds`]) that last drained it.
    drained_round: u64,
    /// Resynced for falling behind (`slow-consumer`): its snapshots are requested only once
    /// everything queued for it (the `must-refetch` included) has reached the socket, so a
    /// browser that does not read costs neither a snapshot per shed nor queue churn.
    backlogged: bool,
    /// Its socket refused bytes at the last drain (something stayed queued): the total cap
    /// sheds such browsers first, so one that reads is not resynced for frames queued to it in
    /// the same loop iteration.
    stalled: bool,
}

impl Browser {
    /// Counts `n` queued bytes of `kind` against this browser's and the fan-out's budgets.
    fn charge(&mut self, kind: Kind, n: usize) {
        match kind {
            Kind::Live => self.live_bytes += n,
            Kind::Snap => self.snap_bytes += n,
            Kind::Control => return,
        }
        self.total.set(self.total.get() + n);
    }

    /// `n` bytes of `kind` left the queue.
    fn release(&mut self, kind: Kind, n: usize) {
        match kind {
            Kind::Live => self.live_bytes -= n,
            Kind::Snap => self.snap_bytes -= n,
            Kind::Control => return,
        }
        self.total.set(self.total.get() - n);
    }

    /// Every budgeted byte left the queue (dropped on overflow or close).
    fn release_all(&mut self) {
        self.total
            .set(self.total.get() - self.live_bytes - self.snap_bytes);
        self.live_bytes = 0;
        self.snap_bytes = 0;
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        self.release_all();
    }
}

/// Browsers by subscribed prefix, so an effect reaches the browsers whose prefixes match
/// one of its keys without testing every browser: for a key, one hash lookup per distinct
/// prefix length in use (usually one or two lengths), e.g. `fan:7:k` → `""`, `"fan:7:"`.
#[derive(Default)]
struct PrefixIndex {
    by_prefix: HashMap<Vec<u8>, Vec<usize>>,
    /// Prefix length → how many prefixes of that length are indexed.
    lens: BTreeMap<usize, usize>,
}

impl PrefixIndex {
    fn insert(&mut self, prefixes: &[Vec<u8>], idx: usize) {
        for p in prefixes {
            self.by_prefix.entry(p.clone()).or_default().push(idx);
            *self.lens.entry(p.len()).or_default() += 1;
        }
    }

    /// Removal scans the prefix's list: O(browsers on that prefix), paid once per close.
    fn remove(&mut self, prefixes: &[Vec<u8>], idx: usize) {
        for p in prefixes {
            let Some(list) = self.by_prefix.get_mut(p.as_slice()) else {
                continue;
            };
            let Some(at) = list.iter().position(|&x| x == idx) else {
                continue;
            };
            list.swap_remove(at);
            if list.is_empty() {
                self.by_prefix.remove(p.as_slice());
            }
            if let Some(n) = self.lens.get_mut(&p.len()) {
                *n -= 1;
                if *n == 0 {
                    self.lens.remove(&p.len());
                }
            }
        }
    }

    /// Appends the browsers with a prefix of one of `keys` to `out`, each once.
    fn candidates<'a>(&self, keys: impl Iterator<Item = &'a [u8]>, out: &mut Vec<usize>) {
        let mut lists = 0;
        for key in keys {
            for &len in self.lens.keys() {
                if len > key.len() {
                    break;
                }
                if let Some(list) = self.by_prefix.get(&key[..len]) {
                    out.extend_from_slice(list);
                    lists += 1;
                }
            }
        }
        if lists > 1 {
            // A browser under several matching prefixes (or keys) is relayed the effect once.
            out.sort_unstable();
            out.dedup();
        }
    }
}

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
    wasm: PathBuf,
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
    index: PrefixIndex,
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
}

impl Server {
    /// `listen`: the plain port, if any; `tls`: the TLS port and its configuration, if any.
    pub fn new(
        listen: Option<SocketAddr>,
        tls: Option<(SocketAddr, Arc<rustls::ServerConfig>)>,
        engines: Vec<SocketAddr>,
        tokens: Option<Tokens>,
        wasm: PathBuf,
        opts: &FanoutOptions,
        shutdown: Arc<AtomicBool>,
    ) -> io::Result<Server> {
        let poll = Poll::new()?;
        let listener = match listen {
            Some(addr) => {
                let mut l = recached_net::listen::bind(addr)?;
                poll.registry()
                    .register(&mut l, LISTENER, Interest::READABLE)?;
                Some(l)
            }
            None => None,
        };
        let tls = match tls {
            Some((addr, cfg)) => {
                let mut l = recached_net::listen::bind(addr)
                    .map_err(|e| io::Error::new(e.kind(), format!("tls port {addr}: {e}")))?;
                poll.registry()
                    .register(&mut l, TLS_LISTENER, Interest::READABLE)?;
                Some((l, cfg))
            }
            None => None,
        };
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
            index: PrefixIndex::default(),
            queued: Rc::new(Cell::new(0)),
            total_queue_bytes: opts.total_queue_bytes,
            shedding: false,
            next_flush: Instant::now(),
            flush_delay: Duration::from_micros(opts.flush_delay_us),
            stats: Stats::default(),
            next_heartbeat: Instant::now() + heartbeat,
            feed_msgs: Vec::new(),
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
            match self.poll.poll(&mut events, Some(timeout)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            for event in events.iter() {
                match event.token() {
                    LISTENER => self.accept(false),
                    TLS_LISTENER => self.accept(true),
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
                if let Some(p) = &b.prefixes {
                    self.index.remove(p, idx);
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
                "# Fanout\r\nconnections:{}\r\nengines:{}\r\nengines_live:{}\r\n\
                 flush_rounds:{}\r\nwire_writes:{}\r\nwire_bytes:{}\r\nqueued_bytes:{}\r\n\
                 queue_shed:{}\r\n",
                self.conns.len(),
                self.links.len(),
                self.links
                    .iter()
                    .filter(|l| l.state == LinkState::Live)
                    .count(),
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

    fn mark_dirty(&mut self, idx: usize) {
        let round = self.stats.rounds;
        if let Some(Conn::Ws(b)) = self.conns.get_mut(idx)
            && !b.dirty
        {
            b.dirty = true;
            if b.drained_round == round {
                self.dirty_again += 1;
            }
            self.dirty.push(idx);
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
                    log::debug!("fanout: browser protocol error: {e}");
                    return self.close(idx);
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

    fn push(&mut self, idx: usize, frame: Utf8Bytes, kind: Kind) {
        if kind == Kind::Live {
            return self.push_wire(idx, &protocol::text_frame(frame.as_bytes()));
        }
        let (queue_bytes, snapshot_bytes) = (self.queue_bytes, self.snapshot_bytes);
        let Some(b) = self.browser(idx) else { return };
        if b.closing.is_some() {
            return;
        }
        let n = frame.len();
        match kind {
            Kind::Control => {}
            Kind::Live => {
                if b.live_bytes + n > queue_bytes {
                    return self.overflow(idx);
                }
            }
            Kind::Snap => {
                if b.snap_bytes + n > snapshot_bytes {
                    return self.refuse(
                        idx,
                        CloseCode::Size,
                        "snapshot larger than the fan-out's limit for one browser",
                    );
                }
            }
        }
        b.charge(kind, n);
        b.queue.push_back(Out {
            body: Body::Text(frame),
            kind,
        });
        self.mark_dirty(idx);
        self.check_total();
    }

    /// Past the cap on all browsers' queued bytes: the largest queues of stalled browsers, then
    /// of the others, are dropped and their browsers resynced (as for one browser's overflow)
    /// until the total is under ¾ of the
    /// cap, so a burst costs one O(browsers) scan per quarter of the cap, not per frame.
    fn check_total(&mut self) {
        if self.queued.get() <= self.total_queue_bytes || self.shedding {
            return;
        }
        // The drains and resyncs below push again; they must not start a nested scan.
        self.shedding = true;
        // Only what the sockets refuse is shed: first every browser with output writes what
        // its socket takes now (a flush round outside the pacing), so a browser that reads is
        // not resynced for frames queued to it within this loop iteration.
        self.drain_dirty();
        if self.queued.get() <= self.total_queue_bytes {
            self.shedding = false;
            return;
        }
        // Browsers whose socket refused bytes go first (largest first), then the others.
        let mut sizes: Vec<(bool, usize, usize)> = self
            .conns
            .iter()
            .filter_map(|(idx, conn)| match conn {
                Conn::Ws(b) if b.live_bytes + b.snap_bytes > 0 => {
                    Some((b.stalled, b.live_bytes + b.snap_bytes, idx))
                }
                _ => None,
            })
            .collect();
        sizes.sort_unstable_by(|a, b| b.cmp(a));
        let target = self.total_queue_bytes / 4 * 3;
        log::warn!(
            "fanout: {} bytes queued for browsers (cap {}): resyncing the largest queues",
            self.queued.get(),
            self.total_queue_bytes
        );
        for (_, _, idx) in sizes {
            if self.queued.get() <= target {
                break;
            }
            self.stats.shed += 1;
            self.overflow(idx);
        }
        self.shedding = false;
    }

    /// Queues an already framed keychange or heartbeat ([`protocol::text_frame`]), appended to the
    /// browser's pending wire bytes when they are last in its queue. Same budget as `push`.
    fn push_wire(&mut self, idx: usize, wire: &[u8]) {
        let queue_bytes = self.queue_bytes;
        let Some(b) = self.browser(idx) else { return };
        if b.closing.is_some() {
            return;
        }
        if b.live_bytes + wire.len() > queue_bytes {
            return self.overflow(idx);
        }
        b.charge(Kind::Live, wire.len());
        match b.queue.back_mut() {
            // A batch leaves the budgets when it is handed to the socket and is held until
            // written: at most one chunk (+ one frame) each, so what the caps do not see
            // stays small per browser.
            Some(Out {
                body: Body::Wire(buf),
                ..
            }) if buf.len() < DRAIN_CHUNK => buf.extend_from_slice(wire),
            _ => b.queue.push_back(Out {
                body: Body::Wire(wire.to_vec()),
                kind: Kind::Live,
            }),
        }
        self.mark_dirty(idx);
        self.check_total();
    }

    /// The browser is not reading fast enough: drop what is queued for it and start over
    /// with a snapshot per instance (this browser alone).
    fn overflow(&mut self, idx: usize) {
        let Some(b) = self.browser(idx) else { return };
        log::debug!("fanout: browser {} fell behind: resync", b.serial);
        b.queue.retain(|o| o.kind == Kind::Control);
        b.release_all();
        b.backlogged = true;
        for i in 0..self.links.len() {
            let subscribed = self
                .browser(idx)
                .is_some_and(|b| !matches!(b.inst[i], Inst::Idle));
            if subscribed {
                self.resync(idx, i, "slow-consumer");
            }
        }
    }

    /// Restarts instance `i` for a browser: `must-refetch`, then a snapshot.
    fn resync(&mut self, idx: usize, i: usize, reason: &str) {
        let Some(b) = self.browser(idx) else { return };
        if let Inst::Snapshot { id, .. } = b.inst[i] {
            self.snaps.remove(&id);
        }
        let Some(b) = self.browser(idx) else { return };
        b.inst[i] = Inst::Waiting;
        self.push(idx, protocol::must_refetch(i, reason).into(), Kind::Control);
        self.request_snapshot(idx, i);
    }

    /// Asks instance `i` for a snapshot of the browser's prefixes (when its link is live).
    fn request_snapshot(&mut self, idx: usize, i: usize) {
        let live = self.links[i].state == LinkState::Live;
        let (run, seq) = (
            self.links[i].run.clone().unwrap_or_default(),
            self.links[i].seq.unwrap_or(0),
        );
        let id = self.next_snap;
        let Some(b) = self.browser(idx) else { return };
        if b.closing.is_some() || !live || b.backlogged {
            // Requested later: at the link's next subscribe or heartbeat, or (backlogged)
            // when `drain` has written everything queued for this browser.
            b.inst[i] = Inst::Waiting;
            return;
        }
        let prefixes = b.prefixes.clone().unwrap_or_default();
        if prefixes.is_empty() {
            // Nothing visible: up to date by definition.
            b.inst[i] = Inst::Live;
            self.push(idx, protocol::up_to_date(i, &run, seq).into(), Kind::Snap);
            return;
        }
        b.inst[i] = Inst::Snapshot {
            id,
            seq: None,
            deferred: Vec::new(),
        };
        let serial = b.serial;
        self.next_snap += 1;
        self.snaps.insert(
            id,
            SnapOwner {
                conn: idx,
                serial,
                instance: i,
            },
        );
        self.pending_snaps[i].push_back(id);
        let id_text = id.to_string();
        let mut argv: Vec<&[u8]> = vec![b"FEED", b"SNAPSHOT", id_text.as_bytes()];
        argv.extend(prefixes.iter().map(Vec::as_slice));
        self.links[i].send(&argv);
    }

    /// A reconnecting browser's position for instance `i`: replay from the ring, or resync.
    fn try_resume(&mut self, idx: usize, i: usize, r: Resume) {
        let link = &self.links[i];
        if link.state != LinkState::Live {
            if let Some(b) = self.browser(idx) {
                b.inst[i] = Inst::Resume(r);
            }
            return;
        }
        let replay: Option<Vec<Rc<Effect>>> = match (&link.run, link.seq) {
            (Some(run), Some(seq)) if *run == r.run => {
                link.ring.since(r.seq, seq).map(|it| it.cloned().collect())
            }
            _ => None,
        };
        let Some(replay) = replay else {
            return self.resync(idx, i, "cannot-resume");
        };
        if let Some(b) = self.browser(idx) {
            b.inst[i] = Inst::Live;
        }
        for e in &replay {
            self.deliver(idx, i, e);
        }
        let link = &self.links[i];
        let up = protocol::up_to_date(i, link.run.as_deref().unwrap_or(""), link.seq.unwrap_or(0));
        if self
            .browser(idx)
            .is_some_and(|b| matches!(b.inst[i], Inst::Live))
        {
            self.push(idx, up.into(), Kind::Snap);
        }
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
                self.index.insert(&effective, idx);
                self.push(idx, protocol::subscribed(&effective).into(), Kind::Control);
                for i in 0..self.links.len() {
                    match resume.iter().find(|r| r.instance == i) {
                        Some(r) => self.try_resume(idx, i, r.clone()),
                        None => self.resync(idx, i, "initial"),
                    }
                }
            }
        }
    }

    /// Relays effect `e` of instance `i` to a live browser, filtered by its prefixes.
    fn deliver(&mut self, idx: usize, i: usize, e: &Rc<Effect>) {
        enum Act {
            Skip,
            Whole,
            Some(Vec<usize>),
            Resync(&'static str),
        }
        let Some(b) = self.browser(idx) else { return };
        let prefixes = b.prefixes.as_deref().unwrap_or(&[]);
        let act = match &e.scope {
            Scope::Flush => Act::Whole,
            Scope::Unknown => Act::Resync("unknown-effect"),
            Scope::Keys(pos) => {
                // Counted first: this runs once per browser per effect, and the common
                // cases (none or all keys visible) need no list.
                let seen = |&p: &usize| protocol::matches(prefixes, &e.args[p]);
                let n = pos.iter().filter(|p| seen(p)).count();
                if n == 0 {
                    Act::Skip
                } else if n == pos.len() {
                    Act::Whole
                } else if e.args[0].eq_ignore_ascii_case(b"del")
                    || e.args[0].eq_ignore_ascii_case(b"unlink")
                {
                    Act::Some(pos.iter().copied().filter(|p| seen(p)).collect())
                } else {
                    // Keys inside and outside the prefixes (RENAME across them, …): the
                    // effect cannot be relayed without leaking; refetch this instance.
                    Act::Resync("partial-effect")
                }
            }
        };
        match act {
            Act::Skip => {}
            Act::Whole => self.push_wire(idx, e.wire(i)),
            Act::Some(visible) => {
                // Each key of a DEL is independent: relay the visible ones.
                let mut argv: Vec<&[u8]> = vec![b"DEL"];
                argv.extend(visible.iter().map(|&p| e.args[p].as_slice()));
                let frame = protocol::keychange(i, e.seq, argv[1], &argv);
                self.push(idx, frame.into(), Kind::Live);
            }
            Act::Resync(reason) => {
                if reason == "unknown-effect" {
                    log::warn!(
                        "fanout: effect {} of instance {i} ({}) has no key the table can find: resync",
                        e.seq,
                        String::from_utf8_lossy(&e.args[0])
                    );
                }
                self.resync(idx, i, reason);
            }
        }
    }

    /// Moves queued frames into the socket until it would block: messages through
    /// tungstenite, framed batches ([`Body::Wire`]) straight to the socket once tungstenite
    /// has nothing buffered (so the byte stream stays in queue order).
    fn drain(&mut self, idx: usize) {
        self.drain_queue(idx);
        if let Some(Conn::Ws(b)) = self.conns.get_mut(idx) {
            b.stalled = !b.queue.is_empty();
        }
    }

    /// [`Server::drain`]'s work: returns when the queue is empty or the socket would block.
    fn drain_queue(&mut self, idx: usize) {
        let Some(Conn::Ws(b)) = self.conns.get_mut(idx) else {
            return;
        };
        b.dirty = false;
        b.drained_round = self.stats.rounds;
        loop {
            // Nothing more goes into tungstenite while it holds bytes the socket refused, so
            // its buffer (outside the queue budgets) stays within one chunk and one frame
            // however often a browser that does not read is drained.
            match b.ws.flush() {
                Ok(()) => {}
                Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(_) => return self.close(idx),
            }
            let mut moved = 0;
            while moved < DRAIN_CHUNK {
                if matches!(
                    b.queue.front(),
                    None | Some(Out {
                        body: Body::Wire(..),
                        ..
                    })
                ) {
                    break;
                }
                let Some(Out {
                    body: Body::Text(frame),
                    kind,
                }) = b.queue.pop_front()
                else {
                    unreachable!("checked above")
                };
                let n = frame.len();
                b.release(kind, n);
                moved += n;
                match b.ws.write(Message::Text(frame)) {
                    Ok(()) => {}
                    // The frame is buffered inside tungstenite; go on at the next WRITABLE.
                    Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => {
                        return;
                    }
                    Err(_) => {
                        if b.closing.is_none() {
                            return self.close(idx);
                        }
                        return;
                    }
                }
            }
            match b.ws.flush() {
                Ok(()) => {}
                Err(tungstenite::Error::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(_) => return self.close(idx),
            }
            // tungstenite's buffer and the stream's raw bytes are empty (flush succeeded):
            // a framed batch may go out directly.
            if matches!(
                b.queue.front(),
                Some(Out {
                    body: Body::Wire(..),
                    ..
                })
            ) {
                let Some(Out {
                    body: Body::Wire(buf),
                    ..
                }) = b.queue.pop_front()
                else {
                    unreachable!("checked above")
                };
                b.release(Kind::Live, buf.len());
                self.stats.writes += 1;
                self.stats.bytes += buf.len() as u64;
                match b.ws.get_mut().send_raw(buf) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                    Err(_) => return self.close(idx),
                }
            }
            if b.queue.is_empty() {
                break;
            }
        }
        // Everything queued reached the socket: a browser resynced for falling behind gets
        // its snapshots now (see `Browser::backlogged`).
        if std::mem::take(&mut b.backlogged) {
            for i in 0..self.links.len() {
                if self
                    .browser(idx)
                    .is_some_and(|b| matches!(b.inst[i], Inst::Waiting))
                {
                    self.request_snapshot(idx, i);
                }
            }
        }
    }

    /// The end of a loop iteration: drains the dirty browsers now when they are few (an
    /// idle fleet's latency stays one loop iteration) or when `flush_delay` has passed since
    /// the previous round; otherwise they wait, and effects arriving meanwhile join the same
    /// write (see the module doc, *Pacing*).
    fn flush_round(&mut self) {
        if self.dirty.is_empty() {
            return;
        }
        let now = Instant::now();
        // Waiting pays only when most dirty browsers were written in the previous round too
        // (a broadcast): their next keychanges can share a write. Browsers of different
        // prefixes (one keychange each) would only wait for nothing.
        let repeated = self.dirty_again * 2 > self.dirty.len();
        if self.dirty.len() > FLUSH_NOW_MAX && repeated && now < self.next_flush {
            return;
        }
        self.next_flush = now + self.flush_delay;
        self.stats.rounds += 1;
        self.dirty_again = 0;
        self.drain_dirty();
    }

    fn drain_dirty(&mut self) {
        let dirty = std::mem::take(&mut self.dirty);
        for &idx in &dirty {
            self.drain(idx);
        }
        let mut dirty = dirty;
        dirty.clear();
        if self.dirty.is_empty() {
            self.dirty = dirty;
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
        self.links[i].down(self.poll.registry(), now);
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
            FeedMsg::Effect { seq, args } => {
                let link = &mut self.links[i];
                let gap = link.seq.is_some_and(|s| s + 1 != seq);
                if gap {
                    log::warn!(
                        "fanout: instance {i}: effect {seq} after {:?}: gap, browsers refetch",
                        link.seq
                    );
                }
                link.seq = Some(seq);
                let e = Rc::new(Effect::new(seq, args));
                link.ring.push(Rc::clone(&e));
                if !gap && let Scope::Keys(pos) = &e.scope {
                    // Only browsers with a prefix of one of its keys can be concerned: a
                    // Live one relays it, one in a snapshot defers it (for any other the
                    // relay would find no visible key and skip it).
                    let mut cand = std::mem::take(&mut self.candidates);
                    self.index
                        .candidates(pos.iter().map(|&p| e.args[p].as_slice()), &mut cand);
                    for &idx in &cand {
                        let Some(b) = self.browser(idx) else { continue };
                        match &mut b.inst[i] {
                            Inst::Live => self.deliver(idx, i, &e),
                            Inst::Snapshot {
                                seq: Some(s),
                                deferred,
                                ..
                            } if seq > *s => deferred.push(Rc::clone(&e)),
                            _ => {}
                        }
                    }
                    cand.clear();
                    self.candidates = cand;
                    return;
                }
                // A gap, a flush or an effect without known keys concerns every browser.
                for idx in self.slots() {
                    let Some(b) = self.browser(idx) else { continue };
                    let act = match &mut b.inst[i] {
                        Inst::Live if gap => 2,
                        Inst::Live => 1,
                        Inst::Snapshot {
                            seq: Some(s),
                            deferred,
                            ..
                        } if seq > *s => {
                            if gap {
                                2
                            } else {
                                deferred.push(Rc::clone(&e));
                                0
                            }
                        }
                        _ => 0,
                    };
                    match act {
                        1 => self.deliver(idx, i, &e),
                        2 => self.resync(idx, i, "feed-gap"),
                        _ => {}
                    }
                }
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
            FeedMsg::Snapshot { id, seq, keys } => {
                self.pending_snaps[i].retain(|&p| p != id);
                let Some(idx) = self.snap_owner(id, i) else {
                    return;
                };
                let run = self.links[i].run.clone().unwrap_or_default();
                if let Some(b) = self.browser(idx)
                    && let Inst::Snapshot { seq: s, .. } = &mut b.inst[i]
                {
                    *s = Some(seq);
                }
                self.push(
                    idx,
                    protocol::snapshot(i, &run, seq, keys).into(),
                    Kind::Snap,
                );
            }
            FeedMsg::Entry { id, args } => {
                let Some(idx) = self.snap_owner(id, i) else {
                    return;
                };
                let Some(b) = self.browser(idx) else { return };
                let prefixes = b.prefixes.as_deref().unwrap_or(&[]);
                // The engine selected by prefix already; checking again costs little and
                // keeps a key outside the browser's prefixes from ever reaching it.
                let ok = match crate::feed::scope_of(&args) {
                    Scope::Keys(pos) => pos.iter().all(|&p| protocol::matches(prefixes, &args[p])),
                    _ => false,
                };
                if ok {
                    let argv: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
                    self.push(idx, protocol::entry(i, &argv).into(), Kind::Snap);
                } else {
                    log::warn!("fanout: instance {i}: snapshot entry outside the prefixes dropped");
                }
            }
            FeedMsg::SnapshotEnd { id, seq } => {
                let Some(idx) = self.snap_owner(id, i) else {
                    return;
                };
                self.snaps.remove(&id);
                let Some(b) = self.browser(idx) else { return };
                let deferred = match std::mem::replace(&mut b.inst[i], Inst::Live) {
                    Inst::Snapshot { deferred, .. } => deferred,
                    _ => Vec::new(),
                };
                self.push(idx, protocol::snapshot_end(i, seq).into(), Kind::Snap);
                for e in &deferred {
                    self.deliver(idx, i, e);
                }
                let link = &self.links[i];
                let at = link.seq.unwrap_or(seq).max(seq);
                let up = protocol::up_to_date(i, link.run.as_deref().unwrap_or(""), at);
                if self
                    .browser(idx)
                    .is_some_and(|b| matches!(b.inst[i], Inst::Live))
                {
                    self.push(idx, up.into(), Kind::Snap);
                }
            }
            FeedMsg::Error(e) => {
                // During the subscribe step `Link::event` handles it; here it answers a
                // FEED SNAPSHOT: charge it to the oldest snapshot without a header, whose
                // browser retries at the next tick.
                log::warn!("fanout: instance {i}: engine error: {e}");
                if let Some(id) = self.pending_snaps[i].pop_front()
                    && let Some(idx) = self.snap_owner(id, i)
                {
                    self.snaps.remove(&id);
                    if let Some(b) = self.browser(idx) {
                        b.inst[i] = Inst::Waiting;
                    }
                    self.push(
                        idx,
                        protocol::error("snapshot-failed", &e).into(),
                        Kind::Control,
                    );
                }
            }
        }
    }

    /// The live browser that asked for snapshot `id` of instance `i`, if still there.
    fn snap_owner(&mut self, id: u64, i: usize) -> Option<usize> {
        let owner = *self.snaps.get(&id)?;
        let ok = owner.instance == i
            && self.browser(owner.conn).is_some_and(|b| {
                b.serial == owner.serial
                    && matches!(b.inst[i], Inst::Snapshot { id: x, .. } if x == id)
            });
        if ok {
            Some(owner.conn)
        } else {
            self.snaps.remove(&id);
            None
        }
    }

    // -----------------------------------------------------------------------------------
    // Timers

    fn tick(&mut self, now: Instant) {
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

#[cfg(test)]
mod tests {
    use super::PrefixIndex;

    fn found(ix: &PrefixIndex, keys: &[&str]) -> Vec<usize> {
        let mut out = Vec::new();
        ix.candidates(keys.iter().map(|k| k.as_bytes()), &mut out);
        out.sort_unstable();
        out
    }

    #[test]
    fn prefix_index_finds_each_concerned_browser_once() {
        let mut ix = PrefixIndex::default();
        let p = |v: &[&str]| v.iter().map(|s| s.as_bytes().to_vec()).collect::<Vec<_>>();
        ix.insert(&p(&["fan:1:"]), 1);
        ix.insert(&p(&["fan:10:"]), 10);
        ix.insert(&p(&["fan:1:", "other:"]), 2);
        ix.insert(&p(&[""]), 7);
        assert_eq!(found(&ix, &["fan:1:k"]), vec![1, 2, 7]);
        assert_eq!(found(&ix, &["fan:10:k"]), vec![7, 10]);
        assert_eq!(found(&ix, &["fan:1:k", "other:x"]), vec![1, 2, 7]);
        assert_eq!(found(&ix, &["fan:"]), vec![7]);
        assert_eq!(found(&ix, &[""]), vec![7]);
        ix.remove(&p(&[""]), 7);
        ix.remove(&p(&["fan:1:", "other:"]), 2);
        assert_eq!(found(&ix, &["fan:1:k", "other:x"]), vec![1]);
        assert_eq!(found(&ix, &["zzz"]), Vec::<usize>::new());
        // Removing what is not there changes nothing.
        ix.remove(&p(&["fan:1:"]), 99);
        assert_eq!(found(&ix, &["fan:1:"]), vec![1]);
        ix.remove(&p(&["fan:1:"]), 1);
        ix.remove(&p(&["fan:10:"]), 10);
        assert!(ix.by_prefix.is_empty() && ix.lens.is_empty());
    }
}
