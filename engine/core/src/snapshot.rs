//! Snapshots: the on-disk format of one engine's keyspace, and the SAVE / BGSAVE / LASTSAVE
//! commands.
//!
//! Pure like the rest of the crate: [`write`] serializes to any `io::Write` and [`load`] reads
//! from any `io::Read` the caller hands in; files, fork, fsync and rename live in the engine
//! process (`engine/server/src/snapshot.rs`, docs/persistence.md).
//!
//! # Format (version 3: version 2's items in compressed frames)
//!
//! ```text
//! header   "RECACHED" (8 bytes)  version u32 (3)  created_ms u64  key_hint u64   (plain)
//! frame*   1 ulen:varint  bytes × ulen                   stored
//!        | 2 ulen:varint  clen:varint  LZ4 block × clen   compressed (clen < ulen)
//! end      0x00  crc32 u32  "RCSNAPOK" (8 bytes)
//! ```
//!
//! The frames' contents, concatenated, are version 2's `item* end keys` below (an item may
//! span frames). Every frame but the last holds exactly [`FRAME`] (64 KiB) of it; each is
//! compressed on its own (LZ4 block format, fastest level) and stored plain when that is not
//! smaller, Redis's rule for LZF. The CRC-32 covers the file's bytes (header, frames as
//! written, end marker). `rdbcompression no` (Redis's parameter, stored by CONFIG) writes
//! version 2; versions 1, 2 and 3 load.
//!
//! - **Why frames rather than values**: Redis LZF-compresses each string over 20 bytes and a
//!   small collection's listpack as one string, but a small value has little to find in
//!   itself; what repeats is across keys (every small hash has the same field names). 64 KiB
//!   of consecutive entries gives LZ4 its whole window: 100,000 hashes × 10 fields (the
//!   `small-hashes` bench shape) take 5.99 MB, against 17.4 MB uncompressed (version 2) and
//!   9.30 MB for redis-server 7.0.15's dump.rdb (docs/persistence.md has the figures).
//! - **Crate**: `lz4_flex` 0.14 without default features, with `safe-encode` and
//!   `safe-decode` (both `forbid(unsafe_code)`, no `std`, builds for wasm32); the block API
//!   only (`compress_into` / `decompress_into` into buffers we size).
//! - **Bounds**: a frame's `ulen` is refused above [`FRAME`] and its `clen` at or above
//!   `ulen`, so decoding one frame holds at most 2 × 64 KiB whatever the file claims; it must
//!   decompress to exactly `ulen` bytes (lz4_flex's safe decoder returns an error, never
//!   panics, on a bad block); a short frame must be the last. LZ4 expands at most ~255×, so
//!   the items are bounded by the file size, and the item reader below keeps its own rule
//!   (allocation follows decoded bytes). An error inside the items is reported at the file
//!   offset of its frame, the byte within the frame in the reason.
//!
//! # Format (version 2, little-endian)
//!
//! ```text
//! header   "RECACHED" (8 bytes)  version u32  created_ms u64  key_hint u64
//! item*    entry | select | functions
//! entry    tag u8  [expire_at_ms u64 if tag & 0x80]  key:blob  value
//! select   0xFE  db:varint            (version 2: the entries after it belong to database db)
//! functions 0xFD  n:varint  code:blob × n   (function libraries, see below)
//! end      0xFF  keys u64  crc32 u32  "RCSNAPOK" (8 bytes)
//!
//! blob     len:varint  bytes          varint = unsigned LEB128 (≤ 10 bytes)
//! value    by tag & 0x7F:
//!            1 string (raw)   blob
//!            2 string (int)   i64
//!            3 list           n:varint  blob × n              (head first)
//!            4 hash           n:varint  (field blob, value blob) × n   (reply order)
//!            5 set            n:varint  blob × n              (storage order)
//!            6 sorted set     n:varint  (member blob, score f64 bits) × n   (score order)
//!            7 stream         last_id first_id max_deleted_id  entries_added u64
//!                             n:varint  (id  nfields:varint (field blob, value blob) × nfields) × n
//!                             groups:varint  (name blob  last_id  entries_read i64
//!                                consumers:varint (name blob  seen_time u64) ×
//!                                pel:varint (id  consumer blob  delivery_time u64  count u64) ×) ×
//!          id = ms u64  seq u64
//! ```
//!
//! Streams keep their entries, IDs, counters, groups, consumers and pending entries lists; the
//! node layout is rebuilt on load with the default node limits (tombstones are not kept:
//! `max_deleted_id` and `entries_added` carry what lag needs).
//!
//! - **Databases** (version 2): entries before any `select` belong to database 0; each other
//!   non-empty database follows its `select`, like RDB's `SELECTDB`. Version 1 files (one
//!   database, no `select`) still load, into database 0. A database at or above `databases`
//!   fails the load (Redis refuses such an RDB too).
//! - **Expiry** is an absolute Unix time in ms (the keyspace's own unit), so a key expires at
//!   the same moment after a restart. Keys already expired when written are skipped, and keys
//!   that expired while the engine was down are skipped on load (Redis's master behaviour in
//!   `rdbLoadRioWithLoadingCtx`).
//! - **Function libraries**: the code of each (its FUNCTION LOAD payload, opaque here: the
//!   script host gives it, [`Scripting::library_codes`](crate::script::Scripting), and loads
//!   it back, [`Scripting::load_libraries`](crate::script::Scripting)), in one `functions`
//!   item before the entries, written only when there are libraries (so a file without any
//!   still loads in a build that predates the item). A snapshot with libraries fails to load
//!   into an engine without a script host, as an RDB with functions does without Lua.
//! - **Checksum**: CRC-32 (IEEE, `crc32fast`, SIMD) of every byte from the magic up to the
//!   checksum field. `keys` must equal the entries read. The trailer after the checksum and
//!   end-of-input right after it catch a file cut exactly at an entry boundary or glued to
//!   garbage. Any failure is a [`LoadError`] with the byte offset where it was found.
//! - **Encodings** are not stored: a value is rebuilt through its type's own API, which picks
//!   the encoding Redis 7.0 would pick on load (a sorted set is built as a skiplist and then
//!   converted if it fits a listpack, like `rdbLoadObject`). Element order is kept (a hash's
//!   listpack order, a list's order, a set's storage order).
//! - **Bad input never panics or allocates beyond the input**: every length is trusted only
//!   as far as bytes actually arrive (buffers grow with the data, capped pre-allocation), tags
//!   and NaN scores are checked, and a duplicate key is an error.
//!
//! # Commands
//!
//! SAVE, BGSAVE [SCHEDULE], LASTSAVE. The core cannot fork or touch files, so the engine
//! process installs a [`Persistence`] hook ([`Engine::persistence`]); the handlers call it
//! and reply in place (so they also work inside MULTI/EXEC). Without a hook (a library user,
//! the browser replica) SAVE and BGSAVE answer `ERR snapshots are not enabled …`. INFO
//! `persistence` reads [`PersistInfo`], which the hook keeps current.

