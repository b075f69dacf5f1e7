//! The sorted set type (redis `t_zset.c`): the value's API here, the commands in [`cmd`].
//!
//! # Value
//! A [`ZSetValue`] holds each member once, in an insertion-ordered hash table
//! (`IndexMap<member, node>`, seeded hasher), and orders them in a [`skiplist::SkipList`]
//! whose nodes point back at the member's table position:
//! - member → score: hash lookup, O(1);
//! - insert, delete, score change, rank, select by rank, first/last in a score or lex range:
//!   O(log n) expected (a lex range over mixed scores, which Redis leaves undefined, is
//!   answered as a listpack would answer it, by a scan: see [`skiplist::SkipList::first_gte_min`]);
//! - random member (ZRANDMEMBER) and a SCAN cursor: table positions, O(1) per step. Deleting
//!   swap-removes in the table (the last member moves into the hole and its node is
//!   repointed), which gives ZSCAN the same guarantee as the keyspace SCAN (see
//!   `keyspace.rs`).
//!
//! Memory: `bytes` counts member bytes plus [`MEMBER_OVERHEAD`] per member, kept on every
//! insert/delete, so [`ZSetValue::mem_size`] is O(1).
//!
//! # Encoding
//! Redis 7.0 keeps a small zset in a listpack (`zset-max-listpack-entries` 128,
//! `zset-max-listpack-value` 64 by default; [`EncodingLimits`], read when the zset grows) and
//! converts it to a skiplist for good once either limit is passed (`zsetAdd`). Stored results
//! (ZUNIONSTORE…, GEOSEARCHSTORE, snapshots, RESTORE) are built as a skiplist and turned into
//! a listpack when they fit ([`ZSetValue::from_result`], redis
//! `zsetConvertToListpackIfNeeded`); SORT turns its source into a skiplist
//! ([`ZSetValue::to_skiplist`]). Clients see the difference in three places, all reproduced here by tracking the
//! same state ([`ZSetValue::encoding`]):
//! - OBJECT ENCODING says `listpack` or `skiplist`;
//! - a listpack stores scores as text (`d2string`), so `-0` is kept as `0`;
//! - ZSCAN of a listpack returns everything at once (cursor 0) in score order, with scores
//!   in `d2string` form; a skiplist is scanned by cursor.

pub mod cmd;
pub mod range;
pub mod score;
pub mod setop;
pub mod skiplist;

use indexmap::IndexMap;

use crate::error::CmdError;
use crate::types::{EncodingLimits, Value};
use skiplist::{Members, NIL, SkipList};

pub use score::{LexRange, ScoreRange};

/// Approximate bytes per member beyond its own bytes: table slot and hash index, skiplist
/// node with its average 1.33 levels, allocator rounding.
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
    /// member → its skiplist node.
    table: Table,
    index: SkipList,
    /// Redis would still hold this zset in a listpack.
    listpack: bool,
    bytes: usize,
}

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

impl ZSetValue {
    /// An empty zset; `seed` keys the member hash and the skiplist level generator (the
    /// commands pass a random value from the engine).
    pub fn new(seed: u64) -> ZSetValue {
        ZSetValue {
            table: Table::with_hasher(foldhash::fast::FixedState::with_seed(seed)),
            index: SkipList::new(seed.rotate_left(17) ^ 0x5DEE_CE66_D1CE_4E5B),
            listpack: true,
            bytes: 0,
        }
    }

    /// Payload bytes this value accounts for in `used_memory`, kept incrementally (O(1)).
    pub fn mem_size(&self) -> usize {
        self.bytes
    }

