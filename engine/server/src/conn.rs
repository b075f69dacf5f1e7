//! One client connection: its socket, read buffer, request parser, engine [`Client`] state and
//! output buffer, plus the three steps the loop drives: [`Conn::read`], [`Conn::execute`] and
//! [`Conn::flush`].
//!
//! # Buffers
//!
//! ```text
//! rbuf:  [ consumed | unparsed request bytes | free space (zeroed) ]
//!        0          rstart                   rend                  rbuf.len()
//! out:   [ written  | replies not yet written ]
//!        0          out_pos                   out.len()
//! ```
//!
//! `rbuf` is kept fully initialised (its `len` is the usable capacity), so `read` goes straight
//! into `rbuf[rend..]` without `unsafe`; the zeroing cost is paid only when the buffer grows.
//! Unparsed bytes are moved to the front only when that is cheap (budget `COMPACT_MAX`), else the
//! buffer grows by doubling, up to the query buffer limit (Redis `client-query-buffer-limit`).
//!
//! # Edge-triggered reads and writes
//!
//! mio is edge-triggered: after a readable event we must read until the socket is drained or we
//! get no further event. A read that does not fill the free space means the kernel queue was
//! emptied at that moment, and data arriving later raises a new edge, so it ends the batch
//! without the extra `read` that would only return `WouldBlock`: one `read` per batch in the
//! usual case. Likewise a short `write` means the send buffer is full (WRITABLE fires when it
//! drains). The exception is an event that reports a hang-up (`hangup`): its FIN may sit behind
//! the data, so reads continue until one returns 0. `readable` remembers that the socket may still hold data when we stop early
//! (read budget spent, or backpressure), since no new edge will come for those bytes.
//!
//! # TLS
//!
//! A connection accepted on the TLS port carries a [`TlsConn`]: `read` then does its one
//! socket read through it (decrypting into `rbuf`), and `flush` hands `out` to it, so the
//! buffers, limits and batching above are the same for both (see [`crate::tls`]).

use std::io::{self, Read, Write};

use engine_core::script::BusyPoll;
use engine_core::{Client, Engine, Flow};
use mio::net::TcpStream;
use resp::{Limits, ReplyWriter, RequestParser};

use crate::budget::{
    BUF_SHRINK_ABOVE, COMPACT_MAX, IDLE_BUF_FREE_US, OUTPUT_HIGH_WATER, READ_CHUNK, READ_MIN_SPACE,
};
use crate::tls::{PlainSink, TlsConn, TlsRead};

/// Why a connection is being closed (for the log).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CloseReason {
    /// QUIT.
    Quit,
    /// A malformed request; `-ERR Protocol error: …` was queued.
    ProtocolError,
    /// The peer closed its side (read returned 0).
    PeerClosed,
    /// Over its hard `client-output-buffer-limit` while output was routed to it; the
    /// output was dropped.
    OutputLimit,
    /// CLIENT KILL matched this connection (closed after the reply when it killed itself).
    Killed,
}

/// Result of one `read` system call.
#[derive(Debug)]
pub enum ReadOutcome {
    /// `n` bytes arrived; `more` is true when they filled the free space, so the socket may
    /// hold more (read again); false when the kernel queue was drained.
    Data { n: usize, more: bool },
    /// Nothing to read (`WouldBlock`).
    Drained,
    /// End of stream: the peer closed its side.
    Eof,
    /// The unparsed input is above `client-query-buffer-limit`: close the connection.
    QueryBufLimit,
    /// A socket error: close the connection.
    Error(io::Error),
    /// A TLS handshake or record error: the alert is sent best effort, then close.
    Tls(rustls::Error),
}

/// Where [`Conn::execute`] stopped.
#[derive(Debug, PartialEq, Eq)]
pub enum Batch {
    /// No complete request is left in the read buffer.
    NeedInput,
    /// Output is at the high-water mark: flush before executing more.
    Throttled,
    /// CLIENT LIST ran: the loop appends its reply (it alone sees every connection), then
    /// calls `execute` again for the requests after it.
    ClientList,
    /// CLIENT KILL ran with valid filters: the loop kills the connections they match and
    /// appends the reply, then calls `execute` again.
    ClientKill(Box<engine_core::cmd::connection::KillFilter>),
    /// The connection is closing; nothing more is executed.
    Closing,
    /// A command queued output for other connections (or this one, after its reply): the
    /// loop routes it before running the next request, so order is kept.
    Deliveries,
    /// The client is parked in a blocking command: nothing more runs until the engine
    /// delivers its reply.
    Blocked,
    /// SHUTDOWN ran: the loop saves as asked and exits (or replies the failure and goes on).
    Shutdown(engine_core::cmd::server::Shutdown),
}

