//! `maxmemory` and eviction (redis `evict.c`), access tracking for LRU/LFU, and the MEMORY
//! command.
//!
//! # The limit
//! `used_memory` = [`USED_MEMORY_STARTUP`] + the keyspace's logical estimate
//! (`Keyspace::used_bytes`, O(1)). With `maxmemory` > 0 and `used_memory > maxmemory`, the
//! dispatcher calls [`before_command`] before every command (redis `processCommand` →
//! `performEvictions`), except commands run by EXEC. It evicts until the estimate is back under
//! the limit; if nothing can be evicted (policy `noeviction`, or a `volatile-*` policy with no
//! key that has a TTL) a command flagged `denyoom` in the table, or any command queued inside
//! MULTI, is refused with [`OOM_ERROR`] (`-OOM command not allowed when used memory >
//! 'maxmemory'.`); reads and DEL still run, so memory can be freed by hand.
//!
//! # Bounded work
//! Redis bounds `performEvictions` by time (500 µs at the default tenacity) and lets the
//! command through while a timer proc continues. The core has no clock, so the bound is a key
//! count: at most [`EVICT_KEYS_PER_COMMAND`] evictions (each costing `maxmemory-samples` random
//! probes) before a command, then the command runs; [`cron`] continues with at most
//! [`EVICT_KEYS_PER_CRON`] per tick. A normal write needs one or two evictions, so the
//! estimate stays within one write's size of the limit; only a lowered `maxmemory` or a single
//! huge write leaves a backlog for cron.
//!
//! # Choosing a victim (Redis's approximations)
//! - `*-lru`, `*-lfu`, `volatile-ttl`: each round samples `maxmemory-samples` (default 5)
//!   keys of the candidate set (all keys, or those with a TTL), drawn from a pseudo-random
//!   pass over it that repeats no key before it has seen all (see [`populate_pool`] and
//!   [`Pass`] for why not redis's run of neighbours), into an eviction pool of
//!   [`EVPOOL_SIZE`] keys kept sorted by score (redis `evictionPoolPopulate`), then evicts
//!   the best-scored pool key that still exists. Score: idle time (LRU), `255 - counter` (LFU),
//!   `u64::MAX - expire_at` (TTL: soonest expiry first). The pool outlives the command, so
//!   good candidates found earlier are remembered, which is what makes 5 samples approach true
//!   LRU.
//! - `*-random`: a uniformly random key of the candidate set.
//!
//! # Access word (stored per entry by the keyspace, see `keyspace.rs`)
//! - LRU: the LRU clock, Unix ms / [`LRU_CLOCK_RESOLUTION_MS`] modulo 2^32 (Redis: seconds
//!   modulo 2^24). Idle time is the wrapping difference, right for idle times under ~497 days.
//! - LFU: `minutes (16 bits) << 8 | counter (8 bits)`, exactly Redis's layout: the counter is
//!   logarithmic (redis `LFULogIncr`: incremented with probability
//!   `1 / ((counter - LFU_INIT_VAL) * lfu-log-factor + 1)`), starts at [`LFU_INIT_VAL`] (5) for a
//!   new key, and decays by one per `lfu-decay-time` minutes since the last decrement
//!   (`LFUDecrAndReturn`). OBJECT FREQ shows the decayed counter.
//!
//! The word is reinterpreted when the policy switches between LRU and LFU, as in Redis ("LRU and
//! LFU data will take some time to adjust").
//!
//! # Evicted keys
//! Each evicted key goes through [`evicted_key`]: the `evicted` keyspace notification
//! (class `e`), WATCH invalidation (by the keyspace) and the hook for the keychange feed, which
//! must record a DEL effect for it (see the function). `INFO stats` counts them in
//! `evicted_keys`.

pub use crate::engine::MAXMEMORY_POLICIES;

use crate::args;
use crate::call::Call;
use crate::cmd::server::USED_MEMORY_STARTUP;
use crate::error::CmdError;
use crate::{Client, Engine};

/// Redis's OOM reply (`shared.oomerr`), without the leading `-`.
pub const OOM_ERROR: &str = "OOM command not allowed when used memory > 'maxmemory'.";
/// Keys in the eviction pool (redis `EVPOOL_SIZE`).
pub const EVPOOL_SIZE: usize = 16;
/// Initial LFU counter of a new key (redis `LFU_INIT_VAL`).
pub const LFU_INIT_VAL: u32 = 5;
/// Resolution of the LRU clock, ms.
pub const LRU_CLOCK_RESOLUTION_MS: u64 = 10;
/// Most keys evicted before one command runs (see the module doc, *Bounded work*).
pub const EVICT_KEYS_PER_COMMAND: usize = 1000;
/// Most keys evicted per cron tick.
pub const EVICT_KEYS_PER_CRON: usize = 5000;

/// `maxmemory-policy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Policy {
    #[default]
    NoEviction,
    AllkeysLru,
    VolatileLru,
    AllkeysLfu,
    VolatileLfu,
    AllkeysRandom,
    VolatileRandom,
    VolatileTtl,
}

