//! The set type (redis 7.0 `t_set.c`): the value's API first, then its commands.
//!
//! # Value
//! A [`SetValue`] has Redis 7.0's two set encodings, for real (listpack sets came in 7.2):
//!
//! - **intset** — while every member is an integer in `string2ll` form ([`args::parse_i64`])
//!   and there are at most `set-max-intset-entries` of them ([`EncodingLimits`], read when the
//!   set grows), the members are an [`IntSet`]: a sorted array of `i16`/`i32`/`i64`, widened as
//!   Redis widens it. Membership is a binary search; replies, SSCAN and SPOP's case 3 come in
//!   ascending numeric order, byte for byte like Redis. Members are written back as decimal
//!   text on the way out ([`Member`], a stack buffer: no allocation per member).
//! - **hashtable** — on the first non-integer member or past the entry limit the set converts
//!   for good (`setTypeAdd`, `setTypeConvert`: ascending first, then in insertion order; never
//!   back, even when it shrinks; verified on redis-server 7.0.15: `SADD s a b` → `hashtable`)
//!   to an [`IndexSet`] of boxed members with the keyspace's kind of hasher (foldhash, seeded
//!   per set from the engine's PRNG when the set is created, kept through the conversion).
//!   The dense vector gives O(1) random members (SPOP, SRANDMEMBER) and a SCAN cursor. A
//!   hashtable's order is unspecified in Redis. Results of SUNION/SINTER/SDIFF (and their
//!   STORE forms) are built like Redis builds them, from an empty intset, so their encoding
//!   and order match; SPOP's case 3 decides the encoding afresh ([`SetValue::reencode`]).
//!
//! - **Memory.** [`SetValue::mem_size`] is O(1): an intset accounts its values' bytes (10
//!   members below 32,768: 20 bytes); a hashtable keeps its own count,
//!   `Σ (member + MEMBER_OVERHEAD)`, updated on every change.
//! - **SCAN.** An intset answers everything in one call with cursor 0, as Redis does; a
//!   hashtable uses the keyspace's downward cursor (`keyspace.rs`, *SCAN guarantee*: removal is
//!   `swap_remove`, which only moves the last member down; inserts go to the top).
//!
//! # Commands
//! SADD SREM SMEMBERS SISMEMBER SMISMEMBER SCARD SPOP SRANDMEMBER SMOVE SINTER SINTERCARD
//! SUNION SDIFF SINTERSTORE SUNIONSTORE SDIFFSTORE SSCAN, with Redis 7.0.15's replies and
//! errors (`tests/diff/sets.txt`). In RESP3, SMEMBERS/SINTER/SUNION/SDIFF and SPOP with a count
//! reply with a set (`~`); SRANDMEMBER with a count with an array, as Redis 7.0 does. Multi-key
//! commands check every key's type (7.0 semantics: `SINTER missing wrongtype` is WRONGTYPE).
//! STORE forms overwrite a destination of any type and clear its TTL; an empty result deletes
//! it. Emptied sets are deleted. Events: `sadd`, `srem`, `spop`, SMOVE → `srem` + `sadd`,
//! `sinterstore`/`sunionstore`/`sdiffstore`, and `del` when a key goes.
//!
//! Random replies: SPOP/SRANDMEMBER draw from the keyspace's PRNG (`Keyspace::next_random`),
//! never from the OS. A negative SRANDMEMBER count larger than
//! [`RANDOM_REPLY_MAX`](super::hash::RANDOM_REPLY_MAX) is refused rather than streamed.

use std::borrow::Borrow;
use std::hash::{Hash, Hasher};
use std::ops::Deref;

use foldhash::fast::FixedState;
use indexmap::IndexSet;

use crate::Engine;
use crate::args;
use crate::call::Call;
use crate::error::CmdError;
use crate::glob;
use crate::keyspace::Keep;
use crate::notify::{class, notify};
use crate::types::hash::{
    check_random_reply_len, parse_random_count, parse_scan_opts, sample_distinct, scan_range,
    write_scan_reply,
};
use crate::types::intset::{self, IntSet};
use crate::types::{EncodingLimits, Value};

/// Bytes accounted per member of a hashtable beyond its bytes: the entry (hash + boxed slice,
/// 24 bytes) and its index slot (8). An intset accounts its values instead.
pub const MEMBER_OVERHEAD: usize = 32;

