//! Plain HTTP on the fan-out's port: the demo page, `recached.js`, `recached.wasm`, and the
//! WebSocket upgrade at `/ws` (handed to tungstenite with the bytes already read).
//!
//! Only what a page load needs: `GET`/`HEAD`, one request per connection (`Connection:
//! close`), a request head of at most [`MAX_HEAD`] bytes, no body. Anything else gets a status
//! code (400, 403, 404, 405, 431) and the connection closes.

use std::io::{self, Read, Write};
use std::net::IpAddr;
use std::path::PathBuf;

/// Largest request head accepted, bytes.
pub const MAX_HEAD: usize = 8 * 1024;

// The text assets are compiled in by the crate that owns them (`recached-www`), so the
// fan-out serves the page with no files around.
use recached_www::{DEMO_CSS, DEMO_JS, INDEX_HTML, RECACHED_JS};

/// A parsed request head.
#[derive(Debug)]
pub struct Head {
    pub method: String,
    pub path: String,
    pub origin: Option<String>,
    pub upgrade_ws: bool,
    /// The upgrade carries what RFC 6455 §4.2.1 requires (a key, version 13).
    pub ws_complete: bool,
}

/// Parses the request head at the start of `buf`: `Ok(None)` while incomplete, `Err(status)`
/// for a request to refuse.
pub fn parse_head(buf: &[u8]) -> Result<Option<Head>, u16> {
    let mut headers = [httparse::EMPTY_HEADER; 48];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD => return Err(431),
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(431),
        Err(_) => return Err(400),
    }
    let target = req.path.unwrap_or("/");
    let path = target.split_once('?').map_or(target, |(p, _)| p);
    let header = |name: &str| {
        req.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| String::from_utf8_lossy(h.value).into_owned())
    };
    let upgrade_ws = header("upgrade").is_some_and(|u| u.eq_ignore_ascii_case("websocket"));
    let ws_complete = upgrade_ws
        && req.method == Some("GET")
        && header("sec-websocket-key").is_some_and(|k| !k.trim().is_empty())
        && header("sec-websocket-version").is_some_and(|v| v.trim() == "13");
    Ok(Some(Head {
        method: req.method.unwrap_or("").to_string(),
        path: path.to_string(),
        origin: header("origin"),
        upgrade_ws,
        ws_complete,
    }))
}

