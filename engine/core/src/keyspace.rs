//! The keyspace: key → [`Entry`] (value + optional expiry), with lazy expiry on lookup.
//!
//! # Shape
//! - `map`: a [`KeyTable`] (`crate::keytable`): a dense vector of slots (key + value + access
//!   word) indexed by a hash table of positions, with a seeded foldhash hasher. Positions
//!   `0..len` make random sampling O(1) (RANDOMKEY) and give SCAN a cursor; deletion is
//!   `swap_remove` (the last entry moves into the hole).
//! - The keys that have a TTL are kept by the table too, dense, with their expiry, for the
//!   active expiry sampler (Redis keeps a separate `expires` dict for the same reason); a
//!   persistent key carries only a flag bit.
//!
//! # Databases
//! The per-database part (map, volatile index, bytes, WATCHed keys) is a [`Db`] in
//! `Keyspace::data`; everything else (counters, events, the feed log, the RNG) is shared, like
//! Redis's `server` fields. The engine keeps the other databases' `Db`s and swaps the running
//! client's one in with [`switch`] (O(1), only when the database changes between commands),
//! so the hot path is the same for every database.
//! WATCH and blocking registries name keys by [`qualify`]d (database, key).
//!
//! # Time
//! Expiry times are absolute Unix milliseconds. A key is expired when `now_ms > expire_at`
//! (redis `keyIsExpired`). Every lookup, read or write, deletes an expired key first
//! (redis `expireIfNeeded`) and counts it in [`KeyspaceStats::expired_keys`].
//!
//! # SCAN guarantee
//! The cursor is the number of positions not yet visited; a call visits positions
//! `cursor-1, cursor-2, …` downward (cursor 0 starts at `len`). `swap_remove(i)` only moves the
//! *last* entry into `i`: an entry from the visited top can move down into the unvisited region
//! (returned twice, which SCAN allows) but no entry ever moves from the unvisited region into the
//! visited one, and insertions go to the top. So every key present for the whole scan is returned
//! at least once, as Redis guarantees (`dictScan`'s reverse-binary cursor gives the same promise).
//!
//! # Memory
//! `used_bytes` is a logical estimate kept in O(1) per change: key bytes + value bytes +
//! [`ENTRY_OVERHEAD`] per key (+ [`EXPIRE_OVERHEAD`] per TTL).
//!
//! # Access tracking (eviction)
//! Each entry keeps a 32-bit `access` word, Redis's 24-bit `robj.lru` widened: under an LRU
//! policy the LRU clock of its last access, under LFU the last-decrement minute (high 16 bits)
//! and the logarithmic counter (low 8 bits). Every lookup updates it (redis `lookupKey`),
//! except [`Keyspace::lookup_notouch`] (OBJECT). The encoding is `crate::evict`'s; the
//! keyspace only stores the word and calls it. `clock_ms` is the time of the command running
//! (the core has no clock), used to stamp keys created without a lookup.
//!
//! The access word lives in bytes of the slot's key that its layout leaves free, so access
//! tracking costs no bytes (see `crate::keytable`, *A slot*).
//!
//! # Changes
//! Every mutation bumps `dirty` (redis `server.dirty`), in this one place, so the dispatcher can
//! tell whether a command changed anything.
//!
//! # Hooks (WATCH, keyspace notifications)
//! - `watched`: keys some client WATCHes (kept by `cmd::tx`). A change of such a key appends it
//!   to `touched` (redis `signalModifiedKey` / `touchAllWatchedKeysInDb`); `cmd::tx` drains it
//!   after each command and each cron tick. Structural changes report themselves (a key stored,
//!   deleted, expired, renamed, its TTL set or removed, a flush); an in-place change through
//!   [`Keyspace::update`] is reported by the command's keyspace notification
//!   (`notify::notify` calls [`Keyspace::signal_modified`]), because handlers may call
//!   `update` and then find nothing to change (SREM of an absent member), which Redis does not
//!   count. With no watched key the cost is one `is_empty` test per change.
//! - `events`: keyspace events the keyspace itself causes (`expired` on lazy/active expiry,
//!   `new` when a key is created, `keymiss` on a read miss), logged only for the kinds enabled
//!   in `event_mask` (set by `notify-keyspace-events`), so nothing is allocated when disabled.
//!   `cmd::pubsub` publishes them, before the command's own events (Redis's order).

use crate::keytable::{Key, KeyTable, Slot};
use crate::types::Value;

/// Approximate bytes per key beyond key and value bytes: the slot (48) and its index bucket
/// (5–10), as `crate::keytable` lays them out (Redis's dictEntry + robj + sds headers come to
/// ~70).
pub const ENTRY_OVERHEAD: usize = 56;
/// Approximate bytes for a key's TTL (its expiry word, volatile entry and index bucket).
pub const EXPIRE_OVERHEAD: usize = 24;

/// The largest expiry stored (Redis caps expiries at `i64::MAX` ms).
const MAX_EXPIRE: u64 = u64::MAX - 1;

/// A stored key's value, expiry and access word: a view of a slot ([`Keyspace::get_at`]) or,
/// owned, a removed one ([`Keyspace::remove_at`]).
#[derive(Clone, Debug)]
pub struct Entry<V = Value> {
    pub value: V,
    /// Absolute Unix ms.
    expire_at: Option<u64>,
    /// LRU clock or LFU word (see the module doc, *Access tracking*).
    access: u32,
}

/// A borrowed [`Entry`].
pub type EntryRef<'a> = Entry<&'a Value>;

