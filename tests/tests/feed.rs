//! The keychange feed of a real `recached server` (docs/feed.md), end to end over TCP.
//!
//! - `effects_rebuild_the_primary`: writes of every type (with TTLs, a woken BLPOP, a
//!   transaction, renames, STORE commands) from one client; the effects a subscriber receives,
//!   applied to a second, standalone `recached server`, rebuild every key's value and TTL.
//!   Two subscribers get the same stream; sequence numbers are contiguous.
//! - `snapshot_is_consistent_under_concurrent_writes`: a writer thread runs while a subscriber
//!   asks for a prefix snapshot; the snapshot plus the effects after its seq, applied to an
//!   in-process `engine_core::Engine` (filtered by prefix, as the fan-out does), equal the
//!   primary's keys under the prefix once the writer stops.
//! - `expiry_is_recorded_as_del`: lazy and active expiry become `DEL` effects.
//! - `other_databases_arrive_tagged`: effects of database 3 arrive as
//!   `["effect-db", seq, "3", …]`, database 0's as plain `effect` frames in the same contiguous
//!   sequence; MOVE and SWAPDB split per database; `FEED SNAPSHOTDB 3` snapshots database 3.
//! - `slow_subscriber_overflows_and_writes_do_not_wait`: with a small `feed-buffer-limit`, a
//!   subscriber that stops reading does not slow a large write burst; when it reads again it
//!   finds `["overflow", seq]` and then effects from `seq + 1`.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::*;

type Frame = Vec<Vec<u8>>;

