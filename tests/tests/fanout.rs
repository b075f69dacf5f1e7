//! The WebSocket fan-out (`recached fanout`) against real engines (issue 5): two engines in
//! cluster mode, the proxy in front, the fan-out following both feeds; WebSocket clients
//! speak the browser protocol (docs/browser-protocol.md) and apply what they get to the
//! replica (`recached_wasm::Replica`, the code the wasm module runs), which is compared with
//! the server's values read through the proxy.
//!
//! - snapshot then keychanges, per instance in order, every data type and TTLs;
//! - resume from the ring after a reconnect (no refetch), refetch when the run is unknown;
//! - a slow browser (tiny `--queue-bytes`, not reading) is resynced alone and converges;
//! - tokens: a `public:` token never receives `private:` keys, whatever it asks for;
//!   unknown/missing tokens are refused; without tokens a foreign Origin gets 403;
//! - bad input (malformed JSON, binary, oversized, invalid UTF-8 frames, unknown types, HTTP
//!   garbage) gets an error or a close and the fan-out keeps serving;
//! - 1,000 browsers connecting and dropping (some mid-handshake, some mid-snapshot);
//! - no browser, no feed: the engines compute no effect until a browser subscribes, and again
//!   once the last one left; a browser resuming after changes made meanwhile refetches, one
//!   resuming when nothing changed is replayed from the ring;
//! - databases: a browser subscribed with `db: 1` replicates database 1 only (snapshot,
//!   keychanges, MOVE, SWAPDB, FLUSHDB, a resume), one without `db` database 0 only.
//!
//! Every wait is bounded; processes are killed by PID on drop ([`Proc`]).

mod common;

use common::*;
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use recached_wasm::Replica;
use tungstenite::{Message, WebSocket};

/// Two engines, a proxy and a fan-out on free ports.
struct Fleet {
    _cluster: ClusterWithProxy,
    fanout: Proc,
    proxy_port: u16,
    fanout_port: u16,
    /// The engines' ports, in instance order.
    engine_ports: Vec<u16>,
}

impl Fleet {
    fn start(extra: &[&str]) -> Fleet {
        let cluster = ClusterWithProxy::start();
        let fanout_port = free_port();
        let mut cmd = Command::new(recached_bin());
        cmd.args(["fanout", "--port", &fanout_port.to_string()])
            .args(["--engines", &cluster.nodes]);
        if !extra.contains(&"--heartbeat-ms") {
            cmd.args(["--heartbeat-ms", "5000"]);
        }
        cmd.args(extra);
        let mut fanout = Proc::spawn("fanout", cmd);
        fanout.wait_port(fanout_port, START_TIMEOUT);
        let engine_ports = cluster
            .nodes
            .split(',')
            .map(|n| n.rsplit(':').next().unwrap().parse().unwrap())
            .collect();
        Fleet {
            proxy_port: cluster.proxy_port,
            engine_ports,
            _cluster: cluster,
            fanout,
            fanout_port,
        }
    }

    fn cli(&self, args: &[&str]) -> String {
        redis_cli(self.proxy_port, args)
    }

    fn alive(&mut self) -> bool {
        self.fanout.is_running()
            && Ws::try_connect(self.fanout_port, None)
                .map(|mut w| w.recv(Duration::from_secs(5))["type"] == "hello")
                .unwrap_or(false)
    }
}

/// A blocking WebSocket client with a read timeout.
struct Ws {
    ws: WebSocket<TcpStream>,
}

impl Ws {
    fn try_connect(port: u16, origin: Option<&str>) -> Result<Ws, String> {
        let stream = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
        Ws::over(stream, port, origin)
    }

    fn over(stream: TcpStream, port: u16, origin: Option<&str>) -> Result<Ws, String> {
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .map_err(|e| e.to_string())?;
        let mut req = tungstenite::client::IntoClientRequest::into_client_request(format!(
            "ws://127.0.0.1:{port}/ws"
        ))
        .map_err(|e| e.to_string())?;
        if let Some(o) = origin {
            req.headers_mut().insert("Origin", o.parse().unwrap());
        }
        let (ws, _) = tungstenite::client(req, stream).map_err(|e| e.to_string())?;
        Ok(Ws { ws })
    }

    fn connect(port: u16) -> Ws {
        Ws::try_connect(port, None).expect("connect to the fan-out")
    }

    fn send(&mut self, v: &Value) {
        self.ws.send(Message::text(v.to_string())).expect("send");
    }

    /// The next JSON message (pings skipped); panics after `timeout`.
    fn recv(&mut self, timeout: Duration) -> Value {
        self.try_recv(timeout).expect("a message from the fan-out")
    }

