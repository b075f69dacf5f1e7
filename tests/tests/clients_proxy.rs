//! The newest released client libraries, with their DEFAULT settings, through the proxy (the
//! "Real clients in the tests" paragraph of issue 14). Each test starts its own
//! `recached start --engines 2` fleet on free ports in a temp dir (no fan-out, no metrics
//! listener) and runs one client's script from tests/clients/ against the proxy port:
//!
//! - redis-py (tests/clients/redis_py_proxy.py, in tests/clients/.venv): RESP3 by default;
//! - node-redis, npm `redis` (tests/clients/node_redis_proxy.js): RESP3 by default;
//! - ioredis (tests/clients/ioredis_proxy.js): RESP3 by default since ioredis 6;
//!
//! each doing SET/GET, MGET of 100 keys, a non-transactional pipeline, HGETALL, ZSCORE,
//! pub/sub, BLPOP woken by another client's RPUSH and SCAN iteration, asserting every reply and
//! the protocol it negotiated (it prints `protocol: N`, then `ok` last; any failure exits
//! non-zero with a message). Here: the exit status, the `ok` line, `protocol: 3`, and that the
//! script's 100 MGET keys really live on both engines (read back from each owning engine
//! directly). And `redis-cli -3 -p PROXY HGETALL`, with the RESP3 map checked on the wire.
//!
//! The exact versions are pinned in tests/clients/requirements.txt and package-lock.json;
//! scripts/test.sh installs them. Cleanup: [`Fleet`]'s Drop SIGKILLs the supervisor by PID,
//! then every child PID in `dir/state.toml`. Every wait and every client run is bounded.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use engine_core::slot::instance_for_key;

const FLEET_START: Duration = Duration::from_secs(30);
/// A client script's bound (each also bounds itself at 60 s).
const CLIENT_LIMIT: Duration = Duration::from_secs(90);
const ENGINES: usize = 2;

struct Fleet {
    sup: Proc,
    dir: PathBuf,
    proxy_port: u16,
    engine_ports: Vec<u16>,
}

