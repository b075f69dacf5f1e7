//! One link to a backend instance: a single persistent connection shared by every client
//! (multiplexed), and its reconnect state. Each instance has one link per protocol and
//! database: the RESP2 link of database 0, connected at start, and for each other (protocol,
//! database) pair a link opened when the first client on it needs it, which sends `HELLO 3`
//! (RESP3 links) and `SELECT db` (databases other than 0) first, so that every request
//! written on it runs in that protocol and database as written ([`link_index`]).
//!
//! Each of those has [`SCRIPT_LINKS`] **script links** that carry only EVAL/EVALSHA/FCALL
//! (and their `_RO` forms), a script taking an idle one: a script that runs past
//! `busy-reply-threshold` then holds only its script link, and the other clients' requests,
//! ordinary ones and scripts alike, reach the instance on other links and get its `-BUSY` at
//! once, as clients of a single Redis do, instead of queueing behind the script on the same
//! connection (`crate::exec`, "Scripts").
//!
//! Requests from all clients are appended to `out` and written once per loop iteration;
//! each gets a [`Waiter`] at the back of `inflight`. Redis answers a connection's requests
//! in order, so the n-th complete reply frame read (delimited with
//! `resp::reply::FrameScanner`) belongs to the n-th waiter.
//!
//! # Link states
//!
//! ```text
//!            connect() ok               writable, no socket error
//!   Down ─────────────────► Connecting ─────────────────────────► Up
//!    ▲  retry_at reached      │  refused / timeout (CONNECT_TIMEOUT)  │ EOF, I/O error,
//!    └────────────────────────┴───────────────────────────────────────┘ bad reply
//!        backoff 100 ms, doubling to 1 s; reset once Up
//! ```
//!
//! While Down, requests for the instance get [`Backend::unavailable`] at once
//! (`-ERR instance 1 (127.0.0.1:6401) is unavailable`); when a link fails, every in-flight
//! request gets the same error. Requests are queued during a connect attempt only for the
//! first connect at start-up; during a reconnect they fail fast, so a dead instance never
//! makes clients wait for a connect timeout. A link that breaks while up is retried at once,
//! then with the backoff.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Interest, Registry, Token};
use resp::reply::FrameScanner;

use crate::client::{BIG_BUFFER, READ_CHUNK, Waiter};

/// First retry delay after a failed connect; doubled per failure up to [`MAX_BACKOFF`].
pub const MIN_BACKOFF: Duration = Duration::from_millis(100);
pub const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// A connect attempt still pending after this is abandoned (blackholed host).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// No socket; the next attempt is at `retry_at`.
    Down {
        retry_at: Instant,
    },
    /// Non-blocking connect in progress. `queue`: accept requests meanwhile.
    Connecting {
        since: Instant,
        queue: bool,
    },
    Up,
}

pub struct Backend {
    pub index: usize,
    pub addr: SocketAddr,
    /// `host:port` as configured (for messages).
    pub name: String,
    pub wire: Wire,
    pub link: Link,
    /// One entry per request written or queued, in order.
    pub inflight: VecDeque<Waiter>,
    backoff: Duration,
    /// The error reply for requests this instance cannot serve.
    pub unavailable: Vec<u8>,
    /// Listed in the loop's to-flush list this iteration.
    pub dirty: bool,
    /// `AUTH` with the internal credential, sent first on every new connection
    /// (`crate::auth`); its reply goes to [`LOGIN_WAITER`] and is consumed here.
    pub login: Option<Vec<u8>>,
    /// The RESP3 link of this instance: `HELLO 3` follows the login on every new
    /// connection (its reply is consumed like the login's), so every reply read is RESP3.
    pub resp3: bool,
    /// The database every request on this link runs in (`SELECT db` follows the login and
    /// `HELLO 3` on every new connection when not 0; its reply is consumed likewise).
    pub db: usize,
    /// A link no client has needed yet: not connected, not retried.
    pub dormant: bool,
    /// Requests sent on every new connection after the login (and `HELLO 3` / `SELECT`),
    /// their replies consumed like the login's: the memcached port's `SCRIPT LOAD`s.
    pub preamble: Vec<Vec<u8>>,
}

