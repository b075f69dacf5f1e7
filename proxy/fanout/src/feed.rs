//! One engine's keychange feed, as the fan-out sees it: the RESP connection, the messages on
//! it, and the ring of recent effects.
//!
//! # Wire (engine side: docs/feed.md)
//!
//! A link connects only while some browser needs the feed ([`Link::wake`], [`Link::sleep`]:
//! the server's *Idle feeds*). The fan-out sends `FEED SUBSCRIBE` once per connection; the
//! engine answers `["subscribed", <run_id>, <seq>]` and then streams every effect as
//! `["effect", <seq>, <arg0>, …]` (database 0) or `["effect-db", <seq>, <db>, <arg0>, …]`
//! (any other database), RESP2 arrays of bulk strings, `seq` decimal, contiguous across all
//! databases. `FEED SNAPSHOT <id> <prefix>…` (database 0) and
//! `FEED SNAPSHOTDB <db> <id> <prefix>…` make the engine emit, in the same stream,
//! `["snapshot", <id>, <seq>, <nkeys>]`, `["entry", <id>, <arg0>, …]`…, `["snapshot-end",
//! <id>, <seq>]`. `["overflow", <seq>]` says the engine dropped effects for this subscriber.
//! Simple-string and integer replies are ignored; an error reply is logged (and during the
//! subscribe step ends the connection, retried with backoff).
//!
//! # Bounded reads
//!
//! One call of [`Link::event`] reads at most [`READ_BUDGET`] bytes (1 MiB), parses them and
//! returns the complete messages, which the server hands out before reading more. A snapshot
//! burst (one `FEED SNAPSHOT` can emit many MB at once) is thus taken in 1 MiB steps instead
//! of being read whole and held twice (read buffer + parsed copies) while it is queued. When
//! a call stops at the budget rather than at `WouldBlock`, the socket may still hold data for
//! which mio (edge-triggered) will report no new event: [`Link::pending`] is then true and
//! the server's loop polls with a zero timeout and calls `event` again
//! (server.rs `run`). The read buffer holds at most the budget plus the unfinished tail of
//! one message; a single message is limited by the RESP parser's `proto-max-bulk-len` per
//! argument (512 MB, [`Limits::default`], checked on the `$` header before the body is
//! buffered). The engine's snapshot frames are one key's value each, collections split into
//! entries of at most 1024 elements (docs/feed.md *Snapshots*), so in practice a message is
//! about one value. After a burst the buffer's capacity is given back ([`RBUF_KEEP`]).
//!
//! # Ring
//!
//! [`Ring`] keeps the most recent effects (at most [`RING_EFFECTS`] and [`RING_BYTES`]), so a
//! browser that reconnects with `(run, seq)` can be replayed what it missed. It holds a
//! contiguous run of sequence numbers; a gap (overflow, reconnect) clears it.

use std::cell::OnceCell;
use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use engine_core::command;
use mio::net::TcpStream;
use mio::{Interest, Registry, Token};
use resp::{Limits, RequestParser};

use crate::protocol;

/// Most effects the ring keeps per engine.
pub const RING_EFFECTS: usize = 100_000;
/// Most argument bytes the ring keeps per engine.
pub const RING_BYTES: usize = 64 << 20;
/// Reconnect backoff: first wait and cap.
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(2);
/// A connect that takes longer than this is abandoned and retried.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Read chunk size.
const READ_CHUNK: usize = 64 * 1024;
/// Most bytes read from the socket per [`Link::event`] (see *Bounded reads*).
pub const READ_BUDGET: usize = 1 << 20;
/// Read-buffer capacity kept between events; a larger one (a burst, a big value) is shrunk
/// once the buffer has been consumed below it.
const RBUF_KEEP: usize = 2 * READ_BUDGET;

