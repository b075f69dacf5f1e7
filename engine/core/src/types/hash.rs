//! The hash type (redis 7.0 `t_hash.c`): the value's API first, then its commands.
//!
//! # Value
//! A [`HashValue`] is an [`IndexMap`] field → value (bytes → bytes) with the keyspace's kind of
//! hasher (foldhash, seeded per hash from the engine's PRNG so collisions cannot be planned).
//! The dense entry vector gives O(1) random fields (HRANDFIELD) and a SCAN cursor.
//!
//! - **Memory.** The hash keeps its own byte count, `Σ (field + value + FIELD_OVERHEAD)`, updated
//!   on every change, so [`HashValue::mem_size`] is O(1) (recomputing it per HSET made building
//!   an N-field hash O(N²) once; never walk a collection to account memory).
//! - **Encoding.** Redis 7.0 keeps a hash as a *listpack* while it has at most
//!   `hash-max-listpack-entries` fields and no field or value longer than
//!   `hash-max-listpack-value` bytes ([`EncodingLimits`], read when the hash grows), and
//!   converts it to a *hashtable* for good otherwise (`hashTypeTryConversion`, `hashTypeSet`;
//!   a snapshot load or RESTORE builds the hash again under the limits then in force, as
//!   `rdbLoadObject` does). We track the same rule as a sticky flag, for
//!   OBJECT ENCODING and because it decides reply order: a listpack replies in insertion order
//!   (HSET of a new field appends, HDEL closes the gap), so while the flag says listpack, fields
//!   are removed with `shift_remove` (O(n), n ≤ 512, like the listpack's memmove) and every
//!   reply matches Redis byte for byte. A hashtable's order is unspecified in Redis; there we
//!   remove with `swap_remove` (O(1)).
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
use crate::types::{EncodingLimits, Value};

/// Bytes accounted per field beyond its field and value bytes: the entry (hash + two boxed
/// slices, 40 bytes) and its index slot (8).
pub const FIELD_OVERHEAD: usize = 48;
/// Most elements a random-element reply with a negative count may hold (HRANDFIELD,
/// SRANDMEMBER). Redis 7.0 has no bound and will stream 2^62 elements until it runs out of
/// memory; we answer `ERR value is out of range` instead (a deliberate deviation).
pub const RANDOM_REPLY_MAX: u64 = 1 << 24;

type Map = IndexMap<Box<[u8]>, Box<[u8]>, FixedState>;

/// A stored hash. Keeps its own byte count so [`mem_size`](Self::mem_size) is O(1).
#[derive(Clone, Debug)]
pub struct HashValue {
    map: Map,
    /// Accounted bytes (see the module doc, *Memory*).
    bytes: usize,
    /// Converted to a hashtable (sticky, like Redis's encoding).
    hashtable: bool,
}

impl Default for HashValue {
    fn default() -> Self {
        HashValue::new()
    }
}

/// Equal contents (order and encoding aside).
impl PartialEq for HashValue {
    fn eq(&self, other: &Self) -> bool {
        self.map == other.map
    }
}

impl HashValue {
    /// An empty hash with an unseeded hasher (tests, snapshots); commands use
    /// [`with_seed`](Self::with_seed).
    pub fn new() -> HashValue {
        HashValue::with_seed(0)
    }

    /// An empty hash whose hasher is keyed by `seed`.
    pub fn with_seed(seed: u64) -> HashValue {
        HashValue {
            map: Map::with_hasher(FixedState::with_seed(seed)),
            bytes: 0,
            hashtable: false,
        }
    }

    /// Number of fields (HLEN).
    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The value of `field`.
    pub fn get(&self, field: &[u8]) -> Option<&[u8]> {
        self.map.get(field).map(|v| &**v)
    }

    pub fn contains(&self, field: &[u8]) -> bool {
        self.map.contains_key(field)
    }

    /// Sets `field` to `value`; returns true if the field is new. An existing field keeps its
    /// position (the listpack replaces in place). Converts to a hashtable when the field or
    /// value is longer than `hash-max-listpack-value` or the hash grows past
    /// `hash-max-listpack-entries` (redis `hashTypeSet`).
    pub fn set(&mut self, field: &[u8], value: &[u8], lim: &EncodingLimits) -> bool {
        if !lim.hash_fits_value(field.len()) || !lim.hash_fits_value(value.len()) {
            self.hashtable = true;
        }
        // One probe of the index whether the field is new or not (`entry` needs an owned key,
        // which a new field needs anyway; an update pays one allocation for it).
        let new = match self.map.entry(field.into()) {
            indexmap::map::Entry::Occupied(mut o) => {
                let old = o.get_mut();
                self.bytes = self.bytes - old.len() + value.len();
                *old = value.into();
                false
            }
            indexmap::map::Entry::Vacant(v) => {
                self.bytes += field.len() + value.len() + FIELD_OVERHEAD;
                v.insert(value.into());
                true
            }
        };
        if !lim.hash_fits_entries(self.map.len()) {
            self.hashtable = true;
        }
        new
    }

