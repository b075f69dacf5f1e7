//! Snapshots and the supervisor (issue 6), end to end with the real `recached` binary:
//!
//! - graceful restart loses nothing: 100,000 keys of every type, a third with TTLs, loaded
//!   through the proxy; `recached stop`; `recached start` on the same dir and ports; every
//!   value is back and every expiry time is within a second of what it was;
//! - kill -9 of one engine while redis-benchmark runs through the proxy: a new engine serves
//!   within 2 s, the other instance's keys never fail, nothing hangs, and the new engine holds
//!   exactly its last snapshot (keys written after it are gone, keys before it are back);
//! - BGSAVE under write load writes the keyspace as of the fork;
//! - truncated and corrupt snapshots are refused with the file and byte offset in the log and
//!   moved aside, in both `on_corrupt_snapshot` modes (a refusing engine exits 78 and the
//!   supervisor leaves it `failed` while the rest of the fleet serves);
//! - SIGTERM to the supervisor leaves no process behind (checked by pid);
//! - a SIGSTOPped (hung) engine is found by PING and replaced;
//! - a child that dies at once on every start is reported as a crash loop without spinning;
//! - FUNCTION libraries survive a restart (snapshots keep their code).
//!
//! Cleanup: [`Fleet`]'s Drop SIGKILLs the supervisor and every child pid in `state.toml`;
//! every wait is bounded.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use engine_core::slot::instance_for_key;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const FLEET_START: Duration = Duration::from_secs(30);

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// A fresh directory (not created) under cargo's test temp dir.
fn test_dir(name: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("persist-{name}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `n` consecutive free ports below the ephemeral range (see e2e_fleet.rs).
fn free_ports(n: usize) -> u16 {
    use std::hash::{BuildHasher, Hasher};
    for _ in 0..500 {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(Instant::now().elapsed().as_nanos());
        let base = (16_000 + h.finish() % (15_000 - n as u64)) as u16;
        if (0..n).all(|i| std::net::TcpListener::bind(("127.0.0.1", base + i as u16)).is_ok()) {
            return base;
        }
    }
    panic!("no run of {n} free ports");
}

/// A supervised fleet: `recached start --config dir/recached.toml --dir dir`.
struct Fleet {
    sup: Option<Proc>,
    dir: PathBuf,
    config: PathBuf,
    proxy_port: u16,
    engine_ports: Vec<u16>,
}

impl Fleet {
    /// Writes the config (`extra` is appended to its `[engine]`/`[supervisor]` tables) and
    /// starts the fleet; with `wait`, until every port accepts connections.
    fn start(engines: usize, dir: &Path, engine_toml: &str, supervisor_toml: &str) -> Fleet {
        let base = free_ports(engines + 1);
        let config = dir.join("recached.toml");
        std::fs::write(
            &config,
            format!(
                "engines = {engines}\nbind = \"127.0.0.1\"\nproxy_port = {}\nengine_port_base = {base}\n\
                 dir = \"{}\"\n\
                 # Other fleets run in parallel: no fan-out or metrics on fixed ports.\n\
                 fanout_port = 0\nmetrics_port = 0\n[engine]\n{engine_toml}\n[supervisor]\n{supervisor_toml}\n",
                base + engines as u16,
                dir.display()
            ),
        )
        .unwrap();
        let mut f = Fleet {
            sup: None,
            dir: dir.to_path_buf(),
            config,
            proxy_port: base + engines as u16,
            engine_ports: (0..engines).map(|i| base + i as u16).collect(),
        };
        f.restart();
        f
    }

    /// Starts (again) the supervisor over the same dir and config; waits for every port.
    fn restart(&mut self) {
        let mut cmd = Command::new(recached_bin());
        cmd.arg("start")
            .arg("--config")
            .arg(&self.config)
            .env("RUST_LOG", "info");
        let mut sup = Proc::spawn("fleet", cmd);
        for &p in self.engine_ports.iter().chain([&self.proxy_port]) {
            sup.wait_port(p, FLEET_START);
        }
        sup.wait_proxy_reaches_engines(self.proxy_port, FLEET_START);
        self.sup = Some(sup);
    }

    fn sup(&self) -> &Proc {
        self.sup.as_ref().expect("fleet running")
    }

    fn state(&self) -> toml::Table {
        let text = std::fs::read_to_string(self.dir.join("state.toml")).unwrap_or_default();
        text.parse().unwrap_or_default()
    }

    /// (role, index, pid, state) of every child in the state file.
    fn children(&self) -> Vec<(String, i64, Option<u32>, String)> {
        let t = self.state();
        let Some(children) = t.get("children").and_then(|c| c.as_array()) else {
            return vec![];
        };
        children
            .iter()
            .filter_map(|c| {
                Some((
                    c.get("role")?.as_str()?.to_string(),
                    c.get("index")?.as_integer()?,
                    c.get("pid").and_then(|p| p.as_integer()).map(|p| p as u32),
                    c.get("state")?.as_str()?.to_string(),
                ))
            })
            .collect()
    }

    fn engine_pid(&self, i: i64) -> Option<u32> {
        self.children()
            .into_iter()
            .find(|(r, idx, _, _)| r == "engine" && *idx == i)
            .and_then(|c| c.2)
    }

    /// `recached stop --dir DIR`, bounded; the supervisor must then have exited.
    fn stop(&mut self) {
        stop_fleet_and_wait(&self.dir, self.sup.take().expect("running"));
    }

    fn engine_log(&self, i: usize) -> String {
        std::fs::read_to_string(self.dir.join(format!("logs/engine-{i}.log"))).unwrap_or_default()
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        let pids: Vec<u32> = self.children().into_iter().filter_map(|c| c.2).collect();
        if let Some(mut sup) = self.sup.take() {
            let running = sup.is_running();
            sup.kill();
            if running {
                for pid in pids {
                    let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
                }
            }
        }
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        } else {
            eprintln!("fleet dir kept at {}", self.dir.display());
        }
    }
}

fn pid_alive(pid: u32) -> bool {
    // A zombie still answers kill(0); /proc tells them apart.
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    kill(Pid::from_raw(pid as i32), None).is_ok() && !stat.contains(") Z ")
}

fn int_reply(r: &[u8]) -> i64 {
    let t = String::from_utf8_lossy(r);
    t.strip_prefix(':')
        .and_then(|t| t.trim_end().parse().ok())
        .unwrap_or_else(|| panic!("not an integer reply: {}", escape(r)))
}

/// Sends `cmds` pipelined in batches of 1000; returns every reply in order.
fn pipeline(c: &mut Resp, cmds: &[Vec<Vec<u8>>]) -> Vec<Vec<u8>> {
    let mut out = Vec::with_capacity(cmds.len());
    for chunk in cmds.chunks(1000) {
        let mut buf = Vec::new();
        for cmd in chunk {
            let args: Vec<&[u8]> = cmd.iter().map(|a| &a[..]).collect();
            buf.extend_from_slice(&Resp::encode(&args));
        }
        c.send_raw(&buf);
        for _ in chunk {
            out.push(c.read_frame());
        }
    }
    out
}

fn args(a: &[&str]) -> Vec<Vec<u8>> {
    a.iter().map(|s| s.as_bytes().to_vec()).collect()
}

/// The writes that create key `i` (type by `i % 5`), and its TTL in ms (every third key).
fn writes_for(i: usize) -> (String, Vec<Vec<Vec<u8>>>, Option<u64>) {
    let key = format!("p:{i}");
    let mut w = match i % 5 {
        0 => vec![args(&["SET", &key, &format!("v{i}")])],
        1 => vec![args(&["RPUSH", &key, "a", &format!("b{i}"), "c"])],
        2 => vec![args(&["HSET", &key, "f1", &format!("{i}"), "f2", "x"])],
        3 => vec![args(&["SADD", &key, &format!("m{i}"), "n", "o"])],
        _ => vec![args(&["ZADD", &key, "1.5", "a", &format!("-{i}"), "b"])],
    };
    let ttl = i.is_multiple_of(3).then(|| 600_000 + i as u64);
    if let Some(t) = ttl {
        w.push(args(&["PEXPIRE", &key, &t.to_string()]));
    }
    (key, w, ttl)
}

/// The read that shows key `i`'s whole value.
fn read_for(i: usize) -> Vec<Vec<u8>> {
    let key = format!("p:{i}");
    match i % 5 {
        0 => args(&["GET", &key]),
        1 => args(&["LRANGE", &key, "0", "-1"]),
        2 => args(&["HGETALL", &key]),
        3 => args(&["SMEMBERS", &key]),
        _ => args(&["ZRANGE", &key, "0", "-1", "WITHSCORES"]),
    }
}

/// The issue's count; loading and checking it takes a few seconds on this machine.
const GRACEFUL_KEYS: usize = 100_000;

#[test]
fn graceful_restart_loses_nothing() {
    let dir = test_dir("graceful");
    let mut fleet = Fleet::start(2, &dir, "save_interval = 0", "");
    let mut c = Resp::connect(fleet.proxy_port);
    let mut cmds = Vec::new();
    let mut ttls = Vec::new();
    for i in 0..GRACEFUL_KEYS {
        let (_, w, ttl) = writes_for(i);
        cmds.extend(w);
        ttls.push(ttl);
    }
    let t_sent = unix_ms();
    for r in pipeline(&mut c, &cmds) {
        assert!(!r.starts_with(b"-"), "write failed: {}", escape(&r));
    }
    let t_done = unix_ms();
    let reads: Vec<Vec<Vec<u8>>> = (0..GRACEFUL_KEYS).map(read_for).collect();
    let before = pipeline(&mut c, &reads);
    drop(c);
    let n0 = int_reply(&Resp::connect(fleet.engine_ports[0]).cmd_str(&["DBSIZE"]));
    let n1 = int_reply(&Resp::connect(fleet.engine_ports[1]).cmd_str(&["DBSIZE"]));
    assert_eq!(n0 + n1, GRACEFUL_KEYS as i64);
    assert!(n0 > 0 && n1 > 0, "keys on both instances: {n0} {n1}");

    fleet.stop();
    for port in &fleet.engine_ports {
        assert!(
            dir.join(format!("dump-{port}.rcs")).exists(),
            "snapshot of {port}"
        );
    }
    fleet.restart();

    let mut c = Resp::connect(fleet.proxy_port);
    let after = pipeline(&mut c, &reads);
    for i in 0..GRACEFUL_KEYS {
        assert_eq!(
            escape(&before[i]),
            escape(&after[i]),
            "key p:{i} differs after restart"
        );
    }
    let pexp: Vec<Vec<Vec<u8>>> = (0..GRACEFUL_KEYS)
        .map(|i| args(&["PEXPIRETIME", &format!("p:{i}")]))
        .collect();
    for (i, r) in pipeline(&mut c, &pexp).into_iter().enumerate() {
        let at = int_reply(&r);
        match ttls[i] {
            None => assert_eq!(at, -1, "p:{i} has no TTL"),
            Some(t) => {
                let (lo, hi) = (t_sent + t, t_done + t);
                assert!(
                    at as u64 + 1000 >= lo && at as u64 <= hi + 1000,
                    "p:{i}: expiry {at} not within a second of [{lo}, {hi}]"
                );
            }
        }
    }
    assert_eq!(
        int_reply(&Resp::connect(fleet.engine_ports[0]).cmd_str(&["DBSIZE"])),
        n0
    );
    let log = fleet.engine_log(0);
    assert!(log.contains("loaded snapshot"), "engine-0 log:\n{log}");
    fleet.stop();
}

#[test]
fn kill_9_under_benchmark_restores_the_last_snapshot() {
    let dir = test_dir("crash");
    let fleet = Fleet::start(2, &dir, "save_interval = 0", "");
    let e0 = fleet.engine_ports[0];
    // Keys owned by engine 0 and by engine 1.
    let owned = |inst: u32, prefix: &str, n: usize| -> Vec<String> {
        (0..)
            .map(|i| format!("{prefix}{i}"))
            .filter(|k| instance_for_key(k.as_bytes(), 2) == inst)
            .take(n)
            .collect()
    };
    let before = owned(0, "crash:before:", 500);
    let after = owned(0, "crash:after:", 500);
    let other = owned(1, "crash:other:", 200);
    let mut c = Resp::connect(fleet.proxy_port);
    let set = |keys: &[String]| -> Vec<Vec<Vec<u8>>> {
        keys.iter().map(|k| args(&["SET", k, k])).collect()
    };
    pipeline(&mut c, &set(&before));
    pipeline(&mut c, &set(&other));
    assert_eq!(Resp::connect(e0).cmd_str(&["SAVE"]), b"+OK\r\n");
    pipeline(&mut c, &set(&after));
    drop(c);

    // Load through the proxy during the crash; the benchmark must finish on its own.
    let mut bench = Command::new("redis-benchmark")
        .args(["-h", "127.0.0.1", "-p", &fleet.proxy_port.to_string()])
        .args([
            "-t", "set,get", "-n", "60000", "-r", "10000", "-c", "8", "-q",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-benchmark");
    std::thread::sleep(Duration::from_millis(300));

    // A reader of engine 1's keys: every GET must succeed, and quickly, during the gap.
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let stop = stop.clone();
        let other = other.clone();
        let port = fleet.proxy_port;
        std::thread::spawn(move || {
            let mut c = Resp::connect(port);
            let mut n = 0u64;
            let mut worst = Duration::ZERO;
            while !stop.load(Ordering::Relaxed) {
                for k in other.iter().take(20) {
                    let t = Instant::now();
                    let r = c.cmd_str(&["GET", k]);
                    worst = worst.max(t.elapsed());
                    assert_eq!(r, format!("${}\r\n{k}\r\n", k.len()).as_bytes(), "GET {k}");
                    n += 1;
                }
            }
            (n, worst)
        })
    };
    // A client of engine 0's keys: fast errors (or answers), never a hang.
    let prober = {
        let stop = stop.clone();
        let key = before[0].clone();
        let port = fleet.proxy_port;
        std::thread::spawn(move || {
            let mut c = Resp::connect(port);
            let mut worst = Duration::ZERO;
            let mut errors = 0;
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                let r = c.cmd_str(&["GET", &key]);
                worst = worst.max(t.elapsed());
                if r.starts_with(b"-") {
                    errors += 1;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            (errors, worst)
        })
    };

    let old = fleet.engine_pid(0).expect("engine-0 pid");
    kill(Pid::from_raw(old as i32), Signal::SIGKILL).unwrap();
    let killed = Instant::now();
    loop {
        if fleet.engine_pid(0).is_some_and(|p| p != old) && pings(e0) {
            break;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(2),
            "no new engine-0 within 2 s; supervisor log:\n{}",
            fleet.sup().log()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let gap = killed.elapsed();
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    let (reads, worst_other) = reader.join().expect("reader: engine 1's keys never failed");
    let (_errors, worst_e0) = prober.join().unwrap();
    assert!(reads > 0);
    assert!(
        worst_other < Duration::from_secs(1),
        "engine 1 keys slowed to {worst_other:?}"
    );
    assert!(
        worst_e0 < Duration::from_secs(2),
        "engine 0 keys hung {worst_e0:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if bench.try_wait().unwrap().is_some() {
            break;
        }
        assert!(Instant::now() < deadline, "redis-benchmark hung");
        std::thread::sleep(Duration::from_millis(50));
    }

    // Exactly the last snapshot: everything before SAVE, nothing after it.
    let mut c = Resp::connect(e0);
    let get =
        |keys: &[String]| -> Vec<Vec<Vec<u8>>> { keys.iter().map(|k| args(&["GET", k])).collect() };
    for (k, r) in before.iter().zip(pipeline(&mut c, &get(&before))) {
        assert_eq!(r, format!("${}\r\n{k}\r\n", k.len()).as_bytes(), "{k} lost");
    }
    for (k, r) in after.iter().zip(pipeline(&mut c, &get(&after))) {
        assert_eq!(r, b"$-1\r\n", "{k} was written after the snapshot");
    }
    eprintln!("engine-0 replaced in {gap:?}; {reads} reads of engine 1 kept working");
}

#[test]
fn bgsave_under_writes_saves_the_keyspace_as_of_the_fork() {
    let dir = test_dir("bgsave");
    let port = free_ports(1);
    let spawn = |port: u16, d: &Path| {
        let mut cmd = Command::new(recached_bin());
        cmd.args([
            "server",
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--dir",
        ])
        .arg(d)
        .env("RUST_LOG", "info");
        let mut p = Proc::spawn(&format!("engine-{port}"), cmd);
        p.wait_port(port, START_TIMEOUT);
        p
    };
    let _engine = spawn(port, &dir);
    let mut c = Resp::connect(port);
    const N: usize = 20_000;
    let v0: Vec<Vec<Vec<u8>>> = (0..N)
        .map(|i| args(&["SET", &format!("k{i}"), &format!("v0-{i}")]))
        .collect();
    pipeline(&mut c, &v0);
    // One pipeline: INCR, BGSAVE, a second BGSAVE (the child is reaped only between loop
    // iterations, so it is still running: Redis's error), then overwrite everything while the
    // child writes. (A BGSAVE sent later could start a second save, whose snapshot would hold
    // the overwrites: this test once failed that way on a loaded host.)
    let mut cmds = vec![
        args(&["INCR", "counter"]),
        args(&["BGSAVE"]),
        args(&["BGSAVE"]),
    ];
    cmds.extend((0..N).map(|i| args(&["SET", &format!("k{i}"), &format!("v1-{i}")])));
    cmds.push(args(&["INCR", "counter"]));
    let replies = pipeline(&mut c, &cmds);
    assert_eq!(replies[1], b"+Background saving started\r\n");
    assert_eq!(replies[2], b"-ERR Background save already in progress\r\n");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let info = String::from_utf8_lossy(&c.cmd_str(&["INFO", "persistence"])).to_string();
        if info.contains("rdb_bgsave_in_progress:0") {
            assert!(info.contains("rdb_last_bgsave_status:ok"), "{info}");
            break;
        }
        assert!(Instant::now() < deadline, "the BGSAVE child never finished");
        std::thread::sleep(Duration::from_millis(5));
    }
    // Load the snapshot into a second engine.
    let dir2 = test_dir("bgsave-copy");
    let port2 = free_ports(1);
    std::fs::copy(
        dir.join(format!("dump-{port}.rcs")),
        dir2.join(format!("dump-{port2}.rcs")),
    )
    .unwrap();
    let _engine2 = spawn(port2, &dir2);
    let mut c2 = Resp::connect(port2);
    assert_eq!(c2.cmd_str(&["GET", "counter"]), b"$1\r\n1\r\n");
    assert_eq!(int_reply(&c2.cmd_str(&["DBSIZE"])), N as i64 + 1);
    let gets: Vec<Vec<Vec<u8>>> = (0..N).map(|i| args(&["GET", &format!("k{i}")])).collect();
    for (i, r) in pipeline(&mut c2, &gets).into_iter().enumerate() {
        let v = format!("v0-{i}");
        assert_eq!(r, format!("${}\r\n{v}\r\n", v.len()).as_bytes(), "k{i}");
    }
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&dir2);
}

/// Starts a standalone engine on `port` over `dir` with `on_corrupt_snapshot = mode`.
fn engine_with_mode(port: u16, dir: &Path, mode: &str) -> Proc {
    let cfg = dir.join(format!("engine-{mode}.toml"));
    std::fs::write(
        &cfg,
        format!("[engine]\non_corrupt_snapshot = \"{mode}\"\n"),
    )
    .unwrap();
    let mut cmd = Command::new(recached_bin());
    cmd.args([
        "server",
        "--port",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
        "--config",
    ])
    .arg(&cfg)
    .arg("--dir")
    .arg(dir)
    .env("RUST_LOG", "info");
    Proc::spawn(&format!("engine-{port}-{mode}"), cmd)
}

/// Makes a valid snapshot for `port` in `dir` (a few keys, one with a TTL).
fn make_snapshot(port: u16, dir: &Path) -> Vec<u8> {
    let mut p = engine_with_mode(port, dir, "start-empty");
    p.wait_port(port, START_TIMEOUT);
    let mut c = Resp::connect(port);
    for i in 0..200 {
        c.cmd_str(&["SET", &format!("k{i}"), "value"]);
    }
    c.cmd_str(&["HSET", "h", "f", "v"]);
    assert_eq!(c.cmd_str(&["SAVE"]), b"+OK\r\n");
    p.kill();
    std::fs::read(dir.join(format!("dump-{port}.rcs"))).unwrap()
}

#[test]
fn function_libraries_survive_a_restart() {
    let dir = test_dir("functions-restart");
    let port = free_ports(1);
    let lib = "#!lua name=counter\n\
        redis.register_function('bump', function(keys, args) \
        return redis.call('incrby', keys[1], args[1]) end)";
    let mut p = engine_with_mode(port, &dir, "refuse");
    p.wait_port(port, START_TIMEOUT);
    let mut c = Resp::connect(port);
    assert_eq!(c.cmd_str(&["FUNCTION", "LOAD", lib]), b"$7\r\ncounter\r\n");
    assert_eq!(c.cmd_str(&["FCALL", "bump", "1", "n", "5"]), b":5\r\n");
    assert_eq!(c.cmd_str(&["SAVE"]), b"+OK\r\n");
    let list = c.cmd_str(&["FUNCTION", "LIST", "WITHCODE"]);
    p.kill();

    let mut p = engine_with_mode(port, &dir, "refuse");
    p.wait_port(port, START_TIMEOUT);
    let mut c = Resp::connect(port);
    assert_eq!(c.cmd_str(&["FUNCTION", "LIST", "WITHCODE"]), list);
    assert_eq!(c.cmd_str(&["FCALL", "bump", "1", "n", "2"]), b":7\r\n");
    p.kill();
    let _ = std::fs::remove_dir_all(&dir);
}

fn corrupt_files(dir: &Path, port: u16) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name().is_some_and(|n| {
                n.to_string_lossy()
                    .starts_with(&format!("dump-{port}.rcs.corrupt-"))
            })
        })
        .collect()
}

