//! The open-loop arrival schedule: when each request *should* start.
//!
//! Requests arrive as a Poisson process at `rate` per second: inter-arrival gaps are i.i.d.
//! exponential with mean `1/rate` ([`crate::rng::Rng::exp`]). Times are nanoseconds from the
//! start of the run, kept as an `f64` accumulator (exact to well under a nanosecond for runs of
//! days) and handed out as `u64`.
//!
//! The schedule is fixed before the run by the seed alone. It never looks at replies, so a slow
//! server cannot slow the arrivals down: that is what "open loop" means, and why measuring each
//! latency from the intended start (not from when the request was finally written) does not
//! suffer from coordinated omission (Gil Tene, "How NOT to measure latency", 2015).

use crate::rng::Rng;

/// An endless iterator of intended start times (ns since the run started), strictly increasing
/// in expectation (two arrivals may round to the same nanosecond).
#[derive(Debug, Clone)]
pub struct Schedule {
    rng: Rng,
    /// Arrivals per nanosecond.
    rate_per_ns: f64,
    now_ns: f64,
}

impl Schedule {
    /// `rate` in requests per second (> 0).
    pub fn new(rng: Rng, rate: f64) -> Schedule {
        Schedule {
            rng,
            rate_per_ns: rate / 1e9,
            now_ns: 0.0,
        }
    }
}

impl Iterator for Schedule {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        self.now_ns += self.rng.exp(self.rate_per_ns);
        Some(self.now_ns as u64)
    }
}
