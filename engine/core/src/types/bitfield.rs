//! BITFIELD and BITFIELD_RO (redis 7.0 `bitops.c` `bitfieldGeneric`): integers of 1..=64
//! bits (signed) or 1..=63 bits (unsigned) at any bit offset of a string, in SETBIT's bit
//! order (bit 0 = the most significant bit of the first byte; multi-bit fields big-endian).
//!
//! All operations are parsed (and every argument checked) before any runs; a write creates or
//! grows the string once, to the highest bit any SET/INCRBY touches. Overflow follows the
//! latest `OVERFLOW` before each operation: `WRAP` (two's complement / modulo), `SAT` (clamp
//! to the type's range) or `FAIL` (nothing written, a null reply for that operation). The
//! overflow checks reproduce Redis's `check{Signed,Unsigned}BitfieldOverflow` exactly,
//! including what they say of a SET whose value does not fit the type.

use crate::Engine;
use crate::args::{self, int_arg};
use crate::call::Call;
use crate::error::CmdError;
use crate::notify::{class, notify};
use crate::types::bitmap::{parse_bit_offset, raw_mut, read_bytes, string_for_bits};

const ERR_TYPE: CmdError = CmdError::Static(
    "ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is.",
);
const ERR_OVERFLOW_TYPE: CmdError = CmdError::Static("ERR Invalid OVERFLOW type specified");
const ERR_RO: CmdError = CmdError::Static("ERR BITFIELD_RO only supports the GET subcommand");

/// What to do when a SET/INCRBY result does not fit.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Overflow {
    Wrap,
    Sat,
    Fail,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum OpKind {
    Get,
    Set,
    IncrBy,
}

/// One parsed operation.
#[derive(Clone, Copy, Debug)]
struct Op {
    kind: OpKind,
    offset: u64,
    /// SET value or INCRBY increment.
    arg: i64,
    overflow: Overflow,
    bits: u32,
    signed: bool,
}

/// The field of `bits` bits at bit `offset` of `p`, as an unsigned number (bits past the end
/// of `p` read as 0).
pub fn get_unsigned(p: &[u8], offset: u64, bits: u32) -> u64 {
    let mut v: u64 = 0;
    for j in 0..u64::from(bits) {
        let i = offset + j;
        let byte = p.get((i >> 3) as usize).copied().unwrap_or(0);
        v = (v << 1) | u64::from((byte >> (7 - (i & 7))) & 1);
    }
    v
}

/// The field read as a two's complement number of `bits` bits.
pub fn get_signed(p: &[u8], offset: u64, bits: u32) -> i64 {
    let u = get_unsigned(p, offset, bits);
    if bits < 64 && u & (1 << (bits - 1)) != 0 {
        (u | (u64::MAX << bits)) as i64
    } else {
        u as i64
    }
}

/// Writes the low `bits` bits of `value` at bit `offset` of `p` (which must be long enough).
pub fn set_unsigned(p: &mut [u8], offset: u64, bits: u32, value: u64) {
    for j in 0..u64::from(bits) {
        let bit = (value >> (u64::from(bits) - 1 - j)) & 1;
        let i = offset + j;
        let mask = 0x80u8 >> (i & 7);
        let b = &mut p[(i >> 3) as usize];
        *b = (*b & !mask) | if bit == 1 { mask } else { 0 };
    }
}

/// redis `checkUnsignedBitfieldOverflow`: `None` when `value + incr` fits in `bits` bits,
/// else `Some(result)` under `ow` (the result is meaningless for `Fail`).
fn unsigned_overflow(value: u64, incr: i64, bits: u32, ow: Overflow) -> Option<u64> {
    let max: u64 = if bits == 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    };
    let maxincr = max.wrapping_sub(value) as i64;
    let minincr = value.wrapping_neg() as i64;
    let wrap = || value.wrapping_add(incr as u64) & !(u64::MAX.checked_shl(bits).unwrap_or(0));
    if value > max || (incr > 0 && incr > maxincr) {
        Some(match ow {
            Overflow::Wrap => wrap(),
            _ => max,
        })
    } else if incr < 0 && incr < minincr {
        Some(match ow {
            Overflow::Wrap => wrap(),
            _ => 0,
        })
    } else {
        None
    }
}

