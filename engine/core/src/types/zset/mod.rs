//! The sorted set type (redis `t_zset.c`): the value's API here, the commands in [`cmd`].
//!
//! # Value
//! A [`ZSetValue`] has Redis 7.0's two encodings, for real:
//!
//! - **listpack** — while the zset has at most `zset-max-listpack-entries` members (128) and
//!   none longer than `zset-max-listpack-value` bytes (64; [`EncodingLimits`], read when the
//!   zset grows), member, score pairs sit in one buffer sorted by (score, member)
//!   ([`listpack::ZListpack`]; scores in a short exact binary form, see there). Every operation
//!   is a linear scan, as Redis's `zzl*` functions are; a reverse walk collects the offsets it
//!   needs first. A score is stored as Redis stores its `d2string` text, so `-0` is kept as
//!   `0`.
//! - **skiplist** — past either limit the zset converts for good (`zsetAdd`, `zsetConvert`;
//!   never back by itself) to an insertion-ordered hash table (`IndexMap<member, node>`,
//!   seeded hasher) plus a [`skiplist::SkipList`] whose nodes point back at the member's table
//!   position:
//!   - member → score: hash lookup, O(1);
//!   - insert, delete, score change, rank, select by rank, first/last in a score or lex range:
//!     O(log n) expected (a lex range over mixed scores, which Redis leaves undefined, is
//!     answered as a listpack would answer it, by a scan: see
//!     [`skiplist::SkipList::first_gte_min`]);
//!   - random member (ZRANDMEMBER) and a SCAN cursor: table positions, O(1) per step.
//!     Deleting swap-removes in the table (the last member moves into the hole and its node
//!     is repointed), which gives ZSCAN the same guarantee as the keyspace SCAN (see
//!     `keyspace.rs`).
//!
//! Both forms answer every query identically (the model tests in `tests/zset.rs` and below
//! check it), apart from what Redis itself shows differently: OBJECT ENCODING, `-0` (above),
//! and ZSCAN, which returns a listpack whole at cursor 0 with scores in `d2string` form.
//!
//! Where the encoding is decided: ZADD creating a key starts a skiplist when
//! `zset-max-listpack-entries` is 0 or the first member is too long (the command does that);
//! stored results (ZUNIONSTORE…, GEOSEARCHSTORE, snapshots, RESTORE) are built as a skiplist
//! and turned into a listpack when they fit ([`ZSetValue::from_result`], redis
//! `zsetConvertToListpackIfNeeded`); SORT turns its source into a skiplist
//! ([`ZSetValue::to_skiplist`]).
//!
//! Memory: a listpack accounts its buffer's length; a skiplist counts member bytes plus
//! [`MEMBER_OVERHEAD`] per member, kept on every insert/delete. Either way
//! [`ZSetValue::mem_size`] is O(1).

pub mod cmd;
pub mod listpack;
pub mod range;
pub mod score;
pub mod setop;
pub mod skiplist;

use indexmap::IndexMap;

use crate::error::CmdError;
use crate::types::{EncodingLimits, Value};
use listpack::ZListpack;
use skiplist::{Members, NIL, SkipList};

pub use score::{LexRange, ScoreRange};

/// Approximate bytes per member of a skiplist beyond its own bytes: table slot and hash index,
/// skiplist node with its average 1.33 levels, allocator rounding.
pub const MEMBER_OVERHEAD: usize = 64;

type Table = IndexMap<Box<[u8]>, u32, foldhash::fast::FixedState>;

impl Members for Table {
    fn member(&self, pos: u32) -> &[u8] {
        self.get_index(pos as usize)
            .expect("skiplist node points at a live member")
            .0
    }
}

/// A stored sorted set (see the module doc).
#[derive(Clone)]
pub struct ZSetValue {
    repr: Repr,
}

/// Both forms boxed, so a `ZSetValue` is two words and sits unboxed in a keyspace [`Value`]:
/// a skiplist is one hop from the keyspace, and a listpack pays one small box (its buffer's
/// header and its seed).
#[derive(Clone)]
enum Repr {
    Listpack(Box<Packed>),
    Skiplist(Box<Big>),
}

/// The listpack form: derefs to its [`ZListpack`].
#[derive(Clone)]
struct Packed {
    /// Pairs in order.
    lp: ZListpack,
    /// Keys the table and skiplist it may become.
    seed: u64,
}

