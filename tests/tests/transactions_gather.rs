//! Issue 20: commands, scripts and transactions whose keys live on several engines and cannot
//! be split run through the proxy gathered on one engine (docs/transactions.md,
//! `proxy/src/coord.rs` `Gather`), with a single Redis's replies and effects.
//!
//! - Every multi-key command of the issue, with its keys spread over the engines of a 2- and a
//!   4-engine fleet, gets byte for byte the reply a single redis-server 7.0 gives for the same
//!   steps, and leaves the same values and TTLs (read back through the proxy and compared).
//! - A script moving a value between keys on two engines, scripts touching keys of other
//!   engines they did not declare (run again gathered), and a MULTI holding such commands.
//! - Isolation: members moved between two sets on different engines by several clients with
//!   SMOVE while readers sum the cardinalities in MULTI: the total never changes.
//! - The engines hold no guest afterwards: each key is on its own engine only.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use common::{Fleet, Resp, free_port, start_redis};
use engine_core::slot::instance_for_key;

/// A key starting with `prefix` that engine `owner` of `n` owns.
fn key_on(owner: u32, n: u32, prefix: &str) -> String {
    (0..)
        .map(|i| format!("{prefix}{i}"))
        .find(|k| instance_for_key(k.as_bytes(), n) == owner)
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The steps of the differential check: `{0}`, `{1}`, … name keys on engines 0, 1, … (mod
/// the fleet size); each step's reply must equal redis-server's.
const STEPS: &[&[&str]] = &[
    // Strings: RENAME keeps the TTL; RENAMENX; COPY; MSETNX; BITOP.
    &["SET", "{0}s", "hello", "EX", "1000"],
    &["RENAME", "{0}s", "{1}s"],
    &["EXISTS", "{0}s"],
    &["GET", "{1}s"],
    &["TTL", "{1}s"],
    &["SET", "{2}t", "x"],
    &["RENAMENX", "{1}s", "{2}t"],
    &["RENAMENX", "{1}s", "{3}u"],
    &["GET", "{3}u"],
    &["COPY", "{3}u", "{0}c"],
    &["COPY", "{3}u", "{0}c"],
    &["COPY", "{3}u", "{0}c", "REPLACE"],
    &["GET", "{0}c"],
    &["MSETNX", "{0}m", "1", "{1}m", "2"],
    &["MSETNX", "{1}m", "3", "{2}m", "4"],
    &["MGET", "{0}m", "{1}m", "{2}m"],
    &["SET", "{0}b", "abc"],
    &["SET", "{1}b", "zzz"],
    &["BITOP", "AND", "{2}bd", "{0}b", "{1}b"],
    &["GET", "{2}bd"],
    &["BITOP", "NOT", "{3}bn", "{1}b"],
    &["GET", "{3}bn"],
    // Sets.
    &["SADD", "{0}x", "a", "b", "c"],
    &["SADD", "{1}y", "b", "c", "d"],
    &["SMOVE", "{0}x", "{1}y", "a"],
    &["SMOVE", "{0}x", "{1}y", "nope"],
    &["SORT", "{0}x", "ALPHA"],
    &["SCARD", "{1}y"],
    &["SINTERCARD", "2", "{0}x", "{1}y"],
    &["SINTERSTORE", "{2}si", "{0}x", "{1}y"],
    &["SCARD", "{2}si"],
    &["SUNIONSTORE", "{3}su", "{0}x", "{1}y"],
    &["SCARD", "{3}su"],
    &["SDIFFSTORE", "{2}sd", "{1}y", "{0}x"],
    &["SISMEMBER", "{2}sd", "a"],
    &["SDIFFSTORE", "{2}sd", "{0}x", "{1}y"],
    &["EXISTS", "{2}sd"],
    // Lists.
    &["RPUSH", "{0}l", "1", "2", "3"],
    &["LMOVE", "{0}l", "{1}l", "LEFT", "RIGHT"],
    &["RPOPLPUSH", "{0}l", "{1}l"],
    &["LRANGE", "{1}l", "0", "-1"],
    &["LMPOP", "2", "{2}none", "{1}l", "RIGHT", "COUNT", "5"],
    &["EXISTS", "{1}l"],
    // Sorted sets.
    &["ZADD", "{0}z", "1", "a", "2", "b", "3", "c"],
    &["ZADD", "{1}z", "10", "b", "20", "d"],
    &[
        "ZUNIONSTORE",
        "{2}zu",
        "2",
        "{0}z",
        "{1}z",
        "WEIGHTS",
        "1",
        "2",
    ],
    &["ZRANGE", "{2}zu", "0", "-1", "WITHSCORES"],
    &["ZINTERSTORE", "{3}zi", "2", "{0}z", "{1}z"],
    &["ZRANGE", "{3}zi", "0", "-1", "WITHSCORES"],
    &["ZDIFFSTORE", "{2}zd", "2", "{0}z", "{1}z"],
    &["ZRANGE", "{2}zd", "0", "-1"],
    &["ZINTERCARD", "2", "{0}z", "{1}z"],
    &["ZRANGESTORE", "{3}zr", "{0}z", "0", "1"],
    &["ZRANGE", "{3}zr", "0", "-1"],
    &["ZMPOP", "2", "{3}none", "{0}z", "MAX", "COUNT", "2"],
    &["ZCARD", "{0}z"],
    // HyperLogLog and geo.
    &["PFADD", "{0}h", "a", "b", "c"],
    &["PFADD", "{1}h", "c", "d"],
    &["PFCOUNT", "{0}h", "{1}h"],
    &["PFMERGE", "{2}hm", "{0}h", "{1}h"],
    &["PFCOUNT", "{2}hm"],
    &[
        "GEOADD",
        "{0}g",
        "13.361389",
        "38.115556",
        "Palermo",
        "15.087269",
        "37.502669",
        "Catania",
    ],
    &[
        "GEOSEARCHSTORE",
        "{1}gs",
        "{0}g",
        "FROMLONLAT",
        "15",
        "37",
        "BYRADIUS",
        "200",
        "km",
        "ASC",
    ],
    &["ZRANGE", "{1}gs", "0", "-1"],
    // SORT … STORE.
    &["RPUSH", "{0}so", "3", "1", "2"],
    &["SORT", "{0}so", "STORE", "{1}sorted"],
    &["LRANGE", "{1}sorted", "0", "-1"],
    // A script moving a value between keys on two engines.
    &["SET", "{0}from", "payload"],
    &[
        "EVAL",
        "local v = redis.call('GET', KEYS[1]); redis.call('DEL', KEYS[1]); \
         redis.call('SET', KEYS[2], v); return {v, redis.call('EXISTS', KEYS[1])}",
        "2",
        "{0}from",
        "{1}to",
    ],
    &["GET", "{1}to"],
    &["EXISTS", "{0}from"],
    // A script's error inside a gathered run is its reply; what it wrote before stays.
    &[
        "EVAL",
        "redis.call('SET', KEYS[1], 'w'); return redis.call('INCR', KEYS[2])",
        "2",
        "{2}e",
        "{1}to",
    ],
    &["GET", "{2}e"],
    // Scripts touching keys they did not declare, on other engines, before writing
    // (job-queue libraries build key names inside their scripts): run again gathered.
    &["SET", "{1}undeclared", "42"],
    &[
        "EVAL",
        "local v = redis.call('GET', ARGV[1]); redis.call('SET', KEYS[1], v); \
         redis.call('DEL', ARGV[1]); return {v, redis.call('EXISTS', ARGV[1])}",
        "1",
        "{0}declared",
        "{1}undeclared",
    ],
    &["GET", "{0}declared"],
    &["EXISTS", "{1}undeclared"],
    &[
        "EVAL",
        "local n = redis.call('EXISTS', ARGV[2]) + redis.call('EXISTS', ARGV[3]); \
         return {n, redis.call('INCR', ARGV[1]), redis.call('INCR', ARGV[2]), \
         redis.call('INCR', ARGV[3])}",
        "0",
        "{0}n",
        "{1}n",
        "{2}n",
    ],
    &["MGET", "{0}n", "{1}n", "{2}n"],
    // A script whose declared keys span engines and that reads an undeclared key of a third
    // (or the first) engine: its gathered run asks for the key and runs again (the client
    // got the internal `-TXNEEDKEY` before).
    &["SET", "{2}late", "found"],
    &[
        "EVAL",
        "return {redis.call('GET', ARGV[1]), redis.call('GET', KEYS[1]), \
         redis.call('INCR', KEYS[2])}",
        "2",
        "{0}n",
        "{1}n",
        "{2}late",
    ],
    // SORT's BY and GET patterns name keys of any engine (here the weights and hashes hash
    // wherever their names put them), one Redis's replies; STORE to another engine too.
    &["RPUSH", "{0}sl", "3", "1", "2", "4"],
    &["MSET", "sw_1", "30", "sw_2", "20", "sw_3", "10"],
    &["HSET", "sh_1", "f", "a"],
    &["HSET", "sh_2", "f", "b"],
    &["HSET", "sh_3", "f", "c"],
    &["SORT", "{0}sl", "BY", "sw_*"],
    &["SORT", "{0}sl", "BY", "sw_*", "GET", "sh_*->f", "GET", "#"],
    &["SORT", "{0}sl", "GET", "sh_*->f", "DESC"],
    &["SORT_RO", "{0}sl", "BY", "nosort", "GET", "sw_*"],
    &["SORT", "{0}sl", "BY", "sh_*->f", "ALPHA", "LIMIT", "1", "2"],
    &[
        "SORT", "{0}sl", "BY", "sw_*", "DESC", "GET", "sh_*->f", "STORE", "{1}sdst",
    ],
    &["LRANGE", "{1}sdst", "0", "-1"],
    &[
        "SORT", "{0}sl", "BY", "sw_*", "GET", "#", "STORE", "{0}sdst",
    ],
    &["LRANGE", "{0}sdst", "0", "-1"],
    // In a script, before it writes: the script runs again gathered with the keys.
    &[
        "EVAL",
        "return redis.call('SORT', KEYS[1], 'BY', 'sw_*', 'GET', 'sh_*->f')",
        "1",
        "{0}sl",
    ],
    &["SET", "sw_2", "heavy"],
    &["SORT", "{0}sl", "BY", "sw_*"],
    &["SORT", "{0}sl", "BY", "sw_*", "ALPHA"],
    // Errors are the commands' own.
    &["SET", "{0}str", "x"],
    &["SMOVE", "{0}str", "{1}y", "b"],
    &["RENAME", "{2}missing", "{3}whatever"],
    &["SINTERSTORE", "{1}y", "{0}str", "{1}y"],
    &["SCARD", "{1}y"],
];

/// Replaces `{i}` with a key of engine `i % n`, the same name on the reference server.
fn expand(step: &[&str], n: u32) -> Vec<String> {
    step.iter()
        .map(|arg| {
            if arg.starts_with('{') && arg.len() > 3 && arg.as_bytes()[2] == b'}' {
                let owner = u32::from(arg.as_bytes()[1] - b'0') % n;
                key_on(owner, n, &format!("k{}:{}:", &arg[1..2], &arg[3..]))
            } else {
                arg.to_string()
            }
        })
        .collect()
}

fn differential(engines: u32) {
    let fleet = Fleet::start(&format!("gather{engines}"), engines as usize);
    let redis_port = free_port();
    let _redis = start_redis(redis_port);
    let mut proxy = Resp::connect(fleet.proxy_port);
    let mut reference = Resp::connect(redis_port);
    let mut spread = 0;
    for step in STEPS {
        let args = expand(step, engines);
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let want = reference.cmd_str(&argv);
        let got = proxy.cmd_str(&argv);
        assert_eq!(
            text(&got),
            text(&want),
            "{engines} engines: {argv:?}: proxy vs redis-server"
        );
        let owners: std::collections::BTreeSet<u32> = step
            .iter()
            .filter(|a| a.starts_with('{'))
            .map(|a| u32::from(a.as_bytes()[1] - b'0') % engines)
            .collect();
        spread += usize::from(owners.len() > 1);
    }
    assert!(spread > 30, "most steps must span engines ({spread})");
    // Every key lives on its own engine only: no guest was left behind.
    for (i, &port) in fleet.engine_ports.iter().enumerate() {
        let mut e = Resp::connect(port);
        let mut cursor = "0".to_string();
        for _ in 0..1000 {
            let reply = e.cmd_str(&["SCAN", &cursor, "COUNT", "1000"]);
            let v = common::parse_value(&reply);
            let items = v.array().unwrap();
            cursor = items[0].str().unwrap();
            for k in items[1].array().unwrap() {
                let k = k.str().unwrap();
                assert_eq!(
                    instance_for_key(k.as_bytes(), engines),
                    i as u32,
                    "key {k} found on engine {i}"
                );
            }
            if cursor == "0" {
                break;
            }
        }
    }
    // The same keyspace as redis-server: DBSIZE and every key's type.
    assert_eq!(
        text(&proxy.cmd_str(&["DBSIZE"])),
        text(&reference.cmd_str(&["DBSIZE"]))
    );
}

#[test]
fn multi_key_commands_over_two_engines_answer_as_redis() {
    differential(2);
}

#[test]
fn multi_key_commands_over_four_engines_answer_as_redis() {
    differential(4);
}

/// A transaction holding a command that spans engines runs gathered, as a whole; WATCH still
/// aborts it; DISCARD drops it.
#[test]
fn a_transaction_with_a_spanning_command_runs_as_one() {
    let fleet = Fleet::start("gathermulti", 2);
    let mut c = Resp::connect(fleet.proxy_port);
    let mut other = Resp::connect(fleet.proxy_port);
    let (a, b) = (key_on(0, 2, "ga"), key_on(1, 2, "gb"));
    assert_eq!(c.cmd_str(&["SET", &a, "1"]), b"+OK\r\n");
    assert_eq!(c.cmd_str(&["MULTI"]), b"+OK\r\n");
    assert_eq!(c.cmd_str(&["INCR", &a]), b"+QUEUED\r\n");
    assert_eq!(c.cmd_str(&["RENAME", &a, &b]), b"+QUEUED\r\n");
    assert_eq!(c.cmd_str(&["INCR", &b]), b"+QUEUED\r\n");
    assert_eq!(c.cmd_str(&["MGET", &a, &b]), b"+QUEUED\r\n");
    assert_eq!(
        c.cmd_str(&["EXEC"]),
        b"*4\r\n:2\r\n+OK\r\n:3\r\n*2\r\n$-1\r\n$1\r\n3\r\n"
    );
    // WATCH of a key on the other engine, changed by another client: nothing runs.
    assert_eq!(c.cmd_str(&["WATCH", &a]), b"+OK\r\n");
    assert_eq!(other.cmd_str(&["SET", &a, "changed"]), b"+OK\r\n");
    assert_eq!(c.cmd_str(&["MULTI"]), b"+OK\r\n");
    assert_eq!(c.cmd_str(&["RENAME", &b, &a]), b"+QUEUED\r\n");
    assert_eq!(c.cmd_str(&["EXEC"]), b"*-1\r\n");
    assert_eq!(c.cmd_str(&["GET", &a]), b"$7\r\nchanged\r\n");
    assert_eq!(c.cmd_str(&["GET", &b]), b"$1\r\n3\r\n");
    // Untouched: it runs.
    assert_eq!(c.cmd_str(&["WATCH", &a, &b]), b"+OK\r\n");
    assert_eq!(c.cmd_str(&["MULTI"]), b"+OK\r\n");
    assert_eq!(c.cmd_str(&["RENAME", &b, &a]), b"+QUEUED\r\n");
    assert_eq!(c.cmd_str(&["EXEC"]), b"*1\r\n+OK\r\n");
    assert_eq!(c.cmd_str(&["MGET", &a, &b]), b"*2\r\n$1\r\n3\r\n$-1\r\n");
    // DISCARD.
    assert_eq!(c.cmd_str(&["MULTI"]), b"+OK\r\n");
    assert_eq!(c.cmd_str(&["RENAME", &a, &b]), b"+QUEUED\r\n");
    assert_eq!(c.cmd_str(&["DISCARD"]), b"+OK\r\n");
    assert_eq!(c.cmd_str(&["MGET", &a, &b]), b"*2\r\n$1\r\n3\r\n$-1\r\n");
    // RESP3: the same transaction's reply in the client's protocol.
    let mut r3 = Resp::connect(fleet.proxy_port);
    assert!(r3.cmd_str(&["HELLO", "3"]).starts_with(b"%"));
    assert_eq!(r3.cmd_str(&["MULTI"]), b"+OK\r\n");
    assert_eq!(r3.cmd_str(&["SADD", &b, "m"]), b"+QUEUED\r\n");
    assert_eq!(r3.cmd_str(&["SUNION", &a, &b]), b"+QUEUED\r\n");
    assert_eq!(r3.cmd_str(&["SMEMBERS", &b]), b"+QUEUED\r\n");
    let reply = r3.cmd_str(&["EXEC"]);
    assert!(
        reply.starts_with(b"*3\r\n:1\r\n-WRONGTYPE"),
        "{}",
        text(&reply)
    );
    assert!(reply.ends_with(b"~1\r\n$1\r\nm\r\n"), "{}", text(&reply));
}

/// Isolation: two sets on two engines share 20 members; movers SMOVE members between them,
/// readers sum both cardinalities inside MULTI and with a gathered SUNION. No reader ever sees
/// a member in both sets or in neither.
#[test]
fn members_moved_between_engines_are_never_seen_twice_or_lost() {
    let fleet = Fleet::start("gatheriso", 2);
    let (a, b) = (key_on(0, 2, "iso-a"), key_on(1, 2, "iso-b"));
    let mut setup = Resp::connect(fleet.proxy_port);
    let members: Vec<String> = (0..20).map(|i| format!("m{i}")).collect();
    let mut args = vec!["SADD", &a];
    args.extend(members[..10].iter().map(String::as_str));
    setup.cmd_str(&args);
    let mut args = vec!["SADD", &b];
    args.extend(members[10..].iter().map(String::as_str));
    setup.cmd_str(&args);
    let stop = Arc::new(AtomicBool::new(false));
    let moves = Arc::new(AtomicU64::new(0));
    let reads = Arc::new(AtomicU64::new(0));
    let mut threads = Vec::new();
    for t in 0..3 {
        let (stop, moves, a, b) = (stop.clone(), moves.clone(), a.clone(), b.clone());
        let port = fleet.proxy_port;
        threads.push(thread::spawn(move || {
            let mut c = Resp::connect(port);
            let mut i = t;
            while !stop.load(Ordering::Relaxed) {
                i = (i * 7 + 3) % 20;
                let m = format!("m{i}");
                let (from, to) = if i % 2 == 0 { (&a, &b) } else { (&b, &a) };
                let r = c.cmd_str(&["SMOVE", from, to, &m]);
                assert!(r == b":1\r\n" || r == b":0\r\n", "{}", text(&r));
                moves.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for _ in 0..2 {
        let (stop, reads, a, b) = (stop.clone(), reads.clone(), a.clone(), b.clone());
        let port = fleet.proxy_port;
        threads.push(thread::spawn(move || {
            let mut c = Resp::connect(port);
            while !stop.load(Ordering::Relaxed) {
                c.cmd_str(&["MULTI"]);
                c.cmd_str(&["SCARD", &a]);
                c.cmd_str(&["SCARD", &b]);
                let r = c.cmd_str(&["EXEC"]);
                let v = common::parse_value(&r);
                let items = v.array().expect("EXEC array");
                let sum: i64 = items
                    .iter()
                    .map(|x| match x {
                        common::Value::Int(n) => *n,
                        other => panic!("{other:?}"),
                    })
                    .sum();
                assert_eq!(sum, 20, "MULTI SCARD+SCARD saw {}", text(&r));
                let u = c.cmd_str(&["SUNION", &a, &b]);
                let v = common::parse_value(&u);
                assert_eq!(v.array().unwrap().len(), 20, "SUNION saw {}", text(&u));
                let i = c.cmd_str(&["SINTERCARD", "2", &a, &b]);
                assert_eq!(i, b":0\r\n", "a member in both sets");
                reads.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(3) {
        thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("a client thread failed");
    }
    assert!(moves.load(Ordering::Relaxed) > 50, "too few moves");
    assert!(reads.load(Ordering::Relaxed) > 20, "too few reads");
    let mut c = Resp::connect(fleet.proxy_port);
    let r = c.cmd_str(&["SUNION", &a, &b]);
    assert_eq!(common::parse_value(&r).array().unwrap().len(), 20);
}

/// A script that touches an undeclared key of another engine only after writing gets Redis
/// Cluster's error (it cannot be run again: its first write is done), and its write stays,
/// as on a cluster node (docs/transactions.md, "Limits").
#[test]
fn a_script_touching_an_undeclared_key_after_a_write_gets_redis_clusters_error() {
    let fleet = Fleet::start("gatherlate", 2);
    let mut c = Resp::connect(fleet.proxy_port);
    let (a, b) = (key_on(0, 2, "late-a"), key_on(1, 2, "late-b"));
    let reply = c.cmd_str(&[
        "EVAL",
        "redis.call('SET', KEYS[1], 'w'); return redis.call('GET', ARGV[1])",
        "1",
        &a,
        &b,
    ]);
    assert!(
        reply.starts_with(
            b"-ERR Script attempted to access a non local key in a cluster node script: "
        ),
        "{}",
        text(&reply)
    );
    assert_eq!(c.cmd_str(&["GET", &a]), b"$1\r\nw\r\n");
    // Pipelined scripts that each need another engine's key all get their replies, in order.
    let sha = c.cmd_str(&["SCRIPT", "LOAD", "return redis.call('INCR', ARGV[1])"]);
    let sha = common::parse_value(&sha).str().unwrap();
    let a2 = key_on(0, 2, "late-n");
    let mut batch = Vec::new();
    for k in [&b, &b, &a2, &b] {
        batch.extend(Resp::encode(&[
            b"EVALSHA",
            sha.as_bytes(),
            b"0",
            k.as_bytes(),
        ]));
    }
    c.send_raw(&batch);
    let replies: Vec<Vec<u8>> = (0..4).map(|_| c.read_frame()).collect();
    assert_eq!(
        replies,
        vec![
            b":1\r\n".to_vec(),
            b":2\r\n".to_vec(),
            b":1\r\n".to_vec(),
            b":3\r\n".to_vec()
        ],
        "{:?}",
        replies.iter().map(|r| text(r)).collect::<Vec<_>>()
    );
}

/// Blocking commands whose keys span engines: served at once when a key has data, woken when
/// another client (through the proxy, or straight on an engine) pushes, and their own null at
/// the timeout, in RESP2 and RESP3.
#[test]
fn blocking_commands_over_several_engines_wait_and_wake() {
    let fleet = Fleet::start("gatherblock", 2);
    let mut c = Resp::connect(fleet.proxy_port);
    let (a, b) = (key_on(0, 2, "bl-a"), key_on(1, 2, "bl-b"));
    // Timeout: BLPOP's null array, BLMOVE's null bulk.
    let started = Instant::now();
    assert_eq!(c.cmd_str(&["BLPOP", &a, &b, "0.2"]), b"*-1\r\n");
    assert!(started.elapsed() >= Duration::from_millis(190));
    assert_eq!(
        c.cmd_str(&["BLMOVE", &a, &b, "LEFT", "RIGHT", "0.1"]),
        b"$-1\r\n"
    );
    // Data already there: served at once, from the first non-empty key.
    assert_eq!(c.cmd_str(&["RPUSH", &b, "x"]), b":1\r\n");
    assert_eq!(
        c.cmd_str(&["BLPOP", &a, &b, "1"]),
        format!("*2\r\n${}\r\n{b}\r\n$1\r\nx\r\n", b.len()).into_bytes()
    );
    // Woken by another client through the proxy.
    let port = fleet.proxy_port;
    let b2 = b.clone();
    let pusher = thread::spawn(move || {
        thread::sleep(Duration::from_millis(300));
        Resp::connect(port).cmd_str(&["RPUSH", &b2, "y"]);
    });
    assert_eq!(
        c.cmd_str(&["BLPOP", &a, &b, "5"]),
        format!("*2\r\n${}\r\n{b}\r\n$1\r\ny\r\n", b.len()).into_bytes()
    );
    pusher.join().unwrap();
    // Woken by a client straight on the engine that owns the source; BLMOVE moves across.
    let engine0 = fleet.engine_ports[0];
    let a2 = a.clone();
    let pusher = thread::spawn(move || {
        thread::sleep(Duration::from_millis(300));
        Resp::connect(engine0).cmd_str(&["RPUSH", &a2, "m"]);
    });
    assert_eq!(
        c.cmd_str(&["BLMOVE", &a, &b, "LEFT", "RIGHT", "5"]),
        b"$1\r\nm\r\n"
    );
    pusher.join().unwrap();
    assert_eq!(c.cmd_str(&["LRANGE", &b, "0", "-1"]), b"*1\r\n$1\r\nm\r\n");
    assert_eq!(c.cmd_str(&["EXISTS", &a]), b":0\r\n");
    // Sorted sets, and RESP3's null.
    let (a, b) = (key_on(0, 2, "bz-a"), key_on(1, 2, "bz-b"));
    let mut r3 = Resp::connect(fleet.proxy_port);
    assert!(r3.cmd_str(&["HELLO", "3"]).starts_with(b"%"));
    assert_eq!(r3.cmd_str(&["BZPOPMIN", &a, &b, "0.1"]), b"_\r\n");
    assert_eq!(r3.cmd_str(&["ZADD", &a, "1", "q"]), b":1\r\n");
    assert_eq!(
        r3.cmd_str(&["BZMPOP", "1", "2", &b, &a, "MIN"]),
        format!("*2\r\n${}\r\n{a}\r\n*1\r\n*2\r\n$1\r\nq\r\n,1\r\n", a.len()).into_bytes()
    );
    // A bad timeout is the command's own error.
    assert_eq!(
        c.cmd_str(&["BLPOP", &a, &b, "x"]),
        b"-ERR timeout is not a float or out of range\r\n"
    );
}
