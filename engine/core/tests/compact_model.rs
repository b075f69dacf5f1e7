//! The compact encodings (intset, zset listpack) against the large ones (hashtable,
//! skiplist), through `Engine::exec`: two engines run the same seeded random commands, one at
//! the default thresholds (its small keys stay compact) and one with the thresholds at 0
//! (every key is large from its first member), and every reply must be identical, apart from
//! what Redis itself orders differently (a hashtable set's members: compared sorted) and what
//! is random (SPOP/SRANDMEMBER/ZRANDMEMBER picks: only whole-set forms are used). Then the
//! conversion points exactly at the limits and one past them.

mod common;

use common::Session;

/// Two sessions: compact (defaults) and large (limits 0).
fn pair() -> (Session, Session) {
    let a = Session::new();
    let mut b = Session::new();
    for p in ["set-max-intset-entries", "zset-max-listpack-entries"] {
        assert_eq!(b.cmd(&format!("CONFIG SET {p} 0")), "+OK\r\n");
    }
    (a, b)
}

/// A RESP array reply's lines, elements sorted (a multi-bulk of bulks only).
fn sorted_reply(r: &str) -> String {
    let mut lines = r.split("\r\n");
    let head = lines.next().unwrap_or_default().to_string();
    let rest: Vec<&str> = lines.filter(|l| !l.is_empty()).collect();
    let mut items: Vec<String> = rest.chunks(2).map(|c| c.join("\r\n")).collect();
    items.sort();
    format!("{head}\r\n{}", items.join("|"))
}

struct Rng(u64);

