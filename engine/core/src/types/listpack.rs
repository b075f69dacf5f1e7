//! A compact sequence of byte strings in one contiguous buffer, in the spirit of Redis's
//! listpack (`listpack.c`): the representation of a small hash (and later of small sets and
//! sorted sets) while it is under the `*-max-listpack-*` limits.
//!
//! Each entry is a LEB128 varint length followed by the bytes, back to back; nothing else. A
//! 10-field hash of short strings costs ~2 bytes of header per string instead of a heap box per
//! string plus a hash-table slot. Redis's listpack also stores integers packed and a back-length
//! for reverse walks; we need neither yet (hashes walk forward only, and the RDB/DUMP encoder
//! writes the real listpack format itself).
//!
//! Lookups are linear scans, as in Redis, which is why the owners convert to a hash table past
//! a small size. Positions are byte offsets into the buffer, valid until the next change.
//! The buffer is grown with `reserve_exact` and trimmed after deletions (Redis reallocates a
//! listpack to its exact size on every change), so a small value does not carry the spare half
//! of a doubling `Vec`.

/// The entries, in order, and their count.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Listpack {
    buf: Vec<u8>,
    len: usize,
}

/// Bytes of the LEB128 varint for `n`.
fn varint_len(mut n: usize) -> usize {
    let mut k = 1;
    while n >= 0x80 {
        n >>= 7;
        k += 1;
    }
    k
}

/// The LEB128 varint for `n` in a stack buffer: `(bytes, length)` (also the sorted sets'
/// listpack's, `zset/listpack.rs`).
pub(crate) fn varint(mut n: u64) -> ([u8; 10], usize) {
    let (mut out, mut k) = ([0u8; 10], 0);
    while n >= 0x80 {
        out[k] = (n as u8 & 0x7f) | 0x80;
        n >>= 7;
        k += 1;
    }
    out[k] = n as u8;
    (out, k + 1)
}

fn put_varint(out: &mut Vec<u8>, n: usize) {
    let (bytes, k) = varint(n as u64);
    out.extend_from_slice(&bytes[..k]);
}

/// The varint at `p` in `buf` and the offset after it. `p` must start a varint this module
/// wrote (a bad offset is a bug and panics).
pub(crate) fn get_varint(buf: &[u8], mut p: usize) -> (u64, usize) {
    let mut n = 0u64;
    let mut shift = 0;
    loop {
        let b = buf[p];
        p += 1;
        n |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return (n, p);
        }
        shift += 7;
    }
}

/// Gives back a buffer's spare capacity once it is a noticeable share of it (not on every
/// deletion: a shrinking realloc per HDEL or ZREM would copy for little gain).
pub(crate) fn trim_spare(buf: &mut Vec<u8>) {
    if buf.capacity() - buf.len() > buf.len() / 8 + 16 {
        buf.shrink_to_fit();
    }
}

impl Listpack {
    pub const fn new() -> Listpack {
        Listpack {
            buf: Vec::new(),
            len: 0,
        }
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes of the encoded entries (headers included): what the value costs, for memory
    /// accounting. O(1).
    pub fn byte_len(&self) -> usize {
        self.buf.len()
    }

    /// The entry starting at byte offset `off` and the offset of the next one. `off` must be
    /// an entry start below [`byte_len`](Self::byte_len) (the buffer is only ever written by
    /// this type, so a bad offset is a bug and panics).
    pub fn entry_at(&self, off: usize) -> (&[u8], usize) {
        let (n, p) = get_varint(&self.buf, off);
        let n = n as usize;
        (&self.buf[p..p + n], p + n)
    }

    /// The entries in order.
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            lp: self,
            off: 0,
            left: self.len,
        }
    }

    /// Appends `entry`.
    pub fn push(&mut self, entry: &[u8]) {
        self.extend(&[entry]);
    }

    /// Appends `entries` with one exact reservation (a hash field and its value: one realloc).
    pub fn extend(&mut self, entries: &[&[u8]]) {
        let more: usize = entries.iter().map(|e| varint_len(e.len()) + e.len()).sum();
        self.buf.reserve_exact(more);
        for e in entries {
            put_varint(&mut self.buf, e.len());
            self.buf.extend_from_slice(e);
        }
        self.len += entries.len();
    }

    /// Replaces the entry at `off` by `entry` (same position).
    pub fn replace(&mut self, off: usize, entry: &[u8]) {
        let (old, end) = self.entry_at(off);
        if old.len() == entry.len() {
            // Same length, same header: overwrite in place.
            self.buf[end - entry.len()..end].copy_from_slice(entry);
            return;
        }
        // The new header and bytes go straight into the buffer (no temporary per update).
        let (head, k) = varint(entry.len() as u64);
        let grow = (k + entry.len()).saturating_sub(end - off);
        self.buf.reserve_exact(grow);
        self.buf
            .splice(off..end, head[..k].iter().chain(entry).copied());
        self.trim();
    }

    /// Removes `n` consecutive entries starting at `off`; later entries move down (closing the
    /// gap keeps the order, like `lpDelete`).
    pub fn remove(&mut self, off: usize, n: usize) {
        let mut end = off;
        for _ in 0..n {
            end = self.entry_at(end).1;
        }
        self.buf.drain(off..end);
        self.len -= n;
        self.trim();
    }

    /// See [`trim_spare`].
    fn trim(&mut self) {
        trim_spare(&mut self.buf);
    }
}

