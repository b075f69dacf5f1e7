//! The storage of a list (redis 7.0 `quicklist.c`): a deque of *nodes*, each one contiguous
//! byte buffer of entries, bounded by `list-max-listpack-size`.
//!
//! # Layout
//! An entry is `len` as a LEB128 varint, the bytes, then a *back-length*: the size of the
//! varint and the bytes, written so it reads from its last byte leftwards (7 bits a byte, the
//! high bit set on every byte but the leftmost one; redis `lpEncodeBacklen` in spirit). So a
//! node walks from both ends, like a listpack: an 8-byte element costs 10 bytes.
//!
//! A node keeps its entries in `buf[start..]`: a head pop only moves `start`, and a head push
//! writes into that free room (the buffer is regrown with room in front when it runs out), so
//! push and pop are O(1) amortized at both ends, as `VecDeque` was. A buffer grows by doubling,
//! capped at the node's byte limit, so a full 8 KB node sits in one 8 KB allocation.
//!
//! # Node limits (redis `_quicklistNodeAllowInsert`)
//! `fill` = `list-max-listpack-size`, read when the list is created (as redis
//! `createQuicklistObject` does) and clamped to `-5..=32767` (redis `quicklistSetFill`):
//! negative → at most 4/8/16/32/64 KB of entries a node (-1…-5); positive → at most `fill`
//! entries and 8 KB; 0 → one entry a node. An element too large for any node gets a node of
//! its own (the first entry of a node is always accepted).
//!
//! Index access walks node counts from the nearer end (O(nodes)), then entries inside one node;
//! LINSERT and LSET edit a node in place and re-pack it into several when it outgrows the limit
//! (then merge it with a neighbour that has room: redis `_quicklistMergeNodes`); LREM compacts
//! each node in place and merges neighbours that fit together.
//!
//! # Memory
//! [`ListValue::mem_size`] is the entries' bytes plus [`NODE_OVERHEAD`] a node, both kept as
//! running counts (O(1)). `list-compress-depth` is accepted but nodes are never compressed
//! (see `Config::list_compress_depth`).
//!
//! OBJECT ENCODING answers `quicklist`, as Redis 7.0.15 does for every list.

use std::collections::VecDeque;

/// Bytes accounted per node beyond its entries: the node in the deque (40) and the allocator's
/// share of its buffer.
pub const NODE_OVERHEAD: usize = 48;

/// quicklist `optimization_level`: the byte limit of a node for fill -1…-5.
const OPTIMIZATION_LEVEL: [usize; 5] = [4096, 8192, 16384, 32768, 65536];
/// quicklist `SIZE_SAFETY_LIMIT`: the byte limit of a count-limited node.
const SIZE_SAFETY_LIMIT: usize = 8192;
/// quicklist `FILL_MAX`.
const FILL_MAX: i64 = (1 << 15) - 1;
/// Redis's default `list-max-listpack-size`.
pub const DEFAULT_FILL: i64 = -2;

/// An end of a list (redis `LIST_HEAD` / `LIST_TAIL`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// LEFT: index 0.
    Head,
    /// RIGHT: index len-1.
    Tail,
}

// ---------------------------------------------------------------------------------------------
// Entries
// ---------------------------------------------------------------------------------------------

fn varint_len(mut n: usize) -> usize {
    let mut k = 1;
    while n >= 0x80 {
        n >>= 7;
        k += 1;
    }
    k
}

/// The encoded size of an entry holding `n` bytes.
fn entry_size(n: usize) -> usize {
    let h = varint_len(n) + n;
    h + varint_len(h)
}

/// Writes the entry of `e` (exactly `entry_size(e.len())` bytes) into `out`.
fn write_entry(out: &mut [u8], e: &[u8]) {
    let mut i = 0;
    let mut n = e.len();
    while n >= 0x80 {
        out[i] = (n as u8 & 0x7f) | 0x80;
        n >>= 7;
        i += 1;
    }
    out[i] = n as u8;
    i += 1;
    out[i..i + e.len()].copy_from_slice(e);
    i += e.len();
    // The back-length, least significant group last (read right to left).
    let back = i;
    let k = varint_len(back);
    for j in 0..k {
        let group = ((back >> (7 * (k - 1 - j))) & 0x7f) as u8;
        out[i + j] = if j == 0 { group } else { group | 0x80 };
    }
}

