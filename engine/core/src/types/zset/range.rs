//! Sorted set ranges: ZRANGE (BYSCORE, BYLEX, REV, LIMIT) and its older forms ZRANGEBYSCORE
//! ZREVRANGEBYSCORE ZRANGEBYLEX ZREVRANGEBYLEX ZREVRANGE, ZRANGESTORE, and ZREMRANGEBYRANK
//! ZREMRANGEBYSCORE ZREMRANGEBYLEX. Shapes, order of checks, effects and the lex-range
//! deviation are those of `cmd.rs`'s module docs.

use super::cmd::{
    ERR_LEX_RANGE, ERR_NOT_FLOAT_RANGE, delete_if_empty, read, store_result, write_entries,
    write_pos,
};
use super::score::{LexRange, ScoreRange};
use super::{ZSetValue, as_zset};
use crate::Engine;
use crate::args::{self, int_arg};
use crate::call::Call;
use crate::error::CmdError;
use crate::notify::{class, notify};
use crate::types::Value;

// ---------------------------------------------------------------------------------------------
// Ranges: ZRANGE and its older forms, ZRANGESTORE, ZREMRANGEBY*
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum By {
    Auto,
    Rank,
    Score,
    Lex,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Dir {
    Auto,
    Forward,
    Reverse,
}

/// A parsed range of any kind.
pub(super) enum Range {
    Rank(i64, i64),
    Score(ScoreRange),
    Lex(LexRange),
}

/// The members a range selects: `count` members walking from 0-based rank `start` (downward
/// when `reverse`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Selection {
    pub(super) start: usize,
    pub(super) count: usize,
    pub(super) reverse: bool,
}

pub(super) const EMPTY: Selection = Selection {
    start: 0,
    count: 0,
    reverse: false,
};

/// Rank indexes as Redis clamps them: negative from the end, `(start, end)` inclusive.
pub(super) fn clamp_ranks(start: i64, end: i64, len: usize) -> Option<(usize, usize)> {
    crate::args::clamp_index_range(start, end, len)
}

/// What `range` selects in `z`, after `LIMIT offset count` (score and lex ranges; `limit` < 0
/// means all). As in Redis, a negative offset selects nothing.
///
/// The count never exceeds the members between `start` and the end it walks to, so a reply
/// whose length is written before its elements always gets exactly that many.
pub(super) fn select(
    z: &ZSetValue,
    range: &Range,
    reverse: bool,
    offset: i64,
    limit: i64,
) -> Selection {
    let sel = select_unclamped(z, range, reverse, offset, limit);
    let room = if sel.start >= z.len() {
        0
    } else if sel.reverse {
        sel.start + 1
    } else {
        z.len() - sel.start
    };
    debug_assert!(sel.count <= room, "{sel:?} in {} members", z.len());
    Selection {
        count: sel.count.min(room),
        ..sel
    }
}

fn select_unclamped(
    z: &ZSetValue,
    range: &Range,
    reverse: bool,
    offset: i64,
    limit: i64,
) -> Selection {
    let span = match range {
        Range::Rank(s, e) => {
            return match clamp_ranks(*s, *e, z.len()) {
                None => EMPTY,
                Some((s, e)) => Selection {
                    start: if reverse { z.len() - 1 - s } else { s },
                    count: e - s + 1,
                    reverse,
                },
            };
        }
        Range::Score(r) => z.score_span(r),
        Range::Lex(r) => return select_lex(z, r, reverse, offset, limit),
    };
    let Some((first, last)) = span else {
        return EMPTY;
    };
    let inside = last - first + 1;
    if offset < 0 || offset as u64 >= inside as u64 {
        return EMPTY;
    }
    let offset = offset as usize;
    let mut count = inside - offset;
    if limit >= 0 {
        count = count.min(usize::try_from(limit).unwrap_or(usize::MAX));
    }
    Selection {
        start: if reverse {
            last - offset
        } else {
            first + offset
        },
        count,
        reverse,
    }
}

