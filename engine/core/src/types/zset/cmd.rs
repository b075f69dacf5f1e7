//! Sorted set commands, with Redis 7.0.15's replies and errors (redis `t_zset.c`; checked
//! against a real redis-server: `tests/diff/zsets.txt`).
//!
//! ZADD ZINCRBY ZREM ZSCORE ZMSCORE ZCARD ZCOUNT ZLEXCOUNT ZRANGE ZRANGESTORE ZRANGEBYSCORE
//! ZREVRANGEBYSCORE ZRANGEBYLEX ZREVRANGEBYLEX ZREVRANGE ZRANK ZREVRANK ZPOPMIN ZPOPMAX ZMPOP
//! ZREMRANGEBYRANK ZREMRANGEBYSCORE ZREMRANGEBYLEX ZUNION ZINTER ZDIFF ZUNIONSTORE ZINTERSTORE
//! ZDIFFSTORE ZINTERCARD ZRANDMEMBER ZSCAN, and the blocking BZPOPMIN BZPOPMAX BZMPOP.
//!
//! # Shapes
//! - Scores are doubles: a bulk string in RESP2, `,` in RESP3 ([`super::score::fmt_reply`]).
//! - `WITHSCORES` replies (ZRANGE…, ZUNION/ZINTER/ZDIFF, ZRANDMEMBER) and ZPOPMIN/ZPOPMAX with
//!   a count are flat `[m, s, m, s…]` in RESP2 and `[[m, s], …]` in RESP3; ZMPOP/BZMPOP give
//!   `[key, [[m, s], …]]` in both; BZPOPMIN/BZPOPMAX give `[key, m, s]`.
//!
//! # Order of checks
//! As in Redis: syntax and number parsing first, then the key lookup and its type, then the
//! range. Errors that Redis raises after partial work cannot happen here: ZADD's scores are all
//! parsed first and the one possible NaN (INCR) is found before anything changes.
//!
//! # Effects
//! A command changes the keyspace only when something really changes (a ZADD that updates
//! nothing leaves `dirty` alone), announces it with Redis's event name (`zadd`, `zincr`,
//! `zrem`, `zremrangebyrank`, `zremrangebyscore`, `zremrangebylex` — what redis-server 7.0.15
//! really sends, although some docs say `zrembyscore` —, `zpopmin`, `zpopmax`, `zunionstore`,
//! `zinterstore`, `zdiffstore`, `zrangestore`) and then `del` if the zset became empty (an
//! empty zset is deleted). The STORE forms overwrite the destination whatever its type and
//! clear its TTL (redis `setKey`); an empty result deletes it.
//!
//! # Deviations
//! - ZRANDMEMBER with a negative count above 2^24 answers `ERR value is out of range`
//!   ([`hash::RANDOM_REPLY_MAX`]): Redis 7.0 would try to build the whole reply.
//! - ZRANK/ZREVRANK `WITHSCORE` (Redis 7.2) is implemented, with the command table's arity
//!   overridden to -3 (scripts/gen-command-table.py): `ZRANK z a b` is 7.2's `ERR syntax error`,
//!   not 7.0.15's arity error (tested by shape in tests/zset.rs).
//! - Lex ranges (ZRANGEBYLEX, ZRANGE … BYLEX, ZLEXCOUNT, ZREMRANGEBYLEX, ZRANGESTORE … BYLEX)
//!   over a zset whose scores differ are "undefined" in Redis. We always answer as Redis does
//!   for a listpack-encoded zset (find the start by a scan, then walk while the far bound
//!   holds; see `range::select_lex`), so zsets of up to 128 members match redis-server byte for byte.
//!   For a larger one Redis's answer depends on its random skiplist levels; ours stays the
//!   listpack answer, found in O(n) instead of O(log n). With equal scores (the documented
//!   use) both are the plain slice of the range, found in O(log n).

use super::range::select_lex;
use resp::{Proto, ReplyWriter};

