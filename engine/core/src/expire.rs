//! The active expiry cycle (redis `expire.c` `activeExpireCycle`, slow cycle).
//!
//! Lazy expiry (on lookup, `keyspace.rs`) alone would keep keys that are never touched again;
//! this cycle samples [`SAMPLES_PER_LOOP`] random keys that have a TTL, deletes the expired
//! ones, and repeats while more than [`REPEAT_IF_EXPIRED_PERCENT`] % of a sample was expired,
//! so memory held by dead keys stays proportional to the live ones. The core has no clock, so
//! the time budget Redis uses (25 % of a tick) is a count budget here: at most `budget` keys
//! sampled per call, which bounds the pause.

use crate::keyspace::Keyspace;

/// Keys sampled per loop (redis `ACTIVE_EXPIRE_CYCLE_KEYS_PER_LOOP`).
pub const SAMPLES_PER_LOOP: usize = 20;
/// Loop again while more than this share of a sample had expired (Redis's classic 25 %).
pub const REPEAT_IF_EXPIRED_PERCENT: usize = 25;
/// Sampled keys per cron call: about a millisecond of work at worst, so a tick never stalls
/// clients; at hz 10 that is up to 50k reclaimed keys per second, plus lazy expiry.
pub const EXPIRE_KEYS_PER_CRON: usize = 5000;
/// Entries of a flushed (FLUSHALL ASYNC) keyspace dropped per cron call.
pub const LAZY_FREE_PER_CRON: usize = 20_000;

/// Runs one bounded cycle; returns the number of keys deleted.
pub fn active_cycle(ks: &mut Keyspace, now_ms: u64, budget: usize) -> usize {
    let mut sampled = 0;
    let mut removed = 0;
    while sampled < budget && ks.volatile_len() > 0 {
        let n = SAMPLES_PER_LOOP.min(ks.volatile_len());
        let mut expired = 0;
        for _ in 0..n {
            let Some(i) = ks.random_volatile() else { break };
            if ks.expired_at(i, now_ms) {
                ks.expire_now(i);
                expired += 1;
            }
        }
        sampled += n;
        removed += expired;
        if expired * 100 <= n * REPEAT_IF_EXPIRED_PERCENT {
            break;
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyspace::Keep;
    use crate::types::{StrValue, Value};

    #[test]
    fn reclaims_expired_within_budget() {
        let mut ks = Keyspace::new(9);
        for i in 0..10_000 {
            let idx = ks.set(
                format!("k{i}").as_bytes(),
                Value::Str(StrValue::Int(i)),
                Keep::Nothing,
                None,
            );
            // Half expire at 1000 ms, half far in the future; 1000 keys have no TTL.
            if i >= 1000 {
                ks.set_expire(idx, if i % 2 == 0 { 1000 } else { 1_000_000 });
            }
        }
        // Before the deadline nothing goes.
        assert_eq!(active_cycle(&mut ks, 1000, EXPIRE_KEYS_PER_CRON), 0);
        // One call is bounded by its budget.
        let first = active_cycle(&mut ks, 2000, 100);
        assert!(first <= 120, "{first}");
        // Repeated calls converge: expired keys go, live ones stay.
        for _ in 0..200 {
            active_cycle(&mut ks, 2000, EXPIRE_KEYS_PER_CRON);
        }
        ks.check();
        let mut expired_left = 0;
        ks.for_each_live(0, |k, _| {
            let n: usize = std::str::from_utf8(&k[1..]).unwrap().parse().unwrap();
            if n >= 1000 && n.is_multiple_of(2) {
                expired_left += 1;
            }
        });
        // The cycle stops once ≤ 25 % of a sample is expired, so a tail may remain (as in Redis).
        assert!(expired_left < 4500 / 4, "{expired_left} left");
        assert!(ks.len() >= 5500);
    }
}
