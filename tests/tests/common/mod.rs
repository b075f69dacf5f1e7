//! Shared helpers for the black-box tests in `tests/tests/*.rs`: free ports, the `recached`
//! binary, process guards, a raw RESP client and `redis-cli`.
//!
//! Every wait here is bounded in time; every process started is killed by PID when its guard is
//! dropped (also when a test panics), so a failing test never leaves servers behind.
//!
//! Use from a test file with `mod common;` (each integration test is its own crate, so some
//! helpers are unused in some files: hence the `dead_code` allowance below).
//!
//! - [`free_port`]: a port the OS just handed out on 127.0.0.1 (free at that moment).
//! - [`recached_bin`]: the `recached` binary under test (`RECACHED_BIN`, else the newest of
//!   `target/release/recached` and `target/debug/recached`).
//! - [`Proc`]: a spawned child with its stdout/stderr in a log file; [`Proc::wait_port`].
//! - [`start_redis`], [`start_engine`]: a `redis-server` / `recached server` on a port, ready
//!   (`spawn_*`: started, not yet waited for).
//! - [`Resp`]: a raw RESP client: send bytes, read exactly one reply frame, raw bytes out.
//! - [`frame_len`]: length of the first complete RESP2/RESP3 frame in a buffer.
//! - [`Value`], [`parse_value`]: a decoded reply, for tests that check a reply's shape.
//! - [`redis_cli`]: run the real `redis-cli` and return its stdout.
//! - [`on_both`], [`cmd`], [`next`], [`send`], [`assert_quiet`]: one check run against
//!   redis-server and the engine with the same expectations, on [`escape`]d reply text.
//! - [`pings`], [`free_port_run`], [`free_port_except`], [`run_cmd`] / [`CmdOut`],
//!   [`kill_recorded_children`]: a liveness probe, ports for a fleet, a bounded external
//!   command, and a fleet guard's cleanup.
//! - [`ClusterWithProxy`]: two engines in cluster mode and a proxy in front, on free ports.
//! - [`rss_bytes`]: a process's resident memory; [`connect_small`]: a TCP connection with a
//!   fixed small receive buffer (a client that stops reading backs up into the server fast).
//! - [`browser_env`], [`run_node`]: tests/browser (node_modules, optionally Chromium) with the
//!   wasm replica built, and a bounded `node <script>` run there.
#![allow(dead_code)]

use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How long a server may take to start listening (the machine is small and shared).
pub const START_TIMEOUT: Duration = Duration::from_secs(20);
/// Read timeout of a [`Resp`] client: the longest wait for one reply.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// A TCP port on 127.0.0.1 that was free a moment ago, below Linux's ephemeral range
/// ([`free_port_run`]). Not port 0's pick: the kernel hands out ephemeral ports, and while a
/// server has not bound its port yet, a client connecting to it (a readiness probe) can be
/// given that same port as its own source port and connect to itself (TCP simultaneous open),
/// which looked like the server listening (seen as `Connection refused` right after
/// `start_engine` in CI). A port below 32768 is never a source port. A port is never handed
/// out twice in one test process (random picks could repeat where the kernel's would not).
pub fn free_port() -> u16 {
    free_port_run(1)
}

/// Every port [`free_port_run`] (and so [`free_port`]) handed out in this test process: tests
/// run in parallel threads, and a fleet binds its run of ports only when it starts, so a port
/// of one test's run must not be another test's single port meanwhile (a server that cannot
/// bind exits, and the test would talk to the other test's server).
static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());

/// The workspace root (the parent of this `tests/` crate).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests crate has a parent dir")
        .to_path_buf()
}

/// Path of the `recached` binary under test: `$RECACHED_BIN` if set, else whichever of
/// `<workspace>/target/release/recached` and `target/debug/recached` exists and is newer.
/// Panics with instructions when neither exists (cargo does not build other packages'
/// binaries for this crate's tests).
pub fn recached_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("RECACHED_BIN") {
        let p = PathBuf::from(p);
        assert!(p.exists(), "RECACHED_BIN={} does not exist", p.display());
        return p;
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"));
    let mtime = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let candidates = [
        target.join("release/recached"),
        target.join("debug/recached"),
    ];
    candidates
        .iter()
        .filter_map(|p| mtime(p).map(|t| (t, p.clone())))
        .max_by_key(|(t, _)| *t)
        .map(|(_, p)| p)
        .unwrap_or_else(|| {
            panic!(
                "no recached binary in {}/{{release,debug}}: run `cargo build -p recached` \
                 (or `cargo build --release -p recached`) first, or set RECACHED_BIN",
                target.display()
            )
        })
}

/// A fresh directory for one process's files, under cargo's per-crate test temp dir.
fn new_temp_dir(name: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "{}-{}-{}",
        name,
        std::process::id(),
        n
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create temp dir");
    dir
}

