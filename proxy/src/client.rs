//! A client connection: its read buffer and parser, and the queue of reply slots that keeps
//! replies in request order.
//!
//! # Reply ordering
//!
//! Every request gets a slot at the back of [`Replies`] when it is parsed, identified by a
//! sequence number (`base_seq` + its position). Backend replies arrive in each backend's own
//! order, which under pipelining across instances is not the client's order, so a reply is
//! parked in its slot until every earlier slot is done; then the finished slots at the
//! front are moved to the output buffer. A reply for the front slot (the common case) is
//! copied straight to the output without being parked.
//!
//! ```text
//!  requests:  GET a (inst 0)   GET b (inst 1)   PING (local)   MGET a b (parts on 0 and 1)
//!  slots:     seq 10 Plain     seq 11 Plain     seq 12 Ready   seq 13 Parts[2]
//!             ▲ base_seq = 10
//!  inst 1 answers b  → parked in 11;  inst 0 answers a → 10 is the front: out ← a, then 11
//!  (parked) and 12 (ready) follow; 13 waits for both parts, then merges (crate::split).
//! ```
//!
//! Bounds: the event loop stops parsing a client's input while it has more than
//! `MAX_PENDING` slots or more than `OUTPUT_HIGH_WATER` bytes of unsent output, so one client
//! cannot make the proxy buffer without limit; it resumes once the client catches up.
//! Unparsed input is bounded by `client-query-buffer-limit` ([`Client::read_input`]).
//!
//! A client accepted on the TLS port carries a [`TlsConn`]; [`Client::read_input`] and
//! [`Client::write_output`] go through it, so everything above holds for both.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::time::Instant;

use mio::net::TcpStream;
use resp::RequestParser;

use crate::tls::{ClientBuf, TlsConn, TlsRead};

use crate::dedicated::Lane;
use crate::route::Session;
use crate::split::{self, Merge};

/// Where a backend reply goes: client `token` (checked against `client_id`, since tokens are
/// reused), slot `seq`, part `part` of that slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Waiter {
    pub token: usize,
    pub client_id: u64,
    pub seq: u64,
    pub part: u32,
    /// How the request travelled so far ([`Hops`]); set by the shared links.
    pub hops: Hops,
}

/// A request's journey on the shared links (`crate::redirect`): its length (so a shared
/// link can find its bytes again when the reply is a redirect), and the redirects and
/// `-TRYAGAIN` retries it took.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Hops {
    /// Bytes of the request on the link (`Backend::send` sets it).
    pub len: usize,
    /// `-MOVED` / `-ASK` followed.
    pub redirects: u8,
    /// `-TRYAGAIN` retried.
    pub tries: u8,
    /// Sent after `ASKING` (an `-ASK` target): a retry sends `ASKING` again.
    pub asking: bool,
    /// A transaction's queued command or EXEC on a dedicated connection: its reply is
    /// looked at for slot moves (`crate::txmove`).
    pub tx: bool,
    /// A blocking command on a dedicated connection: its reply is looked at for slot moves
    /// (`crate::blockmove`).
    pub block: bool,
}

impl Hops {
    /// A request that has not travelled yet.
    pub const NONE: Hops = Hops {
        len: 0,
        redirects: 0,
        tries: 0,
        asking: false,
        tx: false,
        block: false,
    };
}

#[derive(Debug)]
enum SlotState {
    /// One backend reply, forwarded as is; `Some` once it arrived out of order.
    Plain(Option<Vec<u8>>),
    /// Several parts (split or fan-out), merged when the last one arrives.
    Parts {
        replies: Vec<Option<Vec<u8>>>,
        remaining: usize,
        merge: Merge,
    },
    /// The reply, complete.
    Ready(Vec<u8>),
}

#[derive(Debug)]
struct Slot {
    state: SlotState,
    /// QUIT or a protocol error: close the connection once this reply is out.
    close_after: bool,
    /// Asked under CLIENT REPLY OFF or SKIP: the reply is dropped, not written.
    silent: bool,
}

