//! Scores and ranges: how Redis 7.0 reads and prints them.
//!
//! # Parsing
//! Redis reads every score with glibc `strtod`, so [`strtod`] reproduces its grammar: leading
//! C whitespace, a sign, decimal (`1`, `1.`, `.5`, `2e-3`), hexadecimal (`0x1p-2`, `0x10`),
//! `inf`/`infinity`/`nan[(…)]` in any case; it reports the bytes consumed and whether the
//! result overflowed or underflowed to zero (`ERANGE`).
//! - [`parse_score`] is redis `getDoubleFromObject` (ZADD, ZINCRBY, WEIGHTS): the whole
//!   argument must be consumed, no leading space, not empty, no overflow/underflow to zero,
//!   not NaN. `inf`, `-inf`, `+inf` are accepted.
//! - [`ScoreRange::parse`] is redis `zslParseRange` (ZCOUNT, ZRANGEBYSCORE, …): `(` makes a
//!   bound exclusive; the text is a C string (cut at the first NUL) and only NaN and trailing
//!   garbage are refused, so `""` and `"("` read as 0 and `1e400` as `inf`, as in Redis.
//! - [`LexRange::parse`] is redis `zslParseLexRangeItem`: `-`, `+`, `[incl`, `(excl`.
//!
//! # Printing
//! - [`fmt_reply`]: redis 7.0 `addReplyDouble` — `%.17g`, with `inf`/`-inf`
//!   (ZSCORE `0.1` → `0.10000000000000001`, `1e20` → `1e+20`). Also what ZSCAN prints for a
//!   skiplist-encoded zset (`%.17Lg` of the same double gives the same digits).
//! - [`fmt_d2string`]: redis 7.0 `d2string`, the text a listpack stores: integers within
//!   ±2^62 printed as integers (`1e18` → `1000000000000000000`, `-0` → `0`), else `%.17g`.
//!   ZSCAN of a listpack-encoded zset prints this.

use std::cmp::Ordering;

/// C `isspace` in the "C" locale.
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

fn starts_with_ci(s: &[u8], prefix: &[u8]) -> bool {
    s.len() >= prefix.len() && s[..prefix.len()].eq_ignore_ascii_case(prefix)
}

/// What glibc `strtod` returns.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Strtod {
    pub value: f64,
    /// Bytes consumed; 0 = no conversion (then `value` is 0).
    pub len: usize,
    /// `errno == ERANGE`: a finite number too large (±inf) or a nonzero one that became 0.
    pub erange: bool,
}

const NO_CONVERSION: Strtod = Strtod {
    value: 0.0,
    len: 0,
    erange: false,
};

/// glibc `strtod` over `s` (which must not contain NUL where the C string would end: callers
/// cut it first when Redis passes a C string).
pub fn strtod(s: &[u8]) -> Strtod {
    let mut i = 0;
    while i < s.len() && is_c_space(s[i]) {
        i += 1;
    }
    let mut neg = false;
    if i < s.len() && (s[i] == b'+' || s[i] == b'-') {
        neg = s[i] == b'-';
        i += 1;
    }
    let sign = |v: f64| if neg { -v } else { v };
    let rest = &s[i..];
    if starts_with_ci(rest, b"inf") {
        let n = if starts_with_ci(rest, b"infinity") {
            8
        } else {
            3
        };
        return Strtod {
            value: sign(f64::INFINITY),
            len: i + n,
            erange: false,
        };
    }
    if starts_with_ci(rest, b"nan") {
        let mut n = 3;
        if rest.get(3) == Some(&b'(') {
            let mut j = 4;
            while j < rest.len() && (rest[j].is_ascii_alphanumeric() || rest[j] == b'_') {
                j += 1;
            }
            if rest.get(j) == Some(&b')') {
                n = j + 1;
            }
        }
        return Strtod {
            value: f64::NAN,
            len: i + n,
            erange: false,
        };
    }
    if rest.len() >= 2 && rest[0] == b'0' && (rest[1] | 0x20) == b'x' {
        return match hex_float(&rest[2..]) {
            Some((v, n, erange)) => Strtod {
                value: sign(v),
                len: i + 2 + n,
                erange,
            },
            // "0x" without hex digits: only the "0" is a number.
            None => Strtod {
                value: sign(0.0),
                len: i + 1,
                erange: false,
            },
        };
    }
    let mut j = 0;
    let mut digits = 0;
    let mut nonzero = false;
    while j < rest.len() && rest[j].is_ascii_digit() {
        nonzero |= rest[j] != b'0';
        digits += 1;
        j += 1;
    }
    if j < rest.len() && rest[j] == b'.' {
        j += 1;
        while j < rest.len() && rest[j].is_ascii_digit() {
            nonzero |= rest[j] != b'0';
            digits += 1;
            j += 1;
        }
    }
    if digits == 0 {
        return NO_CONVERSION;
    }
    if j < rest.len() && (rest[j] | 0x20) == b'e' {
        let mut k = j + 1;
        if k < rest.len() && (rest[k] == b'+' || rest[k] == b'-') {
            k += 1;
        }
        if k < rest.len() && rest[k].is_ascii_digit() {
            while k < rest.len() && rest[k].is_ascii_digit() {
                k += 1;
            }
            j = k;
        }
    }
    // The slice is ASCII digits, '.', 'e' and a sign: Rust's correctly rounded parser agrees
    // with glibc's on every such input.
    let v = std::str::from_utf8(&rest[..j])
        .ok()
        .and_then(|t| t.parse::<f64>().ok())
        .unwrap_or(0.0);
    Strtod {
        value: sign(v),
        len: i + j,
        erange: v.is_infinite() || (v == 0.0 && nonzero),
    }
}

