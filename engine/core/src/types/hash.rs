//! The hash type (redis 7.0 `t_hash.c`): the value's API first, then its commands.
//!
//! # Value
//! A [`HashValue`] has Redis 7.0's two encodings, for real:
//!
//! - **listpack** — while the hash has at most `hash-max-listpack-entries` fields and no field
//!   or value longer than `hash-max-listpack-value` bytes ([`EncodingLimits`], read when the
//!   hash grows), field, value, field, value… sit in one contiguous buffer ([`Listpack`]: a
//!   varint length + bytes per entry) in insertion order. Lookups are linear, as in Redis
//!   (≤ 512 fields by default). HSET of a new field appends, an update replaces in place, HDEL
//!   closes the gap, so every reply is in Redis's order byte for byte.
//! - **hashtable** — past either limit the hash converts for good (`hashTypeTryConversion`,
//!   `hashTypeSet`; never back, even when it shrinks) to an [`IndexMap`] field → value with the
//!   keyspace's kind of hasher (foldhash, seeded per hash from the engine's PRNG, kept from
//!   creation, so collisions cannot be planned). The dense entry vector gives O(1) random
//!   fields (HRANDFIELD) and a SCAN cursor; deletion is `swap_remove` (O(1)): a hashtable's
//!   order is unspecified in Redis. A snapshot load or RESTORE builds the hash again under the
//!   limits then in force, as `rdbLoadObject` does.
//!
//! - **Memory.** [`HashValue::mem_size`] is O(1): a listpack accounts its buffer's length (10
//!   short fields ≈ 200 bytes, against ~700 as a table); a hashtable keeps its own count,
//!   `Σ (field + value + FIELD_OVERHEAD)`, updated on every change (recomputing it per HSET made
//!   building an N-field hash O(N²) once; never walk a collection to account memory).
//! - **SCAN.** A listpack answers everything in one call with cursor 0, as Redis does. A
//!   hashtable uses the keyspace's downward cursor (see `keyspace.rs`, *SCAN guarantee*): the
//!   cursor counts positions not yet visited; `swap_remove` only moves the last entry down and
//!   inserts go to the top, so every field present for the whole scan is returned at least once.
//!
//! # Commands
//! HSET HSETNX HGET HMSET HMGET HDEL HEXISTS HGETALL HKEYS HVALS HLEN HSTRLEN HINCRBY
//! HINCRBYFLOAT HRANDFIELD HSCAN, with Redis 7.0.15's replies and errors (checked against a real
//! redis-server: `tests/diff/hashes.txt`). HGETALL is a map in RESP3; HRANDFIELD … WITHVALUES
//! gives `[field, value]` pairs in RESP3 and a flat array in RESP2. HINCRBYFLOAT adds in 80-bit
//! long double exactly like INCRBYFLOAT ([`LongDouble`]). A hash emptied by HDEL is deleted.
//! Every change is announced with [`notify`] (`hset`, `hdel`, `hincrby`, `hincrbyfloat`, and
//! `del` when the key goes).
//!
//! # Helpers for the other collections
//! [`sample_distinct`] (distinct random positions), [`parse_scan_opts`] (the `MATCH`/`COUNT`
//! grammar of HSCAN/SSCAN/ZSCAN) and [`parse_random_count`] (the count of HRANDFIELD/
//! SRANDMEMBER/ZRANDMEMBER) live here and are used by `set.rs`.

use foldhash::fast::FixedState;
use indexmap::IndexMap;

use crate::Engine;
use crate::args::{self, int_arg};
use crate::call::Call;
use crate::error::CmdError;
use crate::glob;
use crate::keyspace::Keep;
use crate::notify::{class, notify};
use crate::types::ldouble::LongDouble;
use crate::types::listpack::{self, Listpack};
use crate::types::{EncodingLimits, Value};

