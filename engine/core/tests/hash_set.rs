//! Hashes and sets through `Engine::exec`: O(1) memory accounting while building large
//! collections (the O(N²) HSET bug this rule comes from), linear build time, the shapes of
//! random replies (HRANDFIELD, SRANDMEMBER, SPOP), RESP3 reply types, full HSCAN/SSCAN
//! iterations, multi-key commands meeting expired keys, and keyspace events. Exact replies for
//! deterministic cases are compared with redis-server in `tests/diff/{hashes,sets}.txt`.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use engine_core::keyspace::ENTRY_OVERHEAD;
use engine_core::types::hash::FIELD_OVERHEAD;
use engine_core::types::set::MEMBER_OVERHEAD;
use engine_core::{Client, Proto};

mod common;

use common::{Session, T0};

/// Runs a space-separated command and parses its reply (exactly one).
trait Frames {
    fn frame(&mut self, line: &str) -> Frame;
}

impl Frames for Session {
    fn frame(&mut self, line: &str) -> Frame {
        let argv: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        let (out, _) = self.raw(&argv);
        let (f, used) = parse(&out);
        assert_eq!(used, out.len(), "exactly one reply to {line:?}");
        f
    }
}

/// A parsed reply (enough RESP2/RESP3 for these tests).
#[derive(Debug, Clone, PartialEq)]
enum Frame {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Vec<u8>),
    Null,
    /// `*` array.
    Array(Vec<Frame>),
    /// `~` set.
    Set(Vec<Frame>),
    /// `%` map, flattened.
    Map(Vec<Frame>),
}

impl Frame {
    fn items(&self) -> &[Frame] {
        match self {
            Frame::Array(v) | Frame::Set(v) | Frame::Map(v) => v,
            other => panic!("not an aggregate: {other:?}"),
        }
    }

    fn bulk(&self) -> &[u8] {
        match self {
            Frame::Bulk(b) => b,
            other => panic!("not a bulk string: {other:?}"),
        }
    }

    fn int(&self) -> i64 {
        match self {
            Frame::Int(n) => *n,
            other => panic!("not an integer: {other:?}"),
        }
    }
}

fn parse(buf: &[u8]) -> (Frame, usize) {
    let eol = buf.windows(2).position(|w| w == b"\r\n").expect("CRLF");
    let line = std::str::from_utf8(&buf[1..eol]).expect("utf8 header");
    let rest = eol + 2;
    let agg = |n: usize, mut pos: usize| {
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            let (f, used) = parse(&buf[pos..]);
            v.push(f);
            pos += used;
        }
        (v, pos)
    };
    match buf[0] {
        b'+' => (Frame::Simple(line.into()), rest),
        b'-' => (Frame::Error(line.into()), rest),
        b':' => (Frame::Int(line.parse().unwrap()), rest),
        b'_' => (Frame::Null, rest),
        b'$' => {
            let n: i64 = line.parse().unwrap();
            if n < 0 {
                return (Frame::Null, rest);
            }
            let n = n as usize;
            (Frame::Bulk(buf[rest..rest + n].to_vec()), rest + n + 2)
        }
        b'*' => {
            let n: i64 = line.parse().unwrap();
            if n < 0 {
                return (Frame::Null, rest);
            }
            let (v, end) = agg(n as usize, rest);
            (Frame::Array(v), end)
        }
        b'~' => {
            let (v, end) = agg(line.parse().unwrap(), rest);
            (Frame::Set(v), end)
        }
        b'%' => {
            let n: usize = line.parse().unwrap();
            let (v, end) = agg(2 * n, rest);
            (Frame::Map(v), end)
        }
        t => panic!("unexpected reply type {}", t as char),
    }
}

