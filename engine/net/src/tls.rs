//! TLS on every server port (engine, proxy, fan-out): rustls (ring provider) driven by hand
//! over non-blocking mio sockets, so the loop keeps its own buffers, batching and
//! backpressure (docs/security-tls.md).
//!
//! # Settings (Redis names)
//!
//! `tls_port` (0 = no TLS listener), `tls_cert_file` + `tls_key_file` (PEM: the certificate
//! chain, leaf first, and its PKCS#8/PKCS#1/SEC1 key), `tls_ca_cert_file` (PEM roots that
//! client certificates must chain to), `tls_auth_clients` = `yes` (a client certificate is
//! required), `optional` (verified if sent) or `no` (never asked for). Redis's default is
//! `yes`, which needs `tls_ca_cert_file`; without a CA file we default to `no`. TLS 1.2 and
//! 1.3 (rustls' safe defaults, no renegotiation, no compression).
//!
//! # One connection
//!
//! ```text
//!  socket ──read (one syscall into the loop's scratch)──► read_tls/process_new_packets
//!         ──► plaintext ──► the connection's read buffer (PlainSink) ──► parser
//!  replies ──writer().write (up to OUT_BUFFER_LIMIT encrypted bytes held)──► write_tls ──► socket
//! ```
//!
//! Reading: one `read` per readiness batch into a scratch buffer shared by every connection
//! of the loop (it is emptied before the call returns), so a TLS connection keeps the same
//! "short read = socket drained" rule as a plain one and costs no extra system call; rustls
//! then decrypts from memory. Plaintext is drained into the caller's buffer after every
//! record batch (rustls holds at most 16 KB of it), exactly the count `process_new_packets`
//! reports. Writing: plaintext is handed to rustls only while its encrypted backlog is under
//! [`OUT_BUFFER_LIMIT`], so unsent replies stay in the caller's output buffer where its
//! high-water mark and the output limits see them. A reply batch becomes one record (up to
//! 16 KB of plaintext each) sent with one `send`, `writev` only when several are queued.
//!
//! Cost per request (docs/security-tls.md, "Performance"): the same system calls as the plain
//! port (one `recv`, one `send`), plus one record decrypted and one encrypted. Cipher suites
//! are rustls' defaults in the client's order: OpenSSL clients pick TLS 1.3 AES-256-GCM,
//! which runs on the CPU's AES instructions; ChaCha20-Poly1305 measured slower here on both
//! ends and AES-128-GCM no faster, so the order is not overridden.
//!
//! Errors: a bad handshake or record (garbage, wrong version, a failed client certificate)
//! is a [`TlsRead::Tls`]; the alert rustls queued is written best effort and the connection is
//! closed. Nothing else on the loop is affected.

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;

/// Encrypted bytes rustls may hold for one connection before `write` stops handing it
/// plaintext (`ServerConnection::set_buffer_limit`): enough for a 64-record `writev`.
pub const OUT_BUFFER_LIMIT: usize = 256 * 1024;

/// Size of the loop's shared scratch buffer for one socket read of ciphertext.
pub const SCRATCH_LEN: usize = 64 * 1024;

/// `tls_auth_clients`: whether clients must present a certificate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AuthClients {
    /// Never ask for a client certificate.
    #[default]
    No,
    /// Require one that chains to `tls_ca_cert_file`.
    Yes,
    /// Ask for one; verify it if sent, accept clients without one.
    Optional,
}

impl AuthClients {
    /// `yes` / `no` / `optional` (any case), as redis.conf spells them.
    pub fn parse(s: &str) -> Option<AuthClients> {
        match s.trim().to_ascii_lowercase().as_str() {
            "no" => Some(AuthClients::No),
            "yes" => Some(AuthClients::Yes),
            "optional" => Some(AuthClients::Optional),
            _ => None,
        }
    }
}

/// The TLS settings of one role (engine, proxy or fan-out). `port == 0`: no TLS listener.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsOptions {
    pub port: u16,
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    pub ca_cert_file: Option<PathBuf>,
    pub auth_clients: AuthClients,
}

impl TlsOptions {
    pub fn enabled(&self) -> bool {
        self.port != 0
    }
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

fn load_certs(path: &Path) -> io::Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| invalid(format!("tls: reading certificates {}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(invalid(format!(
            "tls: no certificate in {}",
            path.display()
        )));
    }
    Ok(certs)
}

