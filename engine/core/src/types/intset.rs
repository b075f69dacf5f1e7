//! A sorted array of distinct integers, in the spirit of Redis's intset (`intset.c`): the
//! representation of a small set of integers while it is under `set-max-intset-entries`.
//!
//! The values sit in one boxed slice of the narrowest width that holds every one of them
//! (`i16`, then `i32`, then `i64`: redis `intsetUpgradeAndAdd`), ascending, so membership is a
//! binary search and iteration is Redis's reply order. The width only grows (Redis never
//! downgrades either). The slice is reallocated to its exact size on every insertion and
//! removal, as Redis reallocates an intset on every change: a 10-member set of numbers below
//! 32,768 costs 20 bytes, not a doubling `Vec`'s spare half. Insertion is O(n) (a copy), which
//! the entry limit (512 by default) bounds.

/// The values, ascending, at one width.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IntSet {
    I16(Box<[i16]>),
    I32(Box<[i32]>),
    I64(Box<[i64]>),
}

impl Default for IntSet {
    fn default() -> Self {
        IntSet::new()
    }
}

/// `v` inserted at `at` into a copy of `s`, exactly sized.
fn inserted<T: Copy>(s: &[T], at: usize, v: T) -> Box<[T]> {
    let mut out = Vec::with_capacity(s.len() + 1);
    out.extend_from_slice(&s[..at]);
    out.push(v);
    out.extend_from_slice(&s[at..]);
    out.into_boxed_slice()
}

/// A copy of `s` without position `at`, exactly sized.
fn removed<T: Copy>(s: &[T], at: usize) -> Box<[T]> {
    let mut out = Vec::with_capacity(s.len() - 1);
    out.extend_from_slice(&s[..at]);
    out.extend_from_slice(&s[at + 1..]);
    out.into_boxed_slice()
}

/// Runs `$body` with `$s` bound to the slice of whichever width `$set` has.
macro_rules! with_slice {
    ($set:expr, $s:ident => $body:expr) => {
        match $set {
            IntSet::I16($s) => $body,
            IntSet::I32($s) => $body,
            IntSet::I64($s) => $body,
        }
    };
}

impl IntSet {
    pub fn new() -> IntSet {
        IntSet::I16(Box::default())
    }

