//! The keychange feed's effects (docs/feed.md), through `Engine::exec` with a fake clock.
//!
//! - `model_*`: a primary engine runs a seeded random command stream over every data type
//!   (TTLs, lazy and active expiry, MULTI/EXEC, blocked clients woken by pushes, renames,
//!   STORE commands, FLUSHALL…); a replica engine applies every effect the primary's feed
//!   streams, with its clock at 0 (so nothing may depend on the time it is applied). At checkpoints and at the end, both must hold exactly the
//!   same keys, values and TTLs (canonical dumps through ordinary reads), every effect must
//!   apply without an error, name at most one key (at arg1) and carry contiguous sequence
//!   numbers.
//! - `model_databases_*`: the same with SELECT, MOVE, SWAPDB, COPY … DB, FLUSHDB and FLUSHALL
//!   over several databases in the stream; one replica per database applies the effects
//!   tagged with its database (`effect` = database 0, `effect-db` = the others) and must end
//!   equal to that database of the primary.
//! - The rewrite rules one by one (relative TTL → absolute, SPOP → SREM, INCRBYFLOAT → SET,
//!   woken BLPOP → LPOP, expiry → DEL, no-ops record nothing), snapshots and the buffer bound.

use engine_core::{Client, Config, Delivery, Engine, Flow};

/// 2026-01-01T00:00:00Z in µs.
const T0: u64 = 1_767_225_600_000_000;

const FEED: u64 = 1;
const WRITER: u64 = 2;
const BLOCKER: u64 = 3;
const READER: u64 = 4;

// ---------------------------------------------------------------------------------------------
// A minimal RESP reader for replies and frames
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq)]
enum R {
    Simple(String),
    Err(String),
    Int(i64),
    Bulk(Vec<u8>),
    Null,
    Arr(Vec<R>),
}

fn parse(b: &[u8], at: &mut usize) -> R {
    let end = *at + b[*at..].windows(2).position(|w| w == b"\r\n").unwrap();
    let line = &b[*at + 1..end];
    let tag = b[*at];
    *at = end + 2;
    let s = std::str::from_utf8(line).unwrap();
    match tag {
        b'+' => R::Simple(s.into()),
        b'-' => R::Err(s.into()),
        b':' => R::Int(s.parse().unwrap()),
        b',' => R::Bulk(line.to_vec()),
        b'_' => R::Null,
        b'$' | b'=' => {
            let n: i64 = s.parse().unwrap();
            if n < 0 {
                return R::Null;
            }
            let v = b[*at..*at + n as usize].to_vec();
            *at += n as usize + 2;
            R::Bulk(v)
        }
        b'*' | b'>' | b'~' | b'%' => {
            let n: i64 = s.parse().unwrap();
            if n < 0 {
                return R::Null;
            }
            let n = if tag == b'%' { 2 * n } else { n };
            R::Arr((0..n).map(|_| parse(b, at)).collect())
        }
        t => panic!("unexpected tag {}", t as char),
    }
}

fn parse_all(b: &[u8]) -> Vec<R> {
    let mut at = 0;
    let mut v = Vec::new();
    while at < b.len() {
        v.push(parse(b, &mut at));
    }
    v
}

/// A frame's parts as byte strings.
fn parts(r: &R) -> Vec<Vec<u8>> {
    match r {
        R::Arr(v) => v
            .iter()
            .map(|x| match x {
                R::Bulk(b) => b.clone(),
                other => panic!("frame element {other:?}"),
            })
            .collect(),
        other => panic!("not a frame: {other:?}"),
    }
}

