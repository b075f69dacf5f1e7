//! Eviction quality over many hash seeds (`crate::evict`'s sampling).
//!
//! The server seeds the keyspace (hasher and sampling RNG) at random, so one end-to-end run
//! (tests/tests/eviction.rs) sees one seed. These tests replay the same workloads in-process
//! over a fixed range of seeds and require the bound for every one of them, so a sampler
//! whose quality depends on luck (or on insertion order: keys inserted together have similar
//! TTLs and LRU clocks) fails here deterministically instead of once in a few CI runs.

mod common;

use common::Session;

/// Seeds tried per workload.
const SEEDS: u64 = 300;

fn used_memory(s: &mut Session) -> u64 {
    let info = s.cmd("INFO memory");
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .expect("used_memory")
        .trim()
        .parse()
        .expect("integer")
}

/// How many of `prefix{i}` for `i` in `range` still exist.
fn alive(s: &mut Session, prefix: &str, range: std::ops::Range<u32>) -> usize {
    range
        .filter(|i| s.cmd(&format!("EXISTS {prefix}{i}")) == ":1\r\n")
        .count()
}

/// tests/tests/eviction.rs `volatile_ttl_evicts_the_keys_closest_to_expiry_first`, in process:
/// 200 keys with TTL 1000+i s interleaved with 200 without, then a limit ~100 keys lower.
#[test]
fn volatile_ttl_evicts_soonest_expiry_first_for_every_seed() {
    let v = "v".repeat(1000);
    let mut worst_late = 100;
    let mut worst_early = 0;
    let mut bad = Vec::new();
    for seed in 0..SEEDS {
        let mut s = Session::with_seed(seed);
        for i in 0..200 {
            let ttl = (1000 + i).to_string();
            s.argv(&["SET", &format!("t{i}"), &v, "EX", &ttl]);
            s.argv(&["SET", &format!("p{i}"), &v]);
        }
        let used = used_memory(&mut s);
        s.argv(&["CONFIG", "SET", "maxmemory-policy", "volatile-ttl"]);
        let limit = (used - 100 * 1100).to_string();
        s.argv(&["CONFIG", "SET", "maxmemory", &limit]);
        assert_eq!(s.argv(&["SET", "trigger", "x"]), "+OK\r\n");
        let early = alive(&mut s, "t", 0..100);
        let late = alive(&mut s, "t", 100..200);
        assert_eq!(
            alive(&mut s, "p", 0..200),
            200,
            "seed {seed}: a key without TTL"
        );
        worst_late = worst_late.min(late);
        worst_early = worst_early.max(early);
        if !(late >= 90 && early <= 30) {
            bad.push(format!(
                "seed {seed}: early {early}/100 left, late {late}/100 left"
            ));
        }
    }
    eprintln!(
        "volatile-ttl over {SEEDS} seeds: worst late {worst_late}/100, worst early {worst_early}/100"
    );
    assert!(bad.is_empty(), "{} of {SEEDS} seeds: {bad:?}", bad.len());
}

/// allkeys-lru where insertion order and LRU clock go together (keys written in time order,
/// none read): the oldest keys must go first, whatever the seed.
#[test]
fn allkeys_lru_evicts_the_oldest_writes_for_every_seed() {
    let v = "v".repeat(100);
    let mut worst = 0;
    let mut bad = Vec::new();
    for seed in 0..SEEDS {
        let mut s = Session::with_seed(seed);
        for i in 0..1000 {
            s.now_us += 20_000; // 20 ms: two LRU clock ticks per key
            s.argv(&["SET", &format!("k{i}"), &v]);
        }
        let used = used_memory(&mut s);
        s.argv(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]);
        // Room for ~500 fewer keys (~180 bytes each).
        let limit = (used - 500 * 180).to_string();
        s.argv(&["CONFIG", "SET", "maxmemory", &limit]);
        s.now_us += 20_000;
        assert_eq!(s.argv(&["SET", "trigger", "x"]), "+OK\r\n");
        // The newest quarter should survive almost entirely.
        let newest = alive(&mut s, "k", 750..1000);
        let oldest = alive(&mut s, "k", 0..250);
        worst = worst.max(250 - newest);
        if !(newest >= 235 && oldest <= 60) {
            bad.push(format!(
                "seed {seed}: newest {newest}/250 left, oldest {oldest}/250 left"
            ));
        }
    }
    eprintln!("allkeys-lru over {SEEDS} seeds: at worst {worst}/250 of the newest evicted");
    assert!(bad.is_empty(), "{} of {SEEDS} seeds: {bad:?}", bad.len());
}
