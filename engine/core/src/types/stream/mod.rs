//! The stream type (redis 7.0 `t_stream.c`): the entry store here (its nodes and the
//! listpack sizes in `node.rs`), consumer groups in [`group`], the commands in [`cmd`] (XADD,
//! XRANGE, XREAD…) and [`cgcmd`] (XGROUP, XACK, XPENDING, XCLAIM, XINFO…).
//!
//! # Layout
//! Redis keeps a stream as a radix tree of listpacks: each *node* holds up to
//! `stream-node-max-entries` entries (and `stream-node-max-bytes` bytes), keyed by the ID of
//! its first entry (the *master* ID); entries store their ID as a delta from it, and an entry
//! whose field names equal the node's first entry's (the *master fields*) stores only its
//! values. We keep the same shape: a [`BTreeMap`] from master ID to a [`Node`], whose entries
//! are packed in one byte vector (varint deltas, a flags byte, length-prefixed strings) with a
//! `u32` offset per entry. That keeps memory per entry close to Redis's (a 3-field entry of
//! short strings costs ~20 bytes plus the strings), and an XRANGE of N entries is one tree
//! descent plus N sequential decodes.
//!
//! Deletion (XDEL, exact trimming inside a node) marks the entry deleted in its flags byte,
//! as Redis does (a *tombstone*); a node whose entries are all deleted is removed. Whole-node
//! trimming (`~`) drops nodes from the front.
//!
//! **Node boundaries match Redis's.** `~` trimming and LIMIT remove whole nodes, so which
//! entries they remove depends on where nodes split. A node is closed when it holds
//! `stream-node-max-entries` entries (deleted ones included) or when its listpack would reach
//! `stream-node-max-bytes`; we compute the exact size the Redis listpack would have
//! ([`lp_int_len`], [`lp_str_len`]: the listpack encodings of `listpack.c`) next to our own
//! packing, so XADD/XTRIM with `~` remove exactly the entries Redis removes.
//!
//! # Memory
//! [`StreamValue::mem_size`] is kept incrementally (O(1)): node bytes are recounted for the
//! one node an operation touches, consumer-group bytes by the group operations
//! (`group.rs`).
//!
//! # IDs
//! `<ms>-<seq>`, two `u64`s, ordered by `(ms, seq)` ([`StreamId`]); parsing follows
//! `streamGenericParseIDOrReply` ([`parse_id`]).

use std::collections::BTreeMap;

use crate::error::CmdError;

pub mod cgcmd;
pub mod cmd;
pub mod group;
mod node;

pub use group::{Consumer, Group, Nack};
use node::FLAG_DELETED;
pub use node::{EntryRef, Node, RawEntry, lp_int_len, lp_str_len};

/// redis `stream-node-max-entries` default.
pub const NODE_MAX_ENTRIES: u64 = 100;
/// redis `stream-node-max-bytes` default.
pub const NODE_MAX_BYTES: u64 = 4096;
/// redis `STREAM_LISTPACK_MAX_SIZE`: no node (and no entry) grows past 1 GB.
const LISTPACK_MAX_SIZE: u64 = 1 << 30;
/// Bytes accounted for an empty stream (the value header).
const STREAM_OVERHEAD: usize = 96;

/// A stream entry ID.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StreamId {
    pub ms: u64,
    pub seq: u64,
}

impl StreamId {
    pub const MIN: StreamId = StreamId { ms: 0, seq: 0 };
    pub const MAX: StreamId = StreamId {
        ms: u64::MAX,
        seq: u64::MAX,
    };

    pub const fn new(ms: u64, seq: u64) -> StreamId {
        StreamId { ms, seq }
    }

    pub fn is_zero(self) -> bool {
        self == StreamId::MIN
    }

    /// redis `streamIncrID`: the next ID, `None` past the last one.
    pub fn incr(self) -> Option<StreamId> {
        if self.seq == u64::MAX {
            if self.ms == u64::MAX {
                return None;
            }
            Some(StreamId::new(self.ms + 1, 0))
        } else {
            Some(StreamId::new(self.ms, self.seq + 1))
        }
    }