impl Rng {
    fn next(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn enc(s: &mut Session, key: &str) -> String {
    s.cmd(&format!("OBJECT ENCODING {key}"))
}

#[test]
fn sets_reply_alike_as_intset_and_hashtable() {
    for seed in [1u64, 7, 1234] {
        let (mut a, mut b) = pair();
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let keys = ["s1", "s2", "s3"];
        let mut compact_seen = 0;
        for step in 0..3000 {
            let k = keys[rng.next(3) as usize];
            let k2 = keys[rng.next(3) as usize];
            // Integers of every width; now and then a non-integer (converts `a`'s key).
            let member = |rng: &mut Rng| match rng.next(40) {
                0 => "x".to_string(),
                1 => "007".to_string(),
                2..=9 => format!("{}", rng.next(1 << 40) as i64 - (1 << 39)),
                10..=19 => format!("{}", rng.next(200_000) as i64 - 100_000),
                _ => format!("{}", rng.next(60) as i64 - 30),
            };
            let (line, sort) = match rng.next(14) {
                0..=3 => {
                    let ms: Vec<String> = (0..=rng.next(4)).map(|_| member(&mut rng)).collect();
                    (format!("SADD {k} {}", ms.join(" ")), false)
                }
                4 | 5 => {
                    let ms: Vec<String> = (0..=rng.next(3)).map(|_| member(&mut rng)).collect();
                    (format!("SREM {k} {}", ms.join(" ")), false)
                }
                6 => (format!("SISMEMBER {k} {}", member(&mut rng)), false),
                7 => (
                    format!("SMISMEMBER {k} {} {}", member(&mut rng), member(&mut rng)),
                    false,
                ),
                8 => (format!("SMEMBERS {k}"), true),
                9 => {
                    let op = ["SINTER", "SUNION", "SDIFF"][rng.next(3) as usize];
                    (format!("{op} {k} {k2}"), true)
                }
                10 => {
                    let op = ["SINTERSTORE", "SUNIONSTORE", "SDIFFSTORE"][rng.next(3) as usize];
                    (format!("{op} {k} {k} {k2}"), false)
                }
                11 => (format!("SMOVE {k} {k2} {}", member(&mut rng)), false),
                12 => (format!("SINTERCARD 2 {k} {k2}"), false),
                _ => match rng.next(3) {
                    0 => (format!("SRANDMEMBER {k} 100000"), true),
                    1 => (format!("SSCAN {k} 0 COUNT 1000"), false),
                    _ => (format!("SCARD {k}"), false),
                },
            };
            let (ra, rb) = (a.cmd(&line), b.cmd(&line));
            if line.starts_with("SSCAN") {
                // An intset answers whole at cursor 0; a small hashtable with COUNT 1000 too.
                // `*2`, `$1`, the cursor, then the members' array.
                let (pa, pb): (Vec<&str>, Vec<&str>) = (
                    ra.splitn(4, "\r\n").collect(),
                    rb.splitn(4, "\r\n").collect(),
                );
                assert_eq!(pa[..3], pb[..3], "seed {seed} step {step}: {line}");
                assert_eq!(
                    sorted_reply(pa[3]),
                    sorted_reply(pb[3]),
                    "seed {seed} step {step}: {line}"
                );
            } else if sort {
                assert_eq!(
                    sorted_reply(&ra),
                    sorted_reply(&rb),
                    "seed {seed} step {step}: {line}"
                );
            } else {
                assert_eq!(ra, rb, "seed {seed} step {step}: {line}");
            }
            if enc(&mut a, k) == "$6\r\nintset\r\n" {
                compact_seen += 1;
                // An intset replies in ascending numeric order.
                let r = a.cmd(&format!("SMEMBERS {k}"));
                let nums: Vec<i64> = r
                    .split("\r\n")
                    .skip(2)
                    .step_by(2)
                    .filter_map(|l| l.parse().ok())
                    .collect();
                assert!(nums.windows(2).all(|w| w[0] < w[1]), "{r}");
            }
            assert_ne!(enc(&mut b, k), "$6\r\nintset\r\n");
        }
        assert!(compact_seen > 500, "seed {seed}: intsets covered");
    }
}

#[test]
fn zsets_reply_alike_as_listpack_and_skiplist() {
    for seed in [2u64, 9, 4321] {
        let (mut a, mut b) = pair();
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let keys = ["z1", "z2", "eq"];
        let mut compact_seen = 0;
        let bounds = [
            "-", "+", "[m1", "(m1", "[m5", "(m50", "[m", "[n", "(m19", "[m2",
        ];
        let sbounds = ["-inf", "+inf", "0", "(0", "2.5", "(2.5", "-3", "(7", "10"];
        for step in 0..4000 {
            let k = keys[rng.next(3) as usize];
            let k2 = keys[rng.next(3) as usize];
            let member = |rng: &mut Rng| format!("m{}", rng.next(40));
            // Scores: halves in a small range (many ties), now and then a fraction or an
            // infinity; "eq" keeps one score, so lex ranges are ordered there.
            let score = |rng: &mut Rng| -> String {
                if k == "eq" {
                    return "1".into();
                }
                match rng.next(20) {
                    0 => "inf".into(),
                    1 => "-inf".into(),
                    2 => "0.1".into(),
                    3 => "1e300".into(),
                    4 => "123456789012".into(),
                    _ => format!("{}", (rng.next(30) as f64 - 10.0) / 2.0),
                }
            };
            let b1 = bounds[rng.next(10) as usize];
            let b2 = bounds[rng.next(10) as usize];
            let s1 = sbounds[rng.next(9) as usize];
            let s2 = sbounds[rng.next(9) as usize];
            let (r1, r2) = (rng.next(12) as i64 - 6, rng.next(12) as i64 - 3);
            let line = match rng.next(24) {
                0..=4 => {
                    let n = rng.next(4) + 1;
                    let flags = ["", " NX", " XX", " GT", " LT", " CH"][rng.next(6) as usize];
                    let pairs: Vec<String> = (0..n)
                        .map(|_| format!("{} {}", score(&mut rng), member(&mut rng)))
                        .collect();
                    format!("ZADD {k}{flags} {}", pairs.join(" "))
                }
                5 => format!("ZINCRBY {k} {} {}", score(&mut rng), member(&mut rng)),
                6 => format!("ZREM {k} {} {}", member(&mut rng), member(&mut rng)),
                7 => format!("ZSCORE {k} {}", member(&mut rng)),
                8 => format!("ZMSCORE {k} {} {}", member(&mut rng), member(&mut rng)),
                9 => format!("ZRANK {k} {}", member(&mut rng)),
                10 => format!("ZREVRANK {k} {}", member(&mut rng)),
                11 => format!("ZRANGE {k} {r1} {r2} WITHSCORES"),
                12 => format!("ZREVRANGE {k} {r1} {r2} WITHSCORES"),
                13 => format!("ZRANGEBYSCORE {k} {s1} {s2} WITHSCORES LIMIT 1 5"),
                14 => format!("ZREVRANGEBYSCORE {k} {s1} {s2} WITHSCORES"),
                15 => format!("ZRANGEBYLEX {k} {b1} {b2}"),
                16 => format!("ZREVRANGEBYLEX {k} {b2} {b1} LIMIT 0 4"),
                17 => format!("ZLEXCOUNT {k} {b1} {b2}"),
                18 => format!("ZCOUNT {k} {s1} {s2}"),
                19 => match rng.next(4) {
                    0 => format!("ZPOPMIN {k} {}", rng.next(3) + 1),
                    1 => format!("ZPOPMAX {k}"),
                    2 => format!("ZREMRANGEBYRANK {k} {r1} {r2}"),
                    _ => format!("ZREMRANGEBYSCORE {k} {s1} {s2}"),
                },
                20 => match rng.next(3) {
                    0 => format!("ZREMRANGEBYLEX {k} {b1} {b2}"),
                    1 => format!("ZRANGESTORE {k2} {k} {r1} {r2}"),
                    _ => format!("ZUNIONSTORE {k2} 2 {k} {k2} WEIGHTS 2 1"),
                },
                21 => match rng.next(3) {
                    0 => format!("ZINTERSTORE {k2} 2 {k} {k2} AGGREGATE MAX"),
                    1 => format!("ZDIFF 2 {k} {k2} WITHSCORES"),
                    _ => format!("ZRANDMEMBER {k} 1000 WITHSCORES"),
                },
                22 => format!("ZCARD {k}"),
                _ => format!("ZUNION 2 {k} {k2} WITHSCORES"),
            };
            let (ra, rb) = (a.cmd(&line), b.cmd(&line));
            assert_eq!(ra, rb, "seed {seed} step {step}: {line}");
            if enc(&mut a, k) == "$8\r\nlistpack\r\n" {
                compact_seen += 1;
            }
            assert_ne!(enc(&mut b, k), "$8\r\nlistpack\r\n");
            // ZSCAN: a listpack whole at cursor 0; a skiplist by cursor; the same pairs.
            if step % 50 == 0 {
                let scan_all = |s: &mut Session| {
                    let mut cursor = "0".to_string();
                    let mut items = Vec::new();
                    loop {
                        let r = s.cmd(&format!("ZSCAN {k} {cursor} COUNT 3"));
                        let mut lines = r.split("\r\n").skip(2);
                        cursor = lines.next().unwrap().to_string();
                        let rest: Vec<&str> = lines.skip(1).filter(|l| !l.is_empty()).collect();
                        for c in rest.chunks(4) {
                            items.push(format!("{}={}", c[1], c[3]));
                        }
                        if cursor == "0" {
                            break;
                        }
                    }
                    items.sort();
                    items
                };
                assert_eq!(
                    scan_all(&mut a),
                    scan_all(&mut b),
                    "seed {seed} step {step}"
                );
            }
        }
        assert!(compact_seen > 1000, "seed {seed}: listpacks covered");
    }
}

#[test]
fn intset_converts_past_the_entry_limit_and_on_a_non_integer() {
    for limit in [1usize, 2, 5, 512] {
        let mut s = Session::new();
        s.cmd(&format!("CONFIG SET set-max-intset-entries {limit}"));
        for i in 0..limit {
            s.cmd(&format!("SADD s {}", i as i64 * 1000 - 3));
        }
        assert_eq!(
            enc(&mut s, "s"),
            "$6\r\nintset\r\n",
            "limit {limit}: at the limit"
        );
        s.cmd("SADD s -3"); // already there: no conversion
        assert_eq!(enc(&mut s, "s"), "$6\r\nintset\r\n");
        s.cmd("SADD s 99999999999");
        assert_eq!(
            enc(&mut s, "s"),
            "$9\r\nhashtable\r\n",
            "limit {limit}: one past"
        );
        assert_eq!(s.cmd("SCARD s"), format!(":{}\r\n", limit + 1));
        s.cmd("SREM s 99999999999");
        assert_eq!(enc(&mut s, "s"), "$9\r\nhashtable\r\n", "never back");
    }
    let mut s = Session::new();
    s.cmd("SADD s 1 2 3");
    s.cmd("SADD s 1.0");
    assert_eq!(enc(&mut s, "s"), "$9\r\nhashtable\r\n");
    assert_eq!(s.cmd("SISMEMBER s 2"), ":1\r\n");
    assert_eq!(s.cmd("SISMEMBER s 1.0"), ":1\r\n");
}

#[test]
fn zset_listpack_converts_past_the_entry_and_value_limits() {
    for limit in [1usize, 3, 128] {
        let mut s = Session::new();
        s.cmd(&format!("CONFIG SET zset-max-listpack-entries {limit}"));
        for i in 0..limit {
            s.cmd(&format!("ZADD z {i} m{i}"));
        }
        assert_eq!(
            enc(&mut s, "z"),
            "$8\r\nlistpack\r\n",
            "limit {limit}: at the limit"
        );
        s.cmd("ZADD z 5 m0"); // an update: no conversion
        assert_eq!(enc(&mut s, "z"), "$8\r\nlistpack\r\n");
        s.cmd("ZADD z -1 new");
        assert_eq!(
            enc(&mut s, "z"),
            "$8\r\nskiplist\r\n",
            "limit {limit}: one past"
        );
        assert_eq!(s.cmd("ZRANK z new"), ":0\r\n");
        s.cmd("ZREM z new");
        assert_eq!(enc(&mut s, "z"), "$8\r\nskiplist\r\n", "never back");
    }
    for (len, want) in [(64usize, "listpack"), (65, "skiplist")] {
        // A later member crossing zset-max-listpack-value.
        let mut s = Session::new();
        s.cmd("ZADD z 1 a");
        s.cmd(&format!("ZADD z 2 {}", "v".repeat(len)));
        assert_eq!(enc(&mut s, "z"), format!("${}\r\n{want}\r\n", want.len()));
        // ZADD creating the key with a first member of that length.
        let mut s = Session::new();
        s.cmd(&format!("ZADD z 2 {} 1 a", "v".repeat(len)));
        assert_eq!(enc(&mut s, "z"), format!("${}\r\n{want}\r\n", want.len()));
        assert_eq!(s.cmd("ZRANGE z 0 0"), "*1\r\n$1\r\na\r\n");
    }
    // A stored result of 65-byte members stays a skiplist; one of 64 becomes a listpack.
    for (len, want) in [(64usize, "listpack"), (65, "skiplist")] {
        let mut s = Session::new();
        s.cmd("CONFIG SET zset-max-listpack-entries 0");
        s.cmd(&format!("ZADD src 1 {} 2 b", "w".repeat(len)));
        s.cmd("CONFIG SET zset-max-listpack-entries 128");
        s.cmd("ZUNIONSTORE dst 1 src");
        assert_eq!(enc(&mut s, "dst"), format!("${}\r\n{want}\r\n", want.len()));
        assert_eq!(s.cmd("ZSCORE dst b"), "$1\r\n2\r\n");
    }
}