type Members = IndexSet<Box<[u8]>, FixedState>;

/// A stored set (see the module doc). Keeps its own byte count so
/// [`mem_size`](Self::mem_size) is O(1).
#[derive(Clone, Debug)]
pub struct SetValue {
    repr: Repr,
}

/// Both forms boxed, so a `SetValue` is two words and sits unboxed in a keyspace [`Value`]:
/// a hashtable set is one hop from the keyspace, as before it had an intset form, and an
/// intset pays one small box (its values and its seed) instead of a table's header.
#[derive(Clone, Debug)]
enum Repr {
    Intset(Box<Small>),
    Table(Box<Table>),
}

/// The intset form.
#[derive(Clone, Debug)]
struct Small {
    /// The members, ascending.
    ints: IntSet,
    /// Keys the hasher of the table it may become.
    seed: u64,
}

#[derive(Clone, Debug)]
struct Table {
    members: Members,
    /// Accounted bytes (see the module doc, *Memory*).
    bytes: usize,
    /// The hasher's key (kept should SPOP's case 3 make the set an intset again).
    seed: u64,
}

// A keyspace value holds its set inline (see `Repr`); the intset's box is a small size class.
const _: () = assert!(std::mem::size_of::<SetValue>() <= 16);
const _: () = assert!(std::mem::size_of::<Small>() <= 32);

/// A member as it goes out: a hashtable's bytes, or an intset's integer as decimal text in a
/// stack buffer. Derefs to the bytes; hashes and compares like them.
#[derive(Clone, Copy)]
pub enum Member<'a> {
    Bytes(&'a [u8]),
    Int { buf: [u8; 20], len: u8 },
}

impl Member<'_> {
    /// `v` in decimal (`string2ll`'s inverse, like Redis's `ll2string`).
    pub fn int(v: i64) -> Member<'static> {
        let mut b = itoa::Buffer::new();
        let s = b.format(v).as_bytes();
        let mut buf = [0u8; 20];
        buf[..s.len()].copy_from_slice(s);
        Member::Int {
            buf,
            len: s.len() as u8,
        }
    }
}

impl Deref for Member<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Member::Bytes(b) => b,
            Member::Int { buf, len } => &buf[..usize::from(*len)],
        }
    }
}

impl AsRef<[u8]> for Member<'_> {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl Borrow<[u8]> for Member<'_> {
    fn borrow(&self) -> &[u8] {
        self
    }
}

impl PartialEq for Member<'_> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for Member<'_> {}

/// As `[u8]` hashes (a `Borrow<[u8]>` requirement).
impl Hash for Member<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (**self).hash(state);
    }
}

impl std::fmt::Debug for Member<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self))
    }
}

