//! The `struct` library Redis embeds (Roberto Ierusalimschy's struct 0.2,
//! `deps/lua/src/lua_struct.c`) as built for x86-64: `struct.pack`, `struct.unpack` and
//! `struct.size` over formats of `>` `<` `!n` (endianness, alignment), `b B h H l L T i I`
//! (integers of 1, 1, 2, 2, 8, 8, 8 and `in` bytes, `n` ≤ 32, default 4), `f d` (float,
//! double), `c n` (n chars; `c0`: as long as the string, or the previous number when
//! unpacking), `s` (zero-terminated), `x` (a pad byte) and spaces. Native order is little
//! endian; the largest alignment is 8. Integers past 64 bits and out-of-range numbers behave
//! as the C casts do on x86-64.

use mlua::{Lua, MultiValue, Table, Value};

use crate::clib::{self, MAXCSTACK, arg_error};

/// Largest alignment (`MAXALIGN`: a double's on x86-64).
const MAXALIGN: i32 = 8;
/// Largest integer size in bytes (`MAXINTSIZE`).
const MAXINTSIZE: i32 = 32;

/// The `struct` table.
pub fn table(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.raw_set("pack", lua.create_function(pack)?)?;
    t.raw_set("unpack", lua.create_function(unpack)?)?;
    t.raw_set("size", lua.create_function(size)?)?;
    Ok(t)
}

#[derive(Clone, Copy)]
struct Header {
    little: bool,
    align: usize,
}

impl Default for Header {
    fn default() -> Header {
        Header {
            little: true,
            align: 1,
        }
    }
}

/// A format string being read (a C string: it ends at its first NUL).
struct Fmt<'a> {
    s: &'a [u8],
    i: usize,
}

impl Fmt<'_> {
    fn peek(&self) -> u8 {
        self.s.get(self.i).copied().unwrap_or(0)
    }

    fn next(&mut self) -> Option<u8> {
        let c = self.s.get(self.i).copied()?;
        self.i += 1;
        Some(c)
    }

    /// `getnum`: the digits here, or `df` when there are none.
    fn num(&mut self, lua: &Lua, df: i32) -> mlua::Result<i32> {
        if !self.peek().is_ascii_digit() {
            return Ok(df);
        }
        let mut a: i32 = 0;
        while self.peek().is_ascii_digit() {
            let d = (self.peek() - b'0') as i32;
            if a > i32::MAX / 10 || a * 10 > i32::MAX - d {
                return Err(clib::error(lua, "integral size overflow"));
            }
            a = a * 10 + d;
            self.i += 1;
        }
        Ok(a)
    }

    /// `optsize`: the size of option `opt` (0 for those without one).
    fn size(&mut self, lua: &Lua, opt: u8) -> mlua::Result<usize> {
        Ok(match opt {
            b'B' | b'b' => 1,
            b'H' | b'h' => 2,
            b'L' | b'l' | b'T' | b'd' => 8,
            b'f' => 4,
            b'x' => 1,
            b'c' => self.num(lua, 1)? as usize,
            b'i' | b'I' => {
                let sz = self.num(lua, 4)?;
                if sz > MAXINTSIZE {
                    return Err(clib::error(
                        lua,
                        format!("integral size {sz} is larger than limit of {MAXINTSIZE}"),
                    ));
                }
                sz as usize
            }
            _ => 0,
        })
    }

    /// `controloptions`: spaces, `>`, `<`, `!n`; anything else is an invalid option.
    fn control(&mut self, lua: &Lua, opt: u8, h: &mut Header) -> mlua::Result<()> {
        match opt {
            b' ' => {}
            b'>' => h.little = false,
            b'<' => h.little = true,
            b'!' => {
                let a = self.num(lua, MAXALIGN)?;
                if !(a > 0 && a & (a - 1) == 0) {
                    return Err(clib::error(
                        lua,
                        format!("alignment {a} is not a power of 2"),
                    ));
                }
                h.align = a as usize;
            }
            _ => {
                let mut msg = b"invalid format option '".to_vec();
                msg.push(opt);
                msg.push(b'\'');
                return Err(arg_error(lua, 1, msg));
            }
        }
        Ok(())
    }
}