/// Appends the entry of `e` to `buf`.
fn append_entry(buf: &mut Vec<u8>, e: &[u8]) {
    if e.len() < 127 {
        // The common case: a one-byte length and a one-byte back-length (1 + len).
        buf.push(e.len() as u8);
        buf.extend_from_slice(e);
        buf.push(e.len() as u8 + 1);
    } else {
        let len = buf.len();
        buf.resize(len + entry_size(e.len()), 0);
        write_entry(&mut buf[len..], e);
    }
}

/// The entry starting at `off`: `(data start, data end, next entry's offset)`.
#[inline]
fn entry_at(buf: &[u8], off: usize) -> (usize, usize, usize) {
    let b = buf[off];
    if b < 0x80 {
        // A one-byte length: the back-length (1 + n ≤ 128) takes two bytes only for 128.
        let (a, n) = (off + 1, usize::from(b));
        return (a, a + n, a + n + 1 + usize::from(n == 127));
    }
    let (mut n, mut shift, mut i) = (0usize, 0, off);
    loop {
        let b = buf[i];
        n |= usize::from(b & 0x7f) << shift;
        i += 1;
        if b & 0x80 == 0 {
            break;
        }
        shift += 7;
    }
    let h = i - off + n;
    (i, i + n, off + h + varint_len(h))
}

/// The start offset of the entry ending at `end`.
#[inline]
fn entry_before(buf: &[u8], end: usize) -> usize {
    let b = buf[end - 1];
    if b < 0x80 {
        return end - 1 - usize::from(b);
    }
    let (mut v, mut shift, mut i) = (0usize, 0, end);
    loop {
        i -= 1;
        let b = buf[i];
        v |= usize::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            break;
        }
        shift += 7;
    }
    i - v
}

// ---------------------------------------------------------------------------------------------
// Nodes
// ---------------------------------------------------------------------------------------------

/// Clamped `list-max-listpack-size` (see the module doc, *Node limits*).
fn clamp_fill(fill: i64) -> i16 {
    fill.clamp(-5, FILL_MAX) as i16
}

/// The byte limit of a node under `fill`.
fn byte_limit(fill: i16) -> usize {
    if fill < 0 {
        OPTIMIZATION_LEVEL[usize::from((-fill - 1) as u16)]
    } else {
        SIZE_SAFETY_LIMIT
    }
}

/// Whether a node of `bytes` in `count` entries is within the limits of `fill`.
fn fits(fill: i16, bytes: usize, count: usize) -> bool {
    bytes <= byte_limit(fill) && (fill < 0 || count <= fill as usize)
}

#[derive(Clone, Debug)]
struct Node {
    /// Entries in `buf[start..]`; `buf[..start]` is room for head pushes.
    buf: Vec<u8>,
    start: usize,
    count: usize,
}

impl Node {
    fn with(e: &[u8]) -> Node {
        let mut buf = Vec::with_capacity(entry_size(e.len()));
        append_entry(&mut buf, e);
        Node {
            buf,
            start: 0,
            count: 1,
        }
    }

    /// Bytes of entries.
    fn bytes(&self) -> usize {
        self.buf.len() - self.start
    }

    /// Whether one more entry of `size` bytes keeps the node within `fill`.
    fn allows(&self, fill: i16, size: usize) -> bool {
        fits(fill, self.bytes() + size, self.count + 1)
    }

    /// Appends an entry of `size` bytes (grows by doubling, up to the node's limit `cap`).
    fn push_tail(&mut self, e: &[u8], size: usize, cap: usize) {
        let len = self.buf.len();
        if self.buf.capacity() - len < size {
            if self.start > 0 && self.start >= self.bytes() {
                // Mostly dead room in front (a queue): reuse it rather than grow.
                self.buf.drain(..self.start);
                self.start = 0;
            }
            let len = self.buf.len();
            if self.buf.capacity() - len < size {
                let want = (len + size).max((2 * self.buf.capacity()).min(cap));
                self.buf.reserve_exact(want - len);
            }
        }
        append_entry(&mut self.buf, e);
        self.count += 1;
    }