/// Iterator over a set's members in reply order.
pub enum Iter<'a> {
    Ints(intset::Iter<'a>),
    Table(indexmap::set::Iter<'a, Box<[u8]>>),
}

impl<'a> Iterator for Iter<'a> {
    type Item = Member<'a>;

    fn next(&mut self) -> Option<Member<'a>> {
        match self {
            Iter::Ints(it) => it.next().map(Member::int),
            Iter::Table(it) => it.next().map(|m| Member::Bytes(m)),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match self {
            Iter::Ints(it) => it.size_hint(),
            Iter::Table(it) => it.size_hint(),
        }
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl Default for SetValue {
    fn default() -> Self {
        SetValue::new()
    }
}

/// Equal members (order and encoding aside).
impl PartialEq for SetValue {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().all(|m| other.contains(&m))
    }
}

impl SetValue {
    /// An empty set with an unseeded hasher (tests, snapshots); commands use
    /// [`with_seed`](Self::with_seed).
    pub fn new() -> SetValue {
        SetValue::with_seed(0)
    }

    /// An empty set (an empty intset, as Redis's `createIntsetObject`) whose hasher, once it
    /// is a hashtable, is keyed by `seed`.
    pub fn with_seed(seed: u64) -> SetValue {
        SetValue {
            repr: Repr::Intset(Box::new(Small {
                ints: IntSet::new(),
                seed,
            })),
        }
    }

    /// Number of members (SCARD).
    pub fn len(&self) -> usize {
        match &self.repr {
            Repr::Intset(small) => small.ints.len(),
            Repr::Table(t) => t.members.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn contains(&self, member: &[u8]) -> bool {
        match &self.repr {
            Repr::Intset(small) => args::parse_i64(member).is_some_and(|v| small.ints.contains(v)),
            Repr::Table(t) => t.members.contains(member),
        }
    }

    /// Converts an intset to a hashtable, ascending (redis `setTypeConvert`; never back).
    fn convert(&mut self) {
        let Repr::Intset(small) = &self.repr else {
            return;
        };
        let (ints, seed) = (&small.ints, &small.seed);
        // `reserve`, not `with_capacity`: it sizes the entries to the index's capacity (3 for
        // a new set), so the next few members do not reallocate them.
        let mut members = Members::with_hasher(FixedState::with_seed(*seed));
        members.reserve(ints.len() + 1);
        let mut bytes = 0;
        for v in ints.iter() {
            let m = Member::int(v);
            bytes += m.len() + MEMBER_OVERHEAD;
            members.insert((*m).into());
        }
        self.repr = Repr::Table(Box::new(Table {
            members,
            bytes,
            seed: *seed,
        }));
    }

    /// Adds `member`; returns true if it was new. A member that is not an integer, or one
    /// more than `set-max-intset-entries`, converts an intset to a hashtable (redis
    /// `setTypeAdd`).
    pub fn insert(&mut self, member: &[u8], lim: &EncodingLimits) -> bool {
        if let Repr::Intset(small) = &mut self.repr {
            let ints = &mut small.ints;
            if let Some(v) = args::parse_i64(member) {
                if ints.contains(v) {
                    return false;
                }
                if ints.len() < lim.intset_entries() {
                    ints.insert(v);
                    return true;
                }
            }
            self.convert();
        }
        let Repr::Table(t) = &mut self.repr else {
            unreachable!("converted above");
        };
        if t.members.contains(member) {
            return false;
        }
        t.bytes += member.len() + MEMBER_OVERHEAD;
        t.members.insert(member.into());
        true
    }

    /// Removes `member`; returns whether it was there.
    pub fn remove(&mut self, member: &[u8]) -> bool {
        match &mut self.repr {
            Repr::Intset(small) => args::parse_i64(member).is_some_and(|v| small.ints.remove(v)),
            Repr::Table(t) => match t.members.swap_take(member) {
                Some(m) => {
                    t.bytes -= m.len() + MEMBER_OVERHEAD;
                    true
                }
                None => false,
            },
        }
    }

    /// Removes and returns the member at position `i` (`0..len`). A hashtable moves its last
    /// member into `i`, an intset moves the later ones down: either way, removing positions
    /// from the highest down never moves a member still to be removed.
    pub fn swap_remove_index(&mut self, i: usize) -> Option<Box<[u8]>> {
        match &mut self.repr {
            Repr::Intset(small) => {
                let ints = &mut small.ints;
                (i < ints.len()).then(|| (*Member::int(ints.remove_index(i))).into())
            }
            Repr::Table(t) => {
                let m = t.members.swap_remove_index(i)?;
                t.bytes -= m.len() + MEMBER_OVERHEAD;
                Some(m)
            }
        }
    }

    /// The member at position `i` (ascending for an intset).
    pub fn get_index(&self, i: usize) -> Option<Member<'_>> {
        match &self.repr {
            Repr::Intset(small) => small.ints.get(i).map(Member::int),
            Repr::Table(t) => t.members.get_index(i).map(|m| Member::Bytes(m)),
        }
    }

    /// Members in Redis's reply order: ascending integers for an intset, storage order
    /// otherwise.
    pub fn iter(&self) -> Iter<'_> {
        match &self.repr {
            Repr::Intset(small) => Iter::Ints(small.ints.iter()),
            Repr::Table(t) => Iter::Table(t.members.iter()),
        }
    }

    /// [`iter`](Self::iter), collected (a reply writes the count first).
    pub fn ordered(&self) -> Vec<Member<'_>> {
        self.iter().collect()
    }

    /// The values of an intset, ascending (the RDB intset encoder); `None` for a hashtable.
    pub fn ints(&self) -> Option<intset::Iter<'_>> {
        match &self.repr {
            Repr::Intset(small) => Some(small.ints.iter()),
            Repr::Table(_) => None,
        }
    }

    /// Whether the set is still an intset.
    pub fn is_intset(&self) -> bool {
        matches!(self.repr, Repr::Intset(_))
    }

    /// Decides the encoding again as for a set built from scratch out of these members: an
    /// intset if every member is an integer and there are at most `set-max-intset-entries`
    /// (SPOP with a count near the size, which Redis answers by building a new set of the
    /// members that stay: `spopWithCountCommand`, case 3).
    pub fn reencode(&mut self, lim: &EncodingLimits) {
        let fits = self.len() <= lim.intset_entries();
        match &self.repr {
            Repr::Intset(_) if !fits => self.convert(),
            Repr::Table(t) if fits => {
                let mut ints = IntSet::new();
                for m in &t.members {
                    match args::parse_i64(m) {
                        Some(v) => {
                            ints.insert(v);
                        }
                        None => return,
                    }
                }
                self.repr = Repr::Intset(Box::new(Small { ints, seed: t.seed }));
            }
            _ => {}
        }
    }

    /// OBJECT ENCODING: `intset` or `hashtable` (Redis 7.0 names and thresholds).
    pub fn encoding(&self) -> &'static str {
        if self.is_intset() {
            "intset"
        } else {
            "hashtable"
        }
    }

    /// Payload bytes this value accounts for in `used_memory`, kept incrementally (O(1)).
    pub fn mem_size(&self) -> usize {
        match &self.repr {
            Repr::Intset(small) => small.ints.byte_len(),
            Repr::Table(t) => t.bytes,
        }
    }

    /// One SSCAN step: calls `f` for up to `count` members below `cursor` (0 = from the top)
    /// and returns the next cursor (0 = done). An intset returns everything at once, sorted.
    pub fn scan<'a>(&'a self, cursor: u64, count: usize, mut f: impl FnMut(Member<'a>)) -> u64 {
        let Repr::Table(t) = &self.repr else {
            self.iter().for_each(f);
            return 0;
        };
        let (next, range) = scan_range(t.members.len(), cursor, count);
        for i in range.rev() {
            f(Member::Bytes(t.members.get_index(i).expect("in range")));
        }
        next
    }
}