use super::score::{self, LexRange, ScoreRange, parse_score};
use super::{AddFlags, AddOutcome, ZSetValue, as_zset, as_zset_mut};
use crate::Engine;
use crate::args::{self};
use crate::blocking;
use crate::call::Call;
use crate::error::CmdError;
use crate::keyspace::Keep;
use crate::notify::{class, notify};
use crate::types::Value;
use crate::types::hash;

const ERR_NAN: CmdError = CmdError::Static("ERR resulting score is not a number (NaN)");
pub(super) const ERR_NOT_FLOAT_RANGE: CmdError = CmdError::Static("ERR min or max is not a float");
pub(super) const ERR_LEX_RANGE: CmdError =
    CmdError::Static("ERR min or max not valid string range item");

// ---------------------------------------------------------------------------------------------
// Reply helpers
// ---------------------------------------------------------------------------------------------

/// A score as a double reply.
pub fn write_score(w: &mut ReplyWriter<'_>, s: f64) {
    let mut b = Vec::with_capacity(24);
    score::fmt_reply(s, &mut b);
    w.double_text(&b);
}

/// `n` members with optional scores: flat in RESP2, `[m, s]` pairs in RESP3.
pub(super) fn write_entries<'a>(
    w: &mut ReplyWriter<'_>,
    n: usize,
    withscores: bool,
    items: impl Iterator<Item = (&'a [u8], f64)>,
) {
    let resp3 = w.proto == Proto::Resp3;
    w.array(if withscores && !resp3 { 2 * n } else { n });
    for (m, s) in items {
        if withscores && resp3 {
            w.array(2);
        }
        w.bulk(m);
        if withscores {
            write_score(w, s);
        }
    }
}

/// The zset at `key` for reading (counts a hit or miss); WRONGTYPE for another type.
pub(crate) fn read<'e>(
    e: &'e mut Engine,
    key: &[u8],
    now_ms: u64,
) -> Result<Option<&'e ZSetValue>, CmdError> {
    match e.ks.lookup_read(key, now_ms) {
        None => Ok(None),
        Some(i) => as_zset(e.ks.value(i)).map(Some),
    }
}

/// The keyspace position of the zset at `key` before a write; WRONGTYPE for another type.
pub(super) fn write_pos(
    e: &mut Engine,
    key: &[u8],
    now_ms: u64,
) -> Result<Option<usize>, CmdError> {
    match e.ks.lookup_write(key, now_ms) {
        None => Ok(None),
        Some(i) => {
            as_zset(e.ks.value(i))?;
            Ok(Some(i))
        }
    }
}

/// Deletes the zset at `i` if it became empty; announces `del`. Returns whether it did.
pub(super) fn delete_if_empty(e: &mut Engine, i: usize, key: &[u8]) -> bool {
    if matches!(e.ks.value(i), Value::ZSet(z) if z.is_empty()) {
        e.ks.remove_at(i);
        notify(e, class::GENERIC, "del", key);
        true
    } else {
        false
    }
}

