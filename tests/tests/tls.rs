//! TLS on the engine and the proxy, with real clients: `redis-cli --tls` and redis-py
//! (`ssl=True`), against certificates each test makes with openssl (tls_support).
//!
//! - engine: TLS beside the plain port (same keyspace), TLS only (`--port 0`), large values
//!   and pipelines through redis-py (rustls buffer limits, partial writes), client
//!   certificates (`--tls-auth-clients yes|optional`), garbage handshakes closed while other
//!   clients keep being served;
//! - proxy: `recached proxy --tls-port` in front of two engines, split commands over TLS,
//!   garbage on its TLS port;
//! - fleet: `recached start` with a `[tls]` section gives every engine and the proxy a TLS
//!   port.

mod common;
mod tls_support;

use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use tls_support::*;

/// `recached server --port plain --tls-port tls <cert args> extra…`, waited for on `tls`.
fn start_tls_engine(certs: &Certs, plain: u16, tls: u16, extra: &[&str]) -> Proc {
    let mut cmd = Command::new(recached_bin());
    cmd.args([
        "server",
        "--bind",
        "127.0.0.1",
        "--port",
        &plain.to_string(),
    ])
    .args(["--tls-port", &tls.to_string()])
    .args(certs.server_args())
    .args(extra);
    let mut p = Proc::spawn(&format!("tls-engine-{tls}"), cmd);
    p.wait_port(tls, START_TIMEOUT);
    p
}

#[test]
fn engine_serves_tls_beside_plain_with_redis_cli() {
    let certs = Certs::generate("beside");
    let (plain, tls) = (free_port(), free_port());
    let mut engine = start_tls_engine(&certs, plain, tls, &[]);
    engine.wait_port(plain, START_TIMEOUT);
    let cli = certs.cli_args(false);
    let out = tls_cli(tls, &cli, &["SET", "greeting", "over tls"]);
    assert!(
        out.ok && out.stdout.trim() == "OK",
        "{} {}",
        out.stdout,
        out.stderr
    );
    // The same keyspace on both ports.
    assert_eq!(redis_cli(plain, &["GET", "greeting"]).trim(), "over tls");
    redis_cli(plain, &["SET", "plain", "1"]);
    assert_eq!(tls_cli(tls, &cli, &["GET", "plain"]).stdout.trim(), "1");
    // Without trusting the CA the handshake fails (the certificate really is checked).
    let out = tls_cli(tls, &["--tls".to_string()], &["PING"]);
    assert!(!out.stdout.contains("PONG"), "{}", out.stdout);
    // Plain RESP on the TLS port is a handshake error: closed, server unaffected.
    garbage_is_closed(tls, b"*1\r\n$4\r\nPING\r\n");
    assert_eq!(tls_cli(tls, &cli, &["PING"]).stdout.trim(), "PONG");
}