    fn try_recv(&mut self, timeout: Duration) -> Result<Value, String> {
        let deadline = Instant::now() + timeout;
        loop {
            if Instant::now() > deadline {
                return Err("timeout".into());
            }
            match self.ws.read() {
                Ok(Message::Text(t)) => {
                    return serde_json::from_str(t.as_str()).map_err(|e| e.to_string());
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
    }
}

/// Bytes of a wire value (string or `{"b64": …}`).
fn wire_bytes(v: &Value) -> Vec<u8> {
    if let Some(s) = v.as_str() {
        return s.as_bytes().to_vec();
    }
    let s = v["b64"].as_str().expect("string or {b64}");
    let val = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => (c - b'A') as u32,
            b'a'..=b'z' => (c - b'a' + 26) as u32,
            b'0'..=b'9' => (c - b'0' + 52) as u32,
            b'+' => 62,
            b'/' => 63,
            _ => 0,
        }
    };
    let mut out = Vec::new();
    for chunk in s.as_bytes().chunks(4) {
        let n = chunk.iter().fold(0u32, |n, &c| (n << 6) | val(c));
        let pad = chunk.iter().filter(|&&c| c == b'=').count();
        out.extend_from_slice(&[(n >> 16) as u8, (n >> 8) as u8, n as u8][..3 - pad]);
    }
    out
}

/// A protocol client with a native replica: what recached.js does, in Rust.
struct Client {
    ws: Ws,
    replica: Replica,
    instances: usize,
    /// Per instance: (run, seq) once up to date.
    pos: Vec<Option<(String, u64)>>,
    /// Every key that was ever delivered (entries and keychanges).
    delivered: Vec<Vec<u8>>,
    refetches: Vec<String>,
}

impl Client {
    fn subscribe(port: u16, prefixes: &[&str], token: Option<&str>) -> Client {
        let mut c = Client {
            ws: Ws::connect(port),
            replica: Replica::new(),
            instances: 0,
            pos: Vec::new(),
            delivered: Vec::new(),
            refetches: Vec::new(),
        };
        c.send_subscribe(prefixes, token, &[]);
        c
    }

    /// [`Client::subscribe`] following database `db`.
    fn subscribe_db(port: u16, prefixes: &[&str], db: u64) -> Client {
        let mut c = Client {
            ws: Ws::connect(port),
            replica: Replica::new(),
            instances: 0,
            pos: Vec::new(),
            delivered: Vec::new(),
            refetches: Vec::new(),
        };
        c.ws.send(&json!({"type": "subscribe", "prefixes": prefixes, "db": db}));
        c
    }

    fn send_subscribe(&mut self, prefixes: &[&str], token: Option<&str>, resume: &[Value]) {
        self.ws.send(
            &json!({"type": "subscribe", "prefixes": prefixes, "token": token, "resume": resume}),
        );
    }

    /// Applies one message; returns it.
    fn step(&mut self, timeout: Duration) -> Result<Value, String> {
        let m = self.ws.try_recv(timeout)?;
        let i = m["instance"].as_u64().unwrap_or(0) as usize;
        match m["type"].as_str().unwrap_or("") {
            "hello" => {
                self.instances = m["instances"].as_u64().unwrap() as usize;
                self.pos.resize(self.instances, None);
            }
            "must-refetch" => {
                self.pos[i] = None;
                self.refetches
                    .push(m["reason"].as_str().unwrap_or("").to_string());
                self.replica.drop_instance(i as u32, self.instances as u32);
            }
            "entry" | "keychange" => {
                let args: Vec<Vec<u8>> = m["args"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(wire_bytes)
                    .collect();
                if args.len() > 1 {
                    self.delivered.push(args[1].clone());
                }
                let argv: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
                self.replica
                    .apply(&argv)
                    .map_err(|e| format!("apply {m}: {e}"))?;
                if let (Some(p), Some(seq)) = (self.pos[i].as_mut(), m["seq"].as_u64()) {
                    p.1 = seq;
                }
            }
            "flush" => {
                self.replica.drop_instance(i as u32, self.instances as u32);
            }
            "up-to-date" => {
                self.pos[i] = Some((
                    m["run"].as_str().unwrap().to_string(),
                    m["seq"].as_u64().unwrap(),
                ));
            }
            _ => {}
        }
        Ok(m)
    }

    /// Applies messages until every instance is up to date (at most `timeout`).
    fn sync(&mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while self.instances == 0 || self.pos.iter().any(Option::is_none) {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "not up to date within {timeout:?}: {:?}",
                self.pos
            );
            self.step(left).unwrap();
        }
    }

    /// Applies messages until none arrives for `quiet`.
    fn drain(&mut self, quiet: Duration) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            match self.step(quiet) {
                Ok(_) => {}
                Err(e) if e == "timeout" => return,
                Err(e) => panic!("{e}"),
            }
        }
    }

    fn read(&mut self, argv: &[&str]) -> String {
        let argv: Vec<&[u8]> = argv.iter().map(|a| a.as_bytes()).collect();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        String::from_utf8_lossy(self.replica.read(&argv, now)).into_owned()
    }
}

/// A canonical text of `key` read with `get(argv)`, which answers like redis-cli --no-raw.
fn dump(get: &mut dyn FnMut(&[&str]) -> String, key: &str) -> String {
    let ty = get(&["TYPE", key]);
    let ty = ty.trim().trim_start_matches('+').to_string();
    let value = match ty.as_str() {
        "string" => get(&["GET", key]),
        "hash" => get(&["HGETALL", key]),
        "set" => {
            let mut m: Vec<String> = get(&["SMEMBERS", key])
                .lines()
                .map(str::to_string)
                .collect();
            m.sort();
            m.join("\n")
        }
        "zset" => get(&["ZRANGE", key, "0", "-1", "WITHSCORES"]),
        "list" => get(&["LRANGE", key, "0", "-1"]),
        _ => String::new(),
    };
    format!("{ty} {value} {}", get(&["PEXPIRETIME", key]).trim())
}

/// RESP reply → the lines redis-cli prints for it (bulk strings and integers, no quoting).
fn resp_lines(resp: &str) -> String {
    let mut out = Vec::new();
    let mut lines = resp.split("\r\n");
    while let Some(l) = lines.next() {
        match l.as_bytes().first() {
            Some(b'$') if l != "$-1" => out.push(lines.next().unwrap_or("").to_string()),
            Some(b'$') => out.push(String::new()),
            Some(b':') | Some(b'+') => out.push(l[1..].to_string()),
            _ => {}
        }
    }
    out.join("\n")
}

