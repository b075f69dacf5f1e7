//! The listpack form of a small sorted set (redis `zzl*` functions in `t_zset.c`): member,
//! score pairs in one contiguous buffer, sorted by (score, member bytes) as `zzlInsert` keeps
//! them. Lookups by member are linear scans, as in Redis, which is why a zset converts to the
//! table + skiplist past `zset-max-listpack-entries` (128) members or a member longer than
//! `zset-max-listpack-value` (64) bytes.
//!
//! # Layout
//! Each pair is `[member length: LEB128 varint][member bytes][score]`, back to back. The score
//! is written in the shortest of two forms, told apart by the low bit of its first byte:
//! - an integral score of magnitude below 2^53 (every integer a double holds exactly, which is
//!   what most applications store: timestamps, counters, ranks) is a varint of
//!   `zigzag(score) << 1` (1 byte within ±31, 2 within ±4,095, 3 within ±2^19, at most 8);
//! - any other score is the byte `0x01` and the 8 bytes of the `f64`, little endian.
//!
//! Both forms are exact (Redis's listpack stores `d2string` text, which is exact too, 17
//! significant digits), except that `-0` reads back as `0`, as Redis's `"0"` text does (the
//! owner normalises it before inserting anyway). A pair of an 8-byte member with a score below
//! 524,288 costs 12 bytes; Redis's listpack spends ~14–15 on the same pair (an entry header
//! and a back-length per entry, integers from 2 to 9 bytes), plus its own 7-byte header.
//!
//! Positions are byte offsets of pairs, valid until the next change. There are no
//! back-lengths: a reverse walk collects the offsets it needs first (≤ 128 by default). The
//! buffer is grown with `reserve_exact` and trimmed after deletions, as `types::listpack` does.

use crate::types::listpack::{get_varint, trim_spare, varint};

/// The pairs, in (score, member) order, and their count.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ZListpack {
    buf: Vec<u8>,
    len: u32,
}

/// Integral scores below this magnitude use the varint form.
const INT_LIMIT: f64 = 9_007_199_254_740_992.0; // 2^53

/// `score` in the shortest form (see the module doc), in a stack buffer: `(bytes, length)`.
fn score_bytes(score: f64) -> ([u8; 10], usize) {
    if score.fract() == 0.0 && score.abs() < INT_LIMIT {
        let i = score as i64;
        let zigzag = ((i << 1) ^ (i >> 63)) as u64;
        varint(zigzag << 1)
    } else {
        let mut out = [0u8; 10];
        out[0] = 1;
        out[1..9].copy_from_slice(&score.to_bits().to_le_bytes());
        (out, 9)
    }
}

/// The score at `p` and the offset after it.
fn get_score(buf: &[u8], p: usize) -> (f64, usize) {
    if buf[p] == 1 {
        let bytes: [u8; 8] = buf[p + 1..p + 9].try_into().expect("8 score bytes");
        return (f64::from_bits(u64::from_le_bytes(bytes)), p + 9);
    }
    let (v, next) = get_varint(buf, p);
    let zigzag = v >> 1;
    let i = (zigzag >> 1) as i64 ^ -((zigzag & 1) as i64);
    (i as f64, next)
}

/// The offset after the score at `p`.
fn skip_score(buf: &[u8], p: usize) -> usize {
    if buf[p] == 1 {
        return p + 9;
    }
    let mut q = p;
    while buf[q] >= 0x80 {
        q += 1;
    }
    q + 1
}

/// Whether `(s1, m1)` sorts before `(s2, m2)` (redis `zzlInsert`'s order).
fn before(s1: f64, m1: &[u8], s2: f64, m2: &[u8]) -> bool {
    s1 < s2 || (s1 == s2 && m1 < m2)
}

impl ZListpack {
    pub const fn new() -> ZListpack {
        ZListpack {
            buf: Vec::new(),
            len: 0,
        }
    }

    /// Number of pairs.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes of the encoded pairs: what the zset costs, for memory accounting. O(1).
    pub fn byte_len(&self) -> usize {
        self.buf.len()
    }

    /// The pair at byte offset `off` and the offset of the next one. `off` must be a pair
    /// start below [`byte_len`](Self::byte_len) (only this type writes the buffer, so a bad
    /// offset is a bug and panics).
    pub fn entry(&self, off: usize) -> (&[u8], f64, usize) {
        let (n, p) = get_varint(&self.buf, off);
        let end = p + n as usize;
        let (score, next) = get_score(&self.buf, end);
        (&self.buf[p..end], score, next)
    }

