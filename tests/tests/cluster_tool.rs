//! `redis-cli --cluster` on a running fleet (issue 21, item 3): a `recached start --engines 3`
//! fleet with 3,000 keys (every tenth with a TTL, some in database 1 are left alone by
//! redis-cli, which moves database 0 only — see docs/cluster.md), then
//!
//! - `redis-cli --cluster check` reports every slot covered and every node agreeing;
//! - `redis-cli --cluster reshard --cluster-yes` moves 100 slots from engine 0 to engine 1;
//! - `redis-cli --cluster rebalance --cluster-weight <engine 2>=3` moves thousands more;
//!
//! after each: `check` is clean again, every engine's CLUSTER NODES agrees, each engine holds
//! only keys of slots it serves, and every key reads back its value and TTL from its owner
//! (following `-MOVED` as a cluster client does). Then a restart over the same dir keeps the
//! moved slot table (the engines' nodes files) and every key.
//!
//! Cleanup: [`Fleet`]'s Drop SIGKILLs the supervisor and every recorded child; every client
//! run is bounded in time.

mod common;

use common::*;
use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

const KEYS: usize = 3_000;

fn cli(args: &[&str]) -> CmdOut {
    run_cmd(
        Command::new("redis-cli").args(args),
        Duration::from_secs(120),
    )
}

/// `slot → port` from engine `port`'s CLUSTER SLOTS.
fn slot_owners(port: u16) -> Vec<u16> {
    let mut owners = vec![0u16; 16384];
    let reply = parse_value(&Resp::connect(port).cmd_str(&["CLUSTER", "SLOTS"]));
    for range in reply.array().expect("CLUSTER SLOTS array") {
        let r = range.array().unwrap();
        let (Value::Int(a), Value::Int(b)) = (&r[0], &r[1]) else {
            panic!("{r:?}")
        };
        let Value::Int(p) = r[2].array().unwrap()[1] else {
            panic!("{r:?}")
        };
        for s in *a..=*b {
            owners[s as usize] = p as u16;
        }
    }
    owners
}

/// CLUSTER NODES without the pong and config-epoch columns (with no bus, a node learns
/// another's new epoch from nothing: docs/cluster.md), one sorted line per node, the
/// `myself` flag removed.
fn normalized_nodes(port: u16) -> Vec<String> {
    let text = redis_cli(port, &["CLUSTER", "NODES"]);
    let mut lines: Vec<String> = text
        .lines()
        .map(|l| {
            let mut f: Vec<&str> = l.split(' ').collect();
            f[2] = "master";
            f[5] = "-";
            f[6] = "-";
            f.join(" ")
        })
        .collect();
    lines.sort();
    lines
}

fn key(i: usize) -> String {
    format!("tool:{i}")
}

/// Every key from its owner: value and a TTL for every tenth; each engine holds only keys of
/// slots it serves; the table is the same on every engine.
fn check_fleet(fleet: &Fleet, what: &str) {
    let ports = &fleet.engine_ports;
    let owners = slot_owners(ports[0]);
    let view = normalized_nodes(ports[0]);
    for &p in &ports[1..] {
        assert_eq!(slot_owners(p), owners, "{what}: CLUSTER SLOTS of {p}");
        assert_eq!(normalized_nodes(p), view, "{what}: CLUSTER NODES of {p}");
    }
    let mut held = 0;
    for &p in ports {
        let keys = redis_cli(p, &["KEYS", "*"]);
        for k in keys.lines().filter(|k| !k.is_empty()) {
            let slot = engine_core::slot::key_slot(k.as_bytes());
            assert_eq!(
                owners[slot as usize], p,
                "{what}: {k} (slot {slot}) held by {p}"
            );
            held += 1;
        }
    }
    assert_eq!(held, KEYS, "{what}: keys held in database 0");
    let mut conns: BTreeMap<u16, Resp> = ports.iter().map(|&p| (p, Resp::connect(p))).collect();
    for i in 0..KEYS {
        let k = key(i);
        let owner = owners[engine_core::slot::key_slot(k.as_bytes()) as usize];
        let c = conns.get_mut(&owner).unwrap();
        let v = format!("v{i}");
        assert_eq!(
            c.cmd_str(&["GET", &k]),
            format!("${}\r\n{v}\r\n", v.len()).into_bytes(),
            "{what}: GET {k} on {owner}"
        );
        let ttl = String::from_utf8(c.cmd_str(&["PTTL", &k])).unwrap();
        if i % 10 == 0 {
            let ms: i64 = ttl.trim_start_matches(':').trim().parse().unwrap();
            assert!(ms > 0, "{what}: {k} lost its TTL ({ttl:?})");
        } else {
            assert_eq!(ttl, ":-1\r\n", "{what}: {k} got a TTL");
        }
    }
    // Database 1 is not moved by redis-cli; its keys stay where they were written and count.
    let db1: i64 = ports
        .iter()
        .map(|&p| {
            let mut c = Resp::connect(p);
            c.cmd_str(&["SELECT", "1"]);
            match parse_value(&c.cmd_str(&["DBSIZE"])) {
                Value::Int(n) => n,
                v => panic!("{v:?}"),
            }
        })
        .sum();
    assert_eq!(db1, 0, "{what}: nothing was written to database 1");
}

