//! What Redis's embedded C libraries (`cjson`, `cmsgpack`, `struct`) see of Lua 5.1's C API
//! and of glibc, rebuilt for their Rust versions: argument checks and their error texts
//! (`luaL_argerror`, `luaL_typerror`, `luaL_where`), conversions (`lua_tonumber`,
//! `lua_tointeger`, `lua_tolstring`), glibc's `strtod` and `%.Ng`, x86-64's float → integer
//! casts, and the Lua stack limit the C code runs into (`LUAI_MAXCSTACK`).
//!
//! An error these libraries raise is a plain string in Redis (`luaL_error`); here it is a
//! [`LibError`], which the host's error handler and the sandbox's `pcall` turn back into that
//! string (lib.rs, prelude.lua).

use mlua::{Lua, MultiValue, Value};

/// Lua 5.1's `LUAI_MAXCSTACK`: `lua_checkstack` fails past this many slots in one C call.
pub const MAXCSTACK: usize = 8000;
/// Cap on a library's output buffer when the state sets none ([`OUTPUT_CAP`]): a
/// self-referencing table packed to the nesting limit grows without end (Redis's own code
/// would exhaust memory, and no hook stops a C function); past the cap it is an error.
pub const MAX_OUTPUT: usize = 512 << 20;
/// Registry key of the state's output cap (lib.rs sets it to the Lua heap's limit: a longer
/// string could not be created anyway).
pub const OUTPUT_CAP: &str = "recached.output_cap";

/// The output cap of `lua`'s state ([`OUTPUT_CAP`], else [`MAX_OUTPUT`]).
pub fn output_cap(lua: &Lua) -> usize {
    lua.named_registry_value::<Option<usize>>(OUTPUT_CAP)
        .ok()
        .flatten()
        .unwrap_or(MAX_OUTPUT)
}

/// The error of an output past the cap: Lua's own allocation failure.
pub fn out_of_memory() -> mlua::Error {
    mlua::Error::MemoryError("not enough memory".into())
}

/// 2^63 (the bounds of `int64_t`).
pub const TWO63: f64 = (1u64 << 63) as f64;

/// A string error as `luaL_error` raises it (its bytes are the Lua string scripts see).
#[derive(Debug)]
pub struct LibError(pub Vec<u8>);

impl std::fmt::Display for LibError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&String::from_utf8_lossy(&self.0))
    }
}

impl std::error::Error for LibError {}

/// The text of a [`LibError`] inside an error mlua raised, if it is one.
pub fn lib_error_text(e: &mlua::Error) -> Option<&[u8]> {
    e.downcast_ref::<LibError>().map(|l| l.0.as_slice())
}

/// A [`LibError`] inside `v` (an error value Lua code caught) as its Lua string; `None` for
/// any other value (lib.rs's error handler and the sandbox's `pcall` use it).
pub fn error_string(lua: &Lua, v: &Value) -> mlua::Result<Option<Value>> {
    match v {
        Value::Error(e) => match lib_error_text(e) {
            Some(t) => Ok(Some(Value::String(lua.create_string(t)?))),
            None => Ok(None),
        },
        _ => Ok(None),
    }
}

/// `luaL_where(L, 1)`: `short_src:line: ` of the function that called the running C function,
/// or nothing when that is not Lua code.
pub fn where_(lua: &Lua) -> Vec<u8> {
    lua.inspect_stack(1, |d| {
        let line = d.current_line()?;
        let src = d.source().short_src?.into_owned();
        Some(format!("{src}:{line}: ").into_bytes())
    })
    .flatten()
    .unwrap_or_default()
}

/// `luaL_error`: `msg` after [`where_`].
pub fn error(lua: &Lua, msg: impl AsRef<[u8]>) -> mlua::Error {
    let mut text = where_(lua);
    text.extend_from_slice(msg.as_ref());
    mlua::Error::external(LibError(text))
}

/// `luaL_error` when called with no caller information (errors Lua itself raises inside a C
/// function, such as `table index is nil`).
pub fn raw_error(msg: impl AsRef<[u8]>) -> mlua::Error {
    mlua::Error::external(LibError(msg.as_ref().to_vec()))
}