    /// Prepends an entry of `size` bytes, into the room in front (regrown as `push_tail`).
    fn push_head(&mut self, e: &[u8], size: usize, cap: usize) {
        if self.start < size {
            let bytes = self.bytes();
            let want = (bytes + size).max((2 * self.buf.capacity()).min(cap));
            let room = want - bytes;
            let mut buf = Vec::with_capacity(want);
            buf.resize(room, 0);
            buf.extend_from_slice(&self.buf[self.start..]);
            self.buf = buf;
            self.start = room;
        }
        self.start -= size;
        write_entry(&mut self.buf[self.start..self.start + size], e);
        self.count += 1;
    }

    /// Removes the first entry: its bytes and its encoded size.
    fn pop_head(&mut self) -> (Vec<u8>, usize) {
        let (a, b, next) = entry_at(&self.buf, self.start);
        let v = self.buf[a..b].to_vec();
        let size = next - self.start;
        self.start = next;
        self.count -= 1;
        (v, size)
    }

    /// Removes the last entry: its bytes and its encoded size.
    fn pop_tail(&mut self) -> (Vec<u8>, usize) {
        let end = self.buf.len();
        let off = entry_before(&self.buf, end);
        let (a, b, _) = entry_at(&self.buf, off);
        let v = self.buf[a..b].to_vec();
        self.buf.truncate(off);
        self.count -= 1;
        (v, end - off)
    }

    /// The offset of the `k`-th entry (`k < count`), walked from the nearer end.
    fn offset_of(&self, k: usize) -> usize {
        if k < self.count / 2 {
            let mut off = self.start;
            for _ in 0..k {
                off = entry_at(&self.buf, off).2;
            }
            off
        } else {
            let mut off = self.buf.len();
            for _ in k..self.count {
                off = entry_before(&self.buf, off);
            }
            off
        }
    }

    /// The entries, head first, as `(offset, data)`.
    fn entries(&self) -> impl Iterator<Item = (usize, &[u8])> {
        let mut off = self.start;
        std::iter::from_fn(move || {
            if off >= self.buf.len() {
                return None;
            }
            let (a, b, next) = entry_at(&self.buf, off);
            let at = off;
            off = next;
            Some((at, &self.buf[a..b]))
        })
    }

    /// Appends the entries of `other` (raw bytes: no re-encoding).
    fn append(&mut self, other: &Node) {
        self.buf.extend_from_slice(&other.buf[other.start..]);
        self.count += other.count;
    }
}

// ---------------------------------------------------------------------------------------------
// The list
// ---------------------------------------------------------------------------------------------

/// A stored list (see the module doc). Keeps its length and byte count, so
/// [`len`](Self::len) and [`mem_size`](Self::mem_size) are O(1).
#[derive(Clone, Debug)]
pub struct ListValue {
    nodes: VecDeque<Node>,
    len: usize,
    /// Σ node bytes (entries only).
    bytes: usize,
    /// Clamped `list-max-listpack-size` at creation.
    fill: i16,
}

impl Default for ListValue {
    fn default() -> Self {
        ListValue::with_fill(DEFAULT_FILL)
    }
}

/// Two lists are equal when their elements are, however their nodes are cut.
impl PartialEq for ListValue {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl Eq for ListValue {}

impl ListValue {
    /// An empty list with Redis's default node size.
    pub fn new() -> ListValue {
        ListValue::default()
    }

    /// An empty list whose nodes follow `list-max-listpack-size` = `fill`.
    pub fn with_fill(fill: i64) -> ListValue {
        ListValue {
            nodes: VecDeque::new(),
            len: 0,
            bytes: 0,
            fill: clamp_fill(fill),
        }
    }

    /// Payload bytes this value accounts for in `used_memory`, kept incrementally (O(1)).
    pub fn mem_size(&self) -> usize {
        self.bytes + self.nodes.len() * NODE_OVERHEAD
    }

    /// OBJECT ENCODING (see the module doc).
    pub fn encoding(&self) -> &'static str {
        "quicklist"
    }

