//! The fan-out over TLS (issue 8): `recached fanout --tls-port` serves HTTPS and wss:// beside
//! its plain port, against certificates each test makes with openssl (tls_support).
//!
//! - a Rust client (tungstenite over rustls, trusting the test CA) subscribes over wss:// and
//!   receives the snapshot, `up-to-date` and a `keychange` for a SET sent through the proxy;
//!   the same over the plain port; the demo page and `/recached.js` over HTTPS;
//! - Chromium opens the demo page over https:// from the TLS port (certificate errors
//!   ignored), its replica follows wss://, and a SET through the proxy appears in the page
//!   (tests/browser/wss.test.mjs);
//! - garbage on the TLS port (random bytes, a fake handshake record, plain HTTP) gets a
//!   close, and the plain port and the wss:// clients already connected keep working;
//! - TLS only (`--port 0 --tls-port P`).
//!
//! Every wait is bounded; processes are killed by PID on drop ([`Proc`]).

mod common;
mod tls_support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};
use tls_support::*;
use tungstenite::{Message, WebSocket};

/// Two engines (cluster mode), a proxy and a fan-out with a TLS port, on free ports.
struct Fleet {
    _cluster: ClusterWithProxy,
    fanout: Proc,
    certs: Certs,
    proxy_port: u16,
    /// 0 when the fan-out serves TLS only.
    plain_port: u16,
    tls_port: u16,
}

impl Fleet {
    /// `plain`: also serve the plain port (else `--port 0`, TLS only).
    fn start(name: &str, plain: bool, extra: &[&str]) -> Fleet {
        let certs = Certs::generate(name);
        let cluster = ClusterWithProxy::start();
        let (port, tls_port) = (free_port(), free_port());
        let plain_port = if plain { port } else { 0 };
        let mut cmd = Command::new(recached_bin());
        cmd.args(["fanout", "--port", &plain_port.to_string()])
            .args(["--engines", &cluster.nodes])
            .args(["--tls-port", &tls_port.to_string()])
            .args(certs.server_args())
            .args(["--heartbeat-ms", "5000"])
            .args(extra);
        let mut fanout = Proc::spawn("fanout-tls", cmd);
        fanout.wait_port(tls_port, START_TIMEOUT);
        if plain {
            fanout.wait_port(port, START_TIMEOUT);
        }
        Fleet {
            proxy_port: cluster.proxy_port,
            _cluster: cluster,
            fanout,
            certs,
            plain_port,
            tls_port,
        }
    }

    fn cli(&self, args: &[&str]) -> String {
        redis_cli(self.proxy_port, args).trim().to_string()
    }
}