/// A request sent on a client's behalf once a merge asks for it (CONFIG SET's restores):
/// its reply fills part `part` of slot `seq`.
#[derive(Debug)]
pub struct Followup {
    pub instance: usize,
    pub request: Vec<u8>,
    pub seq: u64,
    pub part: u32,
}

/// Most reply bytes [`Client::holds_output`] keeps back.
pub const HOLD_MAX: usize = 64 << 10;

/// A client's pending replies and output buffer.
#[derive(Debug, Default)]
pub struct Replies {
    pending: VecDeque<Slot>,
    /// Sequence number of `pending[0]`.
    base_seq: u64,
    /// Bytes ready to write to the socket, from `out_pos` on.
    pub out: Vec<u8>,
    pub out_pos: usize,
    /// Set once a `close_after` reply reached `out`: no more requests are read.
    pub closing: bool,
    /// CLIENT REPLY OFF/SKIP in force for the request being handled: its slots are silent.
    pub silent: bool,
    /// Requests the event loop sends for this client at the end of the iteration.
    pub followups: Vec<Followup>,
}

impl Replies {
    /// Slots whose reply has not reached `out` yet.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// Unsent output bytes.
    pub fn unsent(&self) -> usize {
        self.out.len() - self.out_pos
    }

    pub(crate) fn next_seq(&self) -> u64 {
        self.base_seq + self.pending.len() as u64
    }

    /// A reply known now (local answer, or an instance known to be down).
    pub fn push_local(&mut self, reply: &[u8], close_after: bool) {
        if self.pending.is_empty() {
            if !self.silent {
                self.out.extend_from_slice(reply);
            }
            self.closing |= close_after;
        } else {
            self.pending.push_back(Slot {
                state: SlotState::Ready(reply.to_vec()),
                close_after,
                silent: self.silent,
            });
        }
    }

    /// A slot for one forwarded request; returns its sequence number.
    pub fn push_plain(&mut self) -> u64 {
        let seq = self.next_seq();
        self.pending.push_back(Slot {
            state: SlotState::Plain(None),
            close_after: false,
            silent: self.silent,
        });
        seq
    }

    /// A slot for `parts` replies merged with `merge`; returns its sequence number.
    pub fn push_parts(&mut self, parts: usize, merge: Merge) -> u64 {
        let seq = self.next_seq();
        self.pending.push_back(Slot {
            state: SlotState::Parts {
                replies: (0..parts).map(|_| None).collect(),
                remaining: parts,
                merge,
            },
            close_after: false,
            silent: self.silent,
        });
        seq
    }

    /// Stores the reply for part `part` of slot `seq`, then moves every finished slot at the
    /// front to `out`. Unknown slots (already answered) are ignored.
    pub fn fill(&mut self, seq: u64, part: u32, reply: &[u8]) {
        let Some(idx) = seq.checked_sub(self.base_seq) else {
            return;
        };
        let Some(slot) = self.pending.get_mut(idx as usize) else {
            return;
        };
        match &mut slot.state {
            SlotState::Plain(None) if idx == 0 => {
                if !slot.silent {
                    self.out.extend_from_slice(reply);
                }
                self.pending.pop_front();
                self.base_seq += 1;
            }
            SlotState::Plain(parked @ None) => *parked = Some(reply.to_vec()),
            SlotState::Parts {
                replies,
                remaining,
                merge,
            } => {
                let Some(r @ None) = replies.get_mut(part as usize) else {
                    return;
                };
                *r = Some(reply.to_vec());
                *remaining -= 1;
                if *remaining == 0 {
                    let all: Vec<&[u8]> = replies
                        .iter()
                        .map(|r| r.as_deref().unwrap_or(b""))
                        .collect();
                    if *merge == Merge::ConfigSet {
                        let (reply, restores) = split::config_set_outcome(&all);
                        if !restores.is_empty() {
                            // The error waits for the restores, so the client sees the
                            // old values everywhere once it has it.
                            for (part, (instance, request)) in restores.into_iter().enumerate() {
                                self.followups.push(Followup {
                                    instance,
                                    request,
                                    seq,
                                    part: part as u32,
                                });
                            }
                            let parts = self.followups.iter().filter(|f| f.seq == seq).count();
                            slot.state = SlotState::Parts {
                                replies: (0..parts).map(|_| None).collect(),
                                remaining: parts,
                                merge: Merge::Restored(reply),
                            };
                            return;
                        }
                    }
                    let mut merged = Vec::new();
                    split::merge(merge, &all, &mut merged);
                    slot.state = SlotState::Ready(merged);
                }
            }
            _ => return,
        }
        self.drain_ready();
    }

