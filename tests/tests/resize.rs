//! `recached resize N` on a running fleet (issue 21, item 2; docs/operations.md, "Resizing a
//! running fleet"), end to end with the real binary:
//!
//! - refusals: no fleet on the dir; another resize holding `resize.lock`; `cluster = false`;
//!   the current count with nothing to finish is a no-op;
//! - 2→3→4→2→3 engines under a client that SETs and GETs through the proxy the whole time,
//!   with 10,000 keys (a seventh with a TTL, a tenth in database 1): after each step every key
//!   reads back through the proxy with its value and TTL, DBSIZE through the proxy is the key
//!   count, each engine holds only keys of slots it owns under the new map, and the slots
//!   moved are exactly those the map gives to another engine; then a restart of the fleet
//!   keeps every key.
//!
//! Cleanup: the fleet guard SIGKILLs the supervisor and every child pid in `state.toml`; every
//! wait is bounded.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use engine_core::slot::{instance_for_slot, key_slot};

const KEYS: usize = 10_000;
/// Ports base..base+MAX_ENGINES are the engines', base+MAX_ENGINES the proxy's.
const MAX_ENGINES: u16 = 4;
const RESIZE_TIMEOUT: Duration = Duration::from_secs(240);

struct Fleet {
    sup: Option<Proc>,
    dir: PathBuf,
    base: u16,
    config: PathBuf,
}