use std::io::{self, Read, Write};

use crate::Engine;
use crate::call::Call;
use crate::error::CmdError;
use crate::keyspace::{Db, Keyspace};
use crate::types::{HashValue, ListValue, SetValue, StrValue, Value, ZSetValue};

/// First 8 bytes of every snapshot.
pub const MAGIC: &[u8; 8] = b"RECACHED";
/// Last 8 bytes of every complete snapshot.
pub const TRAILER: &[u8; 8] = b"RCSNAPOK";
/// Format version written (with `rdbcompression yes`, the default); [`load`] reads it and
/// versions 1 (single-database) and 2 (uncompressed, also written with `rdbcompression no`).
pub const VERSION: u32 = 3;
/// The first version with `select` items.
const VERSION_DBS: u32 = 2;
/// The first version whose items are carried in compressed frames.
const VERSION_FRAMES: u32 = 3;
/// The version written without compression.
const VERSION_PLAIN: u32 = 2;

/// Uncompressed bytes per frame (version 3): every frame but the last holds exactly this many.
/// LZ4 matches reach back 64 KiB at most, so bigger frames would gain little.
const FRAME: usize = 64 * 1024;
const FRAME_END: u8 = 0;
const FRAME_STORED: u8 = 1;
const FRAME_LZ4: u8 = 2;

const TAG_EXPIRE: u8 = 0x80;
const TAG_STR_RAW: u8 = 1;
const TAG_STR_INT: u8 = 2;
const TAG_LIST: u8 = 3;
const TAG_HASH: u8 = 4;
const TAG_SET: u8 = 5;
const TAG_ZSET: u8 = 6;
const TAG_FUNCTIONS: u8 = 0xFD;
const TAG_STREAM: u8 = 7;
const TAG_SELECT: u8 = 0xFE;
const TAG_END: u8 = 0xFF;

/// Output is handed to the sink in chunks of this size (one `write` per chunk).
const WRITE_CHUNK: usize = 256 * 1024;
/// Input is read in chunks of this size.
const READ_CHUNK: usize = 256 * 1024;
/// The most a length or count from the file may pre-allocate before the data arrives.
const MAX_PREALLOC: usize = 64 * 1024;

// ---------------------------------------------------------------------------------------------
// Writing
// ---------------------------------------------------------------------------------------------

/// What [`write`] produced.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteStats {
    /// Keys written (live keys at `now_ms`).
    pub keys: u64,
    /// Bytes written, header to trailer.
    pub bytes: u64,
}

/// A stream (tag 7, see the module doc).
fn write_stream<W: Write>(s: &mut Sink<W>, st: &crate::types::StreamValue) -> io::Result<()> {
    use crate::types::stream::StreamId;
    fn id<W: Write>(s: &mut Sink<W>, id: StreamId) -> io::Result<()> {
        s.u64(id.ms)?;
        s.u64(id.seq)
    }
    id(s, st.last_id)?;
    id(s, st.first_id)?;
    id(s, st.max_deleted_entry_id)?;
    s.u64(st.entries_added)?;
    s.varint(st.length)?;
    for en in st.entries() {
        id(s, en.id)?;
        s.varint(en.num_fields() as u64)?;
        for (f, v) in en.fields() {
            s.blob(f)?;
            s.blob(v)?;
        }
    }
    s.varint(st.groups.len() as u64)?;
    for (name, g) in &st.groups {
        s.blob(name)?;
        id(s, g.last_id)?;
        s.u64(g.entries_read as u64)?;
        s.varint(g.consumers().len() as u64)?;
        for (cname, c) in g.consumers() {
            s.blob(cname)?;
            s.u64(c.seen_time)?;
        }
        s.varint(g.pel().len() as u64)?;
        for (pid, nack) in g.pel() {
            id(s, *pid)?;
            s.blob(&nack.consumer)?;
            s.u64(nack.delivery_time)?;
            s.u64(nack.delivery_count)?;
        }
    }
    Ok(())
}

/// Reads a stream written by [`write_stream`], checking IDs ascend and every pending entry
/// names a consumer of its group.
fn load_stream<R: Read>(
    src: &mut Src<R>,
    scratch: &mut Vec<u8>,
    scratch2: &mut Vec<u8>,
) -> LResult<crate::types::StreamValue> {
    use crate::types::stream::{Nack, NodeLimits, StreamId, StreamValue};
    fn id<R: Read>(src: &mut Src<R>) -> LResult<StreamId> {
        Ok(StreamId::new(src.u64()?, src.u64()?))
    }
    let mut st = StreamValue::new();
    let last_id = id(src)?;
    let first_id = id(src)?;
    let max_deleted = id(src)?;
    let entries_added = src.u64()?;
    let n = src.len(u64::MAX, "stream length")?;
    let mut pairs: Vec<Vec<u8>> = Vec::new();
    for _ in 0..n {
        let at = src.offset();
        let eid = id(src)?;
        let nf = src.len(u64::from(u32::MAX), "stream entry fields")?;
        pairs.clear();
        for _ in 0..nf {
            src.blob_scratch(scratch2)?;
            pairs.push(scratch2.clone());
            pairs.push(src.blob_ref(scratch)?.to_vec());
        }
        let refs: Vec<&[u8]> = pairs.iter().map(Vec::as_slice).collect();
        if nf == 0 || st.append(&refs, eid, true, NodeLimits::default()).is_err() {
            return Err(LoadError {
                offset: at,
                reason: "bad stream entry".into(),
                io: None,
            });
        }
    }
    st.last_id = last_id;
    st.first_id = first_id;
    st.max_deleted_entry_id = max_deleted;
    st.entries_added = entries_added;
    let ngroups = src.len(u64::MAX, "stream groups")?;
    for _ in 0..ngroups {
        let at = src.offset();
        let name = src.blob_vec()?;
        let glast = id(src)?;
        let entries_read = src.u64()? as i64;
        if !st.create_group(&name, glast, entries_read) {
            return Err(LoadError {
                offset: at,
                reason: "duplicate stream group".into(),
                io: None,
            });
        }
        let nc = src.len(u64::MAX, "stream consumers")?;
        for _ in 0..nc {
            let cname = src.blob_vec()?;
            let seen = src.u64()?;
            st.group_mut(&name, |g| g.create_consumer(&cname, seen));
        }
        let np = src.len(u64::MAX, "stream pending entries")?;
        for _ in 0..np {
            let at = src.offset();
            let pid = id(src)?;
            let consumer = src.blob_vec()?.into_boxed_slice();
            let delivery_time = src.u64()?;
            let delivery_count = src.u64()?;
            let ok = st
                .group_mut(&name, |g| {
                    if g.consumer(&consumer).is_none() || g.nack(pid).is_some() {
                        return false;
                    }
                    g.load_nack(
                        pid,
                        Nack {
                            delivery_time,
                            delivery_count,
                            consumer,
                        },
                    );
                    true
                })
                .unwrap_or(false);
            if !ok {
                return Err(LoadError {
                    offset: at,
                    reason: "bad stream pending entry".into(),
                    io: None,
                });
            }
        }
    }
    Ok(st)
}