/// A message on the feed.
#[derive(Debug, PartialEq, Eq)]
pub enum FeedMsg {
    Subscribed {
        run: String,
        seq: u64,
    },
    Effect {
        seq: u64,
        /// The database the effect is on.
        db: usize,
        args: Vec<Vec<u8>>,
    },
    Snapshot {
        id: u64,
        seq: u64,
        keys: u64,
    },
    Entry {
        id: u64,
        args: Vec<Vec<u8>>,
    },
    SnapshotEnd {
        id: u64,
        seq: u64,
    },
    Overflow {
        seq: u64,
    },
    /// An error reply (`-ERR …`), text without the `-`.
    Error(String),
}

/// What an effect does to a browser's copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Changes the keys at these argument positions (and nothing else).
    Keys(Vec<usize>),
    /// FLUSHALL / FLUSHDB: every key of the instance is gone.
    Flush,
    /// A command the table cannot place: browsers of the instance must resync.
    Unknown,
    /// `MIGRATED k`: the key left this engine for another cluster node, whose feed brings
    /// its copy. Relayed to no browser; it tells the server that slots are moving
    /// (server/cluster.rs).
    Moved,
}

/// One effect, shared by the ring and every browser queue it goes to.
#[derive(Debug)]
pub struct Effect {
    pub seq: u64,
    /// The engine database it changes: only browsers following that database see it.
    pub db: usize,
    pub args: Vec<Vec<u8>>,
    pub scope: Scope,
    /// The `keychange` (or `flush`) frame for browsers that see every key of it, built on
    /// first use.
    frame: OnceCell<tungstenite::Utf8Bytes>,
    /// `frame` as a WebSocket text frame ([`protocol::text_frame`]), built on first use and
    /// copied into every browser that sees the whole effect.
    wire: OnceCell<Vec<u8>>,
}

impl Effect {
    pub fn new(seq: u64, db: usize, args: Vec<Vec<u8>>) -> Effect {
        let scope = scope_of(&args);
        Effect {
            seq,
            db,
            args,
            scope,
            frame: OnceCell::new(),
            wire: OnceCell::new(),
        }
    }

    pub fn bytes(&self) -> usize {
        self.args.iter().map(|a| a.len() + 16).sum()
    }

    /// [`Effect::frame`] framed for the socket, encoded once per effect.
    pub fn wire(&self, instance: usize) -> &[u8] {
        self.wire
            .get_or_init(|| protocol::text_frame(self.frame(instance).as_bytes()))
    }

    /// The wire frame for a browser that sees all of it, encoded once per effect.
    pub fn frame(&self, instance: usize) -> tungstenite::Utf8Bytes {
        self.frame
            .get_or_init(|| {
                let argv: Vec<&[u8]> = self.args.iter().map(Vec::as_slice).collect();
                match &self.scope {
                    Scope::Flush => protocol::flush(instance, self.seq).into(),
                    Scope::Keys(pos) => {
                        let key = pos.first().map_or(&b""[..], |&p| self.args[p].as_slice());
                        protocol::keychange(instance, self.seq, key, &argv).into()
                    }
                    Scope::Unknown | Scope::Moved => {
                        protocol::keychange(instance, self.seq, b"", &argv).into()
                    }
                }
            })
            .clone()
    }
}

/// Where an effect's keys are, from the one key extractor (`engine_core::command::keys`).
pub fn scope_of(args: &[Vec<u8>]) -> Scope {
    let Some(name) = args.first() else {
        return Scope::Unknown;
    };
    if name.eq_ignore_ascii_case(b"flushall") || name.eq_ignore_ascii_case(b"flushdb") {
        return Scope::Flush;
    }
    if name.as_slice() == engine_core::effect::MIGRATED && args.len() == 2 {
        return Scope::Moved;
    }
    let Some(mut spec) = command::lookup(name) else {
        return Scope::Unknown;
    };
    // A container's effect (XGROUP CREATE key …) names its key in the subcommand's row.
    if !spec.subcommands.is_empty()
        && let Some(sub) = args.get(1).and_then(|a| spec.subcommand(a))
    {
        spec = sub;
    }
    let argv: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
    // The one key extractor; positions are always inside `argv`.
    let pos: Vec<usize> = command::keys(spec, argv.as_slice()).positions().collect();
    if pos.is_empty() {
        Scope::Unknown
    } else {
        Scope::Keys(pos)
    }
}

