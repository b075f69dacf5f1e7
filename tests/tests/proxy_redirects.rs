//! The proxy follows `-ASK`, `-MOVED` and `-TRYAGAIN` itself while slots move, so its
//! clients see no error (issue 21; proxy/src/redirect.rs, docs/cluster.md "Through the
//! proxy"). Against real `redis-server --cluster-enabled yes` nodes (Redis 7.0 semantics):
//!
//! - a manual migration of one slot: `CLUSTER SETSLOT … IMPORTING/MIGRATING`, `MIGRATE` of
//!   part of its keys; through the proxy moved and unmoved keys read and write (ASK
//!   followed), a two-key MGET of the slot gets its values once the keys have all moved
//!   (TRYAGAIN retried meanwhile); then `SETSLOT … NODE` everywhere: MOVED followed;
//! - `redis-cli --cluster reshard` of 200 slots while a client writes and reads (and MGET /
//!   MSET over two nodes) through the proxy: no error reply, every key reads back; the
//!   nodes' layout is not the proxy's initial jump-hash map, so the proxy learns it
//!   (CLUSTER SLOTS, MOVED);
//! - a fourth node MEETed in at run time and given slots: the proxy reaches it without a
//!   restart (`INFO` shows 4 instances) and serves its keys.
//!
//! Processes are killed by PID when their [`Proc`] guards drop; every wait is bounded.

mod common;

use common::*;
use std::collections::HashMap;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use engine_core::slot::{key_slot, slot_ranges};

const CLUSTER_WAIT: Duration = Duration::from_secs(30);

struct Node {
    port: u16,
    /// Its cluster bus port (given to CLUSTER MEET).
    bus: u16,
    id: String,
    _proc: Proc,
}

/// One `redis-server` cluster node on 127.0.0.1, no persistence, its nodes.conf in its own
/// directory. Its cluster bus port is a free port of its own (the default, port + 10000, may
/// fall in the ephemeral range and be taken).
fn start_node() -> Node {
    let port = free_port();
    let bus = free_port();
    let mut cmd = Command::new("redis-server");
    cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--cluster-port", &bus.to_string()])
        .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
        .args(["--cluster-enabled", "yes"])
        .args(["--cluster-config-file", "nodes.conf"])
        .args(["--cluster-node-timeout", "5000"]);
    let mut proc = Proc::spawn(&format!("cnode-{port}"), cmd);
    proc.wait_port(port, START_TIMEOUT);
    let id = text(&Resp::connect(port).cmd_str(&["CLUSTER", "MYID"]));
    assert_eq!(id.len(), 40, "CLUSTER MYID: {id:?}");
    Node {
        port,
        bus,
        id,
        _proc: proc,
    }
}

/// A bulk or simple reply's text (panics on anything else).
fn text(reply: &[u8]) -> String {
    match parse_value(reply) {
        Value::Bulk(b) => String::from_utf8(b).unwrap(),
        Value::Simple(s) => s,
        _ => panic!("unexpected reply {}", escape(reply)),
    }
}

fn node_cmd(port: u16, args: &[&str]) -> String {
    escape(&Resp::connect(port).cmd_str(args))
}

/// Gives each node its ranges, MEETs them, and waits until every node agrees (what
/// `redis-cli --cluster check` verifies).
fn form_cluster(nodes: &[Node], ranges: &[(u16, u16, usize)]) {
    for &(first, last, owner) in ranges {
        let r = node_cmd(
            nodes[owner].port,
            &[
                "CLUSTER",
                "ADDSLOTSRANGE",
                &first.to_string(),
                &last.to_string(),
            ],
        );
        assert_eq!(r, "+OK\\r\\n");
    }
    for n in &nodes[1..] {
        let r = node_cmd(
            nodes[0].port,
            &[
                "CLUSTER",
                "MEET",
                "127.0.0.1",
                &n.port.to_string(),
                &n.bus.to_string(),
            ],
        );
        assert_eq!(r, "+OK\\r\\n");
    }
    wait_agreement(nodes);
}