/// redis `checkSignedBitfieldOverflow`, like [`unsigned_overflow`].
fn signed_overflow(value: i64, incr: i64, bits: u32, ow: Overflow) -> Option<i64> {
    let max: i64 = if bits == 64 {
        i64::MAX
    } else {
        (1i64 << (bits - 1)) - 1
    };
    let min = -max - 1;
    let maxincr = (max as u64).wrapping_sub(value as u64) as i64;
    let minincr = min.wrapping_sub(value);
    let wrap = || {
        let c = (value as u64).wrapping_add(incr as u64);
        if bits < 64 {
            let mask = u64::MAX << bits;
            if c & (1 << (bits - 1)) != 0 {
                (c | mask) as i64
            } else {
                (c & !mask) as i64
            }
        } else {
            c as i64
        }
    };
    if value > max || (bits != 64 && incr > maxincr) || (value >= 0 && incr > 0 && incr > maxincr) {
        Some(match ow {
            Overflow::Wrap => wrap(),
            _ => max,
        })
    } else if value < min
        || (bits != 64 && incr < minincr)
        || (value < 0 && incr < 0 && incr < minincr)
    {
        Some(match ow {
            Overflow::Wrap => wrap(),
            _ => min,
        })
    } else {
        None
    }
}

/// redis `getBitfieldTypeFromArgument`: `i1`..`i64`, `u1`..`u63` (lower-case sign letter).
fn parse_type(a: &[u8]) -> Result<(bool, u32), CmdError> {
    let signed = match a.first() {
        Some(b'i') => true,
        Some(b'u') => false,
        _ => return Err(ERR_TYPE),
    };
    let bits = args::parse_i64(&a[1..]).ok_or(ERR_TYPE)?;
    if bits < 1 || bits > if signed { 64 } else { 63 } {
        return Err(ERR_TYPE);
    }
    Ok((signed, bits as u32))
}

/// Parses every operation; also returns the highest bit a SET/INCRBY writes, if any.
fn parse_ops(e: &Engine, argv: &[&[u8]]) -> Result<(Vec<Op>, Option<u64>), CmdError> {
    let mut ops = Vec::new();
    let mut overflow = Overflow::Wrap;
    let mut highest: Option<u64> = None;
    let mut j = 2;
    while j < argv.len() {
        let rem = argv.len() - j - 1;
        let sub = argv[j];
        let kind = if args::is(sub, "get") && rem >= 2 {
            OpKind::Get
        } else if args::is(sub, "set") && rem >= 3 {
            OpKind::Set
        } else if args::is(sub, "incrby") && rem >= 3 {
            OpKind::IncrBy
        } else if args::is(sub, "overflow") && rem >= 1 {
            let t = argv[j + 1];
            overflow = if args::is(t, "wrap") {
                Overflow::Wrap
            } else if args::is(t, "sat") {
                Overflow::Sat
            } else if args::is(t, "fail") {
                Overflow::Fail
            } else {
                return Err(ERR_OVERFLOW_TYPE);
            };
            j += 2;
            continue;
        } else {
            return Err(CmdError::Syntax);
        };
        let (signed, bits) = parse_type(argv[j + 1])?;
        let offset = parse_bit_offset(e, argv[j + 2], Some(bits))?;
        let mut arg = 0;
        if kind != OpKind::Get {
            let top = offset + u64::from(bits) - 1;
            highest = Some(highest.map_or(top, |h| h.max(top)));
            arg = int_arg(argv[j + 3])?;
        }
        ops.push(Op {
            kind,
            offset,
            arg,
            overflow,
            bits,
            signed,
        });
        j += if kind == OpKind::Get { 3 } else { 4 };
    }
    Ok((ops, highest))
}

/// One reply element: a number, or null for a FAILed write.
enum Out {
    Int(i64),
    Null,
}

fn bitfield_generic(e: &mut Engine, c: &mut Call, read_only: bool) -> Result<(), CmdError> {
    let key = c.argv[1];
    let (ops, highest) = parse_ops(e, c.argv)?;
    let Some(highest) = highest else {
        // Only GETs: a missing key reads as zeros.
        let out = read_bytes(e, key, c.now_ms, |s| {
            let s = s.unwrap_or_default();
            ops.iter()
                .map(|op| {
                    if op.signed {
                        get_signed(s, op.offset, op.bits)
                    } else {
                        get_unsigned(s, op.offset, op.bits) as i64
                    }
                })
                .collect::<Vec<_>>()
        })?;
        let mut w = c.w();
        w.array(out.len());
        out.into_iter().for_each(|n| w.integer(n));
        return Ok(());
    };
    if read_only {
        return Err(ERR_RO);
    }
    // Expire the key first (a change of its own), then count this command's changes.
    e.ks.lookup_write(key, c.now_ms);
    let dirty = e.ks.dirty;
    let (i, created) = string_for_bits(e, key, highest, c.now_ms)?;
    let (out, changes) = e.ks.update(i, |v| {
        let p = raw_mut(v);
        let mut changes = 0u64;
        let out: Vec<Out> = ops
            .iter()
            .map(|op| run(p, op, created, &mut changes))
            .collect();
        (out, changes)
    });
    // Redis counts one change per operation that changed the string (or ran on a string it
    // just created or grew), none for a no-op; a created key counts at least once here, so the
    // keychange feed carries it.
    e.ks.dirty = dirty + changes.max(u64::from(created));
    if changes > 0 {
        notify(e, class::STRING, "setbit", key);
    }
    let mut w = c.w();
    w.array(out.len());
    for o in out {
        match o {
            Out::Int(n) => w.integer(n),
            Out::Null => w.null(),
        }
    }
    Ok(())
}

