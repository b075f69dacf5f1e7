//! Unit tests of `snapshot.rs`: round trips of every type and format version, and bad input.

use super::*;
use crate::keyspace::Keep;

fn engine() -> Engine {
    Engine::new(crate::Config {
        hash_seed: 42,
        ..Default::default()
    })
}

fn fill(e: &mut Engine) {
    let ks = &mut e.ks;
    ks.set(
        b"s",
        Value::Str(StrValue::from_slice(b"hello")),
        Keep::Nothing,
        None,
    );
    ks.set(b"i", Value::Str(StrValue::Int(-42)), Keep::Nothing, None);
    let i = ks.set(
        b"ttl",
        Value::Str(StrValue::from_slice(b"x")),
        Keep::Nothing,
        None,
    );
    ks.set_expire(i, 5_000);
    let i = ks.set(
        b"gone",
        Value::Str(StrValue::from_slice(b"y")),
        Keep::Nothing,
        None,
    );
    ks.set_expire(i, 10);
    let l: ListValue = [&b"a"[..], b"", b"ccc"].into_iter().collect();
    ks.set(b"l", Value::List(Box::new(l)), Keep::Nothing, None);
    let mut h = HashValue::new();
    h.set(b"f1", b"v1", &crate::types::EncodingLimits::DEFAULT);
    h.set(b"f2", &[0u8; 300], &crate::types::EncodingLimits::DEFAULT);
    ks.set(b"h", Value::Hash(Box::new(h)), Keep::Nothing, None);
    let mut s = SetValue::new();
    for m in [&b"1"[..], b"2", b"x"] {
        s.insert(m, &crate::types::EncodingLimits::DEFAULT);
    }
    ks.set(b"set", Value::Set(s), Keep::Nothing, None);
    let mut z = ZSetValue::new(1);
    z.insert(b"m1", 1.5, &crate::types::EncodingLimits::DEFAULT);
    z.insert(
        b"m2",
        f64::NEG_INFINITY,
        &crate::types::EncodingLimits::DEFAULT,
    );
    z.insert(b"m3", -0.0, &crate::types::EncodingLimits::DEFAULT);
    ks.set(b"z", Value::ZSet(z), Keep::Nothing, None);
    ks.set(
        b"big",
        Value::Str(StrValue::Raw(vec![7u8; 600_000])),
        Keep::Nothing,
        None,
    );
    ks.set(b"x", Value::Stream(Box::new(stream())), Keep::Nothing, None);
}

/// A stream with a deleted entry, entries of other fields, counters set by XSETID, and two
/// groups (one with consumers and pending entries, one never read).
fn stream() -> crate::types::StreamValue {
    use crate::types::stream::{NodeLimits, StreamId, StreamValue};
    let mut st = StreamValue::new();
    let lim = NodeLimits::default();
    for i in 1..=250u64 {
        let v = i.to_string();
        let pairs: [&[u8]; 4] = if i % 7 == 0 {
            [b"other", v.as_bytes(), b"", &[0, 1, 2]]
        } else {
            [b"f", v.as_bytes(), b"g", b"x"]
        };
        st.append(&pairs, StreamId::new(1000 + i, i % 3), true, lim)
            .unwrap();
    }
    st.delete_ids(&[StreamId::new(1001, 1), StreamId::new(1100, 1)]);
    st.last_id = StreamId::new(5000, 7);
    st.entries_added = 300;
    st.create_group(b"g1", StreamId::new(1010, 1), 10);
    st.create_group(b"g2", StreamId::MIN, -1);
    st.group_mut(b"g1", |g| {
        g.create_consumer(b"alice", 77);
        g.create_consumer(b"idle", 78);
        for i in 2..=9u64 {
            g.deliver(StreamId::new(1000 + i, i % 3), b"alice", 100 + i);
        }
        // A pending entry whose stream entry was deleted since (XCLAIM/XAUTOCLAIM drop it).
        g.deliver(StreamId::new(1001, 1), b"alice", 99);
    });
    st
}

