//! The process's memory allocator: mimalloc (v3), tuned for a cache that holds millions of
//! small objects and must give freed memory back (docs/memory.md, *Allocator*).
//!
//! # Why not the system allocator
//! glibc's malloc puts an 8-byte header on every chunk and rounds to 16 bytes with a 32-byte
//! minimum: a key of 11 bytes costs 32 bytes and a 64-byte value 80. A size-class allocator
//! (mimalloc, jemalloc) keeps per-page metadata instead, so the same objects cost 16 and 64 —
//! 32 bytes less per string key, ~30 MiB on the 1M-key benchmark. Redis links jemalloc for the
//! same reason.
//!
//! # Why mimalloc rather than jemalloc
//! Measured here (scripts/bench-memory.sh, same data): both reach redis-server's RSS once told
//! to return freed memory promptly, and SET throughput (with and without eviction) was the same
//! within this machine's noise. mimalloc builds from one C file in ~9 s; jemalloc runs
//! `configure` + `make` (~2.5 min per profile), which CI would pay for debug and release.
//!
//! # Settings
//! - `purge_delay = 0`: a freed OS-page-sized span is returned (MADV_DONTNEED) at once. The
//!   default (1 s, checked only on later allocator activity) left the old entry array of the
//!   keyspace — copied, not `mremap`ped as glibc does, when the map grows — resident in an idle
//!   server: 226 MiB instead of 161 MiB for 1M keys. Throughput did not measurably change.
//! - No transparent huge pages: the `no_thp` build feature stops mimalloc from asking for them,
//!   and [`configure`] opts the process out (`PR_SET_THP_DISABLE`), like Redis's `disable-thp
//!   yes`: a huge page makes RSS grow in 2 MiB steps and a forked snapshot child copy 2 MiB on
//!   the first write to any byte of it (redis `server.c` `linuxMemoryWarnings`).

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay` (position in `enum mi_option_e` of mimalloc 3.x's `mimalloc.h`;
/// libmimalloc-sys names only some options). `tests/alloc.rs` checks its effect.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Applies the settings above. Called once by [`crate::run`] before the keyspace is built;
/// harmless to call again.
pub fn configure() {
    // SAFETY: `mi_option_set` only stores an integer in mimalloc's option table; the option
    // is read by later frees, and this runs on the engine's only thread.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0) };
    // SAFETY: PR_SET_THP_DISABLE takes integer arguments only and affects only this process
    // (and children, which exec this same binary). Failure (old kernel) is harmless: THP stays
    // as the system configured it.
    unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
}