impl std::ops::Deref for Packed {
    type Target = ZListpack;

    fn deref(&self) -> &ZListpack {
        &self.lp
    }
}

impl std::ops::DerefMut for Packed {
    fn deref_mut(&mut self) -> &mut ZListpack {
        &mut self.lp
    }
}

/// The skiplist form.
#[derive(Clone)]
struct Big {
    /// member → its skiplist node.
    table: Table,
    index: SkipList,
    /// Accounted bytes (see the module doc, *Memory*).
    bytes: usize,
    /// The key of the hasher and level generator (kept should a stored result become a
    /// listpack, which may convert again).
    seed: u64,
}

// A keyspace value holds its zset inline (see `Repr`); the listpack's box is a small size class.
const _: () = assert!(std::mem::size_of::<ZSetValue>() <= 16);
const _: () = assert!(std::mem::size_of::<Packed>() <= 40);

impl Default for ZSetValue {
    fn default() -> Self {
        ZSetValue::new(0)
    }
}

impl std::fmt::Debug for ZSetValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.iter().map(|(m, s)| (String::from_utf8_lossy(m), s)))
            .finish()
    }
}

/// Same members with bit-identical scores (order of insertion does not matter).
impl PartialEq for ZSetValue {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len()
            && self
                .iter()
                .all(|(m, s)| other.score(m).map(f64::to_bits) == Some(s.to_bits()))
    }
}

/// ZADD conditions (redis `ZADD_IN_*`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AddFlags {
    pub nx: bool,
    pub xx: bool,
    pub gt: bool,
    pub lt: bool,
    pub incr: bool,
}

/// What adding one `(score, member)` does (redis `zsetAdd`'s out flags).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum AddOutcome {
    /// The increment made the score NaN (`inf` + `-inf`): an error, nothing changes.
    Nan,
    /// A condition (NX, XX, GT, LT) skipped it.
    Nop,
    /// Accepted, but the score is already this value.
    Same(f64),
    /// The member's score changes to this.
    Updated(f64),
    /// A new member with this score.
    Added(f64),
}

impl AddOutcome {
    /// Whether applying it changes the zset.
    pub fn changes(self) -> bool {
        matches!(self, AddOutcome::Updated(_) | AddOutcome::Added(_))
    }
}

/// A listpack stores the score as `d2string` text, which turns -0 into 0.
fn lp_score(score: f64) -> f64 {
    if score == 0.0 { 0.0 } else { score }
}

impl Big {
    fn new(seed: u64) -> Big {
        Big {
            table: Table::with_hasher(foldhash::fast::FixedState::with_seed(seed)),
            index: SkipList::new(seed.rotate_left(17) ^ 0x5DEE_CE66_D1CE_4E5B),
            bytes: 0,
            seed,
        }
    }

    fn score(&self, member: &[u8]) -> Option<f64> {
        self.table.get(member).map(|&x| self.index.score(x))
    }

    /// Inserts or updates `member` (score not NaN).
    fn insert(&mut self, member: &[u8], score: f64) {
        // One hash lookup: insert, and put the node back if the member was there.
        let pos = self.table.len() as u32;
        let (i, old) = self.table.insert_full(member.into(), NIL);
        if let Some(x) = old {
            self.table[i] = x;
            self.set_score(member, score);
            return;
        }
        debug_assert_eq!(i as u32, pos);
        let x = self.index.insert(&self.table, score, member, pos);
        self.table[i] = x;
        self.bytes += member.len() + MEMBER_OVERHEAD;
    }

    fn set_score(&mut self, member: &[u8], score: f64) {
        let Some((i, _, &x)) = self.table.get_full(member) else {
            return;
        };
        let cur = self.index.score(x);
        let nx = self.index.update_score(&self.table, cur, member, score);
        self.table[i] = nx;
    }

    /// Removes the member of node `x`, returning it with its score.
    fn remove_node(&mut self, x: u32) -> (Box<[u8]>, f64) {
        let pos = self.index.pos(x);
        let score = self.index.score(x);
        {
            let member = self.table.member(pos);
            self.index.delete(&self.table, score, member);
        }
        let (member, _) = self
            .table
            .swap_remove_index(pos as usize)
            .expect("node position is live");
        // The former last member now sits at `pos`: repoint its node.
        if let Some((_, &moved)) = self.table.get_index(pos as usize) {
            self.index.set_pos(moved, pos);
        }
        self.bytes -= member.len() + MEMBER_OVERHEAD;
        (member, score)
    }