/// Runs one operation on the (long enough) string `p`, counting writes that changed it (or
/// any write when the string was just created or grown, as Redis does).
fn run(p: &mut [u8], op: &Op, grown: bool, changes: &mut u64) -> Out {
    let fail = op.overflow == Overflow::Fail;
    if op.signed {
        let old = get_signed(p, op.offset, op.bits);
        if op.kind == OpKind::Get {
            return Out::Int(old);
        }
        let (new, over, ret) = if op.kind == OpKind::IncrBy {
            let o = signed_overflow(old, op.arg, op.bits, op.overflow);
            let new = o.unwrap_or_else(|| old.wrapping_add(op.arg));
            (new, o.is_some(), new)
        } else {
            let o = signed_overflow(op.arg, 0, op.bits, op.overflow);
            (o.unwrap_or(op.arg), o.is_some(), old)
        };
        if over && fail {
            return Out::Null;
        }
        set_unsigned(p, op.offset, op.bits, new as u64);
        if grown || old != new {
            *changes += 1;
        }
        Out::Int(ret)
    } else {
        let old = get_unsigned(p, op.offset, op.bits);
        if op.kind == OpKind::Get {
            return Out::Int(old as i64);
        }
        let (new, over, ret) = if op.kind == OpKind::IncrBy {
            let o = unsigned_overflow(old, op.arg, op.bits, op.overflow);
            let new = o.unwrap_or_else(|| old.wrapping_add(op.arg as u64));
            (new, o.is_some(), new)
        } else {
            let v = op.arg as u64;
            let o = unsigned_overflow(v, 0, op.bits, op.overflow);
            (o.unwrap_or(v), o.is_some(), old)
        };
        if over && fail {
            return Out::Null;
        }
        set_unsigned(p, op.offset, op.bits, new);
        if grown || old != new {
            *changes += 1;
        }
        Out::Int(ret as i64)
    }
}

/// `BITFIELD key [GET type offset | SET type offset value | INCRBY type offset incr |
/// OVERFLOW WRAP|SAT|FAIL] …` → one reply per GET/SET/INCRBY.
pub fn bitfield(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    bitfield_generic(e, c, false)
}

/// `BITFIELD_RO key [GET type offset] …`.
pub fn bitfield_ro(e: &mut Engine, c: &mut Call) -> Result<(), CmdError> {
    bitfield_generic(e, c, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip_across_byte_edges() {
        let mut p = vec![0u8; 10];
        set_unsigned(&mut p, 7, 5, 23);
        assert_eq!(&p[..2], &[0b0000_0001, 0b0111_0000]);
        assert_eq!(get_unsigned(&p, 7, 5), 23);
        set_unsigned(&mut p, 13, 64, (-5i64) as u64);
        assert_eq!(get_signed(&p, 13, 64), -5);
        set_unsigned(&mut p, 3, 4, 0b1010);
        assert_eq!(get_signed(&p, 3, 4), -6);
        assert_eq!(get_unsigned(&p, 77, 8), 0, "past the end reads as zeros");
    }

    #[test]
    fn overflow_rules() {
        // u8: 250 + 10.
        assert_eq!(unsigned_overflow(250, 10, 8, Overflow::Wrap), Some(4));
        assert_eq!(unsigned_overflow(250, 10, 8, Overflow::Sat), Some(255));
        assert_eq!(unsigned_overflow(5, -10, 8, Overflow::Sat), Some(0));
        assert_eq!(unsigned_overflow(5, -10, 8, Overflow::Wrap), Some(251));
        assert_eq!(unsigned_overflow(5, 10, 8, Overflow::Wrap), None);
        // SET u8 -1 does not fit: SAT stores the maximum.
        assert_eq!(unsigned_overflow(u64::MAX, 0, 8, Overflow::Sat), Some(255));
        // i8: 120 + 10, -120 - 10.
        assert_eq!(signed_overflow(120, 10, 8, Overflow::Wrap), Some(-126));
        assert_eq!(signed_overflow(120, 10, 8, Overflow::Sat), Some(127));
        assert_eq!(signed_overflow(-120, -10, 8, Overflow::Sat), Some(-128));
        assert_eq!(signed_overflow(-120, -10, 8, Overflow::Wrap), Some(126));
        assert_eq!(
            signed_overflow(i64::MAX, 1, 64, Overflow::Wrap),
            Some(i64::MIN)
        );
        assert_eq!(
            signed_overflow(i64::MIN, -1, 64, Overflow::Sat),
            Some(i64::MIN)
        );
        assert_eq!(signed_overflow(-1, 1, 64, Overflow::Sat), None);
    }
}