/// A rustls client configuration trusting only the test CA.
fn client_config(certs: &Certs) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(&certs.ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Arc::new(
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

type TlsStream = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// A blocking TLS connection to `port` (name checked: the certificate is for 127.0.0.1).
fn tls_connect(certs: &Certs, port: u16) -> TlsStream {
    let tcp = TcpStream::connect(("127.0.0.1", port)).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let conn = rustls::ClientConnection::new(client_config(certs), name).unwrap();
    rustls::StreamOwned::new(conn, tcp)
}

/// A WebSocket client (over TLS or plain TCP) speaking the browser protocol.
enum Ws {
    Tls(Box<WebSocket<TlsStream>>),
    Plain(Box<WebSocket<TcpStream>>),
}

impl Ws {
    fn wss(certs: &Certs, port: u16) -> Ws {
        let stream = tls_connect(certs, port);
        let (ws, resp) = tungstenite::client(format!("wss://127.0.0.1:{port}/ws"), stream)
            .expect("wss:// handshake with the fan-out");
        assert_eq!(resp.status(), 101);
        Ws::Tls(Box::new(ws))
    }

    fn plain(port: u16) -> Ws {
        let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let (ws, _) = tungstenite::client(format!("ws://127.0.0.1:{port}/ws"), stream)
            .expect("ws:// handshake with the fan-out");
        Ws::Plain(Box::new(ws))
    }

    fn send(&mut self, v: &Value) {
        let m = Message::text(v.to_string());
        match self {
            Ws::Tls(w) => w.send(m),
            Ws::Plain(w) => w.send(m),
        }
        .expect("send");
    }

    fn read(&mut self) -> tungstenite::Result<Message> {
        match self {
            Ws::Tls(w) => w.read(),
            Ws::Plain(w) => w.read(),
        }
    }

    /// The next JSON message, pings and heartbeats skipped; `Err` after `timeout`.
    fn recv(&mut self, timeout: Duration) -> Result<Value, String> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            match self.read() {
                Ok(Message::Text(t)) => {
                    let v: Value = serde_json::from_str(t.as_str()).map_err(|e| e.to_string())?;
                    if v["type"] != "heartbeat" {
                        return Ok(v);
                    }
                }
                Ok(Message::Close(c)) => return Err(format!("closed: {c:?}")),
                Ok(_) => {}
                Err(tungstenite::Error::Io(e))
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(e) => return Err(e.to_string()),
            }
        }
        Err(format!("no message within {timeout:?}"))
    }

    /// Subscribes to `prefix` and waits until every instance is `up-to-date`.
    fn subscribe(&mut self, prefix: &str, instances: usize) {
        let hello = self.recv(Duration::from_secs(5)).unwrap();
        assert_eq!(hello["type"], "hello", "{hello}");
        self.send(&json!({"type": "subscribe", "prefixes": [prefix]}));
        let mut up = std::collections::HashSet::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while up.len() < instances {
            assert!(
                Instant::now() < deadline,
                "no up-to-date for every instance"
            );
            let m = self.recv(Duration::from_secs(10)).unwrap();
            if m["type"] == "up-to-date" {
                up.insert(m["instance"].as_u64().unwrap());
            }
            assert_ne!(m["type"], "error", "{m}");
        }
    }

    /// Waits for the keychange of `key` (other messages skipped) and returns its args.
    fn keychange(&mut self, key: &str) -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            assert!(Instant::now() < deadline, "no keychange for {key}");
            let m = self.recv(Duration::from_secs(10)).unwrap();
            if m["type"] == "keychange" && m["key"] == key {
                return m["args"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|a| a.as_str().unwrap_or("").to_string())
                    .collect();
            }
        }
    }
}

/// `GET path` over HTTPS: the status line and the body.
fn https_get(certs: &Certs, port: u16, path: &str) -> (String, Vec<u8>) {
    let mut s = tls_connect(certs, port);
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
        .unwrap();
    let mut resp = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut buf = [0u8; 16 * 1024];
    // The fan-out closes after the response (`Connection: close`).
    loop {
        assert!(Instant::now() < deadline, "HTTPS response not complete");
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => resp.extend_from_slice(&buf[..n]),
            // A close without close_notify ends the response too.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(e) => panic!("HTTPS read: {e}"),
        }
    }
    let head_end = resp
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head");
    let status = String::from_utf8_lossy(&resp[..resp.iter().position(|&b| b == b'\r').unwrap()])
        .into_owned();
    (status, resp[head_end + 4..].to_vec())
}

#[test]
fn wss_client_gets_keychanges_and_https_serves_the_page() {
    let f = Fleet::start("fanout-wss", true, &[]);
    f.cli(&["DEL", "tls:a", "tls:b"]);
    f.cli(&["SET", "tls:a", "before"]);
    let mut secure = Ws::wss(&f.certs, f.tls_port);
    secure.subscribe("tls:", 2);
    let mut plain = Ws::plain(f.plain_port);
    plain.subscribe("tls:", 2);

    assert_eq!(f.cli(&["SET", "tls:b", "over-wss"]), "OK");
    assert_eq!(secure.keychange("tls:b"), ["SET", "tls:b", "over-wss"]);
    assert_eq!(plain.keychange("tls:b"), ["SET", "tls:b", "over-wss"]);
    assert_eq!(f.cli(&["DEL", "tls:a"]), "1");
    assert_eq!(secure.keychange("tls:a"), ["DEL", "tls:a"]);

    let (status, body) = https_get(&f.certs, f.tls_port, "/");
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(
        String::from_utf8_lossy(&body).contains("<html"),
        "the demo page"
    );
    let (status, body) = https_get(&f.certs, f.tls_port, "/recached.js");
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(
        body.len() > 1000,
        "recached.js over HTTPS: {} bytes",
        body.len()
    );
    let (status, _) = https_get(&f.certs, f.tls_port, "/nope");
    assert!(status.starts_with("HTTP/1.1 404"), "{status}");
    drop(f);
}

