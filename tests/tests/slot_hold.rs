//! `SLOTHOLD` (engine `cmd/cluster/hold.rs`, docs/cluster.md *Slot holds*) with real clients:
//! two engines in cluster mode and a proxy; every slot of engine 1 is given to engine 0, so
//! engine 1 owns nothing and CLUSTER SLOTS does not list it. A key's slot is then moved from
//! engine 0 to engine 1 as `recached resize` moves it: IMPORTING / MIGRATING, `SLOTHOLD` on
//! the mover's connection, MIGRATE. Meanwhile:
//!
//! - redis-py's `RedisCluster` (newest release; it knows only engine 0) GETs the moved key:
//!   engine 0 postpones it instead of answering `-ASK` for a node redis-py does not know
//!   (which redis-py 8.1 and 8.2 fail on with AttributeError, against redis-server 7.0.15 too); the
//!   slot's `SETSLOT NODE` wakes it and redis-py follows the `-MOVED`: the value, no error;
//! - the proxy (its links say `SLOTHOLD BYPASS`) reads the key during the hold: it gets
//!   `-ASK` and follows it, without waiting for the move.
//!
//! Processes are killed by PID when their guards drop; every wait is bounded.

mod common;

use common::*;
use std::process::Command;
use std::time::{Duration, Instant};

use engine_core::slot::{SLOTS, instance_for_key, key_slot};

#[test]
fn a_held_slot_moves_to_a_node_redis_py_does_not_know_without_an_error() {
    let python = workspace_root().join("tests/clients/.venv/bin/python");
    assert!(
        python.exists(),
        "{} missing: run scripts/test.sh (it installs redis-py into tests/clients/.venv)",
        python.display()
    );
    let fleet = ClusterWithProxy::start();
    let ports = fleet.engine_ports();
    let ids = fleet.node_ids();
    let (id0, id1) = (ids[0].clone(), ids[1].clone());
    // Engine 1 gives every slot to engine 0 (no key is anywhere yet).
    let mut reassign = Vec::new();
    let mut n = 0;
    for s in 0..SLOTS {
        let ss = s.to_string();
        reassign.extend(Resp::encode(&[
            b"CLUSTER",
            b"SETSLOT",
            ss.as_bytes(),
            b"NODE",
            id0.as_bytes(),
        ]));
        n += 1;
    }
    for &p in &ports {
        let mut c = Resp::connect(p);
        c.send_raw(&reassign);
        for _ in 0..n {
            assert_eq!(c.read_frame(), b"+OK\r\n");
        }
    }
    let slots = String::from_utf8(Resp::connect(ports[0]).cmd_str(&["CLUSTER", "SLOTS"])).unwrap();
    assert!(!slots.contains(&format!(":{}", ports[1])), "{slots}");
    // A key that engine 1 owned in the initial map (any key works; this one is checked below
    // to have moved back to engine 0 first).
    let key = (0..)
        .map(|i| format!("hold:{i}"))
        .find(|k| instance_for_key(k.as_bytes(), 2) == 1)
        .unwrap();
    let slot = key_slot(key.as_bytes()).to_string();
    let mut e0 = Resp::connect(ports[0]);
    assert_eq!(e0.cmd_str(&["SET", &key, "moved-value"]), b"+OK\r\n");
    // The move, as `recached resize` does it.
    let mut e1 = Resp::connect(ports[1]);
    assert_eq!(
        e1.cmd_str(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &id0]),
        b"+OK\r\n"
    );
    let mut mover = Resp::connect(ports[0]);
    assert_eq!(
        mover.cmd_str(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &id1]),
        b"+OK\r\n"
    );
    assert_eq!(mover.cmd_str(&["SLOTHOLD", &slot, "10000"]), b"+OK\r\n");
    let migrate = mover.cmd_str(&[
        "MIGRATE",
        "127.0.0.1",
        &ports[1].to_string(),
        "",
        "0",
        "5000",
        "KEYS",
        &key,
    ]);
    assert_eq!(migrate, b"+OK\r\n");
    // Another plain client would have been asked to go to engine 1; it waits instead.
    // The proxy is not held: it follows the -ASK itself.
    let mut proxy = Resp::connect(fleet.proxy_port);
    assert_eq!(
        proxy.cmd_str(&["GET", &key]),
        b"$11\r\nmoved-value\r\n",
        "the proxy reads a key of a held slot at once"
    );
    // redis-py, which knows only engine 0.
    let mut py = Command::new(&python);
    py.arg(workspace_root().join("tests/clients/redis_py_slot_hold.py"))
        .args(["--port", &ports[0].to_string(), "--key", &key]);
    let mut child = Proc::spawn("redis-py-slot-hold", py);
    // Its output lines so far that are JSON objects, waiting up to `wait` for `n` of them.
    let lines = |child: &Proc, n: usize, wait: Duration| -> Vec<serde_json::Value> {
        let deadline = Instant::now() + wait;
        loop {
            let got: Vec<serde_json::Value> = child
                .log()
                .lines()
                .filter(|l| l.starts_with('{'))
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            if got.len() >= n || Instant::now() >= deadline {
                return got;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let got = lines(&child, 1, Duration::from_secs(30));
    assert!(!got.is_empty(), "redis-py did not start: {}", child.log());
    let first = got[0].clone();
    let e1_name = format!("127.0.0.1:{}", ports[1]);
    assert!(
        !first["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n == e1_name.as_str()),
        "redis-py must not know engine 1 yet: {first}"
    );
    // Its GET is postponed by the hold: no answer while the slot moves.
    std::thread::sleep(Duration::from_millis(700));
    assert_eq!(
        lines(&child, 2, Duration::ZERO).len(),
        1,
        "redis-py's GET was answered during the hold: {}",
        child.log()
    );
    // The commit: the destination first, then the source, which ends the hold.
    assert_eq!(
        e1.cmd_str(&["CLUSTER", "SETSLOT", &slot, "NODE", &id1]),
        b"+OK\r\n"
    );
    assert_eq!(
        mover.cmd_str(&["CLUSTER", "SETSLOT", &slot, "NODE", &id1]),
        b"+OK\r\n"
    );
    let got = lines(&child, 2, Duration::from_secs(30));
    assert_eq!(got.len(), 2, "redis-py: {}", child.log());
    let last = got[1].clone();
    assert_eq!(last["value"], "moved-value", "{last}");
    assert!(last.get("error").is_none(), "{last}");
    assert!(
        last["nodes_after"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n == e1_name.as_str()),
        "redis-py learned engine 1 from -MOVED: {last}"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.is_running() {
        assert!(Instant::now() < deadline, "redis-py did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}
