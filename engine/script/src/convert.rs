//! Conversions between RESP replies and Lua values, as Redis 7.0 does them
//! (`redisProtocolToLuaType_*` and `luaReplyToRedisReply` in `script_lua.c`).
//!
//! RESP → Lua (a command's reply, in the script's protocol, `redis.setresp`; done as the reply
//! is read, by `fastcall.rs`):
//!
//! | reply | Lua |
//! |---|---|
//! | integer | number |
//! | bulk string | string |
//! | RESP2 null bulk / null array | `false` |
//! | RESP3 null | `nil` |
//! | simple string | `{ok = s}` |
//! | error | `{err = "CODE msg"}` (and `ignore_error_stats_update = true`) |
//! | array / push | table `{1 = …, 2 = …}` |
//! | map | `{map = {k = v}}` |
//! | set | `{set = {m = true}}` |
//! | boolean | boolean |
//! | double | `{double = n}` |
//! | big number | `{big_number = "digits"}` |
//! | verbatim | `{verbatim_string = {format = "txt", string = s}}` |
//! | attribute | the value it annotates |
//!
//! Lua → RESP (the script's return value, in the caller's protocol): string → bulk; number →
//! integer (truncated); boolean → RESP2 script: `:1` / null, RESP3 script: boolean; a table
//! with a string `err` → error, `ok` → status, number `double` → double, string `big_number`,
//! `verbatim_string`, table `map` / `set` → those shapes; any other table → array of its
//! elements `1, 2, …` up to the first `nil`; anything else → null. Nesting deeper than
//! [`MAX_DEPTH`] (a table that contains itself) gives `-ERR reached lua stack limit` in place.

use mlua::{Lua, Table, Value};
use resp::{Proto, ReplyWriter};

/// Deepest table nesting converted into a reply.
pub const MAX_DEPTH: usize = 1000;

/// redis `luaPushErrorBuff`'s parts: `-CODE msg` keeps its code, a message without `-` or
/// without a code gets `ERR`; CR/LF around the message are trimmed. The text is
/// `code + " " + msg`.
pub fn error_parts(buf: &[u8]) -> (&[u8], &[u8]) {
    let (code, msg): (&[u8], &[u8]) = match buf.strip_prefix(b"-") {
        Some(rest) => match rest.iter().position(|&b| b == b' ') {
            Some(sp) => (&rest[..sp], &rest[sp + 1..]),
            None => (b"ERR", rest),
        },
        None => (b"ERR", buf),
    };
    let kept = |b: &u8| *b != b'\r' && *b != b'\n';
    let msg = match (msg.iter().position(kept), msg.iter().rposition(kept)) {
        (Some(a), Some(z)) => &msg[a..=z],
        _ => &b""[..],
    };
    (code, msg)
}

/// [`error_parts`] joined: the error text Redis gives a script.
pub fn error_text(buf: &[u8]) -> Vec<u8> {
    let (code, msg) = error_parts(buf);
    let mut out = Vec::with_capacity(code.len() + 1 + msg.len());
    out.extend_from_slice(code);
    out.push(b' ');
    out.extend_from_slice(msg);
    out
}

/// An error table `{err = text}` (plus `ignore_error_stats_update`, as Redis marks errors a
/// command already counted).
pub fn error_table(lua: &Lua, text: &[u8], counted: bool) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.raw_set("err", lua.create_string(text)?)?;
    if counted {
        t.raw_set("ignore_error_stats_update", true)?;
    }
    Ok(t)
}

/// The script's return value → a reply in `caller` protocol; `script` is the protocol the
/// script chose (it decides how booleans are sent).
pub fn lua_to_reply(v: &Value, caller: Proto, script: Proto, out: &mut Vec<u8>) {
    write_value(v, caller, script, out, 0);
}

/// An error reply `-text` with CR/LF made spaces (redis `addReplyErrorFormat`).
pub fn write_error(out: &mut Vec<u8>, text: &[u8]) {
    out.push(b'-');
    out.extend(
        text.iter()
            .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
    );
    out.extend_from_slice(b"\r\n");
}

fn bytes_of(v: &Value) -> Option<Vec<u8>> {
    match v {
        Value::String(s) => Some(s.as_bytes().to_vec()),
        // mlua's view of an integral number: still a double to Lua 5.1 (`%.14g`).
        Value::Integer(n) => Some(lua_number_text(*n as f64).into_bytes()),
        Value::Number(n) => Some(lua_number_text(*n).into_bytes()),
        _ => None,
    }
}

/// Lua 5.1's `%.14g` text of a number (what `lua_tostring` gives).
pub fn lua_number_text(n: f64) -> String {
    crate::clib::fmt_g(n, 14)
}

fn write_value(v: &Value, caller: Proto, script: Proto, out: &mut Vec<u8>, depth: usize) {
    let mut w = ReplyWriter::new(out, caller);
    match v {
        Value::String(s) => w.bulk(&s.as_bytes()),
        Value::Boolean(b) => {
            if script == Proto::Resp2 {
                if *b {
                    w.integer(1);
                } else {
                    w.null();
                }
            } else {
                w.boolean(*b);
            }
        }
        Value::Integer(n) => w.integer(*n),
        Value::Number(n) => w.integer(c_cast(*n)),
        Value::Table(t) => {
            if depth >= MAX_DEPTH {
                write_error(out, b"ERR reached lua stack limit");
                return;
            }
            write_table(t, caller, script, out, depth);
        }
        _ => w.null(),
    }
}

/// C's `(long long)` of a double, saturating where C is undefined.
/// `(long long)n` as on x86-64: NaN and out-of-range values give `i64::MIN`.
fn c_cast(n: f64) -> i64 {
    crate::clib::cast_i64(n)
}

