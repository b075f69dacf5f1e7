//! The memcached port while slots move (docs/memcached.md, "Slots that move"): the port
//! follows `-MOVED`/`-ASK`/`-TRYAGAIN` and learns nodes, so memcached clients see no error.
//!
//! - `redis-cli --cluster reshard` of 2000 slots from engine 0 to engine 1 of a 2-engine
//!   `recached start` fleet with `memcached_port`;
//! - `recached resize 3` then `resize 2` (an engine added on a new port, then retired);
//!
//! each under a client doing memcached `set`/`get`/`gets`+`cas`/`incr`/multi-key `get` on a
//! raw socket the whole time (zero error lines), after items were set with flags (some with
//! an exptime); afterwards every item reads back over memcached with its value and flags, and
//! over RESP through the proxy.

mod common;

use common::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const ITEMS: usize = 2000;

/// A raw memcached text-protocol connection.
struct Mc {
    w: TcpStream,
    r: BufReader<TcpStream>,
}

impl Mc {
    fn connect(port: u16) -> Mc {
        let s = TcpStream::connect(("127.0.0.1", port)).expect("connect to the memcached port");
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        s.set_nodelay(true).unwrap();
        Mc {
            w: s.try_clone().unwrap(),
            r: BufReader::new(s),
        }
    }

    fn send(&mut self, bytes: &[u8]) {
        self.w
            .write_all(bytes)
            .expect("write to the memcached port");
    }

    fn line(&mut self) -> String {
        let mut l = String::new();
        self.r.read_line(&mut l).expect("read a reply line");
        assert!(l.ends_with("\r\n"), "truncated reply line {l:?}");
        l.truncate(l.len() - 2);
        l
    }

    fn cmd(&mut self, bytes: &[u8]) -> String {
        self.send(bytes);
        self.line()
    }

    fn set(&mut self, key: &str, flags: u32, exp: u32, value: &str) -> String {
        self.cmd(format!("set {key} {flags} {exp} {}\r\n{value}\r\n", value.len()).as_bytes())
    }

    /// The reply to a `get`/`gets` already sent: (key, flags, value, cas) per hit, then
    /// `END`; `Err` with the line if something else came.
    fn values(&mut self) -> Result<Vec<(String, u32, String, u64)>, String> {
        let mut out = Vec::new();
        loop {
            let l = self.line();
            if l == "END" {
                return Ok(out);
            }
            let f: Vec<&str> = l.split(' ').collect();
            if f.len() < 4 || f[0] != "VALUE" {
                return Err(l);
            }
            let len: usize = f[3].parse().map_err(|_| l.clone())?;
            let mut data = vec![0; len + 2];
            self.r.read_exact(&mut data).expect("read a value");
            data.truncate(len);
            out.push((
                f[1].to_string(),
                f[2].parse().map_err(|_| l.clone())?,
                String::from_utf8(data).map_err(|_| l.clone())?,
                f.get(4).and_then(|c| c.parse().ok()).unwrap_or(0),
            ));
        }
    }
}

fn item(i: usize) -> (String, u32, String) {
    (
        format!("item:{i}"),
        i as u32 * 7,
        format!("value-{i}-{}", "x".repeat(i % 50)),
    )
}