/// `luaL_argerror`: `bad argument #n to 'name' (msg)`, the name as the caller called the
/// function (`?` when unknown, e.g. called through `pcall`); a method call does not count `self`.
pub fn arg_error(lua: &Lua, narg: i32, msg: impl AsRef<[u8]>) -> mlua::Error {
    let (name, what) = lua
        .inspect_stack(0, |d| {
            let n = d.names();
            (n.name.map(|s| s.into_owned()), n.name_what)
        })
        .unwrap_or((None, None));
    let msg = msg.as_ref();
    let mut narg = narg;
    if what == Some("method") {
        narg -= 1;
        if narg == 0 {
            let mut t =
                format!("calling '{}' on bad self (", name.unwrap_or_default()).into_bytes();
            t.extend_from_slice(msg);
            t.push(b')');
            return error(lua, t);
        }
    }
    let mut t = format!(
        "bad argument #{narg} to '{}' (",
        name.as_deref().unwrap_or("?")
    )
    .into_bytes();
    t.extend_from_slice(msg);
    t.push(b')');
    error(lua, t)
}

/// `lua_typename(lua_type(v))`; `None` is an absent argument (`no value`).
pub fn type_name(v: Option<&Value>) -> &'static str {
    match v {
        None => "no value",
        Some(Value::Nil) => "nil",
        Some(Value::Boolean(_)) => "boolean",
        Some(Value::LightUserData(_)) | Some(Value::UserData(_)) => "userdata",
        Some(Value::Integer(_)) | Some(Value::Number(_)) => "number",
        Some(Value::String(_)) => "string",
        Some(Value::Table(_)) => "table",
        Some(Value::Function(_)) => "function",
        Some(Value::Thread(_)) => "thread",
        Some(_) => "userdata",
    }
}

/// `luaL_typerror`: `bad argument #n to 'f' (<expected> expected, got <type>)`.
pub fn type_error(lua: &Lua, args: &MultiValue, narg: usize, expected: &str) -> mlua::Error {
    let got = type_name(args.get(narg - 1));
    arg_error(lua, narg as i32, format!("{expected} expected, got {got}"))
}

/// A Lua number as a double (`Value::Integer` is mlua's view of an integral one).
pub fn number(v: &Value) -> Option<f64> {
    match v {
        Value::Integer(n) => Some(*n as f64),
        Value::Number(n) => Some(*n),
        _ => None,
    }
}

/// `lua_tonumber`/`lua_isnumber`: numbers, and strings that read as one (`luaO_str2d`:
/// strtod, then only spaces; the string ends at its first NUL as in C).
pub fn tonumber(v: &Value) -> Option<f64> {
    match v {
        Value::String(s) => {
            let b = s.as_bytes();
            let b = c_str(&b);
            let (n, used) = strtod(b)?;
            b[used..]
                .iter()
                .all(|c| c.is_ascii_whitespace() || *c == 0x0b)
                .then_some(n)
        }
        v => number(v),
    }
}

/// The part of `b` before its first NUL (what C string functions see).
pub fn c_str(b: &[u8]) -> &[u8] {
    match b.iter().position(|&c| c == 0) {
        Some(i) => &b[..i],
        None => b,
    }
}

/// `luaL_checknumber`.
pub fn check_number(lua: &Lua, args: &MultiValue, narg: usize) -> mlua::Result<f64> {
    args.get(narg - 1)
        .and_then(tonumber)
        .ok_or_else(|| type_error(lua, args, narg, "number"))
}

/// `luaL_checkinteger`: the number cast to `lua_Integer` (truncated).
pub fn check_integer(lua: &Lua, args: &MultiValue, narg: usize) -> mlua::Result<i64> {
    check_number(lua, args, narg).map(cast_i64)
}

/// `luaL_optinteger`: `def` when the argument is absent or nil.
pub fn opt_integer(lua: &Lua, args: &MultiValue, narg: usize, def: i64) -> mlua::Result<i64> {
    match args.get(narg - 1) {
        None | Some(Value::Nil) => Ok(def),
        _ => check_integer(lua, args, narg),
    }
}

/// `luaL_checklstring`: strings, and numbers as `%.14g` text.
pub fn check_lstring(lua: &Lua, args: &MultiValue, narg: usize) -> mlua::Result<Vec<u8>> {
    match args.get(narg - 1) {
        Some(Value::String(s)) => Ok(s.as_bytes().to_vec()),
        Some(v) if number(v).is_some() => Ok(fmt_g(number(v).unwrap_or(0.0), 14).into_bytes()),
        _ => Err(type_error(lua, args, narg, "string")),
    }
}

