//! 80-bit x87 `long double` arithmetic and Redis's formatting of it, for INCRBYFLOAT.
//!
//! Redis 7.0 (`t_string.c` `incrbyfloatCommand`) parses both operands with `strtold`
//! (`util.c` `string2ld`), adds them in `long double` (x87 extended precision on x86-64: 64-bit
//! significand, 15-bit exponent) and prints the sum with `ld2string(…, LD_STR_HUMAN)`:
//! `snprintf("%.17Lf")` then trailing zeros (and a trailing `.`) stripped, `-0` printed as `0`.
//! f64 gives different text for ordinary inputs (`10.5 + 0.1` is `10.6` in Redis), so this module
//! emulates both halves exactly:
//!
//! - arithmetic and decimal → binary conversion: `rustc_apfloat` (rust-lang's port of LLVM
//!   APFloat), `X87DoubleExtended`, round-to-nearest-even, which is what the x87 unit does with
//!   its default 64-bit precision control;
//! - `%.17Lf`: exact, from the bits: `m·2^e` is scaled by 10^17 and rounded half-to-even (glibc's
//!   printf rounds exactly, in the current rounding mode) using u128 for fractions and a small
//!   base-10^9 bignum for large integers.
//!
//! Acceptance follows `string2ld`: 1..5119 bytes, no leading space, the whole string consumed by
//! `strtold` (decimal, hex `0x…[p…]`, `inf`/`infinity`; `nan` is refused), and a result that
//! overflowed to ±HUGE_VAL or underflowed to zero (ERANGE) is refused. Verified against
//! redis-server 7.0.15 (see the tests).

use rustc_apfloat::ieee::X87DoubleExtended;
use rustc_apfloat::{Float, Round, Status};

/// An x87 extended-precision value.
#[derive(Clone, Copy, Debug)]
pub struct LongDouble(X87DoubleExtended);

/// redis `MAX_LONG_DOUBLE_CHARS`: longer inputs are refused.
const MAX_LONG_DOUBLE_CHARS: usize = 5 * 1024;

impl LongDouble {
    pub const ZERO: LongDouble = LongDouble(X87DoubleExtended::ZERO);

    /// redis `string2ld`: the value, or `None` where Redis answers `value is not a valid float`.
    pub fn parse(s: &[u8]) -> Option<LongDouble> {
        if s.is_empty() || s.len() >= MAX_LONG_DOUBLE_CHARS {
            return None;
        }
        let (neg, body) = match s[0] {
            b'-' => (true, &s[1..]),
            b'+' => (false, &s[1..]),
            _ => (false, s),
        };
        let sign = |v: X87DoubleExtended| if neg { -v } else { v };
        if body.eq_ignore_ascii_case(b"inf") || body.eq_ignore_ascii_case(b"infinity") {
            return Some(LongDouble(sign(X87DoubleExtended::INFINITY)));
        }
        let (text, nonzero) =
            if body.len() > 2 && (body.starts_with(b"0x") || body.starts_with(b"0X")) {
                normalize_hex(&body[2..])?
            } else {
                normalize_decimal(body)?
            };
        let r = X87DoubleExtended::from_str_r(&text, Round::NearestTiesToEven).ok()?;
        if r.status.contains(Status::OVERFLOW) || r.value.is_infinite() {
            return None; // ERANGE with ±HUGE_VAL
        }
        if r.value.is_zero() && nonzero {
            return None; // ERANGE with a zero result
        }
        Some(LongDouble(sign(r.value)))
    }

    /// From an integer (exact: every i64 fits the 64-bit significand).
    pub fn from_i64(n: i64) -> LongDouble {
        LongDouble(X87DoubleExtended::from_i128(n as i128).value)
    }

    /// `self + other`, rounded to nearest-even.
    pub fn plus(self, other: LongDouble) -> LongDouble {
        LongDouble(self.0.add_r(other.0, Round::NearestTiesToEven).value)
    }

    /// Neither infinite nor NaN.
    pub fn is_finite(self) -> bool {
        self.0.is_finite()
    }