    /// redis `streamDecrID`: the previous ID, `None` before 0-0.
    pub fn decr(self) -> Option<StreamId> {
        if self.seq == 0 {
            if self.ms == 0 {
                return None;
            }
            Some(StreamId::new(self.ms - 1, u64::MAX))
        } else {
            Some(StreamId::new(self.ms, self.seq - 1))
        }
    }

    /// `<ms>-<seq>`.
    pub fn text(self) -> String {
        format!("{}-{}", self.ms, self.seq)
    }
}

/// `ERR Invalid stream ID specified as stream command argument`.
pub const INVALID_ID: CmdError =
    CmdError::Static("ERR Invalid stream ID specified as stream command argument");

/// redis `string2ull`: unsigned decimal, no sign, no spaces, fits a `u64` (leading zeros are
/// accepted by `strtoull`, and so here).
fn parse_u64(s: &[u8]) -> Option<u64> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        // `string2ull` falls back to `strtoull`, which would accept a leading `+`/spaces; it
        // then checks that the whole string was consumed and rejects a leading `-`. A `+` is
        // accepted by strtoull.
        if let Some(rest) = s.strip_prefix(b"+")
            && !rest.is_empty()
            && rest.iter().all(u8::is_ascii_digit)
        {
            return parse_u64(rest);
        }
        return None;
    }
    let mut v: u64 = 0;
    for &c in s {
        v = v.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
    }
    Some(v)
}

/// How [`parse_id`] treats its input.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum IdMode {
    /// `-` and `+` mean the smallest and largest ID.
    Loose,
    /// `-` and `+` are invalid (redis `streamParseStrictIDOrReply`).
    Strict,
    /// Strict, and `<ms>-*` is accepted (XADD): returns `seq_given = false`.
    StrictSeqStar,
}

/// redis `streamGenericParseIDOrReply`: `<ms>[-<seq>]`, a missing sequence is `missing_seq`.
/// Returns the ID and whether the sequence was given (false for `<ms>-*`).
pub fn parse_id(arg: &[u8], missing_seq: u64, mode: IdMode) -> Result<(StreamId, bool), CmdError> {
    if arg.len() > 127 {
        return Err(INVALID_ID);
    }
    // A C string: stops at the first NUL.
    let arg = match arg.iter().position(|&b| b == 0) {
        Some(p) => &arg[..p],
        None => arg,
    };
    if mode != IdMode::Loose && (arg == b"-" || arg == b"+") {
        return Err(INVALID_ID);
    }
    if arg == b"-" {
        return Ok((StreamId::MIN, true));
    }
    if arg == b"+" {
        return Ok((StreamId::MAX, true));
    }
    let (ms_part, seq_part) = match arg.iter().position(|&b| b == b'-') {
        Some(p) => (&arg[..p], Some(&arg[p + 1..])),
        None => (arg, None),
    };
    let ms = parse_u64(ms_part).ok_or(INVALID_ID)?;
    let (seq, given) = match seq_part {
        Some(b"*") if mode == IdMode::StrictSeqStar => (0, false),
        Some(s) => (parse_u64(s).ok_or(INVALID_ID)?, true),
        None => (missing_seq, true),
    };
    Ok((StreamId::new(ms, seq), given))
}

/// redis `streamParseIntervalIDOrReply`: an ID, or `(<id>` (exclusive, strict). Returns the
/// ID and whether it was exclusive.
pub fn parse_interval_id(arg: &[u8], missing_seq: u64) -> Result<(StreamId, bool), CmdError> {
    if arg.len() > 1 && arg[0] == b'(' {
        let (id, _) = parse_id(&arg[1..], missing_seq, IdMode::Strict)?;
        Ok((id, true))
    } else {
        let (id, _) = parse_id(arg, missing_seq, IdMode::Loose)?;
        Ok((id, false))
    }
}

