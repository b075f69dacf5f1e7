//! HyperLogLog (redis 7.0 `hyperloglog.c`): the representation first, then PFADD PFCOUNT
//! PFMERGE PFDEBUG PFSELFTEST.
//!
//! # Representation (byte for byte Redis's, so values move between servers with GET/SET)
//! An HLL is a string value: a 16-byte header, then the registers.
//!
//! ```text
//! +------+----+-------+-----------------+-----------------------------------------+
//! | HYLL | E  | 0 0 0 | card (8 bytes)  | registers: dense (12288 B) or sparse    |
//! +------+----+-------+-----------------+-----------------------------------------+
//!   magic  encoding      cached cardinality, little endian; MSB of the last byte set
//!          0 dense       = cache invalid
//!          1 sparse
//! ```
//!
//! 16384 registers of 6 bits (P = 14). Dense: register `i` at bit `6i`, least significant
//! bits first. Sparse: run-length opcodes, `ZERO` (`00xxxxxx`: 1..=64 zero registers),
//! `XZERO` (`01xxxxxx yyyyyyyy`: 1..=16384 zero registers) and `VAL` (`1vvvvvxx`: 1..=4
//! registers of value 1..=32). A new HLL is sparse (two XZERO of 8192... one of 16384); an
//! update that needs a value above 32 or would make the sparse form longer than
//! `hll-sparse-max-bytes` converts it to dense. The sparse update below is Redis's
//! `hllSparseSet` step for step (the split of the run that covers the register, then the
//! merge of up to 5 adjacent VAL opcodes), which is what makes the bytes equal.
//!
//! Elements are hashed with MurmurHash64A (seed `0xadc83b19`): the low 14 bits choose the
//! register, the run of zeros above them + 1 is the value. The estimate is Ertl's improved
//! estimator over the register histogram (`hllCount`), in f64 as Redis computes it.
//!
//! # Errors
//! A string that is not an HLL (too short, bad magic or encoding, dense of the wrong length,
//! integer-encoded) is `WRONGTYPE Key is not a valid HyperLogLog string value.`; a sparse
//! form whose runs do not cover exactly 16384 registers is found when read or updated and
//! answers `INVALIDOBJ Corrupted HLL object detected`.
//!
//! # Writes and effects
//! PFADD/PFMERGE notify `pfadd`; the keychange feed recreates the key from its bytes. PFCOUNT
//! of one key may store the cardinality in the header (a read-only command that changes the
//! value, as in Redis): it reports the change to WATCH and records `PFCOUNT key` as its effect,
//! so a replica computes the same cache bytes.

use crate::Engine;
use crate::call::Call;
use crate::effect;
use crate::error::CmdError;
use crate::keyspace::Keep;
use crate::notify::{class, notify};
use crate::types::Value;
use crate::types::string::{StrValue, as_str};

/// Header bytes.
pub const HDR: usize = 16;
const P: u32 = 14;
const Q: u32 = 64 - P;
/// Number of registers.
pub const REGISTERS: usize = 1 << P;
const REG_MAX: u32 = 63;
/// Length of a dense HLL.
pub const DENSE_SIZE: usize = HDR + (REGISTERS * 6).div_ceil(8);
const DENSE: u8 = 0;
const SPARSE: u8 = 1;
const VAL_MAX_VALUE: u8 = 32;
const VAL_MAX_LEN: usize = 4;
const ZERO_MAX_LEN: usize = 64;
const XZERO_MAX_LEN: usize = 16384;
/// 0.5 / ln 2, Redis's literal (which rounds to the same f64).
#[allow(clippy::excessive_precision)]
const ALPHA_INF: f64 = 0.721_347_520_444_481_703_680;

const ERR_NOT_HLL: CmdError =
    CmdError::Static("WRONGTYPE Key is not a valid HyperLogLog string value.");
const ERR_INVALID: CmdError = CmdError::Static("INVALIDOBJ Corrupted HLL object detected");