/// Builds one collection with `n` pipelined-style commands (one element each) and returns the
/// best time of `batches` runs of 1000 commands near the start and near the end.
fn build_and_time(
    s: &mut Session,
    n: usize,
    mut argv_for: impl FnMut(usize) -> Vec<Vec<u8>>,
    mut check: impl FnMut(&mut Session, usize),
) -> (Duration, Duration) {
    const BATCH: usize = 1000;
    let mut first = Duration::MAX;
    let mut last = Duration::MAX;
    let mut i = 0;
    while i < n {
        let start = Instant::now();
        for j in i..(i + BATCH).min(n) {
            let argv = argv_for(j);
            let refs: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
            let (out, _) = s.raw(&refs);
            assert_eq!(out, b":1\r\n", "element {j}");
        }
        let took = start.elapsed();
        // Batches 1..=5 (after one warm-up batch) and the last five.
        if (BATCH..6 * BATCH).contains(&i) {
            first = first.min(took);
        }
        if i + 5 * BATCH >= n {
            last = last.min(took);
        }
        i += BATCH;
        check(s, i.min(n));
    }
    (first, last)
}

#[test]
fn building_a_100k_field_hash_is_linear_and_accounted_exactly() {
    const N: usize = 100_000;
    let mut s = Session::new();
    let field = |j: usize| format!("field:{j}").into_bytes();
    let value = |j: usize| format!("v{}", j * 7).into_bytes();
    let mut expected = b"big".len() + ENTRY_OVERHEAD;
    let mut counted = 0;
    let (first, last) = build_and_time(
        &mut s,
        N,
        |j| vec![b"HSET".to_vec(), b"big".to_vec(), field(j), value(j)],
        |s, upto| {
            // The keyspace's incremental figure equals the sum computed here, independently.
            while counted < upto {
                expected += field(counted).len() + value(counted).len() + FIELD_OVERHEAD;
                counted += 1;
            }
            assert_eq!(
                s.engine.dataset_bytes() as usize,
                expected,
                "after {upto} fields"
            );
        },
    );
    assert_eq!(s.frame("HLEN big"), Frame::Int(N as i64));
    // Quadratic work would make the last batch ~100× slower than the first; allow noise.
    assert!(
        last <= first * 8 + Duration::from_millis(20),
        "first 1000 HSETs {first:?}, last 1000 {last:?}"
    );

    // Overwrites, deletions and HINCRBY* keep the figure exact too.
    s.frame("HSET big field:5 a-much-longer-value-than-before");
    expected = expected - value(5).len() + "a-much-longer-value-than-before".len();
    s.frame("HDEL big field:6 field:7 nosuch");
    expected -= field(6).len() + value(6).len() + FIELD_OVERHEAD;
    expected -= field(7).len() + value(7).len() + FIELD_OVERHEAD;
    s.frame("HINCRBY big counter 1000");
    expected += "counter".len() + "1000".len() + FIELD_OVERHEAD;
    s.frame("HINCRBYFLOAT big counter 0.5");
    expected += "1000.5".len() - "1000".len();
    assert_eq!(s.engine.dataset_bytes() as usize, expected);
    s.frame("DEL big");
    assert_eq!(s.engine.dataset_bytes(), 0);
}

#[test]
fn building_a_100k_member_set_is_linear_and_accounted_exactly() {
    const N: usize = 100_000;
    let mut s = Session::new();
    let member = |j: usize| format!("member-{j}").into_bytes();
    let mut expected = b"bigset".len() + ENTRY_OVERHEAD;
    let mut counted = 0;
    let (first, last) = build_and_time(
        &mut s,
        N,
        |j| vec![b"SADD".to_vec(), b"bigset".to_vec(), member(j)],
        |s, upto| {
            while counted < upto {
                expected += member(counted).len() + MEMBER_OVERHEAD;
                counted += 1;
            }
            assert_eq!(s.engine.dataset_bytes() as usize, expected);
        },
    );
    assert!(
        last <= first * 8 + Duration::from_millis(20),
        "first 1000 SADDs {first:?}, last 1000 {last:?}"
    );
    // SREM and SPOP keep it exact (SPOP's members are known from its reply).
    s.frame("SREM bigset member-1 member-2 nosuch");
    expected -= 2 * (b"member-1".len() + MEMBER_OVERHEAD);
    assert_eq!(s.engine.dataset_bytes() as usize, expected);
    let popped = s.frame("SPOP bigset 10");
    for m in popped.items() {
        expected -= m.bulk().len() + MEMBER_OVERHEAD;
    }
    assert_eq!(s.engine.dataset_bytes() as usize, expected);
    s.frame("DEL bigset");
    assert_eq!(s.engine.dataset_bytes(), 0);
}

