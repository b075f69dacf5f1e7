//! Data types: one file per type, the value's API first and its commands after it
//! (redis `t_string.c` layout).
//!
//! - [`string`]: strings (integer-encoded or raw bytes); GET/SET/INCR… handlers.
//! - [`bitmap`], [`bitfield`]: bit operations on strings (SETBIT…, BITFIELD).
//! - [`hyperloglog`]: PFADD/PFCOUNT/PFMERGE on Redis's own HLL string representation.
//! - [`geo`], [`geohash`]: GEOADD/GEOSEARCH… on sorted sets, with Redis's 52-bit geohash scores.
//! - [`lcs`]: LCS, the longest common subsequence of two strings.
//! - [`sort`]: SORT / SORT_RO over lists, sets and sorted sets.
//! - [`stream`]: streams and consumer groups (a folder: entry store, groups, commands).
//! - [`list`], [`quicklist`]: lists (LPUSH/LRANGE… handlers) and their node storage.
//! - [`encoding`]: the listpack/intset thresholds (`hash-max-listpack-entries`…).
//! - [`listpack`], [`intset`]: the compact forms of small hashes and of small integer sets
//!   (small sorted sets have theirs in `zset::listpack`).
//! - [`ldouble`]: 80-bit x87 long double arithmetic and Redis's formatting, for INCRBYFLOAT.

pub mod bitfield;
pub mod bitmap;
pub mod encoding;
pub mod geo;
pub mod geohash;
pub mod hash;
pub mod hyperloglog;
pub mod intset;
pub mod lcs;
pub mod ldouble;
pub mod list;
pub mod listpack;
pub mod quicklist;
pub mod set;
pub mod sort;
pub mod stream;
pub mod string;
pub mod zset;

pub use encoding::EncodingLimits;
pub use hash::HashValue;
pub use list::ListValue;
pub use set::SetValue;
pub use stream::StreamValue;
pub use string::StrValue;
pub use zset::ZSetValue;

/// A stored value. Every command checks the type through its type module's accessors, so
/// the keyspace never looks inside a value.
///
/// The collections are boxed: a keyspace slot holds a `Value` inline, and most keys of a
/// cache are strings, so the enum must be as small as a string (24 bytes) rather than as large
/// as its largest collection header (a zset's table and skiplist are ~160 bytes). Unboxed,
/// every 64-byte string key paid ~136 bytes of padding (docs/memory.md, *Where the bytes go*);
/// a collection pays one extra pointer hop, which is negligible beside its own lookups. Sets
/// and sorted sets box inside their own value instead (two words: a box of the compact form
/// or a box of the large one), so each form is one hop from the keyspace.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Str(StrValue),
    List(Box<ListValue>),
    Hash(Box<HashValue>),
    Set(SetValue),
    ZSet(ZSetValue),
    Stream(Box<StreamValue>),
}

// The keyspace's per-key footprint depends on this (see the doc above): fail the build, not
// the memory benchmark, if a new variant or a wider string representation grows the enum.
const _: () = assert!(std::mem::size_of::<Value>() <= 24);

impl Value {
    /// TYPE / SCAN TYPE name.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Str(_) => "string",
            Value::List(_) => "list",
            Value::Hash(_) => "hash",
            Value::Set(_) => "set",
            Value::ZSet(_) => "zset",
            Value::Stream(_) => "stream",
        }
    }

    /// Bytes this value accounts for in `used_memory` (payload only; the keyspace adds the
    /// per-entry overhead).
    pub fn mem_size(&self) -> usize {
        match self {
            Value::Str(s) => s.mem_size(),
            Value::List(v) => v.mem_size(),
            Value::Hash(v) => v.mem_size(),
            Value::Set(v) => v.mem_size(),
            Value::ZSet(v) => v.mem_size(),
            Value::Stream(v) => v.mem_size(),
        }
    }
}