pub struct Conn {
    pub stream: TcpStream,
    /// Received bytes, `[rstart, rend)` not yet consumed (see the module docs).
    rbuf: Vec<u8>,
    rstart: usize,
    rend: usize,
    /// Resumable parser; its limits follow `proto-max-bulk-len`.
    parser: RequestParser,
    /// The engine's view of this connection (id, name, protocol, addresses, times).
    pub client: Client,
    /// Replies, `[out_pos, out.len())` not yet written.
    out: Vec<u8>,
    out_pos: usize,
    /// The socket may hold unread bytes (set by readable events, cleared by a read that
    /// drained the socket).
    pub readable: bool,
    /// An event reported a hang-up or error: keep reading until the read that returns it.
    pub hangup: bool,
    /// The peer closed its side; buffered requests still run, then the connection closes.
    pub peer_closed: bool,
    /// WRITABLE interest is registered (only while output is left over).
    pub write_interest: bool,
    /// Set once no more requests will run: close after the output is flushed.
    pub closing: Option<CloseReason>,
    /// In the loop's list of connections to continue on the next iteration.
    pub queued: bool,
    /// Parked in a blocking command (`Flow::Block`) until a delivery unblocks it.
    pub blocked: bool,
    /// Bytes read / written since the loop last added them to INFO's totals.
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// TLS state for a connection accepted on the TLS port.
    pub tls: Option<Box<TlsConn>>,
    /// Since when (Unix µs) the unsent output has been over its class's soft
    /// `client-output-buffer-limit`; `None` while under it.
    pub obuf_soft_since: Option<u64>,
    /// The last tick found the query buffer empty and over `BUF_SHRINK_ABOVE`: this tick
    /// may free it (Redis too shrinks a burst's query buffer only once a cron pass saw a
    /// lower peak, `clientsCronResizeQueryBuffer`).
    big_empty_rbuf: bool,
}

/// [`Conn::refresh_buffers`] over the fields (callable while the query buffer is borrowed).
fn refresh_buffers(
    b: &mut engine_core::Buffers,
    rbuf: &Vec<u8>,
    qbuf: usize,
    out: &Vec<u8>,
    out_pos: usize,
) {
    // As Redis's `sdsavail`: the rest of the query buffer's allocation (ours keeps consumed
    // bytes at the front until it compacts; Redis moves the unparsed ones down at once).
    b.qbuf_free = rbuf.len().saturating_sub(qbuf);
    b.reply_size = out.capacity();
    b.reply_peak = b.reply_peak.max(out.len()).min(b.reply_size);
    b.reply_pending = out.len() - out_pos;
    b.total = std::mem::size_of::<Conn>() + rbuf.capacity() + out.capacity();
}