impl<V> Entry<V> {
    pub fn expire_at(&self) -> Option<u64> {
        self.expire_at
    }

    /// The access word (LRU clock or LFU counter; see `crate::evict`).
    pub fn access(&self) -> u32 {
        self.access
    }
}

impl KeyTable {
    /// The entry at position `i`.
    fn entry(&self, i: usize) -> EntryRef<'_> {
        Entry {
            value: self.value(i),
            expire_at: self.expire_at(i),
            access: self.access(i),
        }
    }
}

/// What [`Keyspace::set`] keeps from an existing key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keep {
    /// Overwrite clears the TTL (plain SET).
    Nothing,
    /// KEEPTTL.
    Ttl,
}

/// Counters INFO reports.
#[derive(Clone, Debug, Default)]
pub struct KeyspaceStats {
    pub keyspace_hits: u64,
    pub keyspace_misses: u64,
    pub expired_keys: u64,
    /// Values and flushed keys freed by [`Keyspace::lazy_free_step`] (INFO
    /// `lazyfreed_objects`).
    pub lazyfreed_objects: u64,
}

type Map = KeyTable;

/// A set of keys (the WATCHed keys).
pub type KeySet = std::collections::HashSet<Box<[u8]>, foldhash::fast::FixedState>;

/// A keyspace event the keyspace itself causes (see the module doc, *Hooks*).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KsEvent {
    /// A key was deleted because its TTL passed (lazy or active expiry).
    Expired,
    /// A key was created (redis `dbAdd`).
    New,
    /// A read found no key (redis `lookupKeyRead` miss).
    Miss,
}

impl KsEvent {
    /// Bit of this event in [`Keyspace::event_mask`].
    pub const fn bit(self) -> u8 {
        match self {
            KsEvent::Expired => 1,
            KsEvent::New => 2,
            KsEvent::Miss => 4,
        }
    }
}

/// What waits to be freed by [`Keyspace::lazy_free_step`] (`crate::lazyfree`): the remains of
/// a flushed keyspace (FLUSHALL/FLUSHDB ASYNC), a slice at a time, or one value UNLINK
/// removed.
pub enum Graveyard {
    Keys(crate::chunked::Chunked<Slot>),
    Value(Value),
}

/// One database's data (SELECT, MOVE, SWAPDB): the part of a [`Keyspace`] that is per
/// database. The engine keeps every database's `Db` and swaps the running client's one into
/// its keyspace (`Engine::use_db`, an O(1) `mem::swap`); counters, events and the feed log
/// stay with the keyspace, shared by all databases as in Redis's `server`.
pub struct Db {
    /// The database number (`SELECT n`), stable while the `Db` moves between slots.
    pub(crate) index: usize,
    map: Map,
    used_bytes: usize,
    /// Keys some client WATCHes in this database (maintained by `cmd::tx`).
    pub watched: KeySet,
    /// Keys by slot while slots move (`crate::slotkeys`); None otherwise.
    pub(crate) slot_keys: Option<Box<crate::slotkeys::SlotKeys>>,
}

impl Db {
    /// An empty database number `index`.
    pub fn new(index: usize, seed: u64) -> Db {
        Db {
            index,
            map: Map::with_seed(seed),
            used_bytes: 0,
            watched: Default::default(),
            slot_keys: None,
        }
    }

    pub fn index(&self) -> usize {
        self.index
    }