/// Index in the proxy's link table of instance `instance`'s link for `db`, `resp3` and
/// `kind`, with `per` links per instance ([`links_per_instance`]): an instance's links are
/// contiguous (RESP2 then RESP3 for each database, each with its kinds), so an instance
/// learned at run time (`crate::redirect`) appends its links and no index moves; the first
/// link of each instance (database 0, RESP2, ordinary) is the one that decides whether the
/// instance is up.
#[inline]
pub fn link_index(per: usize, db: usize, resp3: bool, kind: usize, instance: usize) -> usize {
    debug_assert!(kind <= SCRIPT_LINKS);
    instance * per + (db * 2 + usize::from(resp3)) * (1 + SCRIPT_LINKS) + kind
}

/// Links per instance in the link table, with `databases` databases.
pub fn links_per_instance(databases: usize) -> usize {
    databases.max(1) * 2 * (1 + SCRIPT_LINKS)
}

/// The links of one instance, in [`link_index`] order: database 0's ordinary RESP2 link
/// first (connected by the caller), the others dormant until a client needs them.
/// `several`: the fleet has more than one instance (script links then discover keys of
/// other instances, `crate::coord::Scripts`).
pub fn instance_links(
    instance: usize,
    name: &str,
    addr: SocketAddr,
    per: usize,
    login: &Option<Vec<u8>>,
    several: bool,
) -> impl Iterator<Item = Backend> {
    let kinds = 1 + SCRIPT_LINKS;
    let (name, login) = (name.to_string(), login.clone());
    (0..per).map(move |link| {
        let mut b = Backend::new(instance, name.clone(), addr);
        b.db = link / (2 * kinds);
        b.resp3 = (link / kinds) % 2 == 1;
        b.dormant = link != 0;
        b.login = login.clone();
        if link % kinds != 0 && several {
            b.preamble
                .push(b"*2\r\n$10\r\nTXDISCOVER\r\n$2\r\nON\r\n".to_vec());
        }
        debug_assert_eq!(
            link_index(per, b.db, b.resp3, link % kinds, instance),
            instance * per + link
        );
        b
    })
}

/// Script links per (protocol, database) pair and instance; a link's `kind` in
/// [`link_index`] is 0 for the ordinary link, `1..=SCRIPT_LINKS` for the script links.
pub const SCRIPT_LINKS: usize = 4;

/// `SELECT db` as a request.
pub fn select_request(db: usize) -> Vec<u8> {
    let db = itoa::Buffer::new().format(db).to_owned();
    format!("*2\r\n$6\r\nSELECT\r\n${}\r\n{db}\r\n", db.len()).into_bytes()
}

/// Sent on every new link after its preamble: this connection gets `-ASK` rather than wait
/// for a slot an engine holds while `recached resize` moves it (docs/cluster.md, *Slot holds*).
pub const SLOTHOLD_BYPASS: &[u8] = b"*2\r\n$8\r\nSLOTHOLD\r\n$6\r\nBYPASS\r\n";

/// `HELLO 3`, the first request of a RESP3 link (after the login).
pub const HELLO3: &[u8] = b"*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n";

/// The waiter of a database link's `SELECT`: refused, the link must not serve requests
/// (they would run in another database), so it is dropped like a link with a bad reply.
const SELECT_WAITER: Waiter = Waiter {
    token: usize::MAX,
    client_id: u64::MAX,
    seq: 1,
    part: 0,
    hops: crate::client::Hops::NONE,
};

/// The waiter of the login AUTH: no client has this token.
const LOGIN_WAITER: Waiter = Waiter {
    token: usize::MAX,
    client_id: u64::MAX,
    seq: 0,
    part: 0,
    hops: crate::client::Hops::NONE,
};

/// The waiter of an `ASKING` sent before a request redirected by `-ASK` (`crate::redirect`):
/// its `+OK` is consumed here.
pub const ASKING_WAITER: Waiter = Waiter {
    token: usize::MAX,
    client_id: u64::MAX,
    seq: 2,
    part: 0,
    hops: crate::client::Hops::NONE,
};

/// The waiter of a `CLUSTER SLOTS` the loop sends to refresh its slot table
/// (`crate::redirect`): its reply goes to the loop, no client.
pub const REFRESH_WAITER: Waiter = Waiter {
    token: usize::MAX,
    client_id: u64::MAX,
    seq: 3,
    part: 0,
    hops: crate::client::Hops::NONE,
};

/// Whether `w` is one of the loop's own waiters above (compared without `hops`, which
/// carries the request length).
pub fn is_internal(w: &Waiter, internal: &Waiter) -> bool {
    w.token == internal.token && w.client_id == internal.client_id && w.seq == internal.seq
}

