//! RDB object → value (redis `rdbLoadObject`): every object type Redis 7.0 loads except
//! modules and the Redis 2.x zipmap. Each value is rebuilt through its type's own API, which
//! picks the encoding Redis would pick on load (a listpack hash past 128 entries becomes a
//! hashtable, an intset past 512 members a hashtable, a sorted set is converted after loading).
//!
//! Anything Redis would refuse (an empty collection, a duplicate member, field or consumer, a
//! NaN score, a PEL entry without its consumer, a listpack that does not parse), and anything
//! it would only catch with `sanitize-dump-payload yes` (bad listpack internals, stream
//! entries out of order), is [`Bad`].

use std::borrow::Cow;
use std::collections::BTreeMap;

use super::Bad;
use super::listpack::{Elem, parse, parse_intset, parse_ziplist};
use super::rdb::Rd;
use super::types::*;
use crate::types::stream::{Nack, StreamId, StreamValue};
use crate::types::{EncodingLimits, HashValue, ListValue, SetValue, StrValue, Value, ZSetValue};

/// Reads one object of type `ty`; `seed` gives the hash seeds of new collections, `lim` the
/// encoding thresholds. As in redis `rdbLoadObject`, a value stored element by element is
/// built under every threshold, and one stored as a listpack or intset blob stays one unless
/// it has too many entries (its element sizes are not looked at).
pub fn object(
    ty: u8,
    r: &mut Rd<'_>,
    seed: &mut dyn FnMut() -> u64,
    lim: &EncodingLimits,
) -> Result<Value, Bad> {
    let blob = EncodingLimits {
        hash_max_listpack_value: u64::MAX,
        zset_max_listpack_value: u64::MAX,
        ..*lim
    };
    let v = match ty {
        STRING => Value::Str(StrValue::from_vec(r.string()?.into_owned())),
        LIST => {
            let n = r.count()?;
            let mut l = ListValue::with_fill(lim.list_max_listpack_size);
            for _ in 0..n {
                l.push(&r.string()?, crate::types::list::End::Tail);
            }
            Value::List(Box::new(l))
        }
        SET => {
            let n = r.count()?;
            let mut s = SetValue::with_seed(seed());
            for _ in 0..n {
                if !s.insert(&r.string()?, lim) {
                    return Err(Bad);
                }
            }
            Value::Set(s)
        }
        ZSET | ZSET_2 => {
            let n = r.count()?;
            let mut z = ZSetValue::new_skiplist(seed());
            for _ in 0..n {
                let m = r.string()?;
                let score = if ty == ZSET_2 {
                    r.f64_bin()?
                } else {
                    r.f64_text()?
                };
                if z.score(&m).is_some() || !z.insert(&m, score, lim) {
                    return Err(Bad);
                }
            }
            Value::ZSet(z.from_result(lim))
        }
        HASH => {
            let n = r.count()?;
            let mut h = HashValue::with_seed(seed());
            for _ in 0..n {
                let f = r.string()?;
                let v = r.string()?;
                if !h.set(&f, &v, lim) {
                    return Err(Bad);
                }
            }
            Value::Hash(Box::new(h))
        }
        LIST_QUICKLIST | LIST_QUICKLIST_2 => {
            let n = r.count()?;
            let mut l = ListValue::with_fill(lim.list_max_listpack_size);
            for _ in 0..n {
                let container = if ty == LIST_QUICKLIST_2 {
                    r.len()?
                } else {
                    QUICKLIST_NODE_PACKED
                };
                let data = r.string()?;
                if data.is_empty() {
                    return Err(Bad);
                }
                match container {
                    QUICKLIST_NODE_PLAIN => l.push(&data, crate::types::list::End::Tail),
                    QUICKLIST_NODE_PACKED => {
                        let elems = if ty == LIST_QUICKLIST {
                            parse_ziplist(&data)?
                        } else {
                            parse(&data)?
                        };
                        for e in elems {
                            l.push(&e.bytes(), crate::types::list::End::Tail);
                        }
                    }
                    _ => return Err(Bad),
                }
            }
            Value::List(Box::new(l))
        }
        LIST_ZIPLIST => {
            let data = r.string()?;
            let mut l = ListValue::with_fill(lim.list_max_listpack_size);
            for e in parse_ziplist(&data)? {
                l.push(&e.bytes(), crate::types::list::End::Tail);
            }
            Value::List(Box::new(l))
        }
        SET_INTSET => {
            let data = r.string()?;
            let mut s = SetValue::with_seed(seed());
            let mut buf = itoa::Buffer::new();
            for v in parse_intset(&data)? {
                s.insert(buf.format(v).as_bytes(), &blob);
            }
            Value::Set(s)
        }
        HASH_ZIPLIST | HASH_LISTPACK => {
            let data = r.string()?;
            let elems = if ty == HASH_ZIPLIST {
                parse_ziplist(&data)?
            } else {
                parse(&data)?
            };
            if elems.len() % 2 != 0 {
                return Err(Bad);
            }
            let mut h = HashValue::with_seed(seed());
            for p in elems.chunks_exact(2) {
                if !h.set(&p[0].bytes(), &p[1].bytes(), &blob) {
                    return Err(Bad);
                }
            }
            Value::Hash(Box::new(h))
        }
        ZSET_ZIPLIST | ZSET_LISTPACK => {
            let data = r.string()?;
            let elems = if ty == ZSET_ZIPLIST {
                parse_ziplist(&data)?
            } else {
                parse(&data)?
            };
            if elems.len() % 2 != 0 {
                return Err(Bad);
            }
            let mut z = ZSetValue::new_skiplist(seed());
            for p in elems.chunks_exact(2) {
                let m = p[0].bytes();
                let score = match p[1] {
                    Elem::Int(v) => v as f64,
                    Elem::Str(s) => std::str::from_utf8(s)
                        .ok()
                        .and_then(|t| t.parse::<f64>().ok())
                        .ok_or(Bad)?,
                };
                if z.score(&m).is_some() || !z.insert(&m, score, &blob) {
                    return Err(Bad);
                }
            }
            Value::ZSet(z.from_result(&blob))
        }
        STREAM_LISTPACKS | STREAM_LISTPACKS_2 => {
            Value::Stream(Box::new(stream(r, ty == STREAM_LISTPACKS_2)?))
        }
        _ => return Err(Bad),
    };
    // redis: an empty collection is `emptykey`, a failed load (streams may be empty).
    let empty = match &v {
        Value::List(l) => l.is_empty(),
        Value::Set(s) => s.is_empty(),
        Value::Hash(h) => h.is_empty(),
        Value::ZSet(z) => z.is_empty(),
        Value::Str(_) | Value::Stream(_) => false,
    };
    if empty { Err(Bad) } else { Ok(v) }
}

