//! Restarting a fleet with another engine count keeps every key (issue 21, item 1;
//! docs/operations.md, "Changing the number of engines"), end to end with the real binary:
//!
//! 2→3, 3→2, 4→1 and 1→4 engines over the same dir, with 10,000 keys written through the
//! proxy (strings, and some lists, hashes, sets, sorted sets and streams; a seventh with a TTL;
//! a tenth in database 1) and a FUNCTION library. After `recached stop` and `recached start
//! --engines M`, through the proxy every key reads back the same reply and the same
//! PEXPIRETIME, DBSIZE per database equals the key count, each engine's DBSIZE equals the keys
//! whose slot it owns, every engine has the library, and no staged `reshard-*.rcs` remains.
//! Before the change, the keys whose slot moved were unreadable (issue 21).
//!
//! Also: a crash (SIGKILL of the supervisor and its engines) 0, 30 or 120 ms into a 2→3
//! re-shard, then a start with 3, 4 or 1 engines, keeps every key; and swapped snapshots
//! (each engine's file under the other's name) are reported by both engines and moved to
//! their owners by `recached start --reshard`.
//!
//! Cleanup: [`Fleet`]'s Drop SIGKILLs the supervisor and every child pid in `state.toml`;
//! every wait is bounded.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use engine_core::slot::instance_for_key;

const FLEET_START: Duration = Duration::from_secs(30);
const KEYS: usize = 10_000;
/// The most engines a test runs: the proxy port comes after theirs.
const MAX_ENGINES: u16 = 4;
const LIBRARY: &str = "#!lua name=rslib\nredis.register_function('rsfn', function() return 7 end)";

