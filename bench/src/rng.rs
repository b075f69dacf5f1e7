//! Seeded randomness for the load generator: a small PRNG, exponential inter-arrival times and
//! key choosers (uniform, zipfian).
//!
//! Everything here is a pure function of the seed, so two runs with the same seed send the same
//! keys at the same intended times; "with and without recached" scenarios rely on that to replay
//! identical traffic.
//!
//! - [`Rng`]: SplitMix64 (Steele, Lea, Flood, "Fast splittable pseudorandom number generators",
//!   OOPSLA 2014). 64-bit state, passes BigCrush, and seeding from any u64 (0 included) is fine.
//! - [`Rng::exp`]: an exponential variate by inversion, `-ln(1-U)/rate` (Knuth, TAOCP vol. 2,
//!   3.4.1.D). Poisson arrivals are exactly the process whose inter-arrival times are i.i.d.
//!   exponential.
//! - [`KeyChooser`]: uniform over `0..n`, or zipfian with exponent `s` (rank k drawn with
//!   probability proportional to `1/(k+1)^s`), sampled by a binary search over the precomputed
//!   cumulative distribution (n ≤ [`MAX_ZIPF_KEYS`], 8 bytes per key).

/// Largest key space the zipfian chooser accepts: its table takes 8 bytes per key (80 MB here).
pub const MAX_ZIPF_KEYS: u64 = 10_000_000;

/// SplitMix64: one u64 of state; `next_u64` advances it by the golden-ratio increment and mixes.
#[derive(Debug, Clone)]
pub struct Rng {
    state: u64,
}

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng { state: seed }
    }

    /// A child generator for stream `i` (e.g. one per thread) that does not overlap this one in
    /// practice: the child's seed is this generator's seed mixed with `i`.
    pub fn fork(&self, i: u64) -> Rng {
        let mut r = Rng::new(self.state ^ i.wrapping_mul(0xD1B5_4A32_D192_ED03));
        r.next_u64();
        r
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1) with 53 bits of precision.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in `0..n` (n ≥ 1), by Lemire's multiply-shift; the bias is below 2^-32 for the
    /// key-space sizes used here, which is far under any measurement noise.
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n.max(1) as u128) >> 64) as u64
    }

    /// An exponential variate with the given rate (events per unit), mean `1/rate`.
    pub fn exp(&mut self, rate: f64) -> f64 {
        // 1 - U is in (0, 1], so the logarithm is finite.
        -(1.0 - self.next_f64()).ln() / rate
    }
}

/// How request keys are drawn from the key space `0..n`.
#[derive(Debug, Clone)]
pub enum KeyChooser {
    Uniform {
        n: u64,
    },
    /// `cdf[k]` = P(rank ≤ k); the last entry is 1.0.
    Zipf {
        cdf: Vec<f64>,
    },
}

impl KeyChooser {
    pub fn uniform(n: u64) -> KeyChooser {
        KeyChooser::Uniform { n: n.max(1) }
    }

    /// Zipfian over `0..n` with exponent `s` (> 0; 0.99 is YCSB's default). Rank 0 is the
    /// hottest key. Errors when `n` exceeds [`MAX_ZIPF_KEYS`] or `s` is not a positive number.
    pub fn zipf(n: u64, s: f64) -> Result<KeyChooser, String> {
        if n == 0 || n > MAX_ZIPF_KEYS {
            return Err(format!(
                "zipf key space must be 1..={MAX_ZIPF_KEYS}, got {n}"
            ));
        }
        if !(s.is_finite() && s > 0.0) {
            return Err(format!("zipf exponent must be > 0, got {s}"));
        }
        let mut cdf = Vec::with_capacity(n as usize);
        let mut sum = 0.0;
        for k in 0..n {
            sum += 1.0 / ((k + 1) as f64).powf(s);
            cdf.push(sum);
        }
        for c in &mut cdf {
            *c /= sum;
        }
        if let Some(last) = cdf.last_mut() {
            *last = 1.0;
        }
        Ok(KeyChooser::Zipf { cdf })
    }

    pub fn key_space(&self) -> u64 {
        match self {
            KeyChooser::Uniform { n } => *n,
            KeyChooser::Zipf { cdf } => cdf.len() as u64,
        }
    }

    pub fn pick(&self, rng: &mut Rng) -> u64 {
        match self {
            KeyChooser::Uniform { n } => rng.below(*n),
            KeyChooser::Zipf { cdf } => {
                let u = rng.next_f64();
                cdf.partition_point(|&c| c <= u).min(cdf.len() - 1) as u64
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream() {
        let mut a = Rng::new(42);
        let mut b = Rng::new(42);
        for _ in 0..1000 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        assert_ne!(Rng::new(1).next_u64(), Rng::new(2).next_u64());
    }

    #[test]
    fn uniform_below_covers_the_range_evenly() {
        let mut r = Rng::new(7);
        let mut counts = [0u32; 10];
        for _ in 0..100_000 {
            counts[r.below(10) as usize] += 1;
        }
        // Expected 10,000 each; 5 standard deviations is about ±475.
        for c in counts {
            assert!((9_500..=10_500).contains(&c), "{counts:?}");
        }
    }

    #[test]
    fn zipf_rank_frequencies_follow_the_power_law() {
        let z = KeyChooser::zipf(1000, 1.0).unwrap();
        let mut r = Rng::new(3);
        let mut counts = vec![0u32; 1000];
        for _ in 0..200_000 {
            counts[z.pick(&mut r) as usize] += 1;
        }
        // P(rank 0) = 1/H(1000) ≈ 0.1336; rank 1 is half as likely, rank 9 a tenth.
        let p0 = counts[0] as f64 / 200_000.0;
        assert!((p0 - 0.1336).abs() < 0.005, "p0 {p0}");
        let ratio = counts[0] as f64 / counts[1] as f64;
        assert!((ratio - 2.0).abs() < 0.1, "ratio {ratio}");
        assert!(counts[9] * 8 < counts[0] && counts[9] * 12 > counts[0]);
        assert!(KeyChooser::zipf(0, 1.0).is_err());
        assert!(KeyChooser::zipf(10, -1.0).is_err());
        assert!(KeyChooser::zipf(MAX_ZIPF_KEYS + 1, 1.0).is_err());
    }
}