/// A running child process. Dropping it kills the child by PID (SIGKILL) and reaps it.
/// Its stdout and stderr go to `<dir>/<name>.log`; `dir` is removed on drop unless the
/// thread is panicking (then the log is kept and its path printed).
pub struct Proc {
    pub name: String,
    pub child: Child,
    /// Working directory of the child, also holding its log.
    pub dir: PathBuf,
    pub log_path: PathBuf,
}

impl Proc {
    /// Spawns `cmd` with cwd, stdout and stderr redirected into a new temp dir.
    pub fn spawn(name: &str, mut cmd: Command) -> Proc {
        let dir = new_temp_dir(name);
        let log_path = dir.join(format!("{name}.log"));
        let log = File::create(&log_path).expect("create log file");
        let log2 = log.try_clone().expect("clone log fd");
        cmd.current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log2));
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {name} ({cmd:?}): {e}"));
        Proc {
            name: name.to_string(),
            child,
            dir,
            log_path,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The log so far (stdout + stderr of the child).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// Whether the child is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Polls until a TCP connect to 127.0.0.1:`port` succeeds, at most `timeout`.
    /// Panics (with the child's log) if the child exits first or the time runs out.
    pub fn wait_port(&mut self, port: u16, timeout: Duration) {
        if let Err(e) = self.try_wait_port(port, timeout) {
            panic!("{e}");
        }
    }

    /// Waits until the proxy on `port` reaches every engine: `DBSIZE` (fanned out to all of
    /// them) answers an integer (or `-NOAUTH`) rather than `-ERR instance … is unavailable`. An engine that
    /// listens late (a slow start on a loaded host, or a restart after its port was briefly
    /// taken) leaves the proxy's link in its reconnect backoff (up to 1 s) after the port
    /// already accepts; a test must not send its first request into that window.
    pub fn wait_proxy_reaches_engines(&mut self, port: u16, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let mut last = String::new();
        while Instant::now() < deadline {
            // A connection refused, reset or closed mid-probe just tries again.
            if let Ok(r) = Resp::try_connect(port).and_then(|mut c| {
                c.stream
                    .write_all(&Resp::encode(&[b"DBSIZE"]))
                    .map_err(|e| e.to_string())?;
                c.try_read_frame()
            }) {
                // A fleet with a password answers NOAUTH before routing: nothing to wait for.
                if r.first() == Some(&b':') || r.starts_with(b"-NOAUTH") {
                    return;
                }
                last = String::from_utf8_lossy(&r).into_owned();
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("{} exited ({status}); log:\n{}", self.name, self.log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "the proxy on {port} did not reach every engine within {timeout:?} (last: {last:?}); log:\n{}",
            self.log()
        );
    }

    /// [`Proc::wait_port`] returning the failure (with the child's log) instead of panicking.
    pub fn try_wait_port(&mut self, port: u16, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        loop {
            if let Ok(c) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
                // A connection to itself (see `free_port`) is not the server listening, nor
                // is another process's server when this child already exited (its port taken).
                if c.local_addr().ok() != c.peer_addr().ok()
                    && !matches!(self.child.try_wait(), Ok(Some(_)))
                {
                    return Ok(());
                }
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!(
                    "{} exited ({status}) before listening on {port}; log:\n{}",
                    self.name,
                    self.log()
                ));
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "{} did not listen on {port} within {timeout:?}; log:\n{}",
                    self.name,
                    self.log()
                ));
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// Kills the child now (SIGKILL by PID) and reaps it. Idempotent.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!("[{}] log kept at {}", self.name, self.log_path.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Starts `redis-server` on 127.0.0.1:`port` without persistence and with one database
/// (so SELECT behaves like recached's single keyspace), and waits until it listens.
pub fn start_redis(port: u16) -> Proc {
    let mut p = spawn_redis(port);
    p.wait_port(port, START_TIMEOUT);
    p
}

/// [`start_redis`] without waiting for the port.
pub fn spawn_redis(port: u16) -> Proc {
    let mut cmd = Command::new("redis-server");
    cmd.args(["--port", &port.to_string()])
        .args(["--bind", "127.0.0.1"])
        .args(["--save", ""])
        .args(["--appendonly", "no"])
        .args(["--databases", "16"])
        .args(["--daemonize", "no"]);
    Proc::spawn(&format!("redis-{port}"), cmd)
}

/// Starts one engine, `recached server --port P --bind 127.0.0.1`, and waits until it listens.
pub fn start_engine(port: u16) -> Proc {
    let mut p = spawn_engine(port);
    p.wait_port(port, START_TIMEOUT);
    p
}

/// [`start_engine`] without waiting for the port.
pub fn spawn_engine(port: u16) -> Proc {
    let mut cmd = Command::new(recached_bin());
    cmd.args(["server", "--port", &port.to_string(), "--bind", "127.0.0.1"]);
    Proc::spawn(&format!("engine-{port}"), cmd)
}

/// Length of the first complete RESP2/RESP3 frame at the start of `buf`:
/// `Ok(Some(n))` complete (`buf[..n]`), `Ok(None)` more bytes needed, `Err` not RESP.
/// Aggregates nest (`*`, `%`, `~`, `>`, `|` attribute before its value); a null aggregate
/// (`*-1`) has no elements.
pub fn frame_len(buf: &[u8]) -> Result<Option<usize>, String> {
    fn line_end(buf: &[u8], from: usize) -> Option<usize> {
        buf.get(from..)?
            .windows(2)
            .position(|w| w == b"\r\n")
            .map(|p| from + p)
    }
    fn int(s: &[u8]) -> Result<i64, String> {
        std::str::from_utf8(s)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("bad length {:?}", String::from_utf8_lossy(s)))
    }
    // Returns the end offset of the frame starting at `at`.
    fn frame(buf: &[u8], at: usize, depth: usize) -> Result<Option<usize>, String> {
        if depth > 64 {
            return Err("nesting too deep".into());
        }
        let Some(&tag) = buf.get(at) else {
            return Ok(None);
        };
        let Some(eol) = line_end(buf, at + 1) else {
            return Ok(None);
        };
        let head = &buf[at + 1..eol];
        let after = eol + 2;
        match tag {
            b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => Ok(Some(after)),
            b'$' | b'!' | b'=' => {
                let n = int(head)?;
                if n < 0 {
                    return Ok(Some(after));
                }
                let end = after + n as usize + 2;
                if buf.len() < end {
                    Ok(None)
                } else {
                    Ok(Some(end))
                }
            }
            b'*' | b'~' | b'>' | b'%' | b'|' => {
                let n = int(head)?;
                if n < 0 {
                    return Ok(Some(after));
                }
                let mut elems = n as usize;
                if tag == b'%' || tag == b'|' {
                    elems *= 2;
                }
                if tag == b'|' {
                    elems += 1; // the attribute is followed by the value it annotates
                }
                let mut pos = after;
                for _ in 0..elems {
                    match frame(buf, pos, depth + 1)? {
                        Some(e) => pos = e,
                        None => return Ok(None),
                    }
                }
                Ok(Some(pos))
            }
            other => Err(format!("unknown RESP type byte {:?}", other as char)),
        }
    }
    frame(buf, 0, 0)
}

/// A decoded RESP2/RESP3 reply (for shape checks; byte comparisons use the raw frame).
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// `+…`
    Simple(String),
    /// `-…` (the whole message, code included)
    Error(String),
    /// `:…`
    Int(i64),
    /// `$…` / `=…` (verbatim strings keep their `txt:` prefix)
    Bulk(Vec<u8>),
    /// `$-1`, `*-1`, `_`
    Null,
    /// `*…`, `~…` (set), `>…` (push)
    Array(Vec<Value>),
    /// `%…`
    Map(Vec<(Value, Value)>),
    /// `,…`, `#…`, `(…`: kept as their text
    Other(u8, String),
}