    /// Moves finished slots from the front of the queue to `out`.
    fn drain_ready(&mut self) {
        while let Some(front) = self.pending.front_mut() {
            match &mut front.state {
                SlotState::Ready(bytes) | SlotState::Plain(Some(bytes)) => {
                    if !front.silent {
                        self.out.extend_from_slice(bytes);
                    }
                }
                _ => break,
            }
            let close = front.close_after;
            self.pending.pop_front();
            self.base_seq += 1;
            if close {
                self.closing = true;
                // Nothing after QUIT is answered; drop what was queued behind it.
                self.base_seq += self.pending.len() as u64;
                self.pending.clear();
                break;
            }
        }
    }

    /// Marks everything written up to `n` more bytes; frees the buffer when drained.
    pub fn consumed(&mut self, n: usize) {
        self.out_pos += n;
        if self.out_pos == self.out.len() {
            self.out.clear();
            self.out_pos = 0;
            if self.out.capacity() > BIG_BUFFER {
                self.out = Vec::new();
            }
        }
    }
}

/// Buffers grown past this by one large request or reply are released once empty.
pub const BIG_BUFFER: usize = 1 << 20;

/// Initial read buffer size.
pub const READ_CHUNK: usize = 16 * 1024;

/// One client connection.
pub struct Client {
    pub stream: TcpStream,
    /// Unique for the life of the process (slab tokens are reused).
    pub id: u64,
    pub parser: RequestParser,
    /// Read buffer: unparsed input is `rbuf[rstart..rend]`.
    pub rbuf: Vec<u8>,
    pub rstart: usize,
    pub rend: usize,
    pub replies: Replies,
    pub session: Session,
    /// The peer shut its side: answer what was asked, then close.
    pub read_closed: bool,
    /// An event said the peer hung up (EPOLLRDHUP): read on to the end of file, past short
    /// reads, since no further event will come for the end of file.
    pub hup: bool,
    /// Input is left unparsed because a bound was hit; the loop retries it.
    pub paused: bool,
    /// Listed in the loop's to-flush list this iteration.
    pub dirty: bool,
    /// This client's dedicated instance connections: `(instance, id)` (`crate::dedicated`).
    pub conns: Vec<(usize, usize)>,
    /// Where its last forwarded request went (`crate::dedicated` "Lanes and ordering").
    pub lane: Lane,
    /// Its blocking read over several instances in progress (`crate::spread`).
    pub spread: Option<crate::spread::Spread>,
    /// Its execution spanning instances in progress (`crate::coord`).
    pub coord: Option<crate::coord::Coordinator>,
    /// Its scripts in flight on script links, and a script to run again gathered with the
    /// undeclared keys it touched (`crate::coord::ScriptRetry`).
    pub scripts: crate::coord::Scripts,
    /// Its transaction's run again after slots moved (`crate::txmove`).
    pub txm: crate::txmove::TxMoves,
    /// Its blocking commands sent again after slots moved (`crate::blockmove`).
    pub bmove: crate::blockmove::BlockMoves,
    /// Paused until its pending replies are in, to switch lanes.
    pub wait_lane: bool,
    /// TLS state, for a client of the TLS port.
    pub tls: Option<Box<TlsConn>>,
    /// When its last request was parsed (the `timeout` clock, CLIENT LIST `idle`).
    pub last_request: Instant,
    /// When it connected (CLIENT LIST `age`).
    pub created: Instant,
    /// Closed by CLIENT KILL: nothing more is read or written; closed this iteration.
    pub killed: bool,
    /// Since when its unsent output has been over the soft output limit (µs on the loop's
    /// clock); `None` while under it.
    pub obuf_soft_since: Option<u64>,
}