/// Every key under `prefix` on the server (via the proxy), sorted.
fn server_keys(f: &Fleet, prefix: &str) -> Vec<String> {
    let mut keys: Vec<String> = f
        .cli(&["--scan", "--pattern", &format!("{prefix}*")])
        .lines()
        .map(str::to_string)
        .filter(|k| !k.is_empty())
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

/// Asserts the replica holds exactly the server's keys under `prefix`, with equal values.
fn assert_converged(f: &Fleet, c: &mut Client, prefix: &str) {
    let keys = server_keys(f, prefix);
    let local = resp_lines(&c.read(&["KEYS", &format!("{prefix}*")]));
    let mut local: Vec<String> = local
        .lines()
        .map(str::to_string)
        .filter(|k| !k.is_empty())
        .collect();
    local.sort();
    assert_eq!(local, keys, "keys under {prefix:?}");
    for k in &keys {
        let server = dump(&mut |a: &[&str]| f.cli(a).trim_end().to_string(), k);
        let replica = dump(&mut |a: &[&str]| resp_lines(&c.read(a)), k);
        assert_eq!(replica, server, "value of {k}");
    }
}

fn write_mix(f: &Fleet, p: &str, round: usize) {
    let r = round.to_string();
    f.cli(&["SET", &format!("{p}s{round}"), &format!("v{round}")]);
    f.cli(&["SET", &format!("{p}ttl{round}"), "x", "EX", "1000"]);
    f.cli(&["INCR", &format!("{p}counter")]);
    f.cli(&["HSET", &format!("{p}h"), &format!("f{round}"), &r]);
    f.cli(&["SADD", &format!("{p}set"), &format!("m{round}")]);
    f.cli(&["ZADD", &format!("{p}z"), &r, &format!("m{round}")]);
    f.cli(&["RPUSH", &format!("{p}l"), &r]);
    if round % 3 == 2 {
        f.cli(&["SPOP", &format!("{p}set")]);
        f.cli(&["LPOP", &format!("{p}l")]);
        f.cli(&["DEL", &format!("{p}s{}", round - 1)]);
        f.cli(&["EXPIRE", &format!("{p}h"), "5000"]);
    }
}

const T: Duration = Duration::from_secs(15);

#[test]
fn snapshot_then_keychanges_converge() {
    let f = Fleet::start(&[]);
    for r in 0..5 {
        write_mix(&f, "t:", r);
        write_mix(&f, "other:", r);
    }
    let mut c = Client::subscribe(f.fanout_port, &["t:"], None);
    c.sync(T);
    assert_eq!(c.instances, 2);
    assert_converged(&f, &mut c, "t:");
    for r in 5..20 {
        write_mix(&f, "t:", r);
        write_mix(&f, "other:", r);
    }
    f.cli(&["RENAME", "t:s6", "t:renamed"]);
    f.cli(&["HINCRBYFLOAT", "t:h", "float", "1.5"]);
    c.drain(Duration::from_millis(500));
    assert_converged(&f, &mut c, "t:");
    assert!(
        c.delivered.iter().all(|k| k.starts_with(b"t:")),
        "only t: keys delivered"
    );
    assert!(
        c.refetches.iter().all(|r| r == "initial"),
        "{:?}",
        c.refetches
    );
    // GET answered by the replica equals the proxy's.
    assert_eq!(resp_lines(&c.read(&["GET", "t:counter"])), "20");
}

/// `redis-cli -n db …` through the proxy.
fn cli_db(f: &Fleet, db: u64, args: &[&str]) -> String {
    let n = db.to_string();
    let mut a = vec!["-n", n.as_str()];
    a.extend_from_slice(args);
    f.cli(&a)
}

/// Both browsers converged: `c1` to database 1, `c0` to database 0. Each is pinged first: a
/// browser not read while the other is checked (hundreds of redis-cli runs) must not look
/// silent to the fan-out.
fn assert_both_converged(f: &Fleet, c1: &mut Client, c0: &mut Client, prefix: &str) {
    for c in [&mut *c1, &mut *c0] {
        c.ws.send(&json!({"type": "ping"}));
    }
    assert_converged_db(f, c1, prefix, 1);
    c0.ws.send(&json!({"type": "ping"}));
    assert_converged_db(f, c0, prefix, 0);
}

/// [`assert_converged`] against database `db` of the server.
fn assert_converged_db(f: &Fleet, c: &mut Client, prefix: &str, db: u64) {
    let mut keys: Vec<String> = cli_db(f, db, &["--scan", "--pattern", &format!("{prefix}*")])
        .lines()
        .map(str::to_string)
        .filter(|k| !k.is_empty())
        .collect();
    keys.sort();
    keys.dedup();
    let local = resp_lines(&c.read(&["KEYS", &format!("{prefix}*")]));
    let mut local: Vec<String> = local
        .lines()
        .map(str::to_string)
        .filter(|k| !k.is_empty())
        .collect();
    local.sort();
    assert_eq!(local, keys, "keys under {prefix:?} in database {db}");
    for k in &keys {
        let server = dump(&mut |a: &[&str]| cli_db(f, db, a).trim_end().to_string(), k);
        let replica = dump(&mut |a: &[&str]| resp_lines(&c.read(a)), k);
        assert_eq!(replica, server, "value of {k} in database {db}");
    }
}

#[test]
fn a_browser_follows_the_database_it_names() {
    // Each browser is read only while the test checks it; checking the other one runs
    // hundreds of redis-cli processes, which took over 12.5 s (2.5 heartbeats of 5 s) in a
    // loaded CI run: the fan-out closed the unread browser as silent (a broken pipe at its
    // next read). A 30 s heartbeat leaves 75 s.
    let f = Fleet::start(&["--heartbeat-ms", "30000"]);
    for r in 0..3 {
        write_mix(&f, "d:", r);
    }
    cli_db(&f, 1, &["SET", "d:only1", "one"]);
    cli_db(&f, 1, &["HSET", "d:h", "db", "1"]);
    let mut c1 = Client::subscribe_db(f.fanout_port, &["d:"], 1);
    let mut c0 = Client::subscribe(f.fanout_port, &["d:"], None);
    // `subscribed` names the database.
    let m = loop {
        let m = c1.step(T).unwrap();
        if m["type"] == "subscribed" {
            break m;
        }
    };
    assert_eq!(m["db"], 1, "{m}");
    c1.sync(T);
    c0.sync(T);
    assert_eq!(resp_lines(&c1.read(&["GET", "d:only1"])), "one");
    assert_eq!(resp_lines(&c1.read(&["HGET", "d:h", "db"])), "1");
    assert_eq!(resp_lines(&c1.read(&["EXISTS", "d:counter"])), "0");
    assert_eq!(resp_lines(&c0.read(&["EXISTS", "d:only1"])), "0");
    assert_eq!(resp_lines(&c0.read(&["GET", "d:counter"])), "3");
    assert_both_converged(&f, &mut c1, &mut c0, "d:");
    // Keychanges: each browser gets its own database's only.
    let (seen1, seen0) = (c1.delivered.len(), c0.delivered.len());
    for r in 0..4 {
        cli_db(&f, 1, &["SET", &format!("d:one{r}"), "1"]);
        cli_db(&f, 1, &["ZADD", "d:z1", &r.to_string(), &format!("m{r}")]);
    }
    c0.drain(Duration::from_millis(300));
    assert_eq!(
        c0.delivered.len(),
        seen0,
        "nothing of database 1 reaches the default browser"
    );
    for r in 3..6 {
        write_mix(&f, "d:", r);
    }
    c1.drain(Duration::from_millis(300));
    c0.drain(Duration::from_millis(300));
    assert_eq!(
        c1.delivered.len(),
        seen1 + 8,
        "database 1's 8 keychanges, none of database 0's"
    );
    assert!(
        c1.delivered[seen1..]
            .iter()
            .all(|k| k.starts_with(b"d:one") || k == b"d:z1")
    );
    assert_both_converged(&f, &mut c1, &mut c0, "d:");
    // Crossing databases: MOVE out of 1 into 0, COPY … DB 1 (same name: one slot), then
    // SWAPDB 0 1 and FLUSHDB.
    assert_eq!(cli_db(&f, 1, &["MOVE", "d:only1", "0"]).trim(), "1");
    assert_eq!(
        cli_db(&f, 0, &["COPY", "d:counter", "d:counter", "DB", "1"]).trim(),
        "1"
    );
    c1.drain(Duration::from_millis(300));
    c0.drain(Duration::from_millis(300));
    assert_eq!(resp_lines(&c1.read(&["EXISTS", "d:only1"])), "0");
    assert_eq!(resp_lines(&c0.read(&["GET", "d:only1"])), "one");
    assert_eq!(resp_lines(&c1.read(&["GET", "d:counter"])), "6");
    assert_both_converged(&f, &mut c1, &mut c0, "d:");
    assert_eq!(f.cli(&["SWAPDB", "0", "1"]).trim(), "OK");
    c1.drain(Duration::from_millis(300));
    c0.drain(Duration::from_millis(300));
    assert_eq!(resp_lines(&c1.read(&["GET", "d:only1"])), "one");
    assert_eq!(resp_lines(&c0.read(&["GET", "d:counter"])), "6");
    assert_both_converged(&f, &mut c1, &mut c0, "d:");
    // A reconnect of the database-1 browser resumes from the ring (positions are per engine).
    let pos = c1.pos.clone();
    drop(std::mem::replace(&mut c1.ws, Ws::connect(f.fanout_port)));
    cli_db(&f, 1, &["SET", "d:while-away", "x"]);
    f.cli(&["SET", "d:zero-while-away", "x"]);
    std::thread::sleep(Duration::from_millis(100));
    let resume: Vec<Value> = pos
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let (run, seq) = p.clone().unwrap();
            json!({"instance": i, "run": run, "seq": seq})
        })
        .collect();
    c1.refetches.clear();
    c1.pos = vec![None; 2];
    c1.ws
        .send(&json!({"type": "subscribe", "prefixes": ["d:"], "db": 1, "resume": resume}));
    c1.sync(T);
    c1.drain(Duration::from_millis(300));
    assert!(c1.refetches.is_empty(), "{:?}", c1.refetches);
    c0.drain(Duration::from_millis(300));
    assert_eq!(resp_lines(&c0.read(&["GET", "d:zero-while-away"])), "x");
    assert_eq!(resp_lines(&c1.read(&["GET", "d:while-away"])), "x");
    assert_eq!(resp_lines(&c1.read(&["EXISTS", "d:zero-while-away"])), "0");
    assert_both_converged(&f, &mut c1, &mut c0, "d:");
    // FLUSHDB on database 1 empties the database-1 browser only.
    cli_db(&f, 1, &["FLUSHDB"]);
    c1.drain(Duration::from_millis(300));
    c0.drain(Duration::from_millis(300));
    assert_eq!(resp_lines(&c1.read(&["DBSIZE"])), "0");
    c0.ws.send(&json!({"type": "ping"}));
    assert_converged_db(&f, &mut c0, "d:", 0);
    assert!(resp_lines(&c0.read(&["DBSIZE"])).parse::<u64>().unwrap() > 5);
    assert!(
        c0.refetches.iter().all(|r| r == "initial"),
        "{:?}",
        c0.refetches
    );
}