impl Value {
    /// Bulk or simple string contents as UTF-8 (lossy); `None` for other types.
    pub fn str(&self) -> Option<String> {
        match self {
            Value::Bulk(b) => Some(String::from_utf8_lossy(b).into_owned()),
            Value::Simple(s) => Some(s.clone()),
            _ => None,
        }
    }

    /// Elements of an array (or set/push).
    pub fn array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(v) => Some(v),
            _ => None,
        }
    }
}

/// Decodes one complete frame (as returned by [`Resp::read_frame`]).
/// Panics on malformed input: callers pass frames [`frame_len`] accepted.
pub fn parse_value(frame: &[u8]) -> Value {
    fn at(buf: &[u8], pos: usize) -> (Value, usize) {
        let eol = pos
            + buf[pos..]
                .windows(2)
                .position(|w| w == b"\r\n")
                .expect("CRLF");
        let head = String::from_utf8_lossy(&buf[pos + 1..eol]).into_owned();
        let after = eol + 2;
        let n = || head.parse::<i64>().expect("length");
        match buf[pos] {
            b'+' => (Value::Simple(head), after),
            b'-' => (Value::Error(head), after),
            b':' => (Value::Int(n()), after),
            b'_' => (Value::Null, after),
            b'$' | b'=' if n() < 0 => (Value::Null, after),
            b'$' | b'=' => {
                let end = after + n() as usize;
                (Value::Bulk(buf[after..end].to_vec()), end + 2)
            }
            b'*' | b'~' | b'>' if n() < 0 => (Value::Null, after),
            b'*' | b'~' | b'>' => {
                let mut v = Vec::new();
                let mut p = after;
                for _ in 0..n() {
                    let (x, q) = at(buf, p);
                    v.push(x);
                    p = q;
                }
                (Value::Array(v), p)
            }
            b'%' => {
                let mut v = Vec::new();
                let mut p = after;
                for _ in 0..n() {
                    let (k, q) = at(buf, p);
                    let (x, q) = at(buf, q);
                    v.push((k, x));
                    p = q;
                }
                (Value::Map(v), p)
            }
            t => (Value::Other(t, head), after),
        }
    }
    at(frame, 0).0
}