impl Policy {
    /// The policy named `name` (one of `engine::MAXMEMORY_POLICIES`, lowercase).
    pub fn from_name(name: &str) -> Option<Policy> {
        Some(match name {
            "noeviction" => Policy::NoEviction,
            "allkeys-lru" => Policy::AllkeysLru,
            "volatile-lru" => Policy::VolatileLru,
            "allkeys-lfu" => Policy::AllkeysLfu,
            "volatile-lfu" => Policy::VolatileLfu,
            "allkeys-random" => Policy::AllkeysRandom,
            "volatile-random" => Policy::VolatileRandom,
            "volatile-ttl" => Policy::VolatileTtl,
            _ => return None,
        })
    }

    /// Candidates are only keys with a TTL.
    fn volatile_only(self) -> bool {
        matches!(
            self,
            Policy::VolatileLru
                | Policy::VolatileLfu
                | Policy::VolatileRandom
                | Policy::VolatileTtl
        )
    }

    fn is_lfu(self) -> bool {
        matches!(self, Policy::AllkeysLfu | Policy::VolatileLfu)
    }
}

/// How lookups stamp an entry's access word (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum AccessMode {
    #[default]
    Lru,
    Lfu {
        /// `lfu-log-factor`.
        log_factor: u32,
        /// `lfu-decay-time`, minutes (0 = never decay).
        decay_time: u32,
    },
}

/// LRU clock at `now_ms`.
pub fn lru_clock(now_ms: u64) -> u32 {
    (now_ms / LRU_CLOCK_RESOLUTION_MS) as u32
}

/// Idle time in ms of an LRU access word at `now_ms` (redis `estimateObjectIdleTime`).
pub fn lru_idle_ms(word: u32, now_ms: u64) -> u64 {
    u64::from(lru_clock(now_ms).wrapping_sub(word)) * LRU_CLOCK_RESOLUTION_MS
}

/// Minutes modulo 2^16 (redis `LFUGetTimeInMinutes`).
fn lfu_minutes(now_ms: u64) -> u32 {
    ((now_ms / 60_000) & 0xFFFF) as u32
}

/// The LFU counter of `word` after decay (redis `LFUDecrAndReturn`).
pub fn lfu_decayed(word: u32, now_ms: u64, decay_time: u32) -> u32 {
    // Redis keeps the access word in 24 bits, so the minute stamp is 16 bits; a word stamped
    // under an LRU policy (a wider clock) must not read as a later minute than the clock has.
    let ldt = (word >> 8) & 0xFFFF;
    let counter = word & 0xFF;
    let now = lfu_minutes(now_ms);
    // redis `LFUTimeElapsed`: the minute clock wraps at 65536.
    let elapsed = if now >= ldt {
        now - ldt
    } else {
        65535 - ldt + now
    };
    let periods = elapsed.checked_div(decay_time).unwrap_or(0);
    counter.saturating_sub(periods)
}

/// The access word RESTORE gives a key for `IDLETIME idle_s` / `FREQ freq` (redis
/// `objectSetLRUOrLFU`): FREQ counts under an LFU policy, IDLETIME under any other; `None`
/// keeps the new key's word.
pub fn restored_access(
    mode: AccessMode,
    now_ms: u64,
    idle_s: Option<i64>,
    freq: Option<i64>,
) -> Option<u32> {
    match mode {
        AccessMode::Lfu { .. } => freq.map(|f| lfu_minutes(now_ms) << 8 | (f as u32 & 0xFF)),
        AccessMode::Lru => idle_s.map(|s| {
            let ticks = (s as u64).saturating_mul(1000) / LRU_CLOCK_RESOLUTION_MS;
            lru_clock(now_ms).wrapping_sub(ticks as u32)
        }),
    }
}

/// redis `LFULogIncr`; `rand` is a uniform random u64.
fn lfu_log_incr(counter: u32, log_factor: u32, rand: u64) -> u32 {
    if counter >= 255 {
        return 255;
    }
    let r = (rand >> 11) as f64 / (1u64 << 53) as f64;
    let base = counter.saturating_sub(LFU_INIT_VAL) as f64;
    let p = 1.0 / (base * f64::from(log_factor) + 1.0);
    if r < p { counter + 1 } else { counter }
}

impl AccessMode {
    /// The access word of a key created at `now_ms`.
    pub fn new_key(self, now_ms: u64) -> u32 {
        match self {
            AccessMode::Lru => lru_clock(now_ms),
            AccessMode::Lfu { .. } => lfu_minutes(now_ms) << 8 | LFU_INIT_VAL,
        }
    }

    /// The access word after an access at `now_ms` (redis `updateLFU` / `LRU_CLOCK`).
    pub fn touch(self, word: u32, now_ms: u64, rand: u64) -> u32 {
        match self {
            AccessMode::Lru => lru_clock(now_ms),
            AccessMode::Lfu {
                log_factor,
                decay_time,
            } => {
                let c = lfu_decayed(word, now_ms, decay_time);
                lfu_minutes(now_ms) << 8 | lfu_log_incr(c, log_factor, rand)
            }
        }
    }
}

/// Eviction state kept by the engine.
#[derive(Debug, Default)]
pub struct Evictor {
    /// Candidates, ascending by score; the last is the best victim.
    pool: Vec<Candidate>,
    /// The sampling order of each database (see [`Pass`]), grown on first use.
    passes: Vec<Pass>,
    /// Where the random policies look first (redis `next_db`: databases take turns).
    next_db: usize,
    /// INFO `evicted_keys`.
    pub evicted_keys: u64,
}