/// x86-64's `(int64_t)d` (cvttsd2si): truncation; NaN and out-of-range give `INT64_MIN`.
pub fn cast_i64(d: f64) -> i64 {
    if !(-TWO63..TWO63).contains(&d) {
        i64::MIN
    } else {
        d as i64
    }
}

/// x86-64's `(int)d`: truncation; NaN and out-of-range give `INT_MIN`.
pub fn cast_i32(d: f64) -> i32 {
    if d.is_nan() || d >= 2_147_483_648.0 || d <= -2_147_483_649.0 {
        i32::MIN
    } else {
        d as i32
    }
}

/// gcc's `(uint64_t)d` on x86-64: below 2^63 as `(int64_t)d`, else `(int64_t)(d - 2^63)`
/// with the top bit flipped (so 2^64 and beyond, and infinity, give 0; NaN 2^63).
pub fn cast_u64(d: f64) -> u64 {
    if d.is_nan() || d < TWO63 {
        cast_i64(d) as u64
    } else {
        (cast_i64(d - TWO63) as u64) ^ (1 << 63)
    }
}

/// glibc's `printf("%.<prec>g", x)`.
pub fn fmt_g(x: f64, prec: usize) -> String {
    let prec = prec.max(1);
    let neg = x.is_sign_negative();
    let sign = if neg { "-" } else { "" };
    if x.is_nan() {
        return format!("{sign}nan");
    }
    if x.is_infinite() {
        return format!("{sign}inf");
    }
    let a = x.abs();
    if a == 0.0 {
        return format!("{sign}0");
    }
    if let Some(text) = g_shortest(a, prec) {
        return format!("{sign}{text}");
    }
    let e = format!("{:.*e}", prec - 1, a);
    let (mant, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if exp < -4 || exp >= prec as i32 {
        let m = trim_zeros(mant);
        let es = if exp < 0 { '-' } else { '+' };
        format!("{sign}{m}e{es}{:02}", exp.abs())
    } else {
        let f = format!("{:.*}", (prec as i32 - 1 - exp) as usize, a);
        format!("{sign}{}", trim_zeros(&f))
    }
}

/// `%.<prec>g` of a positive normal `a` from its shortest round-trip digits (ryu), when there
/// are at most `prec` of them: the value is then within half an ulp of those digits, far less
/// than half a unit of the `prec`-th digit (`prec` ≤ 15), so rounding it to `prec` digits
/// gives them. `None` otherwise (the exact path in [`fmt_g`] decides).
fn g_shortest(a: f64, prec: usize) -> Option<String> {
    // Subnormals have fewer bits: their ulp can exceed the digit's half-unit.
    if prec > 15 || a < f64::MIN_POSITIVE {
        return None;
    }
    let mut buf = ryu::Buffer::new();
    let s = buf.format_finite(a);
    let (mant, exp) = match s.split_once(['e', 'E']) {
        Some((m, e)) => (m, e.parse::<i32>().ok()?),
        None => (s, 0),
    };
    // Digits without the point, and the exponent of the first one.
    let (int, frac) = mant.split_once('.').unwrap_or((mant, ""));
    let mut digits: Vec<u8> = int.bytes().chain(frac.bytes()).collect();
    let mut first = exp + int.len() as i32 - 1;
    while digits.first() == Some(&b'0') {
        digits.remove(0);
        first -= 1;
    }
    while digits.last() == Some(&b'0') {
        digits.pop();
    }
    if digits.is_empty() || digits.len() > prec {
        return None;
    }
    let d = std::str::from_utf8(&digits).ok()?;
    Some(if first < -4 || first >= prec as i32 {
        let (head, tail) = d.split_at(1);
        let point = if tail.is_empty() { "" } else { "." };
        let es = if first < 0 { '-' } else { '+' };
        format!("{head}{point}{tail}e{es}{:02}", first.abs())
    } else if first < 0 {
        format!("0.{}{d}", "0".repeat((-first - 1) as usize))
    } else if (first as usize) + 1 >= d.len() {
        format!("{d}{}", "0".repeat(first as usize + 1 - d.len()))
    } else {
        let (i, f) = d.split_at(first as usize + 1);
        format!("{i}.{f}")
    })
}

fn trim_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

/// glibc's `strtod` on `s` (read up to its end; callers pass C strings): the value and the
/// number of bytes read, or `None` when no number starts `s` (after spaces). Decimal (correctly
/// rounded), hexadecimal (`0x1.8p3`), `inf`/`infinity` and `nan`/`nan(chars)`, any case.
pub fn strtod(s: &[u8]) -> Option<(f64, usize)> {
    let at = |i: usize| s.get(i).copied().unwrap_or(0);
    let mut i = 0;
    while at(i) == b' ' || (b'\t'..=b'\r').contains(&at(i)) {
        i += 1;
    }
    let mut neg = false;
    if at(i) == b'+' || at(i) == b'-' {
        neg = at(i) == b'-';
        i += 1;
    }
    let sign = |v: f64| if neg { -v } else { v };
    let word =
        |i: usize, w: &[u8]| s.len() >= i + w.len() && s[i..i + w.len()].eq_ignore_ascii_case(w);
    if word(i, b"inf") {
        let n = if word(i, b"infinity") { 8 } else { 3 };
        return Some((sign(f64::INFINITY), i + n));
    }
    if word(i, b"nan") {
        let mut end = i + 3;
        let mut bits: u64 = 0x7ff8_0000_0000_0000;
        if at(end) == b'(' {
            let mut j = end + 1;
            while at(j).is_ascii_alphanumeric() || at(j) == b'_' {
                j += 1;
            }
            if at(j) == b')' {
                if let Some(p) = nan_payload(&s[end + 1..j]) {
                    bits |= p & ((1 << 51) - 1);
                }
                end = j + 1;
            }
        }
        let v = f64::from_bits(bits);
        return Some((if neg { -v } else { v }, end));
    }
    if at(i) == b'0' && (at(i + 1) | 0x20) == b'x' {
        if let Some((v, end)) = hex_float(s, i + 2) {
            return Some((sign(v), end));
        }
        // "0x" without digits: the "0".
        return Some((sign(0.0), i + 1));
    }
    let start = i;
    let digits = |mut j: usize| {
        while at(j).is_ascii_digit() {
            j += 1;
        }
        j
    };
    let int_end = digits(i);
    let mut end = int_end;
    let mut frac_digits = 0;
    if at(end) == b'.' {
        let f = digits(end + 1);
        frac_digits = f - end - 1;
        end = f;
    }
    if int_end == start && frac_digits == 0 {
        return None;
    }
    if at(end) | 0x20 == b'e' {
        let mut j = end + 1;
        if at(j) == b'+' || at(j) == b'-' {
            j += 1;
        }
        let k = digits(j);
        if k > j {
            end = k;
        }
    }
    let text = std::str::from_utf8(&s[start..end]).ok()?;
    let v: f64 = text.parse().ok().or_else(|| {
        // Rust's parser wants a digit before an exponent: "1.e5" → "1.0e5".
        text.replacen(".e", ".0e", 1)
            .replacen(".E", ".0E", 1)
            .parse()
            .ok()
    })?;
    Some((sign(v), end))
}

/// glibc's `nan(chars)` payload: the chars read whole as `strtoull(chars, 0)`.
fn nan_payload(chars: &[u8]) -> Option<u64> {
    let t = std::str::from_utf8(chars).ok()?;
    if t.is_empty() {
        return None;
    }
    if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        return u64::from_str_radix(h, 16).ok();
    }
    if t.len() > 1 && t.starts_with('0') {
        return u64::from_str_radix(&t[1..], 8).ok();
    }
    t.parse().ok()
}