#[test]
fn reconnect_resumes_from_the_ring_else_refetches() {
    let f = Fleet::start(&[]);
    write_mix(&f, "r:", 0);
    let mut c = Client::subscribe(f.fanout_port, &["r:"], None);
    c.sync(T);
    // Disconnect, miss some writes, reconnect with the positions: replayed, no refetch.
    let pos = c.pos.clone();
    drop(std::mem::replace(&mut c.ws, Ws::connect(f.fanout_port)));
    for r in 1..6 {
        write_mix(&f, "r:", r);
    }
    std::thread::sleep(Duration::from_millis(100));
    let resume: Vec<Value> = pos
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let (run, seq) = p.clone().unwrap();
            json!({"instance": i, "run": run, "seq": seq})
        })
        .collect();
    c.refetches.clear();
    c.pos = vec![None; 2];
    c.send_subscribe(&["r:"], None, &resume);
    c.sync(T);
    c.drain(Duration::from_millis(300));
    assert!(
        c.refetches.is_empty(),
        "resumed without refetch: {:?}",
        c.refetches
    );
    assert_converged(&f, &mut c, "r:");

    // An unknown run id: must-refetch and a fresh snapshot.
    drop(std::mem::replace(&mut c.ws, Ws::connect(f.fanout_port)));
    write_mix(&f, "r:", 7);
    c.pos = vec![None; 2];
    c.send_subscribe(
        &["r:"],
        None,
        &[json!({"instance": 0, "run": "nope", "seq": 1})],
    );
    c.sync(T);
    assert!(
        c.refetches.iter().any(|r| r == "cannot-resume"),
        "{:?}",
        c.refetches
    );
    assert_converged(&f, &mut c, "r:");
}

