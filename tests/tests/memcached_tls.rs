//! TLS, ACL and metrics on the proxy's memcached port (issue 22, docs/memcached.md):
//!
//! - `recached proxy --memcached-tls-port` with the proxy's certificate flags: pymemcache with
//!   `tls_context` sets and gets through it (tests/clients/pymemcache_tls.py); a plaintext
//!   memcached client on the TLS port is closed without a reply; garbage, a bad record header
//!   and a stalled handshake do not stop the loop (the TLS and plain ports keep serving);
//!   `--memcached-port 0` serves TLS only.
//! - `--memcached-user`: requests run as that ACL user (key patterns, commands mapped to the
//!   RESP commands they run), refusals answered `CLIENT_ERROR NOPERM …`, silent with `noreply`;
//!   an unknown user stops the proxy at start.
//! - `recached start` with `[tls] memcached_port` and `memcached_user` in the config: exact
//!   counters on `/metrics` after known memcached traffic (per-protocol and per-command).
//!
//! Every process is started on free ports and killed by PID (`Proc`).

mod common;
mod tls_support;

use common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use tls_support::*;

fn clients_python() -> PathBuf {
    let python = workspace_root().join("tests/clients/.venv/bin/python");
    assert!(
        python.exists(),
        "{} missing: run scripts/test.sh (it installs pymemcache into tests/clients/.venv)",
        python.display()
    );
    python
}

struct Fleet {
    _engines: Vec<Proc>,
    proxy: Proc,
    engine_ports: Vec<u16>,
    mc_port: u16,
    mc_tls_port: u16,
}

/// Two engines and `recached proxy` with the memcached port(s) and `extra` flags. `mc_plain`
/// false: `--memcached-port 0` (TLS only).
fn start_fleet(certs: &Certs, mc_plain: bool, extra: &[&str]) -> Fleet {
    let engine_ports: Vec<u16> = (0..2).map(|_| free_port()).collect();
    let engines: Vec<Proc> = engine_ports.iter().map(|&p| start_engine(p)).collect();
    let resp_port = free_port_except(&engine_ports);
    let mc_port = if mc_plain {
        free_port_except(&[resp_port])
    } else {
        0
    };
    let mc_tls_port = free_port_except(&[resp_port, mc_port]);
    let backends: Vec<String> = engine_ports
        .iter()
        .map(|p| format!("127.0.0.1:{p}"))
        .collect();
    let mut cmd = Command::new(recached_bin());
    cmd.args(["proxy", "--port", &resp_port.to_string()])
        .args(["--bind", "127.0.0.1"])
        .args(["--backends", &backends.join(",")])
        .args(["--memcached-port", &mc_port.to_string()])
        .args(["--memcached-tls-port", &mc_tls_port.to_string()])
        .args(certs.server_args())
        .args(extra);
    let mut proxy = Proc::spawn("mc-tls-proxy", cmd);
    proxy.wait_port(mc_tls_port, START_TIMEOUT);
    if mc_plain {
        proxy.wait_port(mc_port, START_TIMEOUT);
    }
    proxy.wait_proxy_reaches_engines(resp_port, START_TIMEOUT);
    Fleet {
        _engines: engines,
        proxy,
        engine_ports,
        mc_port,
        mc_tls_port,
    }
}

/// Sends `input` then `mn`, reads until `MN\r\n` (10 s at most) on a plain connection.
fn exchange(port: u16, input: &[u8]) -> Vec<u8> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    s.write_all(input).unwrap();
    s.write_all(b"mn\r\n").unwrap();
    read_until(&mut s, b"MN\r\n")
}

fn read_until(s: &mut TcpStream, end: &[u8]) -> Vec<u8> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    while !out.ends_with(end) {
        assert!(Instant::now() < deadline, "no {end:?} in {}", escape(&out));
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(_) => {}
        }
    }
    out
}