fn test_dir(name: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("reshard-{name}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A supervised fleet over one dir and one run of ports, restartable with another size.
struct Fleet {
    sup: Option<Proc>,
    dir: PathBuf,
    base: u16,
    engines: usize,
    /// More `recached start` arguments (e.g. `--reshard`).
    extra: Vec<&'static str>,
}

impl Fleet {
    fn new(name: &str) -> Fleet {
        Fleet {
            sup: None,
            dir: test_dir(name),
            base: free_port_run(MAX_ENGINES as usize + 1),
            engines: 0,
            extra: Vec::new(),
        }
    }

    fn proxy_port(&self) -> u16 {
        self.base + MAX_ENGINES
    }

    fn engine_ports(&self) -> Vec<u16> {
        (0..self.engines).map(|i| self.base + i as u16).collect()
    }

    /// `recached start` with `engines` engines; waits for every port and the proxy's engines.
    fn start(&mut self, engines: usize) {
        self.spawn(engines);
        let sup = self.sup.as_mut().expect("spawned");
        for p in (0..engines)
            .map(|i| self.base + i as u16)
            .chain([self.base + MAX_ENGINES])
        {
            sup.wait_port(p, FLEET_START);
        }
        sup.wait_proxy_reaches_engines(self.base + MAX_ENGINES, FLEET_START);
    }

    /// `recached start` with `engines` engines, without waiting.
    fn spawn(&mut self, engines: usize) {
        self.engines = engines;
        let config = self.dir.join("recached.toml");
        std::fs::write(
            &config,
            format!(
                "engines = {engines}\nbind = \"127.0.0.1\"\nproxy_port = {}\nengine_port_base = {}\n\
                 dir = \"{}\"\nfanout_port = 0\nmetrics_port = 0\n[engine]\nsave_interval = 0\n",
                self.proxy_port(),
                self.base,
                self.dir.display()
            ),
        )
        .unwrap();
        let mut cmd = Command::new(recached_bin());
        cmd.arg("start")
            .arg("--config")
            .arg(&config)
            .args(&self.extra)
            .env("RUST_LOG", "info");
        self.sup = Some(Proc::spawn(&format!("fleet-{engines}"), cmd));
    }

    /// A crash: SIGKILL to the supervisor and every child it recorded (the others get SIGTERM
    /// from their parent-death signal); waits until every port of the fleet is free.
    fn crash(&mut self) {
        let mut sup = self.sup.take().expect("running");
        sup.kill();
        kill_recorded_children(&self.dir.join("state.toml"));
        let deadline = Instant::now() + Duration::from_secs(20);
        while (0..=MAX_ENGINES)
            .any(|i| std::net::TcpListener::bind(("127.0.0.1", self.base + i)).is_err())
        {
            assert!(
                Instant::now() < deadline,
                "ports still busy after the crash"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `recached stop --dir DIR`, bounded; the supervisor must then have exited.
    fn stop(&mut self) {
        stop_fleet_and_wait(&self.dir, self.sup.take().expect("running"));
    }

    fn staged(&self) -> Vec<String> {
        std::fs::read_dir(&self.dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("reshard-") && n.ends_with(".rcs"))
            .collect()
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        if let Some(mut sup) = self.sup.take() {
            teardown_fleet(&mut sup, &self.dir.join("state.toml"), &self.dir);
        } else if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

fn args(a: &[&str]) -> Vec<Vec<u8>> {
    a.iter().map(|s| s.as_bytes().to_vec()).collect()
}

/// Sends `cmds` pipelined in batches of 1000; returns every reply in order.
fn pipeline(c: &mut Resp, cmds: &[Vec<Vec<u8>>]) -> Vec<Vec<u8>> {
    let mut out = Vec::with_capacity(cmds.len());
    for chunk in cmds.chunks(1000) {
        let mut buf = Vec::new();
        for cmd in chunk {
            let a: Vec<&[u8]> = cmd.iter().map(|a| &a[..]).collect();
            buf.extend_from_slice(&Resp::encode(&a));
        }
        c.send_raw(&buf);
        for _ in chunk {
            out.push(c.read_frame());
        }
    }
    out
}

fn int(r: &[u8]) -> i64 {
    String::from_utf8_lossy(r)
        .strip_prefix(':')
        .and_then(|t| t.trim_end().parse().ok())
        .unwrap_or_else(|| panic!("not an integer reply: {}", escape(r)))
}

/// Key `i`: its database, name, the writes that make it, and the read that shows its value.
/// Most are strings; one in 50 of each other type; a seventh get a TTL; a tenth live in db 1.
/// Some share a hash tag, so several keys sit in one slot.
struct Key {
    db: usize,
    name: String,
    writes: Vec<Vec<Vec<u8>>>,
    read: Vec<Vec<u8>>,
    ttl: bool,
}

fn key(i: usize) -> Key {
    let db = usize::from(i % 10 == 3);
    let name = if i.is_multiple_of(13) {
        format!("{{tag{}}}:r{i}", i % 97)
    } else {
        format!("r:{i}")
    };
    let n = &name;
    let (mut writes, read) = match i % 50 {
        1 => (
            vec![args(&["RPUSH", n, "a", &format!("b{i}"), "c"])],
            args(&["LRANGE", n, "0", "-1"]),
        ),
        2 => (
            vec![args(&["HSET", n, "f", &format!("{i}"), "g", "x"])],
            args(&["HGETALL", n]),
        ),
        3 => (
            vec![args(&["SADD", n, &format!("m{i}"), "n"])],
            args(&["SMEMBERS", n]),
        ),
        4 => (
            vec![args(&["ZADD", n, "1.5", "a", &format!("-{i}"), "b"])],
            args(&["ZRANGE", n, "0", "-1", "WITHSCORES"]),
        ),
        5 => (
            vec![args(&[
                "XADD",
                n,
                &format!("{}-1", i + 1),
                "f",
                &format!("v{i}"),
            ])],
            args(&["XRANGE", n, "-", "+"]),
        ),
        _ => (
            vec![args(&["SET", n, &format!("v{i}-{}", "x".repeat(i % 40))])],
            args(&["GET", n]),
        ),
    };
    let ttl = i.is_multiple_of(7);
    if ttl {
        writes.push(args(&["PEXPIRE", n, &(600_000 + i).to_string()]));
    }
    Key {
        db,
        name,
        writes,
        read,
        ttl,
    }
}

/// One connection per database through the proxy.
fn conns(port: u16) -> [Resp; 2] {
    let c0 = Resp::connect(port);
    let mut c1 = Resp::connect(port);
    assert_eq!(c1.cmd_str(&["SELECT", "1"]), b"+OK\r\n");
    [c0, c1]
}

fn fill(port: u16) {
    let mut c = conns(port);
    for (db, conn) in c.iter_mut().enumerate() {
        let cmds: Vec<Vec<Vec<u8>>> = (0..KEYS)
            .map(key)
            .filter(|k| k.db == db)
            .flat_map(|k| k.writes)
            .collect();
        for r in pipeline(conn, &cmds) {
            assert!(!r.starts_with(b"-"), "write failed: {}", escape(&r));
        }
    }
    let r = c[0].cmd_str(&["FUNCTION", "LOAD", LIBRARY]);
    assert_eq!(r, b"$5\r\nrslib\r\n");
}

/// Every key's read reply and PEXPIRETIME through the proxy, in key order.
/// Each key's read reply and PEXPIRETIME reply.
type Replies = Vec<(Vec<u8>, Vec<u8>)>;

fn snapshot_of(port: u16) -> Replies {
    let mut c = conns(port);
    let mut out = vec![(Vec::new(), Vec::new()); KEYS];
    for (db, conn) in c.iter_mut().enumerate() {
        let keys: Vec<(usize, Key)> = (0..KEYS)
            .map(|i| (i, key(i)))
            .filter(|(_, k)| k.db == db)
            .collect();
        let mut cmds = Vec::new();
        for (_, k) in &keys {
            cmds.push(k.read.clone());
            cmds.push(args(&["PEXPIRETIME", &k.name]));
        }
        let replies = pipeline(conn, &cmds);
        for (j, (i, _)) in keys.iter().enumerate() {
            out[*i] = (replies[2 * j].clone(), replies[2 * j + 1].clone());
        }
    }
    out
}

/// Waits (bounded) until the supervisor has deleted the staged files.
fn wait_no_staged(f: &Fleet) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f.staged().is_empty() {
        assert!(
            Instant::now() < deadline,
            "staged files remain: {:?}; supervisor log:\n{}",
            f.staged(),
            f.sup.as_ref().map(|s| s.log()).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn restart(from: usize, to: usize) {
    let mut f = Fleet::new(&format!("{from}to{to}"));
    f.start(from);
    fill(f.proxy_port());
    let before = snapshot_of(f.proxy_port());
    for (i, (val, at)) in before.iter().enumerate() {
        assert!(
            !val.starts_with(b"$-1") && !val.starts_with(b"*0"),
            "key {i} missing before"
        );
        assert_eq!(int(at) > 0, key(i).ttl, "key {i} expiry before");
    }
    f.stop();

    let t0 = Instant::now();
    f.start(to);
    wait_no_staged(&f);
    let took = t0.elapsed();
    check(&f, &before, from, to);
    eprintln!("{from}→{to}: {KEYS} keys re-sharded, fleet up and staged files gone in {took:?}");

    // A second restart with the same size is an ordinary one and keeps everything too.
    f.stop();
    f.start(to);
    assert!(f.staged().is_empty());
    assert!(
        snapshot_of(f.proxy_port()) == before,
        "{from}→{to}: keys differ after a plain restart"
    );
}

/// A 2-engine fleet with the keys, stopped; returns it and what the keys read.
fn stopped_fleet(name: &str) -> (Fleet, Replies) {
    let mut f = Fleet::new(name);
    f.start(2);
    fill(f.proxy_port());
    let before = snapshot_of(f.proxy_port());
    f.stop();
    (f, before)
}

/// Every key reads as `before` through the proxy, DBSIZE adds up through the proxy and per
/// engine by slot owner, every engine has the library, and no staged file is left.
fn check(f: &Fleet, before: &[(Vec<u8>, Vec<u8>)], from: usize, to: usize) {
    let after = snapshot_of(f.proxy_port());
    let mut wrong = Vec::new();
    for i in 0..KEYS {
        if after[i] != before[i] {
            wrong.push(format!(
                "{} (db {}): {} / {} before, {} / {} after",
                key(i).name,
                key(i).db,
                escape(&before[i].0),
                escape(&before[i].1),
                escape(&after[i].0),
                escape(&after[i].1)
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "{from}→{to}: {} of {KEYS} keys differ, e.g. {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(5)]
    );
    // DBSIZE through the proxy = the keys of each database.
    let per_db = |db: usize| (0..KEYS).filter(|&i| key(i).db == db).count() as i64;
    for (db, conn) in conns(f.proxy_port()).iter_mut().enumerate() {
        assert_eq!(
            int(&conn.cmd_str(&["DBSIZE"])),
            per_db(db),
            "proxy DBSIZE db {db}"
        );
    }
    // Each engine holds exactly the keys of its slots, in each database.
    for (e, port) in f.engine_ports().into_iter().enumerate() {
        let mut c = Resp::connect(port);
        for db in 0..2 {
            let want = (0..KEYS)
                .map(key)
                .filter(|k| {
                    k.db == db && instance_for_key(k.name.as_bytes(), to as u32) == e as u32
                })
                .count() as i64;
            assert_eq!(c.cmd_str(&["SELECT", &db.to_string()]), b"+OK\r\n");
            assert_eq!(
                int(&c.cmd_str(&["DBSIZE"])),
                want,
                "{from}→{to}: engine {e} db {db} DBSIZE"
            );
        }
        assert_eq!(c.cmd_str(&["SELECT", "0"]), b"+OK\r\n");
        assert_eq!(
            c.cmd_str(&["FCALL", "rsfn", "0"]),
            b":7\r\n",
            "engine {e} library"
        );
    }
    assert!(f.staged().is_empty());
}

/// A crash at any moment of a 2→3 re-shard (before staging, while engines split, after some
/// saved) loses nothing: the next start, with 3 engines or with yet another count, redoes
/// it from the staged files (no write was accepted in between, so nothing is lost).
#[test]
fn a_reshard_interrupted_by_a_crash_is_redone_on_the_next_start() {
    for (delay_ms, next) in [(0u64, 3usize), (30, 3), (120, 3), (30, 4), (120, 1)] {
        let (mut f, before) = stopped_fleet(&format!("crash{delay_ms}to{next}"));
        f.spawn(3);
        std::thread::sleep(Duration::from_millis(delay_ms));
        f.crash();
        f.start(next);
        wait_no_staged(&f);
        check(&f, &before, 2, next);
        let aside = std::fs::read_dir(&f.dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().contains(".interrupted-"))
            .count();
        eprintln!(
            "crash after {delay_ms} ms of 2→3, then {next}: ok ({aside} interrupted file(s) kept aside)"
        );
    }
}

#[test]
fn restart_two_to_three_engines_keeps_every_key() {
    restart(2, 3);
}

#[test]
fn restart_three_to_two_engines_keeps_every_key() {
    restart(3, 2);
}

#[test]
fn restart_four_to_one_engine_keeps_every_key() {
    restart(4, 1);
}

#[test]
fn restart_one_to_four_engines_keeps_every_key() {
    restart(1, 4);
}

/// A snapshot under the wrong name (the two engines' files swapped, as a copy could do): the
/// layout matches, so the start is ordinary, and each engine reports the keys it does not own
/// instead of keeping them silently; `recached start --reshard` then moves every key to its
/// owner.
#[test]
fn keys_on_the_wrong_engine_are_reported_and_start_reshard_moves_them() {
    let (mut f, before) = stopped_fleet("swapped");
    let dump = |i: u16| f.dir.join(format!("dump-{}.rcs", f.base + i));
    let tmp = f.dir.join("swap.rcs");
    std::fs::rename(dump(0), &tmp).unwrap();
    std::fs::rename(dump(1), dump(0)).unwrap();
    std::fs::rename(&tmp, dump(1)).unwrap();
    f.start(2);
    assert!(f.staged().is_empty());
    for (i, port) in f.engine_ports().into_iter().enumerate() {
        let mut c = Resp::connect(port);
        let held = int(&c.cmd_str(&["DBSIZE"]));
        let log = std::fs::read_to_string(f.dir.join(format!("logs/engine-{i}.log"))).unwrap();
        assert!(
            log.contains("belong to slots of other instances"),
            "engine {i} holds {held} keys of db 0 and did not report foreign keys:\n{log}"
        );
    }
    f.stop();
    f.extra = vec!["--reshard"];
    f.start(2);
    wait_no_staged(&f);
    check(&f, &before, 2, 2);
}