/// `gettoalign`: padding before an item of `size` at `len` (size_t arithmetic).
fn to_align(len: usize, h: &Header, opt: u8, size: usize) -> usize {
    if size == 0 || opt == b'c' {
        return 0;
    }
    let size = size.min(h.align);
    size.wrapping_sub(len & size.wrapping_sub(1)) & size.wrapping_sub(1)
}

fn fmt_arg(lua: &Lua, args: &MultiValue) -> mlua::Result<Vec<u8>> {
    let f = clib::check_lstring(lua, args, 1)?;
    Ok(clib::c_str(&f).to_vec())
}

fn pack(lua: &Lua, mut args: MultiValue) -> mlua::Result<mlua::LuaString> {
    let fmt = fmt_arg(lua, &args)?;
    // The C code pushes a nil after its arguments (a mark before its string buffer): a
    // missing argument right after the last is a nil, not "no value".
    args.push_back(Value::Nil);
    let mut f = Fmt { s: &fmt, i: 0 };
    let mut h = Header::default();
    let mut arg = 2;
    let mut total: usize = 0;
    let mut out = Vec::new();
    while let Some(opt) = f.next() {
        let mut size = f.size(lua, opt)?;
        let pad = to_align(total, &h, opt, size);
        total = total.wrapping_add(pad);
        out.resize(out.len() + pad, 0);
        match opt {
            b'b' | b'B' | b'h' | b'H' | b'l' | b'L' | b'T' | b'i' | b'I' => {
                let n = clib::check_number(lua, &args, arg)?;
                arg += 1;
                let mut value = if n < 0.0 {
                    clib::cast_i64(n) as u64
                } else {
                    clib::cast_u64(n)
                };
                let mut buf = vec![0u8; size];
                for i in 0..size {
                    let at = if h.little { i } else { size - 1 - i };
                    buf[at] = value as u8;
                    value = value.checked_shr(8).unwrap_or(0);
                }
                out.extend_from_slice(&buf);
            }
            b'x' => out.push(0),
            b'f' => {
                let v = clib::check_number(lua, &args, arg)? as f32;
                arg += 1;
                out.extend_from_slice(&if h.little {
                    v.to_le_bytes()
                } else {
                    v.to_be_bytes()
                });
            }
            b'd' => {
                let v = clib::check_number(lua, &args, arg)?;
                arg += 1;
                out.extend_from_slice(&if h.little {
                    v.to_le_bytes()
                } else {
                    v.to_be_bytes()
                });
            }
            b'c' | b's' => {
                let s = clib::check_lstring(lua, &args, arg)?;
                arg += 1;
                if size == 0 {
                    size = s.len();
                }
                if s.len() < size {
                    // The C code checks against the argument after the string's.
                    return Err(arg_error(lua, arg as i32, "string too short"));
                }
                out.extend_from_slice(&s[..size]);
                if opt == b's' {
                    out.push(0);
                    size += 1;
                }
            }
            _ => f.control(lua, opt, &mut h)?,
        }
        total = total.wrapping_add(size);
    }
    lua.create_string(&out)
}

/// `getinteger`: `size` bytes as an unsigned or sign-extended integer (only the low 64 bits
/// survive; the sign bit is bit `size*8-1` taken modulo 64, as x86's shift counts are).
fn get_integer(b: &[u8], little: bool, signed: bool) -> f64 {
    let mut l: u64 = 0;
    let mut push = |x: u8| l = l.wrapping_shl(8) | x as u64;
    if little {
        b.iter().rev().for_each(|&x| push(x));
    } else {
        b.iter().for_each(|&x| push(x));
    }
    if !signed {
        return l as f64;
    }
    let shift = ((b.len() as u32).wrapping_mul(8).wrapping_sub(1)) & 63;
    let mask = u64::MAX << shift;
    if l & mask != 0 {
        l |= mask;
    }
    l as i64 as f64
}