/// Where [`StreamValue::range`] looks from.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    Forward,
    Reverse,
}

// ---------------------------------------------------------------------------------------------
// The stream
// ---------------------------------------------------------------------------------------------

/// Node limits read from the configuration when appending.
#[derive(Clone, Copy, Debug)]
pub struct NodeLimits {
    pub max_entries: u64,
    pub max_bytes: u64,
}

impl Default for NodeLimits {
    fn default() -> Self {
        NodeLimits {
            max_entries: NODE_MAX_ENTRIES,
            max_bytes: NODE_MAX_BYTES,
        }
    }
}

/// Why an append failed (redis `streamAppendItem` errno).
#[derive(Debug, PartialEq, Eq)]
pub enum AppendError {
    /// The ID is not greater than the last one (EDOM).
    NotGreater,
    /// The entry is too large (ERANGE).
    TooLarge,
}

/// Trimming strategy (redis `streamAddTrimArgs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trim {
    None,
    MaxLen(u64),
    MinId(StreamId),
}

/// A stored stream.
#[derive(Clone, Debug, Default)]
pub struct StreamValue {
    nodes: BTreeMap<StreamId, Node>,
    /// Live entries (XLEN).
    pub length: u64,
    /// The last ID generated (or set by XSETID).
    pub last_id: StreamId,
    /// The first live entry's ID (0-0 when empty).
    pub first_id: StreamId,
    /// The largest ID ever deleted.
    pub max_deleted_entry_id: StreamId,
    /// Entries ever added.
    pub entries_added: u64,
    /// Consumer groups by name.
    pub groups: BTreeMap<Box<[u8]>, Group>,
    /// Accounted bytes of the nodes.
    node_bytes: usize,
    /// Accounted bytes of the groups (kept by `group.rs` through [`StreamValue::group_mut`]).
    pub(crate) group_bytes: usize,
}

/// Equal contents: entries, counters and groups (the node layout and tombstones aside, which
/// a snapshot does not keep).
impl PartialEq for StreamValue {
    fn eq(&self, other: &Self) -> bool {
        type Owned = Vec<(StreamId, Vec<(Vec<u8>, Vec<u8>)>)>;
        let entries = |s: &StreamValue| -> Owned {
            s.entries()
                .map(|e| {
                    (
                        e.id,
                        e.fields().map(|(f, v)| (f.to_vec(), v.to_vec())).collect(),
                    )
                })
                .collect()
        };
        self.length == other.length
            && self.last_id == other.last_id
            && self.first_id == other.first_id
            && self.max_deleted_entry_id == other.max_deleted_entry_id
            && self.entries_added == other.entries_added
            && self.groups == other.groups
            && entries(self) == entries(other)
    }
}

impl StreamValue {
    pub fn new() -> StreamValue {
        StreamValue::default()
    }

    pub fn len(&self) -> u64 {
        self.length
    }

    pub fn is_empty(&self) -> bool {
        self.length == 0
    }

    /// Payload bytes accounted in `used_memory` (O(1)).
    pub fn mem_size(&self) -> usize {
        STREAM_OVERHEAD + self.node_bytes + self.group_bytes
    }

