//! DUMP / RESTORE / MIGRATE and Redis's serialization format (redis `cluster.c`:
//! `createDumpPayload`, `verifyDumpPayload`, `dumpCommand`, `restoreCommand`,
//! `migrateCommand`; the object format of `rdb.c`). docs/dump.md describes the format.
//!
//! ```text
//! payload = type:u8  object (RDB encoding of that type)  rdb_version:u16le (10)  crc64:u64le
//! ```
//! The CRC-64 (Jones) covers everything before it, version included.
//!
//! - [`rdb`]: lengths, strings (integer-encoded, LZF), doubles, the CRC, LZF decompression.
//! - [`listpack`]: listpacks (read and write), ziplists and intsets (read; intsets written).
//! - [`encode`] / [`decode`]: values ↔ RDB objects, one function per type.
//! - [`migrate`](mod@migrate): MIGRATE's logic; its sockets are the server's ([`migrate::Sockets`]).
//!
//! DUMP writes the RDB type Redis 7.0 writes for the value's encoding (listpack hashes and
//! sorted sets, intsets, quicklist-2 lists, listpack streams), so small values dump to the
//! same bytes; strings are never LZF-compressed (Redis compresses those over 20 bytes with
//! `rdbcompression yes`; both forms restore everywhere). RESTORE reads every type Redis 7.0
//! reads except modules and 2.x zipmaps.

pub mod decode;
pub mod encode;
pub mod listpack;
pub mod migrate;
pub mod rdb;
pub mod types;

use crate::Engine;
use crate::args;
use crate::call::Call;
use crate::error::CmdError;
use crate::keyspace::Keep;
use crate::notify::{class, notify};
use crate::types::Value;

pub use migrate::migrate;

/// A payload that does not decode (RESTORE's `Bad data format`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bad;

/// The RDB version Redis 7.0 writes (`RDB_VERSION`).
pub const RDB_VERSION: u16 = 10;

/// Why RESTORE refused a payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PayloadError {
    /// Too short, an RDB version above ours, or a bad CRC.
    VersionOrChecksum,
    /// The object does not decode.
    BadData,
}

impl PayloadError {
    fn cmd_error(self) -> CmdError {
        match self {
            PayloadError::VersionOrChecksum => {
                CmdError::Static("ERR DUMP payload version or checksum are wrong")
            }
            PayloadError::BadData => CmdError::Static("ERR Bad data format"),
        }
    }
}

/// The DUMP payload of `v` (redis `createDumpPayload`) with the default
/// `list-max-listpack-size`.
pub fn serialize(v: &Value) -> Vec<u8> {
    serialize_with(v, -2)
}

