//! The `cmsgpack` library Redis embeds (lua-cmsgpack 0.4.0, `deps/lua/src/lua_cmsgpack.c`):
//! `pack` (the smallest encoding of each integer, a float32 when the double survives the
//! round trip, `str` types for every string, tables nested 16 deep packed as nil),
//! `unpack`, `unpack_one` and `unpack_limit`, with the C library's quirks and error texts
//! (`uint 64` values past 2^63 wrap negative; bin and ext types are a bad format).

use mlua::{Lua, MultiValue, Table, Value};

use crate::clib::{self, MAXCSTACK, arg_error};

/// `LUACMSGPACK_MAX_NESTING`: tables this deep are packed as nil.
const MAX_NESTING: usize = 16;

/// The `cmsgpack` table.
pub fn table(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.raw_set("pack", lua.create_function(pack)?)?;
    t.raw_set(
        "unpack",
        lua.create_function(|lua, args: MultiValue| {
            let used = args.len();
            unpack_full(lua, &args, 0, 0, used)
        })?,
    )?;
    t.raw_set(
        "unpack_one",
        lua.create_function(|lua, args: MultiValue| {
            let offset = clib::opt_integer(lua, &args, 2, 0)?;
            let args: MultiValue = args.into_iter().take(1).collect();
            unpack_full(lua, &args, 1, offset, 1)
        })?,
    )?;
    t.raw_set(
        "unpack_limit",
        lua.create_function(|lua, args: MultiValue| {
            let limit = clib::check_integer(lua, &args, 2)?;
            let offset = clib::opt_integer(lua, &args, 3, 0)?;
            let args: MultiValue = args.into_iter().take(1).collect();
            unpack_full(lua, &args, limit, offset, 1)
        })?,
    )?;
    t.raw_set("_NAME", "cmsgpack")?;
    t.raw_set("_VERSION", "lua-cmsgpack 0.4.0")?;
    t.raw_set("_COPYRIGHT", "Copyright (C) 2012, Salvatore Sanfilippo")?;
    t.raw_set("_DESCRIPTION", "MessagePack C implementation for Lua")?;
    Ok(t)
}

// ---------------------------------------------------------------------------------------------
// Packing
// ---------------------------------------------------------------------------------------------

fn pack(lua: &Lua, args: MultiValue) -> mlua::Result<mlua::LuaString> {
    if args.is_empty() {
        return Err(arg_error(lua, 0, "MessagePack pack needs input."));
    }
    let mut out = Vec::new();
    let cap = clib::output_cap(lua);
    for v in args.iter() {
        encode(&mut out, v, 0, cap)?;
    }
    lua.create_string(&out)
}

/// `(int64_t)n == n` without UB: integral and within the int64 range.
fn is_int64(n: f64) -> bool {
    n.is_finite() && n.trunc() == n && (-clib::TWO63..clib::TWO63).contains(&n)
}

/// `mp_encode_lua_type`; `cap` bounds the output ([`clib::output_cap`]).
fn encode(out: &mut Vec<u8>, v: &Value, level: usize, cap: usize) -> mlua::Result<()> {
    if out.len() > cap {
        return Err(clib::out_of_memory());
    }
    match v {
        Value::String(s) => encode_bytes(out, &s.as_bytes()),
        Value::Boolean(b) => out.push(if *b { 0xc3 } else { 0xc2 }),
        Value::Integer(_) | Value::Number(_) => {
            let n = clib::number(v).unwrap_or(0.0);
            if is_int64(n) {
                encode_int(out, n as i64);
            } else {
                encode_double(out, n);
            }
        }
        Value::Table(t) if level < MAX_NESTING => {
            if is_array(t)? {
                let len = t.raw_len();
                encode_header(out, len as u64, 0x90, 0xdc);
                for j in 1..=len {
                    let item: Value = t.raw_get(j)?;
                    encode(out, &item, level + 1, cap)?;
                }
            } else {
                let mut n = 0u64;
                for pair in t.pairs::<Value, Value>() {
                    pair?;
                    n += 1;
                }
                encode_header(out, n, 0x80, 0xde);
                for pair in t.pairs::<Value, Value>() {
                    let (k, v) = pair?;
                    encode(out, &k, level + 1, cap)?;
                    encode(out, &v, level + 1, cap)?;
                }
            }
        }
        _ => out.push(0xc0),
    }
    Ok(())
}