    /// Number of nodes (lazy-free effort, tests).
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// LLEN.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The elements, head first.
    pub fn iter(&self) -> Iter<'_> {
        match self.nodes.back() {
            None => Iter {
                list: self,
                front: (0, 0),
                back: Some((0, 0)),
                last: 0,
                left: 0,
            },
            Some(last) => Iter {
                list: self,
                front: (0, self.nodes[0].start),
                back: Some((self.nodes.len() - 1, last.buf.len())),
                last: self.len - 1,
                left: self.len,
            },
        }
    }

    /// Adds `elem` at `end`.
    pub fn push(&mut self, elem: &[u8], end: End) {
        let size = entry_size(elem.len());
        let (fill, cap) = (self.fill, byte_limit(self.fill));
        match end {
            End::Tail => match self.nodes.back_mut() {
                Some(n) if n.allows(fill, size) => n.push_tail(elem, size, cap),
                _ => self.nodes.push_back(Node::with(elem)),
            },
            End::Head => match self.nodes.front_mut() {
                Some(n) if n.allows(fill, size) => n.push_head(elem, size, cap),
                _ => self.nodes.push_front(Node::with(elem)),
            },
        }
        self.len += 1;
        self.bytes += size;
    }

    /// Removes and returns the element at `end`.
    pub fn pop(&mut self, end: End) -> Option<Vec<u8>> {
        let (v, size, empty) = match end {
            End::Head => {
                let n = self.nodes.front_mut()?;
                let (v, size) = n.pop_head();
                (v, size, n.count == 0)
            }
            End::Tail => {
                let n = self.nodes.back_mut()?;
                let (v, size) = n.pop_tail();
                (v, size, n.count == 0)
            }
        };
        if empty {
            match end {
                End::Head => self.nodes.pop_front(),
                End::Tail => self.nodes.pop_back(),
            };
        }
        self.len -= 1;
        self.bytes -= size;
        Some(v)
    }

    /// The node and entry offset of position `i` (`i < len`), walking node counts from the
    /// nearer end.
    fn locate(&self, i: usize) -> (usize, usize) {
        let (ni, k) = if i < self.len / 2 {
            let (mut ni, mut k) = (0, i);
            while k >= self.nodes[ni].count {
                k -= self.nodes[ni].count;
                ni += 1;
            }
            (ni, k)
        } else {
            let (mut ni, mut k) = (self.nodes.len() - 1, self.len - 1 - i);
            while k >= self.nodes[ni].count {
                k -= self.nodes[ni].count;
                ni -= 1;
            }
            (ni, self.nodes[ni].count - 1 - k)
        };
        (ni, self.nodes[ni].offset_of(k))
    }

    /// A Redis index (negative from the tail) as a position, if in range.
    fn resolve(&self, index: i64) -> Option<usize> {
        let len = self.len as i64;
        let i = if index < 0 { len + index } else { index };
        (0..len).contains(&i).then_some(i as usize)
    }

    /// The element at `index` (negative counts from the tail: -1 is the last), if in range.
    pub fn get(&self, index: i64) -> Option<&[u8]> {
        let (ni, off) = self.locate(self.resolve(index)?);
        let buf = &self.nodes[ni].buf;
        let (a, b, _) = entry_at(buf, off);
        Some(&buf[a..b])
    }

    /// Replaces the element at `index` (negative from the tail); false if out of range.
    pub fn set(&mut self, index: i64, elem: &[u8]) -> bool {
        let Some(i) = self.resolve(index) else {
            return false;
        };
        let (ni, off) = self.locate(i);
        let size = entry_size(elem.len());
        let node = &mut self.nodes[ni];
        let next = entry_at(&node.buf, off).2;
        self.bytes = self.bytes + size - (next - off);
        let mut e = vec![0; size];
        write_entry(&mut e, elem);
        node.buf.splice(off..next, e);
        self.repack(ni);
        true
    }

    /// redis `addListRangeReply` clamping of `[start, end]` (negative from the tail): the
    /// inclusive positions, or `None` for an empty range.
    pub fn clamp_range(&self, start: i64, end: i64) -> Option<(usize, usize)> {
        crate::args::clamp_index_range(start, end, self.len)
    }

    /// The elements at positions `from..=to` (positions from [`clamp_range`](Self::clamp_range)).
    pub fn range(&self, from: usize, to: usize) -> Iter<'_> {
        Iter {
            list: self,
            front: self.locate(from),
            // Located on the first `next_back` (LRANGE only walks forward).
            back: None,
            last: to,
            left: to - from + 1,
        }
    }

    /// LINSERT: puts `elem` before or after the first element equal to `pivot`; the new
    /// length, or `None` when the pivot is absent.
    pub fn insert(&mut self, pivot: &[u8], elem: &[u8], after: bool) -> Option<usize> {
        let (ni, off) = self.nodes.iter().enumerate().find_map(|(ni, n)| {
            n.entries()
                .find(|&(_, x)| x == pivot)
                .map(|(off, _)| (ni, off))
        })?;
        let node = &mut self.nodes[ni];
        let at = if after {
            entry_at(&node.buf, off).2
        } else {
            off
        };
        let size = entry_size(elem.len());
        let mut e = vec![0; size];
        write_entry(&mut e, elem);
        node.buf.splice(at..at, e);
        node.count += 1;
        self.len += 1;
        self.bytes += size;
        self.repack(ni);
        Some(self.len)
    }

    /// After an in-place edit of node `ni`: cuts it into nodes within the limits if it
    /// outgrew them, then merges the result with its neighbours where they fit together.
    fn repack(&mut self, ni: usize) {
        let node = &self.nodes[ni];
        let mut last = ni;
        if !fits(self.fill, node.bytes(), node.count) && node.count > 1 {
            let old = self.nodes.remove(ni).expect("node to repack");
            let mut pieces: Vec<Node> = Vec::new();
            let mut off = old.start;
            while off < old.buf.len() {
                let next = entry_at(&old.buf, off).2;
                let raw = &old.buf[off..next];
                match pieces.last_mut() {
                    Some(p) if p.allows(self.fill, raw.len()) => {
                        p.buf.extend_from_slice(raw);
                        p.count += 1;
                    }
                    _ => pieces.push(Node {
                        buf: raw.to_vec(),
                        start: 0,
                        count: 1,
                    }),
                }
                off = next;
            }
            last = ni + pieces.len() - 1;
            for (k, p) in pieces.into_iter().enumerate() {
                self.nodes.insert(ni + k, p);
            }
        }
        if last + 1 < self.nodes.len() {
            self.try_merge(last);
        }
        if ni > 0 {
            self.try_merge(ni - 1);
        }
    }

    /// Merges node `i + 1` into node `i` if together they fit; true if merged.
    fn try_merge(&mut self, i: usize) -> bool {
        let (a, b) = (&self.nodes[i], &self.nodes[i + 1]);
        if !fits(self.fill, a.bytes() + b.bytes(), a.count + b.count) {
            return false;
        }
        let b = self.nodes.remove(i + 1).expect("node to merge");
        self.nodes[i].append(&b);
        true
    }

    /// LREM: removes up to `|count|` elements equal to `elem`, from the head when `count > 0`,
    /// from the tail when `count < 0`, all when 0. Returns how many were removed.
    pub fn remove(&mut self, count: i64, elem: &[u8]) -> usize {
        let limit = if count == 0 {
            usize::MAX
        } else {
            usize::try_from(count.unsigned_abs()).unwrap_or(usize::MAX)
        };
        // From the tail: keep the first `matches - limit` matches, remove the rest.
        let mut skip = if count < 0 {
            let matches = self.iter().filter(|&x| x == elem).count();
            matches.saturating_sub(limit)
        } else {
            0
        };
        let mut removed = 0;
        let mut freed = 0;
        for node in self.nodes.iter_mut() {
            if removed >= limit {
                break;
            }
            // Compacts the kept entries towards the front of the node's entries.
            let (mut r, mut w) = (node.start, node.start);
            let mut changed = false;
            while r < node.buf.len() {
                let (a, b, next) = entry_at(&node.buf, r);
                let drop = removed < limit
                    && &node.buf[a..b] == elem
                    && if skip > 0 {
                        skip -= 1;
                        false
                    } else {
                        true
                    };
                if drop {
                    removed += 1;
                    freed += next - r;
                    node.count -= 1;
                    changed = true;
                } else {
                    if changed {
                        node.buf.copy_within(r..next, w);
                    }
                    w += next - r;
                }
                r = next;
            }
            node.buf.truncate(w);
        }
        if removed > 0 {
            self.len -= removed;
            self.bytes -= freed;
            self.nodes.retain(|n| n.count > 0);
            let mut i = 0;
            while i + 1 < self.nodes.len() {
                if !self.try_merge(i) {
                    i += 1;
                }
            }
        }
        removed
    }

    /// Removes `ltrim` elements from the head and `rtrim` from the tail (LTRIM, pops with a
    /// count). Counts larger than the list are clamped.
    pub fn trim(&mut self, ltrim: usize, rtrim: usize) {
        let mut rtrim = rtrim.min(self.len);
        self.len -= rtrim;
        while rtrim > 0 {
            let n = self.nodes.back_mut().expect("a node per element");
            if n.count <= rtrim {
                rtrim -= n.count;
                self.bytes -= n.bytes();
                self.nodes.pop_back();
            } else {
                let off = n.offset_of(n.count - rtrim);
                self.bytes -= n.buf.len() - off;
                n.buf.truncate(off);
                n.count -= rtrim;
                rtrim = 0;
            }
        }
        let mut ltrim = ltrim.min(self.len);
        self.len -= ltrim;
        while ltrim > 0 {
            let n = self.nodes.front_mut().expect("a node per element");
            if n.count <= ltrim {
                ltrim -= n.count;
                self.bytes -= n.bytes();
                self.nodes.pop_front();
            } else {
                let off = n.offset_of(ltrim);
                self.bytes -= off - n.start;
                n.start = off;
                n.count -= ltrim;
                ltrim = 0;
            }
        }
    }

    /// Checks the invariants (tests): counts, byte count, limits, no empty node.
    #[cfg(test)]
    pub(crate) fn check(&self) {
        let mut len = 0;
        let mut bytes = 0;
        for n in &self.nodes {
            assert!(n.count > 0, "empty node");
            assert_eq!(n.entries().count(), n.count);
            assert!(
                n.count == 1 || fits(self.fill, n.bytes(), n.count),
                "node over the limit: {} bytes, {} entries, fill {}",
                n.bytes(),
                n.count,
                self.fill
            );
            len += n.count;
            bytes += n.bytes();
        }
        assert_eq!(len, self.len);
        assert_eq!(bytes, self.bytes);
    }
}

