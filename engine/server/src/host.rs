//! What only the process knows: wall-clock time and resident memory.
//!
//! Time is read here, once per loop iteration, and handed to the pure engine as Unix
//! microseconds; the engine also calls [`now_us`] (as `HostInfo::clock`) once per command to
//! time it (`engine-core` never reads a clock itself). RSS comes from `/proc/self/statm`
//! (second field, resident pages × page size), as Redis's `zmalloc_get_rss` does on Linux.

/// Unix time in microseconds. A clock set before 1970 reads as 0 rather than panicking.
pub fn now_us() -> u64 {
    // CLOCK_REALTIME through the vDSO in integer µs: it is read once per loop iteration and
    // once per command (SystemTime's Duration path does u128 arithmetic, twice the cost).
    match nix::time::clock_gettime(nix::time::ClockId::CLOCK_REALTIME) {
        Ok(ts) if ts.tv_sec() >= 0 => (ts.tv_sec() as u64)
            .saturating_mul(1_000_000)
            .saturating_add(ts.tv_nsec() as u64 / 1_000),
        _ => 0,
    }
}

/// CPU time of this process and of its waited-for children (BGSAVE), for INFO `cpu`.
pub fn cpu_times() -> engine_core::CpuTimes {
    use nix::sys::resource::{UsageWho, getrusage};
    let us = |t: nix::sys::time::TimeVal| {
        (t.tv_sec().max(0) as u64) * 1_000_000 + t.tv_usec().max(0) as u64
    };
    let mut out = engine_core::CpuTimes::default();
    if let Ok(r) = getrusage(UsageWho::RUSAGE_SELF) {
        out.sys_us = us(r.system_time());
        out.user_us = us(r.user_time());
    }
    if let Ok(r) = getrusage(UsageWho::RUSAGE_CHILDREN) {
        out.children_sys_us = us(r.system_time());
        out.children_user_us = us(r.user_time());
    }
    out
}

/// Reads the resident set size of this process, in bytes.
pub struct RssReader {
    page_size: u64,
}

impl RssReader {
    pub fn new() -> Self {
        let page_size = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
            .ok()
            .flatten()
            .filter(|&p| p > 0)
            .map(|p| p as u64)
            .unwrap_or(4096);
        RssReader { page_size }
    }

    /// Resident bytes, or `None` where `/proc` is unavailable (INFO then keeps the last value).
    pub fn rss_bytes(&self) -> Option<u64> {
        let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
        let pages: u64 = statm.split_ascii_whitespace().nth(1)?.parse().ok()?;
        Some(pages.saturating_mul(self.page_size))
    }
}

impl Default for RssReader {
    fn default() -> Self {
        Self::new()
    }
}

/// Random bytes from the kernel (`/dev/urandom`): the hash seed, ACL GENPASS. If it cannot be
/// read, time, pid and position mixed, which is still unpredictable enough to stop
/// precomputed collision sets.
pub fn random_bytes(buf: &mut [u8]) {
    use std::io::Read;
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(buf))
        .is_ok()
    {
        return;
    }
    let base = now_us().rotate_left(17)
        ^ u64::from(std::process::id()).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    for (i, chunk) in buf.chunks_mut(8).enumerate() {
        let r = (base ^ (i as u64).wrapping_mul(0xBF58_476D_1CE4_E5B9)).to_le_bytes();
        chunk.copy_from_slice(&r[..chunk.len()]);
    }
}

/// 64 random bits ([`random_bytes`]).
pub fn random_seed() -> u64 {
    let mut b = [0u8; 8];
    random_bytes(&mut b);
    u64::from_le_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rss_is_plausible() {
        let rss = RssReader::new().rss_bytes().expect("/proc/self/statm");
        // A running test binary is bigger than 100 KB and smaller than 100 GB.
        assert!(rss > 100 * 1024 && rss < 100 << 30, "rss {rss}");
    }

    #[test]
    fn clock_is_after_2020() {
        assert!(now_us() > 1_577_836_800_000_000);
    }
}