/// Renders bytes for humans: printable ASCII as is, `\r` `\n` `\t` `\\` `"` escaped, other
/// bytes as `\xHH`.
pub fn escape(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len());
    for &c in b {
        match c {
            b'\r' => s.push_str("\\r"),
            b'\n' => s.push_str("\\n"),
            b'\t' => s.push_str("\\t"),
            b'\\' => s.push_str("\\\\"),
            b'"' => s.push_str("\\\""),
            0x20..=0x7e => s.push(c as char),
            _ => s.push_str(&format!("\\x{c:02x}")),
        }
    }
    s
}

/// A minimal raw RESP client over a blocking `TcpStream` with a read timeout.
/// It returns replies as the exact bytes the server sent.
pub struct Resp {
    pub stream: TcpStream,
    /// Bytes read but not yet returned (the start of the next frame).
    buf: Vec<u8>,
}

impl Resp {
    /// Connects to 127.0.0.1:`port` with [`READ_TIMEOUT`]; panics if it cannot.
    pub fn connect(port: u16) -> Resp {
        Self::try_connect(port).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Resp::connect`] returning the error instead of panicking.
    pub fn try_connect(port: u16) -> Result<Resp, String> {
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let err = |e: std::io::Error| format!("connect 127.0.0.1:{port}: {e}");
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).map_err(err)?;
        stream.set_read_timeout(Some(READ_TIMEOUT)).map_err(err)?;
        stream.set_write_timeout(Some(READ_TIMEOUT)).map_err(err)?;
        stream.set_nodelay(true).map_err(err)?;
        Ok(Resp {
            stream,
            buf: Vec::new(),
        })
    }

    /// Writes `bytes` as they are.
    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("write to server");
    }

    /// Encodes `args` as a multibulk request (`*N\r\n$L\r\narg\r\n…`).
    pub fn encode(args: &[&[u8]]) -> Vec<u8> {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
        out
    }

    /// Sends one command and returns its one complete reply frame (raw bytes).
    pub fn cmd(&mut self, args: &[&[u8]]) -> Vec<u8> {
        self.send_raw(&Self::encode(args));
        self.read_frame()
    }

    /// Like [`Resp::cmd`] with string arguments.
    pub fn cmd_str(&mut self, args: &[&str]) -> Vec<u8> {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        self.cmd(&args)
    }

    /// Reads exactly one complete reply frame. Panics on timeout ([`READ_TIMEOUT`] per read),
    /// on EOF before a full frame, or on bytes that are not RESP.
    pub fn read_frame(&mut self) -> Vec<u8> {
        self.try_read_frame()
            .unwrap_or_else(|e| panic!("read_frame: {e}"))
    }

    /// [`Resp::read_frame`] returning errors instead of panicking.
    pub fn try_read_frame(&mut self) -> Result<Vec<u8>, String> {
        let deadline = Instant::now() + READ_TIMEOUT;
        loop {
            match frame_len(&self.buf) {
                Ok(Some(n)) => return Ok(self.buf.drain(..n).collect()),
                Ok(None) => {}
                Err(e) => return Err(format!("{e} in {}", escape(&self.buf))),
            }
            if Instant::now() >= deadline {
                return Err(format!("timeout; partial reply {}", escape(&self.buf)));
            }
            let mut chunk = [0u8; 16 * 1024];
            match self.stream.read(&mut chunk) {
                Ok(0) => return Err(format!("EOF; partial reply {}", escape(&self.buf))),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return Err(format!("timeout; partial reply {}", escape(&self.buf)));
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("read error {e}; partial {}", escape(&self.buf))),
            }
        }
    }

    /// Reads everything until the server closes the connection or nothing arrives for
    /// `quiet` (at most `max` in total). Returns the bytes and whether the server closed.
    pub fn read_until_close(&mut self, quiet: Duration, max: Duration) -> (Vec<u8>, bool) {
        let mut out = std::mem::take(&mut self.buf);
        let deadline = Instant::now() + max;
        self.stream.set_read_timeout(Some(quiet)).unwrap();
        let mut closed = false;
        while Instant::now() < deadline {
            let mut chunk = [0u8; 16 * 1024];
            match self.stream.read(&mut chunk) {
                Ok(0) => {
                    closed = true;
                    break;
                }
                Ok(n) => out.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::ConnectionReset => {
                    closed = true;
                    break;
                }
                Err(_) => break, // quiet period elapsed
            }
        }
        self.stream.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
        (out, closed)
    }
}

/// Runs the real `redis-cli -h 127.0.0.1 -p PORT ARGS…` (at most 20 s) and returns its stdout.
/// Panics if it cannot run, times out or exits non-zero.
pub fn redis_cli(port: u16, args: &[&str]) -> String {
    let dir = new_temp_dir("redis-cli");
    let out_path = dir.join("out");
    let out = File::create(&out_path).unwrap();
    let mut child = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::from(out))
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn redis-cli (apt-get install redis-tools)");
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait redis-cli") {
            break s;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("redis-cli {args:?} on port {port} timed out");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        status.success(),
        "redis-cli {args:?} failed ({status}): {stdout}"
    );
    stdout
}

// ---- Same-expectations tests: one check against redis-server and the engine ----

/// Runs `check(port, name)` against a fresh redis-server (`name` "redis") and then a fresh
/// engine (`name` "recached"), so a test's expectations are checked against Redis too.
/// Each server is killed by its [`Proc`] guard when its check returns or panics.
pub fn on_both(check: impl Fn(u16, &str)) {
    let rport = free_port();
    let _redis = start_redis(rport);
    check(rport, "redis");
    let eport = free_port();
    let _engine = start_engine(eport);
    check(eport, "recached");
}

/// Sends one command and returns its reply frame as [`escape`]d text (at most
/// [`READ_TIMEOUT`] for the reply).
pub fn cmd(c: &mut Resp, args: &[&str]) -> String {
    escape(&c.cmd_str(args))
}

/// The next reply frame on `c` (e.g. of a blocked command or a push), [`escape`]d (at most
/// [`READ_TIMEOUT`]).
pub fn next(c: &mut Resp) -> String {
    escape(&c.read_frame())
}

/// Sends a command without reading its reply (it blocks, or the reply is read later).
pub fn send(c: &mut Resp, args: &[&str]) {
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    c.send_raw(&Resp::encode(&args));
}

/// Asserts that nothing more arrives on `c` for a short while (150 ms quiet, 300 ms at most).
pub fn assert_quiet(c: &mut Resp, who: &str) {
    let (rest, _) = c.read_until_close(Duration::from_millis(150), Duration::from_millis(300));
    assert!(rest.is_empty(), "{who}: unexpected {}", escape(&rest));
}

// ---- Fleets (`recached start`) and external commands ----

/// One PING on a fresh connection (connect within 200 ms, reply within 500 ms): true on
/// `+PONG`, false on any failure (for polling whether a server is up and serving).
pub fn pings(port: u16) -> bool {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    if s.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 7];
    s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
}

/// The first of `n` consecutive ports that were all free a moment ago (each one bound once).
/// Chosen at random in 15000..32000, below Linux's ephemeral range (32768–60999): a port in
/// that range can be taken at any moment as the local port of some outgoing connection, and
/// a fleet needs several ports to stay free between this check and its start. No port is
/// handed out twice in one test process ([`GIVEN`]). At most 500 tries, then a panic.
pub fn free_port_run(n: usize) -> u16 {
    use std::hash::{BuildHasher, Hasher};
    const LOW: u64 = 15_000;
    const HIGH: u64 = 32_000;
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    for _ in 0..500 {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(Instant::now().elapsed().as_nanos());
        let base = (LOW + h.finish() % (HIGH - LOW - n as u64)) as u16;
        let run = base..base + n as u16;
        let all_free = run
            .clone()
            .all(|p| !given.contains(&p) && TcpListener::bind(("127.0.0.1", p)).is_ok());
        if all_free {
            given.extend(run);
            return base;
        }
    }
    panic!("no run of {n} free ports found");
}

/// A free port (from [`free_port_run`]) that is not one of `taken`.
pub fn free_port_except(taken: &[u16]) -> u16 {
    loop {
        let p = free_port_run(1);
        if !taken.contains(&p) {
            return p;
        }
    }
}

/// What a command run by [`run_cmd`] left: exit status and its whole output.
pub struct CmdOut {
    /// Exited with status 0.
    pub ok: bool,
    /// The exit code (`None` when killed by a signal).
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl CmdOut {
    /// stdout followed by stderr.
    pub fn text(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

/// Runs `cmd` to completion (stdin null, stdout and stderr captured in temp files), killing it
/// and panicking if it takes longer than `timeout`.
pub fn run_cmd(cmd: &mut Command, timeout: Duration) -> CmdOut {
    let dir = new_temp_dir("cmd");
    let (o, e) = (dir.join("stdout"), dir.join("stderr"));
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(File::create(&o).unwrap())
        .stderr(File::create(&e).unwrap())
        .spawn()
        .unwrap_or_else(|err| panic!("spawn {cmd:?}: {err}"));
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} did not finish within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = CmdOut {
        ok: status.success(),
        code: status.code(),
        stdout: std::fs::read_to_string(&o).unwrap_or_default(),
        stderr: std::fs::read_to_string(&e).unwrap_or_default(),
    };
    let _ = std::fs::remove_dir_all(&dir);
    out
}

/// SIGKILLs, by PID, every child recorded in a supervisor's state file (`state.toml`: a
/// `children` array of tables with `pid`). For a fleet guard's Drop: call it only while the
/// supervisor was still running, since once it is gone the recorded pids may be reused.
/// A missing or unreadable file kills nothing.
pub fn kill_recorded_children(state_file: &Path) {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;
    if let Ok(text) = std::fs::read_to_string(state_file)
        && let Ok(t) = text.parse::<toml::Table>()
        && let Some(children) = t.get("children").and_then(|c| c.as_array())
    {
        for c in children {
            if let Some(pid) = c.get("pid").and_then(|p| p.as_integer()) {
                let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Node and Chromium (tests/browser/, installed by scripts/test.sh: npm ci + apt chromium)

/// tests/browser with its node_modules checked (and Debian's Chromium, or `$CHROMIUM`, when
/// `chromium`), and the wasm replica module built by scripts/build-wasm.sh if missing:
/// `(tests/browser dir, path of recached.wasm)`.
pub fn browser_env(chromium: bool) -> (PathBuf, PathBuf) {
    let dir = workspace_root().join("tests/browser");
    let modules = dir.join("node_modules/playwright-core");
    assert!(
        modules.exists(),
        "{} missing: run scripts/test.sh (npm ci in tests/browser)",
        modules.display()
    );
    if chromium {
        let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
        assert!(
            Path::new(&chromium).exists(),
            "{chromium} missing: run scripts/test.sh (apt chromium)"
        );
    }
    let out = Command::new(workspace_root().join("scripts/build-wasm.sh"))
        .output()
        .expect("run scripts/build-wasm.sh");
    assert!(
        out.status.success(),
        "build-wasm: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let wasm = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    (dir, wasm)
}

/// Runs `node <script>` in `dir` with `envs`, killed after `limit`; returns its output
/// (stdout and stderr); panics if it fails or runs out of time.
pub fn run_node(dir: &Path, script: &str, envs: &[(&str, String)], limit: Duration) -> String {
    let log = dir.join(format!("{script}.{}.log", std::process::id()));
    let file = File::create(&log).unwrap();
    let mut cmd = Command::new("node");
    cmd.current_dir(dir)
        .args(["--experimental-websocket", "--no-warnings", script])
        .stdout(file.try_clone().unwrap())
        .stderr(file);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn node");
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    match status {
        Some(s) if s.success() => out,
        Some(s) => panic!("{script} failed ({s}):\n{out}"),
        None => panic!("{script} did not finish within {limit:?}:\n{out}"),
    }
}

/// Resident set size of `pid` in bytes (`VmRSS` of /proc/<pid>/status); `None` once it is gone.
pub fn rss_bytes(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: u64 = s
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// A connection to 127.0.0.1:`port` whose receive buffer is fixed at `rcvbuf` bytes before
/// connecting (no autotuning), so a client that stops reading backs up into the server
/// quickly instead of into several MB of kernel buffer.
pub fn connect_small(port: u16, rcvbuf: usize) -> TcpStream {
    use nix::sys::socket::{
        AddressFamily, SockFlag, SockType, SockaddrIn, connect, setsockopt, socket, sockopt,
    };
    let fd = socket(
        AddressFamily::Inet,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .expect("socket");
    setsockopt(&fd, sockopt::RcvBuf, &rcvbuf).expect("SO_RCVBUF");
    connect(
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        &SockaddrIn::new(127, 0, 0, 1, port),
    )
    .expect("connect");
    TcpStream::from(fd)
}

/// Tears down a fleet a test started with `recached start`: SIGKILLs the supervisor, then — if
/// it was still running, so the recorded pids are still its children — every child listed in
/// `state_file`; removes `dir`, unless the test is failing (kept for a look, and said so).
pub fn teardown_fleet(sup: &mut Proc, state_file: &Path, dir: &Path) {
    let was_running = sup.is_running();
    sup.kill();
    if was_running {
        kill_recorded_children(state_file);
    }
    if !std::thread::panicking() {
        let _ = std::fs::remove_dir_all(dir);
    } else {
        eprintln!("fleet dir kept at {}", dir.display());
    }
}

/// How long a fleet's processes get to start listening.
pub const FLEET_START_TIMEOUT: Duration = Duration::from_secs(30);

/// A `recached start` fleet on free ports of 127.0.0.1 in its own temp dir (`dir/data`):
/// `engines` engines and the proxy, no fan-out and no metrics listener unless the extra
/// arguments give them ports. Waits until the proxy and every engine accept connections.
/// Drop kills the supervisor by PID, then every child PID recorded in `dir/data/state.toml`.
pub struct Fleet {
    pub sup: Proc,
    pub dir: PathBuf,
    pub proxy_port: u16,
    pub engine_ports: Vec<u16>,
    /// The `recached start` command line, for [`Fleet::restart`].
    start_args: Vec<std::ffi::OsString>,
    name: String,
}

impl Fleet {
    /// `name` names the temp dir and the process log; `config` is written to
    /// `dir/recached.toml` and passed with `--config`; `extra` are more `start` arguments.
    pub fn start_with(name: &str, engines: usize, config: Option<&str>, extra: &[&str]) -> Fleet {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("fleetdir-{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let base = free_port_run(engines);
        let engine_ports: Vec<u16> = (0..engines).map(|i| base + i as u16).collect();
        let proxy_port = free_port_except(&engine_ports);
        let mut cmd = Command::new(recached_bin());
        cmd.arg("start")
            .args(["--engines", &engines.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--proxy-port", &proxy_port.to_string()])
            .args(["--engine-port-base", &base.to_string()]);
        if !extra.contains(&"--fanout-port") {
            cmd.args(["--fanout-port", "0"]);
        }
        if !extra.contains(&"--metrics-port") {
            cmd.args(["--metrics-port", "0"]);
        }
        cmd.args(extra)
            .arg("--dir")
            .arg(dir.join("data"))
            .env("RUST_LOG", "info");
        if let Some(text) = config {
            let path = dir.join("recached.toml");
            std::fs::write(&path, text).unwrap();
            cmd.arg("--config").arg(path);
        }
        let start_args = cmd.get_args().map(|a| a.to_os_string()).collect();
        let sup = Proc::spawn(&format!("fleet-{name}"), cmd);
        let mut fleet = Fleet {
            sup,
            dir,
            proxy_port,
            engine_ports,
            start_args,
            name: name.to_string(),
        };
        fleet.wait_ready();
        fleet
    }

    fn wait_ready(&mut self) {
        self.sup.wait_port(self.proxy_port, FLEET_START_TIMEOUT);
        for &p in &self.engine_ports {
            self.sup.wait_port(p, FLEET_START_TIMEOUT);
        }
        self.sup
            .wait_proxy_reaches_engines(self.proxy_port, FLEET_START_TIMEOUT);
    }

    /// `recached stop`, then the same `recached start` again (same dir, ports, config).
    pub fn restart(&mut self) {
        let out = Command::new(recached_bin())
            .args(["stop", "--dir"])
            .arg(self.dir.join("data"))
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "recached stop: {out:?}");
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.sup.is_running() {
            assert!(Instant::now() < deadline, "supervisor did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut cmd = Command::new(recached_bin());
        cmd.args(&self.start_args).env("RUST_LOG", "info");
        self.sup = Proc::spawn(&format!("fleet-{}-again", self.name), cmd);
        self.wait_ready();
    }

    /// `engines` engines and the proxy, nothing else.
    pub fn start(name: &str, engines: usize) -> Fleet {
        Fleet::start_with(name, engines, None, &[])
    }

    /// `127.0.0.1:<engine 0>,…` (the `--cluster-nodes` form).
    pub fn nodes(&self) -> String {
        self.engine_ports
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Engine `i`'s log file.
    pub fn engine_log(&self, i: usize) -> String {
        std::fs::read_to_string(self.dir.join(format!("data/logs/engine-{i}.log")))
            .unwrap_or_default()
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        teardown_fleet(&mut self.sup, &self.dir.join("data/state.toml"), &self.dir);
    }
}

/// Two `recached server` engines in cluster mode (`--cluster-nodes`, index 0 and 1) and a
/// `recached proxy` in front of them, on free ports, all accepting connections; killed by PID
/// on drop.
pub struct ClusterWithProxy {
    pub engines: Vec<Proc>,
    pub proxy: Proc,
    /// `127.0.0.1:<engine 0>,127.0.0.1:<engine 1>` (the `--cluster-nodes` / `--engines` value).
    pub nodes: String,
    pub proxy_port: u16,
}

/// A 2-engine cluster fleet behind a proxy whose slots a test moves by hand, with raw
/// commands as `redis-cli --cluster reshard` sends them (tests/tests/tx_slot_moves.rs,
/// blocking_slot_moves.rs; each adds its own steps in an `impl Moving` of its own).
pub struct Moving {
    pub fleet: ClusterWithProxy,
    pub ports: Vec<u16>,
    pub ids: Vec<String>,
}

impl Moving {
    pub fn start() -> Moving {
        let fleet = ClusterWithProxy::start();
        let (ports, ids) = (fleet.engine_ports(), fleet.node_ids());
        Moving { fleet, ports, ids }
    }

    /// Gives `slot` to engine 1 on both engines (`CLUSTER SETSLOT … NODE`), the destination
    /// first, as `redis-cli --cluster reshard` does.
    pub fn give_to_engine1(&self, slot: &str) {
        for p in [self.ports[1], self.ports[0]] {
            assert_ok(
                &mut Resp::connect(p),
                &["CLUSTER", "SETSLOT", slot, "NODE", &self.ids[1]],
            );
        }
    }
}

/// Sends `args` and asserts the reply is `+OK`.
pub fn assert_ok(c: &mut Resp, args: &[&str]) {
    assert_eq!(escape(&c.cmd_str(args)), "+OK\\r\\n", "{args:?}");
}

impl ClusterWithProxy {
    /// The engines' ports, in instance order.
    pub fn engine_ports(&self) -> Vec<u16> {
        self.nodes
            .split(',')
            .map(|n| n.rsplit(':').next().unwrap().parse().unwrap())
            .collect()
    }

    /// The engines' cluster node ids, in instance order.
    pub fn node_ids(&self) -> Vec<String> {
        self.nodes
            .split(',')
            .map(engine_core::cmd::cluster::node_id)
            .collect()
    }

    pub fn start() -> ClusterWithProxy {
        let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let nodes = format!("127.0.0.1:{},127.0.0.1:{}", ports[0], ports[1]);
        let mut engines = Vec::new();
        for (i, &p) in ports[..2].iter().enumerate() {
            let mut cmd = Command::new(recached_bin());
            cmd.args(["server", "--port", &p.to_string(), "--bind", "127.0.0.1"])
                .args(["--cluster-nodes", &nodes, "--cluster-index", &i.to_string()]);
            engines.push(Proc::spawn(&format!("engine-{p}"), cmd));
        }
        for (e, &p) in engines.iter_mut().zip(&ports) {
            e.wait_port(p, START_TIMEOUT);
        }
        let mut cmd = Command::new(recached_bin());
        cmd.args([
            "proxy",
            "--port",
            &ports[2].to_string(),
            "--backends",
            &nodes,
        ]);
        let mut proxy = Proc::spawn("proxy", cmd);
        proxy.wait_port(ports[2], START_TIMEOUT);
        ClusterWithProxy {
            engines,
            proxy,
            nodes,
            proxy_port: ports[2],
        }
    }
}

/// `recached stop --dir DIR`, which must succeed; then waits (at most 20 s) for the
/// supervisor `sup` to exit, and keeps its log as `DIR/logs/supervisor-run.log` (the engines'
/// logs are already in `DIR/logs`).
pub fn stop_fleet_and_wait(dir: &Path, mut sup: Proc) {
    let out = Command::new(recached_bin())
        .args(["stop", "--dir"])
        .arg(dir)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "recached stop: {out:?}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while sup.is_running() {
        assert!(
            Instant::now() < deadline,
            "supervisor did not exit:\n{}",
            sup.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = std::fs::copy(&sup.log_path, dir.join("logs/supervisor-run.log"));
}

/// Two key names, `<prefix>:a` and another `<prefix>:b<i>`, whose slots belong to different
/// engines of a 2-engine fleet.
#[allow(dead_code)]
pub fn keys_on_two_engines(prefix: &str) -> (String, String) {
    let owner = |k: &str| engine_core::slot::instance_for_key(k.as_bytes(), 2);
    let a = format!("{prefix}:a");
    let b = (0..1000)
        .map(|i| format!("{prefix}:b{i}"))
        .find(|k| owner(k) != owner(&a))
        .expect("a key on the other engine");
    (a, b)
}

/// `blocked_clients` of INFO clients (summed over the engines when asked through the proxy).
#[allow(dead_code)]
pub fn blocked_clients(c: &mut Resp) -> u64 {
    let info = String::from_utf8_lossy(&c.cmd_str(&["INFO", "clients"])).into_owned();
    info.lines()
        .filter_map(|l| l.strip_prefix("blocked_clients:"))
        .map(|v| v.trim().parse::<u64>().unwrap_or(0))
        .sum()
}

/// A real memcached (`-t 2`) on a free port, killed by PID on drop (`-u root` is only read
/// when running as root).
#[allow(dead_code)]
pub fn start_memcached() -> (Proc, u16) {
    let port = free_port();
    let mut cmd = Command::new("memcached");
    cmd.args([
        "-p",
        &port.to_string(),
        "-l",
        "127.0.0.1",
        "-U",
        "0",
        "-t",
        "2",
    ])
    .args(["-u", "root"]);
    let mut p = Proc::spawn("memcached", cmd);
    p.wait_port(port, Duration::from_secs(10));
    (p, port)
}