// ---------------------------------------------------------------------------------------------
// Commands
// ---------------------------------------------------------------------------------------------

/// The set inside `v`, or WRONGTYPE.
pub fn as_set(v: &Value) -> Result<&SetValue, CmdError> {
    match v {
        Value::Set(s) => Ok(s),
        _ => Err(CmdError::WrongType),
    }
}

fn set_mut(v: &mut Value) -> &mut SetValue {
    match v {
        Value::Set(s) => s,
        _ => unreachable!("type checked before the update"),
    }
}

/// Looks `key` up for reading: `None` if missing, WRONGTYPE if not a set.
fn read_set(e: &mut Engine, key: &[u8], now_ms: u64) -> Result<Option<usize>, CmdError> {
    match e.ks.lookup_read(key, now_ms) {
        Some(i) => {
            as_set(e.ks.value(i))?;
            Ok(Some(i))
        }
        None => Ok(None),
    }
}

/// Looks `key` up before a write: `None` if missing, WRONGTYPE if not a set.
fn write_set(e: &mut Engine, key: &[u8], now_ms: u64) -> Result<Option<usize>, CmdError> {
    match e.ks.lookup_write(key, now_ms) {
        Some(i) => {
            as_set(e.ks.value(i))?;
            Ok(Some(i))
        }
        None => Ok(None),
    }
}

/// Positions of several keys, every one type-checked (`None` = missing). All keys are looked
/// up once first so that expired ones are reclaimed before any position is taken (deleting
/// an entry moves another, which would invalidate positions taken earlier).
fn lookup_sets(
    e: &mut Engine,
    keys: &[&[u8]],
    now_ms: u64,
) -> Result<Vec<Option<usize>>, CmdError> {
    for k in keys {
        e.ks.lookup_write(k, now_ms);
    }
    keys.iter().map(|k| read_set(e, k, now_ms)).collect()
}

/// Writes `members` as a set reply (`~` in RESP3).
fn write_members<M: AsRef<[u8]>>(c: &mut Call, members: &[M]) {
    let mut w = c.w();
    w.set(members.len());
    for m in members {
        w.bulk(m.as_ref());
    }
}