/// Stores a computed zset at `dst` (STORE forms, redis `setKey` + notification), or deletes
/// `dst` when the result is empty; replies with the result's size.
pub(super) fn store_result(e: &mut Engine, c: &mut Call, dst: &[u8], z: ZSetValue, event: &str) {
    let n = z.len();
    let existing = e.ks.lookup_write(dst, c.now_ms);
    if n > 0 {
        e.ks.set(dst, Value::ZSet(z), Keep::Nothing, existing);
        c.w().integer(n as i64);
        notify(e, class::ZSET, event, dst);
    } else {
        c.w().integer(0);
        if let Some(i) = existing {
            e.ks.remove_at(i);
            notify(e, class::GENERIC, "del", dst);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// ZADD ZINCRBY ZREM
// ---------------------------------------------------------------------------------------------

/// `ZADD key [NX|XX] [GT|LT] [CH] [INCR] score member [score member …]` → added (or
/// changed with CH) | the new score with INCR (nil when skipped).
pub fn zadd(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    zadd_generic(e, c, false)
}

/// `ZINCRBY key increment member` → the new score. Shares ZADD's parser, so an increment that
/// reads as a ZADD option (`nx`, `ch`…) is a syntax error, as in Redis.
pub fn zincrby(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    zadd_generic(e, c, true)
}

/// Counts of one ZADD (redis `zaddGenericCommand`'s `added`, `updated`, `processed`, score).
#[derive(Default)]
struct Tally {
    added: i64,
    updated: i64,
    processed: i64,
    score: f64,
}

impl Tally {
    fn count(&mut self, o: AddOutcome) {
        match o {
            AddOutcome::Added(s) => {
                self.added += 1;
                self.processed += 1;
                self.score = s;
            }
            AddOutcome::Updated(s) => {
                self.updated += 1;
                self.processed += 1;
                self.score = s;
            }
            AddOutcome::Same(s) => {
                self.processed += 1;
                self.score = s;
            }
            AddOutcome::Nop | AddOutcome::Nan => {}
        }
    }
}

fn zadd_generic(e: &mut Engine, c: &mut Call, incr: bool) -> Result<(), CmdError> {
    let argv = c.argv;
    let key = argv[1];
    let mut f = AddFlags {
        incr,
        ..AddFlags::default()
    };
    let mut ch = false;
    let mut idx = 2;
    while idx < argv.len() {
        let o = argv[idx];
        if args::is(o, "nx") {
            f.nx = true;
        } else if args::is(o, "xx") {
            f.xx = true;
        } else if args::is(o, "ch") {
            ch = true;
        } else if args::is(o, "incr") {
            f.incr = true;
        } else if args::is(o, "gt") {
            f.gt = true;
        } else if args::is(o, "lt") {
            f.lt = true;
        } else {
            break;
        }
        idx += 1;
    }
    let elements = argv.len() - idx;
    if elements == 0 || !elements.is_multiple_of(2) {
        return Err(CmdError::Syntax);
    }
    if f.nx && f.xx {
        return Err(CmdError::Static(
            "ERR XX and NX options at the same time are not compatible",
        ));
    }
    if (f.nx && (f.gt || f.lt)) || (f.gt && f.lt) {
        return Err(CmdError::Static(
            "ERR GT, LT, and/or NX options at the same time are not compatible",
        ));
    }
    if f.incr && elements > 2 {
        return Err(CmdError::Static(
            "ERR INCR option supports a single increment-element pair",
        ));
    }
    let pairs = argv[idx..]
        .chunks_exact(2)
        .map(|p| Ok((parse_score(p[0]).ok_or(CmdError::NotFloat)?, p[1])))
        .collect::<Result<Vec<(f64, &[u8])>, CmdError>>()?;
    let mut t = Tally::default();
    let lim = e.config.encoding;
    let pos = write_pos(e, key, c.now_ms)?;
    let dirty = e.ks.dirty;
    match pos {
        None if f.xx => {}
        None => {
            let mut z = ZSetValue::new(e.ks.next_random());
            for &(s, m) in &pairs {
                t.count(z.add(m, s, f, &lim));
            }
            e.ks.set(key, Value::ZSet(z), Keep::Nothing, None);
        }
        Some(i) => {
            // Plan against the current value first: nothing is touched (and `dirty` stays)
            // unless a pair changes something; pairs evaluated one by one against an unchanged
            // value are exactly what the real run does until its first change.
            let z = as_zset(e.ks.value(i))?;
            let mut changes = false;
            let mut dry = Tally::default();
            for &(s, m) in &pairs {
                let o = z.plan_add(m, s, f);
                if o == AddOutcome::Nan {
                    return Err(ERR_NAN);
                }
                if o.changes() {
                    changes = true;
                    break;
                }
                dry.count(o);
            }
            if changes {
                t = e.ks.update(i, |v| -> Result<Tally, CmdError> {
                    let z = as_zset_mut(v)?;
                    let mut t = Tally::default();
                    for &(s, m) in &pairs {
                        t.count(z.add(m, s, f, &lim));
                    }
                    Ok(t)
                })?;
            } else {
                t = dry;
            }
        }
    }
    if f.incr {
        if t.processed > 0 {
            write_score(&mut c.w(), t.score);
        } else {
            c.w().null();
        }
    } else {
        c.w()
            .integer(if ch { t.added + t.updated } else { t.added });
    }
    if t.added + t.updated > 0 {
        // Redis counts one change per member added or updated.
        e.ks.dirty = dirty + (t.added + t.updated) as u64;
        notify(e, class::ZSET, if f.incr { "zincr" } else { "zadd" }, key);
    }
    Ok(())
}

/// `ZREM key member [member …]` → members removed.
pub fn zrem(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let key = c.argv[1];
    let members = &c.argv[2..];
    let Some(i) = write_pos(e, key, c.now_ms)? else {
        c.w().integer(0);
        return Ok(());
    };
    let present = {
        let z = as_zset(e.ks.value(i))?;
        members.iter().any(|m| z.score(m).is_some())
    };
    if !present {
        c.w().integer(0);
        return Ok(());
    }
    let removed = e.ks.update(i, |v| match v {
        Value::ZSet(z) => members.iter().filter(|m| z.remove(m).is_some()).count(),
        _ => 0,
    });
    c.w().integer(removed as i64);
    notify(e, class::ZSET, "zrem", key);
    delete_if_empty(e, i, key);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Reads of single members and counts
// ---------------------------------------------------------------------------------------------

/// `ZSCORE key member` → score | nil.
pub fn zscore(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let s = read(e, c.argv[1], c.now_ms)?.and_then(|z| z.score(c.argv[2]));
    match s {
        Some(s) => write_score(&mut c.w(), s),
        None => c.w().null(),
    }
    Ok(())
}

/// `ZMSCORE key member [member …]` → array of score | nil.
pub fn zmscore(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let members = &c.argv[2..];
    let z = read(e, c.argv[1], c.now_ms)?;
    let mut w = c.w();
    w.array(members.len());
    for m in members {
        match z.and_then(|z| z.score(m)) {
            Some(s) => write_score(&mut w, s),
            None => w.null(),
        }
    }
    Ok(())
}

/// `ZCARD key` → number of members.
pub fn zcard(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let n = read(e, c.argv[1], c.now_ms)?.map_or(0, ZSetValue::len);
    c.w().integer(n as i64);
    Ok(())
}

/// `ZCOUNT key min max` → members with a score in the range.
pub fn zcount(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let r = ScoreRange::parse(c.argv[2], c.argv[3]).ok_or(ERR_NOT_FLOAT_RANGE)?;
    let n = read(e, c.argv[1], c.now_ms)?
        .and_then(|z| z.score_span(&r))
        .map_or(0, |(f, l)| l - f + 1);
    c.w().integer(n as i64);
    Ok(())
}

/// `ZLEXCOUNT key min max` → members in the lex range.
pub fn zlexcount(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let r = LexRange::parse(c.argv[2], c.argv[3]).ok_or(ERR_LEX_RANGE)?;
    let n = read(e, c.argv[1], c.now_ms)?.map_or(0, |z| select_lex(z, &r, false, 0, -1).count);
    c.w().integer(n as i64);
    Ok(())
}

/// `ZRANK key member [WITHSCORE]` → rank | nil (`[rank, score]` | nil array with WITHSCORE).
pub fn zrank(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    rank_generic(e, c, false)
}

/// `ZREVRANK key member [WITHSCORE]` → rank from the top | nil.
pub fn zrevrank(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    rank_generic(e, c, true)
}

/// redis 7.2 `zrankGenericCommand` (WITHSCORE; see the module doc).
fn rank_generic(e: &mut Engine, c: &mut Call, reverse: bool) -> Result<(), CmdError> {
    if c.argv.len() > 4 {
        return Err(CmdError::Arity(c.spec.name));
    }
    let withscore = match c.argv.get(3) {
        None => false,
        Some(a) if args::is(a, "withscore") => true,
        Some(_) => return Err(CmdError::Syntax),
    };
    let r = read(e, c.argv[1], c.now_ms)?.and_then(|z| z.rank(c.argv[2], reverse));
    write_rank(&mut c.w(), r, withscore);
    Ok(())
}

/// ZRANK's reply: rank | nil, or with WITHSCORE `[rank, score]` | nil array (redis 7.2).
fn write_rank(w: &mut ReplyWriter<'_>, r: Option<(usize, f64)>, withscore: bool) {
    match r {
        Some((rank, s)) if withscore => {
            w.array(2);
            w.integer(rank as i64);
            write_score(w, s);
        }
        Some((rank, _)) => w.integer(rank as i64),
        None if withscore => w.null_array(),
        None => w.null(),
    }
}

// ---------------------------------------------------------------------------------------------
// Pops: ZPOPMIN ZPOPMAX ZMPOP (the blocking forms are at the end)
// ---------------------------------------------------------------------------------------------

/// Reply shapes of the pop family (redis `genericZpopCommand`'s `emitkey` /
/// `use_nested_array`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PopShape {
    /// `[m, s, …]`: ZPOPMIN/ZPOPMAX without a count, or in RESP2.
    Flat,
    /// `[[m, s], …]`: ZPOPMIN/ZPOPMAX with a count in RESP3.
    Nested,
    /// `[key, m, s]`: BZPOPMIN/BZPOPMAX.
    KeyFlat,
    /// `[key, [[m, s], …]]`: ZMPOP/BZMPOP.
    KeyNested,
}

/// Pops up to `count` members (`max`: highest first) from the zset at keyspace position `i`
/// named `key`, writes the reply in `shape`, announces `zpopmin`/`zpopmax` (and `del` when the
/// zset is emptied and deleted). The zset must exist and be non-empty.
pub fn pop_and_reply(
    e: &mut Engine,
    w: &mut ReplyWriter<'_>,
    i: usize,
    key: &[u8],
    max: bool,
    count: usize,
    shape: PopShape,
) {
    let popped: Vec<(Box<[u8]>, f64)> = e.ks.update(i, |v| match v {
        Value::ZSet(z) => std::iter::from_fn(|| z.pop(max)).take(count).collect(),
        _ => Vec::new(),
    });
    let n = popped.len();
    match shape {
        PopShape::Flat => w.array(2 * n),
        PopShape::Nested => w.array(n),
        PopShape::KeyFlat => {
            w.array(2 * n + 1);
            w.bulk(key);
        }
        PopShape::KeyNested => {
            w.array(2);
            w.bulk(key);
            w.array(n);
        }
    }
    let nested = matches!(shape, PopShape::Nested | PopShape::KeyNested);
    for (m, s) in &popped {
        if nested {
            w.array(2);
        }
        w.bulk(m);
        write_score(w, *s);
    }
    notify(e, class::ZSET, if max { "zpopmax" } else { "zpopmin" }, key);
    delete_if_empty(e, i, key);
}

/// `ZPOPMIN key [count]` → `[m, s, …]` (RESP3 with a count: `[[m, s], …]`).
pub fn zpopmin(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    zpop_generic(e, c, false)
}

/// `ZPOPMAX key [count]`.
pub fn zpopmax(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    zpop_generic(e, c, true)
}

/// A count that must be ≥ 0 (redis `getPositiveLongFromObjectOrReply` without a message:
/// a non-integer gets the same error as a negative number).
fn positive_count(arg: &[u8]) -> Result<i64, CmdError> {
    args::parse_i64(arg)
        .filter(|&n| n >= 0)
        .ok_or(CmdError::Static(
            "ERR value is out of range, must be positive",
        ))
}

fn zpop_generic(e: &mut Engine, c: &mut Call, max: bool) -> Result<(), CmdError> {
    if c.argv.len() > 3 {
        return Err(CmdError::Syntax);
    }
    let count = match c.argv.get(2) {
        Some(a) => Some(positive_count(a)?),
        None => None,
    };
    let key = c.argv[1];
    let Some(i) = write_pos(e, key, c.now_ms)? else {
        c.w().array(0);
        return Ok(());
    };
    if count == Some(0) {
        c.w().array(0);
        return Ok(());
    }
    let shape = if count.is_some() && c.client.proto == Proto::Resp3 {
        PopShape::Nested
    } else {
        PopShape::Flat
    };
    let n = count.map_or(1, |n| usize::try_from(n).unwrap_or(usize::MAX));
    let mut w = c.w();
    pop_and_reply(e, &mut w, i, key, max, n, shape);
    Ok(())
}

/// Parsed `numkeys key [key …] MIN|MAX [COUNT count]` (redis `zmpopGenericCommand`).
struct MpopArgs<'a> {
    keys: &'a [&'a [u8]],
    max: bool,
    count: usize,
}

fn parse_mpop<'a>(argv: &'a [&'a [u8]], numkeys_idx: usize) -> Result<MpopArgs<'a>, CmdError> {
    let numkeys = args::parse_i64(argv[numkeys_idx])
        .filter(|&n| n >= 1)
        .ok_or(CmdError::Static("ERR numkeys should be greater than 0"))?;
    let where_idx = usize::try_from(numkeys)
        .ok()
        .and_then(|n| n.checked_add(numkeys_idx + 1))
        .filter(|&w| w < argv.len())
        .ok_or(CmdError::Syntax)?;
    let max = if args::is(argv[where_idx], "min") {
        false
    } else if args::is(argv[where_idx], "max") {
        true
    } else {
        return Err(CmdError::Syntax);
    };
    let mut count: Option<usize> = None;
    let mut j = where_idx + 1;
    while j < argv.len() {
        if count.is_none() && args::is(argv[j], "count") && j + 1 < argv.len() {
            let n = args::parse_i64(argv[j + 1])
                .filter(|&n| n >= 1)
                .ok_or(CmdError::Static("ERR count should be greater than 0"))?;
            count = Some(usize::try_from(n).unwrap_or(usize::MAX));
            j += 2;
        } else {
            return Err(CmdError::Syntax);
        }
    }
    Ok(MpopArgs {
        keys: &argv[numkeys_idx + 1..where_idx],
        max,
        count: count.unwrap_or(1),
    })
}

/// The first of `keys` that holds a zset, as `(position, key)`; WRONGTYPE stops at the first
/// key of another type (redis `genericZpopCommand`'s candidate loop).
fn first_zset<'k>(
    e: &mut Engine,
    keys: &[&'k [u8]],
    now_ms: u64,
) -> Result<Option<(usize, &'k [u8])>, CmdError> {
    for &k in keys {
        if let Some(i) = write_pos(e, k, now_ms)? {
            return Ok(Some((i, k)));
        }
    }
    Ok(None)
}

/// `ZMPOP numkeys key [key …] MIN|MAX [COUNT count]` → `[key, [[m, s], …]]` | nil.
pub fn zmpop(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let a = parse_mpop(c.argv, 1)?;
    match first_zset(e, a.keys, c.now_ms)? {
        None => c.w().null_array(),
        Some((i, key)) => {
            let mut w = c.w();
            pop_and_reply(e, &mut w, i, key, a.max, a.count, PopShape::KeyNested);
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// ZRANDMEMBER ZSCAN
// ---------------------------------------------------------------------------------------------

/// `ZRANDMEMBER key [count [WITHSCORES]]` → member | nil, or an array (distinct members for
/// a positive count, possibly repeated for a negative one).
pub fn zrandmember(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let argv = c.argv;
    if argv.len() < 3 {
        let Some(i) = e.ks.lookup_read(argv[1], c.now_ms) else {
            c.w().null();
            return Ok(());
        };
        let len = as_zset(e.ks.value(i))?.len() as u64;
        let r = (e.ks.next_random() % len) as usize;
        if let Some((m, _)) = as_zset(e.ks.value(i))?.at_position(r) {
            c.w().bulk(m);
        }
        return Ok(());
    }
    let l = hash::parse_random_count(argv[2])?;
    if argv.len() > 4 || (argv.len() == 4 && !args::is(argv[3], "withscores")) {
        return Err(CmdError::Syntax);
    }
    let withscores = argv.len() == 4;
    if withscores && !(-(i64::MAX / 2)..=i64::MAX / 2).contains(&l) {
        return Err(CmdError::Static("ERR value is out of range"));
    }
    let Some(i) = e.ks.lookup_read(argv[1], c.now_ms) else {
        c.w().array(0);
        return Ok(());
    };
    let size = as_zset(e.ks.value(i))?.len();
    let count = l.unsigned_abs();
    if count == 0 {
        c.w().array(0);
        return Ok(());
    }
    let picks: Vec<usize> = if l < 0 || count == 1 {
        hash::check_random_reply_len(count)?;
        (0..count)
            .map(|_| (e.ks.next_random() % size as u64) as usize)
            .collect()
    } else if count >= size as u64 {
        // The whole zset, from the highest score down (the order Redis 7.0 replies in).
        let z = as_zset(e.ks.value(i))?;
        write_entries(&mut c.w(), size, withscores, z.walk(size - 1, size, true));
        return Ok(());
    } else {
        hash::sample_distinct(size, count as usize, &mut || e.ks.next_random())
    };
    let z = as_zset(e.ks.value(i))?;
    write_entries(
        &mut c.w(),
        picks.len(),
        withscores,
        picks.iter().filter_map(|&p| z.at_position(p)),
    );
    Ok(())
}

/// `ZSCAN key cursor [MATCH pattern] [COUNT count]` → `[cursor, [m, s, …]]`. A listpack-encoded
/// zset answers whole, in order, with cursor 0 and `d2string` scores, like Redis.
pub fn zscan(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let cursor = args::parse_u64_cursor(c.argv[2])?;
    let Some(z) = read(e, c.argv[1], c.now_ms)? else {
        hash::write_scan_reply(c, 0, &[]);
        return Ok(());
    };
    let (count, pattern) = hash::parse_scan_opts(&c.argv[3..])?;
    let mut items: Vec<Vec<u8>> = Vec::new();
    let mut add = |m: &[u8], s: f64, listpack: bool| {
        if let Some(p) = pattern
            && !crate::glob::matches(p, m, false)
        {
            return;
        }
        items.push(m.to_vec());
        let mut t = Vec::with_capacity(24);
        if listpack {
            score::fmt_d2string(s, &mut t);
        } else {
            score::fmt_reply(s, &mut t);
        }
        items.push(t);
    };
    let next = if z.is_listpack() {
        for (m, s) in z.iter() {
            add(m, s, true);
        }
        0
    } else {
        z.scan(cursor, count, |m, s| add(m, s, false))
    };
    let refs: Vec<&[u8]> = items.iter().map(Vec::as_slice).collect();
    hash::write_scan_reply(c, next, &refs);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Blocking pops: BZPOPMIN BZPOPMAX BZMPOP
// ---------------------------------------------------------------------------------------------

/// `BZPOPMIN key [key …] timeout` → `[key, m, s]`, or nil after the timeout (the client is
/// parked with [`blocking::block`] until a write makes one of its keys a non-empty zset).
pub fn bzpopmin(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    bzpop_generic(e, c, false)
}

/// `BZPOPMAX key [key …] timeout`.
pub fn bzpopmax(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    bzpop_generic(e, c, true)
}

/// redis `blockingGenericZpopCommand` for BZPOPMIN/BZPOPMAX: the timeout is parsed first,
/// then the keys are tried in order (WRONGTYPE at the first key of another type).
fn bzpop_generic(e: &mut Engine, c: &mut Call, max: bool) -> Result<(), CmdError> {
    let argv = c.argv;
    let deadline = blocking::parse_timeout(argv[argv.len() - 1], c.now_us)?;
    let keys = &argv[1..argv.len() - 1];
    match first_zset(e, keys, c.now_ms)? {
        Some((i, key)) => {
            let mut w = c.w();
            pop_and_reply(e, &mut w, i, key, max, 1, PopShape::KeyFlat);
        }
        None => {
            if !blocking::block(e, c, keys, deadline) {
                c.w().null_array();
            }
        }
    }
    Ok(())
}

/// `BZMPOP timeout numkeys key [key …] MIN|MAX [COUNT count]` → `[key, [[m, s], …]]`, or nil
/// after the timeout. As in Redis, numkeys, MIN|MAX and COUNT are checked before the timeout.
pub fn bzmpop(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let a = parse_mpop(c.argv, 2)?;
    let deadline = blocking::parse_timeout(c.argv[1], c.now_us)?;
    match first_zset(e, a.keys, c.now_ms)? {
        Some((i, key)) => {
            let mut w = c.w();
            pop_and_reply(e, &mut w, i, key, a.max, a.count, PopShape::KeyNested);
        }
        None => {
            if !blocking::block(e, c, a.keys, deadline) {
                c.w().null_array();
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::zset::range::{EMPTY, Range, Selection, clamp_ranks, select};

    fn reply(proto: Proto, f: impl FnOnce(&mut ReplyWriter<'_>)) -> String {
        let mut out = Vec::new();
        f(&mut ReplyWriter::new(&mut out, proto));
        String::from_utf8(out).unwrap()
    }

    /// ZRANK … WITHSCORE shapes as the Redis 7.2 docs give them (7.0.15 has no WITHSCORE, so
    /// this is checked by shape here rather than differentially).
    #[test]
    fn rank_withscore_shapes() {
        use Proto::{Resp2, Resp3};
        let some = Some((2, 1.5));
        assert_eq!(reply(Resp2, |w| write_rank(w, some, false)), ":2\r\n");
        assert_eq!(
            reply(Resp2, |w| write_rank(w, some, true)),
            "*2\r\n:2\r\n$3\r\n1.5\r\n"
        );
        assert_eq!(
            reply(Resp3, |w| write_rank(w, some, true)),
            "*2\r\n:2\r\n,1.5\r\n"
        );
        assert_eq!(reply(Resp2, |w| write_rank(w, None, false)), "$-1\r\n");
        assert_eq!(reply(Resp2, |w| write_rank(w, None, true)), "*-1\r\n");
        assert_eq!(reply(Resp3, |w| write_rank(w, None, true)), "_\r\n");
    }

    #[test]
    fn rank_clamping_and_selection() {
        assert_eq!(clamp_ranks(0, -1, 5), Some((0, 4)));
        assert_eq!(clamp_ranks(-100, 100, 5), Some((0, 4)));
        assert_eq!(clamp_ranks(3, 2, 5), None);
        assert_eq!(clamp_ranks(5, 9, 5), None);
        assert_eq!(clamp_ranks(-1, -2, 5), None);
        assert_eq!(clamp_ranks(0, -1, 0), None);
        let mut z = ZSetValue::new(1);
        for i in 0..10 {
            z.insert(
                format!("m{i}").as_bytes(),
                i as f64,
                &crate::types::EncodingLimits::DEFAULT,
            );
        }
        let all = Range::Score(ScoreRange::parse(b"-inf", b"+inf").unwrap());
        let sel = |r: &Range, rev, off, lim| select(&z, r, rev, off, lim);
        assert_eq!(
            sel(&all, false, 2, 3),
            Selection {
                start: 2,
                count: 3,
                reverse: false
            }
        );
        assert_eq!(
            sel(&all, true, 2, 3),
            Selection {
                start: 7,
                count: 3,
                reverse: true
            }
        );
        assert_eq!(sel(&all, false, 8, -1).count, 2);
        assert_eq!(sel(&all, false, -1, 5), EMPTY);
        assert_eq!(sel(&all, false, 10, 5), EMPTY);
        assert_eq!(sel(&all, false, i64::MAX, i64::MAX), EMPTY);
        assert_eq!(sel(&all, false, 0, i64::MAX).count, 10);
        assert_eq!(
            sel(&Range::Rank(-3, -1), true, 0, -1),
            Selection {
                start: 2,
                count: 3,
                reverse: true
            }
        );
        assert_eq!(
            sel(&Range::Rank(i64::MIN, i64::MAX), false, 0, -1).count,
            10
        );
    }
}
