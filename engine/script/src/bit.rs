//! The `bit` library Redis embeds (LuaBitOp 1.0): 32-bit operations on Lua numbers.

use mlua::{Lua, MultiValue, Table, Value};

/// LuaBitOp's `barg`: a number (or a numeric string), wrapped to a signed 32-bit integer; an
/// error is the argument's number and what it was instead (`luaL_typerror`).
fn arg(args: &MultiValue, i: usize) -> Result<i32, Bad> {
    let v = args.get(i).unwrap_or(&Value::Nil);
    let n = match v {
        Value::Integer(n) => *n as f64,
        Value::Number(n) => *n,
        Value::String(s) => std::str::from_utf8(&s.as_bytes())
            .ok()
            .and_then(|t| t.trim().parse::<f64>().ok())
            .ok_or(Bad::Arg(i, "string"))?,
        _ => return Err(Bad::Arg(i, crate::clib::type_name(args.get(i)))),
    };
    Ok(tobit(n))
}

/// A bad argument: its index (from 0) and the type it had; or an error of Lua's own.
enum Bad {
    Arg(usize, &'static str),
    Lua(mlua::Error),
}

/// A library function; an argument error is raised as `luaL_argerror` does: the caller's
/// `source:line:` first, and the function named as the caller called it (`?` through pcall).
fn wrap<F>(lua: &Lua, f: F) -> mlua::Result<mlua::Function>
where
    F: Fn(&Lua, &MultiValue) -> Result<Value, Bad> + 'static,
{
    lua.create_function(move |lua, args: MultiValue| match f(lua, &args) {
        Ok(v) => Ok(v),
        Err(Bad::Lua(e)) => Err(e),
        Err(Bad::Arg(i, got)) => Err(crate::clib::arg_error(
            lua,
            i as i32 + 1,
            format!("number expected, got {got}"),
        )),
    })
}

/// Rounds to the nearest integer (ties to even, as LuaBitOp's 2^52+2^51 addition) and keeps
/// the low 32 bits.
pub fn tobit(n: f64) -> i32 {
    if !n.is_finite() {
        return 0;
    }
    let r = n.round_ties_even().rem_euclid(4_294_967_296.0);
    r as u64 as u32 as i32
}

/// The `bit` table.
pub fn table(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    macro_rules! unary {
        ($name:literal, $f:expr) => {
            t.raw_set(
                $name,
                wrap(lua, |_, args| {
                    let x = arg(args, 0)?;
                    let f: fn(i32) -> i32 = $f;
                    Ok(Value::Number(f(x) as f64))
                })?,
            )?;
        };
    }
    macro_rules! fold {
        ($name:literal, $f:expr) => {
            t.raw_set(
                $name,
                wrap(lua, |_, args| {
                    let mut acc = arg(args, 0)?;
                    let f: fn(i32, i32) -> i32 = $f;
                    for i in 1..args.len() {
                        acc = f(acc, arg(args, i)?);
                    }
                    Ok(Value::Number(acc as f64))
                })?,
            )?;
        };
    }
    macro_rules! shift {
        ($name:literal, $f:expr) => {
            t.raw_set(
                $name,
                wrap(lua, |_, args| {
                    let x = arg(args, 0)?;
                    let n = (arg(args, 1)? & 31) as u32;
                    let f: fn(i32, u32) -> i32 = $f;
                    Ok(Value::Number(f(x, n) as f64))
                })?,
            )?;
        };
    }
    unary!("tobit", |x| x);
    unary!("bnot", |x| !x);
    unary!("bswap", |x| x.swap_bytes());
    fold!("band", |a, b| a & b);
    fold!("bor", |a, b| a | b);
    fold!("bxor", |a, b| a ^ b);
    shift!("lshift", |x, n| ((x as u32) << n) as i32);
    shift!("rshift", |x, n| ((x as u32) >> n) as i32);
    shift!("arshift", |x, n| x >> n);
    shift!("rol", |x, n| (x as u32).rotate_left(n) as i32);
    shift!("ror", |x, n| (x as u32).rotate_right(n) as i32);
    t.raw_set(
        "tohex",
        wrap(lua, |lua, args| {
            let x = arg(args, 0)?;
            let n = if args.len() > 1 && !args[1].is_nil() {
                arg(args, 1)?
            } else {
                8
            };
            // INT32_MIN has no positive counterpart (redis CVE-2024-31449: LuaBitOp's `-n`
            // overflowed); it counts as INT32_MIN + 1, as in Redis's patched bit.c.
            let (upper, n) = if n < 0 {
                (true, n.saturating_neg())
            } else {
                (false, n)
            };
            let n = n.min(8) as usize;
            let text = if n == 0 {
                String::new()
            } else {
                let v = (x as u32) as u64 & ((1u64 << (4 * n)) - 1);
                if upper {
                    format!("{v:0n$X}")
                } else {
                    format!("{v:0n$x}")
                }
            };
            // The state is the callback's argument: a `Lua` captured here would keep the
            // state alive forever (a cycle through its own registry).
            lua.create_string(text).map(Value::String).map_err(Bad::Lua)
        })?,
    )?;
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn luabitop_examples() {
        let lua = Lua::new();
        lua.globals().set("bit", table(&lua).unwrap()).unwrap();
        let check = |expr: &str, want: &str| {
            let got: String = lua.load(format!("return tostring({expr})")).eval().unwrap();
            assert_eq!(got, want, "{expr}");
        };
        check("bit.tobit(0xffffffff)", "-1");
        check("bit.tobit(0xffffffff + 1)", "0");
        check("bit.tobit(2^40 + 1234)", "1234");
        check("bit.bnot(0)", "-1");
        check("bit.bor(1, 2, 4, 8)", "15");
        check("bit.band(0x12345678, 0xff)", "120");
        check("bit.bxor(0xa5a5f0f0, 0xaa55ff00)", "267390960");
        check("bit.lshift(1, 0)", "1");
        check("bit.lshift(1, 8)", "256");
        check("bit.lshift(1, 40)", "256");
        check("bit.rshift(256, 8)", "1");
        check("bit.rshift(-256, 8)", "16777215");
        check("bit.arshift(-256, 8)", "-1");
        check("bit.lshift(0x87654321, 12)", "1412567040");
        check("bit.rol(0x12345678, 12)", "1164411171");
        check("bit.ror(0x12345678, 12)", "1736516421");
        check("bit.bswap(0x12345678)", "2018915346");
        check("bit.tohex(1)", "00000001");
        check("bit.tohex(-1)", "ffffffff");
        check("bit.tohex(0xffffffff)", "ffffffff");
        check("bit.tohex(-1, -8)", "FFFFFFFF");
        check("bit.tohex(0x21, 4)", "0021");
        check("bit.tohex(1, 0)", "");
        check("bit.tohex(1, 20)", "00000001");
        check("bit.tobit(1.5)", "2");
        check("bit.tobit(2.5)", "2");
        check("bit.tohex(0x87654321, 4)", "4321");
    }
}