/// A feed frame (array or push of bulk strings) as its parts.
fn frame_parts(raw: &[u8]) -> Frame {
    match parse_value(raw) {
        Value::Array(v) => v
            .into_iter()
            .map(|x| match x {
                Value::Bulk(b) => b,
                other => panic!("frame element {other:?} in {}", escape(raw)),
            })
            .collect(),
        other => panic!("not a feed frame: {other:?}"),
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn num(b: &[u8]) -> u64 {
    text(b).parse().expect("decimal seq")
}

/// Subscribes on a new connection: (connection, run_id, seq).
fn subscribe(port: u16) -> (Resp, String, u64) {
    let mut c = Resp::connect(port);
    let f = frame_parts(&c.cmd_str(&["FEED", "SUBSCRIBE"]));
    assert_eq!(f[0], b"subscribed");
    assert_eq!(f[1].len(), 40, "run_id");
    (c, text(&f[1]), num(&f[2]))
}

/// Reads effects until one equals `until` (argv), checking contiguity from `seq`.
fn read_effects_until(c: &mut Resp, seq: &mut u64, until: &[&str]) -> Vec<Frame> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut v = Vec::new();
    loop {
        assert!(Instant::now() < deadline, "no {until:?} effect within 30 s");
        let f = frame_parts(&c.read_frame());
        assert_eq!(f[0], b"effect", "{f:?}");
        let s = num(&f[1]);
        assert_eq!(s, *seq + 1, "contiguous sequence numbers");
        *seq = s;
        let args = f[2..].to_vec();
        let done =
            args.len() == until.len() && args.iter().zip(until).all(|(a, u)| a == u.as_bytes());
        v.push(args);
        if done {
            return v;
        }
    }
}

/// Sends every command pipelined and returns the replies (raw frames).
fn pipeline(c: &mut Resp, cmds: &[Vec<Vec<u8>>]) -> Vec<Vec<u8>> {
    for chunk in cmds.chunks(200) {
        let mut buf = Vec::new();
        for a in chunk {
            let refs: Vec<&[u8]> = a.iter().map(Vec::as_slice).collect();
            buf.extend_from_slice(&Resp::encode(&refs));
        }
        c.send_raw(&buf);
    }
    (0..cmds.len()).map(|_| c.read_frame()).collect()
}

fn words(line: &str) -> Vec<Vec<u8>> {
    line.split(' ').map(|w| w.as_bytes().to_vec()).collect()
}

/// `key → (type, pexpiretime, canonical content)` for every key (optionally under `prefix`).
fn dump(port: u16, prefix: &str) -> BTreeMap<String, (String, i64, Vec<String>)> {
    let mut c = Resp::connect(port);
    let keys = parse_value(&c.cmd_str(&["KEYS", &format!("{prefix}*")]));
    let mut m = BTreeMap::new();
    for k in keys.array().unwrap() {
        let k = k.str().unwrap();
        let t = parse_value(&c.cmd_str(&["TYPE", &k])).str().unwrap();
        let Value::Int(ttl) = parse_value(&c.cmd_str(&["PEXPIRETIME", &k])) else {
            panic!()
        };
        let flat = |v: Value| -> Vec<String> {
            match v {
                Value::Array(a) => a.iter().map(|x| x.str().unwrap_or_default()).collect(),
                other => vec![other.str().unwrap_or_default()],
            }
        };
        let mut content = match t.as_str() {
            "string" => flat(parse_value(&c.cmd_str(&["GET", &k]))),
            "list" => flat(parse_value(&c.cmd_str(&["LRANGE", &k, "0", "-1"]))),
            "hash" => flat(parse_value(&c.cmd_str(&["HGETALL", &k])))
                .chunks(2)
                .map(|p| format!("{}={}", p[0], p[1]))
                .collect(),
            "set" => flat(parse_value(&c.cmd_str(&["SMEMBERS", &k]))),
            "zset" => flat(parse_value(&c.cmd_str(&[
                "ZRANGE",
                &k,
                "0",
                "-1",
                "WITHSCORES",
            ]))),
            "none" => continue,
            other => panic!("type {other}"),
        };
        if t == "hash" || t == "set" {
            content.sort();
        }
        m.insert(k, (t, ttl, content));
    }
    m
}

/// The writes of `effects_rebuild_the_primary`: every type, relative and absolute TTLs
/// (long, so nothing expires while the test compares), random and float commands.
const WRITES: &[&str] = &[
    "SET s:plain hello",
    "SET s:ex v EX 1000",
    "SET s:px v PX 900000 GET",
    "SET s:nx v NX",
    "SET s:nx other NX",
    "SETEX s:setex 1000 v",
    "PSETEX s:psetex 900000 v",
    "SET s:getex v",
    "GETEX s:getex EX 1000",
    "MSET s:m1 1 s:m2 2 s:m3 3",
    "INCR s:m1",
    "INCRBY s:m2 40",
    "DECR s:m3",
    "INCRBYFLOAT s:float 3.0e2",
    "INCRBYFLOAT s:float 0.1",
    "APPEND s:plain !",
    "SETRANGE s:plain 1 E",
    "GETDEL s:m3",
    "EXPIRE s:plain 1000",
    "PEXPIREAT s:m1 4102444800000",
    "PERSIST s:plain",
    "SET s:gone v",
    "DEL s:gone s:never",
    "RPUSH l:a 1 2 3 4 5 6",
    "LPUSH l:a 0",
    "LPOP l:a",
    "RPOP l:a 2",
    "LSET l:a 0 one",
    "LINSERT l:a AFTER one x",
    "LREM l:a 1 x",
    "LMOVE l:a l:b LEFT RIGHT",
    "RPOPLPUSH l:a l:b",
    "LMPOP 2 l:none l:a RIGHT COUNT 1",
    "LTRIM l:b 0 5",
    "HSET h:a f1 v1 f2 v2 f3 v3",
    "HDEL h:a f2",
    "HINCRBY h:a n 5",
    "HINCRBYFLOAT h:a fl 1.5",
    "HINCRBYFLOAT h:a fl 0.25",
    "HSETNX h:a f1 no",
    "EXPIRE h:a 2000",
    "SADD t:a m1 m2 m3 m4 m5 m6 m7 m8",
    "SREM t:a m8",
    "SPOP t:a",
    "SPOP t:a 2",
    // SPOP above picks members at random (the hash seed is random per process), so t:b gets a
    // member of its own: the RENAME below must find it whatever SPOP took.
    "SADD t:b base",
    "SMOVE t:a t:b m1",
    "SMOVE t:a t:b m2",
    "SADD t:c m3 m4 m5 zz",
    "SINTERSTORE t:inter t:a t:c",
    "SUNIONSTORE t:union t:a t:b t:c",
    "SRANDMEMBER t:a 2",
    "ZADD z:a 1 a 2 b 3 c 4 d 5 e 6 f",
    "ZADD z:a INCR 0.5 a",
    "ZINCRBY z:a -2 f",
    "ZREM z:a e",
    "ZPOPMIN z:a",
    "ZPOPMAX z:a",
    "ZMPOP 1 z:a MIN COUNT 1",
    "ZADD z:b -inf lo inf hi 1e-3 tiny",
    "ZUNIONSTORE z:u 2 z:a z:b WEIGHTS 2 1",
    "ZRANGESTORE z:r z:u 0 1",
    "GEOADD z:g 13.361389 38.115556 Palermo 15.087269 37.502669 Catania",
    "GEOADD z:g XX CH 13.5 38.2 Palermo",
    "GEOSEARCHSTORE z:gs z:g FROMLONLAT 15 37 BYRADIUS 200 km STOREDIST",
    "GEORADIUS z:g 15 37 200 km STORE z:gr",
    "ZREMRANGEBYSCORE z:u 100 200",
    "PEXPIRE z:b 5000000",
    "COPY z:b z:copy",
    "RENAME t:b t:renamed",
    "RENAMENX s:m2 s:m2new",
    "MULTI",
    "INCR s:tx",
    "SADD t:tx a",
    "EXPIRE t:tx 3000",
    "EXEC",
];

#[test]
fn effects_rebuild_the_primary() {
    let port = free_port();
    let _primary = start_engine(port);
    let rport = free_port();
    let _replica = start_engine(rport);

    // Something to flush first: the replica must end empty of it too.
    let mut w = Resp::connect(port);
    w.cmd_str(&["SET", "before", "x"]);
    let (mut sub, run_id, mut seq) = subscribe(port);
    let (mut sub2, run_id2, mut seq2) = subscribe(port);
    assert_eq!(run_id, run_id2);
    assert_eq!(seq, seq2);
    let mut rep = Resp::connect(rport);
    rep.cmd_str(&["SET", "before", "x"]);
    w.cmd_str(&["FLUSHALL"]);

    // A blocked client woken by a push.
    let mut blocker = Resp::connect(port);
    blocker.send_raw(&Resp::encode(&[b"BLPOP", b"l:wait", b"0"]));
    std::thread::sleep(Duration::from_millis(100));
    for line in WRITES {
        let r = w.cmd(&words(line).iter().map(Vec::as_slice).collect::<Vec<_>>());
        assert!(!r.starts_with(b"-"), "{line}: {}", escape(&r));
    }
    w.cmd_str(&["RPUSH", "l:wait", "w1", "w2"]);
    let popped = parse_value(&blocker.read_frame());
    assert_eq!(popped.array().unwrap()[1].str().unwrap(), "w1");
    w.cmd_str(&["SET", "done", "1"]);

    let effects = read_effects_until(&mut sub, &mut seq, &["SET", "done", "1"]);
    let effects2 = read_effects_until(&mut sub2, &mut seq2, &["SET", "done", "1"]);
    assert_eq!(effects, effects2, "every subscriber gets the same stream");
    let shown: Vec<String> = effects
        .iter()
        .map(|a| a.iter().map(|x| text(x)).collect::<Vec<_>>().join(" "))
        .collect();
    // A few rewrites, as seen on the wire.
    assert_eq!(shown[0], "FLUSHALL");
    for (needle, why) in [
        ("SET s:ex v PXAT ", "relative expiry becomes absolute"),
        ("SET s:float 300", "INCRBYFLOAT becomes SET"),
        ("SREM t:a ", "SPOP becomes SREM"),
        ("HSET h:a fl 1.75", "HINCRBYFLOAT becomes HSET"),
        ("LPOP l:wait", "the woken BLPOP"),
    ] {
        assert!(
            shown.iter().any(|s| s.starts_with(needle)),
            "{why}: no {needle:?} in {shown:#?}"
        );
    }
    assert!(
        !shown.iter().any(|s| s.starts_with("SET s:nx other")),
        "no-op SET NX"
    );
    assert!(
        !shown.iter().any(|s| s.contains("s:never")),
        "DEL of a missing key"
    );
    assert!(
        !shown.iter().any(|s| s.starts_with("SRANDMEMBER")),
        "reads record nothing"
    );

    // Apply to the standalone replica: every effect succeeds, and the keyspaces match.
    let replies = pipeline(&mut rep, &effects);
    for (e, r) in shown.iter().zip(&replies) {
        assert!(
            !r.starts_with(b"-"),
            "effect {e} failed on the replica: {}",
            escape(r)
        );
    }
    let want = dump(port, "");
    assert!(want.len() > 25, "{} keys", want.len());
    assert_eq!(dump(rport, ""), want);

    // One subscriber leaves; the other keeps receiving.
    drop(sub2);
    std::thread::sleep(Duration::from_millis(50));
    w.cmd_str(&["SET", "after", "1"]);
    read_effects_until(&mut sub, &mut seq, &["SET", "after", "1"]);
    // Feed mode: only FEED, PING and QUIT.
    let r = parse_value(&sub.cmd_str(&["GET", "x"]));
    assert!(matches!(r, Value::Error(e) if e.contains("feed connection")));
}

/// RESTORE (relative and absolute TTL, REPLACE, IDLETIME) and MIGRATE (moving and COPY)
/// reach the feed as effects a replica applies to end identical: the recreate rule for a
/// restored key, `DEL` for a migrated one.
#[test]
fn restore_and_migrate_rebuild_the_primary() {
    let (port, rport, tport) = (free_port(), free_port(), free_port());
    let _primary = start_engine(port);
    let _replica = start_engine(rport);
    let _target = start_engine(tport);
    let mut w = Resp::connect(port);
    for line in [
        "SET src:s hello",
        "RPUSH src:l a b 1 2",
        "HSET src:h f v n 12",
        "SADD src:set 1 2 3",
        "SADD src:set2 a b c",
        "ZADD src:z 1.5 a 2 b",
        "SET keep old",
    ] {
        w.cmd(&words(line).iter().map(Vec::as_slice).collect::<Vec<_>>());
    }
    let payloads: Vec<(String, Vec<u8>)> =
        ["src:s", "src:l", "src:h", "src:set", "src:set2", "src:z"]
            .iter()
            .map(|k| {
                let Value::Bulk(p) = parse_value(&w.cmd_str(&["DUMP", k])) else {
                    panic!("DUMP {k}")
                };
                (k.replace("src:", "r:"), p)
            })
            .collect();
    let (mut sub, _, mut seq) = subscribe(port);
    let mut rep = Resp::connect(rport);
    let ok = b"+OK\r\n".to_vec();
    let far = (unix_us() / 1000 + 3_600_000).to_string();
    for (i, (k, p)) in payloads.iter().enumerate() {
        let r = match i % 3 {
            0 => w.cmd(&[b"RESTORE", k.as_bytes(), b"100000", p]),
            1 => w.cmd(&[b"RESTORE", k.as_bytes(), far.as_bytes(), p, b"ABSTTL"]),
            _ => w.cmd(&[b"RESTORE", k.as_bytes(), b"0", p, b"IDLETIME", b"10"]),
        };
        assert_eq!(r, ok, "RESTORE {k}");
    }
    assert_eq!(
        w.cmd(&[b"RESTORE", b"keep", b"0", &payloads[1].1, b"REPLACE"]),
        ok
    );
    let tp = tport.to_string();
    assert_eq!(
        w.cmd_str(&["MIGRATE", "127.0.0.1", &tp, "src:s", "0", "5000"]),
        ok
    );
    assert_eq!(
        w.cmd_str(&[
            "MIGRATE",
            "127.0.0.1",
            &tp,
            "",
            "0",
            "5000",
            "COPY",
            "KEYS",
            "src:l",
            "src:h"
        ]),
        ok
    );
    assert_eq!(
        w.cmd_str(&[
            "MIGRATE",
            "127.0.0.1",
            &tp,
            "",
            "0",
            "5000",
            "KEYS",
            "src:set",
            "src:z"
        ]),
        ok
    );
    w.cmd_str(&["SET", "done", "1"]);
    let effects = read_effects_until(&mut sub, &mut seq, &["SET", "done", "1"]);
    // The replica starts from what the primary had when the feed began.
    for line in [
        "SET src:s hello",
        "RPUSH src:l a b 1 2",
        "HSET src:h f v n 12",
        "SADD src:set 1 2 3",
        "SADD src:set2 a b c",
        "ZADD src:z 1.5 a 2 b",
        "SET keep old",
    ] {
        rep.cmd(&words(line).iter().map(Vec::as_slice).collect::<Vec<_>>());
    }
    for (e, r) in effects.iter().zip(pipeline(&mut rep, &effects)) {
        assert!(!r.starts_with(b"-"), "effect {e:?} failed: {}", escape(&r));
    }
    let want = dump(port, "");
    assert!(
        want.contains_key("r:z") && !want.contains_key("src:s"),
        "{want:?}"
    );
    assert_eq!(dump(rport, ""), want);
}

/// Applies feed frames to an in-process replica engine, keeping only keys under `prefix`.
struct Replica {
    engine: engine_core::Engine,
    client: engine_core::Client,
}

impl Replica {
    fn new() -> Replica {
        Replica {
            engine: engine_core::Engine::new(engine_core::Config::default()),
            client: engine_core::Client::default(),
        }
    }

    fn apply(&mut self, argv: &[Vec<u8>]) {
        let refs: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
        let mut out = Vec::new();
        // Clock 0: the replica never expires keys itself (docs/feed.md).
        self.engine.exec(&mut self.client, &refs, 0, &mut out);
        assert!(!out.starts_with(b"-"), "{:?}: {}", refs, escape(&out));
    }

    /// Same shape as [`dump`], read at `now_us`.
    fn dump(&mut self, now_us: u64) -> BTreeMap<String, (String, i64, Vec<String>)> {
        let mut run = |args: &[&str]| {
            let argv: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
            let mut out = Vec::new();
            self.engine.exec(&mut self.client, &argv, now_us, &mut out);
            parse_value(&out)
        };
        let keys = run(&["KEYS", "*"]);
        let mut m = BTreeMap::new();
        for k in keys.array().unwrap() {
            let k = k.str().unwrap();
            let t = run(&["TYPE", &k]).str().unwrap();
            let Value::Int(ttl) = run(&["PEXPIRETIME", &k]) else {
                panic!()
            };
            let flat = |v: Value| -> Vec<String> {
                match v {
                    Value::Array(a) => a.iter().map(|x| x.str().unwrap_or_default()).collect(),
                    other => vec![other.str().unwrap_or_default()],
                }
            };
            let mut content = match t.as_str() {
                "string" => flat(run(&["GET", &k])),
                "list" => flat(run(&["LRANGE", &k, "0", "-1"])),
                "hash" => flat(run(&["HGETALL", &k]))
                    .chunks(2)
                    .map(|p| format!("{}={}", p[0], p[1]))
                    .collect(),
                "set" => flat(run(&["SMEMBERS", &k])),
                "zset" => flat(run(&["ZRANGE", &k, "0", "-1", "WITHSCORES"])),
                _ => continue,
            };
            if t == "hash" || t == "set" {
                content.sort();
            }
            m.insert(k, (t, ttl, content));
        }
        m
    }
}

fn unix_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

#[test]
fn snapshot_is_consistent_under_concurrent_writes() {
    let port = free_port();
    let _primary = start_engine(port);
    let mut w = Resp::connect(port);
    // Some state before anyone subscribes.
    for i in 0..300 {
        w.cmd_str(&["HSET", &format!("p:h{}", i % 7), &format!("f{i}"), "v"]);
        w.cmd_str(&["SET", &format!("q:other{i}"), "x"]);
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut c = Resp::connect(port);
            let mut i = 0u64;
            let deadline = Instant::now() + Duration::from_secs(20);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && Instant::now() < deadline {
                let k = i % 23;
                let cmds = [
                    format!("INCR p:n{k}"),
                    format!("RPUSH p:l{} {i}", k % 5),
                    format!("SADD p:s{} {}", k % 3, i % 50),
                    format!("ZINCRBY p:z 1.5 m{}", i % 17),
                    format!("SET q:x{k} {i}"),
                    format!("SET p:t{k} {i} EX 100"),
                    format!("SPOP p:s{}", (k + 1) % 3),
                    format!("LPOP p:l{}", (k + 2) % 5),
                    format!("RENAME p:n{k} p:n{}", (k * 7) % 23),
                ];
                let argvs: Vec<Vec<Vec<u8>>> = cmds.iter().map(|l| words(l)).collect();
                pipeline(&mut c, &argvs);
                i += 1;
            }
            i
        })
    };
    std::thread::sleep(Duration::from_millis(150));
    let (mut sub, _, mut seq) = subscribe(port);
    let mut replica = Replica::new();
    let keep = |a: &[Vec<u8>]| a.len() < 2 || a[1].starts_with(b"p:");
    // Effects until the snapshot arrives: included in it (seq ≤ snapshot seq).
    sub.send_raw(&Resp::encode(&[b"FEED", b"SNAPSHOT", b"snap1", b"p:"]));
    let mut before = 0;
    let snap_seq = loop {
        let f = frame_parts(&sub.read_frame());
        if f[0] == b"snapshot" {
            assert_eq!(f[1], b"snap1");
            break num(&f[2]);
        }
        assert_eq!(f[0], b"effect");
        seq = num(&f[1]);
        before += 1;
    };
    assert_eq!(
        snap_seq, seq,
        "the snapshot is taken right after the last effect sent"
    );
    let mut entries = 0;
    loop {
        let f = frame_parts(&sub.read_frame());
        if f[0] == b"snapshot-end" {
            assert_eq!(num(&f[2]), snap_seq);
            break;
        }
        assert_eq!(f[0], b"entry", "no effect inside a snapshot");
        assert!(f[3].starts_with(b"p:"), "only keys under the prefix");
        replica.apply(&f[2..]);
        entries += 1;
    }
    assert!(entries > 10, "{entries} entries");
    // Effects after the snapshot, while the writer keeps going.
    std::thread::sleep(Duration::from_millis(400));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let rounds = writer.join().unwrap();
    assert!(rounds > 10, "the writer ran {rounds} rounds");
    w.cmd_str(&["SET", "p:done", "1"]);
    let after = read_effects_until(&mut sub, &mut seq, &["SET", "p:done", "1"]);
    for a in &after {
        if keep(a) {
            replica.apply(a);
        }
    }
    assert!(
        after.len() > 10,
        "{} effects after the snapshot ({before} before)",
        after.len()
    );
    let want = dump(port, "p:");
    assert!(want.len() > 20, "{} keys", want.len());
    assert_eq!(replica.dump(unix_us()), want);
}

