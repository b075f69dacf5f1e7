//! HTTPS and wss:// on the fan-out's TLS port: the socket type of every fan-out connection.
//!
//! A connection is a [`Sock`]: plain TCP, or TCP under rustls ([`TlsStream`]). Both are
//! non-blocking `Read + Write` streams, so the HTTP code, tungstenite's handshake and the
//! browsers' WebSocket run over either unchanged: the TLS port behaves exactly like the
//! plain one (tokens, limits, heartbeats, bounded queues), with encryption underneath.
//!
//! The rustls driver is every role's ([`recached_net::tls::TlsConn`]); this module only
//! adapts it to `std::io`:
//!
//! ```text
//!  read(out)  ─► decrypted bytes left over? copy them ─► else one socket read of ciphertext
//!                into the loop's shared scratch ─► TlsConn ─► `plain` (≤ one scratch of
//!                plaintext) ─► copy; nothing yet (handshake) ─► send rustls' reply, read on
//!  write(buf) ─► TlsConn::write: plaintext taken while rustls holds < OUT_BUFFER_LIMIT
//!                (256 KB) of ciphertext, written to the socket at once; 0 taken = WouldBlock
//!  flush()    ─► ciphertext still held by rustls = WouldBlock (a WRITABLE event follows)
//! ```
//!
//! Readiness is edge-triggered: every caller in the loop reads until `WouldBlock`, and
//! ciphertext left in rustls when the socket filled is pushed by the next `read` or `flush`
//! (both run on every event of the connection), so nothing waits for an event that will
//! not come. Memory per connection is bounded: at most one scratch buffer of plaintext
//! ([`SCRATCH_LEN`]) waits here, at most 256 KB of ciphertext in rustls; the 64 KB scratch
//! is shared by the whole loop.
//!
//! Errors: a bad handshake or record (garbage, a plain HTTP request on the TLS port, a
//! failed client certificate) becomes an `InvalidData` error after rustls' alert is sent
//! best effort; the loop closes that connection only (docs/security-tls.md).

use std::cell::RefCell;
use std::io::{self, Read, Write};
use std::sync::Arc;

use mio::event::Source;
use mio::net::TcpStream;
use mio::{Interest, Registry, Token};

use recached_net::tls::{PlainSink, SCRATCH_LEN, TlsConn, TlsRead};

thread_local! {
    /// Ciphertext of one socket read; emptied before [`TlsStream::read`] returns, so every
    /// connection of the loop's thread can share it (as the engines' loop does).
    static SCRATCH: RefCell<Vec<u8>> = RefCell::new(vec![0; SCRATCH_LEN]);
}

/// Decrypted bytes kept beyond this are a bug in the bound above, answered with an error.
const PLAIN_LIMIT: usize = 4 * SCRATCH_LEN;
/// The plaintext buffer grows by this much at a time.
const PLAIN_STEP: usize = 16 * 1024;

/// One connection of the fan-out, on its plain or its TLS port.
pub enum Sock {
    Plain(TcpStream),
    Tls(Box<TlsStream>),
}

impl Sock {
    /// A connection accepted on the TLS port; the handshake runs inside the first reads.
    pub fn tls(tcp: TcpStream, cfg: &Arc<rustls::ServerConfig>) -> io::Result<Sock> {
        let tls = TlsConn::new(cfg).map_err(|e| io::Error::other(format!("tls: {e}")))?;
        Ok(Sock::Tls(Box::new(TlsStream {
            tcp,
            tls,
            plain: Vec::new(),
            at: 0,
            end: 0,
        })))
    }

    fn tcp(&mut self) -> &mut TcpStream {
        match self {
            Sock::Plain(s) => s,
            Sock::Tls(t) => &mut t.tcp,
        }
    }
}

/// TCP under rustls: see the module docs.
pub struct TlsStream {
    tcp: TcpStream,
    tls: TlsConn,
    /// `plain[at..end]`: decrypted bytes not yet read.
    plain: Vec<u8>,
    at: usize,
    end: usize,
}

/// [`TlsStream::plain`] as the driver's sink.
struct Sink<'a> {
    buf: &'a mut Vec<u8>,
    end: &'a mut usize,
}

impl PlainSink for Sink<'_> {
    fn space(&mut self) -> Option<&mut [u8]> {
        if *self.end >= PLAIN_LIMIT {
            return None;
        }
        if self.buf.len() - *self.end < PLAIN_STEP {
            self.buf.resize(*self.end + PLAIN_STEP, 0);
        }
        Some(&mut self.buf[*self.end..])
    }

    fn filled(&mut self, n: usize) {
        *self.end += n;
    }
}

impl TlsStream {
    /// Writes the ciphertext rustls holds (handshake messages, alerts, earlier data) as far
    /// as the socket takes it; whether some is still held.
    fn push(&mut self) -> io::Result<bool> {
        if !self.tls.wants_write() {
            return Ok(false);
        }
        self.tls.write(&mut self.tcp, &[])?;
        Ok(self.tls.wants_write())
    }
}

impl Read for TlsStream {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        loop {
            if self.at < self.end {
                let n = out.len().min(self.end - self.at);
                out[..n].copy_from_slice(&self.plain[self.at..self.at + n]);
                self.at += n;
                if self.at == self.end {
                    self.at = 0;
                    self.end = 0;
                    // An idle connection keeps no plaintext buffer.
                    if self.plain.len() > PLAIN_STEP {
                        self.plain = Vec::new();
                    }
                }
                return Ok(n);
            }
            self.push()?;
            let mut sink = Sink {
                buf: &mut self.plain,
                end: &mut self.end,
            };
            let r = SCRATCH.with(|s| self.tls.read(&mut self.tcp, &mut s.borrow_mut(), &mut sink));
            match r {
                // Plaintext is returned at the top; handshake records get rustls' answer
                // there too (`push`), then the socket is read again until it is drained.
                TlsRead::Data { .. } => {}
                TlsRead::Drained => {
                    self.push()?;
                    return Err(io::ErrorKind::WouldBlock.into());
                }
                TlsRead::Eof => return Ok(0),
                TlsRead::Full => {
                    return Err(io::Error::other("tls: plaintext buffer limit reached"));
                }
                TlsRead::Tls(e) => {
                    self.tls.flush_alert(&mut self.tcp);
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("tls: {e}"),
                    ));
                }
                TlsRead::Io(e) => return Err(e),
            }
        }
    }
}

impl Write for TlsStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let (n, _) = self.tls.write(&mut self.tcp, buf)?;
        if n == 0 {
            // rustls' backlog is at its limit and the socket is full: WRITABLE will follow.
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.push()? {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(())
    }
}

impl Read for Sock {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Sock::Plain(s) => s.read(buf),
            Sock::Tls(t) => t.read(buf),
        }
    }
}

impl Write for Sock {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Sock::Plain(s) => s.write(buf),
            Sock::Tls(t) => t.write(buf),
        }
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Sock::Plain(s) => s.write_vectored(bufs),
            Sock::Tls(t) => t.write_vectored(bufs),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Sock::Plain(s) => s.flush(),
            Sock::Tls(t) => t.flush(),
        }
    }
}

impl Source for Sock {
    fn register(&mut self, r: &Registry, token: Token, interests: Interest) -> io::Result<()> {
        self.tcp().register(r, token, interests)
    }

    fn reregister(&mut self, r: &Registry, token: Token, interests: Interest) -> io::Result<()> {
        self.tcp().reregister(r, token, interests)
    }

    fn deregister(&mut self, r: &Registry) -> io::Result<()> {
        self.tcp().deregister(r)
    }
}