    /// A step of this database's slot index walk (`crate::slotkeys`): started if there is no
    /// index, up to `budget` keys listed; returns the keys listed and the keys still to list.
    pub(crate) fn walk_slot_keys(&mut self, budget: usize, now_ms: u64) -> (usize, usize) {
        let map = &self.map;
        let sk = self.slot_keys.get_or_insert_with(|| {
            // The keys' bytes, estimated from 64 of them spread over the table (+ 1/8), at
            // most ARENA_RESERVE_MAX up front (huge keys then grow it as they come).
            let n = map.len();
            let picks = n.min(64);
            let stride = n / picks.max(1);
            let sampled: usize = (0..picks).map(|j| map.key(j * stride).len()).sum();
            let bytes = (sampled / picks.max(1)).saturating_mul(n).saturating_mul(9) / 8;
            let bytes = bytes.min(crate::slotkeys::ARENA_RESERVE_MAX);
            Box::new(crate::slotkeys::SlotKeys::start(n, bytes, now_ms))
        });
        sk.last_use_ms = now_ms;
        let listed = sk.walk(map.len(), |i| map.key(i), budget);
        (listed, sk.unwalked())
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub fn volatile_len(&self) -> usize {
        self.map.volatile_len()
    }

    /// Whether the key table's growth is under way ([`KeyTable::is_rehashing`]).
    pub fn is_rehashing(&self) -> bool {
        self.map.is_rehashing()
    }

    /// A step of the key table's growth under way, if any ([`KeyTable::rehash_step`]).
    pub fn rehash_step(&mut self, buckets: usize) -> usize {
        self.map.rehash_step(buckets)
    }

    pub fn used_bytes(&self) -> usize {
        self.used_bytes
    }

    /// Every stored entry (expired ones included), in position order (snapshots).
    pub fn iter_entries(&self) -> impl Iterator<Item = (&[u8], EntryRef<'_>)> {
        (0..self.map.len()).map(|i| (self.map.key(i), self.map.entry(i)))
    }

    /// Whether `key` is stored (expired or not).
    pub fn contains(&self, key: &[u8]) -> bool {
        self.map.find(key).is_some()
    }

    /// Exchanges the data of two databases (SWAPDB); each keeps its index and WATCHed keys,
    /// which belong to the index, as in Redis.
    pub fn swap_data(a: &mut Db, b: &mut Db) {
        std::mem::swap(&mut a.map, &mut b.map);
        std::mem::swap(&mut a.used_bytes, &mut b.used_bytes);
        std::mem::swap(&mut a.slot_keys, &mut b.slot_keys);
    }

    /// See [`Keyspace::peek_expired`].
    pub fn peek_expired(&self, key: &[u8], now_ms: u64) -> Option<bool> {
        self.map
            .find(key)
            .map(|i| Keyspace::is_expired(&self.map, i, now_ms))
    }
}

/// A key qualified by its database (WATCH and blocking registries): the index as 4 bytes
/// little-endian, then the key.
pub fn qualify(db: usize, key: &[u8]) -> Box<[u8]> {
    let mut q = Vec::with_capacity(4 + key.len());
    q.extend_from_slice(&(db as u32).to_le_bytes());
    q.extend_from_slice(key);
    q.into()
}

/// Calls `f` with the [`qualify`]d form of `key`, built on the stack when short (a lookup
/// by qualified key on a hot path allocates nothing).
pub fn with_qualified<R>(db: usize, key: &[u8], f: impl FnOnce(&[u8]) -> R) -> R {
    let mut buf = [0u8; 68];
    let Some(tail) = buf.get_mut(4..4 + key.len()) else {
        return f(&qualify(db, key));
    };
    tail.copy_from_slice(key);
    buf[..4].copy_from_slice(&(db as u32).to_le_bytes());
    f(&buf[..4 + key.len()])
}

/// The database and key of a [`qualify`]d key.
pub fn unqualify(q: &[u8]) -> (usize, &[u8]) {
    let (db, key) = q.split_at(4);
    (
        u32::from_le_bytes(db.try_into().expect("4 bytes")) as usize,
        key,
    )
}

/// Makes database `n` the one in `ks` (its current one goes back to its slot in `dbs`, where
/// `n`'s slot then holds an empty placeholder). `dbs[ks.data.index]` is always the placeholder.
pub fn switch(ks: &mut Keyspace, dbs: &mut [Db], n: usize) {
    let cur = ks.data.index;
    if cur == n {
        return;
    }
    std::mem::swap(&mut ks.data, &mut dbs[cur]);
    std::mem::swap(&mut ks.data, &mut dbs[n]);
}

pub struct Keyspace {
    /// The selected database's data (see [`Db`]).
    pub data: Db,
    seed: u64,
    rng: u64,
    /// Number of changes since start (redis `server.dirty`).
    pub dirty: u64,
    pub stats: KeyspaceStats,
    /// Flushed entries awaiting release (FLUSHALL/FLUSHDB ASYNC).
    graveyard: Vec<Graveyard>,
    /// Watched keys changed since `cmd::tx` last looked, [`qualify`]d by database (may
    /// repeat a key).
    pub touched: Vec<Box<[u8]>>,
    /// Changed keys for client-side caching (`crate::tracking`), each with whether the server
    /// changed it (expiry, eviction); `None` while no client tracks (one test per change).
    pub tracked: Tracked,
    /// [`KsEvent::bit`]s to log into `events` (0 = none; set by `cmd::pubsub`).
    pub event_mask: u8,
    /// Logged keyspace events with their database, oldest first (drained by `cmd::pubsub`).
    pub events: Vec<(KsEvent, usize, Box<[u8]>)>,
    /// How lookups stamp `Entry::access` (set from the maxmemory policy by `crate::evict`).
    pub access_mode: crate::evict::AccessMode,
    /// Unix ms of the command running (see the module doc, *Access tracking*).
    pub clock_ms: u64,
    /// Replica mode (the browser replica): an expired key reads as missing but is not
    /// deleted; its primary's DEL effect removes it (redis `expireIfNeeded` on a replica).
    pub replica: bool,
    /// Clients are paused (CLIENT PAUSE, `crate::pause`): as in replica mode, an expired key
    /// reads as missing but is not deleted until the pause ends.
    pub expire_paused: bool,
    /// The keychange feed has subscribers: keys deleted by expiry or eviction are logged in
    /// `feed_dels` (see `crate::effect`). Off = one test per deletion, nothing allocated.
    pub feed_on: bool,
    /// While LATENCY monitoring is on (`crate::latency::sync_clock`): the clock timing each
    /// expired key's deletion, value freed included (redis `deleteExpiredKeyAndPropagate`),
    /// and the slowest such deletion not yet sampled as `expire-del`, µs.
    pub expire_del_clock: Option<fn() -> u64>,
    pub expire_del_max_us: u64,
    /// Keys deleted by expiry/eviction not yet recorded as `DEL` effects, with their
    /// database, oldest first.
    pub feed_dels: Vec<(usize, Box<[u8]>)>,
    /// Number of keys ever logged into `feed_dels` (lets `effect::end` tell a command's own
    /// changes from the deletions that happened during it).
    pub feed_del_count: u64,
}

/// The keyspace's change log for client-side caching (see [`Keyspace::tracked`]).
pub type Tracked = Option<Vec<(Box<[u8]>, bool)>>;

/// Bytes accounted for one entry.
fn entry_bytes(key: &[u8], value: &Value, has_expire: bool) -> usize {
    key.len() + value.mem_size() + ENTRY_OVERHEAD + if has_expire { EXPIRE_OVERHEAD } else { 0 }
}

impl Keyspace {
    /// An empty keyspace; `seed` keys the hasher (the server passes a random one so hash
    /// flooding cannot be planned) and the sampling RNG.
    pub fn new(seed: u64) -> Keyspace {
        Keyspace {
            data: Db::new(0, seed),
            seed,
            rng: seed ^ 0x9E37_79B9_7F4A_7C15,
            dirty: 0,
            stats: KeyspaceStats::default(),
            graveyard: Vec::new(),
            touched: Vec::new(),
            tracked: None,
            event_mask: 0,
            events: Vec::new(),
            access_mode: Default::default(),
            clock_ms: 0,
            replica: false,
            expire_paused: false,
            feed_on: false,
            expire_del_clock: None,
            expire_del_max_us: 0,
            feed_dels: Vec::new(),
            feed_del_count: 0,
        }
    }

