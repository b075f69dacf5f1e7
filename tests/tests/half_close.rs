//! A client that sends its requests and then shuts its sending side (`shutdown(SHUT_WR)`, as
//! `printf 'PING\r\n' | nc HOST PORT` does) against a real redis-server, a recached engine,
//! the proxy, a real memcached and the proxy's memcached port:
//!
//! - it gets every reply, then the server closes the connection (it does not hang: the
//!   request and the end of file often arrive in one readiness event, and a reader that stops
//!   at a short read must still see the end of file);
//! - a blocking command whose sender hung up is dropped at once, as Redis frees the client: a
//!   later push stays in the list instead of being popped for nobody.
//!
//! Run `cargo build -p recached` first; needs `redis-server` and `memcached` on PATH.

mod common;

use common::*;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

/// Connections tried per case: the race (data and end of file in one event) is common on
/// loopback but not certain on any one connection.
const TRIES: usize = 100;
/// How long one connection may take to be answered and closed.
const CLOSE_WITHIN: Duration = Duration::from_secs(3);

/// Sends `payload`, shuts the sending side, reads until the server closes (bounded). Returns
/// the bytes read, or `Err` with them when the server did not close in time.
fn send_and_half_close(port: u16, payload: &[u8]) -> Result<Vec<u8>, Vec<u8>> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    s.write_all(payload).unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    let deadline = Instant::now() + CLOSE_WITHIN;
    let mut out = Vec::new();
    let mut chunk = [0u8; 4096];
    while Instant::now() < deadline {
        match s.read(&mut chunk) {
            Ok(0) => return Ok(out),
            Ok(n) => out.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return Ok(out),
            Err(_) => {} // no byte for 200 ms: keep waiting until the deadline
        }
    }
    Err(out)
}

/// Every one of `TRIES` connections gets exactly `want`, then the close.
fn answers_then_closes(port: u16, payload: &[u8], want: &[u8], who: &str) {
    for i in 0..TRIES {
        match send_and_half_close(port, payload) {
            Ok(got) => assert_eq!(
                escape(&got),
                escape(want),
                "{who}: connection {i}: reply before the close"
            ),
            Err(got) => panic!(
                "{who}: connection {i} not closed within {CLOSE_WITHIN:?} after the client's \
                 end of file (read {})",
                escape(&got)
            ),
        }
    }
}

