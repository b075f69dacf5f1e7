//! Bitmaps and BITFIELD through `Engine::exec`: growth bounded by `proto-max-bulk-len` (the
//! offset check, not an allocation), SETBIT's no-op case changing nothing (no dirty count,
//! no WATCH abort), keyspace events, and big strings. Exact replies for the rest are compared
//! with redis-server in `tests/diff/bitmaps.txt`.

mod common;

use common::Session;

#[test]
fn growth_is_bounded_by_proto_max_bulk_len() {
    let mut s = Session::new();
    assert_eq!(s.cmd("CONFIG SET proto-max-bulk-len 1048576"), "+OK\r\n");
    let err = "-ERR bit offset is not an integer or out of range\r\n";
    // 1 MiB = 8388608 bits: the last addressable bit is 8388607.
    assert_eq!(s.cmd("SETBIT k 8388608 1"), err);
    assert_eq!(s.cmd("GETBIT k 8388608"), err);
    assert_eq!(s.cmd("BITFIELD k SET u8 8388608 1"), err);
    assert_eq!(s.cmd("BITFIELD k SET u8 #1048576 1"), err);
    assert_eq!(s.cmd("EXISTS k"), ":0\r\n");
    assert_eq!(s.cmd("SETBIT k 8388607 1"), ":0\r\n");
    assert_eq!(s.cmd("STRLEN k"), ":1048576\r\n");
    assert_eq!(s.cmd("BITCOUNT k"), ":1\r\n");
    assert_eq!(s.cmd("BITPOS k 1"), ":8388607\r\n");
    assert_eq!(s.cmd("BITPOS k 0 -1"), ":8388600\r\n");
    assert_eq!(s.cmd("BITFIELD k SET u8 #1048575 255"), "*1\r\n:1\r\n");
    assert_eq!(s.cmd("BITPOS k 0 -1"), ":8388608\r\n", "past the end");
    assert_eq!(
        s.cmd("BITPOS k 0 -1 -1"),
        ":-1\r\n",
        "explicit end: no 0 in the range"
    );
    // #n multiplies by the width; the product is checked.
    assert_eq!(
        s.cmd("BITFIELD k GET u8 #9223372036854775807"),
        err,
        "overflowing #offset"
    );
}

#[test]
fn setbit_that_changes_nothing_is_not_a_write() {
    let mut s = Session::new();
    assert_eq!(s.cmd("SETBIT k 3 1"), ":0\r\n");
    // WATCH sees real changes only (redis signals the key only when the bit flips or the
    // string grows).
    let tx = |s: &mut Session, write: &str| -> String {
        assert_eq!(s.cmd("WATCH k"), "+OK\r\n");
        s.cmd(write);
        assert_eq!(s.cmd("MULTI"), "+OK\r\n");
        s.cmd("PING");
        s.cmd("EXEC")
    };
    assert_eq!(tx(&mut s, "SETBIT k 3 1"), "*1\r\n+PONG\r\n");
    assert_eq!(tx(&mut s, "SETBIT k 4 0"), "*1\r\n+PONG\r\n");
    assert_eq!(tx(&mut s, "BITFIELD k SET u4 0 1"), "*1\r\n+PONG\r\n");
    assert_eq!(tx(&mut s, "BITFIELD k GET u4 0"), "*1\r\n+PONG\r\n");
    assert_eq!(tx(&mut s, "SETBIT k 3 0"), "*-1\r\n");
    assert_eq!(tx(&mut s, "SETBIT k 9 0"), "*-1\r\n", "grown");
    assert_eq!(tx(&mut s, "BITFIELD k INCRBY u4 0 1"), "*-1\r\n");
    assert_eq!(s.cmd("GET k"), "$2\r\n\x10\x00\r\n");
}

#[test]
fn bitop_over_a_large_string_and_not_roundtrip() {
    let mut s = Session::new();
    let big: Vec<u8> = (0..100_003u32).map(|i| (i * 7 + 3) as u8).collect();
    let (r, _) = s.raw(&[b"SET", b"a", &big]);
    assert_eq!(r, b"+OK\r\n");
    assert_eq!(s.cmd("BITOP NOT b a"), ":100003\r\n");
    assert_eq!(s.cmd("BITOP NOT c b"), ":100003\r\n");
    let (r, _) = s.raw(&[b"GET", b"c"]);
    assert!(r.ends_with(&[&big[..], b"\r\n"].concat()));
    assert_eq!(s.cmd("BITOP XOR d a c"), ":100003\r\n");
    assert_eq!(s.cmd("BITCOUNT d"), ":0\r\n");
    let ones: u64 = big.iter().map(|b| u64::from(b.count_ones())).sum();
    assert_eq!(s.cmd("BITCOUNT a"), format!(":{ones}\r\n"));
    assert_eq!(s.cmd("BITOP OR e a b"), ":100003\r\n");
    assert_eq!(s.cmd("BITCOUNT e"), format!(":{}\r\n", 100_003 * 8));
    assert_eq!(s.cmd("BITPOS e 0"), format!(":{}\r\n", 100_003 * 8));
}

#[test]
fn keyspace_events() {
    let mut s = Session::new();
    assert_eq!(s.cmd("CONFIG SET notify-keyspace-events KEA"), "+OK\r\n");
    let mut sub = engine_core::Client {
        id: 2,
        ..Default::default()
    };
    let mut out = Vec::new();
    s.engine.exec(
        &mut sub,
        &[b"PSUBSCRIBE", b"__keyevent@0__:*"],
        s.now_us,
        &mut out,
    );
    let events = |s: &mut Session, line: &str| -> Vec<String> {
        s.cmd(line);
        let mut ds = Vec::new();
        s.engine.take_deliveries(&mut ds);
        ds.iter()
            .map(|d| String::from_utf8_lossy(&d.bytes).into_owned())
            .map(|t| t.split("__keyevent@0__:").nth(2).unwrap_or("").to_string())
            .map(|t| t.split("\r\n").next().unwrap().to_string())
            .collect()
    };
    assert_eq!(events(&mut s, "SETBIT k 1 1"), ["setbit"]);
    assert_eq!(events(&mut s, "SETBIT k 1 1"), Vec::<String>::new());
    assert_eq!(events(&mut s, "BITFIELD k INCRBY u2 0 1"), ["setbit"]);
    assert_eq!(events(&mut s, "BITFIELD k GET u2 0"), Vec::<String>::new());
    assert_eq!(events(&mut s, "BITOP NOT d k"), ["set"]);
    assert_eq!(events(&mut s, "BITOP AND d nokey"), ["del"]);
}
