//! Hostile input and the Redis-named limits, against an engine and against the proxy.
//!
//! Each case is answered with Redis's error or a close, while a bystander client keeps
//! being served and a key stored before the attack is still there:
//! a bulk length of 2^40, a multibulk count of 2^31, 10 MB of inline garbage with no
//! newline, slowloris clients (bounded memory; closed by `timeout`), a subscriber that
//! never reads while 100 MB is published (closed by the pub/sub output limit, RSS bounded),
//! 10,000 connections at once, `maxclients` with its exact error, the query buffer limit and
//! the normal class's output limit (CONFIG SET). The TLS handshake with garbage is in tls.rs.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

/// The server under attack: an engine, or a proxy in front of two engines.
struct Target {
    port: u16,
    /// The process whose memory is watched (the engine, or the proxy).
    pid: u32,
    _procs: Vec<Proc>,
}

fn engine(extra: &[&str]) -> Target {
    let port = free_port();
    let mut cmd = Command::new(recached_bin());
    cmd.args(["server", "--bind", "127.0.0.1", "--port", &port.to_string()])
        .args(extra);
    let mut p = Proc::spawn(&format!("limits-engine-{port}"), cmd);
    p.wait_port(port, START_TIMEOUT);
    Target {
        port,
        pid: p.pid(),
        _procs: vec![p],
    }
}

fn proxy(extra: &[&str]) -> Target {
    let (e0, e1) = (free_port(), free_port());
    let engines = [start_engine(e0), start_engine(e1)];
    let port = free_port();
    let mut cmd = Command::new(recached_bin());
    cmd.args(["proxy", "--bind", "127.0.0.1", "--port", &port.to_string()])
        .args(["--backends", &format!("127.0.0.1:{e0},127.0.0.1:{e1}")])
        .args(extra);
    let mut p = Proc::spawn(&format!("limits-proxy-{port}"), cmd);
    p.wait_port(port, START_TIMEOUT);
    // The proxy connects to its backends in the background: wait until a write works.
    let deadline = Instant::now() + START_TIMEOUT;
    while Resp::connect(port).cmd_str(&["SET", "ready", "1"]) != b"+OK\r\n" {
        assert!(Instant::now() < deadline, "proxy never reached its engines");
        std::thread::sleep(Duration::from_millis(50));
    }
    let pid = p.pid();
    let [a, b] = engines;
    Target {
        port,
        pid,
        _procs: vec![p, a, b],
    }
}

impl Target {
    fn seed(&self) {
        assert_eq!(
            Resp::connect(self.port).cmd_str(&["SET", "precious", "v1"]),
            b"+OK\r\n"
        );
    }

    /// A fresh client is answered at once and the seeded key is intact.
    fn still_serving(&self) {
        let mut c = Resp::connect(self.port);
        let t = Instant::now();
        assert_eq!(c.cmd_str(&["GET", "precious"]), b"$2\r\nv1\r\n");
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "slow: {:?}",
            t.elapsed()
        );
    }

    /// Sends `bytes` (ignoring a write error once the server closed), then expects
    /// `reply` (a prefix) and a close within 5 s.
    fn expect_error_and_close(&self, bytes: &[u8], reply: &[u8]) {
        let mut c = Resp::connect(self.port);
        for chunk in bytes.chunks(64 * 1024) {
            if c.stream.write_all(chunk).is_err() {
                break;
            }
        }
        let (got, closed) = c.read_until_close(Duration::from_secs(5), Duration::from_secs(5));
        assert!(got.starts_with(reply), "got {}", escape(&got));
        assert!(closed, "not closed after {}", escape(reply));
    }
}

fn hostile_input(t: &Target) {
    t.seed();
    let _bystander = {
        let mut c = Resp::connect(t.port);
        assert_eq!(c.cmd_str(&["PING"]), b"+PONG\r\n");
        c
    };
    t.expect_error_and_close(
        b"*2\r\n$3\r\nGET\r\n$1099511627776\r\n",
        b"-ERR Protocol error: invalid bulk length\r\n",
    );
    t.still_serving();
    t.expect_error_and_close(
        b"*2147483648\r\n",
        b"-ERR Protocol error: invalid multibulk length\r\n",
    );
    t.still_serving();
    let garbage = vec![b'a'; 10 * 1024 * 1024];
    t.expect_error_and_close(&garbage, b"-ERR Protocol error: too big inline request\r\n");
    t.still_serving();
}

#[test]
fn engine_refuses_hostile_input() {
    hostile_input(&engine(&[]));
}

#[test]
fn proxy_refuses_hostile_input() {
    hostile_input(&proxy(&[]));
}

