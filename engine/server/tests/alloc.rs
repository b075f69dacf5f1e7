//! The engine's allocator settings (`recached_server::alloc`): memory freed after a keyspace
//! grows goes back to the OS at once, not after mimalloc's purge delay. One test per binary,
//! so no other test allocates while RSS is read.

use std::hint::black_box;

use recached_server::host::RssReader;

const MIB: u64 = 1 << 20;

#[test]
fn memory_freed_by_growth_is_returned_at_once() {
    recached_server::alloc::configure();
    let rss = RssReader::new();
    let before = rss.rss_bytes().expect("/proc/self/statm");
    // Grow a vector by doubling as the keyspace's entry array does: each step copies into a
    // new block and frees the old one; 64 MiB of 8-byte items are written.
    let mut v: Vec<u64> = Vec::new();
    for i in 0..(64 * MIB / 8) {
        v.push(i);
    }
    black_box(&v);
    let grown = rss.rss_bytes().unwrap();
    assert!(grown >= before + 60 * MIB, "before {before}, grown {grown}");
    // The freed copies (32 + 16 + … MiB) must not stay resident beside the live 64 MiB.
    assert!(
        grown < before + 64 * MIB + 16 * MIB,
        "freed growth copies stayed resident: before {before}, grown {grown}"
    );
    drop(v);
    let after = rss.rss_bytes().unwrap();
    assert!(
        after < before + 8 * MIB,
        "freed memory stayed resident: before {before}, after {after}"
    );
}