fn unpack(lua: &Lua, args: MultiValue) -> mlua::Result<MultiValue> {
    let fmt = fmt_arg(lua, &args)?;
    let data = clib::check_lstring(lua, &args, 2)?;
    let ld = data.len();
    let mut pos = clib::opt_integer(lua, &args, 3, 1)? as usize;
    if pos == 0 {
        return Err(arg_error(lua, 3, "offset must be 1 or greater"));
    }
    pos -= 1;
    let nargs = args.len();
    let mut f = Fmt { s: &fmt, i: 0 };
    let mut h = Header::default();
    let mut out = MultiValue::new();
    let short = |lua: &Lua| arg_error(lua, 2, "data string too short");
    while let Some(opt) = f.next() {
        let mut size = f.size(lua, opt)?;
        pos = pos.wrapping_add(to_align(pos, &h, opt, size));
        if !(size <= ld && pos <= ld - size) {
            return Err(short(lua));
        }
        if nargs + out.len() + 2 > MAXCSTACK {
            return Err(clib::error(lua, "stack overflow (too many results)"));
        }
        match opt {
            b'b' | b'B' | b'h' | b'H' | b'l' | b'L' | b'T' | b'i' | b'I' => {
                let v = get_integer(&data[pos..pos + size], h.little, opt.is_ascii_lowercase());
                out.push_back(Value::Number(v));
            }
            b'x' => {}
            b'f' => {
                let b: [u8; 4] = data[pos..pos + 4].try_into().unwrap_or_default();
                let v = if h.little {
                    f32::from_le_bytes(b)
                } else {
                    f32::from_be_bytes(b)
                };
                out.push_back(Value::Number(v as f64));
            }
            b'd' => {
                let b: [u8; 8] = data[pos..pos + 8].try_into().unwrap_or_default();
                let v = if h.little {
                    f64::from_le_bytes(b)
                } else {
                    f64::from_be_bytes(b)
                };
                out.push_back(Value::Number(v));
            }
            b'c' => {
                if size == 0 {
                    let prev = out.back().and_then(clib::tonumber);
                    let Some(n) = prev else {
                        return Err(clib::error(lua, "format 'c0' needs a previous size"));
                    };
                    size = clib::cast_u64(n) as usize;
                    out.pop_back();
                    if !(size <= ld && pos <= ld - size) {
                        return Err(short(lua));
                    }
                }
                out.push_back(Value::String(lua.create_string(&data[pos..pos + size])?));
            }
            b's' => {
                let Some(len) = data[pos..].iter().position(|&c| c == 0) else {
                    return Err(clib::error(lua, "unfinished string in data"));
                };
                size = len + 1;
                out.push_back(Value::String(lua.create_string(&data[pos..pos + len])?));
            }
            _ => f.control(lua, opt, &mut h)?,
        }
        pos = pos.wrapping_add(size);
    }
    out.push_back(Value::Number(pos.wrapping_add(1) as i64 as f64));
    Ok(out)
}