/// Whether an `Origin` header names a loopback host (`http://127.0.0.1:6480`,
/// `http://localhost`, `http://[::1]:8080`). `null` (file pages, sandboxed frames) does not.
pub fn origin_is_loopback(origin: &str) -> bool {
    let Some((_, rest)) = origin.split_once("://") else {
        return false;
    };
    let host = rest.split('/').next().unwrap_or("");
    let host = if let Some(v6) = host.strip_prefix('[') {
        v6.split(']').next().unwrap_or("")
    } else {
        host.rsplit_once(':').map_or(host, |(h, _)| h)
    };
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Where `/recached.wasm` comes from.
#[derive(Clone, Debug)]
pub enum WasmModule {
    /// Compiled into the binary (`recached_www::RECACHED_WASM`).
    Embedded(&'static [u8]),
    /// Read from this file at each request (`--wasm`, `RECACHED_WASM`, or scripts/build-wasm.sh's
    /// output when the binary has none embedded).
    File(PathBuf),
}

impl WasmModule {
    /// `--wasm PATH` or `RECACHED_WASM` if given, else the embedded module, else the file
    /// scripts/build-wasm.sh writes.
    pub fn choose(flag: Option<PathBuf>) -> WasmModule {
        match flag.or_else(recached_www::wasm_override) {
            Some(path) => WasmModule::File(path),
            None if !recached_www::RECACHED_WASM.is_empty() => {
                WasmModule::Embedded(recached_www::RECACHED_WASM)
            }
            None => WasmModule::File(recached_www::default_wasm_path()),
        }
    }
}

/// A complete response for a plain HTTP request (never the upgrade).
pub fn respond(head: &Head, wasm: &WasmModule) -> Vec<u8> {
    if head.method != "GET" && head.method != "HEAD" {
        return status(405, "Method Not Allowed");
    }
    let (ctype, body): (&str, std::borrow::Cow<'_, [u8]>) = match head.path.as_str() {
        "/" | "/index.html" => ("text/html; charset=utf-8", INDEX_HTML.as_bytes().into()),
        "/demo.js" => ("text/javascript; charset=utf-8", DEMO_JS.as_bytes().into()),
        "/demo.css" => ("text/css; charset=utf-8", DEMO_CSS.as_bytes().into()),
        "/recached.js" => (
            "text/javascript; charset=utf-8",
            RECACHED_JS.as_bytes().into(),
        ),
        "/recached.wasm" => match wasm {
            WasmModule::Embedded(b) => ("application/wasm", (*b).into()),
            WasmModule::File(path) => match std::fs::read(path) {
                Ok(b) => ("application/wasm", b.into()),
                Err(e) => {
                    log::warn!(
                        "fanout: cannot read {} ({e}); build it with scripts/build-wasm.sh",
                        path.display()
                    );
                    return status(404, "Not Found (recached.wasm is not built)");
                }
            },
        },
        "/healthz" => ("text/plain", b"ok\n"[..].into()),
        "/ws" => return status(426, "Upgrade Required"),
        _ => return status(404, "Not Found"),
    };
    let mut out = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\n\
         Cache-Control: no-cache\r\nX-Content-Type-Options: nosniff\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if head.method == "GET" {
        out.extend_from_slice(&body);
    }
    out
}

/// A minimal error response.
pub fn status(code: u16, reason: &str) -> Vec<u8> {
    let body = format!("{code} {reason}\n");
    format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Whether a connection's first bytes are RESP (`*…` or an inline `PING`), not HTTP: the
/// supervisor's health checks and `recached status` probe every child that way.
pub fn is_resp(buf: &[u8]) -> bool {
    buf.first() == Some(&b'*') || (buf.len() >= 4 && buf[..4].eq_ignore_ascii_case(b"PING"))
}

/// Replies to the complete RESP commands at the start of `buf`: `PING` → `+PONG`, `INFO` →
/// `info` as a bulk string, anything else → an error naming the port's purpose. Returns the
/// bytes used and the replies.
pub fn resp_replies(buf: &[u8], info: &str) -> (usize, Vec<u8>) {
    let mut parser = resp::RequestParser::new(resp::Limits {
        max_bulk_len: MAX_HEAD,
        max_inline_len: MAX_HEAD,
        max_multibulk_len: 16,
    });
    let (mut at, mut out) = (0, Vec::new());
    while at < buf.len() {
        match parser.parse(&buf[at..]) {
            Ok(Some(n)) => {
                let name =
                    (parser.argc() > 0).then(|| parser.arg(&buf[at..], 0).to_ascii_lowercase());
                at += n;
                if name.as_deref() == Some(b"ping") {
                    out.extend_from_slice(b"+PONG\r\n");
                } else if name.as_deref() == Some(b"info") {
                    out.extend_from_slice(format!("${}\r\n{info}\r\n", info.len()).as_bytes());
                } else if name.is_some() {
                    out.extend_from_slice(
                        b"-ERR this is the recached fan-out (HTTP and WebSocket at /ws); only PING is answered in RESP\r\n",
                    );
                }
            }
            Ok(None) => break,
            Err(e) => {
                e.write_reply(&mut out);
                at = buf.len();
            }
        }
    }
    (at, out)
}

/// A stream that first yields bytes already read from it (the request head we parsed), then
/// reads on. tungstenite reads the upgrade request from it. Writes: bytes handed over with
/// [`Replay::send_raw`] (already framed keychanges) go out first; until they are all on the
/// socket, `write` answers `WouldBlock`, so tungstenite's own frames (pings, pongs, close)
/// never land inside a raw frame.
pub struct Replay<S> {
    pre: Vec<u8>,
    at: usize,
    raw: Vec<u8>,
    raw_sent: usize,
    pub inner: S,
}

impl<S> Replay<S> {
    pub fn new(pre: Vec<u8>, inner: S) -> Self {
        Replay {
            pre,
            at: 0,
            raw: Vec::new(),
            raw_sent: 0,
            inner,
        }
    }

    /// Whether raw bytes are still waiting for the socket.
    pub fn raw_pending(&self) -> bool {
        self.raw_sent < self.raw.len()
    }
}

impl<S: Write> Replay<S> {
    /// Takes `bytes` (whole WebSocket frames; call only when tungstenite has nothing
    /// buffered and `raw_pending` is false) and writes as much as the socket takes.
    pub fn send_raw(&mut self, bytes: Vec<u8>) -> io::Result<()> {
        debug_assert!(!self.raw_pending());
        self.raw = bytes;
        self.raw_sent = 0;
        self.write_raw()
    }

    /// Writes pending raw bytes; `WouldBlock` if some remain.
    fn write_raw(&mut self) -> io::Result<()> {
        while self.raw_sent < self.raw.len() {
            match self.inner.write(&self.raw[self.raw_sent..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.raw_sent += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.raw = Vec::new();
        self.raw_sent = 0;
        Ok(())
    }
}

impl<S: Read> Read for Replay<S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.at < self.pre.len() {
            let n = buf.len().min(self.pre.len() - self.at);
            buf[..n].copy_from_slice(&self.pre[self.at..self.at + n]);
            self.at += n;
            if self.at == self.pre.len() {
                self.pre = Vec::new();
                self.at = 0;
            }
            return Ok(n);
        }
        self.inner.read(buf)
    }
}

impl<S: Write> Write for Replay<S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_raw()?;
        self.inner.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.write_raw()?;
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_and_origins() {
        assert!(
            parse_head(b"GET / HTTP/1.1\r\nHost: x\r\n")
                .unwrap()
                .is_none()
        );
        let h = parse_head(
            b"GET /ws?token=a HTTP/1.1\r\nHost: x\r\nUpgrade: WebSocket\r\nOrigin: http://localhost:1\r\n\r\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!((h.path.as_str(), h.upgrade_ws), ("/ws", true));
        assert_eq!(h.origin.as_deref(), Some("http://localhost:1"));
        assert_eq!(parse_head(b"\x00\x01 garbage\r\n\r\n").unwrap_err(), 400);
        assert_eq!(parse_head(&vec![b'a'; MAX_HEAD]).unwrap_err(), 431);
        let long = [b"GET /".as_slice(), &vec![b'a'; MAX_HEAD]].concat();
        assert_eq!(parse_head(&long).unwrap_err(), 431);
        for o in [
            "http://127.0.0.1:6480",
            "http://localhost",
            "https://[::1]:8080/x",
            "http://127.1.2.3",
        ] {
            assert!(origin_is_loopback(o), "{o}");
        }
        for o in [
            "null",
            "http://example.com",
            "http://127.0.0.1.evil.com",
            "http://10.0.0.1:80",
            "",
        ] {
            assert!(!origin_is_loopback(o), "{o}");
        }
    }

    #[test]
    fn serves_assets() {
        let get = |path: &str| Head {
            method: "GET".into(),
            path: path.into(),
            origin: None,
            upgrade_ws: false,
            ws_complete: false,
        };
        let missing = WasmModule::File("/nonexistent".into());
        let r = respond(&get("/recached.js"), &missing);
        assert!(r.starts_with(b"HTTP/1.1 200 OK\r\nContent-Type: text/javascript"));
        assert!(respond(&get("/recached.wasm"), &missing).starts_with(b"HTTP/1.1 404"));
        assert!(respond(&get("/nope"), &missing).starts_with(b"HTTP/1.1 404"));
        let mut post = get("/");
        post.method = "POST".into();
        assert!(respond(&post, &missing).starts_with(b"HTTP/1.1 405"));
        // The module compiled into the binary, as built by recached-www's build.rs.
        let embedded = WasmModule::Embedded(b"\0asm\x01\0\0\0");
        let r = respond(&get("/recached.wasm"), &embedded);
        assert!(r.starts_with(b"HTTP/1.1 200 OK\r\nContent-Type: application/wasm"));
        assert!(r.ends_with(b"\0asm\x01\0\0\0"));
    }

    #[test]
    fn the_replica_module_is_compiled_in() {
        // build.rs ran the nested wasm32 build (scripts/test.sh installs the target first).
        assert!(
            recached_www::RECACHED_WASM.starts_with(b"\0asm"),
            "recached.wasm was not embedded: is the wasm32-unknown-unknown target installed?"
        );
        // Whichever way the test runs (scripts/test.sh may set RECACHED_WASM), each branch of
        // the choice asserts something.
        match recached_www::wasm_override() {
            Some(path) => assert!(
                matches!(WasmModule::choose(None), WasmModule::File(p) if p == path),
                "RECACHED_WASM is set: the file it names is served"
            ),
            None => assert!(
                matches!(WasmModule::choose(None), WasmModule::Embedded(b) if b.starts_with(b"\0asm")),
                "no override: the embedded module is served"
            ),
        }
        let flag = PathBuf::from("/some/where/recached.wasm");
        assert!(matches!(WasmModule::choose(Some(flag.clone())), WasmModule::File(p) if p == flag));
    }

    #[test]
    fn resp_probes() {
        assert!(is_resp(b"PING\r\n") && is_resp(b"*1\r\n") && !is_resp(b"GET / HTTP/1.1"));
        let probe = b"*1\r\n$4\r\nPING\r\n*1\r\n$6\r\nDBSIZE\r\n*2\r\n$4\r\nINF";
        let (used, out) = resp_replies(probe, "");
        assert_eq!(used, 30);
        assert!(out.starts_with(b"+PONG\r\n-ERR this is the recached fan-out"));
        assert_eq!(resp_replies(b"PING\r\n", "").1, b"+PONG\r\n");
        assert_eq!(resp_replies(b"INFO\r\n", "a:1").1, b"$3\r\na:1\r\n");
    }

    #[test]
    fn replay_yields_prefix_first() {
        let mut r = Replay::new(b"abc".to_vec(), &b"def"[..]);
        let mut out = String::new();
        r.read_to_string(&mut out).unwrap();
        assert_eq!(out, "abcdef");
    }
}