/// Iterator over a [`Listpack`]'s entries.
#[derive(Clone)]
pub struct Iter<'a> {
    lp: &'a Listpack,
    off: usize,
    left: usize,
}

impl<'a> Iter<'a> {
    /// Byte offset of the entry `next` will return (for [`Listpack::replace`]/`remove`).
    pub fn offset(&self) -> usize {
        self.off
    }
}

impl<'a> Iterator for Iter<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.left == 0 {
            return None;
        }
        let (e, next) = self.lp.entry_at(self.off);
        self.off = next;
        self.left -= 1;
        Some(e)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for Iter<'_> {}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(lp: &Listpack) -> Vec<Vec<u8>> {
        lp.iter().map(<[u8]>::to_vec).collect()
    }

    #[test]
    fn push_replace_remove_keep_order_and_size() {
        let mut lp = Listpack::new();
        let long = vec![b'x'; 300]; // two-byte header
        for e in [&b"a"[..], b"", &long, b"dd"] {
            lp.push(e);
        }
        assert_eq!(lp.len(), 4);
        assert_eq!(lp.byte_len(), 2 + 1 + 302 + 3);
        assert_eq!(
            entries(&lp),
            [b"a".to_vec(), vec![], long.clone(), b"dd".to_vec()]
        );

        // Replace with a longer, a shorter and a same-size entry.
        let mut it = lp.iter();
        it.next();
        let off1 = it.offset();
        lp.replace(off1, b"bbbb");
        assert_eq!(entries(&lp)[1], b"bbbb");
        lp.replace(0, b"z");
        let (_, off2) = lp.entry_at(lp.entry_at(0).1);
        lp.replace(off2, b"y");
        assert_eq!(entries(&lp), [&b"z"[..], b"bbbb", b"y", b"dd"]);
        assert_eq!(lp.byte_len(), 2 + 5 + 2 + 3);

        // Remove two from the middle: the rest closes the gap.
        let off1 = lp.entry_at(0).1;
        lp.remove(off1, 2);
        assert_eq!(entries(&lp), [&b"z"[..], b"dd"]);
        assert_eq!(lp.len(), 2);
        assert_eq!(lp.byte_len(), 2 + 3);
        lp.remove(0, 2);
        assert!(lp.is_empty());
        assert_eq!(lp.byte_len(), 0);
    }

    #[test]
    fn varints_round_trip() {
        for n in [0usize, 1, 127, 128, 16383, 16384, 1 << 21, 70000] {
            let mut lp = Listpack::new();
            let e = vec![7u8; n];
            lp.push(&e);
            lp.push(b"after");
            assert_eq!(lp.byte_len(), varint_len(n) + n + 6);
            assert_eq!(lp.entry_at(0).0.len(), n);
            assert_eq!(lp.iter().nth(1), Some(&b"after"[..]));
        }
    }

    #[test]
    fn capacity_stays_close_to_length() {
        let mut lp = Listpack::new();
        for i in 0..200 {
            lp.push(format!("entry{i}").as_bytes());
        }
        while lp.len() > 10 {
            lp.remove(0, 1);
        }
        assert!(lp.buf.capacity() <= lp.byte_len() + lp.byte_len() / 8 + 16);
    }
}