    /// Appends redis `ld2string(value, LD_STR_HUMAN)`: `%.17Lf` with trailing zeros removed.
    /// The value must be finite.
    pub fn format_human(self, out: &mut Vec<u8>) {
        let bits = self.0.to_bits();
        let negative = (bits >> 79) & 1 == 1;
        let biased = ((bits >> 64) & 0x7fff) as i32;
        let mant = bits as u64;
        // Value = mant · 2^exp2 (a biased exponent of 0 is a denormal with exponent 1 - bias).
        let exp2 = biased.max(1) - 16383 - 63;
        let start = out.len();
        if negative {
            out.push(b'-');
        }
        if exp2 >= 0 {
            write_big_integer(mant, exp2 as u32, out);
        } else {
            const SCALE: u128 = 100_000_000_000_000_000; // 10^17
            let scaled = mant as u128 * SCALE; // < 2^121
            let k = (-exp2) as u32;
            let q = if k >= 128 {
                0 // scaled < 2^121 <= half of 2^k: rounds to zero
            } else {
                let q = scaled >> k;
                let rem = scaled & ((1u128 << k) - 1);
                let half = 1u128 << (k - 1);
                if rem > half || (rem == half && q & 1 == 1) {
                    q + 1
                } else {
                    q
                }
            };
            let (int, frac) = (q / SCALE, (q % SCALE) as u64);
            out.extend_from_slice(itoa::Buffer::new().format(int).as_bytes());
            if frac != 0 {
                let digits = format!("{frac:017}");
                out.push(b'.');
                out.extend_from_slice(digits.trim_end_matches('0').as_bytes());
            }
        }
        if &out[start..] == b"-0" {
            out.truncate(start);
            out.push(b'0');
        }
    }
}

/// Checks the `strtold` decimal grammar (`digits[.digits][e[±]digits]`, at least one digit)
/// and returns APFloat's spelling plus whether any significand digit is non-zero.
fn normalize_decimal(b: &[u8]) -> Option<(String, bool)> {
    let mut i = 0;
    let mut mant = String::with_capacity(b.len() + 2);
    let mut digits = 0;
    let mut nonzero = false;
    while i < b.len() && b[i].is_ascii_digit() {
        nonzero |= b[i] != b'0';
        mant.push(b[i] as char);
        i += 1;
        digits += 1;
    }
    if i < b.len() && b[i] == b'.' {
        i += 1;
        if digits == 0 {
            mant.push('0');
        }
        mant.push('.');
        let before = digits;
        while i < b.len() && b[i].is_ascii_digit() {
            nonzero |= b[i] != b'0';
            mant.push(b[i] as char);
            i += 1;
            digits += 1;
        }
        if digits == before {
            mant.push('0');
        }
    }
    if digits == 0 {
        return None;
    }
    let mut exp: i64 = 0;
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        i += 1;
        let neg = match b.get(i) {
            Some(b'-') => {
                i += 1;
                true
            }
            Some(b'+') => {
                i += 1;
                false
            }
            _ => false,
        };
        let first = i;
        while i < b.len() && b[i].is_ascii_digit() {
            // Saturate: beyond ±10^7 the result is 0 or ∞ whatever the ≤ 5119 digits are.
            exp = (exp * 10 + i64::from(b[i] - b'0')).min(10_000_000);
            i += 1;
        }
        if i == first {
            return None; // `strtold` leaves a bare `e` unconsumed: trailing garbage
        }
        if neg {
            exp = -exp;
        }
    }
    if i != b.len() {
        return None;
    }
    if exp != 0 {
        mant.push('e');
        mant.push_str(itoa::Buffer::new().format(exp));
    }
    Some((mant, nonzero))
}

/// The hexadecimal form after `0x`: `hex[.hex][p[±]digits]`; APFloat needs the `p` part.
fn normalize_hex(b: &[u8]) -> Option<(String, bool)> {
    let mut i = 0;
    let mut s = String::from("0x");
    let mut digits = 0;
    let mut nonzero = false;
    let mut dot = false;
    while i < b.len() && (b[i].is_ascii_hexdigit() || (b[i] == b'.' && !dot)) {
        if b[i] == b'.' {
            dot = true;
        } else {
            digits += 1;
            nonzero |= b[i] != b'0';
        }
        s.push(b[i] as char);
        i += 1;
    }
    if digits == 0 {
        return None;
    }
    if s.ends_with('.') {
        s.push('0');
    }
    if s.as_bytes()[2] == b'.' {
        s.insert(2, '0');
    }
    let mut exp: i64 = 0;
    if i < b.len() && (b[i] == b'p' || b[i] == b'P') {
        i += 1;
        let neg = match b.get(i) {
            Some(b'-') => {
                i += 1;
                true
            }
            Some(b'+') => {
                i += 1;
                false
            }
            _ => false,
        };
        let first = i;
        while i < b.len() && b[i].is_ascii_digit() {
            exp = (exp * 10 + i64::from(b[i] - b'0')).min(10_000_000);
            i += 1;
        }
        if i == first {
            return None;
        }
        if neg {
            exp = -exp;
        }
    }
    if i != b.len() {
        return None;
    }
    s.push('p');
    s.push_str(itoa::Buffer::new().format(exp));
    Some((s, nonzero))
}

