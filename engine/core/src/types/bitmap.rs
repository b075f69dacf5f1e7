//! Bitmaps: bit operations on string values (redis 7.0 `bitops.c`), the bit helpers first,
//! then SETBIT GETBIT BITCOUNT BITPOS BITOP. BITFIELD is in [`super::bitfield`].
//!
//! # Bit order
//! Bit 0 is the most significant bit of the first byte (SETBIT's convention, also BITFIELD's
//! and BITPOS's). A string is a finite bitmap, zero-padded on the right as far as reads are
//! concerned; writes grow it with zero bytes up to the byte that holds the highest bit written.
//!
//! # Limits
//! A bit offset must satisfy `offset >> 3 < proto-max-bulk-len` (redis
//! `getBitOffsetFromArgument`), else `ERR bit offset is not an integer or out of range`: this
//! is what bounds the growth of a string written by SETBIT/BITFIELD.
//!
//! # Ranges
//! BITCOUNT and BITPOS take `start end [BYTE|BIT]`, negative indexes counting from the end,
//! clamped into the string. Rather than transcribing Redis's first/last-byte masks, both are
//! computed over the bit range `[sb, eb]` the masks describe (byte mode: `start*8 ..
//! end*8+7`); the answers are the same, including BITPOS's rule that a search for a 0 bit
//! with no explicit end finds the first bit past the string.
//!
//! # Effects
//! SETBIT and BITFIELD are deterministic and name one key, so the keychange feed relays them
//! as sent; BITOP's destination is recreated from its stored value (`crate::effect`).

use crate::Engine;
use crate::args::{self, int_arg};
use crate::call::Call;
use crate::error::CmdError;
use crate::keyspace::Keep;
use crate::notify::{class, notify};
use crate::types::Value;
use crate::types::string::{StrValue, as_str};

const ERR_BIT_OFFSET: CmdError =
    CmdError::Static("ERR bit offset is not an integer or out of range");
const ERR_BIT_VALUE: CmdError = CmdError::Static("ERR bit is not an integer or out of range");
const ERR_BITPOS_BIT: CmdError = CmdError::Static("ERR The bit argument must be 1 or 0.");
const ERR_BITOP_NOT: CmdError =
    CmdError::Static("ERR BITOP NOT must be called with a single source key.");

// ---------------------------------------------------------------------------------------------
// Bit helpers (pure, over byte slices)
// ---------------------------------------------------------------------------------------------

/// redis `redisPopcount`: set bits in `s`.
pub fn popcount(s: &[u8]) -> u64 {
    let mut chunks = s.chunks_exact(8);
    let mut n: u64 = 0;
    for c in &mut chunks {
        n += u64::from(u64::from_ne_bytes(c.try_into().expect("8 bytes")).count_ones());
    }
    n + chunks
        .remainder()
        .iter()
        .map(|b| u64::from(b.count_ones()))
        .sum::<u64>()
}

/// Bit `i` of `s` (0 beyond the end).
#[inline]
pub fn get_bit(s: &[u8], i: u64) -> bool {
    let byte = (i >> 3) as usize;
    byte < s.len() && s[byte] & (0x80 >> (i & 7)) != 0
}

/// Set bits among bits `sb..=eb` of `s` (both inside the string).
fn count_range(s: &[u8], sb: u64, eb: u64) -> u64 {
    let (first, last) = ((sb >> 3) as usize, (eb >> 3) as usize);
    let mut n = popcount(&s[first..=last]);
    // Take away the bits of the edge bytes outside the range.
    let head = s[first] & !(0xffu8 >> (sb & 7));
    let tail_mask = if eb & 7 == 7 {
        0
    } else {
        0xffu8 >> ((eb & 7) + 1)
    };
    n -= u64::from(head.count_ones());
    n -= u64::from((s[last] & tail_mask).count_ones());
    n
}

/// The first bit equal to `bit` among bits `sb..=eb` of `s` (both inside the string).
fn find_bit(s: &[u8], sb: u64, eb: u64, bit: bool) -> Option<u64> {
    let skip = if bit { 0u8 } else { 0xff };
    let mut i = sb;
    // Bit by bit up to a byte boundary, then whole bytes, then bit by bit again.
    while i <= eb && i & 7 != 0 {
        if get_bit(s, i) == bit {
            return Some(i);
        }
        i += 1;
    }
    while i + 7 <= eb {
        let b = s[(i >> 3) as usize];
        if b != skip {
            let within = if bit {
                b.leading_zeros()
            } else {
                b.leading_ones()
            };
            return Some(i + u64::from(within));
        }
        i += 8;
    }
    while i <= eb {
        if get_bit(s, i) == bit {
            return Some(i);
        }
        i += 1;
    }
    None
}