    /// Logs `key` as deleted outside a command's own logic (expiry, eviction) for the
    /// keychange feed (`crate::effect::record_deleted`). One test when the feed is off.
    #[inline]
    pub fn feed_deleted(&mut self, key: &[u8]) {
        if self.feed_on {
            self.feed_dels.push((self.data.index, key.into()));
            self.feed_del_count += 1;
        }
    }

    /// The entry of `key`, expired or not, without expiring it or touching its access word
    /// (the feed reads the state a command left).
    pub fn get_entry(&self, key: &[u8]) -> Option<EntryRef<'_>> {
        self.data.map.find(key).map(|i| self.data.map.entry(i))
    }

    /// Every stored entry (expired ones included), in position order (feed snapshots).
    pub fn iter_entries(&self) -> impl Iterator<Item = (&[u8], EntryRef<'_>)> {
        self.data.iter_entries()
    }

    /// Records a change of `key` for WATCH (redis `signalModifiedKey`).
    #[inline]
    fn touch(db: &Db, touched: &mut Vec<Box<[u8]>>, tracked: &mut Tracked, key: &[u8]) {
        if !db.watched.is_empty() && db.watched.contains(key) {
            touched.push(qualify(db.index, key));
        }
        if let Some(log) = tracked {
            Self::log_tracked(log, key);
        }
    }

    /// Out of line: the hot path (nobody tracks) keeps only the `None` test.
    #[cold]
    #[inline(never)]
    fn log_tracked(log: &mut Vec<(Box<[u8]>, bool)>, key: &[u8]) {
        log.push((key.into(), false));
    }

    /// Marks the change logged last for client-side caching as the server's own (expiry,
    /// eviction: redis `signalModifiedKey(NULL, …)`).
    #[inline]
    pub fn tracked_by_server(&mut self) {
        if let Some(last) = self.tracked.as_mut().and_then(|log| log.last_mut()) {
            last.1 = true;
        }
    }

    /// Reports a change of `key` to WATCH (see the module doc, *Hooks*).
    #[inline]
    pub fn signal_modified(&mut self, key: &[u8]) {
        Self::touch(&self.data, &mut self.touched, &mut self.tracked, key);
    }

    /// [`touch`](Self::touch) for the entry at position `i`.
    #[inline]
    fn touch_at(&mut self, i: usize) {
        if !self.data.watched.is_empty() || self.tracked.is_some() {
            let k = self.data.map.key(i);
            Self::touch(&self.data, &mut self.touched, &mut self.tracked, k);
        }
    }

    /// Logs `ev` for `key` if enabled (see the module doc, *Hooks*).
    #[inline]
    fn log_event(&mut self, ev: KsEvent, key: &[u8]) {
        if self.event_mask & ev.bit() != 0 {
            self.events.push((ev, self.data.index, key.into()));
        }
    }

    /// Whether `key` is stored, without expiring it: `None` absent, `Some(true)` stored but
    /// past its TTL, `Some(false)` live (redis `keyIsExpired`, for WATCH).
    pub fn peek_expired(&self, key: &[u8], now_ms: u64) -> Option<bool> {
        self.data.peek_expired(key, now_ms)
    }

    /// Number of keys, including expired keys not yet reclaimed (like redis DBSIZE).
    pub fn len(&self) -> usize {
        self.data.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.data.map.is_empty()
    }

    /// Number of keys with a TTL.
    pub fn volatile_len(&self) -> usize {
        self.data.map.volatile_len()
    }

    /// Logical memory estimate of the stored data, bytes.
    pub fn used_bytes(&self) -> usize {
        self.data.used_bytes
    }

