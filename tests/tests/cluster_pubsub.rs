//! Pub/sub across a 2-engine cluster (issue 14, part 4), against two `recached server`
//! engines started with `--cluster-nodes`/`--cluster-index` and, for the reply bytes, a real
//! 2-node Redis Cluster (`redis-server --cluster-enabled yes`, slots 0-8191 / 8192-16383,
//! CLUSTER MEET):
//!
//! - the same transcript on both (sharded subscribe/publish, `-MOVED`, `-CROSSSLOT`,
//!   `smessage` arrays and RESP3 pushes, counts, subscribed mode, SHARDNUMSUB/SHARDCHANNELS,
//!   SSUBSCRIBE in EXEC, and a PUBLISH on the other node reaching a subscriber exactly once),
//!   with channel names, slots and ports replaced by their roles;
//! - a PUBLISH on either engine reaches channel and pattern subscribers on both exactly once,
//!   counting local receivers only; and keeps working after the peer engine restarts.
//!
//! Every process is killed by PID ([`Proc`]); every wait is bounded.

mod common;

use common::*;
use std::process::Command;
use std::time::{Duration, Instant};

use engine_core::slot::{instance_for_key, key_slot};

/// Two engines of one cluster on free ports.
fn start_engines() -> (Vec<Proc>, [u16; 2]) {
    let base = free_port_run(2);
    let ports = [base, base + 1];
    let nodes = format!("127.0.0.1:{},127.0.0.1:{}", ports[0], ports[1]);
    let procs = (0..2)
        .map(|i| start_cluster_engine(&nodes, i, ports[i]))
        .collect();
    (procs, ports)
}

fn start_cluster_engine(nodes: &str, index: usize, port: u16) -> Proc {
    let mut cmd = Command::new(recached_bin());
    cmd.args(["server", "--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args([
            "--cluster-nodes",
            nodes,
            "--cluster-index",
            &index.to_string(),
        ]);
    let mut p = Proc::spawn(&format!("cluster-engine-{port}"), cmd);
    p.wait_port(port, Duration::from_secs(10));
    p
}

/// A 2-node Redis Cluster (node 0: slots 0-8191, node 1: 8192-16383), ready.
fn start_redis_cluster(dir: &std::path::Path) -> (Vec<Proc>, [u16; 2]) {
    // Ports whose cluster bus ports (+10000) are free too.
    let base = loop {
        let b = free_port_run(2);
        if std::net::TcpListener::bind(("127.0.0.1", b + 10_000)).is_ok()
            && std::net::TcpListener::bind(("127.0.0.1", b + 10_001)).is_ok()
        {
            break b;
        }
    };
    let ports = [base, base + 1];
    let mut procs = Vec::new();
    for p in ports {
        let mut cmd = Command::new("redis-server");
        cmd.args(["--port", &p.to_string(), "--bind", "127.0.0.1"])
            .args(["--cluster-enabled", "yes"])
            .args(["--cluster-config-file", &format!("nodes-{p}.conf")])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(dir);
        let mut proc = Proc::spawn(&format!("redis-cluster-{p}"), cmd);
        proc.wait_port(p, Duration::from_secs(10));
        procs.push(proc);
    }
    redis_cli(ports[0], &["CLUSTER", "ADDSLOTSRANGE", "0", "8191"]);
    redis_cli(ports[1], &["CLUSTER", "ADDSLOTSRANGE", "8192", "16383"]);
    redis_cli(
        ports[0],
        &["CLUSTER", "MEET", "127.0.0.1", &ports[1].to_string()],
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let ready = ports.iter().all(|&p| {
            let info = redis_cli(p, &["CLUSTER", "INFO"]);
            info.contains("cluster_state:ok") && info.contains("cluster_known_nodes:2")
        });
        if ready {
            break;
        }
        assert!(Instant::now() < deadline, "redis cluster did not form");
        std::thread::sleep(Duration::from_millis(100));
    }
    (procs, ports)
}

