//! The engines' cluster bus for PUBLISH: one lazily opened connection to each other engine of
//! the topology, carrying `PUBLISHLOCAL channel message` requests (docs/cluster.md,
//! "Pub/sub").
//!
//! Redis Cluster broadcasts every PUBLISH over its bus so that subscribers on every node
//! receive it. Here engine-core queues a delivery for
//! [`BUS_CLIENT_ID`](engine_core::cmd::pubsub::BUS_CLIENT_ID) when a client's PUBLISH runs in a
//! cluster of several engines; the event loop hands its bytes to [`Bus::send`], which appends
//! them to every peer's queue. The receiving engine runs PUBLISHLOCAL, which delivers to its
//! own subscribers and is never forwarded again, so each subscriber gets a message once.
//!
//! # Rules
//!
//! - **Lazy**: a peer is connected (non-blocking `connect`) on the first message for it. An
//!   `AUTH` goes first when the fleet has authentication: as the internal user when
//!   `recached start` passed its password (docs/security.md), else with the `requirepass`
//!   the engine started with (the engines of a fleet share a config).
//! - **Bounded**: at most [`QUEUE_CAP`] unsent bytes per peer; beyond that, messages to that
//!   peer are dropped, like a Redis bus link over its limit.
//! - **Best effort**: a failed connect, a write error or a closed link drops the peer's queue
//!   and marks it down: a link that was up is reconnected by the next message; a failed
//!   connect backs off ([`BACKOFF_MIN_US`] doubling up to [`BACKOFF_MAX_US`]), messages for
//!   the peer being dropped until the backoff ends. Redis's cluster bus gives no delivery guarantee either.
//! - **Never blocks the loop**: sockets are non-blocking and edge-triggered; replies (`:N`) are
//!   read and discarded. Host names are resolved once, when a peer is first connected
//!   (topologies normally name IP addresses; a wildcard host means this machine).

use std::io::{self, Read, Write};
use std::net::{SocketAddr, ToSocketAddrs};

use log::{debug, warn};
use mio::event::Event;
use mio::net::TcpStream;
use mio::{Interest, Registry, Token};

/// Unsent bytes kept per peer (messages past it are dropped).
pub const QUEUE_CAP: usize = 8 << 20;
/// First wait after a peer fails, µs.
pub const BACKOFF_MIN_US: u64 = 100_000;
/// Longest wait between connection attempts, µs.
pub const BACKOFF_MAX_US: u64 = 5_000_000;
/// Peer `i` has token `BUS_TOKEN_TOP - i`: below the listeners' tokens
/// (`crate::listeners::TOKEN_BASE`), far above any slab key.
pub(crate) const BUS_TOKEN_TOP: usize = usize::MAX - 64;

struct Peer {
    /// `host:port` to connect to (a wildcard host becomes the loopback address).
    host: String,
    port: u16,
    addr: Option<SocketAddr>,
    stream: Option<TcpStream>,
    /// The non-blocking connect finished.
    connected: bool,
    /// Unsent bytes are `out[head..]`.
    out: Vec<u8>,
    head: usize,
    /// While down (no stream): messages are dropped until this time, µs.
    retry_at_us: u64,
    backoff_us: u64,
}

/// Every peer link of this engine; empty when standalone or alone in the topology.
#[derive(Default)]
pub struct Bus {
    peers: Vec<Peer>,
    /// The `AUTH` request sent first on every link; empty = none.
    auth: Vec<u8>,
}

impl Bus {
    /// One (unconnected) link per other engine of `cluster`; `requirepass` is the engine's.
    pub fn new(cluster: &engine_core::cmd::cluster::Cluster, requirepass: &[u8]) -> Bus {
        let mut auth = Vec::new();
        let internal = std::env::var(engine_core::acl::INTERNAL_AUTH_ENV).unwrap_or_default();
        if !internal.is_empty() {
            let user = engine_core::acl::INTERNAL_USER.as_bytes();
            resp::encode_request(&mut auth, &[&b"AUTH"[..], user, internal.as_bytes()]);
        } else if !requirepass.is_empty() {
            resp::encode_request(&mut auth, &[&b"AUTH"[..], requirepass]);
        }
        let peers = cluster
            .peers()
            .map(|(_, host, port)| Peer {
                host: host.unwrap_or("127.0.0.1").to_string(),
                port,
                addr: None,
                stream: None,
                connected: false,
                out: Vec::new(),
                head: 0,
                retry_at_us: 0,
                backoff_us: BACKOFF_MIN_US,
            })
            .collect();
        Bus { peers, auth }
    }

