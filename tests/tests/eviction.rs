//! maxmemory and eviction against a real engine process (issue 7, docs/memory.md):
//! - allkeys-lru with a 20 MB limit under 100 MB of writes: `used_memory` never goes more than
//!   a few percent over the limit, keys read between the writes survive far more often than
//!   keys never read (seeded workload), RSS stays bounded, `evicted_keys` counts;
//! - volatile-ttl evicts the keys closest to expiry first; volatile-* without TTLs is
//!   noeviction; noeviction: the exact -OOM text, reads work, DEL frees memory and writes
//!   resume (the same expectations run against redis-server, so they are Redis's behaviour);
//! - `evicted` keyspace notifications.

mod common;

use common::*;
use std::time::{Duration, Instant};

const OOM: &str = "-OOM command not allowed when used memory > 'maxmemory'.\r\n";

/// The reply as raw text (`\r\n` kept); shadows `common::cmd`, which escapes it.
fn cmd(c: &mut Resp, args: &[&str]) -> String {
    String::from_utf8_lossy(&c.cmd_str(args)).into_owned()
}

/// An INFO field as an integer.
fn info_u64(c: &mut Resp, section: &str, field: &str) -> u64 {
    let info = cmd(c, &["INFO", section]);
    info.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("{field} missing in {info}"))
        .trim()
        .parse()
        .unwrap()
}

/// Sends `reqs` as one pipeline and returns the replies.
fn pipeline(c: &mut Resp, reqs: &[Vec<Vec<u8>>]) -> Vec<Vec<u8>> {
    let mut bytes = Vec::new();
    for r in reqs {
        let args: Vec<&[u8]> = r.iter().map(|a| a.as_slice()).collect();
        bytes.extend(Resp::encode(&args));
    }
    c.send_raw(&bytes);
    reqs.iter().map(|_| c.read_frame()).collect()
}

/// xorshift64*: the seeded workload.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

#[test]
fn allkeys_lru_at_20mb_under_100mb_of_writes() {
    let port = free_port();
    let engine = start_engine(port);
    let mut c = Resp::connect(port);
    let limit: u64 = 20 << 20;
    assert_eq!(
        cmd(&mut c, &["CONFIG", "SET", "maxmemory", "20mb"]),
        "+OK\r\n"
    );
    assert_eq!(
        cmd(
            &mut c,
            &["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]
        ),
        "+OK\r\n"
    );
    let mut rng = Rng(0x5EED_1234_ABCD_0001);
    let value = |rng: &mut Rng| -> Vec<u8> {
        let len = 900 + (rng.next() % 200) as usize;
        (0..len)
            .map(|i| b'a' + ((i as u64 + rng.0) % 26) as u8)
            .collect()
    };
    // 1000 hot keys (read after every batch) and 1000 cold keys (never read), ~2 MB together.
    let mut first = Vec::new();
    for i in 0..1000 {
        first.push(vec![
            b"SET".to_vec(),
            format!("hot:{i}").into_bytes(),
            value(&mut rng),
        ]);
        first.push(vec![
            b"SET".to_vec(),
            format!("cold:{i}").into_bytes(),
            value(&mut rng),
        ]);
    }
    assert!(pipeline(&mut c, &first).iter().all(|r| r == b"+OK\r\n"));
    let hot_reads: Vec<Vec<Vec<u8>>> = (0..1000)
        .map(|i| vec![b"GET".to_vec(), format!("hot:{i}").into_bytes()])
        .collect();
    // ~100 MB of filler in batches of 1000 keys (~1 MB each).
    let started = Instant::now();
    let mut written = 2u64 << 20;
    let mut max_used = 0;
    let mut batch = 0;
    while written < 100 << 20 {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "workload too slow"
        );
        let reqs: Vec<Vec<Vec<u8>>> = (0..1000)
            .map(|i| {
                let v = value(&mut rng);
                written += v.len() as u64;
                vec![b"SET".to_vec(), format!("fill:{batch}:{i}").into_bytes(), v]
            })
            .collect();
        for r in pipeline(&mut c, &reqs) {
            assert_eq!(r, b"+OK\r\n", "a write was refused");
        }
        let _ = pipeline(&mut c, &hot_reads);
        let used = info_u64(&mut c, "memory", "used_memory");
        max_used = max_used.max(used);
        assert!(
            used <= limit + limit * 3 / 100,
            "used_memory {used} more than 3% over {limit} after {written} bytes"
        );
        batch += 1;
    }
    let exists = |c: &mut Resp, prefix: &str| -> usize {
        let reqs: Vec<Vec<Vec<u8>>> = (0..1000)
            .map(|i| vec![b"EXISTS".to_vec(), format!("{prefix}:{i}").into_bytes()])
            .collect();
        pipeline(c, &reqs)
            .iter()
            .filter(|r| *r == b":1\r\n")
            .count()
    };
    let hot = exists(&mut c, "hot");
    let cold = exists(&mut c, "cold");
    let evicted = info_u64(&mut c, "stats", "evicted_keys");
    let rss_now = rss_bytes(engine.pid()).expect("VmRSS");
    eprintln!(
        "allkeys-lru: {batch} batches, max used_memory {max_used}, hot {hot}/1000, cold {cold}/1000, \
         evicted {evicted}, rss {rss_now}"
    );
    assert!(hot >= 900, "only {hot}/1000 recently read keys survived");
    assert!(cold <= 100, "{cold}/1000 never-read keys survived");
    assert!(hot >= 10 * cold.max(1), "hot {hot} vs cold {cold}");
    assert!(evicted >= 70_000, "evicted_keys {evicted}");
    // The data is ~20 MB; RSS must not track the 100 MB written.
    assert!(rss_now < 64 << 20, "RSS {rss_now} not bounded");
}