/// The transcript of the scenario on a 2-node cluster whose node owning a channel is
/// `owner(channel)`, with channel names, slots and ports replaced by their roles.
fn transcript(ports: [u16; 2], owner: &dyn Fn(&str) -> usize) -> String {
    // Names of one length (`c0000`…), so frames compare byte for byte.
    let names: Vec<String> = (0..10_000).map(|i| format!("c{i:04}")).collect();
    let l1 = names.iter().find(|c| owner(c) == 0).unwrap().clone();
    let l2 = names
        .iter()
        .find(|c| owner(c) == 0 && key_slot(c.as_bytes()) != key_slot(l1.as_bytes()))
        .unwrap()
        .clone();
    let r = names.iter().find(|c| owner(c) == 1).unwrap().clone();
    let tagged = format!("{{{l1}}}x");
    let mut log = String::new();
    let mut a = Resp::connect(ports[0]);
    let mut b = Resp::connect(ports[0]);
    let mut other = Resp::connect(ports[1]);
    let mut d = Resp::connect(ports[0]);
    let mut step = |who: &str, what: String| {
        log.push_str(&format!("{who}: {what}\n"));
    };
    step("a", cmd(&mut a, &["SSUBSCRIBE", &r]));
    step("a", cmd(&mut a, &["SSUBSCRIBE", &l1, &l2]));
    step("a", cmd(&mut a, &["SSUBSCRIBE", &l1, &tagged]));
    step("a", next(&mut a));
    step("a", cmd(&mut a, &["SUBSCRIBE", "news"]));
    step("a", cmd(&mut a, &["PING"]));
    step("a", cmd(&mut a, &["GET", "k"]));
    step("b", cmd(&mut b, &["SPUBLISH", &l1, "hello"]));
    step("a", next(&mut a));
    step("b", cmd(&mut b, &["SPUBLISH", &r, "x"]));
    step(
        "b",
        cmd(&mut b, &["PUBSUB", "SHARDNUMSUB", &l1, &tagged, &r]),
    );
    step(
        "b",
        cmd(&mut b, &["PUBSUB", "SHARDCHANNELS", &format!("{{{l1}}}*")]),
    );
    // A PUBLISH on the other node reaches the subscriber once; the reply counts locally.
    step("other", cmd(&mut other, &["PUBLISH", "news", "hi"]));
    step("a", next(&mut a));
    assert_quiet(&mut a, "after PUBLISH on the other node");
    step("b", cmd(&mut b, &["PUBLISH", "news", "yo"]));
    step("a", next(&mut a));
    assert_quiet(&mut a, "after PUBLISH on the same node");
    // RESP3: pushes.
    step(
        "d",
        cmd(&mut d, &["HELLO", "3"])
            .split("proto")
            .nth(1)
            .unwrap_or("")
            .chars()
            .take(6)
            .collect(),
    );
    step("d", cmd(&mut d, &["SSUBSCRIBE", &l1]));
    step("b", cmd(&mut b, &["SPUBLISH", &l1, "m"]));
    step("a", next(&mut a));
    step("d", next(&mut d));
    step("d", cmd(&mut d, &["SUNSUBSCRIBE"]));
    step("d", cmd(&mut d, &["SUNSUBSCRIBE"]));
    // Unsubscribing, one kind at a time.
    step("a", cmd(&mut a, &["SUNSUBSCRIBE", &l1]));
    step("a", cmd(&mut a, &["SUNSUBSCRIBE", &tagged]));
    step("a", cmd(&mut a, &["SUNSUBSCRIBE"]));
    step("a", cmd(&mut a, &["PING"]));
    step("a", cmd(&mut a, &["UNSUBSCRIBE"]));
    step("a", cmd(&mut a, &["PING"]));
    step("b", cmd(&mut b, &["MULTI"]));
    step("b", cmd(&mut b, &["SSUBSCRIBE", &l1]));
    step("b", cmd(&mut b, &["EXEC"]));
    let mut out = log;
    for (from, to) in [
        (
            format!("-MOVED {} ", key_slot(r.as_bytes())),
            "-MOVED SLOT ".to_string(),
        ),
        (format!("127.0.0.1:{}", ports[1]), "127.0.0.1:PORT1".into()),
        (tagged.clone(), "{LOCAL1}x".into()),
        (l1.clone(), "LOCAL".into()),
        (l2.clone(), "LOCA2".into()),
        (r.clone(), "REMOT".into()),
    ] {
        out = out.replace(&from, &to);
    }
    out
}

