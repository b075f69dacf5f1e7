//! A browser replica subscribed across a resize converges (issue 21): two cluster engines
//! with nodes files, the fan-out, a protocol client applying what it gets to the replica
//! (`recached_wasm::Replica`, the code the wasm module runs); writes go on while
//! `redis-cli --cluster reshard` moves 500 slots from engine 0 to engine 1, then while a
//! third engine joins (nodes file from `conf_for_new_node`, `CLUSTER MEET`) and gets 500
//! slots. At the end the replica's keys and values equal the fleet's (read from the owners
//! with a redirect-following client), within a bounded wait.
//!
//! Every wait is bounded; processes are killed by PID on drop ([`Proc`]).

mod common;

use common::*;
use serde_json::{Value, json};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use recached_wasm::Replica;
use tungstenite::{Message, WebSocket};

const PREFIX: &str = "rz:";

/// One engine in cluster mode with its own `--dir` (its nodes file lives there).
fn engine(dir: &PathBuf, port: u16, nodes: &str, index: usize) -> Proc {
    std::fs::create_dir_all(dir).unwrap();
    let mut cmd = Command::new(recached_bin());
    cmd.args(["server", "--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args([
            "--cluster-nodes",
            nodes,
            "--cluster-index",
            &index.to_string(),
        ])
        .arg("--dir")
        .arg(dir);
    let mut p = Proc::spawn(&format!("engine-{port}"), cmd);
    p.wait_port(port, START_TIMEOUT);
    p
}

/// Runs `argv` on the owner of its key, following `-MOVED` and `-ASK` (at most 10 hops);
/// returns the reply frame's text.
fn cluster_cmd(port: u16, argv: &[&str]) -> String {
    let mut at = port;
    let mut asking = false;
    for _ in 0..10 {
        let mut c = Resp::connect(at);
        if asking {
            c.cmd_str(&["ASKING"]);
        }
        let r = String::from_utf8_lossy(&c.cmd_str(argv)).into_owned();
        let redirect = |r: &str, word: &str| -> Option<u16> {
            let rest = r.strip_prefix(word)?;
            rest.trim().rsplit(':').next()?.parse().ok()
        };
        if let Some(p) = redirect(&r, "-MOVED ") {
            (at, asking) = (p, false);
        } else if let Some(p) = redirect(&r, "-ASK ") {
            (at, asking) = (p, true);
        } else if r.starts_with("-TRYAGAIN") {
            std::thread::sleep(Duration::from_millis(20));
        } else {
            return r;
        }
    }
    panic!("{argv:?}: too many redirects");
}

