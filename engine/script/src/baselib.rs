//! Functions of Lua's base library that Redis patched in its copy of Lua 5.1 (deps/lua) and
//! the stock 5.1.5 that `mlua` vendors does not: installed over the stock ones before the
//! sandbox protects the globals.
//!
//! - `unpack(t [, i [, j]])`: stock 5.1.5 computes the count `j - i + 1` in signed `int`, which
//!   overflows for ranges such as `unpack({}, -2, 2^31-1)` and crashes the process. Redis's
//!   `luaB_unpack` computes it unsigned and refuses more than the C stack allows with
//!   `too many results to unpack` (tests/unit/scripting.tcl "Test table unpack with invalid
//!   indexes").

use mlua::{Lua, MultiValue, Table, Value};

use crate::clib;

/// Lua 5.1's `LUAI_MAXCSTACK`: `lua_checkstack` refuses a frame that would hold more.
const MAX_C_STACK: u64 = 8000;

/// Replaces the globals above in `lua`; errors are `luaL_error`'s and `luaL_argerror`'s
/// (`crate::clib`).
pub fn install(lua: &Lua) -> mlua::Result<()> {
    lua.globals()
        .raw_set("unpack", lua.create_function(unpack)?)
}

/// `luaL_optint`: `def` when absent or nil, else the number truncated to `int`.
fn opt_int(lua: &Lua, args: &MultiValue, narg: usize, def: i32) -> mlua::Result<i32> {
    clib::opt_integer(lua, args, narg, i64::from(def)).map(|n| n as i32)
}

fn unpack(lua: &Lua, args: MultiValue) -> mlua::Result<MultiValue> {
    let t: Table = match args.front() {
        Some(Value::Table(t)) => t.clone(),
        _ => return Err(clib::type_error(lua, &args, 1, "table")),
    };
    let i = opt_int(lua, &args, 2, 1)?;
    let e = match args.get(2) {
        None | Some(Value::Nil) => t.raw_len() as i32,
        _ => clib::check_integer(lua, &args, 3)? as i32,
    };
    if i > e {
        return Ok(MultiValue::new());
    }
    // Elements minus one, unsigned as in Redis's patch; the frame also holds the arguments.
    let n = u64::from((e as u32).wrapping_sub(i as u32));
    if n >= i32::MAX as u64 || n + 1 + args.len() as u64 > MAX_C_STACK {
        return Err(clib::error(lua, "too many results to unpack"));
    }
    let mut out = MultiValue::with_capacity(n as usize + 1);
    for k in i64::from(i)..=i64::from(e) {
        out.push_back(t.raw_get::<Value>(k)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(src: &str) -> mlua::Result<Vec<Value>> {
        let lua = Lua::new();
        install(&lua).unwrap();
        Ok(lua.load(src).eval::<MultiValue>()?.into_iter().collect())
    }

    #[test]
    fn huge_ranges_are_errors_not_crashes() {
        for src in [
            "return unpack({1,2,3}, -2, 2147483647)",
            "return unpack({1,2,3}, 0, 2147483647)",
            "return unpack({1,2,3}, -2147483648, -2)",
            "return unpack({}, 1, 8000)",
        ] {
            let err = eval(src).unwrap_err().to_string();
            assert!(err.contains("too many results to unpack"), "{src}: {err}");
        }
    }

    #[test]
    fn ranges_give_nils_outside_the_array() {
        assert!(eval("return unpack({1,2,3}, -1, -2)").unwrap().is_empty());
        let v = eval("return select('#', unpack({1,2,3}, -1, 5))").unwrap();
        assert_eq!(v[0].as_integer(), Some(7));
        let v = eval("return unpack({1,2,3})").unwrap();
        assert_eq!(v.len(), 3);
        let v = eval("return unpack({1,2,3}, '2')").unwrap();
        assert_eq!(v[0].as_integer(), Some(2));
        assert!(
            eval("return unpack(1)")
                .unwrap_err()
                .to_string()
                .contains("table expected")
        );
    }
}