/// `table_is_an_array`: every key a positive integer that fits an `int`, and as many keys as
/// the largest (so 1..n); an empty table is an array.
fn is_array(t: &Table) -> mlua::Result<bool> {
    let (mut count, mut max) = (0i32, 0i32);
    for pair in t.pairs::<Value, Value>() {
        let (k, _) = pair?;
        let Some(n) = clib::number(&k) else {
            return Ok(false);
        };
        if n <= 0.0 || clib::cast_i32(n) as f64 != n {
            return Ok(false);
        }
        if n > max as f64 {
            max = n as i32;
        }
        count = count.wrapping_add(1);
    }
    Ok(max == count)
}

fn encode_bytes(out: &mut Vec<u8>, s: &[u8]) {
    let len = s.len();
    if len < 32 {
        out.push(0xa0 | len as u8);
    } else if len <= 0xff {
        out.extend_from_slice(&[0xd9, len as u8]);
    } else if len <= 0xffff {
        out.push(0xda);
        out.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        out.push(0xdb);
        out.extend_from_slice(&(len as u32).to_be_bytes());
    }
    out.extend_from_slice(s);
}

/// A float32 when the double converts to one and back unchanged, else a float64.
fn encode_double(out: &mut Vec<u8>, d: f64) {
    let f = d as f32;
    if d == f as f64 {
        out.push(0xca);
        out.extend_from_slice(&f.to_be_bytes());
    } else {
        out.push(0xcb);
        out.extend_from_slice(&d.to_be_bytes());
    }
}

