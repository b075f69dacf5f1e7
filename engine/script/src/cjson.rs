//! The `cjson` library Redis embeds (Lua CJSON 2.1.0, `deps/lua/src/lua_cjson.c`), with
//! Redis's defaults: numbers as `%.14g`, `{}` for an empty table, arrays only for tables whose
//! keys are all integers ≥ 1 and not too sparse (ratio 2, safe 10; else an error), nesting
//! limits of 1000 both ways, `cjson.null` (a NULL light userdata), `nan`/`inf`/hex numbers
//! accepted by `decode` (glibc's `strtod`), and the configuration functions, whose settings
//! last as long as the Lua state (SCRIPT FLUSH resets them). Error texts are the C library's.

use std::cell::Cell;
use std::rc::Rc;

use mlua::{Function, LightUserData, Lua, LuaString, MultiValue, Table, Value};

use crate::clib::{self, MAXCSTACK, arg_error, fmt_g, type_name};

/// One `cjson` table's settings (`json_config_t`).
#[derive(Clone, Copy)]
struct Config {
    sparse_convert: i32,
    sparse_ratio: i32,
    sparse_safe: i32,
    encode_max_depth: i32,
    decode_max_depth: i32,
    /// 0 off, 1 on, 2 null.
    encode_invalid_numbers: i32,
    decode_invalid_numbers: i32,
    keep_buffer: i32,
    precision: i32,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            sparse_convert: 0,
            sparse_ratio: 2,
            sparse_safe: 10,
            encode_max_depth: 1000,
            decode_max_depth: 1000,
            encode_invalid_numbers: 0,
            decode_invalid_numbers: 1,
            keep_buffer: 1,
            precision: 14,
        }
    }
}

type Cfg = Rc<Cell<Config>>;

/// The `cjson` table (a fresh configuration each time: `cjson.new` too).
///
/// `next` is Lua's own `next` (the encoder walks tables with it).
pub fn table(lua: &Lua, next: &Function) -> mlua::Result<Table> {
    let cfg: Cfg = Rc::new(Cell::new(Config::default()));
    let t = lua.create_table()?;
    let (c, n) = (cfg.clone(), next.clone());
    t.raw_set(
        "encode",
        lua.create_function(move |lua, args: MultiValue| encode(lua, &c.get(), &n, &args))?,
    )?;
    let c = cfg.clone();
    t.raw_set(
        "decode",
        lua.create_function(move |lua, args: MultiValue| decode(lua, &c.get(), &args))?,
    )?;
    let c = cfg.clone();
    t.raw_set(
        "encode_sparse_array",
        lua.create_function(move |lua, args: MultiValue| {
            let args = arg_init(lua, args, 3)?;
            let mut k = c.get();
            let a = enum_option(lua, &args, 1, &mut k.sparse_convert, None, 1);
            c.set(k);
            let a = a?;
            let b = int_option(lua, &args, 2, &mut k.sparse_ratio, 0, i32::MAX);
            c.set(k);
            let b = b?;
            let d = int_option(lua, &args, 3, &mut k.sparse_safe, 0, i32::MAX);
            c.set(k);
            Ok((a, b, d?))
        })?,
    )?;
    macro_rules! int_cfg {
        ($name:literal, $field:ident, $min:expr, $max:expr) => {
            let c = cfg.clone();
            t.raw_set(
                $name,
                lua.create_function(move |lua, args: MultiValue| {
                    let args = arg_init(lua, args, 1)?;
                    let mut k = c.get();
                    let r = int_option(lua, &args, 1, &mut k.$field, $min, $max);
                    c.set(k);
                    r
                })?,
            )?;
        };
    }
    int_cfg!("encode_max_depth", encode_max_depth, 1, i32::MAX);
    int_cfg!("decode_max_depth", decode_max_depth, 1, i32::MAX);
    int_cfg!("encode_number_precision", precision, 1, 14);
    macro_rules! enum_cfg {
        ($name:literal, $field:ident, $options:expr) => {
            let c = cfg.clone();
            t.raw_set(
                $name,
                lua.create_function(move |lua, args: MultiValue| {
                    let args = arg_init(lua, args, 1)?;
                    let mut k = c.get();
                    let r = enum_option(lua, &args, 1, &mut k.$field, $options, 1);
                    c.set(k);
                    r
                })?,
            )?;
        };
    }
    enum_cfg!("encode_keep_buffer", keep_buffer, None);
    enum_cfg!(
        "encode_invalid_numbers",
        encode_invalid_numbers,
        Some(&["off", "on", "null"])
    );
    enum_cfg!("decode_invalid_numbers", decode_invalid_numbers, None);
    let n = next.clone();
    t.raw_set("new", lua.create_function(move |lua, ()| table(lua, &n))?)?;
    t.raw_set(
        "null",
        Value::LightUserData(LightUserData(std::ptr::null_mut())),
    )?;
    t.raw_set("_NAME", "cjson")?;
    t.raw_set("_VERSION", "2.1.0")?;
    Ok(t)
}

