//! Sorted set algebra: ZUNION ZINTER ZDIFF, their STORE forms, and ZINTERCARD (redis
//! `zunionInterDiffGenericCommand`). Sources may be sets (scores 1) as in Redis; shapes and
//! effects are those of `cmd.rs`'s module docs.

use super::ZSetValue;
use super::cmd::{store_result, write_entries};
use super::score::parse_score;
use crate::Engine;
use crate::args::{self, int_arg};
use crate::call::Call;
use crate::error::CmdError;
use crate::types::Value;
use crate::types::set::{Member, SetValue};

// ---------------------------------------------------------------------------------------------
// ZUNION ZINTER ZDIFF and their STORE forms, ZINTERCARD
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum SetOp {
    Union,
    Inter,
    Diff,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Aggregate {
    Sum,
    Min,
    Max,
}

/// redis `zunionInterAggregate`: `inf + -inf` sums to 0.
fn aggregate(target: &mut f64, v: f64, how: Aggregate) {
    match how {
        Aggregate::Sum => {
            *target += v;
            if target.is_nan() {
                *target = 0.0;
            }
        }
        Aggregate::Min => {
            if v < *target {
                *target = v;
            }
        }
        Aggregate::Max => {
            if v > *target {
                *target = v;
            }
        }
    }
}

/// An input of a set operation: a zset, or a set whose members all score 1 (redis
/// `zsetopsrc`).
#[derive(Clone, Copy)]
enum Source<'a> {
    Missing,
    Z(&'a ZSetValue),
    S(&'a SetValue),
}

impl<'a> Source<'a> {
    fn len(&self) -> usize {
        match self {
            Source::Missing => 0,
            Source::Z(z) => z.len(),
            Source::S(s) => s.len(),
        }
    }

    fn score(&self, m: &[u8]) -> Option<f64> {
        match self {
            Source::Missing => None,
            Source::Z(z) => z.score(m),
            Source::S(s) => s.contains(m).then_some(1.0),
        }
    }

    fn for_each(&self, mut f: impl FnMut(Member<'a>, f64) -> bool) {
        match self {
            Source::Missing => {}
            Source::Z(z) => {
                for (m, s) in z.iter() {
                    if !f(Member::Bytes(m), s) {
                        return;
                    }
                }
            }
            Source::S(s) => {
                for m in s.iter() {
                    if !f(m, 1.0) {
                        return;
                    }
                }
            }
        }
    }
}

/// `ZUNION numkeys key [key …] [WEIGHTS w …] [AGGREGATE SUM|MIN|MAX] [WITHSCORES]`.
pub fn zunion(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    setop_generic(e, c, None, 1, SetOp::Union, false)
}

/// `ZINTER numkeys key [key …] [WEIGHTS w …] [AGGREGATE SUM|MIN|MAX] [WITHSCORES]`.
pub fn zinter(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    setop_generic(e, c, None, 1, SetOp::Inter, false)
}

/// `ZDIFF numkeys key [key …] [WITHSCORES]`.
pub fn zdiff(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    setop_generic(e, c, None, 1, SetOp::Diff, false)
}

/// `ZUNIONSTORE dst numkeys key [key …] [WEIGHTS w …] [AGGREGATE …]` → stored size.
pub fn zunionstore(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let dst = c.argv[1];
    setop_generic(e, c, Some(dst), 2, SetOp::Union, false)
}

/// `ZINTERSTORE dst numkeys key [key …] [WEIGHTS w …] [AGGREGATE …]` → stored size.
pub fn zinterstore(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let dst = c.argv[1];
    setop_generic(e, c, Some(dst), 2, SetOp::Inter, false)
}

/// `ZDIFFSTORE dst numkeys key [key …]` → stored size.
pub fn zdiffstore(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let dst = c.argv[1];
    setop_generic(e, c, Some(dst), 2, SetOp::Diff, false)
}

/// `ZINTERCARD numkeys key [key …] [LIMIT limit]` → size of the intersection (at most
/// `limit`, 0 = no limit).
pub fn zintercard(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    setop_generic(e, c, None, 1, SetOp::Inter, true)
}

/// redis `zunionInterDiffGenericCommand`.
fn setop_generic(
    e: &mut Engine,
    c: &mut Call,
    dst: Option<&[u8]>,
    numkeys_idx: usize,
    op: SetOp,
    card_only: bool,
) -> Result<(), CmdError> {
    let argv = c.argv;
    let setnum = int_arg(argv[numkeys_idx])?;
    if setnum < 1 {
        return Err(CmdError::Other(format!(
            "ERR at least 1 input key is needed for '{}' command",
            c.spec.name
        )));
    }
    if setnum as u64 > (argv.len() - (numkeys_idx + 1)) as u64 {
        return Err(CmdError::Syntax);
    }
    let setnum = setnum as usize;
    let keys = &argv[numkeys_idx + 1..numkeys_idx + 1 + setnum];
    // Pass 1, in key order: expire, count hits/misses, check types (Redis does this before
    // reading the options, so WRONGTYPE wins over a syntax error).
    for k in keys {
        if let Some(i) = e.ks.lookup_read(k, c.now_ms)
            && !matches!(e.ks.value(i), Value::ZSet(_) | Value::Set(_))
        {
            return Err(CmdError::WrongType);
        }
    }
    let mut weights = vec![1.0f64; setnum];
    let mut how = Aggregate::Sum;
    let mut withscores = false;
    let mut limit: u64 = 0;
    let mut j = numkeys_idx + 1 + setnum;
    while j < argv.len() {
        let remaining = argv.len() - j;
        let a = argv[j];
        if op != SetOp::Diff && !card_only && remaining > setnum && args::is(a, "weights") {
            j += 1;
            for w in weights.iter_mut() {
                *w = parse_score(argv[j])
                    .ok_or(CmdError::Static("ERR weight value is not a float"))?;
                j += 1;
            }
        } else if op != SetOp::Diff && !card_only && remaining >= 2 && args::is(a, "aggregate") {
            let v = argv[j + 1];
            how = if args::is(v, "sum") {
                Aggregate::Sum
            } else if args::is(v, "min") {
                Aggregate::Min
            } else if args::is(v, "max") {
                Aggregate::Max
            } else {
                return Err(CmdError::Syntax);
            };
            j += 2;
        } else if dst.is_none() && !card_only && args::is(a, "withscores") {
            withscores = true;
            j += 1;
        } else if card_only && remaining >= 2 && args::is(a, "limit") {
            limit = args::parse_i64(argv[j + 1])
                .and_then(|n| u64::try_from(n).ok())
                .ok_or(CmdError::Static("ERR LIMIT can't be negative"))?;
            j += 2;
        } else {
            return Err(CmdError::Syntax);
        }
    }
    // Pass 2: positions. Every key is now live or gone, so these lookups change nothing and
    // the positions stay valid together.
    let positions: Vec<Option<usize>> = keys
        .iter()
        .map(|k| e.ks.lookup_write(k, c.now_ms))
        .collect();
    let seed = e.ks.next_random();
    let mut srcs: Vec<(Source, f64)> = positions
        .iter()
        .zip(&weights)
        .map(|(p, &w)| {
            let s = match p.map(|i| e.ks.value(i)) {
                Some(Value::ZSet(z)) => Source::Z(z),
                Some(Value::Set(s)) => Source::S(s),
                _ => Source::Missing,
            };
            (s, w)
        })
        .collect();
    if op != SetOp::Diff {
        // Smallest first, stable (glibc's qsort here is a merge sort): the order in which
        // scores are summed, so results match Redis to the last bit.
        srcs.sort_by_key(|(s, _)| s.len());
    }
    let lim = e.config.encoding;
    let mut out = ZSetValue::new_skiplist(seed);
    let mut card: u64 = 0;
    match op {
        SetOp::Inter => {
            let (first, w0) = srcs[0];
            first.for_each(|m, s| {
                let mut score = w0 * s;
                if score.is_nan() {
                    score = 0.0;
                }
                for &(src, w) in &srcs[1..] {
                    match src.score(&m) {
                        Some(v) => aggregate(&mut score, v * w, how),
                        None => return true,
                    }
                }
                if card_only {
                    card += 1;
                    return limit == 0 || card < limit;
                }
                out.insert(&m, score, &lim);
                true
            });
        }
        SetOp::Union => {
            let mut acc: indexmap::IndexMap<Member, f64, foldhash::fast::FixedState> =
                indexmap::IndexMap::with_capacity_and_hasher(
                    srcs.last().map_or(0, |(s, _)| s.len()),
                    foldhash::fast::FixedState::with_seed(seed),
                );
            for &(src, w) in &srcs {
                src.for_each(|m, s| {
                    let mut score = w * s;
                    if score.is_nan() {
                        score = 0.0;
                    }
                    match acc.entry(m) {
                        indexmap::map::Entry::Occupied(mut o) => aggregate(o.get_mut(), score, how),
                        indexmap::map::Entry::Vacant(v) => {
                            v.insert(score);
                        }
                    }
                    true
                });
            }
            for (m, s) in acc {
                out.insert(&m, s, &lim);
            }
        }
        SetOp::Diff => {
            let (first, _) = srcs[0];
            first.for_each(|m, s| {
                if !srcs[1..].iter().any(|(src, _)| src.score(&m).is_some()) {
                    out.insert(&m, s, &lim);
                }
                true
            });
        }
    }
    drop(srcs);
    if card_only {
        c.w().integer(card as i64);
    } else if let Some(dst) = dst {
        let event = match op {
            SetOp::Union => "zunionstore",
            SetOp::Inter => "zinterstore",
            SetOp::Diff => "zdiffstore",
        };
        store_result(e, c, dst, out.from_result(&lim), event);
    } else {
        write_entries(&mut c.w(), out.len(), withscores, out.iter());
    }
    Ok(())
}
