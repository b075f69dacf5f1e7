use super::*;
use crate::Proto;

pub(super) fn engine(nodes: &[&str], index: usize) -> Engine {
    Engine::new(Config {
        cluster_nodes: nodes.iter().map(|s| s.to_string()).collect(),
        cluster_index: index,
        ..Config::default()
    })
}

pub(super) fn run(e: &mut Engine, client: &mut Client, args: &[&str]) -> String {
    let argv: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    let mut out = Vec::new();
    e.exec(client, &argv, 1_700_000_000_000_000, &mut out);
    String::from_utf8_lossy(&out).into_owned()
}

pub(super) fn client() -> Client {
    Client {
        laddr: "10.1.2.3:7000".into(),
        ..Client::default()
    }
}

/// A key whose slot instance `i` of `n` owns, with the hash tag `{t<k>}`.
fn key_on(i: u32, n: u32, skip: usize) -> String {
    (0..)
        .map(|k| format!("{{t{k}}}"))
        .filter(|k| slot::instance_for_key(k.as_bytes(), n) == i)
        .nth(skip)
        .unwrap()
}

/// Shard channels hash like keys: MOVED to the owner, CROSSSLOT across slots even when
/// every slot is local (redis-server 7.0.15 in a cluster), local ones run; SUNSUBSCRIBE
/// alone and PUBLISH stay keyless.
#[test]
fn shard_channels_are_routed_by_slot() {
    let nodes = ["127.0.0.1:7000", "127.0.0.1:7001"];
    let mut e = engine(&nodes, 0);
    let mut c = client();
    let (l1, l2, r) = (key_on(0, 2, 0), key_on(0, 2, 1), key_on(1, 2, 0));
    let rs = slot::key_slot(r.as_bytes());
    let moved = format!("-MOVED {rs} 127.0.0.1:7001\r\n");
    let cross = "-CROSSSLOT Keys in request don't hash to the same slot\r\n";
    assert_eq!(run(&mut e, &mut c, &["SSUBSCRIBE", &r]), moved);
    assert_eq!(run(&mut e, &mut c, &["SPUBLISH", &r, "m"]), moved);
    assert_eq!(run(&mut e, &mut c, &["SUNSUBSCRIBE", &r]), moved);
    assert_eq!(run(&mut e, &mut c, &["SSUBSCRIBE", &l1, &l2]), cross);
    assert_eq!(run(&mut e, &mut c, &["SSUBSCRIBE", &l1, &r]), cross);
    assert_eq!(run(&mut e, &mut c, &["PUBLISH", &r, "m"]), ":0\r\n");
    let tagged = format!("{l1}x");
    assert_eq!(
        run(&mut e, &mut c, &["SSUBSCRIBE", &l1, &tagged]),
        format!(
            "*3\r\n$10\r\nssubscribe\r\n${}\r\n{l1}\r\n:1\r\n\
             *3\r\n$10\r\nssubscribe\r\n${}\r\n{tagged}\r\n:2\r\n",
            l1.len(),
            tagged.len()
        )
    );
    assert_eq!(
        run(&mut e, &mut c, &["SUNSUBSCRIBE", &l1]),
        format!(
            "*3\r\n$12\r\nsunsubscribe\r\n${}\r\n{l1}\r\n:1\r\n",
            l1.len()
        )
    );
    assert!(run(&mut e, &mut c, &["SUNSUBSCRIBE"]).starts_with("*3\r\n$12\r\nsunsubscribe"));
    // Standalone: every channel is local, nothing is checked.
    let mut st = Engine::new(Config::default());
    assert_eq!(run(&mut st, &mut c, &["SPUBLISH", &l1, "m"]), ":0\r\n");
}

#[test]
fn node_ids_are_stable_hex_and_distinct() {
    let a = node_id("127.0.0.1:6400");
    assert_eq!(a.len(), 40);
    assert!(
        a.bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    );
    assert_eq!(a, node_id("127.0.0.1:6400"));
    assert_ne!(a, node_id("127.0.0.1:6401"));
    // Pinned: an instance must keep its id across releases, not only across restarts.
    assert_eq!(a, "296f236d1334cbf2411394005eef19d3d25be02e");
}

