//! A seeded xorshift64 for tests: the same sequence every run.

/// `next(n)`: the next number below `n` (`n` > 0) of the sequence seeded by `seed` (≠ 0).
pub fn below(seed: u64) -> impl FnMut(u64) -> u64 {
    let mut rng = seed;
    move |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    }
}