#[test]
fn garbage_on_the_tls_port_closes_that_connection_only() {
    let mut f = Fleet::start("fanout-garbage", true, &[]);
    f.cli(&["DEL", "g:k"]);
    let mut secure = Ws::wss(&f.certs, f.tls_port);
    secure.subscribe("g:", 2);

    let mut junk = vec![0u8; 64 * 1024];
    let mut x: u32 = 0x1234_5678;
    for b in junk.iter_mut() {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        *b = x as u8;
    }
    garbage_is_closed(f.tls_port, &junk);
    // A complete handshake record whose ClientHello is nonsense.
    let body = [
        b"\x01\x00\x00\x3a\x03\x03".as_slice(),
        b"garbage-garbage-garbage-garbage-garbage-garbage-garbage!!!",
    ]
    .concat();
    let record = [&[0x16, 0x03, 0x01, 0x00, body.len() as u8][..], &body].concat();
    garbage_is_closed(f.tls_port, &record);
    // Plain HTTP and a WebSocket upgrade without TLS on the TLS port.
    garbage_is_closed(
        f.tls_port,
        b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
    );
    // A TLS handshake, then a bogus record inside the session.
    {
        let mut s = tls_connect(&f.certs, f.tls_port);
        let deadline = Instant::now() + Duration::from_secs(5);
        while s.conn.is_handshaking() {
            assert!(Instant::now() < deadline, "TLS handshake did not finish");
            s.conn.complete_io(&mut s.sock).expect("TLS handshake");
        }
        let mut sock = s.sock.try_clone().unwrap();
        sock.write_all(b"\x17\x03\x03\x00\x20not-an-encrypted-record-at-all!!")
            .unwrap();
        let start = Instant::now();
        let mut buf = [0u8; 4096];
        loop {
            assert!(start.elapsed() < Duration::from_secs(5), "no close");
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    }

    assert!(
        f.fanout.is_running(),
        "the fan-out survived:\n{}",
        f.fanout.log()
    );
    assert_eq!(f.cli(&["SET", "g:k", "still"]), "OK");
    assert_eq!(secure.keychange("g:k"), ["SET", "g:k", "still"]);
    let mut plain = Ws::plain(f.plain_port);
    plain.subscribe("g:", 2);
    let mut again = Ws::wss(&f.certs, f.tls_port);
    again.subscribe("g:", 2);
    assert_eq!(f.cli(&["SET", "g:k", "after"]), "OK");
    for c in [&mut secure, &mut plain, &mut again] {
        assert_eq!(c.keychange("g:k"), ["SET", "g:k", "after"]);
    }
}

#[test]
fn large_snapshot_and_wasm_over_tls_with_a_slow_reader() {
    // A 1 MB "module" served at /recached.wasm: far more than rustls holds for a connection.
    let wasm = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("fanout-large-{}.wasm", std::process::id()));
    let module: Vec<u8> = (0..1u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&wasm, &module).unwrap();
    let f = Fleet::start("fanout-large", true, &["--wasm", wasm.to_str().unwrap()]);
    // 4 MB of values: far more than rustls may hold (256 KB) and the socket buffers.
    let value = "v".repeat(4096);
    let mut r = Resp::connect(f.proxy_port);
    for i in 0..1000 {
        send(&mut r, &["SET", &format!("big:{i:04}"), &value]);
    }
    for _ in 0..1000 {
        assert_eq!(next(&mut r), "+OK\\r\\n");
    }
    let mut secure = Ws::wss(&f.certs, f.tls_port);
    let hello = secure.recv(Duration::from_secs(5)).unwrap();
    assert_eq!(hello["type"], "hello");
    secure.send(&json!({"type": "subscribe", "prefixes": ["big:"]}));
    // Not reading for a while: the fan-out's writes back up (WouldBlock inside TLS).
    std::thread::sleep(Duration::from_millis(1500));
    let (mut entries, mut up) = (0, 0);
    let deadline = Instant::now() + Duration::from_secs(20);
    while up < 2 {
        assert!(
            Instant::now() < deadline,
            "{entries} entries, {up} up-to-date"
        );
        let m = secure.recv(Duration::from_secs(10)).unwrap();
        match m["type"].as_str() {
            Some("entry") => {
                assert_eq!(
                    m["args"][2].as_str().map(str::len),
                    Some(4096),
                    "{}",
                    m["args"][1]
                );
                entries += 1;
            }
            Some("up-to-date") => up += 1,
            Some("error") => panic!("{m}"),
            _ => {}
        }
    }
    assert_eq!(entries, 1000);
    // A response larger than rustls' buffer, closed only once it is all on the wire.
    let (status, body) = https_get(&f.certs, f.tls_port, "/recached.wasm");
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert!(
        body == module,
        "{} of {} bytes, or different bytes",
        body.len(),
        module.len()
    );
    let _ = std::fs::remove_file(&wasm);
}

