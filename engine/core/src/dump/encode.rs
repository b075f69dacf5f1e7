//! Value → RDB object (redis `rdbSaveObjectType` + `rdbSaveObject`), choosing the type Redis
//! 7.0 would write for the same encoding.

use super::listpack::{LpWriter, write_intset};
use super::rdb::{put_f64, put_len, put_ms, put_string};
use super::types::*;
use crate::types::stream::{StreamId, StreamValue};
use crate::types::{HashValue, ListValue, SetValue, StrValue, Value, ZSetValue};

/// Appends the object type byte and the object; `list_fill` is `list-max-listpack-size`
/// (how a list's quicklist nodes are split).
pub fn object(out: &mut Vec<u8>, v: &Value, list_fill: i64) {
    match v {
        Value::Str(s) => {
            out.push(STRING);
            string(out, s);
        }
        Value::List(l) => {
            out.push(LIST_QUICKLIST_2);
            list(out, l, list_fill);
        }
        Value::Set(s) => set(out, s),
        Value::Hash(h) => hash(out, h),
        Value::ZSet(z) => zset(out, z),
        Value::Stream(s) => {
            out.push(STREAM_LISTPACKS_2);
            stream(out, s);
        }
    }
}

fn string(out: &mut Vec<u8>, s: &StrValue) {
    let mut buf = itoa::Buffer::new();
    put_string(out, s.bytes(&mut buf));
}

/// quicklist `optimization_level`: the node size limits of `list-max-listpack-size` -1…-5.
const OPTIMIZATION_LEVEL: [usize; 5] = [4096, 8192, 16384, 32768, 65536];
/// quicklist `SIZE_SAFETY_LIMIT`: the size limit of a count-limited node.
const SIZE_SAFETY_LIMIT: usize = 8192;
/// quicklist `SIZE_ESTIMATE_OVERHEAD`.
const SIZE_ESTIMATE_OVERHEAD: usize = 8;
/// quicklist `packed_threshold`: larger elements get a plain node of their own.
const PACKED_THRESHOLD: usize = 1 << 30;
/// quicklist `FILL_MAX`.
const FILL_MAX: i64 = (1 << 15) - 1;

/// Whether a node of `lp_bytes` holding `count` elements takes one more of `sz` bytes
/// (redis `_quicklistNodeAllowInsert` with `fill` clamped as `quicklistSetFill` does).
fn node_allows(fill: i64, lp_bytes: usize, count: usize, sz: usize) -> bool {
    let fill = fill.clamp(-5, FILL_MAX);
    let new_sz = lp_bytes + sz + SIZE_ESTIMATE_OVERHEAD;
    if fill < 0 {
        return new_sz <= OPTIMIZATION_LEVEL[(-fill - 1) as usize];
    }
    new_sz <= SIZE_SAFETY_LIMIT && (count as i64) < fill
}

/// A quicklist of listpacks, split as pushing every element at the tail would split it.
fn list(out: &mut Vec<u8>, l: &ListValue, fill: i64) {
    enum Node {
        Packed(Vec<u8>),
        Plain(Vec<u8>),
    }
    let mut nodes: Vec<Node> = Vec::new();
    let mut cur: Option<(LpWriter, usize)> = None;
    for el in l.iter() {
        if el.len() >= PACKED_THRESHOLD {
            if let Some((w, _)) = cur.take() {
                nodes.push(Node::Packed(w.finish()));
            }
            nodes.push(Node::Plain(el.to_vec()));
            continue;
        }
        if let Some((w, n)) = &cur
            && !node_allows(fill, w.bytes(), *n, el.len())
        {
            let (w, _) = cur.take().expect("a node");
            nodes.push(Node::Packed(w.finish()));
        }
        let (w, n) = cur.get_or_insert_with(|| (LpWriter::new(), 0));
        w.str(el);
        *n += 1;
    }
    if let Some((w, _)) = cur {
        nodes.push(Node::Packed(w.finish()));
    }
    put_len(out, nodes.len() as u64);
    for n in nodes {
        let (container, b) = match n {
            Node::Plain(b) => (QUICKLIST_NODE_PLAIN, b),
            Node::Packed(b) => (QUICKLIST_NODE_PACKED, b),
        };
        put_len(out, container);
        put_len(out, b.len() as u64);
        out.extend_from_slice(&b);
    }
}