/// The hexadecimal float after `0x` at `i`: `None` without any hex digit. Rounded to nearest,
/// ties to even, subnormals included.
fn hex_float(s: &[u8], mut i: usize) -> Option<(f64, usize)> {
    let at = |i: usize| s.get(i).copied().unwrap_or(0);
    let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u64);
    let (mut m, mut exp, mut sticky, mut any) = (0u64, 0i64, false, false);
    let mut point = false;
    loop {
        let c = at(i);
        if c == b'.' && !point {
            point = true;
        } else if let Some(d) = hex(c) {
            any = true;
            if m >> 60 == 0 {
                m = m << 4 | d;
                if point {
                    exp -= 4;
                }
            } else {
                sticky |= d != 0;
                if !point {
                    exp += 4;
                }
            }
        } else {
            break;
        }
        i += 1;
    }
    if !any {
        return None;
    }
    if at(i) | 0x20 == b'p' {
        let mut j = i + 1;
        let mut eneg = false;
        if at(j) == b'+' || at(j) == b'-' {
            eneg = at(j) == b'-';
            j += 1;
        }
        if at(j).is_ascii_digit() {
            let mut e: i64 = 0;
            while at(j).is_ascii_digit() {
                e = (e * 10 + (at(j) - b'0') as i64).min(1 << 40);
                j += 1;
            }
            exp += if eneg { -e } else { e };
            i = j;
        }
    }
    if m == 0 {
        return Some((0.0, i));
    }
    Some((compose(m, exp, sticky), i))
}