fn s(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

// ---------------------------------------------------------------------------------------------
// Primary + replica
// ---------------------------------------------------------------------------------------------

struct Pair {
    primary: Engine,
    /// One replica per database of the primary: `replicas[d]` holds database `d` (in its own
    /// database 0) and applies the effects tagged with `d`.
    replicas: Vec<Engine>,
    clients: Vec<Client>,
    replica_client: Client,
    now_us: u64,
    /// Last seq seen on the feed.
    seq: u64,
    /// Every effect applied, `(seq, argv)`.
    log: Vec<(u64, Vec<Vec<u8>>)>,
    /// The database of each effect in `log`.
    log_db: Vec<usize>,
    blocked: bool,
}

fn engine(seed: u64) -> Engine {
    engine_in(seed, Forms::Default)
}

/// The encoding limits an engine runs with.
#[derive(Clone, Copy, PartialEq)]
enum Forms {
    /// Redis 7.0's defaults: the model's collections stay compact (listpack, intset, few nodes).
    Default,
    /// Tiny limits: collections convert to hashtable/skiplist within a few elements, and lists
    /// are cut into nodes of two elements.
    Tiny,
}

#[allow(clippy::needless_update)] // EncodingLimits may gain fields
fn engine_in(seed: u64, forms: Forms) -> Engine {
    let mut config = Config {
        hash_seed: seed,
        ..Config::default()
    };
    if forms == Forms::Tiny {
        config.encoding = engine_core::types::EncodingLimits {
            hash_max_listpack_entries: 2,
            hash_max_listpack_value: 4,
            set_max_intset_entries: 2,
            zset_max_listpack_entries: 2,
            zset_max_listpack_value: 4,
            ..engine_core::types::EncodingLimits::DEFAULT
        };
        config.encoding.list_max_listpack_size = 2;
    }
    Engine::new(config)
}

impl Pair {
    fn new(seed: u64) -> Pair {
        Pair::new_in(seed, Forms::Default, Forms::Default)
    }

    /// A primary and its replicas with their own encoding limits: the effects carry contents,
    /// not encodings, so a replica converges whatever form either side holds a value in.
    fn new_in(seed: u64, primary: Forms, replicas: Forms) -> Pair {
        let mut p = Pair {
            primary: engine_in(seed, primary),
            replicas: (0..16)
                .map(|d| engine_in(seed ^ 0xdead_beef ^ d, replicas))
                .collect(),
            clients: (1..=4)
                .map(|id| Client {
                    id,
                    created_us: T0,
                    ..Client::default()
                })
                .collect(),
            replica_client: Client {
                id: 1,
                ..Client::default()
            },
            now_us: T0,
            seq: 0,
            log: Vec::new(),
            log_db: Vec::new(),
            blocked: false,
        };
        let out = p.exec(FEED, &[b"FEED", b"SUBSCRIBE"]);
        let f = parts(&parse_all(&out)[0]);
        assert_eq!(f[0], b"subscribed");
        assert_eq!(f[1].len(), 40);
        p.seq = s(&f[2]).parse().unwrap();
        p
    }

    fn exec(&mut self, id: u64, argv: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        let c = &mut self.clients[id as usize - 1];
        let flow = self.primary.exec(c, argv, self.now_us, &mut out);
        if flow == Flow::Block {
            assert_eq!(id, BLOCKER);
            self.blocked = true;
        }
        self.drain();
        out
    }

    fn run(&mut self, id: u64, line: &str) -> Vec<u8> {
        // FEED_TRACE=1 prints the command stream (and effect counts) to debug a failing seed.
        if std::env::var_os("FEED_TRACE").is_some() {
            eprintln!("[{id}] {line}");
        }
        let argv: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        self.exec(id, &argv)
    }

    /// Routes the primary's deliveries: the feed's frames are applied to the replica.
    fn drain(&mut self) {
        let mut ds: Vec<Delivery> = Vec::new();
        self.primary.take_deliveries(&mut ds);
        for d in ds {
            if d.client_id == BLOCKER && d.unblock {
                self.blocked = false;
            }
            if d.client_id != FEED {
                continue;
            }
            for frame in parse_all(&d.bytes) {
                let f = parts(&frame);
                // Database 0: ["effect", seq, arg…] as ever; others ["effect-db", seq, db, arg…].
                let (db, args) = match &f[0][..] {
                    b"effect" => (0, f[2..].to_vec()),
                    b"effect-db" => {
                        let db: usize = s(&f[2]).parse().unwrap();
                        assert_ne!(db, 0, "database 0 has plain effect frames: {f:?}");
                        (db, f[3..].to_vec())
                    }
                    _ => panic!("{f:?}"),
                };
                let seq: u64 = s(&f[1]).parse().unwrap();
                assert_eq!(seq, self.seq + 1, "contiguous seqs");
                self.seq = seq;
                self.apply(seq, db, args);
            }
        }
    }

    fn apply(&mut self, seq: u64, db: usize, argv: Vec<Vec<u8>>) {
        let refs: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
        let mut out = Vec::new();
        // Applied with the clock at 0, as docs/feed.md advises replicas: the replica never
        // expires a key by itself (only the primary's DEL removes one), and an effect that
        // still depended on the primary's clock would land elsewhere in time and show.
        let flow = self.replicas[db].exec(&mut self.replica_client, &refs, 0, &mut out);
        assert_eq!(flow, Flow::Continue);
        let reply = parse_all(&out);
        assert!(
            !matches!(reply[0], R::Err(_)),
            "effect {seq} {:?} failed on the replica of database {db}: {reply:?}",
            refs.iter().map(|a| s(a)).collect::<Vec<_>>()
        );
        if std::env::var_os("FEED_TRACE").is_some() {
            eprintln!(
                "   effect {:?}",
                refs.iter().map(|a| s(a)).collect::<Vec<_>>()
            );
        }
        self.log.push((seq, argv));
        self.log_db.push(db);
    }

    fn cron(&mut self) {
        self.primary.cron(self.now_us);
        self.drain();
    }

    fn assert_equal(&mut self, ctx: &str) {
        let dbs = self.replicas.len();
        let a: Vec<_> = (0..dbs)
            .map(|d| dump_db(&mut self.primary, d, self.now_us))
            .collect();
        // Reading can only expire keys, whose DELs the replicas get here.
        self.drain();
        for (d, a) in a.into_iter().enumerate() {
            let b = dump(&mut self.replicas[d], self.now_us);
            compare(&format!("{ctx} (database {d})"), a, b);
        }
    }
}

fn compare(
    ctx: &str,
    a: Vec<(String, String, i64, Vec<String>)>,
    b: Vec<(String, String, i64, Vec<String>)>,
) {
    {
        if a != b {
            let ka: Vec<_> = a.iter().map(|x| &x.0).collect();
            let kb: Vec<_> = b.iter().map(|x| &x.0).collect();
            for (x, y) in a.iter().zip(b.iter()) {
                if x != y {
                    panic!("{ctx}: first difference\nprimary {x:?}\nreplica {y:?}");
                }
            }
            panic!("{ctx}: keys differ\nprimary {ka:?}\nreplica {kb:?}");
        }
    }
}

/// `(key, type, pexpiretime, canonical content)` for every live key, sorted by key.
fn dump(e: &mut Engine, now_us: u64) -> Vec<(String, String, i64, Vec<String>)> {
    dump_db(e, 0, now_us)
}

/// [`dump`] of database `db`.
fn dump_db(e: &mut Engine, db: usize, now_us: u64) -> Vec<(String, String, i64, Vec<String>)> {
    let mut c = Client {
        id: 99,
        ..Client::default()
    };
    let mut out = Vec::new();
    e.exec(
        &mut c,
        &[b"SELECT", db.to_string().as_bytes()],
        now_us,
        &mut out,
    );
    assert_eq!(out, b"+OK\r\n");
    let mut run = |argv: &[&[u8]]| -> R {
        let mut out = Vec::new();
        e.exec(&mut c, argv, now_us, &mut out);
        parse_all(&out).remove(0)
    };
    let R::Arr(keys) = run(&[b"KEYS", b"*"]) else {
        panic!()
    };
    let mut keys: Vec<Vec<u8>> = keys
        .into_iter()
        .map(|k| match k {
            R::Bulk(b) => b,
            _ => panic!(),
        })
        .collect();
    keys.sort();
    let mut v = Vec::new();
    for k in keys {
        let R::Simple(t) = run(&[b"TYPE", &k]) else {
            panic!()
        };
        let R::Int(ttl) = run(&[b"PEXPIRETIME", &k]) else {
            panic!()
        };
        let flat = |r: R| -> Vec<String> {
            match r {
                R::Arr(v) => v
                    .into_iter()
                    .map(|x| match x {
                        R::Bulk(b) => s(&b),
                        o => format!("{o:?}"),
                    })
                    .collect(),
                R::Bulk(b) => vec![s(&b)],
                o => vec![format!("{o:?}")],
            }
        };
        let content = match t.as_str() {
            "string" => flat(run(&[b"GET", &k])),
            "list" => flat(run(&[b"LRANGE", &k, b"0", b"-1"])),
            "hash" => {
                let f = flat(run(&[b"HGETALL", &k]));
                let mut pairs: Vec<String> =
                    f.chunks(2).map(|p| format!("{}={}", p[0], p[1])).collect();
                pairs.sort();
                pairs
            }
            "set" => {
                let mut m = flat(run(&[b"SMEMBERS", &k]));
                m.sort();
                m
            }
            "zset" => flat(run(&[b"ZRANGE", &k, b"0", b"-1", b"WITHSCORES"])),
            "stream" => {
                // Entries, counters, groups, consumers and pending entries (times aside: a
                // replica applies effects at its own clock).
                let mut v = flat(run(&[b"XRANGE", &k, b"-", b"+"]));
                let info = flat(run(&[b"XINFO", b"STREAM", &k]));
                for f in [
                    "length",
                    "last-generated-id",
                    "max-deleted-entry-id",
                    "entries-added",
                    "recorded-first-entry-id",
                ] {
                    let i = info.iter().position(|x| x == f).unwrap();
                    v.push(format!("{f}={}", info[i + 1]));
                }
                let R::Arr(groups) = run(&[b"XINFO", b"GROUPS", &k]) else {
                    panic!()
                };
                for g in groups {
                    let R::Arr(fields) = g else { panic!() };
                    v.push(format!("{fields:?}"));
                    let R::Bulk(name) = &fields[1] else { panic!() };
                    let R::Arr(pel) = run(&[b"XPENDING", &k, name, b"-", b"+", b"1000"]) else {
                        panic!()
                    };
                    for p in pel {
                        let R::Arr(p) = p else { panic!() };
                        v.push(format!("pending {:?} {:?} {:?}", p[0], p[1], p[3]));
                    }
                    let R::Arr(cons) = run(&[b"XINFO", b"CONSUMERS", &k, name]) else {
                        panic!()
                    };
                    for c in cons {
                        let R::Arr(c) = c else { panic!() };
                        v.push(format!("consumer {:?} {:?}", c[1], c[3]));
                    }
                }
                v
            }
            "none" => continue,
            o => panic!("type {o}"),
        };
        v.push((s(&k), t, ttl, content));
    }
    v
}

// ---------------------------------------------------------------------------------------------
// The random command stream
// ---------------------------------------------------------------------------------------------

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len() as u64) as usize]
    }
}

/// Key names by type family, so most commands hit a key of the right type (and some do not).
fn key(r: &mut Rng, fam: &str) -> String {
    if r.below(10) == 0 {
        // Any family: WRONGTYPE errors record nothing.
        let f = r.pick(&["s", "l", "h", "t", "z", "x"]);
        return format!("{f}{}", r.below(6));
    }
    format!("{fam}{}", r.below(6))
}

fn val(r: &mut Rng) -> String {
    match r.below(4) {
        0 => r.below(100).to_string(),
        1 => format!("v{}", r.below(8)),
        2 => format!("{}.{}", r.below(10), r.below(100)),
        _ => "x".repeat(r.below(5) as usize),
    }
}

fn score(r: &mut Rng) -> String {
    match r.below(8) {
        0 => "inf".into(),
        1 => "-inf".into(),
        2 => format!("-{}.{}", r.below(5), r.below(1000)),
        _ => format!("{}.{}", r.below(20), r.below(8)),
    }
}