/// Result of [`Client::read_input`].
#[derive(Debug)]
pub enum Input {
    /// `bytes` of protocol arrived (plaintext, for a TLS client); `more`: the socket may hold
    /// more (the read filled the space offered).
    Data { more: bool, bytes: usize },
    /// Nothing to read now.
    Drained,
    /// The peer closed its side.
    Eof,
    /// Close the connection: a socket or TLS error, or the query buffer limit; the text is
    /// for the log.
    Fail(String),
}

/// Makes room at the end of a read buffer (`rbuf[rstart..rend]` unparsed): reuse consumed
/// space, else grow by doubling.
pub fn reserve(rbuf: &mut Vec<u8>, rstart: &mut usize, rend: &mut usize) {
    if *rstart == *rend {
        *rstart = 0;
        *rend = 0;
        if rbuf.len() > BIG_BUFFER {
            *rbuf = vec![0; READ_CHUNK];
        }
    }
    if rbuf.len() - *rend < READ_CHUNK / 4 {
        if *rstart > 0 {
            rbuf.copy_within(*rstart..*rend, 0);
            *rend -= *rstart;
            *rstart = 0;
        }
        if rbuf.len() - *rend < READ_CHUNK / 4 {
            let grown = (rbuf.len() * 2).max(READ_CHUNK);
            rbuf.resize(grown, 0);
        }
    }
}

impl Client {
    pub fn new(stream: TcpStream, id: u64, parser: RequestParser) -> Self {
        Client {
            stream,
            id,
            parser,
            rbuf: vec![0; READ_CHUNK],
            rstart: 0,
            rend: 0,
            replies: Replies::default(),
            session: Session {
                id,
                ..Session::default()
            },
            read_closed: false,
            hup: false,
            paused: false,
            dirty: false,
            conns: Vec::new(),
            lane: Lane::Shared,
            spread: None,
            coord: None,
            scripts: Default::default(),
            txm: Default::default(),
            bmove: Default::default(),
            wait_lane: false,
            tls: None,
            last_request: Instant::now(),
            created: Instant::now(),
            killed: false,
            obuf_soft_since: None,
        }
    }