impl<'a> FromIterator<&'a [u8]> for ListValue {
    fn from_iter<I: IntoIterator<Item = &'a [u8]>>(iter: I) -> Self {
        let mut l = ListValue::new();
        for x in iter {
            l.push(x, End::Tail);
        }
        l
    }
}

/// Elements of a list or of a range of it, from either end.
pub struct Iter<'a> {
    list: &'a ListValue,
    /// Node and offset of the next entry from the front.
    front: (usize, usize),
    /// Node and end offset of the next entry from the back, once known.
    back: Option<(usize, usize)>,
    /// Position of the next entry from the back (to locate it).
    last: usize,
    left: usize,
}

impl<'a> Iterator for Iter<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.left == 0 {
            return None;
        }
        let nodes = &self.list.nodes;
        let (mut ni, mut off) = self.front;
        while off >= nodes[ni].buf.len() {
            ni += 1;
            off = nodes[ni].start;
        }
        let buf = &nodes[ni].buf;
        let (a, b, next) = entry_at(buf, off);
        self.front = (ni, next);
        self.left -= 1;
        Some(&buf[a..b])
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl DoubleEndedIterator for Iter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        let nodes = &self.list.nodes;
        let (mut ni, mut end) = self.back.unwrap_or_else(|| {
            let (ni, off) = self.list.locate(self.last);
            (ni, entry_at(&nodes[ni].buf, off).2)
        });
        while end <= nodes[ni].start {
            ni -= 1;
            end = nodes[ni].buf.len();
        }
        let buf = &nodes[ni].buf;
        let off = entry_before(buf, end);
        let (a, b, _) = entry_at(buf, off);
        self.back = Some((ni, off));
        self.last = self.last.wrapping_sub(1);
        self.left -= 1;
        Some(&buf[a..b])
    }
}

impl ExactSizeIterator for Iter<'_> {}

#[cfg(test)]
#[path = "quicklist_tests.rs"]
mod tests;