    /// Number of values.
    pub fn len(&self) -> usize {
        with_slice!(self, s => s.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes per value (2, 4 or 8: redis `INTSET_ENC_*`).
    pub fn width(&self) -> usize {
        match self {
            IntSet::I16(_) => 2,
            IntSet::I32(_) => 4,
            IntSet::I64(_) => 8,
        }
    }

    /// Bytes of the values: what the set costs, for memory accounting. O(1).
    pub fn byte_len(&self) -> usize {
        self.len() * self.width()
    }

    /// Position of `v`, or where it would go (`Err`), by binary search. A value wider than
    /// the set's width is beyond every value, below or above.
    fn search(&self, v: i64) -> Result<usize, usize> {
        match self {
            IntSet::I16(s) => match i16::try_from(v) {
                Ok(x) => s.binary_search(&x),
                Err(_) => Err(if v < 0 { 0 } else { s.len() }),
            },
            IntSet::I32(s) => match i32::try_from(v) {
                Ok(x) => s.binary_search(&x),
                Err(_) => Err(if v < 0 { 0 } else { s.len() }),
            },
            IntSet::I64(s) => s.binary_search(&v),
        }
    }

    pub fn contains(&self, v: i64) -> bool {
        self.search(v).is_ok()
    }

    /// Adds `v`; returns true if it was new. Widens every value first when `v` needs it.
    pub fn insert(&mut self, v: i64) -> bool {
        let at = match self.search(v) {
            Ok(_) => return false,
            Err(at) => at,
        };
        *self = match &*self {
            IntSet::I16(s) => match i16::try_from(v) {
                Ok(x) => IntSet::I16(inserted(s, at, x)),
                Err(_) => match i32::try_from(v) {
                    Ok(x) => IntSet::I32(widened(s, at, x)),
                    Err(_) => IntSet::I64(widened(s, at, v)),
                },
            },
            IntSet::I32(s) => match i32::try_from(v) {
                Ok(x) => IntSet::I32(inserted(s, at, x)),
                Err(_) => IntSet::I64(widened(s, at, v)),
            },
            IntSet::I64(s) => IntSet::I64(inserted(s, at, v)),
        };
        true
    }

    /// Removes `v`; returns whether it was there. The width stays.
    pub fn remove(&mut self, v: i64) -> bool {
        match self.search(v) {
            Ok(at) => {
                self.remove_index(at);
                true
            }
            Err(_) => false,
        }
    }

    /// Removes and returns the value at position `i` (`0..len`); the later ones move down.
    pub fn remove_index(&mut self, i: usize) -> i64 {
        let v = self.get(i).expect("position in range");
        *self = match &*self {
            IntSet::I16(s) => IntSet::I16(removed(s, i)),
            IntSet::I32(s) => IntSet::I32(removed(s, i)),
            IntSet::I64(s) => IntSet::I64(removed(s, i)),
        };
        v
    }

    /// The value at position `i` (ascending order).
    #[allow(clippy::useless_conversion)] // i64 → i64 in the widest arm of the macro
    pub fn get(&self, i: usize) -> Option<i64> {
        with_slice!(self, s => s.get(i).map(|&x| i64::from(x)))
    }

    /// The values, ascending.
    pub fn iter(&self) -> Iter<'_> {
        Iter { set: self, i: 0 }
    }
}

/// `s` widened to `U`, with `v` inserted at `at` (`v` is beyond every value of `s`, so `at`
/// is 0 or `s.len()`: redis `intsetUpgradeAndAdd` prepends or appends).
fn widened<T: Copy, U: Copy + From<T>>(s: &[T], at: usize, v: U) -> Box<[U]> {
    let mut out = Vec::with_capacity(s.len() + 1);
    out.extend(s.iter().map(|&x| U::from(x)));
    out.insert(at, v);
    out.into_boxed_slice()
}

/// Iterator over an [`IntSet`]'s values, ascending.
#[derive(Clone)]
pub struct Iter<'a> {
    set: &'a IntSet,
    i: usize,
}

impl Iterator for Iter<'_> {
    type Item = i64;

    fn next(&mut self) -> Option<i64> {
        let v = self.set.get(self.i)?;
        self.i += 1;
        Some(v)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.set.len() - self.i;
        (n, Some(n))
    }
}

impl ExactSizeIterator for Iter<'_> {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorted_distinct_and_widening() {
        let mut s = IntSet::new();
        assert!(s.insert(5) && s.insert(-3) && s.insert(100));
        assert!(!s.insert(5));
        assert_eq!(s.width(), 2);
        assert_eq!(s.iter().collect::<Vec<_>>(), [-3, 5, 100]);
        assert!(!s.contains(70_000) && !s.contains(i64::MIN));
        assert!(s.insert(70_000));
        assert_eq!(s.width(), 4);
        assert!(s.insert(i64::MIN));
        assert_eq!(s.width(), 8);
        assert_eq!(s.iter().collect::<Vec<_>>(), [i64::MIN, -3, 5, 100, 70_000]);
        assert_eq!(s.byte_len(), 40);
        assert!(s.remove(i64::MIN));
        assert_eq!(s.width(), 8, "never narrows");
        assert_eq!(s.remove_index(0), -3);
        assert!(!s.remove(-3));
        assert_eq!(s.iter().collect::<Vec<_>>(), [5, 100, 70_000]);
        assert!(s.contains(100) && !s.contains(101));
    }

    #[test]
    fn matches_a_sorted_model() {
        let mut s = IntSet::new();
        let mut model = std::collections::BTreeSet::new();
        let mut x: u64 = 7;
        for _ in 0..4000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let v = match (x >> 60) % 4 {
                0 => ((x >> 20) % 200) as i64 - 100,
                1 => ((x >> 20) % 100_000) as i64 - 50_000,
                2 => (x >> 3) as i64,
                _ => -((x >> 30) as i64),
            };
            if (x >> 10).is_multiple_of(3) {
                assert_eq!(s.remove(v), model.remove(&v));
            } else {
                assert_eq!(s.insert(v), model.insert(v));
            }
            assert_eq!(s.len(), model.len());
        }
        assert!(s.iter().eq(model.iter().copied()));
    }
}