    /// Number of nodes (XINFO STREAM `radix-tree-keys`).
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// redis `streamAppendItem`: appends `pairs` (field, value…) with the ID `use_id`
    /// (`seq_given = false` means `<ms>-*`: the sequence follows the last ID's). Auto IDs
    /// (`*`) are resolved by the caller, who has the clock. Returns the new ID.
    pub fn append(
        &mut self,
        pairs: &[&[u8]],
        use_id: StreamId,
        seq_given: bool,
        limits: NodeLimits,
    ) -> Result<StreamId, AppendError> {
        let id = self.check_append(pairs, use_id, seq_given)?;
        let totelelen: u64 = pairs.iter().map(|p| p.len() as u64).sum();
        let nfields = pairs.len() / 2;
        // Does the tail node take one more entry?
        let mut node_max_bytes = limits.max_bytes;
        if node_max_bytes == 0 || node_max_bytes > LISTPACK_MAX_SIZE {
            node_max_bytes = LISTPACK_MAX_SIZE;
        }
        let tail_ok = match self.nodes.last_key_value() {
            None => false,
            Some((_, n)) => {
                !((n.lp_bytes() as u64 + totelelen >= node_max_bytes)
                    || (limits.max_entries != 0 && n.total() as u64 >= limits.max_entries))
            }
        };
        if !tail_ok {
            let mut n = Node::default();
            n.master_fields = pairs.iter().step_by(2).map(|f| (*f).into()).collect();
            // Master entry: count, deleted (counted by lp_bytes), nfields, fields, 0.
            n.lp_body = lp_int_len(nfields as i64)
                + n.master_fields.iter().map(|f| lp_str_len(f)).sum::<usize>()
                + lp_int_len(0);
            self.node_bytes += n.mem();
            self.nodes.insert(id, n);
        }
        let mut last = self.nodes.last_entry().expect("a tail node");
        let master = *last.key();
        let node = last.get_mut();
        let before = node.mem();
        node.push_entry(master, id, pairs, false);
        let after = node.mem();
        self.node_bytes = self.node_bytes + after - before;
        self.length += 1;
        self.entries_added += 1;
        self.last_id = id;
        if self.length == 1 {
            self.first_id = id;
        }
        Ok(id)
    }

    /// RESTORE of one Redis listpack: a node with master ID `master` and master fields
    /// `master_fields`, holding `entries` (`(deleted, id, field/value pairs)`) exactly, so the
    /// node layout and tombstones survive DUMP → RESTORE → DUMP. IDs must ascend from
    /// `master`, after every entry already here; a node without live entries is dropped (Redis
    /// never keeps one). Counts `length` and sets `last_id`; the caller sets the counters.
    pub fn load_node(
        &mut self,
        master: StreamId,
        master_fields: &[&[u8]],
        entries: &[(bool, StreamId, Vec<&[u8]>)],
    ) -> bool {
        let mut prev = self.last_node_end();
        if prev.is_some_and(|p| p >= master) || entries.first().is_some_and(|e| e.1 < master) {
            return false;
        }
        let mut n = Node {
            master_fields: master_fields.iter().map(|f| (*f).into()).collect(),
            lp_body: lp_int_len(master_fields.len() as i64)
                + master_fields.iter().map(|f| lp_str_len(f)).sum::<usize>()
                + lp_int_len(0),
            ..Node::default()
        };
        for (deleted, id, pairs) in entries {
            if prev.is_some_and(|p| p >= *id) || pairs.is_empty() || pairs.len() % 2 != 0 {
                return false;
            }
            prev = Some(*id);
            n.push_entry(master, *id, pairs, *deleted);
        }
        if n.live == 0 {
            return true;
        }
        self.length += u64::from(n.live);
        self.last_id = self.last_id.max(prev.expect("an entry"));
        self.node_bytes += n.mem();
        self.nodes.insert(master, n);
        true
    }

    /// The ID of the last entry of the last node, tombstones included.
    fn last_node_end(&self) -> Option<StreamId> {
        let (master, n) = self.nodes.last_key_value()?;
        Some(n.head(*master, n.total().checked_sub(1)?).0)
    }

    /// The ID [`append`](Self::append) would give an entry, or why it would fail, without
    /// changing anything.
    pub fn check_append(
        &self,
        pairs: &[&[u8]],
        use_id: StreamId,
        seq_given: bool,
    ) -> Result<StreamId, AppendError> {
        let id = if seq_given {
            use_id
        } else if self.last_id.ms == use_id.ms {
            if self.last_id.seq == u64::MAX {
                return Err(AppendError::NotGreater);
            }
            StreamId::new(use_id.ms, self.last_id.seq + 1)
        } else {
            use_id
        };
        if id <= self.last_id {
            return Err(AppendError::NotGreater);
        }
        let totelelen: u64 = pairs.iter().map(|p| p.len() as u64).sum();
        if totelelen > LISTPACK_MAX_SIZE {
            return Err(AppendError::TooLarge);
        }
        Ok(id)
    }

