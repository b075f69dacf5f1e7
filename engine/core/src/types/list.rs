//! The list type (redis 7.0 `t_list.c`): the value's API first, then its commands.
//!
//! # Value
//! A [`ListValue`] lives in [`super::quicklist`]: a deque of contiguous nodes of entries cut by
//! `list-max-listpack-size` (redis `quicklist.c`): O(1) amortized push/pop at both ends, index
//! access in O(nodes) (LINDEX, LSET, LRANGE's start), O(n) for LINSERT/LREM/LPOS like Redis,
//! and an O(1) byte count for `used_memory`. OBJECT ENCODING answers `quicklist`, as Redis
//! 7.0.15 does for every list (lists became *listpack* when small only in 7.2). A list reads
//! `list-max-listpack-size` when a command creates it, as Redis does.
//!
//! # Commands
//! LPUSH RPUSH LPUSHX RPUSHX LPOP RPOP (with count) LLEN LRANGE LINDEX LSET LREM LTRIM LINSERT
//! LPOS (RANK COUNT MAXLEN) LMOVE RPOPLPUSH LMPOP, and the blocking BLPOP BRPOP BLMOVE
//! BRPOPLPUSH BLMPOP (parking and waking: [`crate::blocking`]). Argument checks happen in
//! Redis's order (e.g. LRANGE parses its indexes before looking at the key, LINDEX after), so
//! every error matches redis-server 7.0.15 (`tests/diff/lists.txt`).
//!
//! - A list emptied by a command is deleted (and `del` is announced), like Redis.
//! - Keyspace events (via [`notify`]): `lpush`/`rpush` (once per command), `lpop`/`rpop`,
//!   `linsert`, `lset`, `lrem`, `ltrim` (even when nothing was trimmed, as Redis), LMOVE →
//!   `lpush`/`rpush` on the destination then `lpop`/`rpop` on the source; `del` when emptied.
//! - Replies: `LPOP key` → bulk | nil; `LPOP key n` → array | null array (`*-1`/`_`) for a
//!   missing key; `LMPOP`/`BLMPOP` → `[key, [elements…]]` | null array; `BLPOP` → `[key,
//!   element]` | null array on timeout; `BLMOVE` → bulk | null array on timeout but null bulk
//!   inside MULTI (redis `blmoveGenericCommand` uses `addReplyNull` there).

use crate::Engine;
use crate::args::{self, int_arg};
use crate::blocking;
use crate::call::Call;
use crate::error::CmdError;
use crate::keyspace::Keep;
use crate::notify::{class, notify};
use crate::types::Value;

pub use super::quicklist::{End, ListValue};