fn command(r: &mut Rng, now_ms: u64) -> String {
    let ttl = 1 + r.below(400);
    let at = now_ms + r.below(600);
    match r.below(74) {
        0 => format!("SET {} {}", key(r, "s"), val(r)),
        60..=73 => stream_command(r),
        1 => {
            let opt = r.pick(&[
                "EX 1", "PX ", "NX", "XX", "GET", "KEEPTTL", "EXAT ", "PXAT ", "XX GET",
            ]);
            let opt = match opt {
                "PX " => format!("PX {ttl}"),
                "EXAT " => format!("EXAT {}", at / 1000 + 1),
                "PXAT " => format!("PXAT {at}"),
                o => o.to_string(),
            };
            format!("SET {} {} {opt}", key(r, "s"), val(r))
        }
        2 => format!("SETEX {} 1 {}", key(r, "s"), val(r)),
        3 => format!("PSETEX {} {ttl} {}", key(r, "s"), val(r)),
        4 => format!(
            "GETEX {} {}",
            key(r, "s"),
            r.pick(&["PERSIST", "EX 1", "PX 200", "PXAT 1", "EXAT 4000000000"])
        ),
        5 => format!("{} {}", r.pick(&["GETSET", "SETNX"]), key(r, "s")) + &format!(" {}", val(r)),
        6 => format!("GETDEL {}", key(r, "s")),
        7 => format!(
            "{} {} {} {} {}",
            r.pick(&["MSET", "MSETNX"]),
            key(r, "s"),
            val(r),
            key(r, "s"),
            val(r)
        ),
        8 => format!("APPEND {} {}", key(r, "s"), val(r)),
        9 => format!("{} {}", r.pick(&["INCR", "DECR"]), key(r, "s")),
        10 => format!(
            "{} {} {}",
            r.pick(&["INCRBY", "DECRBY"]),
            key(r, "s"),
            r.below(50)
        ),
        11 => format!(
            "INCRBYFLOAT {} {}.{}",
            key(r, "s"),
            r.below(10),
            r.below(1000)
        ),
        12 => format!("SETRANGE {} {} {}", key(r, "s"), r.below(8), val(r)),
        13 => {
            let f = r.pick(&["s", "l", "h", "t", "z"]);
            format!(
                "{} {} {}",
                r.pick(&["DEL", "UNLINK"]),
                key(r, f),
                key(r, "s")
            )
        }
        14 | 15 => {
            let f = r.pick(&["s", "l", "h", "t", "z"]);
            let k = key(r, f);
            match r.below(6) {
                0 => format!("EXPIRE {k} 1"),
                1 => format!("PEXPIRE {k} {ttl}"),
                2 => format!("PEXPIREAT {k} {at}"),
                3 => format!("EXPIREAT {k} {}", at / 1000 + 1),
                4 => format!("PEXPIRE {k} {ttl} {}", r.pick(&["NX", "XX", "GT", "LT"])),
                _ => format!("PERSIST {k}"),
            }
        }
        16 => {
            let f = r.pick(&["s", "l", "h", "t", "z"]);
            let op = r.pick(&["RENAME", "RENAMENX", "COPY", "COPY"]);
            let extra = if op == "COPY" && r.below(2) == 0 {
                " REPLACE"
            } else {
                ""
            };
            format!("{op} {} {}{extra}", key(r, f), key(r, f))
        }
        17 => {
            if r.below(40) == 0 {
                r.pick(&["FLUSHALL", "FLUSHDB", "FLUSHALL ASYNC"])
                    .to_string()
            } else {
                format!("GET {}", key(r, "s"))
            }
        }
        // lists
        18 | 19 => format!(
            "{} {} {} {}",
            r.pick(&["LPUSH", "RPUSH", "LPUSHX", "RPUSHX"]),
            key(r, "l"),
            val(r),
            val(r)
        ),
        20 => format!(
            "{} {}{}",
            r.pick(&["LPOP", "RPOP"]),
            key(r, "l"),
            if r.below(2) == 0 {
                format!(" {}", r.below(3))
            } else {
                String::new()
            }
        ),
        21 => format!("LSET {} {} {}", key(r, "l"), r.below(4) as i64 - 2, val(r)),
        22 => format!("LREM {} {} {}", key(r, "l"), r.below(5) as i64 - 2, val(r)),
        23 => format!(
            "LTRIM {} {} {}",
            key(r, "l"),
            r.below(3),
            r.below(6) as i64 - 2
        ),
        24 => format!(
            "LINSERT {} {} {} {}",
            key(r, "l"),
            r.pick(&["BEFORE", "AFTER"]),
            val(r),
            val(r)
        ),
        25 => format!(
            "LMOVE {} {} {} {}",
            key(r, "l"),
            key(r, "l"),
            r.pick(&["LEFT", "RIGHT"]),
            r.pick(&["LEFT", "RIGHT"])
        ),
        26 => format!("RPOPLPUSH {} {}", key(r, "l"), key(r, "l")),
        27 => format!(
            "LMPOP 2 {} {} {}{}",
            key(r, "l"),
            key(r, "l"),
            r.pick(&["LEFT", "RIGHT"]),
            if r.below(2) == 0 { " COUNT 2" } else { "" }
        ),
        28 => format!(
            "{} {} {} 0",
            r.pick(&["BLPOP", "BRPOP"]),
            key(r, "l"),
            key(r, "l")
        ),
        29 => format!(
            "BLMOVE {} {} {} {} 0",
            key(r, "l"),
            key(r, "l"),
            r.pick(&["LEFT", "RIGHT"]),
            r.pick(&["LEFT", "RIGHT"])
        ),
        // hashes
        30 | 31 => format!(
            "{} {} f{} {} f{} {}",
            r.pick(&["HSET", "HMSET"]),
            key(r, "h"),
            r.below(5),
            val(r),
            r.below(5),
            val(r)
        ),
        32 => format!("HSETNX {} f{} {}", key(r, "h"), r.below(5), val(r)),
        33 => format!("HDEL {} f{} f{}", key(r, "h"), r.below(5), r.below(5)),
        34 => format!("HINCRBY {} f{} {}", key(r, "h"), r.below(5), r.below(9)),
        35 => format!(
            "HINCRBYFLOAT {} f{} {}.{}",
            key(r, "h"),
            r.below(5),
            r.below(9),
            r.below(99)
        ),
        // sets
        36 | 37 => format!(
            "SADD {} m{} m{} m{}",
            key(r, "t"),
            r.below(8),
            r.below(8),
            r.below(8)
        ),
        38 => format!("SREM {} m{} m{}", key(r, "t"), r.below(8), r.below(8)),
        39 => format!(
            "SPOP {}{}",
            key(r, "t"),
            if r.below(2) == 0 {
                format!(" {}", r.below(4))
            } else {
                String::new()
            }
        ),
        40 => format!("SMOVE {} {} m{}", key(r, "t"), key(r, "t"), r.below(8)),
        41 => format!(
            "{} {} {} {}",
            r.pick(&["SINTERSTORE", "SUNIONSTORE", "SDIFFSTORE"]),
            key(r, "t"),
            key(r, "t"),
            key(r, "t")
        ),
        42 => format!("SRANDMEMBER {} {}", key(r, "t"), r.below(5) as i64 - 2),
        // sorted sets
        43 | 44 => format!(
            "ZADD {} {}{} m{} {} m{}",
            key(r, "z"),
            r.pick(&["", "", "NX ", "XX ", "GT ", "LT CH ", "CH "]),
            score(r),
            r.below(8),
            score(r),
            r.below(8)
        ),
        45 => format!("ZADD {} INCR {} m{}", key(r, "z"), score(r), r.below(8)),
        46 => format!("ZINCRBY {} {} m{}", key(r, "z"), score(r), r.below(8)),
        47 => format!("ZREM {} m{} m{}", key(r, "z"), r.below(8), r.below(8)),
        48 => format!(
            "{} {} {}",
            // ZREMRANGEBYLEX is left out: on members of different scores it currently
            // panics in zset/skiplist.rs (reported); its effect is as sent like these.
            r.pick(&["ZREMRANGEBYRANK", "ZREMRANGEBYSCORE"]),
            key(r, "z"),
            r.pick(&["0 1", "-inf (1.5", "(1 3", "-1 -1", "1 2"])
        ),
        49 => format!(
            "{} {}{}",
            r.pick(&["ZPOPMIN", "ZPOPMAX"]),
            key(r, "z"),
            if r.below(2) == 0 { " 2" } else { "" }
        ),
        50 => format!(
            "ZMPOP 2 {} {} {}{}",
            key(r, "z"),
            key(r, "z"),
            r.pick(&["MIN", "MAX"]),
            if r.below(2) == 0 { " COUNT 3" } else { "" }
        ),
        51 => format!(
            "{} {} {} 0",
            r.pick(&["BZPOPMIN", "BZPOPMAX"]),
            key(r, "z"),
            key(r, "z")
        ),
        52 => format!(
            "{} 2 {} {} {}{}",
            r.pick(&["BLMPOP 0", "BZMPOP 0"]),
            key(r, "z"),
            key(r, "l"),
            r.pick(&["LEFT", "MIN"]),
            if r.below(2) == 0 { " COUNT 2" } else { "" }
        ),
        53 => format!(
            "{} {} 2 {} {}",
            r.pick(&["ZUNIONSTORE", "ZINTERSTORE", "ZDIFFSTORE"]),
            key(r, "z"),
            key(r, "z"),
            key(r, "z")
        ),
        54 => format!(
            "ZRANGESTORE {} {} 0 {}",
            key(r, "z"),
            key(r, "z"),
            r.below(4) as i64 - 1
        ),
        // reads (lazy expiry)
        55 => {
            let f = r.pick(&["s", "l", "h", "t", "z"]);
            format!(
                "{} {}",
                r.pick(&["TYPE", "EXISTS", "TTL", "LLEN", "HGETALL", "SCARD", "ZCARD"]),
                key(r, f)
            )
        }
        56 => "SCAN 0 COUNT 5".to_string(),
        57 => "RANDOMKEY".to_string(),
        _ => {
            let f = r.pick(&["s", "l"]);
            format!("SET {} {} PX {ttl}", key(r, f), val(r))
        }
    }
}