/// `SADD key member [member …]` → number of members added.
pub fn sadd(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let key = c.argv[1];
    let members = &c.argv[2..];
    let lim = e.config.encoding;
    let add = |s: &mut SetValue| members.iter().filter(|m| s.insert(m, &lim)).count();
    let added = match write_set(e, key, c.now_ms)? {
        Some(i) => e.ks.update(i, |v| add(set_mut(v))),
        None => {
            let mut s = SetValue::with_seed(e.ks.next_random());
            let n = add(&mut s);
            e.ks.set(key, Value::Set(s), Keep::Nothing, None);
            n
        }
    };
    if added > 0 {
        notify(e, class::SET, "sadd", key);
    }
    c.w().integer(added as i64);
    Ok(())
}

/// `SREM key member [member …]` → number of members removed; deletes the key when emptied.
pub fn srem(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let key = c.argv[1];
    let Some(i) = write_set(e, key, c.now_ms)? else {
        c.w().integer(0);
        return Ok(());
    };
    let members = &c.argv[2..];
    let (removed, empty) = e.ks.update(i, |v| {
        let s = set_mut(v);
        let mut removed = 0;
        for m in members {
            if s.remove(m) {
                removed += 1;
                if s.is_empty() {
                    break;
                }
            }
        }
        (removed, s.is_empty())
    });
    if removed > 0 {
        if empty {
            e.ks.remove_at(i);
        }
        notify(e, class::SET, "srem", key);
        if empty {
            notify(e, class::GENERIC, "del", key);
        }
    }
    c.w().integer(removed);
    Ok(())
}

/// `SMEMBERS key` → set of members (Redis 7.0 runs it as a one-key SINTER).
pub fn smembers(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let Some(i) = read_set(e, c.argv[1], c.now_ms)? else {
        write_members::<&[u8]>(c, &[]);
        return Ok(());
    };
    let members = as_set(e.ks.value(i))?.ordered();
    write_members(c, &members);
    Ok(())
}

/// `SISMEMBER key member` → 1 | 0.
pub fn sismember(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let found = match read_set(e, c.argv[1], c.now_ms)? {
        Some(i) => as_set(e.ks.value(i))?.contains(c.argv[2]),
        None => false,
    };
    c.w().integer(found as i64);
    Ok(())
}

/// `SMISMEMBER key member [member …]` → array of 1 | 0.
pub fn smismember(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let pos = read_set(e, c.argv[1], c.now_ms)?;
    let s = match pos {
        Some(i) => Some(as_set(e.ks.value(i))?),
        None => None,
    };
    let members = &c.argv[2..];
    let mut w = c.w();
    w.array(members.len());
    for m in members {
        w.integer(s.is_some_and(|s| s.contains(m)) as i64);
    }
    Ok(())
}

/// `SCARD key` → number of members.
pub fn scard(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let n = match read_set(e, c.argv[1], c.now_ms)? {
        Some(i) => as_set(e.ks.value(i))?.len(),
        None => 0,
    };
    c.w().integer(n as i64);
    Ok(())
}

/// `SPOP key [count]` → a removed random member | nil; with a count, a set of up to `count`
/// distinct removed members. `value is out of range, must be positive` for a negative count.
pub fn spop(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    match c.argv.len() {
        2 => {}
        3 => return spop_count(e, c),
        _ => return Err(CmdError::Syntax),
    }
    let key = c.argv[1];
    let Some(i) = write_set(e, key, c.now_ms)? else {
        c.w().null();
        return Ok(());
    };
    let len = as_set(e.ks.value(i))?.len();
    let r = (e.ks.next_random() % len as u64) as usize;
    let (member, empty) = e.ks.update(i, |v| {
        let s = set_mut(v);
        (s.swap_remove_index(r).expect("in range"), s.is_empty())
    });
    notify(e, class::SET, "spop", key);
    if empty {
        e.ks.remove_at(i);
        notify(e, class::GENERIC, "del", key);
    }
    c.w().bulk(&member);
    Ok(())
}