/// Buffers output, keeps the running CRC (of the bytes written to `inner`) and the byte count.
///
/// In frame mode (version 3, [`Sink::start_frames`]) `buf` collects the items of one frame and
/// every full [`FRAME`] is compressed into `frames`, which goes to `inner` by
/// [`WRITE_CHUNK`]s.
struct Sink<W: Write> {
    inner: W,
    buf: Vec<u8>,
    crc: crc32fast::Hasher,
    written: u64,
    lz: Option<Framer>,
}

/// A version 3 [`Sink`]'s frame state.
struct Framer {
    /// One compressed frame (LZ4's worst case for [`FRAME`] bytes).
    block: Vec<u8>,
    /// Frames not yet written to the sink.
    out: Vec<u8>,
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let b = (v & 0x7F) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

impl<W: Write> Sink<W> {
    /// From here on, items are written in frames (after the header, which stays plain).
    fn start_frames(&mut self) -> io::Result<()> {
        self.drain()?;
        self.buf.reserve(FRAME);
        self.lz = Some(Framer {
            block: vec![0; lz4_flex::block::get_maximum_output_size(FRAME)],
            out: Vec::with_capacity(WRITE_CHUNK + FRAME + 32),
        });
        Ok(())
    }

    /// Compresses `buf` (≤ [`FRAME`] bytes) into one frame, stored plain when LZ4 does not
    /// make it smaller.
    fn frame(&mut self) -> io::Result<()> {
        let Some(lz) = &mut self.lz else {
            return Ok(());
        };
        if self.buf.is_empty() {
            return Ok(());
        }
        let start = lz.out.len();
        let packed = lz4_flex::block::compress_into(&self.buf, &mut lz.block)
            .ok()
            .filter(|&n| n < self.buf.len());
        match packed {
            Some(n) => {
                lz.out.push(FRAME_LZ4);
                put_varint(&mut lz.out, self.buf.len() as u64);
                put_varint(&mut lz.out, n as u64);
                lz.out.extend_from_slice(&lz.block[..n]);
            }
            None => {
                lz.out.push(FRAME_STORED);
                put_varint(&mut lz.out, self.buf.len() as u64);
                lz.out.extend_from_slice(&self.buf);
            }
        }
        self.buf.clear();
        self.crc.update(&lz.out[start..]);
        self.written += (lz.out.len() - start) as u64;
        if lz.out.len() >= WRITE_CHUNK {
            self.inner.write_all(&lz.out)?;
            lz.out.clear();
        }
        Ok(())
    }

    /// Ends frame mode: the last (short) frame, the end marker, everything to `inner`.
    fn end_frames(&mut self) -> io::Result<()> {
        self.frame()?;
        if let Some(mut lz) = self.lz.take() {
            lz.out.push(FRAME_END);
            self.crc.update(&[FRAME_END]);
            self.written += 1;
            self.inner.write_all(&lz.out)?;
        }
        Ok(())
    }

    fn put(&mut self, mut b: &[u8]) -> io::Result<()> {
        if self.lz.is_some() {
            if self.buf.len() + b.len() < FRAME {
                self.buf.extend_from_slice(b);
                return Ok(());
            }
            while !b.is_empty() {
                let k = (FRAME - self.buf.len()).min(b.len());
                self.buf.extend_from_slice(&b[..k]);
                b = &b[k..];
                if self.buf.len() == FRAME {
                    self.frame()?;
                }
            }
            return Ok(());
        }
        if self.buf.len() + b.len() > WRITE_CHUNK {
            self.drain()?;
            if b.len() >= WRITE_CHUNK {
                // A large value goes straight through, without a copy.
                self.crc.update(b);
                self.written += b.len() as u64;
                return self.inner.write_all(b);
            }
        }
        self.buf.extend_from_slice(b);
        Ok(())
    }

    /// Writes `buf` out (plain mode only: in frame mode, see [`Sink::frame`]).
    fn drain(&mut self) -> io::Result<()> {
        debug_assert!(self.lz.is_none());
        self.crc.update(&self.buf);
        self.written += self.buf.len() as u64;
        self.inner.write_all(&self.buf)?;
        self.buf.clear();
        Ok(())
    }

    fn u8(&mut self, v: u8) -> io::Result<()> {
        self.put(&[v])
    }

    fn u64(&mut self, v: u64) -> io::Result<()> {
        self.put(&v.to_le_bytes())
    }

    fn varint(&mut self, mut v: u64) -> io::Result<()> {
        let mut tmp = [0u8; 10];
        let mut n = 0;
        loop {
            let b = (v & 0x7F) as u8;
            v >>= 7;
            if v == 0 {
                tmp[n] = b;
                n += 1;
                break;
            }
            tmp[n] = b | 0x80;
            n += 1;
        }
        self.put(&tmp[..n])
    }

