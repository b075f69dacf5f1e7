//! `redis.call` / `redis.pcall` with as many arguments as Redis takes.
//!
//! Lua 5.1 lets a C function's frame hold at most `LUAI_MAXCSTACK` (8,000) slots, and
//! `lua_checkstack` fails once the arguments alone fill it. Redis's `luaRedisGenericCommand`
//! copies its arguments into `argv` and pops them before it needs any stack, so
//! `redis.call("lpush", "l", unpack(a))` with 7,999 elements works there
//! (tests/unit/scripting.tcl, "Script check unpack with massive arguments"). mlua's callbacks
//! check the stack first, and fail with such an argument count. So `redis.call` is this C
//! function: up to [`DIRECT_MAX`] arguments it calls the mlua function with them as they are;
//! beyond, it packs them into one table (popping them) and calls the packed variant, which
//! reads the table.
//!
//! The two mlua functions are the C closure's upvalues. Errors the callee raises go through
//! this frame (`longjmp`), which holds nothing with a destructor. The error handler skips C
//! frames, so error positions still name the script's line.

use std::ffi::c_int;

use mlua::{Function, Lua, ffi};

/// Most arguments passed through unpacked (mlua's own stack checks fit well under the limit).
pub const DIRECT_MAX: c_int = 1000;

/// Returns `(redis.call, redis.pcall)`: C closures over their mlua functions (upvalue 1: the
/// function taking the arguments as they are; 2: the one taking them packed in a table).
pub fn install(
    lua: &Lua,
    call: Function,
    call_packed: Function,
    pcall: Function,
    pcall_packed: Function,
) -> mlua::Result<(Function, Function)> {
    let closure = |direct: Function, packed: Function| -> mlua::Result<Function> {
        // SAFETY: `exec_raw` pushes the two functions and gives the state; `lua_pushcclosure`
        // pops them as the closure's upvalues and pushes the closure, which is returned.
        // `forward` follows the Lua C API contract (see there).
        unsafe {
            lua.exec_raw((direct, packed), |l| {
                ffi::lua_pushcclosure(l, forward, 2);
            })
        }
    };
    Ok((closure(call, call_packed)?, closure(pcall, pcall_packed)?))
}

/// Calls upvalue 1 with this frame's arguments, or upvalue 2 with them in one table (1..n, and
/// `n`) when there are more than [`DIRECT_MAX`]; returns what it returned.
///
/// SAFETY (for the C API): Lua calls a C function with at least `LUA_MINSTACK` (20) free
/// slots above its arguments. This pushes at most two values above them (the table and one
/// element being stored, or the callee), then calls with `lua_call`, which consumes the
/// callee and its arguments and leaves the results. Errors `longjmp` out of this frame, which
/// holds only integers.
unsafe extern "C-unwind" fn forward(l: *mut ffi::lua_State) -> c_int {
    unsafe {
        let n = ffi::lua_gettop(l);
        if n <= DIRECT_MAX {
            ffi::lua_pushvalue(l, ffi::lua_upvalueindex(1));
            ffi::lua_insert(l, 1);
            ffi::lua_call(l, n, ffi::LUA_MULTRET);
        } else {
            ffi::lua_createtable(l, n, 0);
            for i in 1..=n {
                ffi::lua_pushvalue(l, i);
                ffi::lua_rawseti_(l, n + 1, i);
            }
            // The count, as arguments may be nil (`t.n`, as `table.pack` gives it).
            ffi::lua_pushinteger(l, n as ffi::lua_Integer);
            ffi::lua_setfield(l, n + 1, c"n".as_ptr());
            ffi::lua_replace(l, 1);
            ffi::lua_settop(l, 1);
            ffi::lua_pushvalue(l, ffi::lua_upvalueindex(2));
            ffi::lua_insert(l, 1);
            ffi::lua_call(l, 1, ffi::LUA_MULTRET);
        }
        ffi::lua_gettop(l)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mlua::{MultiValue, Table, Value};

    /// Both paths see the arguments in order; an error raised by the callee reaches the
    /// caller with its message.
    #[test]
    fn forwards_few_and_many_arguments() {
        let lua = Lua::new();
        let count = |_: &Lua, args: MultiValue| {
            let last = args.iter().last().cloned().unwrap_or(Value::Nil);
            Ok((args.len() as i64, last))
        };
        let count_packed = |_: &Lua, t: Table| {
            let n: i64 = t.raw_get("n")?;
            let last: Value = t.raw_get(n)?;
            Ok((n, last))
        };
        let fail =
            |_: &Lua, _: MultiValue| -> mlua::Result<()> { Err(mlua::Error::runtime("boom")) };
        let (call, pcall) = install(
            &lua,
            lua.create_function(count).unwrap(),
            lua.create_function(count_packed).unwrap(),
            lua.create_function(fail).unwrap(),
            lua.create_function(fail).unwrap(),
        )
        .unwrap();
        lua.globals().set("c", call).unwrap();
        lua.globals().set("p", pcall).unwrap();
        let (n, last): (i64, String) = lua.load("return c('a', 'b', 'z')").eval().unwrap();
        assert_eq!((n, last.as_str()), (3, "z"));
        let (n, last): (i64, i64) = lua
            .load("local a = {} for i = 1, 7999 do a[i] = i end return c('lpush', 'l', unpack(a))")
            .eval()
            .unwrap();
        assert_eq!((n, last), (8001, 7999));
        let err = lua.load("return p(1)").exec().unwrap_err().to_string();
        assert!(err.contains("boom"), "{err}");
        let err = lua
            .load("local a = {} for i = 1, 2000 do a[i] = i end return p(unpack(a))")
            .exec()
            .unwrap_err()
            .to_string();
        assert!(err.contains("boom"), "{err}");
    }
}