/// Reuses the allocation of a `Vec` of slices for slices of another lifetime: the vector is
/// emptied first, and collecting a `vec::IntoIter` of a same-sized type is done in place, so
/// the batch's `argv` costs no allocation per command.
fn recycle<'a, 'b>(mut v: Vec<&'a [u8]>) -> Vec<&'b [u8]> {
    v.clear();
    v.into_iter()
        .map(|_| -> &'b [u8] { unreachable!() })
        .collect()
}

fn parser_limits(engine: &Engine) -> Limits {
    Limits {
        max_bulk_len: usize::try_from(engine.config.proto_max_bulk_len).unwrap_or(usize::MAX),
        ..Limits::default()
    }
}

impl Conn {
    pub fn new(stream: TcpStream, client: Client, engine: &Engine) -> Conn {
        Conn {
            stream,
            rbuf: Vec::new(),
            rstart: 0,
            rend: 0,
            parser: RequestParser::new(parser_limits(engine)),
            client,
            out: Vec::new(),
            out_pos: 0,
            readable: false,
            hangup: false,
            peer_closed: false,
            write_interest: false,
            closing: None,
            queued: false,
            blocked: false,
            bytes_in: 0,
            bytes_out: 0,
            tls: None,
            obuf_soft_since: None,
            big_empty_rbuf: false,
        }
    }

    /// Bytes waiting for the socket: replies, or TLS handshake records and alerts.
    pub fn wants_write(&self) -> bool {
        self.out_pending() > 0 || self.tls.as_ref().is_some_and(|t| t.wants_write())
    }

    /// Reply bytes waiting to be written.
    pub fn out_pending(&self) -> usize {
        self.out.len() - self.out_pos
    }

    /// Sets the buffer figures CLIENT LIST/INFO print (`engine_core::Buffers`): before each
    /// command, and for every connection before a CLIENT LIST.
    pub fn refresh_buffers(&mut self, running: bool) {
        // A connection whose command is running keeps the `qbuf` its command started with
        // (the request included, as Redis counts it until the command ends).
        if !running {
            self.client.qbuf = self.rend - self.rstart;
        }
        refresh_buffers(
            &mut self.client.buffers,
            &self.rbuf,
            self.client.qbuf,
            &self.out,
            self.out_pos,
        );
    }

    /// Received bytes not yet consumed by a complete request.
    pub fn in_pending(&self) -> usize {
        self.rend - self.rstart
    }

    /// Output is at the high-water mark: stop reading and executing until it drains.
    pub fn throttled(&self) -> bool {
        self.out_pending() >= OUTPUT_HIGH_WATER
    }

    /// One `read` system call into the free space of the read buffer (through TLS for a TLS
    /// connection, with `scratch` holding the ciphertext). `query_limit`: Redis
    /// `client-query-buffer-limit`, bytes of unparsed input.
    pub fn read(&mut self, scratch: &mut [u8], query_limit: usize) -> ReadOutcome {
        let mut rb = ReadBuf {
            rbuf: &mut self.rbuf,
            rstart: &mut self.rstart,
            rend: &mut self.rend,
            limit: query_limit,
        };
        if let Some(tls) = &mut self.tls {
            return match tls.read(&mut self.stream, scratch, &mut rb) {
                TlsRead::Data { cipher, more, .. } => {
                    self.bytes_in += cipher as u64;
                    ReadOutcome::Data { n: cipher, more }
                }
                TlsRead::Drained => ReadOutcome::Drained,
                TlsRead::Eof => ReadOutcome::Eof,
                TlsRead::Full => ReadOutcome::QueryBufLimit,
                TlsRead::Tls(e) => {
                    tls.flush_alert(&mut self.stream);
                    ReadOutcome::Tls(e)
                }
                TlsRead::Io(e) => ReadOutcome::Error(e),
            };
        }
        if !rb.make_room() {
            return ReadOutcome::QueryBufLimit;
        }
        loop {
            let space = &mut self.rbuf[self.rend..];
            let room = space.len();
            return match self.stream.read(space) {
                Ok(0) => ReadOutcome::Eof,
                Ok(n) => {
                    self.rend += n;
                    self.bytes_in += n as u64;
                    ReadOutcome::Data { n, more: n == room }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => ReadOutcome::Drained,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => ReadOutcome::Error(e),
            };
        }
    }

    /// Parses and runs every complete request in the read buffer, appending replies to the
    /// output buffer, until input runs out, output reaches the high-water mark, CLIENT LIST
    /// needs the loop, or the connection starts closing (QUIT, protocol error).
    ///
    /// A protocol error queues `-<error>\r\n` and discards the rest of the input, as Redis
    /// does (`networking.c`, `setProtocolError` then close after reply).
    /// What [`Conn::execute`] returns when it would run nothing (closing, parked, throttled,
    /// or no byte buffered), without the call.
    #[inline]
    pub fn no_batch(&self) -> Option<Batch> {
        if self.closing.is_some() {
            Some(Batch::Closing)
        } else if self.blocked {
            Some(Batch::Blocked)
        } else if self.throttled() {
            Some(Batch::Throttled)
        } else if self.rstart == self.rend {
            Some(Batch::NeedInput)
        } else {
            None
        }
    }

    pub fn execute(
        &mut self,
        engine: &mut Engine,
        now_us: u64,
        argv_store: &mut Vec<&'static [u8]>,
        poller: &mut dyn BusyPoll,
    ) -> Batch {
        loop {
            if let Some(batch) = self.no_batch() {
                return batch;
            }
            // CONFIG SET proto-max-bulk-len applies from the next request, as in Redis. A new
            // parser restarts at the first unconsumed byte, which is always the start of a
            // request, so no state is lost.
            let limits = parser_limits(engine);
            if self.parser.limits().max_bulk_len != limits.max_bulk_len {
                self.parser = RequestParser::new(limits);
            }
            let buf = &self.rbuf[self.rstart..self.rend];
            if buf.is_empty() {
                return Batch::NeedInput;
            }
            match self.parser.parse(buf) {
                Ok(None) => return Batch::NeedInput,
                Ok(Some(n)) => {
                    let argc = self.parser.argc();
                    if argc == 0 {
                        // An empty inline line: Redis skips it silently.
                        self.rstart += n;
                        continue;
                    }
                    let mut argv = recycle(std::mem::take(argv_store));
                    for i in 0..argc {
                        argv.push(self.parser.arg(buf, i));
                    }
                    self.client.last_cmd_us = now_us;
                    self.client.qbuf = self.rend - self.rstart;
                    refresh_buffers(
                        &mut self.client.buffers,
                        &self.rbuf,
                        self.rend - self.rstart,
                        &self.out,
                        self.out_pos,
                    );
                    let reply_start = self.out.len();
                    let flow = engine.exec_with_poller(
                        &mut self.client,
                        &argv,
                        now_us,
                        &mut self.out,
                        &mut *poller,
                    );
                    *argv_store = recycle(argv);
                    self.rstart += n;
                    if self.client.reply != engine_core::ReplyMode::On {
                        self.client.after_reply(&mut self.out, reply_start);
                    }
                    match flow {
                        Flow::Continue => {}
                        Flow::Close => self.closing = Some(CloseReason::Quit),
                        Flow::ClientList => return Batch::ClientList,
                        Flow::ClientKill(f) => return Batch::ClientKill(f),
                        Flow::Block => {
                            self.blocked = true;
                            return Batch::Blocked;
                        }
                        // Not run (CLIENT PAUSE): the request stays in the input until the
                        // engine's unblocking delivery (engine-core `pause`).
                        Flow::Postpone => {
                            self.rstart -= n;
                            self.blocked = true;
                            return Batch::Blocked;
                        }
                        Flow::Shutdown(s) => return Batch::Shutdown(s),
                    }
                    if engine.has_deliveries() {
                        return Batch::Deliveries;
                    }
                }
                Err(e) => {
                    // `write_reply`, not Display: Redis echoes a non-ASCII byte raw.
                    e.write_reply(&mut self.out);
                    self.rstart = self.rend;
                    self.closing = Some(CloseReason::ProtocolError);
                }
            }
        }
    }

    /// Appends bytes the engine produced for this client outside its own command (a pub/sub
    /// message, the reply of a blocking command that was woken or timed out).
    pub fn push_output(&mut self, bytes: &[u8]) {
        self.out.extend_from_slice(bytes);
    }

    /// Appends an error reply (`msg` without the leading `-`) in this client's protocol.
    pub fn reply_error(&mut self, msg: &str) {
        ReplyWriter::new(&mut self.out, self.client.proto).error(msg);
    }

    /// Appends the CLIENT LIST reply `text` in this client's protocol.
    pub fn reply_verbatim(&mut self, text: &[u8]) {
        ReplyWriter::new(&mut self.out, self.client.proto).verbatim(text);
    }

    /// Appends the CLIENT KILL reply once `killed` connections were killed.
    pub fn reply_client_kill(
        &mut self,
        filter: &engine_core::cmd::connection::KillFilter,
        killed: usize,
    ) {
        filter.reply(killed, self.client.proto, &mut self.out);
    }

    /// Writes pending output until it is all written or the socket is full. An error means
    /// the connection is dead.
    pub fn flush(&mut self) -> io::Result<()> {
        if let Some(tls) = &mut self.tls {
            let (n, _full) = tls.write(&mut self.stream, &self.out[self.out_pos..])?;
            self.out_pos += n;
            self.bytes_out += n as u64;
        }
        while self.tls.is_none() && self.out_pos < self.out.len() {
            match self.stream.write(&self.out[self.out_pos..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.out_pos += n;
                    self.bytes_out += n as u64;
                    if self.out_pos < self.out.len() {
                        break; // short write: the send buffer is full, WRITABLE will follow
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        if self.out_pos == self.out.len() {
            self.out.clear();
            self.out_pos = 0;
        } else if self.out_pos >= self.out.len() - self.out_pos {
            // Dropping the written prefix costs no more than the bytes already written.
            self.out.drain(..self.out_pos);
            self.out_pos = 0;
        }
        Ok(())
    }

    /// Drops every unsent reply (the connection is being closed for its output limit, so the
    /// memory is returned at once).
    pub fn discard_output(&mut self) {
        self.out = Vec::new();
        self.out_pos = 0;
    }

    /// Releases empty buffers that a burst left large, or that an idle connection does not
    /// need (called from the timer).
    pub fn shrink_idle_buffers(&mut self, now_us: u64) {
        let idle = now_us.saturating_sub(self.client.last_cmd_us) >= IDLE_BUF_FREE_US;
        let big_empty = self.rstart == self.rend && self.rbuf.len() > BUF_SHRINK_ABOVE;
        let seen = std::mem::replace(&mut self.big_empty_rbuf, big_empty);
        if self.rstart == self.rend && (idle || (big_empty && seen)) {
            // Idle: freed (Redis `sdsRemoveFreeSpace` after 2 s). A burst's buffer that stayed
            // empty: trimmed to one read's size, not freed, as Redis trims it to about its
            // recent peak while the client is active.
            self.rbuf = if idle {
                Vec::new()
            } else {
                vec![0; READ_CHUNK]
            };
            self.rstart = 0;
            self.rend = 0;
        }
        if self.out_pending() == 0 && (idle || self.out.capacity() > BUF_SHRINK_ABOVE) {
            self.out = Vec::new();
            self.out_pos = 0;
        }
    }
}

/// The read buffer's fields, borrowed apart from the socket and TLS state (see the module
/// docs for its layout).
struct ReadBuf<'a> {
    rbuf: &'a mut Vec<u8>,
    rstart: &'a mut usize,
    rend: &'a mut usize,
    limit: usize,
}

impl ReadBuf<'_> {
    /// Makes at least `READ_MIN_SPACE` bytes free after `rend`; false when the unparsed input
    /// is already above the query buffer limit.
    fn make_room(&mut self) -> bool {
        if *self.rstart == *self.rend {
            *self.rstart = 0;
            *self.rend = 0;
        }
        if self.rbuf.len() - *self.rend >= READ_MIN_SPACE {
            return true;
        }
        let pending = *self.rend - *self.rstart;
        if pending > self.limit {
            return false;
        }
        if *self.rstart > 0 && (pending <= COMPACT_MAX || *self.rstart >= self.rbuf.len() / 2) {
            self.rbuf.copy_within(*self.rstart..*self.rend, 0);
            *self.rstart = 0;
            *self.rend = pending;
            if self.rbuf.len() - *self.rend >= READ_MIN_SPACE {
                return true;
            }
        }
        let new_len = (self.rbuf.len() * 2)
            .max(READ_CHUNK)
            .max(*self.rend + READ_MIN_SPACE);
        self.rbuf.resize(new_len, 0);
        true
    }
}

impl PlainSink for ReadBuf<'_> {
    fn space(&mut self) -> Option<&mut [u8]> {
        if !self.make_room() {
            return None;
        }
        Some(&mut self.rbuf[*self.rend..])
    }

    fn filled(&mut self, n: usize) {
        *self.rend += n;
    }
}

#[cfg(test)]
mod tests {
    use super::recycle;

    #[test]
    fn recycle_keeps_the_allocation() {
        let mut v: Vec<&'static [u8]> = Vec::with_capacity(64);
        let ptr = v.as_ptr() as usize;
        let owned = [1u8, 2, 3];
        let mut w = recycle(std::mem::take(&mut v));
        w.push(&owned[..]);
        assert_eq!(w.capacity(), 64);
        assert_eq!(w.as_ptr() as usize, ptr);
        v = recycle(w);
        assert!(v.is_empty());
        assert_eq!(v.capacity(), 64);
    }
}