/// The part of a hexadecimal float after `0x`: `(value, bytes consumed, erange)`, or None if
/// no hex digit follows.
fn hex_float(s: &[u8]) -> Option<(f64, usize, bool)> {
    let hex = |b: u8| (b as char).to_digit(16);
    let mut j = 0;
    let mut mant: u64 = 0;
    let mut sticky = false;
    let mut exp: i64 = 0;
    let mut digits = 0;
    let mut push = |d: u32, frac: bool, exp: &mut i64| {
        if mant >> 60 == 0 {
            mant = (mant << 4) | u64::from(d);
            if frac {
                *exp -= 4;
            }
        } else {
            // Beyond 64 significant bits: keep only whether something nonzero was dropped.
            sticky |= d != 0;
            if !frac {
                *exp += 4;
            }
        }
    };
    while let Some(d) = s.get(j).and_then(|&b| hex(b)) {
        push(d, false, &mut exp);
        digits += 1;
        j += 1;
    }
    if s.get(j) == Some(&b'.') {
        let mut k = j + 1;
        while let Some(d) = s.get(k).and_then(|&b| hex(b)) {
            push(d, true, &mut exp);
            digits += 1;
            k += 1;
        }
        if digits > 0 {
            j = k;
        }
    }
    if digits == 0 {
        return None;
    }
    if j < s.len() && (s[j] | 0x20) == b'p' {
        let mut k = j + 1;
        let mut eneg = false;
        if k < s.len() && (s[k] == b'+' || s[k] == b'-') {
            eneg = s[k] == b'-';
            k += 1;
        }
        if k < s.len() && s[k].is_ascii_digit() {
            let mut e: i64 = 0;
            while k < s.len() && s[k].is_ascii_digit() {
                e = (e * 10 + i64::from(s[k] - b'0')).min(1 << 40);
                k += 1;
            }
            exp += if eneg { -e } else { e };
            j = k;
        }
    }
    let nonzero = mant != 0 || sticky;
    // Round the mantissa to 53 bits (half to even, the sticky bit breaks ties upward).
    let bits = 64 - mant.leading_zeros() as i64;
    let mut v = if bits > 53 {
        let shift = (bits - 53) as u32;
        let rem = mant & ((1u64 << shift) - 1);
        let half = 1u64 << (shift - 1);
        let mut top = mant >> shift;
        if rem > half || (rem == half && (sticky || top & 1 == 1)) {
            top += 1;
        }
        exp += i64::from(shift);
        top as f64
    } else {
        mant as f64
    };
    let mut e = exp.clamp(-100_000, 100_000);
    while e > 1000 {
        v *= 2f64.powi(1000);
        e -= 1000;
    }
    while e < -1000 {
        v *= 2f64.powi(-1000);
        e += 1000;
    }
    v *= 2f64.powi(e as i32);
    Some((v, j, v.is_infinite() || (v == 0.0 && nonzero)))
}

/// redis `getDoubleFromObject`: a score, increment or weight argument.
pub fn parse_score(s: &[u8]) -> Option<f64> {
    if s.is_empty() || is_c_space(s[0]) {
        return None;
    }
    let r = strtod(s);
    if r.len != s.len() || (r.erange && (r.value.is_infinite() || r.value == 0.0)) {
        return None;
    }
    if r.value.is_nan() {
        None
    } else {
        Some(r.value)
    }
}