/// Builds the rustls server configuration from the files (read once, at start).
///
/// Errors name the file and the reason: unreadable, no PEM certificate/key in it, a key
/// that does not match the certificate, `tls_auth_clients yes|optional` without a CA file.
pub fn server_config(opts: &TlsOptions) -> io::Result<Arc<ServerConfig>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs = load_certs(&opts.cert_file)?;
    let key = PrivateKeyDer::from_pem_file(&opts.key_file).map_err(|e| {
        invalid(format!(
            "tls: reading private key {}: {e}",
            opts.key_file.display()
        ))
    })?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid(format!("tls: {e}")))?;
    let builder = match (opts.auth_clients, &opts.ca_cert_file) {
        (AuthClients::No, _) => builder.with_no_client_auth(),
        (_, None) => {
            return Err(invalid(
                "tls: tls_auth_clients yes/optional needs tls_ca_cert_file".into(),
            ));
        }
        (auth, Some(ca)) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in load_certs(ca)? {
                roots
                    .add(c)
                    .map_err(|e| invalid(format!("tls: CA file {}: {e}", ca.display())))?;
            }
            let v = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let v = if auth == AuthClients::Optional {
                v.allow_unauthenticated()
            } else {
                v
            };
            let verifier = v
                .build()
                .map_err(|e| invalid(format!("tls: client verifier: {e}")))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let cfg = builder
        .with_single_cert(certs, key)
        .map_err(|e| invalid(format!("tls: certificate/key: {e}")))?;
    Ok(Arc::new(cfg))
}

/// Where decrypted bytes go: the connection's read buffer.
pub trait PlainSink {
    /// Free space at the end of the buffer (grown or compacted as needed); `None` when the
    /// query buffer limit forbids more.
    fn space(&mut self) -> Option<&mut [u8]>;
    /// `n` bytes were written at the start of the last `space`.
    fn filled(&mut self, n: usize);
}

/// Result of [`TlsConn::read`].
#[derive(Debug)]
pub enum TlsRead {
    /// One socket read of `cipher` bytes gave `plain` bytes of plaintext (0 during the
    /// handshake); `more`: the read filled the scratch buffer, the socket may hold more.
    Data {
        cipher: usize,
        plain: usize,
        more: bool,
    },
    /// The socket had nothing (`WouldBlock`).
    Drained,
    /// The peer closed (TCP EOF or TLS close_notify), after any plaintext already returned.
    Eof,
    /// The sink refused more bytes (query buffer limit).
    Full,
    /// A TLS protocol error (bad handshake, bad record): write the alert, then close.
    Tls(rustls::Error),
    /// A socket error.
    Io(io::Error),
}

/// Records whether a `read`/`write` filled the slice it was offered (a short transfer means
/// the socket is drained / full, so no extra system call is needed to learn it).
struct Probe<'a, S> {
    sock: &'a mut S,
    short: bool,
}

impl<S: Read> Read for Probe<'_, S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.sock.read(buf)?;
        self.short = n < buf.len();
        Ok(n)
    }
}

impl<S: Write> Write for Probe<'_, S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.sock.write(buf)?;
        self.short = n < buf.len();
        Ok(n)
    }
    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        // rustls offers one slice per queued record; a reply batch is usually one record, and
        // send(2) is a shorter kernel path than writev(2) for it (perf: vfs_writev on every
        // TLS reply, none on the plain port).
        let n = match bufs {
            [one] => self.sock.write(one)?,
            _ => self.sock.write_vectored(bufs)?,
        };
        self.short = n < bufs.iter().map(|b| b.len()).sum::<usize>();
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.sock.flush()
    }
}

/// The TLS state of one server-side connection.
pub struct TlsConn {
    conn: rustls::ServerConnection,
    /// The peer closed its side; reported as [`TlsRead::Eof`] after the plaintext before it.
    eof: bool,
}

impl TlsConn {
    pub fn new(cfg: &Arc<ServerConfig>) -> Result<TlsConn, rustls::Error> {
        let mut conn = rustls::ServerConnection::new(Arc::clone(cfg))?;
        conn.set_buffer_limit(Some(OUT_BUFFER_LIMIT));
        Ok(TlsConn { conn, eof: false })
    }

    /// The handshake is done (application data flows).
    pub fn is_handshaking(&self) -> bool {
        self.conn.is_handshaking()
    }

    /// rustls has encrypted bytes (handshake, alert or replies) waiting for the socket.
    pub fn wants_write(&self) -> bool {
        self.conn.wants_write()
    }

    /// Whether the client presented a verified certificate.
    pub fn has_client_cert(&self) -> bool {
        self.conn.peer_certificates().is_some_and(|c| !c.is_empty())
    }