    /// The pairs in order, with their offsets.
    pub fn iter(&self) -> Iter<'_> {
        Iter { lp: self, off: 0 }
    }

    /// Offset and score of `member` (a linear scan, as redis `zzlFind`). The scores of the
    /// pairs passed over are skipped, not decoded: ZSCORE, ZADD and ZREM of a member that is
    /// not there read every pair.
    pub fn find(&self, member: &[u8]) -> Option<(usize, f64)> {
        let buf = &self.buf[..];
        let mut off = 0;
        while off < buf.len() {
            let (n, p) = get_varint(buf, off);
            let end = p + n as usize;
            // The last byte first: members of one zset often share a prefix (`user:…`), and
            // a mismatch there spares the call to memcmp.
            if n as usize == member.len()
                && (n == 0 || buf[end - 1] == member[member.len() - 1])
                && &buf[p..end] == member
            {
                return Some((off, get_score(buf, end).0));
            }
            off = skip_score(buf, end);
        }
        None
    }

    /// Offset of the pair at 0-based rank `r` (`r < len`).
    pub fn offset_of(&self, r: usize) -> usize {
        self.iter().nth(r).expect("rank in range").0
    }

    /// Inserts a pair whose member is not present, at its place in the order (redis
    /// `zzlInsert`): before the first pair that sorts after it.
    pub fn insert(&mut self, member: &[u8], score: f64) {
        let at = self
            .iter()
            .find(|&(_, m, s)| before(score, member, s, m))
            .map_or(self.buf.len(), |(off, _, _)| off);
        // Header, member and score go straight into the buffer (no temporary per insert).
        let (head, hn) = varint(member.len() as u64);
        let (sc, sn) = score_bytes(score);
        self.buf.reserve_exact(hn + member.len() + sn);
        self.buf.splice(
            at..at,
            head[..hn].iter().chain(member).chain(&sc[..sn]).copied(),
        );
        self.len += 1;
    }

    /// Appends a pair that sorts after every pair present (building from an ordered source).
    pub fn push(&mut self, member: &[u8], score: f64) {
        let (head, hn) = varint(member.len() as u64);
        let (sc, sn) = score_bytes(score);
        self.buf.extend_from_slice(&head[..hn]);
        self.buf.extend_from_slice(member);
        self.buf.extend_from_slice(&sc[..sn]);
        self.len += 1;
    }

    /// Gives the spare capacity of a built listpack back.
    pub fn shrink(&mut self) {
        self.buf.shrink_to_fit();
    }

    /// Removes `n` consecutive pairs starting at offset `off`; later pairs move down.
    pub fn remove(&mut self, off: usize, n: usize) {
        let mut end = off;
        for _ in 0..n {
            end = self.entry(end).2;
        }
        self.buf.drain(off..end);
        self.len -= n as u32;
        trim_spare(&mut self.buf);
    }
}

/// Iterator over a [`ZListpack`]'s pairs: `(offset, member, score)`.
#[derive(Clone)]
pub struct Iter<'a> {
    lp: &'a ZListpack,
    off: usize,
}

impl<'a> Iterator for Iter<'a> {
    type Item = (usize, &'a [u8], f64);

    fn next(&mut self) -> Option<Self::Item> {
        if self.off >= self.lp.buf.len() {
            return None;
        }
        let off = self.off;
        let (m, s, next) = self.lp.entry(off);
        self.off = next;
        Some((off, m, s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_round_trip_in_the_short_forms() {
        let cases = [
            (0.0, 1),
            (1.0, 1),
            (-1.0, 1),
            (31.0, 1),
            (-32.0, 1),
            (63.0, 2),
            (-4096.0, 2),
            (4096.0, 3),
            (524_287.0, 3),
            (1e15, 8),
            (-(INT_LIMIT - 1.0), 8),
            (INT_LIMIT, 9),
            (0.5, 9),
            (-1.25e300, 9),
            (f64::INFINITY, 9),
            (f64::NEG_INFINITY, 9),
            (f64::MIN_POSITIVE, 9),
        ];
        for (s, n) in cases {
            let (b, len) = score_bytes(s);
            assert_eq!(len, n, "{s}");
            assert_eq!(get_score(&b, 0), (s, n), "{s}");
        }
        let (b, _) = score_bytes(-0.0);
        assert!(get_score(&b, 0).0.is_sign_positive());
    }

    #[test]
    fn insert_keeps_score_then_member_order() {
        let mut lp = ZListpack::new();
        for (m, s) in [("b", 2.0), ("a", 2.0), ("z", -1.5), ("c", 10.0), ("", 2.0)] {
            lp.insert(m.as_bytes(), s);
        }
        let got: Vec<(&[u8], f64)> = lp.iter().map(|(_, m, s)| (m, s)).collect();
        assert_eq!(
            got,
            [
                (&b"z"[..], -1.5),
                (b"", 2.0),
                (b"a", 2.0),
                (b"b", 2.0),
                (b"c", 10.0)
            ]
        );
        assert_eq!(lp.len(), 5);
        let (off, s) = lp.find(b"a").unwrap();
        assert_eq!(s, 2.0);
        lp.remove(off, 2);
        assert_eq!(lp.len(), 3);
        assert!(lp.find(b"b").is_none());
        assert_eq!(lp.entry(lp.offset_of(2)).0, b"c");
        lp.remove(0, 3);
        assert!(lp.is_empty());
        assert_eq!(lp.byte_len(), 0);
    }
}