/// The sparse form's runs do not add up to the register count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Corrupt;

// ---------------------------------------------------------------------------------------------
// Hashing
// ---------------------------------------------------------------------------------------------

/// MurmurHash2, 64-bit version (`MurmurHash64A`), little-endian word reads as on x86.
pub fn murmur64a(key: &[u8], seed: u64) -> u64 {
    const M: u64 = 0xc6a4_a793_5bd1_e995;
    const R: u32 = 47;
    let mut h = seed ^ (key.len() as u64).wrapping_mul(M);
    let mut chunks = key.chunks_exact(8);
    for c in &mut chunks {
        let mut k = u64::from_le_bytes(c.try_into().expect("8 bytes"));
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h ^= k;
        h = h.wrapping_mul(M);
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        for (i, &b) in tail.iter().enumerate() {
            h ^= u64::from(b) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> R;
    h = h.wrapping_mul(M);
    h ^= h >> R;
    h
}

/// redis `hllPatLen`: the register an element goes to, and its value (1..=Q+1).
pub fn pat_len(ele: &[u8]) -> (usize, u8) {
    let hash = murmur64a(ele, 0xadc8_3b19);
    let index = (hash & (REGISTERS as u64 - 1)) as usize;
    let rest = (hash >> P) | (1u64 << Q);
    (index, rest.trailing_zeros() as u8 + 1)
}

// ---------------------------------------------------------------------------------------------
// Dense registers
// ---------------------------------------------------------------------------------------------

/// Register `i` of the dense registers `r`.
#[inline]
pub fn dense_get(r: &[u8], i: usize) -> u8 {
    let byte = i * 6 / 8;
    let fb = (i * 6) & 7;
    let b0 = u32::from(r[byte]);
    let b1 = u32::from(r.get(byte + 1).copied().unwrap_or(0));
    (((b0 >> fb) | (b1 << (8 - fb))) & REG_MAX) as u8
}

/// Sets register `i` of the dense registers `r` to `v` (≤ 63).
#[inline]
pub fn dense_put(r: &mut [u8], i: usize, v: u8) {
    let byte = i * 6 / 8;
    let fb = (i * 6) & 7;
    let v = u32::from(v);
    r[byte] = ((u32::from(r[byte]) & !(REG_MAX << fb)) | (v << fb)) as u8;
    if let Some(b) = r.get_mut(byte + 1) {
        *b = ((u32::from(*b) & !(REG_MAX >> (8 - fb))) | (v >> (8 - fb))) as u8;
    }
}

/// redis `hllDenseSet`: raises register `i` to `count`; whether it changed.
fn dense_set(r: &mut [u8], i: usize, count: u8) -> bool {
    if count > dense_get(r, i) {
        dense_put(r, i, count);
        true
    } else {
        false
    }
}

// ---------------------------------------------------------------------------------------------
// Sparse opcodes
// ---------------------------------------------------------------------------------------------

#[inline]
fn is_zero(b: u8) -> bool {
    b & 0xc0 == 0
}
#[inline]
fn is_xzero(b: u8) -> bool {
    b & 0xc0 == 0x40
}
#[inline]
fn is_val(b: u8) -> bool {
    b & 0x80 != 0
}
#[inline]
fn zero_len(b: u8) -> usize {
    usize::from(b & 0x3f) + 1
}
/// XZERO length; the second byte of a truncated opcode reads as 0 (the sds terminator).
#[inline]
fn xzero_len(s: &[u8], p: usize) -> usize {
    ((usize::from(s[p] & 0x3f) << 8) | usize::from(s.get(p + 1).copied().unwrap_or(0))) + 1
}
#[inline]
fn val_value(b: u8) -> u8 {
    ((b >> 2) & 0x1f) + 1
}
#[inline]
fn val_len(b: u8) -> usize {
    usize::from(b & 0x3) + 1
}
#[inline]
fn val_op(value: u8, len: usize) -> u8 {
    ((value - 1) << 2) | (len as u8 - 1) | 0x80
}
fn push_zeros(seq: &mut Vec<u8>, len: usize) {
    if len > ZERO_MAX_LEN {
        let l = len - 1;
        seq.push((l >> 8) as u8 | 0x40);
        seq.push((l & 0xff) as u8);
    } else {
        seq.push(len as u8 - 1);
    }
}

/// Calls `f(first_register, run_length, value)` for each opcode of the sparse registers `s`
/// (value 0 for ZERO/XZERO); stops early when `f` returns false.
fn for_each_run(s: &[u8], mut f: impl FnMut(usize, usize, u8) -> bool) {
    let mut p = 0;
    let mut idx = 0;
    while p < s.len() {
        let b = s[p];
        let (len, val, oplen) = if is_zero(b) {
            (zero_len(b), 0, 1)
        } else if is_xzero(b) {
            (xzero_len(s, p), 0, 2)
        } else {
            (val_len(b), val_value(b), 1)
        };
        if !f(idx, len, val) {
            return;
        }
        idx += len;
        p += oplen;
    }
}

/// A new, empty HLL (sparse: one XZERO opcode covering every register).
pub fn new_hll() -> Vec<u8> {
    let mut v = Vec::with_capacity(HDR + 2);
    v.extend_from_slice(b"HYLL");
    v.push(SPARSE);
    v.extend_from_slice(&[0; 11]);
    let mut aux = REGISTERS;
    while aux > 0 {
        let x = aux.min(XZERO_MAX_LEN);
        push_zeros(&mut v, x);
        aux -= x;
    }
    v
}

/// redis `hllSparseToDense` (a dense HLL is left alone): the header (and so the cached
/// cardinality) is kept.
pub fn sparse_to_dense(v: &mut Vec<u8>) -> Result<(), Corrupt> {
    if v[4] == DENSE {
        return Ok(());
    }
    let mut dense = vec![0u8; DENSE_SIZE];
    dense[..HDR].copy_from_slice(&v[..HDR]);
    dense[4] = DENSE;
    let regs = &mut dense[HDR..];
    let mut end = 0;
    let mut overflow = false;
    for_each_run(&v[HDR..], |first, len, val| {
        end = first + len;
        if val > 0 {
            if end > REGISTERS {
                overflow = true;
                return false;
            }
            for i in first..end {
                dense_put(regs, i, val);
            }
        }
        true
    });
    if overflow || end != REGISTERS {
        return Err(Corrupt);
    }
    *v = dense;
    Ok(())
}

/// redis `hllSparseSet`: raises register `index` of the sparse HLL `v` to `count`, converting
/// it to dense when the sparse form cannot hold the result within `max_bytes`. Whether the
/// register changed.
fn sparse_set(v: &mut Vec<u8>, index: usize, count: u8, max_bytes: u64) -> Result<bool, Corrupt> {
    if count > VAL_MAX_VALUE {
        return promote(v, index, count);
    }
    // Step 1: the opcode covering `index`.
    let end = v.len();
    let mut p = HDR;
    let mut first = 0usize;
    let mut prev: Option<usize> = None;
    let mut span = 0usize;
    while p < end {
        let b = v[p];
        let mut oplen = 1;
        span = if is_zero(b) {
            zero_len(b)
        } else if is_val(b) {
            val_len(b)
        } else {
            oplen = 2;
            xzero_len(v, p)
        };
        if index < first + span {
            break;
        }
        prev = Some(p);
        p += oplen;
        first += span;
    }
    if span == 0 || p >= end {
        return Err(Corrupt);
    }
    let b = v[p];
    let (zero, xzero) = (is_zero(b), is_xzero(b));
    let runlen = if zero {
        zero_len(b)
    } else if xzero {
        xzero_len(v, p)
    } else {
        val_len(b)
    };
    // Step 2: cases A (nothing to do), B and C (one byte rewritten), D (split the run).
    let mut in_place = false;
    if !zero && !xzero {
        if val_value(b) >= count {
            return Ok(false);
        }
        if runlen == 1 {
            v[p] = val_op(count, 1);
            in_place = true;
        }
    }
    if zero && runlen == 1 {
        v[p] = val_op(count, 1);
        in_place = true;
    }
    if !in_place {
        let last = first + span - 1;
        let mut seq: Vec<u8> = Vec::with_capacity(5);
        if zero || xzero {
            if index != first {
                push_zeros(&mut seq, index - first);
            }
            seq.push(val_op(count, 1));
            if index != last {
                push_zeros(&mut seq, last - index);
            }
        } else {
            let cur = val_value(b);
            if index != first {
                seq.push(val_op(cur, index - first));
            }
            seq.push(val_op(count, 1));
            if index != last {
                seq.push(val_op(cur, last - index));
            }
        }
        // Step 3: put the new sequence in place of the old opcode.
        let oldlen = if xzero { 2 } else { 1 };
        if seq.len() > oldlen && (v.len() + seq.len() - oldlen) as u64 > max_bytes {
            return promote(v, index, count);
        }
        let old_end = (p + oldlen).min(v.len());
        v.splice(p..old_end, seq);
    }
    // Step 4: merge adjacent VAL opcodes of equal value, up to 5 opcodes from `prev`.
    let mut p = prev.unwrap_or(HDR);
    let mut scan = 5;
    while p < v.len() && scan > 0 {
        scan -= 1;
        let b = v[p];
        if is_xzero(b) {
            p += 2;
            continue;
        } else if is_zero(b) {
            p += 1;
            continue;
        }
        if p + 1 < v.len() && is_val(v[p + 1]) {
            let (v1, v2) = (val_value(b), val_value(v[p + 1]));
            if v1 == v2 {
                let len = val_len(b) + val_len(v[p + 1]);
                if len <= VAL_MAX_LEN {
                    v[p + 1] = val_op(v1, len);
                    v.remove(p);
                    continue;
                }
            }
        }
        p += 1;
    }
    invalidate_cache(v);
    Ok(true)
}

/// Converts to dense, then sets the register (which then always changes).
fn promote(v: &mut Vec<u8>, index: usize, count: u8) -> Result<bool, Corrupt> {
    sparse_to_dense(v)?;
    let changed = dense_set(&mut v[HDR..], index, count);
    debug_assert!(changed);
    Ok(changed)
}

/// Raises register `index` to `count` in whichever encoding `v` has.
fn set_register(v: &mut Vec<u8>, index: usize, count: u8, max_bytes: u64) -> Result<bool, Corrupt> {
    match v[4] {
        DENSE => Ok(dense_set(&mut v[HDR..], index, count)),
        SPARSE => sparse_set(v, index, count, max_bytes),
        _ => Err(Corrupt),
    }
}

/// redis `hllAdd`: whether a register changed.
pub fn add(v: &mut Vec<u8>, ele: &[u8], max_bytes: u64) -> Result<bool, Corrupt> {
    let (index, count) = pat_len(ele);
    set_register(v, index, count, max_bytes)
}

fn invalidate_cache(v: &mut [u8]) {
    v[15] |= 0x80;
}

/// The cached cardinality, if valid.
fn cached(v: &[u8]) -> Option<u64> {
    (v[15] & 0x80 == 0).then(|| u64::from_le_bytes(v[8..16].try_into().expect("8 bytes")))
}

/// redis `isHLLObjectOrReply` (after the type check): the bytes of a plausible HLL.
fn check(s: &StrValue) -> Result<&[u8], CmdError> {
    let StrValue::Raw(v) = s else {
        return Err(ERR_NOT_HLL);
    };
    if v.len() < HDR
        || &v[..4] != b"HYLL"
        || v[4] > SPARSE
        || (v[4] == DENSE && v.len() != DENSE_SIZE)
    {
        return Err(ERR_NOT_HLL);
    }
    Ok(v)
}

// ---------------------------------------------------------------------------------------------
// Counting
// ---------------------------------------------------------------------------------------------

/// Register histogram of the HLL `v` (`hllDenseRegHisto` / `hllSparseRegHisto`).
fn histogram(v: &[u8]) -> Result<[u32; 64], Corrupt> {
    let mut h = [0u32; 64];
    if v[4] == DENSE {
        for c in v[HDR..].chunks_exact(3) {
            let (b0, b1, b2) = (u32::from(c[0]), u32::from(c[1]), u32::from(c[2]));
            h[(b0 & 63) as usize] += 1;
            h[((b0 >> 6 | b1 << 2) & 63) as usize] += 1;
            h[((b1 >> 4 | b2 << 4) & 63) as usize] += 1;
            h[(b2 >> 2) as usize] += 1;
        }
        return Ok(h);
    }
    let mut idx = 0;
    for_each_run(&v[HDR..], |_, len, val| {
        idx += len;
        h[usize::from(val)] = h[usize::from(val)].wrapping_add(len as u32);
        true
    });
    if idx != REGISTERS {
        return Err(Corrupt);
    }
    Ok(h)
}

/// Histogram of one byte per register (the union of PFCOUNT over several keys).
fn raw_histogram(regs: &[u8; REGISTERS]) -> [u32; 64] {
    let mut h = [0u32; 64];
    for &r in regs {
        h[usize::from(r & 63)] += 1;
    }
    h
}

fn sigma(mut x: f64) -> f64 {
    if x == 1.0 {
        return f64::INFINITY;
    }
    let mut y = 1.0;
    let mut z = x;
    loop {
        x *= x;
        let prev = z;
        z += x * y;
        y += y;
        if prev == z {
            return z;
        }
    }
}

fn tau(mut x: f64) -> f64 {
    if x == 0.0 || x == 1.0 {
        return 0.0;
    }
    let mut y = 1.0;
    let mut z = 1.0 - x;
    loop {
        x = x.sqrt();
        let prev = z;
        y *= 0.5;
        z -= (1.0 - x) * (1.0 - x) * y;
        if prev == z {
            return z / 3.0;
        }
    }
}

/// redis `hllCount` from a register histogram (Ertl, arXiv:1702.01284).
pub fn estimate(h: &[u32; 64]) -> u64 {
    let m = REGISTERS as f64;
    let mut z = m * tau((m - f64::from(h[Q as usize + 1])) / m);
    for j in (1..=Q as usize).rev() {
        z += f64::from(h[j]);
        z *= 0.5;
    }
    z += m * sigma(f64::from(h[0]) / m);
    (ALPHA_INF * m * m / z).round() as u64
}

/// redis `hllMerge`: `max[i] = max(max[i], register i of v)`.
fn merge(max: &mut [u8; REGISTERS], v: &[u8]) -> Result<(), Corrupt> {
    if v[4] == DENSE {
        // Four 6-bit registers in each 3 bytes, least significant bits first (`dense_get`
        // for one): decoded a group at a time, a third of the work of one by one.
        let regs = &v[HDR..];
        if regs.len() < REGISTERS * 6 / 8 {
            return Err(Corrupt);
        }
        for (m, b) in max
            .chunks_exact_mut(4)
            .zip(regs[..REGISTERS * 6 / 8].chunks_exact(3))
        {
            let (b0, b1, b2) = (b[0], b[1], b[2]);
            m[0] = m[0].max(b0 & 63);
            m[1] = m[1].max((b0 >> 6) | ((b1 << 2) & 63));
            m[2] = m[2].max((b1 >> 4) | ((b2 << 4) & 63));
            m[3] = m[3].max(b2 >> 2);
        }
        return Ok(());
    }
    let mut end = 0;
    let mut overflow = false;
    for_each_run(&v[HDR..], |first, len, val| {
        end = first + len;
        if val > 0 {
            if end > REGISTERS {
                overflow = true;
                return false;
            }
            for m in &mut max[first..end] {
                *m = (*m).max(val);
            }
        }
        true
    });
    if overflow || end != REGISTERS {
        return Err(Corrupt);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Commands
// ---------------------------------------------------------------------------------------------

fn raw_of(v: &mut Value) -> &mut Vec<u8> {
    match v {
        Value::Str(StrValue::Raw(b)) => b,
        _ => unreachable!("checked to be an HLL"),
    }
}

/// `PFADD key [element …]` → 1 if a register changed (or the key was created), else 0.
pub fn pfadd(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let key = c.argv[1];
    let max_bytes = e.config.hll_sparse_max_bytes;
    let found = e.ks.lookup_write(key, c.now_ms);
    // After the lookup, which may have expired the key (a change of its own).
    let dirty = e.ks.dirty;
    let (i, mut updated) = match found {
        None => (
            e.ks.set(
                key,
                Value::Str(StrValue::raw(new_hll())),
                Keep::Nothing,
                None,
            ),
            1,
        ),
        Some(i) => {
            check(as_str(e.ks.value(i))?)?;
            (i, 0)
        }
    };
    let elements = &c.argv[2..];
    let result = e.ks.update(i, |v| {
        let v = raw_of(v);
        for ele in elements {
            if add(v, ele, max_bytes)? {
                updated += 1;
            }
        }
        if updated > 0 {
            invalidate_cache(v);
        }
        // PFADD unshares the value (redis `dbUnshareStringValue`): raw from now on.
        crate::types::string::mark_raw(v);
        Ok::<_, Corrupt>(())
    });
    // Elements added before a corruption was found stay added, unannounced (as in Redis).
    result.map_err(|_| ERR_INVALID)?;
    // Redis counts one change per register raised (and one for creating the key).
    e.ks.dirty = dirty + updated;
    if updated > 0 {
        notify(e, class::STRING, "pfadd", key);
    }
    c.w().integer(i64::from(updated > 0));
    Ok(())
}

/// `PFCOUNT key [key …]` → estimated cardinality (of the union for several keys).
pub fn pfcount(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    if c.argv.len() > 2 {
        let mut max = Box::new([0u8; REGISTERS]);
        for k in &c.argv[1..] {
            let Some(i) = e.ks.lookup_read(k, c.now_ms) else {
                continue;
            };
            let v = check(as_str(e.ks.value(i))?)?;
            merge(&mut max, v).map_err(|_| ERR_INVALID)?;
        }
        let n = estimate(&raw_histogram(&max));
        c.w().integer(n as i64);
        return Ok(());
    }
    let key = c.argv[1];
    let Some(i) = e.ks.lookup_read(key, c.now_ms) else {
        c.w().integer(0);
        return Ok(());
    };
    let v = check(as_str(e.ks.value(i))?)?;
    if let Some(n) = cached(v) {
        c.w().integer(n as i64);
        return Ok(());
    }
    let n = estimate(&histogram(v).map_err(|_| ERR_INVALID)?);
    e.ks.update(i, |v| raw_of(v)[8..16].copy_from_slice(&n.to_le_bytes()));
    e.ks.signal_modified(key);
    effect::propagate(e, &[b"PFCOUNT", key]);
    c.w().integer(n as i64);
    Ok(())
}

/// `PFMERGE destkey [sourcekey …]` → OK; `destkey` is also a source.
pub fn pfmerge(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let key = c.argv[1];
    let max_bytes = e.config.hll_sparse_max_bytes;
    let mut max = Box::new([0u8; REGISTERS]);
    let mut use_dense = false;
    for k in &c.argv[1..] {
        let Some(i) = e.ks.lookup_read(k, c.now_ms) else {
            continue;
        };
        let v = check(as_str(e.ks.value(i))?)?;
        use_dense |= v[4] == DENSE;
        merge(&mut max, v).map_err(|_| ERR_INVALID)?;
    }
    let dirty = e.ks.dirty;
    let i = match e.ks.lookup_write(key, c.now_ms) {
        Some(i) => i,
        None => e.ks.set(
            key,
            Value::Str(StrValue::raw(new_hll())),
            Keep::Nothing,
            None,
        ),
    };
    e.ks.update(i, |v| {
        let v = raw_of(v);
        if use_dense {
            sparse_to_dense(v)?;
        }
        for (j, &m) in max.iter().enumerate() {
            if m > 0 {
                // A corrupt destination was refused above; Redis ignores the result here.
                let _ = set_register(v, j, m, max_bytes);
            }
        }
        invalidate_cache(v);
        crate::types::string::mark_raw(v);
        Ok::<_, Corrupt>(())
    })
    .map_err(|_| ERR_INVALID)?;
    e.ks.dirty = dirty + 1;
    notify(e, class::STRING, "pfadd", key);
    c.w().ok();
    Ok(())
}

/// `PFDEBUG GETREG|DECODE|ENCODING|TODENSE key`.
pub fn pfdebug(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let (sub, key) = (c.argv[1], c.argv[2]);
    let Some(i) = e.ks.lookup_write(key, c.now_ms) else {
        return Err(CmdError::Static("ERR The specified key does not exist"));
    };
    let enc = check(as_str(e.ks.value(i))?)?[4];
    let is = |w: &str| sub.eq_ignore_ascii_case(w.as_bytes());
    if is("getreg") || is("todense") {
        let converted = enc == SPARSE;
        if converted {
            e.ks.update(i, |v| sparse_to_dense(raw_of(v)))
                .map_err(|_| ERR_INVALID)?;
        }
        if is("todense") {
            c.w().integer(i64::from(converted));
            return Ok(());
        }
        let Value::Str(StrValue::Raw(v)) = e.ks.value(i) else {
            unreachable!("checked")
        };
        let regs: Vec<u8> = (0..REGISTERS).map(|j| dense_get(&v[HDR..], j)).collect();
        let mut w = c.w();
        w.array(REGISTERS);
        regs.into_iter().for_each(|r| w.integer(i64::from(r)));
    } else if is("decode") {
        if enc != SPARSE {
            return Err(CmdError::Static("ERR HLL encoding is not sparse"));
        }
        let Value::Str(StrValue::Raw(v)) = e.ks.value(i) else {
            unreachable!("checked")
        };
        let mut out = Vec::new();
        let mut p = HDR;
        while p < v.len() {
            let b = v[p];
            if is_zero(b) {
                out.push(format!("z:{}", zero_len(b)));
                p += 1;
            } else if is_xzero(b) {
                out.push(format!("Z:{}", xzero_len(v, p)));
                p += 2;
            } else {
                out.push(format!("v:{},{}", val_value(b), val_len(b)));
                p += 1;
            }
        }
        c.w().bulk(out.join(" ").as_bytes());
    } else if is("encoding") {
        c.w()
            .simple(if enc == DENSE { b"dense" } else { b"sparse" });
    } else {
        return Err(CmdError::Other(format!(
            "ERR Unknown PFDEBUG subcommand '{}'",
            crate::error::c_str_lossy(sub, usize::MAX)
        )));
    }
    Ok(())
}

/// `PFSELFTEST` → OK, or `TESTFAILED …`: dense register access, then sparse and dense
/// estimates agreeing and within 6 standard errors up to 10M elements (redis
/// `pfselftestCommand`).
pub fn pfselftest(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let mut regs = vec![0u8; DENSE_SIZE - HDR];
    let mut bytes = vec![0u8; REGISTERS];
    for _ in 0..1000 {
        for (j, b) in bytes.iter_mut().enumerate() {
            let r = (e.ks.next_random() & u64::from(REG_MAX)) as u8;
            *b = r;
            dense_put(&mut regs, j, r);
        }
        for (j, &b) in bytes.iter().enumerate() {
            let got = dense_get(&regs, j);
            if got != b {
                return Err(CmdError::Other(format!(
                    "TESTFAILED Register {j} should be {b} but is {got}"
                )));
            }
        }
    }
    let mut dense = vec![0u8; DENSE_SIZE];
    dense[..4].copy_from_slice(b"HYLL");
    let mut sparse = new_hll();
    let max_bytes = e.config.hll_sparse_max_bytes;
    let relerr = 1.04 / (REGISTERS as f64).sqrt();
    let mut checkpoint: u64 = 1;
    let seed = e.ks.next_random();
    for j in 1..=10_000_000u64 {
        let ele = (j ^ seed).to_ne_bytes();
        add(&mut dense, &ele, max_bytes).map_err(|_| ERR_INVALID)?;
        add(&mut sparse, &ele, max_bytes).map_err(|_| ERR_INVALID)?;
        if j != checkpoint {
            continue;
        }
        if j < max_bytes / 2 && sparse[4] != SPARSE {
            return Err(CmdError::Static("TESTFAILED sparse encoding not used"));
        }
        let card = estimate(&histogram(&dense).map_err(|_| ERR_INVALID)?);
        if histogram(&sparse).map(|h| estimate(&h)) != Ok(card) {
            return Err(CmdError::Static("TESTFAILED dense/sparse disagree"));
        }
        let abserr = (checkpoint as i64 - card as i64).unsigned_abs();
        let maxerr = if j == 10 {
            1
        } else {
            (relerr * 6.0 * checkpoint as f64).ceil() as u64
        };
        if abserr > maxerr {
            return Err(CmdError::Other(format!(
                "TESTFAILED Too big error. card:{checkpoint} abserr:{abserr}"
            )));
        }
        checkpoint *= 10;
    }
    c.w().ok();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur_matches_reference_values() {
        // MurmurHash64A reference outputs (seed 0xadc83b19), as redis computes them.
        let (i, n) = pat_len(b"a");
        assert!(i < REGISTERS && (1..=51).contains(&n));
        assert_eq!(murmur64a(b"", 0), 0);
    }

    #[test]
    fn new_hll_shape() {
        let v = new_hll();
        assert_eq!(v.len(), HDR + 2);
        assert_eq!(&v[HDR..], &[0x7f, 0xff], "one XZERO of 16384");
        assert_eq!(estimate(&histogram(&v).unwrap()), 0);
        assert_eq!(cached(&v), Some(0));
    }

    #[test]
    fn sparse_and_dense_agree_register_by_register() {
        let mut s = new_hll();
        let mut d = new_hll();
        sparse_to_dense(&mut d).unwrap();
        for j in 0..3000u32 {
            let ele = j.to_le_bytes();
            assert_eq!(
                add(&mut s, &ele, 1 << 20),
                add(&mut d, &ele, 1 << 20),
                "{j}"
            );
        }
        assert_eq!(s[4], SPARSE);
        let mut m1 = [0u8; REGISTERS];
        let mut m2 = [0u8; REGISTERS];
        merge(&mut m1, &s).unwrap();
        merge(&mut m2, &d).unwrap();
        assert!(m1 == m2);
        assert_eq!(histogram(&s).unwrap(), histogram(&d).unwrap());
        let mut s2 = s.clone();
        sparse_to_dense(&mut s2).unwrap();
        assert_eq!(s2[HDR..], d[HDR..]);
    }

    #[test]
    fn corrupt_sparse_is_detected() {
        let mut v = new_hll();
        v[HDR + 1] = 0xfe; // covers 16383 registers only
        assert_eq!(histogram(&v), Err(Corrupt));
        assert_eq!(sparse_to_dense(&mut v.clone()), Err(Corrupt));
        let mut m = [0u8; REGISTERS];
        assert_eq!(merge(&mut m, &v), Err(Corrupt));
    }
}