    fn blob(&mut self, b: &[u8]) -> io::Result<()> {
        self.varint(b.len() as u64)?;
        self.put(b)
    }
}

/// Serializes every live key of `e` (live at `now_ms`, Unix ms) to `out`, then flushes it.
/// Allocates one output buffer up front and nothing per key, so a forked child can run it.
pub fn write<W: Write>(e: &Engine, now_ms: u64, out: W) -> io::Result<WriteStats> {
    write_paced(e, now_ms, out, &mut || {})
}

/// [`write`], calling `per_key` after each key written: the server's `rdb-key-save-delay`
/// (Redis's test knob that slows a save down key by key, so tests can hold a save open).
pub fn write_paced<W: Write>(
    e: &Engine,
    now_ms: u64,
    out: W,
    per_key: &mut dyn FnMut(),
) -> io::Result<WriteStats> {
    let dbs: Vec<&Db> = (0..e.databases()).map(|n| e.db(n)).collect();
    let mut libs: Vec<Vec<u8>> = Vec::new();
    if let Some(host) = &e.scripting {
        host.library_codes(&mut |code| libs.push(code.to_vec()));
    }
    let version = if compression(e) {
        VERSION
    } else {
        VERSION_PLAIN
    };
    write_dbs(&dbs, &libs, now_ms, out, per_key, version)
}

/// `rdbcompression` (Redis's parameter, `yes` by default): version 3 (compressed frames) when
/// set, else version 2.
fn compression(e: &Engine) -> bool {
    crate::cmd::config_stored::find(b"rdbcompression")
        .is_none_or(|p| p.get(&e.config.stored) == "yes")
}

fn write_dbs<W: Write>(
    dbs: &[&Db],
    libs: &[Vec<u8>],
    now_ms: u64,
    out: W,
    per_key: &mut dyn FnMut(),
    version: u32,
) -> io::Result<WriteStats> {
    let mut s = Sink {
        inner: out,
        buf: Vec::with_capacity(WRITE_CHUNK),
        crc: crc32fast::Hasher::new(),
        written: 0,
        lz: None,
    };
    s.put(MAGIC)?;
    s.put(&version.to_le_bytes())?;
    s.u64(now_ms)?;
    s.u64(dbs.iter().map(|d| d.len() as u64).sum())?;
    if version >= VERSION_FRAMES {
        s.start_frames()?;
    }
    if !libs.is_empty() {
        s.u8(TAG_FUNCTIONS)?;
        s.varint(libs.len() as u64)?;
        for code in libs {
            s.blob(code)?;
        }
    }
    let mut keys = 0u64;
    let entries = dbs.iter().filter(|d| !d.is_empty()).flat_map(|d| {
        let select = (d.index() != 0).then_some(d.index());
        std::iter::once((select, None)).chain(d.iter_entries().map(|x| (None, Some(x))))
    });
    for (select, item) in entries {
        if let Some(n) = select {
            s.u8(TAG_SELECT)?;
            s.varint(n as u64)?;
        }
        let Some((key, entry)) = item else {
            continue;
        };
        let expire = entry.expire_at();
        if expire.is_some_and(|at| now_ms > at) {
            continue;
        }
        let tag = match &entry.value {
            Value::Str(StrValue::Raw(_)) => TAG_STR_RAW,
            Value::Str(StrValue::Int(_)) => TAG_STR_INT,
            Value::List(_) => TAG_LIST,
            Value::Hash(_) => TAG_HASH,
            Value::Set(_) => TAG_SET,
            Value::ZSet(_) => TAG_ZSET,
            Value::Stream(_) => TAG_STREAM,
        };
        match expire {
            Some(at) => {
                s.u8(tag | TAG_EXPIRE)?;
                s.u64(at)?;
            }
            None => s.u8(tag)?,
        }
        s.blob(key)?;
        match &entry.value {
            Value::Str(StrValue::Raw(v)) => s.blob(v)?,
            Value::Str(StrValue::Int(n)) => s.put(&n.to_le_bytes())?,
            Value::List(l) => {
                s.varint(l.len() as u64)?;
                for el in l.iter() {
                    s.blob(el)?;
                }
            }
            Value::Hash(h) => {
                s.varint(h.len() as u64)?;
                for (f, v) in h.iter() {
                    s.blob(f)?;
                    s.blob(v)?;
                }
            }
            Value::Set(set) => {
                s.varint(set.len() as u64)?;
                for m in set.iter() {
                    s.blob(&m)?;
                }
            }
            Value::ZSet(z) => {
                s.varint(z.len() as u64)?;
                for (m, score) in z.iter() {
                    s.blob(m)?;
                    s.u64(score.to_bits())?;
                }
            }
            Value::Stream(st) => write_stream(&mut s, st)?,
        }
        keys += 1;
        per_key();
    }
    s.u8(TAG_END)?;
    s.u64(keys)?;
    if s.lz.is_some() {
        s.end_frames()?;
    } else {
        s.drain()?;
    }
    let crc = s.crc.clone().finalize();
    s.inner.write_all(&crc.to_le_bytes())?;
    s.inner.write_all(TRAILER)?;
    s.inner.flush()?;
    Ok(WriteStats {
        keys,
        bytes: s.written + 4 + TRAILER.len() as u64,
    })
}

// ---------------------------------------------------------------------------------------------
// Loading
// ---------------------------------------------------------------------------------------------

/// What [`load`] read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadStats {
    /// Keys now in the keyspace.
    pub keys: u64,
    /// Keys in the file that had expired by `now_ms` (not loaded).
    pub expired: u64,
    /// Bytes read, header to trailer.
    pub bytes: u64,
    /// When the snapshot was written, Unix ms.
    pub created_ms: u64,
}

/// A snapshot that cannot be loaded: what is wrong and the byte offset where it was found.
#[derive(Debug)]
pub struct LoadError {
    pub offset: u64,
    pub reason: String,
    /// The underlying read error, if the input itself failed (not the format).
    pub io: Option<io::Error>,
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} at byte offset {}", self.reason, self.offset)
    }
}

impl std::error::Error for LoadError {}

/// Buffered input with the running CRC and the file offset of every byte.
struct Src<R: Read> {
    inner: R,
    buf: Vec<u8>,
    pos: usize,
    end: usize,
    /// File offset of `buf[0]`.
    base: u64,
    crc: crc32fast::Hasher,
    /// Bytes of `buf` before this index are already in `crc`.
    crc_pos: usize,
}

type LResult<T> = Result<T, LoadError>;

impl<R: Read> Src<R> {
    fn new(inner: R) -> Self {
        Src {
            inner,
            buf: vec![0u8; READ_CHUNK],
            pos: 0,
            end: 0,
            base: 0,
            crc: crc32fast::Hasher::new(),
            crc_pos: 0,
        }
    }

    fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    fn err<T>(&self, reason: impl Into<String>) -> LResult<T> {
        Err(LoadError {
            offset: self.offset(),
            reason: reason.into(),
            io: None,
        })
    }