#[test]
fn expiry_is_recorded_as_del() {
    let port = free_port();
    let _primary = start_engine(port);
    let mut w = Resp::connect(port);
    let (mut sub, _, mut seq) = subscribe(port);
    for i in 0..20 {
        w.cmd_str(&["SET", &format!("e{i}"), "v", "PX", "50"]);
    }
    w.cmd_str(&["SET", "lazy", "v", "PX", "50"]);
    std::thread::sleep(Duration::from_millis(100));
    // Lazy: a read of the expired key deletes it.
    assert_eq!(parse_value(&w.cmd_str(&["GET", "lazy"])), Value::Null);
    // Active: the expiry cycle (hz 10) reclaims the others by itself.
    std::thread::sleep(Duration::from_millis(800));
    w.cmd_str(&["SET", "mark", "1"]);
    let effects = read_effects_until(&mut sub, &mut seq, &["SET", "mark", "1"]);
    let dels: Vec<String> = effects
        .iter()
        .filter(|a| a[0] == b"DEL")
        .map(|a| text(&a[1]))
        .collect();
    assert!(dels.contains(&"lazy".to_string()), "{effects:?}");
    for i in 0..20 {
        assert!(
            dels.contains(&format!("e{i}")),
            "e{i} expired without a DEL: {dels:?}"
        );
    }
    let pos = |k: &str| {
        effects
            .iter()
            .position(|a| a.len() > 1 && a[1] == k.as_bytes())
    };
    assert!(pos("lazy") < pos("mark"));
}