impl Fleet {
    fn start(name: &str, engines: usize, extra_config: &str) -> Fleet {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("resize-{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let base = free_port_run(MAX_ENGINES as usize + 1);
        let config = dir.join("recached.toml");
        std::fs::write(
            &config,
            format!(
                "bind = \"127.0.0.1\"\nproxy_port = {}\nengine_port_base = {base}\n\
                 dir = \"{}\"\nfanout_port = 0\nmetrics_port = 0\n{extra_config}",
                base + MAX_ENGINES,
                dir.join("data").display()
            ),
        )
        .unwrap();
        let mut f = Fleet {
            sup: None,
            dir,
            base,
            config,
        };
        f.spawn(engines);
        f
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn proxy_port(&self) -> u16 {
        self.base + MAX_ENGINES
    }

    fn spawn(&mut self, engines: usize) {
        let mut cmd = Command::new(recached_bin());
        cmd.arg("start")
            .arg("--config")
            .arg(&self.config)
            .args(["--engines", &engines.to_string()])
            .env("RUST_LOG", "info");
        let mut sup = Proc::spawn(&format!("fleet-{engines}"), cmd);
        for i in 0..engines as u16 {
            sup.wait_port(self.base + i, FLEET_START_TIMEOUT);
        }
        sup.wait_port(self.proxy_port(), FLEET_START_TIMEOUT);
        sup.wait_proxy_reaches_engines(self.proxy_port(), FLEET_START_TIMEOUT);
        self.sup = Some(sup);
    }

    fn resize(&self, n: usize) -> CmdOut {
        run_cmd(
            Command::new(recached_bin())
                .args(["resize", &n.to_string(), "--dir"])
                .arg(self.data())
                .env("RUST_LOG", "info"),
            RESIZE_TIMEOUT,
        )
    }

    fn stop(&mut self) {
        stop_fleet_and_wait(&self.data(), self.sup.take().expect("running"));
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        if let Some(mut sup) = self.sup.take() {
            teardown_fleet(&mut sup, &self.data().join("state.toml"), &self.dir);
        }
    }
}

#[test]
fn resize_refusals() {
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("resize-none-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = run_cmd(
        Command::new(recached_bin())
            .args(["resize", "3", "--dir"])
            .arg(&dir),
        Duration::from_secs(20),
    );
    assert!(!out.ok, "{}", out.text());
    assert!(
        out.text()
            .contains("resize refused: no fleet is running on"),
        "{}",
        out.text()
    );
    let out = run_cmd(
        Command::new(recached_bin())
            .args(["resize", "0", "--dir"])
            .arg(&dir),
        Duration::from_secs(20),
    );
    assert_eq!(out.code, Some(2), "N < 1 is a usage error: {}", out.text());
    for pace in ["0", "1.5", "x"] {
        let out = run_cmd(
            Command::new(recached_bin())
                .args(["resize", "3", "--pace", pace, "--dir"])
                .arg(&dir),
            Duration::from_secs(20),
        );
        assert_eq!(out.code, Some(2), "--pace {pace}: {}", out.text());
        assert!(
            out.text().contains("the pace is a fraction in (0, 1]"),
            "--pace {pace}: {}",
            out.text()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);

    let fleet = Fleet::start("refusals", 2, "");
    // Another resize holds the lock (as a running one does for its whole run).
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(fleet.data().join("resize.lock"))
        .unwrap();
    let mut held = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusiveNonblock)
        .map_err(|(_, e)| e)
        .unwrap();
    std::io::Write::write_all(&mut *held, format!("{}\n", std::process::id()).as_bytes()).unwrap();
    let out = fleet.resize(3);
    assert!(!out.ok);
    assert!(
        out.text().contains(&format!(
            "resize refused: another resize (pid {}) is running on",
            std::process::id()
        )),
        "{}",
        out.text()
    );
    drop(held);
    // The current count, nothing to finish: nothing to do.
    let out = fleet.resize(2);
    assert!(out.ok, "{}", out.text());
    assert!(
        out.text().contains("already runs 2 engines"),
        "{}",
        out.text()
    );
    drop(fleet);

    let fleet = Fleet::start("standalone", 2, "cluster = false\n");
    let out = fleet.resize(3);
    assert!(!out.ok);
    assert!(
        out.text()
            .contains("resize refused: the fleet runs with cluster = false"),
        "{}",
        out.text()
    );
}

fn key(i: usize) -> String {
    format!("key:{i}")
}

fn value(i: usize) -> String {
    format!("value-{i}-{}", "x".repeat(i % 40))
}

/// Database of key `i`: a tenth in database 1.
fn db_of(i: usize) -> usize {
    usize::from(i % 10 == 3)
}

fn select(c: &mut Resp, db: usize) {
    assert_eq!(cmd(c, &["SELECT", &db.to_string()]), OK);
}

/// Every key through the proxy: value, TTL (a seventh have one), DBSIZE per database.
fn check_through_proxy(port: u16, live_keys: usize) {
    let mut c = Resp::connect(port);
    for db in 0..2 {
        select(&mut c, db);
        for i in (0..KEYS).filter(|&i| db_of(i) == db) {
            assert_eq!(cmd(&mut c, &["GET", &key(i)]), bulk(&value(i)), "key {i}");
            let ttl = cmd(&mut c, &["PTTL", &key(i)]);
            let ms: i64 = ttl
                .trim_start_matches(':')
                .trim_end_matches("\\r\\n")
                .parse()
                .unwrap_or_else(|_| panic!("PTTL key {i}: {ttl}"));
            if i % 7 == 0 {
                assert!(ms > 0, "key {i} lost its TTL: {ttl}");
            } else {
                assert_eq!(ms, -1, "key {i}");
            }
        }
        let want =
            (0..KEYS).filter(|&i| db_of(i) == db).count() + if db == 0 { live_keys } else { 0 };
        assert_eq!(
            cmd(&mut c, &["DBSIZE"]),
            format!(":{want}\\r\\n"),
            "DBSIZE of db {db}"
        );
    }
}

/// A bulk reply as [`cmd`] renders it.
fn bulk(v: &str) -> String {
    escape(format!("${}\r\n{v}\r\n", v.len()).as_bytes())
}

const OK: &str = "+OK\\r\\n";

/// Each engine holds only keys of slots it owns under the map of `n`; returns their sum.
fn check_placement(base: u16, n: usize) -> usize {
    let mut total = 0;
    for e in 0..n {
        let mut c = Resp::connect(base + e as u16);
        for db in 0..2 {
            select(&mut c, db);
            let mut cursor = "0".to_string();
            loop {
                let r = parse_value(&c.cmd_str(&["SCAN", &cursor, "COUNT", "1000"]));
                let parts = r.array().unwrap().to_vec();
                cursor = parts[0].str().unwrap();
                for k in parts[1].array().unwrap() {
                    let k = k.str().unwrap();
                    let owner = instance_for_slot(key_slot(k.as_bytes()), n as u32) as usize;
                    assert_eq!(owner, e, "{k} on engine {e}, owned by {owner} of {n}");
                    total += 1;
                }
                if cursor == "0" {
                    break;
                }
            }
        }
    }
    total
}

/// Slots whose owner differs between the maps of `a` and `b` engines.
fn expected_moves(a: usize, b: usize) -> usize {
    (0..16384u16)
        .filter(|&s| instance_for_slot(s, a as u32) != instance_for_slot(s, b as u32))
        .count()
}

/// `N slot(s) and K key(s) moved` from the resize's report.
fn moved_slots(out: &str) -> usize {
    let at = out.find(" slot(s) and ").expect("report line");
    out[..at].rsplit(' ').next().unwrap().parse().unwrap()
}

#[test]
fn resize_2_3_4_2_under_load_keeps_every_key() {
    let mut fleet = Fleet::start("grow", 2, "");
    let proxy = fleet.proxy_port();
    {
        let mut c = Resp::connect(proxy);
        for db in 0..2 {
            select(&mut c, db);
            for i in (0..KEYS).filter(|&i| db_of(i) == db) {
                let mut args = vec!["SET".to_string(), key(i), value(i)];
                if i % 7 == 0 {
                    args.extend(["EX".into(), "3600".into()]);
                }
                let a: Vec<&str> = args.iter().map(String::as_str).collect();
                assert_eq!(cmd(&mut c, &a), OK);
            }
        }
    }
    // A client that writes and reads through the proxy for the whole test.
    const LIVE: usize = 200;
    let stop = Arc::new(AtomicBool::new(false));
    let (ops, errors) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let client = {
        let (stop, ops, errors) = (stop.clone(), ops.clone(), errors.clone());
        std::thread::spawn(move || {
            let mut c = Resp::connect(proxy);
            let mut last_err = String::new();
            let mut i = 0usize;
            while !stop.load(Ordering::Relaxed) || i < LIVE {
                let k = format!("live:{}", i % LIVE);
                let v = format!("{i}");
                let set = cmd(&mut c, &["SET", &k, &v]);
                let get = cmd(&mut c, &["GET", &k]);
                ops.fetch_add(2, Ordering::Relaxed);
                if set != OK || get != bulk(&v) {
                    errors.fetch_add(1, Ordering::Relaxed);
                    last_err = format!("{set} / {get}");
                }
                i += 1;
            }
            last_err
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let mut from = 2;
    // The last step grows onto a port retired by the step before it: the proxy's link to it
    // is waiting out a reconnect backoff and must reconnect at once.
    for n in [3, 4, 2, 3] {
        let started = Instant::now();
        let out = fleet.resize(n);
        assert!(out.ok, "resize {from}→{n}:\n{}", out.text());
        eprintln!(
            "resize {from}→{n} in {:?}:\n{}",
            started.elapsed(),
            out.stdout
        );
        assert_eq!(
            moved_slots(&out.stdout),
            expected_moves(from, n),
            "{}",
            out.stdout
        );
        check_through_proxy(proxy, LIVE);
        assert_eq!(check_placement(fleet.base, n), KEYS + LIVE);
        from = n;
    }
    stop.store(true, Ordering::Relaxed);
    let last_err = client.join().unwrap();
    let (ops, errors) = (ops.load(Ordering::Relaxed), errors.load(Ordering::Relaxed));
    eprintln!(
        "client through the proxy: {ops} commands, {errors} failed round(s); last: {last_err}"
    );
    assert_eq!(
        errors, 0,
        "client errors through the proxy; last: {last_err}"
    );
    // A restart keeps every key (an ordinary start: each engine loads its nodes.conf).
    fleet.stop();
    fleet.spawn(2);
    check_through_proxy(proxy, LIVE);
    assert_eq!(check_placement(fleet.base, 2), KEYS + LIVE);
}

/// The pid of the engine listening on `port` (INFO server `process_id`).
fn engine_pid(port: u16) -> i32 {
    let info = redis_cli(port, &["INFO", "server"]);
    info.lines()
        .find_map(|l| l.trim().strip_prefix("process_id:"))
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no process_id from {port}: {info}"))
}

/// Waits (at most 20 s) until engine `port` has a slot open (`[` in its CLUSTER NODES), then
/// SIGKILLs it. Returns whether it found one.
fn kill_mid_move(port: u16) -> bool {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let nodes = Resp::try_connect(port)
            .map(|mut c| String::from_utf8_lossy(&c.cmd_str(&["CLUSTER", "NODES"])).into_owned())
            .unwrap_or_default();
        if nodes.contains('[') {
            let pid = engine_pid(port);
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    false
}

/// Every key of database 0 and 1 on the engine the map of `n` gives its slot, with its value.
fn check_values_direct(base: u16, n: usize, keys: usize) {
    let mut conns: Vec<Resp> = (0..n).map(|e| Resp::connect(base + e as u16)).collect();
    for db in 0..2 {
        for c in conns.iter_mut() {
            select(c, db);
        }
        for i in (0..keys).filter(|&i| db_of(i) == db) {
            let owner = instance_for_slot(key_slot(key(i).as_bytes()), n as u32) as usize;
            assert_eq!(
                cmd(&mut conns[owner], &["GET", &key(i)]),
                bulk(&value(i)),
                "key {i} (db {db}) on engine {owner} of {n}"
            );
        }
    }
}

/// kill -9 of the source (an old engine) during 2→3, then of the destination (the new engine)
/// during 3→4: the supervisor restarts the engine, `recached resize` finishes (re-run if it
/// gave up), and every key is on exactly one engine, its owner, with its value.
#[test]
fn resize_survives_kill_9_of_the_source_and_of_the_destination() {
    const N: usize = 20_000;
    let mut fleet = Fleet::start("kill", 2, "");
    // Written to the owners directly, pipelined (the map of 2 engines).
    {
        let mut conns: Vec<Resp> = (0..2).map(|e| Resp::connect(fleet.base + e)).collect();
        let mut pending = [0usize; 2];
        for db in 0..2 {
            for (e, c) in conns.iter_mut().enumerate() {
                c.send_raw(&Resp::encode(&[b"SELECT", db.to_string().as_bytes()]));
                pending[e] += 1;
            }
            for i in (0..N).filter(|&i| db_of(i) == db) {
                let e = instance_for_slot(key_slot(key(i).as_bytes()), 2) as usize;
                conns[e].send_raw(&Resp::encode(&[
                    b"SET",
                    key(i).as_bytes(),
                    value(i).as_bytes(),
                ]));
                pending[e] += 1;
            }
            for (e, c) in conns.iter_mut().enumerate() {
                for _ in 0..std::mem::take(&mut pending[e]) {
                    assert_eq!(c.read_frame(), b"+OK\r\n");
                }
            }
        }
    }
    for (n, victim) in [(3usize, 0u16), (4, 3)] {
        let data = fleet.data();
        let resize = std::thread::spawn(move || {
            run_cmd(
                Command::new(recached_bin())
                    .args(["resize", &n.to_string(), "--dir"])
                    .arg(&data)
                    .env("RUST_LOG", "info"),
                RESIZE_TIMEOUT,
            )
        });
        let port = fleet.base + victim;
        // The new engine must exist before it can be killed mid-move.
        let killed = kill_mid_move(port);
        let first = resize.join().unwrap();
        assert!(killed, "no open slot seen on {port}:\n{}", first.text());
        let mut out = first;
        for _ in 0..3 {
            if out.ok {
                break;
            }
            eprintln!(
                "resize {n} after kill -9 of {port} gave up, re-run:\n{}",
                out.text()
            );
            // The supervisor restarts the killed engine.
            fleet
                .sup
                .as_mut()
                .unwrap()
                .wait_port(port, FLEET_START_TIMEOUT);
            out = fleet.resize(n);
        }
        assert!(out.ok, "resize {n} never finished:\n{}", out.text());
        eprintln!("resize {n}, kill -9 of {port} mid-move:\n{}", out.text());
        assert_eq!(
            check_placement(fleet.base, n),
            N,
            "each key once, on its owner"
        );
        check_values_direct(fleet.base, n, N);
    }
}

/// redis-py's `RedisCluster` (newest release, tests/clients/.venv) on engine 0 for the whole
/// of 2→3→2: it follows -MOVED/-ASK by itself; no call fails and every key ends with the
/// value it last wrote.
#[test]
fn resize_under_redis_py_cluster_direct_to_the_engines() {
    let python = workspace_root().join("tests/clients/.venv/bin/python");
    assert!(
        python.exists(),
        "{} missing: run scripts/test.sh (it installs redis-py into tests/clients/.venv)",
        python.display()
    );
    let out = smart_client_through_resizes("redis-py", move |port, stop| {
        let mut cmd = Command::new(python);
        cmd.arg(workspace_root().join("tests/clients/redis_py_cluster_resize.py"))
            .args(["--port", &port.to_string(), "--keys", "500"])
            .arg("--stop-file")
            .arg(stop);
        cmd
    });
    assert!(
        out["rounds"].as_u64().unwrap() > 100,
        "the client ran through the resizes: {out}"
    );
}

/// Runs a smart client (`client(port, stop file)`, printing a JSON line with `errors` and
/// `final_wrong` at the end) on engine 0 of a 2-engine fleet through `resize` 2→3→2, then
/// stops it; checks it saw no error and returns its line.
fn smart_client_through_resizes(
    name: &str,
    client: impl FnOnce(u16, PathBuf) -> Command + Send + 'static,
) -> serde_json::Value {
    let fleet = Fleet::start(name, 2, "");
    let stop = fleet.dir.join(format!("stop-{name}"));
    let port = fleet.base;
    let running = {
        let stop = stop.clone();
        std::thread::spawn(move || run_cmd(&mut client(port, stop), Duration::from_secs(400)))
    };
    std::thread::sleep(Duration::from_secs(2));
    for n in [3, 2] {
        let out = fleet.resize(n);
        assert!(out.ok, "resize {n}:\n{}", out.text());
    }
    std::fs::write(&stop, b"").unwrap();
    let out = running.join().unwrap();
    assert!(out.ok, "{name}:\n{}", out.text());
    let line = out.stdout.lines().last().unwrap_or_default();
    eprintln!("{name} during 2→3→2: {line}");
    let v: serde_json::Value = serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("{name}: {e}: {line:?}\n{}", out.stderr));
    assert_eq!(v["errors"], 0, "{v}\n{}", out.stderr);
    assert_eq!(v["final_wrong"], 0, "{v}");
    v
}

/// ioredis's `Cluster` (newest release, defaults; tests/clients/node_modules) on engine 0 for
/// the whole of 2→3→2: no call fails and every key ends with the value it last wrote.
#[test]
fn resize_under_ioredis_cluster_direct_to_the_engines() {
    let script = workspace_root().join("tests/clients/ioredis_cluster_resize.js");
    assert!(
        workspace_root()
            .join("tests/clients/node_modules/ioredis")
            .exists(),
        "tests/clients/node_modules/ioredis missing: run scripts/test.sh"
    );
    let out = smart_client_through_resizes("ioredis", move |port, stop| {
        let mut cmd = Command::new("node");
        cmd.arg(script).arg(port.to_string()).arg(stop).arg("300");
        cmd
    });
    assert!(
        out["rounds"].as_u64().unwrap() > 100,
        "the client ran through the resizes: {out}"
    );
}

/// Between recached engines a resize moves each batch itself (supervisor
/// `slotmove_relay.rs`): `TXLOCK … DUMP` and `SLOTHANDOFF` on the source, `RESTORE-ASKING` on
/// the destination, never a MIGRATE that blocks the source. The source's feed records each
/// key it handed off as `MIGRATED k`, as after a MIGRATE (docs/feed.md, *Keys that move*),
/// never `DEL k`, which a fan-out merging the feeds could apply after the new copy.
#[test]
fn a_resize_relays_its_batches_and_the_source_feeds_migrated() {
    const N: usize = 2_000;
    let mut f = Fleet::start("relay", 2, "");
    let base = f.base;
    let mut c = Resp::connect(f.proxy_port());
    for i in 0..N {
        let k = key(i);
        let want = if i % 7 == 0 {
            cmd(&mut c, &["SET", &k, &value(i), "EX", "3600"])
        } else {
            cmd(&mut c, &["SET", &k, &value(i)])
        };
        assert_eq!(want, OK, "SET {k}");
    }
    let on0 = (0..N)
        .filter(|&i| instance_for_slot(key_slot(key(i).as_bytes()), 2) == 0)
        .count();
    let stay0 = (0..N)
        .filter(|&i| {
            let s = key_slot(key(i).as_bytes());
            instance_for_slot(s, 2) == 0 && instance_for_slot(s, 3) == 0
        })
        .count();
    let mut feed = Resp::connect(base);
    assert!(
        escape(&feed.cmd_str(&["FEED", "SUBSCRIBE"])).contains("subscribed"),
        "FEED SUBSCRIBE"
    );
    let out = f.resize(3);
    assert!(out.ok, "resize 3: {}", out.text());
    for port in [base, base + 1] {
        let stats = cmd(&mut Resp::connect(port), &["INFO", "commandstats"]);
        assert!(
            stats.contains("cmdstat_slothandoff:calls="),
            "engine {port} handed off no batch: {stats}"
        );
        assert!(
            !stats.contains("cmdstat_migrate:"),
            "engine {port} ran MIGRATE: {stats}"
        );
    }
    // A key engine 0 keeps: its SET is the last effect to read.
    let marker = (0..)
        .map(|i| format!("relay-marker:{i}"))
        .find(|k| instance_for_slot(key_slot(k.as_bytes()), 3) == 0)
        .unwrap();
    assert_eq!(cmd(&mut Resp::connect(base), &["SET", &marker, "1"]), OK);
    let (mut migrated, mut dels) = (0, 0);
    for _ in 0..N * 2 {
        let Value::Array(parts) = parse_value(&feed.read_frame()) else {
            panic!("not a feed frame");
        };
        let args: Vec<Vec<u8>> = parts
            .into_iter()
            .filter_map(|p| match p {
                Value::Bulk(b) => Some(b),
                _ => None,
            })
            .collect();
        match args.get(2).map(Vec::as_slice) {
            Some(b"MIGRATED") => migrated += 1,
            Some(b"DEL") => dels += 1,
            Some(b"SET") if args.get(3) == Some(&marker.clone().into_bytes()) => break,
            _ => {}
        }
    }
    assert_eq!(migrated, on0 - stay0, "MIGRATED effects on engine 0's feed");
    assert_eq!(dels, 0, "DEL effects on engine 0's feed");
    let mut c = Resp::connect(f.proxy_port());
    for i in 0..N {
        assert_eq!(cmd(&mut c, &["GET", &key(i)]), bulk(&value(i)), "key {i}");
        let ttl = cmd(&mut c, &["TTL", &key(i)]);
        assert_eq!(ttl == ":-1\\r\\n", i % 7 != 0, "TTL of key {i}: {ttl}");
    }
    assert_eq!(cmd(&mut c, &["DBSIZE"]), format!(":{}\\r\\n", N + 1));
    f.stop();
}

/// Neighbouring slots between the same two engines move as groups (supervisor
/// `slotmove_group.rs`): a relayed batch carries the keys of several slots, so the sources run
/// far fewer `TXLOCK`s than there are non-empty slots moved, and every key arrives. Each
/// source built its slot index in steps (`SLOTKEYSBUILD`) first.
#[test]
fn a_resize_moves_neighbouring_slots_in_groups() {
    const N: usize = 20_000;
    let mut f = Fleet::start("groups", 2, "");
    let base = f.base;
    let mut c = Resp::connect(f.proxy_port());
    for chunk in (0..N).collect::<Vec<_>>().chunks(500) {
        let mut args = vec!["MSET".to_string()];
        for &i in chunk {
            args.push(key(i));
            args.push(value(i));
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_eq!(cmd(&mut c, &args), OK, "MSET");
    }
    for i in (0..N).step_by(7) {
        assert_eq!(cmd(&mut c, &["EXPIRE", &key(i), "3600"]), ":1\\r\\n");
    }
    // Slots moved 2 → 3 that hold at least one key.
    let nonempty: std::collections::HashSet<u16> = (0..N)
        .map(|i| key_slot(key(i).as_bytes()))
        .filter(|&s| instance_for_slot(s, 2) != instance_for_slot(s, 3))
        .collect();
    let out = f.resize(3);
    assert!(out.ok, "resize 3: {}", out.text());
    assert_eq!(moved_slots(&out.text()), expected_moves(2, 3));
    let mut txlocks = 0;
    for port in [base, base + 1] {
        let stats = cmd(&mut Resp::connect(port), &["INFO", "commandstats"]);
        let calls = |name: &str| {
            stats
                .split(&format!("cmdstat_{name}:calls="))
                .nth(1)
                .and_then(|r| r.split(',').next())
                .and_then(|n| n.parse::<usize>().ok())
                .unwrap_or_else(|| panic!("engine {port} ran no {name}: {stats}"))
        };
        txlocks += calls("txlock");
        // Each source listed its keys by slot in steps before its first group, instead of
        // in its first GETKEYSINSLOT (supervisor `Mover::build_slot_index`).
        assert!(calls("slotkeysbuild") >= 1);
    }
    // One batch per slot would be one TXLOCK per non-empty slot (about 3,800 here).
    assert!(
        txlocks * 4 < nonempty.len(),
        "{txlocks} TXLOCKs for {} non-empty slots moved: not grouped",
        nonempty.len()
    );
    let mut c = Resp::connect(f.proxy_port());
    for i in 0..N {
        assert_eq!(cmd(&mut c, &["GET", &key(i)]), bulk(&value(i)), "key {i}");
        let ttl = cmd(&mut c, &["TTL", &key(i)]);
        assert_eq!(ttl == ":-1\\r\\n", i % 7 != 0, "TTL of key {i}: {ttl}");
    }
    assert_eq!(cmd(&mut c, &["DBSIZE"]), format!(":{N}\\r\\n"));
    assert_eq!(check_placement(base, 3), N);
    f.stop();
}

/// After a shrink the retired engine stops: requests the proxy sends to every engine on a
/// client's own connections (PSUBSCRIBE, MONITOR, CLIENT TRACKING, CLIENT GETREDIR, CONFIG
/// SET) leave it out, as DBSIZE does, and a client pattern-subscribed before the shrink keeps
/// its subscription. Before, each got `-ERR instance 2 (…) is unavailable` for good, and the
/// subscribed client got that error as a message, then its connection was closed.
#[test]
fn after_a_shrink_commands_to_every_engine_leave_the_retired_one_out() {
    let mut f = Fleet::start("shrink-fanout", 3, "");
    let proxy = f.proxy_port();
    let mut sub = Resp::connect(proxy);
    assert!(cmd(&mut sub, &["PSUBSCRIBE", "ev*"]).contains("psubscribe"));
    // A channel subscriber whose channel lives on the engine the shrink retires.
    let chan = (0..)
        .map(|i| format!("retiring:{i}"))
        .find(|c| engine_core::slot::instance_for_key(c.as_bytes(), 3) == 2)
        .unwrap();
    let mut csub = Resp::connect(proxy);
    assert!(cmd(&mut csub, &["SUBSCRIBE", &chan]).contains("subscribe"));
    let out = f.resize(2);
    assert!(out.ok, "resize 2: {}", out.text());
    // The retired engine is stopped after its grace period (bounded wait).
    let retired = f.base + 2;
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", retired)).is_ok() {
        assert!(
            Instant::now() < deadline,
            "engine {retired} still listening"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut c = Resp::connect(proxy);
    // The channel subscriber gets each message once, from the channel's new owner.
    for i in 0..3 {
        let msg = format!("m{i}");
        assert_eq!(
            cmd(&mut c, &["PUBLISH", &chan, &msg]),
            ":1\\r\\n",
            "PUBLISH {chan}"
        );
        let got = next(&mut csub);
        assert!(got.contains(&msg), "the channel subscriber got {got}");
    }
    assert_quiet(&mut csub, "the channel subscriber");
    // Every channel's owner, old and new, reaches the pattern subscriber.
    for ch in ["ev0", "ev1", "ev2", "ev3", "ev4", "ev5"] {
        assert_eq!(
            cmd(&mut c, &["PUBLISH", ch, "x"]),
            ":1\\r\\n",
            "PUBLISH {ch}"
        );
        let got = next(&mut sub);
        assert!(
            got.contains("pmessage") && got.contains(ch),
            "the subscriber got {got}"
        );
    }
    for (args, want) in [
        (
            &["CONFIG", "SET", "notify-keyspace-events", "KEA"][..],
            "+OK\\r\\n",
        ),
        (&["CLIENT", "TRACKING", "ON"][..], "+OK\\r\\n"),
        (&["CLIENT", "GETREDIR"][..], ":0\\r\\n"),
        (&["CLIENT", "TRACKING", "OFF"][..], "+OK\\r\\n"),
    ] {
        assert_eq!(cmd(&mut c, args), want, "{args:?}");
    }
    let mut p = Resp::connect(proxy);
    let got = cmd(&mut p, &["PSUBSCRIBE", "x*"]);
    assert!(
        got.contains("psubscribe"),
        "PSUBSCRIBE after the shrink: {got}"
    );
    let mut m = Resp::connect(proxy);
    assert_eq!(cmd(&mut m, &["MONITOR"]), "+OK\\r\\n");
    f.stop();
}

/// After a grow, what a client holds on every engine reaches the new one too: a pattern
/// subscriber gets messages published to channels of the new engine's slots, a MONITOR shows
/// its commands, and a RESP3 client tracking its reads gets the invalidation of a key it read
/// there. Before, the proxy relayed such a `pmessage` only from the channel's engine, where
/// the client had no pattern (PUBLISH answered 0 and nothing arrived), the monitor showed
/// nothing of the new engine, and the key's invalidation never came.
#[test]
fn after_a_grow_patterns_monitor_and_tracking_reach_the_new_engine() {
    use engine_core::slot::instance_for_key;
    let mut f = Fleet::start("grow-everywhere", 2, "");
    let proxy = f.proxy_port();
    let on_new = |prefix: &str| {
        (0..)
            .map(|i| format!("{prefix}{i}"))
            .find(|k| instance_for_key(k.as_bytes(), 3) == 2)
            .unwrap()
    };
    let (chan, key) = (on_new("ev:"), on_new("tracked:"));
    let mut sub = Resp::connect(proxy);
    assert!(cmd(&mut sub, &["PSUBSCRIBE", "ev:*"]).contains("psubscribe"));
    let mut mon = Resp::connect(proxy);
    assert_eq!(cmd(&mut mon, &["MONITOR"]), "+OK\\r\\n");
    let mut t = Resp::connect(proxy);
    t.cmd_str(&["HELLO", "3"]);
    assert_eq!(cmd(&mut t, &["CLIENT", "TRACKING", "ON"]), "+OK\\r\\n");
    let out = f.resize(3);
    assert!(out.ok, "resize 3: {}", out.text());
    let mut c = Resp::connect(proxy);
    // The proxy learns the new owner within its refresh interval (1 s); bounded wait for the
    // first message, then every one must arrive.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let n = cmd(&mut c, &["PUBLISH", &chan, "first"]);
        if let Ok(frame) = sub.try_read_frame() {
            let got = escape(&frame);
            assert!(got.contains("pmessage") && got.contains("first"), "{got}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no pmessage for {chan} (PUBLISH: {n})"
        );
    }
    assert_eq!(cmd(&mut c, &["PUBLISH", &chan, "second"]), ":1\\r\\n");
    assert!(next(&mut sub).contains("second"));
    // The monitor shows a write served by the new engine.
    assert_eq!(cmd(&mut c, &["SET", &key, "v1"]), OK);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let line = next(&mut mon);
        if line.contains(&key) {
            break;
        }
        assert!(Instant::now() < deadline, "MONITOR never showed {key}");
    }
    // The tracking client reads the key (on the new engine), another client changes it.
    assert_eq!(cmd(&mut t, &["GET", &key]), "$2\\r\\nv1\\r\\n");
    assert_eq!(cmd(&mut c, &["SET", &key, "v2"]), OK);
    let inv = next(&mut t);
    assert!(
        inv.contains("invalidate") && inv.contains(&key),
        "invalidation of {key}: {inv}"
    );
    f.stop();
}