#[test]
fn standalone_answers_cluster_support_disabled() {
    let mut e = Engine::new(Config::default());
    let mut c = client();
    for cmd in [
        &["CLUSTER", "INFO"][..],
        &["CLUSTER", "SLOTS"],
        &["CLUSTER", "KEYSLOT", "foo"],
        &["CLUSTER", "HELP"],
        &["CLUSTER", "MEET", "a", "1"],
        &["READONLY"],
        &["READWRITE"],
        &["ASKING"],
    ] {
        assert_eq!(
            run(&mut e, &mut c, cmd),
            "-ERR This instance has cluster support disabled\r\n",
            "{cmd:?}"
        );
    }
    assert_eq!(
        run(&mut e, &mut c, &["CLUSTER", "NOSUCH"]),
        "-ERR unknown subcommand 'NOSUCH'. Try CLUSTER HELP.\r\n"
    );
    // Owns everything.
    assert_eq!(
        run(&mut e, &mut c, &["MSET", "foo", "1", "bar", "2"]),
        "+OK\r\n"
    );
}

#[test]
fn ownership_moved_crossslot_and_local_multislot() {
    let nodes = ["127.0.0.1:7000", "127.0.0.1:7001"];
    let mut e0 = engine(&nodes, 0);
    let mut c = client();
    let (l1, l2) = (key_on(0, 2, 0), key_on(0, 2, 1));
    let (r1, r2) = (key_on(1, 2, 0), key_on(1, 2, 1));
    assert_ne!(slot::key_slot(l1.as_bytes()), slot::key_slot(l2.as_bytes()));
    assert_ne!(slot::key_slot(r1.as_bytes()), slot::key_slot(r2.as_bytes()));
    assert_eq!(run(&mut e0, &mut c, &["SET", &l1, "v"]), "+OK\r\n");
    let rs = slot::key_slot(r1.as_bytes());
    assert_eq!(
        run(&mut e0, &mut c, &["GET", &r1]),
        format!("-MOVED {rs} 127.0.0.1:7001\r\n")
    );
    // All keys here, several slots: runs (the proxy relies on it).
    assert_eq!(
        run(&mut e0, &mut c, &["MSET", &l1, "a", &l2, "b"]),
        "+OK\r\n"
    );
    // Remote, one slot (same key twice, or hash-tagged keys): MOVED.
    let tagged = format!("x{r1}");
    assert_eq!(
        run(&mut e0, &mut c, &["MGET", &r1, &tagged]),
        format!("-MOVED {rs} 127.0.0.1:7001\r\n")
    );
    // Remote across slots, and mixed local + remote: CROSSSLOT.
    let cross = "-CROSSSLOT Keys in request don't hash to the same slot\r\n";
    assert_eq!(run(&mut e0, &mut c, &["MGET", &r1, &r2]), cross);
    assert_eq!(run(&mut e0, &mut c, &["DEL", &l1, &r1]), cross);
    assert_eq!(run(&mut e0, &mut c, &["MSET", &r1, "1", &l1, "2"]), cross);
    // Keyless commands run locally.
    assert_eq!(run(&mut e0, &mut c, &["DBSIZE"]), ":2\r\n");
    // The other engine sees the mirror image.
    let mut e1 = engine(&nodes, 1);
    assert_eq!(run(&mut e1, &mut c, &["SET", &r1, "v"]), "+OK\r\n");
    let ls = slot::key_slot(l1.as_bytes());
    assert_eq!(
        run(&mut e1, &mut c, &["GET", &l1]),
        format!("-MOVED {ls} 127.0.0.1:7000\r\n")
    );
}