/// An eviction pool entry. Redis copies the key; here the candidate is named by its map
/// position and the address of its key's allocation, both read from the entry itself, so
/// sampling never touches the key bytes (a cache miss per sample). A candidate whose key moved
/// (a `swap_remove` filled a hole with it) or was deleted no longer matches and is dropped:
/// only a few candidates are lost that way, and the pool refills every round.
#[derive(Debug, Clone, Copy)]
struct Candidate {
    score: u64,
    /// The database the key lives in (one pool for all of them, as in Redis).
    db: usize,
    pos: usize,
    /// The key's seeded hash: the slot at `pos` may hold another key by the time the
    /// candidate is used (Redis keeps a copy of the key for the same reason).
    key_hash: u64,
}

/// `used_memory` as INFO reports it and the limit compares.
pub fn used_memory(e: &Engine) -> u64 {
    USED_MEMORY_STARTUP + e.dataset_bytes()
}

/// Puts the keyspace's access tracking in line with the policy and LFU settings; called at
/// start and after CONFIG SET.
pub fn apply_config(e: &mut Engine) {
    let policy = Policy::from_name(e.config.maxmemory_policy).unwrap_or_default();
    e.ks.access_mode = if policy.is_lfu() {
        AccessMode::Lfu {
            log_factor: e.config.lfu_log_factor,
            decay_time: e.config.lfu_decay_time,
        }
    } else {
        AccessMode::Lru
    };
    // Scores of one policy mean nothing to another.
    e.evict.pool.clear();
}

/// What [`perform_evictions`] achieved.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Under the limit (or no limit).
    Ok,
    /// Still over, but the work bound was reached: the command runs, eviction goes on later.
    Running,
    /// Over the limit with nothing to evict.
    Fail,
}

/// Evicts keys until `used_memory <= maxmemory`, at most `max_keys` of them (redis
/// `performEvictions`).
pub fn perform_evictions(e: &mut Engine, now_ms: u64, max_keys: usize) -> Outcome {
    let limit = e.config.maxmemory;
    // Nothing is evicted, nor refused for memory, while clients are paused (redis
    // `performEvictions`: `checkClientPauseTimeoutAndReturnIfPaused`).
    if limit == 0 || e.pause.active() || used_memory(e) <= limit {
        return Outcome::Ok;
    }
    let Some(policy) = Policy::from_name(e.config.maxmemory_policy) else {
        return Outcome::Fail;
    };
    if policy == Policy::NoEviction {
        return Outcome::Fail;
    }
    // Victims come from every database; each is swapped in to be sampled or evicted, and the
    // one in use before is back at the end.
    let start_db = e.current_db();
    let mut evicted = 0;
    let mut outcome = Outcome::Ok;
    while used_memory(e) > limit {
        if evicted >= max_keys {
            outcome = Outcome::Running;
            break;
        }
        let Some(i) = pick_victim(e, policy, now_ms) else {
            outcome = Outcome::Fail;
            break;
        };
        let (key, _) = e.ks.remove_at(i);
        e.ks.tracked_by_server();
        e.evict.evicted_keys += 1;
        evicted += 1;
        evicted_key(e, &key);
    }
    e.use_db(start_db);
    outcome
}

/// Keys of database `n` the policy may evict.
fn candidates(e: &Engine, n: usize, volatile: bool) -> usize {
    let d = e.db(n);
    if volatile { d.volatile_len() } else { d.len() }
}

/// The map position of the key to evict next, with its database swapped in, or None when
/// there is no candidate in any database.
fn pick_victim(e: &mut Engine, policy: Policy, now_ms: u64) -> Option<usize> {
    let volatile = policy.volatile_only();
    let ndbs = e.databases();
    let first = (0..ndbs).find(|&n| candidates(e, n, volatile) > 0)?;
    match policy {
        Policy::AllkeysRandom | Policy::VolatileRandom => {
            let d = (0..ndbs)
                .map(|k| (e.evict.next_db + k) % ndbs)
                .find(|&n| candidates(e, n, volatile) > 0)
                .unwrap_or(first);
            e.evict.next_db = d + 1;
            e.use_db(d);
            if volatile {
                e.ks.random_volatile()
            } else {
                e.ks.random_position()
            }
        }
        _ => {
            // Bounded: each round either yields a live pool candidate or refills the pool from
            // fresh samples of every database (a sample always enters an empty pool).
            for _ in 0..EVPOOL_SIZE + 2 {
                for n in first..ndbs {
                    if candidates(e, n, volatile) > 0 {
                        e.use_db(n);
                        populate_pool(e, policy, volatile, now_ms);
                    }
                }
                while let Some(c) = e.evict.pool.pop() {
                    e.use_db(c.db);
                    if c.pos < e.ks.len()
                        && e.ks.key_hash(e.ks.key_at(c.pos)) == c.key_hash
                        && (!volatile || e.ks.expire_at(c.pos).is_some())
                    {
                        return Some(c.pos);
                    }
                }
            }
            // Unreachable with candidates > 0 (sampling always finds a live key), but never loop.
            e.use_db(first);
            if volatile {
                e.ks.random_volatile()
            } else {
                e.ks.random_position()
            }
        }
    }
}