/// The keys under the prefix on every engine (each engine holds only its own).
fn fleet_keys(ports: &[u16]) -> Vec<String> {
    let mut keys: Vec<String> = ports
        .iter()
        .flat_map(|&p| {
            redis_cli(p, &["--scan", "--pattern", &format!("{PREFIX}*")])
                .lines()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .filter(|k| !k.is_empty())
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

/// A canonical text of a key's value from a RESP reader.
fn dump(get: &mut dyn FnMut(&[&str]) -> String, key: &str) -> String {
    let ty = get(&["TYPE", key]);
    let ty = ty.trim().trim_start_matches('+').to_string();
    let value = match ty.as_str() {
        "string" => get(&["GET", key]),
        "hash" => {
            let mut v: Vec<String> = get(&["HGETALL", key]).lines().map(str::to_string).collect();
            v.sort();
            v.join(",")
        }
        "list" => get(&["LRANGE", key, "0", "-1"]),
        _ => String::new(),
    };
    format!("{ty} {value}")
}

/// A blocking WebSocket protocol client with a native replica (what recached.js does).
struct Client {
    ws: WebSocket<TcpStream>,
    replica: Replica,
    instances: usize,
    up: Vec<bool>,
    refetches: Vec<String>,
}

fn wire_bytes(v: &Value) -> Vec<u8> {
    v.as_str()
        .expect("UTF-8 keys and values in this test")
        .as_bytes()
        .to_vec()
}

impl Client {
    fn subscribe(port: u16) -> Client {
        let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        let (mut ws, _) = tungstenite::client(format!("ws://127.0.0.1:{port}/ws"), stream).unwrap();
        ws.send(Message::text(
            json!({"type": "subscribe", "prefixes": [PREFIX]}).to_string(),
        ))
        .unwrap();
        Client {
            ws,
            replica: Replica::new(),
            instances: 0,
            up: Vec::new(),
            refetches: Vec::new(),
        }
    }

    /// Applies the messages that arrive within `d`.
    fn pump(&mut self, d: Duration) {
        let deadline = Instant::now() + d;
        while Instant::now() < deadline {
            let m: Value = match self.ws.read() {
                Ok(Message::Text(t)) => serde_json::from_str(t.as_str()).unwrap(),
                Ok(_) => continue,
                Err(tungstenite::Error::Io(e))
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    continue;
                }
                Err(e) => panic!("fan-out connection: {e}"),
            };
            self.apply(&m);
        }
    }

    fn apply(&mut self, m: &Value) {
        let i = m["instance"].as_u64().unwrap_or(0) as usize;
        match m["type"].as_str().unwrap_or("") {
            "hello" => {
                self.instances = m["instances"].as_u64().unwrap() as usize;
                self.up = vec![false; self.instances];
            }
            "slots" => {
                let mut owners = vec![recached_wasm::UNASSIGNED; 16384];
                for r in m["slots"].as_array().unwrap() {
                    let (a, b, i) = (
                        r[0].as_u64().unwrap(),
                        r[1].as_u64().unwrap(),
                        r[2].as_u64().unwrap(),
                    );
                    for s in a..=b {
                        owners[s as usize] = i as u16;
                    }
                }
                assert!(self.replica.set_owners(owners));
                let n = m["instances"].as_u64().unwrap() as usize;
                if n > self.instances {
                    self.instances = n;
                    self.up.resize(n, false);
                }
            }
            "must-refetch" => {
                self.up[i] = false;
                self.refetches
                    .push(m["reason"].as_str().unwrap().to_string());
                self.replica.drop_instance(i as u32, self.instances as u32);
            }
            "flush" => {
                self.replica.drop_instance(i as u32, self.instances as u32);
            }
            "entry" | "keychange" => {
                let args: Vec<Vec<u8>> = m["args"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(wire_bytes)
                    .collect();
                let argv: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
                self.replica
                    .apply(&argv)
                    .unwrap_or_else(|e| panic!("apply {m}: {e}"));
            }
            "up-to-date" => self.up[i] = true,
            "error" => panic!("fan-out error: {m}"),
            _ => {}
        }
    }

    fn read(&mut self, argv: &[&str]) -> String {
        let argv: Vec<&[u8]> = argv.iter().map(|a| a.as_bytes()).collect();
        String::from_utf8_lossy(self.replica.read(&argv, 1)).into_owned()
    }

    /// Keys and values as [`dump`] prints them, from the replica.
    fn state(&mut self) -> Vec<(String, String)> {
        let keys = resp_lines(&self.read(&["KEYS", &format!("{PREFIX}*")]));
        let mut keys: Vec<String> = keys
            .lines()
            .map(str::to_string)
            .filter(|k| !k.is_empty())
            .collect();
        keys.sort();
        keys.into_iter()
            .map(|k| {
                let v = dump(&mut |a: &[&str]| resp_lines(&self.read(a)), &k);
                (k, v)
            })
            .collect()
    }
}

/// RESP reply → one line per bulk string / integer / simple string.
fn resp_lines(resp: &str) -> String {
    let mut out = Vec::new();
    let mut lines = resp.split("\r\n");
    while let Some(l) = lines.next() {
        match l.as_bytes().first() {
            Some(b'$') if l != "$-1" => out.push(lines.next().unwrap_or("").to_string()),
            Some(b':') | Some(b'+') => out.push(l[1..].to_string()),
            _ => {}
        }
    }
    out.join("\n")
}

fn fleet_state(ports: &[u16]) -> Vec<(String, String)> {
    fleet_keys(ports)
        .into_iter()
        .map(|k| {
            let v = dump(&mut |a: &[&str]| resp_lines(&cluster_cmd(ports[0], a)), &k);
            (k, v)
        })
        .collect()
}

/// Writes on a thread until stopped: strings, counters, hashes, lists over 300 keys.
fn writer(port: u16, stop: Arc<AtomicBool>, count: Arc<AtomicU64>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut n: u64 = 0;
        while !stop.load(Ordering::Relaxed) {
            let k = n % 300;
            let r = match n % 4 {
                0 => cluster_cmd(port, &["SET", &format!("{PREFIX}s{k}"), &format!("v{n}")]),
                1 => cluster_cmd(port, &["INCR", &format!("{PREFIX}c{}", k % 50)]),
                2 => cluster_cmd(
                    port,
                    &[
                        "HSET",
                        &format!("{PREFIX}h{}", k % 40),
                        &format!("f{}", n % 7),
                        &n.to_string(),
                    ],
                ),
                _ => {
                    if n % 12 == 3 {
                        cluster_cmd(port, &["DEL", &format!("{PREFIX}s{}", (k + 1) % 300)])
                    } else {
                        cluster_cmd(
                            port,
                            &["RPUSH", &format!("{PREFIX}l{}", k % 30), &n.to_string()],
                        )
                    }
                }
            };
            assert!(!r.starts_with('-'), "write {n}: {r}");
            n += 1;
            count.store(n, Ordering::Relaxed);
        }
    })
}

fn myid(port: u16) -> String {
    String::from_utf8_lossy(&Resp::connect(port).cmd_str(&["CLUSTER", "MYID"]))
        .lines()
        .nth(1)
        .unwrap()
        .to_string()
}

fn reshard(port: u16, from: &str, to: &str, slots: u32) {
    let out = run_cmd(
        Command::new("redis-cli").args([
            "--cluster",
            "reshard",
            &format!("127.0.0.1:{port}"),
            "--cluster-from",
            from,
            "--cluster-to",
            to,
            "--cluster-slots",
            &slots.to_string(),
            "--cluster-yes",
        ]),
        Duration::from_secs(120),
    );
    assert!(out.ok, "reshard: {}", out.text());
}

#[test]
fn a_browser_replica_subscribed_across_a_resize_converges() {
    let tmp = std::env::temp_dir().join(format!("fanout-resize-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let ports = [free_port(), free_port(), free_port()];
    let nodes2 = format!("127.0.0.1:{},127.0.0.1:{}", ports[0], ports[1]);
    let _e0 = engine(&tmp.join("e0"), ports[0], &nodes2, 0);
    let _e1 = engine(&tmp.join("e1"), ports[1], &nodes2, 1);
    let fanout_port = free_port();
    let mut cmd = Command::new(recached_bin());
    cmd.args([
        "fanout",
        "--port",
        &fanout_port.to_string(),
        "--engines",
        &nodes2,
    ])
    .args(["--heartbeat-ms", "1000"]);
    let mut fanout = Proc::spawn("fanout", cmd);
    fanout.wait_port(fanout_port, START_TIMEOUT);

    for k in 0..300 {
        cluster_cmd(ports[0], &["SET", &format!("{PREFIX}s{k}"), "initial"]);
    }
    let mut c = Client::subscribe(fanout_port);
    let deadline = Instant::now() + Duration::from_secs(20);
    while c.instances == 0 || !c.up.iter().all(|&u| u) {
        assert!(Instant::now() < deadline, "not up to date: {:?}", c.up);
        c.pump(Duration::from_millis(100));
    }
    assert_eq!(c.instances, 2);

    // Writes go on while 500 slots move from engine 0 to engine 1; the replica keeps
    // reading its messages meanwhile (a browser does).
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let w = writer(ports[0], Arc::clone(&stop), Arc::clone(&count));
    let (id0, id1) = (myid(ports[0]), myid(ports[1]));
    let pump_while = |c: &mut Client, job: &(dyn Fn() + Sync)| {
        std::thread::scope(|s| {
            let h = s.spawn(job);
            while !h.is_finished() {
                c.pump(Duration::from_millis(50));
            }
            h.join().unwrap();
        })
    };
    pump_while(&mut c, &|| reshard(ports[0], &id0, &id1, 500));

    // A third engine joins: its nodes file from the fleet's CLUSTER NODES, then MEET, then
    // 500 slots from engine 0.
    let text = String::from_utf8_lossy(&Resp::connect(ports[0]).cmd_str(&["CLUSTER", "NODES"]))
        .lines()
        .skip(1)
        .collect::<Vec<_>>()
        .join("\n");
    let addr2 = format!("127.0.0.1:{}", ports[2]);
    let conf = engine_core::cmd::cluster::conf::conf_for_new_node(&text, &addr2).unwrap();
    let dir2 = tmp.join("e2");
    std::fs::create_dir_all(&dir2).unwrap();
    std::fs::write(dir2.join(format!("nodes-{}.conf", ports[2])), conf).unwrap();
    let nodes3 = format!("{nodes2},{addr2}");
    let _e2 = engine(&dir2, ports[2], &nodes3, 2);
    for &p in &ports[..2] {
        let r = Resp::connect(p).cmd_str(&["CLUSTER", "MEET", "127.0.0.1", &ports[2].to_string()]);
        assert_eq!(r, b"+OK\r\n", "MEET on {p}");
    }
    let id2 = myid(ports[2]);
    pump_while(&mut c, &|| reshard(ports[0], &id0, &id2, 500));
    stop.store(true, Ordering::Relaxed);
    w.join().unwrap();
    let writes = count.load(Ordering::Relaxed);
    assert!(writes > 100, "only {writes} writes during the moves");
    // Every engine holds keys now.
    for &p in &ports {
        let n = redis_cli(p, &["DBSIZE"]);
        assert!(n.trim().parse::<u64>().unwrap() > 0, "engine {p}: {n}");
    }

    // Converged within a bounded wait.
    let expected = fleet_state(&ports);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        c.pump(Duration::from_millis(300));
        if c.instances == 3 && c.up.iter().all(|&u| u) && c.state() == expected {
            break;
        }
        if Instant::now() > deadline {
            let got = c.state();
            let diff: Vec<_> = expected
                .iter()
                .filter(|e| !got.contains(e))
                .chain(got.iter().filter(|g| !expected.contains(g)))
                .take(10)
                .collect();
            panic!(
                "not converged: {} keys in the fleet, {} in the replica, instances {}, up {:?}; first differences {diff:?}; refetches {:?}",
                expected.len(),
                got.len(),
                c.instances,
                c.up,
                c.refetches
            );
        }
    }
    // The resync after the moves is debounced (300 ms without moves): the replica may have
    // converged before it comes; it must come, and leave the replica converged.
    let deadline = Instant::now() + Duration::from_secs(15);
    while !c.refetches.iter().any(|r| r == "slots-moved") {
        assert!(
            Instant::now() < deadline,
            "no slots-moved resync: {:?}",
            c.refetches
        );
        c.pump(Duration::from_millis(200));
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while !(c.up.iter().all(|&u| u) && c.state() == expected) {
        assert!(Instant::now() < deadline, "not converged after the resync");
        c.pump(Duration::from_millis(200));
    }
    // Still live: a write after the moves reaches the replica as a keychange.
    cluster_cmd(ports[0], &["SET", &format!("{PREFIX}after"), "yes"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while resp_lines(&c.read(&["GET", &format!("{PREFIX}after")])) != "yes" {
        assert!(
            Instant::now() < deadline,
            "the write after the moves never arrived"
        );
        c.pump(Duration::from_millis(100));
    }
    fanout.kill();
    let _ = std::fs::remove_dir_all(&tmp);
}

/// Browser replicas across `recached resize` (tests/browser/resize.test.mjs): a
/// `recached start` fleet of 2 engines with the fan-out; a replica in Node (the page's
/// recached.js and recached.wasm) and one in headless Chromium follow `rz:*` while a writer
/// changes keys through the proxy; the fleet grows to 3 and shrinks back to 2 underneath;
/// both replicas end equal to the server.
#[test]
fn browser_replicas_follow_a_resize_of_the_fleet() {
    let (bdir, wasm) = browser_env(true);
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("fanout-resize-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // Engines base..base+3 (one spare for the third engine), the proxy after them.
    let base = free_port_run(4);
    let proxy = base + 3;
    let fanout = free_port_except(&[base, base + 1, base + 2, base + 3]);
    let data = dir.join("data");
    let mut cmd = Command::new(recached_bin());
    cmd.arg("start")
        .args(["--engines", "2", "--bind", "127.0.0.1"])
        .args(["--engine-port-base", &base.to_string()])
        .args(["--proxy-port", &proxy.to_string()])
        .args(["--fanout-port", &fanout.to_string()])
        .args(["--metrics-port", "0"])
        .env("RECACHED_WASM", &wasm)
        .arg("--dir")
        .arg(&data)
        .env("RUST_LOG", "info");
    struct Guard(Proc, PathBuf, PathBuf);
    impl Drop for Guard {
        fn drop(&mut self) {
            teardown_fleet(&mut self.0, &self.1.join("state.toml"), &self.2);
        }
    }
    let mut guard = Guard(
        Proc::spawn("fleet-fanout-resize", cmd),
        data.clone(),
        dir.clone(),
    );
    for p in [base, base + 1, proxy, fanout] {
        guard.0.wait_port(p, FLEET_START_TIMEOUT);
    }
    guard
        .0
        .wait_proxy_reaches_engines(proxy, FLEET_START_TIMEOUT);
    let (ready, stop) = (dir.join("ready"), dir.join("stop"));
    let node = {
        let (bdir, ready, stop) = (bdir.clone(), ready.clone(), stop.clone());
        let wasm = wasm.display().to_string();
        std::thread::spawn(move || {
            run_node(
                &bdir,
                "resize.test.mjs",
                &[
                    ("FANOUT_PORT", fanout.to_string()),
                    ("PROXY_PORT", proxy.to_string()),
                    ("WASM", wasm),
                    ("READY_FILE", ready.display().to_string()),
                    ("STOP_FILE", stop.display().to_string()),
                ],
                Duration::from_secs(300),
            )
        })
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ready.exists() {
        assert!(
            Instant::now() < deadline && !node.is_finished(),
            "the replicas never came up"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    for n in [3, 2] {
        let out = run_cmd(
            Command::new(recached_bin())
                .args(["resize", &n.to_string(), "--dir"])
                .arg(&data),
            Duration::from_secs(240),
        );
        assert!(out.ok, "resize {n}:\n{}", out.text());
    }
    std::fs::write(&stop, b"").unwrap();
    let out = node.join().unwrap();
    eprintln!("{out}");
    assert!(out.contains("converged:"), "{out}");
}