/// Reads `n` frames: `(db, argv)` for each effect, checking contiguity from `seq`.
fn read_db_effects(c: &mut Resp, seq: &mut u64, n: usize) -> Vec<(u64, Vec<String>)> {
    (0..n)
        .map(|_| {
            let f = frame_parts(&c.read_frame());
            let s = num(&f[1]);
            assert_eq!(s, *seq + 1, "contiguous sequence numbers: {f:?}");
            *seq = s;
            let (db, args) = match &f[0][..] {
                b"effect" => (0, &f[2..]),
                b"effect-db" => (num(&f[2]), &f[3..]),
                _ => panic!("{f:?}"),
            };
            (db, args.iter().map(|a| text(a)).collect())
        })
        .collect()
}

#[test]
fn other_databases_arrive_tagged() {
    let port = free_port();
    let _primary = start_engine(port);
    let mut w = Resp::connect(port);
    let (mut sub, _, mut seq) = subscribe(port);
    // Database 0: the frame it always had, byte for byte.
    w.cmd_str(&["SET", "zero", "0"]);
    let raw = sub.read_frame();
    let want = format!(
        "*5\r\n$6\r\neffect\r\n${}\r\n{}\r\n$3\r\nSET\r\n$4\r\nzero\r\n$1\r\n0\r\n",
        (seq + 1).to_string().len(),
        seq + 1
    );
    assert_eq!(escape(&raw), escape(want.as_bytes()));
    seq += 1;
    // Database 3: tagged.
    assert_eq!(
        parse_value(&w.cmd_str(&["SELECT", "3"])),
        Value::Simple("OK".into())
    );
    w.cmd_str(&["SET", "three", "3"]);
    w.cmd_str(&["HSET", "h", "f", "v"]);
    let raw = sub.read_frame();
    let f = frame_parts(&raw);
    assert_eq!(
        f.iter().map(|x| text(x)).collect::<Vec<_>>(),
        [
            "effect-db",
            &(seq + 1).to_string(),
            "3",
            "SET",
            "three",
            "3"
        ]
    );
    seq += 1;
    let v = |db: u64, a: &[&str]| (db, a.iter().map(|s| s.to_string()).collect::<Vec<_>>());
    assert_eq!(
        read_db_effects(&mut sub, &mut seq, 1),
        [v(3, &["HSET", "h", "f", "v"])]
    );
    // MOVE from 3 to 0: DEL in 3, the new state in 0.
    assert_eq!(
        parse_value(&w.cmd_str(&["MOVE", "three", "0"])),
        Value::Int(1)
    );
    assert_eq!(
        read_db_effects(&mut sub, &mut seq, 3),
        [
            v(3, &["DEL", "three"]),
            v(0, &["DEL", "three"]),
            v(0, &["SET", "three", "3"])
        ]
    );
    // COPY into database 5.
    assert_eq!(
        parse_value(&w.cmd_str(&["COPY", "h", "h2", "DB", "5"])),
        Value::Int(1)
    );
    assert_eq!(
        read_db_effects(&mut sub, &mut seq, 2),
        [v(5, &["DEL", "h2"]), v(5, &["HSET", "h2", "f", "v"])]
    );
    // SWAPDB 3 5: each starts over from its new content.
    w.cmd_str(&["SWAPDB", "3", "5"]);
    assert_eq!(
        read_db_effects(&mut sub, &mut seq, 6),
        [
            v(3, &["FLUSHALL"]),
            v(3, &["DEL", "h2"]),
            v(3, &["HSET", "h2", "f", "v"]),
            v(5, &["FLUSHALL"]),
            v(5, &["DEL", "h"]),
            v(5, &["HSET", "h", "f", "v"])
        ]
    );
    // Expiry in database 3 is database 3's DEL.
    w.cmd_str(&["SET", "gone", "x", "PX", "20"]);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(parse_value(&w.cmd_str(&["GET", "gone"])), Value::Null);
    let fx = read_db_effects(&mut sub, &mut seq, 2);
    assert_eq!(
        (fx[0].0, &fx[0].1[..4]),
        (3, &["SET", "gone", "x", "PXAT"].map(String::from)[..])
    );
    assert_eq!(fx[1], v(3, &["DEL", "gone"]));
    // FLUSHALL: one per database that held keys (0, 3, 5).
    w.cmd_str(&["SELECT", "0"]);
    w.cmd_str(&["SET", "a", "1"]);
    read_db_effects(&mut sub, &mut seq, 1);
    w.cmd_str(&["SELECT", "5"]);
    w.cmd_str(&["SET", "b", "2"]);
    read_db_effects(&mut sub, &mut seq, 1);
    // A snapshot of database 5 on the feed connection, and database 0's stays database 0's.
    let mut snap = |argv: &[&str]| -> Vec<Vec<String>> {
        let first = frame_parts(&sub.cmd_str(argv));
        let mut frames = vec![first.iter().map(|x| text(x)).collect::<Vec<_>>()];
        while frames.last().unwrap()[0] != "snapshot-end" {
            frames.push(
                frame_parts(&sub.read_frame())
                    .iter()
                    .map(|x| text(x))
                    .collect(),
            );
        }
        frames
    };
    let s5 = snap(&["FEED", "SNAPSHOTDB", "5", "s5", ""]);
    let at = seq.to_string();
    assert_eq!(s5[0], ["snapshot", "s5", &at, "2"]);
    let mut entries: Vec<String> = s5[1..s5.len() - 1]
        .iter()
        .map(|f| f[2..].join(" "))
        .collect();
    entries.sort();
    assert_eq!(entries, ["HSET h f v", "SET b 2"]);
    assert_eq!(s5.last().unwrap(), &["snapshot-end", "s5", &at]);
    let s0 = snap(&["FEED", "SNAPSHOT", "s0", ""]);
    let entries: Vec<String> = s0[1..s0.len() - 1]
        .iter()
        .map(|f| f[2..].join(" "))
        .collect();
    assert_eq!(s0[0][3], "3", "zero three a");
    assert!(
        entries.contains(&"SET three 3".to_string()) && entries.contains(&"SET a 1".to_string())
    );
    w.cmd_str(&["FLUSHALL"]);
    assert_eq!(
        read_db_effects(&mut sub, &mut seq, 3),
        [
            v(0, &["FLUSHALL"]),
            v(3, &["FLUSHALL"]),
            v(5, &["FLUSHALL"])
        ]
    );
}