/// A stream command on an `x` key: explicit and automatic IDs, trims, groups, reads,
/// acknowledgements and claims.
fn stream_command(r: &mut Rng) -> String {
    let k = key(r, "x");
    let id = |r: &mut Rng| format!("{}-{}", 1 + r.below(300), r.below(3));
    let g = format!("g{}", r.below(3));
    let c = format!("c{}", r.below(3));
    match r.below(14) {
        0 | 1 => format!("XADD {k} * f {}", val(r)),
        2 => format!("XADD {k} {}-* f {} g x", 1 + r.below(300), val(r)),
        3 => format!(
            "XADD {k} {} * f {}",
            r.pick(&[
                "MAXLEN ~ 3",
                "MAXLEN 2",
                "MINID 100",
                "NOMKSTREAM",
                "MAXLEN = 0"
            ]),
            val(r)
        ),
        4 => format!("XDEL {k} {} {}", id(r), id(r)),
        5 => format!(
            "XTRIM {k} {}",
            r.pick(&[
                "MAXLEN 3",
                "MAXLEN ~ 2",
                "MINID 150",
                "MINID ~ 200",
                "MAXLEN 0"
            ])
        ),
        6 => format!(
            "XGROUP CREATE {k} {g} {} {}",
            r.pick(&["$", "0", "150"]),
            r.pick(&["MKSTREAM", "", "ENTRIESREAD 1"])
        )
        .trim_end()
        .to_string(),
        7 | 8 => format!(
            "XREADGROUP GROUP {g} {c} COUNT {} {}STREAMS {k} >",
            1 + r.below(3),
            r.pick(&["", "NOACK "])
        ),
        9 => format!("XREADGROUP GROUP {g} {c} STREAMS {k} 0"),
        10 => format!("XACK {k} {g} {} {}", id(r), id(r)),
        11 => format!(
            "XCLAIM {k} {g} {c} 0 {} {}",
            id(r),
            r.pick(&["JUSTID", "FORCE", "RETRYCOUNT 5", "", "LASTID 250-0"])
        )
        .trim_end()
        .to_string(),
        12 => format!(
            "XAUTOCLAIM {k} {g} {c} 0 0 COUNT {}{}",
            1 + r.below(3),
            r.pick(&["", " JUSTID"])
        ),
        _ => match r.below(4) {
            0 => format!("XGROUP DELCONSUMER {k} {g} {c}"),
            1 => format!("XGROUP CREATECONSUMER {k} {g} {c}"),
            2 => format!("XGROUP DESTROY {k} {g}"),
            _ => format!("XGROUP SETID {k} {g} {}", r.pick(&["$", "0", "120-1"])),
        },
    }
}

/// A command that reaches across databases `0..dbs` (or selects one), and the client to run
/// it.
fn db_command(r: &mut Rng, dbs: u64) -> (u64, String) {
    let f = r.pick(&["s", "l", "h", "t", "z"]);
    let line = match r.below(14) {
        0..=3 => {
            // Everyone moves around; the blocker only while it is not blocked (see run_model).
            let who = [WRITER, READER, BLOCKER][r.below(3) as usize];
            return (who, format!("SELECT {}", r.below(dbs)));
        }
        4..=6 => format!("MOVE {} {}", key(r, f), r.below(dbs)),
        7 | 8 => format!("SWAPDB {} {}", r.below(dbs), r.below(dbs)),
        9..=11 => format!(
            "COPY {} {} DB {}{}",
            key(r, f),
            key(r, f),
            r.below(dbs),
            if r.below(2) == 0 { " REPLACE" } else { "" }
        ),
        12 => "FLUSHDB".to_string(),
        _ => {
            if r.below(4) == 0 {
                "FLUSHALL".to_string()
            } else {
                "DBSIZE".to_string()
            }
        }
    };
    (WRITER, line)
}

fn run_model(seed: u64, steps: usize) {
    run_model_dbs(seed, steps, 1);
}

/// The model test over databases `0..dbs` (1: database 0 only, the original stream).
fn run_model_dbs(seed: u64, steps: usize, dbs: u64) {
    run_model_in(seed, steps, dbs, Forms::Default, Forms::Default);
}

fn run_model_in(seed: u64, steps: usize, dbs: u64, primary: Forms, replicas: Forms) {
    let mut p = Pair::new_in(seed, primary, replicas);
    let mut r = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    for step in 0..steps {
        p.now_us += r.below(40_000);
        let now_ms = p.now_us / 1000;
        if r.below(50) == 0 {
            p.cron();
        }
        let tx = r.below(25) == 0;
        if tx {
            p.run(WRITER, "MULTI");
        }
        for _ in 0..if tx { 1 + r.below(4) } else { 1 } {
            if dbs > 1 && r.below(8) == 0 {
                let (who, line) = db_command(&mut r, dbs);
                if tx || (who == BLOCKER && p.blocked) {
                    // Inside MULTI everything goes through the writer (SELECT too: EXEC then
                    // runs the rest of the transaction on the other database).
                    p.run(WRITER, &line);
                } else {
                    p.run(who, &line);
                }
                continue;
            }
            let line = command(&mut r, now_ms);
            let blocking = line.starts_with('B');
            if blocking && !tx {
                if !p.blocked {
                    p.run(BLOCKER, &line);
                }
            } else if blocking {
                // Inside MULTI a blocking command answers at once.
                p.run(WRITER, &line);
            } else if line.starts_with("GET") || line.starts_with("TYPE") {
                p.run(READER, &line);
            } else {
                p.run(WRITER, &line);
            }
        }
        if tx {
            p.run(WRITER, "EXEC");
        }
        if step % 500 == 499 {
            p.assert_equal(&format!("seed {seed} step {step}"));
        }
    }
    // Let everything expire through the active cycle: all keys go, as DEL effects.
    p.assert_equal(&format!("seed {seed} end"));
    for _ in 0..20 {
        p.now_us += 1_000_000;
        p.cron();
    }
    p.assert_equal(&format!("seed {seed} after expiry"));
    // Every effect names at most one key, at arg1.
    for (seq, argv) in &p.log {
        let name = s(&argv[0]).to_ascii_lowercase();
        let spec = engine_core::command::lookup(name.as_bytes()).unwrap();
        let one_key = match name.as_str() {
            "del" => argv.len() == 2,
            "flushall" => argv.len() == 1,
            "lmove" => true,
            _ => spec.last_key == spec.first_key,
        };
        assert!(one_key, "effect {seq} {name} has several keys");
        if name == "lmove" {
            assert_eq!(argv[1], argv[2], "LMOVE effects only rotate one list");
        }
    }
    if std::env::var_os("FEED_TRACE").is_some() {
        let mut by: std::collections::BTreeMap<String, usize> = Default::default();
        for (_, a) in &p.log {
            *by.entry(s(&a[0])).or_default() += 1;
        }
        eprintln!("seed {seed}: {} effects {by:?}", p.log.len());
    }
    let dels = p.log.iter().filter(|(_, a)| a[0] == b"DEL").count();
    assert!(dels > 0, "expiry and DEL produce DEL effects");
    assert!(p.log.len() > steps / 3, "{} effects", p.log.len());
    assert_eq!(p.primary.feed_seq(), p.seq);
    if dbs > 1 {
        for d in 0..dbs as usize {
            let n = p.log_db.iter().filter(|&&x| x == d).count();
            assert!(n > 0, "no effect on database {d}");
        }
    } else {
        assert!(p.log_db.iter().all(|&d| d == 0));
    }
}