    /// Live entries with IDs in `start..=end`, ascending (`Forward`) or descending.
    pub fn range(
        &self,
        start: StreamId,
        end: StreamId,
        dir: Dir,
    ) -> Box<dyn Iterator<Item = EntryRef<'_>> + '_> {
        if start > end {
            return Box::new(std::iter::empty());
        }
        match dir {
            Dir::Forward => {
                // The node holding `start`: the last one whose master ID is <= start.
                let from = self
                    .nodes
                    .range(..=start)
                    .next_back()
                    .map_or(StreamId::MIN, |(k, _)| *k);
                Box::new(
                    self.nodes
                        .range(from..)
                        .flat_map(move |(&master, node)| {
                            let first = if master == from {
                                node.lower_bound(master, start)
                            } else {
                                0
                            };
                            (first..node.total()).map(move |i| (master, node, i))
                        })
                        .filter_map(|(master, node, i)| {
                            let (id, flags, at) = node.head(master, i);
                            (flags & FLAG_DELETED == 0).then_some(EntryRef {
                                id,
                                node,
                                flags,
                                at,
                            })
                        })
                        .take_while(move |e| e.id <= end),
                )
            }
            Dir::Reverse => Box::new(
                self.nodes
                    .range(..=end)
                    .rev()
                    .flat_map(move |(&master, node)| {
                        let upto = match end.incr() {
                            Some(next) => node.lower_bound(master, next),
                            None => node.total(),
                        };
                        (0..upto).rev().map(move |i| (master, node, i))
                    })
                    .filter_map(move |(master, node, i)| {
                        let (id, flags, at) = node.head(master, i);
                        (flags & FLAG_DELETED == 0 && id <= end).then_some(EntryRef {
                            id,
                            node,
                            flags,
                            at,
                        })
                    })
                    .take_while(move |e| e.id >= start),
            ),
        }
    }