fn encode_int(out: &mut Vec<u8>, n: i64) {
    if n >= 0 {
        if n <= 127 {
            out.push(n as u8);
        } else if n <= 0xff {
            out.extend_from_slice(&[0xcc, n as u8]);
        } else if n <= 0xffff {
            out.push(0xcd);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        } else if n <= 0xffff_ffff {
            out.push(0xce);
            out.extend_from_slice(&(n as u32).to_be_bytes());
        } else {
            out.push(0xcf);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    } else if n >= -32 {
        out.push(n as i8 as u8);
    } else if n >= -128 {
        out.extend_from_slice(&[0xd0, n as u8]);
    } else if n >= -32768 {
        out.push(0xd1);
        out.extend_from_slice(&(n as i16).to_be_bytes());
    } else if n >= -2_147_483_648 {
        out.push(0xd2);
        out.extend_from_slice(&(n as i32).to_be_bytes());
    } else {
        out.push(0xd3);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

/// An array or map header: fix (`fix | n`) up to 15, 16-bit, else 32-bit (`wide + 1`).
fn encode_header(out: &mut Vec<u8>, n: u64, fix: u8, wide: u8) {
    if n <= 15 {
        out.push(fix | n as u8);
    } else if n <= 0xffff {
        out.push(wide);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(wide + 1);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
}

// ---------------------------------------------------------------------------------------------
// Unpacking
// ---------------------------------------------------------------------------------------------

/// `mp_unpack_full`: `limit` values from `offset` (0 and 0: every value, and no offset
/// returned); `used` is how many Lua stack slots the C function starts with (its arguments).
fn unpack_full(
    lua: &Lua,
    args: &MultiValue,
    limit: i64,
    offset: i64,
    used: usize,
) -> mlua::Result<MultiValue> {
    let s = clib::check_lstring(lua, args, 1)?;
    let len = s.len();
    if offset < 0 || limit < 0 {
        return Err(clib::error(
            lua,
            format!(
                "Invalid request to unpack with offset of {} and limit of {}.",
                offset as i32, len as i32
            ),
        ));
    } else if offset as u64 > len as u64 {
        return Err(clib::error(
            lua,
            format!(
                "Start offset {} greater than input length {}.",
                offset as i32, len as i32
            ),
        ));
    }
    let decode_all = limit == 0 && offset == 0;
    let limit = if decode_all { i32::MAX as i64 } else { limit };
    let mut c = Cursor {
        lua,
        p: &s[offset as usize..],
    };
    let mut values = MultiValue::new();
    let mut cnt: i64 = 0;
    while !c.p.is_empty() && cnt < limit {
        match c.decode(used + values.len()) {
            Ok(v) => values.push_back(v),
            Err(Fail::Eof) => return Err(clib::error(lua, "Missing bytes in input.")),
            Err(Fail::BadFmt) => return Err(clib::error(lua, "Bad data format in input.")),
            Err(Fail::Lua(e)) => return Err(e),
        }
        cnt += 1;
    }
    if !decode_all {
        let next = if c.p.is_empty() {
            -1
        } else {
            (len - c.p.len()) as i64
        };
        values.push_front(Value::Integer(next));
    }
    Ok(values)
}

enum Fail {
    /// `MP_CUR_ERROR_EOF`.
    Eof,
    /// `MP_CUR_ERROR_BADFMT`.
    BadFmt,
    Lua(mlua::Error),
}

impl From<mlua::Error> for Fail {
    fn from(e: mlua::Error) -> Fail {
        Fail::Lua(e)
    }
}

struct Cursor<'a> {
    lua: &'a Lua,
    p: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn need(&self, n: usize) -> Result<(), Fail> {
        if self.p.len() < n {
            Err(Fail::Eof)
        } else {
            Ok(())
        }
    }

    /// The `n` bytes after a `skip`-byte header, consumed with it.
    fn take(&mut self, skip: usize, n: usize) -> Result<&'a [u8], Fail> {
        self.need(skip + n)?;
        let p: &'a [u8] = self.p;
        let (head, rest) = p.split_at(skip + n);
        self.p = rest;
        Ok(&head[skip..])
    }

    fn be(&mut self, n: usize) -> Result<u64, Fail> {
        let b = self.take(1, n)?;
        Ok(b.iter().fold(0u64, |a, &x| a << 8 | x as u64))
    }

    /// `luaL_checkstack(L, 1, msg)` with `used` slots held: `stack overflow (msg)`.
    fn check_stack(&self, used: usize, msg: &str) -> Result<(), Fail> {
        if used + 1 > MAXCSTACK {
            return Err(Fail::Lua(clib::error(
                self.lua,
                format!("stack overflow ({msg})"),
            )));
        }
        Ok(())
    }

    /// `mp_decode_to_lua_type`: one value; `used` Lua stack slots are held by the caller. The
    /// nesting is kept in a stack of open tables (unpacking nests about 4000 deep before the
    /// C code runs out of Lua stack, too deep for native recursion in a debug build).
    fn decode(&mut self, mut used: usize) -> Result<Value, Fail> {
        enum Open {
            Array { len: u64, i: u64 },
            Map { len: u64, has_key: bool },
        }
        /// Levels whose table (and a map's pending key) are held in Rust; deeper ones live
        /// in Lua tables, by level: mlua's reference slots would run out before Lua's stack
        /// does.
        const SHALLOW: usize = 32;
        let mut stack: Vec<(Open, Option<Table>, Option<Value>)> = Vec::new();
        let (tables, keys) = (
            self.lua.create_table().map_err(stack_error)?,
            self.lua.create_table().map_err(stack_error)?,
        );
        let keep = |tables: &Table, level: usize, t: Table| -> Result<Option<Table>, Fail> {
            if level < SHALLOW {
                return Ok(Some(t));
            }
            tables.raw_set(level + 1, t).map_err(stack_error)?;
            Ok(None)
        };
        loop {
            let mut v = match self.item(used)? {
                Item::Value(v) => v,
                Item::Array(t, len) => {
                    self.check_stack(used + 1, "in function mp_decode_to_lua_array")?;
                    if len == 0 {
                        Value::Table(t)
                    } else {
                        let kept = keep(&tables, stack.len(), t)?;
                        stack.push((Open::Array { len, i: 1 }, kept, None));
                        used += 2;
                        continue;
                    }
                }
                Item::Map(t, len) => {
                    if len == 0 {
                        Value::Table(t)
                    } else {
                        let kept = keep(&tables, stack.len(), t)?;
                        let open = Open::Map {
                            len,
                            has_key: false,
                        };
                        stack.push((open, kept, None));
                        used += 1;
                        continue;
                    }
                }
            };
            loop {
                let level = stack.len();
                let Some((top, kept, held_key)) = stack.last_mut() else {
                    return Ok(v);
                };
                let shallow = kept.is_some();
                let t: Table = match kept {
                    Some(t) => t.clone(),
                    None => tables.raw_get(level).map_err(stack_error)?,
                };
                match top {
                    Open::Array { len, i } => {
                        t.raw_set(*i as i64, v).map_err(stack_error)?;
                        if *i < *len {
                            *i += 1;
                            break;
                        }
                        used -= 2;
                    }
                    Open::Map { len, has_key } => {
                        if !*has_key {
                            if shallow {
                                *held_key = Some(v);
                            } else {
                                keys.raw_set(level, v).map_err(stack_error)?;
                            }
                            *has_key = true;
                            used += 1;
                            break;
                        }
                        *has_key = false;
                        let k: Value = match held_key.take() {
                            Some(k) => k,
                            None if shallow => Value::Nil,
                            None => keys.raw_get(level).map_err(stack_error)?,
                        };
                        match &k {
                            Value::Nil => {
                                return Err(Fail::Lua(clib::raw_error("table index is nil")));
                            }
                            Value::Number(n) if n.is_nan() => {
                                return Err(Fail::Lua(clib::raw_error("table index is NaN")));
                            }
                            _ => {}
                        }
                        if !shallow {
                            keys.raw_set(level, Value::Nil).map_err(stack_error)?;
                        }
                        t.raw_set(k, v).map_err(stack_error)?;
                        used -= 1;
                        *len -= 1;
                        if *len > 0 {
                            break;
                        }
                        used -= 1;
                    }
                }
                stack.pop();
                if !shallow {
                    tables.raw_set(level, Value::Nil).map_err(stack_error)?;
                }
                v = Value::Table(t);
            }
        }
    }

    /// One item: a value, or the (empty) table of an array or map and its length.
    fn item(&mut self, used: usize) -> Result<Item, Fail> {
        self.need(1)?;
        self.check_stack(
            used,
            "too many return values at once; use unpack_one or unpack_limit instead.",
        )?;
        let b = self.p[0];
        let num = |n: f64| Ok(Item::Value(Value::Number(n)));
        match b {
            0xcc => num(self.be(1)? as f64),
            0xd0 => num(self.be(1)? as u8 as i8 as f64),
            0xcd => num(self.be(2)? as f64),
            0xd1 => num(self.be(2)? as u16 as i16 as f64),
            0xce => num(self.be(4)? as f64),
            0xd2 => num(self.be(4)? as u32 as i32 as f64),
            // lua_pushunsigned is lua_pushinteger on 64-bit: past 2^63 it wraps negative.
            0xcf => num(self.be(8)? as i64 as f64),
            0xd3 => num(self.be(8)? as i64 as f64),
            0xc0 => {
                self.p = &self.p[1..];
                Ok(Item::Value(Value::Nil))
            }
            0xc3 | 0xc2 => {
                self.p = &self.p[1..];
                Ok(Item::Value(Value::Boolean(b == 0xc3)))
            }
            0xca => num(f32::from_bits(self.be(4)? as u32) as f64),
            0xcb => num(f64::from_bits(self.be(8)?)),
            0xd9 => {
                self.need(2)?;
                let l = self.p[1] as usize;
                let s = self.take(2, l)?;
                self.string(s)
            }
            0xda => {
                self.need(3)?;
                let l = (self.p[1] as usize) << 8 | self.p[2] as usize;
                let s = self.take(3, l)?;
                self.string(s)
            }
            0xdb => {
                let l = self.be(4)? as usize;
                let s = self.take(0, l)?;
                self.string(s)
            }
            0xdc => {
                let l = self.be(2)?;
                self.table(l, false)
            }
            0xdd => {
                let l = self.be(4)?;
                self.table(l, false)
            }
            0xde => {
                let l = self.be(2)?;
                self.table(l, true)
            }
            0xdf => {
                let l = self.be(4)?;
                self.table(l, true)
            }
            _ if b & 0x80 == 0 => {
                self.p = &self.p[1..];
                num(b as f64)
            }
            _ if b & 0xe0 == 0xe0 => {
                self.p = &self.p[1..];
                num(b as i8 as f64)
            }
            _ if b & 0xe0 == 0xa0 => {
                let s = self.take(1, (b & 0x1f) as usize)?;
                self.string(s)
            }
            _ if b & 0xf0 == 0x90 => {
                self.p = &self.p[1..];
                self.table((b & 0xf) as u64, false)
            }
            _ if b & 0xf0 == 0x80 => {
                self.p = &self.p[1..];
                self.table((b & 0xf) as u64, true)
            }
            _ => Err(Fail::BadFmt),
        }
    }

    fn string(&self, b: &[u8]) -> Result<Item, Fail> {
        Ok(Item::Value(Value::String(
            self.lua.create_string(b).map_err(stack_error)?,
        )))
    }

    fn table(&self, len: u64, map: bool) -> Result<Item, Fail> {
        let t = self.lua.create_table().map_err(stack_error)?;
        Ok(if map {
            Item::Map(t, len)
        } else {
            Item::Array(t, len)
        })
    }
}

enum Item {
    Value(Value),
    Array(Table, u64),
    Map(Table, u64),
}

/// Out of mlua's reference slots (only near Lua's own stack limit, where Redis fails too):
/// Redis's error for that.
fn stack_error(e: mlua::Error) -> Fail {
    match e {
        mlua::Error::StackError => Fail::Lua(clib::raw_error(
            "stack overflow (too many return values at once; use unpack_one or unpack_limit instead.)",
        )),
        e => Fail::Lua(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lua() -> Lua {
        let lua = Lua::new();
        lua.globals().set("cmsgpack", table(&lua).unwrap()).unwrap();
        lua
    }

    fn hex(lua: &Lua, expr: &str) -> String {
        let s: mlua::LuaString = lua
            .load(format!("return cmsgpack.pack({expr})"))
            .eval()
            .unwrap();
        s.as_bytes().iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn pack_encodings() {
        let lua = lua();
        let cases = [
            ("0", "00"),
            ("127", "7f"),
            ("128", "cc80"),
            ("255", "ccff"),
            ("256", "cd0100"),
            ("65536", "ce00010000"),
            ("4294967296", "cf0000000100000000"),
            ("-1", "ff"),
            ("-32", "e0"),
            ("-33", "d0df"),
            ("-129", "d1ff7f"),
            ("-32769", "d2ffff7fff"),
            ("-2147483649", "d3ffffffff7fffffff"),
            ("-0", "00"),
            ("1.5", "ca3fc00000"),
            ("0.1", "cb3fb999999999999a"),
            ("1/0", "ca7f800000"),
            ("2^63", "ca5f000000"),
            ("2^64 + 2^12", "cb43f0000000000001"),
            ("''", "a0"),
            ("{}", "90"),
            ("{1, 2}", "920102"),
            ("{a = true}", "81a161c3"),
            ("{1, nil, 3}", "8201010303"),
            ("nil", "c0"),
            ("print", "c0"),
            ("1, 'a'", "01a161"),
        ];
        for (expr, want) in cases {
            assert_eq!(hex(&lua, expr), want, "{expr}");
        }
        assert_eq!(
            hex(&lua, "string.rep('a', 32)"),
            format!("d920{}", "61".repeat(32))
        );
        // 16 levels of tables, then nil.
        let nested = "local t = {} t[1] = t return t";
        let packed = hex(&lua, &format!("(function() {nested} end)()"));
        assert_eq!(packed, format!("{}c0", "91".repeat(16)));
    }

    #[test]
    fn output_is_capped() {
        let lua = lua();
        lua.set_named_registry_value(clib::OUTPUT_CAP, 1usize << 20)
            .unwrap();
        // Shared down every branch, 16 levels: 2^16 copies of a 100-byte string.
        let code = "local a = {string.rep('x', 100)} for i = 1, 15 do a = {a, a} end \
                    return cmsgpack.pack(a)";
        let err = lua.load(code).eval::<mlua::LuaString>().unwrap_err();
        assert!(err.to_string().contains("not enough memory"), "{err}");
    }

    #[test]
    fn unpack_values() {
        let lua = lua();
        let eval = |code: &str| -> String {
            match lua.load(code).set_name("=t").eval::<mlua::LuaString>() {
                Ok(s) => String::from_utf8_lossy(&s.as_bytes()).into_owned(),
                Err(e) => {
                    let t =
                        clib::lib_error_text(&e).map(|t| String::from_utf8_lossy(t).into_owned());
                    format!("error: {}", t.unwrap_or_else(|| e.to_string()))
                }
            }
        };
        assert_eq!(
            eval("return table.concat({cmsgpack.unpack(cmsgpack.pack(1, -2, 'x', 1.5))}, ' ')"),
            "1 -2 x 1.5"
        );
        assert_eq!(
            eval(
                "return tostring(cmsgpack.unpack('\\207\\255\\255\\255\\255\\255\\255\\255\\255'))"
            ),
            "-1"
        );
        assert_eq!(
            eval("return table.concat({cmsgpack.unpack_one(cmsgpack.pack(1, 2))}, ' ')"),
            "1 1"
        );
        assert_eq!(
            eval("return table.concat({cmsgpack.unpack_one(cmsgpack.pack(1, 2), 1)}, ' ')"),
            "-1 2"
        );
        assert_eq!(
            eval("return table.concat({cmsgpack.unpack_limit(cmsgpack.pack(1, 2, 3), 2)}, ' ')"),
            "2 1 2"
        );
        assert!(eval("return cmsgpack.unpack('\\146\\1')").ends_with("Missing bytes in input."));
        assert!(eval("return cmsgpack.unpack('\\193')").ends_with("Bad data format in input."));
        assert!(eval("return cmsgpack.unpack('\\129\\192\\1')").ends_with("table index is nil"));
        assert!(
            eval("return cmsgpack.unpack_one('a', 5)")
                .ends_with("Start offset 5 greater than input length 1.")
        );
        assert!(
            eval("return cmsgpack.unpack_one('abc', -1)")
                .ends_with("Invalid request to unpack with offset of -1 and limit of 3.")
        );
        assert!(
            eval("return cmsgpack.pack()")
                .ends_with("bad argument #0 to 'pack' (MessagePack pack needs input.)")
        );
        assert!(
            eval("return cmsgpack.unpack(string.rep('\\145', 5000))")
                .ends_with("stack overflow (in function mp_decode_to_lua_array)")
        );
    }
}