impl End {
    /// The event name of a push at this end.
    fn push_event(self) -> &'static str {
        match self {
            End::Head => "lpush",
            End::Tail => "rpush",
        }
    }

    /// The event name of a pop at this end.
    fn pop_event(self) -> &'static str {
        match self {
            End::Head => "lpop",
            End::Tail => "rpop",
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Commands
// ---------------------------------------------------------------------------------------------

/// The list inside `v`, or WRONGTYPE.
pub fn as_list(v: &Value) -> Result<&ListValue, CmdError> {
    match v {
        Value::List(l) => Ok(l),
        _ => Err(CmdError::WrongType),
    }
}

/// The list at keyspace position `i` (type already checked), for a change through
/// `Keyspace::update` so memory accounting stays right.
fn with_list<R>(e: &mut Engine, i: usize, f: impl FnOnce(&mut ListValue) -> R) -> R {
    e.ks.update(i, |v| match v {
        Value::List(l) => f(l),
        // Every caller checked the type with `as_list` first.
        _ => unreachable!("list type checked before update"),
    })
}

/// A live list at `key` for a write: `Ok(None)` if absent, WRONGTYPE if not a list.
fn lookup_list_write(e: &mut Engine, key: &[u8], now_ms: u64) -> Result<Option<usize>, CmdError> {
    match e.ks.lookup_write(key, now_ms) {
        None => Ok(None),
        Some(i) => {
            as_list(e.ks.value(i))?;
            Ok(Some(i))
        }
    }
}

/// A live list at `key` for a read (counts a hit or miss): `Ok(None)` if absent.
fn lookup_list_read(e: &mut Engine, key: &[u8], now_ms: u64) -> Result<Option<usize>, CmdError> {
    match e.ks.lookup_read(key, now_ms) {
        None => Ok(None),
        Some(i) => {
            as_list(e.ks.value(i))?;
            Ok(Some(i))
        }
    }
}

/// redis `listElementsRemoved`: after pops from the list at `i`, announces `lpop`/`rpop` and
/// deletes the key (announcing `del`) when the list is empty.
fn elements_removed(e: &mut Engine, i: usize, key: &[u8], end: End) {
    let empty = as_list(e.ks.value(i)).is_ok_and(ListValue::is_empty);
    if empty {
        e.ks.remove_at(i);
    }
    notify(e, class::LIST, end.pop_event(), key);
    if empty {
        notify(e, class::GENERIC, "del", key);
    }
}

/// Writes `[from, to]` of the list at `i` as an array, tail first when `reverse`
/// (redis `addListRangeReply`).
fn reply_range(e: &Engine, c: &mut Call, i: usize, range: Option<(usize, usize)>, reverse: bool) {
    let Ok(l) = as_list(e.ks.value(i)) else {
        return;
    };
    let Some((from, to)) = range else {
        c.w().array(0);
        return;
    };
    let mut w = c.w();
    w.array(to - from + 1);
    if reverse {
        l.range(from, to).rev().for_each(|x| w.bulk(x));
    } else {
        l.range(from, to).for_each(|x| w.bulk(x));
    }
}

/// `LEFT`/`RIGHT` (redis `getListPositionFromObjectOrReply`), else a syntax error.
fn parse_end(arg: &[u8]) -> Result<End, CmdError> {
    if args::is(arg, "left") {
        Ok(End::Head)
    } else if args::is(arg, "right") {
        Ok(End::Tail)
    } else {
        Err(CmdError::Syntax)
    }
}

/// redis `getRangeLongFromObjectOrReply(…, min, LONG_MAX, msg)`: a non-integer and a value
/// below `min` both answer `msg`.
fn long_at_least(arg: &[u8], min: i64, msg: &'static str) -> Result<i64, CmdError> {
    match args::parse_i64(arg) {
        Some(n) if n >= min => Ok(n),
        _ => Err(CmdError::Static(msg)),
    }
}

/// Pushes `elems` at `end` of the list at `key`; `only_existing` = LPUSHX/RPUSHX. Replies with
/// the new length (0 for an absent key with `only_existing`). redis `pushGenericCommand`.
fn push_generic(
    e: &mut Engine,
    c: &mut Call,
    end: End,
    only_existing: bool,
) -> Result<(), CmdError> {
    let (key, elems) = (c.argv[1], &c.argv[2..]);
    let len = match lookup_list_write(e, key, c.now_ms)? {
        Some(i) => with_list(e, i, |l| {
            elems.iter().for_each(|x| l.push(x, end));
            l.len()
        }),
        None if only_existing => {
            c.w().integer(0);
            return Ok(());
        }
        None => {
            let mut l = ListValue::with_fill(e.config.encoding.list_max_listpack_size);
            elems.iter().for_each(|x| l.push(x, end));
            let len = l.len();
            e.ks.set(key, Value::List(Box::new(l)), Keep::Nothing, None);
            len
        }
    };
    c.w().integer(len as i64);
    notify(e, class::LIST, end.push_event(), key);
    blocking::signal_ready(e, key);
    Ok(())
}

/// `LPUSH key element [element …]` → new length; WRONGTYPE.
pub fn lpush(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    push_generic(e, c, End::Head, false)
}

/// `RPUSH key element [element …]` → new length; WRONGTYPE.
pub fn rpush(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    push_generic(e, c, End::Tail, false)
}

/// `LPUSHX key element [element …]` → new length, 0 if the key is absent.
pub fn lpushx(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    push_generic(e, c, End::Head, true)
}

/// `RPUSHX key element [element …]` → new length, 0 if the key is absent.
pub fn rpushx(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    push_generic(e, c, End::Tail, true)
}

/// redis `popGenericCommand`: `LPOP|RPOP key [count]`.
fn pop_generic(e: &mut Engine, c: &mut Call, end: End) -> Result<(), CmdError> {
    if c.argv.len() > 3 {
        return Err(CmdError::Arity(c.spec.name));
    }
    let count = match c.argv.get(2) {
        Some(a) => Some(long_at_least(
            a,
            0,
            "ERR value is out of range, must be positive",
        )?),
        None => None,
    };
    let key = c.argv[1];
    let Some(i) = lookup_list_write(e, key, c.now_ms)? else {
        match count {
            Some(_) => c.w().null_array(),
            None => c.w().null(),
        }
        return Ok(());
    };
    match count {
        None => {
            let Some(x) = with_list(e, i, |l| l.pop(end)) else {
                c.w().null();
                return Ok(());
            };
            c.w().bulk(&x);
        }
        Some(0) => {
            c.w().array(0);
            return Ok(());
        }
        Some(n) => pop_range_reply(e, c, i, end, n),
    }
    elements_removed(e, i, key, end);
    Ok(())
}

/// Pops up to `count` elements from `end` of the list at `i`, replying with them as an array
/// in pop order (the [LR]POP-with-count / LMPOP body).
fn pop_range_reply(e: &mut Engine, c: &mut Call, i: usize, end: End, count: i64) {
    let len = as_list(e.ks.value(i)).map_or(0, ListValue::len);
    let n = usize::try_from(count).unwrap_or(usize::MAX).min(len);
    let range = if n == 0 {
        None
    } else {
        match end {
            End::Head => Some((0, n - 1)),
            End::Tail => Some((len - n, len - 1)),
        }
    };
    reply_range(e, c, i, range, end == End::Tail);
    with_list(e, i, |l| match end {
        End::Head => l.trim(n, 0),
        End::Tail => l.trim(0, n),
    });
}

/// `LPOP key [count]` → bulk | nil, or with count an array | null array; count < 0 →
/// `ERR value is out of range, must be positive`.
pub fn lpop(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    pop_generic(e, c, End::Head)
}

/// `RPOP key [count]`: as LPOP from the tail (elements in pop order, last first).
pub fn rpop(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    pop_generic(e, c, End::Tail)
}

/// `LLEN key` → length (0 if absent).
pub fn llen(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let n = match lookup_list_read(e, c.argv[1], c.now_ms)? {
        Some(i) => as_list(e.ks.value(i))?.len(),
        None => 0,
    };
    c.w().integer(n as i64);
    Ok(())
}

/// `LRANGE key start stop` → array (indexes parsed before the key is looked at).
pub fn lrange(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let start = int_arg(c.argv[2])?;
    let stop = int_arg(c.argv[3])?;
    let Some(i) = lookup_list_read(e, c.argv[1], c.now_ms)? else {
        c.w().array(0);
        return Ok(());
    };
    let range = as_list(e.ks.value(i))?.clamp_range(start, stop);
    reply_range(e, c, i, range, false);
    Ok(())
}

/// `LINDEX key index` → bulk | nil (the key is looked at before the index is parsed).
pub fn lindex(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let Some(i) = lookup_list_read(e, c.argv[1], c.now_ms)? else {
        c.w().null();
        return Ok(());
    };
    let index = int_arg(c.argv[2])?;
    match as_list(e.ks.value(i))?.get(index) {
        Some(x) => {
            let mut w = c.w();
            w.bulk(x);
        }
        None => c.w().null(),
    }
    Ok(())
}

/// `LSET key index element` → OK; `ERR no such key`, `ERR index out of range`.
pub fn lset(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let key = c.argv[1];
    let Some(i) = lookup_list_write(e, key, c.now_ms)? else {
        return Err(CmdError::NoSuchKey);
    };
    let index = int_arg(c.argv[2])?;
    if as_list(e.ks.value(i))?.get(index).is_none() {
        return Err(CmdError::Static("ERR index out of range"));
    }
    let elem = c.argv[3];
    with_list(e, i, |l| l.set(index, elem));
    c.w().ok();
    notify(e, class::LIST, "lset", key);
    Ok(())
}

/// `LREM key count element` → number removed.
pub fn lrem(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let count = int_arg(c.argv[2])?;
    let key = c.argv[1];
    let Some(i) = lookup_list_write(e, key, c.now_ms)? else {
        c.w().integer(0);
        return Ok(());
    };
    let elem = c.argv[3];
    let removed = with_list(e, i, |l| l.remove(count, elem));
    c.w().integer(removed as i64);
    if removed > 0 {
        let empty = as_list(e.ks.value(i)).is_ok_and(ListValue::is_empty);
        if empty {
            e.ks.remove_at(i);
        }
        notify(e, class::LIST, "lrem", key);
        if empty {
            notify(e, class::GENERIC, "del", key);
        }
    }
    Ok(())
}

/// `LTRIM key start stop` → OK.
pub fn ltrim(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let start = int_arg(c.argv[2])?;
    let stop = int_arg(c.argv[3])?;
    let key = c.argv[1];
    let Some(i) = lookup_list_write(e, key, c.now_ms)? else {
        c.w().ok();
        return Ok(());
    };
    let l = as_list(e.ks.value(i))?;
    let len = l.len();
    let (ltrim, rtrim) = match l.clamp_range(start, stop) {
        Some((from, to)) => (from, len - to - 1),
        None => (len, 0),
    };
    let empty = with_list(e, i, |l| {
        l.trim(ltrim, rtrim);
        l.is_empty()
    });
    if empty {
        e.ks.remove_at(i);
    }
    notify(e, class::LIST, "ltrim", key);
    if empty {
        notify(e, class::GENERIC, "del", key);
    }
    c.w().ok();
    Ok(())
}

/// `LINSERT key BEFORE|AFTER pivot element` → new length, -1 without the pivot, 0 without
/// the key (the position word is checked first).
pub fn linsert(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let after = if args::is(c.argv[2], "after") {
        true
    } else if args::is(c.argv[2], "before") {
        false
    } else {
        return Err(CmdError::Syntax);
    };
    let key = c.argv[1];
    let Some(i) = lookup_list_write(e, key, c.now_ms)? else {
        c.w().integer(0);
        return Ok(());
    };
    let (pivot, elem) = (c.argv[3], c.argv[4]);
    // Look first: `update` counts a change even when the closure changes nothing.
    if !as_list(e.ks.value(i))?.iter().any(|x| x == pivot) {
        c.w().integer(-1);
        return Ok(());
    }
    let len = with_list(e, i, |l| l.insert(pivot, elem, after)).unwrap_or(0);
    c.w().integer(len as i64);
    notify(e, class::LIST, "linsert", key);
    Ok(())
}

/// `LPOS key element [RANK rank] [COUNT num-matches] [MAXLEN len]` → index | nil, or with
/// COUNT an array (redis `lposCommand`, including its C integer arithmetic for extreme RANKs).
pub fn lpos(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let mut rank: i64 = 1;
    let mut count: Option<i64> = None;
    let mut maxlen: i64 = 0;
    let opts = &c.argv[3..];
    let mut j = 0;
    while j < opts.len() {
        let more = j + 1 < opts.len();
        if args::is(opts[j], "rank") && more {
            j += 1;
            rank = int_arg(opts[j])?;
            if rank == 0 {
                return Err(CmdError::Static(
                    "ERR RANK can't be zero: use 1 to start from the first match, 2 from the \
                     second ... or use negative to start from the end of the list",
                ));
            }
        } else if args::is(opts[j], "count") && more {
            j += 1;
            count = Some(long_at_least(opts[j], 0, "ERR COUNT can't be negative")?);
        } else if args::is(opts[j], "maxlen") && more {
            j += 1;
            maxlen = long_at_least(opts[j], 0, "ERR MAXLEN can't be negative")?;
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    let from_tail = rank < 0;
    if from_tail {
        // `rank = -rank` in C: LONG_MIN stays LONG_MIN (and then matches any rank).
        rank = rank.wrapping_neg();
    }
    let Some(i) = lookup_list_read(e, c.argv[1], c.now_ms)? else {
        match count {
            Some(_) => c.w().array(0),
            None => c.w().null(),
        }
        return Ok(());
    };
    let elem = c.argv[2];
    let l = as_list(e.ks.value(i))?;
    let len = l.len() as i64;
    let scan_limit = if maxlen == 0 { len } else { maxlen.min(len) };
    let mut found: Vec<i64> = Vec::new();
    let mut matches: i64 = 0;
    let items: Box<dyn Iterator<Item = &[u8]>> = if from_tail {
        Box::new(l.iter().rev())
    } else {
        Box::new(l.iter())
    };
    for (index, x) in (0..scan_limit).zip(items) {
        if x != elem {
            continue;
        }
        matches += 1;
        if matches < rank {
            continue;
        }
        found.push(if from_tail { len - index - 1 } else { index });
        match count {
            None => break,
            Some(n) => {
                if n != 0 && matches.wrapping_sub(rank).wrapping_add(1) >= n {
                    break;
                }
            }
        }
    }
    let mut w = c.w();
    match count {
        Some(_) => {
            w.array(found.len());
            found.iter().for_each(|&p| w.integer(p));
        }
        None => match found.first() {
            Some(&p) => w.integer(p),
            None => w.null(),
        },
    }
    Ok(())
}

/// redis `lmoveGenericCommand`: pops from `from` of the source, pushes at `to` of the
/// destination (created if absent; the same key rotates), replies with the element or nil
/// when the source is absent. WRONGTYPE for either key.
fn lmove_generic(e: &mut Engine, c: &mut Call, from: End, to: End) -> Result<(), CmdError> {
    let (src, dst) = (c.argv[1], c.argv[2]);
    if lookup_list_write(e, src, c.now_ms)?.is_none() {
        c.w().null();
        return Ok(());
    }
    let di = lookup_list_write(e, dst, c.now_ms)?;
    // Looking up the destination may have expired it and moved entries: find the source again.
    let Some(si) = lookup_list_write(e, src, c.now_ms)? else {
        c.w().null();
        return Ok(());
    };
    let Some(value) = with_list(e, si, |l| {
        let v = l.pop(from)?;
        if src == dst {
            l.push(&v, to);
        }
        Some(v)
    }) else {
        c.w().null();
        return Ok(());
    };
    if src != dst {
        match di {
            Some(di) => with_list(e, di, |l| l.push(&value, to)),
            None => {
                let mut l = ListValue::with_fill(e.config.encoding.list_max_listpack_size);
                l.push(&value, to);
                // A new key goes to the end of the keyspace: `si` stays valid.
                e.ks.set(dst, Value::List(Box::new(l)), Keep::Nothing, None);
            }
        }
    }
    notify(e, class::LIST, to.push_event(), dst);
    blocking::signal_ready(e, dst);
    c.w().bulk(&value);
    elements_removed(e, si, src, from);
    Ok(())
}

/// `LMOVE source destination LEFT|RIGHT LEFT|RIGHT` → element | nil.
pub fn lmove(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let from = parse_end(c.argv[3])?;
    let to = parse_end(c.argv[4])?;
    lmove_generic(e, c, from, to)
}

/// `RPOPLPUSH source destination` = `LMOVE source destination RIGHT LEFT`.
pub fn rpoplpush(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    lmove_generic(e, c, End::Tail, End::Head)
}

/// Parsed `numkeys key [key …] LEFT|RIGHT [COUNT count]` of LMPOP/BLMPOP (redis
/// `lmpopGenericCommand`): the keys' argv range, the end and the count (default 1).
fn parse_mpop(argv: &[&[u8]], numkeys_idx: usize) -> Result<(usize, usize, End, i64), CmdError> {
    let numkeys = long_at_least(argv[numkeys_idx], 1, "ERR numkeys should be greater than 0")?;
    let where_idx = usize::try_from(numkeys)
        .ok()
        .and_then(|n| n.checked_add(numkeys_idx + 1))
        .filter(|&w| w < argv.len())
        .ok_or(CmdError::Syntax)?;
    let end = parse_end(argv[where_idx])?;
    let mut count = None;
    let mut j = where_idx + 1;
    while j < argv.len() {
        if count.is_none() && args::is(argv[j], "count") && j + 1 < argv.len() {
            j += 1;
            count = Some(long_at_least(
                argv[j],
                1,
                "ERR count should be greater than 0",
            )?);
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    Ok((numkeys_idx + 1, where_idx, end, count.unwrap_or(1)))
}

/// The first non-empty list among `keys` (WRONGTYPE if a non-list comes first), as a
/// keyspace position with the key's index in `keys`.
fn first_nonempty(
    e: &mut Engine,
    keys: &[&[u8]],
    now_ms: u64,
) -> Result<Option<(usize, usize)>, CmdError> {
    for (k, key) in keys.iter().enumerate() {
        if let Some(i) = lookup_list_write(e, key, now_ms)?
            && as_list(e.ks.value(i)).is_ok_and(|l| !l.is_empty())
        {
            return Ok(Some((i, k)));
        }
    }
    Ok(None)
}

/// Pops from the first non-empty list among `keys`: `[key, element]` without a count (BLPOP),
/// `[key, [elements…]]` with one (LMPOP). Returns false when every list is absent.
fn pop_first_nonempty(
    e: &mut Engine,
    c: &mut Call,
    keys: &[&[u8]],
    end: End,
    count: Option<i64>,
) -> Result<bool, CmdError> {
    let Some((i, k)) = first_nonempty(e, keys, c.now_ms)? else {
        return Ok(false);
    };
    let key = keys[k];
    c.w().array(2);
    c.w().bulk(key);
    match count {
        None => {
            let x = with_list(e, i, |l| l.pop(end)).unwrap_or_default();
            c.w().bulk(&x);
        }
        Some(n) => pop_range_reply(e, c, i, end, n),
    }
    elements_removed(e, i, key, end);
    Ok(true)
}

/// `LMPOP numkeys key [key …] LEFT|RIGHT [COUNT count]` → `[key, [elements…]]` | null array.
pub fn lmpop(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let argv = c.argv;
    let (first, where_idx, end, count) = parse_mpop(argv, 1)?;
    if !pop_first_nonempty(e, c, &argv[first..where_idx], end, Some(count))? {
        c.w().null_array();
    }
    Ok(())
}

/// redis `blockingPopGenericCommand`: the timeout is parsed first, then the first non-empty
/// list is popped; with none, the client parks (or, inside EXEC, gets a null array).
fn blocking_pop(
    e: &mut Engine,
    c: &mut Call,
    keys: &[&[u8]],
    timeout: &[u8],
    end: End,
    count: Option<i64>,
) -> Result<(), CmdError> {
    let deadline = blocking::parse_timeout(timeout, c.now_us)?;
    if pop_first_nonempty(e, c, keys, end, count)? {
        return Ok(());
    }
    if !blocking::block(e, c, keys, deadline) {
        c.w().null_array();
    }
    Ok(())
}

/// `BLPOP key [key …] timeout` → `[key, element]` | null array on timeout.
pub fn blpop(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let argv = c.argv;
    let n = argv.len();
    blocking_pop(e, c, &argv[1..n - 1], argv[n - 1], End::Head, None)
}

/// `BRPOP key [key …] timeout` → `[key, element]` | null array on timeout.
pub fn brpop(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let argv = c.argv;
    let n = argv.len();
    blocking_pop(e, c, &argv[1..n - 1], argv[n - 1], End::Tail, None)
}

/// `BLMPOP timeout numkeys key [key …] LEFT|RIGHT [COUNT count]` → as LMPOP | null array on
/// timeout (arguments are checked before the timeout, as Redis does).
pub fn blmpop(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let argv = c.argv;
    let (first, where_idx, end, count) = parse_mpop(argv, 2)?;
    blocking_pop(e, c, &argv[first..where_idx], argv[1], end, Some(count))
}

/// redis `blmoveGenericCommand`: LMOVE if the source has elements, else park on the source
/// (inside EXEC: null bulk).
fn blmove_generic(
    e: &mut Engine,
    c: &mut Call,
    from: End,
    to: End,
    timeout: &[u8],
) -> Result<(), CmdError> {
    let deadline = blocking::parse_timeout(timeout, c.now_us)?;
    let argv = c.argv;
    if lookup_list_write(e, argv[1], c.now_ms)?.is_some() {
        return lmove_generic(e, c, from, to);
    }
    if !blocking::block(e, c, &argv[1..2], deadline) {
        c.w().null();
    }
    Ok(())
}

/// `BLMOVE source destination LEFT|RIGHT LEFT|RIGHT timeout` → element | null array on timeout.
pub fn blmove(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let from = parse_end(c.argv[3])?;
    let to = parse_end(c.argv[4])?;
    let timeout = c.argv[5];
    blmove_generic(e, c, from, to, timeout)
}

/// `BRPOPLPUSH source destination timeout` = BLMOVE … RIGHT LEFT.
pub fn brpoplpush(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let timeout = c.argv[3];
    blmove_generic(e, c, End::Tail, End::Head, timeout)
}