/// The C string Redis hands to `strtod` and friends: the bytes before the first NUL.
fn c_str(s: &[u8]) -> &[u8] {
    &s[..s.iter().position(|&b| b == 0).unwrap_or(s.len())]
}

/// A score interval (redis `zrangespec`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScoreRange {
    pub min: f64,
    pub max: f64,
    /// Exclusive bounds (`(`).
    pub minex: bool,
    pub maxex: bool,
}

impl ScoreRange {
    /// redis `zslParseRange`; None → `ERR min or max is not a float`.
    pub fn parse(min: &[u8], max: &[u8]) -> Option<ScoreRange> {
        let (min, minex) = Self::item(min)?;
        let (max, maxex) = Self::item(max)?;
        Some(ScoreRange {
            min,
            max,
            minex,
            maxex,
        })
    }

    fn item(s: &[u8]) -> Option<(f64, bool)> {
        let s = c_str(s);
        let (ex, body) = match s.first() {
            Some(b'(') => (true, &s[1..]),
            _ => (false, s),
        };
        let r = strtod(body);
        // No conversion leaves the end pointer at the start: fine only for an empty body.
        if r.len != body.len() || r.value.is_nan() {
            return None;
        }
        Some((r.value, ex))
    }

    pub fn gte_min(&self, v: f64) -> bool {
        if self.minex {
            v > self.min
        } else {
            v >= self.min
        }
    }

    pub fn lte_max(&self, v: f64) -> bool {
        if self.maxex {
            v < self.max
        } else {
            v <= self.max
        }
    }

    /// Ranges that can hold nothing (redis `zslIsInRange`'s first test).
    pub fn is_empty(&self) -> bool {
        self.min > self.max || (self.min == self.max && (self.minex || self.maxex))
    }
}

/// One end of a lex range: `-` (below everything), `+` (above everything) or a string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LexKey {
    Min,
    Max,
    Str(Vec<u8>),
}

/// redis `sdscmplex`: `-` and `+` compare below/above every string and equal to themselves.
fn cmp_lex(a: &LexKey, b: &LexKey) -> Ordering {
    match (a, b) {
        (LexKey::Min, LexKey::Min) | (LexKey::Max, LexKey::Max) => Ordering::Equal,
        (LexKey::Min, _) | (_, LexKey::Max) => Ordering::Less,
        (LexKey::Max, _) | (_, LexKey::Min) => Ordering::Greater,
        (LexKey::Str(x), LexKey::Str(y)) => x.cmp(y),
    }
}

fn cmp_member(m: &[u8], k: &LexKey) -> Ordering {
    match k {
        LexKey::Min => Ordering::Greater,
        LexKey::Max => Ordering::Less,
        LexKey::Str(s) => m.cmp(s),
    }
}

/// A lex interval (redis `zlexrangespec`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LexRange {
    pub min: LexKey,
    pub max: LexKey,
    pub minex: bool,
    pub maxex: bool,
}

impl LexRange {
    /// redis `zslParseLexRange`; None → `ERR min or max not valid string range item`.
    pub fn parse(min: &[u8], max: &[u8]) -> Option<LexRange> {
        let (min, minex) = Self::item(min)?;
        let (max, maxex) = Self::item(max)?;
        Some(LexRange {
            min,
            max,
            minex,
            maxex,
        })
    }

    fn item(s: &[u8]) -> Option<(LexKey, bool)> {
        // `+`/`-` must be the whole C string (redis tests `c[1] != '\0'`).
        let alone = s.len() == 1 || s.get(1) == Some(&0);
        match s.first()? {
            b'+' if alone => Some((LexKey::Max, true)),
            b'-' if alone => Some((LexKey::Min, true)),
            b'(' => Some((LexKey::Str(s[1..].to_vec()), true)),
            b'[' => Some((LexKey::Str(s[1..].to_vec()), false)),
            _ => None,
        }
    }

    pub fn gte_min(&self, m: &[u8]) -> bool {
        let c = cmp_member(m, &self.min);
        if self.minex { c.is_gt() } else { c.is_ge() }
    }

    pub fn lte_max(&self, m: &[u8]) -> bool {
        let c = cmp_member(m, &self.max);
        if self.maxex { c.is_lt() } else { c.is_le() }
    }