    /// SplitMix64: deterministic per seed, good enough for sampling.
    pub fn next_random(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    #[inline]
    fn is_expired(map: &Map, i: usize, now_ms: u64) -> bool {
        map.expire_at(i).is_some_and(|at| now_ms > at)
    }

    /// Position of `key` if present and not expired; an expired key is deleted first. A live
    /// key's access word is updated (redis `lookupKey` → `updateLFU` / `LRU_CLOCK`).
    fn lookup(&mut self, key: &[u8], now_ms: u64) -> Option<usize> {
        let i = self.lookup_notouch(key, now_ms)?;
        // Only LFU's probabilistic increment needs a random number.
        let rand = match self.access_mode {
            crate::evict::AccessMode::Lru => 0,
            crate::evict::AccessMode::Lfu { .. } => self.next_random(),
        };
        let word = self
            .access_mode
            .touch(self.data.map.access(i), now_ms, rand);
        self.data.map.set_access(i, word);
        Some(i)
    }

    /// Like a write lookup but leaves the access word alone (redis `LOOKUP_NOTOUCH`: OBJECT).
    // Inlined into every lookup on the hot path (a call here costs ~1 % of a SET).
    #[inline]
    pub fn lookup_notouch(&mut self, key: &[u8], now_ms: u64) -> Option<usize> {
        self.clock_ms = now_ms;
        let i = self.data.map.find(key)?;
        if Self::is_expired(&self.data.map, i, now_ms) {
            self.expire_now(i);
            return None;
        }
        Some(i)
    }

    /// Lookup for reading: counts a keyspace hit or miss (redis `lookupKeyRead`).
    pub fn lookup_read(&mut self, key: &[u8], now_ms: u64) -> Option<usize> {
        let r = self.lookup(key, now_ms);
        if r.is_some() {
            self.stats.keyspace_hits += 1;
        } else {
            self.stats.keyspace_misses += 1;
            self.log_event(KsEvent::Miss, key);
        }
        r
    }

    /// A read lookup that leaves the access word alone (redis `LOOKUP_NOTOUCH`: TTL, PTTL,
    /// EXPIRETIME, TYPE, EXISTS), still counting the hit or miss.
    pub fn lookup_read_notouch(&mut self, key: &[u8], now_ms: u64) -> Option<usize> {
        let r = self.lookup_notouch(key, now_ms);
        if r.is_some() {
            self.stats.keyspace_hits += 1;
        } else {
            self.stats.keyspace_misses += 1;
            self.log_event(KsEvent::Miss, key);
        }
        r
    }

    /// Lookup before a write.
    pub fn lookup_write(&mut self, key: &[u8], now_ms: u64) -> Option<usize> {
        self.lookup(key, now_ms)
    }

    /// Bytes accounted for the entry at `i` (MEMORY USAGE).
    pub fn entry_bytes_at(&self, i: usize) -> usize {
        let m = &self.data.map;
        entry_bytes(m.key(i), m.value(i), m.has_expire(i))
    }

    /// The key and entry at a position returned by a lookup.
    pub fn get_at(&self, i: usize) -> (&[u8], EntryRef<'_>) {
        (self.data.map.key(i), self.data.map.entry(i))
    }

    /// The key at a position returned by a lookup.
    #[inline]
    pub fn key_at(&self, i: usize) -> &[u8] {
        self.data.map.key(i)
    }

    /// The key's seeded hash (the eviction pool's identity of a key).
    pub fn key_hash(&self, key: &[u8]) -> u64 {
        self.data.map.hash_key(key)
    }

    /// The value at a position returned by a lookup.
    #[inline]
    pub fn value(&self, i: usize) -> &Value {
        self.data.map.value(i)
    }

    /// Absolute expiry (Unix ms) of the entry at `i`.
    #[inline]
    pub fn expire_at(&self, i: usize) -> Option<u64> {
        self.data.map.expire_at(i)
    }

    /// Changes the value at `i` in place (INCR, APPEND…), keeping its TTL and the memory
    /// estimate right.
    pub fn update<R>(&mut self, i: usize, f: impl FnOnce(&mut Value) -> R) -> R {
        let v = self.data.map.value_mut(i);
        let before = v.mem_size();
        let r = f(v);
        let after = v.mem_size();
        self.data.used_bytes = self.data.used_bytes + after - before;
        self.dirty += 1;
        r
    }

    /// Changes how the value at position `i` is encoded without changing its contents (SORT
    /// turning a listpack zset into a skiplist, as Redis does): not a write, so `dirty` and
    /// the accounted bytes stay.
    pub fn reencode(&mut self, i: usize, f: impl FnOnce(&mut Value)) {
        f(self.data.map.value_mut(i));
    }

    /// Stores `value` at `key`. `existing` is the key's position from a lookup made just
    /// before (None = absent). Returns the key's position.
    pub fn set(&mut self, key: &[u8], value: Value, keep: Keep, existing: Option<usize>) -> usize {
        self.dirty += 1;
        Self::touch(&self.data, &mut self.touched, &mut self.tracked, key);
        match existing {
            Some(i) => {
                if keep == Keep::Nothing {
                    self.persist_quiet(i);
                }
                let v = self.data.map.value_mut(i);
                self.data.used_bytes = self.data.used_bytes + value.mem_size() - v.mem_size();
                *v = value;
                i
            }
            None => {
                self.data.used_bytes += entry_bytes(key, &value, false);
                let access = self.access_mode.new_key(self.clock_ms);
                let i = self.data.map.insert_new(key, value, access);
                if let Some(sk) = &mut self.data.slot_keys {
                    sk.added(key);
                }
                self.log_event(KsEvent::New, key);
                i
            }
        }
    }

    /// Inserts an entry that keeps its expiry (RENAME). The key must be absent.
    fn insert_entry(&mut self, key: &[u8], value: Value, expire_at: Option<u64>) -> usize {
        let access = self.access_mode.new_key(self.clock_ms);
        let i = self.data.map.insert_new(key, value, access);
        self.inserted(i, expire_at);
        i
    }

    /// The accounting, hooks and TTL of the entry just inserted at `i`.
    fn inserted(&mut self, i: usize, expire_at: Option<u64>) {
        if let Some(sk) = &mut self.data.slot_keys {
            sk.added(self.data.map.key(i));
        }
        let m = &self.data.map;
        self.data.used_bytes += entry_bytes(m.key(i), m.value(i), false);
        Self::touch(&self.data, &mut self.touched, &mut self.tracked, m.key(i));
        if self.event_mask & KsEvent::New.bit() != 0 {
            self.events
                .push((KsEvent::New, self.data.index, m.key(i).into()));
        }
        if let Some(at) = expire_at {
            self.set_expire(i, at);
        }
    }

    /// Deletes the entry at `i` and returns it.
    pub fn remove_at(&mut self, i: usize) -> (Key, Entry) {
        self.dirty += 1;
        let r = self.data.map.swap_remove(i);
        self.data.used_bytes -= entry_bytes(&r.key, &r.value, r.expire_at.is_some());
        Self::touch(&self.data, &mut self.touched, &mut self.tracked, &r.key);
        (
            r.key,
            Entry {
                value: r.value,
                expire_at: r.expire_at,
                access: r.access,
            },
        )
    }

    /// Deletes `key` if present (and not expired). Returns whether a live key was deleted.
    pub fn delete(&mut self, key: &[u8], now_ms: u64) -> bool {
        match self.lookup(key, now_ms) {
            Some(i) => {
                self.remove_at(i);
                true
            }
            None => false,
        }
    }

    /// Sets the access word (LRU clock or LFU counter) of the entry at `i`: RESTORE's
    /// IDLETIME / FREQ (redis `objectSetLRUOrLFU`).
    pub fn set_access(&mut self, i: usize, word: u32) {
        self.data.map.set_access(i, word);
    }

    /// Sets the absolute expiry of the entry at `i`.
    pub fn set_expire(&mut self, i: usize, at_ms: u64) {
        self.dirty += 1;
        self.touch_at(i);
        if self.data.map.set_expire(i, at_ms.min(MAX_EXPIRE)) {
            self.data.used_bytes += EXPIRE_OVERHEAD;
        }
    }

    /// Removes the TTL of the entry at `i`; returns whether it had one (PERSIST).
    pub fn persist(&mut self, i: usize) -> bool {
        let had = self.persist_quiet(i);
        if had {
            self.dirty += 1;
            self.touch_at(i);
        }
        had
    }

    // Hot in SET of an existing key (the TTL is cleared); kept inlined like before databases.
    #[inline]
    fn persist_quiet(&mut self, i: usize) -> bool {
        if !self.data.map.has_expire(i) {
            return false;
        }
        self.data.map.clear_expire(i);
        self.data.used_bytes -= EXPIRE_OVERHEAD;
        true
    }

    /// Moves the entry at `from` (a lookup position) to key `to`, replacing any entry there;
    /// the TTL moves with it (RENAME). `to` must differ from the source key.
    pub fn rename(&mut self, from: usize, to: &[u8], now_ms: u64) {
        let (_, e) = self.remove_at(from);
        if let Some(j) = self.lookup(to, now_ms) {
            self.remove_at(j);
        }
        let at = e.expire_at();
        self.insert_entry(to, e.value, at);
    }

    /// A uniformly random position, or None when empty.
    pub fn random_position(&mut self) -> Option<usize> {
        if self.data.map.is_empty() {
            return None;
        }
        Some((self.next_random() % self.data.map.len() as u64) as usize)
    }

    /// Whether the entry at `i` is past its expiry at `now_ms`.
    pub fn expired_at(&self, i: usize, now_ms: u64) -> bool {
        Self::is_expired(&self.data.map, i, now_ms)
    }

    /// Deletes the expired entry at `i`, counting it as expired (active expiry, RANDOMKEY).
    pub fn expire_now(&mut self, i: usize) {
        if self.replica || self.expire_paused {
            return;
        }
        let t0 = self.expire_del_clock.map(|clock| clock());
        let (k, entry) = self.remove_at(i);
        // Freed here, inside the timing, as Redis frees it (`lazyfree-lazy-expire no`).
        drop(entry);
        if let (Some(t0), Some(clock)) = (t0, self.expire_del_clock) {
            self.expire_del_max_us = self.expire_del_max_us.max(clock().saturating_sub(t0));
        }
        self.tracked_by_server();
        self.stats.expired_keys += 1;
        self.log_event(KsEvent::Expired, &k);
        self.feed_deleted(&k);
    }

    /// The map position of the `v`-th key with a TTL (`v < volatile_len()`), for sampling.
    pub fn volatile_position(&self, v: usize) -> usize {
        self.data.map.volatile_position(v)
    }

    /// A random volatile key's map position, or None when no key has a TTL.
    pub fn random_volatile(&mut self) -> Option<usize> {
        let n = self.data.map.volatile_len();
        if n == 0 {
            return None;
        }
        let v = (self.next_random() % n as u64) as usize;
        Some(self.data.map.volatile_position(v))
    }

    /// One SCAN step: visits up to `count` positions below `cursor` (0 = start at the top),
    /// deleting expired entries on the way and calling `f` for live ones. Returns the next
    /// cursor (0 = done). See the module doc for the guarantee.
    pub fn scan(
        &mut self,
        cursor: u64,
        count: usize,
        now_ms: u64,
        mut f: impl FnMut(&[u8], &Value),
    ) -> u64 {
        let len = self.data.map.len() as u64;
        let mut pos = if cursor == 0 || cursor > len {
            len
        } else {
            cursor
        } as usize;
        let mut visited = 0;
        while pos > 0 && visited < count {
            pos -= 1;
            visited += 1;
            if self.expired_at(pos, now_ms) {
                // The last entry (already visited, or `pos` itself) fills the hole: safe.
                self.expire_now(pos);
                continue;
            }
            f(self.data.map.key(pos), self.data.map.value(pos));
        }
        pos as u64
    }

    /// Calls `f` for every live key (KEYS). O(n).
    pub fn for_each_live<'a>(&'a self, now_ms: u64, mut f: impl FnMut(&'a [u8], &'a Value)) {
        let m = &self.data.map;
        for (i, s) in m.slots().enumerate() {
            if !Self::is_expired(m, i, now_ms) {
                f(s.key(), s.value());
            }
        }
    }

