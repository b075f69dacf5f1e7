//! Test helpers: an engine running in-process on a free port, and a raw RESP client that
//! compares reply bytes exactly. Every wait is bounded in time.
#![allow(dead_code)] // each test binary uses a different subset

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use recached_server::{ServerOptions, run};

/// How long any single reply may take before a test fails instead of hanging.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// A port that was free a moment ago (bind 127.0.0.1:0, read the port, release it).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind 127.0.0.1:0")
        .port()
}

/// Starts `run()` on a thread (it lives until the test process exits) and waits until the
/// port accepts connections. Returns the port.
pub fn start_server() -> u16 {
    let port = free_port();
    let opts = ServerOptions {
        port,
        bind: "127.0.0.1".into(),
        ..ServerOptions::default()
    };
    std::thread::spawn(move || run(opts).expect("server run"));
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return port;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("server on port {port} did not start within 10 s");
}

/// A blocking client socket with read/write timeouts and TCP_NODELAY.
pub fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(REPLY_TIMEOUT)).unwrap();
    s.set_write_timeout(Some(REPLY_TIMEOUT)).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

/// Reads exactly `n` bytes (fails on timeout or EOF).
pub fn read_n(s: &mut TcpStream, n: usize) -> Vec<u8> {
    let mut buf = vec![0u8; n];
    s.read_exact(&mut buf)
        .unwrap_or_else(|e| panic!("reading {n} bytes: {e}"));
    buf
}

/// Reads exactly the length of `expected` and asserts the bytes are equal.
pub fn expect_reply(s: &mut TcpStream, expected: &[u8]) {
    let got = read_n(s, expected.len());
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(expected),
        "reply bytes differ"
    );
}

/// Asserts the server closed the connection: the next read returns EOF (or a reset).
pub fn expect_closed(s: &mut TcpStream) {
    let mut b = [0u8; 64];
    match s.read(&mut b) {
        Ok(0) => {}
        Ok(n) => panic!("expected EOF, got {:?}", String::from_utf8_lossy(&b[..n])),
        Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
        Err(e) => panic!("expected EOF, got error {e}"),
    }
}

/// Reads one line ending in CRLF (without it).
pub fn read_line(s: &mut TcpStream) -> Vec<u8> {
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    while !line.ends_with(b"\r\n") {
        assert!(line.len() < 1 << 20, "line too long");
        s.read_exact(&mut b).expect("read line");
        line.push(b[0]);
    }
    line.truncate(line.len() - 2);
    line
}

/// Reads one RESP2 bulk string reply `$len\r\n…\r\n`.
pub fn read_bulk(s: &mut TcpStream) -> Vec<u8> {
    let header = read_line(s);
    assert_eq!(
        header.first(),
        Some(&b'$'),
        "not a bulk: {:?}",
        String::from_utf8_lossy(&header)
    );
    let len: usize = std::str::from_utf8(&header[1..]).unwrap().parse().unwrap();
    let mut body = read_n(s, len + 2);
    assert!(body.ends_with(b"\r\n"));
    body.truncate(len);
    body
}

/// Encodes a request as a RESP multibulk.
pub fn cmd(args: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    resp::encode_request(&mut out, args);
    out
}

/// The bulk-string reply for `b`.
pub fn bulk(b: &[u8]) -> Vec<u8> {
    let mut out = format!("${}\r\n", b.len()).into_bytes();
    out.extend_from_slice(b);
    out.extend_from_slice(b"\r\n");
    out
}

/// Sends `req` and checks the exact reply.
pub fn roundtrip(s: &mut TcpStream, req: &[u8], expected: &[u8]) {
    s.write_all(req).expect("write");
    expect_reply(s, expected);
}

/// Resident set size of this process (the in-process server included), in bytes.
pub fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}