/// Bytes accounted per field of a hashtable beyond its field and value bytes: the entry (hash
/// + two boxed slices, 40 bytes) and its index slot (8). A listpack accounts its buffer instead.
pub const FIELD_OVERHEAD: usize = 48;
/// Most elements a random-element reply with a negative count may hold (HRANDFIELD,
/// SRANDMEMBER). Redis 7.0 has no bound and will stream 2^62 elements until it runs out of
/// memory; we answer `ERR value is out of range` instead (a deliberate deviation).
pub const RANDOM_REPLY_MAX: u64 = 1 << 24;

type Map = IndexMap<Box<[u8]>, Box<[u8]>, FixedState>;

/// A stored hash. Keeps its own byte count so [`mem_size`](Self::mem_size) is O(1).
#[derive(Clone, Debug)]
pub struct HashValue {
    repr: Repr,
}

#[derive(Clone, Debug)]
enum Repr {
    /// Field, value, field, value… in insertion order. `seed` keys the hasher of the table it
    /// may become.
    Listpack { lp: Listpack, seed: u64 },
    /// Boxed so a listpack hash stays small (the table is the rare, large case).
    Table(Box<Table>),
}

#[derive(Clone, Debug)]
struct Table {
    map: Map,
    /// Accounted bytes (see the module doc, *Memory*).
    bytes: usize,
}

impl Default for HashValue {
    fn default() -> Self {
        HashValue::new()
    }
}

/// Equal contents (order and encoding aside).
impl PartialEq for HashValue {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().all(|(f, v)| other.get(f) == Some(v))
    }
}