    /// Makes at least `want` (≤ READ_CHUNK) bytes available; false at end of input.
    fn fill(&mut self, want: usize) -> LResult<bool> {
        if self.end - self.pos >= want {
            return Ok(true);
        }
        // Hash what was consumed, then move the unread tail to the front.
        self.crc.update(&self.buf[self.crc_pos..self.pos]);
        self.buf.copy_within(self.pos..self.end, 0);
        self.base += self.pos as u64;
        self.end -= self.pos;
        self.pos = 0;
        self.crc_pos = 0;
        while self.end < want {
            match self.inner.read(&mut self.buf[self.end..]) {
                Ok(0) => return Ok(false),
                Ok(n) => self.end += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(LoadError {
                        offset: self.base + self.end as u64,
                        reason: format!("read error: {e}"),
                        io: Some(e),
                    });
                }
            }
        }
        Ok(true)
    }

    fn truncated<T>(&self) -> LResult<T> {
        Err(LoadError {
            offset: self.base + self.end as u64,
            reason: "unexpected end of file (truncated snapshot)".into(),
            io: None,
        })
    }

    fn take<const N: usize>(&mut self) -> LResult<[u8; N]> {
        if !self.fill(N)? {
            return self.truncated();
        }
        let mut a = [0u8; N];
        a.copy_from_slice(&self.buf[self.pos..self.pos + N]);
        self.pos += N;
        Ok(a)
    }

    fn u8(&mut self) -> LResult<u8> {
        if self.pos < self.end {
            let b = self.buf[self.pos];
            self.pos += 1;
            return Ok(b);
        }
        Ok(self.take::<1>()?[0])
    }

    fn u64(&mut self) -> LResult<u64> {
        Ok(u64::from_le_bytes(self.take::<8>()?))
    }

    fn varint(&mut self) -> LResult<u64> {
        let start = self.offset();
        let mut v = 0u64;
        for shift in (0..70).step_by(7) {
            let b = self.u8()?;
            if shift == 63 && b > 1 {
                break;
            }
            v |= u64::from(b & 0x7F) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(LoadError {
            offset: start,
            reason: "malformed length".into(),
            io: None,
        })
    }

    /// A length or count, refused beyond `max`.
    fn len(&mut self, max: u64, what: &str) -> LResult<usize> {
        let at = self.offset();
        let n = self.varint()?;
        if n > max {
            return Err(LoadError {
                offset: at,
                reason: format!("{what} {n} is out of range"),
                io: None,
            });
        }
        Ok(n as usize)
    }

    /// Appends `n` bytes to `out` (which grows only as the bytes arrive).
    fn read_into(&mut self, mut n: usize, out: &mut Vec<u8>) -> LResult<()> {
        out.reserve(n.min(MAX_PREALLOC));
        while n > 0 {
            if self.pos == self.end && !self.fill(1)? {
                return self.truncated();
            }
            let k = n.min(self.end - self.pos);
            out.extend_from_slice(&self.buf[self.pos..self.pos + k]);
            self.pos += k;
            n -= k;
        }
        Ok(())
    }

    /// A blob as its own exact-size allocation (keys, raw strings).
    fn blob_vec(&mut self) -> LResult<Vec<u8>> {
        let n = self.len(u64::from(u32::MAX), "length")?;
        let mut v = Vec::with_capacity(n.min(MAX_PREALLOC));
        self.read_into(n, &mut v)?;
        Ok(v)
    }

    /// A blob into the reusable `scratch` (elements copied into a collection).
    fn blob_scratch(&mut self, scratch: &mut Vec<u8>) -> LResult<()> {
        let n = self.len(u64::from(u32::MAX), "length")?;
        scratch.clear();
        self.read_into(n, scratch)
    }

    /// The blob as a slice of the read buffer when it fits there (no copy), else via
    /// `scratch`.
    fn blob_ref<'a>(&'a mut self, scratch: &'a mut Vec<u8>) -> LResult<&'a [u8]> {
        let n = self.len(u64::from(u32::MAX), "length")?;
        if n <= READ_CHUNK {
            if !self.fill(n)? {
                return self.truncated();
            }
            let s = &self.buf[self.pos..self.pos + n];
            self.pos += n;
            return Ok(s);
        }
        scratch.clear();
        self.read_into(n, scratch)?;
        Ok(scratch)
    }
}

/// The decompressed items of a version 3 snapshot, read frame by frame from the file (`raw`,
/// which keeps the file offsets and the file's checksum). Holds one frame at a time: at most
/// [`FRAME`] decoded bytes and [`FRAME`] − 1 compressed ones, whatever the file claims.
struct Frames<R: Read> {
    raw: Src<R>,
    /// The frame being handed out, and how much of it has been.
    out: Vec<u8>,
    pos: usize,
    /// The compressed bytes of the frame.
    block: Vec<u8>,
    /// The file offset of every frame so far (8 bytes per [`FRAME`] of items), so an error in
    /// the items reports where in the file its frame starts.
    at: Vec<u64>,
    /// A frame shorter than [`FRAME`] was read: it must be the last.
    short: bool,
    /// The end marker was read.
    done: bool,
    /// Why the frames could not be read (the items see an `io::Error` in its place).
    error: Option<LoadError>,
}

impl<R: Read> Frames<R> {
    fn new(raw: Src<R>) -> Self {
        Frames {
            raw,
            out: Vec::with_capacity(FRAME),
            pos: 0,
            block: Vec::new(),
            at: Vec::new(),
            short: false,
            done: false,
            error: None,
        }
    }

    /// Decodes the next frame into `out`; false at the end marker.
    fn next_frame(&mut self) -> LResult<bool> {
        if self.done {
            return Ok(false);
        }
        let at = self.raw.offset();
        let bad = |reason: String| LoadError {
            offset: at,
            reason,
            io: None,
        };
        let kind = self.raw.u8()?;
        if kind == FRAME_END {
            self.done = true;
            return Ok(false);
        }
        if kind != FRAME_STORED && kind != FRAME_LZ4 {
            return Err(bad(format!("unknown frame type {kind:#04x}")));
        }
        if self.short {
            return Err(bad("a frame after a short frame".into()));
        }
        let ulen = self.raw.len(FRAME as u64, "frame length")?;
        if ulen == 0 {
            return Err(bad("empty frame".into()));
        }
        self.short = ulen < FRAME;
        self.at.push(at);
        self.out.clear();
        self.pos = 0;
        if kind == FRAME_STORED {
            return self.raw.read_into(ulen, &mut self.out).map(|()| true);
        }
        // A compressed frame is smaller than its content (else it is stored).
        let clen = self.raw.len(ulen as u64 - 1, "compressed frame length")?;
        self.block.clear();
        self.raw.read_into(clen, &mut self.block)?;
        self.out.resize(ulen, 0);
        match lz4_flex::block::decompress_into(&self.block, &mut self.out) {
            Ok(n) if n == ulen => Ok(true),
            Ok(n) => Err(bad(format!(
                "corrupt compressed frame ({n} bytes, not {ulen})"
            ))),
            Err(e) => Err(bad(format!("corrupt compressed frame ({e})"))),
        }
    }
}