#[test]
fn tls_only_with_port_zero() {
    let f = Fleet::start("fanout-tls-only", false, &[]);
    f.cli(&["DEL", "o:k"]);
    let mut secure = Ws::wss(&f.certs, f.tls_port);
    secure.subscribe("o:", 2);
    assert_eq!(f.cli(&["SET", "o:k", "v"]), "OK");
    assert_eq!(secure.keychange("o:k"), ["SET", "o:k", "v"]);
    assert!(
        f.fanout
            .log()
            .contains(&format!("https://127.0.0.1:{}/", f.tls_port)),
        "{}",
        f.fanout.log()
    );
    assert!(
        !f.fanout.log().contains("http://"),
        "no plain port: {}",
        f.fanout.log()
    );
    assert_eq!(f.plain_port, 0);
}

#[test]
fn recached_start_gives_the_fanout_its_tls_port_from_the_config() {
    let certs = Certs::generate("fanout-start");
    let dir = certs.dir.join("fleet");
    let base = free_port_run(3);
    let fanout = free_port_except(&[base, base + 1, base + 2]);
    let tls = free_port_except(&[base, base + 1, base + 2, fanout]);
    let config = certs.dir.join("recached.toml");
    std::fs::write(
        &config,
        format!(
            "[tls]\ncert_file = {:?}\nkey_file = {:?}\nfanout_port = {tls}\n",
            certs.server_cert.display().to_string(),
            certs.server_key.display().to_string()
        ),
    )
    .unwrap();
    let mut cmd = Command::new(recached_bin());
    cmd.arg("start")
        .args(["--engines", "2", "--bind", "127.0.0.1"])
        .args(["--proxy-port", &(base + 2).to_string()])
        .args(["--engine-port-base", &base.to_string()])
        .args(["--fanout-port", &fanout.to_string(), "--metrics-port", "0"])
        .arg("--dir")
        .arg(&dir)
        .arg("--config")
        .arg(&config);
    let mut sup = Proc::spawn("fanout-tls-fleet", cmd);
    for p in [base, base + 1, base + 2, fanout, tls] {
        sup.wait_port(p, START_TIMEOUT);
    }
    let result = std::panic::catch_unwind(|| {
        redis_cli(base + 2, &["DEL", "fleet:k"]);
        let mut secure = Ws::wss(&certs, tls);
        secure.subscribe("fleet:", 2);
        assert_eq!(redis_cli(base + 2, &["SET", "fleet:k", "v"]).trim(), "OK");
        assert_eq!(secure.keychange("fleet:k"), ["SET", "fleet:k", "v"]);
        let mut plain = Ws::plain(fanout);
        plain.subscribe("fleet:", 2);
    });
    let was_running = sup.is_running();
    sup.kill();
    if was_running {
        kill_recorded_children(&dir.join("state.toml"));
    }
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

// ---------------------------------------------------------------------------------------
// Chromium over wss:// (tests/browser, installed by scripts/test.sh: npm ci + apt chromium)

#[test]
fn chromium_demo_page_over_https_and_wss() {
    let (dir, wasm) = browser_env(true);
    let f = Fleet::start("fanout-chromium", true, &["--wasm", wasm.to_str().unwrap()]);
    let out = run_node(
        &dir,
        "wss.test.mjs",
        &[
            ("FANOUT_TLS_PORT", f.tls_port.to_string()),
            ("PROXY_PORT", f.proxy_port.to_string()),
        ],
        Duration::from_secs(90),
    );
    assert!(out.contains("wss demo page: OK"), "{out}");
}