#[test]
fn garbage_handshakes_are_closed_and_others_keep_being_served() {
    let certs = Certs::generate("garbage");
    let (plain, tls) = (free_port(), free_port());
    let _engine = start_tls_engine(&certs, plain, tls, &[]);
    let cli = certs.cli_args(false);
    tls_cli(tls, &cli, &["SET", "keep", "me"]);
    // A client that connects and sends nothing holds no one up.
    let _silent = TcpStream::connect(("127.0.0.1", tls)).unwrap();
    // Random bytes, a ClientHello header announcing a huge record, a truncated hello.
    let mut noise = Vec::new();
    let mut x: u32 = 12345;
    for _ in 0..100_000 {
        x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
        noise.push((x >> 16) as u8);
    }
    garbage_is_closed(tls, &noise);
    garbage_is_closed(tls, &[0x16, 0x03, 0x01, 0xFF, 0xFF, 0x01, 0x00, 0xFF, 0xFC]);
    garbage_is_closed(tls, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    // Still serving, nothing lost, on both ports.
    assert_eq!(tls_cli(tls, &cli, &["GET", "keep"]).stdout.trim(), "me");
    assert_eq!(redis_cli(plain, &["GET", "keep"]).trim(), "me");
}

#[test]
fn tls_only_with_port_zero() {
    let certs = Certs::generate("only");
    let tls = free_port();
    let mut cmd = Command::new(recached_bin());
    cmd.args(["server", "--bind", "127.0.0.1", "--port", "0"])
        .args(["--tls-port", &tls.to_string()])
        .args(certs.server_args());
    let mut engine = Proc::spawn("tls-only", cmd);
    engine.wait_port(tls, START_TIMEOUT);
    let out = tls_cli(tls, &certs.cli_args(false), &["INCR", "n"]);
    assert_eq!(out.stdout.trim(), "1", "{}", out.stderr);
    assert!(engine.log().contains("TLS only"), "{}", engine.log());
}

#[test]
fn client_certificates_required_or_optional() {
    let certs = Certs::generate("mtls");
    let (plain, tls) = (free_port(), free_port());
    let _required = start_tls_engine(&certs, plain, tls, &["--tls-auth-clients", "yes"]);
    let out = tls_cli(tls, &certs.cli_args(false), &["PING"]);
    assert!(
        !out.stdout.contains("PONG"),
        "no client cert accepted: {}",
        out.stdout
    );
    let out = tls_cli(tls, &certs.cli_args(true), &["PING"]);
    assert_eq!(out.stdout.trim(), "PONG", "{}", out.stderr);

    let (plain2, tls2) = (free_port(), free_port());
    let _optional = start_tls_engine(&certs, plain2, tls2, &["--tls-auth-clients", "optional"]);
    for with_cert in [false, true] {
        let out = tls_cli(tls2, &certs.cli_args(with_cert), &["PING"]);
        assert_eq!(
            out.stdout.trim(),
            "PONG",
            "cert={with_cert}: {}",
            out.stderr
        );
    }
    // A client certificate from another CA is refused even when optional.
    let other = Certs::generate("mtls-other");
    let mut wrong = certs.cli_args(false);
    wrong.extend([
        "--cert".into(),
        other.client_cert.display().to_string(),
        "--key".into(),
        other.client_key.display().to_string(),
    ]);
    let out = tls_cli(tls2, &wrong, &["PING"]);
    assert!(!out.stdout.contains("PONG"), "foreign client cert accepted");
}

/// redis-py over TLS: pipelines, a 3 MB value (more than rustls' buffer limit, so writes
/// go out over several WRITABLE events), pub/sub.
const REDIS_PY_TLS: &str = r#"
import sys, redis
port, ca = int(sys.argv[1]), sys.argv[2]
r = redis.Redis(host="127.0.0.1", port=port, ssl=True, ssl_ca_certs=ca, socket_timeout=20)
assert r.ping()
p = r.pipeline(transaction=False)
for i in range(2000):
    p.set(f"k{i}", i)
p.execute()
p = r.pipeline(transaction=False)
for i in range(2000):
    p.get(f"k{i}")
vals = p.execute()
assert vals == [str(i).encode() for i in range(2000)], vals[:5]
big = b"x" * (3 * 1024 * 1024)
r.set("big", big)
assert r.get("big") == big
assert r.strlen("big") == len(big)
with r.pipeline(transaction=True) as t:
    t.incr("counter"); t.incr("counter")
    assert t.execute() == [1, 2]
ps = r.pubsub(); ps.subscribe("ch")
ps.get_message(timeout=5)
r2 = redis.Redis(host="127.0.0.1", port=port, ssl=True, ssl_ca_certs=ca)
assert r2.publish("ch", "hello") == 1
m = ps.get_message(timeout=5)
assert m and m["data"] == b"hello", m
print("ok")
"#;

fn redis_py(port: u16, ca: &std::path::Path) -> Output {
    let python = python().expect("tests/cluster/.venv missing: run scripts/test.sh (redis-py)");
    run(
        Command::new(python)
            .args(["-c", REDIS_PY_TLS, &port.to_string()])
            .arg(ca),
        Duration::from_secs(60),
    )
}

#[test]
fn redis_py_over_tls() {
    let certs = Certs::generate("py");
    let (plain, tls) = (free_port(), free_port());
    let _engine = start_tls_engine(&certs, plain, tls, &[]);
    let out = redis_py(tls, &certs.ca);
    assert!(
        out.ok && out.stdout.contains("ok"),
        "{}\n{}",
        out.stdout,
        out.stderr
    );
    assert_eq!(redis_cli(plain, &["STRLEN", "big"]).trim(), "3145728");
}

#[test]
fn proxy_serves_tls() {
    let certs = Certs::generate("proxy");
    let (e0, e1) = (free_port(), free_port());
    let _engines = [start_engine(e0), start_engine(e1)];
    let (plain, tls) = (free_port(), free_port());
    let mut cmd = Command::new(recached_bin());
    cmd.args(["proxy", "--bind", "127.0.0.1", "--port", &plain.to_string()])
        .args(["--tls-port", &tls.to_string()])
        .args(["--backends", &format!("127.0.0.1:{e0},127.0.0.1:{e1}")])
        .args(certs.server_args());
    let mut proxy = Proc::spawn("tls-proxy", cmd);
    proxy.wait_port(tls, START_TIMEOUT);
    let cli = certs.cli_args(false);
    let out = tls_cli(tls, &cli, &["MSET", "a", "1", "b", "2", "c", "3", "d", "4"]);
    assert_eq!(out.stdout.trim(), "OK", "{}", out.stderr);
    let out = tls_cli(tls, &cli, &["MGET", "a", "b", "c", "d"]);
    assert_eq!(
        out.stdout.split_whitespace().collect::<Vec<_>>(),
        ["1", "2", "3", "4"]
    );
    garbage_is_closed(tls, b"\x16\x03\x01\x00\x05garbage-garbage");
    assert_eq!(redis_cli(plain, &["GET", "c"]).trim(), "3");
    let out = redis_py(tls, &certs.ca);
    assert!(
        out.ok && out.stdout.contains("ok"),
        "{}\n{}",
        out.stdout,
        out.stderr
    );
}

/// A port `p` with `p..p+n` free at this moment (held together while checked). Taken below
/// the usual ephemeral range (32768+), where client sockets of other tests do not land.
fn free_block(n: u16) -> u16 {
    let mut x = std::process::id() as u64 ^ Instant::now().elapsed().as_nanos() as u64;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos() as u64);
    x ^= nanos;
    for _ in 0..200 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let p = 20_000 + (x >> 33) as u16 % 12_000;
        let held: Vec<_> = (p..p + n)
            .map_while(|q| std::net::TcpListener::bind(("127.0.0.1", q)).ok())
            .collect();
        if held.len() == n as usize {
            return p;
        }
    }
    panic!("no {n} consecutive free ports");
}