/// `json_arg_init`: at most `n` arguments (`found too many arguments`), padded with nil.
fn arg_init(lua: &Lua, args: MultiValue, n: usize) -> mlua::Result<MultiValue> {
    if args.len() > n {
        return Err(arg_error(lua, n as i32 + 1, "found too many arguments"));
    }
    let mut args = args;
    while args.len() < n {
        args.push_back(Value::Nil);
    }
    Ok(args)
}

/// `json_integer_option`: sets an integer setting from argument `i` when not nil (the range
/// error names argument #1 whatever `i` is, as the C code does); returns the setting.
fn int_option(
    lua: &Lua,
    args: &MultiValue,
    i: usize,
    setting: &mut i32,
    min: i32,
    max: i32,
) -> mlua::Result<Value> {
    if !args[i - 1].is_nil() {
        let v = clib::check_integer(lua, args, i)? as i32;
        if !(min <= v && v <= max) {
            return Err(arg_error(
                lua,
                1,
                format!("expected integer between {min} and {max}"),
            ));
        }
        *setting = v;
    }
    Ok(Value::Integer(*setting as i64))
}

/// `json_enum_option`: a boolean or one of `options` (default `off`/`on`); returns the
/// setting as a boolean, or the option's name past `on`.
fn enum_option(
    lua: &Lua,
    args: &MultiValue,
    i: usize,
    setting: &mut i32,
    options: Option<&[&str]>,
    bool_true: i32,
) -> mlua::Result<Value> {
    let options = options.unwrap_or(&["off", "on"]);
    match &args[i - 1] {
        Value::Nil => {}
        Value::Boolean(b) => *setting = i32::from(*b) * bool_true,
        _ => {
            let name = clib::check_lstring(lua, args, i)?;
            let name = clib::c_str(&name);
            match options.iter().position(|o| o.as_bytes() == name) {
                Some(p) => *setting = p as i32,
                None => {
                    let mut msg = b"invalid option '".to_vec();
                    msg.extend_from_slice(name);
                    msg.push(b'\'');
                    return Err(arg_error(lua, i as i32, msg));
                }
            }
        }
    }
    if *setting == 0 || *setting == bool_true {
        Ok(Value::Boolean(*setting != 0))
    } else {
        Ok(Value::String(
            lua.create_string(options[*setting as usize])?,
        ))
    }
}

// ---------------------------------------------------------------------------------------------
// Encoding
// ---------------------------------------------------------------------------------------------

/// Tables up to this many levels down are walked by native recursion over mlua's table
/// iterator (fast); deeper ones by [`walk_deep`].
const SHALLOW: i32 = 32;

fn encode(lua: &Lua, cfg: &Config, next: &Function, args: &MultiValue) -> mlua::Result<LuaString> {
    if args.len() != 1 {
        return Err(arg_error(lua, 1, "expected 1 argument"));
    }
    let mut e = Encoder {
        lua,
        cfg,
        out: Vec::new(),
        cap: clib::output_cap(lua),
    };
    write(&mut e, &args[0], 0, 1, next)?;
    lua.create_string(&e.out)
}

