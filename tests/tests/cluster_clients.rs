//! Smart clients against the engines directly (issue 4): a `recached start --engines 2` fleet
//! on free ports in a temp dir, then the real clients, each connected to ONE engine:
//!
//! - `redis-cli -c` follows `-MOVED` for keys the other engine owns; without `-c` the exact
//!   MOVED text comes back; CLUSTER SLOTS / MYID / INFO / NODES, INFO and HELLO say cluster;
//!   the proxy of the same fleet still serves every key (split MGET/MSET, summed DBSIZE);
//! - redis-py's `RedisCluster` (tests/cluster/redis_py_cluster.py: 10,000 keys, MGET across
//!   slots, a pipeline, hash-tagged multi-key commands, placement checked per engine against
//!   an independent copy of the slot map), and the counts checked here against `engine_core::slot`;
//! - ioredis' `Cluster` (tests/cluster/ioredis_cluster.js);
//! - `redis-benchmark --cluster -t set,get -n 100000` finishes without errors;
//! - `cluster = false`, and `recached server` alone, are standalone.
//!
//! The Python venv and node_modules live in tests/cluster/ and are installed by
//! scripts/test.sh. Cleanup: [`Fleet`]'s Drop SIGKILLs the supervisor by PID, then every child
//! PID in `dir/state.toml`. Every wait and every client run is bounded in time.

mod common;

use common::*;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use engine_core::slot::{instance_for_key, key_slot, slot_ranges};

fn cluster_dir() -> PathBuf {
    workspace_root().join("tests/cluster")
}

fn int_reply(port: u16, args: &[&str]) -> i64 {
    match parse_value(&Resp::connect(port).cmd_str(args)) {
        Value::Int(n) => n,
        v => panic!("{args:?} on {port}: {v:?}"),
    }
}

/// `n` keys `prefix<i>` that instance `owner` of `of` owns.
fn keys_on(owner: u32, of: u32, prefix: &str, n: usize) -> Vec<String> {
    (0..)
        .map(|i| format!("{prefix}{i}"))
        .filter(|k| instance_for_key(k.as_bytes(), of) == owner)
        .take(n)
        .collect()
}

#[test]
fn redis_cli_follows_moved_and_engines_answer_cluster_commands() {
    let fleet = Fleet::start("cluster", 2);
    let (e0, e1) = (fleet.engine_ports[0], fleet.engine_ports[1]);
    let remote = keys_on(1, 2, "user:", 1).remove(0);
    let slot = key_slot(remote.as_bytes());

    // redis-cli -c on engine 0 follows MOVED to engine 1, for SET and GET.
    assert_eq!(redis_cli(e0, &["-c", "SET", &remote, "hello"]).trim(), "OK");
    assert_eq!(redis_cli(e0, &["-c", "GET", &remote]).trim(), "hello");
    assert_eq!(int_reply(e1, &["DBSIZE"]), 1);
    assert_eq!(int_reply(e0, &["DBSIZE"]), 0);
    // Without -c the redirection itself comes back, exact text.
    assert_eq!(
        Resp::connect(e0).cmd_str(&["GET", &remote]),
        format!("-MOVED {slot} 127.0.0.1:{e1}\r\n").into_bytes()
    );
    let local = keys_on(0, 2, "user:", 2);
    let cross = Resp::connect(e0).cmd_str(&["MGET", &local[0], &remote]);
    assert_eq!(
        cross,
        b"-CROSSSLOT Keys in request don't hash to the same slot\r\n"
    );
    // Multi-key, all local, several slots: runs.
    assert_eq!(
        Resp::connect(e0).cmd_str(&["MSET", &local[0], "a", &local[1], "b"]),
        b"+OK\r\n"
    );

    // CLUSTER SLOTS: the slot map's ranges, each naming the engine that owns it by its id.
    let ids: Vec<String> = fleet
        .engine_ports
        .iter()
        .map(|&p| {
            parse_value(&Resp::connect(p).cmd_str(&["CLUSTER", "MYID"]))
                .str()
                .unwrap()
        })
        .collect();
    assert!(ids.iter().all(|id| id.len() == 40) && ids[0] != ids[1]);
    let slots = parse_value(&Resp::connect(e1).cmd_str(&["CLUSTER", "SLOTS"]));
    let ranges = slot_ranges(2);
    let got = slots.array().unwrap();
    assert_eq!(got.len(), ranges.len());
    for (entry, &(start, end, owner)) in got.iter().zip(&ranges) {
        let e = entry.array().unwrap();
        assert_eq!(e[0], Value::Int(i64::from(start)));
        assert_eq!(e[1], Value::Int(i64::from(end)));
        let node = e[2].array().unwrap();
        assert_eq!(node[0].str().unwrap(), "127.0.0.1");
        assert_eq!(
            node[1],
            Value::Int(i64::from(fleet.engine_ports[owner as usize]))
        );
        assert_eq!(node[2].str().unwrap(), ids[owner as usize]);
    }
    // Ids are stable across a restart of the fleet on the same ports: they derive from host:port.
    let info = parse_value(&Resp::connect(e0).cmd_str(&["CLUSTER", "INFO"]))
        .str()
        .unwrap();
    assert!(info.contains("cluster_state:ok\r\n"), "{info}");
    assert!(info.contains("cluster_known_nodes:2\r\n"), "{info}");
    let nodes = parse_value(&Resp::connect(e0).cmd_str(&["CLUSTER", "NODES"]))
        .str()
        .unwrap();
    assert!(
        nodes.contains(&format!("{} 127.0.0.1:{e0}@0 myself,master", ids[0])),
        "{nodes}"
    );
    assert!(
        nodes.contains(&format!("{} 127.0.0.1:{e1}@0 master", ids[1])),
        "{nodes}"
    );
    let info = parse_value(&Resp::connect(e0).cmd_str(&["INFO"]))
        .str()
        .unwrap();
    assert!(info.contains("redis_mode:cluster\r\n"), "{info}");
    assert!(info.contains("cluster_enabled:1\r\n"), "{info}");
    let mut c = Resp::connect(e0);
    let hello = String::from_utf8_lossy(&c.cmd_str(&["HELLO", "3"])).into_owned();
    assert!(hello.contains("$4\r\nmode\r\n$7\r\ncluster\r\n"), "{hello}");

    // Through the proxy nothing changes: every key, split multi-key commands, summed DBSIZE.
    let p = fleet.proxy_port;
    let mut all: Vec<String> = keys_on(0, 2, "px:", 5);
    all.extend(keys_on(1, 2, "px:", 5));
    let mut mset = vec!["MSET"];
    for k in &all {
        mset.push(k);
        mset.push(k);
    }
    assert_eq!(redis_cli(p, &mset).trim(), "OK");
    let mut mget = vec!["MGET"];
    mget.extend(all.iter().map(|s| s.as_str()));
    let got: Vec<String> = redis_cli(p, &mget).lines().map(str::to_string).collect();
    assert_eq!(got, all);
    assert_eq!(redis_cli(p, &["GET", &remote]).trim(), "hello");
    assert_eq!(int_reply(p, &["DBSIZE"]), 1 + 2 + 10);
}