/// Recent effects of one engine, contiguous in `seq`.
#[derive(Default)]
pub struct Ring {
    effects: VecDeque<Rc<Effect>>,
    bytes: usize,
    /// No resume from a position at or before this seq ([`Ring::barrier`]).
    barrier: u64,
}

impl Ring {
    /// Appends `e`; a gap in sequence numbers clears the ring first.
    pub fn push(&mut self, e: Rc<Effect>) {
        if self.effects.back().is_some_and(|b| b.seq + 1 != e.seq) {
            self.clear();
        }
        // Delivery happens as an effect arrives, so the previous one has been sent: drop its
        // encoded frames (a resume from the ring re-encodes), so that what the ring holds is
        // what `bytes` counts against RING_BYTES, not three copies of each effect.
        if let Some(prev) = self.effects.back_mut().and_then(Rc::get_mut) {
            prev.frame = OnceCell::new();
            prev.wire = OnceCell::new();
        }
        self.bytes += e.bytes();
        self.effects.push_back(e);
        while self.effects.len() > RING_EFFECTS
            || (self.bytes > RING_BYTES && self.effects.len() > 1)
        {
            let old = self.effects.pop_front().expect("non-empty");
            self.bytes -= old.bytes();
        }
    }

    pub fn clear(&mut self) {
        self.effects.clear();
        self.bytes = 0;
    }

    /// Slots moved while the fan-out followed this engine (server/cluster.rs): a position
    /// at or before `seq` may not be resumed, since replaying the engines' rings one after
    /// the other would not reproduce the order in which a key's effects crossed from one
    /// engine's feed to another's. Such a resume refetches.
    pub fn barrier(&mut self, seq: u64) {
        self.barrier = self.barrier.max(seq);
    }

    /// The effects after `seq`, if the ring still holds all of them (`current` is the
    /// engine's latest sequence number) and no [`Ring::barrier`] lies at or after `seq`.
    pub fn since(&self, seq: u64, current: u64) -> Option<impl Iterator<Item = &Rc<Effect>>> {
        if self.barrier > 0 && seq <= self.barrier {
            return None;
        }
        if seq == current {
            return Some(self.effects.range(self.effects.len()..));
        }
        if seq > current {
            return None;
        }
        let first = self.effects.front()?.seq;
        if first > seq + 1 || self.effects.back()?.seq != current {
            return None;
        }
        let skip = (seq + 1 - first) as usize;
        Some(self.effects.range(skip..))
    }

    pub fn len(&self) -> usize {
        self.effects.len()
    }

    pub fn is_empty(&self) -> bool {
        self.effects.is_empty()
    }
}

/// Connection state of a feed link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkState {
    /// Not connected on purpose: no browser needs this feed (see *Idle feeds* in the server's
    /// module doc). Nothing is scheduled until [`Link::wake`].
    Idle,
    /// Not connected; the next attempt is due at this time.
    Down(Instant),
    /// Connecting; abandoned at this deadline.
    Connecting(Instant),
    /// `FEED SUBSCRIBE` sent, its reply not seen yet.
    Subscribing,
    /// Effects are flowing.
    Live,
}

/// The connection to one engine's feed.
pub struct Link {
    pub addr: SocketAddr,
    pub state: LinkState,
    stream: Option<TcpStream>,
    rbuf: Vec<u8>,
    wbuf: Vec<u8>,
    parser: RequestParser,
    /// The last `event` stopped at [`READ_BUDGET`]: the socket may hold more, with no edge
    /// to come for it.
    pending: bool,
    backoff: Duration,
    /// The engine's run id and the last sequence number seen on this feed, across reconnects
    /// (a reconnect that finds the same run at the same seq has lost nothing).
    pub run: Option<String>,
    pub seq: Option<u64>,
    pub ring: Ring,
    /// The engine left the cluster (server/cluster.rs): never connected again; browsers see
    /// it up to date with no keys.
    pub retired: bool,
}