    /// One socket read into `scratch`, decrypted into `sink`. See the module docs.
    pub fn read<S: Read>(
        &mut self,
        sock: &mut S,
        scratch: &mut [u8],
        sink: &mut impl PlainSink,
    ) -> TlsRead {
        if self.eof {
            return TlsRead::Eof;
        }
        let mut probe = Probe { sock, short: false };
        let n = loop {
            match probe.read(scratch) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return TlsRead::Drained,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return TlsRead::Io(e),
            }
        };
        if n == 0 {
            self.eof = true;
            return TlsRead::Eof;
        }
        let mut input = &scratch[..n];
        let mut plain = 0;
        while !input.is_empty() {
            match self.conn.read_tls(&mut input) {
                // close_notify was received: the rest of the input is ignored.
                Ok(0) => {
                    self.eof = true;
                    break;
                }
                Ok(_) => {}
                Err(e) => return TlsRead::Io(e),
            }
            let state = match self.conn.process_new_packets() {
                Ok(state) => state,
                Err(e) => return TlsRead::Tls(e),
            };
            match self.drain_plaintext(sink, state.plaintext_bytes_to_read()) {
                Ok(k) => plain += k,
                Err(r) => return r,
            }
            if state.peer_has_closed() {
                // close_notify: nothing after it counts.
                self.eof = true;
                break;
            }
        }
        TlsRead::Data {
            cipher: n,
            plain,
            more: !probe.short,
        }
    }

    /// Moves the `avail` decrypted bytes rustls holds into `sink` (the count comes from
    /// `process_new_packets`, so no further `read` is made just to learn that rustls is empty).
    fn drain_plaintext(
        &mut self,
        sink: &mut impl PlainSink,
        mut avail: usize,
    ) -> Result<usize, TlsRead> {
        let mut total = 0;
        while avail > 0 {
            let Some(space) = sink.space() else {
                return Err(TlsRead::Full);
            };
            let want = space.len().min(avail);
            match self.conn.reader().read(&mut space[..want]) {
                Ok(0) => return Ok(total),
                Ok(k) => {
                    sink.filled(k);
                    total += k;
                    avail -= k;
                }
                // Not expected with `avail` > 0; the next socket read retries.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(total),
                Err(e) => return Err(TlsRead::Io(e)),
            }
        }
        Ok(total)
    }

    /// Hands `out` to rustls (as much as its buffer limit takes) and writes encrypted bytes
    /// until everything is written, the socket is full, or rustls takes no more. Returns the
    /// plaintext bytes consumed from `out` and whether the socket was found full (WRITABLE
    /// will follow). Also sends pending handshake bytes and alerts when `out` is empty.
    pub fn write<S: Write>(&mut self, sock: &mut S, out: &[u8]) -> io::Result<(usize, bool)> {
        let mut pos = 0;
        loop {
            let mut took = 0;
            if pos < out.len() {
                took = self.conn.writer().write(&out[pos..])?;
                pos += took;
            }
            if !self.conn.wants_write() {
                if pos == out.len() || took == 0 {
                    // All sent, or rustls holds plaintext until the handshake completes.
                    return Ok((pos, false));
                }
                continue;
            }
            let mut probe = Probe {
                sock: &mut *sock,
                short: false,
            };
            match self.conn.write_tls(&mut probe) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(_) if probe.short => return Ok((pos, true)),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok((pos, true)),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Queues a close_notify alert (a clean TLS close after QUIT); the next `write` sends it.
    pub fn send_close_notify(&mut self) {
        self.conn.send_close_notify();
    }

    /// Best effort: writes what rustls holds (an alert after an error) without waiting.
    pub fn flush_alert<S: Write>(&mut self, sock: &mut S) {
        for _ in 0..4 {
            if !self.conn.wants_write() || self.conn.write_tls(sock).is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auth_clients_parses_redis_words() {
        assert_eq!(AuthClients::parse("YES"), Some(AuthClients::Yes));
        assert_eq!(AuthClients::parse("no"), Some(AuthClients::No));
        assert_eq!(
            AuthClients::parse(" optional "),
            Some(AuthClients::Optional)
        );
        assert_eq!(AuthClients::parse("maybe"), None);
    }

    #[test]
    fn missing_files_are_named_in_the_error() {
        let opts = TlsOptions {
            port: 1,
            cert_file: "/nonexistent/cert.pem".into(),
            key_file: "/nonexistent/key.pem".into(),
            ..TlsOptions::default()
        };
        let e = server_config(&opts).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/cert.pem"), "{e}");
    }
}
