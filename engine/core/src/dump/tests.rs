//! Codec tests: payloads redis-server 7.0.15 produced (captured with `DUMP`, written here as
//! escaped bytes), round trips of every type and encoding, and corrupt payloads.
//! tests/tests/dump.rs checks the same against a live redis-server for larger values.

use super::*;
use crate::types::stream::{NodeLimits, StreamId, StreamValue};
use crate::types::{HashValue, ListValue, SetValue, StrValue, ZSetValue};

const LIM: crate::types::EncodingLimits = crate::types::EncodingLimits::DEFAULT;

fn seed() -> impl FnMut() -> u64 {
    let mut n = 0;
    move || {
        n += 1;
        n
    }
}

fn round_trip(v: &Value) -> Value {
    let p = serialize(v);
    assert!(verify(&p));
    deserialize(&p, &mut seed(), &LIM).expect("decodes")
}

/// DUMPs of redis-server 7.0.15: `SET str hello`, `RPUSH list a 1 hello`,
/// `SADD set 3 -2 70000`, `HSET hash f v n 12`, `ZADD zset 1.5 a 2 b`,
/// `XADD stream 1-1 f v`, `XADD stream 2-0 f w g 1`, `XGROUP CREATE stream grp 0`.
const REDIS: &[(&str, &[u8])] = &[
    ("str", b"\x00\x05\x68\x65\x6c\x6c\x6f\x0a\x00\x63\x72\xdf\x76\x65\x34\x20\x0a"),
    ("list", b"\x12\x01\x02\x13\x13\x00\x00\x00\x03\x00\x81\x61\x02\x01\x01\x85\x68\x65\x6c\x6c\x6f\x06\xff\x0a\x00\xa2\x10\x38\xa5\x16\xcf\x7d\x51"),
    ("set", b"\x0b\x14\x04\x00\x00\x00\x03\x00\x00\x00\xfe\xff\xff\xff\x03\x00\x00\x00\x70\x11\x01\x00\x0a\x00\xc3\x4c\xe8\x77\x80\xf3\x73\x4f"),
    ("hash", b"\x10\x12\x12\x00\x00\x00\x04\x00\x81\x66\x02\x81\x76\x02\x81\x6e\x02\x0c\x01\xff\x0a\x00\x01\x36\x94\x81\xd3\x5b\x89\x74"),
    ("zset", b"\x11\x14\x14\x00\x00\x00\x04\x00\x81\x61\x02\x83\x31\x2e\x35\x04\x81\x62\x02\x02\x01\xff\x0a\x00\xfa\x02\xb4\x25\xaf\x18\x87\x63"),
    ("stream", b"\x13\x01\x10\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x01\x33\x33\x00\x00\x00\x13\x00\x02\x01\x00\x01\x01\x01\x81\x66\x02\x00\x01\x02\x01\x00\x01\x00\x01\x81\x76\x02\x04\x01\x00\x01\x01\x01\xdf\xff\x02\x02\x01\x81\x66\x02\x81\x77\x02\x81\x67\x02\x01\x01\x08\x01\xff\x02\x02\x00\x01\x01\x00\x00\x02\x01\x03\x67\x72\x70\x00\x00\x81\xff\xff\xff\xff\xff\xff\xff\xff\x00\x00\x0a\x00\xe7\x7a\x37\x96\x0c\xbe\x94\x61"),
];
const REDIS_STR: &[u8] = REDIS[0].1;

#[test]
fn redis_payloads_decode_and_dump_to_the_same_bytes() {
    for (name, p) in REDIS {
        let v = deserialize(p, &mut seed(), &LIM).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        assert_eq!(&serialize(&v), p, "{name}");
    }
    let v = deserialize(REDIS_STR, &mut seed(), &LIM).unwrap();
    assert_eq!(v, Value::Str(StrValue::from_slice(b"hello")));
}

#[test]
fn strings_round_trip() {
    for s in [
        &b"hello"[..],
        b"12",
        b"-5",
        b"100000",
        b"9999999999",
        b"",
        b"01",
    ] {
        let v = Value::Str(StrValue::from_slice(s));
        assert_eq!(round_trip(&v), v);
    }
}

#[test]
fn collections_round_trip() {
    let mut l = ListValue::new();
    for i in 0..3000 {
        l.push(
            format!("element-{i}").as_bytes(),
            crate::types::list::End::Tail,
        );
    }
    l.push(b"7", crate::types::list::End::Tail);
    let v = Value::List(Box::new(l));
    assert_eq!(round_trip(&v), v);

    for n in [3, 600] {
        let mut s = SetValue::with_seed(1);
        for i in 0..n {
            s.insert(format!("{}", i * 7 - 5).as_bytes(), &LIM);
        }
        let v = Value::Set(s);
        let back = round_trip(&v);
        assert_eq!(back, v);
        let Value::Set(b) = &back else { panic!() };
        assert_eq!(b.encoding(), if n == 3 { "intset" } else { "hashtable" });
    }
    let mut s = SetValue::with_seed(1);
    s.insert(b"a", &LIM);
    s.insert(b"b", &LIM);
    let v = Value::Set(s);
    assert_eq!(round_trip(&v), v);

    for n in [2, 200] {
        let mut h = HashValue::with_seed(1);
        for i in 0..n {
            h.set(format!("f{i}").as_bytes(), format!("{i}").as_bytes(), &LIM);
        }
        let v = Value::Hash(Box::new(h));
        assert_eq!(round_trip(&v), v);
    }

    for n in [2, 200] {
        let mut z = ZSetValue::new_skiplist(1);
        for i in 0..n {
            z.insert(format!("m{i}").as_bytes(), f64::from(i) * 1.5 - 3.0, &LIM);
        }
        z.insert(b"inf", f64::INFINITY, &LIM);
        let z = z.from_result(&LIM);
        let enc = z.encoding();
        let v = Value::ZSet(z);
        let back = round_trip(&v);
        let Value::ZSet(b) = &back else { panic!() };
        assert_eq!(b.encoding(), enc);
        assert_eq!(back, v);
    }
}