impl Link {
    pub fn new(addr: SocketAddr) -> Link {
        Link {
            addr,
            state: LinkState::Idle,
            stream: None,
            rbuf: Vec::new(),
            wbuf: Vec::new(),
            parser: RequestParser::new(Limits::default()),
            pending: false,
            backoff: BACKOFF_MIN,
            run: None,
            seq: None,
            ring: Ring::default(),
            retired: false,
        }
    }

    /// Starts a connect if one is due.
    pub fn maybe_connect(&mut self, registry: &Registry, token: Token, now: Instant) {
        let LinkState::Down(at) = self.state else {
            return;
        };
        if now < at {
            return;
        }
        match TcpStream::connect(self.addr) {
            Ok(mut s) => {
                if let Err(e) =
                    registry.register(&mut s, token, Interest::READABLE | Interest::WRITABLE)
                {
                    log::warn!("fanout: feed {}: register: {e}", self.addr);
                    self.down(registry, now);
                    return;
                }
                let _ = s.set_nodelay(true);
                self.stream = Some(s);
                self.rbuf.clear();
                self.rbuf.shrink_to(READ_CHUNK);
                self.wbuf.clear();
                self.pending = false;
                self.parser = RequestParser::new(Limits::default());
                self.state = LinkState::Connecting(now + CONNECT_TIMEOUT);
            }
            Err(e) => {
                log::debug!("fanout: feed {}: connect: {e}", self.addr);
                self.down(registry, now);
            }
        }
    }

    /// Someone needs the feed: an idle link connects at once (a link in any other state is
    /// already connecting or connected).
    pub fn wake(&mut self, registry: &Registry, token: Token, now: Instant) {
        if self.state == LinkState::Idle && !self.retired {
            self.backoff = BACKOFF_MIN;
            self.state = LinkState::Down(now);
            self.maybe_connect(registry, token, now);
        }
    }

    /// Nobody needs the feed: closes the connection (the engine unsubscribes it and stops
    /// computing effects once it has no subscriber left) and schedules nothing. `run`, `seq`
    /// and the ring are kept: if the engine's keyspace does not change meanwhile, its next
    /// `subscribed` carries the same run and seq and the ring still joins (docs/feed.md: a
    /// change while nobody subscribes makes the engine skip a number, so the ring is cleared
    /// then).
    pub fn sleep(&mut self, registry: &Registry) {
        if let Some(mut s) = self.stream.take() {
            let _ = registry.deregister(&mut s);
        }
        self.rbuf = Vec::new();
        self.wbuf = Vec::new();
        self.pending = false;
        self.backoff = BACKOFF_MIN;
        self.state = LinkState::Idle;
    }

    /// Closes the connection and schedules a reconnect.
    pub fn down(&mut self, registry: &Registry, now: Instant) {
        if let Some(mut s) = self.stream.take() {
            let _ = registry.deregister(&mut s);
        }
        self.pending = false;
        self.state = LinkState::Down(now + self.backoff);
        self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
    }

    /// The next time `tick` has something to do for this link.
    pub fn deadline(&self) -> Option<Instant> {
        match self.state {
            LinkState::Down(at) | LinkState::Connecting(at) => Some(at),
            _ => None,
        }
    }

    /// Abandons a connect that has taken too long.
    pub fn tick(&mut self, registry: &Registry, now: Instant) {
        if let LinkState::Connecting(deadline) = self.state
            && now >= deadline
        {
            log::debug!("fanout: feed {}: connect timed out", self.addr);
            self.down(registry, now);
        }
    }