fn check_clean(port: u16, what: &str) {
    let out = cli(&["--cluster", "check", &format!("127.0.0.1:{port}")]);
    let text = out.text();
    assert!(out.ok, "{what}: check failed:\n{text}");
    assert!(
        text.contains("[OK] All nodes agree about slots configuration.")
            && text.contains("[OK] All 16384 slots covered.")
            && !text.contains("[WARNING]")
            && !text.contains("[ERR]"),
        "{what}:\n{text}"
    );
    assert!(
        text.contains(&format!("[OK] {KEYS} keys in 3 masters.")),
        "{what}:\n{text}"
    );
}

fn slots_of(port: u16, owners: &[u16]) -> usize {
    owners.iter().filter(|&&o| o == port).count()
}

#[test]
fn redis_cli_cluster_check_reshard_rebalance_and_a_restart() {
    let mut fleet = Fleet::start("cluster-tool", 3);
    let ports = fleet.engine_ports.clone();
    // Written through cluster clients' path: each key to its owner.
    let owners = slot_owners(ports[0]);
    let mut conns: BTreeMap<u16, Resp> = ports.iter().map(|&p| (p, Resp::connect(p))).collect();
    for i in 0..KEYS {
        let k = key(i);
        let c = conns
            .get_mut(&owners[engine_core::slot::key_slot(k.as_bytes()) as usize])
            .unwrap();
        let v = format!("v{i}");
        let args: Vec<&str> = if i % 10 == 0 {
            vec!["SET", &k, &v, "EX", "3600"]
        } else {
            vec!["SET", &k, &v]
        };
        assert_eq!(c.cmd_str(&args), b"+OK\r\n");
    }
    drop(conns);
    check_clean(ports[0], "at start");
    check_fleet(&fleet, "at start");

    let ids: Vec<String> = ports
        .iter()
        .map(|&p| redis_cli(p, &["CLUSTER", "MYID"]).trim().to_string())
        .collect();
    let before = slot_owners(ports[0]);
    let out = cli(&[
        "--cluster",
        "reshard",
        &format!("127.0.0.1:{}", ports[0]),
        "--cluster-from",
        &ids[0],
        "--cluster-to",
        &ids[1],
        "--cluster-slots",
        "100",
        "--cluster-yes",
    ]);
    assert!(out.ok, "reshard:\n{}", out.text());
    let after = slot_owners(ports[0]);
    assert_eq!(
        slots_of(ports[0], &after),
        slots_of(ports[0], &before) - 100
    );
    assert_eq!(
        slots_of(ports[1], &after),
        slots_of(ports[1], &before) + 100
    );
    check_clean(ports[1], "after reshard");
    check_fleet(&fleet, "after reshard");

    let out = cli(&[
        "--cluster",
        "rebalance",
        &format!("127.0.0.1:{}", ports[2]),
        "--cluster-weight",
        &format!("{}=3", ids[2]),
    ]);
    assert!(out.ok, "rebalance:\n{}", out.text());
    let balanced = slot_owners(ports[0]);
    // Weights 1:1:3 → engine 2 serves about 3/5 of the slots (redis-cli's 2 % threshold).
    let share = slots_of(ports[2], &balanced) as f64 / 16384.0;
    assert!((0.55..0.65).contains(&share), "engine 2 serves {share}");
    check_clean(ports[0], "after rebalance");
    check_fleet(&fleet, "after rebalance");

    // A restart finds the moved table in the engines' nodes files.
    fleet.restart();
    assert_eq!(
        slot_owners(ports[1]),
        balanced,
        "the table survives a restart"
    );
    check_clean(ports[2], "after restart");
    check_fleet(&fleet, "after restart");
}