#[test]
fn fleet_tls_section_opens_tls_ports() {
    let certs = Certs::generate("fleet");
    let dir = certs.dir.join("fleet");
    std::fs::create_dir_all(&dir).unwrap();
    // Six consecutive free ports: proxy, two engines, TLS proxy, two TLS engines.
    let p = free_block(6);
    let (proxy, base, tls_proxy, tls_base) = (p, p + 1, p + 3, p + 4);
    let config = dir.join("recached.toml");
    std::fs::write(
        &config,
        format!(
            "engines = 2\nproxy_port = {proxy}\nengine_port_base = {base}\nmetrics_port = 0\n\
             fanout_port = 0\ndir = \"{}\"\n[tls]\ncert_file = \"{}\"\nkey_file = \"{}\"\n\
             proxy_port = {tls_proxy}\nengine_port_base = {tls_base}\n",
            dir.join("data").display(),
            certs.server_cert.display(),
            certs.server_key.display()
        ),
    )
    .unwrap();
    let mut cmd = Command::new(recached_bin());
    cmd.args(["start", "--config"]).arg(&config);
    let mut sup = Proc::spawn("tls-fleet", cmd);
    for port in [tls_base, tls_base + 1, tls_proxy] {
        sup.wait_port(port, START_TIMEOUT);
    }
    let cli = certs.cli_args(false);
    assert_eq!(
        tls_cli(tls_proxy, &cli, &["SET", "x", "y"]).stdout.trim(),
        "OK"
    );
    assert_eq!(redis_cli(proxy, &["GET", "x"]).trim(), "y");
    for port in [tls_base, tls_base + 1] {
        assert_eq!(tls_cli(port, &cli, &["PING"]).stdout.trim(), "PONG");
    }
    let _ = run(
        Command::new(recached_bin())
            .args(["stop", "--config"])
            .arg(&config),
        Duration::from_secs(20),
    );
}