impl Backend {
    pub fn new(index: usize, name: String, addr: SocketAddr) -> Self {
        let unavailable = format!("-ERR instance {index} ({name}) is unavailable\r\n").into_bytes();
        let mut wire = Wire::new();
        wire.retain = true;
        Backend {
            index,
            addr,
            name,
            wire,
            link: Link::Down {
                retry_at: Instant::now(),
            },
            inflight: VecDeque::new(),
            backoff: MIN_BACKOFF,
            unavailable,
            dirty: false,
            login: None,
            resp3: false,
            db: 0,
            dormant: false,
            preamble: Vec::new(),
        }
    }

    /// Whether a request sent now will be attempted (else answer [`Self::unavailable`]).
    pub fn accepts(&self) -> bool {
        matches!(self.link, Link::Up | Link::Connecting { queue: true, .. })
    }

    /// Queues a request; the caller marks the backend dirty so it is written this iteration.
    pub fn send(&mut self, request: &[u8], mut waiter: Waiter) {
        self.wire.out.extend_from_slice(request);
        waiter.hops.len = request.len();
        self.inflight.push_back(waiter);
    }

    /// Unwritten request bytes.
    pub fn unsent(&self) -> usize {
        self.wire.unsent()
    }

    /// Starts a non-blocking connect. `queue`: see [`Link::Connecting`].
    pub fn connect(&mut self, registry: &Registry, token: Token, now: Instant, queue: bool) {
        match Wire::connect(self.addr, registry, token) {
            Ok(stream) => {
                self.wire.stream = Some(stream);
                self.link = Link::Connecting { since: now, queue };
                // First on the new connection, before anything queued meanwhile: the
                // login, then (RESP3 link) HELLO 3, then (other databases) SELECT.
                if self.wire.rbuf.is_empty() {
                    self.wire.rbuf = vec![0; READ_CHUNK];
                }
                // Each with its length: the link keeps sent requests until answered.
                let sized = |w: Waiter, len: usize| Waiter {
                    hops: crate::client::Hops { len, ..w.hops },
                    ..w
                };
                // The proxy follows -ASK itself: a slot `recached resize` holds never makes
                // this link wait (engine `SLOTHOLD`; redis-server refuses it, unheard).
                self.wire.out.splice(0..0, SLOTHOLD_BYPASS.iter().copied());
                self.inflight
                    .push_front(sized(ASKING_WAITER, SLOTHOLD_BYPASS.len()));
                for request in self.preamble.iter().rev() {
                    self.wire.out.splice(0..0, request.iter().copied());
                    self.inflight.push_front(sized(LOGIN_WAITER, request.len()));
                }
                if self.db != 0 {
                    let select = select_request(self.db);
                    let len = select.len();
                    self.wire.out.splice(0..0, select);
                    self.inflight.push_front(sized(SELECT_WAITER, len));
                }
                if self.resp3 {
                    self.wire.out.splice(0..0, HELLO3.iter().copied());
                    self.inflight.push_front(sized(LOGIN_WAITER, HELLO3.len()));
                }
                if let Some(login) = &self.login {
                    self.wire.out.splice(0..0, login.iter().copied());
                    self.inflight.push_front(sized(LOGIN_WAITER, login.len()));
                }
            }
            Err(e) => {
                log::debug!("instance {} ({}): connect: {e}", self.index, self.name);
                self.schedule_retry(now);
            }
        }
    }

    fn schedule_retry(&mut self, now: Instant) {
        self.link = Link::Down {
            retry_at: now + self.backoff,
        };
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
    }

    /// While connecting: `Ok(true)` once connected, `Ok(false)` if still in progress.
    pub fn finish_connect(&mut self) -> io::Result<bool> {
        let done = self.wire.finish_connect()?;
        if done {
            self.link = Link::Up;
            self.backoff = MIN_BACKOFF;
        }
        Ok(done)
    }

    /// Drops the connection: returns the waiters to answer with [`Self::unavailable`] and
    /// schedules the next attempt (at once if the link had been up, else after the backoff).
    pub fn fail(&mut self, registry: &Registry, now: Instant) -> VecDeque<Waiter> {
        let was_up = self.link == Link::Up;
        self.wire.close(registry);
        if was_up {
            self.backoff = MIN_BACKOFF;
            self.link = Link::Down { retry_at: now };
        } else {
            self.schedule_retry(now);
        }
        std::mem::take(&mut self.inflight)
    }

    /// Writes queued requests until done or the socket is full.
    pub fn flush(&mut self) -> io::Result<()> {
        self.wire.flush()
    }