#[test]
fn truncated_and_corrupt_snapshots_are_refused_and_moved_aside() {
    for (damage, mode) in [
        ("truncate", "start-empty"),
        ("flip", "start-empty"),
        ("truncate", "refuse"),
        ("flip", "refuse"),
    ] {
        let dir = test_dir(&format!("corrupt-{damage}-{mode}"));
        let port = free_ports(1);
        let good = make_snapshot(port, &dir);
        let bad = match damage {
            "truncate" => good[..good.len() * 2 / 3].to_vec(),
            _ => {
                let mut b = good.clone();
                b[good.len() / 2] ^= 0x20;
                b
            }
        };
        let path = dir.join(format!("dump-{port}.rcs"));
        std::fs::write(&path, &bad).unwrap();
        // An older file moved aside before must never be overwritten.
        let mut p = engine_with_mode(port, &dir, mode);
        if mode == "start-empty" {
            p.wait_port(port, START_TIMEOUT);
            assert_eq!(int_reply(&Resp::connect(port).cmd_str(&["DBSIZE"])), 0);
        } else {
            let deadline = Instant::now() + Duration::from_secs(20);
            let status = loop {
                if let Some(s) = p.child.try_wait().unwrap() {
                    break s;
                }
                assert!(Instant::now() < deadline, "refuse mode must exit");
                std::thread::sleep(Duration::from_millis(20));
            };
            assert_eq!(status.code(), Some(78), "log:\n{}", p.log());
        }
        let log = p.log();
        assert!(
            log.contains(&path.display().to_string()) && log.contains("at byte offset"),
            "{damage}/{mode}: the log names the file and offset:\n{log}"
        );
        if damage == "flip" {
            // Format version 3: a flip inside a compressed frame may be caught by the LZ4
            // decoder or the item parser before the checksum.
            assert!(
                log.contains("checksum mismatch") || log.contains("corrupt compressed frame"),
                "{log}"
            );
        } else {
            assert!(log.contains("truncated"), "{log}");
        }
        assert!(!path.exists(), "the bad file is moved aside");
        let aside = corrupt_files(&dir, port);
        assert_eq!(aside.len(), 1, "{aside:?}");
        assert_eq!(std::fs::read(&aside[0]).unwrap(), bad, "kept byte for byte");
        p.kill();
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn a_fleet_with_a_corrupt_snapshot_comes_up_per_the_setting() {
    for mode in ["start-empty", "refuse"] {
        let dir = test_dir(&format!("fleet-corrupt-{mode}"));
        let mut fleet = Fleet::start(2, &dir, &format!("on_corrupt_snapshot = \"{mode}\""), "");
        let (e0, e1) = (fleet.engine_ports[0], fleet.engine_ports[1]);
        Resp::connect(fleet.proxy_port).cmd_str(&["MSET", "a", "1", "b", "2", "c", "3", "d", "4"]);
        fleet.stop();
        let p0 = dir.join(format!("dump-{e0}.rcs"));
        let mut bytes = std::fs::read(&p0).unwrap();
        let n = bytes.len();
        bytes[n - 13] ^= 0xFF; // inside the key count / checksum
        std::fs::write(&p0, &bytes).unwrap();
        // Engine 0 may never listen in refuse mode: start without waiting for it.
        let mut cmd = Command::new(recached_bin());
        cmd.arg("start").arg("--config").arg(&fleet.config);
        let mut sup = Proc::spawn("fleet", cmd);
        sup.wait_port(e1, FLEET_START);
        sup.wait_port(fleet.proxy_port, FLEET_START);
        fleet.sup = Some(sup);
        assert_eq!(corrupt_files(&dir, e0).len(), 1);
        if mode == "start-empty" {
            fleet.sup.as_mut().unwrap().wait_port(e0, FLEET_START);
            assert_eq!(int_reply(&Resp::connect(e0).cmd_str(&["DBSIZE"])), 0);
        } else {
            let deadline = Instant::now() + Duration::from_secs(20);
            while !fleet
                .children()
                .iter()
                .any(|c| c.0 == "engine" && c.1 == 0 && c.3 == "failed")
            {
                assert!(
                    Instant::now() < deadline,
                    "engine-0 not failed: {:?}\n{}",
                    fleet.children(),
                    fleet.sup().log()
                );
                std::thread::sleep(Duration::from_millis(50));
            }
            // Not restarted: stays down, without a pid.
            std::thread::sleep(Duration::from_millis(500));
            assert!(fleet.engine_pid(0).is_none());
            assert!(!pings(e0));
        }
        // The other engine kept its data.
        assert!(int_reply(&Resp::connect(e1).cmd_str(&["DBSIZE"])) > 0);
        fleet.stop();
    }
}

#[test]
fn sigterm_to_the_supervisor_leaves_no_process_behind() {
    let dir = test_dir("sigterm");
    let mut fleet = Fleet::start(2, &dir, "", "");
    Resp::connect(fleet.proxy_port).cmd_str(&["SET", "x", "1"]);
    let mut pids: Vec<u32> = fleet.children().into_iter().filter_map(|c| c.2).collect();
    // Two engines and the proxy (and whatever other roles the fleet runs).
    assert!(pids.len() >= 3, "{:?}", fleet.children());
    let sup_pid = fleet.sup().pid();
    pids.push(sup_pid);
    kill(Pid::from_raw(sup_pid as i32), Signal::SIGTERM).unwrap();
    let mut sup = fleet.sup.take().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while sup.is_running() {
        assert!(
            Instant::now() < deadline,
            "supervisor still running:\n{}",
            sup.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    for pid in &pids {
        assert!(!pid_alive(*pid), "pid {pid} survived the stop");
    }
    // Each engine made its final save.
    let saved = (0..2)
        .filter(|&i| fleet.engine_log(i).contains("DB saved on disk"))
        .count();
    assert!(saved >= 1, "{}", fleet.engine_log(0));
    assert!(!dir.join("recached.pid").exists());
}

#[test]
fn a_hung_engine_is_found_by_ping_and_replaced() {
    let dir = test_dir("hung");
    let fleet = Fleet::start(
        1,
        &dir,
        "",
        "health_check_interval_ms = 200\nhealth_check_timeout_ms = 200\nhealth_check_failures = 3",
    );
    let e0 = fleet.engine_ports[0];
    // The supervisor must have seen it answer once before it checks it.
    std::thread::sleep(Duration::from_millis(600));
    let old = fleet.engine_pid(0).unwrap();
    kill(Pid::from_raw(old as i32), Signal::SIGSTOP).unwrap();
    let t = Instant::now();
    loop {
        if fleet.engine_pid(0).is_some_and(|p| p != old) && pings(e0) {
            break;
        }
        if t.elapsed() > Duration::from_secs(15) {
            let _ = kill(Pid::from_raw(old as i32), Signal::SIGKILL);
            panic!("hung engine not replaced; log:\n{}", fleet.sup().log());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!pid_alive(old), "the hung process was killed");
    assert!(
        fleet.sup().log().contains("is hung"),
        "{}",
        fleet.sup().log()
    );
    eprintln!("hung engine replaced after {:?}", t.elapsed());
}

#[test]
fn a_child_that_dies_at_once_is_a_crash_loop_without_spinning() {
    let dir = test_dir("crashloop");
    let fleet = Fleet::start(
        1,
        &dir,
        "",
        "min_healthy_uptime_ms = 60000\nrestart_backoff_initial_ms = 300\nrestart_backoff_max_ms = 400",
    );
    let e0 = fleet.engine_ports[0];
    // Kill the engine and take its port, so every restart fails to bind and exits.
    let old = fleet.engine_pid(0).unwrap();
    kill(Pid::from_raw(old as i32), Signal::SIGKILL).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let _squatter = loop {
        if let Ok(l) = std::net::TcpListener::bind(("127.0.0.1", e0)) {
            break l;
        }
        assert!(Instant::now() < deadline, "could not take the port");
        std::thread::sleep(Duration::from_millis(2));
    };
    let sup_pid = fleet.sup().pid();
    let cpu = || -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{sup_pid}/stat")).unwrap();
        let f: Vec<&str> = stat
            .rsplit(')')
            .next()
            .unwrap()
            .split_whitespace()
            .collect();
        f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
    };
    let t = Instant::now();
    let cpu0 = cpu();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !fleet.sup().log().contains("crash loop") {
        assert!(
            Instant::now() < deadline,
            "no crash loop reported:\n{}",
            fleet.sup().log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let ticks = cpu() - cpu0;
    let secs = t.elapsed().as_secs_f64();
    // Clock ticks are 1/100 s: under 20 % of one core while the child keeps dying.
    assert!(
        (ticks as f64 / 100.0) < 0.2 * secs + 0.1,
        "supervisor used {ticks} ticks in {secs:.1}s"
    );
}