/// `json_append_data` for `v` and everything under it.
fn write(e: &mut Encoder, v: &Value, depth: i32, used: usize, next: &Function) -> mlua::Result<()> {
    let Some(f) = e.value(v, depth, used)? else {
        return Ok(());
    };
    if f.depth > SHALLOW {
        return walk_deep(e, f, next);
    }
    match f.items {
        Items::Array { len, .. } => {
            for i in 1..=len {
                if i > 1 {
                    e.out.push(b',');
                }
                let item: Value = f.table.raw_get(i).map_err(|x| e.stack(x, f.depth))?;
                write(e, &item, f.depth, f.used + 1, next)?;
                e.check_cap()?;
            }
            e.out.push(b']');
        }
        Items::Object { .. } => {
            let mut first = true;
            for pair in f.table.pairs::<Value, Value>() {
                let (k, v) = pair.map_err(|x| e.stack(x, f.depth))?;
                if !first {
                    e.out.push(b',');
                }
                first = false;
                e.key(&k)?;
                drop(k);
                write(e, &v, f.depth, f.used + 2, next)?;
                e.check_cap()?;
            }
            e.out.push(b'}');
        }
    }
    Ok(())
}

/// Walks a table past [`SHALLOW`] levels and everything under it, the recursion kept in a
/// stack (a script may raise the depth limit to where native recursion would exhaust the
/// thread's stack). The open tables and each one's last key live in two Lua tables, by
/// level: holding them in Rust would take one of mlua's reference slots each, which run out
/// near Lua's own stack limit, before the C library's nesting errors.
fn walk_deep(e: &mut Encoder, first: Frame, next: &Function) -> mlua::Result<()> {
    let lua = e.lua;
    let tables = lua.create_table()?;
    let keys = lua.create_table()?;
    let mut stack: Vec<Open> = Vec::new();
    let push = |stack: &mut Vec<Open>, f: Frame| -> mlua::Result<()> {
        tables.raw_set(stack.len() + 1, f.table)?;
        stack.push(Open {
            items: f.items,
            depth: f.depth,
            used: f.used,
        });
        Ok(())
    };
    push(&mut stack, first)?;
    while !stack.is_empty() {
        e.check_cap()?;
        let level = stack.len();
        let Some(top) = stack.last_mut() else { break };
        let (depth, used) = (top.depth, top.used);
        let table: Table = tables.raw_get(level)?;
        let child = match &mut top.items {
            Items::Array { len, i } => {
                if *i > *len {
                    e.out.push(b']');
                    stack.pop();
                    tables.raw_set(level, Value::Nil)?;
                    continue;
                }
                if *i > 1 {
                    e.out.push(b',');
                }
                let item: Value = table.raw_get(*i).map_err(|x| e.stack(x, depth))?;
                *i += 1;
                e.value(&item, depth, used + 1)?
            }
            Items::Object { started } => {
                let key: Value = keys.raw_get(level)?;
                let (k, v): (Value, Value) =
                    next.call((table, key)).map_err(|x| e.stack(x, depth))?;
                if k.is_nil() {
                    e.out.push(b'}');
                    stack.pop();
                    tables.raw_set(level, Value::Nil)?;
                    continue;
                }
                if *started {
                    e.out.push(b',');
                }
                *started = true;
                e.key(&k)?;
                keys.raw_set(level, k)?;
                e.value(&v, depth, used + 2)?
            }
        };
        if let Some(f) = child {
            keys.raw_set(stack.len() + 1, Value::Nil)?;
            push(&mut stack, f)?;
        }
    }
    Ok(())
}

/// A table met while encoding, to be walked.
struct Frame {
    table: Table,
    items: Items,
    depth: i32,
    used: usize,
}

/// A table being walked (the table itself is kept in Lua, see [`walk_deep`]).
struct Open {
    items: Items,
    depth: i32,
    /// Lua stack slots the C code holds while it walks this table.
    used: usize,
}