#[test]
fn model_replica_converges_seed_1() {
    run_model(1, 4000);
}

#[test]
fn model_replica_converges_many_seeds() {
    for seed in 2..8 {
        run_model(seed, 1500);
    }
}

/// Issue 16: values in the compact and the large forms, on either side, converge alike.
#[test]
fn model_replica_converges_across_encodings() {
    for (seed, primary, replicas) in [
        (31, Forms::Tiny, Forms::Tiny),
        (32, Forms::Tiny, Forms::Default),
        (33, Forms::Default, Forms::Tiny),
    ] {
        run_model_in(seed, 2500, 1, primary, replicas);
    }
}

#[test]
fn model_databases_replicas_converge_seed_1() {
    run_model_dbs(1, 4000, 4);
}

#[test]
fn model_databases_replicas_converge_many_seeds() {
    for seed in 2..8 {
        run_model_dbs(seed, 1500, 3 + seed % 3);
    }
}

// ---------------------------------------------------------------------------------------------
// Rules one by one
// ---------------------------------------------------------------------------------------------

/// The effects a command line produced, as strings.
fn effects_of(p: &mut Pair, id: u64, line: &str) -> Vec<String> {
    let before = p.log.len();
    p.run(id, line);
    p.log[before..]
        .iter()
        .map(|(_, a)| a.iter().map(|x| s(x)).collect::<Vec<_>>().join(" "))
        .collect()
}

#[test]
fn rewrites() {
    let mut p = Pair::new(11);
    let now_ms = T0 / 1000;
    assert_eq!(effects_of(&mut p, WRITER, "SET k v"), ["SET k v"]);
    assert_eq!(
        effects_of(&mut p, WRITER, "SET k v2 EX 10"),
        [format!("SET k v2 PXAT {}", now_ms + 10_000)]
    );
    assert_eq!(
        effects_of(&mut p, WRITER, "EXPIRE k 100"),
        [format!("PEXPIREAT k {}", now_ms + 100_000)]
    );
    assert_eq!(
        effects_of(&mut p, WRITER, "SETEX k 5 v3"),
        [format!("SET k v3 PXAT {}", now_ms + 5000)]
    );
    assert_eq!(effects_of(&mut p, WRITER, "GETEX k PERSIST"), ["PERSIST k"]);
    assert_eq!(effects_of(&mut p, WRITER, "GETEX k"), Vec::<String>::new());
    assert_eq!(
        effects_of(&mut p, WRITER, "SET k x NX"),
        Vec::<String>::new()
    );
    assert_eq!(
        effects_of(&mut p, WRITER, "DEL nosuch"),
        Vec::<String>::new()
    );
    assert_eq!(effects_of(&mut p, WRITER, "DEL k nosuch"), ["DEL k"]);
    assert_eq!(
        effects_of(&mut p, WRITER, "INCRBYFLOAT f 1.5"),
        ["SET f 1.5"]
    );
    assert_eq!(
        effects_of(&mut p, WRITER, "HINCRBYFLOAT h a 0.25"),
        ["HSET h a 0.25"]
    );
    assert_eq!(
        effects_of(&mut p, WRITER, "MSET a 1 b 2"),
        ["SET a 1", "SET b 2"]
    );
    assert_eq!(
        effects_of(&mut p, WRITER, "MSETNX a 1 c 2"),
        Vec::<String>::new()
    );
    assert_eq!(
        effects_of(&mut p, WRITER, "EXPIRE a -1"),
        ["DEL a"],
        "an expiry in the past deletes"
    );
    effects_of(&mut p, WRITER, "SADD s m1");
    assert_eq!(effects_of(&mut p, WRITER, "SPOP s"), ["SREM s m1"]);
    assert_eq!(effects_of(&mut p, WRITER, "SPOP s"), Vec::<String>::new());
    assert_eq!(
        effects_of(&mut p, WRITER, "SRANDMEMBER s"),
        Vec::<String>::new()
    );
    effects_of(&mut p, WRITER, "RPUSH l1 a b c");
    assert_eq!(
        effects_of(&mut p, WRITER, "LMOVE l1 l2 LEFT RIGHT"),
        ["LPOP l1", "RPUSH l2 a"]
    );
    assert_eq!(
        effects_of(&mut p, WRITER, "LMPOP 2 nosuch l1 RIGHT COUNT 5"),
        ["RPOP l1 5"]
    );
    assert_eq!(
        effects_of(&mut p, WRITER, "RENAME l2 l3"),
        ["DEL l2", "DEL l3", "RPUSH l3 a"]
    );
    effects_of(&mut p, WRITER, "ZADD z 1 a 2 b");
    assert_eq!(effects_of(&mut p, WRITER, "BZPOPMAX z 0"), ["ZPOPMAX z"]);
    assert_eq!(effects_of(&mut p, WRITER, "FLUSHALL"), ["FLUSHALL"]);
    assert_eq!(effects_of(&mut p, WRITER, "FLUSHALL"), Vec::<String>::new());
    // A blocked client woken by a push records its pop after the push.
    p.run(BLOCKER, "BLPOP q 0");
    assert!(p.blocked);
    assert_eq!(
        effects_of(&mut p, WRITER, "RPUSH q x y"),
        ["RPUSH q x y", "LPOP q"]
    );
    assert!(!p.blocked);
    // Lazy expiry: DEL before the command's own effect.
    effects_of(&mut p, WRITER, "SET t v PX 10");
    p.now_us += 20_000;
    assert_eq!(effects_of(&mut p, READER, "GET t"), ["DEL t"]);
    effects_of(&mut p, WRITER, "SET t v PX 10");
    p.now_us += 20_000;
    assert_eq!(
        effects_of(&mut p, WRITER, "APPEND t w"),
        ["DEL t", "APPEND t w"]
    );
    // Transactions: each command's own effects, in order.
    p.run(WRITER, "MULTI");
    p.run(WRITER, "INCR n");
    p.run(WRITER, "INCRBY n 5");
    assert_eq!(effects_of(&mut p, WRITER, "EXEC"), ["INCR n", "INCRBY n 5"]);
    p.assert_equal("rewrites");
}

/// The effects a command line produced, as `"<db>: <args>"`.
fn db_effects_of(p: &mut Pair, id: u64, line: &str) -> Vec<String> {
    let before = p.log.len();
    p.run(id, line);
    p.log[before..]
        .iter()
        .zip(&p.log_db[before..])
        .map(|((_, a), db)| {
            let args: Vec<String> = a.iter().map(|x| s(x)).collect();
            format!("{db}: {}", args.join(" "))
        })
        .collect()
}

