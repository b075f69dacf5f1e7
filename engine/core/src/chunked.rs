//! A dense vector stored in chunks of [`CHUNK`] elements, for the keyspace's table of slots
//! ([`crate::keytable`]): positions `0..len` as in a `Vec`, but growing never copies what is
//! stored.
//!
//! # Why
//!
//! A `Vec` doubles by allocating twice its capacity and copying everything into it. The
//! keyspace's slots are 48 bytes each: the `SET` that made the 1,048,576th key copied 48 MB
//! and stalled the engine 32 ms (SLOWLOG, 1M keys of 64 bytes); the 2,097,152nd, twice that.
//! A doubled vector also holds up to half its capacity unused. Here a full chunk stays where
//! it is and the next one is allocated at its final size, so growth costs one allocation per
//! [`CHUNK`] elements and at most about two chunks lie unused.
//!
//! # Shape
//!
//! Every chunk but the last holds exactly [`CHUNK`] elements, so position `i` is
//! `chunks[i >> SHIFT][i & MASK]`: one more load than a `Vec` (the chunk's address, from a
//! small table that stays in cache). The first chunk grows as a `Vec` does, so a small table
//! (most databases, a browser replica) allocates no more than a `Vec` would. After a removal,
//! one empty chunk past the last element is kept, so inserts and deletes around a chunk's
//! edge do not allocate and free a chunk each time.

use std::ops::{Index, IndexMut};

/// log2 of [`CHUNK`].
const SHIFT: u32 = 14;
/// Elements per chunk: 16,384 (768 KB of 48-byte slots).
pub const CHUNK: usize = 1 << SHIFT;
const MASK: usize = CHUNK - 1;

/// See the module doc.
#[derive(Clone, Debug)]
pub struct Chunked<T> {
    chunks: Vec<Vec<T>>,
    len: usize,
}

impl<T> Default for Chunked<T> {
    fn default() -> Self {
        Chunked::new()
    }
}

impl<T> Chunked<T> {
    pub const fn new() -> Chunked<T> {
        Chunked {
            chunks: Vec::new(),
            len: 0,
        }
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    pub fn push(&mut self, value: T) {
        let c = self.len >> SHIFT;
        if c == self.chunks.len() {
            // The first chunk grows as a Vec; the others are allocated whole.
            let cap = if c == 0 { 0 } else { CHUNK };
            self.chunks.push(Vec::with_capacity(cap));
        }
        self.chunks[c].push(value);
        self.len += 1;
    }

    pub fn pop(&mut self) -> Option<T> {
        if self.len == 0 {
            return None;
        }
        self.len -= 1;
        let value = self.chunks[self.len >> SHIFT].pop();
        // Keep the chunk the next push goes to and one more.
        self.chunks.truncate((self.len >> SHIFT) + 2);
        value
    }

    /// Removes position `i`; the last element moves into it (as `Vec::swap_remove`).
    pub fn swap_remove(&mut self, i: usize) -> T {
        assert!(i < self.len, "swap_remove index {i} out of {}", self.len);
        let last = self.pop().expect("not empty");
        if i == self.len {
            last
        } else {
            std::mem::replace(&mut self[i], last)
        }
    }

    /// Makes room for `n` more elements without copying later: only the first chunk can
    /// need it (it grows as a Vec up to [`CHUNK`]).
    pub fn reserve(&mut self, n: usize) {
        if self.len < CHUNK {
            if self.chunks.is_empty() {
                self.chunks.push(Vec::new());
            }
            let want = (self.len + n).min(CHUNK) - self.len;
            self.chunks[0].reserve(want);
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = &T> + '_ {
        self.chunks.iter().flat_map(|c| c.iter())
    }
}

impl<T: Clone> Chunked<T> {
    /// `n` copies of `value`.
    pub fn from_elem(value: T, n: usize) -> Chunked<T> {
        let mut c = Chunked::new();
        c.reserve(n);
        for _ in 0..n {
            c.push(value.clone());
        }
        c
    }
}

impl<T> Index<usize> for Chunked<T> {
    type Output = T;

    #[inline]
    fn index(&self, i: usize) -> &T {
        &self.chunks[i >> SHIFT][i & MASK]
    }
}

impl<T> IndexMut<usize> for Chunked<T> {
    #[inline]
    fn index_mut(&mut self, i: usize) -> &mut T {
        &mut self.chunks[i >> SHIFT][i & MASK]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn behaves_as_a_vec_across_chunk_edges() {
        let mut c = Chunked::new();
        let mut v = Vec::new();
        let mut next = crate::test_rng::below(7);
        for step in 0..200_000u64 {
            if next(5) < 3 || v.is_empty() {
                c.push(step);
                v.push(step);
            } else {
                let i = next(v.len() as u64) as usize;
                assert_eq!(c.swap_remove(i), v.swap_remove(i));
            }
            if step % 9973 == 0 {
                assert_eq!(c.len(), v.len());
                assert!(c.iter().eq(v.iter()));
            }
        }
        for (i, x) in v.iter().enumerate() {
            assert_eq!(c[i], *x);
        }
        while let Some(x) = v.pop() {
            assert_eq!(c.pop(), Some(x));
            assert!(
                c.chunks.len() <= (c.len() >> SHIFT) + 2,
                "spare chunks freed"
            );
        }
        assert!(c.is_empty() && c.pop().is_none());
    }

    #[test]
    fn a_full_chunk_is_never_reallocated() {
        let mut c = Chunked::new();
        for i in 0..CHUNK * 3 {
            c.push(i);
        }
        let first = c.chunks[1].as_ptr();
        for i in 0..CHUNK * 2 {
            c.push(i);
        }
        assert_eq!(c.chunks[1].as_ptr(), first, "chunk 1 stayed where it was");
        assert_eq!(c.chunks[1].capacity(), CHUNK);
        let small: Chunked<u8> = Chunked::from_elem(1, 10);
        assert!(small.chunks[0].capacity() < 64, "a small table stays small");
    }
}
