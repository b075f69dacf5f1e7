//! A stream node: entries packed in one byte vector (see the module doc of `stream`), and the
//! listpack sizes Redis's node would have, so nodes split where Redis splits them.

use super::StreamId;

/// Entry flag: deleted (a tombstone).
pub(super) const FLAG_DELETED: u8 = 1;
/// Entry flag: same field names as the node's master entry, only values stored.
pub(super) const FLAG_SAMEFIELDS: u8 = 2;
/// Bytes accounted per node beyond its packed bytes: the tree slot (key + value), vector
/// headers and allocator rounding.
const NODE_OVERHEAD: usize = 96;

// ---------------------------------------------------------------------------------------------
// Listpack sizes (redis `listpack.c`), to split nodes where Redis does
// ---------------------------------------------------------------------------------------------

/// Bytes of the backlen of an element whose encoding is `l` bytes (`lpEncodeBacklen`).
fn lp_backlen(l: usize) -> usize {
    match l {
        0..=127 => 1,
        128..=16382 => 2,
        16383..=2097150 => 3,
        2097151..=268435454 => 4,
        _ => 5,
    }
}

/// Bytes a listpack integer element takes (encoding + backlen).
pub fn lp_int_len(v: i64) -> usize {
    let enc = if (0..=127).contains(&v) {
        1
    } else if (-4096..=4095).contains(&v) {
        2
    } else if (-32768..=32767).contains(&v) {
        3
    } else if (-8_388_608..=8_388_607).contains(&v) {
        4
    } else if (-2_147_483_648..=2_147_483_647).contains(&v) {
        5
    } else {
        9
    };
    enc + 1
}

/// Bytes a listpack string element takes: strings that look like integers are stored as
/// integers (`lpStringToInt64`).
pub fn lp_str_len(s: &[u8]) -> usize {
    if let Some(v) = resp::parse_i64(s) {
        return lp_int_len(v);
    }
    let enc = if s.len() < 64 {
        1 + s.len()
    } else if s.len() < 4096 {
        2 + s.len()
    } else {
        5 + s.len()
    };
    enc + lp_backlen(enc)
}

// ---------------------------------------------------------------------------------------------
// Varints for our own packing
// ---------------------------------------------------------------------------------------------

pub(super) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub(super) fn get_varint(data: &[u8], at: &mut usize) -> u64 {
    let mut v: u64 = 0;
    let mut shift = 0;
    loop {
        let b = data[*at];
        *at += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return v;
        }
        shift += 7;
    }
}

pub(super) fn get_bytes<'a>(data: &'a [u8], at: &mut usize) -> &'a [u8] {
    let n = get_varint(data, at) as usize;
    let s = &data[*at..*at + n];
    *at += n;
    s
}

// ---------------------------------------------------------------------------------------------
// Nodes
// ---------------------------------------------------------------------------------------------

/// One node: entries packed in `data` (see the module doc), in ID order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Node {
    /// Field names of the node's first entry.
    pub(super) master_fields: Vec<Box<[u8]>>,
    /// Packed entries: flags byte, ms delta, seq delta (wrapping), then either
    /// `nfields (field value)*` or, with [`FLAG_SAMEFIELDS`], the values alone; strings as
    /// varint length + bytes.
    pub(super) data: Vec<u8>,
    /// Offset of each entry (deleted ones included) in `data`.
    pub(super) offs: Vec<u32>,
    /// Entries not deleted.
    pub(super) live: u32,
    /// Entries marked deleted.
    pub(super) deleted: u32,
    /// The Redis listpack's size less its header, EOF and count/deleted elements.
    pub(super) lp_body: usize,
}

impl Node {
    /// The size Redis's listpack for this node has (`lpBytes`).
    pub(super) fn lp_bytes(&self) -> usize {
        7 + lp_int_len(i64::from(self.live)) + lp_int_len(i64::from(self.deleted)) + self.lp_body
    }

    /// Bytes accounted for this node.
    pub(super) fn mem(&self) -> usize {
        NODE_OVERHEAD
            + self.data.len()
            + self.offs.len() * 4
            + self
                .master_fields
                .iter()
                .map(|f| f.len() + 16)
                .sum::<usize>()
    }

    pub(super) fn total(&self) -> usize {
        self.offs.len()
    }

    /// The ID and flags of entry `idx`, and the offset of its payload.
    pub(super) fn head(&self, master: StreamId, idx: usize) -> (StreamId, u8, usize) {
        let mut at = self.offs[idx] as usize;
        let flags = self.data[at];
        at += 1;
        let dms = get_varint(&self.data, &mut at);
        let dseq = get_varint(&self.data, &mut at);
        (
            StreamId::new(master.ms.wrapping_add(dms), master.seq.wrapping_add(dseq)),
            flags,
            at,
        )
    }