/// 50 clients each trickle one byte a second for 3 s: the server answers others at once and
/// its memory does not move much. With `timeout 1` they are closed within about 2 s.
fn slowloris(t: &Target, timeout_set: bool) {
    t.seed();
    let before = rss_bytes(t.pid).expect("VmRSS");
    let mut slow: Vec<TcpStream> = (0..50)
        .map(|_| TcpStream::connect(("127.0.0.1", t.port)).unwrap())
        .collect();
    let request = b"*2\r\n$3\r\nGET\r\n$8\r\nprecious\r\n";
    let start = Instant::now();
    let mut closed = 0;
    for i in 0..3 {
        for s in &mut slow {
            let _ = s.write_all(&request[i..i + 1]);
        }
        t.still_serving();
        std::thread::sleep(Duration::from_secs(1));
    }
    for s in &mut slow {
        s.set_read_timeout(Some(Duration::from_millis(if timeout_set {
            1500
        } else {
            50
        })))
        .unwrap();
        let mut b = [0u8; 64];
        match s.read(&mut b) {
            Ok(0) => closed += 1,
            Err(e) if e.kind() == ErrorKind::ConnectionReset => closed += 1,
            Ok(n) => panic!("slowloris got a reply: {}", escape(&b[..n])),
            Err(_) => {}
        }
    }
    if timeout_set {
        assert_eq!(closed, 50, "idle clients not closed by `timeout 1`");
    } else {
        assert_eq!(closed, 0, "clients closed without a timeout");
    }
    let grown = rss_bytes(t.pid).expect("VmRSS").saturating_sub(before);
    assert!(
        grown < 32 << 20,
        "RSS grew by {grown} bytes for 50 slow clients"
    );
    assert!(start.elapsed() < Duration::from_secs(10));
    t.still_serving();
}

#[test]
fn engine_slowloris_costs_little_and_timeout_closes_it() {
    slowloris(&engine(&[]), false);
    slowloris(&engine(&["--timeout", "1"]), true);
}

#[test]
fn proxy_slowloris_costs_little_and_timeout_closes_it() {
    slowloris(&proxy(&[]), false);
    slowloris(&proxy(&["--timeout", "1"]), true);
}

/// A subscriber with a small receive buffer never reads while 100 × 1 MB is published: it
/// is disconnected by the pub/sub output limit (32 MB hard), and RSS stays bounded.
fn deaf_subscriber(t: &Target) {
    t.seed();
    let mut sub = Resp::connect(t.port);
    sub.cmd_str(&["SUBSCRIBE", "news"]);
    let before = rss_bytes(t.pid).expect("VmRSS");
    let mut publisher = Resp::connect(t.port);
    let payload = vec![b'p'; 1024 * 1024];
    let mut peak = 0;
    let mut receivers_at_end = -1;
    for i in 0..100 {
        let r = publisher.cmd(&[b"PUBLISH", b"news", &payload]);
        receivers_at_end = String::from_utf8_lossy(&r[1..r.len() - 2]).parse().unwrap();
        if i % 10 == 0 {
            peak = peak.max(rss_bytes(t.pid).expect("VmRSS"));
        }
    }
    peak = peak.max(rss_bytes(t.pid).expect("VmRSS"));
    assert_eq!(
        receivers_at_end, 0,
        "the deaf subscriber was never disconnected"
    );
    let grown = peak.saturating_sub(before);
    eprintln!("deaf subscriber: RSS grew by {} MB at most", grown >> 20);
    // Without the limit all 100 MB would be buffered; with it, 32 MB plus buffer slack.
    assert!(grown < 96 << 20, "RSS grew by {} MB", grown >> 20);
    // Its socket is closed: reading drains what was sent, then EOF.
    let (_, closed) = sub.read_until_close(Duration::from_secs(2), Duration::from_secs(20));
    assert!(closed, "subscriber socket not closed");
    t.still_serving();
}

#[test]
fn engine_disconnects_a_subscriber_that_never_reads() {
    deaf_subscriber(&engine(&[]));
}

#[test]
fn proxy_disconnects_a_subscriber_that_never_reads() {
    deaf_subscriber(&proxy(&[]));
}

/// `maxclients 20`: the 21st client gets Redis's exact error and is closed.
fn maxclients(t: &Target, already: usize) {
    let mut held: Vec<Resp> = Vec::new();
    for _ in already..20 {
        let mut c = Resp::connect(t.port);
        assert_eq!(c.cmd_str(&["PING"]), b"+PONG\r\n");
        held.push(c);
    }
    let mut extra = Resp::connect(t.port);
    let (got, closed) = extra.read_until_close(Duration::from_secs(3), Duration::from_secs(3));
    assert_eq!(got, b"-ERR max number of clients reached\r\n");
    assert!(closed);
    drop(held.pop());
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(Resp::connect(t.port).cmd_str(&["PING"]), b"+PONG\r\n");
}