/// redis `spopWithCountCommand`.
fn spop_count(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    // redis `getPositiveLongFromObjectOrReply`: one message for "not an integer" and "< 0".
    let count = match args::parse_i64(c.argv[2]) {
        Some(l) if l >= 0 => l as u64,
        _ => {
            return Err(CmdError::Static(
                "ERR value is out of range, must be positive",
            ));
        }
    };
    let key = c.argv[1];
    let Some(i) = write_set(e, key, c.now_ms)? else {
        write_members::<&[u8]>(c, &[]);
        return Ok(());
    };
    if count == 0 {
        write_members::<&[u8]>(c, &[]);
        return Ok(());
    }
    let size = as_set(e.ks.value(i))?.len();
    notify(e, class::SET, "spop", key);
    if count >= size as u64 {
        // The whole set, in its reply order; then the key goes.
        {
            let members = as_set(e.ks.value(i))?.ordered();
            write_members(c, &members);
        }
        e.ks.remove_at(i);
        notify(e, class::GENERIC, "del", key);
        return Ok(());
    }
    let mut positions = sample_distinct(size, count as usize, &mut || e.ks.next_random());
    // Highest first: `swap_remove` moves the last member into the hole, and every position
    // above the current one has already been taken out, so no chosen member moves.
    positions.sort_unstable_by(|a, b| b.cmp(a));
    // redis `SPOP_MOVE_STRATEGY_MUL`: when few members stay, Redis builds a new set of them
    // (case 3), whose encoding is decided afresh.
    let rebuilt = (size as u64 - count) * 5 <= count;
    let lim = e.config.encoding;
    let popped: Vec<Box<[u8]>> = e.ks.update(i, |v| {
        let s = set_mut(v);
        let was_intset = s.is_intset();
        let mut popped: Vec<Box<[u8]>> = positions
            .iter()
            .map(|&p| s.swap_remove_index(p).expect("in range"))
            .collect();
        if rebuilt {
            // Case 3 replies with what is left of the old set, in its order: ascending for
            // an intset.
            if was_intset {
                popped.sort_by_key(|m| args::parse_i64(m).unwrap_or(0));
            }
            s.reencode(&lim);
        }
        popped
    });
    let refs: Vec<&[u8]> = popped.iter().map(|m| &**m).collect();
    write_members(c, &refs);
    Ok(())
}

/// `SRANDMEMBER key [count]` → a random member | nil; with a count, an array of distinct
/// members (count ≥ 0) or of `|count|` members with repeats (count < 0).
pub fn srandmember(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    match c.argv.len() {
        2 => {}
        3 => return srandmember_count(e, c),
        _ => return Err(CmdError::Syntax),
    }
    let Some(i) = read_set(e, c.argv[1], c.now_ms)? else {
        c.w().null();
        return Ok(());
    };
    let len = as_set(e.ks.value(i))?.len();
    let r = (e.ks.next_random() % len as u64) as usize;
    let m = as_set(e.ks.value(i))?.get_index(r).expect("in range");
    c.w().bulk(&m);
    Ok(())
}

/// redis `srandmemberWithCountCommand` (array replies in RESP2 and RESP3).
fn srandmember_count(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let l = parse_random_count(c.argv[2])?;
    let Some(i) = read_set(e, c.argv[1], c.now_ms)? else {
        c.w().array(0);
        return Ok(());
    };
    let size = as_set(e.ks.value(i))?.len();
    let count = l.unsigned_abs();
    let positions: Vec<usize> = if count == 0 {
        Vec::new()
    } else if l < 0 || count == 1 {
        check_random_reply_len(count)?;
        (0..count)
            .map(|_| (e.ks.next_random() % size as u64) as usize)
            .collect()
    } else if count >= size as u64 {
        let members = as_set(e.ks.value(i))?.ordered();
        let mut w = c.w();
        w.array(members.len());
        for m in members {
            w.bulk(&m);
        }
        return Ok(());
    } else {
        sample_distinct(size, count as usize, &mut || e.ks.next_random())
    };
    let s = as_set(e.ks.value(i))?;
    let mut w = c.w();
    w.array(positions.len());
    for p in positions {
        w.bulk(&s.get_index(p).expect("in range"));
    }
    Ok(())
}