/// Score of the entry at `i` under `policy`: higher = better victim.
fn score(e: &Engine, policy: Policy, i: usize, now_ms: u64) -> u64 {
    let (_, entry) = e.ks.get_at(i);
    match policy {
        Policy::VolatileTtl => u64::MAX - entry.expire_at().unwrap_or(u64::MAX),
        Policy::AllkeysLfu | Policy::VolatileLfu => {
            255 - u64::from(lfu_decayed(entry.access(), now_ms, e.config.lfu_decay_time))
        }
        _ => lru_idle_ms(entry.access(), now_ms),
    }
}

/// A pass over the candidate set in a pseudo-random order without repetition: the sample
/// number `k` maps to the position `perm(k)` of a random bijection of `0..2^bits`
/// (`2^bits >= n`), and positions not below the current size are skipped (cycle walking). So
/// within a pass every key is sampled once before any is sampled again, and the order has no
/// relation to insertion order. Redis draws every round afresh, so a key can go unsampled for
/// many rounds; when a burst evicts a large share of the keys, good candidates never seen stay
/// while worse ones go. Measured on the volatile-ttl workload of tests/tests/eviction.rs
/// (evict half of 200 keys with TTLs; bound: at most 10 of the 100 latest-expiring evicted),
/// engine/core/tests/eviction_quality.rs over 2000 seeds: runs of neighbours 15 % of seeds
/// failed; independent random draws (Redis's statistics) 2.3 %; these passes 0 % (worst 6
/// late keys evicted), with Redis's pool size.
///
/// Kept across rounds and commands. A new pass (new random bijection) starts when the last one
/// is used up, when the candidate set changes kind (all keys / volatile), outgrows the
/// bijection's domain or shrinks below a quarter of it (most draws would be skipped). Keys
/// move (swap_remove fills a hole with the last entry), so within a pass a moved key may be
/// seen twice or not at all: a small loss, the next pass covers it.
#[derive(Debug, Default, Clone, Copy)]
struct Pass {
    /// log2 of the bijection's domain (0 = no pass yet).
    bits: u32,
    volatile: bool,
    /// Samples drawn in this pass (`< 2^bits`).
    next: u64,
    /// Per-pass keys of the bijection: odd multipliers and offsets.
    mul: [u64; 3],
    add: [u64; 2],
}

/// Most skipped draws for one sample before falling back to an independent random position
/// (the domain is under 4× the candidate set, so a sample takes under 4 draws on average).
const PASS_MAX_SKIPS: usize = 64;

impl Pass {
    fn start(ks: &mut crate::keyspace::Keyspace, n: usize, volatile: bool) -> Pass {
        let bits = (usize::BITS - (n.max(2) - 1).leading_zeros()).max(1);
        Pass {
            bits,
            volatile,
            next: 0,
            mul: [
                ks.next_random() | 1,
                ks.next_random() | 1,
                ks.next_random() | 1,
            ],
            add: [ks.next_random(), ks.next_random()],
        }
    }

    /// The bijection of `0..2^bits`: multiply by an odd number and add (mod 2^bits) and
    /// xor-shift right, each invertible, alternated so high and low bits mix.
    fn perm(&self, k: u64) -> u64 {
        let mask = (1u64 << self.bits) - 1;
        let half = (self.bits / 2).max(1);
        let mut x = k.wrapping_mul(self.mul[0]).wrapping_add(self.add[0]) & mask;
        x ^= x >> half;
        x = x.wrapping_mul(self.mul[1]).wrapping_add(self.add[1]) & mask;
        x ^= x >> half;
        x = x.wrapping_mul(self.mul[2]) & mask;
        x ^= x >> half;
        x
    }

    /// The next sampled slot in `0..n` (`n > 0`).
    fn next(&mut self, ks: &mut crate::keyspace::Keyspace, n: usize, volatile: bool) -> usize {
        for _ in 0..PASS_MAX_SKIPS {
            let domain = 1u64 << self.bits;
            let n64 = n as u64;
            if self.bits == 0
                || self.volatile != volatile
                || self.next >= domain
                || n64 > domain
                || n64 <= domain / 4
            {
                *self = Pass::start(ks, n, volatile);
            }
            let slot = self.perm(self.next);
            self.next += 1;
            if slot < n as u64 {
                return slot as usize;
            }
        }
        bounded(ks.next_random(), n)
    }
}

/// Samples read per batch in [`populate_pool`]: their positions are drawn first and their
/// scores read in one pass, so the entries' cache misses overlap (the loads are independent).
const SAMPLE_BATCH: usize = 8;

/// A uniform position in `0..n` from a random word (Lemire's multiply-shift: no division).
fn bounded(rand: u64, n: usize) -> usize {
    ((u128::from(rand) * n as u128) >> 64) as usize
}