#[test]
fn noeviction_refuses_writes_keeps_reads_and_del_frees() {
    on_both(|port, name| {
        let mut c = Resp::connect(port);
        let big = "x".repeat(100_000);
        for i in 0..20 {
            assert_eq!(cmd(&mut c, &["SET", &format!("k{i}"), &big]), "+OK\r\n");
        }
        let used = info_u64(&mut c, "memory", "used_memory");
        // 200 KB of headroom: 10 KB writes succeed until the limit is crossed (Redis also
        // counts the query buffer, so the exact count differs), then every write is refused.
        let limit = (used + 200_000).to_string();
        cmd(&mut c, &["CONFIG", "SET", "maxmemory", &limit]);
        let small = "s".repeat(10_000);
        let accepted = (0..100)
            .take_while(|i| cmd(&mut c, &["SET", &format!("n{i}"), &small]) == "+OK\r\n")
            .count();
        assert!(
            (5..30).contains(&accepted),
            "{name}: {accepted} writes before OOM"
        );
        assert_eq!(cmd(&mut c, &["SET", "again", &small]), OOM, "{name}");
        assert_eq!(cmd(&mut c, &["APPEND", "n0", &small]), OOM, "{name}");
        assert_eq!(cmd(&mut c, &["GET", "k1"]).len(), big.len() + 11, "{name}");
        assert_eq!(cmd(&mut c, &["STRLEN", "k2"]), ":100000\r\n", "{name}");
        assert_eq!(cmd(&mut c, &["DEL", "k1", "k2", "k3"]), ":3\r\n", "{name}");
        assert_eq!(cmd(&mut c, &["SET", "again", &small]), "+OK\r\n", "{name}");
        assert_eq!(info_u64(&mut c, "stats", "evicted_keys"), 0, "{name}");
    });
}