    /// Ranges that can hold nothing (redis `zslIsInLexRange`'s first test).
    pub fn is_empty(&self) -> bool {
        let c = cmp_lex(&self.min, &self.max);
        c.is_gt() || (c.is_eq() && (self.minex || self.maxex))
    }
}

/// C `%.17g` of a finite, nonzero double.
fn g17(v: f64, out: &mut Vec<u8>) {
    // `{:.16e}` is exact and rounds half to even like glibc: "d.dddddddddddddddde<exp>".
    let s = format!("{:.16e}", v);
    let (mant, exp) = s.split_once('e').unwrap_or((&s, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (neg, mant) = match mant.strip_prefix('-') {
        Some(m) => (true, m),
        None => (false, mant),
    };
    let digits: Vec<u8> = mant.bytes().filter(u8::is_ascii_digit).collect();
    if neg {
        out.push(b'-');
    }
    let trim = |d: &[u8]| -> usize { d.iter().rposition(|&c| c != b'0').map_or(0, |p| p + 1) };
    if !(-4..17).contains(&exp) {
        out.push(digits[0]);
        let frac = &digits[1..trim(&digits[1..]) + 1];
        if !frac.is_empty() {
            out.push(b'.');
            out.extend_from_slice(frac);
        }
        out.push(b'e');
        out.push(if exp < 0 { b'-' } else { b'+' });
        let e = exp.unsigned_abs();
        if e < 10 {
            out.push(b'0');
        }
        out.extend_from_slice(e.to_string().as_bytes());
    } else if exp >= 0 {
        let int_len = exp as usize + 1;
        out.extend_from_slice(&digits[..int_len]);
        let frac = &digits[int_len..];
        let frac = &frac[..trim(frac)];
        if !frac.is_empty() {
            out.push(b'.');
            out.extend_from_slice(frac);
        }
    } else {
        out.extend_from_slice(b"0.");
        for _ in 0..(-exp - 1) {
            out.push(b'0');
        }
        out.extend_from_slice(&digits[..trim(&digits)]);
    }
}

/// redis 7.0 `addReplyDouble` text: `%.17g`, `inf`, `-inf`.
pub fn fmt_reply(v: f64, out: &mut Vec<u8>) {
    if v.is_infinite() {
        out.extend_from_slice(if v > 0.0 { b"inf" } else { b"-inf" });
    } else if v.is_nan() {
        out.extend_from_slice(b"nan");
    } else if v == 0.0 {
        out.extend_from_slice(if v.is_sign_negative() { b"-0" } else { b"0" });
    } else {
        g17(v, out);
    }
}

/// redis 7.0 `d2string`: what a listpack stores for a score.
pub fn fmt_d2string(v: f64, out: &mut Vec<u8>) {
    // redis `double2ll`: an integral value within ±(LLONG_MAX/2) prints as an integer
    // (-0.0 included, which becomes "0").
    let lim = (i64::MAX / 2) as f64;
    if v.is_finite() && (-lim..=lim).contains(&v) && v == (v as i64) as f64 {
        out.extend_from_slice(itoa::Buffer::new().format(v as i64).as_bytes());
    } else {
        fmt_reply(v, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(v: f64) -> String {
        let mut o = Vec::new();
        fmt_reply(v, &mut o);
        String::from_utf8(o).unwrap()
    }

    fn d2s(v: f64) -> String {
        let mut o = Vec::new();
        fmt_d2string(v, &mut o);
        String::from_utf8(o).unwrap()
    }

    /// Expected texts were read from redis-server 7.0.15 (ZSCORE and ZSCAN).
    #[test]
    fn formats_like_redis() {
        for (v, r) in [
            (1.5, "1.5"),
            (0.1, "0.10000000000000001"),
            (1e20, "1e+20"),
            (1e-5, "1.0000000000000001e-05"),
            (3.0, "3"),
            (-0.0, "-0"),
            (0.0, "0"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
            (123456789012345678.0, "1.2345678901234568e+17"),
            (5e-324, "4.9406564584124654e-324"),
            (1e-320, "9.9998886718268301e-321"),
            (2.5, "2.5"),
            (1e15, "1000000000000000"),
            (1e16, "10000000000000000"),
            (1e17, "1e+17"),
            (0.0001, "0.0001"),
            (0.00012, "0.00012"),
            (-1234.5, "-1234.5"),
            (1.0 + 1.0 / 131072.0, "1.0000076293945312"),
        ] {
            assert_eq!(reply(v), r, "{v:e}");
        }
        assert_eq!(d2s(123456789012345678.0), "123456789012345680");
        assert_eq!(d2s(1e18), "1000000000000000000");
        assert_eq!(d2s(4611686018427387904.0), "4611686018427387904");
        assert_eq!(d2s(9223372036854775808.0), "9.2233720368547758e+18");
        assert_eq!(d2s(-4611686018427387904.0), "-4611686018427387904");
        assert_eq!(d2s(-0.0), "0");
        assert_eq!(d2s(2.5), "2.5");
        assert_eq!(d2s(2f64.powi(70)), "1.1805916207174113e+21");
    }

    #[test]
    fn score_arguments() {
        for (s, v) in [
            ("1", Some(1.0)),
            ("-1.5", Some(-1.5)),
            ("+2", Some(2.0)),
            (".5", Some(0.5)),
            ("5.", Some(5.0)),
            ("1e3", Some(1000.0)),
            ("0x10", Some(16.0)),
            ("0x1p-2", Some(0.25)),
            ("0X1.8P1", Some(3.0)),
            ("inf", Some(f64::INFINITY)),
            ("-INF", Some(f64::NEG_INFINITY)),
            ("+inf", Some(f64::INFINITY)),
            ("Infinity", Some(f64::INFINITY)),
            ("5e-324", Some(5e-324)),
            ("nan", None),
            ("-nan", None),
            ("nan(1)", None),
            ("", None),
            (" 1", None),
            ("1 ", None),
            ("1e", None),
            ("0x", None),
            ("abc", None),
            ("1e400", None),
            ("1e-400", None),
            ("0x1p-5000", None),
            ("0e-400", Some(0.0)),
            ("1\u{0}", None),
            ("--1", None),
            ("infx", None),
        ] {
            assert_eq!(parse_score(s.as_bytes()), v, "{s:?}");
        }
    }

    #[test]
    fn score_ranges() {
        let r = ScoreRange::parse(b"(1", b"+inf").unwrap();
        assert!(r.minex && !r.maxex && r.min == 1.0 && r.max == f64::INFINITY);
        assert!(!r.gte_min(1.0) && r.gte_min(1.5) && r.lte_max(f64::INFINITY));
        // Quirks of strtod without checks, as Redis has them.
        assert_eq!(ScoreRange::parse(b"", b"(").unwrap().max, 0.0);
        assert!(ScoreRange::parse(b"", b"(").unwrap().maxex);
        assert_eq!(
            ScoreRange::parse(b" 1", b"1e400").unwrap().max,
            f64::INFINITY
        );
        assert_eq!(ScoreRange::parse(b"1\x00x", b"2").unwrap().min, 1.0);
        assert!(ScoreRange::parse(b" ", b"1").is_none());
        assert!(ScoreRange::parse(b"nan", b"1").is_none());
        assert!(ScoreRange::parse(b"1", b"((2").is_none());
        assert!(ScoreRange::parse(b"a", b"1").is_none());
        assert!(ScoreRange::parse(b"2", b"1").unwrap().is_empty());
        assert!(ScoreRange::parse(b"1", b"(1").unwrap().is_empty());
        assert!(!ScoreRange::parse(b"1", b"1").unwrap().is_empty());
    }

    #[test]
    fn lex_ranges() {
        let r = LexRange::parse(b"[b", b"(d").unwrap();
        assert!(r.gte_min(b"b") && !r.gte_min(b"a") && r.lte_max(b"c") && !r.lte_max(b"d"));
        let all = LexRange::parse(b"-", b"+").unwrap();
        assert!(all.gte_min(b"") && all.lte_max(b"\xff\xff") && !all.is_empty());
        assert!(LexRange::parse(b"+", b"-").unwrap().is_empty());
        assert!(LexRange::parse(b"-", b"-").unwrap().is_empty());
        assert!(LexRange::parse(b"(a", b"[a").unwrap().is_empty());
        assert!(!LexRange::parse(b"[a", b"[a").unwrap().is_empty());
        assert!(LexRange::parse(b"a", b"+").is_none());
        assert!(LexRange::parse(b"", b"+").is_none());
        assert!(LexRange::parse(b"+x", b"+").is_none());
        assert!(LexRange::parse(b"+\x00x", b"+").is_some());
        assert_eq!(
            LexRange::parse(b"(", b"[").unwrap().min,
            LexKey::Str(Vec::new())
        );
    }
}
