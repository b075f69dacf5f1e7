//! MIGRATE's sockets: blocking connections to other servers, cached by `host:port` like
//! redis `migrateCachedSocket` (at most 64, each dropped after 10 s unused), each remembering
//! the database it last selected. The engine blocks for the exchange, with the command's
//! timeout on the connect and on every write and read, as Redis does; MIGRATE's logic is
//! engine-core's (`engine_core::dump::migrate`).

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use engine_core::dump::migrate::{Conn, IoFail, Sockets};

/// redis `MIGRATE_SOCKET_CACHE_ITEMS`.
const CACHE_ITEMS: usize = 64;
/// redis `MIGRATE_SOCKET_CACHE_TTL`.
const CACHE_TTL: Duration = Duration::from_secs(10);

/// The cache the engine installs in `Engine::migrate`.
#[derive(Default)]
pub struct MigrateSockets {
    conns: HashMap<Vec<u8>, Cached>,
}

struct Cached {
    /// `None`: the connect failed at once (refused); see [`connect`].
    stream: Option<TcpStream>,
    /// Bytes read past the last reply line.
    rbuf: Vec<u8>,
    last_db: Option<i64>,
    last_use: Instant,
}

fn name(host: &[u8], port: &[u8]) -> Vec<u8> {
    let mut n = host.to_vec();
    n.push(b':');
    n.extend_from_slice(port);
    n
}

fn fail(e: &io::Error) -> IoFail {
    IoFail {
        timed_out: matches!(
            e.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
        ),
    }
}

/// Connects within `timeout` to the first address of `host:port` that answers. `None`: the
/// name does not resolve or the time ran out (redis: "error or timeout connecting");
/// `Some(None)`: refused. Redis's blocking connect only waits for the socket to be writable,
/// which a refused connect also is, so its error shows on the first write ("error or timeout
/// writing"); a refused connection is kept as a socket whose writes fail, to answer the same.
fn connect(host: &[u8], port: &[u8], timeout: Duration) -> Option<Option<TcpStream>> {
    let host = std::str::from_utf8(host).ok()?;
    // redis `atoi(port)`: leading digits, else 0 (which never connects).
    let digits: String = std::str::from_utf8(port)
        .ok()?
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    let port: u16 = digits.parse().unwrap_or(0);
    let addrs: Vec<_> = (host, port).to_socket_addrs().ok()?.collect();
    let mut refused = false;
    for addr in addrs {
        match TcpStream::connect_timeout(&addr, timeout) {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                return Some(Some(s));
            }
            Err(e) if fail(&e).timed_out => {}
            Err(_) => refused = true,
        }
    }
    refused.then_some(None)
}

impl Sockets for MigrateSockets {
    fn get(&mut self, host: &[u8], port: &[u8], timeout_ms: u64) -> Option<&mut dyn Conn> {
        let now = Instant::now();
        self.conns
            .retain(|_, c| now.duration_since(c.last_use) <= CACHE_TTL);
        let key = name(host, port);
        if !self.conns.contains_key(&key) {
            if self.conns.len() >= CACHE_ITEMS {
                let victim = self.conns.keys().next().cloned();
                if let Some(v) = victim {
                    self.conns.remove(&v);
                }
            }
            let stream = connect(host, port, Duration::from_millis(timeout_ms.max(1)))?;
            self.conns.insert(
                key.clone(),
                Cached {
                    stream,
                    rbuf: Vec::new(),
                    last_db: None,
                    last_use: now,
                },
            );
        }
        let c = self.conns.get_mut(&key).expect("cached");
        c.last_use = now;
        Some(c)
    }

    fn close(&mut self, host: &[u8], port: &[u8]) {
        self.conns.remove(&name(host, port));
    }

    fn cached(&self) -> usize {
        self.conns.len()
    }

    fn cron(&mut self) {
        if !self.conns.is_empty() {
            let now = Instant::now();
            self.conns
                .retain(|_, c| now.duration_since(c.last_use) <= CACHE_TTL);
        }
    }
}

impl Conn for Cached {
    fn last_db(&self) -> Option<i64> {
        self.last_db
    }

    fn set_last_db(&mut self, db: Option<i64>) {
        self.last_db = db;
    }

    fn write_all(&mut self, buf: &[u8], timeout_ms: u64) -> Result<(), IoFail> {
        let stream = self.stream.as_mut().ok_or(IoFail { timed_out: false })?;
        let t = Duration::from_millis(timeout_ms.max(1));
        stream.set_write_timeout(Some(t)).map_err(|e| fail(&e))?;
        stream.write_all(buf).map_err(|e| fail(&e))
    }

    fn read_line(&mut self, timeout_ms: u64) -> Result<Vec<u8>, IoFail> {
        let deadline = Instant::now() + Duration::from_millis(timeout_ms.max(1));
        loop {
            if let Some(nl) = self.rbuf.iter().position(|&b| b == b'\n') {
                let mut line: Vec<u8> = self.rbuf.drain(..=nl).collect();
                line.pop();
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                return Ok(line);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(IoFail { timed_out: true });
            }
            let stream = self.stream.as_mut().ok_or(IoFail { timed_out: false })?;
            stream.set_read_timeout(Some(left)).map_err(|e| fail(&e))?;
            let mut chunk = [0u8; 4096];
            match stream.read(&mut chunk) {
                Ok(0) => return Err(IoFail { timed_out: false }),
                Ok(n) => self.rbuf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(fail(&e)),
            }
        }
    }
}