    /// OBJECT ENCODING: `listpack` while Redis 7.0 would keep this zset in a listpack
    /// (never more than 128 members, none longer than 64 bytes), else `skiplist`.
    pub fn encoding(&self) -> &'static str {
        if self.listpack {
            "listpack"
        } else {
            "skiplist"
        }
    }

    /// Whether the zset is listpack-encoded (see [`encoding`](Self::encoding)).
    pub fn is_listpack(&self) -> bool {
        self.listpack
    }

    pub fn len(&self) -> usize {
        self.table.len()
    }

    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// ZSCORE.
    pub fn score(&self, member: &[u8]) -> Option<f64> {
        self.table.get(member).map(|&x| self.index.score(x))
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
                self.insert(member, s, lim);
            }
            AddOutcome::Updated(s) => self.set_score(member, s),
            _ => {}
        }
        o
    }

    /// A listpack stores the score as `d2string` text, which turns -0 into 0.
    fn stored(&self, score: f64) -> f64 {
        if self.listpack && score == 0.0 {
            0.0
        } else {
            score
        }
    }

    /// Inserts a member with its score; a member already present gets the new score. A NaN
    /// score (which no command produces; a corrupt snapshot might) is refused: returns false.
    /// A listpack that would pass `zset-max-listpack-entries`, or a member longer than
    /// `zset-max-listpack-value`, converts to a skiplist first (redis `zsetAdd`).
    pub fn insert(&mut self, member: &[u8], score: f64, lim: &EncodingLimits) -> bool {
        if score.is_nan() {
            return false;
        }
        // One hash lookup: insert, and put the node back if the member was there.
        let pos = self.table.len() as u32;
        let (i, old) = self.table.insert_full(member.into(), NIL);
        if let Some(x) = old {
            self.table[i] = x;
            self.set_score(member, score);
            return true;
        }
        debug_assert_eq!(i as u32, pos);
        if self.listpack
            && (!lim.zset_fits_entries(self.table.len()) || !lim.zset_fits_value(member.len()))
        {
            self.listpack = false;
        }
        let score = self.stored(score);
        let x = self.index.insert(&self.table, score, member, pos);
        self.table[i] = x;
        self.bytes += member.len() + MEMBER_OVERHEAD;
        true
    }

    /// Changes the score of a present member (NaN is refused).
    pub fn set_score(&mut self, member: &[u8], score: f64) {
        if score.is_nan() {
            return;
        }
        let score = self.stored(score);
        let Some((i, _, &x)) = self.table.get_full(member) else {
            return;
        };
        let cur = self.index.score(x);
        let nx = self.index.update_score(&self.table, cur, member, score);
        self.table[i] = nx;
    }

    /// Removes a member; returns its score if it was present.
    pub fn remove(&mut self, member: &[u8]) -> Option<f64> {
        let &x = self.table.get(member)?;
        let score = self.index.score(x);
        self.remove_node(x);
        Some(score)
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

    /// Removes and returns the lowest (`max == false`) or highest member.
    pub fn pop(&mut self, max: bool) -> Option<(Box<[u8]>, f64)> {
        let x = if max {
            self.index.last()
        } else {
            self.index.first()
        };
        (x != NIL).then(|| self.remove_node(x))
    }

    /// 0-based rank of `member` (from the top when `reverse`) and its score.
    pub fn rank(&self, member: &[u8], reverse: bool) -> Option<(usize, f64)> {
        let &x = self.table.get(member)?;
        let score = self.index.score(x);
        let r0 = self.index.rank(&self.table, score, member).checked_sub(1)?;
        Some((if reverse { self.len() - 1 - r0 } else { r0 }, score))
    }

    /// The member and score of node `x`.
    pub fn entry(&self, x: Node) -> (&[u8], f64) {
        (
            self.table.member(self.index.pos(x.0)),
            self.index.score(x.0),
        )
    }

    /// The node at 0-based rank `r` from the bottom.
    pub fn at_rank(&self, r: usize) -> Option<Node> {
        let x = self.index.by_rank(r + 1);
        (x != NIL).then_some(Node(x))
    }

    /// The next node upward (`reverse == false`) or downward.
    pub fn step(&self, x: Node, reverse: bool) -> Option<Node> {
        let n = if reverse {
            self.index.prev(x.0)
        } else {
            self.index.next(x.0)
        };
        (n != NIL).then_some(Node(n))
    }

    /// 0-based rank of node `x` from the bottom.
    pub fn rank_of(&self, x: Node) -> usize {
        self.index.rank_of(&self.table, x.0).saturating_sub(1)
    }

    /// 0-based ranks `(first, last)` of the members whose score is in `r`, if any. Scores are
    /// ordered, so the first and last in range exist together; a NIL from either end is
    /// still answered as "none" rather than trusted.
    pub fn score_span(&self, r: &ScoreRange) -> Option<(usize, usize)> {
        let f = self.index.first_in_range(r);
        let l = self.index.last_in_range(r);
        if f == NIL || l == NIL {
            return None;
        }
        let (f, l) = (self.rank_of(Node(f)), self.rank_of(Node(l)));
        (f <= l).then_some((f, l))
    }

    /// Where a lex range starts: the node of redis `zslFirstInLexRange` (`reverse == false`)
    /// or `zslLastInLexRange`, as its 0-based rank. See [`skiplist::SkipList::first_gte_min`]
    /// for zsets with mixed scores (undefined in Redis; answered as a listpack would).
    pub fn lex_start(&self, r: &LexRange, reverse: bool) -> Option<usize> {
        let x = if reverse {
            self.index.last_in_lex(&self.table, r)
        } else {
            self.index.first_in_lex(&self.table, r)
        };
        (x != NIL).then(|| self.rank_of(Node(x)))
    }

    /// How many members, walking from 0-based rank `start` upward (downward when `reverse`),
    /// stay within `r`'s max bound (min bound when `reverse`) before the first that does not,
    /// at most `limit`: the loop of redis `genericZrangebylexCommand`, `zslDeleteRangeByLex`
    /// and ZLEXCOUNT's listpack branch. O(log n) with equal scores (ranks), O(answer) with
    /// mixed scores (a walk, where the bound may fail and hold again further on).
    pub fn lex_run(&self, start: usize, r: &LexRange, reverse: bool, limit: usize) -> usize {
        if start >= self.len() || limit == 0 {
            return 0;
        }
        if self.index.lex_ordered() {
            let n = if reverse {
                let f = self.index.first_gte_min(&self.table, r);
                if f == NIL {
                    0
                } else {
                    (start + 1).saturating_sub(self.rank_of(Node(f)))
                }
            } else {
                let l = self.index.last_lte_max(&self.table, r);
                if l == NIL {
                    0
                } else {
                    (self.rank_of(Node(l)) + 1).saturating_sub(start)
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
    pub fn walk(
        &self,
        start: usize,
        count: usize,
        reverse: bool,
    ) -> impl Iterator<Item = (&[u8], f64)> + '_ {
        let mut x = if count > 0 { self.at_rank(start) } else { None };
        let mut left = count;
        std::iter::from_fn(move || {
            if left == 0 {
                return None;
            }
            let n = x?;
            left -= 1;
            x = self.step(n, reverse);
            Some(self.entry(n))
        })
    }

    /// Removes `count` members starting at 0-based rank `start`; returns how many.
    pub fn remove_rank_range(&mut self, start: usize, count: usize) -> usize {
        let mut removed = 0;
        while removed < count {
            let x = self.index.by_rank(start + 1);
            if x == NIL {
                break;
            }
            self.remove_node(x);
            removed += 1;
        }
        removed
    }

    /// Calls `f` on the nodes with `min <= score < max` in order, until it returns false
    /// (redis `zslFirstInRange` / `zzlFirstInRange`, then a walk while `zslValueLteMax`; geo
    /// searches read their cells this way). O(log n) to the first, O(1) per node; `f` gets the
    /// score and reads the member ([`member_at`](Self::member_at)) only if it needs it, which
    /// saves a cache miss per node a search rejects.
    pub fn for_each_in_half_open(&self, min: f64, max: f64, mut f: impl FnMut(Node, f64) -> bool) {
        let r = ScoreRange {
            min,
            max,
            minex: false,
            maxex: true,
        };
        let mut x = self.index.first_in_range(&r);
        while x != NIL {
            let s = self.index.score(x);
            if !r.lte_max(s) || !f(Node(x), s) {
                break;
            }
            x = self.index.next(x);
        }
    }

    /// The member of node `x`.
    pub fn member_at(&self, x: Node) -> &[u8] {
        self.table.member(self.index.pos(x.0))
    }

    /// All members in score order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], f64)> + '_ {
        self.walk(0, self.len(), false)
    }

    /// The member and score at table position `i` (for random picks: any `i < len`).
    pub fn at_position(&self, i: usize) -> Option<(&[u8], f64)> {
        let (m, &x) = self.table.get_index(i)?;
        Some((m, self.index.score(x)))
    }

    /// One ZSCAN step over table positions: visits up to `count` positions below `cursor`
    /// (0 = start at the top), calling `f` for each; returns the next cursor (0 = done).
    /// Same guarantee as the keyspace SCAN (module doc).
    pub fn scan(&self, cursor: u64, count: usize, mut f: impl FnMut(&[u8], f64)) -> u64 {
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
    pub fn from_result(mut self, lim: &EncodingLimits) -> ZSetValue {
        let fits = lim.zset_fits_entries(self.len())
            && self.table.keys().all(|m| lim.zset_fits_value(m.len()));
        if fits && !self.listpack {
            self.listpack = true;
            // d2string text of -0 is "0".
            let zeros: Vec<Box<[u8]>> = self
                .iter()
                .filter(|&(_, s)| s == 0.0 && s.is_sign_negative())
                .map(|(m, _)| m.into())
                .collect();
            for m in zeros {
                self.set_score(&m, 0.0);
            }
        }
        self
    }

    /// Converts to a skiplist for good (SORT does so to the zset it sorts: redis
    /// `sortCommandGeneric` calls `zsetConvert(sortval, OBJ_ENCODING_SKIPLIST)`).
    pub fn to_skiplist(&mut self) {
        self.listpack = false;
    }

    /// A zset whose encoding is `skiplist` from the start (the unstored result of
    /// ZUNION/ZINTER/ZDIFF, which Redis builds as a skiplist and so keeps -0).
    pub fn new_skiplist(seed: u64) -> ZSetValue {
        let mut z = ZSetValue::new(seed);
        z.listpack = false;
        z
    }

    /// Checks internal invariants (tests).
    #[cfg(test)]
    pub fn check(&self) {
        self.index.check(&self.table);
        assert_eq!(self.index.len(), self.table.len());
        let mut bytes = 0;
        for (i, (m, &x)) in self.table.iter().enumerate() {
            assert_eq!(self.index.pos(x) as usize, i);
            bytes += m.len() + MEMBER_OVERHEAD;
        }
        assert_eq!(bytes, self.bytes);
    }
}

/// A position in a zset's order, from [`ZSetValue::at_rank`] / [`ZSetValue::step`]; valid
/// until the zset changes.
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
mod tests {
    const LIM: crate::types::EncodingLimits = crate::types::EncodingLimits::DEFAULT;
    use super::*;

    #[test]
    fn add_remove_rank_and_encoding() {
        let mut z = ZSetValue::new(9);
        let f = AddFlags::default();
        for (i, m) in ["c", "a", "b", "d"].iter().enumerate() {
            assert_eq!(
                z.add(m.as_bytes(), i as f64, f, &LIM),
                AddOutcome::Added(i as f64)
            );
        }
        assert_eq!(z.add(b"a", 1.0, f, &LIM), AddOutcome::Same(1.0));
        assert_eq!(z.add(b"a", 5.0, f, &LIM), AddOutcome::Updated(5.0));
        assert_eq!(
            z.add(b"a", 1.0, AddFlags { gt: true, ..f }, &LIM),
            AddOutcome::Nop
        );
        assert_eq!(
            z.add(b"a", f64::NEG_INFINITY, AddFlags { incr: true, ..f }, &LIM),
            AddOutcome::Updated(f64::NEG_INFINITY)
        );
        assert_eq!(
            z.plan_add(b"a", f64::INFINITY, AddFlags { incr: true, ..f }),
            AddOutcome::Nan
        );
        let order: Vec<&[u8]> = z.iter().map(|(m, _)| m).collect();
        assert_eq!(order, [&b"a"[..], b"c", b"b", b"d"]);
        assert_eq!(z.rank(b"b", false), Some((2, 2.0)));
        assert_eq!(z.rank(b"b", true), Some((1, 2.0)));
        assert_eq!(z.remove(b"c"), Some(0.0));
        assert_eq!(z.remove(b"c"), None);
        assert_eq!(
            z.pop(true).map(|(m, s)| (m.to_vec(), s)),
            Some((b"d".to_vec(), 3.0))
        );
        z.check();
        assert_eq!(z.encoding(), "listpack");
        z.add(&[b'x'; 65], 1.0, f, &LIM);
        assert_eq!(z.encoding(), "skiplist");
        z.remove(&[b'x'; 65]);
        assert_eq!(z.encoding(), "skiplist", "conversion is for good");
        z.check();
    }

    #[test]
    fn insert_refuses_nan_and_updates_duplicates() {
        let mut z = ZSetValue::new(4);
        assert!(!z.insert(b"a", f64::NAN, &LIM));
        assert!(z.is_empty());
        assert!(z.insert(b"a", 1.0, &LIM));
        assert!(z.insert(b"a", 2.0, &LIM));
        assert_eq!((z.len(), z.score(b"a")), (1, Some(2.0)));
        z.set_score(b"a", f64::NAN);
        assert_eq!(z.score(b"a"), Some(2.0));
        assert_eq!(z.mem_size(), 1 + MEMBER_OVERHEAD);
        z.check();
    }

    #[test]
    fn listpack_keeps_minus_zero_as_zero() {
        let mut z = ZSetValue::new(1);
        z.add(b"a", -0.0, AddFlags::default(), &LIM);
        assert!(z.score(b"a").unwrap().is_sign_positive());
        let mut big = ZSetValue::new(1);
        big.add(&[b'y'; 70], 1.0, AddFlags::default(), &LIM);
        big.add(b"a", -0.0, AddFlags::default(), &LIM);
        assert!(big.score(b"a").unwrap().is_sign_negative());
        let small = big.clone();
        let mut small = small;
        small.remove(&[b'y'; 70]);
        let stored = small.from_result(&LIM);
        assert_eq!(stored.encoding(), "listpack");
        assert!(stored.score(b"a").unwrap().is_sign_positive());
        stored.check();
    }

    #[test]
    fn many_members_convert_and_memory_is_exact() {
        let mut z = ZSetValue::new(5);
        for i in 0..129 {
            z.insert(format!("m{i}").as_bytes(), i as f64, &LIM);
            assert_eq!(z.encoding(), if i < 128 { "listpack" } else { "skiplist" });
        }
        let before = z.mem_size();
        z.remove(b"m5");
        assert_eq!(before - z.mem_size(), 2 + MEMBER_OVERHEAD);
        assert_eq!(z.remove_rank_range(10, 5), 5);
        assert_eq!(z.len(), 123);
        z.check();
        while z.pop(false).is_some() {}
        assert_eq!(z.mem_size(), 0);
        z.check();
    }

    /// Lex range starts and runs on random zsets, with equal scores (rank arithmetic) and mixed
    /// scores (walks): the run always equals a plain walk under the same bound, never reaches
    /// past the ends, and removing it keeps every invariant.
    #[test]
    fn lex_runs_agree_with_walks_and_keep_invariants() {
        let bounds = [
            "-", "+", "[m1", "(m1", "[m5", "(m50", "[m", "[n", "(m199", "[m2",
        ];
        for seed in [1u64, 2, 3, 4] {
            let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            let mut rand = move |n: u64| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng % n
            };
            let equal = seed % 2 == 0;
            let mut z = ZSetValue::new(seed);
            for step in 0..3000 {
                let m = format!("m{}", rand(200));
                let sc = if equal { 0.0 } else { rand(7) as f64 };
                match rand(4) {
                    0 | 1 => {
                        z.insert(m.as_bytes(), sc, &LIM);
                    }
                    2 => {
                        z.remove(m.as_bytes());
                    }
                    _ => {
                        let r = LexRange::parse(
                            bounds[rand(10) as usize].as_bytes(),
                            bounds[rand(10) as usize].as_bytes(),
                        )
                        .unwrap();
                        let reverse = rand(2) == 0;
                        if let Some(start) = z.lex_start(&r, reverse) {
                            assert!(start < z.len());
                            let holds = |m: &[u8]| {
                                if reverse { r.gte_min(m) } else { r.lte_max(m) }
                            };
                            let walked = z
                                .walk(start, usize::MAX, reverse)
                                .take_while(|&(m, _)| holds(m))
                                .count();
                            let run = z.lex_run(start, &r, reverse, usize::MAX);
                            assert_eq!(run, walked, "seed {seed} step {step}");
                            assert_eq!(z.lex_run(start, &r, reverse, 1), 1);
                            if !reverse && rand(3) == 0 {
                                assert_eq!(z.remove_rank_range(start, run), run);
                            }
                        }
                    }
                }
                if step % 250 == 0 {
                    z.check();
                }
            }
            z.check();
        }
    }

    #[test]
    fn scan_visits_everything_under_deletes() {
        let mut z = ZSetValue::new(2);
        for i in 0..500 {
            z.insert(format!("m{i}").as_bytes(), i as f64, &LIM);
        }
        let mut seen = std::collections::HashSet::new();
        let mut cursor = 0;
        for round in 0..10_000 {
            cursor = z.scan(cursor, 7, |m, _| {
                seen.insert(m.to_vec());
            });
            // Delete a member that is not one of the stable ones (m0..m249).
            let victim = format!("m{}", 250 + (round * 37) % 250);
            z.remove(victim.as_bytes());
            if cursor == 0 {
                break;
            }
        }
        assert_eq!(cursor, 0);
        for i in 0..250 {
            assert!(seen.contains(format!("m{i}").as_bytes()), "m{i} missed");
        }
        z.check();
    }
}
