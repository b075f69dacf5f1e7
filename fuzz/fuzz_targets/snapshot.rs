//! Fuzz target: the snapshot loader (`engine_core::snapshot::load`).
//!
//! Two modes, by the low bit of byte 0:
//! - raw: the input is the file, as found on disk (torn, truncated or foreign files);
//! - framed: the input is the entry section, wrapped in a valid header and an end record
//!   whose key count (byte 1) and CRC-32 are computed here, so the fuzzer gets past the
//!   checksum and exercises the entry decoding (lengths, tags, varints, NaN scores,
//!   duplicate keys, encodings).
//!
//! Oracle: no panic and no allocation beyond the input (the loader's stated contract; the
//! fuzzer's malloc limit catches a length trusted before its bytes arrive). A file that
//! loads must write back and load again to the same key count (a snapshot of what was
//! loaded is itself loadable).
#![no_main]

use engine_core::{Config, Engine, snapshot};
use libfuzzer_sys::fuzz_target;

const NOW_MS: u64 = 1_700_000_000_000;

fn engine() -> Engine {
    Engine::new(Config {
        hash_seed: 3,
        ..Config::default()
    })
}

fn framed(keys: u8, body: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(body.len() + 64);
    f.extend_from_slice(snapshot::MAGIC);
    f.extend_from_slice(&snapshot::VERSION.to_le_bytes());
    f.extend_from_slice(&NOW_MS.to_le_bytes());
    f.extend_from_slice(&u64::from(keys).to_le_bytes());
    f.extend_from_slice(body);
    f.push(0xFF);
    f.extend_from_slice(&u64::from(keys).to_le_bytes());
    let crc = crc32fast::hash(&f);
    f.extend_from_slice(&crc.to_le_bytes());
    f.extend_from_slice(snapshot::TRAILER);
    f
}

/// Keys in every database: `Engine::dbsize` is the selected database's only, and a snapshot
/// (version 2) fills all sixteen.
fn keys_in_all_dbs(e: &Engine) -> u64 {
    (0..e.databases()).map(|n| e.db(n).len() as u64).sum()
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let file = if mode & 1 == 0 {
        rest.to_vec()
    } else {
        let Some((&keys, body)) = rest.split_first() else {
            return;
        };
        framed(keys, body)
    };
    let mut e = engine();
    let Ok(stats) = snapshot::load(&mut e, NOW_MS, file.as_slice()) else {
        assert_eq!(keys_in_all_dbs(&e), 0, "a failed load left keys behind");
        return;
    };
    assert_eq!(keys_in_all_dbs(&e), stats.keys, "loaded keys vs stats");
    let mut again = Vec::new();
    snapshot::write(&e, NOW_MS, &mut again).expect("write to a Vec");
    let mut e2 = engine();
    let stats2 =
        snapshot::load(&mut e2, NOW_MS, again.as_slice()).expect("reload what was written");
    assert_eq!(stats2.keys, stats.keys);
    assert_eq!(keys_in_all_dbs(&e2), keys_in_all_dbs(&e));
});