#[test]
fn stream_with_groups_round_trips() {
    let mut st = StreamValue::new();
    for i in 1..=250u64 {
        let fields: Vec<Vec<u8>> = if i % 3 == 0 {
            vec![b"other".to_vec(), i.to_string().into_bytes()]
        } else {
            vec![
                b"a".to_vec(),
                b"x".to_vec(),
                b"b".to_vec(),
                i.to_string().into_bytes(),
            ]
        };
        let refs: Vec<&[u8]> = fields.iter().map(Vec::as_slice).collect();
        st.append(
            &refs,
            StreamId::new(1000 + i, i % 2),
            true,
            NodeLimits::default(),
        )
        .unwrap();
    }
    st.delete(StreamId::new(1005, 1));
    assert!(st.create_group(b"g1", StreamId::new(1010, 0), 10));
    st.group_mut(b"g1", |g| {
        g.create_consumer(b"alice", 77);
        g.create_consumer(b"bob", 78);
        g.deliver(StreamId::new(1002, 0), b"alice", 90);
        g.deliver(StreamId::new(1003, 1), b"bob", 91);
    });
    assert!(st.create_group(b"12", StreamId::MIN, -1));
    let nodes = st.node_count();
    let v = Value::Stream(Box::new(st));
    let back = round_trip(&v);
    assert_eq!(back, v);
    // The node layout and the tombstone survive: the same bytes again.
    assert_eq!(serialize(&back), serialize(&v));
    let Value::Stream(b) = &back else { panic!() };
    assert_eq!(b.node_count(), nodes);
    // An empty stream (all deleted) keeps its counters.
    let mut e = StreamValue::new();
    e.append(
        &[b"f", b"v"],
        StreamId::new(5, 5),
        true,
        NodeLimits::default(),
    )
    .unwrap();
    e.delete(StreamId::new(5, 5));
    let v = Value::Stream(Box::new(e));
    assert_eq!(round_trip(&v), v);
}

#[test]
fn bad_payloads_are_refused_never_panic() {
    assert_eq!(
        deserialize(b"short", &mut seed(), &LIM),
        Err(PayloadError::VersionOrChecksum)
    );
    let mut p = REDIS_STR.to_vec();
    p[3] ^= 1;
    assert_eq!(
        deserialize(&p, &mut seed(), &LIM),
        Err(PayloadError::VersionOrChecksum)
    );
    // A newer RDB version with a right CRC.
    let mut p = REDIS_STR[..REDIS_STR.len() - 10].to_vec();
    p.extend_from_slice(&11u16.to_le_bytes());
    let crc = rdb::crc64(&p);
    p.extend_from_slice(&crc.to_le_bytes());
    assert_eq!(
        deserialize(&p, &mut seed(), &LIM),
        Err(PayloadError::VersionOrChecksum)
    );
    // Every truncation and byte flip of real payloads, re-checksummed: no panic.
    let mut st = StreamValue::new();
    st.append(
        &[b"f", b"v"],
        StreamId::new(5, 5),
        true,
        NodeLimits::default(),
    )
    .unwrap();
    st.create_group(b"g", StreamId::MIN, 0);
    st.group_mut(b"g", |g| g.deliver(StreamId::new(5, 5), b"c", 1));
    let mut z = ZSetValue::new_skiplist(1);
    z.insert(b"m", 1.5, &LIM);
    let mut h = HashValue::with_seed(1);
    h.set(b"f", b"v", &LIM);
    let mut l = ListValue::new();
    l.push(b"x", crate::types::list::End::Tail);
    for v in [
        Value::Stream(Box::new(st)),
        Value::ZSet(z.from_result(&LIM)),
        Value::Hash(Box::new(h)),
        Value::List(Box::new(l)),
    ] {
        let p = serialize(&v);
        let body = &p[..p.len() - 10];
        for i in 0..body.len() {
            for cut in [true, false] {
                let mut b = body.to_vec();
                if cut {
                    b.truncate(i);
                } else {
                    b[i] ^= 0xA5;
                }
                b.extend_from_slice(&RDB_VERSION.to_le_bytes());
                let crc = rdb::crc64(&b);
                b.extend_from_slice(&crc.to_le_bytes());
                let _ = deserialize(&b, &mut seed(), &LIM);
            }
        }
    }
}

#[test]
fn list_nodes_split_as_redis_fill_says() {
    let mut l = ListValue::new();
    for i in 0..10 {
        l.push(format!("{i}").as_bytes(), crate::types::list::End::Tail);
    }
    let v = Value::List(Box::new(l));
    // `list-max-listpack-size 3`: nodes of 3, 3, 3, 1; 0: one element per node.
    for (fill, nodes) in [(3, 4u8), (0, 10), (-2, 1), (-1, 1)] {
        let p = serialize_with(&v, fill);
        assert_eq!(
            (p[0], p[1]),
            (types::LIST_QUICKLIST_2, nodes),
            "fill {fill}"
        );
        assert_eq!(deserialize(&p, &mut seed(), &LIM).unwrap(), v);
    }
}
