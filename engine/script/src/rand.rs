//! `math.random` as Redis 7.0 (`rand.c`): the 48-bit linear congruential generator of
//! `lrand48`, in Redis's own copy so every platform yields the same sequence. The state is the
//! host's (one per engine process, like Redis's static state): it starts from the `lrand48`
//! default seed, continues across script runs and SCRIPT FLUSH, and `math.randomseed(n)`
//! reseeds it, so two servers started alike give the same numbers to the same scripts.

/// `REDIS_LRAND48_MAX` (`INT32_MAX`).
pub const LRAND48_MAX: i32 = i32::MAX;

const A: u64 = 0x5_DEEC_E66D;
const C: u64 = 0xB;
const MASK48: u64 = (1 << 48) - 1;

/// The generator state (`X` of `lrand48`, 48 bits).
#[derive(Clone, Copy, Debug)]
pub struct Rand48 {
    x: u64,
}

impl Default for Rand48 {
    fn default() -> Self {
        Rand48 {
            x: 0x1234_ABCD_330E,
        }
    }
}

impl Rand48 {
    /// redis `redisLrand48`: the next 31-bit value.
    pub fn next_value(&mut self) -> i32 {
        self.x = (A.wrapping_mul(self.x).wrapping_add(C)) & MASK48;
        (self.x >> 17) as i32
    }

    /// redis `redisSrand48`: the high 32 bits become `seed`, the low 16 `0x330E`.
    pub fn seed(&mut self, seed: i32) {
        self.x = (u64::from(seed as u32) << 16) | 0x330E;
    }

    /// `math.random()`'s number in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        f64::from(self.next_value() % LRAND48_MAX) / f64::from(LRAND48_MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_lrand48() {
        // Values printed by Redis 7.0.15's own rand.c: the first value from the default
        // state, then three after redisSrand48(0).
        let mut r = Rand48::default();
        assert_eq!(r.next_value(), 851_401_618);
        r.seed(0);
        assert_eq!(
            [r.next_value(), r.next_value(), r.next_value()],
            [366_850_414, 1_610_402_240, 206_956_554]
        );
    }
}