fn write_table(t: &Table, caller: Proto, script: Proto, out: &mut Vec<u8>, depth: usize) {
    let get = |k: &str| t.raw_get::<Value>(k).unwrap_or(Value::Nil);
    if let Value::String(e) = get("err") {
        write_error(out, &e.as_bytes());
        return;
    }
    if let Value::String(s) = get("ok") {
        let s: Vec<u8> = s
            .as_bytes()
            .iter()
            .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b })
            .collect();
        ReplyWriter::new(out, caller).simple(&s);
        return;
    }
    match get("double") {
        Value::Number(d) => {
            let mut text = Vec::new();
            engine_core::types::zset::score::fmt_reply(d, &mut text);
            ReplyWriter::new(out, caller).double_text(&text);
            return;
        }
        Value::Integer(n) => {
            ReplyWriter::new(out, caller).double_text(n.to_string().as_bytes());
            return;
        }
        _ => {}
    }
    if let Value::String(s) = get("big_number") {
        let s: Vec<u8> = s
            .as_bytes()
            .iter()
            .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b })
            .collect();
        match caller {
            Proto::Resp2 => ReplyWriter::new(out, caller).bulk(&s),
            Proto::Resp3 => {
                out.push(b'(');
                out.extend_from_slice(&s);
                out.extend_from_slice(b"\r\n");
            }
        }
        return;
    }
    if let Value::Table(vt) = get("verbatim_string")
        && let (Ok(Value::String(f)), Ok(Value::String(s))) =
            (vt.raw_get::<Value>("format"), vt.raw_get::<Value>("string"))
    {
        let s = s.as_bytes();
        match caller {
            Proto::Resp2 => ReplyWriter::new(out, caller).bulk(&s),
            Proto::Resp3 => {
                let f = f.as_bytes();
                let mut fmt = [b' '; 3];
                for (d, b) in fmt.iter_mut().zip(f.iter()) {
                    *d = *b;
                }
                out.push(b'=');
                out.extend_from_slice((s.len() + 4).to_string().as_bytes());
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(&fmt);
                out.push(b':');
                out.extend_from_slice(&s);
                out.extend_from_slice(b"\r\n");
            }
        }
        return;
    }
    // Counted first, then written as they are read: holding the items would take one of
    // mlua's reference slots each, and those run out near 8000 (replies were cut there).
    if let Value::Table(m) = get("map") {
        ReplyWriter::new(out, caller).map(m.pairs::<Value, Value>().filter(Result::is_ok).count());
        for (k, v) in m.pairs::<Value, Value>().filter_map(Result::ok) {
            write_value(&k, caller, script, out, depth + 1);
            write_value(&v, caller, script, out, depth + 1);
        }
        return;
    }
    if let Value::Table(s) = get("set") {
        ReplyWriter::new(out, caller).set(s.pairs::<Value, Value>().filter(Result::is_ok).count());
        for (k, _) in s.pairs::<Value, Value>().filter_map(Result::ok) {
            write_value(&k, caller, script, out, depth + 1);
        }
        return;
    }
    let item = |i: usize| t.raw_get::<Value>(i).unwrap_or(Value::Nil);
    let len = (1..).take_while(|&i| !item(i).is_nil()).count();
    ReplyWriter::new(out, caller).array(len);
    for i in 1..=len {
        write_value(&item(i), caller, script, out, depth + 1);
    }
}

/// A number argument as Redis's `luaArgsToRedisArgv` writes it: `%.17g` (an integral value
/// below 1e17 prints its digits, as `%.17g` does).
pub fn arg_number(n: f64, out: &mut Vec<u8>) {
    if n.fract() == 0.0 && n.abs() < 1e17 && n != 0.0 {
        out.extend_from_slice(itoa::Buffer::new().format(n as i64).as_bytes());
    } else if n.is_nan() {
        out.extend_from_slice(if n.is_sign_negative() {
            b"-nan"
        } else {
            b"nan"
        });
    } else {
        engine_core::types::zset::score::fmt_reply(n, out);
    }
}

/// A `redis.call`-style argument (`redis.acl_check_cmd`, `redis.sha1hex`): strings as they
/// are, numbers as [`arg_number`]; anything else is refused.
pub fn arg_bytes(v: &Value) -> Option<Vec<u8>> {
    match v {
        Value::String(s) => Some(s.as_bytes().to_vec()),
        // mlua gives an integral Lua number as Integer: the same number to Redis.
        Value::Integer(n) => {
            let mut out = Vec::new();
            arg_number(*n as f64, &mut out);
            Some(out)
        }
        Value::Number(n) => {
            let mut out = Vec::new();
            arg_number(*n, &mut out);
            Some(out)
        }
        _ => None,
    }
}

/// `lua_tolstring` of a value for `redis.sha1hex`: strings and numbers, else nothing.
pub fn tolstring(v: &Value) -> Vec<u8> {
    bytes_of(v).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_texts() {
        assert_eq!(error_text(b"-My Error"), b"My Error");
        assert_eq!(error_text(b"-FOO"), b"ERR FOO");
        assert_eq!(error_text(b"plain words"), b"ERR plain words");
        assert_eq!(
            error_text(b"-OOM command not allowed\r\n"),
            b"OOM command not allowed"
        );
    }

    #[test]
    fn number_texts() {
        assert_eq!(lua_number_text(3.0), "3");
        assert_eq!(lua_number_text(0.1), "0.1");
        assert_eq!(lua_number_text(1e20), "1e+20");
        assert_eq!(lua_number_text(1.0 / 3.0), "0.33333333333333");
        assert_eq!(lua_number_text(123456789012345.0), "1.2345678901234e+14");
        assert_eq!(lua_number_text(-0.0), "-0");
    }
}