/// A `BLPOP` (or `BLMPOP` over `keys`) sent with the end of file: no reply and the close, and
/// a push afterwards is left in the list.
fn blocked_sender_hung_up(port: u16, keys: &[&str], who: &str) {
    let mut args: Vec<&[u8]> = vec![b"BLMPOP", b"0"];
    let n = keys.len().to_string();
    args.push(n.as_bytes());
    args.extend(keys.iter().map(|k| k.as_bytes()));
    args.push(b"LEFT");
    let got = send_and_half_close(port, &Resp::encode(&args))
        .unwrap_or_else(|got| panic!("{who}: BLMPOP's connection not closed ({})", escape(&got)));
    assert_eq!(
        escape(&got),
        "",
        "{who}: no reply for a client that hung up"
    );
    let mut c = Resp::connect(port);
    // The server may take a moment to drop the waiter after the close: push only once it is
    // gone (bounded), so the check below is about where the element went, not about timing.
    let deadline = Instant::now() + Duration::from_secs(5);
    while blocked_clients(&mut c) > 0 {
        assert!(
            Instant::now() < deadline,
            "{who}: the hung-up waiter is still blocked"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    for k in keys {
        assert_eq!(c.cmd_str(&["RPUSH", k, "x"]), b":1\r\n", "{who}: RPUSH {k}");
    }
    for k in keys {
        assert_eq!(
            c.cmd_str(&["LLEN", k]),
            b":1\r\n",
            "{who}: the element pushed to {k} was taken by the client that hung up"
        );
    }
    for k in keys {
        c.cmd_str(&["DEL", k]);
    }
}

#[test]
fn replies_then_close_after_the_clients_end_of_file() {
    let pipelined: Vec<u8> = [
        Resp::encode(&[b"SET", b"hc:a", b"1"]),
        Resp::encode(&[b"GET", b"hc:a"]),
        Resp::encode(&[b"MULTI"]),
        Resp::encode(&[b"PING"]),
        Resp::encode(&[b"EXEC"]),
    ]
    .concat();
    let want: &[u8] = b"+OK\r\n$1\r\n1\r\n+OK\r\n+QUEUED\r\n*1\r\n+PONG\r\n";
    let redis_port = free_port();
    let _redis = start_redis(redis_port);
    answers_then_closes(redis_port, b"PING\r\n", b"+PONG\r\n", "redis-server");
    answers_then_closes(redis_port, &pipelined, want, "redis-server");
    let engine_port = free_port();
    let _engine = start_engine(engine_port);
    answers_then_closes(engine_port, b"PING\r\n", b"+PONG\r\n", "engine");
    answers_then_closes(engine_port, &pipelined, want, "engine");

    let mc_port = free_port();
    let fleet = Fleet::start_with(
        "half-close",
        2,
        None,
        &["--memcached-port", &mc_port.to_string()],
    );
    answers_then_closes(fleet.proxy_port, b"PING\r\n", b"+PONG\r\n", "proxy");
    answers_then_closes(fleet.proxy_port, &pipelined, want, "proxy");

    let (_memcached, memcached_port) = start_memcached();
    let version = send_and_half_close(memcached_port, b"version\r\n").expect("memcached closes");
    answers_then_closes(memcached_port, b"version\r\n", &version, "memcached");
    answers_then_closes(mc_port, b"version\r\n", &version, "memcached port");
    let store = b"set hc:m 0 0 2\r\nhi\r\nget hc:m\r\n";
    let stored: &[u8] = b"STORED\r\nVALUE hc:m 0 2\r\nhi\r\nEND\r\n";
    answers_then_closes(memcached_port, store, stored, "memcached");
    answers_then_closes(mc_port, store, stored, "memcached port");
}

#[test]
fn a_blocked_client_that_hung_up_takes_nothing() {
    let redis_port = free_port();
    let _redis = start_redis(redis_port);
    blocked_sender_hung_up(redis_port, &["hc:q"], "redis-server");
    blocked_sender_hung_up(redis_port, &["hc:q", "hc:r"], "redis-server");
    let fleet = Fleet::start("half-close-blocked", 2);
    // One key (the client's dedicated connection to its engine), then keys on both engines
    // (a blocking read spread over engines).
    let (a, b) = keys_on_two_engines("hc:q");
    blocked_sender_hung_up(fleet.proxy_port, &[&a], "proxy, one engine");
    blocked_sender_hung_up(fleet.proxy_port, &[&a, &b], "proxy, two engines");
}

/// A transaction whose EXEC is still on its way when the client hangs up (its engine is busy
/// with a long script) is answered before the close: Redis would have run it and written its
/// reply before reading the end of file; only a client blocked in a blocking command is
/// dropped at once.
#[test]
fn a_transaction_in_flight_is_answered_before_the_close() {
    let fleet = Fleet::start("half-close-exec", 2);
    let (a, _) = keys_on_two_engines("hc:q");
    // Keeps a's engine busy for a while (about a second).
    let mut busy = Resp::connect(fleet.proxy_port);
    send(
        &mut busy,
        &[
            "EVAL",
            "local i = 0 while i < 100000000 do i = i + 1 end return 1",
            "1",
            &a,
        ],
    );
    std::thread::sleep(Duration::from_millis(100));
    let tx = [
        Resp::encode(&[b"MULTI"]),
        Resp::encode(&[b"SET", a.as_bytes(), b"1"]),
        Resp::encode(&[b"EXEC"]),
    ]
    .concat();
    let mut s = TcpStream::connect(("127.0.0.1", fleet.proxy_port)).unwrap();
    s.write_all(&tx).unwrap();
    // The end of file comes in an event of its own, while the transaction waits.
    std::thread::sleep(Duration::from_millis(50));
    s.shutdown(Shutdown::Write).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match s.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&chunk[..n]),
            Err(e) => panic!("not closed: {e} (read {})", escape(&got)),
        }
    }
    assert_eq!(
        escape(&got),
        escape(b"+OK\r\n+QUEUED\r\n*1\r\n+OK\r\n"),
        "the transaction's replies, then the close"
    );
    assert_eq!(busy.read_frame(), b":1\r\n");
    let mut c = Resp::connect(fleet.proxy_port);
    assert_eq!(c.cmd_str(&["GET", &a]), b"$1\r\n1\r\n");
}
