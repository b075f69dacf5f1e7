//! CONFIG GET/SET parameters of the value encodings, with Redis 7.0's names, aliases, ranges
//! and error texts (`config.c`): the listpack/intset thresholds the types read
//! ([`crate::types::EncodingLimits`]) and the list layout settings.
//!
//! | name (alias) | Redis type | range | default |
//! |---|---|---|---|
//! | `hash-max-listpack-entries` (`hash-max-ziplist-entries`) | size_t | 0..=LONG_MAX | 512 |
//! | `hash-max-listpack-value` (`hash-max-ziplist-value`) | size_t, memory | 0..=LONG_MAX | 64 |
//! | `set-max-intset-entries` | size_t | 0..=LONG_MAX | 512 |
//! | `zset-max-listpack-entries` (`zset-max-ziplist-entries`) | size_t | 0..=LONG_MAX | 128 |
//! | `zset-max-listpack-value` (`zset-max-ziplist-value`) | size_t, memory | 0..=LONG_MAX | 64 |
//! | `list-max-listpack-size` (`list-max-ziplist-size`) | int | INT_MIN..=INT_MAX | -2 |
//! | `list-compress-depth` | int | 0..=INT_MAX | 0 |
//!
//! An alias is its own row, as in Redis's `configs` dictionary: `CONFIG GET *` lists both
//! names, and `CONFIG SET` of both in one call is not a duplicate: both are applied in order,
//! the last one wins (as redis-server 7.0.15 answers, `tests/diff/encodings.txt`). The stream node limits
//! (`stream-node-max-bytes/entries`) sit with the other parameters in `cmd::server`.

use super::server::{Param, int_in, parse_memory};
use crate::Engine;

/// A `size_t` count (`createSizeTConfig … INTEGER_CONFIG`, 0..=LONG_MAX): an integer, where a
/// negative one is out of range.
fn count(v: &[u8]) -> Result<u64, &'static str> {
    Ok(int_in(v, 0, i64::MAX)? as u64)
}

/// A `size_t` byte size (`MEMORY_CONFIG`, 0..=LONG_MAX): digits with an optional unit.
fn bytes(v: &[u8]) -> Result<u64, &'static str> {
    let n = parse_memory(v).ok_or("argument must be a memory value")?;
    if n > i64::MAX as u64 {
        return Err("argument must be between 0 and 9223372036854775807 inclusive");
    }
    Ok(n)
}

/// The rows `cmd::server` appends to its own parameter table.
pub(crate) const PARAMS: &[Param] = &[
    Param {
        name: "hash-max-listpack-entries",
        get: |e| e.config.encoding.hash_max_listpack_entries.to_string(),
        set: Some(set_hash_entries),
    },
    Param {
        name: "hash-max-ziplist-entries",
        get: |e| e.config.encoding.hash_max_listpack_entries.to_string(),
        set: Some(set_hash_entries),
    },
    Param {
        name: "hash-max-listpack-value",
        get: |e| e.config.encoding.hash_max_listpack_value.to_string(),
        set: Some(set_hash_value),
    },
    Param {
        name: "hash-max-ziplist-value",
        get: |e| e.config.encoding.hash_max_listpack_value.to_string(),
        set: Some(set_hash_value),
    },
    Param {
        name: "set-max-intset-entries",
        get: |e| e.config.encoding.set_max_intset_entries.to_string(),
        set: Some(|e, v| {
            e.config.encoding.set_max_intset_entries = count(v)?;
            Ok(())
        }),
    },
    Param {
        name: "zset-max-listpack-entries",
        get: |e| e.config.encoding.zset_max_listpack_entries.to_string(),
        set: Some(set_zset_entries),
    },
    Param {
        name: "zset-max-ziplist-entries",
        get: |e| e.config.encoding.zset_max_listpack_entries.to_string(),
        set: Some(set_zset_entries),
    },
    Param {
        name: "zset-max-listpack-value",
        get: |e| e.config.encoding.zset_max_listpack_value.to_string(),
        set: Some(set_zset_value),
    },
    Param {
        name: "zset-max-ziplist-value",
        get: |e| e.config.encoding.zset_max_listpack_value.to_string(),
        set: Some(set_zset_value),
    },
    Param {
        name: "list-max-listpack-size",
        get: |e| e.config.encoding.list_max_listpack_size.to_string(),
        set: Some(set_list_size),
    },
    Param {
        name: "list-max-ziplist-size",
        get: |e| e.config.encoding.list_max_listpack_size.to_string(),
        set: Some(set_list_size),
    },
    Param {
        name: "list-compress-depth",
        get: |e| e.config.list_compress_depth.to_string(),
        set: Some(|e, v| {
            e.config.list_compress_depth = int_in(v, 0, i64::from(i32::MAX))?;
            Ok(())
        }),
    },
];

fn set_hash_entries(e: &mut Engine, v: &[u8]) -> Result<(), &'static str> {
    e.config.encoding.hash_max_listpack_entries = count(v)?;
    Ok(())
}

fn set_hash_value(e: &mut Engine, v: &[u8]) -> Result<(), &'static str> {
    e.config.encoding.hash_max_listpack_value = bytes(v)?;
    Ok(())
}

fn set_zset_entries(e: &mut Engine, v: &[u8]) -> Result<(), &'static str> {
    e.config.encoding.zset_max_listpack_entries = count(v)?;
    Ok(())
}

fn set_zset_value(e: &mut Engine, v: &[u8]) -> Result<(), &'static str> {
    e.config.encoding.zset_max_listpack_value = bytes(v)?;
    Ok(())
}

fn set_list_size(e: &mut Engine, v: &[u8]) -> Result<(), &'static str> {
    e.config.encoding.list_max_listpack_size = int_in(v, i64::from(i32::MIN), i64::from(i32::MAX))?;
    Ok(())
}