impl<R: Read> Read for Frames<R> {
    fn read(&mut self, dst: &mut [u8]) -> io::Result<usize> {
        if self.error.is_some() {
            return Err(io::Error::other("corrupt frame"));
        }
        if self.pos == self.out.len() {
            match self.next_frame() {
                Ok(true) => {}
                Ok(false) => return Ok(0),
                Err(e) => {
                    self.error = Some(e);
                    return Err(io::Error::other("corrupt frame"));
                }
            }
        }
        let k = dst.len().min(self.out.len() - self.pos);
        dst[..k].copy_from_slice(&self.out[self.pos..self.pos + k]);
        self.pos += k;
        Ok(k)
    }
}

/// An error found in the decompressed items of a version 3 file, whose offset counts
/// decompressed bytes: reported at the file offset of the frame holding that byte.
fn frames_offset(mut e: LoadError, at: &[u64]) -> LoadError {
    let Some(last) = at.len().checked_sub(1) else {
        return e;
    };
    let i = ((e.offset / FRAME as u64) as usize).min(last);
    e.reason = format!(
        "{} (byte {} of the frame decompressed)",
        e.reason,
        e.offset - (i * FRAME) as u64
    );
    e.offset = at[i];
    e
}

/// Loads the snapshot from `input` into `e`, whose keyspace must be empty (start-up). Keys
/// that expired by `now_ms` (Unix ms) are skipped. On error the keyspace stays empty.
pub fn load<R: Read>(e: &mut Engine, now_ms: u64, input: R) -> Result<LoadStats, LoadError> {
    if (0..e.databases()).any(|n| !e.db(n).is_empty()) {
        return Err(LoadError {
            offset: 0,
            reason: "the keyspace is not empty".into(),
            io: None,
        });
    }
    e.use_db(0);
    let mut ks = Keyspace::new(e.config.hash_seed);
    let mut dbs: Vec<Db> = (0..e.databases())
        .map(|n| Db::new(n, e.config.hash_seed))
        .collect();
    let mut libs = Libs::default();
    let stats = load_into(
        &mut ks,
        &mut dbs,
        &mut libs,
        now_ms,
        input,
        &e.config.encoding,
    )?;
    if !libs.codes.is_empty() {
        let loaded = match e.scripting.as_mut() {
            Some(host) => host.load_libraries(&libs.codes),
            None => Err("no script host to load them into".into()),
        };
        loaded.map_err(|m| LoadError {
            offset: libs.at,
            reason: format!("function libraries: {m}"),
            io: None,
        })?;
    }
    crate::keyspace::switch(&mut ks, &mut dbs, 0);
    // Loading is not a change: `rdb_changes_since_last_save` starts at 0.
    ks.dirty = e.ks.dirty;
    e.ks = ks;
    e.dbs = dbs;
    e.persist.dirty_at_last_save = e.ks.dirty;
    e.persist.last_load_keys_loaded = stats.keys;
    e.persist.last_load_keys_expired = stats.expired;
    Ok(stats)
}

/// The function libraries' codes a snapshot holds, and the offset of their item.
#[derive(Default)]
struct Libs {
    at: u64,
    codes: Vec<Vec<u8>>,
}

/// Loads into `ks` (database 0 at first) and `dbs` (the other databases, see
/// `keyspace::switch`), and the library codes into `libs`; `ks` may end on any database.
///
/// Collections are built again element by element under `lim`, the encoding thresholds in
/// force now (as redis `rdbLoadObject` builds a value stored element by element).
fn load_into<R: Read>(
    ks: &mut Keyspace,
    dbs: &mut [Db],
    libs: &mut Libs,
    now_ms: u64,
    input: R,
    lim: &crate::types::EncodingLimits,
) -> LResult<LoadStats> {
    let mut src = Src::new(input);
    let magic = src
        .take::<8>()
        .or_else(|_| src.err("not a recached snapshot (too short)"))?;
    if &magic != MAGIC {
        src.pos = 0;
        return src.err("not a recached snapshot (bad magic)");
    }
    let version = u32::from_le_bytes(src.take::<4>()?);
    if !(1..=VERSION).contains(&version) {
        return src.err(format!("unsupported snapshot version {version}"));
    }
    let created_ms = src.u64()?;
    let hint = src.u64()?;
    ks.reserve((hint as usize).min(1 << 24));
    let items = if version >= VERSION_FRAMES {
        let mut items = Src::new(Frames::new(src));
        let got = load_items(&mut items, version, ks, dbs, libs, now_ms, lim).and_then(|got| {
            if items.fill(1)? {
                return items.err("data after the key count");
            }
            Ok(got)
        });
        let frames = items.inner;
        match (got, frames.error) {
            (Ok(got), None) => {
                src = frames.raw;
                got
            }
            // The frame layer failed under the items (its offset is already a file offset).
            (_, Some(e)) => return Err(e),
            (Err(e), None) => return Err(frames_offset(e, &frames.at)),
        }
    } else {
        load_items(&mut src, version, ks, dbs, libs, now_ms, lim)?
    };
    let Items {
        keys,
        expired,
        count,
        count_at,
    } = items;
    // The checksum covers everything before its own field.
    if !src.fill(4)? {
        return src.truncated();
    }
    src.crc.update(&src.buf[src.crc_pos..src.pos]);
    let computed = src.crc.clone().finalize();
    let crc_at = src.offset();
    let stored = u32::from_le_bytes(src.take::<4>()?);
    if stored != computed {
        return Err(LoadError {
            offset: crc_at,
            reason: format!(
                "checksum mismatch (stored {stored:08x}, computed {computed:08x}): corrupt snapshot"
            ),
            io: None,
        });
    }
    if count != keys {
        return Err(LoadError {
            offset: count_at,
            reason: format!("key count {count} does not match the {keys} entries read"),
            io: None,
        });
    }
    let trailer = src.take::<8>()?;
    if &trailer != TRAILER {
        src.pos -= 8;
        return src.err("bad trailer");
    }
    if src.fill(1)? {
        return src.err("unexpected data after the trailer");
    }
    Ok(LoadStats {
        keys: keys - expired,
        expired,
        bytes: src.offset(),
        created_ms,
    })
}

/// What [`load_items`] read: entries (`expired` of them not loaded) and the key count field
/// (`count_at` is its offset).
struct Items {
    keys: u64,
    expired: u64,
    count: u64,
    count_at: u64,
}