/// Index range of `start..=end` over `len` units (bytes or bits) by BITCOUNT/BITPOS's rules:
/// negative indexes count from the end, then both are clamped into `0..len`; `None` when the
/// range is empty.
fn clamp_range(mut start: i64, mut end: i64, len: i64) -> Option<(u64, u64)> {
    if start < 0 {
        start += len;
    }
    if end < 0 {
        end += len;
    }
    start = start.max(0);
    end = end.max(0);
    if end >= len {
        end = len - 1;
    }
    (start <= end).then_some((start as u64, end as u64))
}

/// `BYTE` / `BIT` unit keyword, else syntax error.
fn parse_unit(a: &[u8]) -> Result<bool, CmdError> {
    if args::is(a, "bit") {
        Ok(true)
    } else if args::is(a, "byte") {
        Ok(false)
    } else {
        Err(CmdError::Syntax)
    }
}

/// redis `getBitOffsetFromArgument`: a bit offset below `proto-max-bulk-len * 8`. With
/// `bits` (BITFIELD), `#n` means `n * bits`.
pub(crate) fn parse_bit_offset(e: &Engine, a: &[u8], bits: Option<u32>) -> Result<u64, CmdError> {
    let (digits, mult) = match (a.first(), bits) {
        (Some(b'#'), Some(bits)) => (&a[1..], i64::from(bits)),
        _ => (a, 1),
    };
    let off = args::parse_i64(digits)
        .ok_or(ERR_BIT_OFFSET)?
        .wrapping_mul(mult);
    if off < 0 || (off as u64 >> 3) >= e.config.proto_max_bulk_len {
        return Err(ERR_BIT_OFFSET);
    }
    Ok(off as u64)
}

/// Runs `f` over the bytes of the string at `key` (`None` if missing); WRONGTYPE for other
/// types. An integer-encoded string is seen as its digits.
pub(crate) fn read_bytes<R>(
    e: &mut Engine,
    key: &[u8],
    now_ms: u64,
    f: impl FnOnce(Option<&[u8]>) -> R,
) -> Result<R, CmdError> {
    match e.ks.lookup_read(key, now_ms) {
        None => Ok(f(None)),
        Some(i) => {
            let s = as_str(e.ks.value(i))?;
            let mut buf = itoa::Buffer::new();
            Ok(f(Some(s.bytes(&mut buf))))
        }
    }
}

/// redis `lookupStringForBitCommand`: the position of the string at `key`, created or
/// zero-padded so that bit `max_bit` exists, and whether that created or grew it. WRONGTYPE
/// for other types (nothing changed then).
pub(crate) fn string_for_bits(
    e: &mut Engine,
    key: &[u8],
    max_bit: u64,
    now_ms: u64,
) -> Result<(usize, bool), CmdError> {
    let need = (max_bit >> 3) as usize + 1;
    match e.ks.lookup_write(key, now_ms) {
        None => {
            let i = e.ks.set(
                key,
                Value::Str(StrValue::raw(vec![0; need])),
                Keep::Nothing,
                None,
            );
            Ok((i, true))
        }
        Some(i) => {
            let s = as_str(e.ks.value(i))?;
            if s.len() >= need && s.is_raw() {
                return Ok((i, false));
            }
            // Made raw (and grown), as redis `dbUnshareStringValue` does.
            let grown = e.ks.update(i, |v| {
                let Value::Str(s) = v else {
                    unreachable!("checked above")
                };
                s.modify(|raw| {
                    let grown = raw.len() < need;
                    if grown {
                        raw.resize(need, 0);
                    }
                    grown
                })
            });
            Ok((i, grown))
        }
    }
}

/// The raw bytes of the string at position `i` (made raw by [`string_for_bits`]).
/// Changing bytes in place keeps the length, so the string stays marked raw.
pub(crate) fn raw_mut(v: &mut Value) -> &mut Vec<u8> {
    match v {
        Value::Str(StrValue::Raw(b)) => b,
        _ => unreachable!("a raw string by string_for_bits"),
    }
}

// ---------------------------------------------------------------------------------------------
// Commands
// ---------------------------------------------------------------------------------------------