/// Iterator over a hash's fields and values in reply order.
pub enum Iter<'a> {
    Listpack(listpack::Iter<'a>),
    Table(indexmap::map::Iter<'a, Box<[u8]>, Box<[u8]>>),
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a [u8], &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Iter::Listpack(it) => Some((it.next()?, it.next().expect("value after field"))),
            Iter::Table(it) => it.next().map(|(f, v)| (&**f, &**v)),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = match self {
            Iter::Listpack(it) => it.len() / 2,
            Iter::Table(it) => it.len(),
        };
        (n, Some(n))
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl HashValue {
    /// An empty hash with an unseeded hasher (tests, snapshots); commands use
    /// [`with_seed`](Self::with_seed).
    pub fn new() -> HashValue {
        HashValue::with_seed(0)
    }

    /// An empty hash whose hasher (once it is a hashtable) is keyed by `seed`.
    pub fn with_seed(seed: u64) -> HashValue {
        HashValue {
            repr: Repr::Listpack {
                lp: Listpack::new(),
                seed,
            },
        }
    }

    /// Number of fields (HLEN).
    pub fn len(&self) -> usize {
        match &self.repr {
            Repr::Listpack { lp, .. } => lp.len() / 2,
            Repr::Table(t) => t.map.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Offsets of `field`'s entry and of its value's entry in a listpack (linear, as Redis's
    /// `lpFind`).
    fn lp_find(lp: &Listpack, field: &[u8]) -> Option<(usize, usize)> {
        let end = lp.byte_len();
        let mut off = 0;
        while off < end {
            let (f, voff) = lp.entry_at(off);
            if f == field {
                return Some((off, voff));
            }
            off = lp.entry_at(voff).1;
        }
        None
    }

    /// The value of `field`.
    pub fn get(&self, field: &[u8]) -> Option<&[u8]> {
        match &self.repr {
            Repr::Listpack { lp, .. } => {
                Self::lp_find(lp, field).map(|(_, voff)| lp.entry_at(voff).0)
            }
            Repr::Table(t) => t.map.get(field).map(|v| &**v),
        }
    }

    pub fn contains(&self, field: &[u8]) -> bool {
        self.get(field).is_some()
    }

    /// Converts a listpack to a hashtable, keeping the order (redis `hashTypeConvert`; never
    /// converts back).
    fn convert(&mut self) {
        let Repr::Listpack { lp, seed } = &self.repr else {
            return;
        };
        let mut map = Map::with_capacity_and_hasher(lp.len() / 2, FixedState::with_seed(*seed));
        let mut bytes = 0;
        let mut it = lp.iter();
        while let (Some(f), Some(v)) = (it.next(), it.next()) {
            bytes += f.len() + v.len() + FIELD_OVERHEAD;
            map.insert(f.into(), v.into());
        }
        self.repr = Repr::Table(Box::new(Table { map, bytes }));
    }

    /// Sets `field` to `value`; returns true if the field is new. An existing field keeps its
    /// position (the listpack replaces in place). Converts to a hashtable when the field or
    /// value is longer than `hash-max-listpack-value` or the hash grows past
    /// `hash-max-listpack-entries` (redis `hashTypeSet`).
    pub fn set(&mut self, field: &[u8], value: &[u8], lim: &EncodingLimits) -> bool {
        if !lim.hash_fits_value(field.len()) || !lim.hash_fits_value(value.len()) {
            self.convert();
        }
        let t = match &mut self.repr {
            Repr::Listpack { lp, .. } => {
                let new = match Self::lp_find(lp, field) {
                    Some((_, voff)) => {
                        lp.replace(voff, value);
                        false
                    }
                    None => {
                        lp.extend(&[field, value]);
                        true
                    }
                };
                // Checked after an update too: a lowered limit converts at the next write.
                if !lim.hash_fits_entries(lp.len() / 2) {
                    self.convert();
                }
                return new;
            }
            Repr::Table(t) => t,
        };
        // One probe of the index whether the field is new or not (`entry` needs an owned key,
        // which a new field needs anyway; an update pays one allocation for it).
        match t.map.entry(field.into()) {
            indexmap::map::Entry::Occupied(mut o) => {
                let old = o.get_mut();
                t.bytes = t.bytes - old.len() + value.len();
                *old = value.into();
                false
            }
            indexmap::map::Entry::Vacant(v) => {
                t.bytes += field.len() + value.len() + FIELD_OVERHEAD;
                v.insert(value.into());
                true
            }
        }
    }

    /// Converts to a hashtable if any of `args` (the fields and values a command is about to
    /// set) is longer than `hash-max-listpack-value`, before any is set (redis
    /// `hashTypeTryConversion`: `HSET h f <long> f short` ends a hashtable).
    pub fn try_conversion<'a>(
        &mut self,
        args: impl IntoIterator<Item = &'a [u8]>,
        lim: &EncodingLimits,
    ) {
        if self.is_listpack() && args.into_iter().any(|a| !lim.hash_fits_value(a.len())) {
            self.convert();
        }
    }

    /// Removes `field`; returns whether it was there. A listpack closes the gap (order kept);
    /// a hashtable moves its last entry into the hole (O(1), see *SCAN*).
    pub fn remove(&mut self, field: &[u8]) -> bool {
        match &mut self.repr {
            Repr::Listpack { lp, .. } => match Self::lp_find(lp, field) {
                Some((off, _)) => {
                    lp.remove(off, 2);
                    true
                }
                None => false,
            },
            Repr::Table(t) => match t.map.swap_remove_entry(field) {
                Some((f, v)) => {
                    t.bytes -= f.len() + v.len() + FIELD_OVERHEAD;
                    true
                }
                None => false,
            },
        }
    }

    /// Fields and values in reply order (insertion order for a listpack).
    pub fn iter(&self) -> Iter<'_> {
        match &self.repr {
            Repr::Listpack { lp, .. } => Iter::Listpack(lp.iter()),
            Repr::Table(t) => Iter::Table(t.map.iter()),
        }
    }

    /// The field and value at position `i` (`0..len`): O(1) for a hashtable, a walk for a
    /// listpack (callers wanting many positions collect [`iter`](Self::iter) once).
    pub fn get_index(&self, i: usize) -> Option<(&[u8], &[u8])> {
        match &self.repr {
            Repr::Listpack { .. } => self.iter().nth(i),
            Repr::Table(t) => t.map.get_index(i).map(|(f, v)| (&**f, &**v)),
        }
    }

    /// Whether the hash is still a listpack (linear lookups, insertion order).
    pub fn is_listpack(&self) -> bool {
        matches!(self.repr, Repr::Listpack { .. })
    }

    /// OBJECT ENCODING: `listpack` or `hashtable` (Redis 7.0 names and thresholds).
    pub fn encoding(&self) -> &'static str {
        if self.is_listpack() {
            "listpack"
        } else {
            "hashtable"
        }
    }

    /// Payload bytes this value accounts for in `used_memory`, kept incrementally (O(1)): the
    /// listpack's buffer, or the table's count.
    pub fn mem_size(&self) -> usize {
        match &self.repr {
            Repr::Listpack { lp, .. } => lp.byte_len(),
            Repr::Table(t) => t.bytes,
        }
    }

    /// One HSCAN step: calls `f` for up to `count` fields below `cursor` (0 = from the top) and
    /// returns the next cursor (0 = done). A listpack returns everything at once (see the
    /// module doc, *SCAN*).
    pub fn scan<'a>(
        &'a self,
        cursor: u64,
        count: usize,
        mut f: impl FnMut(&'a [u8], &'a [u8]),
    ) -> u64 {
        let Repr::Table(t) = &self.repr else {
            for (k, v) in self.iter() {
                f(k, v);
            }
            return 0;
        };
        let (next, range) = scan_range(t.map.len(), cursor, count);
        for i in range.rev() {
            let (k, v) = t.map.get_index(i).expect("in range");
            f(k, v);
        }
        next
    }
}

// ---------------------------------------------------------------------------------------------
// Helpers shared with the other collection types
// ---------------------------------------------------------------------------------------------

/// The positions one step of a downward SCAN cursor visits over `len` dense positions, and
/// the next cursor: positions `cursor-1` down to the returned cursor (cursor 0, or one past
/// the end after deletions, starts at `len`). Same scheme as `Keyspace::scan`.
pub fn scan_range(len: usize, cursor: u64, count: usize) -> (u64, std::ops::Range<usize>) {
    let top = if cursor == 0 || cursor > len as u64 {
        len
    } else {
        cursor as usize
    };
    let bottom = top.saturating_sub(count.max(1));
    (bottom as u64, bottom..top)
}

/// `count` distinct positions in `0..len`, uniformly chosen (`count < len`). When `count` is a
/// large part of `len` (more than a third, redis `*_SUB_STRATEGY_MUL`) a partial
/// Fisher-Yates over all positions; otherwise random draws with rejection of repeats. Memory
/// is O(len) at most, never more than the collection itself.
pub fn sample_distinct(len: usize, count: usize, rng: &mut dyn FnMut() -> u64) -> Vec<usize> {
    debug_assert!(count < len);
    if count.saturating_mul(3) > len {
        let mut all: Vec<usize> = (0..len).collect();
        for k in 0..count {
            let j = k + (rng() % (len - k) as u64) as usize;
            all.swap(k, j);
        }
        all.truncate(count);
        all
    } else {
        let mut seen =
            std::collections::HashSet::with_capacity_and_hasher(count, FixedState::with_seed(0));
        let mut out = Vec::with_capacity(count);
        // Each draw is new with probability > 2/3, so this ends after ~1.5·count draws.
        while out.len() < count {
            let i = (rng() % len as u64) as usize;
            if seen.insert(i) {
                out.push(i);
            }
        }
        out
    }
}

/// The `[MATCH pattern] [COUNT count]` options of HSCAN/SSCAN/ZSCAN (redis
/// `scanGenericCommand`): COUNT below 1 and anything else (TYPE included) are a syntax error.
/// Returns `(count, pattern)`; `MATCH *` is no pattern.
pub fn parse_scan_opts<'a>(opts: &[&'a [u8]]) -> Result<(usize, Option<&'a [u8]>), CmdError> {
    let mut count: i64 = 10;
    let mut pattern = None;
    let mut i = 0;
    while i < opts.len() {
        let has_value = i + 1 < opts.len();
        if args::is(opts[i], "count") && has_value {
            count = int_arg(opts[i + 1])?;
            if count < 1 {
                return Err(CmdError::Syntax);
            }
        } else if args::is(opts[i], "match") && has_value {
            let p = opts[i + 1];
            pattern = if p == b"*" { None } else { Some(p) };
        } else {
            return Err(CmdError::Syntax);
        }
        i += 2;
    }
    Ok((usize::try_from(count).unwrap_or(usize::MAX), pattern))
}