/// redis `evictionPoolPopulate`: samples `maxmemory-samples` keys into the sorted pool.
///
/// Samples come from a [`Pass`], whose order is unrelated to insertion order. Redis takes a run of
/// neighbouring hash buckets (`dictGetSomeKeys`), whose keys are unrelated to each other
/// because bucket order is hash order. Our positions follow insertion order (IndexMap, the
/// volatile index), so a run of neighbours would be keys written together, with near-equal
/// TTLs and LRU clocks: one round would then see one age instead of five, and volatile-ttl
/// evicted late keys whenever the early ones went unsampled (tests/tests/eviction.rs and
/// engine/core/tests/eviction_quality.rs show it).
fn populate_pool(e: &mut Engine, policy: Policy, volatile: bool, now_ms: u64) {
    let n = if volatile {
        e.ks.volatile_len()
    } else {
        e.ks.len()
    };
    if n == 0 {
        return;
    }
    let mut left = (e.config.maxmemory_samples.max(1) as usize).min(n);
    while left > 0 {
        let take = left.min(SAMPLE_BATCH);
        left -= take;
        let mut pos = [0usize; SAMPLE_BATCH];
        let db = e.current_db();
        if e.evict.passes.len() <= db {
            e.evict.passes.resize(db + 1, Pass::default());
        }
        for p in pos.iter_mut().take(take) {
            let slot = e.evict.passes[db].next(&mut e.ks, n, volatile);
            *p = if volatile {
                e.ks.volatile_position(slot)
            } else {
                slot
            };
        }
        let mut scores = [0u64; SAMPLE_BATCH];
        for k in 0..take {
            scores[k] = score(e, policy, pos[k], now_ms);
        }
        for k in 0..take {
            pool_insert(e, pos[k], scores[k]);
        }
    }
}

/// Puts the entry at `i` (of the database in use) with score `s` into the pool, unless a full
/// pool holds only better candidates.
fn pool_insert(e: &mut Engine, i: usize, s: u64) {
    let db = e.current_db();
    let pool = &mut e.evict.pool;
    if pool.len() == EVPOOL_SIZE && s <= pool[0].score {
        return; // worse than everything in a full pool
    }
    let key_hash = e.ks.key_hash(e.ks.key_at(i));
    if let Some(j) = pool.iter().position(|c| c.pos == i && c.db == db) {
        // Same position sampled again: keep the fresher reading.
        pool.remove(j);
    }
    let at = pool.partition_point(|c| c.score < s);
    pool.insert(
        at,
        Candidate {
            score: s,
            db,
            pos: i,
            key_hash,
        },
    );
    if pool.len() > EVPOOL_SIZE {
        pool.remove(0);
    }
}

/// Called for every evicted key, after it left the keyspace: the `evicted` keyspace
/// notification and the keychange feed's DEL effect.
///
/// The keychange feed's DEL effect comes from the same notification: `notify::notify`
/// hands `class::EVICTED` keys to `crate::effect::note_changed`, which records `DEL key`
/// (DESIGN.md: "expiry/eviction → DEL"). Anything else that must learn of evictions hooks here.
pub fn evicted_key(e: &mut Engine, key: &[u8]) {
    crate::notify::notify(e, crate::notify::class::EVICTED, "evicted", key);
}

/// Before a command (not one run by EXEC): evicts if over the limit, and tells whether the
/// command must be refused with [`OOM_ERROR`] (redis `processCommand`'s maxmemory block).
pub fn before_command(
    e: &mut Engine,
    client: &Client,
    spec: &crate::command::CommandSpec,
    now_ms: u64,
) -> bool {
    if e.config.maxmemory == 0 {
        return false;
    }
    let out_of_memory = perform_evictions(e, now_ms, EVICT_KEYS_PER_COMMAND) == Outcome::Fail;
    e.pre_command_oom = out_of_memory;
    if !out_of_memory {
        return false;
    }
    // Queuing inside MULTI may grow memory without bound: refused too, except what ends it.
    let in_multi =
        client.tx.in_multi() && !matches!(spec.name, "exec" | "discard" | "quit" | "reset");
    spec.has_flag(crate::command::Flags::DENYOOM) || in_multi
}

/// Continues eviction left over by the per-command bound (called from `Engine::cron`).
pub fn cron(e: &mut Engine, now_ms: u64) {
    if e.config.maxmemory != 0 {
        perform_evictions(e, now_ms, EVICT_KEYS_PER_CRON);
    }
}

// ---------------------------------------------------------------------------------------------
// OBJECT FREQ / IDLETIME figures
// ---------------------------------------------------------------------------------------------

/// OBJECT FREQ of the entry at `i`: the decayed LFU counter.
pub fn object_freq(e: &Engine, i: usize, now_ms: u64) -> u32 {
    lfu_decayed(e.ks.get_at(i).1.access(), now_ms, e.config.lfu_decay_time)
}

/// OBJECT IDLETIME of the entry at `i`, seconds.
pub fn object_idletime(e: &Engine, i: usize, now_ms: u64) -> u64 {
    lru_idle_ms(e.ks.get_at(i).1.access(), now_ms) / 1000
}

// ---------------------------------------------------------------------------------------------
// MEMORY
// ---------------------------------------------------------------------------------------------