#[test]
fn databases_are_tagged_and_crossings_split() {
    let mut p = Pair::new(21);
    let none = Vec::<String>::new();
    p.run(WRITER, "SELECT 3");
    // The frame itself: ["effect-db", seq, db, arg…].
    let mut out = Vec::new();
    let c = &mut p.clients[WRITER as usize - 1];
    p.primary.exec(c, &[b"SET", b"k", b"v"], p.now_us, &mut out);
    let mut ds = Vec::new();
    p.primary.take_deliveries(&mut ds);
    let f = parts(&parse_all(&ds[0].bytes)[0]);
    let seq = (p.seq + 1).to_string();
    let want: Vec<&[u8]> = vec![b"effect-db", seq.as_bytes(), b"3", b"SET", b"k", b"v"];
    assert_eq!(f, want);
    p.seq += 1;
    p.apply(
        p.seq,
        3,
        vec![b"SET".to_vec(), b"k".to_vec(), b"v".to_vec()],
    );
    assert_eq!(
        db_effects_of(&mut p, WRITER, "MOVE k 0"),
        ["3: DEL k", "0: DEL k", "0: SET k v"]
    );
    assert_eq!(db_effects_of(&mut p, WRITER, "MOVE k 0"), none);
    p.run(WRITER, "SELECT 0");
    assert_eq!(
        db_effects_of(&mut p, WRITER, "COPY k k2 DB 5"),
        ["5: DEL k2", "5: SET k2 v"]
    );
    assert_eq!(db_effects_of(&mut p, WRITER, "COPY k k2 DB 5"), none);
    assert_eq!(
        db_effects_of(&mut p, WRITER, "SWAPDB 0 5"),
        [
            "0: FLUSHALL",
            "0: DEL k2",
            "0: SET k2 v",
            "5: FLUSHALL",
            "5: DEL k",
            "5: SET k v"
        ]
    );
    assert_eq!(db_effects_of(&mut p, WRITER, "SWAPDB 1 1"), none);
    assert_eq!(db_effects_of(&mut p, WRITER, "FLUSHDB"), ["0: FLUSHALL"]);
    p.run(WRITER, "SET a 1");
    assert_eq!(
        db_effects_of(&mut p, READER, "FLUSHALL"),
        ["0: FLUSHALL", "5: FLUSHALL"],
        "one per database that was not empty"
    );
    assert_eq!(db_effects_of(&mut p, READER, "FLUSHALL"), none);
    // Expiry in database 2: the DEL is database 2's.
    p.run(WRITER, "SELECT 2");
    p.run(WRITER, "SET t v PX 10");
    p.run(WRITER, "HSET h f v");
    p.now_us += 20_000;
    p.run(READER, "SELECT 2");
    assert_eq!(db_effects_of(&mut p, READER, "GET t"), ["2: DEL t"]);
    // Inside MULTI, SELECT moves the rest of the transaction.
    p.run(WRITER, "MULTI");
    p.run(WRITER, "INCR n");
    p.run(WRITER, "SELECT 0");
    p.run(WRITER, "INCR n");
    assert_eq!(
        db_effects_of(&mut p, WRITER, "EXEC"),
        ["2: INCR n", "0: INCR n"]
    );
    p.assert_equal("databases");
    // FEED SNAPSHOTDB: another database's keys, in the same frames as FEED SNAPSHOT.
    let out = p.run(FEED, "FEED SNAPSHOTDB 2 s2 h n");
    let frames: Vec<Vec<Vec<u8>>> = parse_all(&out).iter().map(parts).collect();
    let text: Vec<String> = frames
        .iter()
        .map(|f| f.iter().map(|x| s(x)).collect::<Vec<_>>().join(" "))
        .collect();
    let seq = p.seq;
    assert_eq!(
        text,
        [
            format!("snapshot s2 {seq} 2"),
            "entry s2 HSET h f v".to_string(),
            "entry s2 SET n 1".to_string(),
            format!("snapshot-end s2 {seq}"),
        ]
    );
    // A prefix "DB" stays a prefix of FEED SNAPSHOT (database 0).
    let out = p.run(FEED, "FEED SNAPSHOT s3 DB 2");
    let frames: Vec<Vec<Vec<u8>>> = parse_all(&out).iter().map(parts).collect();
    assert_eq!(s(&frames[0][3]), "0");
    let r = parse_all(&p.run(FEED, "FEED SNAPSHOTDB 16 s4 a"));
    assert_eq!(r[0], R::Err("ERR DB index is out of range".into()));
    let r = parse_all(&p.run(FEED, "FEED SNAPSHOTDB x s4 a"));
    assert_eq!(
        r[0],
        R::Err("ERR value is not an integer or out of range".into())
    );
    let r = parse_all(&p.run(FEED, "FEED SNAPSHOTDB 1 s4"));
    assert!(matches!(&r[0], R::Err(e) if e.contains("wrong number of arguments")));
}

#[test]
fn active_expiry_records_del() {
    let mut p = Pair::new(12);
    for i in 0..200 {
        p.run(WRITER, &format!("SET k{i} v PX 100"));
    }
    let before = p.log.len();
    p.now_us += 1_000_000;
    for _ in 0..50 {
        p.cron();
    }
    let dels = p.log[before..]
        .iter()
        .filter(|(_, a)| a[0] == b"DEL")
        .count();
    assert!(dels > 150, "{dels} DEL effects from the active cycle");
    p.assert_equal("active expiry");
}

#[test]
fn eviction_api_records_del() {
    let mut p = Pair::new(13);
    p.run(WRITER, "SET victim v");
    engine_core::effect::record_deleted(&mut p.primary, b"victim");
    p.run(READER, "PING");
    assert_eq!(
        p.log.last().unwrap().1,
        vec![b"DEL".to_vec(), b"victim".to_vec()]
    );
}

#[test]
fn eviction_records_del() {
    let mut p = Pair::new(16);
    p.run(WRITER, "CONFIG SET maxmemory-policy allkeys-random");
    p.run(WRITER, "CONFIG SET maxmemory 900000");
    let value = "x".repeat(1000);
    for i in 0..200 {
        let r = p.run(WRITER, &format!("SET k{i} {value}"));
        assert!(!r.starts_with(b"-"), "{}", s(&r));
    }
    let dels = p.log.iter().filter(|(_, a)| a[0] == b"DEL").count();
    assert!(dels > 100, "{dels} DEL effects for evicted keys");
    p.assert_equal("eviction");
}

#[test]
fn nothing_recorded_without_subscribers() {
    let mut e = engine(3);
    let mut c = Client {
        id: 1,
        ..Client::default()
    };
    let mut out = Vec::new();
    for i in 0..100 {
        let k = format!("k{i}");
        e.exec(&mut c, &[b"SET", k.as_bytes(), b"v"], T0, &mut out);
    }
    assert_eq!(e.feed_seq(), 0);
    assert!(!e.has_deliveries());
    // A subscriber arriving after unheard changes sees a skipped number.
    let mut f = Client {
        id: 2,
        ..Client::default()
    };
    out.clear();
    e.exec(&mut f, &[b"FEED", b"SUBSCRIBE"], T0, &mut out);
    let fr = parts(&parse_all(&out)[0]);
    assert_eq!(s(&fr[2]), "1");
    // Gone again: a later subscriber after more writes sees another gap.
    e.client_closed(2);
    e.exec(&mut c, &[b"SET", b"x", b"y"], T0, &mut out);
    out.clear();
    e.exec(&mut f, &[b"FEED", b"SUBSCRIBE"], T0, &mut out);
    assert_eq!(s(&parts(&parse_all(&out)[0])[2]), "2");
}

#[test]
fn feed_mode_and_errors() {
    let mut p = Pair::new(14);
    let r = parse_all(&p.run(FEED, "GET k"));
    assert_eq!(
        r[0],
        R::Err(
            "ERR Can't execute 'get': only FEED, PING and QUIT are allowed on a feed connection"
                .into()
        )
    );
    assert_eq!(parse_all(&p.run(FEED, "PING"))[0], R::Simple("PONG".into()));
    let r = parse_all(&p.run(WRITER, "FEED SNAPSHOT x"));
    assert!(matches!(&r[0], R::Err(e) if e.contains("wrong number of arguments")));
    let r = parse_all(&p.run(WRITER, "FEED SNAPSHOT x k"));
    assert_eq!(
        r[0],
        R::Err("ERR FEED SNAPSHOT needs FEED SUBSCRIBE first on this connection".into())
    );
    p.run(WRITER, "MULTI");
    p.run(WRITER, "FEED SNAPSHOT x a");
    let r = parse_all(&p.run(WRITER, "EXEC"));
    assert_eq!(
        r[0],
        R::Arr(vec![R::Err("ERR FEED is not allowed inside MULTI".into())])
    );
    // COMMAND knows FEED, and COMMAND COUNT agrees with COMMAND.
    let R::Int(n) = parse_all(&p.run(READER, "COMMAND COUNT"))[0] else {
        panic!()
    };
    let R::Arr(all) = parse_all(&p.run(READER, "COMMAND"))[0].clone() else {
        panic!()
    };
    assert_eq!(n as usize, all.len());
    let R::Arr(info) = parse_all(&p.run(READER, "COMMAND INFO feed"))[0].clone() else {
        panic!()
    };
    assert!(matches!(&info[0], R::Arr(v) if v[0] == R::Bulk(b"feed".to_vec())));
}

