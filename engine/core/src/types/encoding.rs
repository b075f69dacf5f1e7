//! The encoding thresholds of the collection types (redis 7.0 `config.c`): when a small hash,
//! set or sorted set stops being a *listpack* / *intset* and becomes a *hashtable* /
//! *skiplist* for good.
//!
//! The values live in [`crate::Config::encoding`] (CONFIG SET, the TOML file) and are passed
//! to the value operations that may convert (`HashValue::set`, `SetValue::insert`,
//! `ZSetValue::insert`…): like Redis, a value reads the thresholds in force at the moment it
//! grows, never the ones in force when it was created. Lists have no threshold here: Redis
//! 7.0 keeps every list in a quicklist (`list-max-listpack-size` and `list-compress-depth`
//! only shape its nodes; see `types::list`).
//!
//! A browser replica (`wasm/`) runs with the defaults: CONFIG SET is not part of the
//! keychange feed. With changed thresholds its encodings can differ from the server's, and
//! with them the order of a hash's or set's replies (listpack order on one side, hashtable on
//! the other); the contents converge all the same.

/// The thresholds, with Redis's names (aliases `*-max-ziplist-*` in CONFIG).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EncodingLimits {
    /// `hash-max-listpack-entries` (default 512): more fields convert to a hashtable.
    pub hash_max_listpack_entries: u64,
    /// `hash-max-listpack-value` (default 64): a longer field or value converts.
    pub hash_max_listpack_value: u64,
    /// `set-max-intset-entries` (default 512): more integers convert to a hashtable (Redis
    /// caps it at 2^30, the intset's own limit; see [`Self::intset_entries`]).
    pub set_max_intset_entries: u64,
    /// `zset-max-listpack-entries` (default 128): more members convert to a skiplist.
    pub zset_max_listpack_entries: u64,
    /// `zset-max-listpack-value` (default 64): a longer member converts.
    pub zset_max_listpack_value: u64,
    /// `list-max-listpack-size` (alias `list-max-ziplist-size`), default -2: the size of a
    /// quicklist node (entries if positive, 4/8/16/32/64 KB for -1…-5), read when a list is
    /// created or loaded (`types::quicklist`). Redis 7.0 reports every list as `quicklist`
    /// whatever its value; DUMP splits a list into nodes by it (`crate::dump`).
    pub list_max_listpack_size: i64,
}

impl EncodingLimits {
    /// Redis 7.0's defaults.
    pub const DEFAULT: EncodingLimits = EncodingLimits {
        hash_max_listpack_entries: 512,
        hash_max_listpack_value: 64,
        set_max_intset_entries: 512,
        zset_max_listpack_entries: 128,
        zset_max_listpack_value: 64,
        list_max_listpack_size: -2,
    };

    /// The effective intset limit: `set-max-intset-entries`, at most 2^30 (redis
    /// `setTypeAdd`, `rdbLoadObject`).
    pub fn intset_entries(&self) -> usize {
        self.set_max_intset_entries.min(1 << 30) as usize
    }

    /// Whether a hash of `len` fields may stay a listpack.
    pub fn hash_fits_entries(&self, len: usize) -> bool {
        len as u64 <= self.hash_max_listpack_entries
    }

    /// Whether a hash field or value of `len` bytes may stay in a listpack.
    pub fn hash_fits_value(&self, len: usize) -> bool {
        len as u64 <= self.hash_max_listpack_value
    }

    /// Whether a zset of `len` members may stay a listpack.
    pub fn zset_fits_entries(&self, len: usize) -> bool {
        len as u64 <= self.zset_max_listpack_entries
    }

    /// Whether a zset member of `len` bytes may stay in a listpack.
    pub fn zset_fits_value(&self, len: usize) -> bool {
        len as u64 <= self.zset_max_listpack_value
    }
}

impl Default for EncodingLimits {
    fn default() -> Self {
        EncodingLimits::DEFAULT
    }
}