/// `SETBIT key offset 0|1` → the bit's previous value.
pub fn setbit(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let key = c.argv[1];
    let off = parse_bit_offset(e, c.argv[2], None)?;
    let on = args::parse_i64(c.argv[3]).ok_or(ERR_BIT_VALUE)?;
    if on & !1 != 0 {
        return Err(ERR_BIT_VALUE);
    }
    let on = on == 1;
    // Look first, so that a SETBIT that changes nothing changes nothing (no dirty, no event).
    let old = match e.ks.lookup_write(key, c.now_ms) {
        Some(i) => {
            let s = as_str(e.ks.value(i))?;
            let mut buf = itoa::Buffer::new();
            let bytes = s.bytes(&mut buf);
            let old = get_bit(bytes, off);
            if old == on && ((off >> 3) as usize) < bytes.len() {
                // Redis unshares the value before looking at the bit: raw even so (not a
                // change: `dirty` stays).
                if !s.is_raw() {
                    let dirty = e.ks.dirty;
                    e.ks.update(i, |v| {
                        if let Value::Str(s) = v {
                            s.modify(|_| ());
                        }
                    });
                    e.ks.dirty = dirty;
                }
                c.w().integer(i64::from(old));
                return Ok(());
            }
            old
        }
        None => false,
    };
    let dirty = e.ks.dirty;
    let (i, _) = string_for_bits(e, key, off, c.now_ms)?;
    e.ks.update(i, |v| {
        let raw = raw_mut(v);
        let mask = 0x80u8 >> (off & 7);
        let b = &mut raw[(off >> 3) as usize];
        if on {
            *b |= mask;
        } else {
            *b &= !mask;
        }
    });
    // One change, as Redis counts it (creating or growing the string is part of it).
    e.ks.dirty = dirty + 1;
    notify(e, class::STRING, "setbit", key);
    c.w().integer(i64::from(old));
    Ok(())
}

/// `GETBIT key offset` → 0 | 1 (0 past the end or for a missing key).
pub fn getbit(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let off = parse_bit_offset(e, c.argv[2], None)?;
    let bit = read_bytes(e, c.argv[1], c.now_ms, |s| {
        s.is_some_and(|s| get_bit(s, off))
    })?;
    c.w().integer(i64::from(bit));
    Ok(())
}

/// `BITCOUNT key [start end [BYTE|BIT]]` → number of set bits.
pub fn bitcount(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let argv = c.argv;
    // A missing key answers 0 whatever the other arguments are (Redis looks it up first).
    let n = read_bytes(e, argv[1], c.now_ms, |s| -> Result<u64, CmdError> {
        let Some(s) = s else { return Ok(0) };
        let (sb, eb) = match argv.len() {
            2 if s.is_empty() => return Ok(0),
            2 => (0, s.len() as u64 * 8 - 1),
            4 | 5 => {
                let start = int_arg(argv[2])?;
                let end = int_arg(argv[3])?;
                if start < 0 && end < 0 && start > end {
                    return Ok(0);
                }
                let bit = match argv.get(4) {
                    Some(a) => parse_unit(a)?,
                    None => false,
                };
                let len = s.len() as i64;
                if bit {
                    match clamp_range(start, end, len * 8) {
                        Some(r) => r,
                        None => return Ok(0),
                    }
                } else {
                    match clamp_range(start, end, len) {
                        Some((a, b)) => (a * 8, b * 8 + 7),
                        None => return Ok(0),
                    }
                }
            }
            _ => return Err(CmdError::Syntax),
        };
        Ok(count_range(s, sb, eb))
    })??;
    c.w().integer(n as i64);
    Ok(())
}

/// `BITPOS key 0|1 [start [end [BYTE|BIT]]]` → position of the first such bit, or -1.
pub fn bitpos(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let argv = c.argv;
    let bit = int_arg(argv[2])?;
    if bit != 0 && bit != 1 {
        return Err(ERR_BITPOS_BIT);
    }
    let bit = bit == 1;
    let pos = read_bytes(e, argv[1], c.now_ms, |s| -> Result<i64, CmdError> {
        // A missing key is an infinite run of 0 bits.
        let Some(s) = s else {
            return Ok(if bit { -1 } else { 0 });
        };
        let len = s.len() as i64;
        let mut end_given = false;
        let range = match argv.len() {
            3 => clamp_range(0, len - 1, len).map(|(a, b)| (a * 8, b * 8 + 7)),
            4..=6 => {
                let start = int_arg(argv[3])?;
                let unit_bit = match argv.get(5) {
                    Some(a) => parse_unit(a)?,
                    None => false,
                };
                let end = match argv.get(4) {
                    Some(a) => {
                        end_given = true;
                        int_arg(a)?
                    }
                    None => len - 1,
                };
                if unit_bit {
                    clamp_range(start, end, len * 8)
                } else {
                    clamp_range(start, end, len).map(|(a, b)| (a * 8, b * 8 + 7))
                }
            }
            _ => return Err(CmdError::Syntax),
        };
        let Some((sb, eb)) = range else {
            return Ok(-1);
        };
        Ok(match find_bit(s, sb, eb, bit) {
            Some(p) => p as i64,
            // Looking for a 0 with no explicit end: the string is zero-padded on the right.
            None if !bit && !end_given => eb as i64 + 1,
            None => -1,
        })
    })??;
    c.w().integer(pos);
    Ok(())
}