enum Items {
    /// The next index to write, up to `len`.
    Array { len: i64, i: i64 },
    /// Whether a key was written (the last one is kept in Lua).
    Object { started: bool },
}

struct Encoder<'a> {
    lua: &'a Lua,
    cfg: &'a Config,
    out: Vec<u8>,
    /// The largest output allowed ([`clib::output_cap`]).
    cap: usize,
}

impl Encoder<'_> {
    fn check_cap(&self) -> mlua::Result<()> {
        if self.out.len() > self.cap {
            return Err(clib::out_of_memory());
        }
        Ok(())
    }

    fn exception(&self, v: &Value, reason: &str) -> mlua::Error {
        clib::error(
            self.lua,
            format!("Cannot serialise {}: {reason}", type_name(Some(v))),
        )
    }

    /// `json_append_data` for one value: written when it is not a table; a table gets its
    /// opening bracket and is returned to be walked. `used` is how many Lua stack slots the C
    /// code holds at this point.
    fn value(&mut self, v: &Value, depth: i32, used: usize) -> mlua::Result<Option<Frame>> {
        match v {
            Value::String(s) => self.string(&s.as_bytes()),
            Value::Integer(_) | Value::Number(_) => {
                self.number(v)?;
            }
            Value::Boolean(true) => self.out.extend_from_slice(b"true"),
            Value::Boolean(false) => self.out.extend_from_slice(b"false"),
            Value::Nil => self.out.extend_from_slice(b"null"),
            Value::LightUserData(p) if p.0.is_null() => self.out.extend_from_slice(b"null"),
            Value::Table(t) => {
                let depth = depth + 1;
                if depth > self.cfg.encode_max_depth || used + 3 > MAXCSTACK {
                    return Err(clib::error(
                        self.lua,
                        format!("Cannot serialise, excessive nesting ({depth})"),
                    ));
                }
                let len = self.array_length(v, t).map_err(|x| self.stack(x, depth))?;
                let items = if len > 0 {
                    self.out.push(b'[');
                    Items::Array { len, i: 1 }
                } else {
                    self.out.push(b'{');
                    Items::Object { started: false }
                };
                return Ok(Some(Frame {
                    table: t.clone(),
                    items,
                    depth,
                    used,
                }));
            }
            other => return Err(self.exception(other, "type not supported")),
        }
        Ok(None)
    }

    /// An object key: `"number":` or `"string":`.
    fn key(&mut self, k: &Value) -> mlua::Result<()> {
        match k {
            Value::Integer(_) | Value::Number(_) => {
                self.out.push(b'"');
                self.number(k)?;
                self.out.extend_from_slice(b"\":");
            }
            Value::String(s) => {
                self.string(&s.as_bytes());
                self.out.push(b':');
            }
            other => {
                return Err(self.exception(other, "table key must be a number or string"));
            }
        }
        Ok(())
    }

    /// Running out of mlua's reference slots (only past Redis's own nesting limits, which a
    /// script can raise) ends as Redis's nesting error.
    fn stack(&self, e: mlua::Error, depth: i32) -> mlua::Error {
        match e {
            mlua::Error::StackError => clib::error(
                self.lua,
                format!("Cannot serialise, excessive nesting ({depth})"),
            ),
            e => e,
        }
    }

    /// `lua_array_length`: the largest key when every key is an integer ≥ 1 (and the table
    /// is not excessively sparse), else 0 or less: an object.
    fn array_length(&self, v: &Value, t: &Table) -> mlua::Result<i64> {
        let (mut max, mut items) = (0i32, 0i32);
        for pair in t.pairs::<Value, Value>() {
            let (k, _) = pair?;
            let Some(k) = clib::number(&k) else {
                return Ok(-1);
            };
            if k == 0.0 || k.floor() != k || k < 1.0 {
                return Ok(-1);
            }
            if k > max as f64 {
                max = clib::cast_i32(k);
            }
            items = items.wrapping_add(1);
        }
        let cfg = self.cfg;
        if cfg.sparse_ratio > 0
            && max > items.wrapping_mul(cfg.sparse_ratio)
            && max > cfg.sparse_safe
        {
            if cfg.sparse_convert == 0 {
                return Err(self.exception(v, "excessively sparse array"));
            }
            return Ok(-1);
        }
        Ok(max as i64)
    }

    fn number(&mut self, v: &Value) -> mlua::Result<()> {
        let n = clib::number(v).unwrap_or(0.0);
        match self.cfg.encode_invalid_numbers {
            0 if !n.is_finite() => return Err(self.exception(v, "must not be NaN or Inf")),
            1 if n.is_nan() => {
                self.out.extend_from_slice(b"nan");
                return Ok(());
            }
            0 | 1 => {}
            _ if !n.is_finite() => {
                self.out.extend_from_slice(b"null");
                return Ok(());
            }
            _ => {}
        }
        self.out
            .extend_from_slice(fmt_g(n, self.cfg.precision as usize).as_bytes());
        Ok(())
    }

    fn string(&mut self, s: &[u8]) {
        self.out.reserve(s.len() + 2);
        self.out.push(b'"');
        for &c in s {
            match c {
                b'"' => self.out.extend_from_slice(b"\\\""),
                b'\\' => self.out.extend_from_slice(b"\\\\"),
                b'/' => self.out.extend_from_slice(b"\\/"),
                8 => self.out.extend_from_slice(b"\\b"),
                9 => self.out.extend_from_slice(b"\\t"),
                10 => self.out.extend_from_slice(b"\\n"),
                12 => self.out.extend_from_slice(b"\\f"),
                13 => self.out.extend_from_slice(b"\\r"),
                0..=0x1f | 0x7f => {
                    self.out
                        .extend_from_slice(format!("\\u{:04x}", c).as_bytes());
                }
                c => self.out.push(c),
            }
        }
        self.out.push(b'"');
    }
}