/// `MEMORY USAGE key [SAMPLES count]` → bytes accounted for the key (key + value + entry
/// overhead; collections keep their own byte count, so no sampling is needed and `count` is
/// only validated), or null.
pub fn memory_usage(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let mut j = 3;
    while j < c.argv.len() {
        if args::is(c.argv[j], "samples") && j + 1 < c.argv.len() {
            let n = args::parse_i64(c.argv[j + 1]).ok_or(CmdError::NotInteger)?;
            if n < 0 {
                return Err(CmdError::Syntax);
            }
            j += 2;
        } else {
            return Err(CmdError::Syntax);
        }
    }
    match e.ks.lookup_notouch(c.argv[2], c.now_ms) {
        Some(i) => {
            let n = e.ks.entry_bytes_at(i);
            c.w().integer(n as i64);
        }
        None => c.w().null(),
    }
    Ok(())
}

/// `MEMORY STATS` → a map of Redis's main figures (those this engine knows).
pub fn memory_stats(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let used = used_memory(e);
    let keys = (0..e.databases())
        .map(|n| e.db(n).len() as u64)
        .sum::<u64>();
    let dataset = e.dataset_bytes();
    let rss = e.host.rss_bytes;
    let ints: [(&str, u64); 7] = [
        ("peak.allocated", e.used_memory_peak.max(used)),
        ("total.allocated", used),
        ("startup.allocated", USED_MEMORY_STARTUP),
        ("keys.count", keys),
        ("keys.bytes-per-key", dataset.checked_div(keys).unwrap_or(0)),
        ("dataset.bytes", dataset),
        ("fragmentation.bytes", rss.saturating_sub(used)),
    ];
    let mut w = c.w();
    w.map(ints.len() + 2);
    for (k, v) in ints {
        w.bulk(k.as_bytes());
        w.integer(v as i64);
    }
    w.bulk(b"dataset.percentage");
    w.double_text(format!("{}", dataset as f64 * 100.0 / used.max(1) as f64).as_bytes());
    w.bulk(b"fragmentation");
    w.double_text(format!("{}", rss as f64 / used.max(1) as f64).as_bytes());
    Ok(())
}

/// `MEMORY DOCTOR` → a short report (Redis's wording for the cases it shares).
pub fn memory_doctor(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let text: &[u8] = if used_memory(e) < 5 * 1024 * 1024 {
        b"Hi Sam, this instance is empty or is using very little memory, my issues detector can't be used in these conditions. Please, leave for your mission on Earth and fill it with some data. The new Sam and I will be back to our programming as soon as I finished rebooting."
    } else {
        b"Hi Sam, I can't find any memory issue in your instance. I can only account for what occurs on this base."
    };
    c.w().verbatim(text);
    Ok(())
}

/// `MEMORY MALLOC-STATS` → what Redis answers for an allocator without a stats report.
pub fn memory_malloc_stats(_e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    c.w()
        .verbatim(b"Stats not supported for the current memory allocator");
    Ok(())
}

/// `MEMORY PURGE` → OK (nothing to purge: freed memory goes back to the allocator at once).
pub fn memory_purge(_e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    c.w().ok();
    Ok(())
}