#[test]
fn slow_subscriber_overflows_and_writes_do_not_wait() {
    let port = free_port();
    let _primary = start_engine(port);
    let mut w = Resp::connect(port);
    w.cmd_str(&["CONFIG", "SET", "feed-buffer-limit", "256kb"]);
    assert_eq!(
        parse_value(&w.cmd_str(&["CONFIG", "GET", "feed-buffer-limit"]))
            .array()
            .unwrap()[1],
        Value::Bulk(b"262144".to_vec())
    );
    let (mut sub, _, seq0) = subscribe(port);
    // The subscriber now stops reading. 48 MB of effects: more than the kernel's socket
    // buffers can absorb.
    let value = vec![b'v'; 16 * 1024];
    let n = 3000;
    let started = Instant::now();
    let cmds: Vec<Vec<Vec<u8>>> = (0..n)
        .map(|i| {
            vec![
                b"SET".to_vec(),
                format!("big{}", i % 100).into_bytes(),
                value.clone(),
            ]
        })
        .collect();
    let replies = pipeline(&mut w, &cmds);
    let took = started.elapsed();
    assert!(replies.iter().all(|r| r == b"+OK\r\n"));
    assert!(
        took < Duration::from_secs(20),
        "{n} writes took {took:?} with a stalled subscriber"
    );
    // The engine is not holding the stream for the subscriber: it answers at once.
    let t = Instant::now();
    assert_eq!(w.cmd_str(&["PING"]), b"+PONG\r\n");
    assert!(t.elapsed() < Duration::from_secs(2));

    // Reading again: contiguous effects, overflow markers (effects resume right after each
    // marker's seq), and finally the marker that covers the end of the burst.
    let deadline = Instant::now() + Duration::from_secs(30);
    let end = seq0 + n as u64;
    let mut seq = seq0;
    let mut received = 0u64;
    let mut markers = 0;
    let marker = loop {
        assert!(
            Instant::now() < deadline,
            "no overflow marker covering the burst"
        );
        let f = frame_parts(&sub.read_frame());
        if f[0] == b"overflow" {
            let m = num(&f[1]);
            assert!(m >= seq, "a marker never goes back: {m} after {seq}");
            markers += 1;
            seq = m;
            if m >= end {
                break m;
            }
            continue;
        }
        assert_eq!(f[0], b"effect");
        assert_eq!(num(&f[1]), seq + 1, "contiguous, or right after a marker");
        seq += 1;
        received += 1;
    };
    assert!(markers >= 1);
    assert!(
        received < n as u64,
        "effects were dropped ({received} of {n} received)"
    );
    assert_eq!(
        marker, end,
        "the last marker names the last effect produced"
    );
    w.cmd_str(&["SET", "after", "overflow"]);
    let f = frame_parts(&sub.read_frame());
    assert_eq!(f[0], b"effect");
    assert_eq!(
        num(&f[1]),
        marker + 1,
        "effects resume right after the marker's seq"
    );
    assert_eq!(
        &f[2..],
        &[b"SET".to_vec(), b"after".to_vec(), b"overflow".to_vec()]
    );
    // And a resync works on the same connection.
    sub.send_raw(&Resp::encode(&[b"FEED", b"SNAPSHOT", b"r", b"after"]));
    let f = frame_parts(&sub.read_frame());
    assert_eq!(f[0], b"snapshot");
    assert_eq!(num(&f[2]), marker + 1);
    assert_eq!(num(&f[3]), 1);
}