/// Writes a SCAN reply: `[cursor, [items…]]` (an array in RESP2 and RESP3 alike).
pub fn write_scan_reply(c: &mut Call, cursor: u64, items: &[&[u8]]) {
    let mut w = c.w();
    w.array(2);
    w.bulk(itoa::Buffer::new().format(cursor).as_bytes());
    w.array(items.len());
    for it in items {
        w.bulk(it);
    }
}

/// The count argument of HRANDFIELD/SRANDMEMBER/ZRANDMEMBER (redis 7.0
/// `getRangeLongFromObjectOrReply(…, -LONG_MAX, LONG_MAX, …)`).
pub fn parse_random_count(arg: &[u8]) -> Result<i64, CmdError> {
    let l = int_arg(arg)?;
    if l == i64::MIN {
        return Err(CmdError::Static(
            "ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807",
        ));
    }
    Ok(l)
}

/// Refuses a negative-count random reply larger than [`RANDOM_REPLY_MAX`].
pub fn check_random_reply_len(count: u64) -> Result<(), CmdError> {
    if count > RANDOM_REPLY_MAX {
        return Err(CmdError::Static("ERR value is out of range"));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Commands
// ---------------------------------------------------------------------------------------------

/// The hash inside `v`, or WRONGTYPE.
pub fn as_hash(v: &Value) -> Result<&HashValue, CmdError> {
    match v {
        Value::Hash(h) => Ok(h),
        _ => Err(CmdError::WrongType),
    }
}

fn hash_mut(v: &mut Value) -> &mut HashValue {
    match v {
        Value::Hash(h) => h,
        _ => unreachable!("type checked before the update"),
    }
}

/// Looks `key` up for reading: `None` if missing, WRONGTYPE if not a hash.
fn read_hash(e: &mut Engine, key: &[u8], now_ms: u64) -> Result<Option<usize>, CmdError> {
    match e.ks.lookup_read(key, now_ms) {
        Some(i) => {
            as_hash(e.ks.value(i))?;
            Ok(Some(i))
        }
        None => Ok(None),
    }
}

/// Looks `key` up before a write: `None` if missing, WRONGTYPE if not a hash.
fn write_hash(e: &mut Engine, key: &[u8], now_ms: u64) -> Result<Option<usize>, CmdError> {
    match e.ks.lookup_write(key, now_ms) {
        Some(i) => {
            as_hash(e.ks.value(i))?;
            Ok(Some(i))
        }
        None => Ok(None),
    }
}

/// Applies `f` to the hash at `key` (created if missing; the caller checked the type).
fn modify_or_create<R>(
    e: &mut Engine,
    key: &[u8],
    existing: Option<usize>,
    f: impl FnOnce(&mut HashValue) -> R,
) -> R {
    match existing {
        Some(i) => e.ks.update(i, |v| f(hash_mut(v))),
        None => {
            let mut h = HashValue::with_seed(e.ks.next_random());
            let r = f(&mut h);
            e.ks.set(key, Value::Hash(Box::new(h)), Keep::Nothing, None);
            r
        }
    }
}

/// HSET/HMSET: sets every pair, returns the number of new fields.
fn hset_generic(e: &mut Engine, c: &mut Call, name: &'static str) -> Result<i64, CmdError> {
    if !c.argv.len().is_multiple_of(2) {
        return Err(CmdError::Arity(name));
    }
    let key = c.argv[1];
    let existing = write_hash(e, key, c.now_ms)?;
    let pairs = &c.argv[2..];
    let lim = e.config.encoding;
    let created = modify_or_create(e, key, existing, |h| {
        h.try_conversion(pairs.iter().copied(), &lim);
        pairs
            .chunks_exact(2)
            .filter(|p| h.set(p[0], p[1], &lim))
            .count()
    });
    notify(e, class::HASH, "hset", key);
    Ok(created as i64)
}

/// `HSET key field value [field value …]` → number of fields added.
pub fn hset(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let n = hset_generic(e, c, "hset")?;
    c.w().integer(n);
    Ok(())
}

/// `HMSET key field value [field value …]` → OK (deprecated form of HSET).
pub fn hmset(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    hset_generic(e, c, "hmset")?;
    c.w().ok();
    Ok(())
}

/// `HSETNX key field value` → 1 if set, 0 if the field existed.
pub fn hsetnx(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let (key, field, value) = (c.argv[1], c.argv[2], c.argv[3]);
    let existing = write_hash(e, key, c.now_ms)?;
    if let Some(i) = existing
        && as_hash(e.ks.value(i))?.contains(field)
    {
        c.w().integer(0);
        return Ok(());
    }
    let lim = e.config.encoding;
    modify_or_create(e, key, existing, |h| h.set(field, value, &lim));
    notify(e, class::HASH, "hset", key);
    c.w().integer(1);
    Ok(())
}

/// `HGET key field` → value | nil.
pub fn hget(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let Some(i) = read_hash(e, c.argv[1], c.now_ms)? else {
        c.w().null();
        return Ok(());
    };
    let h = as_hash(e.ks.value(i))?;
    match h.get(c.argv[2]) {
        Some(v) => c.w().bulk(v),
        None => c.w().null(),
    }
    Ok(())
}

/// `HMGET key field [field …]` → array of values, nil for missing fields (all nil for a
/// missing key).
pub fn hmget(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let pos = read_hash(e, c.argv[1], c.now_ms)?;
    let h = match pos {
        Some(i) => Some(as_hash(e.ks.value(i))?),
        None => None,
    };
    let fields = &c.argv[2..];
    let mut w = c.w();
    w.array(fields.len());
    for f in fields {
        match h.and_then(|h| h.get(f)) {
            Some(v) => w.bulk(v),
            None => w.null(),
        }
    }
    Ok(())
}

/// `HDEL key field [field …]` → number of fields removed; deletes the key when emptied.
pub fn hdel(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let key = c.argv[1];
    let Some(i) = write_hash(e, key, c.now_ms)? else {
        c.w().integer(0);
        return Ok(());
    };
    let fields = &c.argv[2..];
    let (deleted, empty) = e.ks.update(i, |v| {
        let h = hash_mut(v);
        let mut deleted = 0;
        for f in fields {
            if h.remove(f) {
                deleted += 1;
                if h.is_empty() {
                    break;
                }
            }
        }
        (deleted, h.is_empty())
    });
    if deleted > 0 {
        if empty {
            e.ks.remove_at(i);
        }
        notify(e, class::HASH, "hdel", key);
        if empty {
            notify(e, class::GENERIC, "del", key);
        }
    }
    c.w().integer(deleted);
    Ok(())
}

/// `HEXISTS key field` → 1 | 0.
pub fn hexists(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let found = match read_hash(e, c.argv[1], c.now_ms)? {
        Some(i) => as_hash(e.ks.value(i))?.contains(c.argv[2]),
        None => false,
    };
    c.w().integer(found as i64);
    Ok(())
}

/// `HLEN key` → number of fields.
pub fn hlen(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let n = match read_hash(e, c.argv[1], c.now_ms)? {
        Some(i) => as_hash(e.ks.value(i))?.len(),
        None => 0,
    };
    c.w().integer(n as i64);
    Ok(())
}

/// `HSTRLEN key field` → length of the value (0 if missing).
pub fn hstrlen(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let n = match read_hash(e, c.argv[1], c.now_ms)? {
        Some(i) => as_hash(e.ks.value(i))?
            .get(c.argv[2])
            .map_or(0, <[u8]>::len),
        None => 0,
    };
    c.w().integer(n as i64);
    Ok(())
}

/// What HGETALL/HKEYS/HVALS reply with.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Part {
    All,
    Keys,
    Vals,
}

/// redis `genericHgetallCommand`: HGETALL is a map (RESP3 `%`), HKEYS/HVALS arrays.
fn getall_generic(e: &mut Engine, c: &mut Call, part: Part) -> Result<(), CmdError> {
    let pos = read_hash(e, c.argv[1], c.now_ms)?;
    let h = match pos {
        Some(i) => Some(as_hash(e.ks.value(i))?),
        None => None,
    };
    let n = h.map_or(0, HashValue::len);
    let mut w = c.w();
    if part == Part::All {
        w.map(n);
    } else {
        w.array(n);
    }
    for (f, v) in h.into_iter().flat_map(HashValue::iter) {
        if part != Part::Vals {
            w.bulk(f);
        }
        if part != Part::Keys {
            w.bulk(v);
        }
    }
    Ok(())
}

/// `HGETALL key` → map field → value.
pub fn hgetall(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    getall_generic(e, c, Part::All)
}

/// `HKEYS key` → array of fields.
pub fn hkeys(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    getall_generic(e, c, Part::Keys)
}

/// `HVALS key` → array of values.
pub fn hvals(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    getall_generic(e, c, Part::Vals)
}

/// `HINCRBY key field increment` → new value; `hash value is not an integer`, overflow error.
pub fn hincrby(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let (key, field) = (c.argv[1], c.argv[2]);
    let incr = int_arg(c.argv[3])?;
    let existing = write_hash(e, key, c.now_ms)?;
    let old = match existing.and_then(|i| field_of(e.ks.value(i), field)) {
        Some(v) => {
            args::parse_i64(v).ok_or(CmdError::Static("ERR hash value is not an integer"))?
        }
        None => 0,
    };
    let new = old.checked_add(incr).ok_or(CmdError::Overflow)?;
    let text = itoa::Buffer::new().format(new).as_bytes().to_vec();
    let lim = e.config.encoding;
    modify_or_create(e, key, existing, |h| h.set(field, &text, &lim));
    notify(e, class::HASH, "hincrby", key);
    c.w().integer(new);
    Ok(())
}

/// `HINCRBYFLOAT key field increment` → new value as a bulk string: 80-bit long double
/// arithmetic and formatting, as INCRBYFLOAT. `value is NaN or Infinity` for an infinite
/// increment (checked before the key), `hash value is not a float`, `increment would produce
/// NaN or Infinity`.
pub fn hincrbyfloat(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let (key, field) = (c.argv[1], c.argv[2]);
    let incr = LongDouble::parse(c.argv[3]).ok_or(CmdError::NotFloat)?;
    if !incr.is_finite() {
        return Err(CmdError::Static("ERR value is NaN or Infinity"));
    }
    let existing = write_hash(e, key, c.now_ms)?;
    let old = match existing.and_then(|i| field_of(e.ks.value(i), field)) {
        Some(v) => LongDouble::parse(v).ok_or(CmdError::Static("ERR hash value is not a float"))?,
        None => LongDouble::ZERO,
    };
    let sum = old.plus(incr);
    if !sum.is_finite() {
        return Err(CmdError::NanOrInfinity);
    }
    let mut text = Vec::new();
    sum.format_human(&mut text);
    let lim = e.config.encoding;
    modify_or_create(e, key, existing, |h| h.set(field, &text, &lim));
    notify(e, class::HASH, "hincrbyfloat", key);
    c.w().bulk(&text);
    Ok(())
}

/// The value of `field` if `v` is a hash holding it (callers checked the type).
fn field_of<'a>(v: &'a Value, field: &[u8]) -> Option<&'a [u8]> {
    match v {
        Value::Hash(h) => h.get(field),
        _ => None,
    }
}