    /// Index of the entry with ID `id` (deleted or not).
    pub(super) fn find(&self, master: StreamId, id: StreamId) -> Option<usize> {
        let (mut lo, mut hi) = (0, self.total());
        while lo < hi {
            let mid = (lo + hi) / 2;
            let (mid_id, _, _) = self.head(master, mid);
            match mid_id.cmp(&id) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Some(mid),
            }
        }
        None
    }

    /// Index of the first entry with ID `>= id`.
    pub(super) fn lower_bound(&self, master: StreamId, id: StreamId) -> usize {
        let (mut lo, mut hi) = (0, self.total());
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.head(master, mid).0 < id {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// Appends the entry `id` (field, value… in `pairs`), marked deleted if `deleted`, with
    /// the listpack size Redis's node grows by (`streamAppendItem`).
    pub(super) fn push_entry(
        &mut self,
        master: StreamId,
        id: StreamId,
        pairs: &[&[u8]],
        deleted: bool,
    ) {
        let nfields = pairs.len() / 2;
        let same = nfields == self.master_fields.len()
            && pairs
                .iter()
                .step_by(2)
                .zip(&self.master_fields)
                .all(|(a, b)| **a == **b);
        let flags = if same { FLAG_SAMEFIELDS } else { 0 } | if deleted { FLAG_DELETED } else { 0 };
        self.offs.push(self.data.len() as u32);
        self.data.push(flags);
        let dms = id.ms.wrapping_sub(master.ms);
        let dseq = id.seq.wrapping_sub(master.seq);
        put_varint(&mut self.data, dms);
        put_varint(&mut self.data, dseq);
        let mut lp =
            lp_int_len(i64::from(flags)) + lp_int_len(dms as i64) + lp_int_len(dseq as i64);
        if !same {
            put_varint(&mut self.data, nfields as u64);
            lp += lp_int_len(nfields as i64);
        }
        for pair in pairs.chunks_exact(2) {
            if !same {
                put_varint(&mut self.data, pair[0].len() as u64);
                self.data.extend_from_slice(pair[0]);
                lp += lp_str_len(pair[0]);
            }
            put_varint(&mut self.data, pair[1].len() as u64);
            self.data.extend_from_slice(pair[1]);
            lp += lp_str_len(pair[1]);
        }
        let lp_count = if same { nfields + 3 } else { 2 * nfields + 4 };
        lp += lp_int_len(lp_count as i64);
        self.lp_body += lp;
        if deleted {
            self.deleted += 1;
        } else {
            self.live += 1;
        }
    }

    /// Marks entry `idx` deleted; returns false if it already was.
    pub(super) fn mark_deleted(&mut self, idx: usize) -> bool {
        let at = self.offs[idx] as usize;
        if self.data[at] & FLAG_DELETED != 0 {
            return false;
        }
        self.data[at] |= FLAG_DELETED;
        self.live -= 1;
        self.deleted += 1;
        true
    }
}

/// One entry exactly as the node holds it, tombstones included: what Redis's listpack for
/// the node has (DUMP writes it, `crate::dump`).
pub struct RawEntry<'a> {
    pub flags: u8,
    /// ID minus the node's master ID, each part wrapping (the listpack stores them as i64).
    pub ms_delta: u64,
    pub seq_delta: u64,
    /// Field names; empty when the entry uses the master entry's (`SAMEFIELDS`).
    pub fields: Vec<&'a [u8]>,
    pub values: Vec<&'a [u8]>,
}

impl RawEntry<'_> {
    pub fn same_fields(&self) -> bool {
        self.flags & FLAG_SAMEFIELDS != 0
    }
}

impl Node {
    /// The master entry's field names.
    pub fn master_fields(&self) -> &[Box<[u8]>] {
        &self.master_fields
    }

    /// Live entries (the master entry's count).
    pub fn live(&self) -> u32 {
        self.live
    }

    /// Entries marked deleted (the master entry's deleted count).
    pub fn deleted(&self) -> u32 {
        self.deleted
    }

    /// Every entry in order, tombstones included.
    pub fn raw_entries(&self) -> impl Iterator<Item = RawEntry<'_>> {
        self.offs.iter().map(move |&off| {
            let mut at = off as usize;
            let flags = self.data[at];
            at += 1;
            let ms_delta = get_varint(&self.data, &mut at);
            let seq_delta = get_varint(&self.data, &mut at);
            let same = flags & FLAG_SAMEFIELDS != 0;
            let n = if same {
                self.master_fields.len()
            } else {
                get_varint(&self.data, &mut at) as usize
            };
            let mut fields = Vec::new();
            let mut values = Vec::with_capacity(n);
            for _ in 0..n {
                if !same {
                    fields.push(get_bytes(&self.data, &mut at));
                }
                values.push(get_bytes(&self.data, &mut at));
            }
            RawEntry {
                flags,
                ms_delta,
                seq_delta,
                fields,
                values,
            }
        })
    }
}

/// One entry as read from the store.
#[derive(Clone, Copy)]
pub struct EntryRef<'a> {
    pub id: StreamId,
    pub(super) node: &'a Node,
    pub(super) flags: u8,
    pub(super) at: usize,
}

impl<'a> EntryRef<'a> {
    /// Number of field-value pairs.
    pub fn num_fields(&self) -> usize {
        if self.flags & FLAG_SAMEFIELDS != 0 {
            self.node.master_fields.len()
        } else {
            let mut at = self.at;
            get_varint(&self.node.data, &mut at) as usize
        }
    }

    /// The field-value pairs in order.
    pub fn fields(&self) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + 'a {
        let node = self.node;
        let same = self.flags & FLAG_SAMEFIELDS != 0;
        let mut at = self.at;
        let n = if same {
            node.master_fields.len()
        } else {
            get_varint(&node.data, &mut at) as usize
        };
        (0..n).map(move |i| {
            let f: &'a [u8] = if same {
                &node.master_fields[i]
            } else {
                get_bytes(&node.data, &mut at)
            };
            let v = get_bytes(&node.data, &mut at);
            (f, v)
        })
    }
}