    /// Number of keys with a TTL and their average remaining TTL in ms (INFO keyspace
    /// `avg_ttl`), estimated from up to `samples` random volatile keys.
    pub fn avg_ttl_ms(&mut self, now_ms: u64, samples: usize) -> u64 {
        let len = self.data.map.volatile_len();
        if len == 0 {
            return 0;
        }
        let n = samples.min(len);
        let mut sum: u128 = 0;
        for k in 0..n {
            // Evenly spread over the volatile vector when sampling everything, random otherwise.
            let v = if n == len {
                k
            } else {
                (self.next_random() % len as u64) as usize
            };
            let at = self.data.map.volatile_expire_at(v);
            sum += u128::from(at.saturating_sub(now_ms));
        }
        (sum / n as u128) as u64
    }

    /// Removes every key. `lazy` hands the old entries to the graveyard, released a slice per
    /// [`lazy_free_step`](Self::lazy_free_step) (FLUSHALL ASYNC), so a huge keyspace never
    /// stalls the loop; otherwise they are dropped now.
    pub fn flush(&mut self, lazy: bool) {
        // redis `touchAllWatchedKeysInDb`: only watched keys that existed are touched.
        for k in &self.data.watched {
            if self.data.map.find(k).is_some() {
                self.touched.push(qualify(self.data.index, k));
            }
        }
        self.data.slot_keys = None;
        let old = std::mem::replace(&mut self.data.map, Map::with_seed(self.seed)).take_slots();
        self.dirty += old.len() as u64;
        self.data.used_bytes = 0;
        if lazy && !old.is_empty() {
            self.graveyard.push(Graveyard::Keys(old));
        }
    }