    /// Converts to a hashtable if any of `args` (the fields and values a command is about to
    /// set) is longer than `hash-max-listpack-value`, before any is set (redis
    /// `hashTypeTryConversion`: `HSET h f <long> f short` ends a hashtable).
    pub fn try_conversion<'a>(
        &mut self,
        args: impl IntoIterator<Item = &'a [u8]>,
        lim: &EncodingLimits,
    ) {
        if !self.hashtable && args.into_iter().any(|a| !lim.hash_fits_value(a.len())) {
            self.hashtable = true;
        }
    }

    /// Removes `field`; returns whether it was there.
    pub fn remove(&mut self, field: &[u8]) -> bool {
        let removed = if self.hashtable {
            self.map.swap_remove_entry(field)
        } else {
            self.map.shift_remove_entry(field)
        };
        match removed {
            Some((f, v)) => {
                self.bytes -= f.len() + v.len() + FIELD_OVERHEAD;
                true
            }
            None => false,
        }
    }

    /// Fields and values in reply order (insertion order for a listpack).
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&[u8], &[u8])> {
        self.map.iter().map(|(f, v)| (&**f, &**v))
    }

    /// The field and value at position `i` (`0..len`).
    pub fn get_index(&self, i: usize) -> Option<(&[u8], &[u8])> {
        self.map.get_index(i).map(|(f, v)| (&**f, &**v))
    }

    /// OBJECT ENCODING: `listpack` or `hashtable` (Redis 7.0 names and thresholds).
    pub fn encoding(&self) -> &'static str {
        if self.hashtable {
            "hashtable"
        } else {
            "listpack"
        }
    }

    /// Payload bytes this value accounts for in `used_memory`, kept incrementally (O(1)).
    pub fn mem_size(&self) -> usize {
        self.bytes
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
        if !self.hashtable {
            for (k, v) in self.iter() {
                f(k, v);
            }
            return 0;
        }
        let (next, range) = scan_range(self.map.len(), cursor, count);
        for i in range.rev() {
            let (k, v) = self.get_index(i).expect("in range");
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
    let mut w = c.w();
    header(&mut w, positions.len());
    for p in positions {
        let (f, v) = h.get_index(p).expect("in range");
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
mod tests {
    const LIM: crate::types::EncodingLimits = crate::types::EncodingLimits::DEFAULT;
    use super::*;

    fn rng(seed: u64) -> impl FnMut() -> u64 {
        let mut s = seed;
        move || {
            s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }
    }

    /// The byte count recomputed from scratch, for checking the incremental one.
    fn recount(h: &HashValue) -> usize {
        h.iter()
            .map(|(f, v)| f.len() + v.len() + FIELD_OVERHEAD)
            .sum()
    }

    #[test]
    fn set_get_remove_and_bytes() {
        let mut h = HashValue::with_seed(7);
        assert!(h.is_empty());
        assert!(h.set(b"a", b"1", &LIM));
        assert!(h.set(b"b", b"22", &LIM));
        assert!(!h.set(b"a", b"333", &LIM));
        assert_eq!(h.get(b"a"), Some(&b"333"[..]));
        assert_eq!(h.get(b"zz"), None);
        assert_eq!(h.len(), 2);
        assert_eq!(h.mem_size(), recount(&h));
        assert_eq!(h.mem_size(), 1 + 3 + 1 + 2 + 2 * FIELD_OVERHEAD);
        assert!(h.remove(b"a"));
        assert!(!h.remove(b"a"));
        assert_eq!(h.mem_size(), 1 + 2 + FIELD_OVERHEAD);
        assert!(h.remove(b"b"));
        assert_eq!(h.mem_size(), 0);
        assert!(h.is_empty());
    }

    #[test]
    fn listpack_keeps_insertion_order_through_deletes() {
        let mut h = HashValue::new();
        for f in ["a", "b", "c", "d", "e"] {
            h.set(f.as_bytes(), b"v", &LIM);
        }
        h.remove(b"b");
        h.set(b"c", b"w", &LIM); // update in place
        h.set(b"f", b"v", &LIM);
        let order: Vec<&[u8]> = h.iter().map(|(f, _)| f).collect();
        assert_eq!(order, [&b"a"[..], b"c", b"d", b"e", b"f"]);
        assert_eq!(h.encoding(), "listpack");
    }

    #[test]
    fn encoding_thresholds_are_sticky() {
        let mut h = HashValue::new();
        for i in 0..LIM.hash_max_listpack_entries as usize {
            h.set(format!("f{i}").as_bytes(), b"v", &LIM);
        }
        assert_eq!(h.encoding(), "listpack");
        h.set(b"one-more", b"v", &LIM);
        assert_eq!(h.encoding(), "hashtable");
        h.remove(b"one-more");
        assert_eq!(h.encoding(), "hashtable", "Redis never converts back");

        let mut h = HashValue::new();
        h.set(b"f", &[b'x'; LIM.hash_max_listpack_value as usize], &LIM);
        assert_eq!(h.encoding(), "listpack");
        h.set(
            b"f",
            &[b'x'; LIM.hash_max_listpack_value as usize + 1],
            &LIM,
        );
        assert_eq!(h.encoding(), "hashtable");
        let mut h = HashValue::new();
        h.set(
            &[b'k'; LIM.hash_max_listpack_value as usize + 1],
            b"v",
            &LIM,
        );
        assert_eq!(h.encoding(), "hashtable");
    }

    #[test]
    fn bytes_stay_exact_under_random_churn() {
        let mut h = HashValue::with_seed(1);
        let mut r = rng(3);
        for _ in 0..5000 {
            let f = format!("f{}", r() % 300);
            let v = vec![b'v'; (r() % 100) as usize];
            if r().is_multiple_of(3) {
                h.remove(f.as_bytes());
            } else {
                h.set(f.as_bytes(), &v, &LIM);
            }
            assert_eq!(h.mem_size(), recount(&h));
        }
    }

    #[test]
    fn listpack_scan_returns_everything_at_once() {
        let mut h = HashValue::new();
        for i in 0..50 {
            h.set(format!("f{i}").as_bytes(), b"v", &LIM);
        }
        let mut n = 0;
        assert_eq!(h.scan(0, 1, |_, _| n += 1), 0);
        assert_eq!(n, 50);
        // Any cursor: a listpack ignores it, like Redis.
        n = 0;
        assert_eq!(h.scan(12345, 1, |_, _| n += 1), 0);
        assert_eq!(n, 50);
    }

    #[test]
    fn hashtable_scan_sees_every_stable_field_despite_churn() {
        for seed in 0..10u64 {
            let mut r = rng(seed);
            let mut h = HashValue::with_seed(seed);
            for i in 0..500 {
                h.set(format!("stable{i}").as_bytes(), b"v", &LIM);
            }
            for i in 0..200 {
                h.set(format!("churn{i}").as_bytes(), b"v", &LIM);
            }
            assert_eq!(h.encoding(), "hashtable");
            let mut seen = std::collections::HashSet::new();
            let mut cursor = 0;
            let mut steps = 0;
            loop {
                cursor = h.scan(cursor, 7, |f, _| {
                    seen.insert(f.to_vec());
                });
                // Churn between calls: delete and add non-stable fields.
                let victim = format!("churn{}", r() % 200);
                h.remove(victim.as_bytes());
                h.set(format!("new{}", r() % 1000).as_bytes(), b"v", &LIM);
                steps += 1;
                assert!(steps < 10_000, "scan must end");
                if cursor == 0 {
                    break;
                }
            }
            for i in 0..500 {
                assert!(
                    seen.contains(format!("stable{i}").as_bytes()),
                    "seed {seed}: stable{i} missed"
                );
            }
        }
    }

    #[test]
    fn sample_distinct_is_distinct_and_in_range() {
        let mut r = rng(9);
        for (len, count) in [(10, 1), (10, 9), (10, 3), (1000, 5), (1000, 400), (2, 1)] {
            let s = sample_distinct(len, count, &mut r);
            assert_eq!(s.len(), count);
            let set: std::collections::HashSet<_> = s.iter().collect();
            assert_eq!(set.len(), count, "distinct");
            assert!(s.iter().all(|&p| p < len));
        }
        // Every position gets picked sometimes (uniformity, coarsely).
        let mut hits = [0u32; 10];
        for _ in 0..2000 {
            for p in sample_distinct(10, 2, &mut r) {
                hits[p] += 1;
            }
        }
        assert!(hits.iter().all(|&h| h > 250), "{hits:?}");
    }

    #[test]
    fn scan_opts_grammar() {
        assert_eq!(parse_scan_opts(&[]), Ok((10, None)));
        assert_eq!(
            parse_scan_opts(&[b"COUNT", b"5", b"match", b"a*"]),
            Ok((5, Some(&b"a*"[..])))
        );
        assert_eq!(parse_scan_opts(&[b"MATCH", b"*"]), Ok((10, None)));
        assert_eq!(parse_scan_opts(&[b"COUNT", b"0"]), Err(CmdError::Syntax));
        assert_eq!(parse_scan_opts(&[b"COUNT"]), Err(CmdError::Syntax));
        assert_eq!(parse_scan_opts(&[b"TYPE", b"hash"]), Err(CmdError::Syntax));
        assert_eq!(
            parse_scan_opts(&[b"COUNT", b"x"]),
            Err(CmdError::NotInteger)
        );
    }

    #[test]
    fn scan_range_steps_down() {
        assert_eq!(scan_range(10, 0, 3), (7, 7..10));
        assert_eq!(scan_range(10, 7, 3), (4, 4..7));
        assert_eq!(scan_range(10, 2, 3), (0, 0..2));
        assert_eq!(scan_range(10, 99, 3), (7, 7..10));
        assert_eq!(scan_range(0, 0, 3), (0, 0..0));
    }
}