    /// One read system call into the read buffer (through TLS for a TLS client; `scratch`
    /// holds its ciphertext). More than `query_limit` bytes of unparsed input fail the
    /// client (Redis `client-query-buffer-limit`).
    pub fn read_input(&mut self, scratch: &mut [u8], query_limit: usize) -> Input {
        let mut buf = ClientBuf {
            rbuf: &mut self.rbuf,
            rstart: &mut self.rstart,
            rend: &mut self.rend,
            limit: query_limit,
        };
        if let Some(tls) = &mut self.tls {
            return match tls.read(&mut self.stream, scratch, &mut buf) {
                TlsRead::Data { more, plain, .. } => Input::Data { more, bytes: plain },
                TlsRead::Drained => Input::Drained,
                TlsRead::Eof => Input::Eof,
                TlsRead::Full => Input::Fail("query buffer limit reached".into()),
                TlsRead::Tls(e) => {
                    tls.flush_alert(&mut self.stream);
                    Input::Fail(format!("TLS: {e}"))
                }
                TlsRead::Io(e) => Input::Fail(format!("read: {e}")),
            };
        }
        if self.rend - self.rstart > query_limit {
            return Input::Fail("query buffer limit reached".into());
        }
        reserve(&mut self.rbuf, &mut self.rstart, &mut self.rend);
        let room = self.rbuf.len() - self.rend;
        loop {
            return match self.stream.read(&mut self.rbuf[self.rend..]) {
                Ok(0) => Input::Eof,
                Ok(n) => {
                    self.rend += n;
                    Input::Data {
                        more: n == room,
                        bytes: n,
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => Input::Drained,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => Input::Fail(format!("read: {e}")),
            };
        }
    }

    /// Writes unsent output until it is all written or the socket is full (TLS: also
    /// handshake records); returns the reply bytes written. An error means the connection is
    /// dead.
    pub fn write_output(&mut self) -> io::Result<usize> {
        if let Some(tls) = &mut self.tls {
            let r = &self.replies;
            let (n, _full) = tls.write(&mut self.stream, &r.out[r.out_pos..])?;
            if n > 0 {
                self.replies.consumed(n);
            }
            return Ok(n);
        }
        let mut written = 0;
        while self.replies.unsent() > 0 {
            let r = &self.replies;
            match self.stream.write(&r.out[r.out_pos..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.replies.consumed(n);
                    written += n;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(written)
    }

    /// TLS handshake records or alerts wait for the socket.
    pub fn tls_wants_write(&self) -> bool {
        self.tls.as_ref().is_some_and(|t| t.wants_write())
    }

    /// Nothing left to answer or send.
    pub fn idle(&self) -> bool {
        self.replies.pending_len() == 0 && self.replies.unsent() == 0 && !self.tls_wants_write()
    }

    /// Ready replies wait for the replies still due before them instead of being written
    /// now: Redis runs the requests of one read and then writes their replies at once, so a
    /// pipelined `MULTI … EXEC` (or any pipeline spread over engines) costs its client one
    /// read, not one per engine round trip, and the proxy one write. Not held: when a
    /// blocking command waits (Redis writes the replies before it) or an EXEC waits for
    /// another transaction's locks, for subscribers and MONITOR (pushes come at any time),
    /// when closing, or past [`HOLD_MAX`] bytes.
    pub fn holds_output(&self) -> bool {
        self.replies.pending_len() > 0
            && self.replies.unsent() > 0
            && self.replies.unsent() < HOLD_MAX
            && !self.replies.closing
            && !self.read_closed
            && !self.session.subs.active()
            && !self.session.monitor
            && !self.blocked()
            && !self.coord.as_ref().is_some_and(|c| c.contended())
    }

    /// A blocking command is waiting for its reply: on one engine, spread over several, or
    /// gathered (`crate::coord::Wait`).
    pub fn blocked(&self) -> bool {
        self.bmove.waiting()
            || self.spread.is_some()
            || matches!(self.coord, Some(crate::coord::Coordinator::Wait(_)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_leave_in_request_order() {
        let mut r = Replies::default();
        let a = r.push_plain();
        let b = r.push_plain();
        r.push_local(b"+PONG\r\n", false);
        let m = r.push_parts(2, Merge::Sum);
        r.fill(b, 0, b"$1\r\nb\r\n");
        assert_eq!(r.out, b"");
        r.fill(m, 1, b":2\r\n");
        r.fill(a, 0, b"$1\r\na\r\n");
        assert_eq!(r.out, b"$1\r\na\r\n$1\r\nb\r\n+PONG\r\n");
        r.fill(m, 0, b":3\r\n");
        assert_eq!(r.out, b"$1\r\na\r\n$1\r\nb\r\n+PONG\r\n:5\r\n");
        assert_eq!(r.pending_len(), 0);
        // A duplicate or stale fill is ignored.
        r.fill(m, 0, b":9\r\n");
        assert_eq!(r.pending_len(), 0);
    }

    #[test]
    fn close_after_drops_later_slots() {
        let mut r = Replies::default();
        let a = r.push_plain();
        r.push_local(b"+OK\r\n", true);
        let _late = r.push_plain();
        assert!(!r.closing);
        r.fill(a, 0, b"+A\r\n");
        assert!(r.closing);
        assert_eq!(r.out, b"+A\r\n+OK\r\n");
        assert_eq!(r.pending_len(), 0);
    }

    #[test]
    fn consumed_resets_buffer() {
        let mut r = Replies::default();
        r.push_local(b"+OK\r\n", false);
        r.consumed(2);
        assert_eq!(r.unsent(), 3);
        r.consumed(3);
        assert_eq!((r.out.len(), r.out_pos), (0, 0));
    }
}