#[test]
fn sharded_and_cluster_wide_pubsub_match_a_redis_cluster() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("cluster-pubsub-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (redis, rports) = start_redis_cluster(&dir);
    let want = transcript(rports, &|c| usize::from(key_slot(c.as_bytes()) > 8191));
    drop(redis);
    let (engines, eports) = start_engines();
    let got = transcript(eports, &|c| instance_for_key(c.as_bytes(), 2) as usize);
    drop(engines);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(want.contains("-MOVED SLOT 127.0.0.1:PORT1"), "{want}");
    assert!(want.contains("smessage"), "{want}");
    assert_eq!(got, want);
}

/// A PUBLISH on either engine reaches channel and pattern subscribers on both engines
/// exactly once (PUBLISH answers the local receivers); SPUBLISH reaches the owner's shard
/// subscribers; after the peer engine restarts, forwarding resumes (bounded retry: the bus
/// drops messages while a peer is down, then reconnects after its backoff).
#[test]
fn publish_reaches_every_engine_once_and_survives_a_peer_restart() {
    let (mut engines, ports) = start_engines();
    let mut subs: Vec<Resp> = ports.iter().map(|&p| Resp::connect(p)).collect();
    let mut psubs: Vec<Resp> = ports.iter().map(|&p| Resp::connect(p)).collect();
    for s in &mut subs {
        cmd(s, &["SUBSCRIBE", "news"]);
    }
    for s in &mut psubs {
        cmd(s, &["PSUBSCRIBE", "ne*"]);
    }
    for (i, &p) in ports.iter().enumerate() {
        let mut publisher = Resp::connect(p);
        let payload = format!("from{i}");
        assert_eq!(
            cmd(&mut publisher, &["PUBLISH", "news", &payload]),
            ":2\\r\\n"
        );
        for s in &mut subs {
            assert_eq!(
                next(s),
                format!("*3\\r\\n$7\\r\\nmessage\\r\\n$4\\r\\nnews\\r\\n$5\\r\\n{payload}\\r\\n")
            );
        }
        for s in &mut psubs {
            assert_eq!(
                next(s),
                format!(
                    "*4\\r\\n$8\\r\\npmessage\\r\\n$3\\r\\nne*\\r\\n$4\\r\\nnews\\r\\n$5\\r\\n{payload}\\r\\n"
                )
            );
        }
        for s in subs.iter_mut().chain(psubs.iter_mut()) {
            assert_quiet(s, "exactly once");
        }
    }
    // SPUBLISH on the owner of the channel.
    let ch = (0..)
        .map(|i| format!("s{i}"))
        .find(|c| instance_for_key(c.as_bytes(), 2) == 1)
        .unwrap();
    let mut ssub = Resp::connect(ports[1]);
    cmd(&mut ssub, &["SSUBSCRIBE", &ch]);
    let mut publisher0 = Resp::connect(ports[0]);
    assert!(cmd(&mut publisher0, &["SPUBLISH", &ch, "m"]).starts_with("-MOVED "));
    let mut publisher1 = Resp::connect(ports[1]);
    assert_eq!(cmd(&mut publisher1, &["SPUBLISH", &ch, "m"]), ":1\\r\\n");
    assert_eq!(
        next(&mut ssub),
        format!(
            "*3\\r\\n$8\\r\\nsmessage\\r\\n${}\\r\\n{ch}\\r\\n$1\\r\\nm\\r\\n",
            ch.len()
        )
    );

    // Engine 1 restarts: engine 0's PUBLISH keeps answering, and reaches it again.
    engines[1].kill();
    let nodes = format!("127.0.0.1:{},127.0.0.1:{}", ports[0], ports[1]);
    engines[1] = start_cluster_engine(&nodes, 1, ports[1]);
    let mut sub1 = Resp::connect(ports[1]);
    cmd(&mut sub1, &["SUBSCRIBE", "news"]);
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut n = 0;
    loop {
        n += 1;
        let payload = format!("again{n}");
        cmd(&mut publisher0, &["PUBLISH", "news", &payload]);
        let (got, _) =
            sub1.read_until_close(Duration::from_millis(200), Duration::from_millis(400));
        if !got.is_empty() {
            assert!(escape(&got).contains("again"), "{}", escape(&got));
            break;
        }
        assert!(Instant::now() < deadline, "forwarding did not resume");
    }
}