/// `m * 2^exp` (plus a sticky bit below `m`) rounded to a double.
fn compose(m: u64, exp: i64, sticky: bool) -> f64 {
    let bits = 64 - m.leading_zeros() as i64;
    let top = exp + bits - 1; // exponent of the leading bit
    if top > 1023 {
        return f64::INFINITY;
    }
    // Bits of precision available at this exponent.
    let prec = if top >= -1022 { 53 } else { 53 - (-1022 - top) };
    if prec <= 0 {
        // Below half the smallest subnormal, or exactly around it.
        if prec == 0 && (m.count_ones() > 1 || sticky) {
            return f64::from_bits(1);
        }
        return 0.0;
    }
    let shift = bits - prec;
    let (mut mant, mut e2) = (m, exp);
    if shift > 0 {
        let rem = m & ((1u64 << shift) - 1);
        let half = 1u64 << (shift - 1);
        mant = m >> shift;
        e2 += shift;
        if rem > half || (rem == half && (sticky || mant & 1 == 1)) {
            mant += 1;
        }
    } else {
        mant <<= -shift;
        e2 += shift;
    }
    // mant has prec bits (or prec+1 after a carry); value = mant * 2^e2.
    if top >= -1022 {
        let (mant, e2) = if mant >> 53 != 0 {
            (mant >> 1, e2 + 1)
        } else {
            (mant, e2)
        };
        let biased = e2 + 52 + 1023;
        if biased >= 2047 {
            return f64::INFINITY;
        }
        f64::from_bits((biased as u64) << 52 | (mant & ((1 << 52) - 1)))
    } else {
        // Subnormal: the unit is 2^-1074.
        f64::from_bits(mant << (e2 + 1074))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn g_format() {
        let g = |x: f64| fmt_g(x, 14);
        assert_eq!(g(3.0), "3");
        assert_eq!(g(0.1), "0.1");
        assert_eq!(g(-0.0), "-0");
        assert_eq!(g(1e20), "1e+20");
        assert_eq!(g(1e14), "1e+14");
        assert_eq!(g(12345678901234.0), "12345678901234");
        assert_eq!(g(123456789012345.0), "1.2345678901234e+14");
        assert_eq!(g(1.0 / 3.0), "0.33333333333333");
        assert_eq!(g(0.0001), "0.0001");
        assert_eq!(g(0.00001), "1e-05");
        assert_eq!(g(f64::NAN), "nan");
        assert_eq!(g(-f64::NAN), "-nan");
        assert_eq!(g(f64::NEG_INFINITY), "-inf");
        assert_eq!(g(5e-324), "4.9406564584125e-324");
        assert_eq!(g(1.7976931348623157e308), "1.7976931348623e+308");
        assert_eq!(fmt_g(0.125, 2), "0.12");
        assert_eq!(fmt_g(2.5, 1), "2");
        assert_eq!(fmt_g(100.0, 1), "1e+02");
    }

    /// The ryu shortcut agrees with the exact path wherever it answers.
    #[test]
    fn g_shortest_agrees() {
        let exact = |x: f64, prec: usize| {
            let e = format!("{:.*e}", prec - 1, x);
            let (mant, exp) = e.split_once('e').unwrap();
            let exp: i32 = exp.parse().unwrap();
            if exp < -4 || exp >= prec as i32 {
                let es = if exp < 0 { '-' } else { '+' };
                format!("{}e{es}{:02}", trim_zeros(mant), exp.abs())
            } else {
                trim_zeros(&format!("{:.*}", (prec as i32 - 1 - exp) as usize, x)).to_string()
            }
        };
        let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut checked = 0;
        for i in 0..200_000u64 {
            let x = match i % 5 {
                0 => f64::from_bits(next() >> 1),
                4 => f64::from_bits(next() >> 13),
                1 => (next() % 1_000_000_000) as f64 / 1000.0,
                2 => (next() % 100_000) as f64 * 1.25,
                _ => (next() % 10_000_000_000_000_000) as f64,
            };
            if !x.is_finite() || x == 0.0 {
                continue;
            }
            for prec in [1, 3, 6, 14] {
                if let Some(fast) = g_shortest(x, prec) {
                    assert_eq!(fast, exact(x, prec), "{x:e} prec {prec}");
                    checked += 1;
                }
            }
        }
        assert!(checked > 100_000, "{checked}");
        for (x, want) in [
            (100.0, "100"),
            (1e14, "1e+14"),
            (1.25, "1.25"),
            (0.0001, "0.0001"),
            (1e-5, "1e-05"),
            (123456.0, "123456"),
        ] {
            assert_eq!(g_shortest(x, 14).as_deref(), Some(want));
        }
    }

    #[test]
    fn strtod_forms() {
        let p = |s: &str| strtod(s.as_bytes());
        assert_eq!(p("1"), Some((1.0, 1)));
        assert_eq!(p("  -1.5e3x"), Some((-1500.0, 8)));
        assert_eq!(p("1e"), Some((1.0, 1)));
        assert_eq!(p("1e+"), Some((1.0, 1)));
        assert_eq!(p("1."), Some((1.0, 2)));
        assert_eq!(p(".5"), Some((0.5, 2)));
        assert_eq!(p("1.e2"), Some((100.0, 4)));
        assert_eq!(p("."), None);
        assert_eq!(p("-"), None);
        assert_eq!(p("x"), None);
        assert_eq!(p("0x10"), Some((16.0, 4)));
        assert_eq!(p("0x"), Some((0.0, 1)));
        assert_eq!(p("0x1.8p1"), Some((3.0, 7)));
        assert_eq!(p("0x.8"), Some((0.5, 4)));
        assert_eq!(p("0x1p-1074"), Some((5e-324, 9)));
        assert_eq!(p("0x1p-1075"), Some((0.0, 9)));
        assert_eq!(p("0x1.8p-1075"), Some((5e-324, 11)));
        assert_eq!(p("0x1p1024"), Some((f64::INFINITY, 8)));
        assert_eq!(p("0x1fffffffffffff"), Some((9007199254740991.0, 16)));
        assert_eq!(p("0x20000000000001"), Some((9007199254740992.0, 16)));
        assert_eq!(p("0x20000000000003"), Some((9007199254740996.0, 16)));
        assert_eq!(
            p("0xffffffffffffffffff"),
            Some((4722366482869645213696.0, 20))
        );
        assert_eq!(p("infinity"), Some((f64::INFINITY, 8)));
        assert_eq!(p("-Infin"), Some((f64::NEG_INFINITY, 4)));
        let (n, used) = p("nan(12)x").unwrap();
        assert!(n.is_nan() && used == 7 && n.to_bits() == 0x7ff8_0000_0000_000c);
        let (n, used) = p("-nan(").unwrap();
        assert!(n.is_nan() && n.is_sign_negative() && used == 4);
        assert_eq!(p("1e400"), Some((f64::INFINITY, 5)));
        assert_eq!(
            p("2.2250738585072011e-308").unwrap().0,
            2.225073858507201e-308
        );
    }

    /// The libraries' functions hold no `Lua` (a strong handle captured in a callback keeps
    /// the state alive for good: SCRIPT FLUSH would leak the old one).
    #[test]
    fn libraries_let_the_state_go() {
        let lua = Lua::new();
        let next: mlua::Function = lua.globals().get("next").unwrap();
        let g = lua.globals();
        g.set("bit", crate::bit::table(&lua).unwrap()).unwrap();
        g.set("cjson", crate::cjson::table(&lua, &next).unwrap())
            .unwrap();
        g.set("cmsgpack", crate::cmsgpack::table(&lua).unwrap())
            .unwrap();
        g.set("struct", crate::struct_lib::table(&lua).unwrap())
            .unwrap();
        drop((g, next));
        let weak = lua.weak();
        drop(lua);
        assert!(weak.try_upgrade().is_none());
    }

    #[test]
    fn casts() {
        assert_eq!(cast_i64(f64::NAN), i64::MIN);
        assert_eq!(cast_i64(9.3e18), i64::MIN);
        assert_eq!(cast_i64(-1.9), -1);
        assert_eq!(cast_i32(2147483648.0), i32::MIN);
        assert_eq!(cast_i32(-2147483648.5), -2147483648);
        assert_eq!(cast_u64(1e19), 10_000_000_000_000_000_000);
        assert_eq!(cast_u64(2f64.powi(64)), 0);
        assert_eq!(cast_u64(f64::INFINITY), 0);
        assert_eq!(cast_u64(f64::NAN), 1 << 63);
        assert_eq!(cast_u64(-1.0), u64::MAX);
    }
}