#[test]
fn movable_keys_come_from_key_specs() {
    let nodes = ["127.0.0.1:7000", "127.0.0.1:7001"];
    let mut e0 = engine(&nodes, 0);
    let mut c = client();
    let (l1, r1, r2) = (key_on(0, 2, 0), key_on(1, 2, 0), key_on(1, 2, 1));
    let cmd = |args: &[&str]| {
        let argv: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        let spec = crate::dispatch::resolve(&argv).unwrap().0;
        let mut out = Vec::new();
        let ok = redirect(&e0, &mut client(), spec, &argv, 0, true, &mut out) == Route::Run;
        (ok, String::from_utf8_lossy(&out).into_owned())
    };
    // ZUNIONSTORE dst numkeys key…: dst by index, sources by keynum.
    assert!(cmd(&["ZUNIONSTORE", &l1, "1", &l1]).0);
    assert!(
        cmd(&["ZUNIONSTORE", &l1, "1", &r1])
            .1
            .starts_with("-CROSSSLOT")
    );
    let (ok, out) = cmd(&["ZUNIONSTORE", &r1, "1", &r1, "WEIGHTS", "2"]);
    assert!(!ok && out.starts_with("-MOVED"), "{out}");
    // WEIGHTS values are not keys.
    assert!(cmd(&["ZUNIONSTORE", &l1, "1", &l1, "WEIGHTS", &r1]).0);
    // LMPOP numkeys key… LEFT; an invalid numkeys leaves the error to the handler.
    assert!(
        cmd(&["LMPOP", "2", &r1, &r2, "LEFT"])
            .1
            .starts_with("-CROSSSLOT")
    );
    assert!(cmd(&["LMPOP", "x", &r1, "LEFT"]).0);
    assert!(cmd(&["LMPOP", "5", &r1, "LEFT"]).0);
    assert!(cmd(&["BLMPOP", "0", "1", &l1, "LEFT"]).0);
    assert!(!cmd(&["BLMPOP", "0", "1", &r1, "LEFT"]).0);
    let _ = run(&mut e0, &mut c, &["PING"]);
}

#[test]
fn wildcard_hosts_announce_the_clients_local_address() {
    let mut e = engine(&["0.0.0.0:7000", "0.0.0.0:7001"], 0);
    let mut c = client();
    let r1 = key_on(1, 2, 0);
    let rs = slot::key_slot(r1.as_bytes());
    assert_eq!(
        run(&mut e, &mut c, &["GET", &r1]),
        format!("-MOVED {rs} 10.1.2.3:7001\r\n")
    );
    let mut v6 = Client {
        laddr: "[::1]:7000".into(),
        ..Client::default()
    };
    assert_eq!(
        run(&mut e, &mut v6, &["GET", &r1]),
        format!("-MOVED {rs} ::1:7001\r\n")
    );
    let mut e = Engine::new(Config {
        cluster_nodes: vec!["0.0.0.0:7000".into(), "0.0.0.0:7001".into()],
        cluster_announce_host: "cache.example".into(),
        ..Config::default()
    });
    assert_eq!(
        run(&mut e, &mut c, &["GET", &r1]),
        format!("-MOVED {rs} cache.example:7001\r\n")
    );
}

#[test]
fn slots_reply_shape_resp2_and_resp3() {
    let mut e = engine(&["127.0.0.1:7000", "127.0.0.1:7001"], 0);
    let mut c = client();
    let out = run(&mut e, &mut c, &["CLUSTER", "SLOTS"]);
    let id0 = node_id("127.0.0.1:7000");
    let ranges = slot::slot_ranges(2);
    assert!(out.starts_with(&format!(
        "*{}\r\n*3\r\n:0\r\n:255\r\n*4\r\n$9\r\n127.0.0.1\r\n:7000\r\n$40\r\n{id0}\r\n*0\r\n*3\r\n:256\r\n:447\r\n",
        ranges.len()
    )), "{out}");
    c.proto = Proto::Resp3;
    let out = run(&mut e, &mut c, &["CLUSTER", "SLOTS"]);
    assert!(out.contains(&format!("{id0}\r\n%0\r\n")), "{out}");
}

