//! Test helpers shared by the proxy's end-to-end tests: real redis-servers on free ports
//! (killed by PID on drop), the proxy in-process on a thread, raw RESP connections.
//! Every wait is a bounded retry loop.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use recached_proxy::route::instance_of;
use recached_proxy::{ProxyOptions, run_until};

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Retries `f` every 20 ms until it returns `Some` or `limit` passes.
pub fn wait_for<T>(limit: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if start.elapsed() > limit {
            return None;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// A redis-server child process, killed by PID on drop.
pub struct Redis {
    pub port: u16,
    pub child: Child,
}

impl Redis {
    /// A redis-server on `port`, which must be free: panics if it does not answer PING.
    pub fn start(port: u16) -> Redis {
        Redis::try_start(port).expect("redis-server did not start")
    }

    /// A redis-server on a free port. A port found free can be taken by a concurrent test
    /// before redis-server binds it; then redis-server exits and another port is tried.
    pub fn start_free() -> Redis {
        (0..5)
            .find_map(|_| Redis::try_start(free_port()))
            .expect("redis-server did not start on any of 5 free ports")
    }

    /// Spawns redis-server on `port` and waits up to 10 s for its PONG; `None` (the child
    /// reaped) if it exited first, e.g. because the port was taken.
    pub fn try_start(port: u16) -> Option<Redis> {
        // SAVE/BGSAVE write dump.rdb: into a directory of the test's own, not the crate's.
        let dir = std::env::temp_dir().join(format!("recached-proxy-test-{port}"));
        std::fs::create_dir_all(&dir).expect("test directory");
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(&dir)
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed");
        let mut r = Redis { port, child };
        let up = wait_for(Duration::from_secs(10), || {
            if !matches!(r.child.try_wait(), Ok(None)) {
                return Some(false);
            }
            // A probe whose connection is refused or reset just tries again.
            let mut c = Conn::try_connect(port)?;
            (c.try_cmd(&["PING"])? == b"+PONG\r\n").then_some(true)
        });
        // Drop kills and reaps the child and removes its directory.
        (up == Some(true)).then_some(r)
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
        // Its directory (and any dump.rdb a test made it write) goes with it.
        let dir = std::env::temp_dir().join(format!("recached-proxy-test-{}", self.port));
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// The proxy on a thread; stopped through its shutdown flag on drop.
pub struct Proxy {
    pub port: u16,
    pub stop: Arc<AtomicBool>,
    pub thread: Option<thread::JoinHandle<std::io::Result<()>>>,
}

impl Proxy {
    pub fn start(backends: &[u16]) -> Proxy {
        let port = free_port();
        let stop = Arc::new(AtomicBool::new(false));
        let opts = ProxyOptions {
            memcached_port: 0,
            memcached_tls_port: 0,
            memcached_user: None,
            port,
            bind: "127.0.0.1".into(),
            backends: backends.iter().map(|p| format!("127.0.0.1:{p}")).collect(),
            tls: Default::default(),
            limits: Default::default(),
            auth: Default::default(),
        };
        let flag = Arc::clone(&stop);
        let thread = Some(thread::spawn(move || run_until(opts, flag)));
        wait_for(Duration::from_secs(10), || {
            let mut c = Conn::try_connect(port)?;
            (c.try_cmd(&["PING"])? == b"+PONG\r\n").then_some(())
        })
        .expect("proxy did not start");
        Proxy { port, stop, thread }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let r = t.join().expect("proxy thread panicked");
            if !thread::panicking() {
                r.expect("proxy returned an error");
            }
        }
    }
}

/// Two redis-servers and a proxy in front of them.
pub struct Fleet {
    pub redis: Vec<Redis>,
    pub proxy: Proxy,
}

impl Fleet {
    pub fn start() -> Fleet {
        let redis: Vec<Redis> = (0..2).map(|_| Redis::start_free()).collect();
        let ports: Vec<u16> = redis.iter().map(|r| r.port).collect();
        let proxy = Proxy::start(&ports);
        Fleet { redis, proxy }
    }

    pub fn conn(&self) -> Conn {
        Conn::connect(self.proxy.port)
    }

    pub fn backend(&self, i: usize) -> Conn {
        Conn::connect(self.redis[i].port)
    }
}

/// A raw RESP connection with a read timeout.
pub struct Conn {
    pub s: TcpStream,
    pub buf: Vec<u8>,
}

impl Conn {
    pub fn try_connect(port: u16) -> Option<Conn> {
        let s = TcpStream::connect(("127.0.0.1", port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        Some(Conn { s, buf: Vec::new() })
    }

    pub fn connect(port: u16) -> Conn {
        Conn::try_connect(port).expect("connect")
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.s.write_all(bytes).unwrap();
    }

    pub fn send(&mut self, args: &[&str]) {
        self.send_raw(&encode(args));
    }

    /// Reads one complete reply frame; empty if the connection closed or timed out.
    pub fn reply(&mut self) -> Vec<u8> {
        loop {
            if let Ok(Some(n)) = resp::reply::frame_len(&self.buf) {
                return self.buf.drain(..n).collect();
            }
            let mut chunk = [0u8; 65536];
            match self.s.read(&mut chunk) {
                Ok(0) | Err(_) => return Vec::new(),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    /// `cmd` for probes: `None` if the write fails (e.g. the connection was reset).
    pub fn try_cmd(&mut self, args: &[&str]) -> Option<Vec<u8>> {
        self.s.write_all(&encode(args)).ok()?;
        Some(self.reply())
    }

    pub fn cmd(&mut self, args: &[&str]) -> Vec<u8> {
        self.send(args);
        self.reply()
    }

    /// True once the peer closed the connection (EOF within the read timeout).
    pub fn closed(&mut self) -> bool {
        let mut b = [0u8; 16];
        matches!(self.s.read(&mut b), Ok(0))
    }
}

pub fn encode(args: &[&str]) -> Vec<u8> {
    let mut out = Vec::new();
    resp::encode_request(&mut out, args);
    out
}

pub fn bulk(s: &str) -> Vec<u8> {
    format!("${}\r\n{s}\r\n", s.len()).into_bytes()
}

pub fn int(n: i64) -> Vec<u8> {
    format!(":{n}\r\n").into_bytes()
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Keys `key:0..` with at least one on each of the two instances among the first few.
pub fn keys(n: usize) -> Vec<String> {
    let keys: Vec<String> = (0..n).map(|i| format!("key:{i}")).collect();
    if n >= 10 {
        let on0 = keys
            .iter()
            .filter(|k| instance_of(k.as_bytes(), 2) == 0)
            .count();
        assert!(on0 > 0 && on0 < n, "test keys must span both instances");
    }
    keys
}

/// A key that lives on `instance` (of 2).
pub fn key_on(instance: usize, prefix: &str) -> String {
    (0..10_000)
        .map(|i| format!("{prefix}{i}"))
        .find(|k| instance_of(k.as_bytes(), 2) == instance)
        .unwrap()
}