#[test]
fn slow_browser_is_resynced_alone() {
    let f = Fleet::start(&["--queue-bytes", "1000000"]);
    // A tiny receive buffer, so the kernel cannot absorb what the slow one does not read.
    let ws = Ws::over(connect_small(f.fanout_port, 4096), f.fanout_port, None).unwrap();
    let mut slow = Client::subscribe(f.fanout_port, &["q:"], None);
    slow.ws = ws;
    slow.send_subscribe(&["q:"], None, &[]);
    slow.sync(T);
    // The fast one reads all along, in its own (scoped) thread, and checks itself there once
    // the writes are done: a replica `Client` holds an engine, which is not `Send` (the script
    // host it may carry is single-threaded).
    let port = f.fanout_port;
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|scope| {
        let f = &f;
        let fast = scope.spawn(move || {
            let mut fast = Client::subscribe(port, &["q:"], None);
            fast.sync(T);
            fast.drain(Duration::from_millis(2000));
            done_rx
                .recv_timeout(Duration::from_secs(120))
                .expect("the writes finish");
            assert!(
                fast.refetches.iter().all(|r| r == "initial"),
                "fast: {:?}",
                fast.refetches
            );
            assert_converged(f, &mut fast, "q:");
        });
        std::thread::sleep(Duration::from_millis(300));
        // ~6 MB of keychanges while the slow one does not read.
        let big = "x".repeat(2000);
        let mut pipe = Vec::new();
        let n = 3000;
        for i in 0..n {
            let key = format!("q:{}", i % 50);
            pipe.extend(
                format!(
                    "*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n${}\r\n{big}\r\n",
                    key.len(),
                    big.len()
                )
                .bytes(),
            );
        }
        let mut s = TcpStream::connect(("127.0.0.1", f.proxy_port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let writer = {
            let mut s = s.try_clone().unwrap();
            // In batches, so a reader that keeps up stays well inside its 1 MB budget.
            std::thread::spawn(move || {
                for chunk in pipe.chunks(pipe.len() / 15 + 1) {
                    s.write_all(chunk).unwrap();
                    std::thread::sleep(Duration::from_millis(100));
                }
            })
        };
        let mut got = 0;
        let mut buf = [0u8; 8192];
        while got < n * 5 {
            let r = s.read(&mut buf).unwrap();
            assert!(r > 0);
            got += r;
        }
        writer.join().unwrap();
        done_tx.send(()).unwrap();
        fast.join().unwrap();
    });
    slow.drain(Duration::from_millis(1500));
    assert!(
        slow.refetches.iter().any(|r| r == "slow-consumer"),
        "slow: {:?}",
        slow.refetches
    );
    assert_converged(&f, &mut slow, "q:");
}

#[test]
fn tokens_limit_what_a_browser_sees() {
    let dir = std::env::temp_dir().join(format!("fanout-tokens-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tokens = dir.join("tokens.toml");
    std::fs::write(
        &tokens,
        "[tokens]\n\"pub-token\" = [\"public:\"]\n\"all-token\" = [\"\"]\n",
    )
    .unwrap();
    let f = Fleet::start(&["--tokens", tokens.to_str().unwrap()]);
    for r in 0..4 {
        write_mix(&f, "public:", r);
        write_mix(&f, "private:", r);
    }
    for ask in [&[""][..], &["*"], &["private:", "public:"], &["p"]] {
        let mut c = Client::subscribe(f.fanout_port, ask, Some("pub-token"));
        c.sync(T);
        for r in 4..6 {
            write_mix(&f, "private:", r);
            write_mix(&f, "public:", r);
        }
        c.drain(Duration::from_millis(300));
        assert!(!c.delivered.is_empty());
        assert!(
            c.delivered.iter().all(|k| k.starts_with(b"public:")),
            "asked {ask:?}: a non-public key was delivered"
        );
        assert_converged(&f, &mut c, "public:");
    }
    // A token that asks for nothing it may see gets nothing, but is up to date.
    let mut c = Client::subscribe(f.fanout_port, &["private:"], Some("pub-token"));
    c.sync(T);
    write_mix(&f, "private:", 9);
    c.drain(Duration::from_millis(300));
    assert!(c.delivered.is_empty());
    // Unknown or missing token: error and close.
    for token in [Some("wrong"), None] {
        let mut w = Ws::connect(f.fanout_port);
        w.send(&json!({"type": "subscribe", "prefixes": [""], "token": token}));
        let mut saw_error = false;
        loop {
            match w.try_recv(T) {
                Ok(m) if m["type"] == "error" => saw_error = true,
                Ok(m) => assert!(m["type"] == "hello", "{m}"),
                Err(_) => break,
            }
        }
        assert!(saw_error, "token {token:?} refused with an error");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn without_tokens_only_loopback_origins() {
    let mut f = Fleet::start(&[]);
    let err = Ws::try_connect(f.fanout_port, Some("http://evil.example"))
        .err()
        .unwrap();
    assert!(err.contains("403"), "{err}");
    assert!(Ws::try_connect(f.fanout_port, Some("http://localhost:3000")).is_ok());
    assert!(Ws::try_connect(f.fanout_port, Some("http://127.0.0.1:1")).is_ok());
    assert!(f.alive());
}

/// A client frame with the mask bit set (RFC 6455 §5.2), built by hand so it can be invalid.
fn raw_frame(opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0x80 | opcode];
    let n = payload.len();
    if n < 126 {
        f.push(0x80 | n as u8);
    } else if n < 65536 {
        f.push(0x80 | 126);
        f.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        f.push(0x80 | 127);
        f.extend_from_slice(&(n as u64).to_be_bytes());
    }
    let mask = [1u8, 2, 3, 4];
    f.extend_from_slice(&mask);
    f.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    f
}

#[test]
fn bad_input_gets_an_error_or_a_close_never_a_crash() {
    let mut f = Fleet::start(&[]);
    // Messages the protocol refuses but the connection survives.
    let mut w = Ws::connect(f.fanout_port);
    assert_eq!(w.recv(T)["type"], "hello");
    for (text, code) in [
        ("{not json", "bad-json"),
        ("[1,2]", "bad-message"),
        ("{\"type\":\"launch-missiles\"}", "unknown-type"),
        ("{\"type\":\"subscribe\",\"prefixes\":\"x\"}", "bad-message"),
        ("\"just a string\"", "bad-message"),
    ] {
        w.ws.send(Message::text(text)).unwrap();
        let m = w.recv(T);
        assert_eq!(
            (m["type"].as_str(), m["code"].as_str()),
            (Some("error"), Some(code)),
            "{text}"
        );
    }
    w.send(&json!({"type": "ping"}));
    assert_eq!(w.recv(T)["type"], "pong");

    // Frames that close the connection: binary, oversized, invalid UTF-8, garbage.
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("binary", raw_frame(0x2, b"\x00\x01\x02")),
        ("oversized", raw_frame(0x1, &vec![b'a'; 200_000])),
        ("invalid utf-8", raw_frame(0x1, b"{\"type\":\"\xff\xfe\"}")),
        ("reserved opcode", raw_frame(0x3, b"x")),
        (
            "garbage",
            b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff".to_vec(),
        ),
    ];
    for (name, bytes) in cases {
        let w = Ws::connect(f.fanout_port);
        let mut s = w.ws.into_inner();
        let _ = s.write_all(&bytes);
        // The fan-out closes: reads end with EOF (or a reset) within the timeout.
        let deadline = Instant::now() + T;
        let mut buf = [0u8; 4096];
        loop {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => assert!(Instant::now() < deadline, "{name}: not closed"),
            }
        }
        assert!(
            f.fanout.is_running(),
            "{name}: fan-out died:\n{}",
            f.fanout.log()
        );
    }
    // Raw HTTP nonsense on the same port.
    for req in [
        &b"\x00\x01\x02\r\n\r\n"[..],
        b"GET /nope HTTP/1.1\r\n\r\n",
        b"DELETE / HTTP/1.1\r\n\r\n",
        b"GET /ws HTTP/1.1\r\nUpgrade: websocket\r\n\r\n",
    ] {
        let mut s = TcpStream::connect(("127.0.0.1", f.fanout_port)).unwrap();
        s.set_read_timeout(Some(T)).unwrap();
        s.write_all(req).unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        assert!(
            out.starts_with("HTTP/1.1 4"),
            "{:?} → {out:?}",
            String::from_utf8_lossy(req)
        );
    }
    // The page and the module are served.
    let mut s = TcpStream::connect(("127.0.0.1", f.fanout_port)).unwrap();
    s.write_all(b"GET /recached.js HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 200 OK") && out.contains("export async function connect"));
    assert!(f.alive());
}

/// A client frame with FIN as given (so fragments can be built), masked.
fn raw_fragment(fin: bool, opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = raw_frame(opcode, payload);
    if !fin {
        f[0] &= 0x7f;
    }
    f
}

/// The status code of the first Close frame among the server's (unmasked) frames in `bytes`.
fn close_status(bytes: &[u8]) -> Option<u16> {
    let mut at = 0;
    while at + 2 <= bytes.len() {
        let opcode = bytes[at] & 0x0f;
        let mut len = usize::from(bytes[at + 1] & 0x7f);
        let mut head = 2;
        if len == 126 {
            len = usize::from(u16::from_be_bytes(
                bytes.get(at + 2..at + 4)?.try_into().ok()?,
            ));
            head = 4;
        } else if len == 127 {
            len = u64::from_be_bytes(bytes.get(at + 2..at + 10)?.try_into().ok()?) as usize;
            head = 10;
        }
        let body = bytes.get(at + head..at + head + len)?;
        if opcode == 0x8 {
            return Some(u16::from_be_bytes(body.get(..2)?.try_into().ok()?));
        }
        at += head + len;
    }
    None
}

/// Protocol errors close with status 1002 (issue 19 item 6, RFC 6455 §7.1.7): an orphan
/// continuation, a fragmented control frame, a control frame over 125 bytes, a data frame
/// interrupting a fragmented message.
#[test]
fn protocol_errors_close_with_1002() {
    let mut f = Fleet::start(&[]);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("orphan continuation", raw_fragment(true, 0x0, b"x")),
        ("fragmented ping", raw_fragment(false, 0x9, b"x")),
        ("ping over 125 bytes", raw_frame(0x9, &[b'p'; 126])),
        (
            "text inside a fragmented message",
            [raw_fragment(false, 0x1, b"{\"ty"), raw_frame(0x1, b"{}")].concat(),
        ),
    ];
    for (name, bytes) in cases {
        let mut w = Ws::connect(f.fanout_port);
        assert_eq!(w.recv(T)["type"], "hello");
        let mut s = w.ws.into_inner();
        s.set_read_timeout(Some(T)).unwrap();
        s.write_all(&bytes).unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        let deadline = Instant::now() + T;
        while Instant::now() < deadline {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
            if close_status(&got).is_some() {
                break;
            }
        }
        assert_eq!(close_status(&got), Some(1002), "{name}: {got:?}");
    }
    assert!(f.fanout.is_running(), "{}", f.fanout.log());
    assert!(f.alive());
}

