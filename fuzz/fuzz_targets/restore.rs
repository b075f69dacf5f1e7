//! Fuzz target: RESTORE of random payloads (`engine_core::dump`).
//!
//! Two modes, by the low bit of byte 0:
//! - raw: the input is the payload as a client sends it (mostly a bad version or CRC);
//! - framed: the input is the object (type byte and body), given Redis's footer here (RDB
//!   version 10 and the CRC-64 computed), so the fuzzer gets past the checksum and exercises
//!   the decoders (lengths, LZF, listpacks, ziplists, intsets, streams and their groups).
//!
//! Oracle: no panic, and RESTORE answers `+OK` or one of Redis's two payload errors. A value
//! that restored must DUMP, RESTORE elsewhere and DUMP again to the same bytes (what DUMP
//! writes is a normal form RESTORE keeps).
#![no_main]

use engine_core::{Client, Config, Engine, dump};
use libfuzzer_sys::fuzz_target;

const NOW_US: u64 = 1_700_000_000_000_000;

fn run(e: &mut Engine, c: &mut Client, argv: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    e.exec(c, argv, NOW_US, &mut out);
    out
}

fn bulk(reply: &[u8]) -> Vec<u8> {
    let end = reply.iter().position(|&b| b == b'\r').expect("a header");
    let n: usize = std::str::from_utf8(&reply[1..end]).unwrap().parse().unwrap();
    reply[end + 2..end + 2 + n].to_vec()
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let payload = if mode & 1 == 0 {
        rest.to_vec()
    } else {
        let mut p = rest.to_vec();
        p.extend_from_slice(&dump::RDB_VERSION.to_le_bytes());
        let crc = dump::rdb::crc64(&p);
        p.extend_from_slice(&crc.to_le_bytes());
        p
    };
    let mut e = Engine::new(Config {
        hash_seed: 3,
        ..Config::default()
    });
    let mut c = Client::default();
    let r = run(&mut e, &mut c, &[b"RESTORE", b"k", b"0", &payload]);
    match &r[..] {
        b"+OK\r\n" => {}
        b"-ERR DUMP payload version or checksum are wrong\r\n" | b"-ERR Bad data format\r\n" => {
            assert_eq!(run(&mut e, &mut c, &[b"EXISTS", b"k"]), b":0\r\n");
            return;
        }
        other => panic!("RESTORE answered {}", String::from_utf8_lossy(other)),
    }
    let d1 = bulk(&run(&mut e, &mut c, &[b"DUMP", b"k"]));
    assert_eq!(run(&mut e, &mut c, &[b"RESTORE", b"k2", b"0", &d1]), b"+OK\r\n");
    let d2 = bulk(&run(&mut e, &mut c, &[b"DUMP", b"k2"]));
    let d3 = {
        assert_eq!(run(&mut e, &mut c, &[b"RESTORE", b"k3", b"0", &d2]), b"+OK\r\n");
        bulk(&run(&mut e, &mut c, &[b"DUMP", b"k3"]))
    };
    assert_eq!(d2, d3, "DUMP of a restored DUMP changed");
});