    /// The member and score of node `x`.
    fn entry(&self, x: u32) -> (&[u8], f64) {
        (self.table.member(self.index.pos(x)), self.index.score(x))
    }

    /// 0-based rank of node `x` from the bottom.
    fn rank_of(&self, x: u32) -> usize {
        self.index.rank_of(&self.table, x).saturating_sub(1)
    }
}

/// Iterator of [`ZSetValue::walk`].
pub struct Walk<'a> {
    z: &'a ZSetValue,
    at: WalkAt,
    left: usize,
}

enum WalkAt {
    /// The next skiplist node upward (NIL: done).
    Up(u32),
    /// The next skiplist node downward (NIL: done).
    Down(u32),
    /// The next listpack offset (forward; the buffer's length: done).
    Offset(usize),
    /// Listpack offsets still to visit, the next one last (backward).
    Offsets(Vec<usize>),
}

impl<'a> Iterator for Walk<'a> {
    type Item = (&'a [u8], f64);

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        let out = match (&self.z.repr, &mut self.at) {
            (Repr::Skiplist(b), WalkAt::Up(x) | WalkAt::Down(x)) if *x == NIL => return None,
            (Repr::Skiplist(b), WalkAt::Up(x)) => {
                let e = b.entry(*x);
                *x = b.index.next(*x);
                e
            }
            (Repr::Skiplist(b), WalkAt::Down(x)) => {
                let e = b.entry(*x);
                *x = b.index.prev(*x);
                e
            }
            (Repr::Listpack(lp), WalkAt::Offset(off)) => {
                if *off >= lp.byte_len() {
                    return None;
                }
                let (m, s, next) = lp.entry(*off);
                *off = next;
                (m, s)
            }
            (Repr::Listpack(lp), WalkAt::Offsets(back)) => {
                let (m, s, _) = lp.entry(back.pop()?);
                (m, s)
            }
            _ => return None,
        };
        self.left -= 1;
        Some(out)
    }
}

impl ZSetValue {
    /// An empty zset (a listpack); `seed` keys the member hash and the skiplist level
    /// generator should it convert (the commands pass a random value from the engine).
    pub fn new(seed: u64) -> ZSetValue {
        ZSetValue {
            repr: Repr::Listpack(Box::new(Packed {
                lp: ZListpack::new(),
                seed,
            })),
        }
    }

    /// A zset whose encoding is `skiplist` from the start (the unstored result of
    /// ZUNION/ZINTER/ZDIFF, which Redis builds as a skiplist and so keeps -0; results about
    /// to be stored, which [`from_result`](Self::from_result) may make a listpack; ZADD
    /// creating a key whose first member is too long).
    pub fn new_skiplist(seed: u64) -> ZSetValue {
        ZSetValue {
            repr: Repr::Skiplist(Box::new(Big::new(seed))),
        }
    }

    /// Payload bytes this value accounts for in `used_memory`, kept incrementally (O(1)).
    pub fn mem_size(&self) -> usize {
        match &self.repr {
            Repr::Listpack(lp) => lp.byte_len(),
            Repr::Skiplist(b) => b.bytes,
        }
    }