/// The BITOP operations.
#[derive(Clone, Copy, PartialEq, Eq)]
enum BitOp {
    And,
    Or,
    Xor,
    Not,
}

/// `BITOP AND|OR|XOR|NOT destkey key [key …]` → length of the result; an empty result
/// deletes `destkey`.
pub fn bitop(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    let argv = c.argv;
    let op = match argv[1] {
        a if args::is(a, "and") => BitOp::And,
        a if args::is(a, "or") => BitOp::Or,
        a if args::is(a, "xor") => BitOp::Xor,
        a if args::is(a, "not") => BitOp::Not,
        _ => return Err(CmdError::Syntax),
    };
    if op == BitOp::Not && argv.len() != 4 {
        return Err(ERR_BITOP_NOT);
    }
    let dest = argv[2];
    // Sources, missing ones as empty strings; the first non-string is WRONGTYPE.
    let mut srcs: Vec<Vec<u8>> = Vec::with_capacity(argv.len() - 3);
    for k in &argv[3..] {
        srcs.push(read_bytes(e, k, c.now_ms, |s| {
            s.unwrap_or_default().to_vec()
        })?);
    }
    let maxlen = srcs.iter().map(Vec::len).max().unwrap_or(0);
    if maxlen == 0 {
        if e.ks.delete(dest, c.now_ms) {
            notify(e, class::GENERIC, "del", dest);
        }
        c.w().integer(0);
        return Ok(());
    }
    let mut res = srcs[0].clone();
    res.resize(maxlen, 0);
    match op {
        BitOp::Not => res.iter_mut().for_each(|b| *b = !*b),
        _ => {
            for s in &srcs[1..] {
                // Bytes past a source's end count as 0.
                let (head, tail) = res.split_at_mut(s.len());
                for (r, b) in head.iter_mut().zip(s) {
                    match op {
                        BitOp::And => *r &= b,
                        BitOp::Or => *r |= b,
                        _ => *r ^= b,
                    }
                }
                if op == BitOp::And {
                    tail.fill(0);
                }
            }
        }
    }
    let existing = e.ks.lookup_write(dest, c.now_ms);
    e.ks.set(
        dest,
        Value::Str(StrValue::raw(res)),
        Keep::Nothing,
        existing,
    );
    notify(e, class::STRING, "set", dest);
    c.w().integer(maxlen as i64);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bit by bit, the definition the fast paths must agree with.
    fn naive_count(s: &[u8], sb: u64, eb: u64) -> u64 {
        (sb..=eb).filter(|&i| get_bit(s, i)).count() as u64
    }

    #[test]
    fn count_and_find_agree_with_bit_by_bit() {
        let s: Vec<u8> = (0..37u32)
            .map(|i| (i.wrapping_mul(0x9e37_79b9) >> 13) as u8)
            .collect();
        let mut ones = s.clone();
        ones[20] = 0xf7;
        for data in [&s[..], &ones[..], &[0xff; 19][..], &[0u8; 19][..]] {
            let bits = data.len() as u64 * 8;
            for sb in (0..bits).step_by(3) {
                for eb in (sb..bits).step_by(5) {
                    assert_eq!(count_range(data, sb, eb), naive_count(data, sb, eb));
                    for bit in [false, true] {
                        let want = (sb..=eb).find(|&i| get_bit(data, i) == bit);
                        assert_eq!(find_bit(data, sb, eb, bit), want, "{sb}..={eb} {bit}");
                    }
                }
            }
        }
        assert_eq!(popcount(&s), naive_count(&s, 0, s.len() as u64 * 8 - 1));
    }

    #[test]
    fn clamping() {
        assert_eq!(clamp_range(0, -1, 3), Some((0, 2)));
        assert_eq!(clamp_range(-100, 100, 3), Some((0, 2)));
        assert_eq!(clamp_range(2, 1, 3), None);
        assert_eq!(clamp_range(0, -1, 0), None);
        assert_eq!(clamp_range(i64::MIN, i64::MAX, 5), Some((0, 4)));
    }
}