fn size(lua: &Lua, args: MultiValue) -> mlua::Result<f64> {
    let fmt = fmt_arg(lua, &args)?;
    let mut f = Fmt { s: &fmt, i: 0 };
    let mut h = Header::default();
    let mut pos: usize = 0;
    while let Some(opt) = f.next() {
        let size = f.size(lua, opt)?;
        pos = pos.wrapping_add(to_align(pos, &h, opt, size));
        if opt == b's' {
            return Err(arg_error(lua, 1, "option 's' has no fixed size"));
        } else if opt == b'c' && size == 0 {
            return Err(arg_error(lua, 1, "option 'c0' has no fixed size"));
        }
        if !opt.is_ascii_alphanumeric() {
            f.control(lua, opt, &mut h)?;
        }
        pos = pos.wrapping_add(size);
    }
    Ok(pos as i64 as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(lua: &Lua, code: &str) -> String {
        match lua.load(code).set_name("=t").eval::<mlua::LuaString>() {
            Ok(s) => s.as_bytes().iter().map(|b| format!("{b:02x}")).collect(),
            Err(e) => {
                let t = clib::lib_error_text(&e).map(|t| String::from_utf8_lossy(t).into_owned());
                let t = t.unwrap_or_else(|| e.to_string());
                format!("error: {}", t.strip_prefix("t:1: ").unwrap_or(&t))
            }
        }
    }

    #[test]
    fn pack_formats() {
        let lua = Lua::new();
        lua.globals().set("struct", table(&lua).unwrap()).unwrap();
        let cases = [
            ("struct.pack('>i', 1)", "00000001"),
            ("struct.pack('<i', -2)", "feffffff"),
            ("struct.pack('bBhH', -1, 255, -2, 65535)", "fffffeffffff"),
            ("struct.pack('>l', 2^53)", "0020000000000000"),
            ("struct.pack('>L', 2^64)", "0000000000000000"),
            ("struct.pack('>i3', 0x123456)", "123456"),
            ("struct.pack('>i10', -1)", "0000ffffffffffffffff"),
            ("struct.pack('!>bi', 1, 2)", "0100000000000002"),
            ("struct.pack('!2>bi', 1, 2)", "010000000002"),
            ("struct.pack('>d', 1.5)", "3ff8000000000000"),
            ("struct.pack('<f', 1.5)", "0000c03f"),
            ("struct.pack('c3', 'abcdef')", "616263"),
            ("struct.pack('c0', 'ab')", "6162"),
            ("struct.pack('s', 'ab')", "616200"),
            ("struct.pack('bxb', 1, 2)", "010002"),
            ("struct.pack('>b b', 1, 2)", "0102"),
            (
                "struct.pack('c3', 'ab')",
                "error: bad argument #3 to 'pack' (string too short)",
            ),
            (
                "struct.pack('q', 1)",
                "error: bad argument #1 to 'pack' (invalid format option 'q')",
            ),
            (
                "struct.pack('i33', 1)",
                "error: integral size 33 is larger than limit of 32",
            ),
            (
                "struct.pack('!3', 1)",
                "error: alignment 3 is not a power of 2",
            ),
            (
                "struct.pack('i', 'x')",
                "error: bad argument #2 to 'pack' (number expected, got string)",
            ),
            (
                "struct.pack('i99999999999', 1)",
                "error: integral size overflow",
            ),
            (
                "struct.unpack('>i', 'abc')",
                "error: bad argument #2 to 'unpack' (data string too short)",
            ),
            (
                "struct.unpack('i', 'abcd', 0)",
                "error: bad argument #3 to 'unpack' (offset must be 1 or greater)",
            ),
            (
                "struct.unpack('s', 'abc')",
                "error: unfinished string in data",
            ),
            (
                "struct.unpack('c0', 'abc')",
                "error: format 'c0' needs a previous size",
            ),
            (
                "struct.size('s')",
                "error: bad argument #1 to 'size' (option 's' has no fixed size)",
            ),
        ];
        for (code, want) in cases {
            assert_eq!(eval(&lua, &format!("return {code}")), want, "{code}");
        }
        let s = |code: &str| -> String {
            lua.load(format!("return table.concat({{{code}}}, ' ')"))
                .eval()
                .unwrap()
        };
        assert_eq!(s("struct.unpack('>i', '\\0\\0\\1\\0')"), "256 5");
        assert_eq!(s("struct.unpack('<h', '\\255\\255')"), "-1 3");
        assert_eq!(s("struct.unpack('<H', '\\255\\255')"), "65535 3");
        assert_eq!(s("struct.unpack('b', 'xa', 2)"), "97 3");
        assert_eq!(s("struct.unpack('bc0', '\\2abc')"), "ab 4");
        assert_eq!(s("struct.unpack('sb', 'hi\\0\\5')"), "hi 5 5");
        assert_eq!(
            s("struct.unpack('>d', struct.pack('>d', -0.25))"),
            "-0.25 9"
        );
        assert_eq!(
            s("struct.unpack('!4 b i', struct.pack('!4 b i', 7, -9))"),
            "7 -9 9"
        );
        assert_eq!(s("struct.size('!bi')"), "8");
        assert_eq!(s("struct.size('bhc5q')"), "8");
        assert_eq!(s("struct.unpack('>i10', struct.pack('>i10', -1))"), "-1 11");
    }
}