    /// OBJECT ENCODING: `listpack` or `skiplist` (Redis 7.0 names and thresholds).
    pub fn encoding(&self) -> &'static str {
        if self.is_listpack() {
            "listpack"
        } else {
            "skiplist"
        }
    }

    /// Whether the zset is listpack-encoded (see [`encoding`](Self::encoding)).
    pub fn is_listpack(&self) -> bool {
        matches!(self.repr, Repr::Listpack(_))
    }

    pub fn len(&self) -> usize {
        match &self.repr {
            Repr::Listpack(lp) => lp.len(),
            Repr::Skiplist(b) => b.table.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// ZSCORE.
    pub fn score(&self, member: &[u8]) -> Option<f64> {
        match &self.repr {
            Repr::Listpack(lp) => lp.find(member).map(|(_, s)| s),
            Repr::Skiplist(b) => b.score(member),
        }
    }

    /// What `add(member, score, flags)` would do, without doing it (redis `zsetAdd`'s
    /// decisions; `score` is not NaN).
    pub fn plan_add(&self, member: &[u8], score: f64, f: AddFlags) -> AddOutcome {
        match self.score(member) {
            Some(cur) => {
                if f.nx {
                    return AddOutcome::Nop;
                }
                let new = if f.incr { score + cur } else { score };
                if new.is_nan() {
                    return AddOutcome::Nan;
                }
                if (f.lt && new >= cur) || (f.gt && new <= cur) {
                    return AddOutcome::Nop;
                }
                if new != cur {
                    AddOutcome::Updated(new)
                } else {
                    AddOutcome::Same(new)
                }
            }
            None if f.xx => AddOutcome::Nop,
            None => AddOutcome::Added(score),
        }
    }

    /// Adds or updates one member under ZADD's rules; returns what happened.
    pub fn add(
        &mut self,
        member: &[u8],
        score: f64,
        f: AddFlags,
        lim: &EncodingLimits,
    ) -> AddOutcome {
        let o = self.plan_add(member, score, f);
        match o {
            AddOutcome::Added(s) => {
                // plan_add found no such member: a listpack need not be scanned for it again.
                self.insert_absent(member, s, lim);
            }
            AddOutcome::Updated(s) => self.set_score(member, s),
            _ => {}
        }
        o
    }

    /// Converts a listpack to a skiplist (redis `zsetConvert`; never back by itself).
    fn convert(&mut self) {
        let Repr::Listpack(lp) = &self.repr else {
            return;
        };
        let mut b = Big::new(lp.seed);
        b.table.reserve(lp.len() + 1);
        for (_, m, s) in lp.iter() {
            b.insert(m, s);
        }
        self.repr = Repr::Skiplist(Box::new(b));
    }

    /// Inserts a member with its score; a member already present gets the new score. A NaN
    /// score (which no command produces; a corrupt snapshot might) is refused: returns false.
    /// A listpack that would pass `zset-max-listpack-entries`, or a member longer than
    /// `zset-max-listpack-value`, converts to a skiplist first (redis `zsetAdd`).
    pub fn insert(&mut self, member: &[u8], score: f64, lim: &EncodingLimits) -> bool {
        if score.is_nan() {
            return false;
        }
        if let Repr::Listpack(lp) = &mut self.repr {
            let score = lp_score(score);
            if let Some((off, cur)) = lp.find(member) {
                if cur != score {
                    lp.remove(off, 1);
                    lp.insert(member, score);
                }
                return true;
            }
            if lim.zset_fits_entries(lp.len() + 1) && lim.zset_fits_value(member.len()) {
                lp.insert(member, score);
                return true;
            }
            self.convert();
        }
        let Repr::Skiplist(b) = &mut self.repr else {
            unreachable!("converted above");
        };
        b.insert(member, score);
        true
    }

    /// [`insert`](Self::insert) of a member known to be absent (not NaN).
    fn insert_absent(&mut self, member: &[u8], score: f64, lim: &EncodingLimits) {
        if let Repr::Listpack(lp) = &mut self.repr
            && !score.is_nan()
            && lim.zset_fits_entries(lp.len() + 1)
            && lim.zset_fits_value(member.len())
        {
            debug_assert!(lp.find(member).is_none());
            lp.insert(member, lp_score(score));
            return;
        }
        self.insert(member, score, lim);
    }

    /// Changes the score of a present member (NaN is refused).
    pub fn set_score(&mut self, member: &[u8], score: f64) {
        if score.is_nan() {
            return;
        }
        match &mut self.repr {
            Repr::Listpack(lp) => {
                // redis `zsetAdd` on a listpack: delete, then insert at the new place.
                if let Some((off, _)) = lp.find(member) {
                    lp.remove(off, 1);
                    lp.insert(member, lp_score(score));
                }
            }
            Repr::Skiplist(b) => b.set_score(member, score),
        }
    }

    /// Removes a member; returns its score if it was present.
    pub fn remove(&mut self, member: &[u8]) -> Option<f64> {
        match &mut self.repr {
            Repr::Listpack(lp) => {
                let (off, s) = lp.find(member)?;
                lp.remove(off, 1);
                Some(s)
            }
            Repr::Skiplist(b) => {
                let &x = b.table.get(member)?;
                Some(b.remove_node(x).1)
            }
        }
    }

    /// Removes and returns the lowest (`max == false`) or highest member.
    pub fn pop(&mut self, max: bool) -> Option<(Box<[u8]>, f64)> {
        match &mut self.repr {
            Repr::Listpack(lp) => {
                if lp.is_empty() {
                    return None;
                }
                let off = if max { lp.offset_of(lp.len() - 1) } else { 0 };
                let (m, s, _) = lp.entry(off);
                let out = (m.into(), s);
                lp.remove(off, 1);
                Some(out)
            }
            Repr::Skiplist(b) => {
                let x = if max { b.index.last() } else { b.index.first() };
                (x != NIL).then(|| b.remove_node(x))
            }
        }
    }

    /// 0-based rank of `member` (from the top when `reverse`) and its score.
    pub fn rank(&self, member: &[u8], reverse: bool) -> Option<(usize, f64)> {
        let (r0, score) = match &self.repr {
            Repr::Listpack(lp) => lp
                .iter()
                .enumerate()
                .find(|(_, (_, m, _))| *m == member)
                .map(|(r, (_, _, s))| (r, s))?,
            Repr::Skiplist(b) => {
                let &x = b.table.get(member)?;
                let score = b.index.score(x);
                (b.index.rank(&b.table, score, member).checked_sub(1)?, score)
            }
        };
        Some((if reverse { self.len() - 1 - r0 } else { r0 }, score))
    }

    /// 0-based ranks `(first, last)` of the members whose score is in `r`, if any. Scores are
    /// ordered, so the first and last in range exist together; a NIL from either end is
    /// still answered as "none" rather than trusted.
    pub fn score_span(&self, r: &ScoreRange) -> Option<(usize, usize)> {
        match &self.repr {
            Repr::Listpack(lp) => {
                if r.is_empty() {
                    return None;
                }
                let mut span = None;
                for (i, (_, _, s)) in lp.iter().enumerate() {
                    if !r.lte_max(s) {
                        break;
                    }
                    if r.gte_min(s) {
                        span = Some((span.map_or(i, |(f, _)| f), i));
                    }
                }
                span
            }
            Repr::Skiplist(b) => {
                let f = b.index.first_in_range(r);
                let l = b.index.last_in_range(r);
                if f == NIL || l == NIL {
                    return None;
                }
                let (f, l) = (b.rank_of(f), b.rank_of(l));
                (f <= l).then_some((f, l))
            }
        }
    }

    /// Where a lex range starts: the member of redis `zzlFirstInLexRange` /
    /// `zslFirstInLexRange` (`reverse == false`) or `…LastInLexRange`, as its 0-based rank.
    /// See [`skiplist::SkipList::first_gte_min`] for zsets with mixed scores (undefined in
    /// Redis; a skiplist answers as a listpack does).
    pub fn lex_start(&self, r: &LexRange, reverse: bool) -> Option<usize> {
        match &self.repr {
            Repr::Listpack(lp) => {
                // redis `zzlIsInLexRange`: the range against the lowest and highest members.
                let (_, first, _) = lp.iter().next()?;
                let (_, last, _) = lp.iter().last()?;
                if r.is_empty() || !r.gte_min(last) || !r.lte_max(first) {
                    return None;
                }
                if reverse {
                    let (i, m) = lp
                        .iter()
                        .enumerate()
                        .filter(|(_, (_, m, _))| r.lte_max(m))
                        .last()
                        .map(|(i, (_, m, _))| (i, m))?;
                    r.gte_min(m).then_some(i)
                } else {
                    let (i, m) = lp
                        .iter()
                        .enumerate()
                        .find(|(_, (_, m, _))| r.gte_min(m))
                        .map(|(i, (_, m, _))| (i, m))?;
                    r.lte_max(m).then_some(i)
                }
            }
            Repr::Skiplist(b) => {
                let x = if reverse {
                    b.index.last_in_lex(&b.table, r)
                } else {
                    b.index.first_in_lex(&b.table, r)
                };
                (x != NIL).then(|| b.rank_of(x))
            }
        }
    }

    /// How many members, walking from 0-based rank `start` upward (downward when `reverse`),
    /// stay within `r`'s max bound (min bound when `reverse`) before the first that does not,
    /// at most `limit`: the loop of redis `genericZrangebylexCommand`, `zslDeleteRangeByLex`
    /// and ZLEXCOUNT's listpack branch. O(log n) on a skiplist with equal scores (ranks),
    /// O(answer) otherwise (a walk, where the bound may fail and hold again further on).
    pub fn lex_run(&self, start: usize, r: &LexRange, reverse: bool, limit: usize) -> usize {
        if start >= self.len() || limit == 0 {
            return 0;
        }
        if let Repr::Skiplist(b) = &self.repr
            && b.index.lex_ordered()
        {
            let n = if reverse {
                let f = b.index.first_gte_min(&b.table, r);
                if f == NIL {
                    0
                } else {
                    (start + 1).saturating_sub(b.rank_of(f))
                }
            } else {
                let l = b.index.last_lte_max(&b.table, r);
                if l == NIL {
                    0
                } else {
                    (b.rank_of(l) + 1).saturating_sub(start)
                }
            };
            return n.min(limit);
        }
        let holds = |m: &[u8]| if reverse { r.gte_min(m) } else { r.lte_max(m) };
        self.walk(start, limit, reverse)
            .take_while(|&(m, _)| holds(m))
            .count()
    }

    /// `count` members in order from 0-based rank `start` (downward from there when
    /// `reverse`, `start` still counted from the bottom).
    pub fn walk(&self, start: usize, count: usize, reverse: bool) -> Walk<'_> {
        let none = count == 0 || start >= self.len();
        let at = match &self.repr {
            Repr::Skiplist(_) if none => WalkAt::Up(NIL),
            Repr::Skiplist(b) if reverse => WalkAt::Down(b.index.by_rank(start + 1)),
            Repr::Skiplist(b) => WalkAt::Up(b.index.by_rank(start + 1)),
            Repr::Listpack(lp) if none => WalkAt::Offset(lp.byte_len()),
            Repr::Listpack(lp) if reverse => {
                WalkAt::Offsets(lp.iter().take(start + 1).map(|(off, _, _)| off).collect())
            }
            Repr::Listpack(lp) => WalkAt::Offset(lp.offset_of(start)),
        };
        Walk {
            z: self,
            at,
            left: count,
        }
    }

    /// Removes `count` members starting at 0-based rank `start`; returns how many.
    pub fn remove_rank_range(&mut self, start: usize, count: usize) -> usize {
        match &mut self.repr {
            Repr::Listpack(lp) => {
                if start >= lp.len() {
                    return 0;
                }
                let n = count.min(lp.len() - start);
                let off = lp.offset_of(start);
                lp.remove(off, n);
                n
            }
            Repr::Skiplist(b) => {
                let mut removed = 0;
                while removed < count {
                    let x = b.index.by_rank(start + 1);
                    if x == NIL {
                        break;
                    }
                    b.remove_node(x);
                    removed += 1;
                }
                removed
            }
        }
    }

    /// Calls `f` on the nodes with `min <= score < max` in order, until it returns false
    /// (redis `zslFirstInRange` / `zzlFirstInRange`, then a walk while `zslValueLteMax`; geo
    /// searches read their cells this way). O(log n) to the first on a skiplist, O(1) per
    /// node; `f` gets the score and reads the member ([`member_at`](Self::member_at)) only if
    /// it needs it, which saves a cache miss per node a search rejects.
    pub fn for_each_in_half_open(&self, min: f64, max: f64, mut f: impl FnMut(Node, f64) -> bool) {
        let r = ScoreRange {
            min,
            max,
            minex: false,
            maxex: true,
        };
        match &self.repr {
            Repr::Listpack(lp) => {
                for (off, _, s) in lp.iter() {
                    if !r.gte_min(s) {
                        continue;
                    }
                    if !r.lte_max(s) || !f(Node(off as u32), s) {
                        break;
                    }
                }
            }
            Repr::Skiplist(b) => {
                let mut x = b.index.first_in_range(&r);
                while x != NIL {
                    let s = b.index.score(x);
                    if !r.lte_max(s) || !f(Node(x), s) {
                        break;
                    }
                    x = b.index.next(x);
                }
            }
        }
    }

    /// The member of node `x` (from [`for_each_in_half_open`](Self::for_each_in_half_open)).
    pub fn member_at(&self, x: Node) -> &[u8] {
        match &self.repr {
            Repr::Listpack(lp) => lp.entry(x.0 as usize).0,
            Repr::Skiplist(b) => b.table.member(b.index.pos(x.0)),
        }
    }

    /// All members in score order.
    pub fn iter(&self) -> Walk<'_> {
        self.walk(0, self.len(), false)
    }

    /// The member and score at position `i` (for random picks: any `i < len`): a table
    /// position, or a rank in a listpack (a walk).
    pub fn at_position(&self, i: usize) -> Option<(&[u8], f64)> {
        match &self.repr {
            Repr::Listpack(lp) => lp.iter().nth(i).map(|(_, m, s)| (m, s)),
            Repr::Skiplist(b) => {
                let (m, &x) = b.table.get_index(i)?;
                Some((m, b.index.score(x)))
            }
        }
    }

    /// One ZSCAN step over table positions: visits up to `count` positions below `cursor`
    /// (0 = start at the top), calling `f` for each; returns the next cursor (0 = done).
    /// Same guarantee as the keyspace SCAN (module doc). A listpack is visited whole, in
    /// order, and answers cursor 0.
    pub fn scan(&self, cursor: u64, count: usize, mut f: impl FnMut(&[u8], f64)) -> u64 {
        if self.is_listpack() {
            for (m, s) in self.iter() {
                f(m, s);
            }
            return 0;
        }
        let len = self.len() as u64;
        let mut pos = if cursor == 0 || cursor > len {
            len
        } else {
            cursor
        } as usize;
        let mut visited = 0;
        while pos > 0 && visited < count {
            pos -= 1;
            visited += 1;
            if let Some((m, s)) = self.at_position(pos) {
                f(m, s);
            }
        }
        pos as u64
    }

    /// A zset built from a result (ZUNIONSTORE, ZRANGESTORE…): listpack-encoded when it fits
    /// the limits, as Redis converts a stored result (`zsetConvertToListpackIfNeeded`).
    pub fn from_result(self, lim: &EncodingLimits) -> ZSetValue {
        let Repr::Skiplist(b) = &self.repr else {
            return self;
        };
        let fits = lim.zset_fits_entries(b.table.len())
            && b.table.keys().all(|m| lim.zset_fits_value(m.len()));
        if !fits {
            return self;
        }
        let seed = b.seed;
        let mut lp = ZListpack::new();
        for (m, s) in self.iter() {
            // Equal scores stay in member order when -0 becomes 0 (they compare equal).
            lp.push(m, lp_score(s));
        }
        lp.shrink();
        ZSetValue {
            repr: Repr::Listpack(Box::new(Packed { lp, seed })),
        }
    }

    /// Converts to a skiplist for good (SORT does so to the zset it sorts: redis
    /// `sortCommandGeneric` calls `zsetConvert(sortval, OBJ_ENCODING_SKIPLIST)`).
    pub fn to_skiplist(&mut self) {
        self.convert();
    }

    /// Checks internal invariants (tests).
    #[cfg(test)]
    pub fn check(&self) {
        match &self.repr {
            Repr::Listpack(lp) => {
                let all: Vec<(&[u8], f64)> = lp.iter().map(|(_, m, s)| (m, s)).collect();
                assert_eq!(all.len(), lp.len());
                for w in all.windows(2) {
                    let ((m1, s1), (m2, s2)) = (w[0], w[1]);
                    assert!(s1 < s2 || (s1 == s2 && m1 < m2), "listpack order");
                }
                assert!(
                    all.iter()
                        .all(|&(_, s)| !(s == 0.0 && s.is_sign_negative()))
                );
            }
            Repr::Skiplist(b) => {
                b.index.check(&b.table);
                assert_eq!(b.index.len(), b.table.len());
                let mut bytes = 0;
                for (i, (m, &x)) in b.table.iter().enumerate() {
                    assert_eq!(b.index.pos(x) as usize, i);
                    bytes += m.len() + MEMBER_OVERHEAD;
                }
                assert_eq!(bytes, b.bytes);
            }
        }
    }
}

/// A position in a zset's order, from [`ZSetValue::for_each_in_half_open`]: a skiplist node
/// or a listpack offset; valid until the zset changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Node(u32);

/// The zset inside `v`, or WRONGTYPE.
pub fn as_zset(v: &Value) -> Result<&ZSetValue, CmdError> {
    match v {
        Value::ZSet(z) => Ok(z),
        _ => Err(CmdError::WrongType),
    }
}

/// The zset inside `v` for a change, or WRONGTYPE.
pub fn as_zset_mut(v: &mut Value) -> Result<&mut ZSetValue, CmdError> {
    match v {
        Value::ZSet(z) => Ok(z),
        _ => Err(CmdError::WrongType),
    }
}

#[cfg(test)]
#[path = "mod_tests.rs"]
mod tests;