#[test]
fn redis_py_cluster_client_from_one_engine() {
    let python = cluster_dir().join(".venv/bin/python");
    assert!(
        python.exists(),
        "{} missing: run scripts/test.sh (it installs redis-py into tests/cluster/.venv)",
        python.display()
    );
    let fleet = Fleet::start("cluster", 2);
    let out = run_cmd(
        Command::new(&python)
            .arg(cluster_dir().join("redis_py_cluster.py"))
            .args(["--port", &fleet.engine_ports[1].to_string()])
            .args(["--engines", &fleet.nodes()]),
        Duration::from_secs(240),
    );
    assert!(
        out.ok,
        "redis-py failed:\n{}\n{}\nsupervisor log:\n{}",
        out.stdout,
        out.stderr,
        fleet.sup.log()
    );
    assert!(out.stdout.contains("\"ok\": true"), "{}", out.stdout);
    // Placement against the slot map as compiled into engine-core (the script used its own copy).
    let mut expected = [0i64; 2];
    for k in (0..10_000)
        .map(|i| format!("key:{i}"))
        .chain((0..200).map(|i| format!("pipe:{i}")))
    {
        expected[instance_for_key(k.as_bytes(), 2) as usize] += 1;
    }
    for (i, &port) in fleet.engine_ports.iter().enumerate() {
        assert_eq!(int_reply(port, &["DBSIZE"]), expected[i], "engine {i}");
    }
    assert!(expected.iter().all(|&n| n > 3000), "both engines hold keys");
}

#[test]
fn ioredis_cluster_client_from_one_engine() {
    let modules = cluster_dir().join("node_modules/ioredis");
    assert!(
        modules.exists(),
        "{} missing: run scripts/test.sh (npm ci in tests/cluster)",
        modules.display()
    );
    let fleet = Fleet::start("cluster", 2);
    let out = run_cmd(
        Command::new("node")
            .current_dir(cluster_dir())
            .arg("ioredis_cluster.js")
            .arg(fleet.engine_ports[0].to_string())
            .arg("2"),
        Duration::from_secs(60),
    );
    assert!(out.ok, "ioredis failed:\n{}\n{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("\"ok\":true"), "{}", out.stdout);
    let total: i64 = fleet
        .engine_ports
        .iter()
        .map(|&p| int_reply(p, &["DBSIZE"]))
        .sum();
    assert_eq!(total, 300);
    let on0 = (0..300)
        .filter(|i| instance_for_key(format!("io:{i}").as_bytes(), 2) == 0)
        .count() as i64;
    assert_eq!(int_reply(fleet.engine_ports[0], &["DBSIZE"]), on0);
}