fn snapshot(e: &Engine, now_ms: u64) -> Vec<u8> {
    let mut out = Vec::new();
    let st = write(e, now_ms, &mut out).unwrap();
    assert_eq!(st.bytes, out.len() as u64);
    out
}

/// A version 2 (uncompressed) snapshot: what `rdbcompression no` writes.
fn snapshot_plain(e: &mut Engine, now_ms: u64) -> Vec<u8> {
    e.config.stored.insert("rdbcompression", "no".into());
    let out = snapshot(e, now_ms);
    e.config.stored.remove("rdbcompression");
    assert_eq!(out[8..12], VERSION_PLAIN.to_le_bytes());
    out
}

/// Bytes that do not compress (xorshift).
fn noise(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// `fill`, plus `n` small hashes of the bench's `small-hashes` shape, large collections of
/// every type (their non-listpack encodings), long strings that compress and strings that
/// do not (one longer than a frame).
fn fill_big(e: &mut Engine, n: usize) {
    fill(e);
    let lim = crate::types::EncodingLimits::DEFAULT;
    let ks = &mut e.ks;
    for i in 0..n {
        let mut h = HashValue::new();
        let v = format!("val{:05}", i);
        for f in 0..10 {
            h.set(format!("field{f}").as_bytes(), v.as_bytes(), &lim);
        }
        let k = format!("user:{i:06}");
        let at = ks.set(k.as_bytes(), Value::Hash(Box::new(h)), Keep::Nothing, None);
        if i % 5 == 0 {
            ks.set_expire(at, 1_000_000 + i as u64);
        }
    }
    let mut h = HashValue::new();
    let mut s = SetValue::new();
    let mut z = ZSetValue::new(7);
    let mut l = ListValue::new();
    for i in 0..2000 {
        let m = format!("member-{i}");
        h.set(m.as_bytes(), &noise(20, i), &lim);
        s.insert(m.as_bytes(), &lim);
        z.insert(m.as_bytes(), i as f64 * 0.5, &lim);
        l.push(m.as_bytes(), crate::types::list::End::Tail);
    }
    ks.set(b"bigh", Value::Hash(Box::new(h)), Keep::Nothing, None);
    ks.set(b"bigs", Value::Set(s), Keep::Nothing, None);
    ks.set(b"bigz", Value::ZSet(z), Keep::Nothing, None);
    ks.set(b"bigl", Value::List(Box::new(l)), Keep::Nothing, None);
    let mut ints = SetValue::new();
    for i in 0..100 {
        ints.insert(i.to_string().as_bytes(), &lim);
    }
    ks.set(b"ints", Value::Set(ints), Keep::Nothing, None);
    for (k, v) in [
        (&b"noise-small"[..], noise(40, 3)),
        (b"noise-big", noise(3 * FRAME + 17, 5)),
        (b"text", b"the quick brown fox ".repeat(50)),
        (b"short", b"abc".to_vec()),
    ] {
        ks.set(k, Value::Str(StrValue::Raw(v)), Keep::Nothing, None);
    }
}

/// Every key of `a` (live at `now_ms`) is in `b` with the same value and expiry.
fn assert_same(a: &mut Engine, b: &mut Engine, now_ms: u64) {
    for n in 0..a.databases() {
        let keys: Vec<Vec<u8>> = a.with_db(n, |e| {
            (0..e.ks.len()).map(|i| e.ks.get_at(i).0.to_vec()).collect()
        });
        for k in keys {
            let x = a.with_db(n, |e| {
                e.ks.lookup_write(&k, now_ms)
                    .map(|i| (e.ks.value(i).clone(), e.ks.get_at(i).1.expire_at()))
            });
            let Some(x) = x else { continue };
            let y = b.with_db(n, |e| {
                e.ks.lookup_write(&k, now_ms)
                    .map(|i| (e.ks.value(i).clone(), e.ks.get_at(i).1.expire_at()))
            });
            assert_eq!(Some(x), y, "db {n} key {}", String::from_utf8_lossy(&k));
        }
        assert_eq!(a.db(n).len(), b.db(n).len(), "db {n}");
    }
}

/// The frames of a version 3 file: (kind, file offset).
fn frames(bytes: &[u8]) -> Vec<(u8, usize)> {
    fn varint(b: &[u8], i: &mut usize) -> usize {
        let mut v = 0;
        let mut shift = 0;
        loop {
            let x = b[*i];
            *i += 1;
            v |= ((x & 0x7F) as usize) << shift;
            shift += 7;
            if x & 0x80 == 0 {
                return v;
            }
        }
    }
    let mut out = Vec::new();
    let mut i = 28;
    loop {
        let at = i;
        let kind = bytes[i];
        i += 1;
        out.push((kind, at));
        match kind {
            FRAME_END => return out,
            FRAME_STORED => i += varint(bytes, &mut i),
            _ => {
                varint(bytes, &mut i);
                i += varint(bytes, &mut i);
            }
        }
    }
}

#[test]
fn round_trip_all_types_and_ttls() {
    let mut a = engine();
    fill(&mut a);
    let bytes = snapshot(&a, 100);
    let mut b = engine();
    let st = load(&mut b, 100, &bytes[..]).unwrap();
    assert_eq!(st.keys, a.dbsize() - 1, "the expired key is not written");
    assert_eq!(st.bytes, bytes.len() as u64);
    for i in 0..a.ks.len() {
        let (k, ea) = a.ks.get_at(i);
        if k == b"gone" {
            continue;
        }
        let j = b.ks.lookup_write(k, 100).expect("key restored");
        let (_, eb) = b.ks.get_at(j);
        assert_eq!(ea.value, eb.value, "{}", String::from_utf8_lossy(k));
        assert_eq!(ea.expire_at(), eb.expire_at());
        assert_eq!(ea.value.type_name(), eb.value.type_name());
    }
    assert_eq!(b.expires_count(), 1);
    // Loaded later: the TTL key has expired and is not loaded.
    let mut c = engine();
    let st = load(&mut c, 6_000, &bytes[..]).unwrap();
    assert_eq!((st.keys, st.expired), (a.dbsize() - 2, 1));
}

#[test]
fn streams_round_trip_with_groups_and_pending_entries() {
    let mut a = engine();
    a.ks.set(b"x", Value::Stream(Box::new(stream())), Keep::Nothing, None);
    let mut empty = crate::types::StreamValue::new();
    empty.create_group(b"g", crate::types::stream::StreamId::MIN, 0);
    a.ks.set(b"e", Value::Stream(Box::new(empty)), Keep::Nothing, None);
    let bytes = snapshot(&a, 1);
    let mut b = engine();
    assert_eq!(load(&mut b, 1, &bytes[..]).unwrap().keys, 2);
    for k in [&b"x"[..], b"e"] {
        let i = a.ks.lookup_write(k, 1).unwrap();
        let j = b.ks.lookup_write(k, 1).unwrap();
        assert_eq!(a.ks.value(i), b.ks.value(j));
        let Value::Stream(st) = b.ks.value(j) else {
            panic!()
        };
        st.check();
    }
    let j = b.ks.lookup_write(b"x", 1).unwrap();
    let Value::Stream(st) = b.ks.value(j) else {
        panic!()
    };
    assert_eq!(st.len(), 248);
    assert_eq!(st.groups[&b"g1"[..]].pel().len(), 9);
    assert_eq!(
        st.groups[&b"g1"[..]].consumer(b"alice").unwrap().pel.len(),
        9
    );
    // Node boundaries (and so which entries share their node's field names) may move on
    // load, since tombstones are not kept: the accounting stays close.
    let (x, y) = (a.ks.used_bytes() as f64, b.ks.used_bytes() as f64);
    assert!((y / x - 1.0).abs() < 0.1, "{x} vs {y}");
}

#[test]
fn empty_keyspace_round_trips() {
    let a = engine();
    let bytes = snapshot(&a, 1);
    let mut b = engine();
    assert_eq!(load(&mut b, 1, &bytes[..]).unwrap().keys, 0);
}

#[test]
fn every_truncation_is_refused_with_its_offset() {
    let mut a = engine();
    fill(&mut a);
    let bytes = snapshot(&a, 100);
    for cut in (0..bytes.len())
        .step_by(997)
        .chain(bytes.len() - 12..bytes.len())
    {
        let mut b = engine();
        let err = load(&mut b, 100, &bytes[..cut]).expect_err("truncated");
        assert!(err.offset <= cut as u64, "cut {cut}: {err}");
        assert_eq!(b.dbsize(), 0, "a failed load leaves the keyspace empty");
    }
}

#[test]
fn every_flipped_byte_is_refused() {
    let mut a = engine();
    a.ks.set(
        b"k",
        Value::Str(StrValue::from_slice(b"v")),
        Keep::Nothing,
        None,
    );
    let mut h = HashValue::new();
    h.set(b"f", b"v", &crate::types::EncodingLimits::DEFAULT);
    a.ks.set(b"h", Value::Hash(Box::new(h)), Keep::Nothing, None);
    let bytes = snapshot(&a, 1);
    for i in 0..bytes.len() {
        for bit in [0x01u8, 0x80] {
            let mut bad = bytes.clone();
            bad[i] ^= bit;
            let mut b = engine();
            assert!(load(&mut b, 1, &bad[..]).is_err(), "flip at {i} accepted");
            assert_eq!(b.dbsize(), 0);
        }
    }
    let mut extra = bytes.clone();
    extra.push(0);
    assert!(load(&mut engine(), 1, &extra[..]).is_err());
}

#[test]
fn huge_lengths_do_not_allocate_beyond_the_input() {
    // Header, then a string entry claiming a 4 GB key.
    let mut f = Vec::new();
    f.extend_from_slice(MAGIC);
    f.extend_from_slice(&VERSION_PLAIN.to_le_bytes());
    f.extend_from_slice(&0u64.to_le_bytes());
    f.extend_from_slice(&u64::MAX.to_le_bytes());
    f.push(TAG_LIST);
    f.extend_from_slice(&[1, b'k']);
    f.extend_from_slice(&[0xFF, 0xFF, 0xFF, 0xFF, 0x0F]);
    let err = load(&mut engine(), 1, &f[..]).unwrap_err();
    assert!(err.reason.contains("truncated"), "{err}");
    f.truncate(f.len() - 5);
    f.extend_from_slice(&[0xFF; 11]);
    let err = load(&mut engine(), 1, &f[..]).unwrap_err();
    assert!(
        err.reason.contains("malformed") || err.reason.contains("range"),
        "{err}"
    );
}

#[test]
fn round_trip_several_databases() {
    let mut a = engine();
    fill(&mut a);
    for n in [1usize, 7, 15] {
        a.with_db(n, |e| {
            for i in 0..n {
                let k = format!("db{n}-{i}");
                let at = e.ks.set(
                    k.as_bytes(),
                    Value::Str(StrValue::Int(n as i64)),
                    Keep::Nothing,
                    None,
                );
                if i == 0 {
                    e.ks.set_expire(at, 9_000);
                }
            }
        });
    }
    let bytes = snapshot(&a, 100);
    let mut b = engine();
    let st = load(&mut b, 100, &bytes[..]).unwrap();
    assert_eq!(
        st.keys,
        (0..16).map(|n| a.db(n).len() as u64).sum::<u64>() - 1
    );
    assert_eq!(b.current_db(), 0);
    for n in [1usize, 7, 15] {
        assert_eq!(b.db(n).len(), n);
        assert_eq!(b.db(n).volatile_len(), 1);
        let k = format!("db{n}-0");
        let got = b.with_db(n, |e| e.ks.get_entry(k.as_bytes()).map(|en| en.expire_at()));
        assert_eq!(got, Some(Some(9_000)));
    }
    assert_eq!(
        b.db(0).len(),
        a.db(0).len() - 1,
        "the expired key is not written"
    );
    assert_eq!(b.dataset_bytes(), {
        let mut c = engine();
        load(&mut c, 100, &bytes[..]).unwrap();
        c.dataset_bytes()
    });
    // A database beyond `databases` fails the load and leaves the engine empty.
    let mut few = Engine::new(crate::Config {
        hash_seed: 42,
        databases: 8,
        ..Default::default()
    });
    let err = load(&mut few, 100, &bytes[..]).unwrap_err();
    assert!(err.reason.contains("database 15"), "{err}");
    assert_eq!(few.dataset_bytes(), 0);
}

#[test]
fn version_3_round_trips_every_type_in_compressed_frames() {
    let mut a = engine();
    fill_big(&mut a, 3000);
    a.with_db(5, |e| {
        e.ks.set(b"five", Value::Str(StrValue::Int(5)), Keep::Nothing, None);
    });
    let bytes = snapshot(&a, 100);
    assert_eq!(bytes[8..12], VERSION.to_le_bytes());
    let kinds: Vec<u8> = frames(&bytes).iter().map(|f| f.0).collect();
    assert!(
        kinds.contains(&FRAME_LZ4) && kinds.contains(&FRAME_STORED),
        "{kinds:?}"
    );
    assert_eq!(kinds.last(), Some(&FRAME_END));
    let mut b = engine();
    let st = load(&mut b, 100, &bytes[..]).unwrap();
    assert_eq!(st.bytes, bytes.len() as u64);
    let total: usize = (0..a.databases()).map(|n| a.db(n).len()).sum();
    assert_eq!(st.keys, total as u64 - 1, "the expired key is not written");
    assert_same(&mut a, &mut b, 100);
    assert_eq!(b.with_db(5, |e| e.ks.len()), 1);
    // The same keyspace uncompressed (version 2) loads to the same, and is bigger.
    let plain = snapshot_plain(&mut a, 100);
    let mut c = engine();
    load(&mut c, 100, &plain[..]).unwrap();
    assert_same(&mut a, &mut c, 100);
    assert!(
        bytes.len() < plain.len() * 3 / 4,
        "{} vs {}",
        bytes.len(),
        plain.len()
    );
}

#[test]
fn small_hashes_compress_across_keys() {
    let mut a = engine();
    let lim = crate::types::EncodingLimits::DEFAULT;
    for i in 0..20_000 {
        let mut h = HashValue::new();
        let v = format!("val{:05}", i);
        for f in 0..10 {
            h.set(format!("field{f}").as_bytes(), v.as_bytes(), &lim);
        }
        a.ks.set(
            format!("user:{i:06}").as_bytes(),
            Value::Hash(Box::new(h)),
            Keep::Nothing,
            None,
        );
    }
    let v3 = snapshot(&a, 1).len();
    let v2 = snapshot_plain(&mut a, 1).len();
    // 174 bytes a key uncompressed; redis-server's dump.rdb (listpack + LZF) takes 93.
    assert!(v2 / 20_000 >= 170, "{v2}");
    assert!(v3 / 20_000 < 60, "{v3} bytes, {} a key", v3 / 20_000);
}

#[test]
fn corrupt_version_3_files_are_refused_with_a_file_offset() {
    let mut a = engine();
    fill_big(&mut a, 1500);
    let bytes = snapshot(&a, 100);
    let fr = frames(&bytes);
    assert!(fr.len() > 4, "{fr:?}");
    // Every frame start and a spread of offsets inside frames, both bits.
    let offsets = fr
        .iter()
        .flat_map(|&(_, at)| at..at + 4)
        .chain((0..bytes.len()).step_by(1013))
        .chain(bytes.len() - 24..bytes.len());
    for i in offsets {
        for bit in [0x01u8, 0x80] {
            let mut bad = bytes.clone();
            bad[i] ^= bit;
            let mut b = engine();
            let err = load(&mut b, 100, &bad[..]).expect_err("flip accepted");
            assert!(err.offset <= bytes.len() as u64, "flip at {i}: {err}");
            assert_eq!(b.dbsize(), 0);
        }
    }
    for cut in (0..bytes.len())
        .step_by(4099)
        .chain(fr.iter().map(|f| f.1))
        .chain(bytes.len() - 14..bytes.len())
    {
        let mut b = engine();
        let err = load(&mut b, 100, &bytes[..cut]).expect_err("truncated");
        assert!(err.offset <= cut as u64, "cut {cut}: {err}");
        assert_eq!(b.dbsize(), 0);
    }
    let mut extra = bytes.clone();
    extra.push(0);
    assert!(load(&mut engine(), 100, &extra[..]).is_err());
}

/// A version 3 file of the given frames (item bytes, compressed or not) with a valid
/// checksum and trailer.
fn v3_file(frames: &[(u8, Vec<u8>)]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(MAGIC);
    f.extend_from_slice(&VERSION.to_le_bytes());
    f.extend_from_slice(&0u64.to_le_bytes());
    f.extend_from_slice(&u64::MAX.to_le_bytes());
    for (kind, items) in frames {
        f.push(*kind);
        put_varint(&mut f, items.len() as u64);
        if *kind == FRAME_LZ4 {
            let mut c = vec![0; lz4_flex::block::get_maximum_output_size(items.len())];
            let n = lz4_flex::block::compress_into(items, &mut c).unwrap();
            put_varint(&mut f, n as u64);
            f.extend_from_slice(&c[..n]);
        } else {
            f.extend_from_slice(items);
        }
    }
    f.push(FRAME_END);
    let crc = crc32fast::hash(&f);
    f.extend_from_slice(&crc.to_le_bytes());
    f.extend_from_slice(TRAILER);
    f
}

#[test]
fn version_3_frames_are_bounded() {
    let end = |keys: u64| {
        let mut v = vec![TAG_END];
        v.extend_from_slice(&keys.to_le_bytes());
        v
    };
    // A valid file made by hand: one string entry, one compressed frame.
    let mut items = vec![TAG_STR_RAW, 1, b'k', 100];
    items.extend_from_slice(&[b'a'; 100]);
    items.extend_from_slice(&end(1));
    let ok = v3_file(&[(FRAME_LZ4, items.clone())]);
    assert_eq!(load(&mut engine(), 1, &ok[..]).unwrap().keys, 1);
    let err_of = |f: &[u8]| load(&mut engine(), 1, f).unwrap_err();
    // A list claiming 4 G elements, inside a frame: truncated, at the frame's offset.
    let mut list = vec![TAG_LIST, 1, b'k', 0xFF, 0xFF, 0xFF, 0xFF, 0x0F];
    list.extend_from_slice(&end(1));
    let err = err_of(&v3_file(&[(FRAME_STORED, list)]));
    assert!(err.reason.contains("truncated"), "{err}");
    assert_eq!(err.offset, 28, "{err}");
    // A frame longer than FRAME, a compressed frame not smaller than its content.
    let mut f = ok[..28].to_vec();
    f.push(FRAME_STORED);
    put_varint(&mut f, FRAME as u64 + 1);
    let err = err_of(&f);
    assert!(err.reason.contains("frame length"), "{err}");
    let mut f = ok[..28].to_vec();
    f.push(FRAME_LZ4);
    put_varint(&mut f, 100);
    put_varint(&mut f, 100);
    let err = err_of(&f);
    assert!(err.reason.contains("compressed frame length"), "{err}");
    // Garbage where LZ4 is expected (a valid checksum: the decoder finds it).
    let mut f = ok[..28].to_vec();
    f.extend_from_slice(&[FRAME_LZ4, 100, 20]);
    f.extend_from_slice(&[0xF0; 20]);
    f.push(FRAME_END);
    let crc = crc32fast::hash(&f);
    f.extend_from_slice(&crc.to_le_bytes());
    f.extend_from_slice(TRAILER);
    let err = err_of(&f);
    assert!(err.reason.contains("corrupt compressed frame"), "{err}");
    assert_eq!(err.offset, 28);
    // A short frame must be the last; an unknown frame type; a frame after the end.
    let err = err_of(&v3_file(&[
        (FRAME_STORED, vec![TAG_SELECT]),
        (FRAME_STORED, end(0)),
    ]));
    assert!(err.reason.contains("after a short frame"), "{err}");
    let err = err_of(&v3_file(&[(7, end(0))]));
    assert!(err.reason.contains("unknown frame type"), "{err}");
    let mut two = end(0);
    two.extend_from_slice(&end(0));
    let err = err_of(&v3_file(&[(FRAME_STORED, two)]));
    assert!(err.reason.contains("after the key count"), "{err}");
    // Items split across frames anywhere (here inside a key) load.
    let mut big = vec![TAG_STR_RAW, 0x80, 0x80, 0x04];
    big.extend(noise(FRAME, 9));
    big.extend_from_slice(&[1, b'v']);
    big.extend_from_slice(&end(1));
    let (a, b) = big.split_at(FRAME);
    let f = v3_file(&[(FRAME_STORED, a.to_vec()), (FRAME_STORED, b.to_vec())]);
    assert_eq!(load(&mut engine(), 1, &f[..]).unwrap().keys, 1);
}

#[test]
fn rdbcompression_no_writes_version_2() {
    let mut a = engine();
    fill(&mut a);
    let plain = snapshot_plain(&mut a, 100);
    let mut b = engine();
    load(&mut b, 100, &plain[..]).unwrap();
    assert_same(&mut a, &mut b, 100);
    assert_eq!(snapshot(&a, 100)[8..12], VERSION.to_le_bytes());
}

/// A version 1 file: what the writer makes for database 0 alone, with version 1 and the
/// checksum recomputed (version 2 adds only the `select` items).
fn as_version_1(mut bytes: Vec<u8>) -> Vec<u8> {
    bytes[8..12].copy_from_slice(&1u32.to_le_bytes());
    let crc_at = bytes.len() - 8 - 4;
    let crc = crc32fast::hash(&bytes[..crc_at]);
    bytes[crc_at..crc_at + 4].copy_from_slice(&crc.to_le_bytes());
    bytes
}

#[test]
fn loads_version_1_snapshots_into_database_0() {
    let mut a = engine();
    fill(&mut a);
    let v1 = as_version_1(snapshot_plain(&mut a, 100));
    let mut b = engine();
    let st = load(&mut b, 100, &v1[..]).unwrap();
    assert_eq!(st.keys, a.dbsize() - 1);
    assert_eq!(b.db(0).len() as u64, a.dbsize() - 1);
    assert!((1..16).all(|n| b.db(n).is_empty()));
    // A `select` item is not part of version 1.
    let mut c = engine();
    c.with_db(3, |e| {
        e.ks.set(b"x", Value::Str(StrValue::Int(1)), Keep::Nothing, None);
    });
    let bad = as_version_1(snapshot_plain(&mut c, 100));
    let err = load(&mut engine(), 100, &bad[..]).unwrap_err();
    assert!(err.reason.contains("unknown entry type 0x7e"), "{err}");
}

/// A loaded list is cut into quicklist nodes by the loading engine's `list-max-listpack-size`
/// (as Redis builds a list stored element by element), not by the default.
#[test]
fn loaded_lists_take_the_configured_node_size() {
    let mut a = engine();
    let mut l = ListValue::new();
    for i in 0..100 {
        l.push(format!("e{i}").as_bytes(), crate::types::list::End::Tail);
    }
    a.ks.set(b"l", Value::List(Box::new(l)), Keep::Nothing, None);
    let bytes = snapshot(&a, 100);
    let mut b = Engine::new(crate::Config {
        hash_seed: 42,
        encoding: crate::types::EncodingLimits {
            list_max_listpack_size: 2,
            ..crate::types::EncodingLimits::DEFAULT
        },
        ..Default::default()
    });
    load(&mut b, 100, &bytes[..]).unwrap();
    let i = b.ks.lookup_read(b"l", 100).unwrap();
    let Value::List(l) = b.ks.value(i) else {
        panic!("a list")
    };
    assert_eq!((l.len(), l.node_count()), (100, 50));
    assert_same(&mut a, &mut b, 100);
}