impl Fleet {
    /// `recached start --engines 2` on free ports, no fan-out and no metrics listener; waits
    /// until the proxy and every engine accept connections.
    fn start(name: &str) -> Fleet {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("clients-{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let base = free_port_run(ENGINES);
        let engine_ports: Vec<u16> = (0..ENGINES).map(|i| base + i as u16).collect();
        let proxy_port = free_port_except(&engine_ports);
        let mut cmd = Command::new(recached_bin());
        cmd.arg("start")
            .args(["--engines", &ENGINES.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--proxy-port", &proxy_port.to_string()])
            .args(["--engine-port-base", &base.to_string()])
            .args(["--fanout-port", "0"])
            .args(["--metrics-port", "0"])
            .arg("--dir")
            .arg(dir.join("data"))
            .env("RUST_LOG", "info");
        let mut sup = Proc::spawn(&format!("clients-{name}"), cmd);
        sup.wait_port(proxy_port, FLEET_START);
        for &p in &engine_ports {
            sup.wait_port(p, FLEET_START);
        }
        Fleet {
            sup,
            dir,
            proxy_port,
            engine_ports,
        }
    }

    /// The script's 100 MGET keys `<prefix>mget:<i>` (value `v<i>`) are spread over both
    /// engines, each read back directly from the engine the slot map gives it.
    fn check_mget_keys_on_both_engines(&self, prefix: &str) {
        let mut per_engine = [0usize; ENGINES];
        let mut conns: Vec<Resp> = self
            .engine_ports
            .iter()
            .map(|&p| Resp::connect(p))
            .collect();
        for i in 0..100 {
            let key = format!("{prefix}mget:{i}");
            let owner = instance_for_key(key.as_bytes(), ENGINES as u32) as usize;
            per_engine[owner] += 1;
            let got = conns[owner].cmd_str(&["GET", &key]);
            let want = format!("v{i}");
            assert_eq!(
                got,
                format!("${}\r\n{want}\r\n", want.len()).into_bytes(),
                "{key} on its engine {owner}"
            );
        }
        assert!(
            per_engine.iter().all(|&n| n > 0),
            "MGET keys not spread over both engines: {per_engine:?}"
        );
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        teardown_fleet(&mut self.sup, &self.dir.join("data/state.toml"), &self.dir);
    }
}

fn clients_dir() -> PathBuf {
    workspace_root().join("tests/clients")
}

/// Runs one client script, then checks its exit status, `protocol: 3` and the final `ok`.
fn run_client(fleet: &Fleet, what: &str, cmd: &mut Command) -> String {
    let out = run_cmd(cmd, CLIENT_LIMIT);
    let text = out.text();
    assert!(
        out.ok,
        "{what} failed (exit {:?}):\n{text}\nsupervisor log:\n{}",
        out.code,
        fleet.sup.log()
    );
    assert_eq!(
        out.stdout.lines().last(),
        Some("ok"),
        "{what}: no final ok line:\n{text}"
    );
    assert!(
        out.stdout.lines().any(|l| l == "protocol: 3"),
        "{what} did not negotiate RESP3:\n{text}"
    );
    eprintln!("{what}:\n{}", out.stdout);
    out.stdout
}

fn node_modules(package: &str) -> PathBuf {
    let m = clients_dir().join("node_modules").join(package);
    assert!(
        m.exists(),
        "{} missing: run scripts/test.sh (npm ci in tests/clients)",
        m.display()
    );
    m
}

#[test]
fn redis_py_default_settings_through_the_proxy() {
    let python = clients_dir().join(".venv/bin/python");
    assert!(
        python.exists(),
        "{} missing: run scripts/test.sh (it installs redis-py into tests/clients/.venv)",
        python.display()
    );
    let fleet = Fleet::start("redis-py");
    let out = run_client(
        &fleet,
        "redis-py",
        Command::new(&python)
            .arg(clients_dir().join("redis_py_proxy.py"))
            .arg(fleet.proxy_port.to_string()),
    );
    assert!(out.starts_with("redis-py 8."), "{out}");
    assert!(out.contains("\ndatabase by url: ok\n"), "{out}");
    fleet.check_mget_keys_on_both_engines("py:");
}

#[test]
fn node_redis_default_settings_through_the_proxy() {
    node_modules("redis");
    let fleet = Fleet::start("node-redis");
    let out = run_client(
        &fleet,
        "node-redis",
        Command::new("node")
            .current_dir(clients_dir())
            .arg("node_redis_proxy.js")
            .arg(fleet.proxy_port.to_string()),
    );
    assert!(out.contains("\ndatabase by url: ok\n"), "{out}");
    fleet.check_mget_keys_on_both_engines("node:");
}

#[test]
fn ioredis_default_settings_through_the_proxy() {
    node_modules("ioredis");
    let fleet = Fleet::start("ioredis");
    let out = run_client(
        &fleet,
        "ioredis",
        Command::new("node")
            .current_dir(clients_dir())
            .arg("ioredis_proxy.js")
            .arg(fleet.proxy_port.to_string()),
    );
    assert!(out.contains("\ndatabase by url: ok\n"), "{out}");
    fleet.check_mget_keys_on_both_engines("io:");
}

#[test]
fn redis_cli_resp3_hgetall_through_the_proxy() {
    let fleet = Fleet::start("redis-cli");
    let p = fleet.proxy_port;
    assert_eq!(
        redis_cli(p, &["-3", "HSET", "cli:h", "f1", "a", "f2", "b"]).trim(),
        "2"
    );
    // redis-cli -3, its output not a terminal, prints a RESP3 map as one `field value` line per
    // pair, as it does against redis-server 7.0 (a RESP2 array: one line per field and value).
    let out = redis_cli(p, &["-3", "HGETALL", "cli:h"]);
    let mut lines: Vec<&str> = out.lines().collect();
    lines.sort();
    assert_eq!(lines, ["f1 a", "f2 b"], "{out}");
    assert_eq!(
        redis_cli(p, &["-3", "ZADD", "cli:z", "1.5", "m"]).trim(),
        "1"
    );
    assert_eq!(redis_cli(p, &["-3", "ZSCORE", "cli:z", "m"]).trim(), "1.5");
    // The same on the wire: after HELLO 3 the proxy passes the engine's map through.
    let mut c = Resp::connect(p);
    let hello = parse_value(&c.cmd_str(&["HELLO", "3"]));
    let Value::Map(fields) = hello else {
        panic!("HELLO 3 reply is not a map: {hello:?}")
    };
    assert!(
        fields.contains(&(Value::Bulk(b"proto".to_vec()), Value::Int(3))),
        "{fields:?}"
    );
    let reply = c.cmd_str(&["HGETALL", "cli:h"]);
    let Value::Map(mut pairs) = parse_value(&reply) else {
        panic!("HGETALL after HELLO 3: {}", escape(&reply))
    };
    pairs.sort_by_key(|(k, _)| k.str());
    assert_eq!(
        pairs,
        [
            (Value::Bulk(b"f1".to_vec()), Value::Bulk(b"a".to_vec())),
            (Value::Bulk(b"f2".to_vec()), Value::Bulk(b"b".to_vec())),
        ]
    );
    assert_eq!(c.cmd_str(&["ZSCORE", "cli:z", "m"]), b",1.5\r\n".to_vec());
}