/// `HRANDFIELD key [count [WITHVALUES]]` → a random field | nil; with a count, an array of
/// distinct fields (count ≥ 0) or of `|count|` fields with repeats (count < 0); WITHVALUES
/// adds values (RESP3: `[field, value]` pairs).
pub fn hrandfield(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    if c.argv.len() >= 3 {
        let l = parse_random_count(c.argv[2])?;
        let withvalues = match c.argv.len() {
            3 => false,
            4 if args::is(c.argv[3], "withvalues") => true,
            _ => return Err(CmdError::Syntax),
        };
        // Redis 7.0.15 halves the range with WITHVALUES (the reply has two items per field).
        if withvalues && !(-(i64::MAX / 2)..=i64::MAX / 2).contains(&l) {
            return Err(CmdError::Static("ERR value is out of range"));
        }
        return hrandfield_count(e, c, l, withvalues);
    }
    let Some(i) = read_hash(e, c.argv[1], c.now_ms)? else {
        c.w().null();
        return Ok(());
    };
    let len = as_hash(e.ks.value(i))?.len();
    let r = (e.ks.next_random() % len as u64) as usize;
    let (f, _) = as_hash(e.ks.value(i))?.get_index(r).expect("in range");
    c.w().bulk(f);
    Ok(())
}