#[test]
fn snapshot_frames_recreate_the_prefixes() {
    let mut p = Pair::new(15);
    p.run(WRITER, "SET app:s hello");
    p.run(WRITER, "PEXPIRE app:s 100000");
    let members: Vec<String> = (0..2500).map(|i| format!("m{i}")).collect();
    for chunk in members.chunks(500) {
        p.run(WRITER, &format!("SADD app:big {}", chunk.join(" ")));
        let args: Vec<String> = chunk.iter().map(|m| format!("1.5 {m}")).collect();
        p.run(WRITER, &format!("ZADD app:z {}", args.join(" ")));
    }
    p.run(WRITER, "RPUSH app:l a b c");
    p.run(WRITER, "HSET app:h f v g w");
    p.run(WRITER, "SET other x");
    p.run(WRITER, "SET gone x PX 5");
    p.now_us += 10_000;
    let out = p.run(FEED, "FEED SNAPSHOT s1 app: gone");
    let frames: Vec<Vec<Vec<u8>>> = parse_all(&out).iter().map(parts).collect();
    assert_eq!(frames[0][0], b"snapshot");
    assert_eq!(frames[0][1], b"s1");
    assert_eq!(s(&frames[0][2]), p.seq.to_string());
    assert_eq!(
        s(&frames[0][3]),
        "5",
        "app:s app:big app:z app:l app:h; gone expired"
    );
    let last = frames.last().unwrap();
    assert_eq!(last[0], b"snapshot-end");
    assert_eq!(s(&last[2]), p.seq.to_string());
    // Apply to a fresh engine; compare with the primary's keys under the prefix.
    let mut fresh = engine(99);
    let mut c = Client::default();
    let mut big_entries = 0;
    for f in &frames[1..frames.len() - 1] {
        assert_eq!(f[0], b"entry");
        assert_eq!(f[1], b"s1");
        assert!(f.len() - 4 <= 2 * 1024, "at most 1024 elements per entry");
        if f[3] == b"app:big" {
            big_entries += 1;
        }
        let argv: Vec<&[u8]> = f[2..].iter().map(Vec::as_slice).collect();
        let mut out = Vec::new();
        fresh.exec(&mut c, &argv, p.now_us, &mut out);
        assert!(!out.starts_with(b"-"), "{}", s(&out));
    }
    assert_eq!(big_entries, 3);
    let mut want = dump(&mut p.primary, p.now_us);
    want.retain(|k| k.0.starts_with("app:"));
    assert_eq!(dump(&mut fresh, p.now_us), want);
}

#[test]
fn resp3_subscriber_gets_pushes() {
    let mut e = engine(5);
    let mut f = Client {
        id: 1,
        ..Client::default()
    };
    let mut out = Vec::new();
    e.exec(&mut f, &[b"HELLO", b"3"], T0, &mut out);
    out.clear();
    e.exec(&mut f, &[b"FEED", b"SUBSCRIBE"], T0, &mut out);
    assert!(out.starts_with(b">3\r\n$10\r\nsubscribed\r\n"));
    let mut w = Client {
        id: 2,
        ..Client::default()
    };
    e.exec(&mut w, &[b"SET", b"a", b"b"], T0, &mut out);
    let mut ds = Vec::new();
    e.take_deliveries(&mut ds);
    assert_eq!(ds.len(), 1);
    assert_eq!(
        ds[0].bytes,
        b">5\r\n$6\r\neffect\r\n$1\r\n1\r\n$3\r\nSET\r\n$1\r\na\r\n$1\r\nb\r\n"
    );
}

#[test]
fn overflow_drops_then_marks_then_resumes() {
    let mut e = engine(6);
    e.config.feed_buffer_limit = 10_000;
    let mut f = Client {
        id: 1,
        ..Client::default()
    };
    let mut out = Vec::new();
    e.exec(&mut f, &[b"FEED", b"SUBSCRIBE"], T0, &mut out);
    let mut w = Client {
        id: 2,
        ..Client::default()
    };
    let big = vec![b'x'; 1000];
    let mut received = Vec::new();
    // The server pretends nothing is ever written: pending grows until the limit.
    for i in 0..100 {
        let k = format!("k{i}");
        e.exec(&mut w, &[b"SET", k.as_bytes(), &big], T0, &mut out);
        let mut ds = Vec::new();
        e.take_deliveries(&mut ds);
        for d in ds {
            received.extend_from_slice(&d.bytes);
        }
        e.set_pending_output(1, received.len());
    }
    let frames: Vec<Vec<Vec<u8>>> = parse_all(&received).iter().map(parts).collect();
    assert!(
        frames.len() < 20,
        "{} frames: sending stopped",
        frames.len()
    );
    assert!(frames.iter().all(|f| f[0] == b"effect"));
    // The subscriber catches up: the marker, then effects resume at the next seq.
    e.set_pending_output(1, 0);
    let mut ds = Vec::new();
    e.take_deliveries(&mut ds);
    let marker = parts(&parse_all(&ds[0].bytes)[0]);
    assert_eq!(marker, vec![b"overflow".to_vec(), b"100".to_vec()]);
    e.exec(&mut w, &[b"SET", b"after", b"v"], T0, &mut out);
    ds.clear();
    e.take_deliveries(&mut ds);
    let next = parts(&parse_all(&ds[0].bytes)[0]);
    assert_eq!(next[..2], [b"effect".to_vec(), b"101".to_vec()]);
}

/// Timing of a full snapshot pass (docs/feed.md quotes it):
/// `cargo test --release -p engine-core --test effects snapshot_pass_timing -- --ignored --nocapture`
#[test]
#[ignore]
fn snapshot_pass_timing() {
    let mut e = engine(8);
    let mut c = Client::default();
    let mut out = Vec::new();
    let n = 1_000_000;
    for i in 0..n {
        let k = format!("key:{i}");
        out.clear();
        e.exec(&mut c, &[b"SET", k.as_bytes(), b"some value"], T0, &mut out);
    }
    out.clear();
    e.exec(&mut c, &[b"FEED", b"SUBSCRIBE"], T0, &mut out);
    for (prefix, what) in [
        (&b""[..], "all keys"),
        (&b"key:1234"[..], "a narrow prefix"),
    ] {
        let mut out = Vec::with_capacity(64 << 20);
        let t = std::time::Instant::now();
        e.exec(&mut c, &[b"FEED", b"SNAPSHOT", b"t", prefix], T0, &mut out);
        eprintln!(
            "snapshot of {what} over {n} keys: {:?}, {} bytes",
            t.elapsed(),
            out.len()
        );
    }
}

#[test]
fn feed_garbage_never_panics() {
    let mut e = engine(17);
    let mut c = Client {
        id: 1,
        ..Client::default()
    };
    let words: &[&[u8]] = &[
        b"",
        b"SUBSCRIBE",
        b"snapshot",
        b"help",
        b"x",
        b"\xff\x00",
        b"*",
    ];
    let mut out = Vec::new();
    let mut r = Rng(17);
    for _ in 0..2000 {
        let n = 1 + r.below(5) as usize;
        let mut argv: Vec<&[u8]> = vec![b"FEED"];
        for _ in 1..n {
            argv.push(words[r.below(words.len() as u64) as usize]);
        }
        out.clear();
        let flow = e.exec(&mut c, &argv, T0, &mut out);
        assert_eq!(flow, Flow::Continue);
        assert!(!out.is_empty(), "{argv:?} wrote no reply");
        if r.below(20) == 0 {
            e.client_closed(1);
        }
        let mut ds = Vec::new();
        e.take_deliveries(&mut ds);
    }
}