    /// Reads what the socket has. `Ok(false)`: the instance closed the connection.
    pub fn read(&mut self) -> io::Result<bool> {
        self.wire.read()
    }

    /// Calls `deliver(waiter, reply, sent)` for each complete reply frame read so far,
    /// `sent.request(waiter)` being the bytes the reply answers.
    /// `Err` for a malformed reply or a reply nobody asked for: the link must be dropped.
    pub fn deliver_replies(
        &mut self,
        mut deliver: impl FnMut(Waiter, &[u8], Sent<'_>),
    ) -> Result<(), String> {
        let inflight = &mut self.inflight;
        let (index, name) = (self.index, &self.name);
        self.wire.frames_sent(|frame, sent| {
            let Some(w) = inflight.pop_front() else {
                return Err("reply without a request".into());
            };
            let len = w.hops.len;
            // A client's request (the loop's own have no client token): the common case first.
            if w.token != usize::MAX {
                deliver(w, frame, sent);
                return Ok(len);
            }
            if is_internal(&w, &ASKING_WAITER) {
                return Ok(len); // `+OK`, or an error the request after it will show
            }
            let select = is_internal(&w, &SELECT_WAITER);
            if select && frame.first() == Some(&b'-') {
                return Err(format!(
                    "SELECT refused: {}",
                    String::from_utf8_lossy(frame).trim_end()
                ));
            }
            if is_internal(&w, &LOGIN_WAITER) || select {
                if frame.first() == Some(&b'-') {
                    log::warn!(
                        "instance {index} ({name}): the internal credential, HELLO 3 or a \
                         connection preamble request was refused: {}",
                        String::from_utf8_lossy(frame).trim_end()
                    );
                }
                return Ok(len);
            }
            deliver(w, frame, sent);
            Ok(len)
        })
    }
}

/// The written, unanswered requests of a link, in order ([`Wire::frames_sent`]).
#[derive(Clone, Copy)]
pub struct Sent<'a> {
    out: &'a [u8],
    from: usize,
}

impl<'a> Sent<'a> {
    /// The request the frame being delivered answers: the first `w.hops.len` bytes (empty if
    /// the link does not have them).
    pub fn request(&self, w: &Waiter) -> &'a [u8] {
        self.out
            .get(self.from..self.from.saturating_add(w.hops.len))
            .unwrap_or_default()
    }
}

/// The socket side of an instance connection (shared [`Backend`] or a client's dedicated
/// connection, `crate::dedicated`): unsent requests, unparsed replies, the frame scanner.
pub struct Wire {
    pub stream: Option<TcpStream>,
    /// The socket's own address once connected: how an instance names this connection
    /// (MONITOR lines, `crate::dedicated::monitor_line_shown`).
    pub local: Option<SocketAddr>,
    /// Requests not yet written: `out[out_pos..]`. With `retain`, `out[acked..out_pos]` are
    /// requests written and not answered yet (a shared link re-sends one elsewhere when its
    /// reply is a redirect, `crate::redirect`), kept without a copy per request.
    pub out: Vec<u8>,
    pub out_pos: usize,
    acked: usize,
    /// Keep written requests until answered (shared links; see `out`).
    pub retain: bool,
    /// Replies not yet delivered: `rbuf[rstart..rend]`.
    rbuf: Vec<u8>,
    rstart: usize,
    rend: usize,
    scanner: FrameScanner,
}

impl Wire {
    pub fn new() -> Self {
        Wire {
            stream: None,
            local: None,
            out: Vec::new(),
            out_pos: 0,
            acked: 0,
            retain: false,
            // Allocated by the first connect: most links of the table never connect.
            rbuf: Vec::new(),
            rstart: 0,
            rend: 0,
            scanner: FrameScanner::new(),
        }
    }

    /// Starts a non-blocking connect to `addr`, registered for READABLE | WRITABLE.
    pub fn connect(addr: SocketAddr, registry: &Registry, token: Token) -> io::Result<TcpStream> {
        let mut stream = TcpStream::connect(addr)?;
        registry.register(&mut stream, token, Interest::READABLE | Interest::WRITABLE)?;
        Ok(stream)
    }