#[test]
fn random_replies_have_the_right_shape() {
    let mut s = Session::new();
    s.frame("HSET h a 1 b 2 c 3 d 4 e 5");
    s.frame("SADD s a b c d e");
    let hash: HashMap<&[u8], &[u8]> = [
        (&b"a"[..], &b"1"[..]),
        (b"b", b"2"),
        (b"c", b"3"),
        (b"d", b"4"),
        (b"e", b"5"),
    ]
    .into();
    let members: HashSet<&[u8]> = [&b"a"[..], b"b", b"c", b"d", b"e"].into();
    let mut seen_fields = HashSet::new();
    for _ in 0..200 {
        // Positive count: distinct, from the collection.
        for count in 1..5 {
            let r = s.frame(&format!("HRANDFIELD h {count}"));
            let got: HashSet<&[u8]> = r.items().iter().map(Frame::bulk).collect();
            assert_eq!(got.len(), count, "distinct fields");
            assert!(got.iter().all(|f| hash.contains_key(f)));
            seen_fields.extend(got.iter().map(|f| f.to_vec()));

            let r = s.frame(&format!("SRANDMEMBER s {count}"));
            let got: HashSet<&[u8]> = r.items().iter().map(Frame::bulk).collect();
            assert_eq!(got.len(), count, "distinct members");
            assert!(got.iter().all(|m| members.contains(m)));
        }
        // WITHVALUES, RESP2: flat field, value pairs that belong together.
        let r = s.frame("HRANDFIELD h 3 WITHVALUES");
        assert_eq!(r.items().len(), 6);
        for pair in r.items().chunks(2) {
            assert_eq!(hash[pair[0].bulk()], pair[1].bulk());
        }
    }
    assert_eq!(seen_fields.len(), 5, "every field gets picked");

    // Negative count: exactly |count| elements, repeats allowed (and, with 5 elements and 100
    // draws, certain).
    let r = s.frame("HRANDFIELD h -100");
    assert_eq!(r.items().len(), 100);
    let distinct: HashSet<&[u8]> = r.items().iter().map(Frame::bulk).collect();
    assert!(distinct.len() <= 5 && distinct.len() > 1);
    let r = s.frame("SRANDMEMBER s -100");
    assert_eq!(r.items().len(), 100);
    assert!(r.items().iter().all(|m| members.contains(m.bulk())));
    let r = s.frame("HRANDFIELD h -7 WITHVALUES");
    assert_eq!(r.items().len(), 14);

    // Single forms.
    for _ in 0..50 {
        assert!(hash.contains_key(s.frame("HRANDFIELD h").bulk()));
        assert!(members.contains(s.frame("SRANDMEMBER s").bulk()));
    }

    // A negative count too large to stream is refused, not attempted.
    assert_eq!(
        s.frame("SRANDMEMBER s -9223372036854775807"),
        Frame::Error("ERR value is out of range".into())
    );
    assert_eq!(
        s.frame("HRANDFIELD h -4611686018427387903 WITHVALUES"),
        Frame::Error("ERR value is out of range".into())
    );

    // RESP3: WITHVALUES pairs are arrays of two; SRANDMEMBER stays an array.
    s.client.proto = Proto::Resp3;
    let r = s.frame("HRANDFIELD h 2 WITHVALUES");
    assert!(matches!(r, Frame::Array(_)));
    assert_eq!(r.items().len(), 2);
    for pair in r.items() {
        assert!(matches!(pair, Frame::Array(v) if v.len() == 2));
        assert_eq!(hash[pair.items()[0].bulk()], pair.items()[1].bulk());
    }
    let r = s.frame("HRANDFIELD h -3 WITHVALUES");
    assert_eq!(r.items().len(), 3);
    assert!(matches!(s.frame("SRANDMEMBER s 2"), Frame::Array(v) if v.len() == 2));
    assert!(matches!(s.frame("HGETALL h"), Frame::Map(v) if v.len() == 10));
    assert!(matches!(s.frame("SMEMBERS s"), Frame::Set(v) if v.len() == 5));
    assert!(matches!(s.frame("SUNION s nokey"), Frame::Set(v) if v.len() == 5));
}