/// Appends the decimal digits of `mant · 2^shift` (a base-10^9 bignum; only for values ≥ 2^63,
/// at most ~4933 digits).
fn write_big_integer(mant: u64, shift: u32, out: &mut Vec<u8>) {
    // Little-endian base-2^32 limbs of mant << shift.
    let mut limbs = vec![0u32; (shift / 32) as usize];
    let wide = (mant as u128) << (shift % 32);
    for k in 0..4 {
        limbs.push((wide >> (32 * k)) as u32);
    }
    while limbs.last() == Some(&0) {
        limbs.pop();
    }
    // Repeated division by 10^9 gives base-10^9 chunks, least significant first.
    let mut chunks = Vec::new();
    while !limbs.is_empty() {
        let mut rem: u64 = 0;
        for l in limbs.iter_mut().rev() {
            let cur = (rem << 32) | *l as u64;
            *l = (cur / 1_000_000_000) as u32;
            rem = cur % 1_000_000_000;
        }
        chunks.push(rem as u32);
        while limbs.last() == Some(&0) {
            limbs.pop();
        }
    }
    let mut it = chunks.iter().rev();
    if let Some(first) = it.next() {
        out.extend_from_slice(itoa::Buffer::new().format(*first).as_bytes());
    } else {
        out.push(b'0');
    }
    for c in it {
        out.extend_from_slice(format!("{c:09}").as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::LongDouble;

    fn incr(a: &str, b: &str) -> Option<String> {
        let x = LongDouble::parse(a.as_bytes())?;
        let y = LongDouble::parse(b.as_bytes())?;
        let s = x.plus(y);
        if !s.is_finite() {
            return Some("inf".into());
        }
        let mut out = Vec::new();
        s.format_human(&mut out);
        Some(String::from_utf8(out).unwrap())
    }

    /// Expected values are redis-server 7.0.15's INCRBYFLOAT replies.
    #[test]
    fn matches_redis() {
        let cases: &[(&str, &str, Option<&str>)] = &[
            ("0", "0.1", Some("0.1")),
            ("0.1", "0.2", Some("0.3")),
            ("10.5", "0.1", Some("10.6")),
            ("3.0e3", "0", Some("3000")),
            ("5.0e-5", "0", Some("0.00005")),
            ("0", "0.000003814697265625", Some("0.00000381469726562")),
            ("0", "0.000000000000000005", Some("0")),
            ("0", "0.000000000000000015", Some("0.00000000000000002")),
            ("0", "0x10", Some("16")),
            ("16", "+1.5", Some("17.5")),
            ("17.5", "-3.5", Some("14")),
            ("-0.0000000000000000001", "0", Some("0")),
            ("0", ".5", Some("0.5")),
            ("0.5", "5.", Some("5.5")),
            (
                "1.23456789012345678901234",
                "0",
                Some("1.23456789012345679"),
            ),
            (
                "1e308",
                "1e308",
                Some(
                    "199999999999999999993371759311691291321120199694831134415594095989843469737676123744200253843777078640893494450108026446304269499187921167194841628860392837535918200039206381557326219209014213335878306791577877829121087126122536729803237260434173178506889763247582601711514636284849020905456510092687857156096",
                ),
            ),
            ("1e4932", "1e4932", Some("inf")),
            ("0", "inf", Some("inf")),
            ("0", "abc", None),
            ("0", "1e5000", None),
            ("0", "1e-5000", None),
            ("0", " 1", None),
            ("0", "1 ", None),
            ("0", "1e", None),
            ("0", "nan", None),
            ("0", "", None),
            ("0", ".", None),
            ("0", "0x", None),
        ];
        for &(a, b, want) in cases {
            assert_eq!(incr(a, b).as_deref(), want, "{a} + {b}");
        }
        let mut out = Vec::new();
        LongDouble::parse(b"1e400").unwrap().format_human(&mut out);
        assert!(out.starts_with(b"10000000000000000000281880683947586514586453433629052038625910693539685534008629862039363994848324160522094053927317616200295822777259255734023828976593340661017797447434546173917862448116674971723778943824391593338047470675026246684401359237513603830343735485505244955964979021825038280091068414947402456898653040951017512658092615827588920183472511643316591362664138176309734806343732497430221946880"));
        assert_eq!(out.len(), 401);
        out.clear();
        LongDouble::from_i64(-42).format_human(&mut out);
        assert_eq!(out, b"-42");
    }
}