/// [`select`] for a lex range, walked the way redis `genericZrangebylexCommand` walks it:
/// from the range's first member (its last when `reverse`), skip `offset` members whatever
/// they are, then take members while the far bound holds, at most `limit`. With equal scores
/// that is the slice of the range; with mixed scores (members out of byte order) a run can
/// stop early or, after an offset, start outside the range, exactly as in Redis.
pub(super) fn select_lex(
    z: &ZSetValue,
    r: &LexRange,
    reverse: bool,
    offset: i64,
    limit: i64,
) -> Selection {
    let Ok(offset) = usize::try_from(offset) else {
        return EMPTY;
    };
    let Some(first) = z.lex_start(r, reverse) else {
        return EMPTY;
    };
    let start = if reverse {
        first.checked_sub(offset)
    } else {
        first.checked_add(offset).filter(|&s| s < z.len())
    };
    let Some(start) = start else {
        return EMPTY;
    };
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    Selection {
        start,
        count: z.lex_run(start, r, reverse, limit),
        reverse,
    }
}

/// `ZRANGE key start stop [BYSCORE|BYLEX] [REV] [LIMIT offset count] [WITHSCORES]`.
pub fn zrange(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    range_generic(e, c, 1, None, By::Auto, Dir::Auto)
}

/// `ZRANGESTORE dst src min max [BYSCORE|BYLEX] [REV] [LIMIT offset count]` → stored size.
pub fn zrangestore(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let dst = c.argv[1];
    range_generic(e, c, 2, Some(dst), By::Auto, Dir::Auto)
}

/// `ZRANGEBYSCORE key min max [WITHSCORES] [LIMIT offset count]`.
pub fn zrangebyscore(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    range_generic(e, c, 1, None, By::Score, Dir::Forward)
}

/// `ZREVRANGEBYSCORE key max min [WITHSCORES] [LIMIT offset count]`.
pub fn zrevrangebyscore(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    range_generic(e, c, 1, None, By::Score, Dir::Reverse)
}

/// `ZRANGEBYLEX key min max [LIMIT offset count]`.
pub fn zrangebylex(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    range_generic(e, c, 1, None, By::Lex, Dir::Forward)
}

/// `ZREVRANGEBYLEX key max min [LIMIT offset count]`.
pub fn zrevrangebylex(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    range_generic(e, c, 1, None, By::Lex, Dir::Reverse)
}

/// `ZREVRANGE key start stop [WITHSCORES]`.
pub fn zrevrange(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    range_generic(e, c, 1, None, By::Rank, Dir::Reverse)
}