/// redis `hrandfieldWithCountCommand`.
fn hrandfield_count(
    e: &mut Engine,
    c: &mut Call,
    l: i64,
    withvalues: bool,
) -> Result<(), CmdError> {
    let Some(i) = read_hash(e, c.argv[1], c.now_ms)? else {
        c.w().array(0);
        return Ok(());
    };
    let size = as_hash(e.ks.value(i))?.len();
    let count = l.unsigned_abs();
    if count == 0 {
        c.w().array(0);
        return Ok(());
    }
    let resp3 = c.client.proto == crate::Proto::Resp3;
    let header = |w: &mut resp::ReplyWriter, n: usize| {
        if withvalues && !resp3 {
            w.array(2 * n);
        } else {
            w.array(n);
        }
    };
    let item = |w: &mut resp::ReplyWriter, f: &[u8], v: &[u8]| {
        if withvalues && resp3 {
            w.array(2);
        }
        w.bulk(f);
        if withvalues {
            w.bulk(v);
        }
    };
    let positions: Vec<usize> = if l < 0 || count == 1 {
        // Independent draws: repeats allowed, random order.
        check_random_reply_len(count)?;
        (0..count)
            .map(|_| (e.ks.next_random() % size as u64) as usize)
            .collect()
    } else if count >= size as u64 {
        // The whole hash, in its order.
        (0..size).collect()
    } else {
        sample_distinct(size, count as usize, &mut || e.ks.next_random())
    };
    let h = as_hash(e.ks.value(i))?;
    // A listpack has no O(1) positions: index it once (≤ its few entries) rather than walk
    // it per draw (a negative count may ask for millions).
    let listed: Option<Vec<(&[u8], &[u8])>> = h.is_listpack().then(|| h.iter().collect());
    let mut w = c.w();
    header(&mut w, positions.len());
    for p in positions {
        let (f, v) = match &listed {
            Some(all) => all[p],
            None => h.get_index(p).expect("in range"),
        };
        item(&mut w, f, v);
    }
    Ok(())
}

/// `HSCAN key cursor [MATCH pattern] [COUNT count]` → `[cursor, [field, value, …]]`.
pub fn hscan(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let cursor = args::parse_u64_cursor(c.argv[2])?;
    let Some(i) = read_hash(e, c.argv[1], c.now_ms)? else {
        write_scan_reply(c, 0, &[]);
        return Ok(());
    };
    let (count, pattern) = parse_scan_opts(&c.argv[3..])?;
    let h = as_hash(e.ks.value(i))?;
    let mut items: Vec<&[u8]> = Vec::new();
    let next = h.scan(cursor, count, |f, v| {
        if pattern.is_none_or(|p| glob::matches(p, f, false)) {
            items.push(f);
            items.push(v);
        }
    });
    write_scan_reply(c, next, &items);
    Ok(())
}

#[cfg(test)]
#[path = "hash_tests.rs"]
mod tests;
