//! RDB object types (redis 7.0 `rdb.h`, `RDB_TYPE_*`) and quicklist node containers.

pub const STRING: u8 = 0;
pub const LIST: u8 = 1;
pub const SET: u8 = 2;
/// Scores as `%.17g` text (RDB version < 8).
pub const ZSET: u8 = 3;
pub const HASH: u8 = 4;
/// Scores as binary doubles.
pub const ZSET_2: u8 = 5;
pub const MODULE: u8 = 6;
pub const MODULE_2: u8 = 7;
pub const HASH_ZIPMAP: u8 = 9;
pub const LIST_ZIPLIST: u8 = 10;
pub const SET_INTSET: u8 = 11;
pub const ZSET_ZIPLIST: u8 = 12;
pub const HASH_ZIPLIST: u8 = 13;
/// Quicklist of ziplists (Redis 3.2–6.2).
pub const LIST_QUICKLIST: u8 = 14;
/// Streams of Redis 5.0–6.2 (no first ID, tombstone ID, entries added or group offsets).
pub const STREAM_LISTPACKS: u8 = 15;
pub const HASH_LISTPACK: u8 = 16;
pub const ZSET_LISTPACK: u8 = 17;
/// Quicklist of listpacks or plain nodes (Redis 7.0).
pub const LIST_QUICKLIST_2: u8 = 18;
/// Streams of Redis 7.0.
pub const STREAM_LISTPACKS_2: u8 = 19;

/// `QUICKLIST_NODE_CONTAINER_PLAIN`: one element stored as is.
pub const QUICKLIST_NODE_PLAIN: u64 = 1;
/// `QUICKLIST_NODE_CONTAINER_PACKED`: a listpack.
pub const QUICKLIST_NODE_PACKED: u64 = 2;