/// [`serialize`] with lists split into quicklist nodes by `list_fill`
/// (`list-max-listpack-size`), as Redis's lists are.
pub fn serialize_with(v: &Value, list_fill: i64) -> Vec<u8> {
    let mut out = Vec::new();
    encode::object(&mut out, v, list_fill);
    out.extend_from_slice(&RDB_VERSION.to_le_bytes());
    let crc = rdb::crc64(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// redis `verifyDumpPayload`: at least the 10-byte footer, a version not above ours, a
/// matching CRC.
pub fn verify(p: &[u8]) -> bool {
    if p.len() < 10 {
        return false;
    }
    let footer = &p[p.len() - 10..];
    let ver = u16::from_le_bytes([footer[0], footer[1]]);
    if ver > RDB_VERSION {
        return false;
    }
    rdb::crc64(&p[..p.len() - 8]).to_le_bytes() == footer[2..]
}

/// The value in payload `p`; `seed` gives hash seeds for the new collections, `lim` the
/// encoding thresholds the value is built under (redis `rdbLoadObject` reads the server's).
pub fn deserialize(
    p: &[u8],
    seed: &mut dyn FnMut() -> u64,
    lim: &crate::types::EncodingLimits,
) -> Result<Value, PayloadError> {
    if !verify(p) {
        return Err(PayloadError::VersionOrChecksum);
    }
    // Like redis, the object is read from the whole argument: trailing bytes (the footer
    // included) are not looked at.
    let mut r = rdb::Rd::new(p);
    let ty = r.u8().map_err(|_| PayloadError::BadData)?;
    decode::object(ty, &mut r, seed, lim).map_err(|_| PayloadError::BadData)
}

// ---------------------------------------------------------------------------------------------
// Commands
// ---------------------------------------------------------------------------------------------

/// `DUMP key` → the payload, or nil.
pub fn dump(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    match e.ks.lookup_read(c.argv[1], c.now_ms) {
        None => c.w().null(),
        Some(i) => {
            let p = serialize_with(e.ks.value(i), e.config.encoding.list_max_listpack_size);
            c.w().bulk(&p);
        }
    }
    Ok(())
}

/// `RESTORE key ttl payload [REPLACE] [ABSTTL] [IDLETIME s] [FREQ f]` (also RESTORE-ASKING),
/// checked in Redis's order: options, the key, the TTL, the payload. The feed records it by
/// the recreate rule (`crate::effect`): `DEL key`, then the commands that rebuild the value
/// and its absolute TTL, so a replica needs no payload decoding and no clock.
pub fn restore(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let argv = c.argv;
    let (mut replace, mut absttl) = (false, false);
    let mut idle: Option<i64> = None;
    let mut freq: Option<i64> = None;
    let mut j = 4;
    while j < argv.len() {
        let more = argv.len() - j - 1;
        if args::is(argv[j], "replace") {
            replace = true;
        } else if args::is(argv[j], "absttl") {
            absttl = true;
        } else if args::is(argv[j], "idletime") && more >= 1 && freq.is_none() {
            let v = resp::parse_i64(argv[j + 1]).ok_or(CmdError::NotInteger)?;
            if v < 0 {
                return Err(CmdError::Static("ERR Invalid IDLETIME value, must be >= 0"));
            }
            idle = Some(v);
            j += 1;
        } else if args::is(argv[j], "freq") && more >= 1 && idle.is_none() {
            let v = resp::parse_i64(argv[j + 1]).ok_or(CmdError::NotInteger)?;
            if !(0..=255).contains(&v) {
                return Err(CmdError::Static(
                    "ERR Invalid FREQ value, must be >= 0 and <= 255",
                ));
            }
            freq = Some(v);
            j += 1;
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    let key = argv[1];
    let existing = e.ks.lookup_write(key, c.now_ms);
    if !replace && existing.is_some() {
        return Err(CmdError::Static("BUSYKEY Target key name already exists."));
    }
    let ttl = resp::parse_i64(argv[2]).ok_or(CmdError::NotInteger)?;
    if ttl < 0 {
        return Err(CmdError::Static("ERR Invalid TTL value, must be >= 0"));
    }
    let value = {
        let ks = &mut e.ks;
        deserialize(argv[3], &mut || ks.next_random(), &e.config.encoding)
            .map_err(PayloadError::cmd_error)?
    };
    let mut deleted = false;
    if replace && let Some(i) = e.ks.lookup_write(key, c.now_ms) {
        e.ks.remove_at(i);
        deleted = true;
    }
    let expire_at = match ttl {
        0 => None,
        t if absttl => Some(t as u64),
        t => Some(c.now_ms.saturating_add(t as u64)),
    };
    // redis `checkAlreadyExpired`: a TTL already past deletes instead of creating.
    if expire_at.is_some_and(|at| at <= c.now_ms) {
        if deleted {
            notify(e, class::GENERIC, "del", key);
        }
        c.w().ok();
        return Ok(());
    }
    let i = e.ks.set(key, value, Keep::Nothing, None);
    if let Some(at) = expire_at {
        e.ks.set_expire(i, at);
    }
    if let Some(word) = crate::evict::restored_access(e.ks.access_mode, c.now_ms, idle, freq) {
        e.ks.set_access(i, word);
    }
    notify(e, class::GENERIC, "restore", key);
    c.w().ok();
    Ok(())
}

#[cfg(test)]
mod tests;