#[test]
fn redis_benchmark_cluster_mode_completes_without_errors() {
    let fleet = Fleet::start("cluster", 2);
    let out = run_cmd(
        Command::new("redis-benchmark")
            .args(["-h", "127.0.0.1", "-p", &fleet.engine_ports[0].to_string()])
            .args(["--cluster", "-t", "set,get", "-n", "100000", "-q"]),
        Duration::from_secs(240),
    );
    let text = format!("{}\n{}", out.stdout, out.stderr);
    assert!(out.ok, "redis-benchmark failed: {text}");
    assert!(text.contains("Cluster has 2 master nodes"), "{text}");
    assert!(
        text.contains("SET: ") && text.contains("GET: "),
        "no SET/GET results: {text}"
    );
    for bad in ["Error", "ERR", "MOVED", "CROSSSLOT", "ASK "] {
        assert!(!text.contains(bad), "{bad} in: {text}");
    }
    // redis-benchmark's keys (key:{tag}…) were spread over both engines.
    for &p in &fleet.engine_ports {
        assert!(int_reply(p, &["DBSIZE"]) > 0, "engine {p} got no keys");
    }
}

#[test]
fn cluster_false_and_a_lone_server_are_standalone() {
    let fleet = Fleet::start_with("cluster-off", 2, Some("cluster = false\n"), &[]);
    let e0 = fleet.engine_ports[0];
    assert_eq!(
        Resp::connect(e0).cmd_str(&["CLUSTER", "INFO"]),
        b"-ERR This instance has cluster support disabled\r\n"
    );
    assert_eq!(
        Resp::connect(e0).cmd_str(&["READONLY"]),
        b"-ERR This instance has cluster support disabled\r\n"
    );
    // A standalone engine owns every key.
    for k in keys_on(1, 2, "k", 3) {
        assert_eq!(Resp::connect(e0).cmd_str(&["SET", &k, "1"]), b"+OK\r\n");
    }
    // The proxy still shards over the engines.
    assert_eq!(
        redis_cli(fleet.proxy_port, &["SET", "foo", "bar"]).trim(),
        "OK"
    );
    assert_eq!(redis_cli(fleet.proxy_port, &["GET", "foo"]).trim(), "bar");
    drop(fleet);

    let port = free_port();
    let _engine = start_engine(port);
    let info = parse_value(&Resp::connect(port).cmd_str(&["INFO"]))
        .str()
        .unwrap();
    assert!(info.contains("redis_mode:standalone\r\n"), "{info}");
    assert!(info.contains("cluster_enabled:0\r\n"), "{info}");
    assert_eq!(
        Resp::connect(port).cmd_str(&["CLUSTER", "SLOTS"]),
        b"-ERR This instance has cluster support disabled\r\n"
    );
}

#[test]
fn a_lone_server_takes_its_topology_from_flags() {
    let (p0, p1) = (free_port(), free_port());
    let nodes = format!("127.0.0.1:{p0},127.0.0.1:{p1}");
    let mut cmd = Command::new(recached_bin());
    cmd.args(["server", "--port", &p1.to_string(), "--bind", "127.0.0.1"])
        .args(["--cluster-nodes", &nodes, "--cluster-index", "1"]);
    let mut engine = Proc::spawn("engine-flags", cmd);
    engine.wait_port(p1, START_TIMEOUT);
    let local = keys_on(1, 2, "f", 1).remove(0);
    let remote = keys_on(0, 2, "f", 1).remove(0);
    assert_eq!(Resp::connect(p1).cmd_str(&["SET", &local, "1"]), b"+OK\r\n");
    assert_eq!(
        Resp::connect(p1).cmd_str(&["SET", &remote, "1"]),
        format!("-MOVED {} 127.0.0.1:{p0}\r\n", key_slot(remote.as_bytes())).into_bytes()
    );
    // A bad topology is refused at start.
    let out = run_cmd(
        Command::new(recached_bin())
            .args(["server", "--port", "0", "--cluster-nodes", &nodes])
            .args(["--cluster-index", "2"]),
        Duration::from_secs(20),
    );
    assert!(!out.ok, "index out of range accepted");
    assert!(out.stderr.contains("cluster index 2"), "{}", out.stderr);
}