/// Bitmaps, BITFIELD, HyperLogLog (PFCOUNT's cache write included), SORT … STORE and LCS:
/// a random stream over a few keys, the replica applying the effects must end byte-equal
/// (issue 18).
#[test]
fn bits_hll_sort_effects_converge() {
    let mut p = Pair::new(18);
    let mut r = Rng(0x5eed_0018);
    for step in 0..3000 {
        p.now_us += r.below(20_000);
        let b = format!("b{}", r.below(3));
        let h = format!("h{}", r.below(3));
        let line = match r.below(16) {
            0 | 1 => format!("SETBIT {b} {} {}", r.below(200), r.below(2)),
            2 => format!(
                "BITFIELD {b} OVERFLOW {} INCRBY {}{} #{} {}",
                r.pick(&["WRAP", "SAT", "FAIL"]),
                r.pick(&["i", "u"]),
                1 + r.below(20),
                r.below(10),
                r.below(3000) as i64 - 1500
            ),
            3 => format!("BITFIELD {b} SET u8 {} {}", r.below(100), r.below(300)),
            4 => format!(
                "BITOP {} b{} b{} b{}",
                r.pick(&["AND", "OR", "XOR"]),
                r.below(3),
                r.below(3),
                r.below(3)
            ),
            5 => format!("BITOP NOT b{} b{}", r.below(3), r.below(3)),
            6..=8 => {
                let els: Vec<String> = (0..1 + r.below(30))
                    .map(|_| r.below(5000).to_string())
                    .collect();
                format!("PFADD {h} {}", els.join(" "))
            }
            9 => format!("PFCOUNT {h}"),
            10 => format!("PFMERGE {h} h{} h{}", r.below(3), r.below(3)),
            11 => format!("PFDEBUG TODENSE {h}"),
            12 => format!("RPUSH l {} {}", r.below(50), r.below(50)),
            13 => format!(
                "SORT l {} LIMIT {} 5 STORE s{}",
                r.pick(&["", "DESC", "ALPHA", "BY nosort"]),
                r.below(5),
                r.below(2)
            ),
            14 => format!("EXPIRE {} {}", r.pick(&["b0", "h0", "s0"]), 1 + r.below(3)),
            _ => format!("DEL {}", r.pick(&["b1", "h1", "l", "s1"])),
        };
        let line = line.replace("  ", " ");
        p.run(WRITER, &line);
        if step % 100 == 99 {
            p.cron();
            p.assert_equal(&format!("bits step {step}"));
        }
    }
    p.assert_equal("bits end");
    let names: std::collections::BTreeSet<String> = p
        .log
        .iter()
        .map(|(_, a)| s(&a[0]).to_ascii_uppercase())
        .collect();
    for want in ["SETBIT", "BITFIELD", "PFCOUNT"] {
        assert!(names.contains(want), "{want} effects in {names:?}");
    }
}

/// Streams: `XADD *` reaches the replica with the ID it was given, trims as `XTRIM MINID`,
/// and group reads as `XCLAIM … FORCE JUSTID` + `XGROUP SETID`; the replica's stream, groups
/// and pending entries equal the primary's.
#[test]
fn stream_effects_carry_concrete_ids() {
    let mut p = Pair::new(5);
    let now_ms = p.now_us / 1000;
    assert_eq!(
        effects_of(&mut p, WRITER, "XADD s * f v"),
        [format!("XADD s {now_ms}-0 f v")]
    );
    assert_eq!(
        effects_of(&mut p, WRITER, "XADD s * f w"),
        [format!("XADD s {now_ms}-1 f w")]
    );
    p.run(WRITER, "CONFIG SET stream-node-max-entries 2");
    for _ in 0..5 {
        p.now_us += 1000;
        p.run(WRITER, "XADD s * f x");
    }
    p.now_us += 1000;
    let eff = effects_of(&mut p, WRITER, "XADD s MAXLEN ~ 3 * f y");
    assert_eq!(eff.len(), 2, "{eff:?}");
    assert!(eff[1].starts_with("XTRIM s MINID "), "{eff:?}");
    assert_eq!(
        effects_of(&mut p, WRITER, "XGROUP CREATE s g 0"),
        ["XGROUP CREATE s g 0-0 ENTRIESREAD -1"]
    );
    let eff = effects_of(
        &mut p,
        WRITER,
        "XREADGROUP GROUP g alice COUNT 2 STREAMS s >",
    );
    assert_eq!(eff[0], "XGROUP CREATECONSUMER s g alice");
    assert!(eff[1].starts_with("XCLAIM s g alice 0 ") && eff[1].contains(" FORCE JUSTID LASTID "));
    assert!(eff[3].starts_with("XGROUP SETID s g "), "{eff:?}");
    assert_eq!(
        effects_of(&mut p, WRITER, "XTRIM s MAXLEN 100"),
        Vec::<String>::new()
    );
    p.assert_equal("streams");
    // RENAME recreates the stream, its group and its pending entries on the replica.
    p.run(WRITER, "RENAME s s2");
    p.assert_equal("after RENAME");
    p.run(WRITER, "CONFIG SET stream-node-max-entries 100");
}

/// Geo: GEOADD is ZADD of concrete scores, the STORE forms write concrete zsets; a random
/// stream over a few keys must leave the replica byte-equal, and GEOADD must travel as the
/// ZADD Redis rewrites it into (not as a whole-key rebuild).
#[test]
fn geo_effects_converge() {
    let mut p = Pair::new(19);
    let mut r = Rng(0x5eed_0019);
    let coord = |r: &mut Rng| {
        format!(
            "{:.6} {:.6}",
            13.0 + r.below(200_000) as f64 / 100_000.0,
            37.0 + r.below(200_000) as f64 / 100_000.0
        )
    };
    for step in 0..3000 {
        p.now_us += r.below(20_000);
        let g = format!("g{}", r.below(2));
        let line = match r.below(12) {
            0..=4 => {
                let n = 1 + r.below(4);
                let mut s = format!("GEOADD {g} {}", r.pick(&["", "NX", "XX", "CH", "XX CH"]));
                for _ in 0..n {
                    s += &format!(" {} m{}", coord(&mut r), r.below(40));
                }
                s
            }
            5 => format!(
                "GEOSEARCHSTORE d{} {g} FROMLONLAT {} BYRADIUS {} km {} {}",
                r.below(2),
                coord(&mut r),
                1 + r.below(150),
                r.pick(&["", "ASC", "DESC", "COUNT 3", "COUNT 2 ANY"]),
                r.pick(&["", "STOREDIST"])
            ),
            6 => format!(
                "GEOSEARCHSTORE d{} {g} FROMMEMBER m{} BYBOX {} {} km",
                r.below(2),
                r.below(40),
                1 + r.below(200),
                1 + r.below(200)
            ),
            7 => format!(
                "GEORADIUS {g} {} {} km {} d{}",
                coord(&mut r),
                1 + r.below(150),
                r.pick(&["STORE", "STOREDIST"]),
                r.below(2)
            ),
            8 => format!(
                "GEORADIUSBYMEMBER {g} m{} {} km COUNT 5 STORE d{}",
                r.below(40),
                1 + r.below(150),
                r.below(2)
            ),
            9 => format!("ZREM {g} m{} m{}", r.below(40), r.below(40)),
            10 => format!("EXPIRE d{} {}", r.below(2), 1 + r.below(3)),
            _ => format!("DEL {}", r.pick(&["g1", "d0", "d1"])),
        };
        let line = line.split_whitespace().collect::<Vec<_>>().join(" ");
        // Now and then inside MULTI/EXEC, with a second write after it.
        if r.below(10) == 0 {
            p.run(WRITER, "MULTI");
            p.run(WRITER, &line);
            p.run(WRITER, &format!("GEOADD g0 13.5 37.5 m{}", r.below(40)));
            p.run(WRITER, "EXEC");
        } else {
            p.run(WRITER, &line);
        }
        if step % 100 == 99 {
            p.cron();
            p.assert_equal(&format!("geo step {step}"));
        }
    }
    p.assert_equal("geo end");
    let names: std::collections::BTreeSet<String> = p
        .log
        .iter()
        .map(|(_, a)| s(&a[0]).to_ascii_uppercase())
        .collect();
    assert!(names.contains("ZADD"), "GEOADD travels as ZADD: {names:?}");
    assert!(!names.contains("GEOADD"), "{names:?}");
}
