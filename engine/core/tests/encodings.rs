//! OBJECT ENCODING under configured thresholds (issue 16), through `Engine::exec`: every
//! threshold from 0 to a few, for hashes, sets and sorted sets, against the rules of redis
//! 7.0's `t_hash.c` / `t_set.c` / `t_zset.c` written out here as a model; conversion only on a
//! write (never on a read or a CONFIG SET), never back; snapshots, DUMP/RESTORE and COPY;
//! strings' `embstr`/`raw`. Exact replies at the default and several configured thresholds are
//! compared with redis-server in `tests/diff/encodings.txt`.

mod common;

use common::Session;

fn enc(s: &mut Session, key: &str) -> String {
    s.cmd(&format!("OBJECT ENCODING {key}"))
}

fn bulk(text: &str) -> String {
    format!("${}\r\n{text}\r\n", text.len())
}

#[test]
fn hash_entries_threshold_from_config() {
    for limit in 0..6usize {
        let mut s = Session::new();
        assert_eq!(
            s.cmd(&format!("CONFIG SET hash-max-ziplist-entries {limit}")),
            "+OK\r\n"
        );
        for n in 1..=limit + 2 {
            s.cmd(&format!("HSET h f{n} v"));
            // redis `hashTypeSet`: converted once the length passes the limit, for good.
            let want = if n > limit { "hashtable" } else { "listpack" };
            assert_eq!(enc(&mut s, "h"), bulk(want), "limit {limit}, {n} fields");
        }
        s.cmd("HDEL h f1");
        assert_eq!(enc(&mut s, "h"), bulk("hashtable"), "never back");
    }
}

#[test]
fn hash_value_threshold_checks_every_argument_first() {
    let mut s = Session::new();
    s.cmd("CONFIG SET hash-max-listpack-value 3");
    s.cmd("HSET a f abc");
    assert_eq!(enc(&mut s, "a"), bulk("listpack"));
    s.cmd("HSET b f abcd");
    assert_eq!(enc(&mut s, "b"), bulk("hashtable"));
    s.cmd("HSET c abcd v");
    assert_eq!(enc(&mut s, "c"), bulk("hashtable"));
    // The long value is overwritten by the short one in the same command, but Redis looks at
    // every argument before setting any (`hashTypeTryConversion`).
    s.cmd("HSET d f abcd f x");
    assert_eq!(enc(&mut s, "d"), bulk("hashtable"));
    assert_eq!(s.cmd("HGET d f"), bulk("x"));
    // HINCRBY's result is checked as it is stored (`hashTypeSet`).
    s.cmd("HSET e n 999");
    s.cmd("HINCRBY e n 1");
    assert_eq!(enc(&mut s, "e"), bulk("hashtable"));
}

#[test]
fn set_intset_threshold_from_config() {
    for limit in 0..6usize {
        let mut s = Session::new();
        s.cmd(&format!("CONFIG SET set-max-intset-entries {limit}"));
        for n in 1..=limit + 2 {
            s.cmd(&format!("SADD s {n}"));
            let want = if n > limit { "hashtable" } else { "intset" };
            assert_eq!(enc(&mut s, "s"), bulk(want), "limit {limit}, {n} members");
        }
    }
    let mut s = Session::new();
    s.cmd("SADD s 1 2 x");
    assert_eq!(enc(&mut s, "s"), bulk("hashtable"));
    s.cmd("SREM s x");
    assert_eq!(enc(&mut s, "s"), bulk("hashtable"), "never back");
}

#[test]
fn set_results_are_built_from_an_empty_intset() {
    let mut s = Session::new();
    s.cmd("CONFIG SET set-max-intset-entries 2");
    s.cmd("SADD a 1 2 3 x");
    s.cmd("SADD b 1 2 y");
    s.cmd("SINTERSTORE d a b");
    assert_eq!(enc(&mut s, "d"), bulk("intset"));
    s.cmd("SUNIONSTORE d a");
    assert_eq!(enc(&mut s, "d"), bulk("hashtable"));
    s.cmd("SDIFFSTORE d a x");
    assert_eq!(enc(&mut s, "d"), bulk("hashtable"));
    s.cmd("SREM a x 3");
    s.cmd("SDIFFSTORE d a y");
    assert_eq!(enc(&mut s, "d"), bulk("intset"));
    // SPOP leaving few members builds a new set of them: its encoding is decided afresh.
    s.cmd("CONFIG SET set-max-intset-entries 512");
    s.cmd("SADD p x 1 2 3 4 5 6 7 8 9 10");
    s.cmd("SREM p x");
    assert_eq!(enc(&mut s, "p"), bulk("hashtable"));
    s.cmd("SPOP p 9");
    assert_eq!(enc(&mut s, "p"), bulk("intset"));
}

#[test]
fn zset_thresholds_from_config() {
    for limit in 0..6usize {
        let mut s = Session::new();
        s.cmd(&format!("CONFIG SET zset-max-ziplist-entries {limit}"));
        for n in 1..=limit + 2 {
            s.cmd(&format!("ZADD z {n} m{n}"));
            let want = if n > limit { "skiplist" } else { "listpack" };
            assert_eq!(enc(&mut s, "z"), bulk(want), "limit {limit}, {n} members");
        }
    }
    let mut s = Session::new();
    s.cmd("CONFIG SET zset-max-listpack-value 2");
    s.cmd("ZADD a 1 ab");
    assert_eq!(enc(&mut s, "a"), bulk("listpack"));
    s.cmd("ZADD a 1 abc");
    assert_eq!(enc(&mut s, "a"), bulk("skiplist"));
    s.cmd("ZREM a abc");
    assert_eq!(enc(&mut s, "a"), bulk("skiplist"), "never back");
    // A stored result that fits turns into a listpack (`zsetConvertToListpackIfNeeded`).
    s.cmd("ZUNIONSTORE d 1 a");
    assert_eq!(enc(&mut s, "d"), bulk("listpack"));
    // SORT turns the sorted set it sorts into a skiplist.
    s.cmd("ZADD n 1 3 2 1");
    s.cmd("SORT n");
    assert_eq!(enc(&mut s, "n"), bulk("skiplist"));
}