/// `SMOVE source destination member` → 1 if moved, 0 if `source` lacks it. A missing source
/// answers 0 before the destination's type is checked (Redis's order).
pub fn smove(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let (src, dst, member) = (c.argv[1], c.argv[2], c.argv[3]);
    // Expire both first so neither lookup moves the other's entry.
    e.ks.lookup_write(src, c.now_ms);
    e.ks.lookup_write(dst, c.now_ms);
    let Some(si) = e.ks.lookup_write(src, c.now_ms) else {
        c.w().integer(0);
        return Ok(());
    };
    as_set(e.ks.value(si))?;
    if let Some(di) = e.ks.lookup_write(dst, c.now_ms) {
        as_set(e.ks.value(di))?;
    }
    if src == dst {
        let found = as_set(e.ks.value(si))?.contains(member);
        c.w().integer(found as i64);
        return Ok(());
    }
    if !as_set(e.ks.value(si))?.contains(member) {
        c.w().integer(0);
        return Ok(());
    }
    let empty = e.ks.update(si, |v| {
        let s = set_mut(v);
        s.remove(member);
        s.is_empty()
    });
    notify(e, class::SET, "srem", src);
    if empty {
        e.ks.remove_at(si);
        notify(e, class::GENERIC, "del", src);
    }
    // Positions may have moved with the removal: look the destination up again.
    let lim = e.config.encoding;
    let added = match e.ks.lookup_write(dst, c.now_ms) {
        Some(di) => e.ks.update(di, |v| set_mut(v).insert(member, &lim)),
        None => {
            let mut s = SetValue::with_seed(e.ks.next_random());
            s.insert(member, &lim);
            e.ks.set(dst, Value::Set(s), Keep::Nothing, None);
            true
        }
    };
    if added {
        notify(e, class::SET, "sadd", dst);
    }
    c.w().integer(1);
    Ok(())
}

/// The set operations of SINTER/SUNION/SDIFF and their STORE forms.
#[derive(Clone, Copy, PartialEq, Eq)]
enum SetOp {
    Inter,
    Union,
    Diff,
}

impl SetOp {
    fn store_event(self) -> &'static str {
        match self {
            SetOp::Inter => "sinterstore",
            SetOp::Union => "sunionstore",
            SetOp::Diff => "sdiffstore",
        }
    }
}

/// Counts the intersection of `sets`, stopping at `limit` (0 = no limit): the smallest set is
/// walked and each member probed in the others (redis `sinterGenericCommand`).
fn inter_card(sets: &[&SetValue], limit: usize) -> usize {
    let Some(smallest) = sets.iter().min_by_key(|s| s.len()) else {
        return 0;
    };
    let mut n = 0;
    for m in smallest.iter() {
        if sets.iter().all(|s| s.contains(&m)) {
            n += 1;
            if limit != 0 && n >= limit {
                break;
            }
        }
    }
    n
}

/// Computes `op` over `sets` (`None` = missing key = empty set) into a new set, built like
/// Redis builds it (from an empty intset), so its encoding and reply order match.
fn compute(op: SetOp, sets: &[Option<&SetValue>], seed: u64, lim: &EncodingLimits) -> SetValue {
    let mut out = SetValue::with_seed(seed);
    match op {
        SetOp::Inter => {
            if sets.iter().any(Option::is_none) {
                return out;
            }
            let sets: Vec<&SetValue> = sets.iter().flatten().copied().collect();
            let smallest = sets
                .iter()
                .min_by_key(|s| s.len())
                .expect("at least one key");
            for m in smallest.ordered() {
                if sets.iter().all(|s| s.contains(&m)) {
                    out.insert(&m, lim);
                }
            }
        }
        SetOp::Union => {
            for s in sets.iter().flatten() {
                for m in s.iter() {
                    out.insert(&m, lim);
                }
            }
        }
        SetOp::Diff => {
            let Some(Some(first)) = sets.first() else {
                return out;
            };
            let rest: Vec<&SetValue> = sets[1..].iter().flatten().copied().collect();
            for m in first.iter() {
                if !rest.iter().any(|s| s.contains(&m)) {
                    out.insert(&m, lim);
                }
            }
        }
    }
    out
}

/// SINTER/SUNION/SDIFF: `keys` → set reply.
fn setop_reply(e: &mut Engine, c: &mut Call, op: SetOp) -> Result<(), CmdError> {
    let keys = &c.argv[1..];
    let pos = lookup_sets(e, keys, c.now_ms)?;
    let seed = e.ks.next_random();
    let sets: Vec<Option<&SetValue>> = pos
        .iter()
        .map(|p| p.map(|i| as_set(e.ks.value(i)).expect("type checked")))
        .collect();
    let result = compute(op, &sets, seed, &e.config.encoding);
    write_members(c, &result.ordered());
    Ok(())
}