fn raw_id(r: &mut Rd<'_>) -> Result<StreamId, Bad> {
    let b = r.take(16)?;
    Ok(StreamId::new(
        u64::from_be_bytes(b[..8].try_into().expect("8")),
        u64::from_be_bytes(b[8..].try_into().expect("8")),
    ))
}

/// A stream entry read from a listpack: deleted, ID, field/value pairs.
type LoadEntry<'a> = (bool, StreamId, Vec<Cow<'a, [u8]>>);

/// A group PEL entry read before its owner: delivery time, delivery count, the consumer
/// whose PEL names it.
type PendingLoad = (u64, u64, Option<Box<[u8]>>);

/// Stream entry flags (redis `STREAM_ITEM_FLAG_*`).
const FLAG_DELETED: i64 = 1;
const FLAG_SAMEFIELDS: i64 = 2;

/// A stream (`v2`: Redis 7.0's type with first ID, tombstone ID, entries added and group
/// offsets). Each listpack becomes one node as it is, tombstones included
/// ([`StreamValue::load_node`]), so DUMP gives back the same bytes; the counters and groups
/// are taken as the payload gives them.
fn stream(r: &mut Rd<'_>, v2: bool) -> Result<StreamValue, Bad> {
    let mut st = StreamValue::new();
    let nodes = r.count()?;
    let mut last_master: Option<StreamId> = None;
    for _ in 0..nodes {
        let key = r.string()?;
        if key.len() != 16 {
            return Err(Bad);
        }
        let master = StreamId::new(
            u64::from_be_bytes(key[..8].try_into().expect("8")),
            u64::from_be_bytes(key[8..].try_into().expect("8")),
        );
        if last_master.is_some_and(|m| m >= master) {
            return Err(Bad);
        }
        last_master = Some(master);
        let lp = r.string()?;
        let elems = parse(&lp)?;
        let mut it = elems.into_iter();
        let mut next = || it.next().ok_or(Bad);
        // Master entry: count, deleted, number of fields, the fields, 0.
        let count = next()?.int()?;
        let deleted = next()?.int()?;
        let nmaster = usize::try_from(next()?.int()?).map_err(|_| Bad)?;
        let mut master_fields = Vec::new();
        for _ in 0..nmaster {
            master_fields.push(next()?.bytes());
        }
        if next()?.int()? != 0 {
            return Err(Bad);
        }
        let mut entries: Vec<LoadEntry<'_>> = Vec::new();
        while let Ok(flags) = next() {
            let flags = flags.int()?;
            let ms = master.ms.wrapping_add(next()?.int()? as u64);
            let seq = master.seq.wrapping_add(next()?.int()? as u64);
            let mut pairs = Vec::new();
            let nf = if flags & FLAG_SAMEFIELDS != 0 {
                for f in &master_fields {
                    pairs.push(f.clone());
                    pairs.push(next()?.bytes());
                }
                master_fields.len()
            } else {
                let nf = usize::try_from(next()?.int()?).map_err(|_| Bad)?;
                for _ in 0..nf {
                    pairs.push(next()?.bytes());
                    pairs.push(next()?.bytes());
                }
                nf
            };
            let lp_count = next()?.int()?;
            let want = if flags & FLAG_SAMEFIELDS != 0 {
                nf + 3
            } else {
                2 * nf + 4
            };
            if lp_count != want as i64 || nf == 0 {
                return Err(Bad);
            }
            entries.push((flags & FLAG_DELETED != 0, StreamId::new(ms, seq), pairs));
        }
        let live = entries.iter().filter(|e| !e.0).count() as i64;
        let dead = entries.len() as i64 - live;
        if live != count || dead != deleted || entries.is_empty() {
            return Err(Bad);
        }
        let fields: Vec<&[u8]> = master_fields.iter().map(|f| &**f).collect();
        let entries: Vec<(bool, StreamId, Vec<&[u8]>)> = entries
            .iter()
            .map(|(d, id, p)| (*d, *id, p.iter().map(|x| &**x).collect()))
            .collect();
        if !st.load_node(master, &fields, &entries) {
            return Err(Bad);
        }
    }
    let length = r.len()?;
    let last_id = StreamId::new(r.len()?, r.len()?);
    if length != st.length || last_id < st.last_id {
        return Err(Bad);
    }
    st.last_id = last_id;
    if v2 {
        st.first_id = StreamId::new(r.len()?, r.len()?);
        st.max_deleted_entry_id = StreamId::new(r.len()?, r.len()?);
        st.entries_added = r.len()?;
    } else {
        // redis: the offset starts at the length; the first ID is the first entry's.
        let first = st.entries().next().map_or(StreamId::MIN, |e| e.id);
        st.first_id = first;
        st.max_deleted_entry_id = StreamId::MIN;
        st.entries_added = st.length;
    }
    let ngroups = r.count()?;
    for _ in 0..ngroups {
        let name = r.string()?.into_owned();
        let glast = StreamId::new(r.len()?, r.len()?);
        let entries_read = if v2 {
            r.len()? as i64
        } else {
            st.estimate_distance(glast).map_or(-1, |d| d as i64)
        };
        if !st.create_group(&name, glast, entries_read) {
            return Err(Bad);
        }
        // The group's PEL, owners resolved by the consumers' PELs that follow.
        let npel = r.count()?;
        let mut pel: BTreeMap<StreamId, PendingLoad> = BTreeMap::new();
        for _ in 0..npel {
            let id = raw_id(r)?;
            let time = r.ms()?;
            let count = r.len()?;
            if pel.insert(id, (time, count, None)).is_some() {
                return Err(Bad);
            }
        }
        let nconsumers = r.count()?;
        for _ in 0..nconsumers {
            let cname = r.string()?.into_owned();
            let seen = r.ms()?;
            let created = st
                .group_mut(&name, |g| g.create_consumer(&cname, seen))
                .unwrap_or(false);
            if !created {
                return Err(Bad);
            }
            let n = r.count()?;
            for _ in 0..n {
                let id = raw_id(r)?;
                match pel.get_mut(&id) {
                    Some((_, _, owner @ None)) => *owner = Some(cname.clone().into_boxed_slice()),
                    _ => return Err(Bad),
                }
            }
        }
        for (id, (delivery_time, delivery_count, owner)) in pel {
            let consumer = owner.ok_or(Bad)?;
            st.group_mut(&name, |g| {
                g.load_nack(
                    id,
                    Nack {
                        delivery_time,
                        delivery_count,
                        consumer,
                    },
                )
            });
        }
    }
    Ok(st)
}