/// Through the proxy of a cluster fleet: SSUBSCRIBE / SPUBLISH by the channel's engine in
/// RESP2 and RESP3, CROSSSLOT across slots, SHARDCHANNELS / SHARDNUMSUB, and channel and
/// pattern subscribers hearing a PUBLISH sent to either engine directly exactly once.
#[test]
fn sharded_and_cluster_pubsub_through_the_proxy() {
    let f = Fleet::start("cluster-pubsub", 2);
    let ch = (0..)
        .map(|i| format!("s{i}"))
        .find(|c| instance_for_key(c.as_bytes(), 2) == 1)
        .unwrap();
    let other = (0..)
        .map(|i| format!("t{i}"))
        .find(|c| key_slot(c.as_bytes()) != key_slot(ch.as_bytes()))
        .unwrap();
    let mut s2 = Resp::connect(f.proxy_port);
    let mut s3 = Resp::connect(f.proxy_port);
    let mut publisher = Resp::connect(f.proxy_port);
    assert_eq!(
        cmd(&mut s2, &["SSUBSCRIBE", &ch, &other]),
        "-CROSSSLOT Keys in request don't hash to the same slot\\r\\n"
    );
    let sframe = |head: &str, kind: &str, count: i64| {
        format!(
            "{head}3\\r\\n${}\\r\\n{kind}\\r\\n${}\\r\\n{ch}\\r\\n:{count}\\r\\n",
            kind.len(),
            ch.len()
        )
    };
    assert_eq!(
        cmd(&mut s2, &["SSUBSCRIBE", &ch]),
        sframe("*", "ssubscribe", 1)
    );
    assert!(cmd(&mut s3, &["HELLO", "3"]).starts_with('%'));
    assert_eq!(
        cmd(&mut s3, &["SSUBSCRIBE", &ch]),
        sframe(">", "ssubscribe", 1)
    );
    assert_eq!(cmd(&mut publisher, &["SPUBLISH", &ch, "m"]), ":2\\r\\n");
    let msg = |head: &str| {
        format!(
            "{head}3\\r\\n$8\\r\\nsmessage\\r\\n${}\\r\\n{ch}\\r\\n$1\\r\\nm\\r\\n",
            ch.len()
        )
    };
    assert_eq!(next(&mut s2), msg("*"));
    assert_eq!(next(&mut s3), msg(">"));
    assert_eq!(
        cmd(&mut publisher, &["PUBSUB", "SHARDNUMSUB", &ch]),
        format!("*2\\r\\n${}\\r\\n{ch}\\r\\n:2\\r\\n", ch.len())
    );
    assert_eq!(
        cmd(&mut publisher, &["PUBSUB", "SHARDCHANNELS"]),
        format!("*1\\r\\n${}\\r\\n{ch}\\r\\n", ch.len())
    );
    assert!(cmd(&mut s2, &["GET", "k"]).starts_with("-ERR Can't execute 'get'"));
    assert_eq!(
        cmd(&mut s2, &["SUNSUBSCRIBE"]),
        sframe("*", "sunsubscribe", 0)
    );
    assert_eq!(cmd(&mut s2, &["PING"]), "+PONG\\r\\n");
    assert_eq!(
        cmd(&mut s3, &["SUNSUBSCRIBE", &ch]),
        sframe(">", "sunsubscribe", 0)
    );

    // PUBLISH straight to either engine: the proxy's channel and pattern subscribers hear it
    // once.
    let mut sub = Resp::connect(f.proxy_port);
    let mut psub = Resp::connect(f.proxy_port);
    cmd(&mut sub, &["SUBSCRIBE", "news"]);
    cmd(&mut psub, &["PSUBSCRIBE", "ne*"]);
    for (i, port) in f
        .engine_ports
        .iter()
        .copied()
        .chain([f.proxy_port])
        .enumerate()
    {
        let payload = format!("via{i}");
        cmd(&mut Resp::connect(port), &["PUBLISH", "news", &payload]);
        assert_eq!(
            next(&mut sub),
            format!("*3\\r\\n$7\\r\\nmessage\\r\\n$4\\r\\nnews\\r\\n$4\\r\\n{payload}\\r\\n")
        );
        assert_eq!(
            next(&mut psub),
            format!(
                "*4\\r\\n$8\\r\\npmessage\\r\\n$3\\r\\nne*\\r\\n$4\\r\\nnews\\r\\n$4\\r\\n{payload}\\r\\n"
            )
        );
        assert_quiet(&mut sub, "channel subscriber, exactly once");
        assert_quiet(&mut psub, "pattern subscriber, exactly once");
    }
}