/// Until every node says `cluster_state:ok`, knows every other, and `redis-cli --cluster
/// check` finds the slot configuration agreed.
fn wait_agreement(nodes: &[Node]) {
    let deadline = Instant::now() + CLUSTER_WAIT;
    loop {
        let ok = nodes.iter().all(|n| {
            let mut c = Resp::connect(n.port);
            let info = String::from_utf8_lossy(&c.cmd_str(&["CLUSTER", "INFO"])).into_owned();
            let known = String::from_utf8_lossy(&c.cmd_str(&["CLUSTER", "NODES"]))
                .lines()
                .filter(|l| l.contains("connected"))
                .count();
            info.contains("cluster_state:ok") && known >= nodes.len()
        }) && cluster_check(nodes[0].port);
        if ok {
            return;
        }
        assert!(Instant::now() < deadline, "the cluster did not converge");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn cluster_check(port: u16) -> bool {
    let out = run_cmd(
        Command::new("redis-cli").args(["--cluster", "check", &format!("127.0.0.1:{port}")]),
        Duration::from_secs(20),
    );
    out.ok
        && out
            .stdout
            .contains("[OK] All nodes agree about slots configuration")
        && !out.stdout.contains("[WARNING]")
}

fn start_proxy(nodes: &[Node]) -> (Proc, u16) {
    let port = free_port();
    let backends: Vec<String> = nodes
        .iter()
        .map(|n| format!("127.0.0.1:{}", n.port))
        .collect();
    let mut cmd = Command::new(recached_bin());
    cmd.args(["proxy", "--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--backends", &backends.join(",")]);
    let mut proxy = Proc::spawn("proxy", cmd);
    proxy.wait_port(port, START_TIMEOUT);
    proxy.wait_proxy_reaches_engines(port, START_TIMEOUT);
    (proxy, port)
}

/// A key whose slot is owned by `node` in `ranges`, with `prefix` (as a hash tag: all keys
/// `{tag}…` share its slot).
fn tag_on(ranges: &[(u16, u16, usize)], node: usize, filter: impl Fn(u16) -> bool) -> String {
    (0..)
        .map(|i| format!("t{i}"))
        .find(|t| {
            let s = key_slot(t.as_bytes());
            filter(s)
                && ranges
                    .iter()
                    .any(|&(a, b, o)| o == node && (a..=b).contains(&s))
        })
        .unwrap()
}

fn jump_ranges(n: u32) -> Vec<(u16, u16, usize)> {
    slot_ranges(n)
        .into_iter()
        .map(|(a, b, o)| (a, b, o as usize))
        .collect()
}

#[test]
fn ask_tryagain_and_moved_are_followed_for_a_manually_migrated_slot() {
    let nodes: Vec<Node> = (0..3).map(|_| start_node()).collect();
    // The proxy's own initial map: no MOVED until the slot moves.
    let ranges = jump_ranges(3);
    form_cluster(&nodes, &ranges);
    let (proxy, pport) = start_proxy(&nodes);
    let mut c = Resp::connect(pport);

    let tag = tag_on(&ranges, 0, |_| true);
    let slot = key_slot(tag.as_bytes()).to_string();
    let keys: Vec<String> = (0..10).map(|i| format!("{{{tag}}}:{i}")).collect();
    for k in &keys {
        assert_eq!(cmd(&mut c, &["SET", k, &format!("v-{k}")]), "+OK\\r\\n");
    }
    let other = format!("{{{}}}:x", tag_on(&ranges, 2, |_| true));
    assert_eq!(cmd(&mut c, &["SET", &other, "o"]), "+OK\\r\\n");
    // A key of another slot of node 0.
    let beside = format!(
        "{{{}}}:y",
        tag_on(&ranges, 0, |s| s != key_slot(tag.as_bytes()))
    );
    assert_eq!(cmd(&mut c, &["SET", &beside, "b"]), "+OK\\r\\n");

    // Slot `slot` migrates from node 0 to node 1; half its keys are moved.
    let (src, dst) = (&nodes[0], &nodes[1]);
    assert_eq!(
        node_cmd(
            dst.port,
            &["CLUSTER", "SETSLOT", &slot, "IMPORTING", &src.id]
        ),
        "+OK\\r\\n"
    );
    assert_eq!(
        node_cmd(
            src.port,
            &["CLUSTER", "SETSLOT", &slot, "MIGRATING", &dst.id]
        ),
        "+OK\\r\\n"
    );
    let migrate = |ks: &[String]| {
        let dport = dst.port.to_string();
        let mut args = vec!["MIGRATE", "127.0.0.1", &dport, "", "0", "5000", "KEYS"];
        args.extend(ks.iter().map(|k| k.as_str()));
        assert_eq!(node_cmd(src.port, &args), "+OK\\r\\n");
    };
    migrate(&keys[..5]);
    // Node 0 itself answers ASK for a moved key: the proxy does not show it.
    assert!(node_cmd(src.port, &["GET", &keys[0]]).starts_with("-ASK "));
    // Keys of two slots of node 0 in one request: a Redis Cluster node refuses a batch over
    // several slots (CROSSSLOT); the proxy sends it per slot, the moved keys' request after
    // their ASK (proxy/src/split.rs, `per_slot`).
    let mget = ["MGET", &beside, &keys[0], &keys[1], &other];
    assert!(node_cmd(src.port, &mget[..3]).starts_with("-CROSSSLOT"));
    let (v0, v1) = (format!("v-{}", keys[0]), format!("v-{}", keys[1]));
    assert_eq!(
        cmd(&mut c, &mget),
        format!(
            "*4\\r\\n$1\\r\\nb\\r\\n${}\\r\\n{v0}\\r\\n${}\\r\\n{v1}\\r\\n$1\\r\\no\\r\\n",
            v0.len(),
            v1.len()
        )
    );
    let exists = ["EXISTS", &beside, &keys[5], &keys[6], &other];
    assert_eq!(cmd(&mut c, &exists), ":4\\r\\n");
    for k in &keys {
        let want = format!("v-{k}");
        assert_eq!(
            cmd(&mut c, &["GET", k]),
            format!("${}\\r\\n{want}\\r\\n", want.len())
        );
    }
    // A write of a moved key and of a new key (ASK: the source lacks both).
    assert_eq!(cmd(&mut c, &["SET", &keys[1], "new1"]), "+OK\\r\\n");
    assert_eq!(cmd(&mut c, &["GET", &keys[1]]), "$4\\r\\nnew1\\r\\n");
    let fresh = format!("{{{tag}}}:fresh");
    assert_eq!(cmd(&mut c, &["SET", &fresh, "f"]), "+OK\\r\\n");
    assert_eq!(cmd(&mut c, &["GET", &fresh]), "$1\\r\\nf\\r\\n");
    assert_eq!(cmd(&mut c, &["GET", &other]), "$1\\r\\no\\r\\n");

    // A two-key MGET of the slot while its keys are split: TRYAGAIN until the rest moves.
    let rest = keys[5..].to_vec();
    let mover = std::thread::spawn({
        let (sport, dport) = (src.port, dst.port);
        move || {
            std::thread::sleep(Duration::from_millis(150));
            let dport = dport.to_string();
            let mut args = vec!["MIGRATE", "127.0.0.1", &dport, "", "0", "5000", "KEYS"];
            args.extend(rest.iter().map(|k| k.as_str()));
            assert_eq!(node_cmd(sport, &args), "+OK\\r\\n");
        }
    });
    let mget = cmd(&mut c, &["MGET", &keys[0], &keys[9]]);
    mover.join().unwrap();
    assert_eq!(
        mget,
        format!(
            "*2\\r\\n${}\\r\\nv-{}\\r\\n${}\\r\\nv-{}\\r\\n",
            2 + keys[0].len(),
            keys[0],
            2 + keys[9].len(),
            keys[9]
        )
    );

    // The move completes: every node learns the new owner; the proxy follows MOVED.
    for n in [&nodes[1], &nodes[0], &nodes[2]] {
        assert_eq!(
            node_cmd(n.port, &["CLUSTER", "SETSLOT", &slot, "NODE", &dst.id]),
            "+OK\\r\\n"
        );
    }
    assert!(node_cmd(src.port, &["GET", &keys[2]]).starts_with("-MOVED "));
    for k in &keys[2..] {
        let want = format!("v-{k}");
        assert_eq!(
            cmd(&mut c, &["GET", k]),
            format!("${}\\r\\n{want}\\r\\n", want.len())
        );
    }
    assert_eq!(cmd(&mut c, &["SET", &keys[0], "after"]), "+OK\\r\\n");
    assert_eq!(
        node_cmd(dst.port, &["GET", &keys[0]]),
        "$5\\r\\nafter\\r\\n",
        "the write reached the new owner"
    );
    // Pipelined: replies stay in request order across the redirects.
    let mut batch = Vec::new();
    for k in &keys[2..] {
        batch.extend(Resp::encode(&[b"GET", k.as_bytes()]));
        batch.extend(Resp::encode(&[b"GET", other.as_bytes()]));
    }
    c.send_raw(&batch);
    for k in &keys[2..] {
        let want = format!("v-{k}");
        assert_eq!(next(&mut c), format!("${}\\r\\n{want}\\r\\n", want.len()));
        assert_eq!(next(&mut c), "$1\\r\\no\\r\\n");
    }
    drop(proxy);
}

/// A client through the proxy for as long as `run` holds: SET then GET of random keys of
/// `keys` (values recorded in the returned map), and every 16th step an MSET then MGET of
/// `pair` (keys on two different nodes). Returns the values and the error replies seen.
fn load(
    pport: u16,
    keys: Arc<Vec<String>>,
    pair: (String, String),
    run: Arc<AtomicBool>,
) -> std::thread::JoinHandle<(HashMap<String, String>, Vec<String>)> {
    std::thread::spawn(move || {
        let mut c = Resp::connect(pport);
        let mut values = HashMap::new();
        let mut errors = Vec::new();
        let mut step = 0u64;
        while run.load(Ordering::Relaxed) {
            step += 1;
            let k = &keys[(step.wrapping_mul(2654435761) % keys.len() as u64) as usize];
            let v = format!("{k}@{step}");
            let set = cmd(&mut c, &["SET", k, &v]);
            if set != "+OK\\r\\n" {
                errors.push(format!("SET {k}: {set}"));
            }
            values.insert(k.clone(), v.clone());
            let got = cmd(&mut c, &["GET", k]);
            if got != format!("${}\\r\\n{v}\\r\\n", v.len()) {
                errors.push(format!("GET {k}: {got} (want {v})"));
            }
            if step.is_multiple_of(16) {
                let (a, b) = (&pair.0, &pair.1);
                let (va, vb) = (format!("a{step}"), format!("b{step}"));
                let r = cmd(&mut c, &["MSET", a, &va, b, &vb]);
                if r != "+OK\\r\\n" {
                    errors.push(format!("MSET: {r}"));
                }
                let r = cmd(&mut c, &["MGET", a, b]);
                let want = format!(
                    "*2\\r\\n${}\\r\\n{va}\\r\\n${}\\r\\n{vb}\\r\\n",
                    va.len(),
                    vb.len()
                );
                if r != want {
                    errors.push(format!("MGET: {r} (want {want})"));
                }
                values.insert(a.clone(), va);
                values.insert(b.clone(), vb);
            }
        }
        (values, errors)
    })
}

fn reshard(from: &Node, to: &Node, slots: u32) {
    let out = run_cmd(
        Command::new("redis-cli").args([
            "--cluster",
            "reshard",
            &format!("127.0.0.1:{}", from.port),
            "--cluster-from",
            &from.id,
            "--cluster-to",
            &to.id,
            "--cluster-slots",
            &slots.to_string(),
            "--cluster-yes",
        ]),
        Duration::from_secs(120),
    );
    assert!(out.ok, "reshard failed: {}", out.text());
}

fn check_all(pport: u16, values: &HashMap<String, String>) {
    let mut c = Resp::connect(pport);
    for (k, v) in values {
        assert_eq!(
            cmd(&mut c, &["GET", k]),
            format!("${}\\r\\n{v}\\r\\n", v.len()),
            "key {k}"
        );
    }
}

#[test]
fn reshard_under_load_and_a_node_added_at_run_time() {
    let mut nodes: Vec<Node> = (0..3).map(|_| start_node()).collect();
    // Thirds, as redis-cli --cluster create lays them out: not the proxy's initial map.
    let ranges = vec![(0, 5460, 0), (5461, 10922, 1), (10923, 16383, 2)];
    form_cluster(&nodes, &ranges);
    let (proxy, pport) = start_proxy(&nodes);

    let keys: Arc<Vec<String>> = Arc::new((0..3000).map(|i| format!("key:{i}")).collect());
    let mut c = Resp::connect(pport);
    let mut values: HashMap<String, String> = HashMap::new();
    for k in keys.iter() {
        assert_eq!(cmd(&mut c, &["SET", k, k]), "+OK\\r\\n");
        values.insert(k.clone(), k.clone());
    }
    // MGET/MSET pair: one key in the first 200 slots of node 0 (the ones resharded to node
    // 1), one on node 2; each part is one key, as Redis Cluster nodes require.
    let a = format!("{{{}}}:a", tag_on(&ranges, 0, |s| s < 200));
    let b = format!("{{{}}}:b", tag_on(&ranges, 2, |_| true));

    // 200 slots from node 0 to node 1 under load.
    let run = Arc::new(AtomicBool::new(true));
    let worker = load(pport, keys.clone(), (a.clone(), b.clone()), run.clone());
    reshard(&nodes[0], &nodes[1], 200);
    std::thread::sleep(Duration::from_millis(300));
    run.store(false, Ordering::Relaxed);
    let (written, errors) = worker.join().unwrap();
    assert!(written.len() > 100, "the load ran during the reshard");
    assert!(
        errors.is_empty(),
        "{} error replies, first: {:?}",
        errors.len(),
        &errors[..errors.len().min(5)]
    );
    values.extend(written);
    assert!(
        node_cmd(nodes[0].port, &["GET", &a]).starts_with("-MOVED "),
        "the slot of {a} moved"
    );
    check_all(pport, &values);

    // A fourth node, unknown to the proxy, joins and takes 300 slots of node 2 under load.
    nodes.push(start_node());
    let r = node_cmd(
        nodes[0].port,
        &[
            "CLUSTER",
            "MEET",
            "127.0.0.1",
            &nodes[3].port.to_string(),
            &nodes[3].bus.to_string(),
        ],
    );
    assert_eq!(r, "+OK\\r\\n");
    wait_agreement(&nodes);
    let run = Arc::new(AtomicBool::new(true));
    let worker = load(pport, keys.clone(), (a.clone(), b.clone()), run.clone());
    reshard(&nodes[2], &nodes[3], 300);
    std::thread::sleep(Duration::from_millis(300));
    run.store(false, Ordering::Relaxed);
    let (written, errors) = worker.join().unwrap();
    assert!(written.len() > 100, "the load ran during the reshard");
    assert!(
        errors.is_empty(),
        "{} error replies, first: {:?}",
        errors.len(),
        &errors[..errors.len().min(5)]
    );
    values.extend(written);
    check_all(pport, &values);

    // The new node holds keys and the proxy reaches it: a key of one of its slots written
    // through the proxy is on it.
    let new_port = nodes[3].port;
    let owned = String::from_utf8_lossy(&Resp::connect(new_port).cmd_str(&["CLUSTER", "SLOTS"]))
        .into_owned();
    assert!(owned.contains(&new_port.to_string()));
    let on_new = keys
        .iter()
        .find(|k| !node_cmd(new_port, &["GET", k]).starts_with("-MOVED"))
        .expect("a key on the new node")
        .clone();
    assert_eq!(cmd(&mut c, &["SET", &on_new, "fresh"]), "+OK\\r\\n");
    assert_eq!(node_cmd(new_port, &["GET", &on_new]), "$5\\r\\nfresh\\r\\n");
    let info = String::from_utf8_lossy(&c.cmd_str(&["INFO", "proxy"])).into_owned();
    assert!(info.contains("instances:4"), "{info}");
    // DBSIZE is summed over the nodes that own slots.
    let total: i64 = nodes
        .iter()
        .map(|n| {
            node_cmd(n.port, &["DBSIZE"])
                .trim_start_matches(':')
                .trim_end_matches("\\r\\n")
                .parse::<i64>()
                .unwrap()
        })
        .sum();
    assert_eq!(cmd(&mut c, &["DBSIZE"]), format!(":{total}\\r\\n"));
    drop(proxy);
}