// ---------------------------------------------------------------------------------------------
// Decoding
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    ObjBegin,
    ObjEnd,
    ArrBegin,
    ArrEnd,
    Str,
    Number,
    Boolean,
    Null,
    Colon,
    Comma,
    End,
    Error,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::ObjBegin => "T_OBJ_BEGIN",
            Kind::ObjEnd => "T_OBJ_END",
            Kind::ArrBegin => "T_ARR_BEGIN",
            Kind::ArrEnd => "T_ARR_END",
            Kind::Str => "T_STRING",
            Kind::Number => "T_NUMBER",
            Kind::Boolean => "T_BOOLEAN",
            Kind::Null => "T_NULL",
            Kind::Colon => "T_COLON",
            Kind::Comma => "T_COMMA",
            Kind::End => "T_END",
            Kind::Error => "T_ERROR",
        }
    }
}

struct Token {
    kind: Kind,
    index: usize,
    num: f64,
    boolean: bool,
    err: &'static str,
}

fn decode(lua: &Lua, cfg: &Config, args: &MultiValue) -> mlua::Result<Value> {
    if args.len() != 1 {
        return Err(arg_error(lua, 1, "expected 1 argument"));
    }
    let data = clib::check_lstring(lua, args, 1)?;
    if data.len() >= 2 && (data[0] == 0 || data[1] == 0) {
        return Err(clib::error(
            lua,
            "JSON parser does not support UTF-16 or UTF-32",
        ));
    }
    let mut d = Decoder {
        lua,
        cfg,
        s: clib::c_str(&data),
        pos: 0,
        depth: 0,
        tmp: Vec::new(),
    };
    let t = d.next_token();
    let v = d.parse(t)?;
    let t = d.next_token();
    if t.kind != Kind::End {
        return Err(d.parse_error("the end", &t));
    }
    Ok(v)
}

/// A table being decoded: the table (unless kept in Lua, past [`SHALLOW`] levels), an
/// object's key being read (`None` for an array), the next array index.
type OpenTable = (Option<Table>, Option<Vec<u8>>, i64);