#[test]
fn maxclients_gives_redis_error() {
    maxclients(&engine(&["--maxclients", "20"]), 0);
    maxclients(&proxy(&["--maxclients", "20"]), 0);
    // CONFIG SET applies at once on an engine.
    let t = engine(&[]);
    let mut admin = Resp::connect(t.port);
    assert_eq!(
        admin.cmd_str(&["CONFIG", "SET", "maxclients", "20"]),
        b"+OK\r\n"
    );
    maxclients(&t, 1);
}

/// Raises this process's open-file limit to `want` if the hard limit allows; returns the
/// number of connections the test can open (children inherit the raised limit).
fn raise_nofile(want: u64) -> u64 {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    if soft < want {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, want.min(hard), hard);
    }
    let (soft, _) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    soft
}

/// 10,000 connections opened at once (fewer if the machine's descriptor limit is lower):
/// all are accepted and served, and the server stays responsive.
fn ten_thousand(t: &Target) {
    t.seed();
    let limit = raise_nofile(30_000);
    // Our sockets and the server's share the limit only per process; keep a margin.
    let n = 10_000.min(limit.saturating_sub(500) as usize);
    let start = Instant::now();
    let mut conns = Vec::with_capacity(n);
    for _ in 0..n {
        conns.push(TcpStream::connect(("127.0.0.1", t.port)).expect("connect"));
    }
    for c in &mut conns {
        c.write_all(b"PING\r\n").unwrap();
    }
    for (i, c) in conns.iter_mut().enumerate() {
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut b = [0u8; 7];
        c.read_exact(&mut b)
            .unwrap_or_else(|e| panic!("connection {i} of {n}: {e}"));
        assert_eq!(&b, b"+PONG\r\n");
    }
    t.still_serving();
    eprintln!("{n} connections served in {:?}", start.elapsed());
    drop(conns);
    t.still_serving();
}

#[test]
fn engine_ten_thousand_connections() {
    // Room for the 10,000 and the checking clients (the default is exactly 10000).
    ten_thousand(&engine(&["--maxclients", "10100"]));
}

#[test]
fn proxy_ten_thousand_connections() {
    ten_thousand(&proxy(&["--maxclients", "10100"]));
}

#[test]
fn query_buffer_and_normal_output_limits_by_config_set() {
    let t = engine(&[]);
    t.seed();
    let mut admin = Resp::connect(t.port);
    assert_eq!(
        admin.cmd_str(&["CONFIG", "SET", "client-query-buffer-limit", "1mb"]),
        b"+OK\r\n"
    );
    assert_eq!(
        admin.cmd_str(&["CONFIG", "GET", "client-query-buffer-limit"]),
        b"*2\r\n$25\r\nclient-query-buffer-limit\r\n$7\r\n1048576\r\n"
    );
    // A 4 MB bulk is within proto-max-bulk-len but the query buffer passes 1 MB: closed
    // without a reply, as Redis does.
    let mut big = b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$4194304\r\n".to_vec();
    big.extend(std::iter::repeat_n(b'z', 4 << 20));
    t.expect_error_and_close(&big, b"");
    t.still_serving();

    // normal class: 256 KB hard. A client pipelining GETs of a 100 KB value that never
    // reads is closed; one that reads is not.
    assert_eq!(
        admin.cmd_str(&[
            "CONFIG",
            "SET",
            "client-output-buffer-limit",
            "normal 256kb 0 0"
        ]),
        b"+OK\r\n"
    );
    let mut cfg = admin.cmd_str(&["CONFIG", "GET", "client-output-buffer-limit"]);
    cfg.retain(|&b| b != b'\r');
    assert!(
        String::from_utf8_lossy(&cfg).contains("normal 262144 0 0 slave"),
        "{}",
        escape(&cfg)
    );
    let value = vec![b'v'; 100 * 1024];
    Resp::connect(t.port).cmd(&[b"SET", b"big", &value]);
    let mut greedy = Resp::connect(t.port);
    let mut pipeline = Vec::new();
    for _ in 0..200 {
        pipeline.extend(Resp::encode(&[b"GET", b"big"]));
    }
    let _ = greedy.stream.write_all(&pipeline);
    std::thread::sleep(Duration::from_millis(500));
    let (_, closed) = greedy.read_until_close(Duration::from_secs(2), Duration::from_secs(20));
    assert!(closed, "client over the normal hard limit not closed");
    t.still_serving();
    // Errors as Redis words them.
    let r = admin.cmd_str(&["CONFIG", "SET", "client-output-buffer-limit", "pubsub 1mb"]);
    assert!(
        r.starts_with(b"-ERR CONFIG SET failed")
            && r.ends_with(b"Wrong number of arguments in buffer limit configuration.\r\n"),
        "{}",
        escape(&r)
    );
    let r = admin.cmd_str(&["CONFIG", "SET", "client-query-buffer-limit", "100"]);
    assert!(
        r.ends_with(b"argument must be between 1048576 and 9223372036854775807 inclusive\r\n"),
        "{}",
        escape(&r)
    );
}