#[test]
fn spop_removes_exactly_what_it_returns() {
    let mut s = Session::new();
    for round in 0..20 {
        let n = 50;
        let args: Vec<String> = (0..n).map(|i| format!("m{i}")).collect();
        s.frame(&format!("SADD p {}", args.join(" ")));
        let mut left: HashSet<Vec<u8>> = args.iter().map(|a| a.as_bytes().to_vec()).collect();
        // Counts below a third of the size and above it use different samplers.
        for count in [3, 20, 1] {
            let r = s.frame(&format!("SPOP p {count}"));
            assert_eq!(r.items().len(), count, "round {round}");
            for m in r.items() {
                assert!(left.remove(m.bulk()), "popped twice or never there");
                assert_eq!(
                    s.frame(&format!(
                        "SISMEMBER p {}",
                        String::from_utf8_lossy(m.bulk())
                    )),
                    Frame::Int(0)
                );
            }
            assert_eq!(s.frame("SCARD p").int(), left.len() as i64);
        }
        let one = s.frame("SPOP p");
        assert!(left.remove(one.bulk()));
        // The rest, in one go; then the key is gone.
        let r = s.frame("SPOP p 1000");
        assert_eq!(r.items().len(), left.len());
        assert_eq!(s.frame("EXISTS p"), Frame::Int(0));
        assert_eq!(s.engine.dataset_bytes(), 0);
    }
    s.client.proto = Proto::Resp3;
    s.frame("SADD p a b c");
    assert!(matches!(s.frame("SPOP p 2"), Frame::Set(v) if v.len() == 2));
}

#[test]
fn full_scans_return_every_element_of_large_collections() {
    let mut s = Session::new();
    let fields: Vec<String> = (0..1000).map(|i| format!("f{i}")).collect();
    for chunk in fields.chunks(100) {
        let pairs: Vec<String> = chunk.iter().map(|f| format!("{f} v{f}")).collect();
        s.frame(&format!("HSET h {}", pairs.join(" ")));
        s.frame(&format!("SADD s {}", chunk.join(" ")));
    }
    for (cmd, stride) in [("HSCAN h", 2), ("SSCAN s", 1)] {
        let mut seen = HashSet::new();
        let mut cursor = "0".to_string();
        let mut calls = 0;
        loop {
            let r = s.frame(&format!("{cmd} {cursor} COUNT 37"));
            let items = r.items();
            cursor = String::from_utf8(items[0].bulk().to_vec()).unwrap();
            let page = items[1].items();
            assert!(page.len() <= 37 * stride);
            for el in page.chunks(stride) {
                seen.insert(el[0].bulk().to_vec());
                if stride == 2 {
                    assert_eq!(el[1].bulk(), [b"v", el[0].bulk()].concat());
                }
            }
            calls += 1;
            assert!(calls < 1000, "{cmd} must end");
            if cursor == "0" {
                break;
            }
        }
        assert_eq!(seen.len(), 1000, "{cmd}");
        assert!(calls > 1, "{cmd}: a hashtable pages");
    }
}

#[test]
fn multi_key_commands_survive_expired_keys_moving_entries() {
    let mut s = Session::new();
    // `a` sits at position 0 and expires; deleting it moves the last entry into its place.
    s.frame("SADD a 1");
    s.frame("SADD b 2 3");
    s.frame("PEXPIRE a 10");
    s.now_us += 20_000;
    assert_eq!(s.frame("SMOVE b a 2"), Frame::Int(1));
    assert_eq!(s.frame("SMEMBERS a").items(), [Frame::Bulk(b"2".to_vec())]);
    assert_eq!(s.frame("SMEMBERS b").items(), [Frame::Bulk(b"3".to_vec())]);

    s.frame("SADD x 1 2");
    s.frame("SADD y 2 3");
    s.frame("SADD z 9");
    s.frame("PEXPIRE x 10");
    s.now_us += 20_000;
    assert_eq!(s.frame("SUNION x y z").items().len(), 3);
    assert_eq!(s.frame("SINTERSTORE y y z"), Frame::Int(0));
    assert_eq!(s.frame("EXISTS y"), Frame::Int(0));
    s.frame("SADD y 2 3");
    s.frame("SADD x 3");
    s.frame("PEXPIRE y 10");
    s.now_us += 20_000;
    assert_eq!(s.frame("SDIFFSTORE z x y"), Frame::Int(1));
    assert_eq!(s.frame("SMEMBERS z").items(), [Frame::Bulk(b"3".to_vec())]);
    assert_eq!(s.frame("SINTERCARD 2 x z"), Frame::Int(1));
}