/// The memcached port answers stores through both engines (its links are up).
fn wait_ready(port: u16) {
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        let r = exchange(port, b"set warm:a 0 0 1\r\nx\r\nset warm:b 0 0 1\r\nx\r\n");
        if r == b"STORED\r\nSTORED\r\nMN\r\n" {
            return;
        }
        assert!(Instant::now() < deadline, "not ready: {}", escape(&r));
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn run_pymemcache_tls(port: u16, certs: &Certs, client_cert: bool) {
    let mut cmd = Command::new(clients_python());
    cmd.current_dir(workspace_root().join("tests/clients"))
        .arg("pymemcache_tls.py")
        .arg(port.to_string())
        .arg(&certs.ca);
    if client_cert {
        cmd.arg(&certs.client_cert).arg(&certs.client_key);
    }
    let out = cmd.output().expect("run python");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.lines().last() == Some("ok"),
        "pymemcache over TLS failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A plaintext memcached client on the TLS port: closed (an alert at most), never a reply.
fn plaintext_is_refused(port: u16) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"set plain 0 0 1\r\nx\r\nget plain\r\nversion\r\n")
        .unwrap();
    let start = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        assert!(start.elapsed() < Duration::from_secs(5), "no close");
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("plaintext client on the TLS port: no close ({e})"),
        }
    }
    for word in [&b"STORED"[..], b"VALUE", b"VERSION", b"ERROR"] {
        assert!(
            !got.windows(word.len()).any(|w| w == word),
            "plaintext reply on the TLS port: {}",
            escape(&got)
        );
    }
}