/// redis `zrangeGenericCommand`. `first` is the index of the source key; `store` the
/// destination of ZRANGESTORE.
fn range_generic(
    e: &mut Engine,
    c: &mut Call,
    first: usize,
    store: Option<&[u8]>,
    mut by: By,
    mut dir: Dir,
) -> Result<(), CmdError> {
    let argv = c.argv;
    let key = argv[first];
    let (mut minidx, mut maxidx) = (first + 1, first + 2);
    let mut withscores = false;
    let (mut offset, mut limit) = (0i64, -1i64);
    let mut j = first + 3;
    while j < argv.len() {
        let left = argv.len() - j - 1;
        let a = argv[j];
        if store.is_none() && args::is(a, "withscores") {
            withscores = true;
        } else if args::is(a, "limit") && left >= 2 {
            offset = int_arg(argv[j + 1])?;
            limit = int_arg(argv[j + 2])?;
            j += 2;
        } else if dir == Dir::Auto && args::is(a, "rev") {
            dir = Dir::Reverse;
        } else if by == By::Auto && args::is(a, "bylex") {
            by = By::Lex;
        } else if by == By::Auto && args::is(a, "byscore") {
            by = By::Score;
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    let reverse = dir == Dir::Reverse;
    if by == By::Auto {
        by = By::Rank;
    }
    // Redis tests the value, so `LIMIT 0 -1` passes with a rank range.
    if limit != -1 && by == By::Rank {
        return Err(CmdError::Static(
            "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        ));
    }
    if withscores && by == By::Lex {
        return Err(CmdError::Static(
            "ERR syntax error, WITHSCORES not supported in combination with BYLEX",
        ));
    }
    if reverse && by != By::Rank {
        // The range is given as max, min.
        std::mem::swap(&mut minidx, &mut maxidx);
    }
    let range = match by {
        By::Score => {
            Range::Score(ScoreRange::parse(argv[minidx], argv[maxidx]).ok_or(ERR_NOT_FLOAT_RANGE)?)
        }
        By::Lex => Range::Lex(LexRange::parse(argv[minidx], argv[maxidx]).ok_or(ERR_LEX_RANGE)?),
        _ => Range::Rank(int_arg(argv[minidx])?, int_arg(argv[maxidx])?),
    };
    let lim = e.config.encoding;
    // The seed of a ZRANGESTORE destination (drawn before the source is borrowed).
    let seed = if store.is_some() {
        e.ks.next_random()
    } else {
        0
    };
    let Some(z) = read(e, key, c.now_ms)? else {
        match store {
            Some(dst) => store_result(e, c, dst, ZSetValue::new(seed), "zrangestore"),
            None => c.w().array(0),
        }
        return Ok(());
    };
    let sel = select(z, &range, reverse, offset, limit);
    let items = z.walk(sel.start, sel.count, sel.reverse);
    match store {
        None => write_entries(&mut c.w(), sel.count, withscores, items),
        Some(dst) => {
            // Redis creates the destination as a skiplist when a rank range is known to
            // exceed the listpack limit, else as a listpack that converts while filling.
            let mut out = if matches!(range, Range::Rank(..)) && !lim.zset_fits_entries(sel.count) {
                ZSetValue::new_skiplist(seed)
            } else {
                ZSetValue::new(seed)
            };
            for (m, s) in items {
                out.insert(m, s, &lim);
            }
            store_result(e, c, dst, out, "zrangestore");
        }
    }
    Ok(())
}

/// `ZREMRANGEBYRANK key start stop` → members removed.
pub fn zremrangebyrank(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let range = Range::Rank(int_arg(c.argv[2])?, int_arg(c.argv[3])?);
    remrange_generic(e, c, range, "zremrangebyrank")
}

/// `ZREMRANGEBYSCORE key min max` → members removed.
pub fn zremrangebyscore(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let r = ScoreRange::parse(c.argv[2], c.argv[3]).ok_or(ERR_NOT_FLOAT_RANGE)?;
    remrange_generic(e, c, Range::Score(r), "zremrangebyscore")
}

/// `ZREMRANGEBYLEX key min max` → members removed.
pub fn zremrangebylex(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let r = LexRange::parse(c.argv[2], c.argv[3]).ok_or(ERR_LEX_RANGE)?;
    remrange_generic(e, c, Range::Lex(r), "zremrangebylex")
}

/// redis `zremrangeGenericCommand`.
fn remrange_generic(
    e: &mut Engine,
    c: &mut Call,
    range: Range,
    event: &str,
) -> Result<(), CmdError> {
    let key = c.argv[1];
    let Some(i) = write_pos(e, key, c.now_ms)? else {
        c.w().integer(0);
        return Ok(());
    };
    let sel = select(as_zset(e.ks.value(i))?, &range, false, 0, -1);
    if sel.count == 0 {
        c.w().integer(0);
        return Ok(());
    }
    let removed = e.ks.update(i, |v| match v {
        Value::ZSet(z) => z.remove_rank_range(sel.start, sel.count),
        _ => 0,
    });
    c.w().integer(removed as i64);
    notify(e, class::ZSET, event, key);
    delete_if_empty(e, i, key);
    Ok(())
}