fn set(out: &mut Vec<u8>, s: &SetValue) {
    if s.encoding() == "intset" {
        out.push(SET_INTSET);
        let vals = s.ints().map_or_else(Vec::new, Iterator::collect);
        let blob = write_intset(vals);
        put_len(out, blob.len() as u64);
        out.extend_from_slice(&blob);
    } else {
        out.push(SET);
        put_len(out, s.len() as u64);
        for m in s.iter() {
            put_string(out, &m);
        }
    }
}

fn hash(out: &mut Vec<u8>, h: &HashValue) {
    if h.encoding() == "listpack" {
        out.push(HASH_LISTPACK);
        let mut w = LpWriter::new();
        for (f, v) in h.iter() {
            w.str(f);
            w.str(v);
        }
        put_blob(out, &w.finish());
    } else {
        out.push(HASH);
        put_len(out, h.len() as u64);
        for (f, v) in h.iter() {
            put_string(out, f);
            put_string(out, v);
        }
    }
}

fn zset(out: &mut Vec<u8>, z: &ZSetValue) {
    if z.is_listpack() {
        out.push(ZSET_LISTPACK);
        let mut w = LpWriter::new();
        let mut text = Vec::new();
        for (m, score) in z.iter() {
            w.str(m);
            text.clear();
            crate::types::zset::score::fmt_d2string(score, &mut text);
            w.str(&text);
        }
        put_blob(out, &w.finish());
    } else {
        out.push(ZSET_2);
        put_len(out, z.len() as u64);
        // Highest score first, as redis walks its skiplist from the tail.
        let all: Vec<(&[u8], f64)> = z.iter().collect();
        for (m, score) in all.into_iter().rev() {
            put_string(out, m);
            put_f64(out, score);
        }
    }
}

/// A string that is a blob (a listpack, an intset): never integer-encoded.
fn put_blob(out: &mut Vec<u8>, b: &[u8]) {
    put_len(out, b.len() as u64);
    out.extend_from_slice(b);
}

fn raw_id(out: &mut Vec<u8>, id: StreamId) {
    out.extend_from_slice(&id.ms.to_be_bytes());
    out.extend_from_slice(&id.seq.to_be_bytes());
}

/// `RDB_TYPE_STREAM_LISTPACKS_2`: one listpack per node (master entry, then each entry with
/// its flags, ID deltas, fields or values and element count, tombstones included), the
/// counters, then every group with its PEL and consumers.
fn stream(out: &mut Vec<u8>, s: &StreamValue) {
    put_len(out, s.node_count() as u64);
    for (master, node) in s.nodes() {
        let mut key = Vec::with_capacity(16);
        raw_id(&mut key, master);
        put_blob(out, &key);
        let mut w = LpWriter::new();
        w.int(i64::from(node.live()));
        w.int(i64::from(node.deleted()));
        let mf = node.master_fields();
        w.int(mf.len() as i64);
        for f in mf {
            w.str(f);
        }
        w.int(0);
        for e in node.raw_entries() {
            w.int(i64::from(e.flags));
            w.int(e.ms_delta as i64);
            w.int(e.seq_delta as i64);
            let count = if e.same_fields() {
                for v in &e.values {
                    w.str(v);
                }
                e.values.len() + 3
            } else {
                w.int(e.values.len() as i64);
                for (f, v) in e.fields.iter().zip(&e.values) {
                    w.str(f);
                    w.str(v);
                }
                2 * e.values.len() + 4
            };
            w.int(count as i64);
        }
        put_blob(out, &w.finish());
    }
    put_len(out, s.length);
    put_len(out, s.last_id.ms);
    put_len(out, s.last_id.seq);
    put_len(out, s.first_id.ms);
    put_len(out, s.first_id.seq);
    put_len(out, s.max_deleted_entry_id.ms);
    put_len(out, s.max_deleted_entry_id.seq);
    put_len(out, s.entries_added);
    put_len(out, s.groups.len() as u64);
    for (name, g) in &s.groups {
        put_string(out, name);
        put_len(out, g.last_id.ms);
        put_len(out, g.last_id.seq);
        put_len(out, g.entries_read as u64);
        put_len(out, g.pel().len() as u64);
        for (id, nack) in g.pel() {
            raw_id(out, *id);
            put_ms(out, nack.delivery_time);
            put_len(out, nack.delivery_count);
        }
        put_len(out, g.consumers().len() as u64);
        for (cname, c) in g.consumers() {
            put_string(out, cname);
            put_ms(out, c.seen_time);
            put_len(out, c.pel.len() as u64);
            for id in &c.pel {
                raw_id(out, *id);
            }
        }
    }
}