#[test]
fn tls_port_serves_pymemcache_and_survives_bad_clients() {
    let certs = Certs::generate("mc-tls");
    let mut fleet = start_fleet(&certs, true, &[]);
    wait_ready(fleet.mc_port);
    // A stalled handshake, held open through everything below.
    let _silent = TcpStream::connect(("127.0.0.1", fleet.mc_tls_port)).unwrap();
    run_pymemcache_tls(fleet.mc_tls_port, &certs, false);
    plaintext_is_refused(fleet.mc_tls_port);
    let noise: Vec<u8> = (0..4096u32)
        .map(|i| i.wrapping_mul(2_654_435_761) as u8)
        .collect();
    garbage_is_closed(fleet.mc_tls_port, &noise);
    garbage_is_closed(
        fleet.mc_tls_port,
        &[0x16, 0x03, 0x01, 0xFF, 0xFF, 0x01, 0x00, 0xFF, 0xFC],
    );
    garbage_is_closed(fleet.mc_tls_port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    // A client that leaves mid-handshake.
    {
        let mut s = TcpStream::connect(("127.0.0.1", fleet.mc_tls_port)).unwrap();
        s.write_all(&[0x16, 0x03, 0x01, 0x00, 0x40]).unwrap();
    }
    // The loop is still up: TLS again, and the plain port sees what TLS wrote.
    run_pymemcache_tls(fleet.mc_tls_port, &certs, false);
    assert_eq!(
        exchange(fleet.mc_port, b"get tls:k7\r\n"),
        b"VALUE tls:k7 0 2\r\nv7\r\nEND\r\nMN\r\n"
    );
    // Over RESP on the engine that owns it, the same Redis string.
    let owner = fleet
        .engine_ports
        .iter()
        .find(|&&p| Resp::connect(p).cmd_str(&["GET", "tls:k7"]) == b"$2\r\nv7\r\n");
    assert!(owner.is_some(), "tls:k7 on no engine");
    // The plain port still answers everything.
    let stats = exchange(fleet.mc_port, b"stats\r\n");
    assert!(
        String::from_utf8_lossy(&stats).contains("STAT curr_connections "),
        "{}",
        escape(&stats)
    );
    assert!(fleet.proxy.is_running(), "{}", fleet.proxy.log());
}

#[test]
fn tls_only_memcached_port_with_client_certificates() {
    let certs = Certs::generate("mc-tls-only");
    let mut fleet = start_fleet(&certs, false, &["--tls-auth-clients", "yes"]);
    // No plain memcached listener: only the TLS port, which wants a client certificate.
    run_pymemcache_tls(fleet.mc_tls_port, &certs, true);
    let mut cmd = Command::new(clients_python());
    cmd.current_dir(workspace_root().join("tests/clients"))
        .arg("pymemcache_tls.py")
        .arg(fleet.mc_tls_port.to_string())
        .arg(&certs.ca);
    let out = cmd.output().unwrap();
    assert!(
        !out.status.success(),
        "served without a client certificate:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(fleet.proxy.is_running(), "{}", fleet.proxy.log());
    assert!(
        fleet
            .proxy
            .log()
            .contains("memcached protocol over TLS listening on"),
        "{}",
        fleet.proxy.log()
    );
    assert!(
        !fleet
            .proxy
            .log()
            .contains("proxy: memcached protocol listening on"),
        "a plain memcached listener with --memcached-port 0"
    );
}

fn write_config(dir: &Path, text: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let p = dir.join("recached.toml");
    std::fs::write(&p, text).unwrap();
    p
}

fn scratch_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[test]
fn memcached_user_permissions_apply_to_every_request() {
    let dir = scratch_dir("mc-acl");
    let config = write_config(
        &dir,
        "requirepass = \"sec\"\n\n[[users]]\nname = \"mc\"\n\
         rules = \"on nopass ~app:* +get +set +getex +expire +mget\"\n\n\
         [[users]]\nname = \"sleepy\"\nrules = \"off ~* +@all\"\n",
    );
    let certs = Certs::generate("mc-acl");
    let config_arg = config.display().to_string();
    let fleet = start_fleet(
        &certs,
        true,
        &["--config", &config_arg, "--memcached-user", "mc"],
    );
    let p = fleet.mc_port;
    // Allowed: its keys, its commands (set = SET, get = GET, gat = GETEX, touch = EXPIRE).
    let deadline = Instant::now() + START_TIMEOUT;
    while exchange(p, b"set app:1 5 0 3\r\none\r\n") != b"STORED\r\nMN\r\n" {
        assert!(Instant::now() < deadline, "memcached port not ready");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        exchange(
            p,
            b"get app:1\r\ngat 100 app:1\r\ntouch app:1 50\r\nmg app:1 v f\r\n"
        ),
        b"VALUE app:1 5 3\r\none\r\nEND\r\nVALUE app:1 5 3\r\none\r\nEND\r\nTOUCHED\r\n\
VA 3 f5\r\none\r\nMN\r\n"
            .to_vec()
    );
    let key = "CLIENT_ERROR NOPERM this user has no permissions to access one of the keys used \
               as arguments\r\n";
    let cmd = |c: &str| {
        format!("CLIENT_ERROR NOPERM this user has no permissions to run the '{c}' command\r\n")
    };
    // Another key; a multi-get with one refused key refuses the request.
    assert_eq!(
        String::from_utf8(exchange(
            p,
            b"set other 0 0 1\r\nx\r\nget app:1 other\r\nmg other v\r\n"
        ))
        .unwrap(),
        format!("{key}{key}{key}MN\r\n")
    );
    // Commands it lacks, each named by the RESP command it runs.
    assert_eq!(
        String::from_utf8(exchange(
            p,
            b"delete app:1\r\nappend app:1 0 0 1\r\nx\r\nincr app:1 1\r\nflush_all\r\nstats\r\n\
              ms app:1 1 MA\r\nx\r\nversion\r\n"
        ))
        .unwrap(),
        format!(
            "{}{}{}{}{}{}VERSION 1.6.18\r\nMN\r\n",
            cmd("del"),
            cmd("append"),
            cmd("incrby"),
            cmd("flushdb"),
            cmd("info"),
            cmd("append")
        )
    );
    // noreply: silent, as memcached's errors; nothing was written.
    assert_eq!(exchange(p, b"set other 0 0 1 noreply\r\nx\r\n"), b"MN\r\n");
    for &e in &fleet.engine_ports {
        assert_eq!(Resp::connect(e).cmd_str(&["EXISTS", "other"]), b":0\r\n");
    }
    assert_eq!(
        exchange(p, b"get app:1\r\n"),
        b"VALUE app:1 5 3\r\none\r\nEND\r\nMN\r\n"
    );
    drop(fleet);

    // An unknown user, or one that is off, stops the proxy at start with the reason.
    for user in ["nobody", "sleepy"] {
        let engine = free_port();
        let _e = start_engine(engine);
        let mut cmd = Command::new(recached_bin());
        cmd.args(["proxy", "--port", &free_port().to_string()])
            .args(["--backends", &format!("127.0.0.1:{engine}")])
            .args(["--memcached-port", &free_port().to_string()])
            .args(["--config", &config_arg, "--memcached-user", user]);
        let out = cmd.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(
            err.contains(&format!("memcached_user \"{user}\"")),
            "{user}: {err}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `GET /metrics` on 127.0.0.1:`port`: the body.
fn metrics(port: u16) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect metrics");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).expect("read response");
    resp.split_once("\r\n\r\n")
        .expect("HTTP head")
        .1
        .to_string()
}

/// The value of the sample written exactly `series` (labels in our order).
fn sample(body: &str, series: &str) -> Option<u64> {
    body.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

struct StartedFleet {
    sup: Proc,
    dir: PathBuf,
}

impl Drop for StartedFleet {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.sup.pid() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let deadline = Instant::now() + Duration::from_secs(15);
        while self.sup.is_running() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        self.sup.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn metrics_count_memcached_traffic_per_protocol() {
    let certs = Certs::generate("mc-metrics");
    let base = free_port_run(2);
    let mut taken = vec![base, base + 1];
    let mut next = || {
        let p = free_port_except(&taken);
        taken.push(p);
        p
    };
    let (proxy_port, mc_port, mc_tls_port, metrics_port) = (next(), next(), next(), next());
    let dir = scratch_dir("mc-metrics");
    let config = write_config(
        &dir.join("conf"),
        &format!(
            "memcached_user = \"default\"\n\n[tls]\ncert_file = \"{}\"\nkey_file = \"{}\"\n\
             memcached_port = {mc_tls_port}\n",
            certs.server_cert.display(),
            certs.server_key.display()
        ),
    );
    let mut cmd = Command::new(recached_bin());
    cmd.arg("start")
        .args(["--engines", "2", "--bind", "127.0.0.1"])
        .arg("--config")
        .arg(&config)
        .args(["--proxy-port", &proxy_port.to_string()])
        .args(["--engine-port-base", &base.to_string()])
        .args(["--memcached-port", &mc_port.to_string()])
        .args(["--metrics-port", &metrics_port.to_string()])
        .args(["--fanout-port", "0"])
        .arg("--dir")
        .arg(dir.join("data"));
    let mut sup = Proc::spawn("mc-metrics-fleet", cmd);
    for p in [proxy_port, mc_port, mc_tls_port, metrics_port] {
        sup.wait_port(p, START_TIMEOUT);
    }
    sup.wait_proxy_reaches_engines(proxy_port, START_TIMEOUT);
    let _fleet = StartedFleet { sup, dir };
    // Links up (this connection and its requests are counted too: 1 + 2 requests).
    let deadline = Instant::now() + START_TIMEOUT;
    let mut warm = 0;
    loop {
        warm += 1;
        let r = exchange(mc_port, b"set warm 0 0 1\r\nx\r\n");
        if r == b"STORED\r\nMN\r\n" {
            break;
        }
        assert!(Instant::now() < deadline, "not ready: {}", escape(&r));
        std::thread::sleep(Duration::from_millis(100));
    }
    let get = |body: &str, s: &str| sample(body, s).unwrap_or(0);
    let m = |labels: &str| format!("{{instance=\"proxy-0\",protocol=\"memcached\"{labels}}}");
    // The port publishes its counters once per loop pass: take the baseline once the warm-up
    // connections are seen closed, so their last reply's bytes are in it (a baseline taken
    // earlier counted the last `STORED\r\nMN\r\n`, 12 bytes, in the delta below).
    let deadline = Instant::now() + Duration::from_secs(10);
    let before = loop {
        let body = metrics(metrics_port);
        if sample(&body, &format!("recached_proxy_connections{}", m(""))) == Some(0) {
            break body;
        }
        assert!(
            Instant::now() < deadline,
            "warm-up connection not closed:\n{body}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(
        get(
            &before,
            &format!("recached_memcached_commands_total{}", m(",command=\"mn\""))
        ),
        warm,
        "{before}"
    );

    // Known traffic on one connection: 10 sets, 15 gets (10 hits, 5 misses), one multi-get
    // of 3 keys (2 hits, 1 miss), one unknown command (ERROR), one bad line (CLIENT_ERROR).
    let mut input = Vec::new();
    let mut expect = Vec::new();
    for i in 0..10 {
        input.extend_from_slice(format!("set mk{i} 0 0 2\r\nv{i}\r\n").as_bytes());
        expect.extend_from_slice(b"STORED\r\n");
    }
    for i in 0..15 {
        input.extend_from_slice(format!("get mk{i}\r\n").as_bytes());
        if i < 10 {
            expect.extend_from_slice(format!("VALUE mk{i} 0 2\r\nv{i}\r\n").as_bytes());
        }
        expect.extend_from_slice(b"END\r\n");
    }
    input.extend_from_slice(b"get mk1 nope mk2\r\n");
    expect.extend_from_slice(b"VALUE mk1 0 2\r\nv1\r\nVALUE mk2 0 2\r\nv2\r\nEND\r\n");
    input.extend_from_slice(b"bogus\r\n");
    expect.extend_from_slice(b"ERROR\r\n");
    input.extend_from_slice(b"incr mk1 x\r\n");
    expect.extend_from_slice(b"CLIENT_ERROR invalid numeric delta argument\r\n");
    input.extend_from_slice(b"mn\r\n");
    expect.extend_from_slice(b"MN\r\n");
    {
        let mut s = TcpStream::connect(("127.0.0.1", mc_port)).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        s.write_all(&input).unwrap();
        let got = read_until(&mut s, b"MN\r\n");
        assert_eq!(escape(&got), escape(&expect));
    }
    // The connection is closed: wait until the port has seen it go.
    let deadline = Instant::now() + Duration::from_secs(10);
    let after = loop {
        let body = metrics(metrics_port);
        if sample(&body, &format!("recached_proxy_connections{}", m(""))) == Some(0) {
            break body;
        }
        assert!(Instant::now() < deadline, "connection not closed:\n{body}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let delta = |series: &str| get(&after, series) - get(&before, series);
    let cmd = |c: &str| {
        format!(
            "recached_memcached_commands_total{}",
            m(&format!(",command=\"{c}\""))
        )
    };
    assert_eq!(delta(&cmd("set")), 10, "{after}");
    assert_eq!(delta(&cmd("get")), 16);
    // Bad input counts as a request and an error, not as the command it tried to be.
    assert_eq!(delta(&cmd("incr")), 0);
    assert_eq!(delta(&cmd("mn")), 1);
    assert_eq!(
        delta(&format!("recached_proxy_requests_total{}", m(""))),
        10 + 15 + 1 + 1 + 1 + 1
    );
    assert_eq!(
        delta(&format!(
            "recached_proxy_connections_received_total{}",
            m("")
        )),
        1
    );
    assert_eq!(
        delta(&format!("recached_memcached_get_hits_total{}", m(""))),
        12
    );
    assert_eq!(
        delta(&format!("recached_memcached_get_misses_total{}", m(""))),
        6
    );
    assert_eq!(
        delta(&format!(
            "recached_memcached_errors_total{}",
            m(",kind=\"error\"")
        )),
        1
    );
    assert_eq!(
        delta(&format!(
            "recached_memcached_errors_total{}",
            m(",kind=\"client_error\"")
        )),
        1
    );
    assert_eq!(
        delta(&format!("recached_proxy_net_input_bytes_total{}", m(""))),
        input.len() as u64
    );
    assert_eq!(
        delta(&format!("recached_proxy_net_output_bytes_total{}", m(""))),
        expect.len() as u64
    );
    assert_eq!(
        delta(&format!("recached_proxy_backend_errors_total{}", m(""))),
        0
    );
    // The RESP side's figures are labelled apart (the supervisor's own INFO calls are RESP).
    assert!(
        sample(
            &after,
            "recached_proxy_requests_total{instance=\"proxy-0\",protocol=\"resp\"}"
        )
        .is_some(),
        "{after}"
    );
    // The config's TLS port is up and counted as memcached: one TLS `version`.
    let out = Command::new(clients_python())
        .args([
            "-c",
            "import ssl,sys,socket\n\
             ctx=ssl.create_default_context(cafile=sys.argv[2])\n\
             s=ctx.wrap_socket(socket.create_connection(('127.0.0.1',int(sys.argv[1]))),server_hostname='localhost')\n\
             s.sendall(b'version\\r\\n')\n\
             print(s.recv(100).decode().strip())\n\
             s.close()",
            &mc_tls_port.to_string(),
            &certs.ca.display().to_string(),
        ])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "VERSION 1.6.18",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let body = metrics(metrics_port);
        if delta_of(&body, &before, &cmd("version")) == 1
            && delta_of(
                &body,
                &before,
                &format!("recached_proxy_connections_received_total{}", m("")),
            ) == 2
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "TLS version not counted:\n{body}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn delta_of(after: &str, before: &str, series: &str) -> u64 {
    sample(after, series).unwrap_or(0) - sample(before, series).unwrap_or(0)
}