    /// The peer a poll token belongs to, if any.
    pub fn peer_of(&self, token: Token) -> Option<usize> {
        let i = BUS_TOKEN_TOP.checked_sub(token.0)?;
        (i < self.peers.len()).then_some(i)
    }

    /// Queues `bytes` (one request) for every peer, connecting the ones not yet connected.
    pub fn send(&mut self, registry: &Registry, bytes: &[u8], now_us: u64) {
        for i in 0..self.peers.len() {
            let p = &mut self.peers[i];
            if p.stream.is_none() {
                if now_us < p.retry_at_us {
                    continue; // down: dropped
                }
                if let Err(e) = connect(p, registry, i, &self.auth) {
                    self.fail(registry, i, now_us, &e);
                    continue;
                }
            }
            let p = &mut self.peers[i];
            if p.out.len() - p.head + bytes.len() > QUEUE_CAP {
                continue; // over the bound: dropped
            }
            p.out.extend_from_slice(bytes);
            if p.connected
                && let Err(e) = flush(p)
            {
                self.fail(registry, i, now_us, &e);
            }
        }
    }

    /// A readiness event on peer `i`'s socket: finish the connect, discard replies, write.
    pub fn on_event(&mut self, registry: &Registry, i: usize, event: &Event, now_us: u64) {
        if let Err(e) = self.service(i, event) {
            self.fail(registry, i, now_us, &e);
        }
    }

    fn service(&mut self, i: usize, event: &Event) -> io::Result<()> {
        let p = &mut self.peers[i];
        let Some(stream) = p.stream.as_mut() else {
            return Ok(());
        };
        if !p.connected {
            // mio's rule for a non-blocking connect: on a writable (or error) event, check
            // `take_error`, then `peer_addr` (NotConnected = still in progress).
            if let Some(e) = stream.take_error()? {
                return Err(e);
            }
            match stream.peer_addr() {
                Ok(_) => {
                    p.connected = true;
                    p.backoff_us = BACKOFF_MIN_US;
                    debug!("cluster bus: connected to {}:{}", p.host, p.port);
                }
                Err(e) if e.kind() == io::ErrorKind::NotConnected => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        if event.is_readable() || event.is_read_closed() {
            let mut buf = [0u8; 4096];
            loop {
                match stream.read(&mut buf) {
                    Ok(0) => {
                        return Err(io::Error::new(
                            io::ErrorKind::ConnectionReset,
                            "closed by peer",
                        ));
                    }
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
        }
        flush(p)
    }

    /// Drops peer `i`'s link and queue and starts (or lengthens) its backoff.
    fn fail(&mut self, registry: &Registry, i: usize, now_us: u64, e: &io::Error) {
        let p = &mut self.peers[i];
        if let Some(mut s) = p.stream.take() {
            let _ = registry.deregister(&mut s);
        }
        if p.connected {
            warn!("cluster bus: link to {}:{} lost: {e}", p.host, p.port);
        } else {
            debug!("cluster bus: cannot reach {}:{}: {e}", p.host, p.port);
        }
        // A link that was up (e.g. closed by the peer's idle `timeout`) is retried on the
        // next message; failed connects back off.
        p.retry_at_us = if p.connected {
            now_us
        } else {
            now_us + p.backoff_us
        };
        if !p.connected {
            p.backoff_us = (p.backoff_us * 2).min(BACKOFF_MAX_US);
        }
        p.connected = false;
        p.out = Vec::new();
        p.head = 0;
    }
}

fn connect(p: &mut Peer, registry: &Registry, i: usize, auth: &[u8]) -> io::Result<()> {
    let addr = match p.addr {
        Some(a) => a,
        None => {
            let a = (p.host.as_str(), p.port)
                .to_socket_addrs()?
                .next()
                .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no address"))?;
            p.addr = Some(a);
            a
        }
    };
    let mut s = TcpStream::connect(addr)?;
    let _ = s.set_nodelay(true);
    registry.register(
        &mut s,
        Token(BUS_TOKEN_TOP - i),
        Interest::READABLE | Interest::WRITABLE,
    )?;
    p.stream = Some(s);
    p.connected = false;
    p.out.clear();
    p.head = 0;
    p.out.extend_from_slice(auth);
    Ok(())
}

/// Writes as much of the queue as the socket takes.
fn flush(p: &mut Peer) -> io::Result<()> {
    let Some(stream) = p.stream.as_mut() else {
        return Ok(());
    };
    while p.head < p.out.len() {
        match stream.write(&p.out[p.head..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => p.head += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    if p.head == p.out.len() {
        p.out.clear();
        p.head = 0;
    } else if p.head > p.out.len() / 2 {
        // Keep the queue's memory bounded by what is unsent.
        p.out.drain(..p.head);
        p.head = 0;
    }
    Ok(())
}