#[test]
fn volatile_policies_without_ttls_behave_like_noeviction() {
    on_both(|port, name| {
        let mut c = Resp::connect(port);
        let big = "x".repeat(100_000);
        for i in 0..10 {
            cmd(&mut c, &["SET", &format!("k{i}"), &big]);
        }
        let used = info_u64(&mut c, "memory", "used_memory");
        cmd(
            &mut c,
            &["CONFIG", "SET", "maxmemory", &(used - 1000).to_string()],
        );
        for policy in [
            "volatile-lru",
            "volatile-lfu",
            "volatile-random",
            "volatile-ttl",
        ] {
            cmd(&mut c, &["CONFIG", "SET", "maxmemory-policy", policy]);
            assert_eq!(cmd(&mut c, &["SET", "x", "y"]), OOM, "{name} {policy}");
            assert_eq!(cmd(&mut c, &["DBSIZE"]), ":10\r\n", "{name} {policy}");
        }
    });
}

#[test]
fn volatile_ttl_evicts_the_keys_closest_to_expiry_first() {
    let port = free_port();
    let _engine = start_engine(port);
    let mut c = Resp::connect(port);
    let v = "v".repeat(1000);
    // 200 keys with TTL 1000+i seconds, 200 without.
    let mut reqs = Vec::new();
    for i in 0..200 {
        reqs.push(vec![
            b"SET".to_vec(),
            format!("t{i}").into_bytes(),
            v.clone().into_bytes(),
            b"EX".to_vec(),
            (1000 + i).to_string().into_bytes(),
        ]);
        reqs.push(vec![
            b"SET".to_vec(),
            format!("p{i}").into_bytes(),
            v.clone().into_bytes(),
        ]);
    }
    pipeline(&mut c, &reqs);
    let used = info_u64(&mut c, "memory", "used_memory");
    cmd(
        &mut c,
        &["CONFIG", "SET", "maxmemory-policy", "volatile-ttl"],
    );
    // Make room for ~100 fewer keys: the next write evicts about half of the TTL keys.
    cmd(
        &mut c,
        &[
            "CONFIG",
            "SET",
            "maxmemory",
            &(used - 100 * 1100).to_string(),
        ],
    );
    assert_eq!(cmd(&mut c, &["SET", "trigger", "x"]), "+OK\r\n");
    let alive = |c: &mut Resp, prefix: &str, range: std::ops::Range<i32>| -> usize {
        range
            .filter(|i| cmd(c, &["EXISTS", &format!("{prefix}{i}")]) == ":1\r\n")
            .count()
    };
    let early = alive(&mut c, "t", 0..100);
    let late = alive(&mut c, "t", 100..200);
    let persistent = alive(&mut c, "p", 0..200);
    assert_eq!(
        persistent, 200,
        "volatile-ttl never evicts keys without a TTL"
    );
    assert!(early + late < 200, "nothing evicted");
    assert!(
        late >= 90 && early <= 30,
        "soonest-expiring first: early {early}/100 left, late {late}/100 left"
    );
}

#[test]
fn evicted_keys_are_notified() {
    let port = free_port();
    let _engine = start_engine(port);
    let mut c = Resp::connect(port);
    let mut sub = Resp::connect(port);
    cmd(&mut c, &["CONFIG", "SET", "notify-keyspace-events", "Ee"]);
    sub.cmd_str(&["SUBSCRIBE", "__keyevent@0__:evicted"]);
    let v = "v".repeat(10_000);
    for i in 0..10 {
        cmd(&mut c, &["SET", &format!("k{i}"), &v]);
    }
    let used = info_u64(&mut c, "memory", "used_memory");
    cmd(
        &mut c,
        &["CONFIG", "SET", "maxmemory-policy", "allkeys-random"],
    );
    cmd(
        &mut c,
        &["CONFIG", "SET", "maxmemory", &(used - 5_000).to_string()],
    );
    assert_eq!(cmd(&mut c, &["SET", "x", "y"]), "+OK\r\n");
    let msg = String::from_utf8_lossy(&sub.read_frame()).into_owned();
    assert!(
        msg.starts_with("*3\r\n$7\r\nmessage\r\n$22\r\n__keyevent@0__:evicted\r\n$2\r\nk"),
        "{msg}"
    );
    assert_eq!(cmd(&mut c, &["DBSIZE"]), ":10\r\n");
}