    /// Drops up to `budget` flushed entries or unlinked values; returns how many were dropped.
    pub fn lazy_free_step(&mut self, budget: usize) -> usize {
        let mut freed = 0;
        while freed < budget {
            let Some(g) = self.graveyard.last_mut() else {
                break;
            };
            match g {
                Graveyard::Keys(keys) => match keys.pop() {
                    Some(_) => freed += 1,
                    None => {
                        self.graveyard.pop();
                    }
                },
                Graveyard::Value(_) => {
                    self.graveyard.pop();
                    freed += 1;
                }
            }
        }
        self.stats.lazyfreed_objects += freed as u64;
        freed
    }

    /// Entries and values still waiting in the graveyard.
    pub fn lazy_free_pending(&self) -> usize {
        self.graveyard
            .iter()
            .map(|g| match g {
                Graveyard::Keys(keys) => keys.len(),
                Graveyard::Value(_) => 1,
            })
            .sum()
    }

    /// UNLINK of one key: as [`delete`](Self::delete), but a value that is costly to free
    /// goes to the graveyard instead of being freed now (`crate::lazyfree`).
    pub fn unlink(&mut self, key: &[u8], now_ms: u64) -> bool {
        let Some(i) = self.lookup(key, now_ms) else {
            return false;
        };
        let (_, entry) = self.remove_at(i);
        if crate::lazyfree::free_effort(&entry.value) > crate::lazyfree::LAZYFREE_THRESHOLD {
            self.graveyard.push(Graveyard::Value(entry.value));
        }
        true
    }

    /// Makes room for `n` more keys (snapshot load).
    pub fn reserve(&mut self, n: usize) {
        self.data.map.reserve(n);
    }

    /// Inserts an entry read from a snapshot, keeping its expiry, with one hash probe (the
    /// load is bound by these cache misses). Returns false, changing nothing, if `key` is
    /// already present (the loader fails the load on a duplicate key).
    pub fn insert_loaded(&mut self, key: &[u8], value: Value, expire_at: Option<u64>) -> bool {
        let access = self.access_mode.new_key(self.clock_ms);
        match self.data.map.insert_if_absent(key, value, access) {
            Some(i) => {
                self.inserted(i, expire_at);
                true
            }
            None => false,
        }
    }