    /// While connecting: `Ok(true)` once connected, `Ok(false)` if still in progress.
    pub fn finish_connect(&mut self) -> io::Result<bool> {
        let Some(stream) = &self.stream else {
            return Ok(false);
        };
        if let Some(e) = stream.take_error()? {
            return Err(e);
        }
        match stream.peer_addr() {
            Ok(_) => {
                let _ = stream.set_nodelay(true);
                self.local = stream.local_addr().ok();
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Deregisters and drops the socket and forgets buffered bytes in both directions.
    pub fn close(&mut self, registry: &Registry) {
        if let Some(mut s) = self.stream.take() {
            let _ = registry.deregister(&mut s);
        }
        self.local = None;
        self.out.clear();
        self.out_pos = 0;
        self.acked = 0;
        self.rstart = 0;
        self.rend = 0;
        self.scanner = FrameScanner::new();
    }

    /// Unwritten request bytes.
    pub fn unsent(&self) -> usize {
        self.out.len() - self.out_pos
    }

    /// Writes queued requests until done or the socket is full.
    pub fn flush(&mut self) -> io::Result<()> {
        let Some(stream) = &mut self.stream else {
            return Ok(());
        };
        while self.out_pos < self.out.len() {
            match stream.write(&self.out[self.out_pos..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.out_pos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        // (A link that keeps written requests empties `out` once they are answered.)
        if self.out_pos == self.out.len() && !self.retain {
            self.out.clear();
            self.out_pos = 0;
            self.acked = 0;
            if self.out.capacity() > BIG_BUFFER {
                self.out = Vec::new();
            }
        }
        Ok(())
    }

    /// Reads what the socket has. `Ok(false)`: the instance closed the connection.
    pub fn read(&mut self) -> io::Result<bool> {
        let Some(stream) = &mut self.stream else {
            return Ok(true);
        };
        loop {
            if self.rstart == self.rend {
                self.rstart = 0;
                self.rend = 0;
            }
            if self.rbuf.len() - self.rend < READ_CHUNK / 4 {
                if self.rstart > 0 {
                    self.rbuf.copy_within(self.rstart..self.rend, 0);
                    self.rend -= self.rstart;
                    self.rstart = 0;
                } else {
                    // (An unused link's buffer is empty until its first read.)
                    let grown = (self.rbuf.len() * 2).max(READ_CHUNK);
                    self.rbuf.resize(grown, 0);
                }
                continue;
            }
            let room = self.rbuf.len() - self.rend;
            match stream.read(&mut self.rbuf[self.rend..]) {
                Ok(0) => return Ok(false),
                Ok(n) => {
                    self.rend += n;
                    // A short read drained the socket (Linux edge-triggered epoll reports
                    // new data with a new event), which saves one read per batch.
                    if n < room {
                        return Ok(true);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(true),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Calls `each(frame)` for each complete reply frame read so far, in order, stopping at
    /// the first `Err` (which is returned, as is a malformed frame).
    pub fn frames(
        &mut self,
        mut each: impl FnMut(&[u8]) -> Result<(), String>,
    ) -> Result<(), String> {
        self.frames_sent(|frame, _| each(frame).map(|()| 0))
    }

    /// [`Self::frames`] with the written, unanswered requests (`out[acked..out_pos]`, see
    /// `out`): `each` returns how many of their bytes the frame answered.
    pub fn frames_sent(
        &mut self,
        mut each: impl FnMut(&[u8], Sent<'_>) -> Result<usize, String>,
    ) -> Result<(), String> {
        loop {
            let buf = &self.rbuf[self.rstart..self.rend];
            if buf.is_empty() {
                break;
            }
            match self.scanner.scan(buf) {
                Ok(Some(len)) => {
                    let sent = Sent {
                        out: &self.out[..self.out_pos],
                        from: self.acked,
                    };
                    self.acked += each(&buf[..len], sent)?;
                    self.rstart += len;
                }
                Ok(None) => break,
                Err(e) => return Err(e.to_string()),
            }
        }
        if self.retain && self.acked > 0 {
            if self.acked >= self.out.len() {
                self.out.clear();
                self.out_pos = 0;
                self.acked = 0;
                if self.out.capacity() > BIG_BUFFER {
                    self.out = Vec::new();
                }
            } else if self.acked >= READ_CHUNK
                && self.acked * 2 >= self.out.len()
                && self.acked <= self.out_pos
            {
                // Answered requests ahead of unanswered ones: moved out once they are the
                // larger part, so the buffer neither grows without end nor is moved often.
                self.out.drain(..self.acked);
                self.out_pos -= self.acked;
                self.acked = 0;
            }
        }
        if self.rstart == self.rend {
            self.rstart = 0;
            self.rend = 0;
            if self.rbuf.len() > BIG_BUFFER {
                self.rbuf = vec![0; READ_CHUNK];
            }
        }
        Ok(())
    }
}
