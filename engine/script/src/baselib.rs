//! Lua's `unpack` as Redis patches it in its copy of Lua 5.1 (deps/lua/src/lbaselib.c,
//! `luaB_unpack`), installed over the stock one before the sandbox protects the globals.
//!
//! Stock 5.1.5 computes the count `e - i + 1` in signed `int`, which overflows for ranges such
//! as `unpack({}, -2, 2^31-1)` and crashes the process. Redis computes it unsigned and refuses
//! INT_MAX elements or more, or more than `lua_checkstack` grants, with `too many results to
//! unpack`. This is that function, line for line, on Lua's C API: a C function, so argument
//! errors name the caller's line even after `return unpack(x)` (a tail call keeps the calling
//! frame for C functions, not for Lua ones), and the stack it uses is exactly Redis's (7,999
//! values from one table argument fit; tests/unit/scripting.tcl).

use std::ffi::{c_int, c_uint};

use mlua::{Lua, ffi};

/// Replaces `unpack` in `lua`'s globals.
pub fn install(lua: &Lua) -> mlua::Result<()> {
    // SAFETY: `unpack` is a `lua_CFunction` that follows the Lua C API contract below.
    let f = unsafe { lua.create_c_function(unpack)? };
    lua.globals().raw_set("unpack", f)
}

/// `luaB_unpack` with Redis's patch.
///
/// SAFETY (for the C API): Lua calls this with its own state and the arguments on the stack; it
/// only reads arguments 1–3 through the checking functions, and pushes at most `n` values after
/// `lua_checkstack(l, n)` succeeded. The `luaL_*` errors `longjmp` out of this frame, which holds
/// nothing with a destructor (integers only), so no Rust value is skipped.
unsafe extern "C-unwind" fn unpack(l: *mut ffi::lua_State) -> c_int {
    unsafe {
        ffi::luaL_checktype(l, 1, ffi::LUA_TTABLE);
        let mut i = ffi::luaL_optinteger(l, 2, 1) as c_int;
        let e = if ffi::lua_isnoneornil(l, 3) != 0 {
            ffi::lua_objlen(l, 1) as c_int
        } else {
            ffi::luaL_checkinteger(l, 3) as c_int
        };
        if i > e {
            return 0; // empty range
        }
        let n = (e as c_uint).wrapping_sub(i as c_uint); // elements minus 1
        if n >= c_int::MAX as c_uint || ffi::lua_checkstack(l, (n + 1) as c_int) == 0 {
            return ffi::luaL_error(l, c"too many results to unpack".as_ptr());
        }
        ffi::lua_rawgeti_(l, 1, i);
        while i < e {
            i += 1;
            ffi::lua_rawgeti_(l, 1, i);
        }
        (n + 1) as c_int
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mlua::{MultiValue, Value};

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
        let v = eval("local a = {} for i = 1, 7999 do a[i] = 1 end return select('#', unpack(a))")
            .unwrap();
        assert_eq!(v[0].as_integer(), Some(7999));
        assert!(
            eval("return unpack(1)")
                .unwrap_err()
                .to_string()
                .contains("bad argument #1 to 'unpack' (table expected, got number)")
        );
    }
}