fn wait_memcached(port: u16) {
    let deadline = Instant::now() + FLEET_START_TIMEOUT;
    loop {
        if let Ok(s) = TcpStream::connect(("127.0.0.1", port)) {
            drop(s);
            let mut mc = Mc::connect(port);
            if mc.set("warm", 0, 0, "x") == "STORED" {
                return;
            }
        }
        assert!(Instant::now() < deadline, "memcached port {port} not ready");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Sets the items (flags; every fifth with a one-hour exptime), pipelined.
fn seed(port: u16) {
    let mut mc = Mc::connect(port);
    let mut batch = Vec::new();
    for i in 0..ITEMS {
        let (k, flags, v) = item(i);
        let exp = if i % 5 == 0 { 3600 } else { 0 };
        batch.extend_from_slice(format!("set {k} {flags} {exp} {}\r\n{v}\r\n", v.len()).as_bytes());
    }
    mc.send(&batch);
    for i in 0..ITEMS {
        assert_eq!(mc.line(), "STORED", "seeding item {i}");
    }
}

/// Every item reads back over memcached (multi-key gets of 50, in key order) with its value
/// and flags, and over RESP through the proxy.
fn check_items(mc_port: u16, resp_port: u16, when: &str) {
    let mut mc = Mc::connect(mc_port);
    for chunk in (0..ITEMS).collect::<Vec<_>>().chunks(50) {
        let keys: Vec<String> = chunk.iter().map(|&i| item(i).0).collect();
        mc.send(format!("get {}\r\n", keys.join(" ")).as_bytes());
        let got = mc
            .values()
            .unwrap_or_else(|l| panic!("{when}: get answered {l:?}"));
        let want: Vec<(String, u32, String)> = chunk.iter().map(|&i| item(i)).collect();
        let got: Vec<(String, u32, String)> =
            got.into_iter().map(|(k, f, v, _)| (k, f, v)).collect();
        assert_eq!(got, want, "{when}: items over memcached");
    }
    let mut resp = Resp::connect(resp_port);
    for i in 0..ITEMS {
        let (k, _, v) = item(i);
        assert_eq!(
            resp.cmd_str(&["GET", &k]),
            format!("${}\r\n{v}\r\n", v.len()).into_bytes(),
            "{when}: {k} over RESP"
        );
    }
}

/// The load: one raw connection doing set/get, gets+cas, incr and a multi-key get of seeded
/// items, each reply checked, until `stop`. Returns (operations, error descriptions).
fn load(port: u16, stop: Arc<AtomicBool>, ops: Arc<AtomicU64>) -> Vec<String> {
    let mut mc = Mc::connect(port);
    let mut errors = Vec::new();
    let mut n = 0usize;
    assert_eq!(mc.set("load:counter", 0, 0, "0"), "STORED");
    let mut counter = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let mut bad = |what: String| {
            if errors.len() < 20 {
                errors.push(what);
            }
        };
        let key = format!("load:{}", n % 500);
        let value = format!("v{n}");
        let flags = (n % 1000) as u32;
        let r = mc.set(
            &key,
            flags,
            if n.is_multiple_of(3) { 3600 } else { 0 },
            &value,
        );
        if r != "STORED" {
            bad(format!("set {key}: {r}"));
        }
        mc.send(format!("gets {key}\r\n").as_bytes());
        match mc.values() {
            Ok(v) if v.len() == 1 && v[0].1 == flags && v[0].2 == value => {
                let cas = v[0].3;
                let next = format!("c{n}");
                let r = mc.cmd(
                    format!("cas {key} {flags} 0 {} {cas}\r\n{next}\r\n", next.len()).as_bytes(),
                );
                if r != "STORED" {
                    bad(format!("cas {key}: {r}"));
                }
                mc.send(format!("get {key}\r\n").as_bytes());
                match mc.values() {
                    Ok(v) if v.len() == 1 && v[0].2 == next => {}
                    other => bad(format!("get {key} after cas: {other:?}")),
                }
            }
            other => bad(format!("gets {key}: {other:?}")),
        }
        let r = mc.cmd(b"incr load:counter 1\r\n");
        counter += 1;
        if r != counter.to_string() {
            bad(format!("incr: {r} (want {counter})"));
        }
        let picks: Vec<usize> = (0..5).map(|j| (n * 37 + j * 401) % ITEMS).collect();
        let keys: Vec<String> = picks.iter().map(|&i| item(i).0).collect();
        mc.send(format!("get {}\r\n", keys.join(" ")).as_bytes());
        match mc.values() {
            Ok(v) => {
                let got: Vec<(String, u32, String)> =
                    v.into_iter().map(|(k, f, v, _)| (k, f, v)).collect();
                let want: Vec<(String, u32, String)> = picks.iter().map(|&i| item(i)).collect();
                if got != want {
                    bad(format!("multi-get {keys:?}: {got:?}"));
                }
            }
            Err(l) => bad(format!("multi-get: {l}")),
        }
        n += 1;
        ops.fetch_add(6, Ordering::Relaxed);
    }
    errors
}

/// Runs `work` while the load runs; asserts the load saw no error and did some work.
fn under_load(mc_port: u16, what: &str, work: impl FnOnce()) {
    let stop = Arc::new(AtomicBool::new(false));
    let ops = Arc::new(AtomicU64::new(0));
    let handle = {
        let (stop, ops) = (stop.clone(), ops.clone());
        std::thread::spawn(move || load(mc_port, stop, ops))
    };
    std::thread::sleep(Duration::from_millis(200));
    work();
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    let errors = handle.join().expect("load thread");
    let ops = ops.load(Ordering::Relaxed);
    eprintln!("{what}: {ops} memcached operations under load");
    assert!(errors.is_empty(), "{what}: errors under load: {errors:#?}");
    assert!(ops > 100, "{what}: the load made no progress ({ops})");
}

#[test]
fn reshard_under_memcached_load() {
    let mc_port = free_port();
    let mc = mc_port.to_string();
    let fleet = Fleet::start_with("mcslots", 2, None, &["--memcached-port", &mc]);
    wait_memcached(mc_port);
    seed(mc_port);
    let ports = fleet.engine_ports.clone();
    let ids: Vec<String> = ports
        .iter()
        .map(|&p| redis_cli(p, &["CLUSTER", "MYID"]).trim().to_string())
        .collect();
    under_load(mc_port, "reshard", || {
        let out = run_cmd(
            Command::new("redis-cli").args([
                "--cluster",
                "reshard",
                &format!("127.0.0.1:{}", ports[0]),
                "--cluster-from",
                &ids[0],
                "--cluster-to",
                &ids[1],
                "--cluster-slots",
                "2000",
                "--cluster-yes",
            ]),
            Duration::from_secs(240),
        );
        assert!(out.ok, "reshard:\n{}", out.text());
    });
    check_items(mc_port, fleet.proxy_port, "after the reshard");
}

/// A `recached start` fleet with a config (engine ports base.., the proxy, the memcached
/// port), resized with `recached resize`.
struct ResizeFleet {
    sup: Option<Proc>,
    dir: PathBuf,
    proxy_port: u16,
    mc_port: u16,
}

impl ResizeFleet {
    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn resize(&self, n: usize) {
        let out = run_cmd(
            Command::new(recached_bin())
                .args(["resize", &n.to_string(), "--dir"])
                .arg(self.data())
                .env("RUST_LOG", "info"),
            Duration::from_secs(240),
        );
        assert!(out.ok, "resize {n}:\n{}", out.text());
    }
}

impl Drop for ResizeFleet {
    fn drop(&mut self) {
        if let Some(mut sup) = self.sup.take() {
            teardown_fleet(&mut sup, &self.data().join("state.toml"), &self.dir);
        }
    }
}

#[test]
fn resize_under_memcached_load() {
    const MAX_ENGINES: u16 = 3;
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("mcslots-resize-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let base = free_port_run(MAX_ENGINES as usize + 2);
    let (proxy_port, mc_port) = (base + MAX_ENGINES, base + MAX_ENGINES + 1);
    let config = dir.join("recached.toml");
    std::fs::write(
        &config,
        format!(
            "bind = \"127.0.0.1\"\nproxy_port = {proxy_port}\nengine_port_base = {base}\n\
             dir = \"{}\"\nfanout_port = 0\nmetrics_port = 0\nmemcached_port = {mc_port}\n",
            dir.join("data").display()
        ),
    )
    .unwrap();
    let mut cmd = Command::new(recached_bin());
    cmd.arg("start")
        .arg("--config")
        .arg(&config)
        .args(["--engines", "2"])
        .env("RUST_LOG", "info");
    let mut sup = Proc::spawn("mcslots-resize", cmd);
    for i in 0..2 {
        sup.wait_port(base + i, FLEET_START_TIMEOUT);
    }
    sup.wait_port(proxy_port, FLEET_START_TIMEOUT);
    sup.wait_proxy_reaches_engines(proxy_port, FLEET_START_TIMEOUT);
    let fleet = ResizeFleet {
        sup: Some(sup),
        dir,
        proxy_port,
        mc_port,
    };
    wait_memcached(mc_port);
    seed(mc_port);
    under_load(mc_port, "resize 3", || fleet.resize(3));
    check_items(mc_port, fleet.proxy_port, "after resize 3");
    under_load(mc_port, "resize 2", || {
        fleet.resize(2);
        // The retired engine answers -MOVED for a while, then stops: keep the load on past it.
        std::thread::sleep(Duration::from_secs(4));
    });
    check_items(fleet.mc_port, fleet.proxy_port, "after resize 2");
}