    /// Checks internal invariants (tests).
    #[cfg(test)]
    pub fn check(&self) {
        self.data.map.check();
        let m = &self.data.map;
        let mut n = 0;
        let mut bytes = 0;
        for (i, s) in m.slots().enumerate() {
            bytes += entry_bytes(s.key(), s.value(), m.has_expire(i));
            n += usize::from(m.has_expire(i));
        }
        assert_eq!(n, m.volatile_len());
        assert_eq!(bytes, self.data.used_bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::StrValue;
    use std::collections::{HashMap, HashSet};

    fn sv(s: &str) -> Value {
        Value::Str(StrValue::from_slice(s.as_bytes()))
    }

    #[test]
    fn with_qualified_matches_qualify_on_and_off_the_stack() {
        for key in [&b""[..], b"k", &[b'x'; 64], &[b'y'; 65], &[b'z'; 300]] {
            for db in [0, 3, 15] {
                assert_eq!(
                    with_qualified(db, key, |q| q.to_vec()),
                    qualify(db, key).to_vec()
                );
            }
        }
    }

    /// Random operations against a HashMap reference with a fake clock.
    #[test]
    fn model_vs_hashmap() {
        let mut ks = Keyspace::new(7);
        let mut model: HashMap<Vec<u8>, (Value, Option<u64>)> = HashMap::new();
        let mut now = 1_000_000u64;
        let mut rng = 12345u64;
        let mut rand = move |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        for step in 0..20_000 {
            let key = format!("k{}", rand(200)).into_bytes();
            // The model's view after lazy expiry.
            if let Some((_, Some(at))) = model.get(&key)
                && now > *at
            {
                model.remove(&key);
            }
            match rand(7) {
                0 | 1 => {
                    let v = sv(&step.to_string());
                    let ex = ks.lookup_write(&key, now);
                    ks.set(&key, v.clone(), Keep::Nothing, ex);
                    model.insert(key, (v, None));
                }
                2 => {
                    let got = ks.lookup_read(&key, now).map(|i| ks.value(i).clone());
                    assert_eq!(got, model.get(&key).map(|m| m.0.clone()));
                }
                3 => {
                    assert_eq!(ks.delete(&key, now), model.remove(&key).is_some());
                }
                4 => {
                    if let Some(i) = ks.lookup_write(&key, now) {
                        let at = now + rand(50);
                        ks.set_expire(i, at);
                        model.get_mut(&key).unwrap().1 = Some(at);
                    } else {
                        assert!(!model.contains_key(&key));
                    }
                }
                5 => {
                    if let Some(i) = ks.lookup_write(&key, now) {
                        ks.persist(i);
                        model.get_mut(&key).unwrap().1 = None;
                    }
                }
                _ => {
                    now += rand(10);
                    // Active expiry of a few random volatile keys.
                    for _ in 0..3 {
                        if let Some(i) = ks.random_volatile()
                            && ks.expired_at(i, now)
                        {
                            let k = ks.get_at(i).0.to_vec();
                            ks.expire_now(i);
                            model.remove(&k);
                        }
                    }
                }
            }
            if step % 97 == 0 {
                ks.check();
                let live: usize = model
                    .values()
                    .filter(|(_, at)| at.is_none_or(|a| now <= a))
                    .count();
                let mut n = 0;
                ks.for_each_live(now, |_, _| n += 1);
                assert_eq!(n, live);
            }
        }
        ks.check();
    }

    /// Every key present for the whole scan is returned, under concurrent deletes and inserts.
    #[test]
    fn scan_guarantee_under_churn() {
        for seed in 0..20u64 {
            let mut ks = Keyspace::new(seed);
            for i in 0..1000 {
                ks.set(
                    format!("stable{i}").as_bytes(),
                    sv("v"),
                    Keep::Nothing,
                    None,
                );
                ks.set(format!("churn{i}").as_bytes(), sv("v"), Keep::Nothing, None);
            }
            let mut seen = HashSet::new();
            let mut cursor = 0;
            let mut next_new = 0;
            let mut rounds = 0;
            loop {
                cursor = ks.scan(cursor, 10, 0, |k, _| {
                    seen.insert(k.to_vec());
                });
                // Churn between calls: delete some churn keys, add new ones.
                for _ in 0..5 {
                    let victim = format!("churn{}", ks.next_random() % 1000);
                    ks.delete(victim.as_bytes(), 0);
                    ks.set(
                        format!("new{next_new}").as_bytes(),
                        sv("v"),
                        Keep::Nothing,
                        None,
                    );
                    next_new += 1;
                }
                rounds += 1;
                assert!(rounds < 10_000, "scan must terminate");
                if cursor == 0 {
                    break;
                }
            }
            for i in 0..1000 {
                assert!(
                    seen.contains(format!("stable{i}").as_bytes()),
                    "seed {seed}: stable{i} missed"
                );
            }
            ks.check();
        }
    }

    #[test]
    fn lazy_expiry_on_lookup() {
        let mut ks = Keyspace::new(1);
        let i = ks.set(b"a", sv("1"), Keep::Nothing, None);
        ks.set_expire(i, 100);
        assert!(
            ks.lookup_read(b"a", 100).is_some(),
            "alive at its expiry ms"
        );
        assert!(ks.lookup_read(b"a", 101).is_none());
        assert_eq!(ks.stats.expired_keys, 1);
        assert_eq!(ks.len(), 0);
        ks.check();
    }

    #[test]
    fn rename_keeps_ttl_and_lazy_flush_frees() {
        let mut ks = Keyspace::new(3);
        for i in 0..100 {
            ks.set(format!("k{i}").as_bytes(), sv("x"), Keep::Nothing, None);
        }
        let i = ks.lookup_write(b"k5", 0).unwrap();
        ks.set_expire(i, 5000);
        let i = ks.lookup_write(b"k5", 0).unwrap();
        ks.rename(i, b"k7", 0);
        let j = ks.lookup_write(b"k7", 0).unwrap();
        assert_eq!(ks.expire_at(j), Some(5000));
        assert_eq!(ks.len(), 99);
        ks.check();
        ks.flush(true);
        assert_eq!(ks.len(), 0);
        assert_eq!(ks.used_bytes(), 0);
        assert_eq!(ks.lazy_free_pending(), 99);
        assert_eq!(ks.lazy_free_step(50), 50);
        assert_eq!(ks.lazy_free_step(500), 49);
        assert_eq!(ks.lazy_free_pending(), 0);
    }
}