#[test]
fn a_thousand_browsers_connect_and_drop() {
    let mut f = Fleet::start(&[]);
    for r in 0..3 {
        write_mix(&f, "k:", r);
    }
    let start = Instant::now();
    let mut held = Vec::new();
    for i in 0..1000 {
        let mut s = TcpStream::connect(("127.0.0.1", f.fanout_port)).unwrap();
        match i % 4 {
            // Dropped mid-handshake.
            0 => {
                let _ = s.write_all(b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n");
            }
            // Dropped right after connecting.
            1 => {}
            // Subscribed, then dropped mid-snapshot (never reading).
            _ => {
                s.set_read_timeout(Some(T)).unwrap();
                let (mut ws, _) =
                    tungstenite::client(format!("ws://127.0.0.1:{}/ws", f.fanout_port), s).unwrap();
                ws.send(Message::text(r#"{"type":"subscribe","prefixes":["k:"]}"#))
                    .unwrap();
                if i % 10 == 3 {
                    held.push(ws); // kept open until the end
                }
                continue;
            }
        }
        drop(s);
    }
    assert!(start.elapsed() < Duration::from_secs(60));
    // Writes go on while they are connected; a fresh browser converges.
    write_mix(&f, "k:", 5);
    let mut c = Client::subscribe(f.fanout_port, &["k:"], None);
    c.sync(T);
    c.drain(Duration::from_millis(300));
    assert_converged(&f, &mut c, "k:");
    drop(held);
    assert!(f.alive());
    // The connections are gone from the fan-out (INFO over RESP on the same port).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let info = redis_cli(f.fanout_port, &["INFO"]);
        let n: usize = info
            .lines()
            .find_map(|l| l.strip_prefix("connections:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(usize::MAX);
        if n <= 5 {
            break;
        }
        assert!(Instant::now() < deadline, "connections still open: {info}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `field` of `INFO` (default sections) on `port` (an engine, or the fan-out's RESP probe).
fn info_u64(port: u16, field: &str) -> u64 {
    let info = redis_cli(port, &["INFO"]);
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("INFO on {port} has no {field}: {info}"))
        .trim()
        .parse()
        .unwrap()
}

/// Waits (bounded) until every engine reports `n` feed subscribers.
fn wait_feed_subscribers(f: &Fleet, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while f
        .engine_ports
        .iter()
        .any(|&p| info_u64(p, "feed_subscribers") != n)
    {
        assert!(
            Instant::now() < deadline,
            "engines do not report {n} feed subscriber(s)"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The browsers' positions as `resume` values.
fn resume_of(pos: &[Option<(String, u64)>]) -> Vec<Value> {
    pos.iter()
        .enumerate()
        .map(|(i, p)| {
            let (run, seq) = p.clone().unwrap();
            json!({"instance": i, "run": run, "seq": seq})
        })
        .collect()
}

/// Issue 14 (the proxy's unpipelined SET paid for a feed nobody read): while no browser is
/// subscribed the fan-out follows no feed, so the engines compute no effect (INFO
/// `feed_subscribers` 0, `feed_effects` still); the first browser makes it subscribe and
/// converges; once the last one left (`--feed-linger-ms 0`) it leaves the feeds again. A
/// browser resuming when nothing changed meanwhile is replayed from the ring (no refetch);
/// one resuming after writes nobody heard gets `must-refetch`, never a silent gap.
#[test]
fn no_feed_without_browsers_and_late_browsers_converge() {
    let f = Fleet::start(&["--feed-linger-ms", "0"]);
    for r in 0..5 {
        write_mix(&f, "late:", r);
    }
    for &p in &f.engine_ports {
        assert_eq!(info_u64(p, "feed_subscribers"), 0, "engine {p}");
        assert_eq!(info_u64(p, "feed_effects"), 0, "engine {p}");
    }
    assert_eq!(info_u64(f.fanout_port, "browsers"), 0);
    assert_eq!(info_u64(f.fanout_port, "engines_idle"), 2);
    assert_eq!(info_u64(f.fanout_port, "feed_effects"), 0);

    // The first browser: the fan-out subscribes, a snapshot, then keychanges.
    let mut c = Client::subscribe(f.fanout_port, &["late:"], None);
    c.sync(T);
    assert_converged(&f, &mut c, "late:");
    wait_feed_subscribers(&f, 1);
    assert_eq!(info_u64(f.fanout_port, "engines_idle"), 0);
    for r in 5..10 {
        write_mix(&f, "late:", r);
    }
    c.drain(Duration::from_millis(300));
    assert_converged(&f, &mut c, "late:");
    assert!(
        c.refetches.iter().all(|r| r == "initial"),
        "{:?}",
        c.refetches
    );
    assert!(info_u64(f.fanout_port, "feed_effects") > 0);

    // The browser leaves (a new connection that has not subscribed does not count): the
    // fan-out leaves the feeds. Nothing changes meanwhile: the resume joins the ring.
    let pos = c.pos.clone();
    drop(std::mem::replace(&mut c.ws, Ws::connect(f.fanout_port)));
    wait_feed_subscribers(&f, 0);
    assert_eq!(info_u64(f.fanout_port, "engines_idle"), 2);
    c.refetches.clear();
    c.pos = vec![None; 2];
    c.send_subscribe(&["late:"], None, &resume_of(&pos));
    c.sync(T);
    c.drain(Duration::from_millis(300));
    assert!(
        c.refetches.is_empty(),
        "resumed without refetch: {:?}",
        c.refetches
    );
    write_mix(&f, "late:", 10);
    c.drain(Duration::from_millis(300));
    assert_converged(&f, &mut c, "late:");

    // It leaves again and writes happen while nobody listens: no effect is computed, and the
    // resume cannot join (the engines skipped a number): must-refetch, then converged.
    let pos = c.pos.clone();
    drop(std::mem::replace(&mut c.ws, Ws::connect(f.fanout_port)));
    wait_feed_subscribers(&f, 0);
    let effects: Vec<u64> = f
        .engine_ports
        .iter()
        .map(|&p| info_u64(p, "feed_effects"))
        .collect();
    for r in 11..16 {
        write_mix(&f, "late:", r);
    }
    for (&p, &n) in f.engine_ports.iter().zip(&effects) {
        assert_eq!(
            info_u64(p, "feed_effects"),
            n,
            "engine {p}: effects while unsubscribed"
        );
    }
    c.refetches.clear();
    c.pos = vec![None; 2];
    c.send_subscribe(&["late:"], None, &resume_of(&pos));
    c.sync(T);
    c.drain(Duration::from_millis(300));
    assert!(
        !c.refetches.is_empty() && c.refetches.iter().all(|r| r == "cannot-resume"),
        "{:?}",
        c.refetches
    );
    assert_converged(&f, &mut c, "late:");
    write_mix(&f, "late:", 16);
    c.drain(Duration::from_millis(300));
    assert_converged(&f, &mut c, "late:");
}

// ---------------------------------------------------------------------------------------
// Node and Chromium (tests/browser/, installed by scripts/test.sh: npm ci + apt chromium)

#[test]
fn chromium_demo_page_updates_and_reads_locally() {
    let (dir, wasm) = browser_env(true);
    let f = Fleet::start(&["--wasm", wasm.to_str().unwrap()]);
    let out = run_node(
        &dir,
        "demo.test.mjs",
        &[
            ("FANOUT_PORT", f.fanout_port.to_string()),
            ("PROXY_PORT", f.proxy_port.to_string()),
        ],
        Duration::from_secs(90),
    );
    assert!(out.contains("demo page: OK"), "{out}");
}

#[test]
fn node_and_chromium_replicas_converge_under_random_writes() {
    let (dir, wasm) = browser_env(true);
    let tokens = dir.join(format!("tokens.{}.toml", std::process::id()));
    // Removed however the test ends (a failed run used to leave it in tests/browser/).
    struct Removed(std::path::PathBuf);
    impl Drop for Removed {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
    let _removed = Removed(tokens.clone());
    std::fs::write(
        &tokens,
        "[tokens]\n\"tok-a\" = [\"a:\"]\n\"tok-ab\" = [\"a:\", \"b:\"]\n\"tok-all\" = [\"\"]\n",
    )
    .unwrap();
    let f = Fleet::start(&[
        "--wasm",
        wasm.to_str().unwrap(),
        "--tokens",
        tokens.to_str().unwrap(),
    ]);
    let seed = std::env::var("SEED").unwrap_or_else(|_| {
        (std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
            % 100_000)
            .to_string()
    });
    let out = run_node(
        &dir,
        "convergence.test.mjs",
        &[
            ("FANOUT_PORT", f.fanout_port.to_string()),
            ("PROXY_PORT", f.proxy_port.to_string()),
            ("WASM", wasm.display().to_string()),
            ("SEED", seed),
        ],
        Duration::from_secs(120),
    );
    assert!(out.contains("converged:"), "{out}");
    eprintln!("{out}");
}