#[test]
fn info_nodes_shards_myid_keyslot_counts() {
    let mut e = engine(&["127.0.0.1:7000", "127.0.0.1:7001"], 1);
    let mut c = client();
    let info = run(&mut e, &mut c, &["CLUSTER", "INFO"]);
    assert!(info.starts_with("$"), "{info}");
    assert!(info.contains("\r\ncluster_state:ok\r\n"), "{info}");
    assert!(info.contains("cluster_known_nodes:2\r\n"), "{info}");
    assert!(info.contains("cluster_my_epoch:2\r\n"), "{info}");
    let id1 = node_id("127.0.0.1:7001");
    assert_eq!(
        run(&mut e, &mut c, &["CLUSTER", "MYID"]),
        format!("$40\r\n{id1}\r\n")
    );
    let nodes = run(&mut e, &mut c, &["CLUSTER", "NODES"]);
    assert!(
        nodes.contains(&format!(
            "{id1} 127.0.0.1:7001@0 myself,master - 0 0 2 connected 256-447 "
        )),
        "{nodes}"
    );
    assert!(
        nodes.contains(" master - 0 1700000000000 1 connected 0-255 448-639 "),
        "{nodes}"
    );
    let shards = run(&mut e, &mut c, &["CLUSTER", "SHARDS"]);
    assert!(
        shards.starts_with("*2\r\n*4\r\n$5\r\nslots\r\n*"),
        "{shards}"
    );
    assert!(
        shards.contains("$6\r\nhealth\r\n$6\r\nonline\r\n"),
        "{shards}"
    );
    c.proto = Proto::Resp3;
    assert!(run(&mut e, &mut c, &["CLUSTER", "INFO"]).starts_with("="));
    assert!(run(&mut e, &mut c, &["CLUSTER", "SHARDS"]).starts_with("*2\r\n%2\r\n"));
    c.proto = Proto::Resp2;
    assert_eq!(
        run(&mut e, &mut c, &["CLUSTER", "KEYSLOT", "foo"]),
        ":12182\r\n"
    );
    // Counting keys per slot (slot 12182 = foo's, owned by instance 0 for n = 2? either way
    // the count is of keys held here).
    let key = key_on(1, 2, 0);
    let s = slot::key_slot(key.as_bytes()).to_string();
    run(&mut e, &mut c, &["SET", &key, "1"]);
    run(&mut e, &mut c, &["SET", &format!("a{key}"), "1"]);
    assert_eq!(
        run(&mut e, &mut c, &["CLUSTER", "COUNTKEYSINSLOT", &s]),
        ":2\r\n"
    );
    let keys = run(&mut e, &mut c, &["CLUSTER", "GETKEYSINSLOT", &s, "1"]);
    assert!(keys.starts_with("*1\r\n"), "{keys}");
    assert_eq!(
        run(&mut e, &mut c, &["CLUSTER", "GETKEYSINSLOT", &s, "0"]),
        "*0\r\n"
    );
    for (args, err) in [
        (
            &["CLUSTER", "COUNTKEYSINSLOT", "x"][..],
            "-ERR value is not an integer or out of range\r\n",
        ),
        (
            &["CLUSTER", "COUNTKEYSINSLOT", "16384"],
            "-ERR Invalid slot\r\n",
        ),
        (
            &["CLUSTER", "COUNTKEYSINSLOT", "-1"],
            "-ERR Invalid slot\r\n",
        ),
        (
            &["CLUSTER", "GETKEYSINSLOT", "1", "-1"],
            "-ERR Invalid slot or number of keys\r\n",
        ),
        (
            &["CLUSTER", "GETKEYSINSLOT", "x", "1"],
            "-ERR value is not an integer or out of range\r\n",
        ),
        (
            &["CLUSTER", "KEYSLOT"],
            "-ERR wrong number of arguments for 'cluster|keyslot' command\r\n",
        ),
        (
            &["READONLY", "x"],
            "-ERR wrong number of arguments for 'readonly' command\r\n",
        ),
    ] {
        assert_eq!(run(&mut e, &mut c, args), err, "{args:?}");
    }
    for cmd in ["READONLY", "READWRITE", "ASKING"] {
        assert_eq!(run(&mut e, &mut c, &[cmd]), "+OK\r\n");
    }
    // redis-server 7.0.15: `CLUSTER MEET h 1` → `-ERR Invalid node address specified: h:1`.
    assert_eq!(
        run(&mut e, &mut c, &["CLUSTER", "MEET", "h", "1"]),
        "-ERR Invalid node address specified: h:1\r\n"
    );
    assert!(
        run(&mut e, &mut c, &["CLUSTER", "REPLICATE", "x"])
            .starts_with("-ERR CLUSTER REPLICATE is not supported")
    );
}

#[test]
fn bad_topologies_are_refused() {
    let cfg = |nodes: &[&str], index| Config {
        cluster_nodes: nodes.iter().map(|s| s.to_string()).collect(),
        cluster_index: index,
        ..Config::default()
    };
    assert!(Cluster::from_config(&cfg(&["a:1", "a:1"], 0)).is_err());
    assert!(Cluster::from_config(&cfg(&["a:1"], 1)).is_err());
    assert!(Cluster::from_config(&cfg(&["a"], 0)).is_err());
    assert!(Cluster::from_config(&cfg(&["a:0"], 0)).is_err());
    assert!(Cluster::from_config(&cfg(&["a:x"], 0)).is_err());
    assert!(
        Cluster::from_config(&cfg(&["[::1]:7000", "b:2"], 1))
            .unwrap()
            .enabled()
    );
    assert!(!Cluster::from_config(&cfg(&[], 0)).unwrap().enabled());
}