/// The items of a version `version` snapshot, from the first after the header to the key
/// count after `end`, from `src` (the file itself, or the decompressed frames of version 3).
fn load_items<R: Read>(
    src: &mut Src<R>,
    version: u32,
    ks: &mut Keyspace,
    dbs: &mut [Db],
    libs: &mut Libs,
    now_ms: u64,
    lim: &crate::types::EncodingLimits,
) -> LResult<Items> {
    let mut scratch = Vec::new();
    let mut scratch2 = Vec::new();
    let mut keys = 0u64;
    let mut expired = 0u64;
    loop {
        let tag_at = src.offset();
        let tag = src.u8()?;
        if tag == TAG_END {
            break;
        }
        if tag == TAG_FUNCTIONS {
            libs.at = tag_at;
            let n = src.varint()?;
            for _ in 0..n {
                libs.codes.push(src.blob_vec()?);
            }
            continue;
        }
        if tag == TAG_SELECT && version >= VERSION_DBS {
            let n = src.varint()?;
            if n >= dbs.len() as u64 {
                return Err(LoadError {
                    offset: tag_at,
                    reason: format!(
                        "the snapshot has database {n} but `databases` is {}",
                        dbs.len()
                    ),
                    io: None,
                });
            }
            crate::keyspace::switch(ks, dbs, n as usize);
            continue;
        }
        let expire_at = if tag & TAG_EXPIRE != 0 {
            Some(src.u64()?)
        } else {
            None
        };
        let key = src.blob_vec()?.into_boxed_slice();
        let value = match tag & !TAG_EXPIRE {
            // As redis `rdbLoadObject` (`tryObjectEncoding`): int, embstr or raw by the bytes alone.
            TAG_STR_RAW => Value::Str(StrValue::from_vec(src.blob_vec()?)),
            TAG_STR_INT => Value::Str(StrValue::Int(i64::from_le_bytes(src.take::<8>()?))),
            TAG_LIST => {
                let n = src.len(u64::from(u32::MAX), "list length")?;
                let mut l = ListValue::with_fill(lim.list_max_listpack_size);
                for _ in 0..n {
                    let el = src.blob_ref(&mut scratch)?;
                    l.push(el, crate::types::list::End::Tail);
                }
                Value::List(Box::new(l))
            }
            TAG_HASH => {
                let n = src.len(u64::from(u32::MAX), "hash length")?;
                let mut h = HashValue::with_seed(ks.next_random());
                for _ in 0..n {
                    src.blob_scratch(&mut scratch2)?;
                    let v = src.blob_ref(&mut scratch)?;
                    h.set(&scratch2, v, lim);
                }
                Value::Hash(Box::new(h))
            }
            TAG_SET => {
                let n = src.len(u64::from(u32::MAX), "set length")?;
                let mut s = SetValue::with_seed(ks.next_random());
                for _ in 0..n {
                    let m = src.blob_ref(&mut scratch)?;
                    s.insert(m, lim);
                }
                Value::Set(s)
            }
            TAG_ZSET => {
                let n = src.len(u64::from(u32::MAX), "sorted set length")?;
                let mut z = ZSetValue::new_skiplist(ks.next_random());
                for _ in 0..n {
                    src.blob_scratch(&mut scratch2)?;
                    let at = src.offset();
                    let score = f64::from_bits(src.u64()?);
                    if !z.insert(&scratch2, score, lim) {
                        return Err(LoadError {
                            offset: at,
                            reason: "NaN score in a sorted set".into(),
                            io: None,
                        });
                    }
                }
                Value::ZSet(z.from_result(lim))
            }
            TAG_STREAM => Value::Stream(Box::new(load_stream(src, &mut scratch, &mut scratch2)?)),
            other => {
                return Err(LoadError {
                    offset: tag_at,
                    reason: format!("unknown entry type {other:#04x}"),
                    io: None,
                });
            }
        };
        keys += 1;
        if expire_at.is_some_and(|at| now_ms > at) {
            expired += 1;
            continue;
        }
        if !ks.insert_loaded(&key, value, expire_at) {
            return Err(LoadError {
                offset: tag_at,
                reason: "duplicate key".into(),
                io: None,
            });
        }
    }
    let count_at = src.offset();
    let count = src.u64()?;
    Ok(Items {
        keys,
        expired,
        count,
        count_at,
    })
}

// ---------------------------------------------------------------------------------------------
// SAVE / BGSAVE / LASTSAVE and INFO persistence
// ---------------------------------------------------------------------------------------------

/// The engine process's snapshot machinery, as the commands see it. Installed by the server
/// in [`Engine::persistence`]; `engine` is the engine itself (the hook is taken out of it for
/// the call). Errors are complete error lines without the leading `-`.
pub trait Persistence: Send {
    /// SAVE: write a snapshot now, in the foreground.
    fn save(&mut self, engine: &mut Engine, now_us: u64) -> Result<(), String>;
    /// BGSAVE: start a background save; `schedule` = BGSAVE SCHEDULE (may defer instead of
    /// failing while another save runs). Returns the status line to reply.
    fn bgsave(
        &mut self,
        engine: &mut Engine,
        now_us: u64,
        schedule: bool,
    ) -> Result<&'static str, String>;
    /// Access to the concrete type, for the server's own calls (timer, shutdown).
    fn as_any(&mut self) -> &mut dyn std::any::Any;
}

/// What write commands (and PING) get after a failed background save while
/// `stop-writes-on-bgsave-error` is on (redis `shared.bgsaveerr`).
pub const MISCONF: &str = "MISCONF Redis is configured to save RDB snapshots, but it's currently \
    unable to persist to disk. Commands that may modify the data set are disabled, because this \
    instance is configured to report errors during writes if RDB snapshotting fails \
    (stop-writes-on-bgsave-error option). Please check the Redis logs for details about the RDB \
    error.";

/// Whether writes are refused with [`MISCONF`] (redis `writeCommandsDeniedByDiskError`): the
/// last background save failed, save points are configured, and `stop-writes-on-bgsave-error`
/// is on. The next successful save (SAVE, BGSAVE, periodic) lifts it.
pub fn writes_denied(e: &Engine) -> bool {
    e.persist.last_bgsave_failed
        && e.config.stop_writes_on_bgsave_error
        && e.persist.save_interval > 0
}

/// What writes get while `min-replicas-to-write` asks for replicas (redis `shared.noreplicaserr`).
pub const NOREPLICAS: &str = "NOREPLICAS Not enough good replicas to write.";

/// Whether writes wait for replicas that recached never has (redis `checkGoodReplicasStatus`
/// false on a primary: `min-replicas-to-write` and `min-replicas-max-lag` both non-zero).
pub fn replicas_missing(e: &Engine) -> bool {
    e.config.min_replicas_to_write != 0 && e.config.min_replicas_max_lag != 0
}

/// The error a write is refused with, if any (redis `processCommand`: the disk error first,
/// then missing replicas; PING only for the disk error): `client`'s queued commands count for
/// EXEC.
pub fn refused_write(
    e: &Engine,
    client: &crate::Client,
    spec: &crate::command::CommandSpec,
) -> Option<&'static str> {
    let (disk, replicas) = (writes_denied(e), replicas_missing(e));
    if !disk && !replicas {
        return None;
    }
    let write = match spec.name {
        "exec" => client.tx.queued_write(),
        _ => spec.has_flag(crate::command::Flags::WRITE),
    };
    match () {
        _ if disk && (write || spec.name == "ping") => Some(MISCONF),
        _ if replicas && write => Some(NOREPLICAS),
        _ => None,
    }
}