    /// The live entry `id`, if any.
    pub fn get(&self, id: StreamId) -> Option<EntryRef<'_>> {
        self.range(id, id, Dir::Forward).next()
    }

    /// redis `streamLastValidID`: the last live entry's ID (0-0 when empty).
    pub fn last_valid_id(&self) -> StreamId {
        self.range(StreamId::MIN, StreamId::MAX, Dir::Reverse)
            .next()
            .map_or(StreamId::MIN, |e| e.id)
    }

    /// The first live entry's ID (redis `streamGetEdgeID(s,1,1,…)`).
    fn first_valid_id(&self) -> StreamId {
        self.range(StreamId::MIN, StreamId::MAX, Dir::Forward)
            .next()
            .map_or(StreamId::MAX, |e| e.id)
    }

    /// Deletes live entry `id`; returns whether it existed (redis `streamDeleteItem`; the
    /// caller updates `first_id` / `max_deleted_entry_id`).
    pub fn delete(&mut self, id: StreamId) -> bool {
        let Some((&master, node)) = self.nodes.range_mut(..=id).next_back() else {
            return false;
        };
        let Some(idx) = node.find(master, id) else {
            return false;
        };
        if !node.mark_deleted(idx) {
            return false;
        }
        self.length -= 1;
        if node.live == 0 {
            let n = self.nodes.remove(&master).expect("the node");
            self.node_bytes -= n.mem();
        }
        true
    }

    /// XDEL of several IDs (redis `xdelCommand`'s loop): returns how many were deleted and
    /// keeps `first_id` and `max_deleted_entry_id` as Redis does.
    pub fn delete_ids(&mut self, ids: &[StreamId]) -> usize {
        let mut deleted = 0;
        let mut first_entry = false;
        for &id in ids {
            if self.delete(id) {
                if id == self.first_id {
                    first_entry = true;
                }
                if id > self.max_deleted_entry_id {
                    self.max_deleted_entry_id = id;
                }
                deleted += 1;
            }
        }
        if deleted > 0 {
            if self.length == 0 {
                self.first_id = StreamId::MIN;
            } else if first_entry {
                self.first_id = self.first_valid_id();
            }
        }
        deleted
    }

    /// redis `streamTrim`: removes entries from the head; `approx` removes whole nodes only;
    /// `limit` (0 = none) caps the entries removed. Returns how many were removed.
    pub fn trim(&mut self, strategy: Trim, approx: bool, limit: u64) -> u64 {
        if strategy == Trim::None {
            return 0;
        }
        let mut deleted: u64 = 0;
        while let Some((&master, node)) = self.nodes.first_key_value() {
            if let Trim::MaxLen(maxlen) = strategy
                && self.length <= maxlen
            {
                break;
            }
            let entries = u64::from(node.live);
            if limit != 0 && deleted + entries > limit {
                break;
            }
            let remove_node = match strategy {
                Trim::MaxLen(maxlen) => self.length - entries >= maxlen,
                Trim::MinId(min) => {
                    // The node's last entry ID (deleted or not).
                    let (last, _, _) = node.head(master, node.total() - 1);
                    last < min
                }
                Trim::None => false,
            };
            if remove_node {
                let n = self.nodes.remove(&master).expect("the node");
                self.node_bytes -= n.mem();
                self.length -= entries;
                deleted += entries;
                continue;
            }
            if approx {
                break;
            }
            // Mark entries deleted inside this node, then stop.
            let mut length = self.length;
            let node = self.nodes.get_mut(&master).expect("the node");
            let mut from_node = 0;
            for i in 0..node.total() {
                let stop = match strategy {
                    Trim::MaxLen(maxlen) => length <= maxlen,
                    Trim::MinId(min) => node.head(master, i).0 >= min,
                    Trim::None => true,
                };
                if stop {
                    break;
                }
                if node.mark_deleted(i) {
                    from_node += 1;
                    length -= 1;
                }
            }
            self.length = length;
            deleted += from_node;
            // A node is never emptied here (Redis keeps it; we drop it when nothing is live).
            if node.live == 0 {
                let n = self.nodes.remove(&master).expect("the node");
                self.node_bytes -= n.mem();
            }
            break;
        }
        if self.length == 0 {
            self.first_id = StreamId::MIN;
        } else if deleted > 0 {
            self.first_id = self.first_valid_id();
        }
        deleted
    }

    /// Whether the range `start..=end` may contain a tombstone (redis
    /// `streamRangeHasTombstones`).
    pub fn range_has_tombstones(&self, start: Option<StreamId>, end: Option<StreamId>) -> bool {
        if self.length == 0 || self.max_deleted_entry_id.is_zero() {
            return false;
        }
        if self.first_id > self.max_deleted_entry_id {
            return false;
        }
        let s = start.unwrap_or(StreamId::MIN);
        let e = end.unwrap_or(StreamId::MAX);
        s <= self.max_deleted_entry_id && self.max_deleted_entry_id <= e
    }

    /// redis `streamEstimateDistanceFromFirstEverEntry`; `None` = not obtainable.
    pub fn estimate_distance(&self, id: StreamId) -> Option<u64> {
        if self.entries_added == 0 {
            return Some(0);
        }
        if self.length == 0 && id <= self.last_id {
            return Some(self.entries_added);
        }
        match id.cmp(&self.last_id) {
            std::cmp::Ordering::Equal => return Some(self.entries_added),
            std::cmp::Ordering::Greater => return None,
            std::cmp::Ordering::Less => {}
        }
        if self.max_deleted_entry_id.is_zero() || self.max_deleted_entry_id < self.first_id {
            match id.cmp(&self.first_id) {
                std::cmp::Ordering::Less => return Some(self.entries_added - self.length),
                std::cmp::Ordering::Equal => {
                    return Some(self.entries_added - self.length + 1);
                }
                std::cmp::Ordering::Greater => {}
            }
        }
        None
    }

    /// A group's lag (redis `streamReplyWithCGLag`): `None` = unknown (null reply).
    pub fn group_lag(&self, g: &Group) -> Option<i64> {
        if self.entries_added == 0 {
            return Some(0);
        }
        if g.entries_read != group::INVALID_ENTRIES_READ
            && !self.range_has_tombstones(Some(g.last_id), None)
        {
            return Some(self.entries_added as i64 - g.entries_read);
        }
        self.estimate_distance(g.last_id)
            .map(|read| self.entries_added as i64 - read as i64)
    }

    /// Runs `f` on group `name`, keeping the group byte count. `None` if there is no such
    /// group.
    pub fn group_mut<R>(&mut self, name: &[u8], f: impl FnOnce(&mut Group) -> R) -> Option<R> {
        let g = self.groups.get_mut(name)?;
        let before = g.mem();
        let r = f(g);
        let after = g.mem();
        self.group_bytes = self.group_bytes + after - before;
        Some(r)
    }

    /// Creates group `name`; false if it exists.
    pub fn create_group(&mut self, name: &[u8], last_id: StreamId, entries_read: i64) -> bool {
        if self.groups.contains_key(name) {
            return false;
        }
        let g = Group::new(last_id, entries_read);
        self.group_bytes += g.mem() + name.len() + group::GROUP_OVERHEAD;
        self.groups.insert(name.into(), g);
        true
    }

    /// Destroys group `name`; false if there is none.
    pub fn destroy_group(&mut self, name: &[u8]) -> bool {
        match self.groups.remove(name) {
            Some(g) => {
                self.group_bytes -= g.mem() + name.len() + group::GROUP_OVERHEAD;
                true
            }
            None => false,
        }
    }

    /// Rebuilds the node layout with `limits` (snapshot load), keeping every entry.
    pub fn entries(&self) -> impl Iterator<Item = EntryRef<'_>> {
        self.range(StreamId::MIN, StreamId::MAX, Dir::Forward)
    }

    /// The nodes by master ID (DUMP writes one Redis listpack per node, `crate::dump`).
    pub fn nodes(&self) -> impl Iterator<Item = (StreamId, &Node)> {
        self.nodes.iter().map(|(id, n)| (*id, n))
    }

    /// Checks the invariants (tests).
    #[cfg(test)]
    pub fn check(&self) {
        let mut live = 0u64;
        let mut bytes = 0;
        for n in self.nodes.values() {
            assert!(n.live > 0, "no empty node");
            assert_eq!(n.live as usize + n.deleted as usize, n.total());
            live += u64::from(n.live);
            bytes += n.mem();
        }
        assert_eq!(live, self.length);
        assert_eq!(bytes, self.node_bytes);
        let gb: usize = self
            .groups
            .iter()
            .map(|(k, g)| g.mem() + k.len() + group::GROUP_OVERHEAD)
            .sum();
        assert_eq!(gb, self.group_bytes);
        let ids: Vec<StreamId> = self.entries().map(|e| e.id).collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(ids.len() as u64, self.length);
        if let Some(f) = ids.first() {
            assert_eq!(*f, self.first_id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(ms: u64, seq: u64) -> StreamId {
        StreamId::new(ms, seq)
    }

    fn add(s: &mut StreamValue, i: StreamId, pairs: &[&[u8]], lim: NodeLimits) {
        s.append(pairs, i, true, lim).unwrap();
    }

    #[test]
    fn id_parsing() {
        assert_eq!(parse_id(b"1-2", 0, IdMode::Loose), Ok((id(1, 2), true)));
        assert_eq!(parse_id(b"5", 9, IdMode::Loose), Ok((id(5, 9), true)));
        assert_eq!(parse_id(b"-", 0, IdMode::Loose), Ok((StreamId::MIN, true)));
        assert_eq!(parse_id(b"+", 0, IdMode::Loose), Ok((StreamId::MAX, true)));
        assert_eq!(parse_id(b"+", 0, IdMode::Strict), Err(INVALID_ID));
        assert_eq!(
            parse_id(b"7-*", 0, IdMode::StrictSeqStar),
            Ok((id(7, 0), false))
        );
        assert_eq!(parse_id(b"7-*", 0, IdMode::Strict), Err(INVALID_ID));
        assert_eq!(parse_id(b"1-x", 0, IdMode::Loose), Err(INVALID_ID));
        assert_eq!(parse_id(b"-1", 0, IdMode::Loose), Err(INVALID_ID));
        assert_eq!(
            parse_id(b"18446744073709551616", 0, IdMode::Loose),
            Err(INVALID_ID)
        );
        assert_eq!(parse_interval_id(b"(1-1", 0), Ok((id(1, 1), true)));
        assert_eq!(parse_interval_id(b"(", 0), Err(INVALID_ID));
    }

    #[test]
    fn lp_sizes_match_listpack() {
        assert_eq!(lp_int_len(0), 2);
        assert_eq!(lp_int_len(127), 2);
        assert_eq!(lp_int_len(128), 3);
        assert_eq!(lp_int_len(-1), 3);
        assert_eq!(lp_int_len(40000), 5);
        assert_eq!(lp_int_len(i64::MAX), 10);
        assert_eq!(lp_str_len(b"field"), 7);
        assert_eq!(lp_str_len(b"12"), 2);
        assert_eq!(lp_str_len(&[b'a'; 100]), 103);
    }

    #[test]
    fn append_range_delete_trim() {
        let lim = NodeLimits {
            max_entries: 3,
            max_bytes: 4096,
        };
        let mut s = StreamValue::new();
        for i in 1..=10 {
            let v = i.to_string();
            if i % 4 == 0 {
                add(&mut s, id(i, 0), &[b"other", v.as_bytes()], lim);
            } else {
                add(&mut s, id(i, 0), &[b"f", v.as_bytes(), b"g", b"x"], lim);
            }
        }
        s.check();
        assert_eq!(s.node_count(), 4);
        let got: Vec<u64> = s
            .range(id(2, 0), id(8, 0), Dir::Forward)
            .map(|e| e.id.ms)
            .collect();
        assert_eq!(got, [2, 3, 4, 5, 6, 7, 8]);
        let rev: Vec<u64> = s
            .range(id(2, 5), id(8, 0), Dir::Reverse)
            .map(|e| e.id.ms)
            .collect();
        assert_eq!(rev, [8, 7, 6, 5, 4, 3]);
        let e = s.get(id(4, 0)).unwrap();
        assert_eq!(e.fields().collect::<Vec<_>>(), [(&b"other"[..], &b"4"[..])]);
        let e = s.get(id(5, 0)).unwrap();
        assert_eq!(e.num_fields(), 2);
        assert_eq!(s.delete_ids(&[id(1, 0), id(5, 0), id(99, 0)]), 2);
        assert_eq!(s.first_id, id(2, 0));
        assert_eq!(s.max_deleted_entry_id, id(5, 0));
        assert!(s.get(id(5, 0)).is_none());
        s.check();
        // Exact MAXLEN: leaves 5.
        assert_eq!(s.trim(Trim::MaxLen(5), false, 0), 3);
        assert_eq!(s.len(), 5);
        s.check();
        // Approximate: whole nodes only.
        let before = s.len();
        let n = s.trim(Trim::MaxLen(1), true, 0);
        assert_eq!(s.len(), before - n);
        s.check();
        assert_eq!(s.last_valid_id(), id(10, 0));
    }

    #[test]
    fn auto_seq() {
        let mut s = StreamValue::new();
        let lim = NodeLimits::default();
        add(&mut s, id(5, 3), &[b"a", b"b"], lim);
        assert_eq!(s.append(&[b"a", b"b"], id(5, 0), false, lim), Ok(id(5, 4)));
        assert_eq!(
            s.append(&[b"a", b"b"], id(4, 0), false, lim),
            Err(AppendError::NotGreater)
        );
    }
}