#[test]
fn empty_collections_never_stay_in_the_keyspace() {
    let mut s = Session::new();
    s.frame("HSET h a 1");
    s.frame("HDEL h a");
    s.frame("SADD s a");
    s.frame("SREM s a");
    s.frame("SADD p a");
    s.frame("SPOP p");
    s.frame("SADD m a");
    s.frame("SMOVE m n a");
    s.frame("SUNIONSTORE st nokey");
    assert_eq!(s.frame("DBSIZE"), Frame::Int(1), "only n remains");
    assert_eq!(s.frame("SMEMBERS n").items(), [Frame::Bulk(b"a".to_vec())]);
    // Failed increments do not create anything.
    s.frame("HSET h2 s abc");
    assert!(matches!(s.frame("HINCRBY h3 f x"), Frame::Error(_)));
    assert!(matches!(s.frame("HINCRBYFLOAT h3 f inf"), Frame::Error(_)));
    assert_eq!(s.frame("EXISTS h3"), Frame::Int(0));
}

#[test]
fn every_change_is_announced_with_redis_event_names() {
    let mut s = Session::new();
    assert_eq!(
        s.frame("CONFIG SET notify-keyspace-events KEA"),
        Frame::Simple("OK".into())
    );
    let mut sub = Client {
        id: 2,
        created_us: T0,
        ..Client::default()
    };
    let mut out = Vec::new();
    s.engine.exec(
        &mut sub,
        &[b"PSUBSCRIBE", b"__keyevent@0__:*"],
        s.now_us,
        &mut out,
    );
    let events = |s: &mut Session, line: &str| -> Vec<String> {
        s.frame(line);
        let mut ds = Vec::new();
        s.engine.take_deliveries(&mut ds);
        let mut names = Vec::new();
        for d in ds.iter().filter(|d| d.client_id == 2) {
            let mut pos = 0;
            while pos < d.bytes.len() {
                let (f, used) = parse(&d.bytes[pos..]);
                pos += used;
                // pmessage, pattern, channel, key
                let channel = String::from_utf8_lossy(f.items()[2].bulk()).into_owned();
                let key = String::from_utf8_lossy(f.items()[3].bulk()).into_owned();
                names.push(format!(
                    "{}:{key}",
                    channel.trim_start_matches("__keyevent@0__:")
                ));
            }
        }
        names
    };
    let cases: &[(&str, &[&str])] = &[
        ("HSET h a 1 b 2", &["hset:h"]),
        ("HSETNX h a 1", &[]),
        ("HSETNX h c 3", &["hset:h"]),
        ("HMSET h a 5", &["hset:h"]),
        ("HINCRBY h n 1", &["hincrby:h"]),
        ("HINCRBYFLOAT h n 1.5", &["hincrbyfloat:h"]),
        ("HDEL h zz", &[]),
        ("HDEL h a b c n", &["hdel:h", "del:h"]),
        ("SADD s 1 2", &["sadd:s"]),
        ("SADD s 1", &[]),
        ("SREM s 1", &["srem:s"]),
        ("SMOVE s t 2", &["srem:s", "del:s", "sadd:t"]),
        ("SADD u 2 3", &["sadd:u"]),
        ("SMOVE u t 2", &["srem:u"]),
        ("SPOP u", &["spop:u", "del:u"]),
        ("SINTERSTORE d t t", &["sinterstore:d"]),
        ("SUNIONSTORE d t nokey", &["sunionstore:d"]),
        ("SDIFFSTORE d t", &["sdiffstore:d"]),
        ("SDIFFSTORE d t t", &["del:d"]),
        ("SDIFFSTORE d t t", &[]),
        ("SADD p a b c", &["sadd:p"]),
        ("SPOP p 2", &["spop:p"]),
        ("SPOP p 5", &["spop:p", "del:p"]),
    ];
    for (line, want) in cases {
        assert_eq!(events(&mut s, line), *want, "{line}");
    }
}