/// MEMORY HELP (Redis 7.0's text).
pub fn memory_help(_e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    crate::call::help(
        c,
        "MEMORY",
        &[
            "DOCTOR",
            "    Return memory problems reports.",
            "MALLOC-STATS",
            "    Return internal statistics report from the memory allocator.",
            "PURGE",
            "    Attempt to purge dirty pages for reclamation by the allocator.",
            "STATS",
            "    Return information about the memory usage of the server.",
            "USAGE <key> [SAMPLES <count>]",
            "    Return memory in bytes used by <key> and its value. Nested values are",
            "    sampled up to <count> times (default: 5, 0 means sample all).",
            "HELP",
            "    Prints this help.",
        ],
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lfu_decay_of_a_word_stamped_under_lru_never_overflows() {
        // Found when switching a running engine from allkeys-lru to allkeys-lfu.
        for word in [u32::MAX, 0xFFFF_FF00, 1 << 31] {
            for now_ms in [0, 60_000, u64::MAX / 2] {
                assert!(lfu_decayed(word, now_ms, 1) <= 255);
            }
        }
    }
    use crate::Config;

    /// 2026-01-01T00:00:00Z in µs.
    const T0: u64 = 1_767_225_600_000_000;

    struct S {
        e: Engine,
        c: Client,
        now_us: u64,
    }

    impl S {
        fn new(policy: &str, maxmemory: u64) -> S {
            let e = Engine::new(Config {
                hash_seed: 7,
                maxmemory,
                maxmemory_policy: crate::engine::MAXMEMORY_POLICIES
                    .iter()
                    .find(|p| **p == policy)
                    .expect("policy"),
                ..Config::default()
            });
            S {
                e,
                c: Client::default(),
                now_us: T0,
            }
        }

        fn cmd(&mut self, argv: &[&str]) -> String {
            let argv: Vec<&[u8]> = argv.iter().map(|a| a.as_bytes()).collect();
            let mut out = Vec::new();
            self.e.exec(&mut self.c, &argv, self.now_us, &mut out);
            String::from_utf8_lossy(&out).into_owned()
        }

        fn advance_ms(&mut self, ms: u64) {
            self.now_us += ms * 1000;
        }

        fn used(&self) -> u64 {
            used_memory(&self.e)
        }
    }

    const OOM: &str = "-OOM command not allowed when used memory > 'maxmemory'.\r\n";

    #[test]
    fn entry_layout_stays_small() {
        // key (with the access word in its spare bytes) + value: tracking adds no bytes.
        assert_eq!(
            std::mem::size_of::<crate::keytable::Slot>(),
            std::mem::size_of::<crate::types::Value>() + 24
        );
    }

    #[test]
    fn allkeys_lru_keeps_hot_keys_and_the_limit() {
        let limit = USED_MEMORY_STARTUP + 200_000;
        let mut s = S::new("allkeys-lru", limit);
        let val = "x".repeat(100);
        // ~200 bytes per key: about 1000 keys fit. Write 10_000, reading the 100 hot keys
        // every 50 writes (each read refreshes their LRU clock).
        for i in 0..10_000 {
            s.advance_ms(1);
            assert_eq!(s.cmd(&["SET", &format!("k{i}"), &val]), "+OK\r\n");
            assert!(s.used() <= limit + 400, "used {} over {limit}", s.used());
            if i >= 100 && i % 50 == 0 {
                for h in 0..100 {
                    s.cmd(&["GET", &format!("k{h}")]);
                }
            }
        }
        let hot = (0..100)
            .filter(|h| s.cmd(&["EXISTS", &format!("k{h}")]) == ":1\r\n")
            .count();
        let cold = (100..1100)
            .filter(|h| s.cmd(&["EXISTS", &format!("k{h}")]) == ":1\r\n")
            .count();
        assert!(hot >= 90, "hot survivors {hot}/100");
        assert!(cold <= 50, "cold survivors {cold}/1000");
        assert!(s.e.evict.evicted_keys > 8000);
        s.e.ks.check();
    }

    #[test]
    fn volatile_ttl_evicts_soonest_expiry_first() {
        let limit = USED_MEMORY_STARTUP + 100_000;
        let mut s = S::new("volatile-ttl", limit);
        let val = "v".repeat(100);
        // 400 keys with TTLs 1000+i s: the ones with small i expire first.
        for i in 0..400 {
            s.cmd(&["SET", &format!("t{i}"), &val, "EX", &(1000 + i).to_string()]);
        }
        for i in 400..800 {
            s.cmd(&["SET", &format!("p{i}"), &val]);
        }
        assert!(s.e.evict.evicted_keys > 0);
        let survivors: Vec<usize> = (0..400)
            .filter(|i| s.cmd(&["EXISTS", &format!("t{i}")]) == ":1\r\n")
            .collect();
        // Survivors are concentrated among the longest TTLs.
        let late = survivors.iter().filter(|&&i| i >= 200).count();
        assert!(
            late * 10 >= survivors.len() * 9,
            "survivors not the late ones: {survivors:?}"
        );
        assert!(survivors.len() < 400);
    }

    #[test]
    fn volatile_without_ttls_is_noeviction() {
        let limit = USED_MEMORY_STARTUP + 20_000;
        for policy in [
            "volatile-lru",
            "volatile-lfu",
            "volatile-random",
            "volatile-ttl",
        ] {
            let mut s = S::new(policy, limit);
            let val = "v".repeat(100);
            let mut oom = false;
            for i in 0..1000 {
                let r = s.cmd(&["SET", &format!("k{i}"), &val]);
                if r == OOM {
                    oom = true;
                    break;
                }
            }
            assert!(oom, "{policy}: never refused");
            assert_eq!(s.e.evict.evicted_keys, 0, "{policy}");
            assert_eq!(s.cmd(&["GET", "k0"]), format!("$100\r\n{val}\r\n"));
        }
    }

    #[test]
    fn noeviction_refuses_writes_reads_work_del_frees() {
        let mut s = S::new("noeviction", 0);
        let val = "v".repeat(1000);
        for i in 0..50 {
            s.cmd(&["SET", &format!("k{i}"), &val]);
        }
        s.cmd(&["CONFIG", "SET", "maxmemory", &(s.used() - 10).to_string()]);
        assert_eq!(s.cmd(&["SET", "new", "x"]), OOM);
        assert_eq!(s.cmd(&["LPUSH", "l", "x"]), OOM);
        assert_eq!(s.cmd(&["GET", "k1"]), format!("$1000\r\n{val}\r\n"));
        assert_eq!(s.cmd(&["DEL", "k1"]), ":1\r\n");
        assert_eq!(s.cmd(&["SET", "new", "x"]), "+OK\r\n");
        // MULTI: queuing is refused too, and EXEC then aborts.
        s.cmd(&["SET", "k1", &val]);
        s.cmd(&["SET", "k2x", &val]);
        assert_eq!(s.cmd(&["MULTI"]), "+OK\r\n");
        assert_eq!(s.cmd(&["GET", "k3"]), OOM);
        assert!(s.cmd(&["EXEC"]).starts_with("-EXECABORT"));
        let info = s.cmd(&["INFO", "stats"]);
        assert!(info.contains("evicted_keys:0\r\n"));
        let cs = s.cmd(&["INFO", "commandstats"]);
        assert!(cs.contains("cmdstat_set:calls="), "{cs}");
        assert!(cs.contains("cmdstat_lpush:calls=0,usec=0,usec_per_call=0.00,rejected_calls=1,failed_calls=0\r\n"), "{cs}");
    }

    #[test]
    fn lfu_counter_grows_logarithmically_and_decays() {
        let mut s = S::new("allkeys-lfu", 0);
        s.cmd(&["SET", "a", "1"]);
        s.cmd(&["SET", "b", "1"]);
        assert_eq!(s.cmd(&["OBJECT", "FREQ", "a"]), ":5\r\n");
        for _ in 0..10_000 {
            s.cmd(&["GET", "a"]);
        }
        let f: i64 = s.cmd(&["OBJECT", "FREQ", "a"])[1..].trim().parse().unwrap();
        // Expected ≈ 5 + sqrt(hits / 5) for factor 10 (redis.conf: 1K hits → 18, 100K → 142).
        assert!((40..=60).contains(&f), "freq after 10k hits: {f}");
        // One point of decay per minute (lfu-decay-time 1).
        s.advance_ms(3 * 60_000);
        let g: i64 = s.cmd(&["OBJECT", "FREQ", "a"])[1..].trim().parse().unwrap();
        assert_eq!(g, f - 3);
        // Under an LRU policy FREQ is refused; IDLETIME counts seconds.
        s.cmd(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]);
        assert!(s.cmd(&["OBJECT", "FREQ", "a"]).starts_with("-ERR An LFU"));
        s.cmd(&["GET", "b"]);
        s.advance_ms(5_000);
        assert_eq!(s.cmd(&["OBJECT", "IDLETIME", "b"]), ":5\r\n");
    }

    #[test]
    fn allkeys_lfu_keeps_frequent_keys() {
        let limit = USED_MEMORY_STARTUP + 100_000;
        let mut s = S::new("allkeys-lfu", limit);
        let val = "x".repeat(100);
        for h in 0..20 {
            s.cmd(&["SET", &format!("hot{h}"), &val]);
            for _ in 0..200 {
                s.cmd(&["GET", &format!("hot{h}")]);
            }
        }
        for i in 0..5000 {
            s.cmd(&["SET", &format!("k{i}"), &val]);
        }
        let hot = (0..20)
            .filter(|h| s.cmd(&["EXISTS", &format!("hot{h}")]) == ":1\r\n")
            .count();
        assert!(hot >= 18, "hot survivors {hot}/20");
    }

    #[test]
    fn random_policies_evict_and_lowered_limit_drains_in_cron() {
        let mut s = S::new("allkeys-random", 0);
        let val = "x".repeat(100);
        for i in 0..3000 {
            s.cmd(&["SET", &format!("k{i}"), &val]);
        }
        let limit = USED_MEMORY_STARTUP + 50_000;
        s.cmd(&["CONFIG", "SET", "maxmemory", &limit.to_string()]);
        // One command evicts at most EVICT_KEYS_PER_COMMAND keys; cron finishes the job.
        s.cmd(&["PING"]);
        assert_eq!(s.e.evict.evicted_keys, EVICT_KEYS_PER_COMMAND as u64);
        s.e.cron(s.now_us);
        assert!(s.used() <= limit);
        assert_eq!(
            s.cmd(&["MEMORY", "USAGE", "nokey"]),
            "$-1\r\n",
            "missing key → null"
        );
        s.cmd(&["SET", "m", "hello"]);
        let n: u64 = s.cmd(&["MEMORY", "USAGE", "m"])[1..]
            .trim()
            .parse()
            .unwrap();
        assert_eq!(n, (1 + 5 + crate::keyspace::ENTRY_OVERHEAD) as u64);
        assert_eq!(
            s.cmd(&["MEMORY", "USAGE", "m", "SAMPLES", "-1"]),
            "-ERR syntax error\r\n"
        );
    }

    #[test]
    fn config_params_round_trip_with_redis_errors() {
        let mut s = S::new("noeviction", 0);
        assert_eq!(s.cmd(&["CONFIG", "SET", "maxmemory", "20mb"]), "+OK\r\n");
        assert_eq!(
            s.cmd(&["CONFIG", "GET", "maxmemory"]),
            "*2\r\n$9\r\nmaxmemory\r\n$8\r\n20971520\r\n"
        );
        assert_eq!(
            s.cmd(&["CONFIG", "SET", "maxmemory-samples", "0"]),
            "-ERR CONFIG SET failed (possibly related to argument 'maxmemory-samples') - argument must be between 1 and 2147483647 inclusive\r\n"
        );
        assert_eq!(
            s.cmd(&["CONFIG", "SET", "lfu-decay-time", "x"]),
            "-ERR CONFIG SET failed (possibly related to argument 'lfu-decay-time') - argument couldn't be parsed into an integer\r\n"
        );
        assert_eq!(
            s.cmd(&["CONFIG", "SET", "maxmemory-policy", "ALLKEYS-LFU"]),
            "+OK\r\n"
        );
        assert!(matches!(s.e.ks.access_mode, AccessMode::Lfu { .. }));
        let info = s.cmd(&["INFO", "memory"]);
        for f in [
            "used_memory:",
            "used_memory_human:",
            "used_memory_rss:",
            "used_memory_peak:",
            "maxmemory:20971520\r\n",
            "maxmemory_human:20.00M\r\n",
            "maxmemory_policy:allkeys-lfu\r\n",
            "mem_fragmentation_ratio:",
        ] {
            assert!(info.contains(f), "{f} missing in {info}");
        }
    }
}