#[test]
fn lowering_a_limit_converts_at_the_next_write_only() {
    let mut s = Session::new();
    s.cmd("HSET h a 1 b 2 c 3");
    s.cmd("ZADD z 1 a 2 b 3 c");
    s.cmd("SADD s 1 2 3");
    s.cmd(
        "CONFIG SET hash-max-listpack-entries 1 zset-max-listpack-entries 1 set-max-intset-entries 1",
    );
    for (k, e) in [("h", "listpack"), ("z", "listpack"), ("s", "intset")] {
        assert_eq!(enc(&mut s, k), bulk(e), "{k}: CONFIG SET converts nothing");
    }
    s.cmd("HGET h a");
    s.cmd("ZSCORE z a");
    s.cmd("SISMEMBER s 1");
    assert_eq!(
        enc(&mut s, "h"),
        bulk("listpack"),
        "a read converts nothing"
    );
    s.cmd("HSET h a 9");
    s.cmd("ZADD z 1 d");
    s.cmd("SADD s 4");
    assert_eq!(enc(&mut s, "h"), bulk("hashtable"));
    assert_eq!(enc(&mut s, "z"), bulk("skiplist"));
    assert_eq!(enc(&mut s, "s"), bulk("hashtable"));
}

#[test]
fn restore_and_snapshots_rebuild_under_the_limits_in_force() {
    let mut s = Session::new();
    s.cmd("HSET lp f abcdefgh");
    s.cmd("HSET ht f abcdefgh g 1");
    s.cmd("CONFIG SET hash-max-listpack-value 4");
    s.cmd("HSET ht g 123456");
    assert_eq!(enc(&mut s, "lp"), bulk("listpack"));
    assert_eq!(enc(&mut s, "ht"), bulk("hashtable"));
    let dump = |s: &mut Session, k: &str| -> Vec<u8> {
        let (out, _) = s.raw(&[b"DUMP", k.as_bytes()]);
        let head = out.iter().position(|&b| b == b'\r').expect("bulk header");
        let n: usize = std::str::from_utf8(&out[1..head]).unwrap().parse().unwrap();
        out[head + 2..head + 2 + n].to_vec()
    };
    let (lp, ht) = (dump(&mut s, "lp"), dump(&mut s, "ht"));
    // A listpack payload stays a listpack unless it has too many entries (its element sizes
    // are not looked at); a hashtable payload is built element by element under the limits.
    s.raw(&[b"RESTORE", b"lp2", b"0", &lp]);
    s.raw(&[b"RESTORE", b"ht2", b"0", &ht]);
    assert_eq!(enc(&mut s, "lp2"), bulk("listpack"));
    assert_eq!(enc(&mut s, "ht2"), bulk("hashtable"));
    s.cmd("CONFIG SET hash-max-listpack-value 64");
    s.raw(&[b"RESTORE", b"ht3", b"0", &ht]);
    assert_eq!(enc(&mut s, "ht3"), bulk("listpack"));
    s.cmd("CONFIG SET hash-max-listpack-entries 0");
    s.raw(&[b"RESTORE", b"lp3", b"0", &lp]);
    assert_eq!(enc(&mut s, "lp3"), bulk("hashtable"));

    // A snapshot holds no encodings: loading builds every value under today's limits.
    let mut t = Session::new();
    t.cmd("HSET h a 1 b 2 c 3");
    t.cmd("SADD s 1 2 3");
    t.cmd("ZADD z 1 a 2 b 3 c");
    let mut file = Vec::new();
    engine_core::snapshot::write(&t.engine, 0, &mut file).expect("written");
    let mut u = Session::new();
    u.cmd(
        "CONFIG SET hash-max-listpack-entries 2 zset-max-listpack-entries 2 set-max-intset-entries 2",
    );
    engine_core::snapshot::load(&mut u.engine, 0, &file[..]).expect("loaded");
    assert_eq!(enc(&mut u, "h"), bulk("hashtable"));
    assert_eq!(enc(&mut u, "s"), bulk("hashtable"));
    assert_eq!(enc(&mut u, "z"), bulk("skiplist"));
}

#[test]
fn strings_embstr_until_changed_in_place() {
    let mut s = Session::new();
    s.cmd("SET a abc");
    assert_eq!(enc(&mut s, "a"), bulk("embstr"));
    s.cmd("APPEND a d");
    assert_eq!(enc(&mut s, "a"), bulk("raw"));
    s.cmd("COPY a b");
    assert_eq!(enc(&mut s, "b"), bulk("raw"), "COPY keeps raw");
    s.cmd("SET a 12");
    assert_eq!(enc(&mut s, "a"), bulk("int"));
    s.cmd("SETRANGE a 0 3");
    assert_eq!(enc(&mut s, "a"), bulk("raw"));
    s.cmd("SET c abc");
    s.cmd("SETBIT c 1 1");
    assert_eq!(
        enc(&mut s, "c"),
        bulk("raw"),
        "SETBIT of an unchanged bit too"
    );
    s.cmd(&format!("SET d {}", "x".repeat(45)));
    assert_eq!(enc(&mut s, "d"), bulk("raw"));
    s.cmd("SET e 1.5");
    s.cmd("INCRBYFLOAT e 1");
    assert_eq!(enc(&mut s, "e"), bulk("embstr"));
}