struct Decoder<'a> {
    lua: &'a Lua,
    cfg: &'a Config,
    /// The JSON text up to its first NUL (the C parser's end).
    s: &'a [u8],
    pos: usize,
    depth: i32,
    /// The last string token's bytes.
    tmp: Vec<u8>,
}

impl Decoder<'_> {
    fn at(&self, i: usize) -> u8 {
        self.s.get(i).copied().unwrap_or(0)
    }

    fn token(&self, kind: Kind, index: usize) -> Token {
        Token {
            kind,
            index,
            num: 0.0,
            boolean: false,
            err: "",
        }
    }

    fn token_error(&self, err: &'static str) -> Token {
        Token {
            err,
            ..self.token(Kind::Error, self.pos)
        }
    }

    fn parse_error(&self, expected: &str, t: &Token) -> mlua::Error {
        let found = if t.kind == Kind::Error {
            t.err
        } else {
            t.kind.name()
        };
        clib::error(
            self.lua,
            format!(
                "Expected {expected} but found {found} at character {}",
                t.index + 1
            ),
        )
    }

    /// `json_next_token`.
    fn next_token(&mut self) -> Token {
        while matches!(self.at(self.pos), b' ' | b'\t' | b'\n' | b'\r') {
            self.pos += 1;
        }
        let index = self.pos;
        let ch = self.at(index);
        let single = match ch {
            b'{' => Some(Kind::ObjBegin),
            b'}' => Some(Kind::ObjEnd),
            b'[' => Some(Kind::ArrBegin),
            b']' => Some(Kind::ArrEnd),
            b',' => Some(Kind::Comma),
            b':' => Some(Kind::Colon),
            _ => None,
        };
        if let Some(kind) = single {
            self.pos += 1;
            return self.token(kind, index);
        }
        if ch == 0 {
            return self.token(Kind::End, index);
        }
        if !matches!(
            ch,
            b'f' | b'i' | b'I' | b'n' | b'N' | b't' | b'"' | b'+' | b'-'
        ) && !ch.is_ascii_digit()
        {
            return self.token_error("invalid token");
        }
        let rest = &self.s[index..];
        if ch == b'"' {
            return self.string_token();
        } else if ch == b'-' || ch.is_ascii_digit() {
            if self.cfg.decode_invalid_numbers == 0 && self.invalid_number() {
                return self.token_error("invalid number");
            }
            return self.number_token();
        } else if rest.starts_with(b"true") {
            self.pos += 4;
            return Token {
                boolean: true,
                ..self.token(Kind::Boolean, index)
            };
        } else if rest.starts_with(b"false") {
            self.pos += 5;
            return self.token(Kind::Boolean, index);
        } else if rest.starts_with(b"null") {
            self.pos += 4;
            return self.token(Kind::Null, index);
        } else if self.cfg.decode_invalid_numbers != 0 && self.invalid_number() {
            return self.number_token();
        }
        self.token_error("invalid token")
    }

    /// `json_is_invalid_number`: numbers strict JSON refuses (`+1`, hex, leading zeros,
    /// inf/nan).
    fn invalid_number(&self) -> bool {
        let mut p = self.pos;
        if self.at(p) == b'+' {
            return true;
        }
        if self.at(p) == b'-' {
            p += 1;
        }
        if self.at(p) == b'0' {
            let c = self.at(p + 1);
            return c | 0x20 == b'x' || c.is_ascii_digit();
        } else if self.at(p) <= b'9' {
            return false;
        }
        let rest = &self.s[p.min(self.s.len())..];
        let starts = |w: &[u8]| rest.len() >= 3 && rest[..3].eq_ignore_ascii_case(w);
        starts(b"inf") || starts(b"nan")
    }

    fn number_token(&mut self) -> Token {
        match clib::strtod(&self.s[self.pos..]) {
            Some((n, used)) => {
                let t = Token {
                    num: n,
                    ..self.token(Kind::Number, self.pos)
                };
                self.pos += used;
                t
            }
            None => self.token_error("invalid number"),
        }
    }

    fn string_token(&mut self) -> Token {
        let index = self.pos;
        self.pos += 1;
        self.tmp.clear();
        loop {
            let ch = self.at(self.pos);
            if ch == b'"' {
                break;
            }
            if ch == 0 {
                return self.token_error("unexpected end of string");
            }
            let mut out = ch;
            if ch == b'\\' {
                out = match self.at(self.pos + 1) {
                    b'"' => b'"',
                    b'\\' => b'\\',
                    b'/' => b'/',
                    b'b' => 8,
                    b't' => 9,
                    b'n' => 10,
                    b'f' => 12,
                    b'r' => 13,
                    b'u' => {
                        if self.unicode_escape() {
                            continue;
                        }
                        return self.token_error("invalid unicode escape code");
                    }
                    _ => return self.token_error("invalid escape code"),
                };
                self.pos += 1;
            }
            self.tmp.push(out);
            self.pos += 1;
        }
        self.pos += 1;
        self.token(Kind::Str, index)
    }

    fn hex4(&self, at: usize) -> Option<u32> {
        let mut v = 0;
        for i in 0..4 {
            v = v << 4 | (self.at(at + i) as char).to_digit(16)?;
        }
        Some(v)
    }

    /// `json_append_unicode_escape` at `\u`: appends the UTF-8 and moves past the escape (a
    /// surrogate pair takes two); false when it is not valid.
    fn unicode_escape(&mut self) -> bool {
        let Some(mut cp) = self.hex4(self.pos + 2) else {
            return false;
        };
        let mut len = 6;
        if cp & 0xF800 == 0xD800 {
            if cp & 0x400 != 0 {
                return false;
            }
            if self.at(self.pos + 6) != b'\\' || self.at(self.pos + 7) != b'u' {
                return false;
            }
            let Some(low) = self.hex4(self.pos + 8) else {
                return false;
            };
            if low & 0xFC00 != 0xDC00 {
                return false;
            }
            cp = (((cp & 0x3FF) << 10) | (low & 0x3FF)) + 0x10000;
            len = 12;
        }
        let mut buf = [0u8; 4];
        let n = if cp <= 0x7F {
            buf[0] = cp as u8;
            1
        } else if cp <= 0x7FF {
            buf[0] = (cp >> 6) as u8 | 0xC0;
            buf[1] = (cp & 0x3F) as u8 | 0x80;
            2
        } else if cp <= 0xFFFF {
            buf[0] = (cp >> 12) as u8 | 0xE0;
            buf[1] = ((cp >> 6) & 0x3F) as u8 | 0x80;
            buf[2] = (cp & 0x3F) as u8 | 0x80;
            3
        } else {
            buf[0] = (cp >> 18) as u8 | 0xF0;
            buf[1] = ((cp >> 12) & 0x3F) as u8 | 0x80;
            buf[2] = ((cp >> 6) & 0x3F) as u8 | 0x80;
            buf[3] = (cp & 0x3F) as u8 | 0x80;
            4
        };
        self.tmp.extend_from_slice(&buf[..n]);
        self.pos += len;
        true
    }

    /// `json_decode_descend`: one more level of nesting, when the depth limit and the Lua
    /// stack (`used` slots held, `slots` more needed) allow it.
    fn descend(&mut self, used: usize, slots: usize) -> mlua::Result<()> {
        self.depth += 1;
        if self.depth <= self.cfg.decode_max_depth && used + slots <= MAXCSTACK {
            return Ok(());
        }
        Err(self.nesting_error())
    }

    fn nesting_error(&self) -> mlua::Error {
        clib::error(
            self.lua,
            format!(
                "Found too many nested data structures ({}) at character {}",
                self.depth, self.pos
            ),
        )
    }

    fn stack(&self, e: mlua::Error) -> mlua::Error {
        match e {
            mlua::Error::StackError => self.nesting_error(),
            e => e,
        }
    }

    /// `json_process_value` with the nesting kept in a stack of open tables (see [`encode`]).
    fn parse(&mut self, first: Token) -> mlua::Result<Value> {
        // Open tables: for objects, the key of the value being read. `used` counts the Lua
        // stack slots the C parser holds (the argument, then a table, or a table and a key,
        // per level).
        // Past [`SHALLOW`] levels the tables themselves are kept in Lua, by level (see
        // [`walk_deep`]).
        let mut stack: Vec<OpenTable> = Vec::new();
        let tables = self.lua.create_table()?;
        let keep = |stack: &Vec<OpenTable>, table: Table| -> mlua::Result<Option<Table>> {
            if stack.len() < SHALLOW as usize {
                return Ok(Some(table));
            }
            tables.raw_set(stack.len() + 1, table)?;
            Ok(None)
        };
        let mut used = 1;
        let mut t = first;
        loop {
            let mut v = match t.kind {
                Kind::Str => Value::String(
                    self.lua
                        .create_string(&self.tmp)
                        .map_err(|e| self.stack(e))?,
                ),
                Kind::Number => Value::Number(t.num),
                Kind::Boolean => Value::Boolean(t.boolean),
                Kind::Null => Value::LightUserData(LightUserData(std::ptr::null_mut())),
                Kind::ObjBegin => {
                    self.descend(used, 3)?;
                    let table = self.lua.create_table().map_err(|e| self.stack(e))?;
                    t = self.next_token();
                    if t.kind == Kind::ObjEnd {
                        self.depth -= 1;
                        Value::Table(table)
                    } else {
                        let key = self.key(&t)?;
                        let kept = keep(&stack, table)?;
                        stack.push((kept, Some(key), 0));
                        used += 2;
                        t = self.next_token();
                        continue;
                    }
                }
                Kind::ArrBegin => {
                    self.descend(used, 2)?;
                    let table = self.lua.create_table().map_err(|e| self.stack(e))?;
                    t = self.next_token();
                    if t.kind == Kind::ArrEnd {
                        self.depth -= 1;
                        Value::Table(table)
                    } else {
                        let kept = keep(&stack, table)?;
                        stack.push((kept, None, 1));
                        used += 1;
                        continue;
                    }
                }
                _ => return Err(self.parse_error("value", &t)),
            };
            // `v` is complete: store it in its table, then read on.
            loop {
                let level = stack.len();
                let Some((kept, key, i)) = stack.last_mut() else {
                    return Ok(v);
                };
                let table: Table = match kept {
                    Some(t) => t.clone(),
                    None => tables.raw_get(level)?,
                };
                match key {
                    None => {
                        table.raw_set(*i, v).map_err(|e| self.stack(e))?;
                        *i += 1;
                    }
                    Some(k) => {
                        let k = self.lua.create_string(&*k).map_err(|e| self.stack(e))?;
                        table.raw_set(k, v).map_err(|e| self.stack(e))?;
                    }
                }
                let object = key.is_some();
                t = self.next_token();
                let end = if object { Kind::ObjEnd } else { Kind::ArrEnd };
                if t.kind == end {
                    self.depth -= 1;
                    used -= if object { 2 } else { 1 };
                    if stack.pop().is_some_and(|f| f.0.is_none()) {
                        tables.raw_set(level, Value::Nil)?;
                    }
                    v = Value::Table(table);
                    continue;
                }
                if t.kind != Kind::Comma {
                    let expected = if object {
                        "comma or object end"
                    } else {
                        "comma or array end"
                    };
                    return Err(self.parse_error(expected, &t));
                }
                t = self.next_token();
                if object {
                    let k = self.key(&t)?;
                    if let Some((_, key, _)) = stack.last_mut() {
                        *key = Some(k);
                    }
                    t = self.next_token();
                }
                break;
            }
        }
    }

    /// An object's key token and the colon after it: the key's bytes.
    fn key(&mut self, t: &Token) -> mlua::Result<Vec<u8>> {
        if t.kind != Kind::Str {
            return Err(self.parse_error("object key string", t));
        }
        let key = std::mem::take(&mut self.tmp);
        let colon = self.next_token();
        if colon.kind != Kind::Colon {
            return Err(self.parse_error("colon", &colon));
        }
        Ok(key)
    }
}