/// SINTERSTORE/SUNIONSTORE/SDIFFSTORE: `destination keys…` → size of the stored result.
fn setop_store(e: &mut Engine, c: &mut Call, op: SetOp) -> Result<(), CmdError> {
    let dst = c.argv[1];
    let keys = &c.argv[2..];
    let pos = lookup_sets(e, keys, c.now_ms)?;
    let seed = e.ks.next_random();
    let result = {
        let sets: Vec<Option<&SetValue>> = pos
            .iter()
            .map(|p| p.map(|i| as_set(e.ks.value(i)).expect("type checked")))
            .collect();
        compute(op, &sets, seed, &e.config.encoding)
    };
    let n = result.len();
    if n > 0 {
        // Overwrites a destination of any type and clears its TTL (redis `setKey`).
        let existing = e.ks.lookup_write(dst, c.now_ms);
        e.ks.set(dst, Value::Set(result), Keep::Nothing, existing);
        notify(e, class::SET, op.store_event(), dst);
    } else if e.ks.delete(dst, c.now_ms) {
        notify(e, class::GENERIC, "del", dst);
    }
    c.w().integer(n as i64);
    Ok(())
}

/// `SINTER key [key …]` → set of members in every key.
pub fn sinter(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    setop_reply(e, c, SetOp::Inter)
}

/// `SUNION key [key …]` → set of members in any key.
pub fn sunion(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    setop_reply(e, c, SetOp::Union)
}

/// `SDIFF key [key …]` → set of members of the first key in none of the others.
pub fn sdiff(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    setop_reply(e, c, SetOp::Diff)
}

/// `SINTERSTORE destination key [key …]` → size of the stored intersection.
pub fn sinterstore(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    setop_store(e, c, SetOp::Inter)
}

/// `SUNIONSTORE destination key [key …]` → size of the stored union.
pub fn sunionstore(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    setop_store(e, c, SetOp::Union)
}

/// `SDIFFSTORE destination key [key …]` → size of the stored difference.
pub fn sdiffstore(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    setop_store(e, c, SetOp::Diff)
}

/// `SINTERCARD numkeys key [key …] [LIMIT limit]` → size of the intersection, counting
/// stops at `limit` (0 = no limit).
pub fn sintercard(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let argv = c.argv;
    let numkeys = match args::parse_i64(argv[1]) {
        Some(n) if n >= 1 => n as u64,
        _ => {
            return Err(CmdError::Static("ERR numkeys should be greater than 0"));
        }
    };
    if numkeys > (argv.len() - 2) as u64 {
        return Err(CmdError::Static(
            "ERR Number of keys can't be greater than number of args",
        ));
    }
    let numkeys = numkeys as usize;
    let mut limit: u64 = 0;
    let mut j = 2 + numkeys;
    while j < argv.len() {
        if args::is(argv[j], "limit") && j + 1 < argv.len() {
            j += 1;
            limit = match args::parse_i64(argv[j]) {
                Some(l) if l >= 0 => l as u64,
                _ => return Err(CmdError::Static("ERR LIMIT can't be negative")),
            };
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    let keys = &argv[2..2 + numkeys];
    let pos = lookup_sets(e, keys, c.now_ms)?;
    let n = if pos.iter().any(Option::is_none) {
        0
    } else {
        let sets: Vec<&SetValue> = pos
            .iter()
            .flatten()
            .map(|&i| as_set(e.ks.value(i)).expect("type checked"))
            .collect();
        inter_card(&sets, usize::try_from(limit).unwrap_or(usize::MAX))
    };
    c.w().integer(n as i64);
    Ok(())
}

/// `SSCAN key cursor [MATCH pattern] [COUNT count]` → `[cursor, [member, …]]`.
pub fn sscan(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let cursor = args::parse_u64_cursor(c.argv[2])?;
    let Some(i) = read_set(e, c.argv[1], c.now_ms)? else {
        write_scan_reply(c, 0, &[]);
        return Ok(());
    };
    let (count, pattern) = parse_scan_opts(&c.argv[3..])?;
    let s = as_set(e.ks.value(i))?;
    let mut items = Vec::new();
    let next = s.scan(cursor, count, |m| {
        if pattern.is_none_or(|p| glob::matches(p, &m, false)) {
            items.push(m);
        }
    });
    let refs: Vec<&[u8]> = items.iter().map(|m| &**m).collect();
    write_scan_reply(c, next, &refs);
    Ok(())
}

#[cfg(test)]
#[path = "set_tests.rs"]
mod tests;