/// What INFO `persistence` reports; the server's hook keeps it current.
#[derive(Clone, Debug, Default)]
pub struct PersistInfo {
    /// The engine's change counter ([`Engine::dirty`]) as of the last successful save or load.
    pub dirty_at_last_save: u64,
    /// Unix seconds of the last successful save (or of the start, like Redis).
    pub last_save_time: u64,
    /// A BGSAVE child is running.
    pub bgsave_in_progress: bool,
    /// The last background save failed (`rdb_last_bgsave_status:err`).
    pub last_bgsave_failed: bool,
    /// Duration of the last background save, seconds (-1 = none yet).
    pub last_bgsave_time_sec: i64,
    /// When the running BGSAVE started, Unix seconds.
    pub current_bgsave_started: u64,
    /// Saves completed since start (SAVE, BGSAVE, periodic, shutdown).
    pub saves: u64,
    /// Size in bytes of the last snapshot written or loaded.
    pub last_snapshot_bytes: u64,
    /// A snapshot file is configured (dir set).
    pub enabled: bool,
    /// Keys loaded and skipped as expired by the load at start.
    pub last_load_keys_loaded: u64,
    pub last_load_keys_expired: u64,
    /// Seconds between periodic saves, 0 = none (`save_interval`, CONFIG `save`).
    pub save_interval: u64,
    /// Changes needed for a periodic save (`save_changes`, CONFIG `save`).
    pub save_changes: u64,
}

/// CONFIG GET `save`: `"<seconds> <changes>"`, or `""` when periodic saves are off (Redis's
/// form, with our single save point).
pub fn save_param(e: &Engine) -> String {
    let p = &e.persist;
    if p.save_interval == 0 {
        String::new()
    } else {
        format!("{} {}", p.save_interval, p.save_changes)
    }
}

/// CONFIG SET `save`: `""` (off) or `"<seconds> <changes>"`; one save point only.
pub fn set_save_param(e: &mut Engine, v: &[u8]) -> Result<(), &'static str> {
    let text = std::str::from_utf8(v).map_err(|_| "Invalid save parameters")?;
    let parts: Vec<&str> = text.split_ascii_whitespace().collect();
    match parts.as_slice() {
        [] => {
            e.persist.save_interval = 0;
            Ok(())
        }
        // Redis (`setConfigSaveOption`): an even count of numbers, seconds ≥ 1, changes ≥ 0;
        // anything else is its plain error. Only a valid list of several save points, which
        // Redis would take, gets the longer text saying recached keeps one.
        parts
            if parts.len() % 2 == 1
                || parts
                    .iter()
                    .enumerate()
                    .any(|(i, p)| p.parse::<i64>().map_or(true, |n| n < i64::from(i % 2 == 0))) =>
        {
            Err("Invalid save parameters")
        }
        [secs, changes] => {
            let (Ok(s), Ok(c)) = (secs.parse::<u64>(), changes.parse::<u64>()) else {
                return Err("Invalid save parameters");
            };
            e.persist.save_interval = s;
            e.persist.save_changes = c;
            Ok(())
        }
        _ => {
            Err("Invalid save parameters (recached keeps one save point: \"<seconds> <changes>\")")
        }
    }
}

const NOT_ENABLED: &str = "ERR snapshots are not enabled in this process (no dir configured)";

/// SAVE → `+OK` | `-ERR …`.
pub fn save(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let Some(mut hook) = e.persistence.take() else {
        return Err(CmdError::Static(NOT_ENABLED));
    };
    let r = hook.save(e, c.now_us);
    e.persistence = Some(hook);
    r.map_err(CmdError::Other)?;
    c.w().ok();
    Ok(())
}

/// BGSAVE [SCHEDULE] → `+Background saving started` | `+Background saving scheduled` |
/// `-ERR Background save already in progress`.
pub fn bgsave(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let schedule = match c.argv.get(1) {
        None => false,
        Some(a) if a.eq_ignore_ascii_case(b"schedule") && c.argv.len() == 2 => true,
        Some(_) => return Err(CmdError::Syntax),
    };
    let Some(mut hook) = e.persistence.take() else {
        return Err(CmdError::Static(NOT_ENABLED));
    };
    let r = hook.bgsave(e, c.now_us, schedule);
    e.persistence = Some(hook);
    let status = r.map_err(CmdError::Other)?;
    c.w().simple(status.as_bytes());
    Ok(())
}

/// LASTSAVE → Unix seconds of the last successful save.
pub fn lastsave(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let t = if e.persist.last_save_time == 0 {
        e.host.started_us / 1_000_000
    } else {
        e.persist.last_save_time
    };
    c.w().integer(t as i64);
    Ok(())
}

/// INFO `persistence` lines (Redis 7.0 names), through `line(name, value)`.
pub fn info_lines(e: &Engine, now_us: u64, line: &mut dyn FnMut(&str, &dyn std::fmt::Display)) {
    let p = &e.persist;
    let last_save = if p.last_save_time == 0 {
        e.host.started_us / 1_000_000
    } else {
        p.last_save_time
    };
    line("loading", &0);
    line("async_loading", &0);
    line(
        "rdb_changes_since_last_save",
        &e.dirty().saturating_sub(p.dirty_at_last_save),
    );
    line("rdb_bgsave_in_progress", &u8::from(p.bgsave_in_progress));
    line("rdb_last_save_time", &last_save);
    line(
        "rdb_last_bgsave_status",
        &if p.last_bgsave_failed { "err" } else { "ok" },
    );
    line("rdb_last_bgsave_time_sec", &p.last_bgsave_time_sec);
    let current = if p.bgsave_in_progress {
        (now_us / 1_000_000).saturating_sub(p.current_bgsave_started) as i64
    } else {
        -1
    };
    line("rdb_current_bgsave_time_sec", &current);
    line("rdb_saves", &p.saves);
    line("rdb_last_load_keys_expired", &p.last_load_keys_expired);
    line("rdb_last_load_keys_loaded", &p.last_load_keys_loaded);
    line("rdb_last_snapshot_bytes", &p.last_snapshot_bytes);
    line("aof_enabled", &0);
    line("aof_rewrite_in_progress", &0);
}

// Loading another fleet's snapshots (a restart with another engine count) is a module of its
// own, below this one so it reuses the loader above without changing it.
pub mod reshard;

#[cfg(test)]
mod tests;
