//! The mover against real `redis-server --cluster-enabled yes` nodes (Redis is the reference
//! for every cluster command it sends). Skipped, with a note, when redis-server is missing.

use super::*;
use std::process::{Child, Command, Stdio};

struct Redis {
    child: Child,
    port: u16,
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A free port whose cluster bus port (+10000) is free too.
fn free_port() -> u16 {
    loop {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let p = l.local_addr().unwrap().port();
        if p < 50_000 && std::net::TcpListener::bind(("127.0.0.1", p + 10_000)).is_ok() {
            return p;
        }
    }
}

fn start(dir: &std::path::Path, port: u16) -> Redis {
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args([
            "--cluster-enabled",
            "yes",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .args(["--cluster-config-file", &format!("nodes-{port}.conf")])
        .arg("--dir")
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server");
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "redis-server {port} did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Redis { child, port }
}

/// Waits (bounded) until every node's CLUSTER NODES lists `n` nodes and agrees on `owner`.
fn converge(m: &mut Mover, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let ok = (0..m.nodes.len()).all(|i| {
            m.nodes[i].cluster_nodes().is_ok_and(|v| v.nodes.len() == n)
                && m.nodes[i]
                    .ok(&["CLUSTER", "INFO"])
                    .and_then(|v| bulk_text(&v))
                    .is_ok_and(|t| t.contains("cluster_state:ok"))
        });
        if ok {
            return;
        }
        assert!(Instant::now() < deadline, "cluster did not converge");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A pace of 1/4 rests three times as long as the work took (a lower bound: a sleep never
/// ends early).
#[test]
fn pacer_rests_in_proportion_to_the_work() {
    let mut p = Pacer::new(0.25);
    std::thread::sleep(Duration::from_millis(20));
    let t = Instant::now();
    p.rest();
    assert!(
        t.elapsed() >= Duration::from_millis(60),
        "{:?}",
        t.elapsed()
    );
}

#[test]
fn moves_slots_between_redis_cluster_nodes_and_settles_strays() {
    if Command::new("redis-server")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("redis-server not installed: skipped");
        return;
    }
    let dir = std::env::temp_dir().join(format!("recached-slotmove-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let servers: Vec<Redis> = (0..3).map(|_| start(&dir, free_port())).collect();
    let mut m = Mover::new(
        servers
            .iter()
            .map(|r| Node::new("127.0.0.1", r.port, None))
            .collect(),
    );
    m.ensure_all().unwrap();
    m.nodes[0]
        .ok(&["CLUSTER", "ADDSLOTSRANGE", "0", "8191"])
        .unwrap();
    m.nodes[1]
        .ok(&["CLUSTER", "ADDSLOTSRANGE", "8192", "16383"])
        .unwrap();
    for server in &servers[1..3] {
        let port = server.port.to_string();
        m.nodes[0]
            .ok(&["CLUSTER", "MEET", "127.0.0.1", &port])
            .unwrap();
    }
    converge(&mut m, 3);
    // Keys in a few slots of each owner, some with a TTL.
    let keys: Vec<String> = (0..2000).map(|i| format!("k{i}")).collect();
    let owner_before = |k: &str| usize::from(engine_core::slot::key_slot(k.as_bytes()) >= 8192);
    for (i, k) in keys.iter().enumerate() {
        let o = owner_before(k);
        m.nodes[o].ok(&["SET", k, &format!("v{i}")]).unwrap();
        if i % 3 == 0 {
            m.nodes[o].ok(&["PEXPIRE", k, "600000"]).unwrap();
        }
    }
    // Move every slot holding a key whose number is even to node 2.
    let mut moved_slots: Vec<(u16, usize)> = keys
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 2 == 0)
        .map(|(_, k)| (engine_core::slot::key_slot(k.as_bytes()), owner_before(k)))
        .collect();
    moved_slots.sort();
    moved_slots.dedup();
    let started = Instant::now();
    for &(s, src) in &moved_slots {
        m.move_slot(s, src, 2).unwrap();
    }
    m.checkpoint_all().unwrap();
    // The checkpoint is a background save that completed on the destination; its backups
    // are dropped.
    let info = bulk_text(&m.nodes[2].ok(&["INFO", "persistence"]).unwrap()).unwrap();
    assert!(
        info_field(&info, "rdb_saves").is_some_and(|n| n.parse::<u64>().unwrap() >= 1),
        "{info}"
    );
    assert_eq!(
        info_field(&info, "rdb_last_bgsave_status").as_deref(),
        Some("ok")
    );
    assert!(m.backups.is_empty());
    eprintln!(
        "{} slots, {} keys in {:?}",
        m.totals.slots,
        m.totals.keys,
        started.elapsed()
    );
    assert_eq!(m.totals.slots, moved_slots.len());
    let mut owner_of: Vec<usize> = (0..16384).map(|s| usize::from(s >= 8192)).collect();
    for &(s, _) in &moved_slots {
        owner_of[s as usize] = 2;
    }
    // Every key on its owner, with its value and TTL; no key elsewhere.
    for (i, k) in keys.iter().enumerate() {
        let o = owner_of[engine_core::slot::key_slot(k.as_bytes()) as usize];
        assert_eq!(
            m.nodes[o].ok(&["GET", k]).unwrap(),
            Value::Bulk(format!("v{i}").into_bytes()),
            "{k}"
        );
        let ttl = m.nodes[o].ok(&["PTTL", k]).unwrap();
        if i % 3 == 0 {
            assert!(
                matches!(ttl, Value::Integer(t) if t > 500_000),
                "{k}: {ttl:?}"
            );
        } else {
            assert_eq!(ttl, Value::Integer(-1), "{k}");
        }
    }
    let total: i64 = (0..3)
        .map(|i| match m.nodes[i].ok(&["DBSIZE"]).unwrap() {
            Value::Integer(n) => n,
            _ => 0,
        })
        .sum();
    assert_eq!(total, keys.len() as i64);
    // A stale copy on a former owner (as after a restart from an older snapshot) and a key
    // only on a non-owner are settled by the sweep: the owner's copy wins, the lone one moves.
    let (s, src) = moved_slots[0];
    let k0 = keys
        .iter()
        .find(|k| engine_core::slot::key_slot(k.as_bytes()) == s)
        .unwrap()
        .clone();
    let slot = s.to_string();
    let owner_id = m.nodes[2].id.clone();
    m.nodes[src]
        .ok(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &owner_id])
        .unwrap();
    m.nodes[src].ok(&["ASKING"]).unwrap();
    m.nodes[src].ok(&["SET", &k0, "stale"]).unwrap();
    let lonely = format!("{{{k0}}}lonely");
    m.nodes[src].ok(&["ASKING"]).unwrap();
    m.nodes[src].ok(&["SET", &lonely, "x"]).unwrap();
    m.nodes[src]
        .ok(&["CLUSTER", "SETSLOT", &slot, "STABLE"])
        .unwrap();
    assert_eq!(m.sweep(&owner_of).unwrap(), 2);
    let own = keys
        .iter()
        .filter(|k| owner_of[engine_core::slot::key_slot(k.as_bytes()) as usize] == src)
        .count();
    assert_eq!(
        m.nodes[src].ok(&["DBSIZE"]).unwrap(),
        Value::Integer(own as i64)
    );
    assert_ne!(
        m.nodes[2].ok(&["GET", &k0]).unwrap(),
        Value::Bulk(b"stale".to_vec())
    );
    assert_eq!(
        m.nodes[2].ok(&["GET", &lonely]).unwrap(),
        Value::Bulk(b"x".to_vec())
    );
    drop(servers);
    let _ = std::fs::remove_dir_all(&dir);
}