    /// Whether the socket may still hold data the last [`event`](Self::event) left unread
    /// (it stopped at [`READ_BUDGET`]): the caller must call `event` again without waiting
    /// for readiness.
    pub fn pending(&self) -> bool {
        self.pending
    }

    /// Queues a command (RESP multibulk) and tries to write it.
    pub fn send(&mut self, argv: &[&[u8]]) {
        resp::encode_request(&mut self.wbuf, argv);
        let _ = self.flush();
    }

    /// Writes queued commands. Errors are left for the next read to discover.
    pub fn flush(&mut self) -> io::Result<()> {
        let Some(s) = self.stream.as_mut() else {
            return Ok(());
        };
        if matches!(self.state, LinkState::Connecting(_)) {
            return Ok(());
        }
        while !self.wbuf.is_empty() {
            match s.write(&self.wbuf) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.wbuf.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Handles a readiness event: finishes a connect (then subscribes), writes, reads at most
    /// [`READ_BUDGET`] bytes and parses every complete message into `out`. If the read stopped
    /// at the budget, [`pending`](Self::pending) is set. `Err` means the connection is gone
    /// (the caller calls [`down`](Self::down) and resyncs).
    pub fn event(&mut self, out: &mut Vec<FeedMsg>) -> io::Result<()> {
        let Some(s) = self.stream.as_mut() else {
            return Ok(());
        };
        if let LinkState::Connecting(_) = self.state {
            if let Some(e) = s.take_error()? {
                return Err(e);
            }
            match s.peer_addr() {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::NotConnected => return Ok(()),
                Err(e) => return Err(e),
            }
            self.state = LinkState::Subscribing;
            self.backoff = BACKOFF_MIN;
            // With a password configured, the supervisor hands every child the fleet's internal
            // credential (docs/security.md); its `+OK` is skipped by `parse_messages`, a
            // `-WRONGPASS` fails the subscription like any refusal.
            if let Ok(pw) = std::env::var(engine_core::acl::INTERNAL_AUTH_ENV) {
                let user = engine_core::acl::INTERNAL_USER.as_bytes();
                self.send(&[b"AUTH", user, pw.as_bytes()]);
            }
            self.send(&[b"FEED", b"SUBSCRIBE"]);
        }
        self.flush()?;
        let Some(s) = self.stream.as_mut() else {
            return Ok(());
        };
        let mut closed = false;
        let mut read = 0;
        self.pending = false;
        loop {
            if read >= READ_BUDGET {
                self.pending = true;
                break;
            }
            let want = READ_CHUNK.min(READ_BUDGET - read);
            let len = self.rbuf.len();
            self.rbuf.resize(len + want, 0);
            match s.read(&mut self.rbuf[len..]) {
                Ok(0) => {
                    self.rbuf.truncate(len);
                    closed = true;
                    break;
                }
                Ok(n) => {
                    self.rbuf.truncate(len + n);
                    read += n;
                    if n < want {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.rbuf.truncate(len);
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => self.rbuf.truncate(len),
                Err(e) => {
                    self.rbuf.truncate(len);
                    return Err(e);
                }
            }
        }
        let used = parse_messages(&mut self.parser, &self.rbuf, out)?;
        self.rbuf.drain(..used);
        if self.rbuf.capacity() > RBUF_KEEP && self.rbuf.len() <= READ_BUDGET {
            self.rbuf.shrink_to(READ_BUDGET.max(self.rbuf.len()));
        }
        for m in out.iter() {
            if let FeedMsg::Subscribed { .. } = m {
                self.state = LinkState::Live;
            }
        }
        if self.state == LinkState::Subscribing
            && let Some(FeedMsg::Error(e)) = out.first()
        {
            return Err(io::Error::other(format!("FEED SUBSCRIBE refused: {e}")));
        }
        if closed {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        Ok(())
    }
}

/// Parses every complete message at the start of `buf` into `out`; returns the bytes used.
pub fn parse_messages(
    parser: &mut RequestParser,
    buf: &[u8],
    out: &mut Vec<FeedMsg>,
) -> io::Result<usize> {
    let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, format!("feed: {what}"));
    let mut at = 0;
    while at < buf.len() {
        let rest = &buf[at..];
        match rest[0] {
            b'+' | b'-' | b':' => {
                let Some(end) = rest.windows(2).position(|w| w == b"\r\n") else {
                    if rest.len() > 64 * 1024 {
                        return Err(bad("line too long"));
                    }
                    break;
                };
                if rest[0] == b'-' {
                    out.push(FeedMsg::Error(
                        String::from_utf8_lossy(&rest[1..end]).into_owned(),
                    ));
                }
                at += end + 2;
            }
            b'*' => match parser.parse(rest) {
                Ok(Some(n)) => {
                    let args: Vec<&[u8]> = parser.args(rest).collect();
                    out.push(message(&args).ok_or_else(|| bad("unexpected message"))?);
                    at += n;
                }
                Ok(None) => break,
                Err(e) => return Err(bad(&e.to_string())),
            },
            _ => return Err(bad("not RESP")),
        }
    }
    Ok(at)
}

fn num(b: &[u8]) -> Option<u64> {
    std::str::from_utf8(b).ok()?.parse().ok()
}

fn owned(args: &[&[u8]]) -> Vec<Vec<u8>> {
    args.iter().map(|a| a.to_vec()).collect()
}

/// One feed array → a message.
fn message(a: &[&[u8]]) -> Option<FeedMsg> {
    Some(match (*a.first()?, a.len()) {
        (b"subscribed", 3) => FeedMsg::Subscribed {
            run: String::from_utf8_lossy(a[1]).into_owned(),
            seq: num(a[2])?,
        },
        (b"effect", n) if n >= 3 => FeedMsg::Effect {
            seq: num(a[1])?,
            db: 0,
            args: owned(&a[2..]),
        },
        (b"effect-db", n) if n >= 4 => FeedMsg::Effect {
            seq: num(a[1])?,
            db: usize::try_from(num(a[2])?).ok()?,
            args: owned(&a[3..]),
        },
        (b"snapshot", 4) => FeedMsg::Snapshot {
            id: num(a[1])?,
            seq: num(a[2])?,
            keys: num(a[3])?,
        },
        (b"entry", n) if n >= 3 => FeedMsg::Entry {
            id: num(a[1])?,
            args: owned(&a[2..]),
        },
        (b"snapshot-end", 3) => FeedMsg::SnapshotEnd {
            id: num(a[1])?,
            seq: num(a[2])?,
        },
        (b"overflow", 2) => FeedMsg::Overflow { seq: num(a[1])? },
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resp(parts: &[&str]) -> Vec<u8> {
        let mut v = Vec::new();
        resp::encode_request(&mut v, parts);
        v
    }

    #[test]
    fn parses_feed_messages_across_splits() {
        let mut wire = resp(&["subscribed", "abc", "5"]);
        wire.extend(resp(&["effect", "6", "SET", "k", "v"]));
        wire.extend(resp(&["effect-db", "7", "3", "DEL", "k"]));
        wire.extend(b"+OK\r\n-ERR nope\r\n");
        wire.extend(resp(&["snapshot", "1", "6", "2"]));
        wire.extend(resp(&["entry", "1", "HSET", "h", "f", "v"]));
        wire.extend(resp(&["snapshot-end", "1", "6"]));
        wire.extend(resp(&["overflow", "9"]));
        // Feed it one byte at a time: every split point must be handled.
        let mut parser = RequestParser::new(Limits::default());
        let (mut buf, mut out) = (Vec::new(), Vec::new());
        for &b in &wire {
            buf.push(b);
            let used = parse_messages(&mut parser, &buf, &mut out).unwrap();
            buf.drain(..used);
        }
        assert!(buf.is_empty());
        assert_eq!(
            out,
            vec![
                FeedMsg::Subscribed {
                    run: "abc".into(),
                    seq: 5
                },
                FeedMsg::Effect {
                    seq: 6,
                    db: 0,
                    args: vec![b"SET".to_vec(), b"k".to_vec(), b"v".to_vec()]
                },
                FeedMsg::Effect {
                    seq: 7,
                    db: 3,
                    args: vec![b"DEL".to_vec(), b"k".to_vec()]
                },
                FeedMsg::Error("ERR nope".into()),
                FeedMsg::Snapshot {
                    id: 1,
                    seq: 6,
                    keys: 2
                },
                FeedMsg::Entry {
                    id: 1,
                    args: vec![
                        b"HSET".to_vec(),
                        b"h".to_vec(),
                        b"f".to_vec(),
                        b"v".to_vec()
                    ]
                },
                FeedMsg::SnapshotEnd { id: 1, seq: 6 },
                FeedMsg::Overflow { seq: 9 },
            ]
        );
        let mut out = Vec::new();
        assert!(
            parse_messages(&mut parser, &resp(&["effect", "x", "DEL", "k"]), &mut out).is_err()
        );
        assert!(parse_messages(&mut parser, b"?", &mut out).is_err());
        assert!(
            parse_messages(
                &mut parser,
                &resp(&["effect-db", "8", "x", "DEL", "k"]),
                &mut out
            )
            .is_err()
        );
    }

    /// A burst larger than the budget is taken in steps of at most [`READ_BUDGET`] bytes, the
    /// read buffer does not stay large, and driving the link like the server does (readiness
    /// events, plus another call while `pending`) gets every message: no data is left waiting
    /// for an edge that does not come.
    #[test]
    fn event_reads_at_most_the_budget_and_resumes() {
        const ENTRIES: usize = 12;
        const VALUE: usize = 512 * 1024;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut poll = mio::Poll::new().unwrap();
        let mut link = Link::new(listener.local_addr().unwrap());
        assert_eq!(
            link.state,
            LinkState::Idle,
            "a link connects only when woken"
        );
        link.wake(poll.registry(), Token(0), Instant::now());
        // Room for the whole burst in the link's socket, so that reads can hit the budget.
        let sock = link.stream.as_ref().unwrap();
        nix::sys::socket::setsockopt(sock, nix::sys::socket::sockopt::RcvBuf, &(8 << 20)).unwrap();
        let (mut peer, _) = listener.accept().unwrap();
        let writer = std::thread::spawn(move || {
            let mut wire = resp(&["subscribed", "abc", "0"]);
            let big = "x".repeat(VALUE);
            for _ in 0..ENTRIES {
                wire.extend(resp(&["entry", "1", "SET", "k", &big]));
            }
            peer.write_all(&wire).unwrap();
            peer // kept open until joined
        });
        // Let the burst reach the link's socket buffer.
        std::thread::sleep(Duration::from_millis(200));
        let mut events = mio::Events::with_capacity(8);
        let (mut entries, mut calls, mut pending_calls) = (0, 0, 0);
        let deadline = Instant::now() + Duration::from_secs(10);
        while entries < ENTRIES {
            assert!(Instant::now() < deadline, "{entries} of {ENTRIES} entries");
            let timeout = if link.pending() {
                Duration::ZERO
            } else {
                Duration::from_millis(100)
            };
            poll.poll(&mut events, Some(timeout)).unwrap();
            if events.is_empty() && !link.pending() {
                continue;
            }
            let mut out = Vec::new();
            link.event(&mut out).unwrap();
            calls += 1;
            pending_calls += usize::from(link.pending());
            let bytes: usize = out
                .iter()
                .map(|m| match m {
                    FeedMsg::Entry { args, .. } => args.iter().map(Vec::len).sum(),
                    _ => 0,
                })
                .sum();
            // What one call returns: its budget plus the start of a message read earlier.
            assert!(
                bytes <= READ_BUDGET + VALUE + 64,
                "{bytes} bytes in one call"
            );
            assert!(
                link.rbuf.capacity() <= RBUF_KEEP,
                "{}",
                link.rbuf.capacity()
            );
            entries += out
                .iter()
                .filter(|m| matches!(m, FeedMsg::Entry { .. }))
                .count();
        }
        assert_eq!(link.state, LinkState::Live);
        assert!(calls >= ENTRIES * VALUE / READ_BUDGET, "{calls} calls");
        eprintln!("{calls} calls, {pending_calls} stopped at the budget");
        drop(writer.join().unwrap());
    }

    #[test]
    fn scopes_from_the_table() {
        let a = |s: &[&str]| s.iter().map(|x| x.as_bytes().to_vec()).collect::<Vec<_>>();
        assert_eq!(
            scope_of(&a(&["SET", "k", "v", "PXAT", "1"])),
            Scope::Keys(vec![1])
        );
        assert_eq!(scope_of(&a(&["DEL", "a", "b"])), Scope::Keys(vec![1, 2]));
        assert_eq!(
            scope_of(&a(&["MSET", "a", "1", "b", "2"])),
            Scope::Keys(vec![1, 3])
        );
        assert_eq!(scope_of(&a(&["FLUSHALL"])), Scope::Flush);
        // Stream effects: XADD with its concrete ID, XGROUP's key in its subcommand row.
        assert_eq!(
            scope_of(&a(&["XADD", "s", "1-0", "f", "v"])),
            Scope::Keys(vec![1])
        );
        assert_eq!(
            scope_of(&a(&[
                "XGROUP",
                "CREATE",
                "s",
                "g",
                "0-0",
                "ENTRIESREAD",
                "-1"
            ])),
            Scope::Keys(vec![2])
        );
        assert_eq!(
            scope_of(&a(&[
                "XCLAIM", "s", "g", "c", "0", "1-0", "FORCE", "JUSTID"
            ])),
            Scope::Keys(vec![1])
        );
        assert_eq!(scope_of(&a(&["MIGRATED", "k"])), Scope::Moved);
        assert_eq!(scope_of(&a(&["NOSUCH", "k"])), Scope::Unknown);
        assert_eq!(scope_of(&a(&["PING"])), Scope::Unknown);
    }

    #[test]
    fn ring_resumes_only_when_contiguous() {
        let mut r = Ring::default();
        for s in 10..20 {
            r.push(Rc::new(Effect::new(
                s,
                0,
                vec![b"DEL".to_vec(), b"k".to_vec()],
            )));
        }
        assert_eq!(
            r.since(15, 19)
                .map(|i| i.map(|e| e.seq).collect::<Vec<_>>()),
            Some(vec![16, 17, 18, 19])
        );
        assert_eq!(r.since(9, 19).map(|i| i.count()), Some(10));
        assert_eq!(r.since(19, 19).map(|i| i.count()), Some(0));
        assert!(r.since(8, 19).is_none());
        assert!(r.since(25, 19).is_none());
        // A gap clears it.
        r.push(Rc::new(Effect::new(
            30,
            0,
            vec![b"DEL".to_vec(), b"k".to_vec()],
        )));
        assert_eq!(r.len(), 1);
        assert!(r.since(15, 30).is_none());
        assert_eq!(r.since(29, 30).map(|i| i.count()), Some(1));
        // Slots moved at 30: no resume from 30 or before, later ones as usual.
        r.barrier(30);
        assert!(r.since(29, 30).is_none());
        assert!(r.since(30, 30).is_none());
        r.push(Rc::new(Effect::new(
            31,
            0,
            vec![b"MIGRATED".to_vec(), b"k".to_vec()],
        )));
        assert_eq!(r.since(31, 31).map(|i| i.count()), Some(0));
        assert!(r.since(30, 31).is_none());
    }
}
